"""Values from the command line, checked before anything is sent: addresses (DST, --src,
listen's [ADDR:]PORT, mcast's GROUP; host names looked up), --timeout, --count, --ps, --private-data.

Each refusal is a :class:`_BadInput` whose message names the flag and what to write instead.
"""

from __future__ import annotations

import argparse
from typing import Any, List, Optional, Sequence, Tuple

from .output import _ip_text

class _BadInput(Exception):
    """A command-line value that cannot be used: the message says which and what to do."""


def _address(text: str, what: str, numeric: bool, port: Optional[int] = None, family: int = 0,
             protocol: str = "tcp") -> Tuple[Any, Any]:
    """``(Address, HostName or None)``: what the user wrote for ``what`` (DST, --src ...),
    a host name and a service name (``peer:ssh``, the services database's port for
    ``protocol``) looked up unless ``numeric``; the Address is what the pre-check and the
    library get."""
    from ..addr.lookup import NameServiceError, host_name, lookup_host, service_name
    from ..addr import parse_address
    from ..errors import UsageError

    try:
        if numeric:
            return parse_address(text, port), None
        return lookup_host(text, port, family=family, protocol=protocol)
    except NameServiceError as e:
        raise _BadInput("%s: %s" % (what, e)) from None
    except UsageError as e:
        if numeric and service_name(text) is not None:
            raise _BadInput("%s %r names its port by a service, and -n/--numeric looks up none: write the port "
                            "number" % (what, text)) from None
        if numeric and host_name(text) is not None:
            raise _BadInput("%s %r is a host name, and -n/--numeric looks up none: write an IP address"
                            % (what, text)) from None
        raise _BadInput("%s: %s" % (what, e)) from None


def _family_text(a: Any) -> str:
    from ..addr import AF_IB

    return "an InfiniBand GID" if a.family == AF_IB else "IPv%d" % a.ip.version


def _dst_src(args: argparse.Namespace, port: Optional[int] = None) -> Tuple[Any, Any, List[Any]]:
    """DST and --src as Addresses (the source first: a DST name is looked up in its family),
    and the host names looked up."""
    numeric = getattr(args, "numeric", False)
    protocol = _service_protocol(args)
    src, src_name = _address(args.src, "--src", numeric, protocol=protocol) if args.src else (None, None)
    dst, dst_name = _address(args.dst, "DST", numeric, port, src.family if src is not None else 0, protocol)
    if src is not None and (src.family != dst.family or src.ip.version != dst.ip.version):
        raise _BadInput("--src %s is %s but DST %s is %s: give a --src of the destination's family, or none"
                        % (args.src, _family_text(src), args.dst, _family_text(dst)))
    return dst, src, [n for n in (dst_name, src_name) if n is not None]


def _service_protocol(args: argparse.Namespace) -> str:
    """The services database's protocol for a service name in an address: the port space's
    (udp for --ps udp and ipoib, as librdmacm's rdma_getaddrinfo asks; else tcp)."""
    return "udp" if str(getattr(args, "ps", "tcp")).lower() in ("udp", "ipoib") else "tcp"


def _addr_text(a: Any) -> str:
    """An Address as the user wrote it, port left out (it does not change where it lands)."""
    from ..addr import AF_IB

    if a is None:
        return None  # type: ignore[return-value]
    if a.family == AF_IB:
        return "gid:%s" % a.ip
    if a.scope_id:
        return "%s%%%s" % (a.ip, a.zone)
    return str(a.ip)


def _timeout_ms(text: str) -> int:
    try:
        n = int(text, 10) if text.isascii() else 0
    except ValueError:
        n = 0
    if not 1 <= n <= 0xFFFFFFFF:
        raise _BadInput("bad --timeout %r: give milliseconds, a whole number from 1 to 4294967295" % text)
    return n


def _ms_after(text: Optional[str], flag: str) -> Optional[int]:
    """A --FLAG of milliseconds, 0 allowed (None: not given)."""
    if text is None:
        return None
    try:
        n = int(text, 10) if text.isascii() else -1
    except ValueError:
        n = -1
    if not 0 <= n <= 0xFFFFFFFF:
        raise _BadInput("bad %s %r: give milliseconds, a whole number from 0 (at once) to 4294967295" % (flag, text))
    return n


#: the port of librdmacm's examples (ucmatose, cmtime, rdma_server ...) and of rdma-core's tests;
#: rping and udaddy use 7174
DEFAULT_PORT = 7471


def _count(text: Optional[str], default: Optional[int]) -> Optional[int]:
    if text is None:
        return default
    try:
        n = int(text, 10)
    except ValueError:
        n = 0
    if n < 1:
        raise _BadInput("bad --count %r: give a whole number of connections, 1 or more" % text)
    return n


def _port_space(text: str) -> Any:
    """ping's and listen's --ps (argparse's choices took tcp or udp only) as a PortSpace."""
    from ..abi import PortSpace

    return PortSpace[text.upper()]


