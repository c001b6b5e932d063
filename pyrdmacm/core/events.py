"""CM events: what GET_EVENT returns, as frozen objects.

Theory of operation
-------------------
``rdma_ucm_event_resp`` carries the id's ``uid`` (ours), the kernel's handle,
the event type, a status and a 304-byte parameter union.  :func:`decode_event_head`
reads its head, from which the channel makes an :class:`Event` (a slotted object whose
fields are read-only); the union is kept as bytes and decoded once, on first use, by
:attr:`Event.param`, because which arm is meaningful depends on the id: UD
ids (port spaces UDP and IPOIB, or PS_IB with a UD QP) get ``ud``, others
``conn``, USER/INTERNAL events (6.17+) ``arg32``.

``status`` is ``__u32`` on the wire but holds a negative errno for failures
the kernel made (``ADDR_ERROR`` -110 = ETIMEDOUT) or, for ``REJECTED``, the
IB CM reject reason: it is decoded as a signed 32-bit number.
"""

from __future__ import annotations

import re
import struct
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Dict, Generic, Optional, Tuple, TypeVar, Union

from .. import abi
from ..abi.codec import CODECS
from ..errors import errno_name
from ..records import ConnParam
from ..state import FAILURE_EVENTS
from .life import ack as _ack
from ..wire import decode_conn, decode_ud

from ..records import UdParam
from .membership import Membership

#: the type of the ids an event names (a :class:`~pyrdmacm.CmId`: the channel says which, so
#: that this module, below the ids, need not import them); a bare ``Event`` is an
#: ``Event[Any]`` (the default, for the type checker only: PEP 696)
if TYPE_CHECKING:  # pragma: no cover
    from typing_extensions import TypeVar as _TypeVar

    _Id = _TypeVar("_Id", default=Any)
else:
    _Id = TypeVar("_Id")

__all__ = ["Event", "ConnParam", "UdParam", "decode_event_head", "EVENT_RESP_SIZE", "REJECT_HINTS", "SIDR_HINTS"]

_EVENT = CODECS["rdma_ucm_event_resp"]
EVENT_RESP_SIZE = _EVENT.size
_ARG32 = struct.Struct("<II")

_FAILURES = FAILURE_EVENTS
_REJECTED = abi.CmEventType.REJECTED
_UNREACHABLE = abi.CmEventType.UNREACHABLE
_MC_EVENTS = (abi.CmEventType.MULTICAST_JOIN, abi.CmEventType.MULTICAST_ERROR)

#: What a REJECTED reason means, and what to do (``abi.RejectReason`` -> text), and what a
#: SIDR status (UNREACHABLE on a datagram id) means (``abi.SidrStatus`` -> text): made on
#: first use (a module ``__getattr__``), as the two enums load then.
REJECT_HINTS: Dict[int, str]
SIDR_HINTS: Dict[int, str]


def _hints() -> Tuple[Dict[int, str], Dict[int, str]]:
    """REJECT_HINTS and SIDR_HINTS (made the first time, then module attributes)."""
    made = globals().get("SIDR_HINTS")
    if made is not None:
        return globals()["REJECT_HINTS"], made
    hints: Dict[int, str] = {
        abi.RejectReason.TIMEOUT: "the peer destroyed its id while its connection request was outstanding",
        abi.RejectReason.INVALID_SERVICE_ID: "nothing listens on that port in this port space on the peer "
        "(start the listener first, or check the port and the port space)",
        abi.RejectReason.STALE_CONN: "the peer still holds a connection from this CA with the same QP number "
        "(live or in timewait): use another QP number, or retry after the peer's timewait",
        abi.RejectReason.CONSUMER_DEFINED: "the peer rejected: its application did (its private data, if any, "
        "says why), or it destroyed the request unanswered, or its rdma_cm refused it (a listener bound to "
        "another address, a bad accept); rejects the kernel makes carry no private data",
        abi.RejectReason.VENDOR_OPTION_NOT_SUPPORTED: "the peer refused the ECE options offered",
        abi.RejectReason.INVALID_RNR_RETRY: "the peer refused the RNR retry count",
        abi.RejectReason.NO_RESOURCES: "the peer is out of resources",
    }
    sidr: Dict[int, str] = {
        abi.SidrStatus.UNSUPPORTED: "nothing listens on that port in this port space on the peer",
        abi.SidrStatus.REJECT: "the peer rejected the request (its private data, if any, says why)",
        abi.SidrStatus.NO_QP: "the peer has no QP for the request",
        abi.SidrStatus.REDIRECT: "the peer redirects the request elsewhere",
        abi.SidrStatus.UNSUPPORTED_VERSION: "the peer does not speak this SIDR version",
    }
    globals().update(REJECT_HINTS=hints, SIDR_HINTS=sidr)
    return hints, sidr


def __getattr__(name: str) -> Any:
    if name in ("REJECT_HINTS", "SIDR_HINTS"):
        return _hints()[name == "SIDR_HINTS"]
    raise AttributeError("module %r has no attribute %r" % (__name__, name))


