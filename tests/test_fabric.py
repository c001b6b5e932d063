"""Connection management between fake hosts (pyrdmacm.testing.FakeFabric), through pyrdmacm's
API where it has the call, and through the command bytes where it does not (ACCEPT, REJECT,
NOTIFY, establish = ACCEPT with valid 0: tests/fabric_helpers.py).  The expectations are the
kernel's for ids without a QP (../shared/cm-notes.md sections 0-5).  Here: the RC handshake,
private data limits and bad accepts, NOTIFY, wrong states, disconnect and timewait; the
ends of ids and connections are in tests/test_fabric_ends.py.
"""


from __future__ import annotations

import errno
import time
from typing import Optional

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, State, StateError, UsageError, wire
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import RdmaCmState
from pyrdmacm.core.events import ConnParam
from pyrdmacm.testing import IbCmState

from fabric_helpers import (CM_TIMEOUT_MS, CONNECT, CONN_CODEC, TIMEWAIT_MS, accept, connected, establish, expect,
                            listener, nothing, notify, raw_connect, raw_disconnect, refused, reject, routed)
from fabric_helpers import channels, fabric, hosts  # fixtures


# --------------------------------------------------------------------------- the RC handshake

@pytest.mark.parametrize("direction", ["a_to_b", "b_to_a"])
def test_rc_handshake_carries_private_data_and_parameters_both_ways(hosts, direction):
    """CONNECT -> CONNECT_REQUEST (new id, uid 0, the listener's uid; the REQ's fields as the
    receiver reads them, private data padded to 56) -> ACCEPT -> CONNECT_RESPONSE (REP's
    fields, padded to 196) -> establish -> ESTABLISHED on the passive side only."""
    a, b = hosts if direction == "a_to_b" else hosts[::-1]
    ca, cb = EventChannel(a()), EventChannel(b())
    with ca, cb:
        dst = "%s:7471" % b.name
        lst = listener(cb, dst)
        c = routed(ca, dst)
        req_pd = b"hello from the active side\x00\x01\xff"
        c.connect(0x123456, req_pd, responder_resources=3, initiator_depth=2, retry_count=5, rnr_retry_count=6,
                  flow_control=1, srq=0, ece=(0x00ABCD, 0x1234))
        ev = expect(cb, E.CONNECT_REQUEST, 0)
        assert ev.listen_id is lst and ev.id is not lst and ev.id.uid == 0 and ev.id.state is State.REQUEST
        p = ev.param
        assert isinstance(p, ConnParam)
        assert p.private_data == req_pd + bytes(56 - len(req_pd)) and len(p.private_data) == 56
        assert (p.qp_num, p.retry_count, p.rnr_retry_count, p.flow_control, p.srq) == (0x123456, 5, 6, 1, 0)
        assert p.ece == (0x00ABCD, 0x1234)
        # the IB CM hands the REQ over from the receiver's side: the sender's initiator depth is
        # the receiver's responder resources, and the other way round (cm_format_req_event)
        assert (p.responder_resources, p.initiator_depth) == (2, 3)
        assert ev.ece == (0x00ABCD, 0x1234)
        s = ev.id
        held = b.kernels[0].ids[s.handle]  # what the kernel made: uid 0, in CONNECT
        assert (held.uid, held.state, held.device) == (0, RdmaCmState.CONNECT, "fake0")
        # the request's id knows both ends, as the REQ's rdma_cm header told them
        assert str(s.local_addr) == dst and s.peer_addr == c.local_addr
        rep_pd = bytes(range(1, 40))
        uid = accept(cb, s, 0x654321, rep_pd, responder_resources=4, initiator_depth=1, flow_control=1,
                     rnr_retry_count=9, ece=(0x000042, 7))
        assert b.kernels[0].ids[s.handle].uid == uid != 0
        ev = expect(ca, E.CONNECT_RESPONSE, 0)
        p = ev.param
        assert isinstance(p, ConnParam)
        assert p.private_data == rep_pd + bytes(196 - len(rep_pd)) and len(p.private_data) == 196
        # the REP carries no retry count; rnr retry is min(7, ...); rr and idepth swapped again
        assert (p.qp_num, p.responder_resources, p.initiator_depth, p.flow_control, p.rnr_retry_count,
                p.retry_count) == (0x654321, 1, 4, 1, 7, 0)
        assert ev.ece == (0x000042, 7)
        assert c.state is State.RESPONSE
        nothing(cb)  # the passive side waits for the RTU
        establish(ca, c)
        expect(cb, E.ESTABLISHED, 0)
        nothing(ca)  # the active side gets no ESTABLISHED from the kernel (librdmacm makes its own)
        assert a.kernels[0].cm_states[c.handle] is b.kernels[0].cm_states[s.handle] is IbCmState.ESTABLISHED
        assert [m.kind for m in b.fabric.messages] == ["REQ", "REP", "RTU"]


