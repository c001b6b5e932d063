"""A model of the kernel's ucma command set, and a hypothesis state machine that fuzzes
the real kernel with it (issue #14).

Theory of operation
-------------------
The model keeps, for every id this process created, the set of *worlds* the kernel may
be in for it: a :class:`World` is the id's ``rdma_cm_state`` (as :class:`pyrdmacm.state.State`),
whether it is attached to an RDMA device (netlink lists it then), the IB CM's side of it,
how it is bound (family, wildcard or local, port), its options, the asynchronous work in
flight (an address or route query, a connection request, a multicast join: each a set of
possible outcomes, any of which may happen at any time, or never), and the events the
kernel generated for it that nobody has read yet.  A command is answered, per world, by
:func:`outcomes`: the errnos the kernel may answer there and the world after each,
written after the handlers of ucma.c and cma.c (each check names the function that makes
it, in the kernel's order: e.g. RESOLVE_ADDR's size checks come before the id look-up, so
a malformed one on an unknown id is EINVAL, not ENOENT).  The errno the kernel answered
keeps the worlds that allow it; none left is a *disagreement*.  An event read with
GET_EVENT must be the head of some world's queue (or the outcome of work in flight); an
EAGAIN says no world of that fd's ids has an event queued.

:class:`UcmaMachine` (a hypothesis ``RuleBasedStateMachine``) draws the commands, valid
and malformed, with field values from the ABI declarations' edges (0, the field's
maximum, sizes of the struct ±1), on up to two channels (fds), and after every step checks:
the errno is one the model allows; every id's netlink state (``RDMA_NLDEV_CMD_RES_CM_ID_GET``,
this pid) is one of its worlds' kernel states (:func:`kernel_state`); the fd still creates
and destroys an id; the kernel log has no new BUG/WARNING/refcount/KASAN/Oops line.  At
the end every channel is closed and no cm_id of this process may be left.

The state rules -- which command the kernel takes in which ``rdma_cm_state``, the errno
otherwise -- are not written here: :func:`refused` asks :mod:`pyrdmacm.kernel_rules`, the
table the fakes and the conformance cases share, with a world's kernel state
(:func:`kernel_state`: the library's :class:`~pyrdmacm.state.State` of the world, which tells
the steps of a connection apart, as the kernel's :class:`~pyrdmacm.abi.RdmaCmState`).  What is
left here is what the table leaves to others: the IB CM's answers, the addresses, the ports.

Where the kernels differ, the difference is data with the kernel version
(:data:`DIFFERENCES`, and the table's rules' versions).  A failure carries a runnable reproducer: a Python script of
:class:`pyrdmacm.conformance.Raw` calls, built from the steps as they ran
(:attr:`UcmaMachine.script`).
"""

from __future__ import annotations

import collections
import ipaddress
import os
import socket
import struct
import subprocess
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pyrdmacm import abi
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.addr import parse_address
from pyrdmacm.records import PathRecord
from pyrdmacm.wire import encode_path_record

from ucma_id_steps import U32
from ucma_races import RaceSteps, Wedged, keep_only
from ucma_world import (EINVAL, ENOENT, ENOSPC, GATEWAY, LOCAL_GID, C, Result, World, _en, accept_outcomes,
                        connect_outcomes, disconnect_outcomes, ib_path_outcomes, init_qp_outcomes, join_outcomes,
                        listen_outcomes, neighbour_outcomes, notify_outcomes, option_outcomes, reject_outcomes)


