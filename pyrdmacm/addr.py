"""Addresses as users write them, and as the kernel wants them.

Theory of operation
-------------------
:func:`parse_address` turns what a user writes into an :class:`Address`:

* ``"10.0.0.2"``, ``"10.0.0.2:7471"``, ``"fe80::1%eth0"``,
  ``"[fe80::1%eth0]:7471"``, ``"[2001:db8::1]:7471"``;
* :mod:`ipaddress` objects (``IPv6Address("fe80::1%eth0")`` keeps its zone);
* ``(host, port)`` tuples, and ``(host, port, flowinfo, scope_id)`` as
  :mod:`socket` gives them for IPv6;
* InfiniBand GIDs: ``"gid:fe80::2:c903:0:1"`` (optionally ``pkey=0xffff``,
  ``sid=...``) or :meth:`Address.ib`.

A zone may be an interface name or a number; names become scope ids through
``if_nametoindex`` in the caller's network namespace.  A link-local IPv6
address without a zone is refused here, before any system call: the kernel
would answer EINVAL for a source and guess the wrong interface for a
destination.

:meth:`Address.pack_storage` gives the 128-byte ``__kernel_sockaddr_storage``
of BIND / RESOLVE_ADDR, :meth:`Address.pack_in6` the 28-byte ``sockaddr_in6``
slot of the old BIND_IP / RESOLVE_IP (an IPv4 ``sockaddr_in`` occupies its
first 16 bytes), and :func:`unpack_sockaddr` reads either back.  The layouts
are those of :mod:`pyrdmacm.abi`; the tests check these hand-made ``struct``
formats against the construct declarations.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import Any, Optional, Union

from .errors import UsageError

AF_INET = 2
AF_INET6 = 10
AF_IB = 27

SOCKADDR_IN_SIZE = 16
SOCKADDR_IN6_SIZE = 28
SOCKADDR_IB_SIZE = 48
STORAGE_SIZE = 128

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]

# sa_family is host order (little-endian), the rest network order: one
# big-endian format per family, with the family byte-swapped into it.
_IN = struct.Struct(">HH4s8x")
_IN6 = struct.Struct(">HHI16s")
_IB = struct.Struct(">HHI16sQQ")
_FAMILY_BE = {AF_INET: AF_INET << 8, AF_INET6: AF_INET6 << 8, AF_IB: AF_IB << 8}
_SCOPE = struct.Struct("<I")
_SCOPE64 = struct.Struct("<Q")
_FAM = struct.Struct("<H")


def _zone_index(zone: str) -> int:
    if zone.isdigit():
        return int(zone)
    try:
        return socket.if_nametoindex(zone)
    except OSError:
        raise UsageError(
            "unknown zone %r: no such network interface in this network namespace "
            "(see `ip link`; a zone is an interface name or index, as in fe80::1%%eth0)" % zone
        ) from None


def _zone_name(index: int) -> str:
    try:
        return socket.if_indextoname(index)
    except OSError:
        return str(index)


@dataclass(frozen=True)
class Address:
    """A socket address for rdma_cm: IPv4, IPv6 (with scope id) or InfiniBand (AF_IB).

    For AF_IB, ``ip`` holds the GID as an :class:`ipaddress.IPv6Address`,
    ``port`` the low 16 bits of the service id.
    """

    ip: IPAddress
    port: int = 0
    scope_id: int = 0
    flowinfo: int = 0
    family: int = 0
    pkey: int = 0
    sid: int = 0
    sid_mask: int = 0

    def __post_init__(self) -> None:
        if not self.family:
            object.__setattr__(self, "family", AF_INET if self.ip.version == 4 else AF_INET6)
        if not 0 <= self.port <= 0xFFFF:
            raise UsageError("port %d out of range: a port is 0..65535" % self.port)
        if self.family == AF_INET and self.ip.version != 4:
            raise UsageError("AF_INET address must be IPv4, got %s" % self.ip)
        if self.family in (AF_INET6, AF_IB) and self.ip.version != 6:
            raise UsageError("AF_INET6/AF_IB address must be 128 bits, got %s" % self.ip)
        if not 0 <= self.scope_id <= 0xFFFFFFFF:
            raise UsageError("scope id %d out of range" % self.scope_id)
        if not 0 <= self.pkey <= 0xFFFF:
            raise UsageError("pkey %#x out of range: a pkey is 16 bits" % self.pkey)
        if not 0 <= self.flowinfo <= 0xFFFFFFFF:
            raise UsageError("flowinfo %d out of range" % self.flowinfo)

    # -- constructors
    @classmethod
    def ib(cls, gid: Any, *, pkey: int = 0xFFFF, sid: int = 0, sid_mask: Optional[int] = None) -> "Address":
        """An AF_IB address: a GID, a partition key and an IB service id."""
        g = ipaddress.IPv6Address(gid) if not isinstance(gid, ipaddress.IPv6Address) else gid
        if not 0 <= sid <= 0xFFFFFFFFFFFFFFFF:
            raise UsageError("service id %#x out of range: 64 bits" % sid)
        mask = (0xFFFFFFFFFFFFFFFF if sid else 0) if sid_mask is None else sid_mask
        return cls(ip=g, family=AF_IB, pkey=pkey, sid=sid, sid_mask=mask, port=sid & 0xFFFF)

    # -- properties
    @property
    def size(self) -> int:
        """The sockaddr size the kernel expects for this family (16, 28 or 48)."""
        return {AF_INET: SOCKADDR_IN_SIZE, AF_INET6: SOCKADDR_IN6_SIZE, AF_IB: SOCKADDR_IB_SIZE}[self.family]

    @property
    def is_any(self) -> bool:
        return self.ip.is_unspecified

    @property
    def zone(self) -> str:
        return _zone_name(self.scope_id) if self.scope_id else ""

    def __str__(self) -> str:
        if self.family == AF_IB:
            return "gid:%s pkey=%#06x sid=%#x" % (self.ip, self.pkey, self.sid)
        host = str(self.ip)
        if self.family == AF_INET6 and self.scope_id:
            host += "%" + self.zone
        if self.port:
            return ("[%s]:%d" if self.family == AF_INET6 else "%s:%d") % (host, self.port)
        return host

    # -- wire formats
    def pack_sockaddr(self) -> bytes:
        """The sockaddr itself: 16, 28 or 48 bytes."""
        fam = _FAMILY_BE[self.family]
        if self.family == AF_INET:
            return _IN.pack(fam, self.port, self.ip.packed)
        if self.family == AF_INET6:
            return _IN6.pack(fam, self.port, self.flowinfo, self.ip.packed) + _SCOPE.pack(self.scope_id)
        return _IB.pack(fam, self.pkey, self.flowinfo, self.ip.packed, self.sid, self.sid_mask) + _SCOPE64.pack(
            self.scope_id
        )

    def pack_storage(self) -> bytes:
        """``__kernel_sockaddr_storage``: the sockaddr padded with zeros to 128 bytes."""
        return self.pack_sockaddr().ljust(STORAGE_SIZE, b"\0")

    def pack_in6(self) -> bytes:
        """The 28-byte ``sockaddr_in6`` slot of BIND_IP / RESOLVE_IP (AF_INET or AF_INET6 only)."""
        if self.family == AF_IB:
            raise UsageError("AF_IB addresses need the BIND / RESOLVE_ADDR commands (kernel 3.11+)")
        return self.pack_sockaddr().ljust(SOCKADDR_IN6_SIZE, b"\0")


def unpack_sockaddr(buf: bytes) -> Optional[Address]:
    """Read a sockaddr (of any of the three families) from the start of ``buf``.

    Family 0 (nothing there) gives ``None``; an unknown family raises
    :class:`~pyrdmacm.errors.DecodeError`.
    """
    from .errors import DecodeError

    if len(buf) < 2:
        raise DecodeError("sockaddr", "%d bytes, need at least 2" % len(buf), 0)
    fam = _FAM.unpack_from(buf)[0]
    if fam == 0:
        return None
    try:
        if fam == AF_INET:
            _, port, ip = _IN.unpack_from(buf)
            return Address(ipaddress.IPv4Address(ip), port)
        if fam == AF_INET6:
            _, port, flow, ip = _IN6.unpack_from(buf)
            scope = _SCOPE.unpack_from(buf, 24)[0]
            return Address(ipaddress.IPv6Address(ip), port, scope, flow)
        if fam == AF_IB:
            _, pkey, flow, gid, sid, mask = _IB.unpack_from(buf)
            scope = _SCOPE64.unpack_from(buf, 40)[0]
            return Address(
                ipaddress.IPv6Address(gid), sid & 0xFFFF, scope & 0xFFFFFFFF, flow, AF_IB, pkey, sid, mask
            )
    except struct.error as e:
        raise DecodeError("sockaddr", "family %d needs more than %d bytes (%s)" % (fam, len(buf), e), 0) from None
    raise DecodeError("sockaddr", "unknown address family %d" % fam, 0)


def _split_host_port(text: str) -> "tuple[str, Optional[int]]":
    text = text.strip()
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise UsageError("unbalanced '[' in address %r (write [fe80::1%%eth0]:7471)" % text)
        host, rest = text[1:end], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise UsageError("expected ':PORT' after ']' in %r" % text)
        return host, _port(rest[1:], text)
    if text.count(":") == 1:  # IPv4 (or name) with a port
        host, port = text.split(":")
        return host, _port(port, text)
    return text, None


def _port(s: str, text: str) -> int:
    try:
        p = int(s, 0)
    except ValueError:
        raise UsageError("bad port %r in %r: a port is a number 0..65535" % (s, text)) from None
    if not 0 <= p <= 0xFFFF:
        raise UsageError("port %d out of range in %r: a port is 0..65535" % (p, text))
    return p


def _ip(host: str, original: Any) -> "tuple[IPAddress, int]":
    zone = ""
    if "%" in host:
        host, zone = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(
            "%r is not an IP address (write 10.0.0.2, fe80::1%%eth0, [2001:db8::1]:7471 or gid:...; "
            "names are not resolved)" % (original,)
        ) from None
    scope = 0
    if zone:
        if ip.version == 4:
            raise UsageError("IPv4 address %s cannot have a zone (%%%s)" % (host, zone))
        scope = _zone_index(zone)
    return ip, scope


def parse_address(value: Any, port: Optional[int] = None, *, require_zone: bool = True) -> Address:
    """Turn what a user wrote into an :class:`Address` (see the module docstring).

    ``port`` applies when the value carries none.  With ``require_zone`` (the
    default) a link-local IPv6 address without a zone raises
    :class:`~pyrdmacm.errors.UsageError`.
    """
    if isinstance(value, Address):
        addr = value
    elif isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        scope = 0
        if isinstance(value, ipaddress.IPv6Address) and getattr(value, "scope_id", None):
            scope = _zone_index(value.scope_id)  # type: ignore[arg-type]
            value = ipaddress.IPv6Address(value.packed)
        addr = Address(value, port or 0, scope)
    elif isinstance(value, tuple):
        if len(value) not in (2, 4):
            raise UsageError("an address tuple is (host, port) or (host, port, flowinfo, scope_id), got %r" % (value,))
        base = parse_address(value[0], require_zone=False)
        if not isinstance(value[1], int):
            raise UsageError("port must be an int, got %r" % (value[1],))
        flow, scope = (value[2], value[3]) if len(value) == 4 else (base.flowinfo, base.scope_id)
        addr = Address(base.ip, value[1], scope or base.scope_id, flow, base.family, base.pkey, base.sid, base.sid_mask)
    elif isinstance(value, str):
        text = value.strip()
        if text.lower().startswith("gid:"):
            return _parse_gid(text[4:], value)
        host, p = _split_host_port(text)
        ip, scope = _ip(host, value)
        addr = Address(ip, p if p is not None else (port or 0), scope)
    elif isinstance(value, bytes) and len(value) in (4, 16):
        addr = Address(ipaddress.ip_address(value), port or 0)
    else:
        raise UsageError(
            "cannot use %r as an address: give a string ('10.0.0.2', 'fe80::1%%eth0'), "
            "an ipaddress object, a (host, port) tuple or an Address" % (value,)
        )
    if port is not None and not addr.port and addr.family != AF_IB:
        addr = Address(addr.ip, port, addr.scope_id, addr.flowinfo, addr.family)
    if (
        require_zone
        and addr.family == AF_INET6
        and addr.ip.is_link_local
        and not addr.scope_id
    ):
        raise missing_zone(addr.ip)
    return addr


def missing_zone(ip: Any) -> UsageError:
    """The refusal of a link-local IPv6 address without a zone: the library's and the pre-check's."""
    return UsageError(
        "link-local address %s needs a zone naming the interface, e.g. %s%%eth0: "
        "the kernel cannot tell which link is meant" % (ip, ip)
    )


def _parse_gid(text: str, original: Any) -> Address:
    parts = text.split()
    if not parts:
        raise UsageError("empty GID in %r" % (original,))
    kw = {"pkey": 0xFFFF, "sid": 0}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        if k not in kw or not v:
            raise UsageError("unknown GID option %r in %r (use pkey=0xffff sid=0x...)" % (p, original))
        try:
            kw[k] = int(v, 0)
        except ValueError:
            raise UsageError("bad number %r for %s in %r" % (v, k, original)) from None
    try:
        gid = ipaddress.IPv6Address(parts[0])
    except ValueError:
        raise UsageError("%r is not a GID (128 bits written like an IPv6 address)" % parts[0]) from None
    return Address.ib(gid, pkey=kw["pkey"], sid=kw["sid"])


def same_family(a: Address, b: Address) -> bool:
    return a.family == b.family
