"""The pieces of an address as a user writes them, each read and checked on its own: the
text's bounds, host and port, numbers in ASCII, zones (interface names and indexes), ints
in range; and the value echoed back, cut short, in each refusal's message.

:mod:`pyrdmacm.addr` builds :class:`~pyrdmacm.addr.Address` from these pieces and checks
its fields with :func:`check_int`; :mod:`pyrdmacm.addr.lookup` tells a host name by its
host and port.  Every refusal is a :class:`~pyrdmacm.errors.UsageError` naming what was
wrong: ports and GID options are numbers in ASCII decimal or ``0x`` hex (:func:`int`
would also take other scripts' digits (``'\u0661'``), signs, spaces and underscores); a
zone is an interface name or an index in ASCII decimal digits, a name becoming a scope id
through ``if_nametoindex`` in the caller's network namespace.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from ..errors import UsageError

U16 = 0xFFFF
U32 = 0xFFFFFFFF
U64 = 0xFFFFFFFFFFFFFFFF

# The longest address worth reading: "[<45-char IPv6>%<15-byte ifname>]:65535" is
# 70 characters, a GID with both options and generous spacing about 100.
MAX_TEXT = 256
_IFNAMSIZ = 16  # the kernel's interface names: at most 15 bytes and a NUL
_DIGITS = frozenset("0123456789")
_HEX = frozenset("0123456789abcdefABCDEF")


def _shown_char(c: str) -> str:
    """One character as ``repr`` shows it inside single quotes; an escaped byte as the byte."""
    if "\udc80" <= c <= "\udcff":
        return "\\x%02x" % (ord(c) - 0xDC00)
    return "\\'" if c == "'" else repr(c)[1:-1]


def show(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut short: messages never echo 100 kB of input.  A byte that was not
    text where it came from (argv and files read with surrogateescape keep it as U+DC80..
    U+DCFF) is shown as the byte, ``\\xff``, not as ``\\udcff``."""
    if isinstance(value, str) and len(value) > limit:
        return show(value[:limit], limit + 10) + "... (%d characters)" % len(value)
    if isinstance(value, str) and any("\udc80" <= c <= "\udcff" for c in value):
        return "'%s'" % "".join(map(_shown_char, value))
    try:
        text = repr(value)
    except Exception:  # a user's object with a broken __repr__
        text = "<%s object>" % type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def typed(value: Any) -> str:
    """``str '80'``, ``NoneType None``: a value with its type, for messages."""
    return "%s %s" % (type(value).__name__, show(value))


def check_int(what: str, value: Any, hi: int, span: str, in_hex: bool = False) -> int:
    """``value`` as an int in 0..hi (bool refused), or a UsageError naming ``what``."""
    if value.__class__ is not int and (isinstance(value, bool) or not isinstance(value, int)):
        raise UsageError("%s must be an int in %s, got %s" % (what, span, typed(value)))
    if not 0 <= value <= hi:
        shown = "%d (%#x)" % (value, value) if in_hex and value > 0 else "%d" % value
        raise UsageError("%s %s is out of range: it must be in %s" % (what, shown, span))
    return value


def ascii_number(s: str) -> Optional[int]:
    """An unsigned number written in ASCII: decimal digits, or 0x and hex digits; else None."""
    if s[:2] in ("0x", "0X"):
        digits, base = s[2:], 16
        ok = _HEX
    else:
        digits, base = s, 10
        ok = _DIGITS
    if not digits or not ok.issuperset(digits):
        return None
    return int(digits, base)


def as_ascii_digits(s: str) -> Optional[str]:
    """``'٧٤٧١'`` -> ``'7471'``: a number in some other script's digits, in ASCII; else None."""
    if s.isdecimal():
        return "".join(str(int(c)) for c in s)
    return None


