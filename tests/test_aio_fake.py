"""pyrdmacm.aio's futures and batch calls against the fake kernel."""

import asyncio
import errno

import pytest

from pyrdmacm import CmEventType as E
from pyrdmacm import CmId, EventChannel, EventError, KernelError, StateError, UsageError
from pyrdmacm import State
from pyrdmacm.aio import AsyncChannel
from pyrdmacm.fake import FakeKernel, FakeNet

PEER, SILENT, NO_ROUTE = "10.0.0.2", "10.0.0.99", "192.0.2.1"


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 10))


def channel():
    return EventChannel(FakeKernel(FakeNet()))


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

    run(main())


def test_many_raises_the_first_failure_event_or_returns_it():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(3)]
            with pytest.raises(EventError) as exc:
                await ach.resolve_addr_many(ids, SILENT, timeout_ms=50)
            assert exc.value.errno == errno.ETIMEDOUT
            ids = [CmId(ach.channel) for _ in range(3)]
            evs = await ach.resolve_addr_many(ids, SILENT, timeout_ms=50, raise_on_error=False)
            assert {e.event for e in evs} == {E.ADDR_ERROR}

    run(main())


def test_a_refused_command_fails_the_future_and_the_others_events_are_still_taken():
    async def main():
        async with AsyncChannel(channel()) as ach:
            good, bad = CmId(ach.channel), CmId(ach.channel)
            # one id, one future: the refusal is set on it, not raised by the call
            fut = ach.resolve_addr(bad, NO_ROUTE)
            with pytest.raises(KernelError) as exc:
                await fut
            assert exc.value.errno == errno.ENETUNREACH
            # a batch stops at the first refused id
            with pytest.raises(KernelError):
                await ach.resolve_addr_many([good, CmId(ach.channel)], NO_ROUTE)
            # events of a batch go to it, the others to get_event()
            other = CmId(ach.channel)
            many = ach.resolve_addr_many([CmId(ach.channel)], PEER)
            other.resolve_addr(PEER, timeout_ms=1000)
            ev = await ach.get_event()
            assert ev.id is other
            assert (await many)[0].event is E.ADDR_RESOLVED

    run(main())


def test_per_id_futures_gather():
    async def main():
        async with AsyncChannel(channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(20)]
            evs = await asyncio.gather(*(ach.resolve_addr(i, PEER) for i in ids))
            assert [e.id for e in evs] == ids
            evs = await asyncio.gather(*(ach.resolve_route(i) for i in ids))
            assert {e.event for e in evs} == {E.ROUTE_RESOLVED}

    run(main())


def test_a_batch_refuses_an_id_given_twice_before_sending_anything():
    async def main():
        async with AsyncChannel(channel()) as ach:
            a = CmId(ach.channel)
            with pytest.raises(UsageError, match="appears twice"):
                await ach.resolve_addr_many([a, CmId(ach.channel), a], PEER)
            assert a.state is State.IDLE and not ach._waiters
            assert (await ach.resolve_addr_many([a], PEER))[0].event is E.ADDR_RESOLVED

    run(main())


def test_a_batch_over_an_id_with_a_command_pending():
    """The id's pending future keeps its event; the batch stops at that id (resolve_route
    while its address is still being resolved is illegal) and takes the events of the
    ids it did send, so none of them leaks to get_event()."""

    async def main():
        async with AsyncChannel(channel()) as ach:
            y, x = CmId(ach.channel), CmId(ach.channel)
            await ach.resolve_addr(y, PEER)
            pending = ach.resolve_addr(x, PEER)
            with pytest.raises(StateError, match="resolve_route"):
                await ach.resolve_route_many([y, x])
            assert (await pending).event is E.ADDR_RESOLVED and x.state is State.ADDR_RESOLVED
            for _ in range(100):  # y's ROUTE_RESOLVED reaches the failed batch, which acks it
                if y.state is State.ROUTE_RESOLVED:
                    break
                await asyncio.sleep(0.01)
            assert y.state is State.ROUTE_RESOLVED and y._unacked == 0 and not ach._queue
            assert not ach._waiters
            evs = await ach.resolve_route_many([x])
            assert evs[0].event is E.ROUTE_RESOLVED

    run(main())
