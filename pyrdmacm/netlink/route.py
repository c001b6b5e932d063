"""Netlink's routing family: what the kernel's IP routing says, for the pre-check.

Theory of operation
-------------------
``NETLINK_ROUTE``, for the routing decisions through pyroute2's ``IPRoute`` (imported on
the first of them): :func:`route_get` asks ``RTM_GETROUTE``
with exactly the inputs the kernel's RDMA address resolution gives
``ip_route_output_key()`` / ``ipv6_dst_lookup`` (daddr, saddr, oif = the id's
``bound_dev_if``) and returns the kernel's answer, errors included, as a :class:`Route`.
``RTM_GETROUTE`` and ``addr4_resolve()`` run the same lookup function
(``ip_route_output_key_hash_rcu``), so the answer is the kernel's own; the one input
that differs is the uid used by ``ip rule ... uidrange`` rules (the lookup runs with the
caller's uid, the RDMA core's with uid 0).  :func:`links`, :func:`addresses` and
:func:`neighbour` read the netdevs, their addresses and the ARP/ND table; the first two
are dumps read on :mod:`pyrdmacm.netlink.wire` (``ifinfomsg`` and ``ifaddrmsg`` with the
few attributes used), as every run reads them before its first command.

Each call opens a routing socket in the caller's network namespace and closes it;
inside a :class:`session` the calls of one thread share one ``IPRoute`` and one
``RTM_GETLINK`` dump.

Numbers are the kernel's (linux/rtnetlink.h, linux/neighbour.h, linux/if_arp.h).
"""

from __future__ import annotations

import enum
import errno as _errno
import ipaddress
import os
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple, Union

from . import wire
from ..abi.named import NamedIntEnum
from ..errors import KernelError, UsageError

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPInterface = Union[ipaddress.IPv4Interface, ipaddress.IPv6Interface]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

ARPHRD_ETHER = 1
ARPHRD_INFINIBAND = 32
ARPHRD_LOOPBACK = 772
ARPHRD_NONE = 0xFFFE
IFF_UP = 0x1
IFF_LOOPBACK = 0x8
IFF_NOARP = 0x80
IFA_F_DADFAILED = 0x08
IFA_F_TENTATIVE = 0x40
RTM_GETLINK = 18
RTM_GETADDR = 22
IFLA_ADDRESS, IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE, IFLA_CARRIER = 1, 3, 4, 16, 33
IFA_ADDRESS, IFA_LOCAL, IFA_FLAGS = 1, 2, 8
#: IF_OPER_* (linux/if.h), as ``ip link`` names them
OPERSTATES = ("UNKNOWN", "NOTPRESENT", "DOWN", "LOWERLAYERDOWN", "TESTING", "DORMANT", "UP")
#: ``struct ifinfomsg``: family, pad, type, index, flags, change
IFINFOMSG = struct.Struct("=BxHiII")
#: ``struct ifaddrmsg``: family, prefix length, flags, scope, index
IFADDRMSG = struct.Struct("=BBBBI")
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
class IfAddress:
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
    links: Optional[List["Link"]] = None


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
    from pyroute2 import IPRoute  # type: ignore[import-untyped]  # here: its import is 2 s in a guest

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


def _dump(mtype: int, family: struct.Struct, command: str) -> List[Tuple[Tuple[Any, ...], Dict[int, bytes]]]:
    """One ``NETLINK_ROUTE`` dump of messages headed by ``family`` (``command`` names it in
    errors): each message's family header fields and its attributes by type."""
    try:
        sock = wire.open_socket(socket.NETLINK_ROUTE, "NETLINK_ROUTE")
    except OSError as e:
        raise KernelError(e.errno or _errno.EIO, e.filename, hint="cannot open a routing netlink socket") from e
    try:
        msgs = wire.exchange(sock, wire.message(mtype, wire.NLM_F_REQUEST | wire.NLM_F_DUMP, 1, bytes(family.size)),
                             1, True)
    except OSError as e:
        raise KernelError(e.errno or _errno.EIO, command, hint="the routing netlink socket refused a dump") from e
    finally:
        sock.close()
    body = wire.HDR.size + family.size
    return [(family.unpack_from(m, wire.HDR.size), dict(wire.attributes(m, body))) for m in msgs if len(m) >= body]


def _u32(attrs: Dict[int, bytes], key: int) -> Optional[int]:
    value = attrs.get(key)
    return struct.unpack_from("=I", value)[0] if value is not None and len(value) >= 4 else None


def _links() -> List["Link"]:
    """``RTM_GETLINK``'s dump: once per session."""
    if _SESSION.depth and _SESSION.links is not None:
        return _SESSION.links
    out = []
    for (_family, itype, index, flags, _change), a in _dump(RTM_GETLINK, IFINFOMSG, "RTM_GETLINK"):
        oper = a.get(IFLA_OPERSTATE)
        carrier = a.get(IFLA_CARRIER)
        out.append(Link(
            index=index, name=a.get(IFLA_IFNAME, b"").split(b"\0", 1)[0].decode("utf-8", "replace"),
            type=itype, flags=flags,
            operstate=OPERSTATES[oper[0]] if oper and oper[0] < len(OPERSTATES) else "UNKNOWN",
            address=a.get(IFLA_ADDRESS) or None,
            mtu=_u32(a, IFLA_MTU),
            carrier=None if not carrier else bool(carrier[0]),
        ))
    out.sort(key=lambda link: link.index)
    if _SESSION.depth:
        _SESSION.links = out
    return out


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
    from pyroute2.netlink.exceptions import NetlinkError  # type: ignore[import-untyped]

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
        names = {link.index: link.name for link in _links()}
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
    return list(_links())


def addresses() -> Dict[int, Tuple[IfAddress, ...]]:
    """ifindex -> the netdev's IPv4 and IPv6 addresses (with prefixes)."""
    out: Dict[int, List[IfAddress]] = {}
    for (family, plen, flags8, scope, index), a in _dump(RTM_GETADDR, IFADDRMSG, "RTM_GETADDR"):
        local = a.get(IFA_LOCAL) or a.get(IFA_ADDRESS)
        if family not in (socket.AF_INET, socket.AF_INET6) or not local or len(local) not in (4, 16):
            continue
        flags = _u32(a, IFA_FLAGS)
        out.setdefault(index, []).append(
            IfAddress(ifindex=index, interface=ipaddress.ip_interface((ipaddress.ip_address(local), plen)),
                      scope=scope, flags=flags8 if flags is None else flags)
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
