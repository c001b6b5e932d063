"""CM ids: librdmacm's verbs on one kernel id (``struct rdma_cm_id``).

Theory of operation
-------------------
A :class:`CmId` is one kernel id (``rdma_create_id``), registered on its
:class:`~pyrdmacm.channel.EventChannel` under a uid unique in the process.  Its
state follows the kernel's, from the calls made and the events read, as the
table of :mod:`pyrdmacm.state` says; an illegal call raises
:class:`~pyrdmacm.errors.StateError` before any syscall.  Every call goes the
same way (:meth:`CmId._call`): check the arguments (UsageError), ask the table
for the new state, set it, write the command (:mod:`pyrdmacm.wire` encodes it,
the channel's ``submit`` writes it), and put the old state back if the kernel
refuses -- so an event that another thread reads while the writer is still in
``write()`` finds the id where the command left it.  ``resolve_addr``,
``resolve_route`` and ``destroy`` are the hot paths of :mod:`pyrdmacm._hot`,
which do the same written out.

librdmacm queries the kernel (QUERY ADDR, GID, PATH) after every event;
pyrdmacm asks on first use of what they return (``local_addr``, ``device``,
``sgid``, ``query_path()`` ...) and caches the answer until the id's state
changes: the same answers, without the cost for callers that never ask.

With no channel (``CmId(None, ...)``), an id gets a private channel and its
calls block until their outcome (librdmacm's synchronous mode; the outcome is
:data:`pyrdmacm.state.OUTCOMES`'): a failure event raises
:class:`~pyrdmacm.errors.EventError` with the real errno and the event attached.
"""

from __future__ import annotations

import ipaddress
import warnings
from typing import TYPE_CHECKING, Any, Callable, List, Optional, Tuple, TypeVar, Union

from . import _hot, abi, wire
from .addr import AF_IB, Address, AddressLike, parse_address
from .errors import EventError, KernelError, StateError, UsageError
from .events import Event
from .records import AddrInfo, DeviceRef, PathRecord
from .state import OUTCOMES, Call, Kind, State, kind_of, next_state, refusal

if TYPE_CHECKING:  # pragma: no cover
    from .channel import EventChannel

__all__ = ["CmId", "SourceIgnoredWarning"]

E = abi.CmEventType
_PortSpace = abi.PortSpace
_PS_TCP = abi.PortSpace.TCP
_QP_RC = abi.QpType.RC
_DESTROYED = State.DESTROYED
_IDLE = State.IDLE
_ADDR_BOUND = State.ADDR_BOUND
_CMD = wire.COMMAND
_R = TypeVar("_R")


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


def _private_data(value: Any, limit: int = abi.RDMA_MAX_PRIVATE_DATA) -> bytes:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise UsageError("private_data must be bytes, got %s" % type(value).__name__)
    data = bytes(value)
    if len(data) > limit:
        raise UsageError("private_data is %d bytes; the CM carries at most %d" % (len(data), limit))
    return data


