"""Connection management between fake hosts (pyrdmacm.testing.FakeFabric), through pyrdmacm's
API where it has the call, and through the command bytes where it does not yet (ACCEPT,
REJECT, NOTIFY, establish = ACCEPT with valid 0).  The expectations are the kernel's for
ids without a QP (../shared/cm-notes.md sections 0-5).
"""

from __future__ import annotations

import errno
import ipaddress
import time
from typing import Any, Optional, Tuple

import pytest

from pyrdmacm import CmId, EventChannel, KernelError, PortSpace, State, StateError, UsageError, _process, wire
from pyrdmacm._codec import CODECS
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import RdmaCmState
from pyrdmacm.events import ConnParam, UdParam
from pyrdmacm.testing import FakeFabric, FakeKernel, FakeNet, IbCmState

TIMEWAIT_MS = 50
CM_TIMEOUT_MS = 300
QUIET = 0.15  # how long "nothing arrives" is watched

ACCEPT = wire.COMMAND["ACCEPT"]
REJECT = wire.COMMAND["REJECT"]
NOTIFY = wire.COMMAND["NOTIFY"]
DISCONNECT = wire.COMMAND["DISCONNECT"]
CONNECT = wire.COMMAND["CONNECT"]
_UD = CODECS["rdma_ucm_ud_param"]
_CONN = CODECS["rdma_ucm_conn_param"]


# --------------------------------------------------------------------------- fixtures and helpers

@pytest.fixture
def fabric():
    fab = FakeFabric(timewait_ms=TIMEWAIT_MS, cm_timeout_ms=CM_TIMEOUT_MS, cm_retry_ms=20)
    yield fab
    fab.close()


@pytest.fixture
def hosts(fabric):
    return fabric.host("10.9.0.1"), fabric.host("10.9.0.2")


@pytest.fixture
def channels(hosts):
    """One channel on each host: (A's, B's)."""
    a, b = hosts
    ca, cb = EventChannel(a()), EventChannel(b())
    yield ca, cb
    ca.close()
    cb.close()


def expect(ch: EventChannel, event: E, status: Optional[int] = None, timeout: float = 1.0) -> Any:
    ev = ch.get_event(timeout)
    assert ev is not None, "no %s within %s s" % (event, timeout)
    assert ev.event is event, "got %r (status %d), wanted %s" % (ev, ev.status, event)
    if status is not None:
        assert ev.status == status, "%r: status %d, wanted %d" % (ev, ev.status, status)
    ev.ack()
    return ev


def nothing(*chs: EventChannel, timeout: float = QUIET) -> None:
    for ch in chs:
        ev = ch.get_event(timeout)
        assert ev is None, "unexpected %r (status %d)" % (ev, ev.status)


def listener(ch: EventChannel, addr: str = "10.9.0.2:7471", ps: PortSpace = PortSpace.TCP, backlog: int = 0) -> CmId:
    cm = CmId(ch, ps)
    cm.bind_addr(addr)
    cm.listen(backlog)
    return cm


def routed(ch: EventChannel, dst: str = "10.9.0.2:7471", ps: PortSpace = PortSpace.TCP) -> CmId:
    cm = CmId(ch, ps)
    cm.resolve_addr(dst, timeout_ms=1000)
    expect(ch, E.ADDR_RESOLVED)
    cm.resolve_route(1000)
    expect(ch, E.ROUTE_RESOLVED)
    return cm


def accept(ch: EventChannel, cm: CmId, qp_num: int = 0, private_data: bytes = b"", *, valid: int = 1,
           uid: Optional[int] = None, responder_resources: int = 0, initiator_depth: int = 0,
           flow_control: int = 0, rnr_retry_count: int = 7, srq: int = 0, pd_len: Optional[int] = None,
           ece: Tuple[int, int] = (0, 0)) -> int:
    """ACCEPT written as bytes (the library has no accept() yet).  With valid=1 on a request's
    id it registers the id under the uid the command carries, as accept() will: the
    ``ch._ids[uid] = id; id.uid = uid`` and ``_state`` lines are a stand-in until then."""
    if uid is None:
        uid = _process.next_uid() if valid else 0
    n = len(private_data) if pd_len is None else pd_len
    ch.submit(ACCEPT.encode(uid, qp_num, 0, private_data, n, srq, responder_resources, initiator_depth,
                            flow_control, 0, rnr_retry_count, valid, cm.handle, 0, ece[0], ece[1]), "ACCEPT")
    if valid and cm.state is State.REQUEST:
        if uid:
            ch._ids[uid] = cm  # stand-in for the library's accept()
            cm.uid = uid
        cm._state = State.CONNECTED if cm.kind.value == "datagram" else State.CONNECT
    return uid


