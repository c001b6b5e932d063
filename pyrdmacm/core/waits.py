"""The waits of a channel: one way for everything that waits for the event answering a call
(sync mode, the asyncio adapter, the CLI).  A mixin of :class:`~pyrdmacm.core.channel.Channel`,
whose reader delivers the events (:mod:`pyrdmacm.core.router` says how a wait takes one).
"""

from __future__ import annotations

import time
from collections import deque
from typing import TYPE_CHECKING, Any, Deque, List, Optional

from . import process as _process
from .poll import timeout_seconds
from .router import Router, Waiter

#: what the channel's read returns, holding the guard, for an event it gave to a waiter
#: (the channel's module imports this one: the sentinel lives here)
_ROUTED: Any = object()

__all__ = ["Waiting"]


class Waiting:
    """The waits API of a :class:`~pyrdmacm.core.channel.Channel` (its registry of waits, ``_waits``)."""

    if TYPE_CHECKING:  # pragma: no cover - the channel's
        _waits: Router
        _queued: Deque[Any]
        _live: int
        _wait_first: bool
        _reader: Optional[int]
        _waker: Any
        registry: Any
        closed: bool

        def _check(self) -> None: ...

        def _hold(self) -> List[bool]: ...

        def _let_go(self) -> None: ...

        def _wait_readable(self, deadline: Optional[float]) -> bool: ...

        def _read(self, timeout: Optional[float], count: bool, burst: bool, held: bool) -> Any: ...

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
        slot = self._hold()
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            look = not self._wait_first  # a sync id's own channel: its event is rarely there yet
            while not waiter.done:
                if look:
                    ev = self._read(0, True, False, True)
                    if ev is _ROUTED:  # given to a waiter (this one?): the loop looks
                        continue
                    if ev is not None:
                        if drop:
                            ev.ack()
                        else:
                            self._queued.append(ev)
                        continue
                look = True
                if not self._wait_readable(deadline):
                    break  # timed out (a wake-up: the loop looks whether the wait ended)
            return waiter.done
        finally:
            if self.registry.grave or self.closed:
                self._let_go()
            else:
                slot.append(True)

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
            if self._reader is not None:
                self._waker.signal()
        if self._queued and why != "migrated":
            gone = set(uids)
            self._queued = deque(ev for ev in self._queued if ev.id.uid not in gone or not ev.id.uid)
