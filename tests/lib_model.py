"""The library's own contract, fuzzed (issue #25, second part): a hypothesis state machine that
drives pyrdmacm's public API -- :class:`~pyrdmacm.EventChannel` and :class:`~pyrdmacm.CmId` --
through connections between a server channel and a client channel (TCP's, and UDP's through
SIDR), and multicast memberships of the client's datagram ids, with each channel read
by the caller (``get_event``), by a reader thread beside it, or by an asyncio task
(:class:`~pyrdmacm.aio.AsyncChannel`'s ``get_event``) on a loop in a thread of its own, and
checks what the docs promise:

- every event the kernel queued for an id is handed to the program once (``destroy()``'s
  and ``migrate()``'s ``events_reported`` equal the events handed for the id, a membership's
  ``leave()``'s those handed for it; no event object is handed twice), and every call's
  outcome event comes;
- an id's state after each event read by the caller is the table's (:func:`pyrdmacm.state.after_event`);
- a channel closed while a thread waits on it ends that wait at once;
- nothing is left: no cm_id of the process in the kernel (RDMA netlink, on the real kernel),
  no fd open beyond what the open channels hold.

The tier gives the machine its :class:`conn_behaviour.Link` (``LibMachine.link``): the fake
fabric's two hosts (tests/test_lib_model.py), or both ends on the lab guest's own address
(tests/kernel/test_lib_model_lab.py).  A failure shrinks (hypothesis) to the short sequence
of rules that shows it; the message carries that sequence twice: as the calls of the public
API and the events handed, and as a runnable script (:meth:`LibMachine.script`) that replays
the same rules with the same choices (:class:`Replay`, :class:`Pick`) on the same tier and
fails the same way.
"""

from __future__ import annotations

import collections
import errno
import os
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from pyrdmacm import CmId, State
from pyrdmacm.core import poll as _wait
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import PortSpace
from pyrdmacm.errors import KernelError, RdmaCmError, StateError
from pyrdmacm.state import after_event, kind_of

from lib_groups import MAX_IDS, Groups
from lib_script import Pick, Tier, _Pinned, close_fabrics, fake_tier, kernel_tier, recorded
from lib_sides import _READ_BY, READERS, Broken, Side, _fds

__all__ = ["Broken", "LibMachine", "Pick", "Replay", "Tier", "fake_tier", "kernel_tier", "close_fabrics", "run",
           "replay_twice", "fresh_stats", "READERS"]

#: how long an outcome may take (loopback MADs; the fake's timers)
DUE = 10.0


def fresh_stats() -> Dict[str, Any]:
    """A campaign's counters: sequences, calls, events handed by kind, channels by reader."""
    return {"sequences": 0, "calls": 0, "events": {}, "readers": {how: 0 for how in READERS},
            "refusals": collections.Counter()}


