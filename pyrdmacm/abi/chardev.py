"""RDMA netlink's GET_CHARDEV request and reply, as bytes: no I/O.

The device layer (:mod:`pyrdmacm.core.device`) asks RDMA netlink which char device and ABI
version rdma_cm has, with one datagram on a raw ``AF_NETLINK`` socket instead of
:mod:`pyrdmacm.netlink` (pyroute2's import costs ~150 ms).  The headers are the ABI
layer's ``nlmsghdr`` and ``nlattr`` layouts.  This module needs nothing but the codecs,
so that opening the device -- and the route prediction, which checks the node --
imports no more of the library than that.
"""

from __future__ import annotations

import struct
from typing import Dict, Optional, Tuple

from .codec import CODECS

__all__ = ["NETLINK_RDMA", "chardev_request", "parse_chardev_reply", "decode_huge_dev"]

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5
RDMA_NLDEV_CMD_GET_CHARDEV = 15
NLMSG_ERROR = 2
NLM_F_REQUEST = 1
ATTR_DEV_INDEX = 1
ATTR_CHARDEV_TYPE, ATTR_CHARDEV_NAME, ATTR_CHARDEV_ABI, ATTR_CHARDEV = 69, 70, 71, 72
_NLMSG = CODECS["nlmsghdr"]
_NLA = CODECS["nlattr"]
_U64 = struct.Struct("=Q")
_U32 = struct.Struct("=I")


def _nla(kind: int, payload: bytes) -> bytes:
    data = _NLA.pack(_NLA.size + len(payload), kind) + payload
    return data + bytes(-len(data) % 4)


def chardev_request(kind: str = "rdma_cm", seq: int = 1, device_index: Optional[int] = None) -> bytes:
    """``RDMA_NLDEV_CMD_GET_CHARDEV`` for a char device kind ("rdma_cm", "uverbs" ...)."""
    attrs = b""
    if device_index is not None:
        attrs += _nla(ATTR_DEV_INDEX, _U32.pack(device_index))
    attrs += _nla(ATTR_CHARDEV_TYPE, kind.encode() + b"\0")
    kind_type = (RDMA_NL_NLDEV << 10) + RDMA_NLDEV_CMD_GET_CHARDEV
    return _NLMSG.pack(_NLMSG.size + len(attrs), kind_type, NLM_F_REQUEST, seq, 0) + attrs


def decode_huge_dev(value: int) -> Tuple[int, int]:
    """The kernel's ``huge_encode_dev()`` u64 -> ``(major, minor)``: minor bits 0-7 and
    20-31, major bits 8-19."""
    return (value & 0xFFF00) >> 8, (value & 0xFF) | ((value >> 12) & 0xFFF00)


def parse_chardev_reply(data: bytes) -> Optional[Tuple[Tuple[int, int], str, int]]:
    """``((major, minor), node name, ABI version)`` from a GET_CHARDEV reply; None for an
    error reply, another message, or one without the attributes."""
    if len(data) < _NLMSG.size:
        return None
    length, mtype, _flags, _seq, _pid = _NLMSG.unpack_from(data)
    if mtype != (RDMA_NL_NLDEV << 10) + RDMA_NLDEV_CMD_GET_CHARDEV:
        return None
    attrs: Dict[int, bytes] = {}
    off, end = _NLMSG.size, min(length, len(data))
    while off + _NLA.size <= end:
        alen, atype = _NLA.unpack_from(data, off)
        if alen < _NLA.size:
            break
        attrs[atype & 0x3FFF] = data[off + _NLA.size : off + alen]
        off += (alen + 3) & ~3
    try:
        dev = _U64.unpack(attrs[ATTR_CHARDEV])[0]
        version = _U64.unpack(attrs[ATTR_CHARDEV_ABI])[0] & 0xFFFFFFFF
        name = attrs.get(ATTR_CHARDEV_NAME, b"").split(b"\0")[0].decode()
    except (KeyError, struct.error, UnicodeDecodeError):
        return None
    return decode_huge_dev(dev), name, version
