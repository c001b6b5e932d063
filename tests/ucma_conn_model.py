"""The connection half of the ucma model (issue #25): connections among the fuzzer's own ids.

:mod:`ucma_model` checks every command on ids that never meet (its CONNECTs go to a port
nobody listens on).  Here the ids connect to each other over the lab's own address
(loopback through Soft-RoCE: REQ, REP, RTU, DREQ and DREP are real MADs): listeners, the
requests' child ids, accept, reject, the RTU (ACCEPT with ``valid`` 0, librdmacm's
``rdma_establish``), disconnect from either side and from both at once, destroy in every
state, closing a channel with connections on it, and migrating ids with events unread.

The model
---------
Each id's kernel side is kept as its ``rdma_cm_state`` (what RDMA netlink shows, what
:mod:`pyrdmacm.kernel_rules` rules on) and its IB CM state (:data:`CM`): the two ends of a
connection move together, as the MADs between them make them.  Commands are answered by
:mod:`pyrdmacm.kernel_rules` first (the rdma_cm's state checks), then by the IB CM's state
(:meth:`ConnMachine._ib_cm`), as the kernel's handlers do.  What a command makes the other
end see becomes an *owed* event of that end (it must come, in order, within :data:`DUE`
seconds) or a *may* event (it may come, once: a TIMEWAIT_EXIT, or the outcome of two
messages crossing).  An event read that is neither owed nor allowed is a disagreement, as
is an owed event that does not come, an errno the model does not give, an id's state that
netlink does not show, a problem line in the kernel log, a dead fd, or a cm_id left when
every channel is closed.

The machine reads the events owed before each step (:meth:`ConnMachine._settle`), so that
what a step does depends on messages that have arrived, except in the rules that exist to
make two messages cross (``disconnect_both``, ``destroy_both``, ``connect_then_destroy_listener``,
``establish_then_destroy_passive``, ``migrate`` with events unread): there the model allows
each order the wire may take.

Events carry the peer's QP number (the REQ's in CONNECT_REQUEST, the REP's in
CONNECT_RESPONSE): the model checks them, which also tells which request a CONNECT_REQUEST
is for.  A failure carries a runnable script of :class:`pyrdmacm.conformance.Raw` calls.
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import select
import struct
import time
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from pyrdmacm import abi, kernel_rules
from pyrdmacm.addr import parse_address

from ucma_model import LOCAL, CLOSED_PORT, Disagreement, match_states, netlink_states

C = abi.UserCmCmd
K = abi.RdmaCmState
EV = abi.CmEventType
EINVAL = errno.EINVAL
ETIMEDOUT = errno.ETIMEDOUT

#: the ports listeners bind (LOCAL:port); CLOSED_PORT has none
PORTS = (7481, 7482)
#: seconds within which an owed event must come (loopback MADs under emulation take ms)
DUE = 5.0
MAX_IDS = 8
#: the IB CM's states of one end, as far as the model follows them
CM = ("", "req_sent", "req_rcvd", "rep_sent", "rep_rcvd", "est", "dreq_sent", "dreq_rcvd", "timewait",
      "ending", "idle")


@dataclasses.dataclass(eq=False)
class Cid:
    """One id of the machine, as the model sees its kernel side."""

    name: str  #: the reproducer's variable
    handle: int
    ch: int
    uid: int  #: 0: the kernel queues no event for it (a request's id before ACCEPT)
    role: str  #: "listener", "active", "passive"
    state: K  #: the rdma_cm's state
    cm: str = ""  #: the IB CM's state (:data:`CM`)
    port: int = 0  #: a listener's own port; an active id's destination port (the REQ's service id)
    qpn: int = 0  #: the QP number it sent (CONNECT's, ACCEPT's)
    peer: Optional["Cid"] = None
    #: events that must come, in order: (event, statuses, due time, QP number the event carries or None)
    owed: List[Tuple[str, FrozenSet[int], float, Optional[int]]] = dataclasses.field(default_factory=list)
    #: events that may come, each once: event -> statuses
    may: Dict[str, FrozenSet[int]] = dataclasses.field(default_factory=dict)
    read: int = 0  #: events read for it (DESTROY_ID's events_reported)
    disc: bool = False  #: a DISCONNECTED is owed or was read (the rdma_cm sends one at most)
    #: a listener's requests on their way: the active ids whose CONNECT_REQUEST is owed, by QP number
    coming: Dict[int, "Cid"] = dataclasses.field(default_factory=dict)


def _owe(c: Cid, event: str, statuses: FrozenSet[int], qpn: Optional[int] = None) -> None:
    if c.uid:
        c.owed.append((event, statuses, time.monotonic() + DUE, qpn))


class ConnMachine(RuleBasedStateMachine):
    """Connections among this process's ids on the lab's own address, checked against the model."""

    version: Tuple[int, int] = (0, 0)
    stats: Dict[str, Any] = {"sequences": 0, "commands": 0, "errnos": collections.Counter(),
                             "events": collections.Counter()}

    def __init__(self) -> None:
        super().__init__()
        from pyrdmacm.conformance import KernelLog, Raw

        self._Raw = Raw
        self.chans: List[Any] = [Raw(), Raw()]
        self.ids: List[Cid] = []
        self.counter = 0
        self.log = KernelLog()
        self.pid = os.getpid()
        self.baseline = netlink_states(self.pid)
        self.script: List[str] = ["from pyrdmacm.conformance import Raw", "from pyrdmacm.addr import parse_address",
                                  "import select", "ch = [Raw(), Raw()]"]
        ConnMachine.stats["sequences"] += 1

    # -- helpers ----------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        raise Disagreement("%s\n\nids: %s\n\nreproducer (kernel %d.%d):\n%s" % (
            what, "; ".join(_show(c) for c in self.ids) or "none", self.version[0], self.version[1],
            "\n".join(self.script)))

    def _next(self, prefix: str) -> str:
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def _send(self, c: Optional[Cid], ch: int, name: str, fields: Dict[str, Any], code: str) -> int:
        raw = self.chans[ch]
        err = raw.send(name, fields)
        ConnMachine.stats["commands"] += 1
        ConnMachine.stats["errnos"][(name, _en(err))] += 1
        self.script.append("err = %s  # %s -> %s" % (code, name, _en(err)))
        return err

    def _expect(self, what: str, err: int, want: int) -> None:
        if err != want:
            self._fail("%s: the kernel answered %s, the model expects %s" % (what, _en(err), _en(want)))

    def _table(self, c: Cid, cmd: "abi.UserCmCmd") -> int:
        return kernel_rules.refusal(cmd, c.state, device=True, qp_type=abi.QpType.RC,
                                    version=self.version if self.version != (0, 0) else kernel_rules.NEWEST)

    def _live(self, *roles: str) -> List[Cid]:
        return [c for c in self.ids if not roles or c.role in roles]

    # -- reading events ---------------------------------------------------------------------

    def _read(self, ch: int, wait: float) -> bool:
        """Read one event of channel ``ch`` (waiting up to ``wait`` s) and check it: whether
        one was read."""
        raw = self.chans[ch]
        if wait:
            select.select([raw.dev.fileno()], [], [], wait)
        raw.reply.clear()
        err = raw.get_event()
        ConnMachine.stats["commands"] += 1
        if err == errno.EAGAIN:
            return False
        if err:
            self.script.append("err = ch[%d].get_event()  # -> %s" % (ch, _en(err)))
            self._fail("GET_EVENT on ch[%d]: the kernel answered %s" % (ch, _en(err)))
        uid, handle, ev, status = struct.unpack_from("<QIII", raw.reply.view)
        qpn = struct.unpack_from("<I", raw.reply.view, 20)[0]
        status = status - (1 << 32) if status & 0x80000000 else status
        name = EV(ev).name if ev in EV._value2member_map_ else str(ev)
        ConnMachine.stats["events"][name] += 1
        self.script.append("select.select([ch[%d].dev.fileno()], [], [], %s); err = ch[%d].get_event()  "
                           "# %s id %d status %d qp_num %#x" % (ch, wait or 1.0, ch, name, handle, status, qpn))
        if name == "CONNECT_REQUEST":
            return self._request(ch, uid, handle, status, qpn)
        c = next((c for c in self.ids if c.ch == ch and c.handle == handle and c.uid == uid and c.uid), None)
        if c is None:
            self._fail("GET_EVENT on ch[%d]: %s (uid %#x, id %d, status %d) for no id of this channel the model "
                       "knows" % (ch, name, uid, handle, status))
        self._take(c, name, status, qpn)
        return True

    def _take(self, c: Cid, name: str, status: int, qpn: int) -> None:
        if c.owed and c.owed[0][0] == name and status in c.owed[0][1]:
            want_qpn = c.owed[0][3]
            if want_qpn is not None and qpn != want_qpn:
                self._fail("%s for %s carries qp_num %#x; the peer sent %#x" % (name, c.name, qpn, want_qpn))
            c.owed.pop(0)
        elif name in c.may and status in c.may[name]:
            del c.may[name]
        else:
            self._fail("%s status %d for %s, which the model does not expect (owed: %s; may: %s)" % (
                name, status, _show(c), [o[0] for o in c.owed] or "nothing", sorted(c.may) or "nothing"))
        c.read += 1
        if name == "DISCONNECTED":
            c.state = K.DISCONNECT
            c.may["TIMEWAIT_EXIT"] = frozenset({0})  # the IB CM's timewait ends with it, if the id lives
        if name in ("REJECTED",) and c.cm in ("req_sent", "rep_rcvd", "rep_sent"):
            c.cm = "idle"

    def _request(self, ch: int, uid: int, handle: int, status: int, qpn: int) -> bool:
        lst = next((c for c in self.ids if c.role == "listener" and c.ch == ch and c.uid == uid), None)
        if lst is None:
            self._fail("CONNECT_REQUEST (uid %#x, id %d) on ch[%d] for no listener of this channel" % (uid, handle, ch))
        active = lst.coming.pop(qpn, None)
        owed = next((o for o in lst.owed if o[0] == "CONNECT_REQUEST"), None)
        if active is None or owed is None or status != 0:
            self._fail("CONNECT_REQUEST status %d qp_num %#x on %s: no request with that QP number is on its way "
                       "(coming: %s)" % (status, qpn, lst.name, sorted(hex(q) for q in lst.coming)))
        lst.owed.remove(owed)
        lst.read += 1
        p = Cid(self._next("p"), handle, ch, 0, "passive", K.CONNECT, "req_rcvd", peer=active)
        self.script.append("%s = %d  # the request's id" % (p.name, handle))
        if active.peer is None and active.cm == "req_sent":
            active.peer = p
        else:  # the active id went away meanwhile (destroyed, or rejected its own REQ)
            p.cm = "idle"
        self.ids.append(p)
        return True

    def _settle(self, ids: Optional[List[Cid]] = None) -> None:
        """Read events until no id owes one; an owed event past its due time is a disagreement."""
        while True:
            owing = [c for c in (ids if ids is not None else self.ids) if c.owed and c in self.ids]
            if not owing:
                return
            due = min(c.owed[0][2] for c in owing)
            chans = sorted({c.ch for c in owing})
            left = due - time.monotonic()
            if left <= 0:
                late = [(c, c.owed[0][0]) for c in owing if c.owed[0][2] <= time.monotonic()]
                # one last look: what is queued now
                if not any(self._read(ch, 0) for ch in chans):
                    self._fail("owed events did not come within %.0f s: %s" % (
                        DUE, "; ".join("%s for %s" % (e, c.name) for c, e in late)))
                continue
            ready = select.select([self.chans[ch].dev.fileno() for ch in chans], [], [], left)[0]
            for ch in chans:
                if self.chans[ch].dev.fileno() in ready:
                    self._read(ch, 0)

    # -- rules: set-up ------------------------------------------------------------------------

    def _create(self, ch: int) -> Cid:
        raw = self.chans[ch]
        raw.reply.clear()
        uid = 0x1000 + self.counter + 1
        name = self._next("h")
        err = self._send(None, ch, "CREATE_ID", {"uid": uid, "ps": abi.PortSpace.TCP, "qp_type": abi.QpType.RC},
                         "ch[%d].send('CREATE_ID', {'uid': %d, 'ps': 0x106, 'qp_type': 2})" % (ch, uid))
        self._expect("CREATE_ID", err, 0)
        handle = int(raw.reply_of("CREATE_ID")["id"])
        self.script.append("%s = int(ch[%d].reply_of('CREATE_ID')['id'])" % (name, ch))
        c = Cid(name, handle, ch, uid, "", K.IDLE)
        self.ids.append(c)
        return c

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(ch=st.integers(0, 1), port=st.sampled_from(PORTS), backlog=st.sampled_from([8, 8, 1]))
    def listen(self, ch: int, port: int, backlog: int) -> None:
        self._settle()
        if any(c.role == "listener" and c.port == port for c in self.ids):
            return
        c = self._create(ch)
        addr = parse_address(LOCAL, port)
        err = self._send(c, ch, "BIND", {"id": c.handle, "addr_size": addr.size, "addr": addr.pack_storage()},
                         "ch[%d].bind(%s, parse_address(%r, %d))" % (ch, c.name, LOCAL, port))
        self._expect("BIND %s:%d" % (LOCAL, port), err, 0)
        err = self._send(c, ch, "LISTEN", {"id": c.handle, "backlog": backlog},
                         "ch[%d].send('LISTEN', {'id': %s, 'backlog': %d})" % (ch, c.name, backlog))
        self._expect("LISTEN", err, 0)
        c.role, c.state, c.port = "listener", K.LISTEN, port

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(ch=st.integers(0, 1), port=st.sampled_from(PORTS + PORTS + (CLOSED_PORT,)))
    def prepare(self, ch: int, port: int) -> None:
        """An active id: resolved to the lab's own address and ``port`` (the service its REQ
        names), its route resolved."""
        self._settle()
        c = self._create(ch)
        err = self._send(c, ch, "RESOLVE_ADDR", {"id": c.handle, "timeout_ms": 2000, "dst_size": 16,
                                                 "dst_addr": parse_address(LOCAL, port).pack_storage()},
                         "ch[%d].resolve(%s, parse_address(%r, %d))" % (ch, c.name, LOCAL, port))
        self._expect("RESOLVE_ADDR", err, 0)
        c.role, c.port = "active", port
        _owe(c, "ADDR_RESOLVED", frozenset({0}))
        self._settle([c])
        c.state = K.ADDR_RESOLVED
        err = self._send(c, ch, "RESOLVE_ROUTE", {"id": c.handle, "timeout_ms": 2000},
                         "ch[%d].send('RESOLVE_ROUTE', {'id': %s, 'timeout_ms': 2000})" % (ch, c.name))
        self._expect("RESOLVE_ROUTE", err, 0)
        _owe(c, "ROUTE_RESOLVED", frozenset({0}))
        self._settle([c])
        c.state = K.ROUTE_RESOLVED

    # -- rules: the connection's commands ----------------------------------------------------

    def _connect(self, a: Cid) -> None:
        port = a.port
        self.counter += 1
        qpn = 0x100000 + self.counter
        err = self._send(a, a.ch, "CONNECT", {"id": a.handle, "conn_param.valid": 1, "conn_param.qp_num": qpn,
                                              "conn_param.retry_count": 5, "conn_param.rnr_retry_count": 5,
                                              "conn_param.responder_resources": 1, "conn_param.initiator_depth": 1},
                         "ch[%d].send('CONNECT', {'id': %s, 'conn_param.valid': 1, 'conn_param.qp_num': %#x, "
                         "'conn_param.retry_count': 5, 'conn_param.rnr_retry_count': 5, "
                         "'conn_param.responder_resources': 1, 'conn_param.initiator_depth': 1})  # to port %d"
                         % (a.ch, a.name, qpn, port))
        want = self._table(a, C.CONNECT)
        self._expect("CONNECT from %s to port %d" % (_show(a), port), err, want)
        if err:
            return
        a.state, a.cm, a.qpn = K.CONNECT, "req_sent", qpn
        lst = next((c for c in self.ids if c.role == "listener" and c.port == port), None)
        if lst is None:
            _owe(a, "REJECTED", frozenset({8}))  # no listener on that service id: the IB CM's REJ 8
        else:
            lst.coming[qpn] = a
            _owe(lst, "CONNECT_REQUEST", frozenset({0}))

    @rule(data=st.data())
    def connect(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live("active")
        if ids:
            self._connect(data.draw(st.sampled_from(ids), label="active id"))

    def _left_out(self, c: Cid, what: str) -> bool:
        """Whether ``what`` on ``c`` is left out: it would trigger a recorded kernel bug on this
        kernel (REJECT or ACCEPT on an active id in REQ_SENT: its destroy then waits 102 s,
        ``rej_in_req_sent_keeps_the_req``; its replay shows it).  Counted in the figures."""
        from pyrdmacm.conformance import known_bug

        if c.cm == "req_sent" and known_bug("rej_in_req_sent_keeps_the_req",
                                               self.version if self.version != (0, 0) else kernel_rules.NEWEST):
            ConnMachine.stats["errnos"][(what, "left out: kernel bug rej_in_req_sent_keeps_the_req")] += 1
            self.script.append("# %s on %s left out: kernel bug rej_in_req_sent_keeps_the_req" % (what, c.name))
            return True
        return False

    def _accept(self, c: Cid, valid: int) -> None:
        if self._left_out(c, "ACCEPT"):
            return
        self.counter += 1
        qpn, uid = 0x200000 + self.counter, 0x2000 + self.counter
        err = self._send(c, c.ch, "ACCEPT", {"id": c.handle, "uid": uid, "conn_param.valid": valid,
                                             "conn_param.qp_num": qpn, "conn_param.retry_count": 5,
                                             "conn_param.rnr_retry_count": 5, "conn_param.responder_resources": 1,
                                             "conn_param.initiator_depth": 1},
                         "ch[%d].send('ACCEPT', {'id': %s, 'uid': %#x, 'conn_param.valid': %d, 'conn_param.qp_num': "
                         "%#x, 'conn_param.retry_count': 5, 'conn_param.rnr_retry_count': 5, "
                         "'conn_param.responder_resources': 1, 'conn_param.initiator_depth': 1})"
                         % (c.ch, c.name, uid, valid, qpn))
        want = self._table(c, C.ACCEPT)
        peer = c.peer if c.peer in self.ids else None
        if not want:
            if c.cm == "req_rcvd" and valid:  # the REP
                want = 0
                c.cm, c.qpn, c.uid = "rep_sent", qpn, uid  # ucma_accept: the uid takes from now on
                if peer is not None and peer.cm == "req_sent":
                    peer.cm = "rep_rcvd"
                    _owe(peer, "CONNECT_RESPONSE", frozenset({0}), qpn)
            elif c.cm == "rep_rcvd" and not valid:  # the RTU (rdma_establish)
                want = 0
                c.cm = "est"
                if peer is not None and peer.cm == "rep_sent":
                    peer.cm = "est"
                    _owe(peer, "ESTABLISHED", frozenset({0}))
            else:
                # the IB CM refuses the REP or RTU here; rdma_accept's error path rejects (REJ 28),
                # which the IB CM sends in the states where a REJ is legal
                want = EINVAL
                self._rejected_by(c, 28)
        self._expect("ACCEPT valid=%d on %s" % (valid, _show(c)), err, want)

    def _rejected_by(self, c: Cid, reason: int) -> bool:
        """``c`` sends a REJ (with ``reason``) if its IB CM state allows one: whether it did."""
        if c.cm not in ("req_sent", "req_rcvd", "rep_sent", "rep_rcvd"):
            return False
        peer = c.peer if c.peer in self.ids else None
        if c.cm == "req_sent":
            # found by the first campaigns (5.10 and 7.2, a model bug): a REJ sent before any
            # answer names no comm id of the other end, whose IB CM drops it: the request's
            # id stays in REQ_RCVD (REJECT and ACCEPT still legal there), an orphan whose
            # answers reach nobody
            if peer is not None:
                peer.peer = None
                peer.may["UNREACHABLE"] = frozenset({-ETIMEDOUT})  # its REP's retries may run out
            c.peer = None
        elif peer is not None and peer.cm in ("req_sent", "rep_sent", "rep_rcvd"):
            _owe(peer, "REJECTED", frozenset({reason}))
            peer.cm = "idle"
        c.cm = "idle"
        return True

    @rule(data=st.data(), valid=st.sampled_from([1, 1, 1, 0]))
    def accept(self, data: st.DataObject, valid: int) -> None:
        self._settle()
        ids = self._live("passive", "active")
        if ids:
            self._accept(data.draw(st.sampled_from(ids), label="id"), valid)

    @rule(data=st.data())
    def establish(self, data: st.DataObject) -> None:
        """ACCEPT with valid 0 on an active id that has its CONNECT_RESPONSE: the RTU."""
        self._settle()
        ids = [c for c in self._live("active") if c.cm == "rep_rcvd"]
        if ids:
            self._accept(data.draw(st.sampled_from(ids), label="active id"), 0)

    @rule(data=st.data(), reason=st.sampled_from([0, 28, 35]))
    def reject(self, data: st.DataObject, reason: int) -> None:
        self._settle()
        ids = self._live("passive", "active")
        if not ids:
            return
        self._reject(data.draw(st.sampled_from(ids), label="id"), reason)

    def _reject(self, c: Cid, reason: int) -> None:
        if self._left_out(c, "REJECT"):
            return
        err = self._send(c, c.ch, "REJECT", {"id": c.handle, "reason": reason},
                         "ch[%d].send('REJECT', {'id': %s, 'reason': %d})" % (c.ch, c.name, reason))
        want = self._table(c, C.REJECT)
        if not want:
            want = 0 if self._rejected_by(c, reason or 28) else EINVAL  # ucma_reject: 0 is 28
        self._expect("REJECT reason %d on %s" % (reason, _show(c)), err, want)

    def _write_disconnect(self, c: Cid) -> int:
        err = self._send(c, c.ch, "DISCONNECT", {"id": c.handle},
                         "ch[%d].send('DISCONNECT', {'id': %s})" % (c.ch, c.name))
        self._expect("DISCONNECT on %s" % _show(c), err, self._table(c, C.DISCONNECT))
        return err

    def _disconnect(self, c: Cid) -> None:
        if self._write_disconnect(c):
            return
        peer = c.peer if c.peer in self.ids else None
        if c.cm == "est":  # the DREQ (rdma_disconnect; elsewhere the IB CM refuses it, and that is ignored)
            c.cm = "dreq_sent"
            if peer is not None and peer.cm == "est":
                peer.cm = "dreq_rcvd"
                self._disconnected(peer)
        elif c.cm == "dreq_rcvd":  # the DREP: both ends enter timewait
            c.cm = "timewait"
            if peer is not None and peer.cm == "dreq_sent":
                peer.cm = "timewait"
                self._disconnected(peer)

    def _disconnected(self, c: Cid) -> None:
        """``c``'s rdma_cm gets DISCONNECTED (once: CONNECT -> DISCONNECT)."""
        if not c.disc:
            c.disc = True
            _owe(c, "DISCONNECTED", frozenset({0}))

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live()
        if ids:
            self._disconnect(data.draw(st.sampled_from(ids), label="id"))

    @rule(data=st.data())
    def disconnect_both(self, data: st.DataObject) -> None:
        """Both ends of an established connection write DISCONNECT, one right after the other."""
        self._settle()
        pairs = [c for c in self._live("active") if c.cm == "est" and c.peer in self.ids and c.peer.cm == "est"]
        if not pairs:
            return
        a = data.draw(st.sampled_from(pairs), label="connection")
        first, second = (a, a.peer) if data.draw(st.booleans(), label="active first") else (a.peer, a)
        self._write_disconnect(first)
        self._write_disconnect(second)
        # the second DISCONNECT is a DREQ crossing the first one's, or the DREP answering it
        # (the first DREQ came in between): either way each end gets one DISCONNECTED, and
        # either may go through timewait
        for end in (first, second):
            end.cm = "ending"
            self._disconnected(end)

    @precondition(lambda self: len(self.ids) < MAX_IDS - 2)
    @rule(ch=st.integers(0, 1), other=st.booleans(), port=st.sampled_from(PORTS))
    def handshake(self, ch: int, other: bool, port: int) -> None:
        """A whole connection at once (a listener on ``port`` if none is there, an active id
        on channel ``ch``, the passive end on the listener's): REQ, REP, RTU; the other rules
        then take it apart."""
        self._settle()
        if not any(c.role == "listener" and c.port == port for c in self.ids):
            self.listen(1 - ch if other else ch, port, 8)
        self.prepare(ch, port)
        a = self.ids[-1]
        self._connect(a)
        self._settle()
        p = a.peer
        if p is None or p not in self.ids:
            return
        self._accept(p, 1)
        self._settle()
        if a.cm == "rep_rcvd":
            self._accept(a, 0)
            self._settle()

    @rule(data=st.data())
    def progress(self, data: st.DataObject) -> None:
        """The next step of one id towards and through a connection, whatever its state."""
        self._settle()
        ids = [c for c in self._live("active", "passive") if c.cm not in ("", "idle", "timewait", "ending")
               or c.state is K.ROUTE_RESOLVED]
        if not ids:
            return
        c = data.draw(st.sampled_from(ids), label="id to advance")
        if c.state is K.ROUTE_RESOLVED:
            self._connect(c)
        elif c.cm == "req_rcvd" and data.draw(st.integers(0, 3), label="reject instead") == 0:
            self._reject(c, 28)
        elif c.cm == "req_rcvd":
            self._accept(c, 1)
        elif c.cm == "rep_rcvd":
            self._accept(c, 0)
        elif c.cm in ("est", "dreq_rcvd"):
            self._disconnect(c)
        elif c.cm in ("req_sent", "rep_sent", "dreq_sent"):
            self._read(c.ch, 0.5)  # its peer's turn: whatever comes

    # -- rules: ends ---------------------------------------------------------------------------

    def _gone(self, c: Cid) -> None:
        """What ``c``'s end going away (DESTROY_ID, its fd closed) makes its peer see
        (cm.c: cm_destroy_id by the IB CM's state)."""
        self.ids.remove(c)
        if c.role == "listener":
            for a in c.coming.values():
                if a in self.ids and a.cm == "req_sent":
                    # the REQ came after the listener went (REJ 8), or its request's id went with
                    # the listener (REJ 28)
                    a.owed = [o for o in a.owed if o[0] != "REJECTED"]
                    a.may["REJECTED"] = frozenset({8, 28})
                    a.cm = "idle"
            return
        peer = c.peer if c.peer in self.ids else None
        if peer is None:
            return
        if c.cm in ("req_sent", "req_rcvd", "rep_sent", "rep_rcvd"):
            self._rejected_by(c, 28 if c.cm != "req_sent" else 4)  # REQ_SENT: REJ 4 (timeout)
        elif c.cm == "est" and peer.cm == "est":  # a DREQ
            peer.cm = "dreq_rcvd"
            self._disconnected(peer)
        elif c.cm == "dreq_rcvd" and peer.cm == "dreq_sent":  # the DREP
            peer.cm = "timewait"
            self._disconnected(peer)
        peer.peer = None

    def _destroy(self, c: Cid) -> None:
        raw = self.chans[c.ch]
        raw.reply.clear()
        err = self._send(c, c.ch, "DESTROY_ID", {"id": c.handle},
                         "ch[%d].send('DESTROY_ID', {'id': %s})" % (c.ch, c.name))
        self._expect("DESTROY_ID of %s" % _show(c), err, 0)
        reported = int(raw.reply_of("DESTROY_ID")["events_reported"])
        if reported != c.read:
            self._fail("DESTROY_ID of %s: events_reported %d, but %d of its events were read" % (
                _show(c), reported, c.read))
        self._gone(c)

    @rule(data=st.data())
    def destroy(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live()
        if ids:
            self._destroy(data.draw(st.sampled_from(ids), label="id"))

    @rule(data=st.data())
    def destroy_both(self, data: st.DataObject) -> None:
        """Both ends of a connection destroyed, one right after the other: the first one's
        REJ or DREQ may reach the second before it goes, or not; nothing is left."""
        self._settle()
        pairs = [c for c in self._live("active") if c.peer in self.ids]
        if pairs:
            a = data.draw(st.sampled_from(pairs), label="connection")
            p = a.peer
            self._destroy(a)
            p.owed, p.may = [], {}  # whatever the first end's going sent, the second goes before reading it
            self._destroy(p)

    @rule(data=st.data())
    def connect_then_destroy_listener(self, data: st.DataObject) -> None:
        """A CONNECT to a listener, and the listener destroyed right after (the REQ in flight)."""
        self._settle()
        listening = {c.port: c for c in self._live("listener")}
        actives = [c for c in self._live("active") if c.state is K.ROUTE_RESOLVED and c.port in listening]
        if not actives:
            return
        a = data.draw(st.sampled_from(actives), label="active id")
        lst = listening[a.port]
        self._connect(a)
        lst.owed = []  # the CONNECT_REQUEST, if it came, goes with the listener unread
        self._destroy(lst)

    @rule(data=st.data())
    def establish_then_destroy_passive(self, data: st.DataObject) -> None:
        """The RTU, and the passive end destroyed right after: it goes in REP_SENT (a REJ, which
        the established active end may take or ignore) or in ESTABLISHED (a DREQ)."""
        self._settle()
        ids = [c for c in self._live("active") if c.cm == "rep_rcvd" and c.peer in self.ids]
        if not ids:
            return
        a = data.draw(st.sampled_from(ids), label="active id")
        p = a.peer
        self._accept(a, 0)
        p.owed, p.peer, a.peer = [], None, None  # p goes before it reads its ESTABLISHED
        self._destroy(p)
        a.cm = "ending"
        a.may["REJECTED"] = frozenset({28})
        a.may["DISCONNECTED"] = frozenset({0})

    @rule(data=st.data())
    def migrate(self, data: st.DataObject) -> None:
        """MIGRATE_ID to the other channel, events on their way or queued unread: they follow it."""
        ids = [c for c in self._live() if not c.coming]
        if not ids:
            return
        c = data.draw(st.sampled_from(ids), label="id")
        new = 1 - c.ch
        raw = self.chans[new]
        raw.reply.clear()
        err = self._send(c, new, "MIGRATE_ID", {"id": c.handle, "fd": self.chans[c.ch].dev.fileno()},
                         "ch[%d].send('MIGRATE_ID', {'id': %s, 'fd': ch[%d].dev.fileno()})" % (new, c.name, c.ch))
        self._expect("MIGRATE_ID of %s" % _show(c), err, 0)
        reported = int(raw.reply_of("MIGRATE_ID")["events_reported"])
        if reported != c.read:
            self._fail("MIGRATE_ID of %s: events_reported %d, %d were read" % (_show(c), reported, c.read))
        c.ch = new

    @rule(ch=st.integers(0, 1))
    def close_channel(self, ch: int) -> None:
        """Close a channel with its ids (the kernel destroys them: their peers see it), and open it again."""
        self._settle()
        self.chans[ch].close()
        self.script.append("ch[%d].close(); ch[%d] = Raw()" % (ch, ch))
        for c in [c for c in self.ids if c.ch == ch]:
            self._gone(c)
        self.chans[ch] = self._Raw()

    @rule(ch=st.integers(0, 1), wait=st.sampled_from([0.0, 0.2, 1.0]))
    def read(self, ch: int, wait: float) -> None:
        """Read one event if one comes (a TIMEWAIT_EXIT, the ones owed)."""
        self._read(ch, wait)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def kernel_agrees(self) -> None:
        problems = self.log.new_problems()
        if problems:
            self._fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))
        for i, raw in enumerate(self.chans):
            dead = raw.alive()
            if dead:
                self._fail("ch[%d]: %s" % (i, dead))
        seen = netlink_states(self.pid)
        left = list((collections.Counter(seen) - collections.Counter(self.baseline)).elements())
        options: List[List[Tuple[str, ...]]] = []
        for c in self.ids:
            opts = {(c.state.name,)}
            if c.disc or "DISCONNECTED" in c.may or any(o[0] == "DISCONNECTED" for o in c.owed):
                opts |= {(K.CONNECT.name,), (K.DISCONNECT.name,)}
            options.append(sorted(opts))
            for _ in c.coming:  # a request's id exists from the REQ's arrival, before its event is read
                options.append([(), (K.CONNECT.name,)])
        if not match_states(options, left):
            self._fail("RDMA netlink lists this process's cm_ids in %s; the model has %s" % (
                sorted(left) or "no state", "; ".join(_show(c) for c in self.ids) or "no id"))

    def teardown(self) -> None:
        try:
            for raw in self.chans:
                raw.close()
            self.script.append("for c in ch: c.close()")
            deadline = time.monotonic() + 2.0
            while True:  # ids in timewait go when it ends
                left = list((collections.Counter(netlink_states(self.pid)) -
                             collections.Counter(self.baseline)).elements())
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if left:
                self._fail("every channel is closed, yet RDMA netlink still lists cm_ids of this process: %s" % left)
            problems = self.log.new_problems()
            if problems:
                self._fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))
        finally:
            self.log.close()


