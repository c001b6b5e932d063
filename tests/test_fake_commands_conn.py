"""The fake kernel's commands, continued from tests/test_fake_commands.py: MIGRATE_ID,
INIT_QP_ATTR of a connection, commands 23 and 24, the private-data limits."""


from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import struct
from typing import Any, Optional


from pyrdmacm import CmId, EventChannel, PortSpace, abi, wire
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.testing import FakeDevice, FakeFabric, FakeKernel, FakeNet
from pyrdmacm.testing.fabric import wire_size

ID, IB = abi.OptionLevel.ID, abi.OptionLevel.IB
INIT, RTR, RTS = 1, 2, 3


from fake_command_helpers import (O, QUIET, cmd, refused, raw_event, set_option, u8, i32, qp_attr, join, leave,
                                  migrate, write_event, nothing, get, bound, resolved)
from fake_command_helpers import ch, net  # fixtures


# --------------------------------------------------------------------------- MIGRATE_ID

def test_migrate_moves_the_id_and_its_unread_events(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b:
        cm = CmId(a)
        cm.resolve_addr("10.0.0.2", timeout_ms=1000)  # ADDR_RESOLVED queued on a, unread
        other = CmId(a)
        other.resolve_addr("10.0.0.2", timeout_ms=1000)
        assert migrate(b, cm.handle, a.fileno()) == 0
        ev = raw_event(b)
        assert ev is not None and (ev["id"], ev["event"], ev["uid"]) == (cm.handle, E.ADDR_RESOLVED, cm.uid)
        left = raw_event(a)  # the other id's event stayed
        assert left is not None and left["id"] == other.handle
        nothing(a)
        assert cm.handle in b._t.ids and cm.handle not in a._t.ids
        # the id answers on its new fd only: named on the old one, it is another fd's (EINVAL)
        refused(errno.EINVAL, cmd, a, "RESOLVE_ROUTE", cm.handle, 1000)
        cmd(b, "RESOLVE_ROUTE", cm.handle, 1000)
        ev = raw_event(b)
        assert ev is not None and ev["event"] == E.ROUTE_RESOLVED


def test_migrate_reports_the_events_already_read(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b:
        cm = CmId(a)
        cm.resolve_addr("10.0.0.2", timeout_ms=1000)
        assert raw_event(a) is not None
        assert migrate(b, cm.handle, a.fileno()) == 1
        # and the new fd keeps counting: destroying there reports both
        cmd(b, "RESOLVE_ROUTE", cm.handle, 1000)
        assert raw_event(b) is not None
        resp = ctypes.create_string_buffer(4)
        cmd(b, "DESTROY_ID", ctypes.addressof(resp), cm.handle, 0)
        assert struct.unpack("=I", resp.raw)[0] == 2


def test_an_event_due_later_follows_the_id(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b:
        cm = CmId(a)
        cm.resolve_addr("10.0.0.99", timeout_ms=100)  # nobody answers: ADDR_ERROR in 100 ms
        migrate(b, cm.handle, a.fileno())
        ev = raw_event(b, 2)
        assert ev is not None and (ev["event"], ev["id"]) == (E.ADDR_ERROR, cm.handle)
        assert ev["status"] == (-errno.ETIMEDOUT) & 0xFFFFFFFF
        nothing(a)


def test_migrate_takes_the_memberships_and_their_events(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b:
        cm = bound(a, PortSpace.UDP)
        mc = join(a, cm.handle, "239.1.1.1")
        migrate(b, cm.handle, a.fileno())
        nothing(a)
        ev = raw_event(b)
        assert ev is not None and (ev["event"], ev["id"]) == (E.MULTICAST_JOIN, mc)
        refused(errno.EINVAL, leave, a, mc)
        assert leave(b, mc) == 1


def test_migrate_refusals(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b, \
            EventChannel(FakeKernel(net)) as c:
        cm = CmId(a)
        r, w = os.pipe()
        try:
            refused(errno.EINVAL, migrate, b, cm.handle, r)  # an fd, not rdma_cm
        finally:
            os.close(r)
            os.close(w)
        refused(errno.ENOENT, migrate, b, cm.handle, r)  # no such fd now
        refused(errno.ENOENT, migrate, b, 0xDEAD, a.fileno())  # no such id
        refused(errno.EINVAL, migrate, b, cm.handle, c.fileno())  # an id, of another fd
        assert cm.handle in a._t.ids


def test_migrate_between_hosts_fds_keeps_the_connection() -> None:
    with FakeFabric(timewait_ms=30) as fab:
        ha, hb = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        ca, cb, cb2 = EventChannel(ha()), EventChannel(hb()), EventChannel(hb())
        c, s = _connected(ca, cb)
        # its ESTABLISHED was read; its CONNECT_REQUEST counts on the listener (ucma_get_event
        # counts an event on uevent->ctx, which for a request is the listener's)
        assert migrate(cb2, s.handle, cb.fileno()) == 1
        assert hb.kernels and s.handle in cb2._t.cm_states
        # the peer disconnects: the DREQ reaches the id on its new fd
        cmd(ca, "DISCONNECT", c.handle)
        ev = raw_event(cb2)
        assert ev is not None and (ev["event"], ev["id"]) == (E.DISCONNECTED, s.handle)
        nothing(cb)
        cmd(cb2, "DISCONNECT", s.handle)  # the DREP, from the new fd
        ev = raw_event(cb2)
        assert ev is not None and ev["event"] == E.TIMEWAIT_EXIT
        # another host's fd is not one of this machine's
        other = CmId(ca)
        refused(errno.EINVAL, migrate, cb2, other.handle, ca.fileno())
        fab.close()


# --------------------------------------------------------------------------- INIT_QP_ATTR of a connection

def _connected(ca: EventChannel, cb: EventChannel, tos: Optional[int] = None,
               ack_timeout: Optional[int] = None) -> Any:
    lst = CmId(cb)
    lst.bind_addr("10.9.0.2:7471")
    lst.listen()
    c = CmId(ca)
    if tos is not None:
        set_option(ca, c.handle, ID, O.TOS, u8(tos))
    if ack_timeout is not None:
        set_option(ca, c.handle, ID, O.ACK_TIMEOUT, u8(ack_timeout))
    c.resolve_addr("10.9.0.2:7471", timeout_ms=1000)
    get(ca, E.ADDR_RESOLVED)
    c.resolve_route(1000)
    get(ca, E.ROUTE_RESOLVED)
    c.connect(0x100001, b"", responder_resources=2, initiator_depth=3, retry_count=5, rnr_retry_count=6)
    ev = cb.get_event(2)
    assert ev is not None and ev.event is E.CONNECT_REQUEST
    s = ev.id
    ev.ack()
    _check_req_rcvd(cb, s)
    uid = 0x5150
    cmd(cb, "ACCEPT", uid, 0x200001, 0, b"", 0, 0, 4, 1, 0, 0, 7, 1, s.handle, 0, 0, 0)
    cb.registry.ids[uid] = s  # the library's accept() would register the id under its uid
    s.uid = uid
    ev = raw_event(ca)
    assert ev is not None and ev["event"] == E.CONNECT_RESPONSE
    cmd(ca, "ACCEPT", 0, 0, 0, b"", 0, 0, 0, 0, 0, 0, 0, 0, c.handle, 0, 0, 0)  # the RTU
    ev = raw_event(cb)
    assert ev is not None and ev["event"] == E.ESTABLISHED
    return c, s


def _check_req_rcvd(cb: EventChannel, s: CmId) -> None:
    a = qp_attr(cb, s.handle, RTR)  # REQ_RCVD: the passive side may already go to RTR
    assert a["qp_attr_mask"] == 0x129181 and a["dest_qp_num"] == 0x100001


def test_init_qp_attr_of_a_connection_both_sides() -> None:
    with FakeFabric(timewait_ms=30) as fab:
        ha, hb = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        ca, cb = EventChannel(ha()), EventChannel(hb())
        c, s = _connected(ca, cb)
        ai, ar, at = (qp_attr(ca, c.handle, st) for st in (INIT, RTR, RTS))
        pi, pr, pt = (qp_attr(cb, s.handle, st) for st in (INIT, RTR, RTS))
        # INIT: remote write, and read + atomics because the id takes reads
        assert (ai["qp_attr_mask"], ai["qp_access_flags"], ai["port_num"]) == (0x39, 2 | 4 | 8, 1)
        assert (pi["qp_attr_mask"], pi["qp_access_flags"]) == (0x39, 2 | 4 | 8)
        # RTR: the peer's QPN, MTU 1024, the AH to the peer's GID
        for a, peer_qpn, peer_ip in ((ar, 0x200001, "10.9.0.2"), (pr, 0x100001, "10.9.0.1")):
            assert (a["qp_attr_mask"], a["qp_state"], a["dest_qp_num"], a["path_mtu"]) == (0x129181, RTR, peer_qpn, 3)
            assert ipaddress.IPv6Address(a["ah_attr.grh.dgid"]) == ipaddress.IPv6Address("::ffff:" + peer_ip)
            assert (a["ah_attr.grh.sgid_index"], a["ah_attr.grh.hop_limit"], a["ah_attr.is_global"],
                    a["ah_attr.port_num"], a["ah_attr.grh.traffic_class"]) == (1, 64, 1, 1, 0)
        # each side sends with the PSN the other receives with
        assert at["sq_psn"] == pr["rq_psn"] and pt["sq_psn"] == ar["rq_psn"]
        assert ar["rq_psn"] < 1 << 24 and pr["rq_psn"] < 1 << 24
        # RTS: timeout 19; the REQ's retry count; the RNR retry each side was given last
        assert (at["qp_attr_mask"], at["timeout"], at["retry_cnt"], at["rnr_retry"]) == (0x12e01, 19, 5, 7)
        assert (pt["qp_attr_mask"], pt["timeout"], pt["retry_cnt"], pt["rnr_retry"]) == (0x12e01, 19, 5, 7)
        # atomics: the REP's responder resources (4) bound the requester's depth, and so on
        assert (at["max_rd_atomic"], ar["max_dest_rd_atomic"]) == (4, 1)
        assert (pt["max_rd_atomic"], pr["max_dest_rd_atomic"]) == (1, 4)
        for st in (0, 4, 5, 6):  # RESET, SQD, SQE, ERR: not the IB CM's to give
            refused(errno.EINVAL, qp_attr, ca, c.handle, st)


def test_init_qp_attr_while_the_request_is_unanswered() -> None:
    with FakeFabric() as fab:
        ha, hb = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        ca, cb = EventChannel(ha()), EventChannel(hb())
        lst = CmId(cb)
        lst.bind_addr("10.9.0.2:7471")
        lst.listen()
        c = CmId(ca)
        c.resolve_addr("10.9.0.2:7471", timeout_ms=1000)
        get(ca, E.ADDR_RESOLVED)
        c.resolve_route(1000)
        get(ca, E.ROUTE_RESOLVED)
        c.connect(0x100001)  # REQ_SENT
        a = qp_attr(ca, c.handle, INIT)
        assert (a["qp_attr_mask"], a["qp_access_flags"]) == (0x39, 2)  # no responder resources: write only
        refused(errno.EINVAL, qp_attr, ca, c.handle, RTR)  # no REP yet
        ev = cb.get_event(2)
        assert ev is not None and ev.event is E.CONNECT_REQUEST
        cmd(cb, "REJECT", ev.id.handle, 0, 0, b"", b"")
        assert raw_event(ca) is not None  # REJECTED
        refused(errno.EINVAL, qp_attr, ca, c.handle, INIT)  # the cm_id is idle now


def test_ack_timeout_and_tos_reach_the_qp_attributes() -> None:
    with FakeFabric() as fab:
        ha, hb = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        ca, cb = EventChannel(ha()), EventChannel(hb())
        c, s = _connected(ca, cb, tos=104, ack_timeout=21)
        assert qp_attr(ca, c.handle, RTS)["timeout"] == 21
        assert qp_attr(cb, s.handle, RTS)["timeout"] == 19  # the passive side's own option is unset
        # the TOS set before the route: the path's traffic class, on both sides' RTR
        assert qp_attr(cb, s.handle, RTR)["ah_attr.grh.traffic_class"] == 104
        assert qp_attr(ca, c.handle, RTR)["ah_attr.grh.traffic_class"] == 104
        # and a route resolved after those options has their traffic class and packet life
        # time (timeout less one); one resolved before them, the defaults
        late, early = CmId(ca), CmId(ca)
        for cm in (late, early):
            cm.resolve_addr("10.9.0.2:7471", timeout_ms=1000)
            get(ca, E.ADDR_RESOLVED)
        early.resolve_route(1000)
        get(ca, E.ROUTE_RESOLVED)
        for cm in (late, early):
            set_option(ca, cm.handle, ID, O.TOS, u8(104))
            set_option(ca, cm.handle, ID, O.ACK_TIMEOUT, u8(21))
        late.resolve_route(1000)
        get(ca, E.ROUTE_RESOLVED)
        got = []
        for cm in (late, early):
            buf = ctypes.create_string_buffer(wire.QUERY_PATH_REPLY_SIZE)
            cmd(ca, "QUERY_PATH", ctypes.addressof(buf), cm.handle, abi.QueryOption.PATH)
            rec = wire.path_records(buf.raw)[0]
            got.append((rec.traffic_class, rec.packet_life_time))
        assert got == [(104, 20), (0, 16)]


def test_afonly_keeps_an_ipv6_wildcard_listener_from_ipv4_requests() -> None:
    with FakeFabric() as fab:
        ha, hb = fab.host("10.9.0.1"), fab.host("10.9.0.2", "fd00::2")
        ca, cb = EventChannel(ha()), EventChannel(hb())
        lst = CmId(cb)
        set_option(cb, lst.handle, ID, O.AFONLY, i32(1))
        lst.bind_addr("[::]:7471")
        lst.listen()
        c = CmId(ca)
        c.resolve_addr("10.9.0.2:7471", timeout_ms=1000)
        get(ca, E.ADDR_RESOLVED)
        c.resolve_route(1000)
        get(ca, E.ROUTE_RESOLVED)
        c.connect(0x100001)
        ev = raw_event(ca)
        assert ev is not None and ev["event"] == E.REJECTED and ev["status"] == 28  # the service is there, no match
        assert raw_event(cb, QUIET) is None


# --------------------------------------------------------------------------- commands 23 and 24

def test_commands_past_the_kernels_table_are_einval(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net, max_cmd=abi.UserCmCmd.JOIN_MCAST)) as ch:  # 6.1's table
        cm = resolved(ch)
        refused(errno.EINVAL, cmd, ch, "RESOLVE_IB_SERVICE", cm.handle, 0, 1, b"", 1, 0)
        refused(errno.EINVAL, write_event, ch, cm.handle, E.USER)


def test_resolve_ib_service(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as ch:
        refused(errno.EINVAL, cmd, ch, "RESOLVE_IB_SERVICE", CmId(ch).handle, 0, 1, b"", 1, 0)  # no device
        roce = bound(ch)
        refused(errno.EOPNOTSUPP, cmd, ch, "RESOLVE_IB_SERVICE", roce.handle, 0, 1, b"", 1, 0)
        refused(errno.ENOENT, cmd, ch, "RESOLVE_IB_SERVICE", 0xDEAD, 0, 1, b"", 1, 0)
    ib = FakeNet(local={"10.0.0.1": FakeDevice(link_layer="InfiniBand")})
    with EventChannel(FakeKernel(ib)) as ch:
        cm = bound(ch)
        cmd(ch, "RESOLVE_IB_SERVICE", cm.handle, 0, 0x1234, b"", 1, 0)
        ev = raw_event(ch)  # the fake's fabric has no SA records: the query finds nothing
        assert ev is not None and (ev["event"], ev["status"]) == (E.ADDRINFO_ERROR, (-errno.ENOENT) & 0xFFFFFFFF)
        assert ch._t.ids[cm.handle].state is abi.RdmaCmState.ADDR_BOUND


def test_write_cm_event_queues_user_and_internal_events(ch: EventChannel) -> None:
    cm = CmId(ch)
    write_event(ch, cm.handle, E.USER, -5, arg=0x1122334455667788)
    ev = raw_event(ch)
    assert ev is not None and (ev["event"], ev["uid"], ev["id"], ev["status"]) == (
        E.USER, cm.uid, cm.handle, (-5) & 0xFFFFFFFF)
    assert struct.unpack_from("=II", ev["param"]) == (0x55667788, 0x11223344)  # param.arg32
    write_event(ch, cm.handle, E.INTERNAL)
    ev = raw_event(ch)
    assert ev is not None and ev["event"] == E.INTERNAL
    refused(errno.EINVAL, write_event, ch, cm.handle, E.ESTABLISHED)
    refused(errno.EINVAL, write_event, ch, 0xDEAD, 99)  # the event is checked before the id
    refused(errno.ENOENT, write_event, ch, 0xDEAD, E.USER)
    nothing(ch)


# --------------------------------------------------------------------------- private-data limits

def test_private_data_limits_are_stated_once() -> None:
    want = {"REQ": (56, 92), "SIDR_REQ": (180, 216), "REP": (196, 196), "REJ": (148, 148), "SIDR_REP": (136, 136)}
    for message, (ip, ib) in want.items():
        for family in (abi.AF_INET, abi.AF_INET6):
            assert abi.cm_private_data_limit(message, family) == wire_size(message, family) == ip
        assert abi.cm_private_data_limit(message, abi.AF_IB) == wire_size(message, abi.AF_IB) == ib
    assert abi.CMA_HDR_SIZE == 36 and abi.CM_PRIVATE_DATA["REQ"] == 92
