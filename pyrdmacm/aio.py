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
future for all of them: the cheapest way (1.1-1.2x the blocking API in the lab,
against about 1.8x for a future per id and ``gather``, most of which is asyncio's
own cost per future: docs/benchmarks.md).

    async with AsyncChannel() as ach:
        ids = [ach.channel.create_id() for _ in range(1000)]
        events = await asyncio.gather(*(ach.resolve_addr(i, "10.0.0.2") for i in ids))
        events = await ach.resolve_route_many(ids)
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable, Deque, Dict, Iterable, List, Optional, Tuple

from .abi import CmEventType as E
from .channel import EventChannel
from .cmid import CmId
from .errors import EventError, StateError, UsageError
from .events import Event

__all__ = ["AsyncChannel"]

_DRAIN = 256  # events taken per get_events call when the fd is readable


def _event_error(ev: Event, spec: Tuple[Any, ...]) -> EventError:
    """The EventError for a failure event, from a single command's spec (want, command,
    raise_on_error, dst, src); dst is _NO_CTX for a command without addresses."""
    ctx = {} if spec[3] is _NO_CTX else {"dst": spec[3], "src": spec[4]}
    return EventError(ev, spec[1], **ctx)


_NO_CTX = object()
#: the spec of resolve_route's future (nothing varies but raise_on_error: made once)
_ROUTE_SPECS = {flag: (E.ROUTE_RESOLVED, "RESOLVE_ROUTE", flag, _NO_CTX, None) for flag in (True, False)}


class _Many:
    """The outcome events of many ids, in their order, behind one future.  It is its ids'
    waiter itself (``_waiters[uid] = batch``): no per-id entry is made."""

    __slots__ = ("fut", "want", "command", "raise_on_error", "ctx", "index", "events", "left")

    def __init__(self, fut: "asyncio.Future[List[Event]]", want: E, command: str, raise_on_error: bool,
                 ctx: Dict[str, Any], uids: List[int]) -> None:
        self.fut, self.want, self.command, self.raise_on_error, self.ctx = fut, want, command, raise_on_error, ctx
        #: uid -> the id's place in the batch (and in the result)
        self.index: Dict[int, int] = dict(zip(uids, range(len(uids))))
        self.events: List[Any] = [None] * len(uids)
        self.left = len(uids)

    def deliver(self, ev: Event) -> None:
        cm_id = ev[2]
        left = cm_id._unacked  # ev.ack(), inlined: the event is this channel's, for a CmId
        if left > 0:
            cm_id._unacked = left - 1
        else:
            ev.ack()  # raises, saying why
        self.events[self.index[cm_id.uid]] = ev
        self.left -= 1
        fut = self.fut
        if fut.done():
            return
        if self.raise_on_error and ev.event is not self.want:
            fut.set_exception(EventError(ev, self.command, **self.ctx))
        elif not self.left:
            fut.set_result(self.events)


def _is(entry: Any, sink: Any) -> bool:
    """Whether a waiter entry (a batch, or a future and its spec) belongs to ``sink``."""
    return entry is sink or (entry.__class__ is tuple and entry[0] is sink)


