"""The fake kernel's answers to the commands past connection set-up, written as bytes: SET_OPTION,
INIT_QP_ATTR, NOTIFY, JOIN_MCAST / JOIN_IP_MCAST / LEAVE_MCAST, MIGRATE_ID, RESOLVE_IB_SERVICE and
WRITE_CM_EVENT.  Each command goes through the wire layer (``wire.COMMAND[name].encode``) and
``EventChannel.submit``, with ctypes buffers for the replies and option values; events the
library does not know how to route (a membership's) are read with GET_EVENT as bytes.  The
expectations are the kernel's (../shared/cm-notes.md sections 1, 4 and 5).  Here: SET_OPTION,
INIT_QP_ATTR and NOTIFY on one host, multicast; MIGRATE_ID, a connection's INIT_QP_ATTR and
the rest are in tests/test_fake_commands_conn.py, the helpers in tests/fake_command_helpers.py.
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
from typing import Any, Dict


from pyrdmacm import CmId, EventChannel, PortSpace, abi, wire
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.addr import parse_address
from pyrdmacm.testing import FakeKernel, FakeNet

ID, IB = abi.OptionLevel.ID, abi.OptionLevel.IB
INIT, RTR, RTS = 1, 2, 3


from fake_command_helpers import (O, QP_ATTR, UD, PATH, SA_PATH, GOOD_PATH_FLAGS, cmd, refused, raw_event,
                                  set_option, u8, i32, qp_attr, join, join_ip, leave, nothing, get, bound,
                                  resolved)
from fake_command_helpers import ch, net  # fixtures


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
