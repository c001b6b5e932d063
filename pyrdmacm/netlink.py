"""Netlink: what the kernel knows about RDMA devices and IP routing.

Theory of operation
-------------------
This is the only module that imports pyroute2 (about 150 ms to import, so the
rest of pyrdmacm imports this module lazily, inside the functions that need
it).  It speaks two netlink families:

* ``NETLINK_RDMA`` (20), client ``RDMA_NL_NLDEV`` (5): the kernel's RDMA device
  interface, the one iproute2's ``rdma`` tool uses.  pyroute2 has no RDMA
  family, so its messages are declared here on pyroute2's generic ``nlmsg``
  (one attribute space for the whole client, nested tables included).  The
  socket is a plain ``socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA)`` with a
  small request/reply loop (:class:`RdmaNetlink`): blocking, no threads, no
  event loop, and replaceable by any object with ``send``/``recv`` for tests.
  Message type = ``RDMA_NL_GET_TYPE(client, op) = (client << 10) + op``.  Dumps
  of ports and resources need ``RDMA_NLDEV_ATTR_DEV_INDEX`` (the kernel answers
  EINVAL without it), so :func:`ports` and :func:`cm_ids` walk the devices.
  A kernel without RDMA support refuses the *socket* with EPROTONOSUPPORT (no
  kernel-side netlink socket for protocol 20: ib_core is not loaded); that and
  EPERM become :class:`~pyrdmacm.errors.KernelError` with a hint.

* ``NETLINK_ROUTE`` through pyroute2's ``IPRoute``: :func:`route_get` asks
  ``RTM_GETROUTE`` with exactly the inputs the kernel's RDMA address
  resolution gives ``ip_route_output_key()`` / ``ipv6_dst_lookup``
  (daddr, saddr, oif = the id's ``bound_dev_if``) and returns the kernel's
  answer, errors included, as a :class:`Route`.  ``RTM_GETROUTE`` and
  ``addr4_resolve()`` run the same lookup function
  (``ip_route_output_key_hash_rcu``), so the answer is the kernel's own; the
  one input that differs is the uid used by ``ip rule ... uidrange`` rules
  (the lookup runs with the caller's uid, the RDMA core's with uid 0).

Numbers are the kernel's (include/uapi/rdma/rdma_netlink.h, checked against
the installed header by a C probe in the tests; linux/rtnetlink.h,
linux/neighbour.h, linux/if_arp.h).  Byte orders: NLDEV integers are host
order (``RDMA_NLDEV_ATTR_NODE_GUID`` is the GUID as a number, i.e. the
big-endian GUID already converted); socket addresses in resource dumps are
``__kernel_sockaddr_storage`` with host-order family and network-order port.
"""

from __future__ import annotations

import enum
import errno as _errno
import ipaddress
import os
import random
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from pyroute2 import IPRoute  # type: ignore[import-untyped]
from pyroute2.netlink import nla, nlmsg  # type: ignore[import-untyped]
from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

from ._enum import NamedIntEnum
from .abi import RdmaCmState
from .errors import KernelError, UsageError


__all__ = [
    "NETLINK_RDMA",
    "RDMA_NL_NLDEV",
    "RdmaNetlink",
    "ChardevInfo",
    "NlDevice",
    "NlPort",
    "CmIdInfo",
    "CmIdState",
    "get_chardev",
    "devices",
    "ports",
    "sys_netns_mode",
    "cm_ids",
    "decode_huge_dev",
    "RouteType",
    "NudState",
    "Route",
    "Link",
    "Address",
    "route_get",
    "session",
    "neighbour",
    "links",
    "addresses",
    "ifindex",
    "unscoped",
    "ARPHRD_ETHER",
    "ARPHRD_INFINIBAND",
    "ARPHRD_LOOPBACK",
]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPInterface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

# --------------------------------------------------------------------------------------
# RDMA netlink: numbers (include/uapi/rdma/rdma_netlink.h)

NETLINK_RDMA = 20
RDMA_NL_NLDEV = 5

RDMA_NLDEV_CMD_GET = 1
RDMA_NLDEV_CMD_PORT_GET = 5
RDMA_NLDEV_CMD_SYS_GET = 6
RDMA_NLDEV_CMD_RES_CM_ID_GET = 11
RDMA_NLDEV_CMD_GET_CHARDEV = 15

