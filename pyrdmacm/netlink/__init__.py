"""Netlink: what the kernel knows about RDMA devices and IP routing.

This module holds the queries of RDMA netlink's device interface (NLDEV) -- the
devices, their ports, the character devices, the subsystem's network namespace mode
and the rdma_cm ids the kernel tracks -- and is the one door to the rest of netlink:
the names of its ``__all__`` are imported from here, wherever they live.

Theory of operation
-------------------
The netlink layer is the only part of pyrdmacm that imports pyroute2, and only for the
routing decisions (:func:`route_get`, :func:`neighbour`: about 150 ms to import on a
host, 2 s in an emulated guest); the devices, the netdevs and their addresses, read
before a run's first command, are a few struct calls on a plain socket.  It is in five
modules, one job each:

* :mod:`pyrdmacm.netlink.wire`: netlink's wire format (header, attributes, a
  request's conversation), the standard library's ``struct`` and ``socket`` alone;
* :mod:`pyrdmacm.netlink.nldev`: the NLDEV messages as bytes (numbers, attribute
  space, encoding and decoding);
* :mod:`pyrdmacm.netlink.rdma`: :class:`RdmaNetlink`, the request/reply
  conversation on a ``NETLINK_RDMA`` socket, and the kernel's refusals as
  :class:`~pyrdmacm.errors.KernelError` with a hint;
* this module: the queries built on it.  Dumps of ports and resources need
  ``RDMA_NLDEV_ATTR_DEV_INDEX`` (the kernel answers EINVAL without it), so
  :func:`ports` and :func:`cm_ids` walk the devices.  Each query takes a
  ``channel`` to share one socket, or opens (and closes) its own;
* :mod:`pyrdmacm.netlink.route`: ``NETLINK_ROUTE``: :func:`links` and :func:`addresses`
  on the wire format, :func:`route_get` and :func:`neighbour` through pyroute2's
  ``IPRoute`` (imported on their first call), :class:`session`; the kernel's own routing
  decisions for the pre-check.

Byte orders: NLDEV integers are host order (``RDMA_NLDEV_ATTR_NODE_GUID`` is the GUID
as a number, i.e. the big-endian GUID already converted); socket addresses in resource
dumps are ``__kernel_sockaddr_storage`` with host-order family and network-order port.
"""

from __future__ import annotations

import errno as _errno
import ipaddress
import os
import socket
import struct
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple, Union

from .nldev import (
    RDMA_NL_NLDEV, RDMA_NLDEV_CMD_GET, RDMA_NLDEV_CMD_GET_CHARDEV, RDMA_NLDEV_CMD_PORT_GET,
    RDMA_NLDEV_CMD_RES_CM_ID_GET, RDMA_NLDEV_CMD_SYS_GET, attr,
)
from .route import (
    ARPHRD_ETHER, ARPHRD_INFINIBAND, ARPHRD_LOOPBACK, IfAddress, Link, NudState, Route, RouteType, addresses,
    ifindex, links, neighbour, route_get, session, unscoped,
)
from ..abi.chardev import decode_huge_dev
from .rdma import NETLINK_RDMA, RdmaNetlink, rdma_error
from ..abi import RdmaCmState

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
    "IfAddress",
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
        raise rdma_error(_errno.EIO, "RDMA_NLDEV_CMD_GET_CHARDEV")
    msg = replies[0]
    return ChardevInfo(
        dev=decode_huge_dev(attr(msg, "ATTR_CHARDEV", 0)),
        name=attr(msg, "ATTR_CHARDEV_NAME", "") or "",
        abi=attr(msg, "ATTR_CHARDEV_ABI", 0) & 0xFFFFFFFF,
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
            index=attr(m, "ATTR_DEV_INDEX"),
            name=attr(m, "ATTR_DEV_NAME", ""),
            node_guid=attr(m, "ATTR_NODE_GUID", 0) or 0,
            node_type=attr(m, "ATTR_DEV_NODE_TYPE"),
            protocol=attr(m, "ATTR_DEV_PROTOCOL"),
            port_count=attr(m, "ATTR_PORT_INDEX"),
            fw_version=attr(m, "ATTR_FW_VERSION") or None,
        )
        for m in replies
        if attr(m, "ATTR_DEV_INDEX") is not None
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
                        dev_index=attr(m, "ATTR_DEV_INDEX", idx),
                        dev_name=attr(m, "ATTR_DEV_NAME", ""),
                        port=attr(m, "ATTR_PORT_INDEX", 0),
                        state=attr(m, "ATTR_PORT_STATE"),
                        phys_state=attr(m, "ATTR_PORT_PHYS_STATE"),
                        lid=attr(m, "ATTR_LID"),
                        netdev_index=attr(m, "ATTR_NDEV_INDEX"),
                        netdev=attr(m, "ATTR_NDEV_NAME"),
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
        raise rdma_error(_errno.EIO, "RDMA_NLDEV_CMD_SYS_GET")
    mode = attr(replies[0], "SYS_ATTR_NETNS_MODE")
    if mode is None:
        raise rdma_error(_errno.EOPNOTSUPP, "RDMA_NLDEV_CMD_SYS_GET")
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
                table = attr(m, "ATTR_RES_CM_ID")
                if table is None:
                    continue
                for e in table.all("ATTR_RES_CM_ID_ENTRY"):
                    out.append(
                        CmIdInfo(
                            dev_index=attr(m, "ATTR_DEV_INDEX", dev.index),
                            dev_name=attr(m, "ATTR_DEV_NAME", dev.name),
                            port=attr(e, "ATTR_PORT_INDEX"),
                            ps=attr(e, "ATTR_RES_PS", 0),
                            state=_state(attr(e, "ATTR_RES_STATE")),
                            src=_sockaddr(attr(e, "ATTR_RES_SRC_ADDR")),
                            dst=_sockaddr(attr(e, "ATTR_RES_DST_ADDR")),
                            pid=attr(e, "ATTR_RES_PID"),
                            kern_name=attr(e, "ATTR_RES_KERN_NAME"),
                            cm_idn=attr(e, "ATTR_RES_CM_IDN"),
                            qp_num=attr(e, "ATTR_RES_LQPN"),
                        )
                    )
    return out
