"""Addresses as users write them, and as the kernel wants them.

Theory of operation
-------------------
:func:`parse_address` turns what a user writes into an :class:`Address`:

* ``"10.0.0.2"``, ``"10.0.0.2:7471"``, ``"fe80::1%eth0"``,
  ``"[fe80::1%eth0]:7471"``, ``"[2001:db8::1]:7471"``;
* :mod:`ipaddress` objects (``IPv6Address("fe80::1%eth0")`` keeps its zone);
* tuples as :mod:`socket` writes them: ``(host, port)`` for IPv4,
  ``(host, port[, flowinfo[, scope_id]])`` for IPv6, where ``host`` is a
  string (an IP address, with a zone if IPv6) or an :mod:`ipaddress` object
  and every other member an ``int`` in range (``bool`` refused);
* InfiniBand GIDs: ``"gid:fe80::2:c903:0:1"`` (optionally ``pkey=0xffff``, and
  ``sid=...``, or ``port=7471`` and ``ps=tcp`` for the service id librdmacm makes of
  them) or :meth:`Address.ib`.

It looks up no host names: :func:`~pyrdmacm.addr.lookup.lookup_host` takes what
:func:`parse_address` takes and host names too, as rping does.

The pieces are read by :mod:`pyrdmacm.addr.text`: a zone is an interface name
or an index written in ASCII decimal digits (``%eth0``, ``%2``), ports and GID
options are numbers in ASCII decimal or ``0x`` hex.  A link-local IPv6 address
without a zone is refused here, before any system call: the kernel would answer
EINVAL for a source and guess the wrong interface for a destination.

Everything else -- a wrong type, a value out of range, a string longer than
:data:`~pyrdmacm.addr.text.MAX_TEXT` -- raises :class:`~pyrdmacm.errors.UsageError`
naming what was wrong; so do the :class:`Address` constructors, which check every
field, so that packing never fails and no field is silently dropped (an AF_INET
address with a scope id, an IPv6Address carrying a zone).

:meth:`Address.pack_storage` gives the 128-byte ``__kernel_sockaddr_storage``
of BIND / RESOLVE_ADDR, :meth:`Address.pack_in6` the 28-byte ``sockaddr_in6``
slot of the old BIND_IP / RESOLVE_IP (an IPv4 ``sockaddr_in`` occupies its
first 16 bytes), and :func:`unpack_sockaddr` reads either back.  The layouts
are those of :mod:`pyrdmacm.abi`; the tests check these hand-made ``struct``
formats against the construct declarations.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Any, Optional, Tuple, Union

from .text import (
    U16, U32, U64, as_ascii_digits, ascii_number, check_int, checked_text, show, split_host_port, typed,
    zone_index, zone_name,
)
from ..errors import UsageError

#: how __post_init__ corrects a frozen field (the family an ip implies)
_set_field = object.__setattr__

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
_IP_TYPES = (ipaddress.IPv4Address, ipaddress.IPv6Address)


# (type of ip, family given) -> the family, for the checks' fast path
_FAST_FAMILY = {
    (ipaddress.IPv4Address, 0): AF_INET,
    (ipaddress.IPv4Address, AF_INET): AF_INET,
    (ipaddress.IPv6Address, 0): AF_INET6,
    (ipaddress.IPv6Address, AF_INET6): AF_INET6,
    (ipaddress.IPv6Address, AF_IB): AF_IB,
}


def _gid(gid: Any) -> ipaddress.IPv6Address:
    """What Address.ib takes as a GID, as an IPv6Address; anything else is a UsageError."""
    what = "Address.ib gid"
    if isinstance(gid, ipaddress.IPv6Address):
        g = gid
    elif isinstance(gid, str):
        if len(gid) > 64:
            raise UsageError(
                "%s %s is too long: a GID is 128 bits written like an IPv6 address" % (what, show(gid, 40))
            )
        try:
            g = ipaddress.IPv6Address(gid)
        except ValueError:
            raise UsageError(
                "%s %s is not a GID: write its 128 bits like an IPv6 address, e.g. 'fe80::2:c903:0:1'"
                % (what, show(gid))
            ) from None
    elif isinstance(gid, bytes):
        if len(gid) != 16:
            raise UsageError("%s must be 16 bytes when given as bytes, got %d" % (what, len(gid)))
        g = ipaddress.IPv6Address(gid)
    elif isinstance(gid, int) and not isinstance(gid, bool):
        if not 0 <= gid < 1 << 128:
            raise UsageError("%s %s is out of range: a GID is 128 bits" % (what, show(gid)))
        g = ipaddress.IPv6Address(gid)
    else:
        hint = ""
        if isinstance(gid, ipaddress.IPv4Address):
            hint = " (an IPv4 address's GID is its IPv4-mapped form, ::ffff:%s)" % gid
        raise UsageError(
            "%s must be an ipaddress.IPv6Address, its text, 16 bytes or an int, got %s%s"
            % (what, typed(gid), hint)
        )
    if g.scope_id:
        raise UsageError("%s %s has a zone: a GID has none; drop the %%%s" % (what, show(str(g)), g.scope_id))
    return g


def _service_id(port: Optional[int], port_space: Optional[int], sid_mask: Optional[int]) -> "tuple[int, int]":
    """(sid, sid_mask) of an AF_IB address made from a port space and a port, as librdmacm's
    ucma_set_sid (addrinfo.c) makes them for rdma_getaddrinfo; the kernel reads them back the
    same way (cma_select_ib_ps, cma_port)."""
    from ..abi import RDMA_IB_IP_PORT_MASK, RDMA_IB_IP_PS_MASK, PortSpace

    p = 0 if port is None else check_int("Address.ib port", port, U16, "0..65535")
    if port_space is None:
        ps = int(PortSpace.TCP)
    elif port_space.__class__ is not bool and isinstance(port_space, int) and (
            port_space == 0 or port_space in PortSpace._value2member_map_):
        ps = int(port_space)
    else:
        raise UsageError(
            "Address.ib port_space must be a PortSpace (TCP, UDP, IB or IPOIB), got %s" % typed(port_space)
        )
    if sid_mask is not None:
        raise UsageError(
            "Address.ib makes the sid_mask of a port and port_space itself (the port space's bits, and the "
            "port's when given): give a sid to give a sid_mask"
        )
    mask = (RDMA_IB_IP_PS_MASK if ps else 0) | (RDMA_IB_IP_PORT_MASK if p else 0)
    return (ps << 16) + p, mask


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
        ip, port, scope_id, flowinfo = self.ip, self.port, self.scope_id, self.flowinfo
        family, pkey, sid, sid_mask = self.family, self.pkey, self.sid, self.sid_mask
        # The common case in one expression (exact types, every field in range);
        # anything else goes through _validate, which says what is wrong.
        fam = _FAST_FAMILY.get((ip.__class__, family)) if family.__class__ is int else None
        if (
            fam is not None
            and port.__class__ is int and scope_id.__class__ is int and flowinfo.__class__ is int
            and pkey.__class__ is int and sid.__class__ is int and sid_mask.__class__ is int
            and 0 <= port <= U16 and 0 <= scope_id <= U32 and 0 <= flowinfo <= U32
            and (
                (fam == AF_IB and 0 <= pkey <= U16 and 0 <= sid <= U64 and 0 <= sid_mask <= U64)
                or (not (pkey or sid or sid_mask) and (fam == AF_INET6 or not (scope_id or flowinfo)))
            )
            and (fam == AF_INET or not getattr(ip, "scope_id", None))
        ):
            if fam != family:
                _set_field(self, "family", fam)
            return
        self._validate()

    def _validate(self) -> None:
        ip = self.ip
        if not isinstance(ip, _IP_TYPES):
            raise UsageError(
                "Address ip must be an ipaddress.IPv4Address or IPv6Address, got %s: "
                "use parse_address(...) for text, or ipaddress.ip_address(...)" % typed(ip)
            )
        if ip.version == 6 and getattr(ip, "scope_id", None):
            raise UsageError(
                "Address ip %s carries a zone (%%%s) that the sockaddr cannot hold: give the plain "
                "address and the zone as scope_id=, or use parse_address(%r)" % (show(ip), ip.scope_id, str(ip))
            )
        family = self.family
        if family.__class__ is not int and (isinstance(family, bool) or not isinstance(family, int)):
            raise UsageError(
                "Address family must be an int (AF_INET, AF_INET6 or AF_IB; 0 to take it from ip), got %s"
                % typed(family)
            )
        if family not in _FAMILY_BE:
            if family:
                raise UsageError(
                    "Address family %s is not one rdma_cm takes: use AF_INET (2), AF_INET6 (10) or AF_IB (27), "
                    "or 0 to take it from ip" % (family,)
                )
            family = AF_INET if ip.version == 4 else AF_INET6
            _set_field(self, "family", family)
        check_int("Address port", self.port, U16, "0..65535")
        check_int("Address scope_id", self.scope_id, U32, "0..4294967295 (an interface index)")
        check_int("Address flowinfo", self.flowinfo, U32, "0..0xffffffff")
        if family == AF_INET:
            if ip.version != 4:
                raise UsageError("AF_INET address must be IPv4, got %s: use AF_INET6 (or family 0)" % ip)
            if self.scope_id or self.flowinfo:
                raise UsageError(
                    "Address %s is AF_INET, whose sockaddr_in has no scope_id or flowinfo (got %d, %d): "
                    "give 0, or use an IPv6 address" % (ip, self.scope_id, self.flowinfo)
                )
        elif ip.version != 6:
            raise UsageError(
                "AF_INET6/AF_IB address must be 128 bits, got %s: use AF_INET for IPv4, or the "
                "IPv4-mapped address ::ffff:%s" % (ip, ip)
            )
        check_int("Address pkey", self.pkey, U16, "0..0xffff (16 bits)", in_hex=True)
        check_int("Address sid", self.sid, U64, "0..2**64-1 (64 bits)", in_hex=True)
        check_int("Address sid_mask", self.sid_mask, U64, "0..2**64-1 (64 bits)", in_hex=True)
        if family != AF_IB and (self.pkey or self.sid or self.sid_mask):
            raise UsageError(
                "Address %s: pkey, sid and sid_mask belong to AF_IB addresses only (got %#x, %#x, %#x): "
                "use Address.ib(gid, pkey=..., sid=...)" % (ip, self.pkey, self.sid, self.sid_mask)
            )

    # -- constructors
    @classmethod
    def ib(cls, gid: Any, *, pkey: int = 0xFFFF, sid: Optional[int] = None, sid_mask: Optional[int] = None,
           port: Optional[int] = None, port_space: Optional[int] = None) -> "Address":
        """An AF_IB address: a GID, a partition key and an IB service id.

        ``gid`` is an :class:`ipaddress.IPv6Address`, its text (``"fe80::2:c903:0:1"``),
        its 16 bytes or its 128-bit int.  The service id is ``sid`` as given (``sid_mask``
        defaulting to all ones when a ``sid`` is given), or, with ``port`` and/or
        ``port_space`` instead, the one librdmacm's ``rdma_getaddrinfo`` makes of them:
        ``(port_space << 16) + port`` (port space TCP when only a port is given, as
        ``rdma_getaddrinfo``'s default), masked to the port space's 48 bits and, when a port
        is given, its 16 (``RDMA_IB_IP_PS_MASK`` | ``RDMA_IB_IP_PORT_MASK``).  This is the
        service id the kernel sends in a REQ or SIDR REQ to this destination: for AF_IB it
        takes the sockaddr's, and makes none of its own.  Neither: service id 0.
        """
        g = _gid(gid)
        if sid is not None and (port is not None or port_space is not None):
            raise UsageError(
                "Address.ib takes a sid, or a port and port_space to make one from, not both "
                "(got sid=%s, port=%s, port_space=%s)" % (show(sid), show(port), show(port_space))
            )
        if sid is None and (port is not None or port_space is not None):
            sid, sid_mask = _service_id(port, port_space, sid_mask)
        elif sid is None:
            sid = 0
        check_int("Address.ib sid", sid, U64, "0..2**64-1 (64 bits)", in_hex=True)
        if sid_mask is None:
            mask = U64 if sid else 0
        else:
            mask = check_int("Address.ib sid_mask", sid_mask, U64, "0..2**64-1 (64 bits)", in_hex=True)
        check_int("Address.ib pkey", pkey, U16, "0..0xffff (16 bits)", in_hex=True)
        return cls(ip=g, family=AF_IB, pkey=pkey, sid=sid, sid_mask=mask, port=sid & 0xFFFF)

    # -- properties
    @property
    def size(self) -> int:
        """The sockaddr size the kernel expects for this family (16, 28 or 48)."""
        return {AF_INET: SOCKADDR_IN_SIZE, AF_INET6: SOCKADDR_IN6_SIZE, AF_IB: SOCKADDR_IB_SIZE}[self.family]

    @property
    def is_any(self) -> bool:
        """True for 0.0.0.0 and ::, the any address."""
        return self.ip.is_unspecified

    @property
    def zone(self) -> str:
        """The IPv6 zone (scope) as the user writes it (the interface's name where there is
        one, else the number), "" when there is none."""
        return zone_name(self.scope_id) if self.scope_id else ""

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


#: What :func:`parse_address` takes (and so every call that takes an address).
AddressLike = Union[Address, IPAddress, str, Tuple[Any, ...]]


def unpack_sockaddr(buf: bytes) -> Optional[Address]:
    """Read a sockaddr (of any of the three families) from the start of ``buf``.

    Family 0 (nothing there) gives ``None``; an unknown family raises
    :class:`~pyrdmacm.errors.DecodeError`.
    """
    from ..errors import DecodeError

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


def _ip(host: str, original: Any) -> "tuple[IPAddress, int]":
    zone = None
    if "%" in host:
        host, zone = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise UsageError(
            "%s is not an IP address (write 10.0.0.2, fe80::1%%eth0, [2001:db8::1]:7471 or gid:...; a host "
            "name is looked up first, e.g. with pyrdmacm.getaddrinfo)" % show(original)
        ) from None
    scope = 0
    if zone is not None:
        if ip.version == 4:
            raise UsageError(
                "IPv4 address %s cannot have a zone (%s in %s): zones are for IPv6; drop the '%%...'"
                % (host, show(zone, 20), show(original))
            )
        scope = zone_index(zone, original)
    return ip, scope


def _from_ip(value: IPAddress) -> "tuple[IPAddress, int]":
    """An ipaddress object as (plain address, scope id): its zone, if any, looked up."""
    zone = getattr(value, "scope_id", None)
    if not zone:
        return value, 0
    return ipaddress.IPv6Address(value.packed), zone_index(zone, str(value))


def _member(value: "Tuple[Any, ...]", i: int, name: str, hi: int, span: str, shown: str, hint: str = "") -> int:
    m = value[i]
    what = "address tuple %s: %s (member %d)" % (shown, name, i + 1)
    if m is None and hint:
        raise UsageError("%s must be an int in %s, got None: %s" % (what, span, hint))
    return check_int(what, m, hi, span)


_TUPLE_FORMS = "(host, port) for IPv4, (host, port[, flowinfo[, scope_id]]) for IPv6, as socket writes them"


def _parse_tuple(value: "Tuple[Any, ...]") -> Address:
    shown = show(value, 80)
    n = len(value)
    if not 2 <= n <= 4:
        raise UsageError(
            "address tuple %s has %d member%s: write %s" % (shown, n, "" if n == 1 else "s", _TUPLE_FORMS)
        )
    host = value[0]
    if isinstance(host, str):
        try:
            text = checked_text(host, "host")
            if text[:4].lower() == "gid:":
                raise UsageError(
                    "%s is a GID, which has no tuple form: write 'gid:... sid=...' as one string, "
                    "or use Address.ib(gid, sid=...)" % show(host)
                )
            ip, scope = _ip(text, host)
        except UsageError as e:
            raise UsageError("address tuple %s: host (member 1): %s" % (shown, e)) from None
    elif isinstance(host, _IP_TYPES):
        try:
            ip, scope = _from_ip(host)
        except UsageError as e:
            raise UsageError("address tuple %s: host (member 1): %s" % (shown, e)) from None
    else:
        hint = ""
        if isinstance(host, (bytes, bytearray)):
            hint = ": decode it (host.decode()), or give ipaddress.ip_address(...) for packed bytes"
        elif isinstance(host, tuple):
            hint = ": address tuples do not nest"
        elif isinstance(host, Address):
            hint = ": pass the Address alone, not in a tuple"
        raise UsageError(
            "address tuple %s: host (member 1) must be a str or an ipaddress object, got %s%s"
            % (shown, typed(host), hint)
        )
    port = _member(value, 1, "port", U16, "0..65535", shown, "write 0 for any port")
    if n > 2 and ip.version == 4:
        raise UsageError(
            "address tuple %s has %d members, but %s is IPv4: an IPv4 tuple is (host, port); "
            "flowinfo and scope_id are IPv6's" % (shown, n, ip)
        )
    flow = _member(value, 2, "flowinfo", U32, "0..0xffffffff", shown) if n > 2 else 0
    if n == 4:
        given = _member(value, 3, "scope_id", U32, "0..4294967295 (an interface index)", shown)
        if given and scope and given != scope:
            raise UsageError(
                "address tuple %s: scope_id (member 4) %d is not the host's zone (index %d): "
                "give the zone once, in the host or as scope_id" % (shown, given, scope)
            )
        scope = given or scope
    return Address(ip, port, scope, flow)


def parse_address(value: Any, port: Optional[int] = None, *, require_zone: bool = True) -> Address:
    """Turn what a user wrote into an :class:`Address` (see the module docstring).

    ``port`` applies when the value carries none.  With ``require_zone`` (the
    default) a link-local IPv6 address without a zone raises
    :class:`~pyrdmacm.errors.UsageError`.  Anything that is not an address
    raises :class:`~pyrdmacm.errors.UsageError` too, saying what was wrong.
    """
    if port is not None:
        check_int("parse_address port", port, U16, "0..65535")
    if isinstance(value, Address):
        addr = value
    elif isinstance(value, _IP_TYPES):
        ip, scope = _from_ip(value)
        addr = Address(ip, port or 0, scope)
    elif isinstance(value, tuple):
        addr = _parse_tuple(value)
    elif isinstance(value, str):
        text = checked_text(value, "address")
        if text[:4].lower() == "gid:":
            return _parse_gid(text[4:], value)
        host, p = split_host_port(text, value)
        ip, scope = _ip(host, value)
        addr = Address(ip, p if p is not None else (port or 0), scope)
    else:
        hint = ""
        if isinstance(value, (bytes, bytearray, memoryview)):
            hint = "; for text, decode it (value.decode()); for packed bytes, use ipaddress.ip_address(value)"
        elif isinstance(value, list):
            hint = "; for (host, port), write a tuple, not a list"
        raise UsageError(
            "cannot use %s as an address: give a string ('10.0.0.2', '10.0.0.2:7471', 'fe80::1%%eth0', "
            "'gid:...'), an ipaddress object, a (host, port) tuple or an Address%s" % (typed(value), hint)
        )
    if port is not None and not addr.port and addr.family != AF_IB:
        addr = Address(addr.ip, port, addr.scope_id, addr.flowinfo, addr.family)
    if (
        require_zone
        and addr.family == AF_INET6
        and addr.ip.is_link_local
        and not addr.scope_id
    ):
        e = missing_zone(addr.ip)
        if isinstance(value, tuple):
            raise UsageError("address tuple %s: %s (or give its scope_id, the 4th member)" % (show(value, 80), e))
        raise e
    return addr


def missing_zone(ip: Any) -> UsageError:
    """The refusal of a link-local IPv6 address without a zone: the library's and the pre-check's."""
    return UsageError(
        "link-local address %s needs a zone naming the interface, e.g. %s%%eth0: "
        "the kernel cannot tell which link is meant" % (ip, ip)
    )


_GID_OPTIONS = "pkey=0xffff, and sid=0x... or port=7471 [ps=tcp|udp|ib|ipoib]"


def _parse_gid(text: str, original: Any) -> Address:
    shown = show(original)
    parts = text.split()
    if not parts:
        raise UsageError("empty GID in %s (write gid:fe80::2:c903:0:1 pkey=0xffff sid=0x1060000)" % shown)
    kw: "dict[str, int]" = {}
    for p in parts[1:]:
        k, _, v = p.partition("=")
        if k not in ("pkey", "sid", "port", "ps") or not v:
            raise UsageError("unknown GID option %s in %s (use %s)" % (show(p, 20), shown, _GID_OPTIONS))
        if k in kw:
            raise UsageError("%s given twice in %s: give each option once" % (k, shown))
        if k == "ps":
            from ..abi import PortSpace

            if v.upper() not in PortSpace.__members__:
                raise UsageError("bad port space %s in %s: write ps=tcp, udp, ib or ipoib" % (show(v, 20), shown))
            kw[k] = int(PortSpace[v.upper()])
            continue
        n = ascii_number(v)
        if n is None:
            ascii_form = as_ascii_digits(v)
            if ascii_form is not None:
                raise UsageError(
                    "%s=%r in %s is not written in ASCII digits: write %s=%s" % (k, v, shown, k, ascii_form)
                )
            raise UsageError(
                "bad number %s for %s in %s: write it in ASCII decimal or 0x hex (pkey=0xffff sid=0x1060000)"
                % (show(v, 20), k, shown)
            )
        hi, span = (U64, "64 bits") if k == "sid" else (U16, "16 bits (0..0xffff)")
        if n > hi:
            raise UsageError("%s=%s in %s is out of range: a %s is %s" % (k, show(v, 20), shown, k, span))
        kw[k] = n
    if "sid" in kw and ("port" in kw or "ps" in kw):
        raise UsageError("%s gives a sid and a port or ps: give the service id, or the port (and port space) it "
                         "is made of, not both" % shown)
    if "%" in parts[0]:
        raise UsageError("GID %s in %s has a zone: a GID has none; drop the '%%...'" % (show(parts[0]), shown))
    try:
        gid = ipaddress.IPv6Address(parts[0])
    except ValueError:
        raise UsageError("%s is not a GID (128 bits written like an IPv6 address)" % show(parts[0])) from None
    return Address.ib(gid, pkey=kw.get("pkey", 0xFFFF), sid=kw.get("sid"), port=kw.get("port"),
                      port_space=kw.get("ps"))


def same_family(a: Address, b: Address) -> bool:
    return a.family == b.family
