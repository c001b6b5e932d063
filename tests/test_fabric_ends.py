"""Connection management between fake hosts, continued from tests/test_fabric.py: what
destroying an id does in each state, stale connections, UD (SIDR), several channels, ports
and the backlog, other destinations.  The expectations are the kernel's for ids without a QP
(../shared/cm-notes.md sections 0-5).
"""


from __future__ import annotations

import errno
import ipaddress
import time

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, State, UsageError
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.core.events import UdParam
from pyrdmacm.testing import FakeFabric, FakeKernel, FakeNet

from fabric_helpers import (CM_TIMEOUT_MS, TIMEWAIT_MS, UD_CODEC, accept, connected, establish, expect, listener,
                            nothing, raw_connect, refused, reject, routed)
from fabric_helpers import channels, fabric, hosts  # fixtures


# --------------------------------------------------------------------------- destroy, by state

def test_destroying_an_unanswered_request_rejects_28(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    s.destroy()
    assert expect(ca, E.REJECTED, 28).private_data == bytes(148)


def test_destroying_a_listener_rejects_its_unread_requests_28(channels):
    ca, cb = channels
    lst = listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    lst.destroy()  # its CONNECT_REQUEST was never read: the request's id goes with it
    expect(ca, E.REJECTED, 28)
    nothing(cb)


def test_destroying_the_passive_id_before_the_rtu_rejects_28(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s, 0x200001)
    expect(ca, E.CONNECT_RESPONSE)
    s.destroy()
    expect(ca, E.REJECTED, 28)
    refused(errno.EINVAL, establish, ca, c)  # nothing left to send an RTU for


def test_destroying_the_active_id_after_connect_response_rejects_28(channels):
    """No RTU ever: the passive side waits (rping 'accepting client connection request')
    until the active id goes, then REJECTED 28."""
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s, 0x200001)
    expect(ca, E.CONNECT_RESPONSE)
    nothing(cb)
    c.destroy()
    expect(cb, E.REJECTED, 28)


def test_destroying_a_request_before_any_answer_withdraws_it(fabric, channels):
    """REQ_SENT: REJ 4 (TIMEOUT) to the request's id, which has no uid yet: its ACCEPT fails."""
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    c.destroy()
    assert fabric.messages[-1].kind == "REJ" and fabric.messages[-1].info["reason"] == 4
    nothing(cb)
    refused(errno.EINVAL, accept, cb, s, 0x200001)


@pytest.mark.parametrize("who", ["active", "passive"])
def test_destroying_an_established_id_disconnects_the_peer(channels, who):
    ca, cb = channels
    c, s = connected(ca, cb)
    gone, (stays, ch) = (c, (s, cb)) if who == "active" else (s, (c, ca))
    gone.destroy()
    expect(ch, E.DISCONNECTED, 0)
    stays.disconnect()  # the DREP, to an id in timewait: nothing comes back
    expect(ch, E.TIMEWAIT_EXIT)
    nothing(ca, cb)


def test_destroying_after_disconnected_sends_the_drep(channels):
    ca, cb = channels
    c, s = connected(ca, cb)
    c.disconnect()
    expect(cb, E.DISCONNECTED)
    s.destroy()  # DREQ_RCVD: cm_destroy_id sends the DREP
    expect(ca, E.DISCONNECTED, 0)
    expect(ca, E.TIMEWAIT_EXIT)


def test_closing_a_channel_destroys_its_ids_with_the_same_effects(hosts):
    a, b = hosts
    ca, cb1, cb2 = EventChannel(a()), EventChannel(b()), EventChannel(b())
    with ca:
        c1, s1 = connected(ca, cb1, 0x100001, 0x200001)  # established, on cb1
        listener(cb2, "10.9.0.2:7472")
        c2 = routed(ca, "10.9.0.2:7472")
        c2.connect(0x100002)  # an unread request on cb2
        cb1.close()
        expect(ca, E.DISCONNECTED, 0)
        assert c1.state is State.DISCONNECTED
        cb2.close()
        expect(ca, E.REJECTED, 28)
        assert c2.state is State.FAILED and b.kernels == []


