"""CM ids: librdmacm's verbs on one kernel id (``struct rdma_cm_id``), all in :class:`CmId`.

A CmId is one kernel id, registered on its channel under a uid unique in the process.
Every verb goes the same way: check the arguments (:mod:`pyrdmacm.core.params`,
UsageError), encode the command (:mod:`pyrdmacm.wire`), and make the call
(:meth:`Life._call <pyrdmacm.core.life.Life._call>`: the id moves as :mod:`pyrdmacm.state`
says, the channel writes the command, the id moves back if the kernel refuses).  What an
id *is* -- its record, the moves of its state, what its channel asks of it -- is its base,
:class:`~pyrdmacm.core.life.Life`; what it *does* is here, birth (CREATE_ID) and death
(DESTROY_ID) included.

Queries (``query_addr``, ``local_addr``, ``sgid`` ...) are asked on first use and kept
until the id moves (:class:`~pyrdmacm.core.queries.Answers`).  With no channel
(``CmId(None)``) an id gets a private one and its calls block until their outcome
(:data:`pyrdmacm.state.OUTCOMES`; a failure event raises :class:`~pyrdmacm.errors.EventError`).
"""

from __future__ import annotations

import errno
import ipaddress
import warnings
from typing import TYPE_CHECKING, Any, Iterable, List, Optional, Tuple, TypeVar, Union

from . import params, process as _process
from .. import abi, wire
from .channel import Channel
from .device import ReplyBuffer
from .events import Event
from .life import _DESTROY_CALL, _DESTROY_CMD, _H_DESTROY, _N_DESTROY_REPLY, _NO_CONTEXT, Life, create_all, ended
from .membership import Membership
from .params import check_int, conn_param, port_space, private_data_for
from .router import TAKES, Waiter
from ..addr import Address, AddressLike, parse_address
from ..errors import EventError, KernelError, StateError, UsageError
from ..state import Call, Kind, State, rules_for

from ..records import AddrInfo, ConnParam, DeviceRef, PathRecord, QpAttr, RouteInfo, ServiceRecord

if TYPE_CHECKING:  # pragma: no cover
    from .registry import ChannelId

__all__ = ["CmId", "SourceIgnoredWarning", "UnackedEventsWarning", "unacked_warning"]

#: an id's own class (CmId, or a subclass): what its events and requests' ids are
_S = TypeVar("_S", bound="CmId")

E = abi.CmEventType
_CMD = wire.COMMAND
_PS_TCP = abi.PortSpace.TCP
#: the rules of nearly every id (PortSpace.TCP, an RC QP)
_TCP_RC = rules_for(_PS_TCP, abi.QpType.RC)
_DESTROYED, _ADDR_BOUND = State.DESTROYED, State.ADDR_BOUND
_DATAGRAM = Kind.DATAGRAM
# the hot commands and calls, read as globals (an enum member's lookup costs ten times more)
_H_RESOLVE_ADDR = _CMD["RESOLVE_ADDR"].header
_RESOLVE_ADDR_HEAD, _resolve_addr_tail = wire.RESOLVE_ADDR_HEAD, wire.resolve_addr_tail
_ROUTE_CMD, _H_RESOLVE_ROUTE = _CMD["RESOLVE_ROUTE"].pack, _CMD["RESOLVE_ROUTE"].header
_ESTABLISH, _CONNECT_DEFAULT, _CONNECT, _DISCONNECT = wire.ESTABLISH, wire.CONNECT_DEFAULT, _CMD["CONNECT"], wire.DISCONNECT
_RESOLVE_ADDR_CALL, _RESOLVE_ROUTE_CALL = Call.RESOLVE_ADDR, Call.RESOLVE_ROUTE
_CONNECT_CALL, _ESTABLISH_CALL, _DISCONNECT_CALL = Call.CONNECT, Call.ESTABLISH, Call.DISCONNECT
_REQ, _REP = ("REQ", "SIDR_REQ"), ("REP", "SIDR_REP")  # the messages of connect and accept's parameters
#: the class of the last channel an id was made on (EventChannel, as a rule): the constructor's
#: check is then one comparison
_SEEN_CHANNEL: Any = None


