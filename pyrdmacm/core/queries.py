"""What the kernel says of an id: QUERY ADDR, GID, PATH and IB_SERVICE, QUERY_ROUTE.

librdmacm queries the kernel after every event; an id here asks on first use of what
the queries return and keeps the answers until it moves: the same answers, without the
cost for callers that never ask.  :class:`Answers` is that part of a
:class:`~pyrdmacm.core.cmid.CmId`: the id holds one (``_cache``) from its first question
until its next move (:class:`~pyrdmacm.core.life.Life` drops it), and its public query
methods and accessors (``query_addr``, ``local_addr``, ``sgid`` ...) ask it.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Tuple, TypeVar

from .. import abi, wire
from ..addr import AF_IB, Address
from ..errors import KernelError, StateError

if TYPE_CHECKING:  # pragma: no cover
    from ..devices import Device
    from ..records import AddrInfo, DeviceRef, PathRecord, RouteInfo, ServiceRecord

__all__ = ["Answers"]

_CMD = wire.COMMAND
_R = TypeVar("_R")
_ZERO_GID = bytes(16)


def _gid(raw: bytes) -> Optional[ipaddress.IPv6Address]:
    return ipaddress.IPv6Address(raw) if raw != _ZERO_GID else None


class Answers:
    """What the kernel said of one id since it last moved (QUERY ADDR and GID, kept), and the
    asking (every query, kept or not).  Made on the id's first question; an answer asked
    while an event moves the id goes into this part, which the id has dropped already."""

    __slots__ = ("id", "addr", "gids")

    def __init__(self, cm_id: Any) -> None:
        #: the id asked about (a :class:`~pyrdmacm.core.cmid.CmId`)
        self.id = cm_id
        #: QUERY ADDR's answer, once asked
        self.addr: Optional[AddrInfo] = None
        #: QUERY GID's answer, once asked
        self.gids: Optional[Tuple[Optional[Address], Optional[Address]]] = None

    def _ask(self, command: str, option: int, prefill: bytes, decode: Callable[[Any], _R]) -> _R:
        """One QUERY (or QUERY_ROUTE) into the channel's query buffer, under its command lock,
        the buffer cleared (and prefilled) first; ``decode`` reads the reply."""
        cm = self.id
        ch = cm.channel
        buf = ch._r_query
        with ch._cmd_lock:
            buf.clear()
            if prefill:
                buf.fill(prefill)
            ch.submit(_CMD[command].encode(buf.address, cm.handle, option), _CMD[command].cmd.name,
                      dst=cm._peer())
            return decode(buf.view)

    def query_addr(self, devices: Optional[Iterable["Device"]]) -> AddrInfo:
        """QUERY ADDR (QUERY_ROUTE on old kernels), kept."""
        self.id._alive("query_addr")
        if self.addr is not None:
            return self.addr
        if self.id.channel.legacy:
            r = self._ask("QUERY_ROUTE", 0, wire.route_reply_prefill(), wire.route_reply)
        else:
            r = self._ask("QUERY_ADDR", abi.QueryOption.ADDR, wire.addr_reply_prefill(), wire.addr_reply)
        from ..records import AddrInfo  # loaded on first use (pyrdmacm.records.replies)

        info = self.addr = AddrInfo(r.src, r.dst, self._device_ref(r.node_guid, r.ibdev_index, r.port_num, devices),
                                    r.port_num, r.pkey)
        return info

    def _device_ref(self, node_guid: int, ibdev_index: Optional[int], port_num: int,
                    devices: Optional[Iterable["Device"]]) -> Optional[DeviceRef]:
        """The device a query reply named by index and node GUID (None: the id is on none)."""
        if not node_guid and (ibdev_index is None or not port_num):
            return None
        from ..records import DeviceRef  # loaded on first use (pyrdmacm.records.replies)

        known = None
        if devices is not None:  # the caller read them (so pyrdmacm.devices is loaded already)
            from ..devices import find_device

            known = find_device(ibdev_index, node_guid or None, devices=devices)
        if known is not None:
            name, index = known.name, (ibdev_index if ibdev_index is not None else known.index)
        else:
            name, index = self.id.channel._t.identify_device(ibdev_index, node_guid)
        return DeviceRef(name, index, node_guid)

    def query_route(self, devices: Optional[Iterable["Device"]]) -> RouteInfo:
        """QUERY_ROUTE, not kept (the route changes with the id)."""
        self.id._alive("query_route")
        r = self._ask("QUERY_ROUTE", 0, wire.route_reply_prefill(), wire.route_where)
        from ..records import RouteInfo  # loaded on first use (pyrdmacm.records.replies)

        device = self._device_ref(r.node_guid, r.ibdev_index, r.port_num, devices)
        return RouteInfo(device, r.port_num, _gid(r.sgid), _gid(r.dgid), r.pkey, r.num_paths)

    def query_gid(self) -> Tuple[Optional[Address], Optional[Address]]:
        """QUERY GID, kept."""
        self.id._alive("query_gid")
        if self.gids is not None:
            return self.gids
        r = self._ask("QUERY_ADDR", abi.QueryOption.GID, b"", wire.addr_reply)
        res = self.gids = (r.src, r.dst)
        return res

    def query_path(self) -> List[PathRecord]:
        """QUERY PATH."""
        self.id._alive("query_path")
        return self._ask("QUERY_PATH", abi.QueryOption.PATH, b"",
                         lambda view: wire.path_records(bytes(view[: wire.QUERY_PATH_REPLY_SIZE])))

    def query_ib_service(self) -> List[ServiceRecord]:
        """QUERY IB_SERVICE; [] for the kernel's ENODATA (nothing resolved)."""
        self.id._alive("query_ib_service")
        try:
            total, recs = self._ask("QUERY_IB_SERVICE", abi.QueryOption.IB_SERVICE, b"",
                                    lambda view: wire.service_records(bytes(view[: wire.QUERY_IB_SERVICE_REPLY_SIZE])))
        except KernelError as e:
            if e.errno == errno.ENODATA:  # the kernel has none (nothing resolved)
                return []
            raise
        return recs

    def gid(self, which: int) -> Optional[ipaddress.IPv6Address]:
        """The source (0) or destination (1) GID of QUERY GID's AF_IB view, or None."""
        a = self.query_gid()[which]
        return a.ip if a is not None and a.family == AF_IB else None  # type: ignore[return-value]
