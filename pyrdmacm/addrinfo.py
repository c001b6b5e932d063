"""Address information as librdmacm's ``rdma_getaddrinfo`` gives it: a node and a service
(names or numbers) and hints, to the addresses, port space and QP type an id needs.

Theory of operation
-------------------
librdmacm (``librdmacm/addrinfo.c``) turns its hints into the C library's ``getaddrinfo``
hints, takes the C library's *first* answer and turns it back:

* ``RAI_PASSIVE`` becomes ``AI_PASSIVE`` and the answer is the *source* (a listening
  address; with no node, the any-address), else the *destination*;
  ``RAI_NUMERICHOST`` becomes ``AI_NUMERICHOST`` (a name is refused);
* the QP type chooses the socket type (RC, UC and XRC: stream; UD: datagram), the port
  space the protocol (TCP: TCP; UDP and IPoIB: UDP; IB: by the socket type); with neither,
  the C library's first answer is a stream socket over TCP, so the record says RC and TCP;
  a service name is looked up in the services database for that protocol, as
  ``getaddrinfo(3)`` does (``ssh`` is a TCP service: asked for UD, it is unknown);
* ``RAI_FAMILY`` with AF_IB and ``RAI_NUMERICHOST``: the IPv6 answer becomes a
  ``sockaddr_ib`` whose GID is the address, pkey 0xffff, and whose service id librdmacm
  makes of the port space and port (:meth:`~pyrdmacm.addr.Address.ib`);
* a hint's source address is kept when the answer gives none (not passive);
* neither node nor service: the hints come back as the record (flags, family, QP type, port
  space, the hints' addresses).

Where librdmacm then asks the ibacm service for route data (not passive, ``RAI_NOROUTE``
not set; most hosts run no ibacm, and librdmacm then returns the record as it is),
:func:`getaddrinfo` attaches the pre-check's *prediction* of ``resolve_addr(dst, src)``
instead (:func:`pyrdmacm.precheck.predict`: the source, netdev, device and GID the kernel
would take, or what the host lacks): nothing is sent to the kernel, and the record says it
is a prediction.

The lookup is the C library's (:func:`socket.getaddrinfo`), with the same hints, so that
names, ``/etc/hosts`` order, zones and the services database answer as they do for
librdmacm.  With no hint at all librdmacm passes no hints, and the C library's defaults
apply (``AI_V4MAPPED | AI_ADDRCONFIG``): :func:`getaddrinfo` does the same.

What the C library answers with a code (``EAI_NONAME``, ``EAI_SERVICE``, ``EAI_AGAIN``
...) is a :class:`~pyrdmacm.addr.lookup.NameServiceError` (``socket.gaierror``'s contract:
an OSError whose ``errno`` is the code) naming the input and what to do; what librdmacm
reads wrongly (an IPv4 answer made into an AF_IB address: librdmacm reads a
``sockaddr_in`` as a ``sockaddr_in6``) and bad hints are a
:class:`~pyrdmacm.errors.UsageError`.  :func:`getaddrinfo_all` gives every answer, as
:func:`socket.getaddrinfo` does.  The asyncio forms are :func:`pyrdmacm.aio.getaddrinfo`
and :func:`pyrdmacm.aio.getaddrinfo_all`.
"""

from __future__ import annotations

import enum
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .addr.text import MAX_TEXT, show, typed
from .abi import PortSpace, QpType
from .addr import AF_IB, AF_INET, AF_INET6, Address, parse_address
from .addr.lookup import NameServiceError, eai_name
from .errors import PrecheckError, UsageError

from .precheck.model import Prediction  # the record only: the pre-check's netlink loads when one is made

__all__ = ["NameServiceError", "RaiFlag", "RdmaAddrInfo", "check_arguments", "getaddrinfo", "getaddrinfo_all"]


class RaiFlag(enum.IntFlag):
    """librdmacm's ``RAI_*`` flags of ``rdma_addrinfo.ai_flags`` (their values are librdmacm's)."""

    PASSIVE = 0x1
    NUMERICHOST = 0x2
    NOROUTE = 0x4
    FAMILY = 0x8


