"""asyncio on top of the blocking core: a reader on the channel's fd, and futures.

Theory of operation
-------------------
:class:`AsyncChannel` wraps an :class:`~pyrdmacm.cm.EventChannel`.  It
registers the channel's ``fileno()`` with ``loop.add_reader``; when the fd is
readable it drains every queued event with ``get_event(0)`` (a non-blocking
GET_EVENT) and hands each to the future waiting for that id, or to the queue
read by :meth:`AsyncChannel.get_event`.  Commands are the core's own calls
(a ``write()`` each, which never blocks), so thousands of ids resolve
concurrently from one task and no thread is involved.

    async with AsyncChannel() as ach:
        ids = [CmId(ach.channel) for _ in range(1000)]
        events = await asyncio.gather(*(ach.resolve_addr(i, "10.0.0.2") for i in ids))
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Deque, Dict, List, Optional

from .abi import CmEventType as E
from .cm import CmId, EventChannel
from .errors import EventError, StateError
from .events import Event

__all__ = ["AsyncChannel"]


class AsyncChannel:
    """An :class:`EventChannel` driven by an asyncio loop."""

    def __init__(self, channel: Optional[EventChannel] = None) -> None:
        self.channel = channel if channel is not None else EventChannel()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._waiters: Dict[int, List[asyncio.Future]] = {}
        self._queue: Deque[Event] = deque()
        self._queue_waiters: Deque[asyncio.Future] = deque()

    # -- lifecycle
    def _ensure(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self.channel.fileno(), self._on_readable)

    def close(self) -> None:
        if self._loop is not None and not self.channel.closed:
            self._loop.remove_reader(self.channel.fileno())
        self._loop = None
        for futs in self._waiters.values():
            for f in futs:
                if not f.done():
                    f.set_exception(StateError("the event channel was closed"))
        self._waiters.clear()
        self.channel.close()

    async def __aenter__(self) -> "AsyncChannel":
        self._ensure()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # -- events
    def _on_readable(self) -> None:
        get = self.channel.get_event
        while True:
            ev = get(0)
            if ev is None:
                return
            futs = self._waiters.get(ev.id.uid) if ev.id is not None else None
            if futs:
                fut = futs.pop(0)
                if not futs:
                    del self._waiters[ev.id.uid]
                if not fut.done():
                    fut.set_result(ev)
                continue
            while self._queue_waiters:
                w = self._queue_waiters.popleft()
                if not w.done():
                    w.set_result(ev)
                    break
            else:
                self._queue.append(ev)

    async def get_event(self) -> Event:
        """The next event not claimed by a pending ``resolve_*`` of this adapter."""
        self._ensure()
        if self._queue:
            return self._queue.popleft()
        assert self._loop is not None
        fut = self._loop.create_future()
        self._queue_waiters.append(fut)
        return await fut

    def _register(self, cm_id: CmId) -> asyncio.Future:
        """A future for the next event of ``cm_id``, registered before the command is written."""
        self._ensure()
        assert self._loop is not None
        fut = self._loop.create_future()
        self._waiters.setdefault(cm_id.uid, []).append(fut)
        return fut

    def _unregister(self, cm_id: CmId, fut: asyncio.Future) -> None:
        futs = self._waiters.get(cm_id.uid)
        if futs and fut in futs:
            futs.remove(fut)
            if not futs:
                del self._waiters[cm_id.uid]

    async def _call(self, cm_id: CmId, call: Any, want: E, command: str, raise_on_error: bool, **ctx: Any) -> Event:
        fut = self._register(cm_id)
        try:
            call()
        except BaseException:
            self._unregister(cm_id, fut)
            raise
        ev = await fut
        ev.ack()
        if raise_on_error and ev.event is not want:
            raise EventError(ev, command, **ctx)
        return ev

    # -- commands that wait for their outcome
    async def resolve_addr(
        self, cm_id: CmId, dst: Any, src: Any = None, timeout_ms: int = 2000, *, raise_on_error: bool = True
    ) -> Event:
        """``cm_id.resolve_addr`` and wait for ADDR_RESOLVED (ADDR_ERROR raises EventError)."""
        return await self._call(
            cm_id, lambda: cm_id.resolve_addr(dst, src, timeout_ms), E.ADDR_RESOLVED, "RESOLVE_ADDR",
            raise_on_error, dst=dst, src=src,
        )

    async def resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *, raise_on_error: bool = True) -> Event:
        """``cm_id.resolve_route`` and wait for ROUTE_RESOLVED (ROUTE_ERROR raises EventError)."""
        return await self._call(
            cm_id, lambda: cm_id.resolve_route(timeout_ms), E.ROUTE_RESOLVED, "RESOLVE_ROUTE", raise_on_error
        )