class UcmaMachine(RaceSteps):
    """Random ucma command sequences against the kernel, checked against the model: the
    steps of :class:`~ucma_id_steps.IdSteps` and those of connections, options, multicast,
    migration and the network changing under the ids."""

    #: a step changed the gateway's neighbour entry (teardown restores it) ...
    neighbour_touched = False
    #: ... to this hardware address, its own before the first change (None: there was none)
    gateway_mac: Optional[str] = None
    @rule(data=st.data(), backlog=st.sampled_from([1, 0, 1024, 1025, 0x7FFFFFFF, U32]))
    def listen(self, data: st.DataObject, backlog: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.LISTEN, "rdma_ucm_listen", {"id": h, "backlog": backlog})
        others = list(self.ids)
        self._judge("LISTEN backlog %d" % backlog, m, err, lambda w: listen_outcomes(m, w, others),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data(), valid=st.sampled_from([1, 1, 1, 0]), pd_len=st.sampled_from([0, 0, 56, 57, 180, 181, 255]),
          size=st.sampled_from([0, 0, 0, -1, -8, -9, +1]))
    def connect(self, data: st.DataObject, valid: int, pd_len: int, size: int) -> None:
        ch, h, m = self._target(data)
        n = CODECS["rdma_ucm_connect"].size
        self.counter += 1
        fields = {"id": h, "conn_param.qp_num": 0x100000 + self.counter, "conn_param.valid": valid,
                  "conn_param.private_data_len": pd_len, "conn_param.retry_count": 5,
                  "conn_param.rnr_retry_count": 5, "conn_param.responder_resources": 1,
                  "conn_param.initiator_depth": 1}
        err = self._raw(ch, C.CONNECT, "rdma_ucm_connect", fields, size_in=n + size)
        if size > 0:
            pre: Optional[int] = EINVAL  # ucma_write: hdr.in beyond the write
        elif n + size < n - 8:
            pre = EINVAL  # ucma_connect: in_len < offsetofend(reserved)
        elif not valid:
            pre = EINVAL  # ucma_connect: conn_param.valid 0
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("CONNECT pd_len %d" % pd_len, m, err, lambda w: connect_outcomes(m, w, pd_len), pre)

    @rule(data=st.data(), valid=st.sampled_from([1, 0]), size=st.sampled_from([0, 0, -9, +1]))
    def accept(self, data: st.DataObject, valid: int, size: int) -> None:
        ch, h, m = self._target(data)
        n = CODECS["rdma_ucm_accept"].size
        fields = {"uid": self._uid(), "id": h, "conn_param.qp_num": 0x200000 + self.counter,
                  "conn_param.valid": valid, "conn_param.retry_count": 5, "conn_param.rnr_retry_count": 5}
        err = self._raw(ch, C.ACCEPT, "rdma_ucm_accept", fields, size_in=n + size)
        if size > 0 or n + size < n - 8:
            pre: Optional[int] = EINVAL  # ucma_write's in check; ucma_accept: in_len < offsetofend(reserved)
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("ACCEPT valid=%d" % valid, m, err, lambda w: accept_outcomes(m, w), pre)

    @rule(data=st.data(), reason=st.sampled_from([0, 28, 35, 5, 0xFF]), pd_len=st.sampled_from([0, 148, 149]))
    def reject(self, data: st.DataObject, reason: int, pd_len: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.REJECT, "rdma_ucm_reject", {"id": h, "reason": reason, "private_data_len": pd_len})
        pre = EINVAL if reason not in (0, 28, 35) else (None if m else self._lookup(ch, h))  # ucma_reject

        def per_world(w: World) -> Result:
            res = reject_outcomes(m, w)
            if pd_len > 148:  # cm_send_rej_locked: REJ private data ≤ 148
                return [(EINVAL if e == 0 else e, w2 if e else w) for e, w2 in res]
            return res

        self._judge("REJECT reason %d pd %d" % (reason, pd_len), m, err, per_world, pre)

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.DISCONNECT, "rdma_ucm_disconnect", {"id": h})
        self._judge("DISCONNECT", m, err, lambda w: disconnect_outcomes(m, w), None if m else self._lookup(ch, h))

    @rule(data=st.data(), event=st.sampled_from([4, 6, 0, U32]))
    def notify(self, data: st.DataObject, event: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.NOTIFY, "rdma_ucm_notify", {"id": h, "event": event})
        self._judge("NOTIFY %d" % event, m, err, lambda w: notify_outcomes(m, w, event),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data(), qp_state=st.sampled_from([0, 1, 2, 3, 6, 7, U32]), out=st.sampled_from([144, 144, 143]))
    def init_qp_attr(self, data: st.DataObject, qp_state: int, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        err = self._raw(ch, C.INIT_QP_ATTR, "rdma_ucm_init_qp_attr",
                        {"response": raw.reply.address, "id": h, "qp_state": qp_state}, out=out,
                        code="ch[%d].cmd(11, 'rdma_ucm_init_qp_attr', {'response': ch[%d].reply.address, 'id': %s, "
                        "'qp_state': %d}, out=%d)" % (ch, ch, self._hv(h), qp_state, out))
        if out < 144:
            pre: Optional[int] = ENOSPC  # ucma_init_qp_attr: out_len < sizeof(ib_uverbs_qp_attr)
        elif qp_state > 6:
            pre = EINVAL  # qp_state > IB_QPS_ERR
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("INIT_QP_ATTR state %d" % qp_state, m, err, lambda w: init_qp_outcomes(m, w, qp_state), pre)

    @rule(data=st.data(), level=st.sampled_from([0, 0, 0, 1, 99]), name=st.sampled_from([0, 1, 2, 3, 4, 99]),
          optlen=st.sampled_from([1, 4, 1, 4, 0, 2, 72, 0x80000000, U32]), value=st.sampled_from([1, 0]))
    def set_option(self, data: st.DataObject, level: int, name: int, optlen: int, value: int) -> None:
        ch, h, m = self._target(data)
        self.optval.fill(struct.pack("<I", value))
        self.script.append("optval.fill(%r)" % struct.pack("<I", value))
        err = self._raw(ch, C.SET_OPTION, "rdma_ucm_set_option",
                        {"optval": self.optval.address, "id": h, "level": level, "optname": name, "optlen": optlen},
                        code="ch[%d].cmd(14, 'rdma_ucm_set_option', {'optval': optval.address, 'id': %s, 'level': %d, "
                        "'optname': %d, 'optlen': %d})" % (ch, self._hv(h), level, name, optlen))
        # KMALLOC_MAX_SIZE is 4 MiB on x86_64 (2^(MAX_ORDER + PAGE_SHIFT - 1)) on every lab kernel
        pre = EINVAL if optlen > (1 << 22) else (None if m else self._lookup(ch, h))
        self._judge("SET_OPTION level %d name %d optlen %d value %d" % (level, name, optlen, value), m, err,
                    lambda w: option_outcomes(m, w, level, name, optlen, value), pre)

    @rule(data=st.data(), records=st.lists(st.sampled_from(["good", "good", "own", "flags 0x2f", "flags 0x0b", "flags 0"]),
                                            min_size=1, max_size=3),
          cut=st.sampled_from([0, 0, 0, -72, -1, +1, "all"]))
    def set_ib_path(self, data: st.DataObject, records: List[str], cut: Any) -> None:
        """SET_OPTION IB_PATH with well-formed ``ib_path_rec_data`` entries: the flags the kernel
        requires (GMP|PRIMARY|BIDIRECTIONAL, "good": a zero record; "own": the lab's RoCE v2
        path to itself) or others it must pass over; ``cut`` shortens or lengthens optlen."""
        ch, h, m = self._target(data)
        value = b"".join(_path_entry(r) for r in records)
        optlen = 0 if cut == "all" else len(value) + cut
        self.optval.fill(value)
        self.script.append("optval.fill(%r)" % value)
        err = self._raw(ch, C.SET_OPTION, "rdma_ucm_set_option",
                        {"optval": self.optval.address, "id": h, "level": 1, "optname": 1, "optlen": optlen},
                        code="ch[%d].cmd(14, 'rdma_ucm_set_option', {'optval': optval.address, 'id': %s, 'level': 1, "
                        "'optname': 1, 'optlen': %d})" % (ch, self._hv(h), optlen), row=" IB_PATH")
        whole = optlen % _PATH_SIZE == 0
        taken = [value[i * _PATH_SIZE:(i + 1) * _PATH_SIZE] for i, r in enumerate(records[: optlen // _PATH_SIZE])
                 if r in ("good", "own")]
        entry = taken[0][8:] if whole and taken else None
        # ucma_set_option looks the id up first; then ucma_set_ib_path wants whole records and
        # one flagged 0x2b, before the id's device and state
        pre = None if m else self._lookup(ch, h)
        self._judge("SET_OPTION IB_PATH %s optlen %d" % ("+".join(records), optlen), m, err,
                    lambda w: ib_path_outcomes(m, w, entry) if whole else [(EINVAL, w)], pre)

    @precondition(lambda self: bool(os.environ.get("PYRDMACM_LAB")))  # the lab's guest: its gateway is ours
    @rule(updates=st.sampled_from([1, 1, 2]))
    def neighbour_change(self, updates: int) -> None:
        """The environment as a step: the gateway's neighbour entry gets a new hardware address
        (``updates`` of them back to back: one ``ip -batch``) under the live ids; the model
        says which ids hear of it (:func:`~ucma_world.neighbour_outcomes`)."""
        macs = []
        for _ in range(updates):
            self.counter += 1
            macs.append("02:00:00:00:%02x:%02x" % (self.counter >> 8 & 0xFF, self.counter & 0xFF))
        lines = "".join("neigh replace %s lladdr %s dev eth0 nud permanent\n" % (GATEWAY, mac) for mac in macs)
        keep_neighbour()
        self.script.append("import subprocess; subprocess.run(['ip', '-batch', '-'], input=%r, text=True)" % lines)
        done = subprocess.run(["ip", "-batch", "-"], input=lines, text=True, capture_output=True)
        if done.returncode:
            self._fail("ip -batch could not change the neighbour: %s" % done.stderr.strip())
        type(self).stats["errnos"][("environment: neighbour x%d" % updates, "ok")] += 1
        for m in self.ids:
            m.worlds = {neighbour_outcomes(w, updates) for w in m.worlds}

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            restore_neighbour()

    @rule(data=st.data(), flags=st.sampled_from([0, 0, 1, 2]), group=st.sampled_from(["239.1.1.1", "239.1.1.2"]),
          legacy=st.sampled_from([False, False, True]), out=st.sampled_from([4, 4, 3]))
    def join(self, data: st.DataObject, flags: int, group: str, legacy: bool, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        g = parse_address(group)
        mc_uid = self._uid()
        raw.reply.clear()
        if legacy:
            err = self._raw(ch, C.JOIN_IP_MCAST, "rdma_ucm_join_ip_mcast",
                            {"response": raw.reply.address, "uid": mc_uid, "addr": g.pack_in6(), "id": h}, out=out,
                            code="ch[%d].cmd(16, 'rdma_ucm_join_ip_mcast', {'response': ch[%d].reply.address, "
                            "'uid': %d, 'addr': %r, 'id': %s}, out=%d)" % (ch, ch, mc_uid, g.pack_in6(), self._hv(h), out))
            flags = 0
        else:
            err = self._raw(ch, C.JOIN_MCAST, "rdma_ucm_join_mcast",
                            {"response": raw.reply.address, "uid": mc_uid, "id": h, "addr_size": g.size,
                             "join_flags": flags, "addr": g.pack_storage()}, out=out,
                            code="ch[%d].cmd(22, 'rdma_ucm_join_mcast', {'response': ch[%d].reply.address, 'uid': %d, "
                            "'id': %s, 'addr_size': %d, 'join_flags': %d, 'addr': %r}, out=%d)"
                            % (ch, ch, mc_uid, self._hv(h), g.size, flags, g.pack_storage(), out))
        if out < 4:
            pre: Optional[int] = ENOSPC  # ucma_process_join: out_len < sizeof(resp)
        elif flags not in (0, 1):
            pre = EINVAL  # join_flags neither FULLMEMBER nor SENDONLY_FULLMEMBER
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("JOIN %s flags %d%s" % (group, flags, " (JOIN_IP_MCAST)" if legacy else ""), m, err,
                    lambda w: join_outcomes(m, w, mc_uid), pre)
        if err == 0 and m:
            mc = int(struct.unpack_from("<I", raw.reply.view)[0])
            var = self._var("mc")
            self.script.append("%s = int.from_bytes(ch[%d].reply.bytes(4), 'little')" % (var, ch))
            m.mcs[mc] = (var, mc_uid)

    @rule(data=st.data(), which=st.sampled_from(["mine", "mine", "unknown"]))
    def leave(self, data: st.DataObject, which: str) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        mcs = [(m, mc) for m in self.ids for mc in m.mcs]
        if which == "mine" and mcs:
            m, mc = data.draw(st.sampled_from(mcs), label="membership")
            var = m.mcs[mc][0]
        else:
            m, mc, var = None, 0x7FFFFFF0, str(0x7FFFFFF0)
        err = self._raw(ch, C.LEAVE_MCAST, "rdma_ucm_destroy_id", {"response": raw.reply.address, "id": mc}, out=4,
                        code="ch[%d].cmd(17, 'rdma_ucm_destroy_id', {'response': ch[%d].reply.address, 'id': %s}, "
                        "out=4)" % (ch, ch, var))
        want = ENOENT if m is None else (EINVAL if m.ch != ch else 0)  # ucma_leave_multicast
        if err != want:
            self._fail("LEAVE_MCAST of %s: the kernel answered %s, the model expects %s" % (var, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.mc_read.get(mc, 0):
                self._fail("LEAVE_MCAST of %s: events_reported %d, %d were read" % (var, reported, m.mc_read.get(mc, 0)))
            uid = m.mcs.pop(mc)[1]
            # the membership's queued events go with it (ucma_leave_multicast), and its join
            m.worlds = {w.but(q=tuple(e for e in w.q if e[2] != uid),
                              pend=tuple(o for o in w.pend if not any(ev and ev[2] == uid for ev, _ in o)))
                        for w in m.worlds}

    @rule(data=st.data(), fd=st.sampled_from(["owner", "owner", "self", "bad", "not rdma_cm"]))
    def migrate(self, data: st.DataObject, fd: str) -> None:
        ch, h, m = self._target(data)
        opened = self._open()
        new = data.draw(st.sampled_from(opened), label="new channel")
        raw = self.chans[new]
        if fd == "bad":
            fdn, fdsrc = U32, str(U32)
        elif fd == "not rdma_cm":
            fdn, fdsrc = self.log.fd if self.log.fd is not None else 0, "0"
            fdn = 0 if self.log.fd is None else fdn
        elif fd == "self":
            fdn, fdsrc = raw.dev.fileno(), "ch[%d].dev.fileno()" % new
            ch = new
        else:
            fdn, fdsrc = self.chans[ch].dev.fileno(), "ch[%d].dev.fileno()" % ch
        err = self._raw(new, C.MIGRATE_ID, "rdma_ucm_migrate_id", {"response": raw.reply.address, "id": h, "fd": fdn},
                        out=4, code="ch[%d].cmd(18, 'rdma_ucm_migrate_id', {'response': ch[%d].reply.address, 'id': %s, "
                        "'fd': %s}, out=4)" % (new, new, self._hv(h), fdsrc))
        if fd == "bad":
            want = ENOENT  # fdget fails
        elif fd == "not rdma_cm":
            want = EINVAL  # f_op is not ucma_fops
        else:
            # the id is looked up on the fd named (its owner, or the writer's own fd); found by
            # the fuzzer (all four kernels, a model bug): another channel's id drawn for a
            # MIGRATE_ID that names that very channel's fd is found there and moves nowhere
            if m is None:
                m = next((x for x in self.ids if x.handle == h and x.ch == ch), None)
            want = (0 if m.ch == ch else EINVAL) if m is not None else self._lookup(ch, h)
        if err != want:
            self._fail("MIGRATE_ID of %s to ch[%d] (fd: %s): the kernel answered %s, the model expects %s"
                       % (m.name if m else hex(h), new, fd, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.events_read:
                self._fail("MIGRATE_ID of %s: events_reported %d, %d were read" % (m.name, reported, m.events_read))
            m.ch = new  # its unread events go with it



def keep_neighbour() -> None:
    """Before a change of the gateway's neighbour entry: the first time, remember its hardware
    address (restore_neighbour puts it back after every sequence that changed it)."""
    deadline = time.monotonic() + 2
    while UcmaMachine.gateway_mac is None and time.monotonic() < deadline:
        words = subprocess.run(["ip", "neigh", "show", GATEWAY, "dev", "eth0"], capture_output=True,
                               text=True).stdout.split()
        if "lladdr" in words:
            UcmaMachine.gateway_mac = words[words.index("lladdr") + 1]
        else:  # no entry yet: a datagram to the gateway makes the kernel ARP for it
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"", (GATEWAY, 9))
            time.sleep(0.1)
    UcmaMachine.neighbour_touched = True


def restore_neighbour() -> None:
    """After a sequence that changed the gateway's neighbour entry: its own hardware address
    again, so that what follows sees the lab as it was (a deleted entry would make the next
    resolution ARP, and one with timeout_ms 0 time out: found by a 6.1 campaign, seed 2567).
    Without a remembered address (no entry before), the entry goes and ARP makes it again."""
    if UcmaMachine.neighbour_touched:
        if UcmaMachine.gateway_mac:
            subprocess.run(["ip", "neigh", "replace", GATEWAY, "lladdr", UcmaMachine.gateway_mac, "dev", "eth0",
                            "nud", "reachable"], capture_output=True)
        else:
            subprocess.run(["ip", "neigh", "del", GATEWAY, "dev", "eth0"], capture_output=True)
        UcmaMachine.neighbour_touched = False


_PATH_SIZE = CODECS["ib_path_rec_data"].size
_GOOD = int(abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL)


def _path_entry(kind: str) -> bytes:
    """One ``ib_path_rec_data``: "good" (flags 0x2b, a zero record), "own" (flags 0x2b, the
    lab's RoCE v2 path from its address to itself), or "flags N" (a zero record)."""
    if kind == "own":
        gid = ipaddress.IPv6Address(LOCAL_GID)
        return encode_path_record(PathRecord(
            _GOOD, 0, gid, gid, 0, 0, 0, 0, 64, 0, 0, 1, 0xFFFF, 0, 2, 3, 2, 3, 2, 18, 0))
    flags = _GOOD if kind == "good" else int(kind.split()[1], 16)
    return CODECS["ib_path_rec_data"].pack_dict({"flags": flags})


class RacesMachine(UcmaMachine):
    """``tools/fuzz --machine races``: ids created, brought forward by ``progress``, read, their
    channels closed, and raced (the races destroy them and open the second channel)
    (:meth:`~ucma_races.RaceSteps.race_on_one_id`); the other steps stay plain methods, so a
    campaign spends its time on concurrent steps."""


keep_only(RacesMachine, {"close_channel", "create_id", "get_event", "progress", "race_on_one_id"})


# -- campaigns -------------------------------------------------------------------------------

def run_round(seed: int, examples: int, steps: int, shrink_budget: float = 60.0,
              machine: Optional[type] = None) -> Optional[str]:
    """One hypothesis run of ``machine`` (:class:`UcmaMachine` unless given; ``examples``
    sequences of up to ``steps`` commands, derandomized by ``seed``): None, or the shrunk
    failure's report."""
    M = machine or UcmaMachine
    import hypothesis
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import get_state_machine_test

    test = get_state_machine_test(M, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink], print_blob=False))
    test = hypothesis.seed(seed)(test)
    M.first_failure = None
    M.smallest = None
    M.shrink_budget = shrink_budget
    try:
        test()
    except Exception as e:  # a Disagreement, or hypothesis' complaint after the shrink budget
        from hypothesis.errors import FlakyStrategyDefinition

        M.first_failure = None  # machines made after this round (replays) start afresh
        if isinstance(e, FlakyStrategyDefinition) and M.smallest is None:
            # a sequence hypothesis had begun before went another way this time (a race came
            # out the other way: the draws that follow differ): the round ends there
            M.stats["cut"] = M.stats.get("cut", 0) + 1
            return None
        if M.smallest is not None:
            _n, report, script = M.smallest
            # a race's reproducer is not replayed here: a lost race may block the replaying thread
            reduced = None if any("race(" in line for line in script) else reduce_script(script, shrink_budget)
            if reduced is not None and len(reduced) < len(script):
                report += ("\n\nreduced (replayed on this kernel: the %d steps without which the last command "
                           "still answers as above):\n%s" % (len(reduced) - _HEADER, "\n".join(reduced)))
            return report
        raise
    return None


#: the reproducer's first lines: imports, the channels' list, the option buffer
_HEADER = 4


def _replay(lines: List[str]) -> Optional[int]:
    """Run a reproducer here; the errno its last command answered, or None if a step fails."""
    env: Dict[str, Any] = {}
    changes_neighbour = any("'-batch'" in line for line in lines)
    if changes_neighbour:
        keep_neighbour()
    try:
        exec(compile("\n".join(lines), "<reproducer>", "exec"), env)  # noqa: S102 - our own script
        return int(env["err"])
    except Exception:  # a step needs one that was left out
        return None
    finally:
        for c in env.get("ch") or ():
            try:
                if c is not None:
                    c.close()  # closing destroys the replay's ids
            except Exception:
                pass
        if changes_neighbour:
            restore_neighbour()


def reduce_script(script: List[str], budget: float) -> Optional[List[str]]:
    """The shortest subsequence of ``script``'s steps found within ``budget`` seconds, removing
    one step at a time, after which the last command still answers what it answered: what a
    kernel developer runs.  None when the script does not replay as it ran."""
    if len(script) <= _HEADER + 1 or not script[-1].startswith("err = "):
        return None
    want = _replay(script)
    if want is None:
        return None
    deadline = time.monotonic() + budget
    lines = list(script)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in range(len(lines) - 2, _HEADER - 1, -1):  # the last command stays; later steps first
            if time.monotonic() >= deadline:
                break
            candidate = lines[:i] + lines[i + 1:]
            if _replay(candidate) == want:
                lines, changed = candidate, True
    return lines


def campaign(seconds: float, seed: int, examples: int = 20, steps: int = 30,
             out: Callable[[str], None] = print, shrink_seconds: float = 60.0, races: bool = False) -> Dict[str, Any]:
    """Rounds of :func:`run_round` with seeds seed, seed+1, ... until ``seconds`` have passed;
    the figures, and each disagreement's reproducer.  ``races``: the :class:`RacesMachine`."""
    import fuzz_runner
    from pyrdmacm.conformance import kernel_version

    M = RacesMachine if races else UcmaMachine
    M.version = kernel_version()
    M.stats = {"sequences": 0, "commands": 0, "errnos": collections.Counter()}
    wedged: List[bool] = []

    def one_round(s: int) -> Optional[str]:
        try:
            return run_round(s, examples, steps, shrink_budget=shrink_seconds, machine=M)
        except Wedged as e:  # a writer blocked in the kernel for good: no more rounds
            wedged.append(True)
            return e.report

    n, found, took = fuzz_runner.rounds(seconds, seed, one_round, "", out, stop=lambda: bool(wedged))
    fig = {"kernel": os.uname().release, "seed": seed, "rounds": n, "seconds": took,
           "sequences": M.stats["sequences"], "commands": M.stats["commands"],
           "errnos": M.stats["errnos"], "disagreements": found}
    fig["rounds cut by timing"] = M.stats.get("cut", 0)
    if races:
        fig["machine"] = "races (%d CPUs)" % (os.cpu_count() or 1)
        fig["concurrent steps"] = sum(n for (cmd, _), n in M.stats["errnos"].items() if cmd.startswith("race: "))
    return fig


def main(argv: Optional[Sequence[str]] = None) -> int:
    import fuzz_runner

    p = fuzz_runner.parser("fuzz the running kernel's ucma with the model (see tools/fuzz)", 20, 30)
    p.add_argument("--shrink-seconds", type=float, default=60.0,
                   help="how long a failure may be shrunk (default 60; each step is a syscall on the real kernel: "
                        "give more for a minimal reproducer)")
    p.add_argument("--races", action="store_true",
                   help="the races machine: ids brought forward and raced (two commands on one id at once)")
    p.add_argument("--in-process", action="store_true",
                   help="races: run the campaign in this process, not a forked child (a wedged kernel then "
                        "keeps it from exiting)")
    p.add_argument("--with-known-bugs", action="store_true",
                   help="run the races that trigger a recorded kernel bug even where it is known (may wedge it)")
    a = p.parse_args(argv)
    seed = fuzz_runner.seed_of(a)

    RacesMachine.with_known_bugs = a.with_known_bugs

    def run() -> int:
        fig = campaign(a.minutes * 60, seed, a.examples, a.steps, shrink_seconds=a.shrink_seconds, races=a.races)
        return fuzz_runner.finish(fig, a.json)
    # a race may leave a writer blocked in the kernel: the campaign then cannot exit, so it
    # runs in a child that reports first
    return fuzz_runner.in_child(run) if a.races and not a.in_process else run()


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
