"""Host names: what a user wrote as an address or a host name, as an address, and which
name gave which address.

:func:`lookup_host` takes what :func:`~pyrdmacm.addr.parse_address` takes and host names
too (``peer``, ``peer:7471``, ``[peer]:7471``), asking ``getaddrinfo`` and taking its
first answer, as rping and ``rdma_getaddrinfo`` do; :class:`HostName` says what it
answered.  :func:`host_name` tells a host name from a mistyped address before any lookup
(10.0.0.256 is no name: a name has a letter).  The library's calls take addresses only:
the command line looks names up here.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from ._addr_input import MAX_TEXT, show, split_host_port
from ._record import Record, set_field
from .addr import AF_INET, AF_INET6, Address, IPAddress, parse_address
from .errors import UsageError


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class HostName(Record):
    """A host name and what ``getaddrinfo`` answered for it, in its order; ``chosen`` is
    the address taken (the first answer, of the family asked for)."""

    name: str
    addresses: Tuple[IPAddress, ...]
    chosen: IPAddress

    def __init__(self, name: str, addresses: Tuple[IPAddress, ...], chosen: IPAddress) -> None:
        set_field(self, "name", name)
        set_field(self, "addresses", addresses)
        set_field(self, "chosen", chosen)

    def _values(self) -> Tuple[Any, ...]:
        return (self.name, self.addresses, self.chosen)

    def __repr__(self) -> str:
        return "%s(name=%r, addresses=%r, chosen=%r)" % ((self.__class__.__qualname__,) + self._values())

    def __str__(self) -> str:
        others = [str(a) for a in self.addresses if a != self.chosen]
        more = " (getaddrinfo's first answer; also %s)" % ", ".join(others) if others else ""
        return "%s is %s%s" % (self.name, self.chosen, more)


# a host name: letters, digits, '-', '_' and '.', with at least one letter (so that a
# mistyped IPv4 address such as 10.0.0.256 is not taken for one)
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
_MAX_NAME = 253  # a DNS name's longest text form


def host_name(value: Any) -> Optional[Tuple[str, Optional[int]]]:
    """``(name, port)`` when ``value`` is a host name, with or without a port
    (``peer``, ``peer:7471``, ``[peer]:7471``); None when it is not one."""
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        return None
    text = value.strip()
    if text[:4].lower() == "gid:":
        return None
    try:
        host, port = split_host_port(text, value)
    except UsageError:
        return None
    if (not host or len(host) > _MAX_NAME or not _NAME_CHARS.issuperset(host)
            or not any(c.isalpha() for c in host) or host.startswith((".", "-")) or ".." in host):
        return None
    return host, port


def lookup_host(
    value: Any, port: Optional[int] = None, *, family: int = 0, getaddrinfo: Any = None
) -> Tuple[Address, Optional[HostName]]:
    """What a user wrote as an address or a host name, as an :class:`Address`.

    An address (anything :func:`parse_address` takes) is parsed, with no lookup, and
    the second member is None.  A host name (``peer``, ``peer:7471``, ``[peer]:7471``)
    is looked up with ``getaddrinfo`` (``family`` AF_INET / AF_INET6 restricts it) and its
    first answer taken, as rping does; the :class:`HostName` says what it answered.
    Neither: the :class:`~pyrdmacm.errors.UsageError` of :func:`parse_address`; a name
    ``getaddrinfo`` cannot look up: a UsageError saying so.  ``getaddrinfo``: for tests.
    """
    try:
        return parse_address(value, port), None
    except UsageError:
        named = host_name(value)
        if named is None:
            raise
    name, given_port = named
    import socket

    ask = getaddrinfo or socket.getaddrinfo
    fam = {AF_INET: socket.AF_INET, AF_INET6: socket.AF_INET6}.get(family, socket.AF_UNSPEC)
    try:
        answers = ask(name, None, fam, socket.SOCK_STREAM)
    except socket.gaierror as e:
        of = {AF_INET: " as IPv4", AF_INET6: " as IPv6"}.get(family, "")
        raise UsageError(
            "cannot look up host name %s%s: %s (getaddrinfo; check the name, /etc/hosts and DNS, or write "
            "an IP address)" % (show(name), of, e.strerror or e)
        ) from None
    except (UnicodeError, ValueError) as e:
        raise UsageError("cannot look up host name %s: %s" % (show(name), e)) from None
    found: "list[IPAddress]" = []
    scopes: "dict[IPAddress, int]" = {}
    for entry in answers:
        try:
            sa: Tuple[Any, ...] = tuple(entry[4])
            ip = ipaddress.ip_address(str(sa[0]).split("%")[0])
            scope = int(sa[3]) if ip.version == 6 and len(sa) > 3 else 0
        except (ValueError, IndexError, TypeError):
            continue
        if ip not in found:
            found.append(ip)
            scopes[ip] = scope
    if not found:
        raise UsageError("host name %s has no IPv4 or IPv6 address (getaddrinfo answered none)" % show(name))
    chosen = found[0]
    p = given_port if given_port is not None else (port or 0)
    sockaddr = (str(chosen), p) if chosen.version == 4 else (str(chosen), p, 0, scopes[chosen])
    return parse_address(sockaddr), HostName(name, tuple(found), chosen)
