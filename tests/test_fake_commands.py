"""The fake kernel's answers to the commands past connection set-up, written as bytes: SET_OPTION,
INIT_QP_ATTR, NOTIFY, JOIN_MCAST / JOIN_IP_MCAST / LEAVE_MCAST, MIGRATE_ID, RESOLVE_IB_SERVICE and
WRITE_CM_EVENT.  Each command goes through the wire layer (``wire.COMMAND[name].encode``) and
``EventChannel.submit``, with ctypes buffers for the replies and option values; events the
library does not know how to route (a membership's) are read with GET_EVENT as bytes.  The
expectations are the kernel's (../shared/cm-notes.md sections 1, 4 and 5).
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import os
import struct
import time
from typing import Any, Dict, Optional

import pytest

from pyrdmacm import CmId, EventChannel, KernelError, PortSpace, abi, wire
from pyrdmacm._codec import CODECS
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.addr import parse_address
from pyrdmacm.testing import FakeDevice, FakeFabric, FakeKernel, FakeNet
from pyrdmacm.testing.fabric import wire_size

ID, IB = abi.OptionLevel.ID, abi.OptionLevel.IB
O = abi.OptionId
INIT, RTR, RTS = 1, 2, 3
EVENT = CODECS["rdma_ucm_event_resp"]
QP_ATTR = CODECS["ib_uverbs_qp_attr"]
UD = CODECS["rdma_ucm_ud_param"]
PATH = CODECS["ib_path_rec_data"]
SA_PATH = CODECS["ib_sa_path_rec"]
GOOD_PATH_FLAGS = int(abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL)
QUIET = 0.15


# --------------------------------------------------------------------------- helpers

def cmd(ch: EventChannel, name: str, *fields: Any) -> None:
    ch.submit(wire.COMMAND[name].encode(*fields), name)


def refused(code: int, fn: Any, *args: Any) -> None:
    with pytest.raises(KernelError) as info:
        fn(*args)
    assert info.value.errno == code, "errno %s, wanted %s" % (info.value.errno, code)


def raw_event(ch: EventChannel, wait: float = 1.0) -> Optional[Dict[str, Any]]:
    """GET_EVENT as bytes: the next event's fields, or None when none comes within ``wait``."""
    buf = ctypes.create_string_buffer(EVENT.size)
    end = time.monotonic() + wait
    while True:
        try:
            cmd(ch, "GET_EVENT", ctypes.addressof(buf))
            return EVENT.unpack_dict(buf.raw)
        except KernelError as e:
            if e.errno != errno.EAGAIN or time.monotonic() > end:
                if e.errno == errno.EAGAIN:
                    return None
                raise
            time.sleep(0.01)


def set_option(ch: EventChannel, handle: int, level: int, name: int, value: bytes,
               optlen: Optional[int] = None) -> None:
    buf = ctypes.create_string_buffer(value, max(len(value), 8))
    cmd(ch, "SET_OPTION", ctypes.addressof(buf), handle, level, name, len(value) if optlen is None else optlen)


def u8(v: int) -> bytes:
    return bytes([v])


def i32(v: int) -> bytes:
    return struct.pack("=i", v)


def qp_attr(ch: EventChannel, handle: int, state: int, out: int = QP_ATTR.size) -> Dict[str, Any]:
    buf = ctypes.create_string_buffer(QP_ATTR.size)
    data = wire.COMMAND["INIT_QP_ATTR"].encode(ctypes.addressof(buf), handle, state)
    data = wire.header(abi.UserCmCmd.INIT_QP_ATTR, len(data) - 8, out) + data[8:]
    ch.submit(data, "INIT_QP_ATTR")
    return QP_ATTR.unpack_dict(buf.raw)


def join(ch: EventChannel, handle: int, group: str, uid: int = 0x77, flags: int = 0,
         addr_size: Optional[int] = None) -> int:
    """JOIN_MCAST: the membership's id."""
    a = parse_address(group + ":0") if ":" not in group else parse_address("[%s]:0" % group)
    resp = ctypes.create_string_buffer(4)
    cmd(ch, "JOIN_MCAST", ctypes.addressof(resp), uid, handle, a.size if addr_size is None else addr_size, flags,
        a.pack_storage())
    return int(struct.unpack("=I", resp.raw)[0])