class CmId:
    """An rdma_cm id (``struct rdma_cm_id``).

    ``CmId(channel, ps=PortSpace.TCP)`` creates it (CREATE_ID);
    ``CmId(None, ...)`` gives it a private channel and makes its calls blocking.
    """

    __slots__ = (
        "channel",
        "handle",
        "uid",
        "_ps",
        "_qp_type",
        "_sync",
        "_state",
        "_cache",
        "_dst",
        "_unacked",
        "_context",
        "__weakref__",
    )

    channel: "EventChannel"
    handle: int
    uid: int
    _state: State
    _unacked: int
    _cache: Optional[List[Any]]
    _dst: Optional[Address]

    def __init__(
        self,
        channel: Optional["EventChannel"] = None,
        ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP,
        *,
        qp_type: Optional[int] = None,
        context: Any = None,
    ) -> None:
        # Only what every id needs is set here.  What most ids share is not stored: ``ps``,
        # ``qp_type``, ``sync`` and ``context`` read as TCP, RC, False and None unless set;
        # ``_cache`` (the query answers, see query_addr) and ``_dst`` are set on first use.
        from .channel import EventChannel

        if ps is not _PS_TCP or qp_type is not None:
            ps, qp = port_space(ps, qp_type)
        else:
            qp = _QP_RC
        if channel is None:
            channel = EventChannel()
            self._sync = True
            channel._wait_first = True
            channel._fast = 0
        elif channel.__class__ is not EventChannel and not isinstance(channel, EventChannel):
            raise UsageError("channel must be an EventChannel or None, got %r" % (channel,))
        if channel._live != _hot.PID:
            channel._check()
        if ps is not _PS_TCP or qp is not _QP_RC:
            self._ps = ps
            self._qp_type = qp
        if context is not None:
            self._context = context
        _hot.create(self, channel, ps, qp)

    # -- what most ids share, stored only where it differs
    @property
    def ps(self) -> abi.PortSpace:
        """The port space given to the constructor (``PortSpace.TCP`` by default)."""
        return getattr(self, "_ps", _PS_TCP)

    @property
    def qp_type(self) -> abi.QpType:
        """The QP type: RC for TCP, UD for UDP and IPOIB, the one given for IB."""
        return getattr(self, "_qp_type", _QP_RC)

    @property
    def kind(self) -> Kind:
        """How the id connects (:class:`~pyrdmacm.state.Kind`): its QP type decides."""
        return kind_of(self.ps, self.qp_type)

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
    def _transition(self, call: Call) -> State:
        """The state ``call`` leads to; StateError (before any syscall) if it is illegal."""
        st = self._state
        if self.channel.closed:
            raise StateError("%s: the id's event channel is closed (closing it destroyed the id)" % call)
        new = next_state(self.kind, st, call)
        if new is None:
            raise StateError("%s (uid %d)" % (refusal(self.kind, st, call), self.uid))
        return new

    def _call(self, call: Call, data: bytes, command: str, **ctx: Any) -> State:
        """Write the command of ``call``: state checked and set before the write, put back if
        the kernel refuses it.  Returns the new state."""
        ch = self.channel
        new = self._transition(call)
        ch._check()
        old = self._state
        self._state = new
        self._cache = None
        try:
            ch.submit(data, command, **ctx)
        except BaseException:
            if self._state is new:
                self._state = old
            raise
        return new

    def _complete(self, call: Call, command: str, **ctx: Any) -> Event:
        """Sync mode: wait for this id's outcome event (:data:`~pyrdmacm.state.OUTCOMES`); raise
        on a failure event."""
        outcome = OUTCOMES[(self.kind, call)]
        while True:
            ev = self.channel.get_event(None)
            if ev is None or ev.id is not self or ev.event not in outcome.events:
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

    resolve_addr = _hot.resolve_addr
    resolve_addr.__doc__ = """Resolve ``dst`` (and bind to ``src`` or a routed source): ``rdma_resolve_addr``.

    Sends RESOLVE_ADDR (RESOLVE_IP on old kernels).  ADDR_RESOLVED or ADDR_ERROR
    follows on the channel; in sync mode this waits for it and raises
    :class:`EventError` on ADDR_ERROR.  A synchronous refusal (no route:
    ENETUNREACH, a non-local source: EADDRNOTAVAIL ...) raises :class:`KernelError`.
    On an id that is already bound the kernel ignores ``src``; a different ``src``
    is warned about.  ``src`` and ``timeout_ms`` are keyword-only (C's order is
    src, dst: a positional mistake must not resolve the source).
    """

    def _resolve_addr(self, dst: AddressLike, src: Optional[AddressLike], timeout_ms: int) -> Optional[Event]:
        """The reference path of ``resolve_addr``: every case, every check spelled out."""
        ch = self.channel
        cached = ch._packed_dst
        if dst is cached[0] and src is None:
            d: Address = cached[1]
            s = None
            packed: Optional[Tuple[Any, Any, bytes]] = cached
        else:
            d = parse_address(dst)
            s = parse_address(src) if src is not None else None
            packed = None
        _u("timeout_ms", timeout_ms, 0xFFFFFFFF)
        if s is not None and s.family != d.family:
            raise UsageError(
                "source %s and destination %s are of different families: the kernel requires one family" % (s, d)
            )
        self._transition(Call.RESOLVE_ADDR)  # raises, saying why (closed, illegal)
        ch._check()  # raises in a forked child
        if s is not None and self._state is _ADDR_BOUND:
            bound = self._bound_src()
            if bound is None or bound != s:
                warnings.warn(
                    SourceIgnoredWarning("id is already bound (to %s): the kernel ignores the source %s" % (bound, s)),
                    stacklevel=3,
                )
        if ch.legacy:
            data = _CMD["RESOLVE_IP"].encode(s.pack_in6() if s is not None else bytes(28), d.pack_in6(),
                                             self.handle, timeout_ms)
            command = "RESOLVE_IP"
        else:
            if s is None:
                # many ids resolving one destination: its part of the command is packed once per channel
                if packed is None:
                    packed = ch._packed_dst = (dst, d, _hot.resolve_addr_tail(None, d))
                tail = packed[2]
            else:
                tail = _hot.resolve_addr_tail(s, d)
            data = _hot._RESOLVE_ADDR_HEAD(_hot.H_RESOLVE_ADDR, self.handle, timeout_ms) + tail
            command = "RESOLVE_ADDR"
        self._dst = d
        self._call(Call.RESOLVE_ADDR, data, command, src=s, dst=d)
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(Call.RESOLVE_ADDR, command, src=s, dst=d)
        return None

    resolve_route = _hot.resolve_route
    resolve_route.__doc__ = """Resolve the route to the destination (RESOLVE_ROUTE): ``rdma_resolve_route``.

    ROUTE_RESOLVED or ROUTE_ERROR follows (in sync mode: waited for; ROUTE_ERROR
    raises EventError).  The kernel refuses ``timeout_ms == 0`` with EINVAL; so do
    we, before the syscall.
    """

    def _resolve_route(self, timeout_ms: int) -> Optional[Event]:
        """The reference path of ``resolve_route``."""
        _u("timeout_ms", timeout_ms, 0xFFFFFFFF, 1)
        self._call(Call.RESOLVE_ROUTE, _CMD["RESOLVE_ROUTE"].encode(self.handle, timeout_ms), "RESOLVE_ROUTE",
                   dst=self._peer())
        if self.channel._wait_first and self.sync:
            return self._complete(Call.RESOLVE_ROUTE, "RESOLVE_ROUTE", dst=self._peer())
        return None

    def listen(self, backlog: int = 0) -> None:
        """Listen for connection requests (LISTEN): ``rdma_listen``.  ``backlog`` 0 takes the
        kernel's ``net.rdma_ucm.max_backlog``."""
        _u("backlog", backlog, 0x7FFFFFFF)
        self._call(Call.LISTEN, _CMD["LISTEN"].encode(self.handle, backlog), "LISTEN")

    def connect(
        self,
        qp_num: int = 0,
        private_data: bytes = b"",
        *,
        responder_resources: int = 0,
        initiator_depth: int = 0,
        retry_count: int = 7,
        rnr_retry_count: int = 7,
        flow_control: int = 0,
        srq: int = 0,
        qkey: int = 0,
        ece: Tuple[int, int] = (0, 0),
    ) -> Optional[Event]:
        """Connect to the resolved destination (CONNECT): ``rdma_connect``.

        Without libibverbs there is no QP here: ``qp_num`` names the QP the
        caller made elsewhere (the CM carries it to the peer).
        """
        data = _private_data(private_data)
        qp_num = _u("qp_num", qp_num, 0xFFFFFF)
        responder_resources = _u("responder_resources", responder_resources, 0xFF)
        initiator_depth = _u("initiator_depth", initiator_depth, 0xFF)
        retry_count = _u("retry_count", retry_count, 7)
        rnr_retry_count = _u("rnr_retry_count", rnr_retry_count, 7)
        flow_control = _u("flow_control", flow_control, 1)
        srq = _u("srq", srq, 1)
        qkey = _u("qkey", qkey, 0xFFFFFFFF)
        if not isinstance(ece, tuple) or len(ece) != 2:
            raise UsageError("ece must be a (vendor_id, attr_mod) pair of ints, got %r" % (ece,))
        vendor_id = _u("ece vendor_id", ece[0], 0xFFFFFFFF)
        attr_mod = _u("ece attr_mod", ece[1], 0xFFFFFFFF)
        cmd = _CMD["CONNECT"].encode(
            qp_num, qkey, data, len(data), srq, responder_resources, initiator_depth, flow_control,
            retry_count, rnr_retry_count, 1, self.handle, 0, vendor_id, attr_mod,
        )
        self._call(Call.CONNECT, cmd, "CONNECT", dst=self._peer())
        if self.channel._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(Call.CONNECT, "CONNECT", dst=self._peer())
        return None

    def disconnect(self) -> None:
        """Disconnect (DISCONNECT): ``rdma_disconnect``; sends a DREQ, or the DREP once the
        peer's DREQ came (the DISCONNECTED event)."""
        self._call(Call.DISCONNECT, _CMD["DISCONNECT"].encode(self.handle), "DISCONNECT", dst=self._peer())

    destroy = _hot.destroy
    destroy.__doc__ = """Destroy the id (DESTROY_ID): ``rdma_destroy_id``.  Returns ``events_reported``.

    Never blocks: events not yet acked are reported with an
    :class:`UnackedEventsWarning` (librdmacm would wait for them for ever).
    """

    def __enter__(self) -> "CmId":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._state is not _DESTROYED and not self.channel.closed:
            self.destroy()

    def _ack(self, event: Event) -> None:
        # Event.ack counts down _unacked itself (one call less per event); kept for callers
        # that ack through the id
        if self._unacked <= 0:
            raise StateError("ack: every event of id uid %d was already acked" % self.uid)
        self._unacked -= 1

    def _peer(self) -> Optional[Address]:
        """The destination given to resolve_addr (None before it)."""
        try:
            return self._dst
        except AttributeError:
            return None

    def _answers(self) -> List[Any]:
        """The cached query answers ``[addr info, gids]``, until the next state change or
        event (which drop the list: ``_cache = None``); made on first use."""
        try:
            cache = self._cache
        except AttributeError:
            cache = None
        if cache is None:
            cache = self._cache = [None, None]
        return cache

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
        return self.query_addr().device

    @property
    def port_num(self) -> int:
        return self.query_addr().port_num

    @property
    def pkey(self) -> int:
        return self.query_addr().pkey

    @property
    def sgid(self) -> Optional[ipaddress.IPv6Address]:
        s = self.query_gid()[0]
        return s.ip if s is not None and s.family == AF_IB else None  # type: ignore[return-value]

    @property
    def dgid(self) -> Optional[ipaddress.IPv6Address]:
        d = self.query_gid()[1]
        return d.ip if d is not None and d.family == AF_IB else None  # type: ignore[return-value]