_CMD_NAMES = {
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
_NLMSG_ERROR = 2
_NLMSG_DONE = 3
_NLM_F_REQUEST = 0x01
_NLM_F_MULTI = 0x02
_NLM_F_DUMP = 0x300
_HDR = struct.Struct("=IHHII")

_RDMA_HINTS = {
    _errno.EPROTONOSUPPORT: "this kernel has no RDMA netlink (module ib_core is not loaded, or the "
    "kernel has no InfiniBand/RDMA support); pyrdmacm falls back to sysfs where it can",
    _errno.EPERM: "RDMA netlink refused this request: it needs CAP_NET_ADMIN, or a container/seccomp "
    "policy blocks it",
    _errno.EACCES: "RDMA netlink refused this request: it needs CAP_NET_ADMIN, or a container/seccomp "
    "policy blocks it",
    _errno.EOPNOTSUPP: "no kernel client answers for this character device: load the module "
    "(rdma_ucm for rdma_cm) or check that the kernel was built with it",
    _errno.ENOENT: "the kernel does not know this RDMA device (removed, or in another network "
    "namespace in exclusive mode)",
    _errno.ENODEV: "the kernel does not know this RDMA device (removed, or in another network "
    "namespace in exclusive mode)",
    _errno.EINVAL: "the kernel rejected the request's attributes (an older kernel without this "
    "command or attribute?)",
    _errno.ETIMEDOUT: "no answer from the kernel on the RDMA netlink socket",
}


def _rdma_error(err: int, command: str) -> KernelError:
    return KernelError(abs(err), command, hint=_RDMA_HINTS.get(abs(err), ""))


class RdmaNetlink:
    """A blocking NETLINK_RDMA request/reply channel.

    ``sock`` may be any object with ``send(bytes)``, ``recv(int) -> bytes`` and
    ``close()`` (tests pass a fake that replays captured replies); by default a
    real netlink socket is opened in the caller's network namespace.
    """

    def __init__(self, sock: Any = None, timeout: float = 5.0) -> None:
        if sock is None:
            try:
                sock = socket.socket(
                    socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, NETLINK_RDMA
                )
            except OSError as e:
                raise _rdma_error(e.errno or _errno.EIO, "socket(AF_NETLINK, NETLINK_RDMA)") from e
            try:
                sock.settimeout(timeout)
                sock.bind((0, 0))
            except OSError as e:
                sock.close()
                raise _rdma_error(e.errno or _errno.EIO, "bind(NETLINK_RDMA)") from e
        self._sock: Any = sock
        self._seq = random.randint(1, 0x7FFFFFFF)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> "RdmaNetlink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False, seq: int = 1) -> bytes:
        """The bytes of one NLDEV request (``attrs``: ``("ATTR_DEV_INDEX", 1)`` ...)."""
        msg = NldevMsg()
        msg["header"]["type"] = nldev_type(op)
        msg["header"]["flags"] = _NLM_F_REQUEST | (_NLM_F_DUMP if dump else 0)
        msg["header"]["sequence_number"] = seq
        msg["header"]["pid"] = 0
        msg["attrs"] = [["RDMA_NLDEV_" + name, value] for name, value in attrs]
        msg.encode()
        return bytes(msg.data)

    def request(
        self, op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False
    ) -> List[Any]:
        """Send one request; return the decoded replies (:class:`NldevMsg`).

        A ``doit`` request returns its single reply; a dump returns every
        message up to ``NLMSG_DONE``.  A kernel error raises
        :class:`~pyrdmacm.errors.KernelError` with the kernel's errno.
        """
        if self._sock is None:
            raise UsageError("RDMA netlink channel is closed")
        command = _CMD_NAMES.get(op, "RDMA_NLDEV op %d" % op)
        self._seq = (self._seq % 0x7FFFFFFF) + 1
        seq = self._seq
        try:
            self._sock.send(self.encode(op, attrs, dump, seq))
        except OSError as e:
            raise _rdma_error(e.errno or _errno.EIO, command) from e
        replies: List[Any] = []
        while True:
            try:
                data = self._sock.recv(1 << 16)
            except socket.timeout as e:
                raise _rdma_error(_errno.ETIMEDOUT, command) from e
            except OSError as e:
                raise _rdma_error(e.errno or _errno.EIO, command) from e
            if not data:
                raise _rdma_error(_errno.EIO, command)
            for mtype, flags, mseq, chunk in _split(data):
                if mseq != seq:
                    continue  # a late answer to an older request
                if mtype == _NLMSG_ERROR:
                    (code,) = struct.unpack_from("=i", chunk, _HDR.size)
                    if code:
                        raise _rdma_error(code, command)
                    return replies  # an ACK
                if mtype == _NLMSG_DONE:
                    code = struct.unpack_from("=i", chunk, _HDR.size)[0] if len(chunk) >= 20 else 0
                    if code < 0:
                        raise _rdma_error(code, command)
                    return replies
                replies.append(decode_nldev(chunk))
                if not dump and not flags & _NLM_F_MULTI:
                    return replies


def _split(data: bytes) -> Iterator[Tuple[int, int, int, bytes]]:
    """Netlink messages in one datagram: (type, flags, seq, whole message)."""
    off = 0
    while off + _HDR.size <= len(data):
        length, mtype, flags, seq, _pid = _HDR.unpack_from(data, off)
        if length < _HDR.size or off + length > len(data):
            break
        yield mtype, flags, seq, data[off : off + length]
        off += (length + 3) & ~3


def decode_nldev(data: bytes) -> Any:
    """Decode one NLDEV message (header included) into an :class:`NldevMsg`."""
    msg = NldevMsg(data)
    msg.decode()
    return msg


def _attr(msg: Any, name: str, default: Any = None) -> Any:
    return msg.get_attr("RDMA_NLDEV_" + name, default)


def decode_huge_dev(value: int) -> Tuple[int, int]:
    """The kernel's ``huge_encode_dev()`` u64 -> ``(major, minor)``."""
    return (value & 0xFFF00) >> 8, (value & 0xFF) | ((value >> 12) & 0xFFF00)


@dataclass(frozen=True)
class ChardevInfo:
    """``RDMA_NLDEV_CMD_GET_CHARDEV``: which ``/dev/infiniband`` node serves a kind."""

    dev: Tuple[int, int]  #: (major, minor)
    name: str  #: node name under /dev/infiniband, e.g. "rdma_cm"
    abi: int  #: the ABI version (4 for rdma_cm)

    @property
    def dev_t(self) -> int:
        return os.makedev(*self.dev)


def get_chardev(type_: str = "rdma_cm", *, device_index: Optional[int] = None, channel: Optional[RdmaNetlink] = None) -> ChardevInfo:
    """Ask which character device serves ``type_`` ("rdma_cm", "uverbs", "umad").

    As a side effect the kernel loads the module for a global client that is not
    loaded yet (``request_module("rdma-client-rdma_cm")``, kernel >= 5.3):
    this is how rdma_ucm gets autoloaded without modprobe.  Per-device kinds
    (uverbs, umad) need ``device_index``.
    """
    attrs: List[Tuple[str, Any]] = [("ATTR_CHARDEV_TYPE", type_)]
    if device_index is not None:
        attrs.insert(0, ("ATTR_DEV_INDEX", device_index))
    with _channel(channel) as ch:
        replies = ch.request(RDMA_NLDEV_CMD_GET_CHARDEV, attrs)
    if not replies:
        raise _rdma_error(_errno.EIO, "RDMA_NLDEV_CMD_GET_CHARDEV")
    msg = replies[0]
    return ChardevInfo(
        dev=decode_huge_dev(_attr(msg, "ATTR_CHARDEV", 0)),
        name=_attr(msg, "ATTR_CHARDEV_NAME", "") or "",
        abi=_attr(msg, "ATTR_CHARDEV_ABI", 0) & 0xFFFFFFFF,
    )


class _channel:  # noqa: N801 - used as a context manager, like a function
    """Use the caller's channel, or open (and close) one."""

    def __init__(self, channel: Optional[RdmaNetlink]) -> None:
        self._given = channel
        self._own: Optional[RdmaNetlink] = None

    def __enter__(self) -> RdmaNetlink:
        if self._given is not None:
            return self._given
        self._own = RdmaNetlink()
        return self._own

    def __exit__(self, *exc: object) -> None:
        if self._own is not None:
            self._own.close()


@dataclass(frozen=True)
class NlDevice:
    """One entry of the ``RDMA_NLDEV_CMD_GET`` dump (``rdma dev``)."""

    index: int
    name: str
    node_guid: int  #: host-order number; 0 for devices without a GUID
    node_type: Optional[int]  #: RDMA_NODE_* (1 CA, 4 RNIC, ...), if the kernel sent it
    protocol: Optional[str]  #: "ib", "roce", "iw", "opa", "usnic" (kernel >= 5.6)
    port_count: Optional[int]
    fw_version: Optional[str] = None


@dataclass(frozen=True)
class NlPort:
    """One entry of the ``RDMA_NLDEV_CMD_PORT_GET`` dump (``rdma link``)."""

    dev_index: int
    dev_name: str
    port: int
    state: Optional[int]  #: IB_PORT_* (4 = ACTIVE)
    phys_state: Optional[int]  #: 5 = LinkUp
    lid: Optional[int]  #: IB ports only
    netdev_index: Optional[int]  #: only when the netdev is in the caller's netns
    netdev: Optional[str]


#: The state of a cm_id as RDMA netlink reports it: the kernel's ``enum rdma_cm_state``, declared once,
#: in the ABI layer (:class:`pyrdmacm.abi.RdmaCmState`); this is that very enum, by the name this
#: module's callers know.
CmIdState = RdmaCmState


_PS_NAMES = {0x0002: "IPOIB", 0x0106: "TCP", 0x0111: "UDP", 0x013F: "IB"}


@dataclass(frozen=True)
class CmIdInfo:
    """One rdma_cm id as the kernel's resource tracking shows it (``rdma res show cm_id``).

    Only ids attached to a device are tracked (restrack is per device): an id
    that is idle or bound to a wildcard address does not appear.
    """

    dev_index: int
    dev_name: str
    port: Optional[int]
    ps: int  #: port space, e.g. 0x106 (TCP)
    state: Union[RdmaCmState, int]
    src: Optional[Tuple[IPAddress, int]]  #: (address, port) when set
    dst: Optional[Tuple[IPAddress, int]]
    pid: Optional[int]  #: absent for kernel-owned ids
    kern_name: Optional[str]
    cm_idn: Optional[int]  #: the restrack id of this entry
    qp_num: Optional[int] = None

    @property
    def ps_name(self) -> str:
        return _PS_NAMES.get(self.ps, "0x%x" % self.ps)


def _sockaddr(raw: Optional[bytes]) -> Optional[Tuple[IPAddress, int]]:
    """``__kernel_sockaddr_storage`` bytes -> (address, port)."""
    if not raw or len(raw) < 2:
        return None
    (family,) = struct.unpack_from("=H", raw, 0)
    if family == socket.AF_INET and len(raw) >= 8:
        (port,) = struct.unpack_from("!H", raw, 2)
        return ipaddress.IPv4Address(raw[4:8]), port
    if family == socket.AF_INET6 and len(raw) >= 24:
        (port,) = struct.unpack_from("!H", raw, 2)
        return ipaddress.IPv6Address(raw[8:24]), port
    if family == 27 and len(raw) >= 40:  # AF_IB: sib_addr at 8, sib_sid (be64) at 24
        (sid,) = struct.unpack_from("!Q", raw, 24)
        return ipaddress.IPv6Address(raw[8:24]), sid & 0xFFFF
    return None


def devices(*, channel: Optional[RdmaNetlink] = None) -> List[NlDevice]:
    """The RDMA devices visible in this network namespace, in index order."""
    with _channel(channel) as ch:
        replies = ch.request(RDMA_NLDEV_CMD_GET, dump=True)
    out = [
        NlDevice(
            index=_attr(m, "ATTR_DEV_INDEX"),
            name=_attr(m, "ATTR_DEV_NAME", ""),
            node_guid=_attr(m, "ATTR_NODE_GUID", 0) or 0,
            node_type=_attr(m, "ATTR_DEV_NODE_TYPE"),
            protocol=_attr(m, "ATTR_DEV_PROTOCOL"),
            port_count=_attr(m, "ATTR_PORT_INDEX"),
            fw_version=_attr(m, "ATTR_FW_VERSION") or None,
        )
        for m in replies
        if _attr(m, "ATTR_DEV_INDEX") is not None
    ]
    return sorted(out, key=lambda d: d.index)


def ports(dev_index: Optional[int] = None, *, channel: Optional[RdmaNetlink] = None) -> List[NlPort]:
    """The ports of one device (or of all devices), in (device, port) order."""
    out: List[NlPort] = []
    with _channel(channel) as ch:
        indexes = [dev_index] if dev_index is not None else [d.index for d in devices(channel=ch)]
        for idx in indexes:
            for m in ch.request(RDMA_NLDEV_CMD_PORT_GET, [("ATTR_DEV_INDEX", idx)], dump=True):
                out.append(
                    NlPort(
                        dev_index=_attr(m, "ATTR_DEV_INDEX", idx),
                        dev_name=_attr(m, "ATTR_DEV_NAME", ""),
                        port=_attr(m, "ATTR_PORT_INDEX", 0),
                        state=_attr(m, "ATTR_PORT_STATE"),
                        phys_state=_attr(m, "ATTR_PORT_PHYS_STATE"),
                        lid=_attr(m, "ATTR_LID"),
                        netdev_index=_attr(m, "ATTR_NDEV_INDEX"),
                        netdev=_attr(m, "ATTR_NDEV_NAME"),
                    )
                )
    return sorted(out, key=lambda p: (p.dev_index, p.port))


def sys_netns_mode(*, channel: Optional[RdmaNetlink] = None) -> str:
    """``"shared"`` or ``"exclusive"``: the RDMA subsystem's network namespace mode.

    In shared mode every RDMA device is visible in every netns (its GIDs still
    belong to netdevs of particular namespaces); in exclusive mode a device
    lives in exactly one netns (``rdma dev set DEV netns NS``).
    """
    with _channel(channel) as ch:
        replies = ch.request(RDMA_NLDEV_CMD_SYS_GET)
    if not replies:
        raise _rdma_error(_errno.EIO, "RDMA_NLDEV_CMD_SYS_GET")
    mode = _attr(replies[0], "SYS_ATTR_NETNS_MODE")
    if mode is None:
        raise _rdma_error(_errno.EOPNOTSUPP, "RDMA_NLDEV_CMD_SYS_GET")
    return "shared" if mode else "exclusive"


def _state(value: Optional[int]) -> Union[RdmaCmState, int]:
    if value is None:
        return -1
    try:
        return RdmaCmState(value)
    except ValueError:
        return value


def cm_ids(*, channel: Optional[RdmaNetlink] = None) -> List[CmIdInfo]:
    """Every rdma_cm id the kernel tracks on the devices of this netns.

    Ids of other pid namespaces are hidden by the kernel.  Leak tests count
    these before and after (ids not yet attached to a device are not listed).
    """
    out: List[CmIdInfo] = []
    with _channel(channel) as ch:
        for dev in devices(channel=ch):
            for m in ch.request(RDMA_NLDEV_CMD_RES_CM_ID_GET, [("ATTR_DEV_INDEX", dev.index)], dump=True):
                table = _attr(m, "ATTR_RES_CM_ID")
                if table is None:
                    continue
                for e in table.get_attrs("RDMA_NLDEV_ATTR_RES_CM_ID_ENTRY"):
                    out.append(
                        CmIdInfo(
                            dev_index=_attr(m, "ATTR_DEV_INDEX", dev.index),
                            dev_name=_attr(m, "ATTR_DEV_NAME", dev.name),
                            port=_attr(e, "ATTR_PORT_INDEX"),
                            ps=_attr(e, "ATTR_RES_PS", 0),
                            state=_state(_attr(e, "ATTR_RES_STATE")),
                            src=_sockaddr(_attr(e, "ATTR_RES_SRC_ADDR")),
                            dst=_sockaddr(_attr(e, "ATTR_RES_DST_ADDR")),
                            pid=_attr(e, "ATTR_RES_PID"),
                            kern_name=_attr(e, "ATTR_RES_KERN_NAME"),
                            cm_idn=_attr(e, "ATTR_RES_CM_IDN"),
                            qp_num=_attr(e, "ATTR_RES_LQPN"),
                        )
                    )
    return out


# --------------------------------------------------------------------------------------
# NETLINK_ROUTE (pyroute2 IPRoute)

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
ARPHRD_NONE = 0xFFFE
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_NOARP = 0x80
IFA_F_DADFAILED = 0x08
IFA_F_TENTATIVE = 0x40
RTM_F_LOOKUP_TABLE = 0x1000
RTM_F_FIB_MATCH = 0x2000

_TABLE_NAMES = {253: "default", 254: "main", 255: "local"}


class RouteType(enum.IntEnum):
    """``rtm_type`` (linux/rtnetlink.h); prints by name, lowercase as ``ip route`` does."""

    UNSPEC = 0
    UNICAST = 1
    LOCAL = 2
    BROADCAST = 3
    ANYCAST = 4
    MULTICAST = 5
    BLACKHOLE = 6
    UNREACHABLE = 7
    PROHIBIT = 8
    THROW = 9
    NAT = 10
    XRESOLVE = 11

    def __str__(self) -> str:
        return self.name.lower()


# The errno each route type makes a lookup fail with (fib_props[] in
# net/ipv4/fib_semantics.c, ip6_rt_type_to_error() in net/ipv6/route.c).  A
# lookup that ends on "throw" with nothing behind it, or that matches nothing,
# fails with ENETUNREACH.
_ERRNO_ROUTE_TYPE = {
    _errno.EHOSTUNREACH: RouteType.UNREACHABLE,
    _errno.EACCES: RouteType.PROHIBIT,
    _errno.EINVAL: RouteType.BLACKHOLE,
    _errno.ENETUNREACH: RouteType.UNSPEC,
}


class NudState(NamedIntEnum):
    """Neighbour (ARP/ND) states, ``NUD_*`` in linux/neighbour.h; prints by name."""

    NONE = 0x00
    INCOMPLETE = 0x01
    REACHABLE = 0x02
    STALE = 0x04
    DELAY = 0x08
    PROBE = 0x10
    FAILED = 0x20
    NOARP = 0x40
    PERMANENT = 0x80

    @property
    def valid(self) -> bool:
        """``NUD_VALID``: the kernel uses the entry's address without resolving again."""
        return bool(self & 0xDE)  # PERMANENT|NOARP|REACHABLE|PROBE|STALE|DELAY


@dataclass(frozen=True)
class Route:
    """The kernel's answer to ``RTM_GETROUTE`` for (dst, src, oif)."""

    dst: IPAddress
    src: Optional[IPAddress]  #: the source given to the lookup (saddr), if any
    oif: Optional[int]  #: the output interface given to the lookup, if any
    errno: int  #: 0, or the error the lookup fails with (ENETUNREACH, EHOSTUNREACH, ...)
    type: RouteType  #: for failed lookups, inferred from errno
    ifindex: Optional[int] = None  #: egress netdev chosen by the kernel
    ifname: Optional[str] = None
    gateway: Optional[IPAddress] = None
    prefsrc: Optional[IPAddress] = None  #: the source the kernel picked (absent when src was given)
    table: Optional[int] = None
    prefix: Optional[IPNetwork] = None  #: the matching FIB entry; None if the kernel assumed on-link

    @property
    def ok(self) -> bool:
        return self.errno == 0

    @property
    def table_name(self) -> str:
        if self.table is None:
            return "?"
        return _TABLE_NAMES.get(self.table, str(self.table))

    def describe(self) -> str:
        """``ip route``-like one-liner."""
        if not self.ok:
            return "%s: %s (%s)" % (self.dst, _errno.errorcode.get(self.errno, self.errno), os.strerror(self.errno))
        words = [str(self.type)] if self.type not in (RouteType.UNICAST, RouteType.UNSPEC) else []
        words.append(str(self.prefix) if self.prefix is not None else str(self.dst))
        if self.gateway is not None:
            words.append("via %s" % self.gateway)
        words.append("dev %s" % (self.ifname or self.ifindex))
        src = self.prefsrc if self.prefsrc is not None else self.src
        if src is not None:
            words.append("src %s" % src)
        words.append("(table %s)" % self.table_name)
        return " ".join(words)


@dataclass(frozen=True)
class Link:
    """A netdev of this network namespace (``RTM_GETLINK``)."""

    index: int
    name: str
    type: int  #: ARPHRD_* (1 Ethernet, 32 InfiniBand, 772 loopback)
    flags: int  #: IFF_*
    operstate: str  #: "UP", "DOWN", "UNKNOWN", "LOWERLAYERDOWN" ...
    address: Optional[bytes]  #: hardware address (20 bytes on IPoIB: 4 QPN/flags + 16 GID)
    mtu: Optional[int] = None
    carrier: Optional[bool] = None

    @property
    def is_loopback(self) -> bool:
        return bool(self.flags & IFF_LOOPBACK)

    @property
    def is_up(self) -> bool:
        return bool(self.flags & IFF_UP)

    @property
    def noarp(self) -> bool:
        return bool(self.flags & IFF_NOARP)


@dataclass(frozen=True)
class Address:
    """An address of a netdev (``RTM_GETADDR``)."""

    ifindex: int
    interface: IPInterface  #: address with its prefix
    scope: int  #: RT_SCOPE_* (0 universe, 253 link, 254 host)
    flags: int  #: IFA_F_*

    @property
    def ip(self) -> IPAddress:
        return self.interface.ip

    @property
    def usable(self) -> bool:
        """Not tentative (DAD running) and DAD did not fail: the kernel counts it as local."""
        return not self.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED)


