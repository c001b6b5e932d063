"""The asyncio adapter's behavioural suite, run twice like tests/cm_behaviour.py: against the
fake kernel on the host (tests/test_cm_fake.py) and against the real rdma_cm in the kernel lab
(tests/kernel/test_cm_kernel.py).  Each importer provides the ``world`` fixture.

The fault tests (close, a channel closed first, a cancelled await) are written with calls
that the adapter before the outcome table had too (``asyncio.ensure_future`` over
``ach.resolve_addr(...)``), so that they show the fault there and its fix here.
"""

from __future__ import annotations

import asyncio
import errno
import gc
import inspect
import os
import time
import warnings
from typing import Any, Awaitable

import pytest

from pyrdmacm import Call, CmId, State, UnackedEventsWarning
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.aio import AsyncChannel
from pyrdmacm.errors import EventError, KernelError, StateError, UsageError

#: how long a test waits for anything that should happen at once (a generous bound: it only
#: turns a hang into a failure)
PROMPT = 5.0


def run(coro: Awaitable[Any], timeout: float = 60) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]


async def outcome(aw: Awaitable[Any], timeout: float = PROMPT) -> Any:
    """What awaiting ``aw`` gives: its result, or its exception as ``(type, message)``; "pending"
    if nothing came within ``timeout`` (nothing of the exception is kept: its traceback would
    hold the frames, and through them the adapter)."""
    try:
        return await asyncio.wait_for(aw, timeout)
    except asyncio.TimeoutError:
        return "pending"
    except Exception as e:
        return (type(e), str(e))


async def until(cond: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def pending_waits(ach: AsyncChannel) -> int:
    """The waits of calls pending in the channel for the adapter: all but the adapter's own
    close watch and its ``requests()`` iterators' listeners."""
    return ach.channel.waiting - (ach._watch is not None) - sum(rq.watching for rq in ach._handout.listeners.values())


def _tables_empty(ach: AsyncChannel) -> bool:
    return not pending_waits(ach) and not ach._queue and not ach._queue_waiters


def test_aio_close_fails_every_waiter(world):
    """AsyncChannel.close() ends every wait with StateError "the channel was closed": a task in
    get_event(), a per-id outcome, a batch; nothing stays pending."""

    async def main():
        ach = AsyncChannel(world.channel())
        await ach.__aenter__()
        one, many = CmId(ach.channel), [CmId(ach.channel) for _ in range(3)]
        reader = asyncio.ensure_future(ach.get_event())
        single = asyncio.ensure_future(ach.resolve_addr(one, world.silent, timeout_ms=30000))
        batch = asyncio.ensure_future(ach.resolve_addr_many(many, world.silent, timeout_ms=30000))
        await asyncio.sleep(0.05)  # all three are waiting
        assert not (reader.done() or single.done() or batch.done())
        ach.close()
        for task in (reader, single, batch):
            got = await outcome(task)
            assert got != "pending", "close() left a waiter pending"
            assert got[0] is StateError and "the channel was closed" in got[1], got
        assert _tables_empty(ach) and ach.channel.closed
        ach.close()  # idempotent

    run(main())


def _fd(ach: AsyncChannel) -> int:
    return ach.channel.fileno()


def _lowest_free_fd_is(fd: int) -> list:
    """Take every free fd number below ``fd`` (the kernel gives out the lowest free one), so that
    the next fd opened is ``fd`` again; the numbers taken, to close afterwards."""
    taken = []
    while True:
        n = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        if n >= fd:
            os.close(n)
            if n != fd:
                for t in taken:
                    os.close(t)
                raise AssertionError("fd %d is still taken: something holds the dead channel" % fd)
            return taken
        taken.append(n)


@pytest.mark.parametrize("then_close_adapter", [True, False], ids=["then-ach-close", "then-nothing"])
def test_aio_channel_closed_first_leaves_no_reader_behind(world, then_close_adapter):
    """The EventChannel closed before (or instead of) the adapter: the adapter's waiters fail at
    once, its reader is removed by the fd number it was registered under, and a new channel that
    the kernel gives the same fd number sees its events."""

    async def main():
        ach = AsyncChannel(world.channel())
        await ach.__aenter__()
        fd = _fd(ach)
        cm = CmId(ach.channel)
        pending = asyncio.ensure_future(ach.resolve_addr(cm, world.silent, timeout_ms=30000))
        await asyncio.sleep(0.05)
        ach.channel.close()
        if then_close_adapter:
            ach.close()
        got = await outcome(pending)
        assert got != "pending", "a close of the EventChannel left the adapter's waiter pending"
        assert got[0] is StateError and "closed" in got[1], got
        # drop the dead adapter (a real device keeps its fd number taken until its object goes)
        del ach, cm, pending
        gc.collect()
        fillers = _lowest_free_fd_is(fd)
        try:
            new = AsyncChannel(world.channel())
        finally:
            for f in fillers:
                os.close(f)
        async with new:
            assert _fd(new) == fd, "the kernel gave the new channel another fd number: the case is not made"
            cm = CmId(new.channel)
            ev = await outcome(new.resolve_addr(cm, world.local, timeout_ms=2000))
            assert ev != "pending", "the new channel never saw its event: a dead adapter's reader holds its fd"
            assert ev.event is E.ADDR_RESOLVED and ev.id is cm and cm._unacked == 0

    run(main())


@pytest.mark.parametrize("how", ["wait_for", "task.cancel"])
def test_aio_a_cancelled_resolve_acks_and_drops_its_event(world, how):
    """A resolve whose await is cancelled: when its event comes (ADDR_ERROR after the timeout),
    the adapter acknowledges and drops it; nothing is left in its tables, get_event() does not
    get it, and destroy() does not warn.  The id's state follows the event."""

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            cm = CmId(ach.channel)
            t0 = time.monotonic()
            if how == "wait_for":
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.ensure_future(ach.resolve_addr(cm, world.silent, timeout_ms=300)),
                                           0.05)
            else:
                task = asyncio.ensure_future(ach.resolve_addr(cm, world.silent, timeout_ms=300))
                await asyncio.sleep(0.05)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
            assert cm.state is State.ADDR_QUERY
            assert await until(lambda: cm.state is State.ADDR_BOUND, 10), "ADDR_ERROR did not come"
            assert time.monotonic() - t0 >= 0.25
            await asyncio.sleep(0.05)
            assert cm._unacked == 0, "the cancelled resolve's event was left unacknowledged"
            assert _tables_empty(ach), (dict(ach.channel._waits), ach._queue)
            with warnings.catch_warnings():
                warnings.simplefilter("error", UnackedEventsWarning)
                other = CmId(ach.channel)
                assert (await ach.resolve_addr(cm, world.local, timeout_ms=2000)).event is E.ADDR_RESOLVED
                cm.destroy()
                # the event went to nobody: get_event sees only what comes after
                other.resolve_addr(world.local, timeout_ms=2000)
                ev = await asyncio.wait_for(ach.get_event(), PROMPT)
                assert ev.id is other
                ev.ack()
                other.destroy()

    run(main())


