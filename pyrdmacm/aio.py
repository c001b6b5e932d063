"""asyncio on top of the blocking core: a reader on the channel's fd, and futures.

Theory of operation
-------------------
:class:`AsyncChannel` wraps an :class:`~pyrdmacm.cm.EventChannel`.  It
registers the channel's ``fileno()`` with ``loop.add_reader``; when the fd is
readable it drains every queued event with ``get_events(n, 0)`` (non-blocking
GET_EVENTs under one reader guard) and hands each to the future waiting for
that id, or to the queue read by :meth:`AsyncChannel.get_event`.  Commands are
the core's own calls (a ``write()`` each, which never blocks), so thousands of
ids resolve concurrently from one task and no thread is involved.

``resolve_addr`` and ``resolve_route`` write their command at once and return
a future of the outcome event (not a coroutine: a Task per id would cost more
than the command itself).  A synchronous refusal (``KernelError``,
``StateError``...) is set on the future, so ``await`` raises it either way.
For many ids, ``resolve_addr_many`` / ``resolve_route_many`` wait with one
future for all of them: the cheapest way (about 1.25x the blocking API in the
lab, against 1.9x for a future per id and ``gather``: docs/benchmarks.md).

    async with AsyncChannel() as ach:
        ids = [CmId(ach.channel) for _ in range(1000)]
        events = await asyncio.gather(*(ach.resolve_addr(i, "10.0.0.2") for i in ids))
        events = await ach.resolve_route_many(ids)
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Tuple

from .abi import CmEventType as E
from .cm import CmId, EventChannel
from .errors import EventError, StateError
from .events import Event

__all__ = ["AsyncChannel"]

_DRAIN = 256  # events taken per get_events call when the fd is readable


class _One:
    """Where the outcome event of one command goes: its future (acked, maybe as EventError)."""

    __slots__ = ("fut", "want", "command", "raise_on_error", "ctx")

    def __init__(self, fut: "asyncio.Future[Event]", want: E, command: str, raise_on_error: bool,
                 ctx: Dict[str, Any]) -> None:
        self.fut, self.want, self.command, self.raise_on_error, self.ctx = fut, want, command, raise_on_error, ctx

    def deliver(self, index: int, ev: Event) -> None:
        fut = self.fut
        if fut.done():  # cancelled: the event is dropped
            return
        ev.ack()
        if self.raise_on_error and ev.event is not self.want:
            fut.set_exception(EventError(ev, self.command, **self.ctx))
        else:
            fut.set_result(ev)


class _Many(_One):
    """The outcome events of many ids, in their order, behind one future."""

    __slots__ = ("events", "left")

    def __init__(self, fut: "asyncio.Future[List[Event]]", want: E, command: str, raise_on_error: bool,
                 ctx: Dict[str, Any], n: int) -> None:
        super().__init__(fut, want, command, raise_on_error, ctx)  # type: ignore[arg-type]
        self.events: List[Any] = [None] * n
        self.left = n

    def deliver(self, index: int, ev: Event) -> None:
        cm_id = ev[2]
        left = cm_id._unacked  # ev.ack(), inlined: the event is this channel's, for a CmId
        if left > 0:
            cm_id._unacked = left - 1
        else:
            ev.ack()  # raises, saying why
        self.events[index] = ev
        self.left -= 1
        fut = self.fut
        if fut.done():
            return
        if self.raise_on_error and ev.event is not self.want:
            fut.set_exception(EventError(ev, self.command, **self.ctx))
        elif not self.left:
            fut.set_result(self.events)  # type: ignore[arg-type]


class AsyncChannel:
    """An :class:`EventChannel` driven by an asyncio loop."""

    def __init__(self, channel: Optional[EventChannel] = None) -> None:
        self.channel = channel if channel is not None else EventChannel()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: uid -> where its next event goes: one ``(sink, index)``, or a list of them, in order,
        #: when several commands of one id are pending (rare: a tuple costs one allocation less)
        self._waiters: Dict[int, Any] = {}
        self._queue: Deque[Event] = deque()
        self._queue_waiters: Deque[asyncio.Future[Event]] = deque()

    # -- lifecycle
    def _ensure(self) -> None:
        if self._loop is None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self.channel.fileno(), self._on_readable)

    def close(self) -> None:
        if self._loop is not None and not self.channel.closed:
            self._loop.remove_reader(self.channel.fileno())
        self._loop = None
        for entry in self._waiters.values():
            for sink, _index in entry if entry.__class__ is list else [entry]:
                if not sink.fut.done():
                    sink.fut.set_exception(StateError("the event channel was closed"))
        self._waiters.clear()
        self.channel.close()

    async def __aenter__(self) -> "AsyncChannel":
        self._ensure()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # -- events
    def _on_readable(self) -> None:
        drain = self.channel.get_events  # many events under one reader guard
        waiters = self._waiters
        pop = waiters.pop
        while True:
            events = drain(_DRAIN, 0)
            for ev in events:
                cm_id = ev[2]  # ev.id, without the named field's descriptor
                entry = pop(cm_id.uid, None) if cm_id is not None else None
                if entry is not None:
                    if entry.__class__ is list:
                        sink, index = entry.pop(0)
                        if entry:
                            waiters[cm_id.uid] = entry
                    else:
                        sink, index = entry
                    if sink.__class__ is _Many:
                        # _Many.deliver, inlined for the events that neither fail nor complete it
                        left = cm_id._unacked
                        if left > 0 and sink.left > 1 and (ev[0] is sink.want or not sink.raise_on_error):
                            cm_id._unacked = left - 1  # ev.ack()
                            sink.events[index] = ev
                            sink.left -= 1
                            continue
                    sink.deliver(index, ev)
                    continue
                while self._queue_waiters:
                    w = self._queue_waiters.popleft()
                    if not w.done():
                        w.set_result(ev)
                        break
                else:
                    self._queue.append(ev)
            if len(events) < _DRAIN:
                return  # get_events stopped short: nothing more is queued

    async def get_event(self) -> Event:
        """The next event not claimed by a pending ``resolve_*`` of this adapter."""
        self._ensure()
        if self._queue:
            return self._queue.popleft()
        assert self._loop is not None
        fut: asyncio.Future[Event] = self._loop.create_future()
        self._queue_waiters.append(fut)
        return await fut

    def _wait_for(self, uid: int, sink: _One, index: int) -> None:
        """Route the next event of id ``uid`` to ``sink``; registered before the command is written."""
        waiters = self._waiters
        entry = waiters.get(uid)
        if entry is None:
            waiters[uid] = (sink, index)
        elif entry.__class__ is list:
            entry.append((sink, index))
        else:
            waiters[uid] = [entry, (sink, index)]

    def _unwait(self, uid: int, sink: _One) -> None:
        waiters = self._waiters
        entry = waiters.get(uid)
        if entry is None:
            return
        if entry.__class__ is list:
            entry[:] = [p for p in entry if p[0] is not sink]
            if not entry:
                del waiters[uid]
        elif entry[0] is sink:
            del waiters[uid]

    def _call(self, cm_id: CmId, call: Callable[[], Any], want: E, command: str, raise_on_error: bool,
              ctx: Dict[str, Any]) -> "asyncio.Future[Event]":
        if self._loop is None:
            self._ensure()
        assert self._loop is not None
        fut: asyncio.Future[Event] = self._loop.create_future()
        sink = _One(fut, want, command, raise_on_error, ctx)
        self._wait_for(cm_id.uid, sink, 0)
        try:
            call()
        except Exception as e:
            self._unwait(cm_id.uid, sink)
            fut.set_exception(e)
        return fut

    def _call_many(self, ids: Iterable[CmId], method: Callable[..., Any], args: Tuple[Any, ...], want: E,
                   command: str, raise_on_error: bool, ctx: Dict[str, Any]) -> "asyncio.Future[List[Event]]":
        if self._loop is None:
            self._ensure()
        assert self._loop is not None
        ids = list(ids)
        fut: asyncio.Future[List[Event]] = self._loop.create_future()
        sink = _Many(fut, want, command, raise_on_error, ctx, len(ids))
        waiters = self._waiters
        # the arguments spread once, not per id (``method(cm_id, *args)`` builds a tuple each time)
        a, b, c = (args + (None, None, None))[:3]
        n_args = len(args)
        for index, cm_id in enumerate(ids):
            uid = cm_id.uid
            if uid in waiters:
                self._wait_for(uid, sink, index)
            else:
                waiters[uid] = (sink, index)  # _wait_for, inlined
            try:
                if n_args == 3:
                    method(cm_id, a, b, c)
                elif n_args == 1:
                    method(cm_id, a)
                else:
                    method(cm_id, *args)
            except Exception as e:
                # the ids before this one are under way: their events are still taken (and acked)
                self._unwait(cm_id.uid, sink)
                for rest in ids[index + 1 :]:
                    self._unwait(rest.uid, sink)
                fut.set_exception(e)
                break
        if not ids:
            fut.set_result([])
        return fut

    # -- commands: written at once, a future of the outcome returned
    def resolve_addr(
        self, cm_id: CmId, dst: Any, src: Any = None, timeout_ms: int = 2000, *, raise_on_error: bool = True
    ) -> "asyncio.Future[Event]":
        """``cm_id.resolve_addr``; a future of ADDR_RESOLVED (ADDR_ERROR: EventError, unless not ``raise_on_error``)."""
        return self._call(
            cm_id, lambda: cm_id.resolve_addr(dst, src, timeout_ms), E.ADDR_RESOLVED, "RESOLVE_ADDR",
            raise_on_error, {"dst": dst, "src": src},
        )

    def resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *, raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_route``; a future of ROUTE_RESOLVED (ROUTE_ERROR: EventError, unless not ``raise_on_error``)."""
        return self._call(
            cm_id, lambda: cm_id.resolve_route(timeout_ms), E.ROUTE_RESOLVED, "RESOLVE_ROUTE", raise_on_error, {}
        )

    def resolve_addr_many(
        self, ids: Iterable[CmId], dst: Any, src: Any = None, timeout_ms: int = 2000, *, raise_on_error: bool = True
    ) -> "asyncio.Future[List[Event]]":
        """``resolve_addr`` for every id; one future of all their outcome events, in order.

        With ``raise_on_error`` the first failure event sets EventError (the others are
        still taken and acked); a synchronous refusal stops issuing and is set on the future.
        """
        return self._call_many(
            ids, CmId.resolve_addr, (dst, src, timeout_ms), E.ADDR_RESOLVED, "RESOLVE_ADDR", raise_on_error,
            {"dst": dst, "src": src},
        )

    def resolve_route_many(
        self, ids: Iterable[CmId], timeout_ms: int = 2000, *, raise_on_error: bool = True
    ) -> "asyncio.Future[List[Event]]":
        """``resolve_route`` for every id; one future of all their outcome events, in order."""
        return self._call_many(
            ids, CmId.resolve_route, (timeout_ms,), E.ROUTE_RESOLVED, "RESOLVE_ROUTE", raise_on_error, {}
        )