def unscoped(addr: IPAddress) -> IPAddress:
    """``addr`` without an IPv6 zone (``fe80::1%eth0`` -> ``fe80::1``)."""
    return type(addr)(addr.packed)


def _ip(value: Any) -> Optional[IPAddress]:
    if value in (None, ""):
        return None
    try:
        return ipaddress.ip_address(str(value).split("%")[0])
    except ValueError:
        return None


class _Session(threading.local):
    """This thread's :class:`session`: how deep, its IPRoute, the links dump it answered."""

    depth = 0
    ipr: Any = None
    links: Optional[List[Any]] = None


_SESSION = _Session()


class session:
    """``with netlink.session():`` -- the calls made inside, in this thread, share one
    routing socket and one ``RTM_GETLINK`` dump (what :func:`links` returns and the names
    :func:`route_get` gives).  :func:`pyrdmacm.precheck.predict` makes one per prediction:
    the facts are those a socket per call reads (a prediction reads them within a few
    milliseconds), for one socket and one links dump instead of four and two.  A session
    inside another is the outer one."""

    def __enter__(self) -> "session":
        _SESSION.depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        _SESSION.depth -= 1
        if not _SESSION.depth:
            ipr, _SESSION.ipr, _SESSION.links = _SESSION.ipr, None, None
            if ipr is not None:
                ipr.close()


