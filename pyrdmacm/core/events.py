"""CM events: what GET_EVENT returns, as frozen objects.

Theory of operation
-------------------
``rdma_ucm_event_resp`` carries the id's ``uid`` (ours), the kernel's handle,
the event type, a status and a 304-byte parameter union.  :func:`decode_event_head`
reads its head, from which the channel makes an :class:`Event` (a named tuple: its
fields read-only, each read in C); the union is kept as bytes and decoded once, on first use, by
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
from collections import namedtuple
from functools import partial
from typing import TYPE_CHECKING, Any, Dict, Generic, List, NamedTuple, Optional, Tuple, TypeVar, Union

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

__all__ = ["Event", "EventBatch", "PLAIN_EVENTS", "ConnParam", "UdParam", "decode_event_head", "EVENT_RESP_SIZE", "REJECT_HINTS", "SIDR_HINTS"]

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


#: An event's fields, in order (an Event is a tuple of them), and what each holds
_FIELD_DOCS = {
    "event": "The event type (a CmEventType; an int the enum does not know).",
    "status": "0, a negative errno, or (REJECTED, UNREACHABLE of a datagram id) the peer's reason.",
    "id": "The id it belongs to (a connection request's new id, for CONNECT_REQUEST).",
    "handle": "The kernel's handle of that id.",
    "raw_param": "The parameter union as the kernel wrote it (see param).",
    "ece": "The peer's ECE (vendor_id, attr_mod) of a connection event.",
    "listen_id": "CONNECT_REQUEST: the listener the request came to.",
    "membership": "MULTICAST_JOIN / MULTICAST_ERROR: the membership (join_multicast's answer) it is for.",
}
if TYPE_CHECKING:  # pragma: no cover
    _Fields = Tuple[Any, ...]  # the checker sees the fields as the typed properties below
else:
    #: the tuple an event is: each field a C-level getter (an event's fields are read on
    #: every event's path, and the channel makes one per event read without a Python frame)
    _Fields = namedtuple("Event", tuple(_FIELD_DOCS), defaults=((0, 0), None, None), module=__name__)
    for _name, _doc in _FIELD_DOCS.items():
        getattr(_Fields, _name).__doc__ = _doc
    del _name, _doc


class Event(_Fields, Generic[_Id]):
    """One CM event (immutable): a named tuple of ``(event, status, id, handle, raw_param,
    ece, listen_id, membership)`` (:func:`collections.namedtuple`).  ``id`` is the
    :class:`~pyrdmacm.CmId` it belongs to.

    For ``CONNECT_REQUEST``, ``id`` is the *new* id the kernel made for the incoming
    connection and ``listen_id`` the listener.  Its fields are read-only; ``param`` is
    decoded on first use, once.  Two events are equal when their fields are (as tuples).
    """

    # no __slots__: the decoded ``param`` is kept in the instance's dict, made on first use

    _param: Union[ConnParam, UdParam, Tuple[int, int], None]

    if TYPE_CHECKING:  # pragma: no cover
        def __new__(cls, event: abi.CmEventType, status: int, id: _Id, handle: int,
                    raw_param: bytes, ece: Tuple[int, int] = (0, 0), listen_id: Optional[_Id] = None,
                    membership: "Optional[Membership]" = None) -> "Event[_Id]": ...

        @property
        def event(self) -> abi.CmEventType: ...

        @property
        def status(self) -> int: ...

        @property
        def id(self) -> _Id: ...

        @property
        def handle(self) -> int: ...

        @property
        def raw_param(self) -> bytes: ...

        @property
        def ece(self) -> Tuple[int, int]: ...

        @property
        def listen_id(self) -> Optional[_Id]: ...

        @property
        def membership(self) -> "Optional[Membership]": ...

    @property
    def ok(self) -> bool:
        """False for the failure events (ADDR_ERROR, ROUTE_ERROR, REJECTED, ...)."""
        return self.event not in _FAILURES

    @property
    def status_name(self) -> str:
        """``'ETIMEDOUT'`` for -110; ``''`` for 0; the IB CM reject reason's name for REJECTED
        (``'INVALID_SERVICE_ID'`` for 8); the SIDR status's name for UNREACHABLE of a datagram id."""
        status = self.status
        if not status:
            return ""
        if status > 0:
            if self.event is _REJECTED:
                return abi.RejectReason.name_of(status)
            if self.event is _UNREACHABLE and self._datagram():
                return abi.SidrStatus.name_of(status)
        return errno_name(status)

    def _datagram(self) -> bool:
        return getattr(self.id, "qp_type", abi.QpType.RC) == abi.QpType.UD

    @property
    def reason(self) -> Optional[int]:
        """REJECTED: the IB CM reject reason (a :class:`~pyrdmacm.abi.RejectReason` when known);
        UNREACHABLE of a datagram id with a SIDR status: that status
        (:class:`~pyrdmacm.abi.SidrStatus`); None otherwise."""
        status = self.status
        if status <= 0:
            return None
        if self.event is _REJECTED:
            enum_cls: Any = abi.RejectReason
        elif self.event is _UNREACHABLE and self._datagram():
            enum_cls = abi.SidrStatus
        else:
            return None
        try:
            return enum_cls(status)  # type: ignore[no-any-return]
        except ValueError:
            return status

    def explain(self) -> str:
        """What the event means and what to do, in a sentence ('' when there is nothing to say)."""
        ev, status = self.event, self.status
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
        ev = self.event
        p: Union[ConnParam, UdParam, Tuple[int, int], None]
        if ev in (abi.CmEventType.USER, abi.CmEventType.INTERNAL):
            p = _ARG32.unpack_from(self.raw_param)
        elif ev in _MC_EVENTS or self._datagram():
            p = decode_ud(self.raw_param)
        else:
            p = decode_conn(self.raw_param, self.ece)
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
        s = "Event(%s" % (self.event,)
        if self.status:
            s += ", status=%d %s" % (self.status, self.status_name)
        return s + ", id=%r)" % (self.id,)