@dataclass(frozen=True)
class RdmaAddrInfo:
    """What :func:`getaddrinfo` answers: librdmacm's ``struct rdma_addrinfo``, one record.

    ``flags`` is what librdmacm sets in the answer (``RaiFlag.PASSIVE`` for a passive
    lookup, else none); ``family`` ``socket.AF_INET`` or ``socket.AF_INET6`` (members of
    :class:`socket.AddressFamily`, as :func:`socket.getaddrinfo` gives them), or
    :data:`pyrdmacm.AF_IB` (27: the socket module has no member for it); ``qp_type`` and
    ``port_space`` None where librdmacm leaves 0.  A passive record has ``src`` (where to
    bind and listen) and no ``dst``; an active one has ``dst`` (where to resolve) and the
    hints' ``src`` if one was given.

    ``prediction`` is not librdmacm's: where librdmacm would ask ibacm for route data, the
    pre-check's prediction of ``resolve_addr(dst, src)`` (:class:`pyrdmacm.precheck.Prediction`:
    ``src``, ``netdev``, ``candidates`` (device, port, GID), ``missing``), made from this
    host's tables and nothing sent; ``predicted_errno`` is the errno the pre-check foretells
    the kernel will refuse with (0: none), ``prediction_note`` says why, or why there is no
    prediction.
    """

    flags: RaiFlag
    family: int
    qp_type: Optional[QpType]
    port_space: Optional[PortSpace]
    src: Optional[Address]
    dst: Optional[Address]
    prediction: Optional["Prediction"] = None
    predicted_errno: int = 0
    prediction_note: str = ""

    def __post_init__(self) -> None:
        if self.family in (AF_INET, AF_INET6) and self.family.__class__ is int:
            import socket

            object.__setattr__(self, "family", socket.AddressFamily(self.family))

    @property
    def is_passive(self) -> bool:
        """Whether the record is for the passive side (``src`` is set, ``dst`` is not)."""
        return bool(self.flags & RaiFlag.PASSIVE)


# librdmacm's ucma_convert_to_ai: the QP type's socket type, the port space's protocol
_SOCKTYPE_OF_QP = {QpType.RC: "SOCK_STREAM", QpType.UC: "SOCK_STREAM", QpType.XRC_INI: "SOCK_STREAM",
                   QpType.XRC_TGT: "SOCK_STREAM", QpType.UD: "SOCK_DGRAM"}
_PROTO_OF_PS = {PortSpace.TCP: "IPPROTO_TCP", PortSpace.UDP: "IPPROTO_UDP", PortSpace.IPOIB: "IPPROTO_UDP"}


def _enum_hint(what: str, value: Any, enum_cls: Any) -> Optional[Any]:
    if value is None or value == 0 and value.__class__ is not bool:
        return None
    if value.__class__ is bool or not isinstance(value, int) or value not in enum_cls._value2member_map_:
        raise UsageError("getaddrinfo %s must be a %s (%s) or None, got %s"
                         % (what, enum_cls.__name__, ", ".join(m.name for m in enum_cls), typed(value)))
    return enum_cls(value)


def _text(what: str, value: Any) -> Optional[str]:
    if value is None:
        return None
    if isinstance(value, int) and what == "service" and value.__class__ is not bool:
        if not 0 <= value <= 0xFFFF:
            raise UsageError("getaddrinfo service %d is out of range: a port is 0..65535" % value)
        return str(value)
    if not isinstance(value, str):
        raise UsageError("getaddrinfo %s must be a str%s or None, got %s"
                         % (what, " or a port number" if what == "service" else "", typed(value)))
    if not value or len(value) > MAX_TEXT or "\0" in value:
        raise UsageError("getaddrinfo %s %s is not a %s: give a non-empty text of at most %d characters"
                         % (what, show(value), "host name or address" if what == "node" else "service name or port",
                            MAX_TEXT))
    return value


