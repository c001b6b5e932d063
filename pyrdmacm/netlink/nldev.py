"""RDMA netlink's NLDEV messages as bytes: the numbers, the attribute space, a request's
encoding, a datagram's messages and their decoding.  No I/O.

Theory of operation
-------------------
The kernel's RDMA device interface is client ``RDMA_NL_NLDEV`` (5) of ``NETLINK_RDMA``
(20), the one iproute2's ``rdma`` tool uses.  pyroute2 has no RDMA family, so the
messages are declared here on pyroute2's generic ``nlmsg``: an ``nlmsghdr``, then
attributes, with no family header.  The whole client has one attribute space, nested
tables included (:data:`NLDEV_ATTR`).  Message type = ``RDMA_NL_GET_TYPE(client, op) =
(client << 10) + op``.

Numbers are the kernel's (include/uapi/rdma/rdma_netlink.h, checked against the
installed header by a C probe in the tests; linux/netlink.h).  NLDEV integers are host
order: ``RDMA_NLDEV_ATTR_NODE_GUID`` is the GUID as a number, the big-endian GUID
already converted.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Iterator, Sequence, Tuple

from pyroute2.netlink import nla, nlmsg  # type: ignore[import-untyped]

RDMA_NL_NLDEV = 5

RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_PORT_GET = 5
RDMA_NLDEV_CMD_SYS_GET = 6
RDMA_NLDEV_CMD_RES_CM_ID_GET = 11
RDMA_NLDEV_CMD_GET_CHARDEV = 15

#: op -> its name, for the errors a request raises
CMD_NAMES = {
    RDMA_NLDEV_CMD_GET: "RDMA_NLDEV_CMD_GET",
    RDMA_NLDEV_CMD_PORT_GET: "RDMA_NLDEV_CMD_PORT_GET",
    RDMA_NLDEV_CMD_SYS_GET: "RDMA_NLDEV_CMD_SYS_GET",
    RDMA_NLDEV_CMD_RES_CM_ID_GET: "RDMA_NLDEV_CMD_RES_CM_ID_GET",
    RDMA_NLDEV_CMD_GET_CHARDEV: "RDMA_NLDEV_CMD_GET_CHARDEV",
}

# (number, name without the RDMA_NLDEV_ prefix, pyroute2 decoder).  "NEST" marks a
# nested table: the nested attributes use this same attribute space.
_NLDEV_ATTRS: Tuple[Tuple[int, str, str], ...] = (
    (0, "ATTR_PAD", "none"),
    (1, "ATTR_DEV_INDEX", "uint32"),
    (2, "ATTR_DEV_NAME", "asciiz"),
    (3, "ATTR_PORT_INDEX", "uint32"),
    (4, "ATTR_CAP_FLAGS", "uint64"),
    (5, "ATTR_FW_VERSION", "asciiz"),
    (6, "ATTR_NODE_GUID", "uint64"),
    (7, "ATTR_SYS_IMAGE_GUID", "uint64"),
    (8, "ATTR_SUBNET_PREFIX", "uint64"),
    (9, "ATTR_LID", "uint32"),
    (10, "ATTR_SM_LID", "uint32"),
    (11, "ATTR_LMC", "uint8"),
    (12, "ATTR_PORT_STATE", "uint8"),
    (13, "ATTR_PORT_PHYS_STATE", "uint8"),
    (14, "ATTR_DEV_NODE_TYPE", "uint8"),
    (21, "ATTR_RES_LQPN", "uint32"),
    (26, "ATTR_RES_TYPE", "uint8"),
    (27, "ATTR_RES_STATE", "uint8"),
    (28, "ATTR_RES_PID", "uint32"),
    (29, "ATTR_RES_KERN_NAME", "asciiz"),
    (30, "ATTR_RES_CM_ID", "NEST"),
    (31, "ATTR_RES_CM_ID_ENTRY", "NEST"),
    (32, "ATTR_RES_PS", "uint32"),
    (33, "ATTR_RES_SRC_ADDR", "cdata"),
    (34, "ATTR_RES_DST_ADDR", "cdata"),
    (50, "ATTR_NDEV_INDEX", "uint32"),
    (51, "ATTR_NDEV_NAME", "asciiz"),
    (63, "ATTR_RES_CM_IDN", "uint32"),
    (65, "ATTR_LINK_TYPE", "asciiz"),
    (66, "SYS_ATTR_NETNS_MODE", "uint8"),
    (67, "ATTR_DEV_PROTOCOL", "asciiz"),
    (69, "ATTR_CHARDEV_TYPE", "asciiz"),
    (70, "ATTR_CHARDEV_NAME", "asciiz"),
    (71, "ATTR_CHARDEV_ABI", "uint64"),
    (72, "ATTR_CHARDEV", "uint64"),
    (93, "SYS_ATTR_COPY_ON_FORK", "uint8"),
)

#: attribute name -> number, e.g. ``NLDEV_ATTR["ATTR_CHARDEV"] == 72`` (tests check these
#: numbers against the installed uapi header).
NLDEV_ATTR: Dict[str, int] = {name: num for num, name, _ in _NLDEV_ATTRS}


def _nla_map(nest_type: str) -> Tuple[Tuple[int, str, str], ...]:
    return tuple(
        (num, "RDMA_NLDEV_" + name, nest_type if kind == "NEST" else kind)
        for num, name, kind in _NLDEV_ATTRS
    )


class _NldevNest(nla):  # type: ignore[misc]
    """A nested NLDEV table: same attribute space, nested tables nest again."""

    prefix = "RDMA_NLDEV_"
    nla_map = _nla_map("recursive")


class NldevMsg(nlmsg):  # type: ignore[misc]
    """An RDMA_NL_NLDEV message: nlmsghdr, then attributes (no family header)."""

    prefix = "RDMA_NLDEV_"
    fields = ()
    nla_map = _nla_map("nested_table")
    nested_table = _NldevNest


def nldev_type(op: int) -> int:
    """``RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)``."""
    return (RDMA_NL_NLDEV << 10) + op


# netlink core numbers (linux/netlink.h)
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_REQUEST = 0x01
NLM_F_MULTI = 0x02
NLM_F_DUMP = 0x300
#: ``struct nlmsghdr``: length, type, flags, sequence number, port id
HDR = struct.Struct("=IHHII")


def encode(op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False, seq: int = 1) -> bytes:
    """The bytes of one NLDEV request (``attrs``: ``("ATTR_DEV_INDEX", 1)`` ...)."""
    msg = NldevMsg()
    msg["header"]["type"] = nldev_type(op)
    msg["header"]["flags"] = NLM_F_REQUEST | (NLM_F_DUMP if dump else 0)
    msg["header"]["sequence_number"] = seq
    msg["header"]["pid"] = 0
    msg["attrs"] = [["RDMA_NLDEV_" + name, value] for name, value in attrs]
    msg.encode()
    return bytes(msg.data)


def split(data: bytes) -> Iterator[Tuple[int, int, int, bytes]]:
    """Netlink messages in one datagram: (type, flags, seq, whole message)."""
    off = 0
    while off + HDR.size <= len(data):
        length, mtype, flags, seq, _pid = HDR.unpack_from(data, off)
        if length < HDR.size or off + length > len(data):
            break
        yield mtype, flags, seq, data[off : off + length]
        off += (length + 3) & ~3


def decode_nldev(data: bytes) -> Any:
    """Decode one NLDEV message (header included) into an :class:`NldevMsg`."""
    msg = NldevMsg(data)
    msg.decode()
    return msg


def attr(msg: Any, name: str, default: Any = None) -> Any:
    """Attribute ``name`` (without the ``RDMA_NLDEV_`` prefix) of a decoded message or table."""
    return msg.get_attr("RDMA_NLDEV_" + name, default)