def join_ip(ch: EventChannel, handle: int, group: str, uid: int = 0x77) -> int:
    a = parse_address(group + ":0")
    resp = ctypes.create_string_buffer(4)
    cmd(ch, "JOIN_IP_MCAST", ctypes.addressof(resp), uid, a.pack_in6(), handle)
    return int(struct.unpack("=I", resp.raw)[0])


def leave(ch: EventChannel, mc: int) -> int:
    resp = ctypes.create_string_buffer(4)
    cmd(ch, "LEAVE_MCAST", ctypes.addressof(resp), mc, 0)
    return int(struct.unpack("=I", resp.raw)[0])


def migrate(new: EventChannel, handle: int, old_fd: int) -> int:
    resp = ctypes.create_string_buffer(4)
    cmd(new, "MIGRATE_ID", ctypes.addressof(resp), handle, old_fd)
    return int(struct.unpack("=I", resp.raw)[0])


def write_event(ch: EventChannel, handle: int, event: int, status: int = 0, arg: int = 0) -> None:
    param = struct.pack("=Q", arg).ljust(CODECS["rdma_ucm_write_cm_event"].size - 16, b"\0")
    cmd(ch, "WRITE_CM_EVENT", handle, 0, event, status & 0xFFFFFFFF, param)


def nothing(ch: EventChannel) -> None:
    ev = raw_event(ch, QUIET)
    assert ev is None, "unexpected event %r" % (ev,)


def get(ch: EventChannel, event: E) -> Any:
    ev = ch.get_event(2)
    assert ev is not None and ev.event is event, "got %r, wanted %s" % (ev, event)
    ev.ack()
    return ev


@pytest.fixture
def net() -> FakeNet:
    return FakeNet()


@pytest.fixture
def ch(net: FakeNet) -> Any:
    with EventChannel(FakeKernel(net)) as c:
        yield c


def bound(ch: EventChannel, ps: PortSpace = PortSpace.TCP, addr: str = "10.0.0.1:0") -> CmId:
    cm = CmId(ch, ps)
    cm.bind_addr(addr)
    return cm


def resolved(ch: EventChannel, ps: PortSpace = PortSpace.TCP, dst: str = "10.0.0.2") -> CmId:
    cm = CmId(ch, ps)
    cm.resolve_addr(dst, timeout_ms=1000)
    get(ch, E.ADDR_RESOLVED)
    return cm


# --------------------------------------------------------------------------- SET_OPTION

def test_tos_takes_one_byte(ch: EventChannel) -> None:
    cm = CmId(ch)
    set_option(ch, cm.handle, ID, O.TOS, u8(0x68))
    refused(errno.EINVAL, set_option, ch, cm.handle, ID, O.TOS, i32(0x68))


def test_reuseaddr_may_be_set_any_time_and_cleared_only_while_idle(ch: EventChannel) -> None:
    cm = CmId(ch)
    set_option(ch, cm.handle, ID, O.REUSEADDR, i32(1))
    set_option(ch, cm.handle, ID, O.REUSEADDR, i32(0))  # IDLE: either way
    cm.bind_addr("10.0.0.1:7471")
    refused(errno.EINVAL, set_option, ch, cm.handle, ID, O.REUSEADDR, i32(0))
    set_option(ch, cm.handle, ID, O.REUSEADDR, i32(7))  # any non-zero int sets it
    refused(errno.EINVAL, set_option, ch, cm.handle, ID, O.REUSEADDR, u8(1))  # an int, not a byte


def test_afonly_until_the_address_is_resolved(ch: EventChannel) -> None:
    cm = CmId(ch)
    set_option(ch, cm.handle, ID, O.AFONLY, i32(1))
    cm.bind_addr("10.0.0.1:0")
    set_option(ch, cm.handle, ID, O.AFONLY, i32(0))  # ADDR_BOUND still takes it
    refused(errno.EINVAL, set_option, ch, cm.handle, ID, O.AFONLY, u8(1))
    cm2 = resolved(ch)
    refused(errno.EINVAL, set_option, ch, cm2.handle, ID, O.AFONLY, i32(1))


