"""The connection manager's behavioural suite, run twice: on the two-host fake fabric
(tests/test_conn_fake.py) and against the real rdma_cm in the kernel lab, both ends on
the guest's own address over Soft-RoCE (tests/kernel/test_conn_kernel.py).  Each tier
subclasses ``behaviour.suite(*behaviour.connections())`` and provides a ``link`` fixture
(:class:`Link`); the suite's other module is conn_crossing_behaviour.py (requests left
unanswered, messages that cross).  The expectations are the kernel's (cm-notes): where the
fake differs, the kernel tier says so.
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

from pyrdmacm import CmId, EventChannel, PortSpace, State
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


def requested(sc: EventChannel, cc: EventChannel, link: Link) -> tuple:
    """listen, connect, the request read: (listener, client id, the request's id)."""
    lst, dst = serve(sc, link)
    c = routed(cc, dst)
    c.connect()
    return lst, c, wait(sc, E.CONNECT_REQUEST).id


def handshake(sc: EventChannel, cc: EventChannel, link: Link, **accept: Any) -> tuple:
    """listen, connect, accept, establish: (listener, server id, client id) CONNECTED both."""
    lst, c, req = requested(sc, cc, link)
    req.accept(**accept)
    wait(cc, E.CONNECT_RESPONSE)
    c.establish()
    wait(sc, E.ESTABLISHED)
    return lst, req, c


def ids_in_every_state(sc: EventChannel, cc: EventChannel, link: Link,
                       at_request: Callable[[CmId], None] = lambda req: None) -> dict:
    """An id in each state one host reaches past IDLE, by name -> (its channel, the id, the
    state): bound (to the client's address), half (address resolved), whole (route
    resolved), listener, and the two ends of an established connection (active, passive);
    ``at_request`` sees the passive id before it is accepted."""
    bound = CmId(cc)
    bound.bind_addr(link.client_ip)
    lst, dst = serve(sc, link)
    half = CmId(cc)
    half.resolve_addr(dst, timeout_ms=2000)
    wait(cc, E.ADDR_RESOLVED)
    whole = routed(cc, dst)
    c = routed(cc, dst)
    c.connect()
    req = wait(sc, E.CONNECT_REQUEST).id
    at_request(req)
    req.accept()
    wait(cc, E.CONNECT_RESPONSE)
    c.establish()
    wait(sc, E.ESTABLISHED)
    return {"bound": (cc, bound, State.ADDR_BOUND), "half": (cc, half, State.ADDR_RESOLVED),
            "whole": (cc, whole, State.ROUTE_RESOLVED), "listener": (sc, lst, State.LISTEN),
            "active": (cc, c, State.CONNECTED), "passive": (sc, req, State.CONNECTED)}


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


def batch_of(ch: EventChannel, n: int, timeout: float = 10.0) -> list:
    """``n`` entries (id, type, status) of get_batch, read until they came; no ``last``."""
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        b = ch.get_batch(64, 0.5)
        assert b.last is None, "a batch ended by %r" % (b.last,)
        got += zip(b.ids, b.events, b.statuses)
    assert len(got) == n, "%d of %d entries within %ss: %r" % (len(got), n, timeout, got)
    return got


def test_a_batch_reads_a_request_as_its_last_and_answers_a_dreq(link: Link):
    """get_batch on both ends of a connection: the request (a new id, its listener, the
    peer's data) ends a batch as a whole Event; DISCONNECTED and TIMEWAIT_EXIT are plain
    entries (ucma passes no DREQ or DREP data: their parameter is empty) and the batch that
    reads a DISCONNECTED answers the peer's DREQ, as get_event's read does: the peer's
    disconnect completes at once."""
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect(private_data=b"batch")
        batch = sc.get_batch(64, 10)
        req = batch.last
        assert batch.ids == [] and req is not None and req.event is E.CONNECT_REQUEST and req.listen_id is lst
        assert req.private_data.startswith(b"batch") and req.id.unacked == 1
        req.ack()
        s = req.id
        s.accept()
        wait(cc, E.CONNECT_RESPONSE)
        c.establish()
        batch = sc.get_batch(64, 10)
        assert batch.ids == [] and batch.last is not None and batch.last.event is E.ESTABLISHED
        batch.last.ack()
        c.disconnect()
        assert batch_of(sc, 1) == [(s, E.DISCONNECTED, 0)] and s.state is State.DISCONNECTED and s.unacked == 0
        started = time.monotonic()
        got = batch_of(cc, 1, 5)  # the DREP of the batch's answer, not the DREQ's time-out
        assert got == [(c, E.DISCONNECTED, 0)] and time.monotonic() - started < 3
        assert batch_of(cc, 1, link.timewait) == [(c, E.TIMEWAIT_EXIT, 0)]
        assert batch_of(sc, 1, link.timewait) == [(s, E.TIMEWAIT_EXIT, 0)]
        assert c.unacked == s.unacked == 0
        for cm in (c, s, lst):
            cm.destroy()


def test_reject_carries_data_and_the_reason(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, c, req = requested(sc, cc, link)
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
        lst, c, req = requested(sc, cc, link)
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


def test_both_ends_keep_the_path_their_connection_uses(link: Link):
    """The route's path stays with the active id after CONNECT (its route holds it until the
    id goes), and the passive id of a request has one of its own from the REQ (the kernel's
    cma_ib_new_conn_id): its GIDs the other way round, the same MTU and pkey.  What an
    identifying listener reads to tell its own view of the path."""
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        (mine,) = c.query_path()
        c.connect()
        assert c.query_route().num_paths == 1 and c.query_path() == [mine]
        req = wait(sc, E.CONNECT_REQUEST).id
        r = req.query_route()
        (theirs,) = req.query_path()
        assert r.num_paths == 1 and (r.sgid, r.dgid) == (theirs.sgid, theirs.dgid) == (mine.dgid, mine.sgid)
        assert (theirs.mtu, theirs.pkey) == (mine.mtu, mine.pkey), (theirs, mine)
        req.accept()
        wait(cc, E.CONNECT_RESPONSE)
        assert c.init_qp_attr(QpState.RTR).path_mtu == mine.mtu == req.init_qp_attr(QpState.RTR).path_mtu
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


def test_user_and_internal_events_on_live_ids_in_every_state(link: Link):
    """WRITE_CM_EVENT (Linux 6.17+) on an id in each state one host reaches -- idle, bound,
    address and route resolved, listening, both ends of a connection, and after its
    disconnect: a USER or an INTERNAL event comes back on the id's own channel with its
    status and 64-bit argument, and the id's state does not move (its next step works).
    Any other event type is refused (EINVAL), and so is an unknown id (ENOENT)."""
    from fake_command_helpers import cmd, refused, write_event

    with link.server() as sc, link.client() as cc:
        fresh = CmId(cc)
        try:
            fresh.write_event(1)
        except KernelError as e:
            assert link.kernel is not None and link.kernel < (6, 17), "refused on %s: %s" % (link.kernel, e)
            print("WRITE_CM_EVENT refused on %s: %s" % (link.kernel, e))
            return
        wait(cc, E.USER)
        live = ids_in_every_state(sc, cc, link)
        half, whole, c = live["half"][1], live["whole"][1], live["active"][1]
        ids = [(cc, fresh, State.IDLE), *live.values()]
        for k, (ch, cm, state) in enumerate(ids):
            arg = 0x1122334400000000 + k
            write_event(ch, cm.handle, E.USER, -k, arg)
            write_event(ch, cm.handle, E.INTERNAL, k, ~arg & 0xFFFFFFFFFFFFFFFF)
            for event, status, a in ((E.USER, -k, arg), (E.INTERNAL, k, ~arg & 0xFFFFFFFFFFFFFFFF)):
                ev = wait(ch, event, status=status)
                assert ev.id is cm and ev.param == (a & 0xFFFFFFFF, a >> 32), (state, ev, ev.param)
            assert cm.state is state, (cm.state, state)
            refused(errno.EINVAL, write_event, ch, cm.handle, E.ESTABLISHED)
            refused(errno.EINVAL, write_event, ch, cm.handle, E.ADDR_RESOLVED)
        refused(errno.ENOENT, write_event, cc, 0xDEAD, E.USER)
        # an id created with uid 0 (whose events the kernel drops) is refused: found by the
        # fuzzer on 7.2
        from pyrdmacm.core.device import ReplyBuffer

        reply = ReplyBuffer(4)
        cmd(cc, "CREATE_ID", 0, reply.address, PortSpace.TCP, 2, bytes(7))
        nameless = reply.u32[0]
        refused(errno.EINVAL, write_event, cc, nameless, E.USER)
        cmd(cc, "DESTROY_ID", reply.address, nameless, 0)
        quiet(cc)
        quiet(sc)
        # the ids still take their next steps
        whole.connect()
        wait(sc, E.CONNECT_REQUEST).id.reject()
        wait(cc, E.REJECTED, status=None)
        half.resolve_route(2000)
        wait(cc, E.ROUTE_RESOLVED)
        c.disconnect()
        wait(sc, E.DISCONNECTED)  # the channel answers the DREQ itself ...
        wait(cc, E.DISCONNECTED)  # ... so the DREP comes back at once
        wait(cc, E.TIMEWAIT_EXIT, link.timewait)
        c.write_event(7)  # and after its disconnect
        assert wait(cc, E.USER).param == (7, 0)
        assert c.state is State.DISCONNECTED
        print("WRITE_CM_EVENT on %s: USER and INTERNAL on ids in %d states, then after a disconnect"
              % (link.kernel or "the fake", len(ids) + 1))


def test_resolve_ib_service_on_live_ids_in_every_state(link: Link):
    """RESOLVE_IB_SERVICE (Linux 6.17+) written as bytes, past the library's own rules, on an
    id in each state one host reaches: the kernel takes it from an id bound to a device only
    (which then needs an SA: EOPNOTSUPP on RoCE); every other state, and an id bound to the
    wildcard (no device), is refused with EINVAL and left as it was.  Measured on 7.2."""
    from fake_command_helpers import cmd, refused

    def ib_service(ch: EventChannel, cm: CmId) -> None:
        cmd(ch, "RESOLVE_IB_SERVICE", cm.handle, 0, 0x1234, b"", 1, 0)

    with link.server() as sc, link.client() as cc:
        if link.kernel is not None and link.kernel < (6, 17):
            refused(errno.EINVAL, ib_service, cc, CmId(cc))  # no such command
            return

        def before_accept(req: CmId) -> None:
            refused(errno.EINVAL, ib_service, sc, req)
            assert req.state is State.REQUEST

        live = ids_in_every_state(sc, cc, link, before_accept)
        bound, half = live.pop("bound")[1], live["half"][1]
        refused(errno.EOPNOTSUPP, ib_service, cc, bound)
        anywhere = CmId(cc)
        anywhere.bind_addr("0.0.0.0")
        for ch, cm, state in ((cc, CmId(cc), State.IDLE), (cc, anywhere, State.ADDR_BOUND), *live.values()):
            refused(errno.EINVAL, ib_service, ch, cm)
            assert cm.state is state, (cm.state, state)
        assert bound.state is State.ADDR_BOUND
        quiet(cc)
        quiet(sc)
        half.resolve_route(2000)  # refused: nothing changed
        wait(cc, E.ROUTE_RESOLVED)


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