def _en(err: int) -> str:
    return "ok" if err == 0 else errno.errorcode.get(err, str(err))


def _show(c: Cid) -> str:
    return "%s (%s, %s%s, ch[%d]%s)" % (c.name, c.role or "new", c.state.name, "/" + c.cm if c.cm else "", c.ch,
                                        ", peer %s" % c.peer.name if c.peer is not None else "")


# -- campaigns -------------------------------------------------------------------------------

def run_round(seed: int, examples: int, steps: int) -> Optional[str]:
    """One hypothesis run of :class:`ConnMachine`: None, or the (shrunk) failure's report."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import get_state_machine_test

    test = get_state_machine_test(ConnMachine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate], print_blob=False))
    test = hypothesis.seed(seed)(test)
    try:
        test()
    except Disagreement as e:
        return str(e)
    return None


def campaign(seconds: float, seed: int, examples: int = 10, steps: int = 25,
             out: Any = print) -> Dict[str, Any]:
    from pyrdmacm.conformance import kernel_version

    ConnMachine.version = kernel_version()
    ConnMachine.stats = {"sequences": 0, "commands": 0, "errnos": collections.Counter(),
                         "events": collections.Counter()}
    start = time.monotonic()
    found: List[Tuple[int, str]] = []
    rounds = 0
    while time.monotonic() - start < seconds:
        s = seed + rounds
        rounds += 1
        report = run_round(s, examples, steps)
        if report:
            found.append((s, report))
            out("== disagreement (connections, seed %d) ==\n%s\n" % (s, report))
    st_ = ConnMachine.stats
    return {"machine": "connections", "kernel": os.uname().release, "seed": seed, "rounds": rounds,
            "seconds": round(time.monotonic() - start, 1), "sequences": st_["sequences"],
            "commands": st_["commands"], "errnos": st_["errnos"], "events": st_["events"], "disagreements": found}


def print_figures(fig: Dict[str, Any], out: Any = print) -> None:
    out("kernel %s, connections: %d sequences, %d commands in %.0f s (%d rounds from seed %d); %d disagreements"
        % (fig["kernel"], fig["sequences"], fig["commands"], fig["seconds"], fig["rounds"], fig["seed"],
           len(fig["disagreements"])))
    out("  events read: %s" % (", ".join("%s %d" % (e, n) for e, n in sorted(fig["events"].items())) or "none"))
    by_cmd: Dict[str, List[str]] = collections.defaultdict(list)
    for (cmd, err), n in sorted(fig["errnos"].items()):
        by_cmd[cmd].append("%s %d" % (err, n))
    for cmd in sorted(by_cmd):
        out("  %-34s %s" % (cmd, ", ".join(by_cmd[cmd])))
    for s, report in fig["disagreements"]:
        out("disagreement, seed %d: %s" % (s, report.splitlines()[0]))


def main(argv: Optional[List[str]] = None) -> int:
    import argparse
    import json

    p = argparse.ArgumentParser(description="fuzz the running kernel's connections with the model (see tools/fuzz)")
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--examples", type=int, default=10, help="sequences per round (default 10)")
    p.add_argument("--steps", type=int, default=25, help="steps per sequence at most (default 25)")
    p.add_argument("--json", metavar="FILE", help="write the figures there too (relative: in $LAB_OUT)")
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else int.from_bytes(os.urandom(4), "little")
    fig = campaign(a.minutes * 60, seed, a.examples, a.steps)
    print_figures(fig)
    if a.json:
        path = a.json if os.path.isabs(a.json) else os.path.join(os.environ.get("LAB_OUT", "."), a.json)
        with open(path, "w") as f:
            json.dump({**fig, "errnos": [[c, e, n] for (c, e), n in sorted(fig["errnos"].items())]}, f, indent=1)
    return 1 if fig["disagreements"] else 0


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
