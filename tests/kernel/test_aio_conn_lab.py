"""The asyncio connection program of tests/test_aio_conn.py against the real rdma_cm.

Single topology, loopback: the listener and the clients are channels of the guest itself
(10.0.2.15 on rxe0), so the IB CM of rxe0 runs both halves of every exchange (REQ, REP,
RTU, REJ, DREQ, DREP) as it does between two hosts.
"""

import asyncio

import pytest

from pyrdmacm import CmId, EventChannel, EventError, State
from pyrdmacm.aio import AsyncChannel
from test_aio_conn import PROMPT, fault_in_a_request_body, serve_and_connect

pytestmark = pytest.mark.kernel

LOCAL = "10.0.2.15"
TIMEWAIT = 2.5  # TIMEWAIT_EXIT comes about 2.1-2.3 s after the DREQ/DREP on rxe


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def test_a_listener_task_and_concurrent_clients_over_rxe():
    async def main():
        async with AsyncChannel(EventChannel()) as server, AsyncChannel(EventChannel()) as a, \
                AsyncChannel(EventChannel()) as b:
            await serve_and_connect(server, [a, b], LOCAL, 7481, 8, TIMEWAIT)

    run(main())


def test_a_fault_while_a_request_is_served_does_not_deafen_the_iterator_over_rxe():
    async def main():
        async with AsyncChannel(EventChannel()) as srv, AsyncChannel(EventChannel()) as cli:
            await fault_in_a_request_body(srv, cli, LOCAL, 7484)

    run(main())


def test_reject_and_nobody_listening_over_rxe():
    async def main():
        async with AsyncChannel(EventChannel()) as srv, AsyncChannel(EventChannel()) as cli:
            lst = CmId(srv.channel)
            lst.bind_addr("%s:7482" % LOCAL)
            lst.listen()

            async def refuse():
                async for req in srv.requests(lst):
                    req.reject(b"go away")
                    return req

            refused = asyncio.ensure_future(refuse())
            cm = CmId(cli.channel)
            await cli.resolve_addr(cm, "%s:7482" % LOCAL)
            await cli.resolve_route(cm)
            with pytest.raises(EventError) as exc:
                await cli.connect(cm, private_data=b"hello")
            ev = exc.value.event
            assert ev.status == 28 and ev.private_data == b"go away".ljust(148, b"\0") and ev.explain()
            assert cm.state is State.FAILED and (await asyncio.wait_for(refused, PROMPT)).state is State.FAILED
            none = CmId(cli.channel)
            await cli.resolve_addr(none, "%s:7483" % LOCAL)
            await cli.resolve_route(none)
            with pytest.raises(EventError) as exc:
                await cli.connect(none)
            assert exc.value.event.status == 8 and exc.value.event.status_name == "INVALID_SERVICE_ID"

    run(main())