class LibMachine(Groups, RuleBasedStateMachine):
    """Connections through pyrdmacm's public API, checked against what its docs promise."""

    #: where it runs: the runner (:func:`run`) or the script (:class:`Replay`) sets it
    tier: Tier
    stats: Dict[str, Any] = fresh_stats()

    def __init__(self) -> None:
        super().__init__()
        tier = type(self).tier
        self.kernel_ids = tier.kernel_ids
        self.link = tier.make_link()
        #: the script's lines: each rule the program called, with what it picked
        self.code: List[str] = []
        self._depth = 0  #: rules running: 1 in a rule the program called, more in those it calls
        self._picks: List[int] = []
        _wait.signal_pipe()  # the process's (two fds for its life, made at its first main-thread wait): made before the count
        self.fd_base = _fds()
        self.sides: Dict[str, Side] = {}
        self.ids: List[CmId] = []
        self.roles: Dict[int, str] = {}  #: id(cm) -> listener / active / passive
        self.handed: Dict[int, int] = {}  #: id(cm) -> events handed to the program
        #: every event object handed, by id() (none twice; kept alive, so that no later one gets its id())
        self.handed_events: Dict[int, Any] = {}
        self.peer: Dict[int, CmId] = {}  #: id(cm) -> the other end's id, both ends held
        #: ids destroyed while their reader (a thread, a task) still held events it had read
        #: for them: id(cm) -> the id; those events are still the program's (destroy() counted them)
        self.in_transit: Dict[int, CmId] = {}
        self.port_of: Dict[int, int] = {}  #: id(listener) -> its port
        #: the memberships joined and not left (a member's), and the events handed for each
        self.members: List[Any] = []
        self.handed_mc: Dict[int, int] = {}
        self.steps: List[str] = []
        self.ports = iter(range(7600 + os.getpid() % 100 * 10, 10 ** 6))
        self.kernel_base = self.kernel_ids() if self.kernel_ids else None
        LibMachine.stats["sequences"] += 1

    # -- helpers -------------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        """A broken promise: ``what``, the steps as they ran; the script comes with it, made
        once the rule the program called has its line (:func:`recorded`)."""
        e = Broken("%s\n\nsteps:\n  %s" % (what, "\n  ".join(self.steps)))
        if self._depth == 0:  # an invariant or the teardown: every line is written
            e = self._scripted(e)
        raise e

    def _scripted(self, e: Broken) -> Broken:
        out = Broken("%s\n\nthe script (run from the repository's top; it stops where the run did):\n%s"
                     % (e, self.script()))
        out.scripted = True  # type: ignore[attr-defined]
        return out

    def script(self) -> str:
        """The sequence so far as a runnable script: the same tier, the rules the program
        called with what they picked, the invariant after each (:class:`Replay`)."""
        return "\n".join(["import sys", "sys.path.insert(0, 'tests')",
                           "from lib_model import Pick, Replay, fake_tier, kernel_tier",
                           "m = Replay(%s)" % type(self).tier.text] + self.code + ["m.teardown()"])

    def _pick(self, data: Any, options: Sequence[Any], label: str) -> Any:
        """One of ``options``: drawn (hypothesis), given by the rule that called this one
        (:class:`_Pinned`), or as the script says (:class:`Pick`); the script writes its index."""
        if isinstance(data, _Pinned):
            i = options.index(data.value)
        elif isinstance(data, Pick):
            i = data.take(options, label)
        else:
            i = data.draw(st.sampled_from(range(len(options))), label=label)
        if self._depth == 1:
            self._picks.append(i)
        return options[i]

    def _step(self, text: str) -> None:
        self.steps.append(text)
        LibMachine.stats["calls"] += 1

    def _hand(self, side: Side, ev: Any) -> None:
        """Account for an event handed to the program, and check the state it left."""
        if id(ev) in self.handed_events:
            self._fail("event %r handed twice" % (ev,))
        self.handed_events[id(ev)] = ev
        cm = ev.id
        kind = ev.event.name + (" (UD)" if cm.ps is PortSpace.UDP and ev.membership is None else "")
        LibMachine.stats["events"][kind] = LibMachine.stats["events"].get(kind, 0) + 1
        if ev.event is E.CONNECT_REQUEST:
            if ev.listen_id not in self.ids:
                self._fail("CONNECT_REQUEST for listener %r, which the program does not hold" % (ev.listen_id,))
            self.ids.append(cm)
            self.roles[id(cm)] = "passive"
            self.handed[id(cm)] = 0
            self.handed[id(ev.listen_id)] += 1
            self.steps.append("%s: CONNECT_REQUEST -> a request's id" % side.name)
        else:
            if cm not in self.ids and self.in_transit.get(id(cm)) is not cm:
                self._fail("%s for an id the program destroyed or never had: %r" % (ev.event.name, cm))
            self.handed[id(cm)] += 1
            if ev.membership is not None:
                self.handed_mc[id(ev.membership)] = self.handed_mc.get(id(ev.membership), 0) + 1
            self.steps.append("%s: %s status %d for %s" % (side.name, ev.event.name, ev.status, self._name(cm)))
        ev.ack()

    def _name(self, cm: CmId) -> str:
        return "%s#%d" % (self.roles.get(id(cm), "?"), self.ids.index(cm) if cm in self.ids else -1)

    def _await(self, cm: CmId, events: Set[E], timeout: float = DUE) -> Any:
        """Read both sides until ``cm`` gets one of ``events`` (CONNECT_REQUEST: a request to the
        listener ``cm``); the others are accounted as they come.  Both sides are read: the far
        end's events are what makes it answer (its channel sends the DREP when it reads a
        DREQ's DISCONNECTED)."""
        deadline = time.monotonic() + timeout
        while True:
            if time.monotonic() > deadline:
                self._fail("none of %s came for %s within %.0f s" % (
                    sorted(e.name for e in events), self._name(cm), timeout))
            for side in list(self.sides.values()):
                if side.reader_error:
                    self._fail("the %s reader thread failed: %r" % (side.name, side.reader_error[0]))
                before = cm.state
                ev = side.next_event(0.05)
                if ev is None:
                    continue
                self._hand(side, ev)
                if not side.threaded and ev.id is cm and ev.event is not E.CONNECT_REQUEST:
                    want = after_event(kind_of(cm.ps, cm.qp_type), before, ev.event)
                    if cm.state is not want and ev.event is not E.DISCONNECTED:
                        self._fail("%s after %s from %s: the table says %s" % (cm.state, ev.event.name, before,
                                                                              want))
                if (ev.event is E.CONNECT_REQUEST and ev.listen_id is cm and E.CONNECT_REQUEST in events) or \
                        (ev.id is cm and ev.event in events):
                    return ev

    def _drain(self, quiet: float = 0.3) -> None:
        """Hand over whatever comes on either side until both are quiet for ``quiet`` s."""
        while True:
            got = False
            for side in list(self.sides.values()):
                ev = side.next_event(quiet / 2)
                if ev is not None:
                    self._hand(side, ev)
                    got = True
            if not got:
                return

    def _live(self, role: str, state: Optional[State] = None) -> List[CmId]:
        return [c for c in self.ids if self.roles[id(c)] == role and (state is None or c.state is state)]

    def _all_handed(self, counts: Dict[int, int], of: Any, reported: int, call: str, side: Side) -> None:
        """``reported`` (destroy's, migrate's or a membership's leave's ``events_reported``)
        equals the events handed for ``of`` (an id, a membership: ``counts`` by its id()); those
        a reader (a thread, a task) read before the call and had not handed on yet are still the
        program's: they come first."""
        if reported > counts[id(of)] and side.threaded:
            self._drain(0.4)
        if reported != counts[id(of)]:
            self._fail("%s reported %d events; %d were handed to the program" % (call, reported, counts[id(of)]))

    def _side_of(self, cm: CmId) -> Side:
        return next(s for s in self.sides.values() if s.ch is cm.channel)

    # -- rules ---------------------------------------------------------------------------------

    @initialize(server=st.sampled_from(READERS), client=st.sampled_from(READERS))
    @recorded
    def open(self, server: str, client: str) -> None:
        self.sides = {"server": Side(self, "server", server), "client": Side(self, "client", client)}
        for how in (server, client):
            LibMachine.stats["readers"][how] += 1
        self.fd_base_open = _fds()
        self.steps.append("server channel %s, client channel %s" % (_READ_BY[server], _READ_BY[client]))

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(udp=st.booleans())
    @recorded
    def listen(self, udp: bool = False) -> None:
        """A listener on a port of its own: TCP's, or with ``udp`` UDP's (its requests are
        SIDR's, its connections datagram ones)."""
        s = self.sides["server"]
        lst = CmId(s.ch, PortSpace.UDP if udp else PortSpace.TCP)
        port = next(self.ports)
        lst.bind_addr("%s:%d" % (self.link.server_ip, port))
        lst.listen()
        self.ids.append(lst)
        self.roles[id(lst)], self.handed[id(lst)] = "listener", 0
        self.port_of[id(lst)] = port
        self._step("listener%d = CmId(server%s); bind_addr(:%d); listen()" % (
            self.ids.index(lst), ", UDP" if udp else "", port))

    @precondition(lambda self: len(self.ids) < MAX_IDS - 1)
    @rule(data=st.data())
    @recorded
    def connect(self, data: st.DataObject) -> None:
        listeners = self._live("listener")
        if not listeners:
            return
        lst = self._pick(data, listeners, "listener")
        c = self.sides["client"]
        cm = CmId(c.ch, lst.ps)
        self.ids.append(cm)
        self.roles[id(cm)], self.handed[id(cm)] = "active", 0
        self._step("active%d = CmId(client); resolve, route, connect to listener%d" % (
            self.ids.index(cm), self.ids.index(lst)))
        cm.resolve_addr("%s:%d" % (self.link.server_ip, self.port_of[id(lst)]), timeout_ms=2000)
        self._await(cm, {E.ADDR_RESOLVED})
        cm.resolve_route(2000)
        self._await(cm, {E.ROUTE_RESOLVED})
        cm.connect()
        self._await(lst, {E.CONNECT_REQUEST})
        req = self.ids[-1]  # the request's id, made as its event was handed
        self.peer[id(req)], self.peer[id(cm)] = cm, req

    @precondition(lambda self: len(self.ids) < MAX_IDS - 2)
    @rule(udp=st.booleans())
    @recorded
    def handshake(self, udp: bool = False) -> None:
        """A whole connection (a listener first if there is none of its port space): listen,
        connect, accept, establish (with ``udp``: SIDR's REQ and REP); the other rules then
        take it apart."""
        ps = PortSpace.UDP if udp else PortSpace.TCP
        if not [c for c in self._live("listener") if c.ps is ps]:
            self.listen(udp)
        lst = [c for c in self._live("listener") if c.ps is ps][0]
        self.connect(_Pinned(lst))
        req = self.ids[-1]
        if self.roles[id(req)] != "passive":
            return
        self.answer(_Pinned(req), "accept")
        cm = self.peer.get(id(req))
        if cm is not None and cm.state is State.RESPONSE:
            self.establish(_Pinned(cm))

    @rule(data=st.data(), how=st.sampled_from(["accept", "accept", "reject"]))
    @recorded
    def answer(self, data: st.DataObject, how: str) -> None:
        reqs = self._live("passive", State.REQUEST)
        if not reqs:
            return
        req = self._pick(data, reqs, "request")
        peer = self.peer.get(id(req))
        alive = peer is not None and peer in self.ids
        ud = req.ps is PortSpace.UDP  # a SIDR request: its answer is a SIDR REP, a datagram QP's
        kwargs = {"qp_num": 0x345678} if ud and how == "accept" else {}
        self._step("%s.%s(%s)%s" % (self._name(req), how, "qp_num=0x345678" if kwargs else "",
                                    "" if alive else "  # its active end is gone"))
        try:
            getattr(req, how)(**kwargs)
        except KernelError as e:
            # the active end went away first: its REJ may have reached the request's id (the
            # fake), or been dropped by its IB CM (the kernel: a REJ from REQ_SENT names no comm
            # id of ours), so the answer may be refused, as documented (destroy this id)
            if alive or e.errno != errno.EINVAL:
                self._fail("%s.%s() refused: %s" % (self._name(req), how, e))
            return
        if alive:
            if ud:  # the SIDR REP: ESTABLISHED with the QP's number and qkey, or UNREACHABLE (REJECT)
                self._await(peer, {E.ESTABLISHED} if how == "accept" else {E.UNREACHABLE})
            else:
                self._await(peer, {E.CONNECT_RESPONSE} if how == "accept" else {E.REJECTED})

    @rule(data=st.data())
    @recorded
    def establish(self, data: st.DataObject) -> None:
        ids = self._live("active", State.RESPONSE)
        if not ids:
            return
        cm = self._pick(data, ids, "active id")
        self._step("%s.establish()" % self._name(cm))
        cm.establish()
        req = self.peer.get(id(cm))
        if req is not None and req in self.ids:
            self._await(req, {E.ESTABLISHED})

    @rule(data=st.data())
    @recorded
    def disconnect(self, data: st.DataObject) -> None:
        ids = [c for c in self.ids if c.state is State.CONNECTED and c.ps is PortSpace.TCP]  # UD: no DREQ
        if not ids:
            return
        cm = self._pick(data, ids, "id")
        self._step("%s.disconnect()" % self._name(cm))
        cm.disconnect()
        self._await(cm, {E.DISCONNECTED})

    @rule(data=st.data())
    @recorded
    def destroy(self, data: st.DataObject) -> None:
        if not self.ids:
            return
        cm = self._pick(data, self.ids, "id")
        self._drain(0.2)  # events on their way are read first (or they are the kernel's to count)
        if cm not in self.ids:
            return
        self._step("%s.destroy()" % self._name(cm))
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # unacked events are not possible here: every one is acked
            reported = cm.destroy()
        name = self._name(cm)
        self.ids.remove(cm)
        self.in_transit[id(cm)] = cm
        try:
            self._all_handed(self.handed, cm, reported, "%s.destroy()" % name, self._side_of(cm))
        finally:
            del self.in_transit[id(cm)]

    @precondition(lambda self: self.link.server_ip == self.link.client_ip)  # one host: its two channels
    @rule(data=st.data())
    @recorded
    def migrate(self, data: st.DataObject) -> None:
        ids = [c for c in self.ids if self.roles[id(c)] != "listener"]
        if not ids:
            return
        cm = self._pick(data, ids, "id")
        old = self._side_of(cm)
        new = self.sides["client" if old.name == "server" else "server"]
        self._drain(0.2)
        self._step("%s.migrate(%s channel)" % (self._name(cm), new.name))
        reported = cm.migrate(new.ch)
        self._all_handed(self.handed, cm, reported, "%s.migrate()" % self._name(cm), old)

    @rule(which=st.sampled_from(["server", "client"]))
    @recorded
    def close_channel(self, which: str) -> None:
        side = self.sides[which]
        self._drain(0.2)
        self._step("%s channel closed" % which)
        gone = [c for c in self.ids if c.channel is side.ch]
        took = side.close()
        for c in gone:
            if c.state is not State.DESTROYED:
                self._fail("%s is %s after its channel was closed" % (self._name(c), c.state))
            try:
                c.destroy()
            except StateError:
                pass
            else:
                self._fail("%s.destroy() after its channel was closed did not say so" % self._name(c))
            self.ids.remove(c)
        if took > 5:
            self._fail("closing the %s channel took %.1f s" % (which, took))
        self.sides[which] = Side(self, which, side.how)
        self._drain(0.5)  # what the closed ids sent the other side (REJ, DREQ)

    @precondition(lambda self: len(self.ids) < MAX_IDS and not self._live("resolved"))
    @rule()
    @recorded
    def resolve_refused(self) -> None:
        """A client id whose RESOLVE_ADDR the kernel refuses after binding it (the tier's
        refused destination: on the lab's RoCE an AF_IB one no port has a GID of its prefix
        for, on the fake an address with no route): the id is ADDR_BOUND as the kernel kept
        it, a second bind is refused before the syscall, and it resolves a destination of the
        bound family from there."""
        dst, err, again = type(self).tier.refused
        cm = CmId(self.sides["client"].ch)
        self.ids.append(cm)
        self.roles[id(cm)], self.handed[id(cm)] = "resolved", 0
        name = self._name(cm)
        self._step("%s = CmId(client); resolve_addr(%s) refused" % (name, dst))
        try:
            cm.resolve_addr(dst, timeout_ms=2000)
        except KernelError as e:
            if e.errno != err:
                self._fail("%s.resolve_addr(%s): %s, the tier refuses it with %s" % (name, dst, e, errno.errorcode[err]))
            LibMachine.stats["refusals"][("RESOLVE_ADDR", errno.errorcode[err])] += 1
        else:
            self._fail("%s.resolve_addr(%s) was taken: the tier refuses it" % (name, dst))
        if cm.state is not State.ADDR_BOUND:
            self._fail("%s is %s after the refused resolve: the kernel kept the bind (ADDR_BOUND)" % (name, cm.state))
        try:
            cm.bind_addr(self.link.client_ip)
        except StateError:
            pass
        except KernelError as e:
            self._fail("%s.bind_addr() on the bound id reached the kernel: %s" % (name, e))
        else:
            self._fail("%s.bind_addr() on the bound id was taken" % name)
        self._step("%s.resolve_addr(%s) from ADDR_BOUND" % (name, again))
        cm.resolve_addr(again, timeout_ms=2000)
        self._await(cm, {E.ADDR_RESOLVED})

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def nothing_left_behind(self) -> None:
        if not self.sides:
            return
        for s in self.sides.values():
            if s.reader_error:
                self._fail("the %s reader thread failed: %r" % (s.name, s.reader_error[0]))
        fds = _fds()
        if fds != self.fd_base_open:
            self._fail("%d fds open, %d with the two channels open" % (fds, self.fd_base_open))

    def teardown(self) -> None:
        try:
            self._teardown()
        finally:
            close_fabrics()  # the fake tier's fabric of this sequence

    def _teardown(self) -> None:
        for s in self.sides.values():
            try:
                s.close()
            except RdmaCmError:
                pass
        fds = _fds()
        if fds != self.fd_base:
            self._fail("%d fds open after both channels closed, %d before" % (fds, self.fd_base))
        if self.kernel_ids is not None:
            deadline = time.monotonic() + 3
            while True:
                left = [x for x in self.kernel_ids() if x not in self.kernel_base]
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if left:
                self._fail("both channels closed, yet RDMA netlink lists cm_ids of this process: %s" % left)


