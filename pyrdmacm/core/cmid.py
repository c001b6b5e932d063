"""CM ids: librdmacm's verbs on one kernel id (``struct rdma_cm_id``).

Theory of operation
-------------------
A :class:`CmId` is one kernel id (``rdma_create_id``), registered on its
:class:`~pyrdmacm.core.event_channel.EventChannel` under a uid unique in the process.  Its
state follows the kernel's, from the calls made and the events read, as the
table of :mod:`pyrdmacm.state` says (a CmId is a :class:`~pyrdmacm.core.life.Life`, whose
methods alone assign its state); an illegal call raises
:class:`~pyrdmacm.errors.StateError` before any syscall.  Every call goes the
same way: check the arguments (UsageError), encode the command (:mod:`pyrdmacm.wire`),
and make the call (``Life._call``: the id moves, the channel's transport writes the
command, and the id moves back if the kernel refuses) -- so an event that another
thread reads while the writer is still in ``write()`` finds the id where the command
left it.

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

import struct
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, TypeVar, Union

from . import process as _process
from .. import abi, wire
from .channel import Channel
from .connect import Connections
from .life import Lifecycle
from .membership import Membership
from .queries import Queries
from .params import OPTIONS, check_int, port_space
from ..abi.codec import CODECS
from .device import ReplyBuffer
from ..addr import Address, AddressLike, parse_address
from ..errors import EventError, KernelError, StateError, UsageError
from .events import Event
from .registry import ChannelId
from .router import TAKES, Waiter
from ..state import Call, Kind, State, rules_for

from ..records import QpAttr

__all__ = ["CmId", "SourceIgnoredWarning"]

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
#: the class of the last channel an id was made on (EventChannel, as a rule): the constructor's
#: check is then one comparison
_SEEN_CHANNEL: Any = None


class SourceIgnoredWarning(UserWarning):
    """resolve_addr was given a source, but the id was already bound: the kernel ignores it."""


class CmId(Connections, Queries, Lifecycle):
    """An rdma_cm id (``struct rdma_cm_id``).

    ``CmId(channel, ps=PortSpace.TCP)`` creates it (CREATE_ID);
    ``CmId(None, ...)`` gives it a private channel and makes its calls blocking.
    """

    __slots__ = (
        "_sync",
        "_dst",
        "_context",
        "_mcs",
        "__weakref__",
    )

    channel: "Channel[CmId]"
    handle: int
    uid: int
    _dst: Optional[Address]
    _mcs: Dict[int, "Membership"]

    def __init__(
        self,
        channel: "Optional[Channel[CmId]]" = None,
        ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP,
        *,
        qp_type: Optional[int] = None,
        context: Any = None,
    ) -> None:
        # Only what every id needs is set here: ``sync`` and ``context`` read as False and
        # None unless set; ``_cache`` (the query answers, see query_addr) and ``_dst`` are
        # set on first use.  The port space, QP type and kind are the id's Rules (shared).
        rules = _TCP_RC if ps is _PS_TCP and qp_type is None else rules_for(*port_space(ps, qp_type))
        if channel.__class__ is not _SEEN_CHANNEL:
            channel = self._own_channel(channel)
        assert channel is not None  # for the type checker: _own_channel returns one
        if channel._live != _process.PID:
            channel._check()
        if context is not None:
            self._context = context
        self._create(channel, rules)

    def _own_channel(self, channel: "Optional[Channel[CmId]]") -> "Channel[CmId]":
        """The channel of an id made with ``channel`` of another class than the last one: a
        private one for None (sync mode), any channel as given, else UsageError."""
        global _SEEN_CHANNEL
        if channel is None:
            channel = Channel()
            self._sync = True
            channel._wait_first = True
        elif isinstance(channel, Channel):
            _SEEN_CHANNEL = channel.__class__
        else:
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

    # -- the general path of every call: Life._call (check, move, write, undo on refusal)
    def _complete(self, call: Call, command: str, membership: "Optional[Membership]" = None,
                  **ctx: Any) -> Event:
        """Sync mode: wait for this id's outcome event (:data:`~pyrdmacm.state.OUTCOMES`), or
        that of its multicast ``membership``; raise on a failure event."""
        ch = self.channel
        uid = self.uid if membership is None else membership.uid
        # interrupted (a signal's handler raised): its event goes to get_event
        waiter = ch.wait_for(uid, Waiter(TAKES[(self.kind, call)]))
        if waiter.error is not None:
            raise waiter.error
        ev: Event = waiter.event
        if not waiter.ok or ev.status:
            raise EventError(ev, command, netdev=None, **ctx)
        return ev

    # -- commands
    def bind_addr(self, addr: AddressLike) -> None:
        """Bind to a local address (BIND, or BIND_IP on old kernels): ``rdma_bind_addr``."""
        a = parse_address(addr)
        if self.channel.legacy:
            data = _CMD["BIND_IP"].encode(0, a.pack_in6(), self.handle)
            self._call(Call.BIND_ADDR, data, "BIND_IP", {"src": a})
        else:
            data = _CMD["BIND"].encode(self.handle, a.size, 0, a.pack_storage())
            self._call(Call.BIND_ADDR, data, "BIND", {"src": a})

    def resolve_addr(self, dst: AddressLike, *, src: Optional[AddressLike] = None,
                     timeout_ms: int = 2000) -> Optional[Event]:
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
                "source %s and destination %s are of different families: the kernel requires one family" % (s, d)
            )
        self._ready(Call.RESOLVE_ADDR)  # raises, saying why (closed, illegal)
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
                packed = ch._packed_dst = (dst, d, resolve_addr_tail(None, d))
                tail = packed[2]
            else:
                tail = resolve_addr_tail(s, d)
            data = _RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, self.handle, timeout_ms) + tail
            command = "RESOLVE_ADDR"
        return d, s, data, command

    def resolve_route(self, timeout_ms: int = 2000) -> Optional[Event]:
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

    def listen(self, backlog: int = 0) -> None:
        """Listen for connection requests (LISTEN): ``rdma_listen``.  ``backlog`` 0 takes the
        kernel's ``net.rdma_ucm.max_backlog``."""
        check_int("backlog", backlog, 0x7FFFFFFF)
        self._call(Call.LISTEN, _CMD["LISTEN"].encode(self.handle, backlog), "LISTEN")

    # -- connections: parameters
    @property
    def destination(self) -> Optional[Address]:
        """The destination given to resolve_addr, as parsed (None before it); ``peer_addr`` is
        what the kernel says (a query)."""
        return self._peer()

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

    def _memberships(self) -> Dict[int, "Membership"]:
        try:
            return self._mcs
        except AttributeError:
            self._mcs = {}
            return self._mcs

    def _group_uids(self) -> List[int]:
        """The uids of the groups it joined and did not leave (the channel's registry asks)."""
        return list(getattr(self, "_mcs", ()))

    def _drop_group(self, uid: int) -> None:
        """The membership ``uid`` ended (left, or its channel closed)."""
        getattr(self, "_mcs", {}).pop(uid, None)

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
        spec = OPTIONS.get((type(option), option)) if isinstance(option, (abi.OptionId, abi.OptionIb)) else None
        if spec is None:
            raise UsageError("unknown option %r: use OptionId.TOS, REUSEADDR, AFONLY, ACK_TIMEOUT or OptionIb.PATH"
                             % (option,))
        call, level, encode = spec
        payload = encode(value)
        if call is Call.SET_REUSEADDR and not value:
            call = Call.CLEAR_REUSEADDR
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
        try:
            st = abi.QpState(check_int("qp_state", qp_state, 0xFFFFFFFF))
        except ValueError:
            raise UsageError("qp_state %r: use a QpState (RESET 0 .. ERR 6)" % (qp_state,)) from None
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
        self._moves = getattr(self, "_moves", 0) + 1  # after the channel: see Connections._answer_dreq
        old._ended([self.uid] + [m.uid for m in mcs], "migrated")
        # the old channel's reader answered a DISCONNECTED of this id while MIGRATE_ID moved it,
        # and the kernel refused that DREP on the old fd: send it here (Connections._answer_dreq)
        pending = getattr(self, "_drep", None)
        if pending:
            try:
                pending.pop()
            except IndexError:
                pass  # the reader took it after all
            else:
                try:
                    channel.submit(wire.DISCONNECT(self.handle), "DISCONNECT")
                except (KernelError, StateError):
                    pass
        reported: int = reply.u32[0]
        return reported

    def write_event(self, arg: int = 0, status: int = 0) -> None:
        """Queue a USER event for this id on its own channel (WRITE_CM_EVENT, Linux 6.17+):
        a wake-up for a thread or task reading the channel; ``event.param`` is
        ``(arg & 0xffffffff, arg >> 32)``.  Older kernels refuse it (EINVAL)."""
        arg = check_int("arg", arg, 0xFFFFFFFFFFFFFFFF)
        status = check_int("status", status, 0x7FFFFFFF, -0x80000000)
        self._alive("write_event")
        param = struct.pack("<Q", arg).ljust(_WRITE_EVENT_PARAM, b"\0")
        self.channel.submit(_CMD["WRITE_CM_EVENT"].encode(self.handle, 0, int(E.USER), status & 0xFFFFFFFF, param),
                            "WRITE_CM_EVENT")


    def __enter__(self) -> "CmId":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._state is not _DESTROYED and not self.channel.closed:
            self.destroy()

    def _spawn(self, channel: "Channel[CmId]", handle: int) -> "CmId":
        """The id the kernel made for a connection request to this listener (its ``handle``,
        on ``channel``).  It has no uid yet (0): the kernel queues no event for it until
        ACCEPT gives it one, and then it is registered; until then it is not in the
        channel's registry."""
        obj: CmId = object.__new__(CmId)
        obj.channel, obj.handle, obj.uid = channel, handle, 0
        obj._born(self._rules, State.REQUEST)
        context = self.context
        if context is not None:
            obj._context = context
        if self.sync:
            obj._sync = True
        return obj

    def _peer(self) -> Optional[Address]:
        """The destination given to resolve_addr (None before it)."""
        try:
            return self._dst
        except AttributeError:
            return None

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
            sid = check_int("service_id", service_id, 0xFFFFFFFFFFFFFFFF)
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


_WRITE_EVENT_PARAM = CODECS["rdma_ucm_write_cm_event"].size - CODECS["rdma_ucm_write_cm_event"].offset("param")


_H_RESOLVE_ADDR = _CMD["RESOLVE_ADDR"].header
_RESOLVE_ADDR_HEAD, resolve_addr_tail = wire.RESOLVE_ADDR_HEAD, wire.resolve_addr_tail
_ESTABLISH, _CONNECT_DEFAULT, _CONNECT, _ACCEPT = wire.ESTABLISH, wire.CONNECT_DEFAULT, _CMD["CONNECT"], _CMD["ACCEPT"]
_ROUTE_CMD, _H_RESOLVE_ROUTE = _CMD["RESOLVE_ROUTE"].pack, _CMD["RESOLVE_ROUTE"].header
_RESOLVE_ADDR_CALL, _RESOLVE_ROUTE_CALL = Call.RESOLVE_ADDR, Call.RESOLVE_ROUTE

if TYPE_CHECKING:  # pragma: no cover - mypy checks here that a CmId is what the channel asks of an id
    def _is_a_channel_id(cm_id: CmId) -> ChannelId:
        return cm_id
