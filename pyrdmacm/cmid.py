"""CM ids: librdmacm's verbs on one kernel id (``struct rdma_cm_id``).

Theory of operation
-------------------
A :class:`CmId` is one kernel id (``rdma_create_id``), registered on its
:class:`~pyrdmacm.channel.EventChannel` under a uid unique in the process.  Its
state follows the kernel's, from the calls made and the events read, as the
table of :mod:`pyrdmacm.state` says (a CmId is a :class:`~pyrdmacm.state.Life`, whose
methods alone assign its state); an illegal call raises
:class:`~pyrdmacm.errors.StateError` before any syscall.  Every call goes the
same way (:meth:`CmId._call`): check the arguments (UsageError), move the id
(``Life._begin``), write the command (:mod:`pyrdmacm.wire` encodes it, the
channel's transport writes it), and move it back if the kernel refuses
(``Life._rollback``) -- so an event that another thread reads while the writer
is still in ``write()`` finds the id where the command left it.

librdmacm queries the kernel (QUERY ADDR, GID, PATH) after every event;
pyrdmacm asks on first use of what they return (``local_addr``, ``device``,
``sgid``, ``query_path()`` ...) and caches the answer until the id's state
changes: the same answers, without the cost for callers that never ask.

Connections (``connect``/``establish``, ``listen``/``accept``/``reject``/``notify``,
``disconnect``) take their parameters as one :class:`~pyrdmacm.records.ConnParam`; the
QP number is the caller's (pyrdmacm has no QP: the kernel carries the number to the
peer) or one allocated unique in the process (:func:`allocate_qp_num`).  Datagram ids
connect through SIDR and join multicast groups (:class:`Membership`).  The private
data of each message is checked against what the IB CM carries
(:func:`pyrdmacm.abi.cm_private_data_limit`) before the syscall.

With no channel (``CmId(None, ...)``), an id gets a private channel and its
calls block until their outcome (librdmacm's synchronous mode; the outcome is
:data:`pyrdmacm.state.OUTCOMES`'): a failure event raises
:class:`~pyrdmacm.errors.EventError` with the real errno and the event attached.
"""

from __future__ import annotations

import dataclasses
import errno
import ipaddress
import itertools
import os
import struct
import time as _time
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union

from . import _process, abi, wire
from ._codec import CODECS
from ._device import ReplyBuffer, timeout_seconds
from .addr import AF_IB, Address, AddressLike, parse_address
from .errors import EventError, KernelError, StateError, UsageError
from .events import Event
from .records import AddrInfo, ConnParam, DeviceRef, PathRecord, QpAttr, ServiceRecord
from .state import OUTCOMES, Call, Kind, Life, Rules, State, rules_for

if TYPE_CHECKING:  # pragma: no cover
    from .channel import EventChannel

__all__ = ["CmId", "Membership", "SourceIgnoredWarning", "allocate_qp_num"]

E = abi.CmEventType
_PortSpace = abi.PortSpace
_PS_TCP = abi.PortSpace.TCP
_QP_RC = abi.QpType.RC
_DESTROYED = State.DESTROYED
_ADDR_BOUND = State.ADDR_BOUND
_CMD = wire.COMMAND
_R = TypeVar("_R")
#: the rules of nearly every id (PortSpace.TCP, an RC QP)
_TCP_RC = rules_for(_PS_TCP, _QP_RC)
#: the calls of every connection, read as globals (an enum member's lookup costs ten times more)
_CONNECT_CALL, _ESTABLISH_CALL, _DISCONNECT_CALL = Call.CONNECT, Call.ESTABLISH, Call.DISCONNECT
_DATAGRAM = Kind.DATAGRAM
_REQ, _REP = ("REQ", "SIDR_REQ"), ("REP", "SIDR_REP")  # the messages of connect and accept's parameters
#: pyrdmacm.channel.EventChannel once an id was made (channel imports this module)
_EventChannel: Any = None


class SourceIgnoredWarning(UserWarning):
    """resolve_addr was given a source, but the id was already bound: the kernel ignores it."""


def _u(name: str, value: Any, hi: int, lo: int = 0) -> int:
    """An int argument in lo..hi, or UsageError naming it."""
    if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise UsageError("%s must be an int in %d..%d, got %r" % (name, lo, hi, value))
    if not lo <= value <= hi:
        raise UsageError("%s must be an int in %d..%d, got %r" % (name, lo, hi, value))
    return int(value)


def _qp_type_for(ps: abi.PortSpace, qp_type: Optional[int]) -> abi.QpType:
    if ps is abi.PortSpace.IB:
        if qp_type is None:
            return abi.QpType.RC
        if isinstance(qp_type, bool) or not isinstance(qp_type, int):
            raise UsageError("qp_type must be a QpType (RC, UC or UD), got %r" % (qp_type,))
        try:
            return abi.QpType(qp_type)
        except ValueError:
            raise UsageError("qp_type %r is no QP type: use QpType.RC, UC or UD" % (qp_type,)) from None
    if qp_type is not None:
        raise UsageError("qp_type is derived from the port space except for PortSpace.IB "
                         "(TCP: RC; UDP and IPOIB: UD): leave it out, or use PortSpace.IB")
    return abi.QpType.RC if ps is abi.PortSpace.TCP else abi.QpType.UD


def port_space(ps: Any, qp_type: Optional[int]) -> Tuple[abi.PortSpace, abi.QpType]:
    """The port space and QP type of a new id, checked (UsageError before any syscall)."""
    if ps.__class__ is not _PortSpace:
        try:
            if isinstance(ps, bool) or not isinstance(ps, int):
                raise ValueError
            ps = _PortSpace(ps)
        except ValueError:
            raise UsageError("unknown port space %r: use PortSpace.TCP, UDP, IPOIB or IB" % (ps,)) from None
    return ps, _qp_type_for(ps, qp_type)


def _qp_num(value: Any) -> int:
    """A QP number the caller gave, checked: 24 bits, none of the reserved ones."""
    qp_num = _u("qp_num", value, 0xFFFFFF)
    if qp_num in _RESERVED_QPN:
        raise UsageError("qp_num 0x%x is reserved (0 and 1 are the SMI and GSI QPs, 0xffffff is "
                         "multicast): give your QP's number, or None to have one allocated" % qp_num)
    return qp_num


#: connect()/accept() with no parameters but (perhaps) a QP number: these, checked once
_DEFAULT_PARAM = ConnParam()
_NOT_ONLY_QPN = object()