def test_aio_verbs_are_coroutines_and_the_future_forms_say_so(world):
    async def main():
        async with AsyncChannel(world.channel()) as ach:
            for name in ("resolve_addr", "resolve_route", "resolve_addr_many", "resolve_route_many", "get_event"):
                assert inspect.iscoroutinefunction(getattr(AsyncChannel, name)), name
            cm = CmId(ach.channel)
            task = asyncio.create_task(ach.resolve_addr(cm, world.local, timeout_ms=2000))
            assert (await task).event is E.ADDR_RESOLVED
            task = asyncio.create_task(ach.resolve_route(cm, 2000))
            assert (await task).event is E.ROUTE_RESOLVED
            ids = [CmId(ach.channel) for _ in range(3)]
            task = asyncio.create_task(ach.resolve_addr_many(ids, world.local, timeout_ms=2000))
            assert [e.id for e in await task] == ids
            # the future forms: the command is written at once
            fresh = CmId(ach.channel)
            fut = ach.start_resolve_addr(fresh, world.local, timeout_ms=2000)
            assert isinstance(fut, asyncio.Future) and fresh.state is State.ADDR_QUERY
            assert (await fut).event is E.ADDR_RESOLVED
            fut = ach.start_resolve_route(fresh, 2000)
            assert fresh.state is State.ROUTE_QUERY and (await fut).event is E.ROUTE_RESOLVED
            assert _tables_empty(ach) and all(i._unacked == 0 for i in ids + [cm, fresh])

    run(main())