def _hint_addr(what: str, value: Any) -> Optional[Address]:
    if value is None:
        return None
    try:
        return parse_address(value, require_zone=False)
    except UsageError as e:
        raise UsageError("getaddrinfo %s: %s" % (what, e)) from None


def _answer_address(sockaddr: Any) -> Address:
    """The C library's answer (a socket module address tuple) as an Address."""
    host = str(sockaddr[0]).split("%")[0]
    ip = ipaddress.ip_address(host)
    if ip.version == 4:
        return Address(ip, int(sockaddr[1]))
    return Address(ip, int(sockaddr[1]), int(sockaddr[3]), int(sockaddr[2]))


def _lookup_failed(e: Any, node: Optional[str], service: Optional[str], numeric: bool,
                   what_qp: str) -> NameServiceError:
    """The C library's refusal (socket.gaierror) as a NameServiceError with the same EAI
    code, saying what it means for these arguments and what to do."""
    code = getattr(e, "errno", None)
    name = eai_name(code)
    said = "%s (%s)" % (getattr(e, "strerror", None) or e, name)
    if name == "EAI_SERVICE" or (name == "EAI_NONAME" and node is None):
        text = ("unknown service %s%s: %s; give a port number, or a name of the services database (/etc/services) "
                "for that protocol" % (show(service), what_qp, said))
    elif name == "EAI_NONAME" and numeric:
        text = ("node %s is not a numeric address, and numeric_host looks up no names: %s; write an IP address "
                "(10.0.0.2, fe80::1%%eth0) or drop numeric_host" % (show(node), said))
    elif name == "EAI_SOCKTYPE":
        text = ("the QP type and port space given do not go together%s: %s (UD goes with UDP, RC with TCP)"
                % (what_qp, said))
    elif name == "EAI_AGAIN":
        text = ("cannot look up node %s service %s now: %s; the name service did not answer (a DNS outage?): "
                "try again later, or write an IP address" % (show(node), show(service), said))
    else:
        text = ("cannot look up node %s service %s: %s; check the name, /etc/hosts and DNS, or write an IP address"
                % (show(node), show(service), said))
    return NameServiceError(code if isinstance(code, int) else 0, text, node, service)


def _predict(dst: Address, src: Optional[Address]) -> "tuple[Optional[Prediction], int, str]":
    """The pre-check's prediction of resolve_addr(dst, src), its foretold errno, and a note."""
    from .precheck import predict

    try:
        p = predict(dst, src)
    except PrecheckError as e:
        return e.prediction, e.errno or 0, str(e)
    except UsageError as e:
        return None, 0, "no prediction: %s" % e
    except OSError as e:  # the routing tables or sysfs could not be read here (a sandbox without netlink ...)
        return None, 0, "no prediction: this host's routing tables or devices could not be read (%s)" % e
    if p.missing:
        return p, 0, "predicted; the host lacks: %s" % "; ".join(str(m) for m in p.missing)
    return p, 0, "predicted by the pre-check: nothing sent to the kernel"


class _Checked(NamedTuple):
    node: Optional[str]
    service: Optional[str]
    flags: RaiFlag
    qp_type: Optional[QpType]
    port_space: Optional[PortSpace]
    src: Optional[Address]
    dst: Optional[Address]