def _private_data(value: Any, message: str, family: int) -> bytes:
    """Private data for ``message`` of an id of ``family``, checked against what the message
    carries (:func:`pyrdmacm.abi.cm_private_data_limit`)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise UsageError("private_data must be bytes, got %s" % type(value).__name__)
    data = bytes(value)
    limit = abi.cm_private_data_limit(message, family)
    if len(data) > limit:
        raise UsageError("private_data is %d bytes; a %s of this id carries at most %d" % (len(data), message, limit))
    return data


class CmId(Life):
    """An rdma_cm id (``struct rdma_cm_id``).

    ``CmId(channel, ps=PortSpace.TCP)`` creates it (CREATE_ID);
    ``CmId(None, ...)`` gives it a private channel and makes its calls blocking.
    """

    __slots__ = (
        "channel",
        "handle",
        "uid",
        "_sync",
        "_dst",
        "_context",
        "_qpn",
        "_request",
        "_mcs",
        "_drep",
        "__weakref__",
    )

    channel: "EventChannel"
    handle: int
    uid: int
    _dst: Optional[Address]
    _request: Event
    _qpn: int
    _mcs: Dict[int, "Membership"]
    #: a DREP the old channel's reader could not send during migrate() (see channel._answer_dreq)
    _drep: List[bool]

    def __init__(
        self,
        channel: Optional["EventChannel"] = None,
        ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP,
        *,
        qp_type: Optional[int] = None,
        context: Any = None,
    ) -> None:
        # Only what every id needs is set here: ``sync`` and ``context`` read as False and
        # None unless set; ``_cache`` (the query answers, see query_addr) and ``_dst`` are
        # set on first use.  The port space, QP type and kind are the id's Rules (shared).
        rules = _TCP_RC if ps is _PS_TCP and qp_type is None else rules_for(*port_space(ps, qp_type))
        if channel.__class__ is not _EventChannel:
            channel = self._own_channel(channel)
        assert channel is not None  # for the type checker: _own_channel returns one
        if channel._live != _process.PID:
            channel._check()
        if context is not None:
            self._context = context
        create(self, channel, rules)

    def _own_channel(self, channel: Optional["EventChannel"]) -> "EventChannel":
        """The channel of an id made with ``channel`` other than an EventChannel itself: a
        private one for None (sync mode), a subclass's as given, else UsageError."""
        global _EventChannel
        from .channel import EventChannel

        _EventChannel = EventChannel  # the constructor's check, a global read from now on
        if channel is None:
            channel = EventChannel()
            self._sync = True
            channel._wait_first = True
        elif not isinstance(channel, EventChannel):
            raise UsageError("channel must be an EventChannel or None, got %r" % (channel,))
        return channel

    # -- what most ids share, stored only where it differs
    @property
    def ps(self) -> abi.PortSpace:
        """The port space given to the constructor (``PortSpace.TCP`` by default)."""
        return self._rules.ps

    @property
    def qp_type(self) -> abi.QpType:
        """The QP type: RC for TCP, UD for UDP and IPOIB, the one given for IB."""
        return self._rules.qp_type

    @property
    def kind(self) -> Kind:
        """How the id connects (:class:`~pyrdmacm.state.Kind`): its QP type decides."""
        return self._rules.kind

    @property
    def sync(self) -> bool:
        """True for an id made with ``CmId(None)``: a private channel, and blocking calls."""
        return getattr(self, "_sync", False)

    @property
    def context(self) -> Any:
        """Anything the caller wants to keep with the id (``rdma_cm_id.context``)."""
        return getattr(self, "_context", None)

    @context.setter
    def context(self, value: Any) -> None:
        self._context = value

    @property
    def state(self) -> State:
        """Where the id is (:class:`~pyrdmacm.state.State`), as its calls and events moved it."""
        return self._state

    @property
    def unacked(self) -> int:
        """How many of the id's events are not acknowledged yet (``destroy()`` warns of them)."""
        return self._unacked

    def __repr__(self) -> str:
        return "<CmId uid=%d handle=%s %s %s>" % (self.uid, getattr(self, "handle", "?"), self.ps.name, self._state)

    # -- the general path of every call
    def _ready(self, call: Call) -> None:
        """StateError, before any syscall, unless ``call`` may be made now: the id's channel
        open (and this process's), the call legal in the id's state."""
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                raise StateError("%s: the id's event channel is closed (closing it destroyed the id)" % call)
            ch._check()
        self._allowed(call)

    def _call(self, call: Call, data: bytes, command: str, **ctx: Any) -> None:
        """Write the command of ``call``: the id moves before the write, and back if the kernel
        refuses it.  ``ctx`` names what the refusal's error shows (by default the peer's
        address: ``dst``)."""
        ch = self.channel
        if ch._live != _process.PID:
            self._ready(call)  # raises, saying why
        old = self._begin(call)
        try:
            n = ch._write(data)
        except OSError as e:
            self._rollback(call, old)
            raise ch._refused(e, command, ctx or {"dst": self._peer()}) from None
        except BaseException:
            self._rollback(call, old, refused=False)
            raise
        if n != len(data):
            raise ch._short(n, data, command)

    def _complete(self, call: Call, command: str, membership: "Optional[Membership]" = None,
                  **ctx: Any) -> Event:
        """Sync mode: wait for this id's outcome event (:data:`~pyrdmacm.state.OUTCOMES`), or
        that of its multicast ``membership``; raise on a failure event."""
        outcome = OUTCOMES[(self.kind, call)]
        while True:
            ev = self.channel.get_event(None)
            if ev is None or ev.event not in outcome.events:
                continue
            if (ev.membership is not membership) if membership is not None else (ev.id is not self):
                continue
            ev.ack()
            if ev.event in outcome.failed or ev.status:
                raise EventError(ev, command, netdev=None, **ctx)
            return ev

    # -- commands
    def bind_addr(self, addr: AddressLike) -> None:
        """Bind to a local address (BIND, or BIND_IP on old kernels): ``rdma_bind_addr``."""
        a = parse_address(addr)
        if self.channel.legacy:
            data = _CMD["BIND_IP"].encode(0, a.pack_in6(), self.handle)
            self._call(Call.BIND_ADDR, data, "BIND_IP", src=a)
        else:
            data = _CMD["BIND"].encode(self.handle, a.size, 0, a.pack_storage())
            self._call(Call.BIND_ADDR, data, "BIND", src=a)

    def resolve_addr(self, dst: AddressLike, *, src: Optional[AddressLike] = None,
                     timeout_ms: int = 2000) -> Optional[Event]:
        """Resolve ``dst`` (and bind to ``src`` or a routed source): ``rdma_resolve_addr``.

        Sends RESOLVE_ADDR (RESOLVE_IP on old kernels).  ADDR_RESOLVED or ADDR_ERROR
        follows on the channel; in sync mode this waits for it and raises
        :class:`EventError` on ADDR_ERROR.  A synchronous refusal (no route:
        ENETUNREACH, a non-local source: EADDRNOTAVAIL ...) raises :class:`KernelError`.
        On an id that is already bound the kernel ignores ``src``; a different ``src``
        is warned about.  ``src`` and ``timeout_ms`` are keyword-only (C's order is
        src, dst: a positional mistake must not resolve the source).
        """
        ch = self.channel
        packed = ch._packed_dst
        if dst is packed[0] and src is None and timeout_ms.__class__ is int and 0 <= timeout_ms <= 0xFFFFFFFF:
            # the common case: the destination this channel packed last, no source, a valid
            # timeout (many ids resolving one destination parse and pack it once)
            d: Address = packed[1]
            self._dst = d
            self._call(_RESOLVE_ADDR_CALL, _RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, self.handle, timeout_ms) + packed[2],
                       "RESOLVE_ADDR", src=None, dst=d)
            if ch._wait_first and self.sync:  # a sync id's channel is its own
                return self._complete(_RESOLVE_ADDR_CALL, "RESOLVE_ADDR", src=None, dst=d)
            return None
        d = parse_address(dst)
        s = parse_address(src) if src is not None else None
        _u("timeout_ms", timeout_ms, 0xFFFFFFFF)
        if s is not None and s.family != d.family:
            raise UsageError(
                "source %s and destination %s are of different families: the kernel requires one family" % (s, d)
            )
        self._ready(Call.RESOLVE_ADDR)  # raises, saying why (closed, illegal)
        if s is not None and self._state is _ADDR_BOUND:
            bound = self._bound_src()
            if bound is None or bound != s:
                warnings.warn(
                    SourceIgnoredWarning("id is already bound (to %s): the kernel ignores the source %s" % (bound, s)),
                    stacklevel=2,
                )
        if ch.legacy:
            data = _CMD["RESOLVE_IP"].encode(s.pack_in6() if s is not None else bytes(28), d.pack_in6(),
                                             self.handle, timeout_ms)
            command = "RESOLVE_IP"
        else:
            if s is None:
                packed = ch._packed_dst = (dst, d, resolve_addr_tail(None, d))
                tail = packed[2]
            else:
                tail = resolve_addr_tail(s, d)
            data = _RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, self.handle, timeout_ms) + tail
            command = "RESOLVE_ADDR"
        self._dst = d
        self._call(Call.RESOLVE_ADDR, data, command, src=s, dst=d)
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(Call.RESOLVE_ADDR, command, src=s, dst=d)
        return None

    def resolve_route(self, timeout_ms: int = 2000) -> Optional[Event]:
        """Resolve the route to the destination (RESOLVE_ROUTE): ``rdma_resolve_route``.

        ROUTE_RESOLVED or ROUTE_ERROR follows (in sync mode: waited for; ROUTE_ERROR
        raises EventError).  The kernel refuses ``timeout_ms == 0`` with EINVAL; so do
        we, before the syscall.
        """
        if (timeout_ms.__class__ is not int and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool))) \
                or not 0 < timeout_ms <= 0xFFFFFFFF:
            raise UsageError("timeout_ms must be an int in 1..4294967295 (milliseconds), got %r" % (timeout_ms,))
        self._call(_RESOLVE_ROUTE_CALL, _ROUTE_CMD(_H_RESOLVE_ROUTE, self.handle, timeout_ms), "RESOLVE_ROUTE")
        if self.channel._wait_first and self.sync:
            return self._complete(_RESOLVE_ROUTE_CALL, "RESOLVE_ROUTE", dst=self._peer())
        return None

    def listen(self, backlog: int = 0) -> None:
        """Listen for connection requests (LISTEN): ``rdma_listen``.  ``backlog`` 0 takes the
        kernel's ``net.rdma_ucm.max_backlog``."""
        _u("backlog", backlog, 0x7FFFFFFF)
        self._call(Call.LISTEN, _CMD["LISTEN"].encode(self.handle, backlog), "LISTEN")

    # -- connections: parameters
    def _conn_param(self, param: Any, private_data: Any, fields: Dict[str, Any],
                    messages: Tuple[str, str]) -> Tuple[ConnParam, int]:
        """The connection parameters of connect/accept, checked (UsageError before any syscall),
        and the QP number to send; ``messages``: the IB CM message that carries them for a
        connected id and for a datagram id (its private-data limit)."""
        if private_data is None and param.__class__ is not ConnParam:
            # the defaults (valid for every message) with at most a QP number: none to check
            qpn = param if not fields else fields["qp_num"] if (param is None and len(fields) == 1
                                                                and "qp_num" in fields) else _NOT_ONLY_QPN
            if qpn is None:
                return _DEFAULT_PARAM, allocate_qp_num()
            if qpn.__class__ is int:
                return _DEFAULT_PARAM, _qp_num(qpn)
        if isinstance(param, ConnParam):
            if private_data is not None or fields:
                raise UsageError("give a ConnParam or its fields as keyword arguments, not both")
            p = param
        else:
            if param is not None:
                if "qp_num" in fields:
                    raise UsageError("qp_num given twice (positionally and by keyword)")
                fields["qp_num"] = param
            if private_data is not None:
                fields["private_data"] = private_data
            try:
                p = ConnParam(**fields)
            except TypeError:
                unknown = sorted(set(fields) - set(_CONN_FIELDS))
                raise UsageError("unknown connection parameter%s %s: the fields are %s" % (
                    "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(_CONN_FIELDS))) from None
        message = messages[1] if self._rules.kind is _DATAGRAM else messages[0]
        data = _private_data(p.private_data, message, getattr(self._peer(), "family", abi.AF_INET))
        qp_num = allocate_qp_num() if p.qp_num is None else _qp_num(p.qp_num)
        _u("responder_resources", p.responder_resources, 0xFF)
        _u("initiator_depth", p.initiator_depth, 0xFF)
        _u("retry_count", p.retry_count, 7)
        _u("rnr_retry_count", p.rnr_retry_count, 7)
        _u("flow_control", p.flow_control, 1)
        _u("srq", p.srq, 1)
        _u("qkey", p.qkey, 0xFFFFFFFF)
        ece = p.ece
        if not isinstance(ece, tuple) or len(ece) != 2:
            raise UsageError("ece must be a (vendor_id, attr_mod) pair of ints, got %r" % (ece,))
        _u("ece vendor_id", ece[0], 0xFFFFFFFF)
        _u("ece attr_mod", ece[1], 0xFFFFFFFF)
        if ece != (0, 0) and not getattr(self.channel._t, "ece", True):
            raise UsageError("this kernel carries no ECE (Linux 5.8 and later do): it would drop the "
                             "(vendor_id, attr_mod) given; leave ece out")
        if data is not p.private_data:
            p = dataclasses.replace(p, private_data=data)
        return p, qp_num

    # -- connections: the active side
    def connect(self, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
                **fields: Any) -> Optional[Event]:
        """Connect to the resolved destination (CONNECT): ``rdma_connect``.

        ``param`` is a :class:`~pyrdmacm.records.ConnParam`, or its fields are given as
        keyword arguments (``connect(qp_num=..., private_data=b"...", retry_count=5)``; the
        QP number and private data may come positionally, as before).  Without libibverbs
        there is no QP here: ``qp_num`` names the QP the caller made elsewhere, or None
        for a number allocated unique in the process (:func:`allocate_qp_num`).

        A connected id then gets CONNECT_RESPONSE (the peer's REP; :meth:`establish` sends
        the RTU), REJECTED or UNREACHABLE; a datagram id ESTABLISHED (the SIDR REP) or
        UNREACHABLE.  In sync mode this waits, sends the RTU itself, and returns the event
        (REJECTED ... raise :class:`EventError`).
        """
        p, qp_num = self._conn_param(param, private_data, fields, _REQ)
        cmd = (_CONNECT_DEFAULT(qp_num, self.handle) if p is _DEFAULT_PARAM
               else _CONNECT.encode(*wire.conn_fields(p, qp_num), self.handle, 0, *p.ece))
        self._qpn = qp_num
        self._call(_CONNECT_CALL, cmd, "CONNECT")
        if self.channel._wait_first and self.sync:  # a sync id's channel is its own
            ev = self._complete(Call.CONNECT, "CONNECT", dst=self._peer())
            if ev.event is E.CONNECT_RESPONSE:
                self.establish()
            return ev
        return None

    @property
    def qp_num(self) -> Optional[int]:
        """The QP number this id's connect() or accept() sent (None before either)."""
        return getattr(self, "_qpn", None)

    def establish(self) -> None:
        """Send the RTU after CONNECT_RESPONSE (ACCEPT with the parameters marked invalid):
        ``rdma_establish``.  The peer then gets ESTABLISHED; this side gets no event (its
        state is CONNECTED at once).  Sync mode and the helpers do it themselves."""
        self._call(_ESTABLISH_CALL, _ESTABLISH(self.handle), "ACCEPT")

    # -- connections: the passive side
    @property
    def destination(self) -> Optional[Address]:
        """The destination given to resolve_addr, as parsed (None before it); ``peer_addr`` is
        what the kernel says (a query)."""
        return self._peer()

    @property
    def request(self) -> Optional[Event]:
        """The CONNECT_REQUEST event that made this id (None for an id made by CREATE_ID)."""
        return getattr(self, "_request", None)

    @property
    def listen_id(self) -> Optional["CmId"]:
        """The listener a connection request's id came from (None for other ids)."""
        req = self.request
        return req.listen_id if req is not None else None

    def get_request(self, timeout: Optional[float] = None) -> Optional["CmId"]:
        """``rdma_get_request``: the id of the next connection request to this listener, or
        None when none came within ``timeout`` seconds (None: wait for ever).

        For a sync listener (``CmId(None)``), as in librdmacm: a listener with a channel
        gets its requests as CONNECT_REQUEST events of that channel."""
        self._allowed(Call.GET_REQUEST)
        if not self.sync:
            raise UsageError("get_request is for a sync listener (CmId(None)); a listener with a channel "
                             "gets its requests as CONNECT_REQUEST events of the channel")
        ch = self.channel
        t = timeout_seconds(timeout)
        deadline = None if t is None else _time.monotonic() + t
        while True:
            left = None if deadline is None else max(0.0, deadline - _time.monotonic())
            ev = ch.get_event(left)
            if ev is None:
                return None
            if ev.event is E.CONNECT_REQUEST and ev.listen_id is self:
                ev.ack()
                return ev.id
            if ev.id is self and not ev.ok:
                ev.ack()
                raise EventError(ev, "LISTEN")
            if deadline is not None and left == 0.0:
                return None

    def accept(self, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
               **fields: Any) -> Optional[Event]:
        """Accept a connection request (ACCEPT): ``rdma_accept``, on the id of a CONNECT_REQUEST.

        ``param`` as for :meth:`connect` (private data up to 196 bytes, 136 on a datagram
        id).  The id gets its own uid here (the kernel queues its events under it).  A
        connected id then gets ESTABLISHED when the peer's RTU comes; a datagram id is
        done at once (the SIDR REP is sent; no event follows).  If the kernel refuses the
        accept it rejects the request itself (the peer gets REJECTED 28): the id is FAILED.
        In sync mode (a request of a sync listener) the id first moves to a channel of its
        own, as librdmacm does, and this waits for ESTABLISHED.
        """
        ud = self.kind is Kind.DATAGRAM
        p, qp_num = self._conn_param(param, private_data, fields, _REP)
        self._ready(Call.ACCEPT)
        if self.request is None:
            raise StateError("accept: id uid %d is no connection request's id" % self.uid)
        if self.sync:
            self.migrate(self.channel._private())
        ch = self.channel
        uid = ch._register(self)
        cmd = _CMD["ACCEPT"].encode(uid, *wire.conn_fields(p, qp_num), self.handle, 0, *p.ece)
        self._qpn = qp_num
        try:
            self._call(Call.ACCEPT, cmd, "ACCEPT")  # refused: the kernel rejected the request itself (FAILED)
        except BaseException:
            ch._ids.pop(uid, None)
            self.uid = 0
            raise
        if self.sync and not ud:
            return self._complete(Call.ACCEPT, "ACCEPT", dst=self._peer())
        return None

    def reject(self, private_data: bytes = b"", reason: Optional[int] = None) -> None:
        """Reject a connection request (REJECT): ``rdma_reject``; on the active side, refuse
        the peer's REP (after CONNECT_RESPONSE).

        ``private_data`` goes in the REJ (at most 148 bytes; 136 in a datagram id's SIDR
        REP).  ``reason`` is None (what librdmacm sends: the kernel makes it 28,
        CONSUMER_DEFINED), 28, or 35 (VENDOR_OPTION_NOT_SUPPORTED: refusing the ECE
        offered); the kernel takes no other.  The id is FAILED after: destroy it."""
        ud = self.kind is Kind.DATAGRAM
        data = _private_data(private_data, "SIDR_REP" if ud else "REJ", abi.AF_INET)
        if reason is None:
            code = 0
        else:
            code = _u("reason", reason, 0xFF)
            if code not in abi.REJECT_REASONS:
                raise UsageError("reason %r: the kernel takes only 28 (CONSUMER_DEFINED) and 35 "
                                 "(VENDOR_OPTION_NOT_SUPPORTED); leave it out for 28" % (reason,))
        self._call(Call.REJECT, _CMD["REJECT"].encode(self.handle, len(data), code, b"", data), "REJECT")

    def notify(self, event: int = abi.NotifyEvent.COMM_EST) -> bool:
        """``rdma_notify``: tell the CM that the QP saw ``event``.  COMM_EST (the default) on an
        accepted id makes the connection ESTABLISHED without waiting for the RTU (the
        ESTABLISHED event follows); PATH_MIG switches to the alternate path.  Returns False
        when the connection was established already (the kernel's EISCONN, which librdmacm
        says may be ignored), True otherwise."""
        try:
            ev = abi.NotifyEvent(event)
        except ValueError:
            raise UsageError("notify takes NotifyEvent.COMM_EST (4) or PATH_MIG (6), got %r" % (event,)) from None
        try:
            self._call(Call.NOTIFY, _CMD["NOTIFY"].encode(self.handle, int(ev)), "NOTIFY")
        except KernelError as e:
            if e.errno == errno.EISCONN:
                return False
            raise
        return True

    def disconnect(self) -> None:
        """Disconnect (DISCONNECT): ``rdma_disconnect``; sends a DREQ, or the DREP once the
        peer's DREQ came (the DISCONNECTED event; the channel answers it itself unless
        ``channel.answer_disconnect`` is False).  TIMEWAIT_EXIT follows a few seconds later
        (while the id exists)."""
        self._call(_DISCONNECT_CALL, _DISCONNECT(_H_DISCONNECT, self.handle), "DISCONNECT")

    # -- multicast
    def join_multicast(self, addr: AddressLike, *, send_only: bool = False, context: Any = None) -> "Membership":
        """Join a multicast group (JOIN_MCAST; JOIN_IP_MCAST on kernels before 3.11):
        ``rdma_join_multicast_ex``.  A datagram id, bound or resolved.  ``send_only`` joins
        as a send-only full member (no IGMP join on RoCE).  MULTICAST_JOIN (with the
        group's address handle: ``event.param``) or MULTICAST_ERROR follows, its
        ``membership`` the object returned; in sync mode this waits for it."""
        a = parse_address(addr)
        if not isinstance(send_only, bool):
            raise UsageError("send_only must be a bool, got %r" % (send_only,))
        self._ready(Call.JOIN_MULTICAST)
        ch = self.channel
        m = Membership(self, a, send_only, context)
        reply = ReplyBuffer(_CMD["JOIN_MCAST"].out)
        if ch.legacy:
            if send_only:
                raise UsageError("a send-only join needs JOIN_MCAST, which kernels before 4.9 lack")
            data = _CMD["JOIN_IP_MCAST"].encode(reply.address, m.uid, a.pack_in6(), self.handle)
            command = "JOIN_IP_MCAST"
        else:
            flags = abi.McJoinFlag.SENDONLY_FULLMEMBER if send_only else abi.McJoinFlag.FULLMEMBER
            data = _CMD["JOIN_MCAST"].encode(reply.address, m.uid, self.handle, a.size, int(flags), a.pack_storage())
            command = "JOIN_MCAST"
        ch._mcs[m.uid] = m  # before the write: its event may come at once
        try:
            self._call(Call.JOIN_MULTICAST, data, command, dst=a)
        except BaseException:
            ch._mcs.pop(m.uid, None)
            raise
        m.handle = reply.u32[0]
        self._memberships()[m.uid] = m
        if self.sync:
            self._complete(Call.JOIN_MULTICAST, command, membership=m, dst=a)
        return m

    def _memberships(self) -> Dict[int, "Membership"]:
        try:
            return self._mcs
        except AttributeError:
            self._mcs = {}
            return self._mcs

    @property
    def memberships(self) -> List["Membership"]:
        """The multicast groups this id joined and did not leave."""
        return list(getattr(self, "_mcs", {}).values())

    # -- options
    def set_option(self, option: Union[abi.OptionId, abi.OptionIb], value: Any) -> None:
        """``rdma_set_option``: one of :class:`~pyrdmacm.abi.OptionId` (TOS: 0..255, set before
        resolve_route to take effect; REUSEADDR and AFONLY: bool, before bind/resolve/listen;
        ACK_TIMEOUT: 0..31, connected ids) or :class:`~pyrdmacm.abi.OptionIb` PATH (a list of
        :class:`~pyrdmacm.records.PathRecord` or raw ``ib_path_rec_data`` bytes, after
        ADDR_RESOLVED instead of resolve_route: the kernel queues ROUTE_RESOLVED).  The
        state rules are checked before the syscall."""
        spec = _OPTIONS.get((type(option), option)) if isinstance(option, (abi.OptionId, abi.OptionIb)) else None
        if spec is None:
            raise UsageError("unknown option %r: use OptionId.TOS, REUSEADDR, AFONLY, ACK_TIMEOUT or OptionIb.PATH"
                             % (option,))
        call, level, encode = spec
        payload = encode(value)
        buf = ReplyBuffer(len(payload))  # the pinned input the command points at, held across the write
        buf.fill(payload)
        data = _CMD["SET_OPTION"].encode(buf.address, self.handle, int(level), int(option), len(payload))
        self._call(call, data, "SET_OPTION")
        if call is Call.SET_IB_PATH and self.sync and self.channel._wait_first:
            self._complete(call, "SET_OPTION", dst=self._peer())

    def set_tos(self, tos: int) -> None:
        """``set_option(OptionId.TOS, tos)``: the type of service (RoCE: traffic class and SL)."""
        self.set_option(abi.OptionId.TOS, tos)

    def set_reuseaddr(self, on: bool = True) -> None:
        """``rdma_set_option(REUSEADDR)``: SET_OPTION on a fresh id (IDLE), before bind_addr,
        resolve_addr or listen; StateError in any other state."""
        self.set_option(abi.OptionId.REUSEADDR, on)

    def set_afonly(self, on: bool = True) -> None:
        """``rdma_set_option(AFONLY)``: SET_OPTION in IDLE or ADDR_BOUND: an IPv6 listener on
        the any address then takes no IPv4 requests."""
        self.set_option(abi.OptionId.AFONLY, on)

    def set_ack_timeout(self, timeout: int) -> None:
        """``set_option(OptionId.ACK_TIMEOUT, t)``: the QP's local ACK timeout, 4.096 us * 2**t."""
        self.set_option(abi.OptionId.ACK_TIMEOUT, timeout)

    # -- QP attributes, migration, user events
    def init_qp_attr(self, qp_state: Union[abi.QpState, int]) -> QpAttr:
        """``rdma_init_qp_attr``: the attributes a QP moving to ``qp_state`` (INIT, RTR, RTS ...)
        would be given for this id's connection -- what to program a QP made elsewhere
        with, and the numbers behind a data-plane failure (peer QPN, PSNs, MTU, timeout,
        retry counts)."""
        try:
            st = abi.QpState(_u("qp_state", qp_state, 0xFFFFFFFF))
        except ValueError:
            raise UsageError("qp_state %r: use a QpState (RESET 0 .. ERR 6)" % (qp_state,)) from None
        reply = ReplyBuffer(_CMD["INIT_QP_ATTR"].out)
        self._call(Call.INIT_QP_ATTR, _CMD["INIT_QP_ATTR"].encode(reply.address, self.handle, int(st)),
                   "INIT_QP_ATTR")
        return wire.decode_qp_attr(reply.view)

    def migrate(self, channel: "EventChannel") -> int:
        """``rdma_migrate_id``: move the id, its memberships and its events not read yet to
        ``channel`` (MIGRATE_ID, written on the new channel).  Returns ``events_reported``:
        how many of its events the old channel delivered.  Events already read stay with
        whoever read them."""
        from .channel import EventChannel

        if not isinstance(channel, EventChannel):
            raise UsageError("migrate needs an EventChannel, got %r" % (channel,))
        old = self.channel
        if channel is old:
            raise UsageError("the id is on that channel already")
        self._ready(Call.MIGRATE)
        channel._check()
        mcs = self.memberships
        # registered on the new channel first: its events may arrive there at once
        if self.uid:
            channel._ids[self.uid] = self
        for m in mcs:
            channel._mcs[m.uid] = m
        reply = ReplyBuffer(_CMD["MIGRATE_ID"].out)
        try:
            channel.submit(_CMD["MIGRATE_ID"].encode(reply.address, self.handle, old.fileno()), "MIGRATE_ID",
                           dst=self._peer())
        except BaseException:
            if self.uid:
                channel._ids.pop(self.uid, None)
            for m in mcs:
                channel._mcs.pop(m.uid, None)
            raise
        if self.uid:
            if not old._reader_slot:  # an event the old channel's reader holds still finds the id
                old._grave[self.uid] = self
            old._ids.pop(self.uid, None)
        for m in mcs:
            old._mcs.pop(m.uid, None)
        self.channel = channel
        if old._watchers:
            old._ended([self.uid] + [m.uid for m in mcs], "migrated")
        # the old channel's reader answered a DISCONNECTED of this id while MIGRATE_ID moved it,
        # and the kernel refused that DREP on the old fd: send it here (channel._answer_dreq)
        pending = getattr(self, "_drep", None)
        if pending:
            try:
                pending.pop()
            except IndexError:
                pass  # the reader took it after all
            else:
                try:
                    channel.submit(_DISCONNECT(_H_DISCONNECT, self.handle), "DISCONNECT")
                except (KernelError, StateError):
                    pass
        reported: int = reply.u32[0]
        return reported

    def write_event(self, arg: int = 0, status: int = 0) -> None:
        """Queue a USER event for this id on its own channel (WRITE_CM_EVENT, Linux 6.17+):
        a wake-up for a thread or task reading the channel; ``event.param`` is
        ``(arg & 0xffffffff, arg >> 32)``.  Older kernels refuse it (EINVAL)."""
        arg = _u("arg", arg, 0xFFFFFFFFFFFFFFFF)
        status = _u("status", status, 0x7FFFFFFF, -0x80000000)
        self._alive("write_event")
        param = struct.pack("<Q", arg).ljust(_WRITE_EVENT_PARAM, b"\0")
        self.channel.submit(_CMD["WRITE_CM_EVENT"].encode(self.handle, 0, int(E.USER), status & 0xFFFFFFFF, param),
                            "WRITE_CM_EVENT")


    def destroy(self) -> int:
        """Destroy the id (DESTROY_ID): ``rdma_destroy_id``.  Returns ``events_reported``.

        Never blocks: events not yet acked are reported with an
        :class:`UnackedEventsWarning` (librdmacm would wait for them for ever).

        Destroying is a CM verb: by the connection's state the kernel's IB CM sends the peer
        a REJ 4 (TIMEOUT: our REQ was still outstanding), a REJ 28 without data (a request
        not yet answered, or a REP not yet answered by an RTU), a DREQ and timewait (an
        established connection), or the DREP (a DREQ received and not yet answered).  UD
        ids send nothing.  Closing the channel destroys all its ids the same way.
        """
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                self._closed()
                raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
            ch._check()
        reported = destroy_one(self)
        if self._unacked:
            warnings.warn(ch._unacked_warning([self], True), stacklevel=2)
        if ch._wait_first and self.sync and not ch._ids:  # a sync id's channel is its own: closed with
            ch.close()  # its last id (a sync listener's rejected request must not close the listener's)
        return reported

    def __enter__(self) -> "CmId":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._state is not _DESTROYED and not self.channel.closed:
            self.destroy()

    def _requested(self, event: Event) -> Event:
        """This id is the new id of the connection request ``event`` (which it counts)."""
        self._request = event
        self._counted()
        return event

    def _peer(self) -> Optional[Address]:
        """The destination given to resolve_addr (None before it)."""
        try:
            return self._dst
        except AttributeError:
            return None

    # -- queries (lazy, cached until the next state change)
    def _bound_src(self) -> Optional[Address]:
        try:
            return self.query_addr().src
        except KernelError:
            return None

    def _alive(self, call: str) -> None:
        # before any cache or syscall: the kernel reuses a destroyed id's handle for new ids
        if self._state is _DESTROYED:
            raise StateError("%s on a destroyed id (uid %d): create a new id" % (call, self.uid))
        self.channel._check()

    def _ask(self, command: str, option: int, prefill: bytes, decode: Callable[[Any], _R]) -> _R:
        """One QUERY (or QUERY_ROUTE) into the channel's query buffer, under its command lock,
        the buffer cleared (and prefilled) first; ``decode`` reads the reply."""
        ch = self.channel
        buf = ch._r_query
        with ch._cmd_lock:
            buf.clear()
            if prefill:
                buf.fill(prefill)
            ch.submit(_CMD[command].encode(buf.address, self.handle, option), _CMD[command].cmd.name,
                      dst=self._peer())
            return decode(buf.view)

    def query_addr(self) -> AddrInfo:
        """QUERY ADDR (QUERY_ROUTE on old kernels): source, destination, device, port, pkey."""
        self._alive("query_addr")
        cache = self._answers()
        if cache[0] is not None:
            return cache[0]  # type: ignore[no-any-return]
        ch = self.channel
        if ch.legacy:
            r = self._ask("QUERY_ROUTE", 0, wire.route_reply_prefill(), wire.route_reply)
        else:
            r = self._ask("QUERY_ADDR", abi.QueryOption.ADDR, wire.addr_reply_prefill(), wire.addr_reply)
        device = None
        if r.node_guid or (r.ibdev_index is not None and r.port_num):
            name, index = ch._t.identify_device(r.ibdev_index, r.node_guid)
            device = DeviceRef(name, index, r.node_guid)
        info = AddrInfo(r.src, r.dst, device, r.port_num, r.pkey)
        cache[0] = info  # into the list taken before asking: an event meanwhile dropped it
        return info

    def query_gid(self) -> Tuple[Optional[Address], Optional[Address]]:
        """QUERY GID: source and destination as AF_IB addresses (the GIDs, pkey, service id)."""
        self._alive("query_gid")
        cache = self._answers()
        if cache[1] is not None:
            return cache[1]  # type: ignore[no-any-return]
        r = self._ask("QUERY_ADDR", abi.QueryOption.GID, b"", wire.addr_reply)
        res = (r.src, r.dst)
        cache[1] = res
        return res

    def query_path(self) -> List[PathRecord]:
        """QUERY PATH: the path records of the resolved route (up to 6)."""
        self._alive("query_path")
        return self._ask("QUERY_PATH", abi.QueryOption.PATH, b"",
                         lambda view: wire.path_records(bytes(view[: wire.QUERY_PATH_REPLY_SIZE])))

    def query_ib_service(self) -> List[ServiceRecord]:
        """QUERY IB_SERVICE (Linux 6.17+): the service records RESOLVE_IB_SERVICE found (up to
        six), [] when there are none (the kernel's ENODATA).  Older kernels refuse the option
        (ENOSYS)."""
        self._alive("query_ib_service")
        try:
            total, recs = self._ask("QUERY_IB_SERVICE", abi.QueryOption.IB_SERVICE, b"",
                                    lambda view: wire.service_records(bytes(view[: wire.QUERY_IB_SERVICE_REPLY_SIZE])))
        except KernelError as e:
            if e.errno == errno.ENODATA:  # the kernel has none (nothing resolved)
                return []
            raise
        return recs

    def resolve_ib_service(self, service_id: Optional[int] = None, name: Optional[str] = None) -> Optional[Event]:
        """``rdma_resolve_addrinfo`` with an SA hint (RESOLVE_IB_SERVICE, Linux 6.17+): ask the
        InfiniBand SA for the service records of ``service_id`` and/or ``name`` on the bound
        device; ADDRINFO_RESOLVED (then :meth:`query_ib_service`, and resolve_route) or
        ADDRINFO_ERROR follows.  RoCE and iWARP have no SA: the kernel refuses (EOPNOTSUPP);
        older kernels do not know the command (EINVAL)."""
        flags = 0
        sid = 0
        raw_name = b""
        if service_id is not None:
            sid = _u("service_id", service_id, 0xFFFFFFFFFFFFFFFF)
            flags |= abi.IbServiceFlag.ID
        if name is not None:
            if not isinstance(name, str):
                raise UsageError("name must be a str, got %r" % (name,))
            raw_name = name.encode()
            if len(raw_name) >= abi.RDMA_USER_CM_IB_SERVICE_NAME_SIZE:
                raise UsageError("a service name has at most %d bytes" % (abi.RDMA_USER_CM_IB_SERVICE_NAME_SIZE - 1))
            flags |= abi.IbServiceFlag.NAME
        if not flags:
            raise UsageError("resolve_ib_service needs a service_id, a name, or both")
        data = _CMD["RESOLVE_IB_SERVICE"].encode(self.handle, 0, sid, raw_name, int(flags), 0)
        self._call(Call.RESOLVE_IB_SERVICE, data, "RESOLVE_IB_SERVICE")
        if self.channel._wait_first and self.sync:
            return self._complete(Call.RESOLVE_IB_SERVICE, "RESOLVE_IB_SERVICE")
        return None

    # -- librdmacm's accessors
    def get_local_addr(self) -> Optional[Address]:
        """``rdma_get_local_addr``: the bound source address (and port)."""
        return self.query_addr().src

    def get_peer_addr(self) -> Optional[Address]:
        """``rdma_get_peer_addr``: the destination address (and port)."""
        info = self.query_addr()
        return info.dst if info.dst is not None else self._peer()

    def get_src_port(self) -> int:
        """``rdma_get_src_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_local_addr()
        return a.port if a is not None else 0

    def get_dst_port(self) -> int:
        """``rdma_get_dst_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_peer_addr()
        return a.port if a is not None else 0

    local_addr = property(get_local_addr)
    peer_addr = property(get_peer_addr)

    @property
    def device(self) -> Optional[DeviceRef]:
        """The RDMA device the id is bound to (QUERY ADDR, cached until the id moves), or None."""
        return self.query_addr().device

    @property
    def port_num(self) -> int:
        """The device's port the id is bound to (QUERY ADDR); 0 while unbound."""
        return self.query_addr().port_num

    @property
    def pkey(self) -> int:
        """The partition key of the id's address (QUERY ADDR; 0x0000 on RoCE, whose GIDs carry none)."""
        return self.query_addr().pkey

    @property
    def sgid(self) -> Optional[ipaddress.IPv6Address]:
        """The source GID (QUERY GID, the AF_IB view of the addresses), or None while unbound."""
        s = self.query_gid()[0]
        return s.ip if s is not None and s.family == AF_IB else None  # type: ignore[return-value]

    @property
    def dgid(self) -> Optional[ipaddress.IPv6Address]:
        """The destination GID (QUERY GID), or None before resolve_addr's ADDR_RESOLVED."""
        d = self.query_gid()[1]
        return d.ip if d is not None and d.family == AF_IB else None  # type: ignore[return-value]


# -- connections: the QP-number policy and the private-data limits

#: QP numbers never sent: the SMI and GSI QPs, and the multicast QPN.
_RESERVED_QPN = frozenset((0, 1, 0xFFFFFF))
_QPN_LO, _QPN_SPAN = 0x100000, 0xFFFFFF - 0x100000
#: the counter's random start, from os.urandom (the random module costs a millisecond of
#: import for this one number; the modulo bias of 64 random bits is below 2**-40)
_qpn_counter = itertools.count(int.from_bytes(os.urandom(8), "little") % _QPN_SPAN).__next__


def allocate_qp_num() -> int:
    """A QP number for a connection whose caller gave none (``ConnParam.qp_num=None``).

    The number is on the wire: the peer's CM keys its connections by (remote QP number,
    remote CA GUID), live ones and those in timewait, and answers a second REQ with the
    same pair with REJECTED 10 (stale connection); the peer's QP sends its data there.  So
    the numbers come from a counter, unique in the process, starting at a random point of
    0x100000..0xfffffe (above the QP indexes Soft-RoCE hands out; on hardware a number may
    still equal a real QP's of this host, which then gets the peer's packets -- give your
    own QP's number there).  Never 0, 1 or 0xffffff.  Two processes of one host draw from
    different random points, so they rarely meet; a reused number is refused with 10."""
    return _QPN_LO + _qpn_counter() % _QPN_SPAN


def _opt_u8(name: str, hi: int) -> Callable[[Any], bytes]:
    return lambda v: struct.pack("B", _u(name, v, hi))


def _opt_bool(name: str) -> Callable[[Any], bytes]:
    def encode(v: Any) -> bytes:
        if not isinstance(v, (bool, int)) or v not in (0, 1):
            raise UsageError("%s must be a bool, got %r" % (name, v))
        return struct.pack("<i", int(v))
    return encode


def _opt_paths(v: Any) -> bytes:
    if isinstance(v, (bytes, bytearray, memoryview)):
        data = bytes(v)
        size = CODECS["ib_path_rec_data"].size
        if not data or len(data) % size:
            raise UsageError("IB_PATH takes whole ib_path_rec_data entries (%d bytes each), got %d bytes"
                             % (size, len(data)))
        return data
    if isinstance(v, PathRecord):
        v = [v]
    try:
        records = list(v)
    except TypeError:
        raise UsageError("IB_PATH takes PathRecords (query_path() gives them) or ib_path_rec_data bytes, "
                         "got %r" % (v,)) from None
    if not records or not all(isinstance(r, PathRecord) for r in records):
        raise UsageError("IB_PATH takes one or more PathRecords, got %r" % (v,))
    return b"".join(wire.encode_path_record(r) for r in records)


#: option -> (the state machine's call, the level, the value's encoder)
#: (keyed by the enum and the member: OptionIb.PATH and OptionId.REUSEADDR are both 1)
_OPTIONS: Dict[Tuple[type, Any], Tuple[Call, abi.OptionLevel, Callable[[Any], bytes]]] = {
    (abi.OptionId, abi.OptionId.TOS): (Call.SET_TOS, abi.OptionLevel.ID, _opt_u8("TOS", 0xFF)),
    (abi.OptionId, abi.OptionId.REUSEADDR): (Call.SET_REUSEADDR, abi.OptionLevel.ID, _opt_bool("REUSEADDR")),
    (abi.OptionId, abi.OptionId.AFONLY): (Call.SET_AFONLY, abi.OptionLevel.ID, _opt_bool("AFONLY")),
    (abi.OptionId, abi.OptionId.ACK_TIMEOUT): (Call.SET_ACK_TIMEOUT, abi.OptionLevel.ID, _opt_u8("ACK_TIMEOUT", 31)),
    (abi.OptionIb, abi.OptionIb.PATH): (Call.SET_IB_PATH, abi.OptionLevel.IB, _opt_paths),
}

_CONN_FIELDS = tuple(f.name for f in dataclasses.fields(ConnParam))
_ACCEPT = _CMD["ACCEPT"]
#: establish(): ACCEPT with nothing but the id (uid 0, parameters invalid), as librdmacm sends it;
#: every other field is zero, packed once (``encode_dict`` per call costs milliseconds under emulation)
_ESTABLISH = _ACCEPT.packer({}, ("id",))
_CONNECT = _CMD["CONNECT"]
#: CONNECT with the default parameters (``connect()``, ``connect(qp_num=N)``): the QP number and
#: the id vary, the rest is :data:`_DEFAULT_PARAM`'s, packed once
_CONNECT_DEFAULT = _CONNECT.packer(
    dict(zip(_CONNECT.fields, wire.conn_fields(_DEFAULT_PARAM, 0) + (0, 0) + _DEFAULT_PARAM.ece)),
    ("conn_param.qp_num", "id"))
_DISCONNECT, _H_DISCONNECT = _CMD["DISCONNECT"].pack, _CMD["DISCONNECT"].header
_WRITE_EVENT_PARAM = CODECS["rdma_ucm_write_cm_event"].size - CODECS["rdma_ucm_write_cm_event"].offset("param")


class Membership:
    """One multicast group an id joined (``join_multicast``): its events (MULTICAST_JOIN,
    MULTICAST_ERROR) carry it as ``event.membership``; ``leave()`` ends it."""

    __slots__ = ("id", "addr", "uid", "handle", "send_only", "context", "__weakref__")

    def __init__(self, cm_id: CmId, addr: Address, send_only: bool, context: Any) -> None:
        self.id = cm_id
        self.addr = addr
        self.uid = _process.next_uid()
        self.handle = -1
        self.send_only = send_only
        self.context = context

    @property
    def joined(self) -> bool:
        """True until leave() (or the id's destroy) ends the membership."""
        return self.uid in getattr(self.id, "_mcs", {})

    def leave(self) -> int:
        """``rdma_leave_multicast`` (LEAVE_MCAST): returns ``events_reported``; the group's
        events not read yet are dropped by the kernel."""
        cm = self.id
        if not self.joined:
            raise StateError("leave: the membership of %s (uid %d) was left already" % (self.addr, self.uid))
        cm._alive("leave_multicast")
        ch = cm.channel
        reply = ReplyBuffer(_CMD["LEAVE_MCAST"].out)
        ch.submit(_CMD["LEAVE_MCAST"].encode(reply.address, self.handle, 0), "LEAVE_MCAST", dst=self.addr)
        cm._mcs.pop(self.uid, None)
        ch._mcs.pop(self.uid, None)
        reported: int = reply.u32[0]
        return reported

    def __repr__(self) -> str:
        return "<Membership %s uid=%d of %r%s>" % (self.addr, self.uid, self.id, " send-only" if self.send_only else "")


def request_id(channel: "EventChannel", handle: int, listener: CmId) -> CmId:
    """The id the kernel made for an incoming connection request (CONNECT_REQUEST's ``id``).

    It has no uid yet (0): the kernel queues no event for it until ACCEPT gives it
    one, and then it is registered; until then it is not in the channel's registry.
    """
    obj: CmId = object.__new__(CmId)
    obj.channel, obj.handle, obj.uid = channel, handle, 0
    obj._born(listener._rules, State.REQUEST)
    if listener.context is not None:
        obj._context = listener.context
    if listener.sync:
        obj._sync = True
    return obj


def create(cm_id: CmId, channel: "EventChannel", rules: Rules) -> CmId:
    """CREATE_ID for a checked, not yet created ``cm_id`` on a live ``channel``, of the port
    space and QP type of ``rules``: the one place that writes it (``CmId()``,
    ``EventChannel.create_id`` and ``create_ids`` end here)."""
    cm_id.channel = channel
    cm_id._born(rules)
    pool = channel._create_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(_N_CREATE_REPLY)
    uid = cm_id.uid = _process.next_uid()
    data = _CREATE_CMD(_H_CREATE, uid, reply.address, rules.ps, rules.qp_type, b"")
    try:
        n = channel._write(data)
    except OSError as e:
        pool.append(reply)
        raise channel._refused(e, "CREATE_ID", {}) from None
    if n != _N_CREATE:
        pool.append(reply)
        raise channel._short(n, data, "CREATE_ID")
    cm_id.handle = reply.u32[0]
    pool.append(reply)
    channel._ids[uid] = cm_id
    return cm_id


def destroy_one(cm_id: CmId, notify: bool = True) -> int:
    """DESTROY_ID for an id of a live channel (its state checked here): ``events_reported``.
    The one place that writes it (``destroy()``, ``destroy_ids`` and ``create_ids``' undo end
    here).  ``notify``: tell the channel's watchers (a batch tells them once)."""
    ch = cm_id.channel
    pool = ch._destroy_replies
    old = cm_id._begin(_DESTROY_CALL)  # no call of the id from here on; its events read meanwhile stay its
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(_N_DESTROY_REPLY)
    data = _DESTROY_CMD(_H_DESTROY, reply.address, cm_id.handle, 0)
    try:
        n = ch._write(data)
    except OSError as e:
        pool.append(reply)
        if not ch.closed:  # refused: the id lives on (a closed channel destroyed it anyway)
            cm_id._rollback(_DESTROY_CALL, old)
        raise ch._refused(e, "DESTROY_ID", {}) from None
    except BaseException:
        pool.append(reply)
        cm_id._rollback(_DESTROY_CALL, old, refused=False)
        raise
    if n != _N_DESTROY:
        pool.append(reply)
        raise ch._short(n, data, "DESTROY_ID")
    reported: int = reply.u32[0]
    pool.append(reply)
    # Off the registry after DESTROY_ID: the kernel queues no event of the id from now on, and
    # one that a reader took before (counted in events_reported) must still find its id -- in
    # the grave while that reader holds the guard (it empties the grave when it lets go).
    uid = cm_id.uid
    if not ch._reader_slot:
        ch._grave[uid] = cm_id
    ch._ids.pop(uid, None)
    if notify and ch._watchers:
        ch._ended([uid], "destroyed")
    return reported


def resolve_addr_tail(src: Optional[Address], dst: Address) -> bytes:
    """RESOLVE_ADDR's bytes after ``id`` and ``timeout_ms`` for these addresses (src may be None)."""
    data = _RESOLVE_ADDR.encode(0, 0, src.size if src is not None else 0, dst.size, 0,
                                src.pack_storage() if src is not None else b"", dst.pack_storage())
    return data[len(_H_RESOLVE_ADDR) + _RESOLVE_ADDR_HEAD_SIZE:]


_CREATE, _DESTROY = _CMD["CREATE_ID"], _CMD["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.size, _DESTROY.out
_RESOLVE_ADDR = _CMD["RESOLVE_ADDR"]
_H_RESOLVE_ADDR = _RESOLVE_ADDR.header
#: RESOLVE_ADDR's header and its first two fields (id, timeout_ms): the rest depends on the
#: addresses only, and is packed once per destination (:func:`resolve_addr_tail`)
_RESOLVE_ADDR_HEAD, _RESOLVE_ADDR_HEAD_SIZE = _RESOLVE_ADDR.head(2)
assert _RESOLVE_ADDR.fields[:2] == ("id", "timeout_ms")
_ROUTE_CMD, _H_RESOLVE_ROUTE = _CMD["RESOLVE_ROUTE"].pack, _CMD["RESOLVE_ROUTE"].header
_DESTROY_CALL, _RESOLVE_ADDR_CALL, _RESOLVE_ROUTE_CALL = Call.DESTROY, Call.RESOLVE_ADDR, Call.RESOLVE_ROUTE
