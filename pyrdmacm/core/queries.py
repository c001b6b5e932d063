"""What the kernel says of an id: QUERY ADDR, GID, PATH and IB_SERVICE, QUERY_ROUTE, and
librdmacm's accessors over them (``rdma_get_local_addr`` ...).

librdmacm queries the kernel after every event; an id here asks on first use of what
the queries return and caches the answers (:meth:`~pyrdmacm.core.life.Life._answers`) until
the id moves: the same answers, without the cost for callers that never ask.
:class:`Queries` is the part of :class:`~pyrdmacm.core.cmid.CmId` that asks.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import TYPE_CHECKING, Any, Callable, Iterable, List, Optional, Tuple, TypeVar

from .. import abi, wire
from ..addr import AF_IB, Address
from ..errors import KernelError, StateError
from .life import Life
from ..state import State

if TYPE_CHECKING:  # pragma: no cover
    from ..devices import Device
    from ..records import AddrInfo, DeviceRef, PathRecord, RouteInfo, ServiceRecord

__all__ = ["Queries"]

_CMD = wire.COMMAND
_DESTROYED = State.DESTROYED
_IDLE = State.IDLE
_R = TypeVar("_R")
_ZERO_GID = bytes(16)


def _gid(raw: bytes) -> Optional[ipaddress.IPv6Address]:
    return ipaddress.IPv6Address(raw) if raw != _ZERO_GID else None


class Queries(Life):
    """The queries of an id (a mixin of :class:`~pyrdmacm.core.cmid.CmId`, which has the rest)."""

    __slots__ = ()

    #: the id's channel (an :class:`~pyrdmacm.EventChannel`), its kernel handle and uid
    channel: Any
    handle: int
    uid: int

    def _peer(self) -> Optional[Address]:  # pragma: no cover - CmId's
        raise NotImplementedError

    def _bound_src(self) -> Optional[Address]:
        try:
            return self.query_addr().src
        except KernelError:
            return None

    def _alive(self, call: str) -> None:
        # before any cache or syscall: the kernel reuses a destroyed id's handle for new ids
        if self._state is _DESTROYED:
            raise StateError("%s on a destroyed id (uid %d): create a new id" % (call, self.uid))
        self.channel._check()

    def _ask(self, command: str, option: int, prefill: bytes, decode: Callable[[Any], _R]) -> _R:
        """One QUERY (or QUERY_ROUTE) into the channel's query buffer, under its command lock,
        the buffer cleared (and prefilled) first; ``decode`` reads the reply."""
        ch = self.channel
        buf = ch._r_query
        with ch._cmd_lock:
            buf.clear()
            if prefill:
                buf.fill(prefill)
            ch.submit(_CMD[command].encode(buf.address, self.handle, option), _CMD[command].cmd.name,
                      dst=self._peer())
            return decode(buf.view)

    def query_addr(self, devices: Optional[Iterable["Device"]] = None) -> AddrInfo:
        """QUERY ADDR (QUERY_ROUTE on old kernels): source, destination, device, port, pkey.

        The kernel names the device by index and node GUID; ``devices`` (a list read once,
        :func:`~pyrdmacm.list_devices`) names it without reading sysfs again, for a program
        that asks for many ids.  A device not in the list is looked up as without it."""
        self._alive("query_addr")
        cache = self._answers()
        if cache[0] is not None:
            return cache[0]  # type: ignore[no-any-return]
        ch = self.channel
        if ch.legacy:
            r = self._ask("QUERY_ROUTE", 0, wire.route_reply_prefill(), wire.route_reply)
        else:
            r = self._ask("QUERY_ADDR", abi.QueryOption.ADDR, wire.addr_reply_prefill(), wire.addr_reply)
        from ..records import AddrInfo  # loaded on first use (pyrdmacm.records.replies)

        info = AddrInfo(r.src, r.dst, self._device_ref(r.node_guid, r.ibdev_index, r.port_num, devices), r.port_num,
                        r.pkey)
        cache[0] = info  # into the list taken before asking: an event meanwhile dropped it
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
            name, index = self.channel._t.identify_device(ibdev_index, node_guid)
        return DeviceRef(name, index, node_guid)

    def query_route(self, devices: Optional[Iterable["Device"]] = None) -> RouteInfo:
        """QUERY_ROUTE: the device, the port, and the route's first path (its GIDs and pkey),
        in one command, as librdmacm reads them after ROUTE_RESOLVED.  Before resolve_route
        the kernel gives the GIDs the address resolution found (``num_paths`` 0; on RoCE the
        addresses' own); an id on no device has none.  ``devices``: as for
        :meth:`query_addr`.  Not cached: the route changes with the id."""
        self._alive("query_route")
        r = self._ask("QUERY_ROUTE", 0, wire.route_reply_prefill(), wire.route_where)
        from ..records import RouteInfo  # loaded on first use (pyrdmacm.records.replies)

        device = self._device_ref(r.node_guid, r.ibdev_index, r.port_num, devices)
        return RouteInfo(device, r.port_num, _gid(r.sgid), _gid(r.dgid), r.pkey, r.num_paths)

    def query_gid(self) -> Tuple[Optional[Address], Optional[Address]]:
        """QUERY GID: source and destination as AF_IB addresses (the GIDs, pkey, service id)."""
        self._alive("query_gid")
        cache = self._answers()
        if cache[1] is not None:
            return cache[1]  # type: ignore[no-any-return]
        r = self._ask("QUERY_ADDR", abi.QueryOption.GID, b"", wire.addr_reply)
        res = (r.src, r.dst)
        cache[1] = res
        return res

    def query_path(self) -> List[PathRecord]:
        """QUERY PATH: the path records of the resolved route (up to 6)."""
        self._alive("query_path")
        return self._ask("QUERY_PATH", abi.QueryOption.PATH, b"",
                         lambda view: wire.path_records(bytes(view[: wire.QUERY_PATH_REPLY_SIZE])))

    def query_ib_service(self) -> List[ServiceRecord]:
        """QUERY IB_SERVICE (Linux 6.17+): the service records RESOLVE_IB_SERVICE found (up to
        six), [] when there are none (the kernel's ENODATA).  Older kernels refuse the option
        (ENOSYS)."""
        self._alive("query_ib_service")
        try:
            total, recs = self._ask("QUERY_IB_SERVICE", abi.QueryOption.IB_SERVICE, b"",
                                    lambda view: wire.service_records(bytes(view[: wire.QUERY_IB_SERVICE_REPLY_SIZE])))
        except KernelError as e:
            if e.errno == errno.ENODATA:  # the kernel has none (nothing resolved)
                return []
            raise
        return recs

    # -- librdmacm's accessors
    def get_local_addr(self) -> Optional[Address]:
        """``rdma_get_local_addr``: the bound source address (and port)."""
        return self.query_addr().src

    def get_peer_addr(self) -> Optional[Address]:
        """``rdma_get_peer_addr``: the destination address (and port)."""
        info = self.query_addr()
        return info.dst if info.dst is not None else self._peer()

    def get_src_port(self) -> int:
        """``rdma_get_src_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_local_addr()
        return a.port if a is not None else 0

    def get_dst_port(self) -> int:
        """``rdma_get_dst_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_peer_addr()
        return a.port if a is not None else 0

    local_addr = property(get_local_addr)
    peer_addr = property(get_peer_addr)

    @property
    def device(self) -> Optional[DeviceRef]:
        """The RDMA device the id is bound to (QUERY ADDR, cached until the id moves), or None."""
        return self.query_addr().device

    @property
    def port_num(self) -> int:
        """The device's port the id is bound to (QUERY ADDR); 0 while unbound."""
        return self.query_addr().port_num

    @property
    def pkey(self) -> int:
        """The partition key of the id's address (QUERY ADDR; 0x0000 on RoCE, whose GIDs carry none)."""
        return self.query_addr().pkey

    @property
    def sgid(self) -> Optional[ipaddress.IPv6Address]:
        """The source GID (QUERY GID, the AF_IB view of the addresses), or None while unbound."""
        s = self.query_gid()[0]
        return s.ip if s is not None and s.family == AF_IB else None  # type: ignore[return-value]

    @property
    def dgid(self) -> Optional[ipaddress.IPv6Address]:
        """The destination GID (QUERY GID), or None before resolve_addr's ADDR_RESOLVED."""
        d = self.query_gid()[1]
        return d.ip if d is not None and d.family == AF_IB else None  # type: ignore[return-value]
