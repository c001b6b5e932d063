"""pyrdmacm.aio against the fake kernel: what needs the fake's hands (events injected, a
reader that fails, the table sweep) or is not about the kernel at all.  The behaviour that
holds on both tiers is in tests/aio_behaviour.py."""

import asyncio
import errno
import gc
import warnings
import weakref

import pytest

from pyrdmacm import CmEventType as E
from pyrdmacm import Call, CmId, EventChannel, EventError, KernelError, PortSpace, State, StateError, UsageError
from pyrdmacm.aio import AsyncChannel

from aio_behaviour import pending_waits, until
from pyrdmacm.testing import FakeKernel, FakeNet

PEER, SILENT, NO_ROUTE = "10.0.0.2", "10.0.0.99", "192.0.2.1"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def channel(kernel=None):
    return EventChannel(kernel or FakeKernel(FakeNet()))


def settled(ids, ach):
    """Every id acked, no call's wait left, nothing queued: what a failed or cancelled batch
    leaves once the events it did not return have reached it (a loaded host delays them, so
    the tests wait for this with a bound instead of sleeping a fixed time)."""
    return lambda: all(i._unacked == 0 for i in ids) and not pending_waits(ach) and not ach._queue


def test_many_resolves_every_id_and_keeps_their_order():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(30)]
            evs = await ach.resolve_addr_many(ids, PEER, timeout_ms=1000)
            assert [e.id for e in evs] == ids and {e.event for e in evs} == {E.ADDR_RESOLVED}
            evs = await ach.resolve_route_many(reversed(ids))
            assert [e.id for e in evs] == ids[::-1] and {e.event for e in evs} == {E.ROUTE_RESOLVED}
            assert all(i._unacked == 0 for i in ids)  # the adapter acked them
            assert await ach.resolve_addr_many([], PEER) == []
            assert not pending_waits(ach)

    run(main())


def test_many_raises_the_first_failure_event_or_returns_it():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(3)]
            with pytest.raises(EventError) as exc:
                await ach.resolve_addr_many(ids, SILENT, timeout_ms=50)
            assert exc.value.errno == errno.ETIMEDOUT and str(exc.value.dst.ip) == SILENT
            # the other two events reach the failed batch, which acks them
            assert await until(settled(ids, ach), 5)
            ids = [CmId(ach.channel) for _ in range(3)]
            evs = await ach.resolve_addr_many(ids, SILENT, timeout_ms=50, raise_on_error=False)
            assert {e.event for e in evs} == {E.ADDR_ERROR}

    run(main())


def test_a_refusal_is_set_on_the_future_and_the_batch_stops_there():
    async def main():
        async with AsyncChannel(channel()) as ach:
            bad = CmId(ach.channel)
            fut = ach.start_resolve_addr(bad, NO_ROUTE)  # no exception from the call itself
            with pytest.raises(KernelError) as exc:
                await fut
            assert exc.value.errno == errno.ENETUNREACH
            first, second = CmId(ach.channel), CmId(ach.channel)
            with pytest.raises(KernelError) as exc:
                await ach.resolve_addr_many([first, second], NO_ROUTE)
            assert "no id was called" in exc.value.__notes__[0]
            # the kernel bound the first before it found no route, and kept the bind
            assert first.state is State.ADDR_BOUND and second.state is State.IDLE and not pending_waits(ach)

    run(main())


def test_per_id_futures_gather():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(20)]
            evs = await asyncio.gather(*(ach.start_resolve_addr(i, PEER) for i in ids))
            assert [e.id for e in evs] == ids
            evs = await asyncio.gather(*(ach.start_resolve_route(i) for i in ids))
            assert {e.event for e in evs} == {E.ROUTE_RESOLVED}
            evs = await asyncio.gather(*(ach.resolve_route(i) for i in [CmId(ach.channel)]), return_exceptions=True)
            assert isinstance(evs[0], StateError)  # a coroutine per id works too (a Task each)

    run(main())


def test_an_event_that_does_not_answer_the_call_goes_to_get_event():
    """ADDR_CHANGE for an id whose resolve is awaited is not the resolve's outcome: get_event()
    gets it, and the resolve still gets ADDR_RESOLVED."""

    async def main():
        kernel = FakeKernel(FakeNet())
        async with AsyncChannel(channel(kernel)) as ach:
            cm = CmId(ach.channel)
            fut = ach.start_resolve_addr(cm, SILENT, timeout_ms=200, raise_on_error=False)
            kernel.inject_event(cm.handle, E.ADDR_CHANGE)
            ev = await ach.get_event()
            assert ev.event is E.ADDR_CHANGE and ev.id is cm and not fut.done()
            ev.ack()
            assert (await fut).event is E.ADDR_ERROR and cm._unacked == 0

    run(main())


