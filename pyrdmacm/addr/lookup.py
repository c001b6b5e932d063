"""Host names: what a user wrote as an address or a host name, as an address, and which
name gave which address.

:func:`lookup_host` takes what :func:`~pyrdmacm.addr.parse_address` takes and host names
too (``peer``, ``peer:7471``, ``[peer]:7471``), asking ``getaddrinfo`` and taking its
first answer, as rping and ``rdma_getaddrinfo`` do; :class:`HostName` says what it
answered.  :func:`host_name` tells a host name from a mistyped address before any lookup
(10.0.0.256 is no name: a name has a letter).  A port may be written as a service name
(``peer:ssh``): :func:`service_port` reads the services database.  The library's calls take
addresses only: the command line looks names up here (and :func:`pyrdmacm.getaddrinfo`
answers as librdmacm's ``rdma_getaddrinfo``, through the C library's own lookup).
"""

from __future__ import annotations

import ipaddress
import socket
from dataclasses import dataclass
from typing import Any, Optional, Tuple

from .text import MAX_TEXT, ascii_number, show, split_host_port, split_host_service
from . import AF_INET, AF_INET6, Address, IPAddress, parse_address
from ..errors import RdmaCmError, UsageError

#: the C library's getaddrinfo codes by name, for messages ("EAI_AGAIN")
_EAI_NAMES = {getattr(socket, n): n for n in ("EAI_NONAME", "EAI_SERVICE", "EAI_FAMILY", "EAI_SOCKTYPE",
                                              "EAI_ADDRFAMILY", "EAI_NODATA", "EAI_AGAIN", "EAI_FAIL",
                                              "EAI_BADFLAGS", "EAI_MEMORY", "EAI_SYSTEM", "EAI_OVERFLOW")
              if hasattr(socket, n)}


class NameServiceError(RdmaCmError, socket.gaierror):
    """The C library's name service did not answer a lookup: :class:`socket.gaierror`'s
    contract (an :class:`OSError`; ``errno`` is the ``EAI_*`` code, ``socket.EAI_AGAIN``
    during a DNS outage, which retry logic waits out), with a message naming what was looked
    up (``node``, ``service``) and what to do.  Raised by :func:`pyrdmacm.getaddrinfo` and
    the command line's lookups."""

    def __init__(self, code: int, message: str, node: Optional[str] = None, service: Optional[str] = None) -> None:
        super().__init__(code, message)
        self.node = node
        self.service = service

    @property
    def code_name(self) -> str:
        """The ``EAI_*`` name of ``errno`` (``"EAI_AGAIN"``), or the number as text."""
        return _EAI_NAMES.get(self.errno, str(self.errno))

    def __str__(self) -> str:
        return str(self.strerror)

    def __reduce__(self) -> Any:
        return (type(self), (self.errno, self.strerror, self.node, self.service))


def eai_name(code: Optional[int]) -> str:
    """The ``EAI_*`` name of a getaddrinfo code (``"EAI_NONAME"``), or the number as text."""
    return _EAI_NAMES.get(code, "getaddrinfo error %s" % code)


@dataclass(frozen=True)
class HostName:
    """A host name and what ``getaddrinfo`` answered for it, in its order; ``chosen`` is
    the address taken (the first answer, of the family asked for)."""

    name: str
    addresses: Tuple[IPAddress, ...]
    chosen: IPAddress

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


# a service name of the services database: letters, digits and these, with a letter
_SERVICE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.+/")


def service_name(value: Any) -> Optional[Tuple[str, str]]:
    """``(host, service)`` when ``value`` is written with a service name for its port
    (``127.0.0.1:ssh``, ``[::1]:ssh``, ``peer:ssh``); None when it is not."""
    if not isinstance(value, str) or len(value) > MAX_TEXT or value.strip()[:4].lower() == "gid:":
        return None
    try:
        host, service = split_host_service(value.strip(), value)
    except UsageError:
        return None
    if (not service or ascii_number(service) is not None or service.isdecimal()
            or not _SERVICE_CHARS.issuperset(service) or not any(c.isalpha() for c in service)):
        return None
    return host, service


def service_port(service: str, protocol: str = "tcp", original: Any = None) -> int:
    """The port of a service name in the services database (``/etc/services``, through the C
    library's ``getservbyname``, which ``getaddrinfo(3)`` reads too) for ``protocol``
    (``tcp`` or ``udp``); an unknown one is a UsageError naming it (and ``original``, what
    the user wrote it in)."""
    import socket

    try:
        return socket.getservbyname(service, protocol)
    except (OSError, UnicodeError, ValueError):
        other = "udp" if protocol == "tcp" else "tcp"
        try:
            socket.getservbyname(service, other)
            also = " (it is a %s service)" % other
        except (OSError, UnicodeError, ValueError):
            also = ""
        raise UsageError(
            "unknown service %s%s: no %s service of that name in the services database (/etc/services)%s; "
            "give the port number" % (show(service), "" if original is None else " in %s" % show(original),
                                      protocol, also)
        ) from None


def with_service_port(value: Any, protocol: str = "tcp") -> Optional[str]:
    """``value`` with its service name (``127.0.0.1:ssh``) replaced by the port number
    (``127.0.0.1:22``); None when it has none.  An unknown service: a UsageError."""
    named = service_name(value)
    if named is None:
        return None
    host, service = named
    port = service_port(service, protocol, value)
    return ("[%s]:%d" if ":" in host or value.strip().startswith("[") else "%s:%d") % (host, port)


def lookup_host(
    value: Any, port: Optional[int] = None, *, family: int = 0, getaddrinfo: Any = None, protocol: str = "tcp"
) -> Tuple[Address, Optional[HostName]]:
    """What a user wrote as an address or a host name, as an :class:`Address`.

    An address (anything :func:`parse_address` takes) is parsed, with no lookup, and
    the second member is None.  A host name (``peer``, ``peer:7471``, ``[peer]:7471``)
    is looked up with ``getaddrinfo`` (``family`` AF_INET / AF_INET6 restricts it) and its
    first answer taken, as rping does; the :class:`HostName` says what it answered.  The
    port may be a service name (``peer:ssh``), looked up in the services database for
    ``protocol`` (:func:`service_port`).  Neither: the :class:`~pyrdmacm.errors.UsageError`
    of :func:`parse_address`; an unknown service: a UsageError saying so; a name the name
    service cannot look up: a :class:`NameServiceError` (an OSError, with the EAI code).
    ``getaddrinfo``: for tests.
    """
    try:
        return parse_address(value, port), None
    except UsageError as e:
        numbered = with_service_port(value, protocol)
        if numbered is None:
            error = e
        else:
            value = numbered
            try:
                return parse_address(value, port), None
            except UsageError as e2:
                error = e2
        named = host_name(value)
        if named is None:
            raise error from None
    name, given_port = named
    ask = getaddrinfo or socket.getaddrinfo
    fam = {AF_INET: socket.AF_INET, AF_INET6: socket.AF_INET6}.get(family, socket.AF_UNSPEC)
    try:
        answers = ask(name, None, fam, socket.SOCK_STREAM)
    except socket.gaierror as e:
        of = {AF_INET: " as IPv4", AF_INET6: " as IPv6"}.get(family, "")
        raise NameServiceError(
            e.errno or 0, "cannot look up host name %s%s: %s (%s; check the name, /etc/hosts and DNS, or write an IP "
            "address)" % (show(name), of, e.strerror or e, eai_name(e.errno)), name) from None
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
