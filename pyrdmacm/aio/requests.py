"""The asyncio adapter's ``requests()``: the connection requests of a listener, as an async iterator.

CONNECT_REQUEST events answer no call, so no wait takes them: the adapter's :class:`Handout`
(a part the :class:`~pyrdmacm.aio.AsyncChannel` holds) gives each to the :class:`Requests` of
its listener while an iterator reads it (else it goes to get_event).  Each ``Requests`` is
also a waiter on the listener's uid that takes no event: the channel ends it when the
listener is destroyed or migrated away, and the iterations end at once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections import deque
from typing import Any, AsyncIterator, Deque, Dict, Optional, Protocol

from .futures import in_loop
from ..core.router import Waiter
from ..errors import EventError, StateError
from ..core.events import Event
from ..state import State

from ..core.cmid import CmId

__all__ = ["Handout", "Requests"]


class Requests(Waiter):
    """The connection requests of one listener, for its ``requests()`` iterators: the
    CONNECT_REQUEST events not taken yet (not acked), and the iterators waiting."""

    __slots__ = ("listener", "channel", "ready", "waiters", "users", "ended", "watching")

    def __init__(self, listener: "CmId") -> None:
        super().__init__({})
        self.listener = listener
        self.channel = listener.channel
        #: a waiter on the listener's uid in the channel (the router drops it when it ends it)
        self.watching = False
        #: CONNECT_REQUEST events (or an exception to raise: the listener's failure event)
        self.ready: Deque[Any] = deque()
        self.waiters: "Deque[asyncio.Future[Optional[Event]]]" = deque()
        #: the iterators reading it (it is dropped when the last one ends)
        self.users = 0
        self.ended = False

    def put(self, item: Any) -> None:
        """A request (or the listener's failure) to the oldest waiting iterator, else kept."""
        waiters = self.waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                if isinstance(item, BaseException):
                    w.set_exception(item)
                else:
                    w.set_result(item)
                return
        self.ready.append(item)

    def watch(self) -> None:
        """Be told when the listener leaves the channel (a waiter on its uid)."""
        if not self.watching and not self.ended:
            self.channel.expect(self.listener.uid, self)
            self.watching = True

    def unwatch(self) -> None:
        """No longer be told (the last iterator ended): the waiter leaves the channel."""
        if self.watching:
            self.watching = False
            self.channel.forget(self.listener.uid, self)

    def end(self, uid: int = 0, error: Optional[BaseException] = None) -> None:
        """The listener is gone (destroyed, migrated away, the channel closed), or reading
        failed (``error``: the iterators raise it, and may read again)."""
        if uid:
            self.watching = False  # the router let go of it
        listener = self.listener
        if error is None or listener.state is State.DESTROYED or listener.channel is not self.channel:
            self.ended = True
            error = None
        waiters = list(self.waiters)
        self.waiters.clear()
        for w in waiters:
            if not w.done():  # the listener may have been destroyed in another thread
                in_loop(w.get_loop(), _settle, w, error)


def _settle(w: "asyncio.Future[Optional[Event]]", error: Optional[BaseException]) -> None:
    if not w.done():
        if error is None:
            w.set_result(None)
        else:
            w.set_exception(error)


class _Adapter(Protocol):
    """What a :class:`Handout` uses of its adapter (an AsyncChannel, which imports this module)."""

    #: the loop whose reader reads the channel (None: reading stopped, or never started)
    _loop: Optional[asyncio.AbstractEventLoop]

    @property
    def closed(self) -> bool: ...

    def _start(self) -> asyncio.AbstractEventLoop: ...

    def _to_get_event(self, ev: Event) -> None: ...


class Handout:
    """The part of the asyncio adapter that hands out connection requests to ``requests()``
    iterators.

    It holds :attr:`listeners` (listener uid -> its :class:`Requests`, while an iterator
    reads them), get_event's queue (the adapter's own deque: a listener's first iterator
    takes from it the requests that came before, and those an iterator did not yield go
    back through the adapter), and the adapter, weakly (it holds this part: no cycle, so an
    adapter is still freed by reference counting alone).  Of the adapter it uses the loop
    that reads (an iterator waits on it, and starts reading again after a fault), whether
    it is closed, and its hand-over to get_event (:class:`_Adapter`)."""

    __slots__ = ("listeners", "_adapter", "_queue")

    def __init__(self, adapter: _Adapter, queue: Deque[Event]) -> None:
        self._adapter: "weakref.ReferenceType[_Adapter]" = weakref.ref(adapter)
        self._queue = queue
        #: listener uid -> its requests, while a ``requests()`` iterator reads them (the
        #: adapter's reader hands events to :meth:`take` only while it is not empty)
        self.listeners: Dict[int, Requests] = {}

    def iterate(self, listener: "CmId") -> AsyncIterator["CmId"]:
        """The ids of ``listener``'s connection requests, as they come: what
        ``AsyncChannel.requests(listener)`` returns once it knows the id is its channel's.
        The listener must be listening (StateError)."""
        if listener.state is not State.LISTEN:
            raise StateError("requests needs a listening id (state LISTEN), this one is %s (uid %d): call "
                             "listen() first" % (listener.state, listener.uid))
        return self._iterate(listener)

    async def _iterate(self, listener: "CmId") -> AsyncIterator["CmId"]:
        rq = self._attach(listener)
        try:
            while True:
                ev = await self._next(rq)
                if ev is None:
                    return
                try:
                    ev.ack()
                except StateError:  # acked by the user already
                    pass
                yield ev.id
        finally:
            self._detach(rq)

    def _attach(self, listener: "CmId") -> Requests:
        rq = self.listeners.get(listener.uid)
        if rq is None:
            rq = self.listeners[listener.uid] = Requests(listener)
            queue = self._queue
            if queue:  # requests read before anybody iterated: they are the iterator's now
                others = [ev for ev in queue if ev.listen_id is not listener]
                if len(others) != len(queue):
                    rq.ready.extend(ev for ev in queue if ev.listen_id is listener)
                    queue.clear()
                    queue.extend(others)
        rq.users += 1
        rq.watch()  # ended when the listener leaves the channel
        return rq

    def _detach(self, rq: Requests) -> None:
        rq.users -= 1
        if rq.users > 0:
            return
        uid = rq.listener.uid
        if self.listeners.get(uid) is rq:
            del self.listeners[uid]
        rq.unwatch()
        left = [ev for ev in rq.ready if not isinstance(ev, BaseException)]
        rq.ready.clear()
        adapter = self._adapter()
        if adapter is not None and not adapter.closed:
            for ev in left:  # not yielded: not lost
                adapter._to_get_event(ev)

    async def _next(self, rq: Requests) -> Optional[Event]:
        """The next request of ``rq`` (None: the iteration ends)."""
        if rq.ready:
            item = rq.ready.popleft()
            if isinstance(item, BaseException):
                raise item
            return item  # type: ignore[no-any-return]
        adapter = self._adapter()
        if rq.ended or adapter is None or adapter.closed or rq.listener.state is State.DESTROYED:
            return None
        loop = adapter._loop
        if loop is None or loop.is_closed():  # reading stopped (a fault): start again
            try:
                loop = adapter._start()
            except StateError:
                if not adapter.closed:
                    raise
                return None
        # a fault ends the router's wait on the listener; reading may have started again
        # while the iterator's body ran (another call read): watch again before every wait
        rq.watch()
        fut: asyncio.Future[Optional[Event]] = loop.create_future()
        rq.waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                rq.waiters.remove(fut)
            except ValueError:
                pass
            if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result() is not None:
                rq.ready.appendleft(fut.result())  # given to us as we were cancelled: not lost
            raise

    def take(self, ev: Event) -> bool:
        """A CONNECT_REQUEST to its listener's iterators; a listener's failure event
        (DEVICE_REMOVAL) ends them with EventError.  False: it goes to get_event."""
        listener = ev.listen_id
        if listener is not None:
            rq = self.listeners.get(listener.uid)
            if rq is None:
                return False
            rq.put(ev)  # acked when an iterator takes it
            return True
        rq = self.listeners.get(ev.id.uid)
        if rq is None or ev.ok or ev.membership is not None:
            return False
        try:
            ev.ack()
        except StateError:
            pass
        rq.put(EventError(ev, "LISTEN"))
        return True

    def end(self, error: Optional[BaseException]) -> None:
        """Reading stopped: ``error`` None (the channel was closed: the iterations end, their
        requests with them), else the iterators raise it and may read again."""
        requests = list(self.listeners.values())
        if error is None:
            self.listeners.clear()
            for rq in requests:
                rq.ready.clear()
                rq.end()
        else:
            for rq in requests:
                rq.end(0, error)
