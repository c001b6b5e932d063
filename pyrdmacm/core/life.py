"""An id's life: its record and the moves that change it (:class:`Life`, :func:`ack`).

:mod:`pyrdmacm.state` says what a call or an event does (pure code, the one table);
:class:`Life` applies it: its methods and :func:`ack` are the only code that assigns an id's
state, its count of events not acknowledged and its kept query answers.  The one I/O a
move starts is a call's write, through the channel's writer, between the id's move and its
undo (:meth:`Life._call`); birth, the first move, is CREATE_ID's (:meth:`Life._create`).
:class:`~pyrdmacm.core.cmid.CmId`, a Life, has the verbs that make the calls, death
(DESTROY_ID) among them; the channel's registry (uid -> id) is written by
:class:`~pyrdmacm.core.registry.Registry` alone.
"""

from __future__ import annotations

import errno
from typing import Any, Dict, List, Optional, TypeVar, Union

from . import process as _process
from .device import ReplyBuffer
from .membership import Membership
from .queries import Answers
from .. import wire
from ..abi import CmEventType as E
from ..addr import Address
from ..errors import StateError
from ..state import AFTER_REFUSAL, Call, Rules, State, after_event, refusal

#: an event (life.py names no event class: events.py imports ack from here)
_E = TypeVar("_E")
_L = TypeVar("_L", bound="Life")


__all__ = ["Life", "ack"]