def zone_index(zone: str, original: Any) -> int:
    """A zone (``eth0``, ``2``) as a scope id; ``original`` is what the user wrote."""
    shown = show(original)
    if not zone:
        raise UsageError(
            "empty zone after '%%' in %s: write the interface (fe80::1%%eth0) or its index, "
            "or drop the '%%'" % shown
        )
    if len(zone) > 32:
        raise UsageError(
            "zone %s of %s is too long: a zone is an interface name (at most %d bytes) "
            "or an ASCII decimal index" % (show(zone, 20), shown, _IFNAMSIZ - 1)
        )
    if _DIGITS.issuperset(zone):
        index = int(zone)
        if index > U32:
            raise UsageError(
                "zone index %s of %s is out of range: an interface index is 1..4294967295 (see `ip link`)"
                % (zone, shown)
            )
        return index
    try:
        name = os.fsencode(zone)
    except UnicodeError:
        name = b""
    if not name or len(name) >= _IFNAMSIZ or zone in (".", "..") or any(c in name for c in b"\0/: \t\n\r\v\f"):
        raise UsageError(
            "zone %r of %s is not a valid interface name (at most %d bytes; no NUL, '/', ':', "
            "spaces or lone surrogates): write the interface (fe80::1%%eth0) or its index"
            % (zone, shown, _IFNAMSIZ - 1)
        )
    import socket  # here: socket (and selectors) cost ~3 ms at import, and most addresses have no zone

    try:
        return socket.if_nametoindex(zone)
    except (OSError, ValueError, UnicodeError):
        pass
    if zone.isdigit():  # digits, but not ASCII ones: '١', '１', '²'
        ascii_form = as_ascii_digits(zone)
        fix = ""
        if ascii_form is not None:
            fix = " in ASCII digits (%s)" % str(original).replace("%" + zone, "%" + ascii_form, 1)
        raise UsageError(
            "zone %r of %s is neither an interface name nor an ASCII decimal index: "
            "write the interface (fe80::1%%eth0) or its index%s" % (zone, shown, fix)
        )
    raise UsageError(
        "unknown zone %r of %s: no such network interface in this network namespace "
        "(see `ip link`; a zone is an interface name or index, as in fe80::1%%eth0)" % (zone, shown)
    )


def zone_name(index: int) -> str:
    """A scope id as a user writes the zone: its interface's name, or the number when no
    interface of this network namespace has it."""
    import socket

    try:
        return socket.if_indextoname(index)
    except OSError:
        return str(index)


def checked_text(value: str, what: str) -> str:
    """A string to parse, stripped; too long or empty ones are refused."""
    if len(value) > MAX_TEXT:
        raise UsageError(
            "%s %s is too long: an address is at most %d characters, as in '[fe80::1%%eth0]:7471' "
            "or 'gid:fe80::2:c903:0:1 pkey=0xffff sid=0x1060000'" % (what, show(value, 24), MAX_TEXT)
        )
    text = value.strip()
    if not text:
        raise UsageError(
            "empty %s %s: write 10.0.0.2, 10.0.0.2:7471, fe80::1%%eth0, [2001:db8::1]:7471 or gid:..."
            % (what, show(value))
        )
    return text


def split_host_service(text: str, original: Any) -> "tuple[str, Optional[str]]":
    """``host``, ``host:port`` (one colon) or ``[host]`` and ``[host]:port`` -> (host, the
    port as written, or None); ``original`` is what the user wrote, for messages."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise UsageError("unbalanced '[' in address %s (write [fe80::1%%eth0]:7471)" % show(original))
        host, rest = text[1:end], text[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":"):
            raise UsageError("expected ':PORT' after ']' in %s (write [2001:db8::1]:7471)" % show(original))
        return host, rest[1:]
    if text.count(":") == 1:  # IPv4 (or name) with a port
        host, port = text.split(":")
        return host, port
    return text, None


def split_host_port(text: str, original: Any) -> "tuple[str, Optional[int]]":
    """:func:`split_host_service` with the port read as a number (:func:`read_port`)."""
    host, port = split_host_service(text, original)
    return host, None if port is None else read_port(port, original)


def read_port(s: str, original: Any) -> int:
    """A port written in an address: ASCII decimal (leading zeros allowed) or 0x hex."""
    p = ascii_number(s)
    if p is None:
        ascii_form = as_ascii_digits(s)
        if ascii_form is not None:
            raise UsageError(
                "port %r of %s is not written in ASCII digits: write it as %s" % (s, show(original), ascii_form)
            )
        raise UsageError(
            "bad port %s in %s: a port is a number 0..65535, in ASCII decimal (7471) or hex (0x1d2f)"
            % (show(s, 20), show(original))
        )
    if p > U16:
        raise UsageError("port %s out of range in %s: a port is 0..65535" % (show(s, 20), show(original)))
    return p


def ip_text(v: Any) -> str:
    """An address as ``ip`` and librdmacm users read it: a RoCE v2 GID of an IPv4 address
    in dotted form (``::ffff:10.0.2.15``, where Python before 3.13 writes ``::ffff:a00:20f``)."""
    import ipaddress
    import socket

    if isinstance(v, ipaddress.IPv6Address) and not v.scope_id:
        return socket.inet_ntop(socket.AF_INET6, v.packed)
    return str(v)
