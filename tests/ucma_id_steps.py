"""The fuzzer's steps on ids (:class:`IdSteps`, the base of :class:`ucma_model.UcmaMachine`):
the channels, an id's life (create, destroy, bind, resolve the address and the route), the
queries, the events, malformed writes and the progress of work in flight, each judged by the
model (:mod:`ucma_world`); after every step the kernel's view is checked (RDMA netlink's
states, the fd, the kernel log) and at the end nothing may be left.  Every step is written
into :attr:`IdSteps.script` as it runs: a failure's runnable reproducer.
"""


from __future__ import annotations

import collections
import errno
import os
import select
import struct
import time
from typing import Any, Callable, Dict, List, Optional, Set, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pyrdmacm import abi

import ucma_world
from ucma_view import match_states, netlink_states, nothing_left, rdma_device_count
from ucma_world import (AF_IB, AF_INET6, AF_UNIX, C, CLOSED_PORT, EAGAIN, EFAULT, EINVAL, ENOENT, ENOSPC, ENOSYS, FIXED_PORT,
                        GATEWAY, LOCAL, LOCAL6, LOCAL_GID, NOT_LOCAL, PS, QP, AddrChoice, Disagreement, IdModel, K, Result, S,
                        World, _bind_local, _en, _kind, _states, kernel_state, WRITABLE, ib_service_outcomes, refused,
                        resolve_outcomes, route_outcomes, since, write_event_outcomes)

# -- what the steps draw ------------------------------------------------------------------------

ADDRS = {
    "local": AddrChoice("local", LOCAL),
    "local:fixed": AddrChoice("local", LOCAL, FIXED_PORT),
    "any": AddrChoice("any", "0.0.0.0"),
    "any:fixed": AddrChoice("any", "0.0.0.0", FIXED_PORT),
    "any6": AddrChoice("any", "::", 0, AF_INET6),
    "any6:fixed": AddrChoice("any", "::", FIXED_PORT, AF_INET6),
    "notlocal": AddrChoice("notlocal", NOT_LOCAL),
    # AF_IB: the service id carries the id's port space (and the port, when fixed)
    "ib-any": AddrChoice("any", "::", 0, AF_IB),
    "ib-any:fixed": AddrChoice("any", "::", FIXED_PORT, AF_IB),
    "ib-gid": AddrChoice("local", LOCAL_GID, 0, AF_IB),
}
DSTS = {
    "local": AddrChoice("local", LOCAL, CLOSED_PORT),
    "gateway": AddrChoice("gateway", GATEWAY, CLOSED_PORT),
    "far": AddrChoice("far", "192.0.2.1", CLOSED_PORT),  # routed through the gateway
    "any": AddrChoice("any", "0.0.0.0", CLOSED_PORT),  # cma_resolve_loopback
    "local6": AddrChoice("local", LOCAL6, CLOSED_PORT, AF_INET6),
    "ib-gid": AddrChoice("local", LOCAL_GID, CLOSED_PORT, AF_IB),
    "ib-linklocal": AddrChoice("far", "fe80::1", CLOSED_PORT, AF_IB),  # rxe0 has a GID of its prefix
    "ib-any": AddrChoice("any", "::", CLOSED_PORT, AF_IB),  # cma_resolve_loopback
    "ib-nowhere": AddrChoice("nowhere", "2001:db8::1", CLOSED_PORT, AF_IB),  # no GID of its prefix
}
#: malformed address fields: (name, overrides of the struct's fields)
BAD_ADDR = ["reserved=1", "size=0", "size+1", "size=28 for AF_INET", "AF_UNIX", "family 0"]

MAX_IDS = 6
U32 = 0xFFFFFFFF


def _storage(family: int, size: int = 128) -> bytes:
    return struct.pack("<H", family).ljust(size, b"\0")

