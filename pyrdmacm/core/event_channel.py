"""Event channels: ``rdma_create_event_channel``, and the ids made on one.

An :class:`EventChannel` is one open rdma_cm fd: the ids made on it (``CmId(channel)``,
:meth:`EventChannel.create_id`, :meth:`EventChannel.create_ids`) have their events read
from it (``get_event``; the asyncio adapter, :mod:`pyrdmacm.aio`, reads it from a loop).
What it does with the fd -- the writes, the one reader, the registry of ids, the waits
for the events that answer calls, the faults -- is its engine's,
:class:`pyrdmacm.core.channel.Channel`: this module adds what needs the ids' class.
"""

from __future__ import annotations

import time
import warnings
from typing import Any, Iterable, List, Optional, Tuple, Union

from . import process as _process
from .. import abi
from .channel import _ROUTED, Channel
from .cmid import CmId, UnackedEventsWarning, _batch, unacked_warning
from .events import Event, EventBatch
from .poll import timeout_seconds
from .params import port_space
from ..errors import StateError, UsageError
from ..state import State, rules_for

_PS_TCP = abi.PortSpace.TCP
_TCP_RC = rules_for(_PS_TCP, abi.QpType.RC)
_new_object = object.__new__
_monotonic = time.monotonic

__all__ = ["EventChannel", "UnackedEventsWarning"]