def _open() -> Any:
    try:
        return IPRoute()
    except OSError as e:
        raise KernelError(e.errno or _errno.EIO, "socket(AF_NETLINK, NETLINK_ROUTE)",
                          hint="cannot open a routing netlink socket") from e


class _rtnl:
    """An IPRoute for the duration of one call (opened in the caller's netns), or the
    :class:`session`'s when one is open in this thread (opened on its first call)."""

    def __enter__(self) -> Any:
        self._own = None
        if _SESSION.depth:
            if _SESSION.ipr is None:
                _SESSION.ipr = _open()
            return _SESSION.ipr
        self._own = _open()
        return self._own

    def __exit__(self, *exc: object) -> None:
        if self._own is not None:
            self._own.close()


def _link_msgs(ipr: Any) -> List[Any]:
    """``RTM_GETLINK``'s dump: once per session."""
    if _SESSION.ipr is ipr and _SESSION.links is not None:
        return _SESSION.links
    msgs = list(ipr.get_links())
    if _SESSION.ipr is ipr:
        _SESSION.links = msgs
    return msgs


def _route_from_msg(msg: Any, dst: IPAddress, src: Optional[IPAddress], oif: Optional[int],
                    names: Dict[int, str]) -> Route:
    ifindex = msg.get_attr("RTA_OIF")
    table = msg.get_attr("RTA_TABLE")
    return Route(
        dst=dst,
        src=src,
        oif=oif,
        errno=0,
        type=RouteType(msg["type"]) if msg["type"] in RouteType._value2member_map_ else RouteType.UNSPEC,
        ifindex=ifindex,
        ifname=names.get(ifindex) if ifindex is not None else None,
        gateway=_ip(msg.get_attr("RTA_GATEWAY")),
        prefsrc=_ip(msg.get_attr("RTA_PREFSRC")),
        table=table if table is not None else msg["table"],
    )


