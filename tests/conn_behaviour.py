"""The connection manager's behavioural suite, run twice: on the two-host fake fabric
(tests/test_conn_fake.py) and against the real rdma_cm in the kernel lab, both ends on
the guest's own address over Soft-RoCE (tests/kernel/test_conn_kernel.py).  Each tier
subclasses ``behaviour.suite(conn_behaviour)`` and provides a ``link`` fixture
(:class:`Link`).  The expectations are the kernel's (cm-notes): where the fake differs,
the kernel tier says so.
"""

from __future__ import annotations

import errno
import ipaddress
import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, State, wire
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import NotifyEvent, QpAttrMask, QpState, RejectReason, SidrStatus
from pyrdmacm.errors import EventError, KernelError, StateError, UsageError
from pyrdmacm.conformance import known_bug
from pyrdmacm.records import ConnParam, UdParam

_ports = itertools.count(20000 + os.getpid() % 1000 * 20)


@dataclass
class Link:
    server_transport: Callable[[], Any]  # a new rdma_cm device on the passive host
    client_transport: Callable[[], Any]  # ... on the active host
    server_ip: str
    client_ip: str
    #: the longest a timewait may take here (seconds)
    timewait: float
    #: the kernel's version as (major, minor), or None on the fake (which has every command)
    kernel: Optional[tuple] = None

    def server(self) -> EventChannel:
        return EventChannel(self.server_transport())

    def client(self) -> EventChannel:
        return EventChannel(self.client_transport())

    def port(self) -> int:
        return next(_ports)


def wait(ch: EventChannel, event: E, timeout: float = 10.0, status: Optional[int] = 0) -> Any:
    """The next event of ``ch``: it must be ``event`` (with ``status``, unless None); acked."""
    ev = ch.get_event(timeout)
    assert ev is not None, "no %s within %ss" % (event, timeout)
    assert ev.event is event, "got %r, wanted %s" % (ev, event)
    if status is not None:
        assert ev.status == status, "%r: status %d, wanted %d" % (ev, ev.status, status)
    ev.ack()
    return ev


def quiet(ch: EventChannel, timeout: float = 0.3) -> None:
    ev = ch.get_event(timeout)
    assert ev is None, "unexpected %r" % (ev,)


def serve(ch: EventChannel, link: Link, ps: PortSpace = PortSpace.TCP) -> tuple:
    lst = CmId(ch, ps)
    port = link.port()
    lst.bind_addr("%s:%d" % (link.server_ip, port))
    lst.listen()
    return lst, "%s:%d" % (link.server_ip, port)


def routed(ch: EventChannel, dst: str, ps: PortSpace = PortSpace.TCP) -> CmId:
    cm = CmId(ch, ps)
    cm.resolve_addr(dst, timeout_ms=2000)
    wait(ch, E.ADDR_RESOLVED)
    cm.resolve_route(2000)
    wait(ch, E.ROUTE_RESOLVED)
    return cm


def handshake(sc: EventChannel, cc: EventChannel, link: Link, **accept: Any) -> tuple:
    """listen, connect, accept, establish: (listener, server id, client id) CONNECTED both."""
    lst, dst = serve(sc, link)
    c = routed(cc, dst)
    c.connect()
    req = wait(sc, E.CONNECT_REQUEST).id
    req.accept(**accept)
    wait(cc, E.CONNECT_RESPONSE)
    c.establish()
    wait(sc, E.ESTABLISHED)
    return lst, req, c