def test_the_legacy_kernel_names_its_command():
    class Legacy(FakeKernel):
        legacy = True

    async def main():
        async with AsyncChannel(channel(Legacy(FakeNet()))) as ach:
            cm = CmId(ach.channel)
            with pytest.raises(EventError) as exc:
                await ach.resolve_addr(cm, SILENT, src="10.0.0.1", timeout_ms=50)
            assert exc.value.command == "RESOLVE_IP" and str(exc.value.src.ip) == "10.0.0.1"

    run(main())


def test_a_batch_over_an_id_with_a_call_pending():
    """The id's pending future keeps its event; the batch stops at that id (resolve_route
    while its address is still being resolved is illegal) and takes the events of the
    ids it did call, so none of them leaks to get_event()."""

    async def main():
        async with AsyncChannel(channel()) as ach:
            y, x = CmId(ach.channel), CmId(ach.channel)
            await ach.resolve_addr(y, PEER)
            pending = ach.start_resolve_addr(x, PEER)
            with pytest.raises(StateError, match="resolve_route"):
                await ach.resolve_route_many([y, x])
            assert (await pending).event is E.ADDR_RESOLVED and x.state is State.ADDR_RESOLVED
            # y's ROUTE_RESOLVED reaches the failed batch, which acks it
            assert await until(lambda: y.state is State.ROUTE_RESOLVED, 5)
            assert await until(settled([y], ach), 5)
            evs = await ach.resolve_route_many([x])
            assert evs[0].event is E.ROUTE_RESOLVED

    run(main())


def test_several_calls_pending_on_one_id_each_get_their_own_outcome():
    """Two waiters on one id (an outcome_of registered while another is pending): each event
    goes to the oldest waiter that it answers."""

    async def main():
        kernel = FakeKernel(FakeNet())
        async with AsyncChannel(channel(kernel)) as ach:
            cm = CmId(ach.channel)
            first = ach.start_resolve_addr(cm, SILENT, timeout_ms=300, raise_on_error=False)
            # a second waiter for the same outcome, with a call that does nothing
            second = ach.outcome_of(cm, Call.RESOLVE_ADDR, lambda: None, raise_on_error=False)
            assert isinstance(ach.channel._waits[cm.uid], list)
            kernel.inject_event(cm.handle, E.ADDR_RESOLVED)
            assert (await first).event is E.ADDR_RESOLVED
            assert (await second).event is E.ADDR_ERROR and cm._unacked == 0 and not pending_waits(ach)

    run(main())


def test_a_cancelled_batch_acks_and_drops_its_events():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(4)]
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(ach.resolve_addr_many(ids, SILENT, timeout_ms=100), 0.02)
            assert await until(lambda: all(i.state is State.ADDR_BOUND for i in ids), 5)
            assert await until(settled(ids, ach), 5)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                ach.channel.destroy_ids(ids)

    run(main())


def test_a_cancelled_get_event_leaves_no_waiter():
    async def main():
        async with AsyncChannel(channel()) as ach:
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(ach.get_event(), 0.02)
            assert not ach._queue_waiters
            cm = CmId(ach.channel)
            cm.resolve_addr(PEER, timeout_ms=1000)
            assert (await ach.get_event()).id is cm

    run(main())


def test_a_failing_reader_fails_the_waiters_and_reading_resumes():
    """get_events refused (here: another reader holds the channel) fails every waiter with the
    refusal instead of spinning or raising into the loop; the next call reads again."""

    async def main():
        async with AsyncChannel(channel()) as ach:
            ch = ach.channel
            cm = CmId(ch)

            def busy(*a, **k):
                raise ch._busy()

            ch.get_events = busy  # type: ignore[method-assign]
            with pytest.raises(StateError, match="another thread is already reading"):
                await ach.resolve_addr(cm, PEER)
            assert ach._loop is None and not pending_waits(ach)
            del ch.get_events
            # its ADDR_RESOLVED was left queued in the kernel: the restarted reader gives it out
            ev = await ach.get_event()
            assert ev.id is cm and ev.event is E.ADDR_RESOLVED
            other = CmId(ch)
            assert (await ach.resolve_addr(other, PEER)).id is other

    run(main())