def check_arguments(node: Optional[str] = None, service: Any = None, *, passive: bool = False,
                    numeric_host: bool = False, no_route: bool = False, family: int = 0,
                    qp_type: Optional[int] = None, port_space: Optional[int] = None, src: Any = None,
                    dst: Any = None, resolver: Optional[Callable[..., Any]] = None) -> _Checked:
    """:func:`getaddrinfo`'s arguments checked, and the hints as librdmacm's flags; a
    :class:`~pyrdmacm.errors.UsageError` naming the first bad one."""
    node_text = _text("node", node)
    service_text = _text("service", service)
    for flag, value in (("passive", passive), ("numeric_host", numeric_host), ("no_route", no_route)):
        if value.__class__ is not bool:
            raise UsageError("getaddrinfo %s must be True or False, got %s" % (flag, typed(value)))
    if family.__class__ is bool or family not in (0, AF_INET, AF_INET6, AF_IB):
        raise UsageError("getaddrinfo family must be 0, AF_INET (2), AF_INET6 (10) or AF_IB (27), got %s"
                         % typed(family))
    qpt = _enum_hint("qp_type", qp_type, QpType)
    ps = _enum_hint("port_space", port_space, PortSpace)
    src_hint, dst_hint = _hint_addr("src", src), _hint_addr("dst", dst)
    flags = RaiFlag(0)
    for on, f in ((passive, RaiFlag.PASSIVE), (numeric_host, RaiFlag.NUMERICHOST), (no_route, RaiFlag.NOROUTE),
                  (bool(family), RaiFlag.FAMILY)):
        if on:
            flags |= f
    return _Checked(node_text, service_text, flags, qpt, ps, src_hint, dst_hint)


def getaddrinfo(node: Optional[str] = None, service: Any = None, *, passive: bool = False,
                numeric_host: bool = False, no_route: bool = False, family: int = 0,
                qp_type: Optional[int] = None, port_space: Optional[int] = None, src: Any = None,
                dst: Any = None, resolver: Optional[Callable[..., Any]] = None) -> RdmaAddrInfo:
    """librdmacm's ``rdma_getaddrinfo(node, service, hints)``: one record, from the C
    library's first answer (see :mod:`pyrdmacm.addrinfo`)::

        info = getaddrinfo("peer", "7471")              # dst, RC, TCP, and a prediction
        cm_id.resolve_addr(info.dst, src=info.src)
        info = getaddrinfo(None, "7471", passive=True)  # src 0.0.0.0:7471: bind and listen
        cm_id.bind_addr(info.src)
        info = getaddrinfo("fe80::2:c903:0:1", "7471", numeric_host=True, family=AF_IB)
        # dst gid:fe80::2:c903:0:1 pkey=0xffff sid=0x1061d2f: port space TCP, port 7471

    ``node``: a host name or a numeric address (``"fe80::1%eth0"``: zones as the C library
    reads them); ``service``: a port (number or text) or a service name of the services
    database.  The hints: ``passive`` (RAI_PASSIVE: the record's ``src`` is a listening
    address, the any-address when there is no node), ``numeric_host`` (RAI_NUMERICHOST),
    ``no_route`` (RAI_NOROUTE: no prediction), ``family`` (RAI_FAMILY with AF_INET,
    AF_INET6 or AF_IB; AF_IB needs ``numeric_host``, as librdmacm converts numeric answers
    only), ``qp_type`` (:class:`~pyrdmacm.QpType`), ``port_space``
    (:class:`~pyrdmacm.PortSpace`), ``src`` and ``dst`` (anything
    :func:`~pyrdmacm.parse_address` takes: the hints' addresses).  ``resolver``: a stand-in
    for :func:`socket.getaddrinfo`, for tests.

    Sends nothing to the kernel; it reads the C library's name service and, for the
    prediction, this host's routes and RDMA devices.  Raises
    :class:`~pyrdmacm.addr.lookup.NameServiceError` (an OSError with the ``EAI_*`` code, as
    :class:`socket.gaierror`) for what the name service refused: a name or service that cannot
    be looked up, a name with ``numeric_host``, the name service not answering (EAI_AGAIN);
    :class:`~pyrdmacm.errors.UsageError` naming the input for bad hints, and no node,
    service or hint at all (librdmacm's EINVAL).
    """
    return _records(node, service, passive=passive, numeric_host=numeric_host, no_route=no_route, family=family,
                    qp_type=qp_type, port_space=port_space, src=src, dst=dst, resolver=resolver, every=False)[0]


