"""RDMA netlink's NLDEV messages as bytes: the numbers, the attribute space, a request's
encoding, a datagram's messages and their decoding.  No I/O.

Theory of operation
-------------------
The kernel's RDMA device interface is client ``RDMA_NL_NLDEV`` (5) of ``NETLINK_RDMA``
(20), the one iproute2's ``rdma`` tool uses: an ``nlmsghdr``, then attributes, with no
family header (the wire format is :mod:`pyrdmacm.netlink.wire`'s).  The whole client has
one attribute space, nested tables included (:data:`NLDEV_ATTR`), each attribute of one
kind (:data:`KINDS`); a message's attributes are decoded when asked for
(:class:`Table`).  Message type = ``RDMA_NL_GET_TYPE(client, op) = (client << 10) + op``.

Numbers are the kernel's (include/uapi/rdma/rdma_netlink.h, checked against the
installed header by a C probe in the tests; linux/netlink.h).  NLDEV integers are host
order: ``RDMA_NLDEV_ATTR_NODE_GUID`` is the GUID as a number, the big-endian GUID
already converted.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .wire import HDR, NLM_F_DUMP, NLM_F_REQUEST, attribute, attributes, message

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

# (number, name without the RDMA_NLDEV_ prefix, kind).  "NEST" marks a nested table: the
# nested attributes use this same attribute space.
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


#: attribute number -> (name, kind)
KINDS: Dict[int, Tuple[str, str]] = {num: (name, kind) for num, name, kind in _NLDEV_ATTRS}
_INTS = {"uint8": struct.Struct("=B"), "uint32": struct.Struct("=I"), "uint64": struct.Struct("=Q")}


def _value(num: int, payload: bytes) -> Any:
    kind = KINDS.get(num, ("", "cdata"))[1]
    fmt = _INTS.get(kind)
    if fmt is not None:
        return fmt.unpack_from(payload)[0] if len(payload) >= fmt.size else None
    if kind == "asciiz":
        return payload.split(b"\0", 1)[0].decode("utf-8", "replace")
    if kind == "NEST":
        return Table(attributes(payload))
    return None if kind == "none" else payload


class Table:
    """A message's attributes (or a nested table's), decoded when asked for by name."""

    __slots__ = ("items",)

    def __init__(self, items: List[Tuple[int, bytes]]) -> None:
        self.items = items

    def get(self, name: str, default: Any = None) -> Any:
        """The first attribute ``name`` (without the ``RDMA_NLDEV_`` prefix), decoded."""
        num = NLDEV_ATTR[name]
        for n, payload in self.items:
            if n == num:
                value = _value(n, payload)
                return default if value is None else value
        return default

    def all(self, name: str) -> List[Any]:
        """Every attribute ``name``, decoded (the entries of a nested table)."""
        num = NLDEV_ATTR[name]
        return [_value(n, payload) for n, payload in self.items if n == num]


def nldev_type(op: int) -> int:
    """``RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)``."""
    return (RDMA_NL_NLDEV << 10) + op


def _payload(num: int, value: Any) -> bytes:
    kind = KINDS[num][1]
    fmt = _INTS.get(kind)
    if fmt is not None:
        return fmt.pack(value)
    if kind == "asciiz":
        return str(value).encode() + b"\0"
    return bytes(value)


def encode(op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False, seq: int = 1) -> bytes:
    """The bytes of one NLDEV request (``attrs``: ``("ATTR_DEV_INDEX", 1)`` ...)."""
    body = b"".join(attribute(NLDEV_ATTR[name], _payload(NLDEV_ATTR[name], value)) for name, value in attrs)
    return message(nldev_type(op), NLM_F_REQUEST | (NLM_F_DUMP if dump else 0), seq, body)


def decode_nldev(data: bytes) -> Table:
    """One NLDEV message (header included) as its :class:`Table`."""
    return Table(attributes(data, HDR.size))


def attr(msg: Optional[Table], name: str, default: Any = None) -> Any:
    """Attribute ``name`` (without the ``RDMA_NLDEV_`` prefix) of a decoded message or table."""
    return default if msg is None else msg.get(name, default)