def test_ack_timeout_on_rc_ids_only(ch: EventChannel) -> None:
    rc, ud = CmId(ch), CmId(ch, PortSpace.UDP)
    set_option(ch, rc.handle, ID, O.ACK_TIMEOUT, u8(14))
    refused(errno.EINVAL, set_option, ch, ud.handle, ID, O.ACK_TIMEOUT, u8(14))
    refused(errno.EINVAL, set_option, ch, rc.handle, ID, O.ACK_TIMEOUT, i32(14))


def test_unknown_names_and_levels_are_enosys(ch: EventChannel) -> None:
    cm = CmId(ch)
    refused(errno.ENOSYS, set_option, ch, cm.handle, ID, 9, i32(1))
    refused(errno.ENOSYS, set_option, ch, cm.handle, 99, 0, u8(1))
    refused(errno.ENOSYS, set_option, ch, cm.handle, IB, 2, u8(1))


def test_huge_optlen_is_einval_before_the_id_is_looked_up(ch: EventChannel) -> None:
    refused(errno.EINVAL, set_option, ch, 0xDEAD, ID, O.TOS, u8(1), 1 << 31)
    refused(errno.ENOENT, set_option, ch, 0xDEAD, ID, O.TOS, u8(1))


def _path_entry(flags: int = GOOD_PATH_FLAGS, tclass: int = 0, plt: int = 13) -> bytes:
    rec = SA_PATH.pack_dict({"dgid": ipaddress.IPv6Address("::ffff:10.0.0.2").packed,
                             "sgid": ipaddress.IPv6Address("::ffff:10.0.0.1").packed,
                             "raw_flow_hop": 64, "tclass": tclass, "reversible_numb_path": 0x81, "pkey": 0xFFFF,
                             "mtu": (2 << 6) | 3, "rate": (2 << 6) | 3, "packet_life_time": (2 << 6) | plt})
    return PATH.pack_dict({"flags": flags, "path_rec": rec})


def test_ib_path_refusals(ch: EventChannel) -> None:
    idle = CmId(ch)
    refused(errno.EINVAL, set_option, ch, idle.handle, IB, abi.OptionIb.PATH, _path_entry())  # no device
    cm = resolved(ch)
    refused(errno.EINVAL, set_option, ch, cm.handle, IB, abi.OptionIb.PATH, _path_entry(flags=0))  # no 0x2b entry
    refused(errno.EINVAL, set_option, ch, cm.handle, IB, abi.OptionIb.PATH, _path_entry()[:-1])  # not n * 72
    refused(errno.EINVAL, set_option, ch, cm.handle, IB, abi.OptionIb.PATH, b"")
    b = bound(ch, addr="10.0.0.1:0")  # a device, but ADDR_BOUND
    refused(errno.EINVAL, set_option, ch, b.handle, IB, abi.OptionIb.PATH, _path_entry())
    nothing(ch)


def test_ib_path_resolves_the_route_and_reports_it(ch: EventChannel) -> None:
    cm = resolved(ch)
    paths = _path_entry(flags=int(abi.IbPathFlag.GMP)) + _path_entry(tclass=0x68)  # the second is the one
    set_option(ch, cm.handle, IB, abi.OptionIb.PATH, paths)
    ev = raw_event(ch)
    assert ev is not None and (ev["event"], ev["id"], ev["uid"]) == (E.ROUTE_RESOLVED, cm.handle, cm.uid)
    kernel = ch._t
    assert kernel.ids[cm.handle].state is abi.RdmaCmState.ROUTE_RESOLVED
    # QUERY PATH gives back the record that was set
    buf = ctypes.create_string_buffer(wire.QUERY_PATH_REPLY_SIZE)
    cmd(ch, "QUERY_PATH", ctypes.addressof(buf), cm.handle, abi.QueryOption.PATH)
    recs = wire.path_records(buf.raw)
    assert len(recs) == 1 and recs[0].flags == GOOD_PATH_FLAGS and recs[0].traffic_class == 0x68
    refused(errno.EINVAL, set_option, ch, cm.handle, IB, abi.OptionIb.PATH, _path_entry())  # not ADDR_RESOLVED now


# --------------------------------------------------------------------------- INIT_QP_ATTR on one host

