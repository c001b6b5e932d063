"""A channel's engine: one rdma_cm fd, its registry of ids, the events read from it, and
the waits for them.  :class:`~pyrdmacm.core.event_channel.EventChannel` (which makes ids on it) is
this :class:`Channel` of :class:`~pyrdmacm.CmId` ids; a sync id's private channel is a
plain ``Channel``.  This module knows the ids only by what it calls on them, so that the
ids' module can stand below the channel's.

Theory of operation
-------------------
A channel is one open rdma_cm fd (``rdma_create_event_channel``) and the registry of the
event sinks on it: ``uid -> id``, the uid being what the kernel echoes in each event of the
id (unique in the process: :data:`pyrdmacm.core.process.next_uid`).  A connection request's id
is not in the registry until it is accepted (the kernel queues no event for it before).

Every command is one ``write()`` of the transport (the fd owner's); commands that have a
reply name one of the channel's :class:`~pyrdmacm.core.device.ReplyBuffer` objects.  Events are
read by one reader at a time: a GET_EVENT on the non-blocking fd, and a wait on the
channel's :class:`~pyrdmacm.core.poll.Poller` while nothing is queued; a second concurrent
reader is refused with :class:`~pyrdmacm.errors.StateError`.  The id an event names moves
as :mod:`pyrdmacm.state` says.  An event that answers a pending wait (:meth:`Channel.expect`)
is given to it there, and counts as acknowledged (:mod:`pyrdmacm.core.router`); ``get_event``
returns the others.

Faults have defined outcomes.  ``close()`` from another thread wakes a reader
blocked in ``get_event`` (through the channel's :class:`~pyrdmacm.core.poll.Waker`),
which raises StateError.  An fd closed behind the channel's back (EBADF,
POLLNVAL) is a StateError too.  A signal during a wait runs its handler and the
wait goes on with the time left; a handler that raises ends the wait, and the
channel stays usable.  A forked child may not use its parent's channel (the fd,
the ids and their events are the parent's): every call raises StateError before
any syscall, and its ``close()`` only closes its own copies of the fds.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections import deque
from typing import Any, Callable, Deque, Dict, Generic, Iterator, List, Optional, Tuple, TypeVar, overload

from . import device as _device, process as _process
from .. import abi, wire
from .device import KernelDevice, ReplyBuffer, Transport
from .poll import ReadWait, timeout_seconds
from .router import Router, Waiter
from .registry import ChannelId, Registry
from ..errors import KernelError, StateError, UsageError
from .events import _UNPACK_EVENT, _UNPACK_HEAD, EVENT_RESP_SIZE, PLAIN_EVENTS, Event, event_type, new_event
from ..state import State


__all__ = ["Channel"]

#: the class of the ids on the channel (CmId: see pyrdmacm.core.event_channel)
_Id = TypeVar("_Id", bound=ChannelId)
_Self = TypeVar("_Self", bound="Channel[Any]")

E = abi.CmEventType
_CONNECT_REQUEST = E.CONNECT_REQUEST
_DISCONNECTED = E.DISCONNECTED
_DESTROYED = State.DESTROYED
_monotonic = time.monotonic
_UNSET = object()  # a read's deadline before it first needs one
NO_ECE = (0, 0)  # the ece of nearly every event, shared: one allocation less per event
_GET_EVENT = wire.COMMAND["GET_EVENT"]
_DISCONNECT = wire.DISCONNECT
_NOTHING = object()
#: what the read returns, to a reader holding the guard, for an event it gave to a waiter
_ROUTED: Any = object()


class Channel(Generic[_Id]):
    """One rdma_cm fd: ``fileno()`` for select/poll, ``get_event()`` to read events.

    ``Channel()`` opens the kernel device; ``Channel(transport)`` uses any
    :class:`~pyrdmacm.core.device.Transport` (the fake kernel of :mod:`pyrdmacm.testing`).
    """

    def __init__(self, transport: Optional[Transport] = None, *, legacy: Optional[bool] = None) -> None:
        # the waker first: if the fds run out, nothing is left open
        if transport is not None:
            _device.check_transport(transport)
        try:
            #: the one wait of every reader, and the waker that ends it (made first)
            self._ready = ReadWait()
        except BaseException:
            if transport is not None:
                transport.close()  # the channel owns its transport: on failure too
            raise
        try:
            self._t: Transport = transport if transport is not None else KernelDevice()
        except BaseException:
            self._ready.waker.close()
            raise
        #: the one way a command reaches the kernel: the transport's write (the fd owner's).
        #: Read at each call, never kept in a variable: the device's fd is released when the
        #: last holder of its write lets go (close() swaps this one out)
        self._write: Callable[[bytes], int] = self._t.write
        #: whose events each uid's are: ids, memberships, requests not accepted yet, and the
        #: grave (the one writer of these: :class:`~pyrdmacm.core.registry.Registry`)
        self.registry: Registry[_Id] = Registry()
        #: answer every DISCONNECTED with DISCONNECT (the DREP of a peer's DREQ: its disconnect
        #: completes at once instead of retrying until its DREQ times out)
        self.answer_disconnect = True
        self._cmd_lock = threading.Lock()
        #: the one-reader rule's guard (see :meth:`_busy`)
        self._reader_slot = [True]
        #: the waits for events of this channel's ids (:meth:`expect`): uid -> waiter
        self._waits = Router()
        #: events a :meth:`wait` read that nobody waited for: get_event's first
        self._queued: Deque[Event[Any]] = deque()
        self._pid = os.getpid()
        #: the opening process's id while the channel is open, 0 once closed: every call
        #: checks "open, and not a forked child" with one comparison (``_live != PID``)
        self._live = self._pid
        #: a sync id's private channel: a read waits first (its event is rarely there yet)
        self._wait_first = False
        #: the last look of get_event / get_events found the queue empty (EAGAIN): their next
        #: call waits first (a batch's EAGAIN after events does not count)
        self._drained = False
        self.closed = False
        self._create_replies: List[ReplyBuffer] = [ReplyBuffer(wire.COMMAND["CREATE_ID"].out)]
        self._destroy_replies: List[ReplyBuffer] = [ReplyBuffer(wire.COMMAND["DESTROY_ID"].out)]
        # every QUERY's reply fits (the kernel writes up to the command's ``out``)
        self._r_query = ReplyBuffer(max(wire.COMMAND[name].out for name in wire.QUERY_REPLIES))
        self._r_event = ReplyBuffer(EVENT_RESP_SIZE)
        self._event_view = self._r_event.view
        self._b_get_event = _GET_EVENT.encode(self._r_event.address)
        #: (what the caller passed as dst, its Address, the command's bytes after id and
        #: timeout_ms): many ids resolving one destination parse and pack it once
        self._packed_dst: Tuple[Any, Any, bytes] = (_NOTHING, None, b"")
        #: Use BIND_IP / RESOLVE_IP / QUERY_ROUTE (kernels before 3.11) instead of BIND / RESOLVE_ADDR / QUERY.
        self.legacy = bool(self._t.legacy if legacy is None else legacy)

    # -- fd
    def fileno(self) -> int:
        """The fd, for select/poll/epoll or an event loop's add_reader: readable when an event
        is queued (then get_event(0) returns it)."""
        return self._t.fileno()

    def close(self) -> None:
        """Close the fd; the kernel destroys every id still on it."""
        if self.closed:
            return
        self.closed = True
        self._live = 0
        self._write = _device.closed_write  # the channel's hold on the fd's write goes
        if os.getpid() == self._pid:
            self.registry.close()
            self._queued.clear()
            self._waits.end_all(StateError("the channel was closed (by close()): the kernel destroyed its ids"))
        self._ready.waker.signal()  # wake a waiting reader: it raises "closed" (never a forked child's)
        if os.getpid() != self._pid:  # a forked child closes its own copies: it has no reader
            self._release()
            return
        try:
            self._reader_slot.pop()  # taken for good: a closed channel has no reader
        except IndexError:
            return  # a reader holds the guard: it releases the fds as it gives the guard back
        self._release()

    def _release(self) -> None:
        """Close the device and the waker: the fd is released now, or by the last command
        write in flight (each holds the device's write until it returns); the reader's
        polls are covered by the reader guard, which whoever releases holds."""
        try:
            self._t.close()
        finally:
            self._ready.waker.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self.closed and os.getpid() == self._pid:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<%s fd=%s ids=%d%s>" % (
            type(self).__name__, "closed" if self.closed else self._t.fileno(),
            len(self.registry.ids),
            " legacy" if self.legacy else "",
        )

    # -- commands
    def _check(self) -> None:
        if self.closed:
            raise StateError("the event channel is closed")
        if _process.PID != self._pid:
            raise StateError(
                "this event channel was opened by process %d, and process %d is a forked child: "
                "the fd is shared with the parent, whose ids and events it holds; open a new "
                "EventChannel in the child" % (self._pid, os.getpid())
            )

    def submit(self, data: bytes, command: str = "command", **ctx: Any) -> None:
        """Write one command; a refusal raises :class:`KernelError` with the real errno and
        ``ctx`` (the addresses involved: ``src=``, ``dst=``)."""
        try:
            n = self._write(data)
        except OSError as e:
            raise self._refused(e, command, ctx) from None
        if n != len(data):
            raise self._short(n, data, command)

    def _refused(self, e: OSError, command: str, ctx: Dict[str, Any]) -> Exception:
        """The exception for a write the kernel refused."""
        if self.closed:
            return StateError("the event channel is closed")
        if e.errno == errno.EBADF:
            return _device.fd_closed_behind()
        return KernelError(e.errno or errno.EIO, command, **ctx)

    @staticmethod
    def _short(n: int, data: bytes, command: str) -> Exception:
        return KernelError(errno.ENODATA, command, hint="short write (%d of %d bytes)" % (n, len(data)))

    # -- events
    @overload
    def get_event(self, timeout: None = None) -> Event[_Id]: ...

    @overload
    def get_event(self, timeout: Optional[float]) -> Optional[Event[_Id]]: ...

    def get_event(self, timeout: Optional[float] = None) -> Optional[Event[_Id]]:
        """The next event (GET_EVENT): ``rdma_get_cm_event``; None when none came within
        ``timeout`` seconds (None: wait for ever; 0: only look).

        Waiting for ever (``timeout`` None), it returns an event, or raises.  The event's id
        has moved already (its ``state``); acknowledge it with ``event.ack()``
        (``rdma_ack_cm_event``: destroy() warns of events left unacked).  An event that
        answers a pending wait (:meth:`expect`) goes to that wait instead.  One reader at a
        time: a second thread's call raises StateError.  ``close()`` from another thread
        ends a wait with StateError; a signal's handler runs as the signal comes and the wait
        goes on, unless the handler raises.  A wait in the main thread gives
        ``signal.set_wakeup_fd`` a pipe of its own while it waits (so that no signal waits for
        the next event), and hands what it read on to the fd set before."""
        ev: Optional[Event[_Id]] = self._read(timeout, True, False)
        return ev

    def _read(self, timeout: Optional[float], count: bool, held: bool,
              out: Optional[List[Any]] = None, room: int = 0, batch: Optional[Tuple[List[Any], ...]] = None) -> Any:
        """The one read of every reader: get_event's (``count``, not ``held``), get_events',
        get_batch's and wait()'s, which call it holding the reader guard (``held``: they look
        at the queue of kept events themselves, and are told of an event given to a waiter:
        :data:`_ROUTED`).  It returns the event read; or, given ``out``, reads the rest of a
        burst into it (until it holds ``room`` events, or the first EAGAIN or a fault: then
        None; a burst's EAGAIN is no empty look), one call for the whole burst.  Without
        ``count`` an event is acknowledged as it is read.  Given ``batch`` (an
        :class:`~pyrdmacm.core.events.EventBatch`'s three lists), the plain events of the
        ids (:data:`~pyrdmacm.core.events.PLAIN_EVENTS`) are entered there, acknowledged, no
        object made, until they are ``room`` or the burst ends (None), or another event,
        which is returned (``_ROUTED`` is not: the read goes on)."""
        # A GET_EVENT on the non-blocking fd, and a wait while nothing is queued, until
        # ``timeout``; the event decoded, its id found and moved (the life module's rows), the
        # event made, and given to the wait it answers, if any (then the next is read, within
        # the time left).  A read that follows a look which found the queue empty waits first,
        # as does a sync id's private channel (its event is almost never there right after its
        # command), as librdmacm's blocking read does, instead of a GET_EVENT that can only say
        # EAGAIN.
        if timeout is not None and (timeout.__class__ is not int or timeout < 0):
            timeout = timeout_seconds(timeout)
        if not held:
            if self._live != _process.PID:
                self._check()
            try:  # the one-reader guard, only tried (see _busy)
                self._reader_slot.pop()
            except IndexError:
                raise self._busy() from None
        try:
            if self._queued and not held:
                return self._queued.popleft()
            deadline: Any = _UNSET
            if (self._drained or self._wait_first) and timeout != 0:
                deadline = None if timeout is None else _monotonic() + timeout
                if not self._ready.until(self, deadline):
                    return None
                self._drained = False
            data = self._b_get_event
            view = self._event_view
            ids = self.registry.ids
            waits = self._waits
            if batch is not None:
                entered = batch[0]
                add_id, add_type, add_status = entered.append, batch[1].append, batch[2].append
            while True:
                try:
                    self._write(data)  # read each time (see __init__)
                except BlockingIOError:
                    if out is not None or (batch is not None and entered):
                        return None
                    self._drained = True
                    if timeout == 0:
                        return None  # only looking: nothing queued
                    if deadline is _UNSET:
                        deadline = None if timeout is None else _monotonic() + timeout
                    if not self._ready.until(self, deadline):
                        return None
                    continue
                except OSError as e:
                    if out is not None or (batch is not None and entered):
                        return None  # the next call reports it
                    raise self._read_fault(e) from None
                if batch is not None:  # a plain event of an id nobody waits for: three entries
                    uid, handle, number, status = _UNPACK_HEAD(view)
                    cm_id = ids.get(uid)
                    if cm_id is not None and number in PLAIN_EVENTS and uid not in waits:
                        ev = cm_id._on_event(number, False)
                        if ev is _DISCONNECTED:
                            self._answer(cm_id)
                        add_id(cm_id)
                        add_type(ev)
                        add_status(status)
                        if len(entered) >= room:
                            return None
                        continue
                uid, handle, number, status, raw, vid, mod = _UNPACK_EVENT(view)
                cm_id = ids.get(uid)
                waited = uid in waits
                event: Any = None
                mine = False  # the event is the caller's (not given to a wait, nor dropped)
                if cm_id is not None:
                    # a waited event is not counted: its wait takes it, or it counts below; None:
                    # a connection request (no row), or a number the table does not know (_dispatch's)
                    ev = cm_id._on_event(number, count and not waited)
                    if ev is not None:
                        if ev is _DISCONNECTED:
                            self._answer(cm_id)
                        event = new_event((ev, status, cm_id, handle, raw, (vid, mod) if vid or mod else NO_ECE, None, None))
                        if not waited:
                            if out is None:
                                return event  # the common case
                            mine = True
                        elif not waits.route(uid, event):
                            if count:
                                cm_id._counted()
                            mine = True
                if event is None:
                    event = self._dispatch(uid, handle, number, status, raw, (vid, mod) if vid or mod else NO_ECE)
                    if event is not None:  # counted
                        if not (waited and waits.route(uid, event)):
                            if not count:
                                event.ack()
                            mine = True
                        else:
                            event.ack()
                if mine:
                    if out is None:
                        return event
                    out.append(event)
                    if len(out) >= room:
                        return None
                    continue  # the burst reads on
                # given to the wait it answers: a caller that holds the guard (get_events, wait())
                # is told (_ROUTED: it looks at its waits, and reads on or not); or dropped (its id
                # destroyed meanwhile, or a group left).  Then the next, within the time left: a
                # look (timeout 0) reads on past the events it routes, and never for ever (a stream
                # of dropped events ends it); a close() from another thread ends it too (the fd
                # stays open until this reader is out)
                if held and event is not None:
                    if out is not None or (batch is not None and entered):
                        continue  # the burst reads on past the events it routes
                    return _ROUTED
                if self.closed:
                    raise StateError("the event channel was closed (by another thread) while reading events")
                if timeout is not None and (timeout or event is None):
                    if deadline is _UNSET:
                        deadline = _monotonic() + timeout
                    elif _monotonic() >= deadline:
                        return None
        finally:
            if not held:  # _let_go(), its common case inline (get_event is the hot reader)
                if self.registry.grave or self.closed:
                    self._let_go()
                else:
                    self._reader_slot.append(True)

    # -- waits (for the event that answers a call: pyrdmacm.core.router)
    def expect(self, uid: int, waiter: Waiter) -> Waiter:
        """Route the next event of ``uid`` (an id's, a membership's; a listener's for its
        requests) that ``waiter`` takes to it, acknowledged, instead of to get_event: see
        :mod:`pyrdmacm.core.router`.  Call it after the command (the event is read by this
        channel's reader, which is not reading yet) or before; :meth:`wait` waits for it,
        or the reader of an event loop delivers it.  Ends with StateError when the id is
        destroyed or migrated away, or the channel closed."""
        if self._live != _process.PID:
            self._check()
        waits = self._waits
        if waits.setdefault(uid, waiter) is not waiter:  # another call of the id is pending
            waits.add(uid, waiter)
        return waiter

    def expect_many(self, uids: List[int], waiter: Waiter) -> Waiter:
        """:meth:`expect` for many uids with one waiter (a batch: it is given one event of each)."""
        if self._live != _process.PID:
            self._check()
        self._waits.add_many(uids, waiter)
        return waiter

    def end_waits(self, error: BaseException) -> None:
        """End every pending wait with ``error`` (an event loop's reader that cannot go on)."""
        self._waits.end_all(error)

    @property
    def waiting(self) -> int:
        """How many uids have a wait pending (:meth:`expect`)."""
        return len(self._waits)

    def forget(self, uid: int, waiter: Waiter) -> None:
        """Give up ``waiter`` (a wait timed out or interrupted): its event goes to get_event."""
        self._waits.forget(uid, waiter)

    def wait(self, waiter: Waiter, timeout: Optional[float] = None, *, drop: bool = False) -> bool:
        """Read events until ``waiter`` (:meth:`expect`) is done, or ``timeout`` seconds
        (None: for ever) have passed: its ``done``.  Other waits get their events meanwhile;
        events nobody waits for are kept, in order, for get_event (``drop``: acked and
        dropped instead).  The one-reader rule holds (StateError while another thread reads)."""
        if timeout is not None:
            timeout = timeout_seconds(timeout)
        if self._live != _process.PID:
            self._check()
        self._hold()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            look = not self._wait_first  # a sync id's own channel: its event is rarely there yet
            while not waiter.done:
                if look:
                    ev = self._read(0, True, True)
                    if ev is _ROUTED:  # given to a waiter (this one?): the loop looks
                        continue
                    if ev is not None:
                        if drop:
                            ev.ack()
                        else:
                            self._queued.append(ev)
                        continue
                look = True
                if not self._ready.until(self, deadline):
                    break  # timed out (a wake-up: the loop looks whether the wait ended)
            return waiter.done
        finally:
            self._let_go()

    def wait_for(self, uid: int, waiter: Waiter, timeout: Optional[float] = None, *, drop: bool = False) -> Waiter:
        """:meth:`expect`, :meth:`wait`, and :meth:`forget` if it did not end: the next event of
        ``uid`` that ``waiter`` takes goes to it, read until it comes or ``timeout`` seconds
        (None: for ever) have passed; a wait that ends without it (timed out, or a signal's
        handler raised) is given up, and that event goes to get_event.  Returns ``waiter``
        (``done``, ``event``, ``ok``, ``error``)."""
        self.expect(uid, waiter)
        try:
            self.wait(waiter, timeout, drop=drop)
        finally:
            if not waiter.done:
                self.forget(uid, waiter)
        return waiter

    def _ended(self, uids: List[int], why: str) -> None:
        """``uids`` stopped being this channel's (``why``: "destroyed", "migrated", "left"):
        their waits end now, a reader blocked in :meth:`wait` is woken to see it, and events
        of destroyed ids kept for get_event go.  A request not answered yet has uid 0 (none
        until ACCEPT): the waits under 0 are no id's (the asyncio adapter's close watch), and
        stay."""
        if 0 in uids:
            uids = [u for u in uids if u]
        waits = self._waits
        if waits and not waits.keys().isdisjoint(uids):
            waits.end(uids, why)
            if self._ready.reader is not None:
                self._ready.waker.signal()
        if self._queued and why != "migrated":
            gone = set(uids)
            self._queued = deque(ev for ev in self._queued if ev.id.uid not in gone or not ev.id.uid)

    # -- the one-reader guard
    def _hold(self) -> None:
        """Take the one-reader guard (StateError if another thread reads).  get_event, the
        hot reader, takes it inline (the same list.pop)."""
        try:
            self._reader_slot.pop()
        except IndexError:
            raise self._busy() from None

    def _let_go(self) -> None:
        """Give the one-reader guard back (every reader's give-back: get_event's common case
        is inline), with what falls to whoever held it: ids destroyed while it was held can
        have no event read any more (the grave empties); after a close() that found the
        guard held, the one who gives it back releases the fds."""
        if self.registry.grave:
            self.registry.bury()
        slot = self._reader_slot
        slot.append(True)
        if self.closed:
            try:
                slot.pop()
            except IndexError:
                return  # close() took it: close() releases them
            self._release()

    def _read_fault(self, e: OSError) -> Exception:
        """What a refused GET_EVENT means."""
        if self.closed:
            return StateError("the event channel was closed while waiting")
        if e.errno == errno.EBADF:
            return _device.fd_closed_behind()
        return KernelError(e.errno or errno.EIO, "GET_EVENT")

    def _busy(self) -> StateError:
        """The refusal of a second reader.  The one-reader guard (``_reader_slot``) is a
        one-slot list, only tried: list.pop and append are atomic, and under emulation a
        threading.Lock round trip costs as much as the GET_EVENT it guards."""
        reader = self._ready.reader
        return StateError(
            "another thread is already reading events from this channel%s; "
            "read events from one thread and hand them out" % (" (thread %s)" % reader if reader else "")
        )

    def _dispatch(self, uid: int, handle: int, number: int, status: int, raw: bytes,
                  ece: Tuple[int, int]) -> Optional[Event[_Id]]:
        """The event of ``uid`` the read's own row did not take, counted as not acknowledged:
        one that does more than move its id (a connection request), a membership's, one of
        an unknown type, or one of an id destroyed or migrated away while this reader held
        it (the registry's grave: the kernel counted it in events_reported, it is still the
        caller's, and a migrated id's DISCONNECTED is still answered).  None: dropped (a
        group left meanwhile)."""
        reg = self.registry
        cm_id = reg.ids.get(uid)
        ev = event_type(number)
        membership = None
        if cm_id is None:
            membership = reg.mcs.get(uid)
            if membership is None:
                cm_id = reg.grave.get(uid)
                if cm_id is None:
                    return None  # a group left meanwhile: its events are dropped
            else:
                cm_id = membership.id
        if ev is _CONNECT_REQUEST:
            # a request read before its listener's DESTROY_ID returned is handed out too: its
            # id is the caller's to accept, reject or destroy (else the peer waits unanswered)
            new = cm_id._spawn(self, handle)
            reg.hand_out(new)
            request: Event[_Id] = new._requested(new_event((ev, status, new, handle, raw, ece, cm_id, None)))
            return request
        cm_id._on_event_with_effects(ev)
        if ev is _DISCONNECTED:  # an id that migrated away while this reader held the event
            self._answer(cm_id)
        return new_event((ev, status, cm_id, handle, raw, ece, None, membership))

    def _answer(self, cm_id: _Id) -> None:
        """DISCONNECTED came for ``cm_id`` (moved already): maybe the peer's DREQ, which the DREP
        answers (``Life._answer_dreq``), unless the id is destroyed or ``answer_disconnect`` off."""
        if self.answer_disconnect and cm_id._state is not _DESTROYED:
            cm_id._answer_dreq()

    def _private(self) -> "Channel[_Id]":
        """A new channel on the same device, for one sync id (librdmacm's private channel)."""
        reopen = getattr(self._t, "reopen", None)
        if reopen is None:
            raise UsageError("this channel's transport cannot open a second fd (no reopen()): a sync id "
                             "needs a channel of its own")
        ch: Channel[_Id] = Channel(reopen(), legacy=self.legacy)
        ch._wait_first = True
        return ch

    def events(self, timeout: Optional[float] = None) -> Iterator[Event[_Id]]:
        """Iterate over events until none arrives within ``timeout``."""
        while True:
            ev = self.get_event(timeout)
            if ev is None:
                return
            yield ev

    @property
    def ids(self) -> List[_Id]:
        """The ids whose events this channel reads."""
        return list(self.registry.ids.values())