_IDLE, _DESTROYED = State.IDLE, State.DESTROYED
_DISCONNECT = wire.DISCONNECT
_CREATE = wire.COMMAND["CREATE_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_new_object = object.__new__


class Life:
    """An id's record -- its :class:`Rules`, its state, how many of its events are not
    acknowledged, its cached query answers -- and the moves that change it.

    :class:`~pyrdmacm.core.cmid.CmId` is a Life; the methods below and :func:`ack` are the only
    code that assigns these four (h11's rule: one owner writes the state machine).  A call
    is one transaction (:meth:`_call`): the id moves before its command is written, so that
    an event another thread reads meanwhile finds the id where the command left it, and back
    when the kernel refuses the command; an event moves it as the table says
    (:meth:`_on_event`).
    """

    __slots__ = ("channel", "uid", "handle", "_rules", "_state", "_unacked", "_cache", "_dst", "_sync", "_context",
                 "_qpn", "_request", "_mcs", "_drep", "_moves", "__weakref__")

    #: the id's channel (a :class:`~pyrdmacm.core.channel.Channel`: its write sends the commands)
    channel: Any
    #: what the kernel echoes in each event of the id (unique in the process; 0 for a
    #: connection request's id until ACCEPT gives it one)
    uid: int
    #: the kernel's handle of the id
    handle: int

    _rules: Rules
    _state: State
    _unacked: int
    #: the id's kept query answers (made on its first question), until it moves
    _cache: Optional[Answers]
    #: True for an id of ``CmId(None)``: a channel of its own, blocking calls
    _sync: bool
    #: the caller's ``context``
    _context: Any
    #: how many times migrate() moved the id
    _moves: int
    # Unset on most ids (read through getattr, or AttributeError caught: a miss costs about
    # 3,000 instructions, so nothing read on every id's or connection's path is here):
    #: the destination given to resolve_addr (unset before it)
    _dst: Address
    #: the QP number connect() or accept() sent
    _qpn: int
    #: the CONNECT_REQUEST event that made this id (an :class:`~pyrdmacm.core.events.Event`,
    #: whose module imports this one)
    _request: Any
    #: the multicast groups it joined and did not leave, by uid
    _mcs: Dict[int, Membership]
    #: a DREP the old channel's reader could not send during migrate() (see :meth:`_answer_dreq`)
    _drep: List[bool]

    def _create(self: _L, channel: Any, rules: Rules, context: Any = None, sync: bool = False) -> _L:
        """Birth: CREATE_ID for this new id (checked, not yet created) on a live ``channel``,
        of the port space and QP type of ``rules``; the id is IDLE, and registered (uid ->
        id) once the kernel made it.  The one place that writes CREATE_ID (``CmId()``,
        ``EventChannel.create_id`` and ``create_ids`` end here).  Returns the id."""
        self.channel = channel
        self._rules = rules
        self._state = _IDLE
        self._unacked = 0
        self._cache = None
        self._context = context
        self._sync = sync
        self._moves = 0
        pool = channel._create_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_N_CREATE_REPLY)
        uid = self.uid = _process.next_uid()
        data = _CREATE_CMD(_H_CREATE, uid, reply.address, rules.ps, rules.qp_type, b"")
        try:
            n = channel._write(data)
        except OSError as e:
            pool.append(reply)
            raise channel._refused(e, "CREATE_ID", {}) from None
        if n != _N_CREATE:
            pool.append(reply)
            raise channel._short(n, data, "CREATE_ID")
        self.handle = reply.u32[0]
        pool.append(reply)
        channel.registry.add(uid, self)
        return self

    def _ready(self, call: Call) -> None:
        """StateError, before any syscall, unless ``call`` may be made now: the id's channel
        open (and this process's), the call legal in the id's state."""
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                raise StateError("%s: the id's event channel is closed (closing it destroyed the id)" % call)
            ch._check()
        self._allowed(call)

    def _alive(self, call: str) -> None:
        """StateError for a destroyed id (the kernel reuses its handle for new ids), before any
        kept answer or syscall; the channel's faults as :meth:`Channel._check` says."""
        if self._state is _DESTROYED:
            raise StateError("%s on a destroyed id (uid %d): create a new id" % (call, self.uid))
        self.channel._check()

    def _peer(self) -> Optional[Address]:
        """The destination given to resolve_addr (None before it): the address a refusal names."""
        try:
            return self._dst
        except AttributeError:
            return None

    def _allowed(self, call: Call) -> None:
        """StateError if ``call`` is illegal in the id's state (a call that moves nothing)."""
        if self._state not in self._rules.calls[call]:
            raise StateError("%s (uid %d)" % (refusal(self._rules.kind, self._state, call), getattr(self, "uid", 0)))

    def _call(self, call: Call, data: bytes, command: str, ctx: Optional[Dict[str, Any]] = None) -> None:
        """Make ``call``, whose command is ``data``: the one transaction of every call of an id.

        The id moves where the table says before the command is written (StateError, before
        any syscall, if the call is illegal here or the channel is closed), so that an event
        another thread reads meanwhile finds the id where the command left it, and its cached
        answers go.  The channel's write (the fd owner's) sends the command.  If the kernel
        refuses it, the id moves back -- or where the kernel's own answer to the refusal
        leaves it (:data:`AFTER_REFUSAL`) -- unless an event moved it meanwhile, and the
        refusal is raised as the channel words it (``ctx``: the addresses it names, made
        only then when not given: the peer's, ``dst``)."""
        ch = self.channel
        if ch._live != _process.PID:
            self._ready(call)  # raises, saying why
        old = self._state
        try:
            new = self._rules.calls[call][old]
        except KeyError:  # illegal here
            raise StateError("%s (uid %d)" % (refusal(self._rules.kind, old, call), getattr(self, "uid", 0))) from None
        self._state = new
        self._cache = None
        try:
            n = ch._write(data)
        except OSError as e:
            if self._state is new:
                self._state = self._after_refusal(call, old, e.errno or 0, ctx)
            raise ch._refused(e, command, {"dst": self._peer()} if ctx is None else ctx) from None
        except BaseException:  # interrupted (a signal's handler raised): nothing was written
            if self._state is new:
                self._state = old
            raise
        if n != len(data):
            raise ch._short(n, data, command)

    def _after_refusal(self, call: Call, old: State, err: int, ctx: Optional[Dict[str, Any]]) -> State:
        """Where the kernel left the id that refused ``call`` from ``old`` with ``err``: where
        the table's :data:`~pyrdmacm.state.AFTER_REFUSAL` says, or the state before.  But
        RESOLVE_ADDR from IDLE binds first (the source given, or the wildcard of the
        destination's family) and a refusal after the bind leaves the id bound: the kernel's
        error path goes back to ADDR_BOUND, not IDLE (seen on 5.10 and 7.2: no route,
        ENETUNREACH; an AF_IB destination no port has a GID of its prefix for, ENODEV; BIND
        then answers EINVAL).  Which step refused is told by the errno, without a syscall
        (librdmacm makes none there, and pyrdmacm writes what it writes): a wildcard source
        of port 0 (or none) binds unless the port space has no such address (EPROTONOSUPPORT)
        or memory ran out; a source with an address or a port may fail its bind in many ways,
        and after it only the route lookup refuses in the write (ENETUNREACH, EHOSTUNREACH).
        (On an InfiniBand port, an AF_IB destination without a GID of its prefix after a GID
        source is ENODEV after the bind: that id is bound and is said IDLE, and a second
        bind gets the kernel's EINVAL.)"""
        if call is not Call.RESOLVE_ADDR or old is not State.IDLE:
            return AFTER_REFUSAL.get(call, old)
        src = ctx.get("src") if ctx else None
        if src is None or (src.is_any and not src.port):
            bound = err not in (errno.EPROTONOSUPPORT, errno.ENOMEM)
        else:
            bound = err in (errno.ENETUNREACH, errno.EHOSTUNREACH)
        return State.ADDR_BOUND if bound else State.IDLE


    def _on_event(self, number: int, count: bool = True) -> Optional[E]:
        """An event of the kernel's ``number`` for this id, one of the table's plain rows: the id
        moves, its answers go, the event counts as not acknowledged (unless not ``count``:
        read and acknowledged at once); its type is returned.  None (nothing changed) for an
        event the table has no row for (:data:`~pyrdmacm.state.NO_ROW`: a connection request)
        or of a number it does not know: :meth:`_on_event_with_effects` takes those."""
        try:
            move = self._rules.events[number][self._state]
        except KeyError:  # a number the table does not know (a newer kernel's event): as the channel says
            return None
        if move is None:
            return None
        ev, self._state = move
        self._cache = None
        if count:
            self._unacked += 1
        return ev

    def _on_event_with_effects(self, event: Union[E, int]) -> None:
        """Any event (a destroyed id stays destroyed): the id moves as :func:`after_event`
        says, its answers go, the event counts as not acknowledged."""
        if self._state is not State.DESTROYED:
            self._state = after_event(self._rules.kind, self._state, event)
            self._cache = None
        self._unacked += 1

    def _counted(self) -> None:
        """An event handed out for this id that moves nothing (a request's, on its new id)."""
        self._unacked += 1

    def _closed(self) -> None:
        """Its channel was closed: the kernel destroyed it."""
        self._state = self._rules.calls[Call.DESTROY].get(self._state, State.DESTROYED)

    def _answers(self) -> Answers:
        """The kept query answers (:class:`~pyrdmacm.core.queries.Answers`), until the id moves;
        made on first use."""
        cache = self._cache
        if cache is None:
            cache = self._cache = Answers(self)
        return cache

    # -- what the channel asks of an id beyond the moves (registry.ChannelId)
    def _spawn(self, channel: Any, handle: int) -> Any:
        """The id the kernel made for a connection request to this listener (its ``handle``,
        on ``channel``).  It has no uid yet (0): the kernel queues no event for it until
        ACCEPT gives it one, and then it is registered; until then it is not in the
        channel's registry."""
        obj = _new_object(self.__class__)
        obj.channel, obj.handle, obj.uid = channel, handle, 0  # birth: the request's new id
        obj._rules = self._rules
        obj._state = State.REQUEST
        obj._unacked = 0
        obj._cache = None
        obj._context = self._context
        obj._sync = self._sync
        obj._moves = 0
        return obj

    def _requested(self, event: _E) -> _E:
        """This id is the new id of the connection request ``event`` (which it counts)."""
        self._request = event
        self._counted()
        return event

    def _answer_dreq(self) -> None:
        """DISCONNECTED came (the peer's DREQ, or the DREP of ours): send DISCONNECT, which answers
        a DREQ with the DREP (so the peer's disconnect completes, and both ends reach timewait when
        two DREQs crossed) and does nothing otherwise.  Written on the id's own channel: an id
        migrated after the reader took the event is on another fd now.  If MIGRATE_ID is moving
        the id right now, the write is refused on the old fd; migrate() then sends it on the new
        one (whichever of the two takes the pending answer first sends it, once).  Whether the
        id moved is told by its count of moves, not by its channel: two migrations (away and
        back) around the refused write leave the channel as it was."""
        data = _DISCONNECT(self.handle)
        moves = self._moves
        try:
            self.channel._write(data)
            return
        except OSError:
            if self._moves == moves:  # not moved since: gone, or MIGRATE_ID in flight
                pending = self._drep = [True]
                if self._moves == moves:
                    return  # a migrate() in flight finds it (see CmId.migrate)
                try:
                    pending.pop()
                except IndexError:
                    return  # migrate() took it
        try:  # moved meanwhile: where it is now
            self.channel._write(data)
        except OSError:
            pass

    def _memberships(self) -> Dict[int, Membership]:
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


def ack(event: Any) -> None:
    """Acknowledge the event (``rdma_ack_cm_event``; optional: pyrdmacm never blocks on
    unacked events): its id has one event fewer not acknowledged.  StateError when every
    event of the id was acknowledged already."""
    # Event.ack is this function: the count of an id's unacked events changes only here
    life = event.id
    try:
        left = life._unacked - 1
    except AttributeError:  # an event made by hand may name no id
        return
    if left < 0:
        raise StateError("ack: every event of id uid %d was already acked" % getattr(life, "uid", 0))
    life._unacked = left