def test_init_qp_attr_refusals(ch: EventChannel) -> None:
    cm = CmId(ch)
    refused(errno.EINVAL, qp_attr, ch, cm.handle, INIT)  # no device
    b = bound(ch)
    refused(errno.EINVAL, qp_attr, ch, b.handle, 7)  # past IB_QPS_ERR
    refused(errno.ENOSPC, qp_attr, ch, b.handle, INIT, QP_ATTR.size - 1)
    refused(errno.ENOENT, qp_attr, ch, 0xDEAD, INIT)
    refused(errno.EINVAL, qp_attr, ch, 0xDEAD, 7)  # the state is checked before the id


def test_init_qp_attr_of_a_ud_id_has_the_qkey_in_every_state(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP)
    for state in (INIT, RTR, RTS):
        a = qp_attr(ch, cm.handle, state)
        assert (a["qp_attr_mask"], a["qp_state"], a["qkey"], a["port_num"], a["pkey_index"]) == (
            0x71, state, 0x01234567, 1, 0)


def test_init_qp_attr_of_an_rc_id_before_any_connection(ch: EventChannel) -> None:
    cm = resolved(ch)
    a = qp_attr(ch, cm.handle, RTR)  # no cm_id yet: the same INIT attributes whatever the state
    assert (a["qp_attr_mask"], a["qp_state"], a["qp_access_flags"], a["port_num"], a["dest_qp_num"]) == (
        0x39, RTR, 0, 1, 0)


def test_init_qp_attr_after_the_lone_fakes_reject_is_einval(ch: EventChannel) -> None:
    cm = resolved(ch)
    cm.resolve_route(1000)
    get(ch, E.ROUTE_RESOLVED)
    cm.connect(0x100001)
    get(ch, E.REJECTED)
    refused(errno.EINVAL, qp_attr, ch, cm.handle, INIT)  # the cm_id is idle


# --------------------------------------------------------------------------- NOTIFY alone

def test_notify_on_the_lone_fake_is_einval(ch: EventChannel) -> None:
    idle, routed = CmId(ch), resolved(ch)
    for cm in (idle, routed):
        refused(errno.EINVAL, cmd, ch, "NOTIFY", cm.handle, 4)  # COMM_EST
        refused(errno.EINVAL, cmd, ch, "NOTIFY", cm.handle, 6)  # PATH_MIG
    refused(errno.ENOENT, cmd, ch, "NOTIFY", 0xDEAD, 4)


# --------------------------------------------------------------------------- multicast

def _mc_ud(ev: Dict[str, Any]) -> Dict[str, Any]:
    return UD.unpack_dict(ev["param"][: UD.size])


def test_join_reports_multicast_join_at_once_under_the_membership(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP)
    mc = join(ch, cm.handle, "239.1.1.1", uid=0xABC)
    ev = raw_event(ch)
    assert ev is not None and (ev["event"], ev["uid"], ev["id"], ev["status"]) == (E.MULTICAST_JOIN, 0xABC, mc, 0)
    ud = _mc_ud(ev)
    assert (ud["qp_num"], ud["qkey"], ud["private_data_len"]) == (0xFFFFFF, 0x01234567, 0)
    assert ipaddress.IPv6Address(ud["ah_attr.grh.dgid"]) == ipaddress.IPv6Address("::ffff:239.1.1.1")
    assert (ud["ah_attr.dlid"], ud["ah_attr.sl"], ud["ah_attr.grh.hop_limit"], ud["ah_attr.grh.sgid_index"],
            ud["ah_attr.is_global"], ud["ah_attr.port_num"]) == (0, 0, 64, 1, 1, 1)
    # send-only full member and JOIN_IP_MCAST (full member) join the same way, each its own membership
    mc2 = join(ch, cm.handle, "239.1.1.2", uid=0xABD, flags=1)
    mc3 = join_ip(ch, cm.handle, "239.1.1.3", uid=0xABE)
    got = [raw_event(ch), raw_event(ch)]
    assert [(e["uid"], e["id"]) for e in got if e] == [(0xABD, mc2), (0xABE, mc3)]
    assert len({mc, mc2, mc3}) == 3
    assert ipaddress.IPv6Address(_mc_ud(got[1])["ah_attr.grh.dgid"]) == ipaddress.IPv6Address("::ffff:239.1.1.3")