def test_private_data_at_the_limits_arrives_whole(channels):
    ca, cb = channels
    lst = listener(cb)
    c = routed(ca)
    req_pd = bytes(range(200, 256))  # 56 bytes: all of the REQ after the rdma_cm header
    c.connect(0x100001, req_pd)
    ev = expect(cb, E.CONNECT_REQUEST)
    assert ev.private_data == req_pd
    # the event is the real rdma_ucm_event_resp: the conn arm's length byte says 56
    assert CONN_CODEC.unpack_dict(ev.raw_param)["private_data_len"] == 56
    rep_pd = bytes(range(196))
    accept(cb, ev.id, 0x200001, rep_pd)
    ev = expect(ca, E.CONNECT_RESPONSE)
    assert ev.private_data == rep_pd and CONN_CODEC.unpack_dict(ev.raw_param)["private_data_len"] == 196
    lst.destroy()


def test_reject_carries_the_reason_and_the_data_padded_to_148(channels):
    ca, cb = channels
    listener(cb)
    for reason, want, pd in ((0, 28, b"server-full:retry-later"), (28, 28, bytes(range(148))), (35, 35, b"")):
        c = routed(ca)
        c.connect(0x100001 + reason)
        s = expect(cb, E.CONNECT_REQUEST).id
        reject(cb, s, reason, pd)
        ev = expect(ca, E.REJECTED, want)
        assert ev.private_data == pd + bytes(148 - len(pd)) and len(ev.private_data) == 148
        assert c.state is State.FAILED
        nothing(cb)
        c.destroy()
        s.destroy()


def test_reject_refuses_other_reasons_and_long_data_and_the_request_stays(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, reject, cb, s, 5)  # only 28 and 35 (0 means 28)
    refused(errno.EINVAL, reject, cb, s, 28, bytes(149))
    nothing(ca)
    reject(cb, s, 0, b"now")  # the request was still there
    assert expect(ca, E.REJECTED, 28).private_data.rstrip(b"\0") == b"now"
    refused(errno.EINVAL, reject, cb, s)  # nothing left to reject


def test_no_listener_is_rejected_8_without_data(fabric, channels):
    ca, cb = channels
    listener(cb, "10.9.0.2:7000")  # another port
    listener(cb, "10.9.0.2:7471", PortSpace.UDP)  # the port, another port space: another service id
    c = routed(ca)
    c.connect(0x100001, b"anyone?")
    ev = expect(ca, E.REJECTED, 8)
    assert ev.private_data == bytes(148)  # the CM's own REJ: the wire's 148 bytes, all zero
    assert fabric.messages[-1].kind == "REJ" and fabric.messages[-1].info["reason"] == 8
    nothing(cb)


def test_listener_on_another_address_of_the_host_rejects_28(fabric):
    a, b = fabric.host("10.9.0.1"), fabric.host("10.9.0.2", "10.9.1.2")
    with EventChannel(a()) as ca, EventChannel(b()) as cb:
        listener(cb, "10.9.1.2:7471")  # the service id is there; the rdma_cm's address match fails
        c = routed(ca, "10.9.0.2:7471")
        c.connect(0x100001)
        expect(ca, E.REJECTED, 28)
        nothing(cb)
        # the wildcard takes every address of the host
        w = listener(cb, "0.0.0.0:7472")
        c2 = routed(ca, "10.9.0.2:7472")
        c2.connect(0x100002)
        ev = expect(cb, E.CONNECT_REQUEST)
        assert ev.listen_id is w and str(ev.id.local_addr) == "10.9.0.2:7472"