# --------------------------------------------------------------------------- stale connections

def test_a_second_connection_with_the_same_qp_num_is_stale(fabric, hosts):
    """The IB CM keeps (remote QPN, remote CA GUID) of its live connections: a second REQ
    with the pair gets REJ 10, and the live connection holding it is sent a DREQ
    (cm_match_req).  The pair leaves the table when that connection enters timewait."""
    a, b = hosts
    ca1, ca2, cb = EventChannel(a()), EventChannel(a()), EventChannel(b())
    ca1.answer_disconnect = False  # its DREP is written below
    with ca1, ca2, cb:
        lst = listener(cb)
        c1, s1 = connected(ca1, cb, 0x100001, 0x200001, lst=lst)
        connected(ca2, cb, 0x100002, 0x200002, lst=lst)  # another QPN: no stale connection
        c2 = routed(ca2)  # another channel of the same host: the same CA GUID
        c2.connect(0x100001)
        assert expect(ca2, E.REJECTED, 10).private_data == bytes(148)
        assert c2.state is State.FAILED
        expect(ca1, E.DISCONNECTED, 0)  # B's CM sent the live connection a DREQ
        nothing(cb)  # B's id sent it: it hears nothing until the DREP
        c1.disconnect()  # the DREP
        expect(cb, E.DISCONNECTED, 0)
        expect(ca1, E.TIMEWAIT_EXIT)
        expect(cb, E.TIMEWAIT_EXIT)
        c3 = routed(ca2)
        c3.connect(0x100001)  # the QPN is free again
        expect(cb, E.CONNECT_REQUEST)
        kinds = [(m.kind, m.info.get("reason")) for m in fabric.messages]
        assert ("REJ", 10) in kinds


def test_the_same_qp_num_from_another_host_is_no_stale_connection(fabric, hosts):
    a, b = hosts
    c_host = fabric.host("10.9.0.3")
    ca, cb, cc = EventChannel(a()), EventChannel(b()), EventChannel(c_host())
    with ca, cb, cc:
        lst = listener(cb)
        connected(ca, cb, 0x100001, 0x200001, lst=lst)
        connected(cc, cb, 0x100001, 0x200002, lst=lst)  # another CA GUID
        assert a.guid != c_host.guid


def test_a_passive_side_reusing_its_qp_num_towards_one_host_is_stale(channels):
    """cm_rep_handler: the requester's CM already holds (QPN, CA GUID) of the REP: REJ 10
    to the passive side; the request is left unanswered (UNREACHABLE -ETIMEDOUT)."""
    ca, cb = channels
    lst = listener(cb)
    connected(ca, cb, 0x100001, 0x200001, lst=lst)
    c2 = routed(ca)
    c2.connect(0x100002)
    s2 = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s2, 0x200001)  # the QPN of the first connection again
    expect(cb, E.REJECTED, 10)
    expect(ca, E.UNREACHABLE, -errno.ETIMEDOUT, timeout=CM_TIMEOUT_MS / 1000.0 + 1)


# --------------------------------------------------------------------------- UD (SIDR)

