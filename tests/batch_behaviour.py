"""The core's behavioural suite, its calls for many events (run in both tiers as
tests/cm_behaviour.py is): ``EventChannel.get_batch``, events read with no object made per
event, against what get_event gives for the same calls.
"""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import pytest

from pyrdmacm import Call, CmId, EventBatch, EventChannel, State, Waiter
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.core.events import PLAIN_EVENTS
from pyrdmacm.errors import StateError, UsageError

from cm_behaviour import World, wait


def entries(ch: EventChannel, n: int, timeout: float = 10.0, room: int = 64) -> list:
    """``n`` batch entries (id, type, status) read with get_batch; no batch ends with a ``last``."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        b = ch.get_batch(room, 1)
        assert isinstance(b, EventBatch) and b.last is None, "a batch ended by %r" % (b.last,)
        assert len(b.ids) == len(b.events) == len(b.statuses) <= room
        got += zip(b.ids, b.events, b.statuses)
    assert len(got) == n, "%d of %d entries within %ss" % (len(got), n, timeout)
    return got


def test_a_batch_holds_the_address_and_route_events_of_many_ids(world: World):
    """get_batch gives each id's event as three entries, in the kernel's order: the id moved
    as get_event's would, nothing left to acknowledge, no Event made; the address and
    route events carry nothing get_event would add (their parameter is empty)."""
    with world.channel() as ch:
        ids = ch.create_ids(6)
        # the same calls read one by one first: what the batch's entries stand for, whole
        probe = ch.create_id()
        probe.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        probe.resolve_route(2000)
        ev2 = wait(ch)
        for e in (ev, ev2):
            assert e.raw_param == bytes(len(e.raw_param)) and e.ece == (0, 0) and e.listen_id is None
            assert int(e.event) in PLAIN_EVENTS
            e.ack()
        for i in ids:
            i.resolve_addr(world.local, timeout_ms=2000)
        got = entries(ch, 6)
        assert sorted(i.uid for i, _, _ in got) == [i.uid for i in ids]
        assert {(t, s) for _, t, s in got} == {(E.ADDR_RESOLVED, 0)} and got[0][1] is E.ADDR_RESOLVED
        assert all(i.state is State.ADDR_RESOLVED and i.unacked == 0 for i in ids)
        for i in ids:
            i.resolve_route(2000)
        got = entries(ch, 6, room=4)  # at most four a batch
        assert sorted(i.uid for i, _, _ in got) == [i.uid for i in ids]
        assert {(t, s) for _, t, s in got} == {(E.ROUTE_RESOLVED, 0)}
        assert all(i.state is State.ROUTE_RESOLVED and i.unacked == 0 for i in ids)
        empty = ch.get_batch()  # only a look: nothing queued
        assert empty == EventBatch([], [], [], None) and empty.last is None
        assert ch.destroy_ids(ids) == [2] * 6  # two events each, reported


def test_a_failure_is_an_entry_with_its_status(world: World):
    """ADDR_ERROR (nobody answers ARP) is an entry like any: its status -110 (ETIMEDOUT)."""
    with world.channel() as ch:
        cm = ch.create_id()
        cm.resolve_addr(world.silent, timeout_ms=500)
        (got,) = entries(ch, 1, timeout=15)
        assert got == (cm, E.ADDR_ERROR, -110) and cm.unacked == 0
        assert cm.state is State.ADDR_QUERY or cm.state is State.ADDR_BOUND or cm.state is State.IDLE


def test_an_event_the_lists_cannot_hold_ends_the_batch_in_order(world: World):
    """A membership's event is not plain (its parameter is the group's address handle): the
    batch that reads it ends with it as ``last``, after the entries the kernel queued
    before it, and counted (the caller acknowledges it); a waited event goes to its wait."""
    with world.channel() as ch:
        a, b, w = ch.create_ids(3)
        for i in (a, b, w):
            i.resolve_addr(world.local, timeout_ms=2000)
        waiter = ch.expect(w.uid, Waiter.for_call(w.kind, Call.RESOLVE_ADDR))
        got = entries(ch, 2)
        assert sorted(i.uid for i, _, _ in got) == [a.uid, b.uid]
        # w's event may come after a's and b's (the kernel's work items race): the batch
        # reads that took it handed it to its wait; otherwise the wait reads it now
        ch.wait(waiter, 10)
        assert waiter.done and waiter.ok and waiter.event.id is w and w.unacked == 0
        from pyrdmacm import PortSpace

        ud = ch.create_id(PortSpace.UDP)
        ud.bind_addr(world.local)
        ud.join_multicast("239.1.2.3")
        a.resolve_route(2000)
        deadline = time.monotonic() + 10
        seen: list = []
        last = None
        while last is None and time.monotonic() < deadline:
            batch = ch.get_batch(64, 1)
            seen += batch.ids
            last = batch.last
        assert last is not None and last.event in (E.MULTICAST_JOIN, E.MULTICAST_ERROR)
        assert last.id is ud and last.membership is not None and ud.unacked == 1
        last.ack()
        rest = [] if a in seen else [i for i, _, _ in entries(ch, 1)]
        assert seen + rest == [a] and a.state is State.ROUTE_RESOLVED


def test_a_batch_hands_out_the_events_a_wait_kept_first(world: World):
    """Events a wait() read that nobody waited for are kept for the readers, in order: a batch
    gives the first of them as its ``last`` (before anything read now)."""
    with world.channel() as ch:
        a, b = ch.create_ids(2)
        a.resolve_addr(world.local, timeout_ms=2000)
        wait_b = ch.expect(b.uid, Waiter.for_call(b.kind, Call.RESOLVE_ADDR))
        b.resolve_addr(world.local, timeout_ms=2000)
        ch.wait(wait_b, 10)
        if a.unacked:  # a's event came first: the wait kept it
            batch = ch.get_batch(64, 0)
            assert batch.ids == [] and batch.last is not None and batch.last.id is a
            batch.last.ack()
        else:
            assert entries(ch, 1)[0][0] is a
        assert a.state is State.ADDR_RESOLVED and a.unacked == 0


def test_bad_batch_reads_are_refused_and_lose_nothing(world: World):
    with world.channel() as ch:
        cm = ch.create_id()
        cm.resolve_addr(world.local, timeout_ms=2000)
        for bad in (0, -1, 2.5, "3", None):
            with pytest.raises(UsageError, match="max_events must be an int >= 1"):
                ch.get_batch(bad)  # type: ignore[arg-type]
        with pytest.raises(UsageError, match="timeout"):
            ch.get_batch(4, -1)
        assert entries(ch, 1) == [(cm, E.ADDR_RESOLVED, 0)]  # the event was not lost
    with pytest.raises(StateError, match="closed"):
        ch.get_batch()


def test_calls_for_many_ids_do_what_a_call_each_does(world: World):
    """resolve_addrs / resolve_routes: one call, one command each, the ids moved and their
    events as a call each gives; a stranger is refused before any syscall."""
    with world.channel() as ch, world.channel() as other:
        ids = ch.create_ids(4)
        foreign = other.create_id()
        for bad in ([ids[0], foreign], [ids[0], "x"]):
            with pytest.raises(UsageError, match="resolve_addrs takes ids of this channel"):
                ch.resolve_addrs(bad, world.local)
        with pytest.raises(UsageError, match="timeout_ms"):
            ch.resolve_addrs(ids, world.local, timeout_ms=-1)
        assert all(i.state is State.IDLE for i in ids) and foreign.state is State.IDLE
        ch.resolve_addrs([], world.local)  # nothing to do
        ch.resolve_addrs(ids, world.local, timeout_ms=2000)
        assert all(i.state is State.ADDR_QUERY or i.state is State.ADDR_RESOLVED for i in ids)
        assert [i.destination for i in ids] == [ids[0].destination] * 4 and ids[0].destination is not None
        assert sorted(i.uid for i, t, s in entries(ch, 4) if (t, s) == (E.ADDR_RESOLVED, 0)) == [i.uid for i in ids]
        with pytest.raises(UsageError, match="timeout_ms"):
            ch.resolve_routes(ids, 0)
        ch.resolve_routes(iter(ids))
        assert sorted(i.uid for i, t, s in entries(ch, 4) if (t, s) == (E.ROUTE_RESOLVED, 0)) == [i.uid for i in ids]
        # with a source: each id's command as resolve_addr makes it
        more = ch.create_ids(2)
        ch.resolve_addrs(more, world.local, src=world.local)
        assert sorted(i.uid for i, t, s in entries(ch, 2) if t is E.ADDR_RESOLVED) == [i.uid for i in more]
        assert str(more[1].query_addr().src.ip) == world.local
        ch.destroy_ids(ids + more)


def test_a_refusal_in_a_call_for_many_ids_stops_there(world: World):
    """The id a call for many ids cannot make the call for (here: one already resolving) ends
    the call: the ids before it made it, those after it did not, and the error says so."""
    with world.channel() as ch:
        a, b, c = ch.create_ids(3)
        b.resolve_addr(world.local, timeout_ms=2000)
        assert entries(ch, 1)[0][0] is b  # b is ADDR_RESOLVED: resolve_addr is illegal there
        with pytest.raises(StateError) as err:
            ch.resolve_addrs([a, b, c], world.local)
        notes = " ".join(getattr(err.value, "__notes__", []))
        if ch.legacy:  # RESOLVE_IP: each id's command made first, with its checks: before any syscall
            assert notes == "" and a.state is State.IDLE
            ch.resolve_addrs([a], world.local)
        else:
            assert "uid %d of a call for many ids was refused" % b.uid in notes and a.state is not State.IDLE
        assert b.state is State.ADDR_RESOLVED and c.state is State.IDLE
        assert entries(ch, 1)[0][:2] == (a, E.ADDR_RESOLVED)
        ch.resolve_addrs([c], world.local)
        assert entries(ch, 1)[0][:2] == (c, E.ADDR_RESOLVED)
        ch.destroy_ids([a, b, c])


@contextlib.contextmanager
def third_write_refused(ch: EventChannel, err: int) -> Iterator[list]:
    """The channel's writes, the third refused with ``err`` (a refusal midway, in both tiers);
    yields the commands written (the refused one included)."""
    real = ch._write
    seen: list = []

    def refuse_third(data):
        seen.append(data)
        if len(seen) == 3:
            raise OSError(err, "refused for the test")
        return real(data)

    ch._write = refuse_third  # type: ignore[method-assign]
    try:
        yield seen
    finally:
        ch._write = real  # type: ignore[method-assign]


def test_destroy_ids_refused_midway_destroys_the_ids_before(world: World):
    """A DESTROY_ID refused in the middle of destroy_ids (here by a write that refuses the
    third): the two before it are destroyed and off the channel, the rest untouched and
    still destroyable; the error names the id."""
    import errno as _errno

    with world.channel() as ch:
        ids = ch.create_ids(5)
        with third_write_refused(ch, _errno.EIO), pytest.raises(Exception) as err:
            ch.destroy_ids(ids)
        assert "uid %d of a call for many ids was refused" % ids[2].uid in " ".join(getattr(err.value, "__notes__", []))
        assert [i.state for i in ids] == [State.DESTROYED] * 2 + [State.IDLE] * 3
        assert ch.ids == ids[2:]
        assert ch.destroy_ids(ids[2:]) == [0, 0, 0] and ch.ids == []


def test_create_ids_refused_midway_leaves_no_id(world: World):
    """All or nothing: a CREATE_ID refused in the middle of create_ids (here by a write that
    refuses the third) destroys the two made before it, and the refusal is raised; the
    channel goes on."""
    import errno as _errno

    from pyrdmacm.errors import KernelError

    with world.channel() as ch:
        keep = ch.create_id()
        with third_write_refused(ch, _errno.EMFILE) as seen, pytest.raises(KernelError) as err:
            ch.create_ids(5)
        assert err.value.errno == _errno.EMFILE and "CREATE_ID" in str(err.value)
        assert len(seen) == 5  # three CREATE_IDs (the third refused), then a DESTROY_ID for each of the two made
        assert ch.ids == [keep]
        more = ch.create_ids(2)
        assert ch.ids == [keep] + more and ch.destroy_ids(more) == [0, 0]