#: What a failure event with a negative errno means.
ERRNO_HINTS: Dict[Tuple[int, int], str] = {
    (abi.CmEventType.UNREACHABLE, -110): "the peer never answered (no REP for the REQ, or no RTU for the "
    "REP): is the peer up and reachable, and is its CM alive?",
    (abi.CmEventType.DISCONNECTED, -110): "the peer never answered the disconnect request (no DREP)",
    (abi.CmEventType.ADDR_ERROR, -110): "nobody answered ARP/ND for the destination",
    (abi.CmEventType.ROUTE_ERROR, -110): "the route query timed out",
}
#: What to do after the other events.
EVENT_HINTS: Dict[int, str] = {
    abi.CmEventType.DEVICE_REMOVAL: "the RDMA device went away: destroy the id",
    abi.CmEventType.ADDR_CHANGE: "the id's address moved to another device or port: reconnect",
    abi.CmEventType.CONNECT_ERROR: "the connection could not be completed: destroy the id",
    abi.CmEventType.CONNECT_RESPONSE: "the peer accepted: establish() sends the RTU",
    abi.CmEventType.DISCONNECTED: "the connection is down: destroy the id",
}


class Event(Generic[_Id]):
    """One CM event (immutable).  ``id`` is the :class:`~pyrdmacm.CmId` it belongs to.

    For ``CONNECT_REQUEST``, ``id`` is the *new* id the kernel made for the incoming
    connection and ``listen_id`` the listener.  Its fields are read-only; ``param`` is
    decoded on first use, once.
    """

    __slots__ = ("_event", "_status", "_id", "_handle", "_raw", "_ece", "_listen_id", "_membership", "_param")

    _param: Union[ConnParam, UdParam, Tuple[int, int], None]

    def __init__(self, event: Union[abi.CmEventType, int], status: int, id: _Id, handle: int,
                 raw_param: bytes, ece: Tuple[int, int] = (0, 0), listen_id: Optional[_Id] = None,
                 membership: "Optional[Membership]" = None) -> None:
        # one store each: a tuple assignment of four builds a tuple and unpacks it (about 700
        # instructions more per event on 3.11, the channel making one per event read)
        self._event = event
        self._status = status
        self._id = id
        self._handle = handle
        self._raw = raw_param
        self._ece = ece
        self._listen_id = listen_id
        self._membership = membership

    # The fields, read-only: each a C-level getter at run time (an event's fields are read on
    # every event's path); the type checker sees the same names as typed properties.
    if TYPE_CHECKING:  # pragma: no cover
        @property
        def event(self) -> Union[abi.CmEventType, int]:
            """The event type (a :class:`~pyrdmacm.abi.CmEventType`; an int the enum does not know)."""

        @property
        def status(self) -> int:
            """0, a negative errno, or (REJECTED, UNREACHABLE of a datagram id) the peer's reason."""

        @property
        def id(self) -> _Id:
            """The id it belongs to (a connection request's new id, for CONNECT_REQUEST)."""

        @property
        def handle(self) -> int:
            """The kernel's handle of that id."""

        @property
        def raw_param(self) -> bytes:
            """The parameter union as the kernel wrote it (see :attr:`param`)."""

        @property
        def ece(self) -> Tuple[int, int]:
            """The peer's ECE (vendor_id, attr_mod) of a connection event."""

        @property
        def listen_id(self) -> Optional[_Id]:
            """CONNECT_REQUEST: the listener the request came to."""

        @property
        def membership(self) -> "Optional[Membership]":
            """MULTICAST_JOIN / MULTICAST_ERROR: the membership (``join_multicast``'s answer) it is for."""
    else:
        event = property(attrgetter("_event"), doc="The event type (a CmEventType; an int the enum does not know).")
        status = property(attrgetter("_status"), doc="0, a negative errno, or (REJECTED, UNREACHABLE of a "
                          "datagram id) the peer's reason.")
        id = property(attrgetter("_id"), doc="The id it belongs to (a connection request's new id, for "
                      "CONNECT_REQUEST).")
        handle = property(attrgetter("_handle"), doc="The kernel's handle of that id.")
        raw_param = property(attrgetter("_raw"), doc="The parameter union as the kernel wrote it (see param).")
        ece = property(attrgetter("_ece"), doc="The peer's ECE (vendor_id, attr_mod) of a connection event.")
        listen_id = property(attrgetter("_listen_id"), doc="CONNECT_REQUEST: the listener the request came to.")
        membership = property(attrgetter("_membership"), doc="MULTICAST_JOIN / MULTICAST_ERROR: the membership "
                              "(join_multicast's answer) it is for.")

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not Event:
            return NotImplemented
        return self._fields() == other._fields()

    def __hash__(self) -> int:
        return hash(self._fields())

    def _fields(self) -> Tuple[Any, ...]:
        return (self._event, self._status, self._id, self._handle, self._raw, self._ece, self._listen_id,
                self._membership)

    @property
    def ok(self) -> bool:
        """False for the failure events (ADDR_ERROR, ROUTE_ERROR, REJECTED, ...)."""
        return self._event not in _FAILURES

    @property
    def status_name(self) -> str:
        """``'ETIMEDOUT'`` for -110; ``''`` for 0; the IB CM reject reason's name for REJECTED
        (``'INVALID_SERVICE_ID'`` for 8); the SIDR status's name for UNREACHABLE of a datagram id."""
        status = self._status
        if not status:
            return ""
        if status > 0:
            if self._event is _REJECTED:
                return abi.RejectReason.name_of(status)
            if self._event is _UNREACHABLE and self._datagram():
                return abi.SidrStatus.name_of(status)
        return errno_name(status)

    def _datagram(self) -> bool:
        return getattr(self._id, "qp_type", abi.QpType.RC) == abi.QpType.UD

    @property
    def reason(self) -> Optional[int]:
        """REJECTED: the IB CM reject reason (a :class:`~pyrdmacm.abi.RejectReason` when known);
        UNREACHABLE of a datagram id with a SIDR status: that status
        (:class:`~pyrdmacm.abi.SidrStatus`); None otherwise."""
        status = self._status
        if status <= 0:
            return None
        if self._event is _REJECTED:
            enum_cls: Any = abi.RejectReason
        elif self._event is _UNREACHABLE and self._datagram():
            enum_cls = abi.SidrStatus
        else:
            return None
        try:
            return enum_cls(status)  # type: ignore[no-any-return]
        except ValueError:
            return status

    def explain(self) -> str:
        """What the event means and what to do, in a sentence ('' when there is nothing to say)."""
        ev, status = self._event, self._status
        if status > 0 and ev is _REJECTED:
            return _hints()[0].get(status, "the peer's CM rejected the connection (IB CM reason %d)" % status)
        if status > 0 and ev is _UNREACHABLE and self._datagram():
            return _hints()[1].get(status, "the peer answered the SIDR request with status %d" % status)
        return ERRNO_HINTS.get((ev, status)) or EVENT_HINTS.get(ev, "")

    @property
    def param(self) -> Union[ConnParam, UdParam, Tuple[int, int], None]:
        """The parameter arm that applies to this id and event, decoded on first use: ``conn``
        for connected ids, ``ud`` for datagram ids and multicast events, ``arg32`` for USER
        and INTERNAL events."""
        try:
            return self._param
        except AttributeError:
            pass
        ev = self._event
        p: Union[ConnParam, UdParam, Tuple[int, int], None]
        if ev in (abi.CmEventType.USER, abi.CmEventType.INTERNAL):
            p = _ARG32.unpack_from(self._raw)
        elif ev in _MC_EVENTS or self._datagram():
            p = decode_ud(self._raw)
        else:
            p = decode_conn(self._raw, self._ece)
        self._param = p
        return p

    @property
    def private_data(self) -> bytes:
        """The peer's private data of a connection event (the whole field of its message:
        zero-padded, the IB CM sends no length), b"" for other events."""
        p = self.param
        return b"" if p is None or isinstance(p, tuple) else p.private_data

    #: acknowledge the event (``rdma_ack_cm_event``; optional: pyrdmacm never blocks on
    #: unacked events): :func:`pyrdmacm.core.life.ack`, where an id's count of them changes
    ack = _ack

    def __enter__(self) -> "Event":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ack()

    def __repr__(self) -> str:
        s = "Event(%s" % (self._event,)
        if self._status:
            s += ", status=%d %s" % (self._status, self.status_name)
        return s + ", id=%r)" % (self._id,)