def test_ud_accept_gives_established_with_the_address_handle(hosts, channels):
    a, b = hosts
    ca, cb = channels
    lst = listener(cb, ps=PortSpace.UDP)
    c = routed(ca, ps=PortSpace.UDP)
    req_pd = bytes(range(180))  # the most a SIDR REQ of an IP id carries
    with pytest.raises(UsageError, match="at most 180"):
        c.connect(0x100001, req_pd + b"x")
    refused(errno.EINVAL, raw_connect, ca, c, 0x100001, req_pd + b"x")
    c.connect(0x100001, req_pd[:10])
    ev = expect(cb, E.CONNECT_REQUEST)
    assert ev.listen_id is lst and ev.id.uid == 0
    p = ev.param
    assert isinstance(p, UdParam) and p.qp_num == 0 and p.private_data == req_pd[:10] + bytes(170)
    assert UD_CODEC.unpack_dict(ev.raw_param)["private_data_len"] == 180
    rep_pd = b"udp-ok" + bytes(range(100))
    accept(cb, ev.id, 0x300003, rep_pd)
    ev = expect(ca, E.ESTABLISHED, 0)
    p = ev.param
    assert isinstance(p, UdParam)
    assert (p.qp_num, p.qkey, p.dgid, p.port_num, p.is_global) == (0x300003, 0x01234567, b.gid(), 1, 1)
    assert p.dgid == ipaddress.IPv6Address("::ffff:10.9.0.2")
    assert p.private_data == rep_pd + bytes(136 - len(rep_pd))
    raw = UD_CODEC.unpack_dict(ev.raw_param)
    assert raw["ah_attr.grh.hop_limit"] == 64 and raw["private_data_len"] == 136
    assert c.state is State.CONNECTED
    nothing(ca, cb)  # no event on the passive side, no RTU


def test_ud_reject_is_unreachable_2_with_data_and_no_listener_is_1(channels):
    ca, cb = channels
    listener(cb, ps=PortSpace.UDP)
    c = routed(ca, ps=PortSpace.UDP)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, reject, cb, s, 0, bytes(137))  # a SIDR REP carries 136
    reject(cb, s, 0, b"no room")
    ev = expect(ca, E.UNREACHABLE, 2)
    assert isinstance(ev.param, UdParam) and ev.private_data == b"no room" + bytes(129)
    # nobody listens in PS_UDP on 7472 (a PS_TCP listener there does not count)
    listener(cb, "10.9.0.2:7472")
    c2 = routed(ca, "10.9.0.2:7472", ps=PortSpace.UDP)
    c2.connect(0x100002)
    ev = expect(ca, E.UNREACHABLE, 1)
    assert ev.private_data == bytes(136)
    nothing(cb)


def test_ud_accept_with_137_bytes_is_einval_and_unreachable_2(channels):
    ca, cb = channels
    listener(cb, ps=PortSpace.UDP)
    c = routed(ca, ps=PortSpace.UDP)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, accept, cb, s, 0x300003, bytes(137))
    assert expect(ca, E.UNREACHABLE, 2).private_data == bytes(136)


def test_ud_request_destroyed_unanswered_is_unreachable_2(channels):
    ca, cb = channels
    listener(cb, ps=PortSpace.UDP)
    c = routed(ca, ps=PortSpace.UDP)
    c.connect(0x100001)
    expect(cb, E.CONNECT_REQUEST).id.destroy()
    expect(ca, E.UNREACHABLE, 2)


# --------------------------------------------------------------------------- several channels, ports, backlog

def test_several_channels_per_host(hosts):
    a, b = hosts
    ca1, ca2, cb1, cb2 = EventChannel(a()), EventChannel(a()), EventChannel(b()), EventChannel(b())
    with ca1, ca2, cb1, cb2:
        l1 = listener(cb1, "10.9.0.2:7471")
        l2 = listener(cb2, "0.0.0.0:7472")
        # a port of the host is taken for every channel of it (cma_check_port)
        refused(errno.EADDRINUSE, CmId(cb2).bind_addr, "10.9.0.2:7471")
        refused(errno.EADDRNOTAVAIL, CmId(cb1).bind_addr, "10.9.0.2:7472")
        c1, s1 = connected(ca1, cb1, 0x100001, 0x200001, "10.9.0.2:7471", lst=l1)
        c2, s2 = connected(ca2, cb2, 0x100002, 0x200002, "10.9.0.2:7472", lst=l2)
        c3, s3 = connected(ca1, cb2, 0x100003, 0x200003, "10.9.0.2:7472", lst=l2)
        assert {s.channel for s in (s1, s2, s3)} == {cb1, cb2} and s1.channel is cb1
        # the ephemeral ports of one host differ across its channels
        assert len({c.local_addr.port for c in (c1, c2, c3)}) == 3
        c2.disconnect()
        expect(cb2, E.DISCONNECTED)
        nothing(cb1, ca1)
        s2.disconnect()
        expect(ca2, E.DISCONNECTED)
        assert len(a.kernels) == len(b.kernels) == 2