def getaddrinfo_all(node: Optional[str] = None, service: Any = None, *, passive: bool = False,
                    numeric_host: bool = False, no_route: bool = False, family: int = 0,
                    qp_type: Optional[int] = None, port_space: Optional[int] = None, src: Any = None,
                    dst: Any = None, resolver: Optional[Callable[..., Any]] = None) -> List[RdmaAddrInfo]:
    """Every answer of the C library's lookup as a record, in its order, as
    :func:`socket.getaddrinfo` returns every answer: element 0 is what :func:`getaddrinfo`
    (librdmacm's ``rdma_getaddrinfo``) answers.  The arguments, the conversion of each
    answer and the errors are :func:`getaddrinfo`'s; each record not ``passive`` nor
    ``no_route`` carries the prediction for its own destination (one per address: the
    answers of one address for several socket types share it).  With no QP type nor port
    space hint, the C library answers each address once per socket type (stream, datagram,
    raw): records with RC over TCP, UD over UDP, and neither."""
    return _records(node, service, passive=passive, numeric_host=numeric_host, no_route=no_route, family=family,
                    qp_type=qp_type, port_space=port_space, src=src, dst=dst, resolver=resolver, every=True)


def _records(node: Optional[str], service: Any, *, passive: bool, numeric_host: bool, no_route: bool, family: int,
             qp_type: Optional[int], port_space: Optional[int], src: Any, dst: Any,
             resolver: Optional[Callable[..., Any]], every: bool) -> List[RdmaAddrInfo]:
    """getaddrinfo's records: the first answer's, or ``every`` one's."""
    c = check_arguments(node, service, passive=passive, numeric_host=numeric_host, no_route=no_route, family=family,
                        qp_type=qp_type, port_space=port_space, src=src, dst=dst)
    node_text, service_text, flags, qpt, ps, src_hint, dst_hint = c
    no_hints = not flags and qpt is None and ps is None and src_hint is None and dst_hint is None
    if node_text is None and service_text is None:
        if no_hints:
            raise UsageError("getaddrinfo needs a node, a service, or hints (librdmacm answers EINVAL): give "
                             "getaddrinfo('10.0.0.2', '7471'), or passive=True and a service to listen on")
        records = [RdmaAddrInfo(flags, family, qpt, ps, src_hint, dst_hint)]
    else:
        import socket

        records = _lookup(node_text, service_text, flags, family, qpt, ps, no_hints, resolver or socket.getaddrinfo,
                          every)
        if src_hint is not None:
            records = [_replace(r, src=src_hint) if r.src is None else r for r in records]
    if passive or no_route:
        return records
    predicted: Dict[Tuple[Address, Optional[Address]], Tuple[Optional[Prediction], int, str]] = {}
    out = []
    for record in records:
        if record.dst is None:
            out.append(_replace(record, prediction_note="no prediction: the record has no destination"))
            continue
        key = (record.dst, record.src)
        if key not in predicted:
            predicted[key] = _predict(record.dst, record.src)
        prediction, err, note = predicted[key]
        out.append(_replace(record, prediction=prediction, predicted_errno=err, prediction_note=note))
    return out


def _replace(record: RdmaAddrInfo, **changes: Any) -> RdmaAddrInfo:
    import dataclasses

    return dataclasses.replace(record, **changes)