def test_aio_any_verb_is_awaited_with_the_generic_call_alone(world):
    """outcome_of / outcomes_of make any call and await what OUTCOMES says answers it: no
    adapter per verb.  Here resolve_route, called through the generic call directly."""

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            cm = CmId(ach.channel)
            ev = await ach.outcome_of(cm, Call.RESOLVE_ADDR, cm.resolve_addr, world.local, timeout_ms=2000)
            assert ev.event is E.ADDR_RESOLVED and ev.id is cm
            ev = await ach.outcome_of(cm, Call.RESOLVE_ROUTE, cm.resolve_route, 2000)
            assert ev.event is E.ROUTE_RESOLVED and cm.state is State.ROUTE_RESOLVED and cm._unacked == 0
            ids = [CmId(ach.channel) for _ in range(4)]
            evs = await ach.outcomes_of(ids, Call.RESOLVE_ADDR, CmId.resolve_addr, world.local, timeout_ms=2000)
            assert [e.id for e in evs] == ids
            evs = await ach.outcomes_of(ids[::-1], Call.RESOLVE_ROUTE, CmId.resolve_route, 2000)
            assert [e.id for e in evs] == ids[::-1] and {e.event for e in evs} == {E.ROUTE_RESOLVED}
            # a failure event: EventError with the errno, or the event itself
            bad = CmId(ach.channel)
            with pytest.raises(EventError) as exc:
                await ach.outcome_of(bad, Call.RESOLVE_ADDR, bad.resolve_addr, world.silent, timeout_ms=200)
            assert exc.value.errno == errno.ETIMEDOUT and exc.value.event.event is E.ADDR_ERROR
            assert exc.value.command in ("RESOLVE_ADDR", "RESOLVE_IP") and str(exc.value.dst.ip) == world.silent
            ev = await ach.outcome_of(bad, Call.RESOLVE_ADDR, bad.resolve_addr, world.silent, timeout_ms=200,
                                      raise_on_error=False)
            assert ev.event is E.ADDR_ERROR and not ev.ok and bad._unacked == 0
            # a refusal by the kernel is set on the future
            fresh = CmId(ach.channel)
            with pytest.raises(KernelError) as kexc:
                await ach.outcome_of(fresh, Call.RESOLVE_ADDR, fresh.resolve_addr, world.no_route)
            assert kexc.value.errno == world.no_route_errno
            # misuses, named: a call with no outcome, another id's method, not a Call
            with pytest.raises(UsageError, match="bind_addr on a connected id has no outcome event"):
                await ach.outcome_of(bad, Call.BIND_ADDR, bad.bind_addr, world.local)
            assert bad.state is State.ADDR_BOUND  # not called
            with pytest.raises(UsageError, match="is a call of id uid %d, not of id uid %d" % (cm.uid, bad.uid)):
                await ach.outcome_of(bad, Call.RESOLVE_ROUTE, cm.resolve_route, 2000)
            with pytest.raises(UsageError, match="must be a pyrdmacm.Call"):
                await ach.outcome_of(bad, "resolve_addr", bad.resolve_addr, world.local)  # type: ignore[arg-type]
            assert _tables_empty(ach)

    run(main())


def test_aio_a_batch_refuses_an_id_given_twice_before_calling_any(world):
    async def main():
        async with AsyncChannel(world.channel()) as ach:
            a, b = CmId(ach.channel), CmId(ach.channel)
            with pytest.raises(UsageError, match="id uid %d is given twice .places 0 and 2" % a.uid):
                await ach.resolve_addr_many([a, b, a], world.local, timeout_ms=2000)
            assert a.state is State.IDLE and b.state is State.IDLE and _tables_empty(ach)
            evs = await ach.resolve_addr_many([a, b], world.local, timeout_ms=2000)
            assert [e.id for e in evs] == [a, b]

    run(main())


