"""asyncio on top of the core: the channel's fd read by the loop, and the outcome of any call awaited.

Theory of operation
-------------------
:class:`AsyncChannel` wraps an :class:`~pyrdmacm.core.event_channel.EventChannel`.  On first use it
registers the channel's fd with the running loop (``loop.add_reader``); when the fd is
readable it drains the queued events with ``get_events`` (non-blocking GET_EVENTs under
the channel's one reader guard).  Commands are the core's own calls (a ``write()`` each,
which never blocks), so thousands of ids resolve concurrently from one task, no thread
involved.

Awaiting a call's outcome is the channel's own wait (:mod:`pyrdmacm.core.router`): the
adapter gives the channel a waiter whose delivery sets a future, so the event that
answers the call never leaves the channel's read -- it is acknowledged there and the
future resolved.  :data:`pyrdmacm.state.OUTCOMES` says which events answer a call on an id
of a given kind; :meth:`AsyncChannel.outcome_of` makes any call and returns that future::

    fut = ach.outcome_of(cm_id, Call.RESOLVE_ROUTE, cm_id.resolve_route, 2000)
    ev = await fut      # ROUTE_RESOLVED; ROUTE_ERROR raises EventError

A failure event (or an ok event with a non-zero status, as in sync mode) sets
:class:`~pyrdmacm.errors.EventError`, unless ``raise_on_error=False``; a refusal of the call
(``KernelError``, ``StateError``, ``UsageError``) is set on the future.
:meth:`~AsyncChannel.outcomes_of` is the batch form: one call per id, one future and one
waiter for all their events, in order.  A new verb needs nothing here: its row in OUTCOMES
is enough.  The verbs spell it out (``start_resolve_addr`` ... a future at once;
``resolve_addr``, ``connect`` ... coroutines; ``*_many`` batches)::

    async with AsyncChannel() as ach:
        ids = ach.channel.create_ids(1000)
        events = await ach.resolve_addr_many(ids, "10.0.0.2")               # one future for all
        events = await asyncio.gather(*(ach.start_resolve_route(i, 2000) for i in ids))  # one per id

    async for req in ach.requests(listener):        # CONNECT_REQUESTs of one listener
        ev = await ach.accept(req, private_data=b"welcome")        # ESTABLISHED
    ev = await ach.connect(cm, private_data=b"hello")   # CONNECT_RESPONSE; the RTU is sent
    ev = await ach.disconnect(cm)                   # this side's DISCONNECTED
    ev = await ach.wait_event(cm, CmEventType.TIMEWAIT_EXIT, timeout=5)
    membership, ev = await ach.join_multicast(ud_id, "239.1.1.1")   # MULTICAST_JOIN

What no wait takes is the adapter's to hand out: a CONNECT_REQUEST to its listener's
``requests()`` iterators, everything else to :meth:`AsyncChannel.get_event`.
``wait_event`` and ``disconnect`` first take an event of the id that came before they were
called from get_event's queue.  A peer's DREQ is answered by the channel itself.

Faults have defined outcomes.  Closing the channel (:meth:`AsyncChannel.close`, or the
EventChannel's ``close()`` behind the adapter's back, from any thread) ends every wait with
:class:`~pyrdmacm.errors.StateError` "the channel was closed": the channel ends its waiters,
and the adapter hears of it through a waiter of its own; the loop's readers are removed by
the fd numbers they were registered under (an adapter that finds a dead one's reader under
its channel's fd number replaces it).  ``destroy()`` and ``migrate()`` end the waits of the
ids they take away at once (the channel does), from any thread.  A wait whose future is
done first (cancelled, ``asyncio.wait_for`` timing out) keeps its place until its event
comes, which is then acknowledged and dropped: the id's state has followed it.  A reader in
another thread makes the adapter's ``get_events`` refused: every wait then fails with that
StateError, and reading starts again with the next call.
"""

from __future__ import annotations

import asyncio
from asyncio import _get_running_loop as _running_loop  # None when no loop runs (a C call)
import os
import weakref
from collections import deque
from typing import Any, AsyncIterator, Callable, Deque, Dict, Iterable, List, Optional, Tuple, Union