_TYPES = {int(t): t for t in abi.CmEventType}


def _fast_event_struct() -> struct.Struct:
    """The reply as the channel's fast path reads it: the codec's layout with ``status``
    signed (so no Python arithmetic per event) and ``reserved`` skipped.  Unpacks to
    ``(uid, handle, event, status, param, ece.vendor_id, ece.attr_mod)``."""
    tokens = re.findall(r"\d*[A-Za-z]", _EVENT.format[1:])
    names = _EVENT.names
    assert len(tokens) == len(names) and not _EVENT._be
    status, reserved = names.index("status"), names.index("reserved")
    assert tokens[status] == tokens[reserved] == "L"
    tokens[status], tokens[reserved] = "l", "4x"
    return struct.Struct(_EVENT.format[0] + "".join(tokens))


_UNPACK_EVENT = _fast_event_struct().unpack_from


def decode_event_head(buf: Any) -> Tuple[int, int, Union[abi.CmEventType, int], int, bytes, Tuple[int, int]]:
    """``(uid, handle, event, status, raw_param, ece)`` from an event reply buffer."""
    uid, handle, ev, status, raw, _reserved, vid, mod = _EVENT.unpack_from(buf)
    if status & 0x80000000:
        status -= 0x100000000
    return uid, handle, _TYPES.get(ev, ev), status, raw, (vid, mod)