def test_join_works_from_addr_resolved_too(ch: EventChannel) -> None:
    cm = resolved(ch, PortSpace.UDP, "239.1.1.1")
    mc = join(ch, cm.handle, "239.1.1.1")
    ev = raw_event(ch)
    assert ev is not None and ev["id"] == mc and ev["event"] == E.MULTICAST_JOIN


def test_join_refusals(ch: EventChannel) -> None:
    ud = bound(ch, PortSpace.UDP)
    refused(errno.EINVAL, join, ch, ud.handle, "239.1.1.1", 1, 2)  # join_flags 2
    refused(errno.EINVAL, join, ch, CmId(ch, PortSpace.UDP).handle, "239.1.1.1")  # no device
    refused(errno.EINVAL, join, ch, bound(ch).handle, "239.1.1.1")  # PS_TCP: not a datagram id
    refused(errno.EINVAL, join, ch, ud.handle, "239.1.1.1", 1, 0, 28)  # addr_size is not the sockaddr's
    refused(errno.ENOENT, join, ch, 0xDEAD, "239.1.1.1")
    routed = resolved(ch, PortSpace.UDP)
    routed.resolve_route(1000)
    get(ch, E.ROUTE_RESOLVED)
    refused(errno.EINVAL, join, ch, routed.handle, "239.1.1.1")  # ROUTE_RESOLVED: not BOUND / ADDR_RESOLVED
    resp = ctypes.create_string_buffer(4)
    a = parse_address("239.1.1.1:0")
    data = wire.COMMAND["JOIN_MCAST"].encode(ctypes.addressof(resp), 1, ud.handle, a.size, 0, a.pack_storage())
    refused(errno.ENOSPC, ch.submit, wire.header(abi.UserCmCmd.JOIN_MCAST, len(data) - 8, 3) + data[8:], "JOIN_MCAST")
    nothing(ch)


def test_ipv6_groups_on_roce_fail_with_enotsupp(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP, "[fd00::1]:0")
    refused(524, join, ch, cm.handle, "ff0e::1")
    nothing(ch)

    class Newer(FakeKernel):
        roce_ipv6_multicast = True

    with EventChannel(Newer(FakeNet())) as ch2:
        cm2 = bound(ch2, PortSpace.UDP, "[fd00::1]:0")
        mc = join(ch2, cm2.handle, "ff0e::1")
        ev = raw_event(ch2)
        assert ev is not None and ev["id"] == mc
        assert ipaddress.IPv6Address(_mc_ud(ev)["ah_attr.grh.dgid"]) == ipaddress.IPv6Address("ff0e::1")


def test_leave_reports_the_events_read_and_a_second_leave_is_enoent(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP)
    mc = join(ch, cm.handle, "239.1.1.1")
    assert raw_event(ch) is not None
    assert leave(ch, mc) == 1
    refused(errno.ENOENT, leave, ch, mc)
    refused(errno.ENOENT, leave, ch, 0xDEAD)


def test_leave_drops_the_unread_events_of_the_membership_only(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP)
    mc1 = join(ch, cm.handle, "239.1.1.1")
    mc2 = join(ch, cm.handle, "239.1.1.2")
    assert leave(ch, mc1) == 0
    ev = raw_event(ch)
    assert ev is not None and ev["id"] == mc2
    nothing(ch)


def test_destroying_the_id_drops_its_memberships_and_their_events(ch: EventChannel) -> None:
    cm = bound(ch, PortSpace.UDP)
    mc = join(ch, cm.handle, "239.1.1.1")
    assert cm.destroy() == 0  # the join's event was never read
    nothing(ch)
    refused(errno.ENOENT, leave, ch, mc)


def test_leave_of_another_fds_membership_is_einval(net: FakeNet) -> None:
    with EventChannel(FakeKernel(net)) as a, EventChannel(FakeKernel(net)) as b:
        cm = bound(a, PortSpace.UDP)
        mc = join(a, cm.handle, "239.1.1.1")
        refused(errno.EINVAL, leave, b, mc)
        assert leave(a, mc) == 0


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
    cb._ids[uid] = s  # the library's accept() would register the id under its uid
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