from .addrinfo import getaddrinfo as getaddrinfo, getaddrinfo_all as getaddrinfo_all
from .requests import Handout
from .futures import BatchWaiter, CloseWatch, FutureWaiter, event_error
from ..core.poll import timeout_seconds
from ..core.router import TAKES, TAKES_ANY_KIND, take_events, take_of
from ..abi import CmEventType
from ..core.event_channel import EventChannel
from ..core.cmid import CmId
from ..errors import RdmaCmError, StateError, UsageError
from ..core.events import Event
from ..core.membership import Membership
from ..state import Call, Kind, State

__all__ = ["AsyncChannel", "getaddrinfo", "getaddrinfo_all"]

_DRAIN = 256  # at most this many events handed out per get_events call when the fd is readable
_CONNECT_RESPONSE = CmEventType.CONNECT_RESPONSE
_CONNECTED, _DATAGRAM = Kind.CONNECTED, Kind.DATAGRAM


#: (id(loop), fd) -> the adapter whose reader the loop has under that fd number: a new adapter
#: given a closed channel's fd number evicts the dead one, and a dead one removes only its own
_READERS: "Dict[Tuple[int, int], weakref.ReferenceType[AsyncChannel]]" = {}


def _no_call(*args: Any, **kwargs: Any) -> None:
    """The call of something that is no id (never made: outcome_of refuses the id first)."""
    raise UsageError("no call: the id is no CmId")  # pragma: no cover


def _closed_error(how: str) -> StateError:
    return StateError("the channel was closed (%s): the kernel destroyed its ids; open a new AsyncChannel" % how)