def route_get(
    dst: IPAddress, src: Optional[IPAddress] = None, oif: Optional[int] = None
) -> Route:
    """``ip route get DST [from SRC] [oif OIF]`` -- the kernel's routing decision.

    Pass exactly what the RDMA core passes: ``src`` only when the id has a
    specific source (never the wildcard), ``oif`` = the id's ``bound_dev_if``
    (an IPv6 link-local zone, or the netdev owning a given source).  With an
    ``oif`` the kernel treats a destination it has no usable route for as
    on-link on that netdev; the answer then has no ``prefix``.  Errors the
    lookup fails with are returned in :attr:`Route.errno`, not raised.

    Sends ``RTM_GETROUTE`` with ``RTM_F_LOOKUP_TABLE`` (so the answer names the
    table the lookup ended in, as ``ip route get`` shows it), then once more
    with ``RTM_F_FIB_MATCH`` for the matching FIB entry's prefix.
    """
    dst = unscoped(ipaddress.ip_address(dst))
    src = unscoped(ipaddress.ip_address(src)) if src is not None else None
    family = socket.AF_INET if dst.version == 4 else socket.AF_INET6
    kw: Dict[str, Any] = {"dst": str(dst), "family": family}
    if src is not None:
        kw["src"] = str(src)
    if oif:
        kw["oif"] = oif
    with _rtnl() as ipr:
        try:
            # RTM_F_LOOKUP_TABLE: report the table the lookup ended in (as `ip route get` does)
            msgs = ipr.route("get", flags=RTM_F_LOOKUP_TABLE, **kw)
        except NetlinkError as e:
            code = abs(e.code)
            return Route(dst=dst, src=src, oif=oif, errno=code,
                         type=_ERRNO_ROUTE_TYPE.get(code, RouteType.UNSPEC))
        if not msgs:
            return Route(dst=dst, src=src, oif=oif, errno=_errno.ENETUNREACH, type=RouteType.UNSPEC)
        names = {link["index"]: link.get_attr("IFLA_IFNAME") for link in _link_msgs(ipr)}
        route = _route_from_msg(msgs[0], dst, src, oif, names)
        # The matching FIB entry (``ip route get fibmatch``), for the prefix only.
        try:
            fib = ipr.route("get", flags=RTM_F_FIB_MATCH, **kw)
        except NetlinkError:
            fib = []
    if fib:
        m = fib[0]
        plen = m["dst_len"]
        base = m.get_attr("RTA_DST") or ("0.0.0.0" if dst.version == 4 else "::")
        try:
            prefix: Optional[IPNetwork] = ipaddress.ip_network("%s/%d" % (base, plen), strict=False)
        except ValueError:
            prefix = None
        # only keep it when it describes the same decision
        if prefix is not None and dst in prefix and m.get_attr("RTA_OIF") in (None, route.ifindex):
            return _replace(route, prefix=prefix)
    return route