def establish(ch: EventChannel, cm: CmId) -> None:
    """The RTU: ACCEPT with valid 0 on the active side (librdmacm's rdma_establish)."""
    accept(ch, cm, valid=0)
    cm._state = State.CONNECTED  # stand-in for the library's establish()


def reject(ch: EventChannel, cm: CmId, reason: int = 0, private_data: bytes = b"", pd_len: Optional[int] = None) -> None:
    n = len(private_data) if pd_len is None else pd_len
    ch.submit(REJECT.encode(cm.handle, n, reason, b"", private_data), "REJECT")


def notify(ch: EventChannel, cm: CmId, event: int) -> None:
    ch.submit(NOTIFY.encode(cm.handle, event), "NOTIFY")


def raw_connect(ch: EventChannel, cm: CmId, qp_num: int, private_data: bytes) -> None:
    """CONNECT written as bytes, past the library's checks."""
    ch.submit(CONNECT.encode(qp_num, 0, private_data, len(private_data), 0, 0, 0, 0, 7, 7, 1, cm.handle, 0, 0, 0),
              "CONNECT")


def raw_disconnect(ch: EventChannel, cm: CmId) -> None:
    ch.submit(DISCONNECT.encode(cm.handle), "DISCONNECT")


def refused(code: int, fn: Any, *args: Any, **kwargs: Any) -> None:
    with pytest.raises(KernelError) as info:
        fn(*args, **kwargs)
    assert info.value.errno == code, "errno %s, wanted %s" % (info.value.errno, code)


def connected(ca: EventChannel, cb: EventChannel, qp_a: int = 0x100001, qp_b: int = 0x200001,
              dst: str = "10.9.0.2:7471", lst: Optional[CmId] = None) -> Tuple[CmId, CmId]:
    """A full RC handshake from ``ca`` to a listener on ``cb``: (active id, passive id)."""
    if lst is None:
        lst = listener(cb, dst)
    c = routed(ca, dst)
    c.connect(qp_a)
    s = expect(cb, E.CONNECT_REQUEST).id
    accept(cb, s, qp_b)
    expect(ca, E.CONNECT_RESPONSE)
    establish(ca, c)
    expect(cb, E.ESTABLISHED)
    return c, s


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
    assert _CONN.unpack_dict(ev.raw_param)["private_data_len"] == 56
    rep_pd = bytes(range(196))
    accept(cb, ev.id, 0x200001, rep_pd)
    ev = expect(ca, E.CONNECT_RESPONSE)
    assert ev.private_data == rep_pd and _CONN.unpack_dict(ev.raw_param)["private_data_len"] == 196
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
    assert _UD.unpack_dict(ev.raw_param)["private_data_len"] == 180
    rep_pd = b"udp-ok" + bytes(range(100))
    accept(cb, ev.id, 0x300003, rep_pd)
    ev = expect(ca, E.ESTABLISHED, 0)
    p = ev.param
    assert isinstance(p, UdParam)
    assert (p.qp_num, p.qkey, p.dgid, p.port_num, p.is_global) == (0x300003, 0x01234567, b.gid(), 1, 1)
    assert p.dgid == ipaddress.IPv6Address("::ffff:10.9.0.2")
    assert p.private_data == rep_pd + bytes(136 - len(rep_pd))
    raw = _UD.unpack_dict(ev.raw_param)
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
    expect(ca, E.UNREACHABLE, -errno.ETIMEDOUT, timeout=timeout_ms / 1000.0 + 1)
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