class EventChannel(Channel[CmId]):
    """One rdma_cm fd: ``fileno()`` for select/poll, ``get_event()`` to read events, ids made
    on it.

    ``EventChannel()`` opens the kernel device; ``EventChannel(transport)`` uses any
    :class:`~pyrdmacm.core.device.Transport` (the fake kernel of :mod:`pyrdmacm.testing`).
    """

    def create_id(
        self, ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP, *, qp_type: Optional[int] = None, context: Any = None
    ) -> CmId:
        """A new id on this channel: ``rdma_create_id(channel, &id, context, ps)``: the same id
        as ``CmId(channel, ps, ...)``."""
        if ps is _PS_TCP and qp_type is None and context is None and self._live == _process.PID:
            cm_id: CmId = _new_object(CmId)._create(self, _TCP_RC)  # what CmId() does, without its checks
            return cm_id
        return CmId(self, ps, qp_type=qp_type, context=context)

    def create_ids(
        self, n: int, ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP, *, qp_type: Optional[int] = None
    ) -> List[CmId]:
        """``n`` new ids on this channel, the ids ``n`` ``create_id()`` calls would make.

        All or nothing: if the kernel refuses one (EMFILE, ENOMEM ...), the ids made so far
        are destroyed again and the refusal is raised.
        """
        if n.__class__ is not int or n < 0:
            raise UsageError("n must be an int >= 0 (how many ids), got %r" % (n,))
        custom = ps is not _PS_TCP or qp_type is not None
        rules = rules_for(*port_space(ps, qp_type)) if custom else _TCP_RC
        if self._live != _process.PID:
            self._check()
        out: List[CmId] = []
        append = out.append
        try:
            for _ in range(n):
                append(_new_object(CmId)._create(self, rules))
        except BaseException:
            for cm_id in out:  # all or nothing
                try:
                    cm_id.destroy()
                except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                    pass
            raise
        return out

    def destroy_ids(self, ids: Iterable[CmId]) -> List[int]:
        """Destroy many ids of this channel; their ``events_reported``, in order.

        Every id is checked first (of this channel, not destroyed, given once: UsageError
        or StateError before any syscall). Ids with events not acked are reported in one
        :class:`UnackedEventsWarning`.
        """
        ids = list(ids)
        if self._live != _process.PID:
            if self.closed:
                for cm_id in ids:
                    if getattr(cm_id, "channel", None) is self:
                        cm_id._closed()
                raise StateError("destroy_ids: the event channel is closed (the kernel destroyed its ids then)")
            self._check()
        try:  # one pass that only says yes or no; _destroy_refusal says what is wrong
            ok = all([cm_id.channel is self and cm_id._state is not State.DESTROYED for cm_id in ids])
            ok = ok and len(set(ids)) == len(ids)
        except (AttributeError, TypeError):
            ok = False
        if not ok:
            raise self._destroy_refusal(ids)
        out: List[int] = []
        _batch.quiet = True  # one warning for the batch (this thread's destroy() calls say nothing)
        try:
            for cm_id in ids:
                out.append(cm_id.destroy())
        finally:
            _batch.quiet = False
            unacked = [cm_id for cm_id in ids[: len(out)] if cm_id._unacked]
            if unacked:
                warnings.warn(unacked_warning(unacked), stacklevel=2)
        return out

    def _destroy_refusal(self, ids: List[Any]) -> Exception:
        """What is wrong with the ids given to destroy_ids (the first fault found)."""
        seen = set()
        for cm_id in ids:
            if not isinstance(cm_id, CmId) or cm_id.channel is not self:
                return UsageError("destroy_ids takes ids of this channel, got %r" % (cm_id,))
            if cm_id._state is State.DESTROYED:
                return StateError("destroy_ids: id uid %d is already destroyed" % cm_id.uid)
            if id(cm_id) in seen:
                return UsageError("destroy_ids: id uid %d is given twice" % cm_id.uid)
            seen.add(id(cm_id))
        return UsageError("destroy_ids: %d ids that cannot be told apart" % len(ids))  # pragma: no cover

    # -- events, many in one call
    def get_events(self, max_events: int = 64, timeout: Optional[float] = 0, *, ack: bool = False) -> List[Event[CmId]]:
        """Up to ``max_events`` queued events in one call (a GET_EVENT each), waiting ``timeout``
        seconds for the first (0, the default: only look; None: for ever); with ``ack=True``
        each is acknowledged as it is read.  Events that answer a pending wait go to it and
        are not counted."""
        timeout = self._many(max_events, timeout)
        count = not ack
        out: List[Event[CmId]] = []
        try:
            queued = self._queued
            while queued and len(out) < max_events:
                ev = queued.popleft()
                if ack:
                    ev.ack()
                out.append(ev)
            if not out:
                first = self._first(timeout, count)
                if first is None:
                    return out
                out.append(first)
            if len(out) < max_events:
                self._read(0, count, True, out, max_events)  # the rest of the burst, into out
            return out
        finally:
            self._let_go()

    def get_batch(self, max_events: int = 64, timeout: Optional[float] = 0) -> EventBatch:
        """Up to ``max_events`` queued events in one call, and no object made per event: an
        :class:`~pyrdmacm.core.events.EventBatch` whose lists say each event's id, type and
        status (``zip(batch.ids, batch.events, batch.statuses)``), waiting ``timeout`` seconds
        for the first (0, the default: only look; None: for ever).  Each is acknowledged as it
        is read and its id moved, as get_event's.  The lists hold the events that carry
        nothing more (:data:`~pyrdmacm.core.events.PLAIN_EVENTS`: the address, route,
        disconnect and device events); the first other event ends the batch as its ``last``,
        a whole :class:`~pyrdmacm.Event` to acknowledge.  Events that answer a pending wait
        go to it and are not counted.  An empty batch (no entries, ``last`` None): nothing
        came within ``timeout``."""
        timeout = self._many(max_events, timeout)
        batch: Tuple[List[Any], List[Any], List[Any]] = ([], [], [])
        try:
            last = self._queued.popleft() if self._queued else self._first(timeout, True, max_events, batch)
            return EventBatch(batch[0], batch[1], batch[2], last)
        finally:
            self._let_go()

    def _many(self, max_events: int, timeout: Optional[float]) -> Optional[float]:
        """The checks of a read of many events (UsageError, StateError), the one-reader guard
        taken: the timeout in seconds."""
        if self._live != _process.PID:
            self._check()
        if max_events.__class__ is not int or max_events < 1:
            raise UsageError("max_events must be an int >= 1, got %r" % (max_events,))
        if timeout is not None and (timeout.__class__ is not int or timeout < 0):
            timeout = timeout_seconds(timeout)
        self._hold()
        return timeout

    def _first(self, timeout: Optional[float], count: bool, room: int = 0, batch: Any = None) -> Any:
        """The first read of a call for many events, holding the guard: an event given to a
        waiter is followed by the next read, within the time left."""
        deadline = _monotonic() + timeout if timeout else None
        read = self._read
        first = read(timeout, count, True, None, room, batch)
        while first is _ROUTED:
            first = read(timeout if deadline is None else max(0.0, deadline - _monotonic()), count, True, None, room,
                         batch)
        return first
