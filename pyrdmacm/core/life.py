"""An id's life: its record and the moves that change it (:class:`Life`, :func:`ack`), its
birth and death on its channel (:class:`Lifecycle`: CREATE_ID and DESTROY_ID, for the single
calls and the batches, ``EventChannel.create_ids`` and ``destroy_ids``, alike).

:mod:`pyrdmacm.state` says what a call or an event does (pure code, the one table);
:class:`Life` applies it: its methods and :func:`ack` are the only code that assigns an id's
state, its count of events not acknowledged and its cached query answers.  The one I/O a
move starts is a call's write, through the channel's writer, between the id's move and its
undo (:meth:`Life._call`).  The channel's registry (uid -> id) is written by
:class:`~pyrdmacm.core.registry.Registry` alone, which the birth and death here ask.

An id leaves the registry after its DESTROY_ID returns, and while a reader holds the
channel's reader guard it stays findable in the channel's grave: an event the reader had
taken before (the kernel counted it in ``events_reported``) is still handed out.
"""

from __future__ import annotations

import errno
import threading
import warnings
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Type, Union

from . import process as _process
from .. import abi, wire
from .device import ReplyBuffer
from .params import port_space
from ..abi import CmEventType as E
from ..errors import StateError, UsageError
from ..state import AFTER_REFUSAL, Call, Rules, State, after_event, refusal, rules_for

__all__ = ["Life", "ack", "Lifecycle", "UnackedEventsWarning", "create_many", "destroy_many", "unacked_warning"]

_CMD = wire.COMMAND
_CREATE, _DESTROY = _CMD["CREATE_ID"], _CMD["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.out
_DESTROY_CALL = Call.DESTROY
_NO_CONTEXT: Dict[str, Any] = {}  # a refused DESTROY_ID names no address
#: per thread: destroy_ids is destroying (its destroy() calls leave the unacked warning to it)
_batch = threading.local()
_TCP_RC = rules_for(abi.PortSpace.TCP, abi.QpType.RC)
_new_object = object.__new__


class Life:
    """An id's record -- its :class:`Rules`, its state, how many of its events are not
    acknowledged, its cached query answers -- and the moves that change it.

    :class:`~pyrdmacm.core.cmid.CmId` is a Life; the methods below and :func:`ack` are the only
    code that assigns these four (h11's rule: one owner writes the state machine).  A call
    is one transaction (:meth:`_call`): the id moves before its command is written, so that
    an event another thread reads meanwhile finds the id where the command left it, and back
    when the kernel refuses the command; an event moves it as the table says
    (:meth:`_on_event`).  Its birth and death (CREATE_ID, DESTROY_ID, the channel's
    registry) are :class:`pyrdmacm.core.life.Lifecycle`'s.
    """

    __slots__ = ("channel", "uid", "handle", "_rules", "_state", "_unacked", "_cache")

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
    _cache: Optional[List[Any]]

    if TYPE_CHECKING:  # pragma: no cover - the id's (CmId's)
        def _peer(self) -> Any: ...

    def _born(self, rules: Rules, state: State = State.IDLE) -> None:
        """A new id of ``rules``' kind, in ``state`` (IDLE; REQUEST for a connection request's)."""
        self._rules = rules
        self._state = state
        self._unacked = 0
        self._cache = None

    def _ready(self, call: Call) -> None:
        """StateError, before any syscall, unless ``call`` may be made now: the id's channel
        open (and this process's), the call legal in the id's state."""
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                raise StateError("%s: the id's event channel is closed (closing it destroyed the id)" % call)
            ch._check()
        self._allowed(call)

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
        new = self._rules.calls[call].get(old)
        if new is None:
            raise StateError("%s (uid %d)" % (refusal(self._rules.kind, old, call), getattr(self, "uid", 0)))
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
        event with effects (:data:`~pyrdmacm.state.EVENTS_WITH_EFFECTS`) or of a number the
        table does not know, as the table says: :meth:`_on_event_with_effects` takes those."""
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

    def _answers(self) -> List[Any]:
        """The cached query answers (``[addr info, gids]``), until the id moves; made on first use."""
        cache = self._cache
        if cache is None:
            cache = self._cache = [None, None]
        return cache


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


class UnackedEventsWarning(ResourceWarning):
    """An id was destroyed with events still unacknowledged (librdmacm would hang here)."""


class Lifecycle(Life):
    """An id's birth and death on its channel, the one place of each: CREATE_ID (and the
    registry's uid -> id) and DESTROY_ID (the registry, the waits and memberships that go
    with it).  The record and every move of its state are :class:`Life`'s."""

    __slots__ = ()

    def _create(self, channel: Any, rules: Rules) -> Any:
        """CREATE_ID for this new id (checked, not yet created) on a live ``channel``, of the
        port space and QP type of ``rules``: the one place that writes it (``CmId()``,
        ``EventChannel.create_id`` and ``create_ids`` end here).  The id is registered
        (uid -> id) once the kernel made it.  Returns the id."""
        self.channel = channel
        self._born(rules)
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
        # The one place that writes DESTROY_ID (destroy_ids and create_ids' undo end here).
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
        # Off the registry after DESTROY_ID: the kernel queues no event of the id from now on, and
        # one that a reader took before (counted in events_reported) must still find its id -- in
        # the grave while that reader holds the guard (it empties the grave when it lets go).  The
        # waits for its events, and its memberships', end (``Channel._ended``).
        reg = ch.registry
        gone = reg.destroyed(self, not ch._reader_slot)  # its groups go with it
        if ch._waits or ch._queued:
            ch._ended(gone, "destroyed")
        if self._unacked and not getattr(_batch, "quiet", False):  # destroy_ids warns once for all
            warnings.warn(unacked_warning([self], True), stacklevel=2)
        if ch._wait_first and not reg.ids:  # a sync id's channel is its own: closed with its last id
            ch.close()  # (a sync listener's rejected request must not close the listener's)
        return reported


