"""The asyncio adapter's waiters: a call's outcome delivered by the channel's router
(:mod:`pyrdmacm.core.router`) resolves a future (:class:`FutureWaiter`), one place of a batch's
result (:class:`BatchWaiter`), or, for the adapter's own :class:`CloseWatch` (which takes
no event), tells the adapter that its channel was closed.

The router may end a wait from any thread (``destroy()`` in another thread): the future
is failed in its loop's thread then.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any, Dict, List, Optional, Union

from ..core.router import Waiter
from ..addr import parse_address
from ..errors import EventError
from ..core.events import Event
from ..state import Call

__all__ = ["BatchWaiter", "CloseWatch", "FutureWaiter", "event_error", "in_loop"]


def event_error(ev: Event, call: Union[Call, str], kwargs: Optional[Dict[str, Any]]) -> EventError:
    """The EventError for a failure event answering ``call`` (error path only)."""
    cm_id = ev.id
    command = call.name if isinstance(call, Call) else call
    if call is Call.RESOLVE_ADDR and getattr(cm_id.channel, "legacy", False):
        command = "RESOLVE_IP"
    src = kwargs.get("src") if kwargs else None
    if src is not None:
        try:
            src = parse_address(src)
        except Exception:
            pass
    return EventError(ev, command, src=src, dst=getattr(cm_id, "destination", None))


def in_loop(loop: asyncio.AbstractEventLoop, fn: Any, *args: Any) -> None:
    """``fn(*args)`` in ``loop``'s thread: at once when called there, else through the loop
    (a destroy() or close() in another thread); nothing when the loop is closed (nobody
    awaits its futures any more)."""
    try:
        here = asyncio.get_running_loop() is loop
    except RuntimeError:
        here = False
    if here:
        fn(*args)
        return
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        pass


def _set_exception(fut: "asyncio.Future[Any]", error: BaseException) -> None:
    if not fut.done():
        fut.set_exception(error)


class FutureWaiter(Waiter):
    """A wait whose event resolves a future (a failure sets EventError when ``raising``)."""

    __slots__ = ("fut", "raising", "call", "kwargs")

    def __init__(self, take: Any, fut: "asyncio.Future[Any]", raising: bool, call: Union[Call, str],
                 kwargs: Optional[Dict[str, Any]]) -> None:
        self.take, self.fut, self.raising, self.call, self.kwargs = take, fut, raising, call, kwargs
        # ``event`` and ``error`` stay unset: the future says whether it is done

    def deliver(self, uid: int, ev: Any, ok: bool) -> None:
        fut = self.fut
        if fut.done():  # cancelled: acked, and dropped
            return
        if self.raising and (not ok or ev.status):
            fut.set_exception(event_error(ev, self.call, self.kwargs))
        else:
            fut.set_result(ev)

    def end(self, uid: int, error: BaseException) -> None:
        self.error = error
        if not self.fut.done():
            in_loop(self.fut.get_loop(), _set_exception, self.fut, error)


class BatchWaiter(FutureWaiter):
    """The outcome events of many ids, in their order, behind one future: the waiter of all
    their uids (no object per id)."""

    __slots__ = ("index", "events", "left")

    def __init__(self, take: Any, fut: "asyncio.Future[List[Event]]", raising: bool, call: Call,
                 kwargs: Dict[str, Any], index: Dict[int, int]) -> None:
        super().__init__(take, fut, raising, call, kwargs)
        #: uid -> the id's place in the batch (and in the result)
        self.index = index
        self.events: List[Any] = [None] * len(index)
        self.left = len(index)

    def deliver(self, uid: int, ev: Any, ok: bool) -> None:
        self.events[self.index[uid]] = ev
        self.left -= 1
        fut = self.fut
        if fut.done():  # failed already, or cancelled: the event is acked and dropped
            return
        if self.raising and (not ok or ev.status):
            fut.set_exception(event_error(ev, self.call, self.kwargs))
        elif not self.left:
            fut.set_result(self.events)


class CloseWatch(Waiter):
    """The adapter's own waiter on the channel, which takes no event: the channel ends it
    when it is closed (from any thread) or its reader fails, and the adapter stops."""

    __slots__ = ("adapter",)

    def __init__(self, adapter: Any) -> None:  # an AsyncChannel (which imports this module)
        super().__init__({})
        self.adapter = weakref.ref(adapter)

    def end(self, uid: int, error: BaseException) -> None:
        adapter = self.adapter()
        loop = adapter._loop if adapter is not None else None
        if adapter is None or loop is None or not adapter.channel.closed:
            return  # not a close: the adapter's own _shutdown ended it
        in_loop(loop, adapter._shutdown, "by EventChannel.close()")