class AsyncChannel:
    """An :class:`EventChannel` driven by an asyncio loop: ``AsyncChannel()`` opens one,
    ``AsyncChannel(channel)`` drives the given one.  ``async with`` closes it."""

    def __init__(self, channel: Optional[EventChannel] = None) -> None:
        if channel is not None and not isinstance(channel, EventChannel):
            raise UsageError("AsyncChannel takes an EventChannel (or nothing: it opens one), got %r" % (channel,))
        #: the :class:`~pyrdmacm.EventChannel` it drives: make ids on it (``ach.channel.create_id()``,
        #: ``CmId(ach.channel)``), and read nothing from it yourself while the adapter runs
        self.channel = channel if channel is not None else EventChannel()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: the fd number the loop's reader is registered under (-1: none)
        self._fd = -1
        #: why the adapter is closed (None while open)
        self._closed: Optional[str] = None
        self._watch: Optional[CloseWatch] = None
        #: events no wait took, for get_event; and the get_event calls waiting
        self._queue: Deque[Event] = deque()
        self._queue_waiters: "Deque[asyncio.Future[Event]]" = deque()
        #: the part that hands connection requests to ``requests()`` iterators
        self._handout = Handout(self, self._queue)

    @property
    def closed(self) -> bool:
        """True once close() ran or the channel below was closed."""
        return self._closed is not None

    def __repr__(self) -> str:
        return "<AsyncChannel %r%s waits=%d queued=%d>" % (
            self.channel, " closed" if self._closed else "", self.channel.waiting, len(self._queue))

    # -- lifecycle
    def _start(self) -> asyncio.AbstractEventLoop:
        """The running loop, with this adapter's reader on it (registered on first use)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("AsyncChannel's calls need a running asyncio loop: make them in a coroutine "
                             "(asyncio.run(main()))") from None
        if self._closed is not None:
            raise _closed_error(self._closed)
        old = self._loop
        if old is not None:
            if old is loop:
                return loop
            if old.is_running():
                raise UsageError("this AsyncChannel is driven by another running asyncio loop: use it from that "
                                 "loop, or make an AsyncChannel per loop")
            # that loop stopped (asyncio.run returned): move to this one; what waited there is told
            self._shutdown(None, error=StateError("the AsyncChannel moved to another asyncio loop, %r: waits made "
                                                  "on the stopped loop ended" % (loop,)))
        ch = self.channel
        if ch.closed:
            self._shutdown("by EventChannel.close()")
            raise _closed_error(self._closed or "")
        fd = ch.fileno()
        key = (id(loop), fd)
        ref = _READERS.get(key)
        other = ref() if ref is not None else None
        if other is not None and other is not self and other._loop is loop:
            if not other.channel.closed:
                raise UsageError("this EventChannel already has an AsyncChannel on this loop (%r): read its "
                                 "events through that one" % (other,))
            other._shutdown("by EventChannel.close()", evicted=True)
        # a reader left under this number by a closed fd (the loop's selector still maps the number
        # to it, the kernel's epoll dropped it) would take our registration's place: remove it
        loop.remove_reader(fd)
        try:
            loop.add_reader(fd, self._on_readable)
        except OSError as e:  # EBADF: closed with os.close() behind the channel's back
            raise StateError("the event channel's fd %d is not open (%s): close channels with close(), and "
                             "open a new AsyncChannel" % (fd, os.strerror(e.errno or 0))) from None
        self._loop, self._fd = loop, fd
        _READERS[key] = weakref.ref(self)
        self._watch = CloseWatch(self)
        ch.expect(0, self._watch)  # uid 0 is no id's: it only hears of the close
        return loop

    def _unregister(self, evicted: bool = False) -> None:
        """Remove the loop's reader, by the fd number it was registered under."""
        loop, fd, watch = self._loop, self._fd, self._watch
        self._loop, self._fd, self._watch = None, -1, None
        if watch is not None:
            self.channel.forget(0, watch)
        if loop is None:
            return
        key = (id(loop), fd)
        ref = _READERS.get(key)
        if ref is not None and ref() in (self, None):
            del _READERS[key]
            if not evicted:  # evicted: the adapter that evicts us replaces the reader itself
                loop.remove_reader(fd)

    def _shutdown(self, how: Optional[str], evicted: bool = False, error: Optional[Exception] = None) -> None:
        """Stop reading; end every wait.  ``how``: the channel was closed (the adapter is done);
        else ``error`` is what the waits get, and the next call starts reading again."""
        self._unregister(evicted)
        if how is not None:
            if self._closed is None:
                self._closed = how
            self._queue.clear()  # events of ids the kernel destroyed
        exc = _closed_error(self._closed or "") if how is not None or error is None else error
        if not self.channel.closed:
            self.channel.end_waits(exc)  # closed: the channel ended them itself
        queue_waiters = list(self._queue_waiters)
        self._queue_waiters.clear()
        for fut in queue_waiters:
            if not fut.done():
                try:
                    fut.set_exception(exc)
                except RuntimeError:  # its loop is closed: nobody awaits it any more
                    pass
        self._handout.end(None if how is not None else error)

    def close(self) -> None:
        """Close the channel (the kernel destroys its ids): every wait fails with StateError
        "the channel was closed", the loop's reader is removed.  Idempotent."""
        if self._closed is None:
            self._closed = "by AsyncChannel.close()"
        self.channel.close()  # it ends every wait: the adapter's own watch too
        self._shutdown(self._closed)

    async def __aenter__(self) -> "AsyncChannel":
        self._start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # -- events
    def _on_readable(self) -> None:
        ch = self.channel
        if ch.closed:
            self._shutdown("by EventChannel.close()")
            return
        try:  # the waits' events are delivered inside; what no wait took comes back
            events = ch.get_events(_DRAIN, 0)
        except RdmaCmError as e:
            if ch.closed:
                self._shutdown("by EventChannel.close()")
            else:  # another reader, a failing fd: the waits are told, reading restarts on the next call
                self._shutdown(None, error=e)
            return
        handout = self._handout
        listeners = handout.listeners
        for ev in events:
            if listeners and handout.take(ev):
                continue
            self._to_get_event(ev)

    def _to_get_event(self, ev: Event) -> None:
        """Hand ``ev`` to the oldest get_event waiter, or queue it."""
        qw = self._queue_waiters
        while qw:
            w = qw.popleft()
            if not w.done():
                w.set_result(ev)
                return
        self._queue.append(ev)

    async def get_event(self) -> Event:
        """The next event that no pending wait of this adapter takes (a coroutine).

        Events come as the channel's ``get_event`` gives them: not acknowledged (``ev.ack()``
        is optional).  After :meth:`close`, StateError.
        """
        if self._loop is None or self._loop.is_closed():  # None once closed
            self._start()  # raises on a closed adapter
        if self._queue:
            return self._queue.popleft()
        assert self._loop is not None
        fut: asyncio.Future[Event] = self._loop.create_future()
        self._queue_waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                self._queue_waiters.remove(fut)
            except ValueError:
                pass
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._queue.appendleft(fut.result())  # given to us as we were cancelled: not lost
            raise

    def requests(self, listener: CmId) -> AsyncIterator[CmId]:
        """The ids of the connection requests to ``listener`` (its CONNECT_REQUEST events), as
        they come: ``async for req in ach.requests(lst): await ach.accept(req, ...)``.

        Each event is acked when its id is yielded (``req.request`` is the event: the peer's
        ConnParam, ``req.query_addr()`` its address).  Requests that came before the
        iteration started (queued for :meth:`get_event`) are yielded first; those that come
        while the body runs wait for the next step; several iterators of one listener share
        its requests.  The iteration ends when the listener is destroyed (at once, from any
        thread) or the channel is closed; the listener's failure event (DEVICE_REMOVAL)
        raises EventError.  A cancelled step loses nothing: when the iterator ends (its
        ``aclose()``, a ``break`` or a cancel), the requests it did not yield go back to
        :meth:`get_event`.  The listener must be listening (StateError)."""
        self._ours("requests", listener)
        return self._handout.iterate(listener)

    def _take_queued(self, cm_id: CmId, take: Any, raising: bool, call: str) -> Optional[Event]:
        """The oldest event of ``cm_id`` among ``take``'s that came before anybody waited for it
        (in get_event's queue): taken from there and acked; a failure raised when ``raising``."""
        queue = self._queue
        for i, ev in enumerate(queue):
            if ev.id is cm_id and ev.listen_id is None and ev.membership is None and ev.event in take:
                del queue[i]
                try:
                    ev.ack()
                except StateError:  # the user acked it already
                    pass
                if raising and (not take[ev.event] or ev.status):
                    raise event_error(ev, call, None)
                return ev
        return None

    # -- waits
    def _not_ours(self, what: str, cm_id: Any) -> UsageError:
        if isinstance(cm_id, CmId) and getattr(cm_id, "channel", None) is not None:
            return UsageError("%s: id uid %d is on another event channel than this AsyncChannel's: its events "
                              "are read there (use that channel's AsyncChannel)" % (what, cm_id.uid))
        return UsageError("%s takes CmIds of this AsyncChannel's channel, got %r" % (what, cm_id))

    def _loop_or_closed(self, fut_type: Any = None) -> Tuple[Optional[asyncio.AbstractEventLoop], Any]:
        """The running loop with the reader on it, or (None, a future failed with "closed")."""
        loop = self._loop
        if loop is not None and not loop.is_closed():  # None once closed; closed: asyncio.run returned
            return loop, None
        try:
            return self._start(), None
        except StateError:
            if self._closed is None:
                raise
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        fut.set_exception(_closed_error(self._closed or ""))
        return None, fut

    def outcome_of(self, cm_id: CmId, call: Call, fn: Callable[..., Any], *args: Any, raise_on_error: bool = True,
                   **kwargs: Any) -> "asyncio.Future[Event]":
        """Make a call on ``cm_id`` and return a future of its outcome event (not a coroutine:
        the call is made at once, and no Task is needed to hold it).

        ``fn(*args, **kwargs)`` is the call (``cm_id.resolve_route``, ``cm_id.connect`` ...)
        and ``call`` names it (:class:`~pyrdmacm.Call`): the future gets the id's next event
        among ``OUTCOMES[(cm_id.kind, call)]``, acknowledged; a failure event (or a non-zero
        status) sets EventError unless ``raise_on_error`` is false.  A refusal of the call
        is set on the future.  Must be called with the loop running.
        """
        loop = self._loop
        if loop is None or loop is not _running_loop():  # None once closed; not running: asyncio.run returned
            loop, closed = self._loop_or_closed()
            if loop is None:
                return closed  # type: ignore[no-any-return]
        fut: asyncio.Future[Event] = loop.create_future()
        try:
            if cm_id.channel is not self.channel:
                raise self._not_ours("outcome_of", cm_id)
            take = TAKES_ANY_KIND.get(call) if call.__class__ is Call else None
            if take is None:
                take = take_of(cm_id.kind, call)
            owner = getattr(fn, "__self__", cm_id)
            if owner is not cm_id and isinstance(owner, CmId):
                raise UsageError("outcome_of: %r is a call of id uid %d, not of id uid %d: pass the id's own "
                                 "method (cm_id.%s)" % (fn, owner.uid, cm_id.uid, call))
        except AttributeError:  # no CmId
            fut.set_exception(self._not_ours("outcome_of", cm_id))
            return fut
        except UsageError as e:
            fut.set_exception(e)
            return fut
        try:
            fn(*args, **kwargs)
        except Exception as e:  # refused before or by the kernel: the future says so
            fut.set_exception(e)
            return fut
        # expected after the call: its event is read by this loop, which is here now
        self.channel.expect(cm_id.uid, FutureWaiter(take, fut, raise_on_error, call, kwargs))
        return fut

    def outcomes_of(self, ids: Iterable[CmId], call: Call, fn: Callable[..., Any], *args: Any,
                    raise_on_error: bool = True, **kwargs: Any) -> "asyncio.Future[List[Event]]":
        """``fn(cm_id, *args, **kwargs)`` for every id (``CmId.resolve_route``, or any function of
        an id); one future of all their outcome events, in the ids' order.

        Every id is checked first (a CmId of this channel, given once: UsageError, nothing
        sent).  With ``raise_on_error`` the first failure event sets EventError (the other
        events are still taken and acked).  A refusal part-way stops the calls and is set on
        the future: the ids before the refused one are under way (their events still come
        to the batch, and are acked), the refused one and those after it were not called.
        """
        loop, closed = self._loop_or_closed()
        if loop is None:
            return closed  # type: ignore[no-any-return]
        fut: asyncio.Future[List[Event]] = loop.create_future()
        ids = list(ids)
        ch = self.channel
        try:
            uids = [cm_id.uid for cm_id in ids if cm_id.channel is ch]
            take: Dict[Any, bool] = {}
            for kind in {cm_id.kind for cm_id in ids} or {_CONNECTED}:
                take.update(take_of(kind, call))  # an event is ok or failed alike for every kind
        except AttributeError:
            fut.set_exception(self._not_ours("outcomes_of", next((i for i in ids if not isinstance(i, CmId)), ids)))
            return fut
        except UsageError as e:
            fut.set_exception(e)
            return fut
        index = dict(zip(uids, range(len(uids))))
        if len(index) != len(ids):
            fut.set_exception(self._batch_refusal(ids, index))
            return fut
        if not ids:
            fut.set_result([])
            return fut
        batch = BatchWaiter(take, fut, raise_on_error, call, kwargs, index)
        k = 0
        try:
            for k, cm_id in enumerate(ids):
                fn(cm_id, *args, **kwargs)
        except Exception as exc:  # id k and those after it were not called; those before it are under way
            del uids[k:]
            batch.left = k
            text = "in a batch of %d ids: id %d (uid %d) was refused; %s" % (
                len(ids), k, ids[k].uid, "the %d before it are under way (their events are taken and "
                "acked), the rest were not called" % k if k else "no id was called")
            if hasattr(exc, "add_note"):
                exc.add_note(text)
            else:  # before Python 3.11: the same attribute (PEP 678), which tracebacks do not show there
                exc.__notes__ = [*getattr(exc, "__notes__", ()), text]
            fut.set_exception(exc)
        if uids:
            ch.expect_many(uids, batch)
        return fut

    def _batch_refusal(self, ids: List[Any], index: Dict[int, int]) -> UsageError:
        seen: Dict[int, int] = {}
        ch = self.channel
        for k, cm_id in enumerate(ids):
            if getattr(cm_id, "channel", None) is not ch:
                return self._not_ours("outcomes_of", cm_id)
            if cm_id.uid in seen:
                return UsageError("outcomes_of: id uid %d is given twice (places %d and %d of the batch): its "
                                  "events could not be told apart; give each id once (nothing was called)"
                                  % (cm_id.uid, seen[cm_id.uid], k))
            seen[cm_id.uid] = k
        return UsageError("outcomes_of: ids that cannot be told apart: give each id once")  # pragma: no cover

    # -- the verbs: a future at once (start_*), or a coroutine
    def start_resolve_addr(self, cm_id: CmId, dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                           raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_addr(dst, src=src, timeout_ms=...)`` now; a future of ADDR_RESOLVED
        (ADDR_ERROR: EventError, unless not ``raise_on_error``): :meth:`outcome_of` for this
        call (``asyncio.gather`` over these futures needs no Task per id)."""
        return self.outcome_of(cm_id, Call.RESOLVE_ADDR, getattr(cm_id, "resolve_addr", _no_call), dst, src=src,
                               timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    def start_resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *,
                            raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_route(timeout_ms)`` now; a future of ROUTE_RESOLVED (ROUTE_ERROR:
        EventError, unless not ``raise_on_error``).  As :meth:`start_resolve_addr`."""
        return self.outcome_of(cm_id, Call.RESOLVE_ROUTE, getattr(cm_id, "resolve_route", _no_call), timeout_ms,
                               raise_on_error=raise_on_error)

    async def resolve_addr(self, cm_id: CmId, dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                           raise_on_error: bool = True) -> Event:
        """``cm_id.resolve_addr(dst, src=src, timeout_ms=...)``, awaited (a coroutine: the command is
        sent when it first runs): ADDR_RESOLVED; ADDR_ERROR raises EventError unless not
        ``raise_on_error``.  The future form: :meth:`start_resolve_addr`."""
        return await self.start_resolve_addr(cm_id, dst, src=src, timeout_ms=timeout_ms,
                                             raise_on_error=raise_on_error)

    async def resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *, raise_on_error: bool = True) -> Event:
        """``cm_id.resolve_route(timeout_ms)``, awaited (a coroutine): ROUTE_RESOLVED; ROUTE_ERROR
        raises EventError unless not ``raise_on_error``.  The future form: :meth:`start_resolve_route`."""
        return await self.start_resolve_route(cm_id, timeout_ms, raise_on_error=raise_on_error)

    async def resolve_addr_many(self, ids: Iterable[CmId], dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                                raise_on_error: bool = True) -> List[Event]:
        """``resolve_addr`` for every id; all their outcome events, in order (a coroutine over
        :meth:`outcomes_of`: one future for the batch, the cheapest way for many ids)."""
        return await self.outcomes_of(ids, Call.RESOLVE_ADDR, CmId.resolve_addr, dst, src=src,
                                      timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    async def resolve_route_many(self, ids: Iterable[CmId], timeout_ms: int = 2000, *,
                                 raise_on_error: bool = True) -> List[Event]:
        """``resolve_route`` for every id; all their outcome events, in order (over :meth:`outcomes_of`)."""
        return await self.outcomes_of(ids, Call.RESOLVE_ROUTE, CmId.resolve_route, timeout_ms,
                                      raise_on_error=raise_on_error)

    # -- connections: every verb awaited, the RTU sent by the helper
    def _ours(self, what: str, cm_id: Any) -> asyncio.AbstractEventLoop:
        """The running loop, once ``cm_id`` is known to be an id of this adapter's channel (else
        UsageError; a closed adapter: StateError)."""
        loop = self._start()
        if not isinstance(cm_id, CmId) or getattr(cm_id, "channel", None) is not self.channel:
            raise self._not_ours(what, cm_id)
        return loop

    def _wait_for(self, loop: asyncio.AbstractEventLoop, uid: int, take: Any, raising: bool,
                  call: Union[Call, str]) -> "asyncio.Future[Event]":
        """A future of the next event of ``uid`` (an id's or a membership's) among ``take``'s."""
        fut: asyncio.Future[Event] = loop.create_future()
        self.channel.expect(uid, FutureWaiter(take, fut, raising, call, None))
        return fut

    async def connect(self, cm_id: CmId, param: Any = None, *, raise_on_error: bool = True,
                      **fields: Any) -> Event:
        """``cm_id.connect(param, **fields)`` (CONNECT), awaited; on CONNECT_RESPONSE the RTU is
        sent here (``cm_id.establish()``) before the event is returned, so the peer gets
        ESTABLISHED.  ``param`` and ``fields`` as for :meth:`CmId.connect` (a ConnParam, or
        ``qp_num=...``, ``private_data=b"..."`` ...).

        A connected id returns CONNECT_RESPONSE (``event.param``: the peer's ConnParam, its
        private data padded to 196 bytes); a datagram id ESTABLISHED (the SIDR REP:
        ``event.param`` a UdParam).  REJECTED, UNREACHABLE, CONNECT_ERROR raise EventError
        (``.event``: the event, with ``status``, ``private_data`` and ``explain()``) unless
        not ``raise_on_error``: then the event is returned and no RTU is sent.  If the wait
        is cancelled the id stays where the kernel's answer puts it (CONNECT, or RESPONSE
        without an RTU): destroy it, and the peer gets REJECTED.
        """
        ev = await self.outcome_of(cm_id, Call.CONNECT, getattr(cm_id, "connect", _no_call), param,
                                   raise_on_error=raise_on_error, **fields)
        if ev.event is _CONNECT_RESPONSE and not ev.status:
            cm_id.establish()
        return ev

    async def accept(self, cm_id: CmId, param: Any = None, *, raise_on_error: bool = True,
                     **fields: Any) -> Optional[Event]:
        """``cm_id.accept(param, **fields)`` (ACCEPT) on a connection request's id (what
        :meth:`requests` yields), awaited: the ESTABLISHED event, when the peer's RTU comes.
        REJECTED (the peer destroyed its id instead), UNREACHABLE, CONNECT_ERROR raise
        EventError unless not ``raise_on_error``.  A datagram id gets no event: the SIDR REP
        is sent and this returns None at once.  A refusal raises (KernelError: the kernel
        then rejected the request itself, the peer gets REJECTED 28)."""
        if isinstance(cm_id, CmId) and cm_id.kind is _DATAGRAM:
            self._ours("accept", cm_id)
            cm_id.accept(param, **fields)
            return None
        return await self.outcome_of(cm_id, Call.ACCEPT, getattr(cm_id, "accept", _no_call), param,
                                     raise_on_error=raise_on_error, **fields)

    async def disconnect(self, cm_id: CmId, *, raise_on_error: bool = True) -> Optional[Event]:
        """``cm_id.disconnect()`` (DISCONNECT: the DREQ), awaited: this side's DISCONNECTED
        event, when the peer's DREP comes.  If the peer disconnected first (DISCONNECTED
        came already, and the channel answered its DREQ), nothing is sent: that event is
        returned if it is still queued for :meth:`get_event`, else None.  DISCONNECTED with
        a status (-110: the peer never answered the DREQ) raises EventError unless not
        ``raise_on_error``; the connection is down either way.  TIMEWAIT_EXIT follows:
        :meth:`wait_event`."""
        loop = self._ours("disconnect", cm_id)
        take = TAKES[(_CONNECTED, Call.DISCONNECT)]
        if cm_id.state is State.DISCONNECTED:
            return self._take_queued(cm_id, take, raise_on_error, "DISCONNECT")
        cm_id.disconnect()
        return await self._wait_for(loop, cm_id.uid, take, raise_on_error, "DISCONNECT")

    async def wait_event(self, cm_id: CmId, *events: CmEventType, timeout: Optional[float] = None,
                         raise_on_error: bool = False) -> Event:
        """The next event of ``cm_id`` among ``events`` (ESTABLISHED after ``notify()``,
        TIMEWAIT_EXIT after a disconnect, DISCONNECTED ...), acked; one that came before
        the call (queued for :meth:`get_event`) is taken first.  The event is returned
        whatever its status, unless ``raise_on_error``: then a failure event or a
        non-zero status raises EventError.  ``timeout`` in seconds (None: for ever):
        asyncio.TimeoutError; a wait that timed out or was cancelled keeps its place, and
        the event, if it comes, is acked and dropped."""
        loop = self._ours("wait_event", cm_id)
        take = take_events(events)
        t = timeout_seconds(timeout)
        ev = self._take_queued(cm_id, take, raise_on_error, "wait_event")
        if ev is not None:
            return ev
        fut = self._wait_for(loop, cm_id.uid, take, raise_on_error, "wait_event")
        if t is None:
            return await fut
        return await asyncio.wait_for(fut, t)

    async def join_multicast(self, cm_id: CmId, addr: Any, *, send_only: bool = False, context: Any = None,
                             raise_on_error: bool = True) -> Tuple[Membership, Event]:
        """``cm_id.join_multicast(addr, send_only=..., context=...)`` (JOIN_MCAST), awaited:
        the membership and its MULTICAST_JOIN event (``event.param``: the group's UdParam,
        qp_num 0xffffff, qkey, ``ah.dgid``).  MULTICAST_ERROR raises EventError (its
        ``event.membership`` is the membership: ``leave()`` it) unless not
        ``raise_on_error``.  ``membership.leave()`` ends it (no event)."""
        loop = self._ours("join_multicast", cm_id)
        m = cm_id.join_multicast(addr, send_only=send_only, context=context)
        ev = await self._wait_for(loop, m.uid, TAKES[(_DATAGRAM, Call.JOIN_MULTICAST)], raise_on_error,
                                  Call.JOIN_MULTICAST)
        return m, ev
