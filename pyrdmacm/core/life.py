"""An id's life: its record and the moves that change it (:class:`Life`, :func:`ack`).

:mod:`pyrdmacm.state` says what a call or an event does (pure code, the one table);
:class:`Life` applies it: its methods, :func:`create_all` (birth) and :func:`ack` are the only
code that assigns an id's state, its count of events not acknowledged and its kept query
answers.  The one I/O a move starts is a call's write, through the channel's writer, between
the id's move and its undo (:meth:`Life._call`: one id's call, or the same call of many ids in
one); birth, the first move, is CREATE_ID's (:func:`create_all`, for one id or many);
:func:`destroy_all` and :func:`gone` are the death of many and the leaving every death ends
with.  :class:`~pyrdmacm.core.cmid.CmId`, a Life, has the verbs that make the calls, one id's
death (DESTROY_ID) among them; the channel's registry (uid -> id) is written by
:class:`~pyrdmacm.core.registry.Registry` alone.
"""

from __future__ import annotations

import errno
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, TypeVar, Union

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


__all__ = ["Life", "ack", "create_all", "destroy_all", "ended", "gone"]

_IDLE, _DESTROYED, _DESTROY_CALL = State.IDLE, State.DESTROYED, Call.DESTROY
_DISCONNECT = wire.DISCONNECT
_CREATE, _DESTROY = wire.COMMAND["CREATE_ID"], wire.COMMAND["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.out
_NO_CONTEXT: Dict[str, Any] = {}  # a refused DESTROY_ID names no address
_next_uid = _process.next_uid
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

    def _call(self, call: Call, data: bytes, command: str, ctx: Optional[Dict[str, Any]] = None,
              rest: Iterable[Tuple["Life", bytes]] = ()) -> None:
        """Make ``call``, whose command is ``data``: the one transaction of every call of an id.

        The id moves where the table says before the command is written (StateError, before
        any syscall, if the call is illegal here or the channel is closed), so that an event
        another thread reads meanwhile finds the id where the command left it, and its cached
        answers go.  The channel's write (the fd owner's) sends the command.  If the kernel
        refuses it, the id moves back -- or where the kernel's own answer to the refusal
        leaves it (:data:`AFTER_REFUSAL`) -- unless an event moved it meanwhile, and the
        refusal is raised as the channel words it (``ctx``: the addresses it names, made
        only then when not given: the peer's, ``dst``).

        ``rest``: more ``(id, command)`` pairs of the same channel making the same call (a call
        for many ids: one transaction each, in order, in this one call).  The first refusal
        ends it there: the ids before it made the call, those after it did not (a note on
        the exception says so)."""
        ch = self.channel
        if ch._live != _process.PID:
            self._ready(call)  # raises, saying why
        cm_id, more = self, None
        while True:
            old = cm_id._state
            try:
                new = cm_id._rules.calls[call][old]
            except KeyError:  # illegal here
                raise cm_id._in_batch(StateError("%s (uid %d)" % (refusal(cm_id._rules.kind, old, call),
                                                                   getattr(cm_id, "uid", 0))),
                                      rest) from None
            cm_id._state = new
            cm_id._cache = None
            try:
                n = ch._write(data)
            except OSError as e:
                if cm_id._state is new:
                    cm_id._state = cm_id._after_refusal(call, old, e.errno or 0, ctx)
                raise cm_id._in_batch(ch._refused(e, command, {"dst": cm_id._peer()} if ctx is None else ctx),
                                      rest) from None
            except BaseException:  # interrupted (a signal's handler raised): nothing was written
                if cm_id._state is new:
                    cm_id._state = old
                raise
            if n != len(data):
                raise cm_id._in_batch(ch._short(n, data, command), rest)
            if not rest:
                return
            if more is None:
                more = iter(rest)
            for cm_id, data in more:  # the next id, if any
                break
            else:
                return

    def _in_batch(self, exc: BaseException, rest: Iterable[Any]) -> BaseException:
        """``exc``, refusing this id's call; in a call for many ids (``rest``), noted so."""
        if rest:
            text = ("id uid %d of a call for many ids was refused: the ids before it made the call, "
                    "those after it did not" % getattr(self, "uid", 0))
            if hasattr(exc, "add_note"):
                exc.add_note(text)
            else:  # before Python 3.11: the same attribute (PEP 678), which tracebacks do not show there
                exc.__notes__ = [*getattr(exc, "__notes__", ()), text]
        return exc

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


def create_all(lives: Sequence["Life"], channel: Any, rules: Rules, context: Any = None, sync: bool = False) -> None:
    """Birth: CREATE_ID for each of ``lives`` (new objects, not yet created) on a live
    ``channel``, of the port space and QP type of ``rules``, in order, each naming its
    own word of one reply buffer: each id IDLE, and registered (uid -> id) once the
    kernel made it.  The one place that writes CREATE_ID (``CmId()``,
    ``EventChannel.create_id`` and ``create_ids`` end here).  All or nothing: if the
    kernel refuses one (EMFILE, ENOMEM ...), those made before it are destroyed again and
    the refusal is raised."""
    one = len(lives) == 1
    pool = channel._create_replies
    try:  # one id: the channel's reply buffer, when no other thread has it
        reply = pool.pop() if one else ReplyBuffer(_N_CREATE_REPLY * len(lives))
    except IndexError:
        reply = ReplyBuffer(_N_CREATE_REPLY)
    at = reply.address
    ps, qp_type = rules.ps, rules.qp_type
    life = None
    try:
        for life in lives:
            life.channel = channel
            life._rules = rules
            life._state = _IDLE
            life._unacked = 0
            life._cache = None
            life._context = context
            life._sync = sync
            life._moves = 0
            uid = life.uid = _next_uid()
            data = _CREATE_CMD(_H_CREATE, uid, at, ps, qp_type, b"")
            written = channel._write(data)  # read each time (the channel's write: see Channel)
            if written != _N_CREATE:
                raise channel._short(written, data, "CREATE_ID")
            if not one:
                at += _N_CREATE_REPLY
    except BaseException as e:  # refused (or a short write, or a signal's handler raised)
        made = lives.index(life)
        _unmade(lives[:made], reply.u32[:made].tolist(), channel)
        if one:
            pool.append(reply)
        if isinstance(e, OSError):
            raise channel._refused(e, "CREATE_ID", {}) from None
        raise
    if one:  # as a rule
        life.handle = reply.u32[0]  # type: ignore[union-attr]
        channel.registry.add(uid, life)
        pool.append(reply)
        return
    add = channel.registry.add
    for life, handle in zip(lives, reply.u32.tolist()):
        life.handle = handle
        add(life.uid, life)


def _unmade(lives: Sequence["Life"], handles: List[int], channel: Any) -> None:
    """A birth refused after ``lives`` were made (their ``handles``): they are destroyed again."""
    if lives:
        for life, handle in zip(lives, handles):
            life.handle = handle
            channel.registry.add(life.uid, life)
        try:
            destroy_all(lives)
        except Exception:  # pragma: no cover - the channel is failing: closing it frees them
            pass


def destroy_all(lives: Sequence["Life"]) -> List[int]:
    """Death of many: DESTROY_ID for each of ``lives`` (one channel's, none destroyed, each
    once: the callers' checks), in order: their ``events_reported``.  ``destroy_ids()`` and
    a refused birth's undo end here, one id's ``destroy()`` writes its own: the same
    transaction (:meth:`Life._call`, here one for all, each id's reply in its own word of
    one buffer), then the same leaving (:func:`gone`).  A refusal ends it there: the ids
    before it are destroyed all the same, and the refusal is raised."""
    first = lives[0]
    ch = first.channel
    if ch._live != _process.PID:
        if ch.closed:
            for life in lives:
                life._closed()
            raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
        ch._check()
    n = len(lives)
    reply = ReplyBuffer(_N_DESTROY_REPLY * n)  # each id's events_reported in its own word
    at = reply.address
    data = [_DESTROY_CMD(_H_DESTROY, a, life.handle, 0)
            for a, life in zip(range(at, at + _N_DESTROY_REPLY * n, _N_DESTROY_REPLY), lives)]
    try:  # no call of an id from here on; its events read meanwhile stay its
        first._call(_DESTROY_CALL, data[0], "DESTROY_ID", _NO_CONTEXT, zip(lives[1:], data[1:]))
    except BaseException:  # the ids before the refused one are destroyed: they leave too
        done = 0
        while done < n and lives[done]._state is _DESTROYED:
            done += 1
        if ch.closed:  # refused because closed: closing the channel destroyed them anyway
            for life in lives[done:]:
                life._closed()
        if done:
            gone(ch, lives[:done])
        raise
    reported: List[int] = reply.u32.tolist()
    gone(ch, lives)
    return reported


def gone(ch: Any, lives: Sequence["Life"]) -> None:
    """DESTROY_ID returned for ``lives``: each leaves the channel's registry (the kernel queues
    no event of it from now on, and one that a reader took before, counted in
    events_reported, must still find its id -- in the grave while that reader holds the
    guard), and :func:`ended` says what else that ends."""
    reg = ch.registry
    holds = not ch._reader_slot
    groups = [uid for life in lives for uid in reg.destroyed(life, holds)]  # their groups go with them
    if ch._waits or ch._queued or ch._wait_first:
        ended(ch, [*(life.uid for life in lives), *groups])


def ended(ch: Any, uids: List[int]) -> None:
    """Ids (and memberships) of ``ch`` destroyed, by their ``uids``: the waits for their events
    end (``Channel._ended``), and a sync id's channel, its own, closes with its last id (a
    sync listener's rejected request must not close the listener's).  One id's destroy()
    asks only when the channel has waits, kept events or is a sync id's."""
    if ch._waits or ch._queued:
        ch._ended(uids, "destroyed")
    if ch._wait_first and not ch.registry.ids:
        ch.close()


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
