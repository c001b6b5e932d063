"""Concurrent steps for the fuzzer's ids machine (issue #39, item 2): two commands on one id,
written at once from two threads, judged against every serial order the model allows.

A *race* draws a live id and a pair of commands from :data:`PAIRS` (SET_OPTION IB_PATH,
WRITE_CM_EVENT, RESOLVE_ROUTE, MIGRATE_ID, DESTROY_ID: the ones whose stable-2026 fixes take
the id's handler lock, and those they race), builds both writes, and starts two threads that
meet at a barrier and write.  The oracle: the pair of errnos, and what the model then knows of
the id (its worlds, its channel, whether it lives), must be what one of the two serial orders
gives, each command answered by the very functions the serial steps use (the ``*_outcomes``
of :mod:`ucma_world`, MIGRATE_ID's and DESTROY_ID's look-ups).  Events are judged later, as
ever, by GET_EVENT: an event the kernel queued on the channel that no longer owns its id (a
command that queued it without the handler lock, racing the migration) is then "for no id of
this channel the model knows", and a disagreement like any other.

A race is a race: the reproducer holds the two writes as they ran (its ``race()`` helper),
and may need a loop to lose it again; the figures count each pair and how it came out.  The
writes run in threads of the fuzzer's own process: the kernel refuses a write to an rdma_cm fd
from any other process than the one that opened it (``ib_safe_file_access``: EACCES, seen from
a forked child).  A write that never returns (a lock left held) ends the campaign
(:class:`Wedged`): the campaign runs in a child process (:func:`fuzz_runner.in_child`) so that
the command that started it can still report and exit.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import struct
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyrdmacm.conformance import known_bug

from ucma_id_steps import MAX_IDS, IdSteps
from ucma_world import (EINVAL, ENOENT, PS, QP, C, IdModel, Result, World, _en, _states, ib_path_outcomes, refused,
                        route_outcomes, since, write_event_outcomes)


def race(*writes: Callable[[], int], timeout: Optional[float] = None,
         delays: Sequence[float] = ()) -> List[Optional[int]]:
    """Run the writes at once, one thread each, released together (write i after
    ``delays[i]`` seconds more): their answers (None for a write not answered within
    ``timeout`` seconds: its thread is left blocked)."""
    gate = threading.Barrier(len(writes))
    answers: List[Optional[int]] = [None] * len(writes)

    def one(i: int) -> None:
        gate.wait()
        if i < len(delays) and delays[i]:
            time.sleep(delays[i])
        answers[i] = writes[i]()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(writes))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    return answers


class Wedged(BaseException):
    """A race's write the kernel never answered: the campaign stops (its process cannot close
    the channel, nor exit, while the writer is blocked); ``report`` says what happened."""

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report


#: the pairs a race draws from: each command of one on the id, the second on its channel too
#: unless it is MIGRATE_ID (written on the other channel, naming the owner's fd)
PAIRS = [("SET_IB_PATH", "MIGRATE_ID"), ("WRITE_CM_EVENT", "MIGRATE_ID"), ("SET_IB_PATH", "RESOLVE_ROUTE"),
         ("SET_IB_PATH", "DESTROY_ID"), ("WRITE_CM_EVENT", "DESTROY_ID"), ("MIGRATE_ID", "DESTROY_ID"),
         ("WRITE_CM_EVENT", "SET_IB_PATH")]

#: how much later (seconds) the second write of a race starts: at once, or across the first
DELAYS = [0.0, 0.0, 0.0001, 0.0003, 0.001]

#: seconds a race's writes may take before the step says the kernel holds one of them
RACE_TIMEOUT = 20

#: pairs that trigger a recorded kernel bug (pyrdmacm.conformance.bugs): left out on the
#: kernels it affects, unless the campaign is told to run them (``--with-known-bugs``)
RACE_BUGS = {frozenset({"SET_IB_PATH", "MIGRATE_ID"}): "set_ib_path_without_handler_lock"}

#: what a serial order leaves of the id: (worlds, owning channel, alive)
Known = Tuple[frozenset, int, bool]


@dataclasses.dataclass
class Op:
    """One command of a race: what it writes, where, and how the model answers it."""
    name: str
    ch: int  #: the channel written on
    write: Callable[[], int]
    code: str  #: the reproducer's expression for the write
    #: per world, for an id found on ``ch`` (None: MIGRATE_ID / DESTROY_ID, judged by look-up)
    per_world: Optional[Callable[[World], Result]] = None
    pre: Optional[int] = None  #: an errno the kernel answers before looking the id up


def after(op: Op, err: int, known: Known, owner: int) -> List[Known]:
    """What the model knows after ``op`` answered ``err``, from ``known``; [] when the
    model does not allow that answer there.  ``owner``: the id's channel before the race
    (MIGRATE_ID names its fd)."""
    worlds, ch, alive = known
    if op.pre is not None:
        return [known] if err == op.pre else []
    if op.name == "MIGRATE_ID":  # looked up on the owner's fd: found there, or EINVAL / ENOENT
        want = ENOENT if not alive else (0 if ch == owner else EINVAL)
        return [(worlds, op.ch if want == 0 else ch, alive)] if err == want else []
    want_lookup = ENOENT if not alive else (None if ch == op.ch else EINVAL)
    if want_lookup is not None:
        return [known] if err == want_lookup else []
    if op.name == "DESTROY_ID":
        return [(worlds, ch, False)] if err == 0 else []
    assert op.per_world is not None
    after = frozenset(w2 for w in worlds for e, w2 in op.per_world(w) if e == err)
    return [(after, ch, alive)] if after else []


def serial_orders(ops: List[Op], errs: List[int], start: Known, owner: int) -> Dict[str, List[Known]]:
    """For each serial order of the race's two commands, what the model then knows of the id
    when each command answers what it answered ([] when that order cannot give the answers)."""
    allowed: Dict[str, List[Known]] = {}
    for order in ((0, 1), (1, 0)):
        firsts = after(ops[order[0]], errs[order[0]], start, owner)
        allowed[" then ".join(ops[i].name for i in order)] = [
            k for f in firsts for k in after(ops[order[1]], errs[order[1]], f, owner)]
    return allowed


class RaceSteps(IdSteps):
    """:class:`~ucma_id_steps.IdSteps` with races: two commands on one id at once."""

    #: run the pairs of :data:`RACE_BUGS` even on kernels the bug affects (they may wedge it)
    with_known_bugs = False

    def _op(self, name: str, m: IdModel, other: int) -> Op:
        ch, h = m.ch, m.handle
        raw = self.chans[ch]
        if name == "SET_IB_PATH":
            from ucma_model import _path_entry

            entry = _path_entry("good")
            self.optval.fill(entry)
            fields = {"optval": self.optval.address, "id": h, "level": 1, "optname": 1, "optlen": len(entry)}
            return Op(name, ch, lambda: raw.cmd(C.SET_OPTION, "rdma_ucm_set_option", fields),
                      "lambda: ch[%d].cmd(14, 'rdma_ucm_set_option', {'optval': optval.address, 'id': %s, 'level': 1, "
                      "'optname': 1, 'optlen': %d})" % (ch, self._hv(h), len(entry)),
                      lambda w: ib_path_outcomes(m, w, entry[8:]))
        if name == "WRITE_CM_EVENT":
            param = struct.pack("=Q", 0x1122334455667788).ljust(304, b"\0")
            fields = {"id": h, "event": 18, "status": 0, "param": param}
            return Op(name, ch, lambda: raw.cmd(C.WRITE_CM_EVENT, "rdma_ucm_write_cm_event", fields),
                      "lambda: ch[%d].cmd(24, 'rdma_ucm_write_cm_event', {'id': %s, 'event': 18, 'status': 0, "
                      "'param': %r})" % (ch, self._hv(h), param),
                      lambda w: write_event_outcomes(m, w, 18, 0),
                      None if since("cmd24_exists", self.version) else EINVAL)
        if name == "RESOLVE_ROUTE":
            fields = {"id": h, "timeout_ms": 1000}
            return Op(name, ch, lambda: raw.cmd(C.RESOLVE_ROUTE, "rdma_ucm_resolve_route", fields),
                      "lambda: ch[%d].cmd(4, 'rdma_ucm_resolve_route', {'id': %s, 'timeout_ms': 1000})"
                      % (ch, self._hv(h)), lambda w: route_outcomes(m, w, 1000))
        if name == "DESTROY_ID":
            reply = self._race_reply[0]
            fields = {"response": reply.address, "id": h}
            return Op(name, ch, lambda: raw.cmd(C.DESTROY_ID, "rdma_ucm_destroy_id", fields, out=4),
                      "lambda: ch[%d].cmd(1, 'rdma_ucm_destroy_id', {'response': race_reply[0].address, 'id': %s}, out=4)"
                      % (ch, self._hv(h)))
        assert name == "MIGRATE_ID"
        dest = self.chans[other]
        reply = self._race_reply[1]
        fields = {"response": reply.address, "id": h, "fd": raw.dev.fileno()}
        return Op(name, other, lambda: dest.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id", fields, out=4),
                  "lambda: ch[%d].cmd(18, 'rdma_ucm_migrate_id', {'response': race_reply[1].address, 'id': %s, "
                  "'fd': ch[%d].dev.fileno()}, out=4)" % (other, self._hv(h), ch))

    @rule(data=st.data(), pair=st.sampled_from(PAIRS), swap=st.booleans(), delay=st.sampled_from(DELAYS))
    def race_on_one_id(self, data: st.DataObject, pair: Tuple[str, str], swap: bool, delay: float) -> None:
        """Two commands on one live id at once (threads; ``swap``: which thread is released
        last, so goes first; ``delay``: how much later the other starts); the oracle: some
        serial order.  The id is one on which both commands act in some world the model has
        (the state table's rules: a race of two refusals tells little); with none, the step
        brings one there first."""
        if swap:
            pair = (pair[1], pair[0])
        bug = RACE_BUGS.get(frozenset(pair))
        if bug and not type(self).with_known_bugs and known_bug(bug, self.version):
            type(self).stats["errnos"][("race: " + " \u2016 ".join(pair), "left out: kernel bug " + bug)] += 1
            self.script.append("# race %s left out: kernel bug %s" % (" \u2016 ".join(pair), bug))
            return
        acting = [x for x in self.ids if all(_acts(x, name, self.version) for name in pair)]
        if not acting:
            self._bring_forward(data, pair)
            acting = [x for x in self.ids if all(_acts(x, name, self.version) for name in pair)]
        if not acting:
            return
        m = data.draw(st.sampled_from(acting), label="acting id")
        other = 1 - m.ch
        if self.chans[other] is None:
            self.open_channel()
        if not hasattr(self, "_race_reply"):
            from pyrdmacm.core.device import ReplyBuffer

            self._race_reply = (ReplyBuffer(64), ReplyBuffer(64))
            self.script.append("race_reply = (ReplyBuffer(64), ReplyBuffer(64))")
            self.script.append("import threading, time\nfrom typing import Callable, List, Optional, Sequence\n"
                               + _RACE_SOURCE)
        ops = [self._op(name, m, other) for name in pair]
        errs = self._race_at_once(m, ops, (0.0, delay))
        stats = type(self).stats
        stats["commands"] += 2
        said = " \u2016 ".join("%s %s" % (op.name, _en(e) if e else "ok") for op, e in zip(ops, errs))
        stats["errnos"][("race: " + " \u2016 ".join(pair), " \u2016 ".join(_en(e) if e else "ok" for e in errs))] += 1
        self.script.append("errs = race(%s, delays=(0, %s))  # %s" % (", ".join(op.code for op in ops), delay, said))
        start: Known = (frozenset(m.possible()), m.ch, True)
        ends = [k for ks in serial_orders(ops, errs, start, m.ch).values() for k in ks]
        if not ends:
            self._fail("race on %s (%s): %s; no serial order the model allows gives that (from %s)"
                       % (m.name, ", ".join(sorted(w.state.name for w in m.possible())), said,
                          "; ".join(sorted({w.state.name for w in start[0]}))))
        self._race_done(m, ops, errs, ends)

    def _bring_forward(self, data: st.DataObject, pair: Tuple[str, str]) -> None:
        """Serial steps (judged as ever) that give the pair an id to act on: SET_IB_PATH and
        RESOLVE_ROUTE want one whose address is resolved (a new id, resolved to the lab's own
        address, its event read); the others take any live id (a new one if none)."""
        if self.chans[0] is None:
            self.open_channel()
        if len(self.ids) >= MAX_IDS:  # make room
            self._forced = (self.ids[0].ch, self.ids[0].handle, self.ids[0])
            self.destroy(data, 4)
        self.create_id(data, PS.TCP, QP.RC)
        if not ({"SET_IB_PATH", "RESOLVE_ROUTE"} & set(pair)) or not self.ids:
            return
        m = self.ids[-1]
        self._forced = (m.ch, m.handle, m)
        self.resolve_addr(data, "local", None, None, 2000, False)
        self.get_event(data, 336, 2.0, ch=m.ch)

    def _race_at_once(self, m: IdModel, ops: List[Op], delays: Tuple[float, float]) -> List[int]:
        """The race's answers; a write the kernel does not answer within
        :data:`RACE_TIMEOUT` ends the campaign (:class:`Wedged`), its kernel stack reported."""
        answers = race(*(op.write for op in ops), timeout=RACE_TIMEOUT, delays=delays)
        if None in answers:
            self.wedged = True
            blocked = [op.name for op, e in zip(ops, answers) if e is None]
            report = ("race on %s (%s): %s did not return within %d s: the kernel holds the writer; "
                      "this process's kernel stacks:\n%s\n\nreproducer (kernel %d.%d):\n%s"
                      % (m.name, _states(m), " and ".join(blocked), RACE_TIMEOUT, _kernel_stacks(os.getpid()),
                         self.version[0], self.version[1], "\n".join(self.script)))
            raise Wedged(report)
        return [int(e or 0) for e in answers]

    def teardown(self) -> None:
        if getattr(self, "wedged", False):  # a writer is blocked in the kernel: closing would block too
            self.log.close()
            return
        super().teardown()

    def _race_done(self, m: IdModel, ops: List[Op], errs: List[int], ends: List[Known]) -> None:
        """Keep what the serial orders that fit left of ``m``; check the replies' counts."""
        alive = {k[2] for k in ends}
        chans = {k[1] for k in ends}
        if len(alive) > 1 or len(chans) > 1:
            self._fail("race on %s: the serial orders that fit leave it %s; the model cannot tell which"
                       % (m.name, sorted(ends, key=repr)))
        for op, err in zip(ops, errs):
            if op.name in ("DESTROY_ID", "MIGRATE_ID") and err == 0:
                reply = self._race_reply[0 if op.name == "DESTROY_ID" else 1]
                reported = int(struct.unpack_from("<I", reply.view)[0])
                if reported != m.events_read:
                    self._fail("race: %s of %s: events_reported %d, %d were read"
                               % (op.name, m.name, reported, m.events_read))
        if not alive.pop():
            self.ids.remove(m)
            self.stale.add(m.handle)
            return
        m.ch = chans.pop()
        m.worlds = set().union(*(k[0] for k in ends))


def _acts(m: IdModel, name: str, version: Tuple[int, int]) -> bool:
    """Whether command ``name`` of a race is taken by ``m`` in some world (MIGRATE_ID and
    DESTROY_ID always are; the others as the state table says)."""
    if name == "SET_IB_PATH":
        return any(w.dev and not refused(m, w, C.SET_OPTION, "IB_PATH") for w in m.possible())
    if name == "RESOLVE_ROUTE":
        return any(not refused(m, w, C.RESOLVE_ROUTE) for w in m.possible())
    if name == "WRITE_CM_EVENT":
        return bool(m.uid) and since("cmd24_exists", version)
    return True


def keep_only(machine: type, steps: Set[str]) -> None:
    """Leave only ``steps`` (and the invariants) among ``machine``'s rules: every other rule
    becomes a plain method there (the steps left may still call it)."""
    from hypothesis.stateful import RULE_MARKER

    for name in dir(machine):
        func = getattr(machine, name)
        if name in steps or not hasattr(func, RULE_MARKER):
            continue

        def plain(self: Any, *args: Any, __f: Callable[..., Any] = func, **kw: Any) -> Any:
            return __f(self, *args, **kw)
        setattr(machine, name, plain)


def _kernel_stacks(pid: int) -> str:
    """The kernel stack of each thread of ``pid`` (root reads them), for a report."""
    out = []
    try:
        tids = sorted(os.listdir("/proc/%d/task" % pid))
    except OSError:
        tids = []
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stack" % (pid, tid)) as f:
                out.append("  thread %s:\n" % tid + "".join("    " + line for line in f))
        except OSError as e:
            out.append("  thread %s: %s" % (tid, e.strerror))
    return "\n".join(out) or "  (none readable)"


_RACE_SOURCE = inspect.getsource(race)  # the reproducer's own copy of the helper
