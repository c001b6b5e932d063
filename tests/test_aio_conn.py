"""pyrdmacm.aio for the connection verbs, on two fake hosts (pyrdmacm.testing.FakeFabric):
``requests()`` on a listener, ``accept``, ``connect`` (which sends the RTU itself),
``disconnect``, ``wait_event``, ``join_multicast``; reject, no listener, datagram ids,
cancellation and close.  :func:`serve_and_connect` is one program, run here and against the
real kernel (tests/kernel/test_aio_conn_lab.py)."""

from __future__ import annotations

import asyncio
import ipaddress
from typing import Any, Callable, Dict, List, Tuple

import pytest

from pyrdmacm import CmId, EventChannel, EventError, PortSpace, State, StateError, UsageError
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.aio import AsyncChannel

from aio_behaviour import pending_waits
from pyrdmacm.core.events import ConnParam, UdParam
from pyrdmacm.testing import FakeFabric

A, B = "10.9.0.1", "10.9.0.2"
PORT = 7471
PROMPT = 5.0  # a bound on what should happen at once: it only turns a hang into a failure


def run(coro: Any, timeout: float = 30) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout))


async def until(cond: Callable[[], bool], timeout: float = PROMPT) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not cond():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.005)
    return True


def empty(ach: AsyncChannel) -> bool:
    """Nothing waits and nothing is queued: no waiter, event or iterator left behind."""
    return not pending_waits(ach) and not ach._queue and not ach._queue_waiters and not ach._handout.listeners


# --------------------------------------------------------------------------- the program

async def serve_and_connect(server: AsyncChannel, clients: List[AsyncChannel], server_ip: str, port: int,
                            n: int, timewait: float) -> None:
    """A listener task that accepts every request with private data of its own, and ``n``
    client tasks (spread over ``clients``) that connect at once; every connection is checked
    on both sides, then half are disconnected by the client and half by the server."""
    lst = CmId(server.channel)
    lst.bind_addr("%s:%d" % (server_ip, port))
    lst.listen()
    accepted: Dict[bytes, Tuple[CmId, Any]] = {}  # the client's tag -> (request id, ESTABLISHED)

    async def accept_one(req: CmId) -> None:
        tag = req.request.private_data[:8]
        assert req.state is State.REQUEST and req.listen_id is lst
        ev = await server.accept(req, private_data=b"srv:" + tag)
        assert ev.event is E.ESTABLISHED and ev.id is req and req.state is State.CONNECTED
        accepted[tag] = (req, ev)

    async def listener() -> None:
        tasks = []
        async for req in server.requests(lst):
            tasks.append(asyncio.ensure_future(accept_one(req)))
            if len(tasks) == n:
                break
        await asyncio.gather(*tasks)

    async def client(k: int) -> Tuple[CmId, Any]:
        ach = clients[k % len(clients)]
        cm = CmId(ach.channel)
        await ach.resolve_addr(cm, "%s:%d" % (server_ip, port))
        await ach.resolve_route(cm)
        ev = await ach.connect(cm, private_data=b"client%02d" % k)
        return cm, ev

    served = asyncio.ensure_future(listener())
    results = await asyncio.gather(*(client(k) for k in range(n)))
    await asyncio.wait_for(served, PROMPT)
    assert len(accepted) == n

    client_qpns, server_qpns = set(), set()
    for k, (cm, ev) in enumerate(results):
        tag = b"client%02d" % k
        # the active side: CONNECT_RESPONSE, the RTU sent by connect() (CONNECTED, no event)
        assert ev.event is E.CONNECT_RESPONSE and ev.status == 0 and cm.state is State.CONNECTED
        assert isinstance(ev.param, ConnParam)
        assert ev.private_data == (b"srv:" + tag).ljust(196, b"\0")  # padded to the REP's size
        req, est = accepted[tag]
        assert req.request.private_data == tag.ljust(56, b"\0")  # the REQ's, less the cma header
        # each side's QP number is what the other side's event says it is
        assert ev.param.qp_num == req.qp_num and req.request.param.qp_num == cm.qp_num
        client_qpns.add(cm.qp_num)
        server_qpns.add(req.qp_num)
        assert cm.unacked == 0 and req.unacked == 0  # every outcome was acked by the adapter
    assert len(client_qpns) == n and len(server_qpns) == n

    # teardown both ways: even clients disconnect, the server disconnects the odd ones
    async def down(k: int) -> None:
        cm, _ = results[k]
        ach = clients[k % len(clients)]
        req, _ = accepted[b"client%02d" % k]
        first, first_ach, second, second_ach = (cm, ach, req, server) if k % 2 == 0 else (req, server, cm, ach)
        ev = await first_ach.disconnect(first)
        assert ev is not None and ev.event is E.DISCONNECTED and ev.status == 0 and ev.id is first
        peer = await second_ach.wait_event(second, E.DISCONNECTED, timeout=PROMPT)
        assert peer.status == 0 and second.state is State.DISCONNECTED
        # the peer's DREQ was answered by the channel: nothing is left to send, or to wait for
        assert await second_ach.disconnect(second) is None
        for one, one_ach in ((first, first_ach), (second, second_ach)):
            tw = await one_ach.wait_event(one, E.TIMEWAIT_EXIT, timeout=timewait + PROMPT)
            assert tw.event is E.TIMEWAIT_EXIT and one.unacked == 0

    await asyncio.gather(*(down(k) for k in range(n)))
    for cm, _ in results:
        cm.destroy()
    for req, _ in accepted.values():
        req.destroy()
    lst.destroy()
    for ach in [server] + clients:
        assert await until(lambda: empty(ach), PROMPT), ach
        assert [i for i in ach.channel.ids] == []