class IdSteps(RuleBasedStateMachine):
    """Random ucma command sequences against the kernel, checked against the model: the
    steps of ids and channels (the connection's are :class:`ucma_model.UcmaMachine`'s)."""
    """Random ucma command sequences against the kernel, checked against the model."""

    #: set by the runner: the kernel's (major, minor)
    version: Tuple[int, int] = (0, 0)
    #: figures of the campaign (class-level: summed over every sequence run)
    stats: Dict[str, Any] = {"sequences": 0, "commands": 0, "errnos": collections.Counter()}
    #: shrinking stops this many seconds after the first failure (each step costs a syscall
    #: round, netlink and the kernel log: hypothesis' own five minutes is too long)
    shrink_budget = 60.0
    first_failure: Optional[float] = None
    #: the shortest failing sequence's report: (script lines, report)
    smallest: Optional[Tuple[int, str]] = None

    def __init__(self) -> None:
        from hypothesis import assume

        cls = type(self)
        ucma_world.answering_for = cls.version
        # past the shrink budget every further candidate is filtered out: the shrinker gives up
        assume(cls.first_failure is None or time.monotonic() - cls.first_failure < cls.shrink_budget)
        super().__init__()
        from pyrdmacm.core.device import ReplyBuffer
        from pyrdmacm.conformance import Raw

        self._Raw = Raw
        self.chans: List[Optional[Any]] = [Raw(), None]
        self.ids: List[IdModel] = []
        self.stale: Set[int] = set()
        self.counter = 0
        from pyrdmacm.conformance import KernelLog

        self.log = KernelLog()  # the suite's own check of /dev/kmsg: BUG, WARNING, refcount_t ...
        self.optval = ReplyBuffer(4096)
        self.pid = os.getpid()
        self._forced: Optional[Tuple[int, int, IdModel]] = None
        self.devices = rdma_device_count()
        self.baseline = netlink_states(self.pid)
        self.script: List[str] = ["from pyrdmacm.conformance import Raw",
                                  "from pyrdmacm.core.device import ReplyBuffer",
                                  "ch = [Raw(), None]", "optval = ReplyBuffer(4096)"]
        type(self).stats["sequences"] += 1

    # -- helpers ------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        report = "%s\n\nreproducer (kernel %d.%d):\n%s" % (what, self.version[0], self.version[1], "\n".join(self.script))
        cls = type(self)
        if cls.first_failure is None:
            cls.first_failure = time.monotonic()
        if cls.smallest is None or len(self.script) < cls.smallest[0]:
            cls.smallest = (len(self.script), report, list(self.script))
        raise Disagreement("%s\n\nreproducer (kernel %d.%d):\n%s" % (what, self.version[0], self.version[1],
                                                                      "\n".join(self.script)))

    def _uid(self) -> int:
        self.counter += 1
        return 0x1000 + self.counter

    def _var(self, prefix: str) -> str:
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def _raw(self, ch: int, cmd: int, struct_name: Optional[str], fields: Dict[str, Any], out: int = 0,
             size_in: Optional[int] = None, body: Optional[bytes] = None, code: str = "", row: str = "") -> int:
        """Write a command; its answer is counted in the figures under its name (and ``row``)."""
        raw = self.chans[ch]
        assert raw is not None
        err = raw.cmd(cmd, struct_name, fields, out=out, size_in=size_in, body=body)
        type(self).stats["commands"] += 1
        name = C(cmd).name if cmd in C._value2member_map_ else "cmd%d" % cmd
        type(self).stats["errnos"][(name + row, errno.errorcode.get(err, "ok") if err else "ok")] += 1
        shown = code or "ch[%d].cmd(%d, %r, %s, out=%d%s)" % (
            ch, cmd, struct_name, self._fields_src(ch, fields), out, "" if size_in is None else ", size_in=%d" % size_in)
        self.script.append("err = %s  # %s -> %s" % (shown, name, errno.errorcode.get(err, "ok") if err else "ok"))
        return err

    def _judge(self, what: str, m: Optional[IdModel], err: int, per_world: Callable[[World], Result],
               pre: Optional[int] = None) -> None:
        """Apply a command's answer: ``pre`` is an errno the kernel answers before looking at
        the id (its own checks), ``per_world`` the rest."""
        if pre is not None:
            if err != pre:
                self._fail("%s: the kernel answered %s, the model expects %s (checked before the id)"
                           % (what, _en(err), _en(pre)))
            return
        assert m is not None
        results: Dict[int, Set[World]] = collections.defaultdict(set)
        for w in m.possible():
            for e, w2 in per_world(w):
                results[e].add(w2)
        if err not in results:
            self._fail("%s on %s (%s) in %s: the kernel answered %s, the model allows %s"
                       % (what, m.name, _kind(m), _states(m), _en(err), sorted(_en(e) for e in results)))
        m.worlds = results[err]

    def _lookup(self, ch: int, handle: int) -> Optional[int]:
        """ucma_get_ctx's answer before the handler: None (found on ch), ENOENT or EINVAL."""
        for m in self.ids:
            if m.handle == handle:
                return None if m.ch == ch else EINVAL
        return ENOENT

    def _open(self) -> List[int]:
        return [i for i, c in enumerate(self.chans) if c is not None]

    def _target(self, data: st.DataObject) -> Tuple[int, int, Optional[IdModel]]:
        """(channel, handle, id model or None): mostly a live id of that channel; sometimes
        another channel's, a destroyed one's, or one nobody has."""
        if self._forced is not None:
            forced, self._forced = self._forced, None
            return forced
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        mine = [m for m in self.ids if m.ch == ch]
        pick = data.draw(st.integers(0, 11), label="which id")
        kind = "mine" if pick < 9 else ("foreign", "stale", "unknown")[pick - 9]
        if kind == "mine" and mine:
            m = data.draw(st.sampled_from(mine), label="id")
            return ch, m.handle, m
        if kind == "foreign":
            theirs = [m for m in self.ids if m.ch != ch]
            if theirs:
                m = data.draw(st.sampled_from(theirs), label="foreign id")
                return ch, m.handle, None
        if kind == "stale" and self.stale:
            h = data.draw(st.sampled_from(sorted(self.stale)), label="stale handle")
            if self._lookup(ch, h) == ENOENT:
                return ch, h, None
        return ch, data.draw(st.sampled_from([U32, 0x7FFFFFFF, 0xFFFFFF]), label="unknown handle"), None

    def _fields_src(self, ch: int, fields: Dict[str, Any]) -> str:
        raw = self.chans[ch]
        shown = []
        for k, v in fields.items():
            if k == "id" and isinstance(v, int):
                text = self._hv(v)
            elif k in ("response", "optval") and raw is not None and v == raw.reply.address:
                text = "ch[%d].reply.address" % ch
            elif k == "optval" and v == self.optval.address:
                text = "optval.address"
            else:
                text = repr(v)
            shown.append("%r: %s" % (k, text))
        return "{%s}" % ", ".join(shown)

    def _hv(self, handle: int) -> str:
        for m in self.ids:
            if m.handle == handle:
                return m.name
        return str(handle)

    # -- rules: channels --------------------------------------------------------------------

    @precondition(lambda self: None in self.chans)
    @rule()
    def open_channel(self) -> None:
        i = self.chans.index(None)
        self.chans[i] = self._Raw()
        self.script.append("ch[%d] = Raw()" % i)

    @precondition(lambda self: len([c for c in self.chans if c is not None]) > 1)
    @rule(data=st.data())
    def close_channel(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[i]
        raw.close()
        self.chans[i] = None
        self.script.append("ch[%d].close(); ch[%d] = None" % (i, i))
        for m in [m for m in self.ids if m.ch == i]:
            self.ids.remove(m)
            self.stale.add(m.handle)

    # -- rules: ids ---------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(data=st.data(), ps=st.sampled_from([PS.TCP, PS.UDP, PS.TCP, PS.UDP, PS.IPOIB, PS.IB]),
          qp=st.sampled_from([QP.RC, QP.UD, QP.UC]))
    def create_id(self, data: st.DataObject, ps: int, qp: int) -> None:
        self.create(data, ps, qp, 4, False, False)

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(data=st.data(), ps=st.sampled_from([PS.TCP, 0, 0xFFFF, 0x0107, PS.UDP]),
          qp=st.sampled_from([QP.RC, QP.UD]), out=st.sampled_from([3, 0, 4, 0xFFFF]),
          uid0=st.booleans(), null=st.booleans())
    def create_odd(self, data: st.DataObject, ps: int, qp: int, out: int, uid0: bool, null: bool) -> None:
        self.create(data, ps, qp, out, uid0, null)

    def create(self, data: st.DataObject, ps: int, qp: int, out: int, uid0: bool, null: bool) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        uid = 0 if uid0 else self._uid()
        raw.reply.clear()
        err = self._raw(ch, C.CREATE_ID, "rdma_ucm_create_id",
                        {"uid": uid, "response": 0 if null else raw.reply.address, "ps": ps, "qp_type": qp},
                        out=out, code="ch[%d].cmd(0, 'rdma_ucm_create_id', {'uid': %d, 'response': %s, 'ps': %d, "
                        "'qp_type': %d}, out=%d)" % (ch, uid, "0" if null else "ch[%d].reply.address" % ch, ps, qp,
                                                     out))
        if out < 4:
            want = ENOSPC  # ucma_create_id: out_len < sizeof(resp)
        elif ps not in (PS.TCP, PS.UDP, PS.IPOIB, PS.IB):
            want = EINVAL  # ucma_get_qp_type
        elif null:
            want = EFAULT  # the reply cannot be written: the id is destroyed again
        else:
            want = 0
        if err != want:
            self._fail("CREATE_ID ps=%#x qp_type=%d out=%d response=%s: the kernel answered %s, the model "
                       "expects %s" % (ps, qp, out, "NULL" if null else "ok", _en(err), _en(want)))
        if err:
            return
        handle = int(struct.unpack_from("<I", raw.reply.view)[0])
        qp_type = {PS.TCP: QP.RC, PS.UDP: QP.UD, PS.IPOIB: QP.UD}.get(ps, qp)
        name = self._var("h")
        self.script.append("%s = int.from_bytes(ch[%d].reply.bytes(4), 'little')" % (name, ch))
        self.stale.discard(handle)
        self.ids.append(IdModel(name, handle, ch, uid, ps, qp_type, {World()}))

    @rule(data=st.data(), out=st.sampled_from([4, 4, 4, 3]))
    def destroy(self, data: st.DataObject, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        raw.reply.fill(b"\xff\xff\xff\xff")
        err = self._raw(ch, C.DESTROY_ID, "rdma_ucm_destroy_id", {"response": raw.reply.address, "id": h}, out=4 if out == 4 else out,
                        code="ch[%d].cmd(1, 'rdma_ucm_destroy_id', {'response': ch[%d].reply.address, 'id': %s}, "
                        "out=%d)" % (ch, ch, self._hv(h), out))
        want = ENOSPC if out < 4 else (0 if m else self._lookup(ch, h))
        if err != want:
            self._fail("DESTROY_ID of %s (out=%d): the kernel answered %s, the model expects %s"
                       % (m.name if m else hex(h), out, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.events_read:
                self._fail("DESTROY_ID of %s: events_reported %d, but %d of its events were read"
                           % (m.name, reported, m.events_read))
            self.ids.remove(m)
            self.stale.add(h)

    @rule(data=st.data(), addr=st.sampled_from(sorted(ADDRS)), bad=st.sampled_from([None] * 8 + BAD_ADDR),
          legacy=st.sampled_from([False, False, False, True]))
    def bind(self, data: st.DataObject, addr: str, bad: Optional[str], legacy: bool) -> None:
        ch, h, m = self._target(data)
        a = ADDRS[addr]
        sa = a.for_space(m.ps if m else PS.TCP)
        legacy = legacy and a.family != AF_IB  # a sockaddr_ib is no sockaddr_in6 slot
        if legacy:  # BIND_IP: the address in a sockaddr_in6 slot
            slot = sa.pack_in6()
            if bad in ("AF_UNIX", "family 0"):
                slot = _storage(AF_UNIX if bad == "AF_UNIX" else 0, 28)
            fields = {"response": 0, "addr": slot, "id": h}
            err = self._raw(ch, C.BIND_IP, "rdma_ucm_bind_ip", fields)
            pre = EINVAL if bad in ("AF_UNIX", "family 0") else None  # ucma_bind_ip: !rdma_addr_size_in6
        else:
            fields = {"id": h, "addr_size": sa.size, "reserved": 0, "addr": sa.pack_storage()}
            if bad == "reserved=1":
                fields["reserved"] = 1
            elif bad == "size=0":
                fields["addr_size"] = 0
            elif bad == "size+1":
                fields["addr_size"] = sa.size + 1
            elif bad == "size=28 for AF_INET":
                fields["addr_size"] = 28 if sa.size == 16 else 16
            elif bad in ("AF_UNIX", "family 0"):
                fields["addr"] = _storage(AF_UNIX if bad == "AF_UNIX" else 0)
            err = self._raw(ch, C.BIND, "rdma_ucm_bind", fields, row=" (AF_IB)" if a.family == AF_IB else "")
            pre = EINVAL if bad else None  # ucma_bind: reserved, addr_size 0 or not the family's
        if pre is None:
            pre = self._lookup(ch, h) if m is None else None
        others = list(self.ids)

        def per_world(w: World) -> Result:
            err = refused(m, w, C.BIND)  # rdma_bind_addr_dst: cma_comp_exch(IDLE -> ADDR_BOUND)
            if err:
                return [(err, w)]
            return _bind_local(m, w, a, others)

        self._judge("BIND %s%s" % (addr, " (BIND_IP)" if legacy else ""), m, err, per_world, pre)

    @rule(data=st.data(), dst=st.sampled_from(sorted(DSTS)),
          src=st.sampled_from([None] * 4 + ["local", "notlocal", "any", "ib-any"]),
          bad=st.sampled_from([None] * 8 + ["reserved=1", "dst_size=0", "dst_size+1", "AF_UNIX", "src_size=1"]),
          timeout=st.sampled_from([2000, 2000, 0, U32]), legacy=st.sampled_from([False, False, False, True]))
    def resolve_addr(self, data: st.DataObject, dst: str, src: Optional[str], bad: Optional[str], timeout: int,
                     legacy: bool) -> None:
        ch, h, m = self._target(data)
        d = DSTS[dst]
        s = ADDRS[src] if src else None
        ps = m.ps if m else PS.TCP
        da, sa = d.for_space(ps), (s.for_space(ps) if s else None)
        legacy = legacy and AF_IB not in (d.family, s and s.family)  # a sockaddr_ib is no sockaddr_in6 slot
        if legacy:  # RESOLVE_IP: sockaddr_in6 slots, family 0 = no source
            fields = {"src_addr": sa.pack_in6() if sa else bytes(28), "dst_addr": da.pack_in6(),
                      "id": h, "timeout_ms": timeout}
            if bad == "AF_UNIX":
                fields["dst_addr"] = _storage(AF_UNIX, 28)
            err = self._raw(ch, C.RESOLVE_IP, "rdma_ucm_resolve_ip", fields)
            pre = EINVAL if bad == "AF_UNIX" else None  # ucma_resolve_ip: !rdma_addr_size_in6(dst)
        else:
            fields = {"id": h, "timeout_ms": timeout, "src_size": sa.size if sa else 0,
                      "dst_size": da.size, "reserved": 0,
                      "src_addr": sa.pack_storage() if sa else b"", "dst_addr": da.pack_storage()}
            if bad == "reserved=1":
                fields["reserved"] = 1
            elif bad == "dst_size=0":
                fields["dst_size"] = 0
            elif bad == "dst_size+1":
                fields["dst_size"] += 1
            elif bad == "AF_UNIX":
                fields["dst_addr"] = _storage(AF_UNIX)
            elif bad == "src_size=1":
                fields["src_size"] = 1
            err = self._raw(ch, C.RESOLVE_ADDR, "rdma_ucm_resolve_addr", fields,
                            row=" (AF_IB)" if AF_IB in (d.family, s and s.family) else "")
            pre = EINVAL if bad else None  # ucma_resolve_addr: reserved, sizes not the families'
        if pre is None and m is None:
            pre = self._lookup(ch, h)
        others = list(self.ids)
        self._judge("RESOLVE_%s to %s from %s" % ("IP" if legacy else "ADDR", dst, src), m, err,
                    lambda w: resolve_outcomes(m, w, d, s, others), pre)

    @rule(data=st.data(), timeout=st.sampled_from([1000, 1000, 0, U32]))
    def resolve_route(self, data: st.DataObject, timeout: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.RESOLVE_ROUTE, "rdma_ucm_resolve_route", {"id": h, "timeout_ms": timeout})
        self._judge("RESOLVE_ROUTE timeout %d" % timeout, m, err, lambda w: route_outcomes(m, w, timeout),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data())
    def resolve_ib_service(self, data: st.DataObject) -> None:
        """RESOLVE_IB_SERVICE (23) on any id, live ones most: the kernel's table has it from
        6.17 (before, ucma_write refuses the command number ahead of the id)."""
        ch, h, m = self._target(data)
        err = self._raw(ch, C.RESOLVE_IB_SERVICE, "rdma_ucm_resolve_ib_service",
                        {"id": h, "ibs.service_id": 0x1234, "ibs.flags": 1})
        pre = EINVAL if not since("cmd23_exists", self.version) else (None if m else self._lookup(ch, h))
        self._judge("RESOLVE_IB_SERVICE", m, err, lambda w: ib_service_outcomes(m, w), pre)

    @rule(data=st.data(), event=st.sampled_from([18, 18, 19, 0, 9, 99]), status=st.sampled_from([0, 7, 0xFFFFFFF5]))
    def write_cm_event(self, data: st.DataObject, event: int, status: int) -> None:
        """WRITE_CM_EVENT (24) on any id, live ones most: a USER or INTERNAL event comes back on
        its channel (get_event judges it); the kernel's table has it from 6.17."""
        ch, h, m = self._target(data)
        param = struct.pack("=Q", 0x1122334455667788).ljust(304, b"\0")
        err = self._raw(ch, C.WRITE_CM_EVENT, "rdma_ucm_write_cm_event",
                        {"id": h, "event": event, "status": status, "param": param})
        if not since("cmd24_exists", self.version) or event not in WRITABLE:
            pre: Optional[int] = EINVAL  # the command number, then the event, both before the id
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("WRITE_CM_EVENT %s status %#x" % (WRITABLE.get(event, event), status), m, err,
                    lambda w: write_event_outcomes(m, w, event, status), pre)

    @rule(data=st.data(), option=st.sampled_from([0, 1, 2, 3, 99]), out=st.sampled_from([1024, 280, 272, 271, 8, 7, 0]),
          route=st.sampled_from([False, False, False, True]))
    def query(self, data: st.DataObject, option: int, out: int, route: bool) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        if route:
            err = self._raw(ch, C.QUERY_ROUTE, "rdma_ucm_query", {"response": raw.reply.address, "id": h}, out=out,
                            code="ch[%d].cmd(5, 'rdma_ucm_query', {'response': ch[%d].reply.address, 'id': %s}, "
                            "out=%d)" % (ch, ch, self._hv(h), out))
            # ucma_query_route: the reply's size (up to ibdev_index) before the look-up
            pre = ENOSPC if out < 200 else (None if m else self._lookup(ch, h))
            self._judge("QUERY_ROUTE out %d" % out, m, err, lambda w: [(0, w)], pre)
            return
        err = self._raw(ch, C.QUERY, "rdma_ucm_query", {"response": raw.reply.address, "id": h, "option": option},
                        out=out, code="ch[%d].cmd(19, 'rdma_ucm_query', {'response': ch[%d].reply.address, 'id': %s, "
                        "'option': %d}, out=%d)" % (ch, ch, self._hv(h), option, out))
        if m is None:
            self._judge("QUERY", m, err, lambda w: [], self._lookup(ch, h))
            return
        if option in (0, 2):
            want = ENOSPC if out < 272 else 0  # ucma_query_addr / _gid: up to ibdev_index
        elif option == 1:
            want = ENOSPC if out < 8 else 0  # ucma_query_path
        elif option == 3 and since("query_ib_service", self.version):
            # found by the fuzzer (7.2): an id without IB service records (every id here: RoCE
            # has no SA, RESOLVE_IB_SERVICE never succeeds) answers ENODATA, not an empty list
            want = ENOSPC if out < 8 else errno.ENODATA
        else:
            want = ENOSYS  # ucma_query: default
        self._judge("QUERY option %d out %d" % (option, out), m, err, lambda w: [(want, w)])

    @rule(data=st.data(), out=st.sampled_from([336, 336, 336, 324, 323, 0]), wait=st.sampled_from([0.0, 0.3, 0.3, 1.0]))
    def get_event(self, data: st.DataObject, out: int, wait: float, ch: Optional[int] = None) -> None:
        if ch is None:
            ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        if wait:
            select.select([raw.dev.fileno()], [], [], wait)
            self.script.append("import select; select.select([ch[%d].dev.fileno()], [], [], %s)" % (ch, wait))
        raw.reply.clear()
        err = self._raw(ch, C.GET_EVENT, "rdma_ucm_get_event", {"response": raw.reply.address}, out=out,
                        code="ch[%d].get_event(out=%d)" % (ch, out))
        if out < 324:
            if err != ENOSPC:  # ucma_get_event: below the event less reserved and ece
                self._fail("GET_EVENT out %d: the kernel answered %s, the model expects ENOSPC" % (out, _en(err)))
            return
        mine = [m for m in self.ids if m.ch == ch]
        if err == EAGAIN:
            for m in mine:
                keep = {w for w in m.possible() if not w.q}
                if not keep:
                    self._fail("GET_EVENT on ch[%d]: EAGAIN, but %s (%s) has an event queued in every world: %s"
                               % (ch, m.name, _kind(m), sorted({w.q[0][0] for w in m.possible()})))
                m.worlds = keep
            return
        if err:
            self._fail("GET_EVENT on ch[%d]: the kernel answered %s, the model allows an event or EAGAIN" % (ch, _en(err)))
        uid, handle, ev, status = struct.unpack_from("<QIII", raw.reply.view)
        evname = abi.CmEventType(ev).name if ev in abi.CmEventType._value2member_map_ else str(ev)
        self.script[-1] += "  # %s uid %#x id %d status %d" % (evname, uid, handle, status)
        for m in mine:
            is_mc = any(u == uid for _, u in m.mcs.values())
            if not (m.uid == uid and m.uid and m.handle == handle) and not is_mc:
                continue
            keep = set()
            for w in m.possible():
                if w.q and w.q[0][0] == evname and (w.q[0][1] is None or status in w.q[0][1]) and \
                        (w.q[0][2] == (uid if is_mc else 0)):
                    keep.add(w.but(q=w.q[1:]))
            if not keep:
                self._fail("GET_EVENT on ch[%d]: %s status %d for %s (%s), which the model does not expect in %s"
                           % (ch, evname, status, m.name, _kind(m), _states(m)))
            m.worlds = keep
            m.events_read += 1
            if is_mc:
                mc = [k for k, (_, u) in m.mcs.items() if u == uid][0]
                m.mc_read[mc] = m.mc_read.get(mc, 0) + 1
            return
        self._fail("GET_EVENT on ch[%d]: %s (uid %#x, id %d, status %d) for no id of this channel the model knows"
                   % (ch, evname, uid, handle, status))

    @rule(data=st.data(), what=st.sampled_from(["short", "cmd beyond the table", "GET_OPTION", "in beyond the write",
                                                "cmd 23 on an unknown id", "hdr.cmd max"]))
    def malformed(self, data: st.DataObject, what: str) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        n = data.draw(st.integers(0, 7), label="short length")
        if what == "short":
            err, code, want = raw.write(bytes(n)), "ch[%d].write(bytes(%d))" % (ch, n), EINVAL
        elif what == "cmd beyond the table":
            err, code, want = raw.cmd(25, None, {}, body=bytes(16)), "ch[%d].cmd(25, None, {}, body=bytes(16))" % ch, EINVAL
        elif what == "hdr.cmd max":
            err, code, want = raw.cmd(U32, None, {}, body=bytes(16)), "ch[%d].cmd(%d, None, {}, body=bytes(16))" % (ch, U32), EINVAL
        elif what == "GET_OPTION":
            err, code, want = raw.cmd(13, None, {}, body=bytes(24)), "ch[%d].cmd(13, None, {}, body=bytes(24))" % ch, ENOSYS
        elif what == "in beyond the write":
            err = raw.cmd(C.DESTROY_ID, None, {}, size_in=17, body=bytes(16), out=4)
            code, want = "ch[%d].cmd(1, None, {}, size_in=17, body=bytes(16), out=4)" % ch, EINVAL
        else:
            err = raw.cmd(23, "rdma_ucm_resolve_ib_service", {"id": U32})
            code = "ch[%d].cmd(23, 'rdma_ucm_resolve_ib_service', {'id': %d})" % (ch, U32)
            want = ENOENT if since("cmd23_exists", self.version) else EINVAL
        type(self).stats["commands"] += 1
        type(self).stats["errnos"][("malformed: " + what, errno.errorcode.get(err, "ok") if err else "ok")] += 1
        self.script.append("err = %s  # -> %s" % (code, _en(err)))
        if err != want:
            self._fail("%s: the kernel answered %s, the model expects %s" % (what, _en(err), _en(want)))

    @rule(data=st.data(), choice=st.integers(0, 3))
    def progress(self, data: st.DataObject, choice: int) -> None:
        """The next valid step of one id, whatever its state: deep states come sooner."""
        ids = [m for m in self.ids if self.chans[m.ch] is not None]
        if not ids:
            return self.create_id(data, [PS.TCP, PS.UDP][choice % 2], QP.RC)
        m = data.draw(st.sampled_from(ids), label="id to advance")
        states = {w.state for w in m.worlds}
        pending = any(w.pend or w.q for w in m.possible())
        target = (m.ch, m.handle, m)
        if pending and choice < 2:
            return self.get_event(data, 336, 1.0, ch=m.ch)
        self._forced = target
        if states == {S.IDLE}:
            if choice == 0:
                return self.bind(data, "local", None, False)
            if choice == 1:
                return self.listen(data, 1)
            return self.resolve_addr(data, "local" if choice == 2 else "ib-gid", None, None, 2000, False)
        if states == {S.ADDR_BOUND}:
            if m.ud and choice < 2:
                return self.join(data, 0, "239.1.1.1", False, 4)
            if choice == 2:
                return self.listen(data, 1)
            return self.resolve_addr(data, "local", None, None, 2000, False)
        if states == {S.ADDR_RESOLVED}:  # a route resolved, or one IB_PATH sets (own GID, or none)
            return self.resolve_route(data, 1000) if choice < 2 else self.set_ib_path(data, [("own", "good")[choice - 2]], 0)
        if states == {S.ROUTE_RESOLVED}:
            return self.connect(data, 1, 0, 0)
        self._forced = None
        return self.get_event(data, 336, 0.3, ch=m.ch)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def kernel_agrees(self) -> None:
        problems = self.log.new_problems()
        if problems:
            self._fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))
        for i in self._open():
            dead = self.chans[i].alive()
            if dead:
                self._fail("ch[%d]: %s" % (i, dead))
        seen = netlink_states(self.pid)
        left = list((collections.Counter(seen) - collections.Counter(self.baseline)).elements())
        options = [self._netlink_options(m) for m in self.ids]
        if not match_states(options, left):
            self._fail("RDMA netlink lists this process's cm_ids in %s; the model has %s"
                       % (left or "no state", "; ".join("%s (%s) in %s" % (m.name, _kind(m), _states(m))
                                                         for m in self.ids) or "no id"))

    def _netlink_options(self, m: IdModel) -> List[Tuple[str, ...]]:
        opts: Set[Tuple[str, ...]] = set()
        for w in m.possible():
            if w.state is S.LISTEN and w.wild_listen:
                opts.add((K.LISTEN.name,) * self.devices)  # an internal listener per device, named after us
            elif w.dev:
                opts.add((kernel_state(w).name,))
            else:
                opts.add(())
        return sorted(opts)

    def teardown(self) -> None:
        try:
            for i, raw in enumerate(self.chans):
                if raw is not None:
                    raw.close()
                    self.chans[i] = None
            self.script.append("for c in ch: c and c.close()")
            nothing_left(self.pid, self.baseline, self.log, self._fail)
        finally:
            self.log.close()