def _private_data_arg(text: Optional[str], limits: Sequence[Tuple[str, int]]) -> bytes:
    """``--private-data HEX`` as bytes, checked against the messages it goes in:
    ``limits`` is ``[(message, family), ...]``."""
    from ..abi import cm_private_data_limit

    if text is None:
        return b""
    digits = text.strip()
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    digits = digits.replace(":", "").replace(" ", "")
    try:
        data = bytes.fromhex(digits)
    except ValueError:
        raise _BadInput("bad --private-data %r: not hex; give pairs of hex digits (68656c6c6f is 'hello')"
                        % text) from None
    for message, family in limits:
        limit = cm_private_data_limit(message, family)
        if len(data) > limit:
            raise _BadInput("--private-data is %d bytes; a %s of this id carries at most %d: give at most %d "
                            "bytes (%d hex digits)" % (len(data), message.replace("_", " "), limit, limit,
                                                      2 * limit))
    return data


def _explicit_port(text: str) -> bool:
    """Whether an address as written carries a port (``10.0.0.2:7471``, ``[fe80::1%eth0]:7471``)."""
    import re

    return re.fullmatch(r"\[[^\]]*\]:[^:]*|[^:\[\]]+:[^:]*", text.strip()) is not None


def _listen_addr(text: str, numeric: bool = False, protocol: str = "tcp") -> Tuple[Any, Any]:
    """listen's ``[ADDR:]PORT`` as ``(Address, HostName or None)``: a bare port listens on
    0.0.0.0; ADDR may be a host name and PORT a service name, looked up unless ``numeric``."""
    t = text.strip()
    if t[:1] in "+-" and t[1:].isdigit() and t.isascii():  # a signed number: a port out of range
        raise _BadInput("bad port %r: give a port 1..65535 (librdmacm's examples use %d)" % (text, DEFAULT_PORT))
    if t.isdigit() and t.isascii():
        port = int(t)
        text_addr = "0.0.0.0:%d" % port
        if not 1 <= port <= 0xFFFF:
            raise _BadInput("bad port %r: give a port 1..65535 (librdmacm's examples use %d)" % (text, DEFAULT_PORT))
    else:
        text_addr = t
    try:
        a, name = _address(text_addr, "[ADDR:]PORT", numeric, protocol=protocol)
    except _BadInput as e:
        raise _BadInput("%s (listen takes PORT or ADDR:PORT, e.g. %d, 10.0.0.1:%d or localhost:%d)"
                        % (e, DEFAULT_PORT, DEFAULT_PORT, DEFAULT_PORT)) from None
    if not a.port:
        raise _BadInput("no port in %r: give PORT or ADDR:PORT with a port 1..65535 (e.g. %d or %s:%d)"
                        % (text, DEFAULT_PORT, _ip_text(a.ip), DEFAULT_PORT))
    return a, name


def _group_src(args: argparse.Namespace) -> Tuple[Any, Any, List[Any]]:
    """``mcast``'s GROUP and --src as Addresses (a GROUP name is looked up in --src's family),
    and the host names looked up: a multicast group with no port, a unicast source of its
    family."""
    from ..addr import AF_IB

    numeric = getattr(args, "numeric", False)
    src, src_name = _address(args.src, "--src", numeric) if args.src else (None, None)
    group, group_name = _address(args.group, "GROUP", numeric, None, src.family if src is not None else 0)
    if group.family == AF_IB:
        raise _BadInput("GROUP %s is an InfiniBand MGID (mckey -M): mcast joins IP multicast groups; give one "
                        "(239.1.1.1, ff0e::1)" % args.group)
    if not group.ip.is_multicast:
        raise _BadInput("GROUP %s is %s, not a multicast group: give an IPv4 group (224.0.0.0/4, e.g. 239.1.1.1) "
                        "or an IPv6 one (ff00::/8)" % (args.group, _ip_text(group.ip)))
    if group.port:
        raise _BadInput("GROUP %s has a port: a multicast group is an address alone (write %s)"
                        % (args.group, _ip_text(group.ip)))
    if src is not None:
        if src.family == AF_IB or src.ip.version != group.ip.version:
            raise _BadInput("--src %s is %s but GROUP %s is %s: give a --src of the group's family, or none"
                            % (args.src, _family_text(src), args.group, _family_text(group)))
        if src.ip.is_multicast:
            raise _BadInput("--src %s is a multicast address: give an address of this host (`ip addr`)" % args.src)
    return group, src, [n for n in (group_name, src_name) if n is not None]


def _event_count(text: Optional[str]) -> Optional[int]:
    """``mcast --count``: how many events to wait for after the join (0: leave at once;
    None: until a signal)."""
    if text is None:
        return None
    try:
        n = int(text, 10) if text.isascii() else -1
    except ValueError:
        n = -1
    if n < 0:
        raise _BadInput("bad --count %r: give a whole number of events to wait for, 0 (leave at once) or more"
                        % text)
    return n