def test_misuses_are_named():
    async def main():
        async with AsyncChannel(channel()) as ach, AsyncChannel(channel()) as other:
            foreign = CmId(other.channel)
            for aw in (ach.resolve_addr(foreign, PEER), ach.resolve_addr_many([CmId(ach.channel), foreign], PEER)):
                with pytest.raises(UsageError, match="on another event channel than this AsyncChannel's"):
                    await aw
            assert foreign.state is State.IDLE
            with pytest.raises(UsageError, match="takes CmIds of this AsyncChannel's channel"):
                await ach.resolve_addr_many(["nope"], PEER)  # type: ignore[list-item]
            with pytest.raises(UsageError, match="takes CmIds"):
                await ach.outcome_of("nope", Call.RESOLVE_ROUTE, print)  # type: ignore[arg-type]
            # a kind-dependent call on a kind that has no outcome for it
            udp = CmId(ach.channel, PortSpace.UDP)
            with pytest.raises(UsageError, match="accept on a datagram id has no outcome event"):
                await ach.outcome_of(udp, Call.ACCEPT, print)
            # two adapters on one channel
            with pytest.raises(UsageError, match="already has an AsyncChannel on this loop"):
                await AsyncChannel(ach.channel).__aenter__()

    run(main())
    with pytest.raises(UsageError, match="need a running asyncio loop"):
        AsyncChannel(channel()).outcome_of(None, Call.RESOLVE_ROUTE, print)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="takes an EventChannel"):
        AsyncChannel("fd 3")  # type: ignore[arg-type]


def test_the_batch_calls_spread_any_arguments():
    """outcomes_of calls fn(cm_id, *args, **kwargs) for each id, whatever the keyword names; a
    refusal part-way stops the calls there and is set on the future."""
    got: list = []

    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(3)]

            def fn(cm_id, *args, **kwargs):
                got.append((cm_id, args, kwargs))

            def refuse(cm_id, a):
                got.append(cm_id)
                if cm_id is ids[1]:
                    raise KeyError(a)

            for args, kwargs in (((), {}), (("a",), {"x": 1}), (("a", "b"), {}), ((), {"not an identifier": 1}),
                                 ((), {"class": 2})):
                got.clear()
                ach.outcomes_of(ids, Call.RESOLVE_ADDR, fn, *args, **kwargs).cancel()
                assert got == [(i, args, kwargs) for i in ids]
            got.clear()
            with pytest.raises(KeyError):
                await ach.outcomes_of(ids, Call.RESOLVE_ADDR, refuse, "x")
            assert got == ids[:2]

    run(main())


def test_an_adapter_moves_to_a_new_loop_when_its_loop_is_gone():
    ach = AsyncChannel(channel())

    async def one():
        cm = CmId(ach.channel)
        return (await ach.resolve_addr(cm, PEER)).event

    assert run(one()) is E.ADDR_RESOLVED
    assert run(one()) is E.ADDR_RESOLVED  # asyncio.run made another loop
    ach.close()


def test_an_adapter_is_freed_by_reference_counting_alone():
    """The adapter's parts (its requests' Handout, its close watch) hold it weakly: with the
    cycle collector off, an adapter never started, and one closed after a ``requests()``
    iteration, go with their last reference (and their channel's fd with them, not at some
    later collection)."""

    async def main():
        never = AsyncChannel(channel())
        ref = weakref.ref(never)
        del never
        assert ref() is None, "an adapter never started outlived its last reference"

        async with AsyncChannel(channel()) as ach:
            lst = CmId(ach.channel)
            lst.bind_addr("10.0.0.1:7000")
            lst.listen()
            got = []

            async def serve():
                async for req in ach.requests(lst):
                    got.append(req)

            task = asyncio.ensure_future(serve())
            assert await until(lambda: ach._handout.listeners, 5)
            lst.destroy()  # the iteration ends
            await asyncio.wait_for(task, 5)
        assert got == [] and not ach._handout.listeners
        ref = weakref.ref(ach)
        del ach, task, serve
        assert ref() is None, "an adapter closed after an iteration outlived its last reference"

    gc.collect()
    gc.disable()
    try:
        run(main())
    finally:
        gc.enable()
