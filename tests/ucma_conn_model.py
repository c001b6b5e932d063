"""The connection half of the ucma model (issue #25): connections among the fuzzer's own ids.

:mod:`ucma_model` checks every command on ids that never meet (its CONNECTs go to a port
nobody listens on).  Here the ids connect to each other over the lab's own address,
IPv4, IPv6 or IPv6 link-local with its zone, one a sequence (loopback through Soft-RoCE: REQ,
REP, RTU, DREQ and DREP are real MADs): listeners, the
requests' child ids, accept, reject, the RTU (ACCEPT with ``valid`` 0, librdmacm's
``rdma_establish``), disconnect from either side and from both at once, destroy in every
state, closing a channel with connections on it, and migrating ids with events unread; and
datagram ids' requests (UDP's port space: a SIDR REQ answered by a SIDR REP that accepts with
a QP number or rejects, or by none; a listener or either end going first).

Its four channels are this host's, or, across the lab's pair topology (``tools/fuzz
--topology pair``), channels 0 and 1 are lab-b's and 2 and 3 lab-a's, written there by
tests/ucma_remote.py's channel server: every listener binds its own host's address, every
active id resolves the address of the host it draws, so a connection's two ends are on one
host or on two (the link-local address with the zone of each host's own eth0).  Each host's
netlink states, kernel log and leftovers are checked on that host; the model does not care
where an id is, but for the listener a request reaches (its host and port).

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
import errno
import os
from typing import Any, Dict, List, Optional, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

from pyrdmacm import abi, kernel_rules
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.addr import parse_address

from ucma_conn_crossing import Crossings
from ucma_conn_datagrams import Datagrams
from ucma_conn_hosts import Hosts
from ucma_conn_reading import Reading
from ucma_conn_ends import (CHANNELS, CONN_PARAM as _CONN_PARAM, MAX_IDS, PORTS, Cid, accepted, disconnect_sent, gone,
                            owe, rejected_by, show)
from ucma_world import CLOSED_PORT, Disagreement, _en

C = abi.UserCmCmd
#: fields the reproducer shows in hex
_HEX = frozenset({"uid", "conn_param.qp_num"})
_CONN = CODECS["rdma_ucm_conn_param"]
K = abi.RdmaCmState
EV = abi.CmEventType
EINVAL = errno.EINVAL
ETIMEDOUT = errno.ETIMEDOUT

#: the address families a sequence's connections use, one a sequence (a listener bound to an
#: address of one family takes no request to the other's: a case the model leaves out): eth0's
#: IPv4 address, its global IPv6 one, its IPv6 link-local one with the zone (``sin6_scope_id``:
#: the interface of the host whose id binds or resolves it)
WHERE = ("IPv4", "IPv6", "IPv6 link-local")


#: the IB CM states where REJECT (or a refused ACCEPT, whose error path rejects) triggers a
#: recorded kernel bug (pyrdmacm.conformance.bugs): the active end's REQ_SENT, the passive
#: end's REP_SENT
LEFT_OUT = {"req_sent": "rej_in_req_sent_keeps_the_req", "rep_sent": "rej_in_rep_sent_keeps_the_rep"}


class ConnMachine(Hosts, Reading, Crossings, Datagrams, RuleBasedStateMachine):
    """Connections among this process's ids on the lab's own address, or with the peer's
    across the pair topology's link, checked against the model."""

    version: Tuple[int, int] = (0, 0)
    stats: Dict[str, Any] = {"sequences": 0, "commands": 0, "errnos": collections.Counter(),
                             "events": collections.Counter(), "across": 0}

    def __init__(self) -> None:
        super().__init__()
        self.ids: List[Cid] = []
        self.counter = 0
        self._place(self.far)
        ConnMachine.stats["sequences"] += 1

    @initialize(where=st.sampled_from(WHERE))
    def family(self, where: str) -> None:
        """The sequence's address family (:data:`WHERE`)."""
        for h, info in enumerate(self.hosts):
            if not info[where]:
                self._fail("host %d's eth0 has no %s address" % (h, where))
        self.where = where
        ConnMachine.stats.setdefault("addresses", collections.Counter())[where] += 1
        self.script.append("# every listener binds its host's %s address, every active id resolves its "
                           "listener's host's: %s" % (where, ", ".join(self._addr(h, h) for h in range(len(self.hosts)))))

    def _listener(self, host: int, port: int, ud: bool = False) -> Optional[Cid]:
        """The listener on ``host``'s ``port`` (a datagram one with ``ud``), if there is one."""
        role = "ud-listener" if ud else "listener"
        return next((c for c in self.ids if c.role == role and c.port == port and c.at == host), None)

    # -- helpers ----------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        raise Disagreement("%s\n\nids: %s\n\nreproducer (kernel %d.%d):\n%s" % (
            what, "; ".join(show(c) for c in self.ids) or "none", self.version[0], self.version[1],
            "\n".join(self.script)))

    def _next(self, prefix: str) -> str:
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def _send(self, ch: int, name: str, fields: Dict[str, Any], shown: Optional[Dict[str, str]] = None,
              note: str = "") -> int:
        """Write command ``name`` with ``fields`` on channel ``ch``; the reproducer's line is
        made from the same fields (an id by its variable, ``shown`` for values a script writes
        otherwise: a packed address, another channel's fd)."""
        raw = self.chans[ch]
        err = raw.send(name, fields) if self.host_of[ch] == 0 else self._on_peer(name, raw.send, name, fields)
        ConnMachine.stats["commands"] += 1
        ConnMachine.stats["errnos"][(name, _en(err))] += 1
        shown = shown or {}
        # handles are per channel: this one's ids first (MIGRATE_ID names another channel's)
        names = {c.handle: c.name for c in sorted(self.ids, key=lambda c: c.ch == ch)}
        args = ", ".join("%r: %s" % (k, shown[k] if k in shown else names.get(v, str(v)) if k == "id" else
                                     "%#x" % v if k in _HEX else repr(v)) for k, v in fields.items())
        self.script.append("err = ch[%d].send(%r, {%s})  # %s -> %s%s" % (ch, name, args, name, _en(err), note))
        return err

    def _expect(self, what: str, err: int, want: int) -> None:
        if err != want:
            self._fail("%s: the kernel answered %s, the model expects %s" % (what, _en(err), _en(want)))

    def _table(self, c: Cid, cmd: "abi.UserCmCmd") -> int:
        return kernel_rules.refusal(cmd, c.state, device=True, qp_type=abi.QpType.UD if c.ud else abi.QpType.RC,
                                    version=self.version if self.version != (0, 0) else kernel_rules.NEWEST)

    def _live(self, *roles: str) -> List[Cid]:
        return [c for c in self.ids if not roles or c.role in roles]

    # -- rules: set-up ------------------------------------------------------------------------

    def _create(self, ch: int, ud: bool = False) -> Cid:
        raw = self.chans[ch]
        raw.reply.clear()
        uid = 0x1000 + self.counter + 1
        name = self._next("h")
        ps, qp = (abi.PortSpace.UDP, abi.QpType.UD) if ud else (abi.PortSpace.TCP, abi.QpType.RC)
        err = self._send(ch, "CREATE_ID", {"uid": uid, "ps": int(ps), "qp_type": int(qp)})
        self._expect("CREATE_ID", err, 0)
        handle = int(raw.reply_of("CREATE_ID")["id"])
        self.script.append("%s = int(ch[%d].reply_of('CREATE_ID')['id'])" % (name, ch))
        c = Cid(name, handle, ch, uid, "", K.IDLE, at=self.host_of[ch])
        self.ids.append(c)
        return c

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(ch=st.integers(0, CHANNELS - 1), port=st.sampled_from(PORTS), backlog=st.sampled_from([8, 8, 1]))
    def listen(self, ch: int, port: int, backlog: int, ud: bool = False) -> None:
        """A listener on channel ``ch``, bound to its host's address and ``port`` (unless one is there)."""
        self._settle()
        role = "ud-listener" if ud else "listener"
        if self._listener(self.host_of[ch], port, ud) is not None:
            return
        c = self._create(ch, ud)
        where = self._addr(c.at, c.at)
        addr = parse_address(where, port)
        err = self._send(ch, "BIND", {"id": c.handle, "addr_size": addr.size, "addr": addr.pack_storage()},
                         {"addr": "parse_address(%r, %d).pack_storage()" % (where, port)})
        self._expect("BIND %s port %d" % (where, port), err, 0)
        err = self._send(ch, "LISTEN", {"id": c.handle, "backlog": backlog})
        self._expect("LISTEN", err, 0)
        c.role, c.state, c.port = role, K.LISTEN, port

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(ch=st.integers(0, CHANNELS - 1), port=st.sampled_from(PORTS + PORTS + (CLOSED_PORT,)),
          to=st.integers(0, CHANNELS - 1))
    def prepare(self, ch: int, port: int, to: int, ud: bool = False) -> None:
        """An active id on channel ``ch`` (with ``ud`` a datagram one): resolved to the address
        of channel ``to``'s host and ``port`` (the service its REQ names), its route resolved."""
        self._settle()
        c = self._create(ch, ud)
        c.to = self.host_of[to]
        where = self._addr(c.at, c.to)
        dst = parse_address(where, port)
        err = self._send(ch, "RESOLVE_ADDR", {"id": c.handle, "timeout_ms": 2000, "dst_size": dst.size,
                                             "dst_addr": dst.pack_storage()},
                         {"dst_addr": "parse_address(%r, %d).pack_storage()" % (where, port)})
        self._expect("RESOLVE_ADDR", err, 0)
        c.role, c.port = "ud-active" if ud else "active", port
        owe(c, "ADDR_RESOLVED", frozenset({0}))
        self._settle([c])
        c.state = K.ADDR_RESOLVED
        err = self._send(ch, "RESOLVE_ROUTE", {"id": c.handle, "timeout_ms": 2000})
        self._expect("RESOLVE_ROUTE", err, 0)
        owe(c, "ROUTE_RESOLVED", frozenset({0}))
        self._settle([c])
        c.state = K.ROUTE_RESOLVED

    # -- rules: the connection's commands ----------------------------------------------------

    def _connect(self, a: Cid) -> None:
        port = a.port
        self.counter += 1
        qpn = 0x100000 + self.counter
        err = self._send(a.ch, "CONNECT", {"id": a.handle, "conn_param.valid": 1, "conn_param.qp_num": qpn,
                                           **_CONN_PARAM}, note=" (to port %d)" % port)
        want = self._table(a, C.CONNECT)
        self._expect("CONNECT from %s to port %d" % (show(a), port), err, want)
        if err:
            return
        a.state, a.cm, a.qpn = K.CONNECT, "req_sent", qpn
        lst = self._listener(a.to, port)
        if lst is None:
            owe(a, "REJECTED", frozenset({8}))  # no listener on that service id: the IB CM's REJ 8
        else:
            lst.coming[qpn] = a
            owe(lst, "CONNECT_REQUEST", frozenset({0}))

    @rule(data=st.data())
    def connect(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live("active")
        if ids:
            self._connect(data.draw(st.sampled_from(ids), label="active id"))

    def _left_out(self, c: Cid, what: str) -> bool:
        """Whether ``what`` (REJECT or ACCEPT) on ``c`` is left out: it would trigger a
        recorded kernel bug on this kernel (:data:`LEFT_OUT`: the REJ that leaves a REQ or a
        REP retrying, so that the id's destroy waits 68-102 s; their replays show them).
        Counted in the figures."""
        from pyrdmacm.conformance import known_bug

        bug = LEFT_OUT.get(c.cm)
        if bug and known_bug(bug, self.version if self.version != (0, 0) else kernel_rules.NEWEST):
            ConnMachine.stats["errnos"][(what, "left out: kernel bug %s" % bug)] += 1
            self.script.append("# %s on %s left out: kernel bug %s" % (what, c.name, bug))
            return True
        return False

    def _accept(self, c: Cid, valid: int) -> None:
        if self._left_out(c, "ACCEPT"):
            return
        self.counter += 1
        qpn, uid = 0x200000 + self.counter, 0x2000 + self.counter
        err = self._send(c.ch, "ACCEPT", {"id": c.handle, "uid": uid, "conn_param.valid": valid,
                                          "conn_param.qp_num": qpn, **_CONN_PARAM})
        want = self._table(c, C.ACCEPT)
        if not want and c.cm == "rej_coming":  # the peer's REJ 4 on its way: taken, or refused
            c.cm = "req_rcvd" if err == 0 else "idle"
        if not want:
            want = accepted(self.ids, c, valid, qpn, uid)  # idle: refused (EINVAL)
        self._expect("ACCEPT valid=%d on %s" % (valid, show(c)), err, want)

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
        err = self._send(c.ch, "REJECT", {"id": c.handle, "reason": reason})
        want = self._table(c, C.REJECT)
        if not want and c.cm == "rej_coming":  # the peer's REJ 4 on its way: taken, or refused
            c.cm = "req_rcvd" if err == 0 else "idle"
        if not want:
            want = 0 if rejected_by(self.ids, c, reason or 28) else EINVAL  # ucma_reject: 0 is 28
        self._expect("REJECT reason %d on %s" % (reason, show(c)), err, want)

    def _write_disconnect(self, c: Cid) -> int:
        err = self._send(c.ch, "DISCONNECT", {"id": c.handle})
        self._expect("DISCONNECT on %s" % show(c), err, self._table(c, C.DISCONNECT))
        return err

    def _disconnect(self, c: Cid) -> None:
        if self._write_disconnect(c):
            return
        disconnect_sent(self.ids, c)

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live()
        if ids:
            self._disconnect(data.draw(st.sampled_from(ids), label="id"))

    @precondition(lambda self: len(self.ids) < MAX_IDS - 2)
    @rule(ch=st.integers(0, CHANNELS - 1), lch=st.integers(0, CHANNELS - 1), port=st.sampled_from(PORTS))
    def handshake(self, ch: int, lch: int, port: int) -> None:
        """A whole connection at once (a listener on ``port`` of channel ``lch``'s host, on
        ``lch`` if none is there; an active id on channel ``ch``, the passive end on the
        listener's): REQ, REP, RTU; the other rules then take it apart."""
        self._settle()
        self.listen(lch, port, 8)
        self.prepare(ch, port, lch)
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

    @precondition(lambda self: len(self.ids) < MAX_IDS - 1)
    @rule(ch=st.integers(0, CHANNELS - 1), lch=st.integers(0, CHANNELS - 1), port=st.sampled_from(PORTS))
    def request(self, ch: int, lch: int, port: int) -> None:
        """A connection request left unanswered (a listener on ``port`` if none is there): its
        id in REQ_RCVD for the rules that accept, reject, destroy or migrate it, its active end
        in REQ_SENT.  (Requests come from ``handshake`` answered at once, and a lone
        ``connect`` finds an id resolved and a listener on its port seldom: without this rule
        a campaign of 400 sequences rejected no request.)"""
        self._settle()
        self.listen(lch, port, 8)
        self.prepare(ch, port, lch)
        self._connect(self.ids[-1])
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
        elif c.cm in ("req_rcvd", "rej_coming") and data.draw(st.integers(0, 3), label="reject instead") == 0:
            self._reject(c, 28)
        elif c.cm in ("req_rcvd", "rej_coming"):
            self._accept(c, 1)
        elif c.cm == "rep_rcvd":
            self._accept(c, 0)
        elif c.cm in ("est", "dreq_rcvd"):
            self._disconnect(c)
        elif c.cm in ("req_sent", "rep_sent", "dreq_sent"):
            self._read(c.ch, 0.5)  # its peer's turn: whatever comes

    # -- rules: ends ---------------------------------------------------------------------------

    def _destroy(self, c: Cid) -> None:
        raw = self.chans[c.ch]
        raw.reply.clear()
        err = self._send(c.ch, "DESTROY_ID", {"id": c.handle})
        self._expect("DESTROY_ID of %s" % show(c), err, 0)
        reported = int(raw.reply_of("DESTROY_ID")["events_reported"])
        if reported != c.read:
            self._fail("DESTROY_ID of %s: events_reported %d, but %d of its events were read" % (
                show(c), reported, c.read))
        gone(self.ids, c)

    @rule(data=st.data())
    def destroy(self, data: st.DataObject) -> None:
        self._settle()
        ids = self._live()
        if ids:
            self._destroy(data.draw(st.sampled_from(ids), label="id"))

    @rule(ch=st.integers(0, CHANNELS - 1))
    def close_channel(self, ch: int) -> None:
        """Close a channel with its ids (the kernel destroys them: their peers see it), and open it again."""
        self._settle()
        if self.host_of[ch]:
            self._on_peer("closing ch[%d]" % ch, self.chans[ch].close)
        else:
            self.chans[ch].close()
        self.script.append("ch[%d].close(); ch[%d] = %s" % (ch, ch, "far.channel(%d)" % ch if self.host_of[ch] else "Raw()"))
        for c in [c for c in self.ids if c.ch == ch]:
            gone(self.ids, c)
        self.chans[ch] = self._open(ch)

    @rule(ch=st.integers(0, CHANNELS - 1), wait=st.sampled_from([0.0, 0.2, 1.0]))
    def read(self, ch: int, wait: float) -> None:
        """Read one event if one comes (a TIMEWAIT_EXIT, the ones owed)."""
        self._read(ch, wait)

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
    except Exception as e:
        import fuzz_runner
        from hypothesis.errors import FlakyStrategyDefinition

        if isinstance(e, FlakyStrategyDefinition):
            # a sequence hypothesis had begun before went another way this time (an event that
            # may come came, or not: the draws that follow differ): the round ends there
            ConnMachine.stats["cut"] = ConnMachine.stats.get("cut", 0) + 1
            return None
        found = fuzz_runner.finding(e, Disagreement)  # FlakyFailure: its replay went another way
        if found is None:
            raise
        return "%s\n\n(found once; replayed, the sequence went another way: the timing is part of it)" % found
    return None


def bounded(seed: int, examples: int, steps: int) -> Optional[str]:
    """At least ``examples`` sequences, in rounds from ``seed`` (a round cut short by timing
    is followed by the next seed's): None, or the first failure's report."""
    n = 0
    while ConnMachine.stats["sequences"] < examples:
        report = run_round(seed + n, examples - ConnMachine.stats["sequences"], steps)
        n += 1
        if report is not None:
            return report
    return None


def reset_stats() -> None:
    """The figures from zero: sequences, commands, errnos per command, events by kind, the
    address families drawn, requests across two hosts."""
    ConnMachine.stats = {"sequences": 0, "commands": 0, "errnos": collections.Counter(),
                         "events": collections.Counter(), "addresses": collections.Counter(), "across": 0,
                         "cut": 0}


class Pinned:
    """hypothesis' data object in a replay: the first option, or the label's pinned value."""

    def __init__(self, **pinned: Any) -> None:
        self.pinned = pinned

    def draw(self, strategy: Any, label: Optional[str] = None) -> Any:
        if label in self.pinned:
            return self.pinned[label]
        return strategy.example()


def passive_end_disconnects(m: ConnMachine, a: Cid) -> None:
    """A replay's teardown of ``a``'s established connection from its passive end: its DREQ,
    then ``a``'s DREP; each end DISCONNECTED once, netlink as the model after each step."""
    p = a.peer
    assert p is not None and a.cm == p.cm == "est" and a.state is p.state is K.CONNECT
    m._disconnect(p)
    m._settle()
    m.kernel_agrees()
    assert a.state is K.DISCONNECT and a.cm == "dreq_rcvd"
    m._disconnect(a)  # the DREP
    m._settle()
    m.kernel_agrees()
    assert p.state is K.DISCONNECT and a.cm == p.cm == "timewait"
    assert ConnMachine.stats["events"]["DISCONNECTED"] == 2


def use_peer(host: Optional[str]) -> None:
    """Channels 2 and 3 on the channel server of ``host`` (tests/ucma_remote.py serve runs
    there: the pair topology's peer), or on this host (None)."""
    from ucma_remote import RemoteKernel
    from pyrdmacm.conformance import kernel_version

    if ConnMachine.far is not None:
        ConnMachine.far.close()
    ConnMachine.far = None if host is None else RemoteKernel(host)
    ConnMachine.version = kernel_version()
    if ConnMachine.far is not None and ConnMachine.far.version != ConnMachine.version:
        raise SystemExit("the peer runs kernel %s, this host %s: the model takes one kernel's rules" % (
            ConnMachine.far.release, os.uname().release))


def campaign(seconds: float, seed: int, examples: int = 10, steps: int = 25, out: Any = print,
             peer: Optional[str] = None) -> Dict[str, Any]:
    """Rounds of :func:`run_round` until ``seconds`` have passed (channels 2 and 3 on
    ``peer``'s channel server when given): the figures (events read by kind among them), and
    each disagreement's script."""
    import fuzz_runner

    use_peer(peer)
    reset_stats()
    n, found, took = fuzz_runner.rounds(seconds, seed, lambda s: run_round(s, examples, steps), "connections, ", out)
    st_ = ConnMachine.stats
    return {"machine": "connections" + (" across two hosts" if peer else ""), "kernel": os.uname().release, "seed": seed, "rounds": n, "seconds": took,
            "sequences": st_["sequences"], "commands": st_["commands"], "errnos": st_["errnos"],
            "events": st_["events"], "addresses": st_["addresses"], "across": st_["across"],
            "rounds cut by timing": st_["cut"], "disagreements": found}


def main(argv: Optional[List[str]] = None) -> int:
    import fuzz_runner

    p = fuzz_runner.parser("fuzz the running kernel's connections with the model (see tools/fuzz)", 10, 25)
    p.add_argument("--peer", metavar="HOST", help="channels 2 and 3 on HOST's channel server (tests/ucma_remote.py "
                   "serve: the pair topology's peer)")
    a = p.parse_args(argv)
    return fuzz_runner.finish(campaign(a.minutes * 60, fuzz_runner.seed_of(a), a.examples, a.steps,
                                       peer=a.peer), a.json)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