def create_many(channel: Any, cls: Type[Any], n: int, ps: Any, qp_type: Optional[int]) -> List[Any]:
    """``EventChannel.create_ids``: ``n`` ids of class ``cls`` made by :meth:`Lifecycle._create`, all or nothing."""
    if n.__class__ is not int or n < 0:
        raise UsageError("n must be an int >= 0 (how many ids), got %r" % (n,))
    custom = ps is not abi.PortSpace.TCP or qp_type is not None
    rules = rules_for(*port_space(ps, qp_type)) if custom else _TCP_RC
    if channel._live != _process.PID:
        channel._check()
    out: List[Any] = []
    append = out.append
    try:
        for _ in range(n):
            append(_new_object(cls)._create(channel, rules))
    except BaseException:
        for cm_id in out:  # all or nothing
            try:
                cm_id.destroy()
            except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                pass
        raise
    return out


def destroy_many(channel: Any, cls: Type[Any], ids: List[Any]) -> List[int]:
    """``EventChannel.destroy_ids``: every id checked first, then :meth:`Lifecycle.destroy` each."""
    if channel._live != _process.PID:
        if channel.closed:
            for cm_id in ids:
                if getattr(cm_id, "channel", None) is channel:
                    cm_id._closed()
            raise StateError("destroy_ids: the event channel is closed (the kernel destroyed its ids then)")
        channel._check()
    try:  # one pass that only says yes or no; _destroy_refusal says what is wrong
        ok = all([cm_id.channel is channel and cm_id._state is not State.DESTROYED for cm_id in ids])
        ok = ok and len(set(ids)) == len(ids)
    except (AttributeError, TypeError):
        ok = False
    if not ok:
        raise _destroy_refusal(channel, cls, ids)
    out: List[int] = []
    _batch.quiet = True  # one warning for the batch (this thread's destroy() calls say nothing)
    try:
        for cm_id in ids:
            out.append(cm_id.destroy())
    finally:
        _batch.quiet = False
        unacked = [cm_id for cm_id in ids[: len(out)] if cm_id._unacked]
        if unacked:
            warnings.warn(unacked_warning(unacked), stacklevel=3)
    return out


def _destroy_refusal(channel: Any, cls: Type[Any], ids: List[Any]) -> Exception:
    seen = set()
    for cm_id in ids:
        if not isinstance(cm_id, cls) or cm_id.channel is not channel:
            return UsageError("destroy_ids takes ids of this channel, got %r" % (cm_id,))
        if cm_id._state is State.DESTROYED:
            return StateError("destroy_ids: id uid %d is already destroyed" % cm_id.uid)
        if id(cm_id) in seen:
            return UsageError("destroy_ids: id uid %d is given twice" % cm_id.uid)
        seen.add(id(cm_id))
    return UsageError("destroy_ids: %d ids that cannot be told apart" % len(ids))  # pragma: no cover


def unacked_warning(ids: List[Any], one: bool = False) -> UnackedEventsWarning:
    """The warning of destroy() (``one``) or destroy_ids() for ids with events not acked."""
    if one:
        return UnackedEventsWarning(
            "id uid %d destroyed with %d event(s) not acked (harmless here; librdmacm would block)"
            % (ids[0].uid, ids[0]._unacked))
    return UnackedEventsWarning(
        "%d id(s) destroyed with %d event(s) not acked, uid %s (harmless here; librdmacm "
        "would block)" % (len(ids), sum(i._unacked for i in ids),
                          ", ".join(str(i.uid) for i in ids[:8]) + (" ..." if len(ids) > 8 else "")))