# --------------------------------------------------------------------------- fixtures

@pytest.fixture
def fabric():
    fab = FakeFabric(timewait_ms=50, cm_timeout_ms=3000, cm_retry_ms=20)
    yield fab
    fab.close()


@pytest.fixture
def hosts(fabric):
    return fabric.host(A), fabric.host(B)


def adapters(hosts: Any) -> Tuple[AsyncChannel, AsyncChannel]:
    """An AsyncChannel on each host: (A's, B's)."""
    a, b = hosts
    return AsyncChannel(EventChannel(a())), AsyncChannel(EventChannel(b()))


async def routed(ach: AsyncChannel, dst: str = "%s:%d" % (B, PORT), ps: PortSpace = PortSpace.TCP) -> CmId:
    cm = CmId(ach.channel, ps)
    await ach.resolve_addr(cm, dst)
    await ach.resolve_route(cm)
    return cm


def listening(ach: AsyncChannel, ps: PortSpace = PortSpace.TCP, addr: str = "%s:%d" % (B, PORT)) -> CmId:
    lst = CmId(ach.channel, ps)
    lst.bind_addr(addr)
    lst.listen()
    return lst


async def first_request(ach: AsyncChannel, lst: CmId) -> CmId:
    async for req in ach.requests(lst):
        return req
    raise AssertionError("the requests of %r ended without one" % (lst,))


# --------------------------------------------------------------------------- the program, on the fake

@pytest.mark.parametrize("n", [1, 12])
def test_a_listener_task_and_concurrent_clients_on_two_hosts(hosts, n):
    async def main():
        client, server = adapters(hosts)
        # a second client channel on the server's own host: both hosts have clients
        local = AsyncChannel(EventChannel(hosts[1]()))
        async with server, client, local:
            await serve_and_connect(server, [client, local], B, PORT, n, timewait=0.05)

    run(main())


# --------------------------------------------------------------------------- failures