def _replace(route: Route, **changes: Any) -> Route:
    import dataclasses

    return dataclasses.replace(route, **changes)


def links() -> List[Link]:
    """The netdevs of this network namespace, in ifindex order."""
    with _rtnl() as ipr:
        msgs = _link_msgs(ipr)
    out = []
    for m in msgs:
        addr = m.get_attr("IFLA_ADDRESS")
        carrier = m.get_attr("IFLA_CARRIER")
        out.append(
            Link(
                index=m["index"],
                name=m.get_attr("IFLA_IFNAME"),
                type=m["ifi_type"],
                flags=m["flags"],
                operstate=m.get_attr("IFLA_OPERSTATE") or "UNKNOWN",
                address=bytes.fromhex(addr.replace(":", "")) if addr else None,
                mtu=m.get_attr("IFLA_MTU"),
                carrier=None if carrier is None else bool(carrier),
            )
        )
    return sorted(out, key=lambda link: link.index)


def addresses() -> Dict[int, Tuple[Address, ...]]:
    """ifindex -> the netdev's IPv4 and IPv6 addresses (with prefixes)."""
    with _rtnl() as ipr:
        msgs = ipr.get_addr()
    out: Dict[int, List[Address]] = {}
    for m in msgs:
        local = m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS")
        if not local:
            continue
        flags = m.get_attr("IFA_FLAGS")
        iface = ipaddress.ip_interface("%s/%d" % (local, m["prefixlen"]))
        out.setdefault(m["index"], []).append(
            Address(ifindex=m["index"], interface=iface, scope=m["scope"],
                    flags=flags if flags is not None else m["flags"])
        )
    return {k: tuple(v) for k, v in sorted(out.items())}


def neighbour(ifindex: int, addr: IPAddress) -> NudState:
    """The ARP/ND state of ``addr`` on netdev ``ifindex`` (``NONE``: no entry yet)."""
    addr = unscoped(ipaddress.ip_address(addr))
    family = socket.AF_INET if addr.version == 4 else socket.AF_INET6
    with _rtnl() as ipr:
        msgs = ipr.get_neighbours(family=family)
    for m in msgs:
        if m["ifindex"] == ifindex and _ip(m.get_attr("NDA_DST")) == addr:
            state = m["state"]
            try:
                return NudState(state)
            except ValueError:
                return NudState(state & -state)  # lowest bit set
    return NudState.NONE


def ifindex(name: str) -> int:
    """The ifindex of netdev ``name`` in this network namespace."""
    for link in links():
        if link.name == name:
            return link.index
    raise UsageError("no netdev named %r in this network namespace (see `ip link`)" % name)