class AsyncChannel:
    """An :class:`EventChannel` driven by an asyncio loop."""

    def __init__(self, channel: Optional[EventChannel] = None) -> None:
        self.channel = channel if channel is not None else EventChannel()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: uid -> where its next event goes: a batch (:class:`_Many`) or ``(future, spec)``, or
        #: a list of them, in order, when several commands of one id are pending (rare)
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
            for sink in entry if entry.__class__ is list else [entry]:
                fut = sink.fut if sink.__class__ is _Many else sink[0]
                if not fut.done():
                    fut.set_exception(StateError("the event channel was closed"))
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
                    if entry.__class__ is list:  # several commands pending: the oldest's event
                        rest = entry
                        entry = rest.pop(0)
                        if rest:
                            waiters[cm_id.uid] = rest
                    if entry.__class__ is _Many:
                        # _Many.deliver, inlined for the events that neither fail nor complete it
                        left = cm_id._unacked
                        if left > 0 and entry.left > 1 and (ev[0] is entry.want or not entry.raise_on_error):
                            cm_id._unacked = left - 1  # ev.ack()
                            entry.events[entry.index[cm_id.uid]] = ev
                            entry.left -= 1
                            continue
                        entry.deliver(ev)
                        continue
                    # one command's future and its spec (want, command, raise_on_error, dst, src)
                    fut, spec = entry
                    if fut.done():  # cancelled: the event is dropped
                        continue
                    left = cm_id._unacked
                    if left > 0:
                        cm_id._unacked = left - 1  # ev.ack()
                    else:
                        ev.ack()  # raises, saying why
                    if spec[2] and ev[0] is not spec[0]:
                        fut.set_exception(_event_error(ev, spec))
                    else:
                        fut.set_result(ev)
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

    def _wait_for(self, uid: int, entry: Any) -> None:
        """Route the next event of id ``uid`` to ``entry`` (a batch, or a future and its
        spec); registered before the command is written."""
        waiters = self._waiters
        old = waiters.get(uid)
        if old is None:
            waiters[uid] = entry
        elif old.__class__ is list:
            old.append(entry)
        else:
            waiters[uid] = [old, entry]

    def _unwait(self, uid: int, sink: Any) -> None:
        waiters = self._waiters
        entry = waiters.get(uid)
        if entry is None:
            return
        if entry.__class__ is list:
            entry[:] = [p for p in entry if not _is(p, sink)]
            if not entry:
                del waiters[uid]
        elif _is(entry, sink):
            del waiters[uid]

    def _future(self) -> "asyncio.Future[Any]":
        if self._loop is None:
            self._ensure()
        assert self._loop is not None
        return self._loop.create_future()

    def _call_many(self, ids: Iterable[CmId], method: Callable[..., Any], args: Tuple[Any, ...], want: E,
                   command: str, raise_on_error: bool, ctx: Dict[str, Any]) -> "asyncio.Future[List[Event]]":
        ids = list(ids)
        fut: asyncio.Future[List[Event]] = self._future()
        uids = [cm_id.uid for cm_id in ids]
        sink = _Many(fut, want, command, raise_on_error, ctx, uids)
        if len(sink.index) != len(ids):
            fut.set_exception(UsageError("an id appears twice in one batch: its events could not be told apart; "
                                         "give each id once"))
            return fut
        if not ids:
            fut.set_result([])
            return fut
        waiters = self._waiters
        if waiters.keys() & sink.index.keys():  # some ids have a command pending already (rare)
            for uid in uids:
                self._wait_for(uid, sink)
        else:
            waiters.update(dict.fromkeys(uids, sink))  # the batch is its ids' waiter: one C call
        # the arguments spread once, not per id (``method(cm_id, *args)`` builds a tuple each time)
        a, b, c = (args + (None, None, None))[:3]
        n_args = len(args)
        k = 0
        try:
            if n_args == 3:
                for k, cm_id in enumerate(ids):
                    method(cm_id, a, src=b, timeout_ms=c)
            elif n_args == 1:
                for k, cm_id in enumerate(ids):
                    method(cm_id, a)
            else:
                for k, cm_id in enumerate(ids):
                    method(cm_id, *args)
        except Exception as e:
            # id k and those after it were not sent; the ids before it are under way: their
            # events still come to the batch (and are acked), which has failed
            for uid in uids[k:]:
                self._unwait(uid, sink)
            fut.set_exception(e)
        return fut

    # -- commands: written at once, a future of the outcome returned
    def resolve_addr(
        self, cm_id: CmId, dst: Any, src: Any = None, timeout_ms: int = 2000, *, raise_on_error: bool = True
    ) -> "asyncio.Future[Event]":
        """``cm_id.resolve_addr``; a future of ADDR_RESOLVED (ADDR_ERROR: EventError, unless not ``raise_on_error``)."""
        loop = self._loop
        fut = loop.create_future() if loop is not None else self._future()
        uid = cm_id.uid
        waiters = self._waiters
        entry = (fut, (E.ADDR_RESOLVED, "RESOLVE_ADDR", raise_on_error, dst, src))
        if uid in waiters:
            self._wait_for(uid, entry)
        else:
            waiters[uid] = entry
        try:
            cm_id.resolve_addr(dst, src=src, timeout_ms=timeout_ms)
        except Exception as e:  # refused before or by the kernel: the future says so
            self._unwait(uid, fut)
            fut.set_exception(e)
        return fut

    def resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *, raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_route``; a future of ROUTE_RESOLVED (ROUTE_ERROR: EventError, unless not ``raise_on_error``)."""
        loop = self._loop
        fut = loop.create_future() if loop is not None else self._future()
        uid = cm_id.uid
        waiters = self._waiters
        entry = (fut, _ROUTE_SPECS[bool(raise_on_error)])
        if uid in waiters:
            self._wait_for(uid, entry)
        else:
            waiters[uid] = entry
        try:
            cm_id.resolve_route(timeout_ms)
        except Exception as e:
            self._unwait(uid, fut)
            fut.set_exception(e)
        return fut

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