def test_a_reject_raises_event_error_with_reason_28_and_the_data(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)

            async def refuse():
                req = await first_request(srv, lst)
                req.reject(b"go away")
                return req

            refused = asyncio.ensure_future(refuse())
            cm = await routed(cli)
            with pytest.raises(EventError) as exc:
                await cli.connect(cm, private_data=b"hello")
            ev = exc.value.event
            assert ev.event is E.REJECTED and ev.status == 28 and ev.status_name == "CONSUMER_DEFINED"
            assert ev.private_data == b"go away".ljust(148, b"\0")  # the REJ's data, padded
            assert ev.explain() and ev.explain() in str(exc.value)  # the hint says what it means
            assert cm.state is State.FAILED and cm.unacked == 0
            assert (await refused).state is State.FAILED
            # raise_on_error=False: the event is returned, and no RTU is attempted
            other = await routed(cli)
            refused = asyncio.ensure_future(refuse())
            ev = await cli.connect(other, raise_on_error=False)
            assert ev.event is E.REJECTED and ev.status == 28 and other.state is State.FAILED
            await refused
            assert empty(cli) and empty(srv)

    run(main())


def test_nobody_listening_is_rejected_with_8(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            cm = await routed(cli, "%s:%d" % (B, 7999))
            with pytest.raises(EventError) as exc:
                await cli.connect(cm)
            assert exc.value.event.status == 8 and exc.value.event.status_name == "INVALID_SERVICE_ID"
            assert "INVALID_SERVICE_ID" in str(exc.value)
            assert cm.state is State.FAILED and empty(cli)

    run(main())


def test_a_refused_connect_raises_at_once_and_registers_nothing(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            cm = CmId(cli.channel)  # no route yet
            with pytest.raises(StateError, match="ROUTE_RESOLVED"):
                await cli.connect(cm)
            with pytest.raises(UsageError, match="another event channel"):
                await srv.connect(cm)
            cm = await routed(cli)
            with pytest.raises(UsageError, match="private_data"):
                await cli.connect(cm, private_data=bytes(57))  # a REQ carries 56
            assert cm.state is State.ROUTE_RESOLVED and empty(cli)

    run(main())


# --------------------------------------------------------------------------- datagram ids

def test_ud_connect_and_accept(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv, PortSpace.UDP)

            async def serve():
                req = await first_request(srv, lst)
                assert isinstance(req.request.param, UdParam)
                assert req.request.private_data == b"sidr?".ljust(180, b"\0")
                assert await srv.accept(req, private_data=b"sidr!") is None  # no event follows
                assert req.state is State.CONNECTED
                return req

            served = asyncio.ensure_future(serve())
            cm = await routed(cli, ps=PortSpace.UDP)
            ev = await cli.connect(cm, private_data=b"sidr?")
            req = await served
            assert ev.event is E.ESTABLISHED and isinstance(ev.param, UdParam)
            assert ev.param.qp_num == req.qp_num and ev.private_data == b"sidr!".ljust(136, b"\0")
            assert cm.state is State.CONNECTED and cm.unacked == 0
            # nobody on the port: the SIDR REP says UNSUPPORTED (1)
            none = await routed(cli, "%s:%d" % (B, 7999), PortSpace.UDP)
            with pytest.raises(EventError) as exc:
                await cli.connect(none)
            assert exc.value.event.event is E.UNREACHABLE and exc.value.event.status == 1
            assert empty(cli) and empty(srv)

    run(main())


# --------------------------------------------------------------------------- multicast

def test_join_and_leave(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            cm = CmId(cli.channel, PortSpace.UDP)
            cm.bind_addr("%s:0" % A)
            other = asyncio.ensure_future(cli.get_event())  # a reader of everything else: gets none of it
            (m1, ev1), (m2, ev2) = await asyncio.gather(
                cli.join_multicast(cm, "239.1.1.1"), cli.join_multicast(cm, "239.1.1.2", send_only=True))
            assert ev1.event is E.MULTICAST_JOIN and ev1.membership is m1 and ev1.id is cm
            assert ev2.membership is m2 and m2.send_only and m1.uid != m2.uid
            assert isinstance(ev1.param, UdParam) and ev1.param.qp_num == 0xFFFFFF
            assert ev1.param.ah.dgid == ipaddress.IPv6Address("::ffff:239.1.1.1")
            assert ev2.param.ah.dgid == ipaddress.IPv6Address("::ffff:239.1.1.2")
            assert cm.unacked == 0 and cm.memberships == [m1, m2] and not other.done()
            assert m1.leave() == 1 and not m1.joined and m2.joined
            assert m2.leave() == 1
            with pytest.raises(StateError, match="left already"):
                m1.leave()
            other.cancel()
            with pytest.raises(asyncio.CancelledError):
                await other
            # a connected id takes no join: refused before any syscall
            tcp = CmId(cli.channel)
            tcp.bind_addr("%s:0" % A)
            with pytest.raises(StateError):
                await cli.join_multicast(tcp, "239.1.1.1")
            assert empty(cli)

    run(main())


# --------------------------------------------------------------------------- the requests iterator

def test_requests_iterator_sees_earlier_requests_and_gives_back_what_it_did_not_yield(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            ids = [await routed(cli) for _ in range(3)]
            pending = [asyncio.ensure_future(cli.connect(cm, private_data=b"%d" % k)) for k, cm in enumerate(ids)]
            # the three requests are read (into get_event's queue) before anybody iterates
            assert await until(lambda: len(srv._queue) == 3)
            got = []
            async for req in srv.requests(lst):
                got.append(req)
                break  # the iterator ends: the two it did not yield go back to get_event
            assert await until(lambda: not srv._handout.listeners)
            assert [e.event for e in srv._queue] == [E.CONNECT_REQUEST] * 2
            rest = [await srv.get_event(), await srv.get_event()]
            order = [r.request.private_data[:1] for r in got] + [e.private_data[:1] for e in rest]
            assert order == [b"0", b"1", b"2"]  # in the order they came
            assert all(e.listen_id is lst for e in rest)
            for req in got + [e.id for e in rest]:
                await srv.accept(req)
            evs = await asyncio.gather(*pending)
            assert [e.event for e in evs] == [E.CONNECT_RESPONSE] * 3

    run(main())


def test_requests_of_two_listeners_and_other_events_meanwhile(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            one, two = listening(srv), listening(srv, addr="%s:%d" % (B, PORT + 1))
            seen: Dict[str, List[bytes]] = {"one": [], "two": []}

            async def serve(name, lst, n):
                async for req in srv.requests(lst):
                    seen[name].append(req.request.private_data[:2])
                    await srv.accept(req)
                    if len(seen[name]) == n:
                        return

            tasks = [asyncio.ensure_future(serve("one", one, 2)), asyncio.ensure_future(serve("two", two, 2))]
            # while both iterate, an id of the server's own channel resolves: its waiter gets its events
            own = CmId(srv.channel)
            ev = await srv.resolve_addr(own, A)
            assert ev.event is E.ADDR_RESOLVED
            clients = []
            for k, port in enumerate([PORT, PORT + 1, PORT + 1, PORT]):
                cm = await routed(cli, "%s:%d" % (B, port))
                clients.append(cli.connect(cm, private_data=b"%d%d" % (port - PORT, k)))
            await asyncio.gather(*clients)
            await asyncio.wait_for(asyncio.gather(*tasks), PROMPT)
            assert sorted(seen["one"]) == [b"00", b"03"] and sorted(seen["two"]) == [b"11", b"12"]
            assert empty(srv)

    run(main())


def test_a_cancelled_step_loses_no_request(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            waiting = asyncio.ensure_future(first_request(srv, lst))
            await asyncio.sleep(0.05)
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert await until(lambda: not srv._handout.listeners)  # the iterator ended with the cancel
            cm = await routed(cli)
            connecting = asyncio.ensure_future(cli.connect(cm))
            req = await asyncio.wait_for(first_request(srv, lst), PROMPT)  # a new iterator gets it
            assert req.listen_id is lst
            await srv.accept(req)
            assert (await connecting).event is E.CONNECT_RESPONSE

    run(main())


def test_requests_end_when_the_listener_is_destroyed_or_the_channel_closed(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            got: List[CmId] = []

            async def drain(lst):
                async for req in srv.requests(lst):
                    got.append(req)

            task = asyncio.ensure_future(drain(lst))
            await asyncio.sleep(0.05)
            lst.destroy()
            await asyncio.wait_for(task, PROMPT)  # ended, without an error
            assert got == [] and not srv._handout.listeners
            with pytest.raises(StateError, match="LISTEN"):
                srv.requests(lst)
            lst = listening(srv)
            task = asyncio.ensure_future(drain(lst))
            await asyncio.sleep(0.05)
            srv.close()
            await asyncio.wait_for(task, PROMPT)
            assert got == [] and not srv._handout.listeners

    run(main())


# --------------------------------------------------------------------------- faults

async def fault_in_a_request_body(srv: AsyncChannel, cli: AsyncChannel, server_ip: str, port: int) -> None:
    """Reading fails while the body of a ``requests()`` loop runs, and another call reads
    again before the loop asks for its next request: the iterator still hears of its
    listener's end (destroyed here) instead of waiting for ever.  (The fault ended the
    router's wait on the listener; the iterator must put it back, not only when it is the
    one that starts reading again.)"""
    lst = CmId(srv.channel)
    lst.bind_addr("%s:%d" % (server_ip, port))
    lst.listen()
    ch = srv.channel
    faulted = asyncio.Event()
    got: List[CmId] = []

    async def serve() -> None:
        async for req in srv.requests(lst):
            got.append(req)
            assert (await srv.accept(req)).event is E.ESTABLISHED
            own = CmId(ch)

            def busy(*a: Any, **k: Any) -> Any:
                raise ch._busy()

            ch.get_events = busy  # type: ignore[method-assign]
            with pytest.raises(StateError, match="another thread is already reading"):
                await srv.resolve_addr(own, server_ip)
            del ch.get_events
            ev = await srv.get_event()  # reads again: the ADDR_RESOLVED the fault left queued
            assert ev.id is own and ev.event is E.ADDR_RESOLVED
            own.destroy()
            faulted.set()

    task = asyncio.ensure_future(serve())
    cm = CmId(cli.channel)
    await cli.resolve_addr(cm, "%s:%d" % (server_ip, port))
    await cli.resolve_route(cm)
    assert (await cli.connect(cm)).event is E.CONNECT_RESPONSE
    await asyncio.wait_for(faulted.wait(), PROMPT)
    await asyncio.sleep(0.05)  # the loop is back in the iterator, waiting for a request
    assert not task.done()
    lst.destroy()
    await asyncio.wait_for(task, PROMPT)  # ended, without an error
    assert len(got) == 1 and not srv._handout.listeners
    cm.destroy()
    got[0].destroy()


def test_a_fault_while_a_request_is_served_does_not_deafen_the_iterator(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            await fault_in_a_request_body(srv, cli, B, PORT)
            assert empty(srv) and empty(cli)

    run(main())


def test_cancelling_a_pending_connect_leaves_the_id_to_destroy_and_nothing_behind(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            cm = await routed(cli)
            connecting = asyncio.ensure_future(cli.connect(cm, private_data=b"x"))
            req = await asyncio.wait_for(first_request(srv, lst), PROMPT)  # the REQ is there, unanswered
            connecting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await connecting
            assert cm.state is State.CONNECT
            # the server answers after all: the late CONNECT_RESPONSE is acked and dropped, no RTU sent
            accepting = asyncio.ensure_future(srv.accept(req))
            assert await until(lambda: cm.state is State.RESPONSE)
            await asyncio.sleep(0.05)
            assert cm.unacked == 0 and empty(cli) and not accepting.done()
            # destroying the id refuses the REP: the server's accept hears REJECTED 28
            cm.destroy()
            with pytest.raises(EventError) as exc:
                await asyncio.wait_for(accepting, PROMPT)
            assert exc.value.event.event is E.REJECTED and exc.value.event.status == 28
            assert cli.channel.ids == [] and empty(cli) and empty(srv)

    run(main())


def test_closing_the_channel_fails_a_pending_connect(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with srv:
            lst = listening(srv)
            cm = await routed(cli)
            connecting = asyncio.ensure_future(cli.connect(cm))
            await asyncio.wait_for(first_request(srv, lst), PROMPT)
            cli.close()
            with pytest.raises(StateError, match="the channel was closed"):
                await asyncio.wait_for(connecting, PROMPT)
            assert cm.state is State.DESTROYED
            with pytest.raises(StateError, match="closed"):
                await cli.connect(cm)

    run(main())


# --------------------------------------------------------------------------- wait_event

def test_wait_event_takes_what_came_before_times_out_and_refuses_misuse(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            cm = await routed(cli)
            connecting = asyncio.ensure_future(cli.connect(cm))
            req = await asyncio.wait_for(first_request(srv, lst), PROMPT)
            req.accept()  # the core's call: the ESTABLISHED that follows is nobody's outcome
            await connecting
            assert await until(lambda: len(srv._queue) == 1)  # it came, and went to get_event's queue
            ev = await srv.wait_event(req, E.ESTABLISHED, E.DISCONNECTED)
            assert ev.event is E.ESTABLISHED and ev.id is req and req.unacked == 0 and not srv._queue
            with pytest.raises(asyncio.TimeoutError):
                await srv.wait_event(req, E.DISCONNECTED, timeout=0.05)
            with pytest.raises(UsageError, match="events to wait for"):
                await srv.wait_event(req)
            with pytest.raises(UsageError, match="CmEventType"):
                await srv.wait_event(req, 10)
            with pytest.raises(UsageError, match="another event channel"):
                await cli.wait_event(req, E.DISCONNECTED)
            # the timed-out wait kept its place: the DISCONNECTED it asked for is acked and dropped
            # there, not queued; the TIMEWAIT_EXIT that follows (50 ms later, or sooner to a loaded
            # reader) is nobody's and waits in the queue until taken
            assert (await cli.disconnect(cm)).event is E.DISCONNECTED
            assert await until(lambda: req.state is State.DISCONNECTED)
            assert (await srv.wait_event(req, E.TIMEWAIT_EXIT, timeout=PROMPT)).event is E.TIMEWAIT_EXIT
            assert req.unacked == 0 and not srv._queue

    run(main())


async def connected(cli: AsyncChannel, srv: AsyncChannel, lst: CmId) -> Tuple[CmId, CmId]:
    """A connection through the helpers: (the client's id, the server's)."""
    cm = await routed(cli)
    connecting = asyncio.ensure_future(cli.connect(cm))
    req = await asyncio.wait_for(first_request(srv, lst), PROMPT)
    await srv.accept(req)
    await connecting
    return cm, req


def test_disconnect_after_the_peer_did_returns_the_disconnected_that_came(hosts):
    async def main():
        cli, srv = adapters(hosts)
        async with cli, srv:
            lst = listening(srv)
            cm, req = await connected(cli, srv, lst)
            assert (await srv.disconnect(req)).event is E.DISCONNECTED
            # the client's DISCONNECTED came first (the channel answered the DREQ): it is queued
            assert await until(lambda: len(cli._queue) == 1) and cm.state is State.DISCONNECTED
            ev = await cli.disconnect(cm)
            assert ev is not None and ev.event is E.DISCONNECTED and ev.id is cm and ev.status == 0
            assert cm.unacked == 0 and not cli._queue
            assert await cli.disconnect(cm) is None  # nothing left: taken already
            tw = await cli.wait_event(cm, E.TIMEWAIT_EXIT, timeout=PROMPT)
            assert tw.id is cm and empty(cli)

    run(main())