def test_a_full_backlog_drops_requests_until_one_is_read():
    """The backlog counts unread CONNECT_REQUESTs; a REQ beyond it gets no REJ and is sent
    again: it gets in once the first is read, or times out (UNREACHABLE -ETIMEDOUT)."""
    timeout_ms = 600  # room for the steps below before a retried REQ gives up
    with FakeFabric(timewait_ms=TIMEWAIT_MS, cm_timeout_ms=timeout_ms, cm_retry_ms=10) as fab:
        ca, cb = EventChannel(fab.host("10.9.0.1")()), EventChannel(fab.host("10.9.0.2")())
        _backlog_case(ca, cb, timeout_ms)


def _backlog_case(ca: EventChannel, cb: EventChannel, timeout_ms: int) -> None:
    listener(cb, backlog=1)
    c1, c2 = routed(ca), routed(ca)
    c1.connect(0x100001)
    c2.connect(0x100002)
    nothing(ca, timeout=0.05)  # no REJ for the second
    assert expect(cb, E.CONNECT_REQUEST).param.qp_num == 0x100001  # reading it frees the slot
    time.sleep(0.05)  # the second one's next try gets in, and stays unread
    c3 = routed(ca)
    c3.connect(0x100003)  # the backlog is full again: the third waits, then fails
    # patience beyond the CM time-out: the kernel tier runs this beside busy lab guests,
    # where the fake's timer thread can be late (CI once waited 1.6 s in vain)
    expect(ca, E.UNREACHABLE, -errno.ETIMEDOUT, timeout=timeout_ms / 1000.0 + 10)
    assert expect(cb, E.CONNECT_REQUEST).param.qp_num == 0x100002
    nothing(cb)


def test_a_destination_no_host_owns_is_unreachable(fabric, channels):
    ca, cb = channels
    a = fabric.hosts[0]
    a.net.peers.add("10.9.0.77")  # answers ARP, but no host of the fabric has it
    c = routed(ca, "10.9.0.77:7471")
    c.connect(0x100001)
    expect(ca, E.UNREACHABLE, -errno.ETIMEDOUT, timeout=CM_TIMEOUT_MS / 1000.0 + 1)


def test_listen_on_an_unbound_id_binds_the_any_address(channels):
    ca, cb = channels
    lst = CmId(cb)
    lst.listen()
    port = lst.local_addr.port
    assert str(lst.local_addr.ip) == "0.0.0.0" and port
    c = routed(ca, "10.9.0.2:%d" % port)
    c.connect(0x100001)
    assert expect(cb, E.CONNECT_REQUEST).listen_id is lst


def test_ipv6_and_a_connection_to_the_own_host(fabric):
    a, b = fabric.host("fd00::1"), fabric.host("fd00::2")
    with EventChannel(a()) as ca, EventChannel(b()) as cb, EventChannel(a()) as ca2:
        connected(ca, cb, 0x100001, 0x200001, "[fd00::2]:7471")
        # loopback through the host's own address: both ends on one host
        connected(ca2, ca, 0x100002, 0x200002, "[fd00::1]:7471")


def test_the_single_host_fake_is_unchanged():
    """FakeKernel alone still rejects every CONNECT (28); an ACCEPT of the id it leaves is
    refused as the kernel refuses it (its IB CM id is idle: EINVAL)."""
    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        c = CmId(ch)
        c.resolve_addr("10.0.0.2:7471", timeout_ms=1000)
        expect(ch, E.ADDR_RESOLVED)
        c.resolve_route(1000)
        expect(ch, E.ROUTE_RESOLVED)
        c.connect(0x100001)
        expect(ch, E.REJECTED, 28)
        refused(errno.EINVAL, accept, ch, c, 1)