class Replay:
    """A script's machine (:meth:`LibMachine.script`): on ``tier``, each rule called as the run
    called it, the invariant checked after it, as hypothesis does."""

    def __init__(self, tier: Tier) -> None:
        LibMachine.tier = tier
        self.m = LibMachine()
        self.m.nothing_left_behind()

    def __getattr__(self, name: str) -> Callable[..., None]:
        rule_ = getattr(self.m, name)

        def step(**kwargs: Any) -> None:
            rule_(**kwargs)
            self.m.nothing_left_behind()

        return step

    def teardown(self) -> None:
        self.m.teardown()


def replay_twice(tier: Tier) -> Tuple[List[str], List[str]]:
    """A fixed sequence of every kind of rule, called as a program calls them on ``tier``, then
    its script run on its own: the lines of both (the same, when the script replays it)."""
    r = Replay(tier)
    r.open(server="asyncio", client="thread")
    r.handshake(udp=False)
    r.handshake(udp=True)
    r.join(group="239.1.1.8", send_only=True, data=Pick())
    r.resolve_refused()
    r.disconnect(data=Pick(1))
    if r.m.link.server_ip == r.m.link.client_ip:  # one host: its two channels
        r.migrate(data=Pick(0))
    r.leave(data=Pick(0))
    r.destroy(data=Pick(2))
    r.teardown()
    env: Dict[str, Any] = {}
    exec(compile(r.m.script(), "<script>", "exec"), env)  # noqa: S102 - our own script
    return r.m.code, env["m"].m.code


