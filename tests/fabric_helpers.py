"""The fake fabric's connection tests' fixtures (a fabric, its two hosts, a channel on
each) and helpers: the commands the library's API does not make written as bytes (ACCEPT,
REJECT, NOTIFY, establish = ACCEPT with valid 0, CONNECT and DISCONNECT past its checks),
an event expected, nothing arriving, a whole RC handshake; a fake host's device as
list_devices reads it.  Used by tests/test_fabric.py, tests/test_fabric_ends.py, and the
CLI's ping and mesh tests.
"""


from __future__ import annotations

from typing import Any, Optional, Tuple

import pytest

from pyrdmacm import CmId, EventChannel, KernelError, PortSpace, State, wire
from pyrdmacm.core import process as _process
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.testing import FakeFabric

TIMEWAIT_MS = 50
CM_TIMEOUT_MS = 300
QUIET = 0.15  # how long "nothing arrives" is watched

ACCEPT = wire.COMMAND["ACCEPT"]
REJECT = wire.COMMAND["REJECT"]
NOTIFY = wire.COMMAND["NOTIFY"]
DISCONNECT = wire.COMMAND["DISCONNECT"]
CONNECT = wire.COMMAND["CONNECT"]
UD_CODEC = CODECS["rdma_ucm_ud_param"]
CONN_CODEC = CODECS["rdma_ucm_conn_param"]



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
    ``ch.registry.ids[uid] = id; id.uid = uid`` and ``_state`` lines are a stand-in until then."""
    if uid is None:
        uid = _process.next_uid() if valid else 0
    n = len(private_data) if pd_len is None else pd_len
    ch.submit(ACCEPT.encode(uid, qp_num, 0, private_data, n, srq, responder_resources, initiator_depth,
                            flow_control, 0, rnr_retry_count, valid, cm.handle, 0, ece[0], ece[1]), "ACCEPT")
    if valid and cm.state is State.REQUEST:
        if uid:
            ch.registry.ids[uid] = cm  # stand-in for the library's accept()
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


def fake0_device(ip: str, netdev_mtu: int = 1500) -> Any:
    """Host B's device as list_devices reads it: fake0 port 1 on eth0, its IP's GID as RoCE v1
    at index 0 and v2 at 1 (where the fake kernel's INIT_QP_ATTR puts it), a link-local at 2,
    no active MTU shown (as sysfs shows none)."""
    import ipaddress

    from pyrdmacm.devices import Device, Gid, GidType, LinkLayer, Port, PortState

    gids = (Gid.make(0, ipaddress.IPv6Address("::ffff:" + ip), GidType.ROCE_V1, "eth0"),
            Gid.make(1, ipaddress.IPv6Address("::ffff:" + ip), GidType.ROCE_V2, "eth0"),
            Gid.make(2, ipaddress.IPv6Address("fe80::2"), GidType.ROCE_V2, "eth0"))
    port = Port(1, PortState.ACTIVE, None, LinkLayer.ETHERNET, None, "eth0", gids, netdev_mtu=netdev_mtu)
    return Device(1, "fake0", 0x0002C90300000200, None, (port,))