def test_rc_handshake_private_data_both_ways_and_teardown(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect(ConnParam(private_data=b"hello server", responder_resources=3, initiator_depth=2,
                            retry_count=5, rnr_retry_count=6))
        assert c.state is State.CONNECT and 0x100000 <= c.qp_num < 0xFFFFFF
        ev = wait(sc, E.CONNECT_REQUEST)
        req = ev.id
        assert ev.listen_id is lst and req is not lst and req.state is State.REQUEST and req.request is ev
        p = ev.param
        assert isinstance(p, ConnParam)
        assert p.qp_num == c.qp_num
        assert p.private_data == b"hello server" + bytes(56 - 12)  # padded to the REQ's 56
        # the IB CM hands each side the other's view: our responder resources are its initiator depth
        assert (p.responder_resources, p.initiator_depth) == (2, 3)
        assert (p.retry_count, p.rnr_retry_count) == (5, 6)
        assert str(req.query_addr().dst.ip) == link.client_ip
        req.accept(private_data=b"welcome", responder_resources=1, initiator_depth=1)
        assert req.uid != 0 and req.state is State.CONNECT
        ev = wait(cc, E.CONNECT_RESPONSE)
        p = ev.param
        assert p.qp_num == req.qp_num != c.qp_num
        assert p.private_data == b"welcome" + bytes(196 - 7)
        assert c.state is State.RESPONSE
        c.establish()
        assert c.state is State.CONNECTED
        wait(sc, E.ESTABLISHED)
        assert req.state is State.CONNECTED
        quiet(cc)  # the active side gets no ESTABLISHED from the kernel
        c.disconnect()
        wait(sc, E.DISCONNECTED)  # the channel answers the DREQ itself ...
        wait(cc, E.DISCONNECTED)  # ... so the DREP comes back at once
        wait(cc, E.TIMEWAIT_EXIT, link.timewait)
        wait(sc, E.TIMEWAIT_EXIT, link.timewait)
        for cm in (c, req, lst):
            cm.destroy()


def test_reject_carries_data_and_the_reason(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        req = wait(sc, E.CONNECT_REQUEST).id
        with pytest.raises(UsageError, match="28 .* 35"):
            req.reject(b"no", reason=5)  # the kernel takes 28 and 35 only
        with pytest.raises(UsageError, match="at most 148"):
            req.reject(bytes(149))
        req.reject(b"server full, retry later")
        assert req.state is State.FAILED
        with pytest.raises(StateError, match="destroy"):
            req.reject()  # twice: refused before the syscall
        ev = wait(cc, E.REJECTED, status=28)
        assert ev.reason is RejectReason.CONSUMER_DEFINED and ev.status_name == "CONSUMER_DEFINED"
        assert ev.private_data == b"server full, retry later" + bytes(148 - 24)
        assert "rejected" in ev.explain()
        assert c.state is State.FAILED
        with pytest.raises(StateError):
            c.disconnect()
        c.destroy()
        req.destroy()
        lst.destroy()


def test_no_listener_is_rejected_8_at_once(link: Link):
    with link.client() as cc:
        c = routed(cc, "%s:%d" % (link.server_ip, link.port()))
        c.connect(private_data=b"anyone?")
        ev = wait(cc, E.REJECTED, timeout=5, status=8)
        assert ev.reason is RejectReason.INVALID_SERVICE_ID and ev.status_name == "INVALID_SERVICE_ID"
        assert "nothing listens" in ev.explain()
        c.destroy()


def test_sync_mode_connects_and_accepts(link: Link):
    """CmId(None) ids block until their outcome; a sync listener hands out requests with
    get_request(), and accept() moves the request to a channel of its own."""
    port = link.port()
    got: List[Any] = []

    server = _sync_id(link.server_transport)
    server.bind_addr("%s:%d" % (link.server_ip, port))
    server.listen()

    def passive() -> None:
        req = server.get_request(10)
        got.append(req)
        got.append(req.accept(private_data=b"sync accept"))

    t = threading.Thread(target=passive)
    t.start()
    try:
        c = _sync_id(link.client_transport)
        c.resolve_addr("%s:%d" % (link.server_ip, port), timeout_ms=2000)
        c.resolve_route(2000)
        ev = c.connect(private_data=b"sync connect")
        assert ev.event is E.CONNECT_RESPONSE and c.state is State.CONNECTED
        assert ev.private_data.startswith(b"sync accept")
    finally:
        t.join(15)
    req, est = got
    assert est.event is E.ESTABLISHED and req.state is State.CONNECTED
    assert req.channel is not server.channel  # its own channel now
    assert req.request.private_data.startswith(b"sync connect")
    c.disconnect()
    for cm in (c, req, server):
        cm.destroy()


def _sync_id(transport: Callable[[], Any]) -> CmId:
    """A sync id (a private channel and blocking calls) on the tier's device."""
    ch = EventChannel(transport())
    ch._wait_first = True
    cm = CmId(ch)
    cm._sync = True
    return cm


def test_sync_connect_to_no_listener_raises_with_the_reason(link: Link):
    c = _sync_id(link.client_transport)
    c.resolve_addr("%s:%d" % (link.server_ip, link.port()), timeout_ms=2000)
    c.resolve_route(2000)
    with pytest.raises(EventError) as info:
        c.connect()
    assert info.value.event.status == 8 and "INVALID_SERVICE_ID" in str(info.value)
    assert "nothing listens" in str(info.value)
    c.destroy()


def test_ud_sidr_accept_and_reject(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link, PortSpace.UDP)
        c = routed(cc, dst, PortSpace.UDP)
        with pytest.raises(UsageError, match="at most 180"):
            c.connect(private_data=bytes(181))
        c.connect(private_data=b"sidr hello")
        ev = wait(sc, E.CONNECT_REQUEST)
        p = ev.param
        assert isinstance(p, UdParam) and p.private_data == b"sidr hello" + bytes(170)
        ev.id.accept(qp_num=0x345678, private_data=b"sidr ok")
        assert ev.id.state is State.CONNECTED
        ev = wait(cc, E.ESTABLISHED)
        p = ev.param
        assert isinstance(p, UdParam)
        assert (p.qp_num, p.qkey) == (0x345678, 0x01234567)
        assert p.ah.dgid == ipaddress.IPv6Address("::ffff:" + link.server_ip)
        assert p.private_data == b"sidr ok" + bytes(136 - 7)
        quiet(sc)  # no event on the passive side
        c2 = routed(cc, dst, PortSpace.UDP)
        c2.connect()
        wait(sc, E.CONNECT_REQUEST).id.reject(b"go away")
        ev = wait(cc, E.UNREACHABLE, status=2)
        assert ev.reason is SidrStatus.REJECT and ev.status_name == "REJECT"
        assert ev.private_data == b"go away" + bytes(136 - 7)


def test_ud_connect_with_no_listener_is_unreachable_unsupported(link: Link):
    with link.client() as cc:
        c = routed(cc, "%s:%d" % (link.server_ip, link.port()), PortSpace.UDP)
        c.connect()
        ev = wait(cc, E.UNREACHABLE, status=1)
        assert ev.status_name == "UNSUPPORTED" and "nothing listens" in ev.explain()


def test_notify_forces_established_once(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        req = wait(sc, E.CONNECT_REQUEST).id
        req.accept()
        assert req.notify() is True
        wait(sc, E.ESTABLISHED)
        assert req.notify() is False  # EISCONN: established already
        bug = known_bug("path_mig_without_alternate", link.kernel) if link.kernel else None
        if bug is None:  # (the fake has no such bug; an affected kernel crashes later in this test)
            assert req.notify(NotifyEvent.PATH_MIG) is True
        with pytest.raises(UsageError):
            req.notify(5)
        wait(cc, E.CONNECT_RESPONSE)
        c.establish()
        quiet(sc)


def test_init_qp_attr_gives_what_a_qp_would_be_programmed_with(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.set_ack_timeout(14)
        with pytest.raises(UsageError):
            c.init_qp_attr(7)
        init = c.init_qp_attr(QpState.INIT)
        assert init.mask & QpAttrMask.STATE and init.qp_state == QpState.INIT
        c.connect(retry_count=5)
        req = wait(sc, E.CONNECT_REQUEST).id
        req.accept()
        wait(cc, E.CONNECT_RESPONSE)
        rtr = c.init_qp_attr(QpState.RTR)
        assert rtr.mask == 0x129181
        assert rtr.dest_qp_num == req.qp_num and rtr.path_mtu >= 1
        assert rtr.ah_attr.dgid == ipaddress.IPv6Address("::ffff:" + link.server_ip)
        rts = c.init_qp_attr(QpState.RTS)
        assert rts.mask == 0x12e01
        assert rts.timeout == 14 and rts.retry_cnt == 5
        assert rtr.fields()["dest_qp_num"] == req.qp_num and "sq_psn" in rts.fields()
        # the passive side's RTS sends with the PSN the active side's RTR expects
        assert req.init_qp_attr(QpState.RTS).sq_psn == rtr.rq_psn
        c.establish()


def test_options_follow_the_kernels_state_rules(link: Link):
    with link.client() as cc:
        a = CmId(cc)
        a.set_reuseaddr(True)
        a.set_afonly(True)
        a.set_tos(0x68)
        a.bind_addr("%s:%d" % (link.client_ip, link.port()))
        a.set_reuseaddr(True)  # set: anywhere but LISTEN (the kernel's rule, kernel_rules)
        with pytest.raises(StateError, match="REUSEADDR|IDLE"):
            a.set_reuseaddr(False)  # cleared: in IDLE only
        a.set_afonly(False)  # still allowed while ADDR_BOUND
        with pytest.raises(UsageError):
            a.set_tos(256)
        with pytest.raises(UsageError):
            a.set_option(99, 1)
        u = CmId(cc, PortSpace.UDP)
        with pytest.raises(StateError, match="not for a datagram id"):
            u.set_ack_timeout(14)  # an RC QP's option


def test_tos_reaches_the_path(link: Link):
    with link.client() as cc:
        c = CmId(cc)
        c.set_tos(0x68)
        c.resolve_addr(link.server_ip, timeout_ms=2000)
        wait(cc, E.ADDR_RESOLVED)
        c.resolve_route(2000)
        wait(cc, E.ROUTE_RESOLVED)
        assert c.query_path()[0].traffic_class == 0x68


def test_multicast_join_and_leave(link: Link):
    with link.client() as cc:
        u = CmId(cc, PortSpace.UDP)
        u.bind_addr(link.client_ip)
        m = u.join_multicast("239.1.1.7")
        ev = wait(cc, E.MULTICAST_JOIN)
        assert ev.membership is m and ev.id is u and u.memberships == [m]
        p = ev.param
        assert isinstance(p, UdParam)
        assert (p.qp_num, p.qkey) == (0xFFFFFF, 0x01234567)
        assert p.ah.dgid == ipaddress.IPv6Address("::ffff:239.1.1.7")
        s = u.join_multicast("239.1.1.8", send_only=True)
        assert wait(cc, E.MULTICAST_JOIN).membership is s
        assert m.leave() == 1
        with pytest.raises(StateError, match="left already"):
            m.leave()
        assert u.memberships == [s]
        s.leave()
        t = CmId(cc)
        t.bind_addr(link.client_ip)
        with pytest.raises(StateError, match="datagram"):
            t.join_multicast("239.1.1.7")


def test_migrate_moves_the_id_and_its_unread_events(link: Link):
    with link.server() as sc, link.client() as cc, link.server() as other:
        lst, req, c = handshake(sc, cc, link)
        c.disconnect()
        # the server's DISCONNECTED is queued on sc, unread: it moves with the id (and the
        # channel that reads it answers the DREQ)
        time.sleep(0.3)
        reported = req.migrate(other)
        assert req.channel is other and reported >= 1
        ev = wait(other, E.DISCONNECTED)
        assert ev.id is req
        quiet(sc)
        wait(cc, E.DISCONNECTED)


def test_allocated_qp_numbers_are_distinct_and_a_reused_one_is_stale(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        ids = []
        for _ in range(3):
            c = routed(cc, dst)
            c.connect()
            req = wait(sc, E.CONNECT_REQUEST).id
            req.accept()
            wait(cc, E.CONNECT_RESPONSE)
            c.establish()
            wait(sc, E.ESTABLISHED)
            ids.append(c)
        qpns = {c.qp_num for c in ids}
        assert len(qpns) == 3 and not qpns & {0, 1, 0xFFFFFF}
        again = routed(cc, dst)
        again.connect(qp_num=ids[0].qp_num)  # a number a live connection holds
        ev = wait(cc, E.REJECTED, status=10)
        assert ev.reason is RejectReason.STALE_CONN and "QP number" in ev.explain()


def test_bad_input_is_refused_before_the_syscall_and_loses_nothing(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        with pytest.raises(UsageError, match="at most 56"):
            c.connect(private_data=bytes(57))
        with pytest.raises(UsageError, match="reserved"):
            c.connect(qp_num=0)
        with pytest.raises(UsageError, match="reserved"):
            c.connect(qp_num=0xFFFFFF)
        with pytest.raises(UsageError, match="unknown connection parameter"):
            c.connect(qpnum=5)
        with pytest.raises(UsageError, match="not both"):
            c.connect(ConnParam(), private_data=b"x")
        with pytest.raises(UsageError, match="retry_count"):
            c.connect(retry_count=8)
        with pytest.raises(StateError, match="REQUEST"):
            c.accept()  # no request's id
        with pytest.raises(StateError):
            lst.accept()
        assert c.state is State.ROUTE_RESOLVED
        c.connect(private_data=bytes(56))  # and then it works
        req = wait(sc, E.CONNECT_REQUEST).id
        with pytest.raises(UsageError, match="at most 196"):
            req.accept(private_data=bytes(197))
        assert req.state is State.REQUEST  # still there to accept
        req.accept()
        wait(cc, E.CONNECT_RESPONSE)
        with pytest.raises(StateError, match="RESPONSE"):
            req.establish()  # the passive side has nothing to establish
        c.establish()
        wait(sc, E.ESTABLISHED)


def test_the_active_end_of_an_unanswered_request_cannot_reject_or_accept_it(link: Link):
    """REJECT or ACCEPT on the active id while its request is unanswered (the IB CM in
    REQ_SENT) would leave the kernel's REQ retrying, and the id's destroy waiting 77-102 s
    (conformance.bugs: rej_in_req_sent_keeps_the_req): refused before any write, and the id
    is destroyed at once (the request's id is then rejected, REJ 4 or dropped)."""
    import time as _time

    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        req = wait(sc, E.CONNECT_REQUEST).id
        for call in (c.reject, c.accept):
            with pytest.raises(StateError, match="CONNECT"):
                call()
        assert c.state is State.CONNECT
        started = _time.monotonic()
        c.destroy()
        assert _time.monotonic() - started < 30, "destroy waited for the REQ's retries"
        req.destroy()
        lst.destroy()


def test_closing_the_channel_destroys_a_request_not_answered_yet(link: Link):
    """Found by the library's fuzzer (tests/lib_model.py): a request's id handed out and not
    answered (not registered until ACCEPT) still said REQUEST after its channel was closed,
    though the kernel destroyed it with the fd; now it is DESTROYED, as the channel's other
    ids, and its calls say the channel is closed. The active end gets the kernel's REJ."""
    with link.client() as cc:
        sc = link.server()
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        req = wait(sc, E.CONNECT_REQUEST).id
        sc.close()
        assert req.state is State.DESTROYED and lst.state is State.DESTROYED
        for call in (req.accept, req.reject, req.destroy):
            with pytest.raises(StateError, match="closed"):
                call()
        ev = wait(cc, E.REJECTED, status=None)
        assert ev.status == RejectReason.CONSUMER_DEFINED
        c.destroy()


def test_closing_the_channel_a_request_was_migrated_to_destroys_it(link: Link):
    """Found by the library's fuzzer with an asyncio reader (tests/lib_model.py): a request's
    id migrated before it was answered still said REQUEST after the channel it was moved to
    was closed (the old channel's close() would have destroyed it; the new one's did not know
    it).  Its old channel stays open, and does not take it back."""
    with link.client() as cc, link.server() as sc, link.server() as other:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        req = wait(sc, E.CONNECT_REQUEST).id
        req.migrate(other)
        other.close()
        assert req.state is State.DESTROYED
        with pytest.raises(StateError, match="closed"):
            req.accept()
        ev = wait(cc, E.REJECTED, status=None)
        assert ev.status == RejectReason.CONSUMER_DEFINED
        assert lst.state is State.LISTEN and not sc.closed
        c.destroy()


@pytest.mark.parametrize("how", ["destroy", "migrate"])
def test_a_request_gone_unanswered_leaves_the_asyncio_adapter_its_close_watch(link: Link, how: str):
    """Found by the library's fuzzer with an asyncio reader (tests/lib_model.py): destroying or
    migrating a request's id before it was answered (uid 0 until ACCEPT) ended the channel's
    waits under uid 0, and the asyncio adapter's own close watch is one: a later close() of
    the EventChannel behind the adapter left its get_event waiting for ever."""
    import asyncio

    from pyrdmacm.aio import AsyncChannel

    async def main() -> Any:
        with link.client() as cc, link.server() as other:
            sc = link.server()
            ach = AsyncChannel(sc)
            lst, dst = serve(sc, link)
            c = routed(cc, dst)
            c.connect()
            ev = await asyncio.wait_for(ach.get_event(), 10)
            assert ev.event is E.CONNECT_REQUEST and ev.id.uid == 0
            if how == "destroy":
                ev.id.destroy()
            else:
                ev.id.migrate(other)
            reader = asyncio.ensure_future(ach.get_event())
            await asyncio.sleep(0.05)
            assert not reader.done()
            sc.close()
            try:
                await asyncio.wait_for(reader, 5)
            except StateError as e:
                return str(e)
            except asyncio.TimeoutError:
                return "still waiting 5 s after the channel's close()"
            return "an event"

    got = asyncio.run(main())
    assert "closed" in got, got


def test_destroying_a_request_unanswered_rejects_it_28(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        wait(sc, E.CONNECT_REQUEST).id.destroy()
        ev = wait(cc, E.REJECTED, status=28)
        assert ev.private_data == bytes(148)  # kernel-made: no data


def test_write_event_where_the_kernel_has_it(link: Link):
    with link.client() as cc:
        c = CmId(cc)
        try:
            c.write_event(0x1122334455667788)
        except KernelError as e:
            assert link.kernel is not None and link.kernel < (6, 17), "refused on %s: %s" % (link.kernel, e)
            assert "6.17" in str(e)
            return
        ev = wait(cc, E.USER)
        assert ev.id is c and ev.param == (0x55667788, 0x11223344)


def test_ib_service_records_where_the_kernel_and_the_fabric_have_them(link: Link):
    """RESOLVE_IB_SERVICE and QUERY IB_SERVICE came in Linux 6.17; RoCE has no SA to ask."""
    with link.client() as cc:
        c = CmId(cc)
        c.bind_addr(link.client_ip)
        with pytest.raises(UsageError, match="service_id, a name"):
            c.resolve_ib_service()
        with pytest.raises(KernelError) as info:
            c.resolve_ib_service(service_id=0x1234)
        if link.kernel is not None and link.kernel < (6, 17):
            assert info.value.errno == errno.EINVAL and "6.17" in str(info.value)
        else:
            assert info.value.errno == errno.EOPNOTSUPP and "SA" in str(info.value)
        assert c.state is State.ADDR_BOUND  # refused: nothing changed
        if link.kernel is not None and link.kernel < (6, 17):
            with pytest.raises(KernelError) as info:
                c.query_ib_service()
            assert info.value.errno == errno.ENOSYS and "6.17" in str(info.value)
        else:
            assert c.query_ib_service() == []  # nothing resolved: the kernel's ENODATA
        c.resolve_addr(link.server_ip, timeout_ms=2000)  # and the id still works
        wait(cc, E.ADDR_RESOLVED)


def test_a_sync_listener_survives_a_rejected_request(link: Link):
    """A sync listener's requests share its private channel until accepted: destroying a
    rejected one must leave the channel, and the listener, working."""
    port = link.port()
    server = _sync_id(link.server_transport)
    server.bind_addr("%s:%d" % (link.server_ip, port))
    server.listen()
    results: List[Any] = []

    def passive() -> None:
        first = server.get_request(10)
        first.reject(b"not you")
        first.destroy()
        second = server.get_request(10)
        results.append(second.accept())

    t = threading.Thread(target=passive)
    t.start()
    try:
        for want in ("rejected", "accepted"):
            c = _sync_id(link.client_transport)
            c.resolve_addr("%s:%d" % (link.server_ip, port), timeout_ms=2000)
            c.resolve_route(2000)
            if want == "rejected":
                with pytest.raises(EventError) as info:
                    c.connect()
                assert info.value.event.status == 28
                assert info.value.event.private_data.startswith(b"not you")
            else:
                assert c.connect().event is E.CONNECT_RESPONSE
            c.destroy()
    finally:
        t.join(15)
    assert results and results[0].event is E.ESTABLISHED
    assert not server.channel.closed
    server.destroy()
    assert server.channel.closed
    accepted = results[0].id
    accepted.destroy()  # on its own channel, which closes with it: nothing is left in the kernel
    assert accepted.channel.closed


def _read_until(channels: List[EventChannel], done: Callable[[List[Any]], bool], seconds: float) -> List[Any]:
    """Read (and ack) the channels' events until ``done(events so far)`` or ``seconds`` passed."""
    got: List[Any] = []
    deadline = time.monotonic() + seconds
    while not done(got) and time.monotonic() < deadline:
        for ch in channels:
            got.extend(ch.get_events(64, 0.02, ack=True))
    return got


def test_crossing_disconnects_reach_timewait_on_both_ends(link: Link):
    """Both ends of 20 connections call disconnect() back to back, so the DREQs cross: each
    IB CM then waits in DREQ_RCVD for a DREP, which the channel sends on every DISCONNECTED.
    Every id gets DISCONNECTED, then TIMEWAIT_EXIT (it used to stop at DISCONNECTED)."""
    n = 20
    with link.server() as sc, link.client() as cc:
        pairs = [handshake(sc, cc, link) for _ in range(n)]
        ids = [cm for _, req, c in pairs for cm in (req, c)]
        for _, req, c in pairs:
            c.disconnect()
            req.disconnect()
        seen: dict = {id(cm): [] for cm in ids}

        def done(events: List[Any]) -> bool:
            return sum(ev.event is E.TIMEWAIT_EXIT for ev in events) >= len(ids)

        for ev in _read_until([sc, cc], done, link.timewait + 10):
            seen.setdefault(id(ev.id), []).append(ev.event)
        stuck = [(cm, seen[id(cm)]) for cm in ids if E.TIMEWAIT_EXIT not in seen[id(cm)]]
        assert not stuck, "%d of %d ids got no TIMEWAIT_EXIT: %s" % (len(stuck), len(ids), stuck[:4])
        for cm in ids:
            assert seen[id(cm)].count(E.DISCONNECTED) == 1 and seen[id(cm)][-1] is E.TIMEWAIT_EXIT, seen[id(cm)]
            cm.destroy()
        for lst, _, _ in pairs:
            lst.destroy()


def _held_dispatch(ch: EventChannel, event: E) -> tuple:
    """Make ``ch``'s reader stop after it read an ``event`` (between GET_EVENT and handing the
    event out), until released: (read: set when it stopped there, go: release it)."""
    read, go = threading.Event(), threading.Event()
    real = ch._dispatch  # where a request, and the peer's DISCONNECTED, are handed out

    def held(uid: int, handle: int, number: int, *args: Any) -> Any:
        if number == event and not read.is_set():
            read.set()
            assert go.wait(20)
        return real(uid, handle, number, *args)

    ch._dispatch = held  # type: ignore[method-assign]
    return read, go


def test_a_request_read_while_its_listener_is_destroyed_is_handed_out(link: Link):
    """A reader thread has read a CONNECT_REQUEST from the kernel when another thread destroys
    the listener: the request is still handed out (destroy's events_reported counts it), so
    its id can be answered; the peer gets the reject (it used to be dropped, the id left in
    the kernel and the peer unanswered)."""
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        read, go = _held_dispatch(sc, E.CONNECT_REQUEST)
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c = routed(cc, dst)
        c.connect()
        try:
            assert read.wait(20), "no CONNECT_REQUEST"
            reported = lst.destroy()
        finally:
            go.set()
            reader.join(20)
        ev = got[0]
        assert ev is not None and ev.event is E.CONNECT_REQUEST and ev.listen_id is lst, got
        assert reported == 1  # the kernel counted the request handed to the reader
        ev.ack()
        ev.id.reject(b"listener gone")
        rej = wait(cc, E.REJECTED, status=RejectReason.CONSUMER_DEFINED)
        assert rej.private_data.startswith(b"listener gone")
        ev.id.destroy()
        c.destroy()


def test_a_listener_destroyed_during_a_burst_hands_out_what_destroy_reports(link: Link):
    """A reader thread takes a burst of requests one at a time (rejecting each) while the main
    thread destroys the listener, five rounds: what the reader was handed equals the listener's
    events_reported, and every client gets an answer."""
    for _ in range(5):
        with link.server() as sc, link.client() as cc:
            lst, dst = serve(sc, link)
            clients = [routed(cc, dst) for _ in range(12)]
            handed: List[Any] = []
            stop = threading.Event()

            def read() -> None:
                while not stop.is_set():
                    ev = sc.get_event(0.05)
                    if ev is not None and ev.event is E.CONNECT_REQUEST:
                        handed.append(ev)
                        ev.ack()
                        ev.id.reject()

            reader = threading.Thread(target=read)
            reader.start()
            try:
                for c in clients:
                    c.connect()
                while len(handed) < 4:
                    time.sleep(0.001)
                reported = lst.destroy()
            finally:
                time.sleep(0.3)
                stop.set()
                reader.join(20)
            assert len(handed) == reported, (len(handed), reported)
            answers = _read_until([cc], lambda evs: len(evs) >= len(clients), 10.0)
            answered = {ev.id for ev in answers if ev.event in (E.REJECTED, E.UNREACHABLE)}
            assert answered == set(clients), "%d of %d clients unanswered" % (len(clients) - len(answered), len(clients))
            for c in clients:
                c.destroy()
            for ev in handed:
                ev.id.destroy()


def _the_drep_went_out(got: List[Any], req: CmId, cc: EventChannel, now_on: EventChannel, link: Link) -> None:
    """The reader was handed ``req``'s DISCONNECTED and the channel's DREP went out: the
    client's disconnect completes (status 0) and both ends reach timewait (``req`` on the
    channel it is on now)."""
    ev = got[0]
    assert ev is not None and ev.event is E.DISCONNECTED and ev.id is req, got
    ev.ack()
    wait(cc, E.DISCONNECTED, 5)  # status 0: the DREP came
    wait(cc, E.TIMEWAIT_EXIT, link.timewait)
    wait(now_on, E.TIMEWAIT_EXIT, link.timewait)


def test_a_dreq_read_before_a_migration_is_answered_on_the_new_channel(link: Link):
    """The server's reader has read the peer's DISCONNECTED (its DREQ) when another thread
    migrates the id to another channel: the DREP goes out on the id's new fd, so the peer's
    disconnect completes (DISCONNECTED with status 0, then TIMEWAIT_EXIT) and so does this
    side's (it used to be written on the old fd, refused, and dropped)."""
    with link.server() as sc, link.client() as cc, link.server() as moved:
        lst, req, c = handshake(sc, cc, link)
        read, go = _held_dispatch(sc, E.DISCONNECTED)
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c.disconnect()
        try:
            assert read.wait(20), "no DISCONNECTED"
            req.migrate(moved)
        finally:
            go.set()
            reader.join(20)
        _the_drep_went_out(got, req, cc, moved, link)
        for cm in (c, req, lst):
            cm.destroy()


def test_a_drep_refused_while_the_id_moved_away_and_back_is_sent_where_it_is(link: Link):
    """The reader answers the peer's DREQ on the channel the id was on (C1), but two
    migrations move it to C2 and back to C1 around that write: the kernel refuses the write
    (the id was on C2 then), and by the time the reader looks, the id is on C1 again.  The
    DREP must still go out (on C1): the peer's disconnect completes and both ends reach
    timewait.  (The reader used to take the unchanged channel for "a migration is in flight"
    and leave the DREP to a migrate() that had already come and gone.)"""
    with link.server() as sc, link.client() as cc, link.server() as other:
        lst, req, c = handshake(sc, cc, link)
        drep = wire.DISCONNECT(req.handle)
        real = sc._write
        first, second, go_on, released = (threading.Event() for _ in range(4))

        def write(data: bytes) -> int:
            if data != drep or released.is_set():
                return real(data)
            first.set()  # the reader is about to answer, on C1: the id moves to C2 now
            assert go_on.wait(20)
            go_on.clear()
            try:
                return real(data)  # refused: the id is on C2
            finally:
                second.set()  # ... and back to C1 before the reader looks
                assert go_on.wait(20)
                released.set()

        sc._write = write  # type: ignore[method-assign]
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c.disconnect()
        try:
            assert first.wait(20), "no DISCONNECTED"
            req.migrate(other)
            go_on.set()
            assert second.wait(20)
            req.migrate(sc)
        finally:
            go_on.set()
            reader.join(20)
        _the_drep_went_out(got, req, cc, sc, link)
        for cm in (c, req, lst):
            cm.destroy()