def _lookup(node: Optional[str], service: Optional[str], flags: RaiFlag, family: int, qpt: Optional[QpType],
            ps: Optional[PortSpace], no_hints: bool, resolver: Callable[..., Any],
            every: bool = False) -> List[RdmaAddrInfo]:
    """ucma_getaddrinfo: the hints as the C library's, its first answer as the record (or
    ``every`` answer, each a record)."""
    import socket

    ai_flags: int
    socktype: int
    proto: int
    if no_hints:  # librdmacm passes NULL hints: the C library's defaults
        ai_flags, ai_family, socktype, proto = int(socket.AI_V4MAPPED | socket.AI_ADDRCONFIG), 0, 0, 0
    else:
        ai_flags = (int(socket.AI_PASSIVE) if flags & RaiFlag.PASSIVE else 0) | (
            int(socket.AI_NUMERICHOST) if flags & RaiFlag.NUMERICHOST else 0)
        ai_family = family if family != AF_IB else 0
        socktype = int(getattr(socket, _SOCKTYPE_OF_QP[qpt])) if qpt in _SOCKTYPE_OF_QP else 0
        if ps is PortSpace.IB:
            proto = {int(socket.SOCK_STREAM): int(socket.IPPROTO_TCP),
                     int(socket.SOCK_DGRAM): int(socket.IPPROTO_UDP)}.get(socktype, 0)
        else:
            proto = int(getattr(socket, _PROTO_OF_PS[ps])) if ps in _PROTO_OF_PS else 0
    what_qp = " for %s" % " over ".join(x.name for x in (qpt, ps) if x is not None) if (qpt or ps) else ""
    try:
        answers = resolver(node, service, ai_family, socktype, proto, ai_flags)
    except socket.gaierror as e:
        raise _lookup_failed(e, node, service, bool(flags & RaiFlag.NUMERICHOST), what_qp) from None
    except (UnicodeError, ValueError, OSError) as e:
        raise UsageError("cannot look up node %s service %s: %s" % (show(node), show(service), e)) from None
    if not answers:
        raise UsageError("node %s service %s: the C library answered no address" % (show(node), show(service)))
    return [_answer_record(answer, node, flags, family, qpt, ps) for answer in (answers if every else answers[:1])]


def _answer_record(answer: Any, node: Optional[str], flags: RaiFlag, family: int, qpt: Optional[QpType],
                   ps: Optional[PortSpace]) -> RdmaAddrInfo:
    """One answer of the C library (a socket.getaddrinfo tuple) as librdmacm makes it a record."""
    import socket

    _, a_socktype, a_proto, _, sockaddr = answer
    rec_qpt = qpt if qpt is not None else {socket.SOCK_STREAM: QpType.RC, socket.SOCK_DGRAM: QpType.UD}.get(a_socktype)
    rec_ps = ps if ps is not None else {socket.IPPROTO_TCP: PortSpace.TCP,
                                        socket.IPPROTO_UDP: PortSpace.UDP}.get(a_proto)
    addr = _answer_address(sockaddr)
    rec_family = addr.family
    if family == AF_IB and flags & RaiFlag.NUMERICHOST:
        if node is None and addr.family == AF_INET and addr.ip.is_unspecified:
            # passive with no node: the C library's first answer is the IPv4 wildcard, which
            # librdmacm reads as a sockaddr_in6 (its GID's last 8 bytes and its scope id come
            # from past the answer's end); the AF_IB wildcard is the zero GID (the kernel's
            # cma_any_addr for AF_IB), as librdmacm answers when the first answer is ::
            addr = Address(ipaddress.IPv6Address(0), addr.port)
        if addr.family != AF_INET6:
            raise UsageError(
                "node %s gives the IPv4 address %s, but an AF_IB address takes a GID (128 bits, written like an "
                "IPv6 address; an IPv4 address's is ::ffff:%s; with no node, give family AF_IB a node '::'): "
                "librdmacm would read the IPv4 answer as IPv6" % (show(node), addr.ip, addr.ip))
        ib = Address.ib(addr.ip, port=addr.port, port_space=int(rec_ps) if rec_ps is not None else 0)
        # ucma_convert_in6 keeps the IPv6 answer's flowinfo and scope id
        addr = Address(ib.ip, ib.port, addr.scope_id, addr.flowinfo, AF_IB, ib.pkey, ib.sid, ib.sid_mask)
        rec_family = AF_IB
    out_flags = RaiFlag.PASSIVE if flags & RaiFlag.PASSIVE else RaiFlag(0)
    if flags & RaiFlag.PASSIVE:
        return RdmaAddrInfo(out_flags, rec_family, rec_qpt, rec_ps, addr, None)
    return RdmaAddrInfo(out_flags, rec_family, rec_qpt, rec_ps, None, addr)
