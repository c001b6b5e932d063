"""The fake kernel's command tests' fixtures (a FakeNet, a channel on a FakeKernel of it) and
helpers: commands written as bytes, GET_EVENT read raw, SET_OPTION, INIT_QP_ATTR, joins and
leaves, MIGRATE_ID, WRITE_CM_EVENT, an id bound or resolved.  Used by
tests/test_fake_commands.py and tests/test_fake_commands_conn.py.
"""


from __future__ import annotations

import ctypes
import errno
import struct
import time
from typing import Any, Dict, Optional

import pytest

from pyrdmacm import CmId, EventChannel, KernelError, PortSpace, abi, wire
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.addr import parse_address
from pyrdmacm.testing import FakeKernel, FakeNet

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