def request_id(channel: "EventChannel", handle: int, listener: CmId) -> CmId:
    """The id the kernel made for an incoming connection request (CONNECT_REQUEST's ``id``).

    It has no uid yet (0): the kernel queues no event for it until ACCEPT gives it
    one, and then it is registered; until then it is not in the channel's registry.
    """
    obj: CmId = object.__new__(CmId)
    obj.channel, obj.handle, obj.uid = channel, handle, 0
    if listener.ps is not _PS_TCP or listener.qp_type is not _QP_RC:
        obj._ps, obj._qp_type = listener.ps, listener.qp_type
    if listener.context is not None:
        obj._context = listener.context
    obj._state, obj._unacked = State.REQUEST, 0
    return obj


def create_reference(cm_id: CmId, channel: "EventChannel", ps: int, qp: int) -> CmId:
    """The reference path of CREATE_ID (:func:`pyrdmacm._hot.create` is the one used): the
    command from :mod:`pyrdmacm.wire`, written with the channel's ``submit``."""
    from ._device import ReplyBuffer

    cm_id.channel = channel
    cm_id._state = _IDLE
    cm_id._unacked = 0
    reply = ReplyBuffer(_CMD["CREATE_ID"].out)
    uid = cm_id.uid = _hot.next_uid()
    channel.submit(_CMD["CREATE_ID"].encode(uid, reply.address, ps, qp, b""), "CREATE_ID")
    cm_id.handle = reply.u32[0]
    channel._ids[uid] = cm_id
    return cm_id


def destroy_reference(cm_id: CmId) -> int:
    """The reference path of DESTROY_ID (:func:`pyrdmacm._hot.destroy` is the one used)."""
    from ._device import ReplyBuffer

    if cm_id._state is _DESTROYED:
        raise StateError("destroy: id uid %d is already destroyed" % cm_id.uid)
    ch = cm_id.channel
    ch._check()
    reply = ReplyBuffer(_CMD["DESTROY_ID"].out)
    old = cm_id._state
    cm_id._state = _DESTROYED
    ch._ids.pop(cm_id.uid, None)
    try:
        ch.submit(_CMD["DESTROY_ID"].encode(reply.address, cm_id.handle, 0), "DESTROY_ID")
    except BaseException:
        if not ch.closed:
            cm_id._state = old
            ch._ids[cm_id.uid] = cm_id
        raise
    if cm_id._unacked:
        warnings.warn(ch._unacked_warning([cm_id], True), stacklevel=2)
    reported: int = reply.u32[0]
    return reported