def test_aio_a_batch_refused_half_way(world):
    """The third id cannot resolve a route (its address is not resolved): the ids before it are
    under way and their events are taken by the batch (acked, not handed to get_event), it and
    the ids after it are not called; the refusal says where it stopped."""

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(5)]
            ready = ids[:2] + ids[3:]
            await ach.resolve_addr_many(ready, world.local, timeout_ms=2000)
            with pytest.raises(StateError, match="resolve_route") as exc:
                await ach.resolve_route_many(ids, 2000)
            assert any("id 2 (uid %d) was refused" % ids[2].uid in n for n in exc.value.__notes__)
            assert [i.state for i in ids[2:]] == [State.IDLE, State.ADDR_RESOLVED, State.ADDR_RESOLVED]
            assert await until(lambda: all(i.state is State.ROUTE_RESOLVED for i in ids[:2]), PROMPT)
            await asyncio.sleep(0.05)
            assert all(i._unacked == 0 for i in ids) and _tables_empty(ach)
            # refused at the first id: nothing under way
            with pytest.raises(StateError):
                await ach.resolve_route_many([ids[2], ids[3]], 2000)
            assert ids[3].state is State.ADDR_RESOLVED and _tables_empty(ach)
            # the channel and the ids that were not called go on
            evs = await ach.resolve_route_many(ids[3:], 2000)
            assert {e.event for e in evs} == {E.ROUTE_RESOLVED}
            assert (await ach.resolve_addr(ids[2], world.local, timeout_ms=2000)).event is E.ADDR_RESOLVED

    run(main())


def test_aio_awaiting_on_a_closed_channel(world):
    """After close() every call fails with StateError "the channel was closed" (as a coroutine's
    exception or on the future); get_event() too."""

    async def main():
        ach = AsyncChannel(world.channel())
        async with ach:
            cm = CmId(ach.channel)
        assert ach.closed and ach.channel.closed
        for aw in (ach.resolve_addr(cm, world.local), ach.resolve_route(cm), ach.resolve_addr_many([cm], world.local),
                   ach.resolve_route_many([cm]), ach.get_event(), ach.start_resolve_addr(cm, world.local),
                   ach.start_resolve_route(cm), ach.outcome_of(cm, Call.RESOLVE_ROUTE, cm.resolve_route, 2000),
                   ach.outcomes_of([cm], Call.RESOLVE_ROUTE, CmId.resolve_route, 2000)):
            got = await outcome(aw)
            assert got != "pending" and got[0] is StateError and "the channel was closed" in got[1], got
        with pytest.raises(StateError, match="the channel was closed"):
            async with ach:
                pass
        # closed through its EventChannel, never started or started: the same
        for started in (False, True):
            other = AsyncChannel(world.channel())
            if started:
                await other.__aenter__()
            other.channel.close()
            got = await outcome(other.get_event())
            assert got[0] is StateError and "the channel was closed" in got[1], got
            got = await outcome(other.resolve_addr(cm, world.local))
            assert got[0] is StateError and "the channel was closed" in got[1], got
            other.close()

    run(main())


def test_aio_events_of_several_ids_and_get_event(world):
    """Events nobody awaits go to get_event(), in order, unacknowledged; the awaited ones do not."""

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            loose = [CmId(ach.channel) for _ in range(3)]
            awaited = CmId(ach.channel)
            fut = ach.start_resolve_addr(awaited, world.local, timeout_ms=2000)
            for i in loose:
                i.resolve_addr(world.local, timeout_ms=2000)
            got = [await asyncio.wait_for(ach.get_event(), PROMPT) for _ in loose]
            assert sorted(e.id.uid for e in got) == sorted(i.uid for i in loose)
            assert all(i._unacked == 1 for i in loose)
            assert (await fut).id is awaited and awaited._unacked == 0
            for e in got:
                e.ack()
            assert _tables_empty(ach)

    run(main())


def test_destroy_ends_the_waits_of_its_ids_at_once(world):
    """200 resolves of a silent address, each awaited with asyncio.wait_for until it times out,
    then their ids destroyed: no waiter is left behind (they used to stay until the table
    reached 4,096); and a future still pending when its id is destroyed fails at once."""

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(200)]
            for cm in ids:
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(ach.start_resolve_addr(cm, world.silent, timeout_ms=30000), 0.001)
            pending = CmId(ach.channel)
            fut = ach.start_resolve_addr(pending, world.silent, timeout_ms=30000)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UnackedEventsWarning)
                ach.channel.destroy_ids(ids)
                pending.destroy()
            assert fut.done()  # at once, not when some later call sweeps
            with pytest.raises(StateError, match="id uid %d was destroyed before the outcome" % pending.uid):
                await fut
            assert not pending_waits(ach), pending_waits(ach)
            live = CmId(ach.channel)  # and the adapter works on
            ev = await ach.resolve_addr(live, world.local)
            assert ev.id is live and ev.event is E.ADDR_RESOLVED

    run(main())