def run(tier: Tier, seed: int, examples: int, steps: int) -> Optional[str]:
    """One hypothesis run of :class:`LibMachine` on ``tier``: None, or the shrunk failure's
    message (with its script)."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import get_state_machine_test

    LibMachine.tier = tier
    test = get_state_machine_test(LibMachine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink], print_blob=False))
    try:
        hypothesis.seed(seed)(test)()
    except Broken as e:
        return str(e)
    except Exception as e:  # hypothesis' FlakyFailure: its replay went another way (timing)
        import fuzz_runner

        found = fuzz_runner.finding(e, Broken)
        if found is None:
            raise
        return "%s\n\n(found once; replayed, the sequence went another way: the timing is part of it)" % found
    return None


def main(argv: Optional[List[str]] = None) -> int:
    """A campaign (tools/fuzz --machine library): on this host's rdma_cm, both ends on
    ``--address`` (the lab guest's own by default), or ``--fake`` on the fake fabric."""
    import fuzz_runner

    p = fuzz_runner.parser("fuzz pyrdmacm's own contract (see tools/fuzz)", 8, 15)
    p.add_argument("--fake", action="store_true", help="on the fake fabric instead of the kernel")
    p.add_argument("--address", default="10.0.2.15", help="the address both ends use (default: the lab's)")
    a = p.parse_args(argv)
    tier = fake_tier() if a.fake else kernel_tier(a.address)
    LibMachine.stats = fresh_stats()
    seed = fuzz_runner.seed_of(a)
    try:
        n, found, took = fuzz_runner.rounds(a.minutes * 60, seed, lambda s: run(tier, s, a.examples, a.steps),
                                            "library, ")
    finally:
        close_fabrics()
    st_ = LibMachine.stats
    fig = {"machine": "library" + (" on the fake fabric" if a.fake else ""),
           "kernel": "fake" if a.fake else os.uname().release, "seed": seed, "rounds": n, "seconds": took,
           "sequences": st_["sequences"], "commands": st_["calls"], "errnos": st_["refusals"],
           "events": st_["events"], "readers": st_["readers"], "disagreements": found}
    return fuzz_runner.finish(fig, a.json)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main())