class SourceIgnoredWarning(UserWarning):
    """resolve_addr was given a source, but the id was already bound: the kernel ignores it."""


class UnackedEventsWarning(ResourceWarning):
    """An id was destroyed with events still unacknowledged (librdmacm would hang here)."""


def unacked_warning(ids: List[Any], one: bool = False) -> UnackedEventsWarning:
    """The warning of destroy() (``one``) or destroy_ids() for ids with events not acked."""
    if one:
        return UnackedEventsWarning("id uid %d destroyed with %d event(s) not acked (harmless here; librdmacm "
                                    "would block)" % (ids[0].uid, ids[0]._unacked))
    return UnackedEventsWarning(
        "%d id(s) destroyed with %d event(s) not acked, uid %s (harmless here; librdmacm would block)"
        % (len(ids), sum(i._unacked for i in ids),
           ", ".join(str(i.uid) for i in ids[:8]) + (" ..." if len(ids) > 8 else "")))


class CmId(Life):
    """An rdma_cm id (``struct rdma_cm_id``).

    ``CmId(channel, ps=PortSpace.TCP)`` creates it (CREATE_ID);
    ``CmId(None, ...)`` gives it a private channel and makes its calls blocking.
    """

    __slots__ = ()

    channel: "Channel[CmId]"

    def __init__(
        self,
        channel: "Optional[Channel[CmId]]" = None,
        ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP,
        *,
        qp_type: Optional[int] = None,
        context: Any = None,
    ) -> None:
        # Only what every id needs is set at birth (create_all); the rest (the kept answers,
        # the destination ...) reads as unset until used.  The port space, QP type and kind
        # are the id's Rules (shared).
        rules = _TCP_RC if ps is _PS_TCP and qp_type is None else rules_for(*port_space(ps, qp_type))
        sync = channel is None
        if channel.__class__ is not _SEEN_CHANNEL:
            channel = self._own_channel(channel)
        assert channel is not None  # for the type checker: _own_channel returns one
        if channel._live != _process.PID:
            channel._check()
        create_all((self,), channel, rules, context, sync)

    def _own_channel(self, channel: "Optional[Channel[CmId]]") -> "Channel[CmId]":
        """The channel of an id made with ``channel`` of another class than the last one: a
        private one for None (sync mode), any channel as given, else UsageError."""
        global _SEEN_CHANNEL
        if channel is None:
            channel = Channel()
            channel._wait_first = True
        elif isinstance(channel, Channel):
            _SEEN_CHANNEL = channel.__class__
        else:
            raise UsageError("channel must be an EventChannel or None, got %r" % (channel,))
        return channel

    # -- death (birth, CREATE_ID, is the record's: life.create_all)
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
        # One id's DESTROY_ID (many ids': destroy_all): the same transaction and leaving.
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                self._closed()
                raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
            ch._check()
        pool = ch._destroy_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_N_DESTROY_REPLY)
        try:  # no call of the id from here on; its events read meanwhile stay its
            self._call(_DESTROY_CALL, _DESTROY_CMD(_H_DESTROY, reply.address, self.handle, 0), "DESTROY_ID",
                       _NO_CONTEXT)
        except BaseException:
            pool.append(reply)
            if ch.closed:  # refused because closed: closing the channel destroyed it anyway
                self._closed()
            raise
        reported: int = reply.u32[0]
        pool.append(reply)
        groups = ch.registry.destroyed(self, not ch._reader_slot)  # the leaving of life.gone, for one id
        if ch._waits or ch._queued or ch._wait_first:
            ended(ch, [self.uid, *groups])
        if self._unacked:
            warnings.warn(unacked_warning([self], True), stacklevel=2)
        return reported

    def __enter__(self: _S) -> _S:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._state is not _DESTROYED and not self.channel.closed:
            self.destroy()

    # -- what the id is
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
        return self._sync

    @property
    def context(self) -> Any:
        """Anything the caller wants to keep with the id (``rdma_cm_id.context``)."""
        return self._context

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

    @property
    def destination(self) -> Optional[Address]:
        """The destination given to resolve_addr, as parsed (None before it); ``peer_addr`` is
        what the kernel says (a query)."""
        return self._peer()

    @property
    def qp_num(self) -> Optional[int]:
        """The QP number this id's connect() or accept() sent (None before either)."""
        return getattr(self, "_qpn", None)

    @property
    def request(self: _S) -> Optional[Event[_S]]:
        """The CONNECT_REQUEST event that made this id (None for an id made by CREATE_ID)."""
        return getattr(self, "_request", None)

    @property
    def listen_id(self: _S) -> Optional[_S]:
        """The listener a connection request's id came from (None for other ids)."""
        req = self.request
        return req.listen_id if req is not None else None

    @property
    def memberships(self) -> List[Membership]:
        """The multicast groups this id joined and did not leave."""
        return list(getattr(self, "_mcs", {}).values())

    def __repr__(self) -> str:
        return "<CmId uid=%d handle=%s %s %s>" % (self.uid, getattr(self, "handle", "?"), self.ps.name, self._state)

    # -- addresses and routes
    def bind_addr(self, addr: AddressLike) -> None:
        """Bind to a local address (BIND, or BIND_IP on old kernels): ``rdma_bind_addr``."""
        a = parse_address(addr)
        if self.channel.legacy:
            self._call(Call.BIND_ADDR, _CMD["BIND_IP"].encode(0, a.pack_in6(), self.handle), "BIND_IP", {"src": a})
        else:
            data = _CMD["BIND"].encode(self.handle, a.size, 0, a.pack_storage())
            self._call(Call.BIND_ADDR, data, "BIND", {"src": a})

    def resolve_addr(self, dst: AddressLike, *, src: Optional[AddressLike] = None,
                     timeout_ms: int = 2000) -> Optional[Event[Any]]:
        """Resolve ``dst`` (and bind to ``src`` or a routed source): ``rdma_resolve_addr``.

        Sends RESOLVE_ADDR (RESOLVE_IP on old kernels).  ADDR_RESOLVED or ADDR_ERROR
        follows on the channel; in sync mode this waits for it and raises
        :class:`EventError` on ADDR_ERROR.  A synchronous refusal (no route:
        ENETUNREACH, a non-local source: EADDRNOTAVAIL ...) raises :class:`KernelError`, and
        leaves the id where the kernel left it: an IDLE id is bound first, so a refusal after
        that bind (no route) leaves it ADDR_BOUND, one of the bind itself (a non-local
        source) IDLE.
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
            s = None
            data = _RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, self.handle, timeout_ms) + packed[2]
            command = "RESOLVE_ADDR"
        else:
            d, s, data, command = self._resolve_addr_command(dst, src, timeout_ms)
        self._dst = d
        self._call(_RESOLVE_ADDR_CALL, data, command, None if s is None else {"src": s, "dst": d})
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(_RESOLVE_ADDR_CALL, command, src=s, dst=d)
        return None

    def _resolve_addr_command(self, dst: AddressLike, src: Optional[AddressLike],
                              timeout_ms: int) -> Tuple[Address, Optional[Address], bytes, str]:
        """resolve_addr's arguments checked (UsageError, StateError, the ignored-source warning)
        and its command: ``(dst, src, bytes, command name)``."""
        ch = self.channel
        d = parse_address(dst)
        s = parse_address(src) if src is not None else None
        check_int("timeout_ms", timeout_ms, 0xFFFFFFFF)
        if s is not None and s.family != d.family:
            raise UsageError(
                "source %s and destination %s are of different families: the kernel requires one family" % (s, d))
        self._ready(Call.RESOLVE_ADDR)  # raises, saying why (closed, illegal)
        if s is not None and self._state is _ADDR_BOUND:
            try:
                bound = self.query_addr().src
            except KernelError:
                bound = None
            if bound is None or bound != s:
                warnings.warn(SourceIgnoredWarning(
                    "id is already bound (to %s): the kernel ignores the source %s" % (bound, s)), stacklevel=3)
        if ch.legacy:
            data = _CMD["RESOLVE_IP"].encode(s.pack_in6() if s is not None else bytes(28), d.pack_in6(),
                                             self.handle, timeout_ms)
            return d, s, data, "RESOLVE_IP"
        if s is None:
            packed = ch._packed_dst = (dst, d, _resolve_addr_tail(None, d))
            tail = packed[2]
        else:
            tail = _resolve_addr_tail(s, d)
        return d, s, _RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, self.handle, timeout_ms) + tail, "RESOLVE_ADDR"

    def resolve_route(self, timeout_ms: int = 2000) -> Optional[Event[Any]]:
        """Resolve the route to the destination (RESOLVE_ROUTE): ``rdma_resolve_route``.

        ROUTE_RESOLVED or ROUTE_ERROR follows (in sync mode: waited for; ROUTE_ERROR
        raises EventError).  Kernels from 6.1 on refuse ``timeout_ms == 0`` with EINVAL
        (5.10 takes it); pyrdmacm refuses it on every kernel, before the syscall, so that a
        program behaves alike on all of them.
        """
        if (timeout_ms.__class__ is not int and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool))) \
                or not 0 < timeout_ms <= 0xFFFFFFFF:
            raise UsageError("timeout_ms must be an int in 1..4294967295 (milliseconds), got %r" % (timeout_ms,))
        self._call(_RESOLVE_ROUTE_CALL, _ROUTE_CMD(_H_RESOLVE_ROUTE, self.handle, timeout_ms), "RESOLVE_ROUTE")
        if self.channel._wait_first and self.sync:
            return self._complete(_RESOLVE_ROUTE_CALL, "RESOLVE_ROUTE", dst=self._peer())
        return None

    def resolve_ib_service(self, service_id: Optional[int] = None, name: Optional[str] = None) -> Optional[Event[Any]]:
        """``rdma_resolve_addrinfo`` with an SA hint (RESOLVE_IB_SERVICE, Linux 6.17+): ask the
        InfiniBand SA for the service records of ``service_id`` and/or ``name`` on the bound
        device; ADDRINFO_RESOLVED (then :meth:`query_ib_service`, and resolve_route) or
        ADDRINFO_ERROR follows.  RoCE and iWARP have no SA: the kernel refuses (EOPNOTSUPP);
        older kernels do not know the command (EINVAL)."""
        sid, raw_name, flags = params.ib_service(service_id, name)
        data = _CMD["RESOLVE_IB_SERVICE"].encode(self.handle, 0, sid, raw_name, flags, 0)
        self._call(Call.RESOLVE_IB_SERVICE, data, "RESOLVE_IB_SERVICE")
        if self.channel._wait_first and self.sync:
            return self._complete(Call.RESOLVE_IB_SERVICE, "RESOLVE_IB_SERVICE")
        return None

    # -- connections: the active side
    def connect(self: _S, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
                **fields: Any) -> Optional[Event[_S]]:
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
        p, qp_num = conn_param(param, private_data, fields, _REQ[self._rules.kind is _DATAGRAM],
                               getattr(self._peer(), "family", abi.AF_INET), getattr(self.channel._t, "ece", True))
        cmd = (_CONNECT_DEFAULT(qp_num, self.handle) if p is wire.DEFAULT_CONN_PARAM
               else _CONNECT.encode(*wire.conn_fields(p, qp_num), self.handle, 0, *p.ece))
        self._qpn = qp_num
        self._call(_CONNECT_CALL, cmd, "CONNECT")
        if self.channel._wait_first and self.sync:  # a sync id's channel is its own
            ev: Event[_S] = self._complete(Call.CONNECT, "CONNECT", dst=self._peer())
            if ev.event is E.CONNECT_RESPONSE:
                self.establish()
            return ev
        return None

    def establish(self) -> None:
        """Send the RTU after CONNECT_RESPONSE (ACCEPT with the parameters marked invalid):
        ``rdma_establish``.  The peer then gets ESTABLISHED; this side gets no event (its
        state is CONNECTED at once).  Sync mode and the helpers do it themselves."""
        self._call(_ESTABLISH_CALL, _ESTABLISH(self.handle), "ACCEPT")

    # -- connections: the passive side
    def listen(self, backlog: int = 0) -> None:
        """Listen for connection requests (LISTEN): ``rdma_listen``.  ``backlog`` 0 takes the
        kernel's ``net.rdma_ucm.max_backlog``."""
        check_int("backlog", backlog, 0x7FFFFFFF)
        self._call(Call.LISTEN, _CMD["LISTEN"].encode(self.handle, backlog), "LISTEN")

    def get_request(self: _S, timeout: Optional[float] = None) -> Optional[_S]:
        """``rdma_get_request``: the id of the next connection request to this listener, or
        None when none came within ``timeout`` seconds (None: wait for ever).

        For a sync listener (``CmId(None)``), as in librdmacm: a listener with a channel
        gets its requests as CONNECT_REQUEST events of that channel."""
        self._allowed(Call.GET_REQUEST)
        if not self.sync:
            raise UsageError("get_request is for a sync listener (CmId(None)); a listener with a channel "
                             "gets its requests as CONNECT_REQUEST events of the channel")
        # none came in time: a later request is get_event's
        waiter = self.channel.wait_for(self.uid, Waiter(TAKES[(self.kind, Call.GET_REQUEST)]), timeout)
        if waiter.error is not None:
            raise waiter.error
        ev: Optional[Event[_S]] = waiter.event
        if ev is None:
            return None
        if not waiter.ok:
            raise EventError(ev, "LISTEN")
        return ev.id

    def accept(self: _S, param: Union[ConnParam, int, None] = None, private_data: Optional[bytes] = None,
               **fields: Any) -> Optional[Event[_S]]:
        """Accept a connection request (ACCEPT): ``rdma_accept``, on the id of a CONNECT_REQUEST.

        ``param`` as for :meth:`connect` (private data up to 196 bytes, 136 on a datagram
        id).  The id gets its own uid here (the kernel queues its events under it).  A
        connected id then gets ESTABLISHED when the peer's RTU comes; a datagram id is
        done at once (the SIDR REP is sent; no event follows).  If the kernel refuses the
        accept it rejects the request itself (the peer gets REJECTED 28): the id is FAILED.
        In sync mode (a request of a sync listener) the id first moves to a channel of its
        own, as librdmacm does, and this waits for ESTABLISHED.
        """
        ud = self._rules.kind is _DATAGRAM
        p, qp_num = conn_param(param, private_data, fields, _REP[ud],
                               getattr(self._peer(), "family", abi.AF_INET), getattr(self.channel._t, "ece", True))
        self._ready(Call.ACCEPT)
        if self.request is None:
            raise StateError("accept: id uid %d is no connection request's id" % self.uid)
        if self.sync:
            self.migrate(self.channel._private())
        ch = self.channel
        uid = ch.registry.register(self, ch)
        cmd = _CMD["ACCEPT"].encode(uid, *wire.conn_fields(p, qp_num), self.handle, 0, *p.ece)
        self._qpn = qp_num
        try:
            self._call(Call.ACCEPT, cmd, "ACCEPT")  # refused: the kernel rejected the request itself (FAILED)
        except BaseException:
            ch.registry.unregister(self)
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
        data = private_data_for(private_data, "SIDR_REP" if self._rules.kind is _DATAGRAM else "REJ", abi.AF_INET)
        code = params.reject_reason(reason)
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
        self._call(_DISCONNECT_CALL, _DISCONNECT(self.handle), "DISCONNECT")

    # -- queries (asked on first use, kept until the id moves: Answers)
    def query_addr(self, devices: Optional[Iterable[Any]] = None) -> AddrInfo:
        """QUERY ADDR (QUERY_ROUTE on old kernels): source, destination, device, port, pkey.

        The kernel names the device by index and node GUID; ``devices`` (the
        :class:`~pyrdmacm.devices.Device` records of one read of sysfs) names it without
        reading sysfs again, for a program that asks for many ids.  A device not in the list is looked up as without it."""
        return self._answers().query_addr(devices)

    def query_route(self, devices: Optional[Iterable[Any]] = None) -> RouteInfo:
        """QUERY_ROUTE: the device, the port, and the route's first path (its GIDs and pkey),
        in one command, as librdmacm reads them after ROUTE_RESOLVED.  Before resolve_route
        the kernel gives the GIDs the address resolution found (``num_paths`` 0; on RoCE the
        addresses' own); an id on no device has none.  ``devices``: as for
        :meth:`query_addr`.  Not kept: the route changes with the id."""
        return self._answers().query_route(devices)

    def query_gid(self) -> Tuple[Optional[Address], Optional[Address]]:
        """QUERY GID: source and destination as AF_IB addresses (the GIDs, pkey, service id)."""
        return self._answers().query_gid()

    def query_path(self) -> List[PathRecord]:
        """QUERY PATH: the path records of the resolved route (up to 6)."""
        return self._answers().query_path()

    def query_ib_service(self) -> List[ServiceRecord]:
        """QUERY IB_SERVICE (Linux 6.17+): the service records RESOLVE_IB_SERVICE found (up to
        six), [] when there are none (the kernel's ENODATA).  Older kernels refuse the option
        (ENOSYS)."""
        return self._answers().query_ib_service()

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
        """The RDMA device the id is bound to (QUERY ADDR, kept until the id moves), or None."""
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
        return self._answers().gid(0)

    @property
    def dgid(self) -> Optional[ipaddress.IPv6Address]:
        """The destination GID (QUERY GID), or None before resolve_addr's ADDR_RESOLVED."""
        return self._answers().gid(1)

    # -- multicast
    def join_multicast(self, addr: AddressLike, *, send_only: bool = False, context: Any = None) -> Membership:
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
        ch.registry.join(m)  # before the write: its event may come at once
        try:
            self._call(Call.JOIN_MULTICAST, data, command, {"dst": a})
        except BaseException:
            ch.registry.leave(m.uid)
            raise
        m.handle = reply.u32[0]
        self._memberships()[m.uid] = m
        if self.sync:
            self._complete(Call.JOIN_MULTICAST, command, membership=m, dst=a)
        return m

    # -- options
    def set_option(self, option: Union[abi.OptionId, abi.OptionIb], value: Any) -> None:
        """``rdma_set_option``: one of :class:`~pyrdmacm.abi.OptionId` (TOS: 0..255, set before
        resolve_route to take effect; REUSEADDR and AFONLY: bool, before bind/resolve/listen;
        ACK_TIMEOUT: 0..31, connected ids) or :class:`~pyrdmacm.abi.OptionIb` PATH (a list of
        :class:`~pyrdmacm.records.PathRecord` or raw ``ib_path_rec_data`` bytes, after
        ADDR_RESOLVED instead of resolve_route: the kernel queues ROUTE_RESOLVED).  The
        state rules are checked before the syscall."""
        call, level, payload = params.option(option, value)
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
        with (:meth:`QpAttr.to_pyverbs <pyrdmacm.QpAttr.to_pyverbs>` for a pyverbs QP:
        docs/pyverbs.md), and the numbers behind a data-plane failure (peer QPN, PSNs, MTU,
        timeout, retry counts)."""
        st = params.qp_state(qp_state)
        reply = ReplyBuffer(_CMD["INIT_QP_ATTR"].out)
        self._call(Call.INIT_QP_ATTR, _CMD["INIT_QP_ATTR"].encode(reply.address, self.handle, int(st)),
                   "INIT_QP_ATTR")
        return wire.decode_qp_attr(reply.view)

    def migrate(self, channel: "Channel[CmId]") -> int:
        """``rdma_migrate_id``: move the id, its memberships and its events not read yet to
        ``channel`` (MIGRATE_ID, written on the new channel).  Returns ``events_reported``:
        how many of its events the old channel delivered.  Events already read stay with
        whoever read them."""
        if not isinstance(channel, Channel):
            raise UsageError("migrate needs an EventChannel, got %r" % (channel,))
        old = self.channel
        if channel is old:
            raise UsageError("the id is on that channel already")
        self._ready(Call.MIGRATE)
        channel._check()
        mcs = self.memberships
        # registered on the new channel first: its events may arrive there at once
        channel.registry.adopt(self, mcs)
        reply = ReplyBuffer(_CMD["MIGRATE_ID"].out)
        try:
            channel.submit(_CMD["MIGRATE_ID"].encode(reply.address, self.handle, old.fileno()), "MIGRATE_ID",
                           dst=self._peer())
        except BaseException:
            channel.registry.disown(self, mcs)
            raise
        # an event the old channel's reader holds still finds the id (its grave)
        old.registry.moved(self, mcs, channel.registry, not old._reader_slot)
        self.channel = channel
        self._moves += 1  # after the channel: see Life._answer_dreq
        old._ended([self.uid] + [m.uid for m in mcs], "migrated")
        # the old channel's reader answered a DISCONNECTED of this id while MIGRATE_ID moved it,
        # and the kernel refused that DREP on the old fd: send it here (Life._answer_dreq)
        pending = getattr(self, "_drep", None)
        if pending:
            try:
                pending.pop()
            except IndexError:
                pass  # the reader took it after all
            else:
                try:
                    channel.submit(_DISCONNECT(self.handle), "DISCONNECT")
                except (KernelError, StateError):
                    pass
        reported: int = reply.u32[0]
        return reported

    def write_event(self, arg: int = 0, status: int = 0) -> None:
        """Queue a USER event for this id on its own channel (WRITE_CM_EVENT, Linux 6.17+):
        a wake-up for a thread or task reading the channel; ``event.param`` is
        ``(arg & 0xffffffff, arg >> 32)``.  Older kernels refuse it (EINVAL)."""
        status_u32, param = params.user_event(arg, status)
        self._alive("write_event")
        self.channel.submit(_CMD["WRITE_CM_EVENT"].encode(self.handle, 0, int(E.USER), status_u32, param),
                            "WRITE_CM_EVENT")

    # -- the sync wait of every verb
    def _complete(self, call: Call, command: str, membership: Optional[Membership] = None,
                  **ctx: Any) -> Event[Any]:
        """Sync mode: wait for this id's outcome event (:data:`~pyrdmacm.state.OUTCOMES`), or
        that of its multicast ``membership``; raise on a failure event."""
        uid = self.uid if membership is None else membership.uid
        # interrupted (a signal's handler raised): its event goes to get_event
        waiter = self.channel.wait_for(uid, Waiter(TAKES[(self._rules.kind, call)]))
        if waiter.error is not None:
            raise waiter.error
        ev: Event[Any] = waiter.event
        if not waiter.ok or ev.status:
            raise EventError(ev, command, netdev=None, **ctx)
        return ev


if TYPE_CHECKING:  # pragma: no cover - mypy checks here that a CmId is what the channel asks of an id
    def _is_a_channel_id(cm_id: CmId) -> ChannelId:
        return cm_id