#: an Event from the tuple of its eight fields, in C (what ``Event._make`` does, without
#: its Python frame): how the channel makes the event of each read
new_event = partial(tuple.__new__, Event)

_TYPES = {int(t): t for t in abi.CmEventType}


def event_type(number: int) -> abi.CmEventType:
    """The event type of a reply's number: a member, or for a number this table does not
    know (a newer kernel's event) the pseudo-member ``EVENT_<n>``."""
    t = _TYPES.get(number)
    return t if t is not None else abi.CmEventType(number)

#: The events whose parameter the kernel leaves empty (ucma copies no private data of a DREQ,
#: a DREP or an RTU, and the address, route and device events carry none), each with no
#: listener or membership: an :class:`EventBatch` holds these as its three entries (id,
#: type, status) and loses nothing.  The numbers, as GET_EVENT says them.
PLAIN_EVENTS = frozenset(int(t) for t in (
    abi.CmEventType.ADDR_RESOLVED, abi.CmEventType.ADDR_ERROR, abi.CmEventType.ROUTE_RESOLVED,
    abi.CmEventType.ROUTE_ERROR, abi.CmEventType.DISCONNECTED, abi.CmEventType.DEVICE_REMOVAL,
    abi.CmEventType.ADDR_CHANGE, abi.CmEventType.TIMEWAIT_EXIT, abi.CmEventType.ADDRINFO_RESOLVED,
    abi.CmEventType.ADDRINFO_ERROR))


class EventBatch(NamedTuple):
    """Events read in one call with no object per event
    (:meth:`~pyrdmacm.EventChannel.get_batch`): the ``k``-th event is ``(ids[k], events[k],
    statuses[k])``, in the order the kernel queued them, each acknowledged as it was read and
    its id moved.  Only :data:`PLAIN_EVENTS` go into the lists; the first other event (a
    connection request, an event with private data or a datagram's parameter, a
    membership's) ends the batch as ``last``, a whole :class:`Event` that came after every
    entry of the lists (acknowledge it, as get_event's)."""

    #: the id of each event (its state moved already)
    ids: List[Any]
    #: the type of each event (a :class:`~pyrdmacm.abi.CmEventType`)
    events: List[abi.CmEventType]
    #: the status of each event (0, or a negative errno: ADDR_ERROR -110 is ETIMEDOUT)
    statuses: List[int]
    #: the event that ended the batch, after the others: one the lists cannot hold, or None
    last: "Optional[Event[Any]]" = None


def _fast_event_struct(head: bool = False) -> struct.Struct:
    """The reply as the channel's fast path reads it: the codec's layout with ``status``
    signed (so no Python arithmetic per event) and ``reserved`` skipped.  Unpacks to
    ``(uid, handle, event, status, param, ece.vendor_id, ece.attr_mod)``; the ``head``
    alone to the first four."""
    tokens = re.findall(r"\d*[A-Za-z]", _EVENT.format[1:])
    names = _EVENT.names
    assert len(tokens) == len(names) and not _EVENT._be
    status, reserved = names.index("status"), names.index("reserved")
    assert tokens[status] == tokens[reserved] == "L"
    tokens[status], tokens[reserved] = "l", "4x"
    return struct.Struct(_EVENT.format[0] + "".join(tokens[:status + 1] if head else tokens))


_UNPACK_EVENT = _fast_event_struct().unpack_from
#: the reply's head alone (uid, handle, event, status signed): what a batch reads of a plain event
_UNPACK_HEAD = _fast_event_struct(head=True).unpack_from


def decode_event_head(buf: Any) -> Tuple[int, int, abi.CmEventType, int, bytes, Tuple[int, int]]:
    """``(uid, handle, event, status, raw_param, ece)`` from an event reply buffer."""
    uid, handle, ev, status, raw, _reserved, vid, mod = _EVENT.unpack_from(buf)
    if status & 0x80000000:
        status -= 0x100000000
    return uid, handle, event_type(ev), status, raw, (vid, mod)