# --------------------------------------------------------------------------- private data limits and bad accepts

def test_connect_with_57_bytes_is_einval_and_the_id_may_connect_again(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    with pytest.raises(UsageError, match="at most 56"):  # the library knows the limit
        c.connect(0x100001, bytes(57))
    refused(errno.EINVAL, raw_connect, ca, c, 0x100001, bytes(57))  # and so does the kernel
    assert c.state is State.ROUTE_RESOLVED
    nothing(ca, cb)
    c.connect(0x100001, bytes(56))
    expect(cb, E.CONNECT_REQUEST)


def test_accept_with_197_bytes_is_einval_and_the_peer_is_rejected_28(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, accept, cb, s, 0x200001, bytes(197))
    ev = expect(ca, E.REJECTED, 28)
    assert ev.private_data == bytes(148)
    refused(errno.EINVAL, accept, cb, s, 0x200001)  # the request is gone
    nothing(ca, cb)


def test_accept_with_valid_0_on_the_passive_side_rejects_28(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, accept, cb, s, 0x200001, valid=0)  # an RTU where a REP was due
    expect(ca, E.REJECTED, 28)


def test_accept_with_valid_1_on_the_active_side_rejects_the_peer(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s, 0x200001)
    expect(ca, E.CONNECT_RESPONSE)
    c._state = State.REQUEST  # let the bytes through the library's own check
    refused(errno.EINVAL, accept, ca, c, 0x100001)
    expect(cb, E.REJECTED, 28)


def test_a_second_accept_is_einval_and_ends_the_connection(channels):
    """ib_send_cm_rep refuses in REP_SENT, and rdma_accept's error path sends a REJ."""
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    uid = accept(cb, s, 0x200001)
    expect(ca, E.CONNECT_RESPONSE)
    s._state = State.REQUEST
    refused(errno.EINVAL, accept, cb, s, 0x200001, uid=uid)
    expect(ca, E.REJECTED, 28)


# --------------------------------------------------------------------------- NOTIFY

def test_notify_comm_est_gives_established_at_once_then_eisconn(channels):
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    refused(errno.EINVAL, notify, cb, s, 4)  # nothing accepted yet
    accept(cb, s, 0x200001)
    notify(cb, s, 4)
    expect(cb, E.ESTABLISHED, timeout=0)
    refused(errno.EISCONN, notify, cb, s, 4)
    notify(cb, s, 6)  # PATH_MIG on an established connection: 0
    refused(errno.EINVAL, notify, cb, s, 5)
    expect(ca, E.CONNECT_RESPONSE)
    establish(ca, c)  # the RTU comes late: no second ESTABLISHED
    nothing(cb)
    c.disconnect()
    expect(cb, E.DISCONNECTED)


def test_notify_and_disconnect_on_an_id_without_a_connection_are_einval(channels):
    ca, cb = channels
    lst = listener(cb)
    c = routed(ca)
    for cm, ch in ((c, ca), (lst, cb)):
        refused(errno.EINVAL, notify, ch, cm, 4)
        refused(errno.EINVAL, reject, ch, cm)
        refused(errno.EINVAL, accept, ch, cm, 1)
    refused(errno.EINVAL, raw_disconnect, ca, c)  # never connected: no IB CM id
    unbound = CmId(ca)
    refused(errno.EINVAL, raw_disconnect, ca, unbound)
    # a listener on a device's address listens through an IB CM id: rdma_disconnect finds one,
    # sends nothing and answers 0 (the lab's 6.1 and 7.2 did)
    raw_disconnect(cb, lst)
    assert cb._t.cm_states[lst.handle] is IbCmState.LISTEN


# --------------------------------------------------------------------------- wrong states

def test_connect_needs_route_resolved_valid_and_happens_once(channels):
    ca, cb = channels
    listener(cb)
    c = CmId(ca)
    c.resolve_addr("10.9.0.2:7471", timeout_ms=1000)
    expect(ca, E.ADDR_RESOLVED)

    def raw_connect(cm: CmId, valid: int = 1, size: Optional[int] = None) -> None:
        data = CONNECT.encode(0x100001, 0, b"", 0, 0, 0, 0, 0, 7, 7, valid, cm.handle, 0, 0, 0)
        if size is not None:  # a shorter body: the header says so
            data = wire.header(CONNECT.cmd, size) + data[len(CONNECT.header):][:size]
        ca.submit(data, "CONNECT")

    refused(errno.EINVAL, raw_connect, c)  # ADDR_RESOLVED: no route yet
    c.resolve_route(1000)
    expect(ca, E.ROUTE_RESOLVED)
    refused(errno.EINVAL, raw_connect, c, valid=0)
    refused(errno.EINVAL, raw_connect, c, size=279)  # shorter than up to reserved
    raw_connect(c, size=280)  # without the ECE (kernels before 5.8 take this)
    expect(cb, E.CONNECT_REQUEST)
    refused(errno.EINVAL, raw_connect, c)  # a second CONNECT
    d = routed(ca)
    d.connect(0x100002)
    refused(errno.EINVAL, raw_connect, d)
    with pytest.raises(StateError):
        d.connect(0x100002)  # the library says so before the syscall


# --------------------------------------------------------------------------- disconnect and timewait

@pytest.mark.parametrize("first", ["active", "passive"])
def test_disconnect_drep_and_timewait_on_both_sides(fabric, channels, first):
    ca, cb = channels
    ca.answer_disconnect = cb.answer_disconnect = False  # the DREP written by hand below
    c, s = connected(ca, cb)
    (one, ch1), (other, ch2) = ((c, ca), (s, cb)) if first == "active" else ((s, cb), (c, ca))
    one.disconnect()  # the DREQ
    expect(ch2, E.DISCONNECTED, 0)
    nothing(ch1)  # the first side waits for the DREP
    t0 = time.monotonic()
    other.disconnect()  # the DREP
    expect(ch1, E.DISCONNECTED, 0)
    expect(ch1, E.TIMEWAIT_EXIT, 0)
    expect(ch2, E.TIMEWAIT_EXIT, 0)
    assert time.monotonic() - t0 >= TIMEWAIT_MS / 1000.0 * 0.9
    assert [m.kind for m in fabric.messages][-2:] == ["DREQ", "DREP"]
    # a DISCONNECT once it is over sends nothing and is no error (rdma_disconnect returns 0)
    raw_disconnect(ch1, one)
    nothing(ca, cb)


def test_a_dreq_nobody_answers_times_out(channels):
    """The passive side never writes its DREP: the DREQ is retried until DREQ_ERROR,
    DISCONNECTED with -ETIMEDOUT (cm_timeout_ms here, a minute on a real kernel)."""
    ca, cb = channels
    cb.answer_disconnect = False
    c, s = connected(ca, cb)
    c.disconnect()
    expect(cb, E.DISCONNECTED, 0)
    expect(ca, E.DISCONNECTED, -errno.ETIMEDOUT, timeout=CM_TIMEOUT_MS / 1000.0 + 1)
    expect(ca, E.TIMEWAIT_EXIT)


def test_accept_with_uid_0_drops_the_ids_events(channels):
    """ucma queues nothing for uid 0: no ESTABLISHED, no DISCONNECTED, so no DREP is ever
    written and the peer's DREQ times out."""
    ca, cb = channels
    listener(cb)
    c = routed(ca)
    c.connect(0x100001)
    s = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s, 0x200001, uid=0)
    expect(ca, E.CONNECT_RESPONSE)
    establish(ca, c)
    nothing(cb)
    c.disconnect()
    nothing(cb)
    expect(ca, E.DISCONNECTED, -errno.ETIMEDOUT, timeout=CM_TIMEOUT_MS / 1000.0 + 1)
