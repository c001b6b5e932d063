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
from .. import abi, wire
from .channel import _ROUTED, Channel
from .cmid import CmId, UnackedEventsWarning, unacked_warning
from .events import Event, EventBatch
from .life import create_all, destroy_all
from .params import check_int, port_space
from .poll import timeout_seconds
from ..addr import AddressLike, parse_address
from ..errors import StateError, UsageError
from ..state import Call, State, rules_for

_PS_TCP = abi.PortSpace.TCP
_TCP_RC = rules_for(_PS_TCP, abi.QpType.RC)
_new_object = object.__new__
_DESTROYED = State.DESTROYED
_monotonic = time.monotonic
_CMD = wire.COMMAND
_H_RESOLVE_ADDR, _H_RESOLVE_ROUTE = _CMD["RESOLVE_ADDR"].header, _CMD["RESOLVE_ROUTE"].header
_RESOLVE_ADDR_HEAD, _resolve_addr_tail, _ROUTE_CMD = wire.RESOLVE_ADDR_HEAD, wire.resolve_addr_tail, _CMD["RESOLVE_ROUTE"].pack

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
            cm_id: CmId = _new_object(CmId)  # what CmId() does, without its checks
            create_all((cm_id,), self, _TCP_RC)
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
        out: List[CmId] = [_new_object(CmId) for _ in range(n)]
        if out:
            create_all(out, self, rules)
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
            ok = all([cm_id.channel is self and cm_id._state is not _DESTROYED for cm_id in ids])
            ok = ok and len(set(ids)) == len(ids)
        except (AttributeError, TypeError):
            ok = False
        if not ok:
            raise self._destroy_refusal(ids)
        if not ids:
            return []
        try:
            return destroy_all(ids)
        finally:  # one warning for the batch (those destroyed)
            unacked = [cm_id for cm_id in ids if cm_id._unacked and cm_id._state is _DESTROYED]
            if unacked:
                warnings.warn(unacked_warning(unacked), stacklevel=2)

    def resolve_addrs(self, ids: Iterable[CmId], dst: AddressLike, *, src: Optional[AddressLike] = None,
                      timeout_ms: int = 2000) -> None:
        """``resolve_addr(dst, src=src, timeout_ms=timeout_ms)`` for each of ``ids`` (ids of
        this channel), in order, in one call: the destination parsed and packed once, one
        RESOLVE_ADDR each.  Their ADDR_RESOLVED or ADDR_ERROR follow, as for resolve_addr
        (:meth:`get_batch` reads them).  An id of another channel is refused before any
        syscall (UsageError); a refusal of one id (illegal in its state, or the kernel's) ends
        the call there: the ids before it are resolving, those after it were not called."""
        ids = self._ours(ids, "resolve_addrs")
        if not ids:
            return
        if src is not None or self.legacy:  # each id's command as resolve_addr makes it (its checks)
            made = [cm_id._resolve_addr_command(dst, src, timeout_ms) for cm_id in ids]
            for cm_id, (d, _s, _data, _name) in zip(ids, made):
                cm_id._dst = d
            d, s, _, command = made[0]
            data = [m[2] for m in made]
            ctx = None if s is None else {"src": s, "dst": d}
        else:
            check_int("timeout_ms", timeout_ms, 0xFFFFFFFF)
            packed = self._packed_dst
            if dst is not packed[0]:
                d = parse_address(dst)
                packed = self._packed_dst = (dst, d, _resolve_addr_tail(None, d))
            d, tail = packed[1], packed[2]
            data = [_RESOLVE_ADDR_HEAD(_H_RESOLVE_ADDR, cm_id.handle, timeout_ms) + tail for cm_id in ids]
            for cm_id in ids:
                cm_id._dst = d
            command, ctx = "RESOLVE_ADDR", None
        ids[0]._call(Call.RESOLVE_ADDR, data[0], command, ctx, zip(ids[1:], data[1:]))

    def resolve_routes(self, ids: Iterable[CmId], timeout_ms: int = 2000) -> None:
        """``resolve_route(timeout_ms)`` for each of ``ids`` (ids of this channel), in order, in
        one call; their ROUTE_RESOLVED or ROUTE_ERROR follow.  Refusals as
        :meth:`resolve_addrs`'."""
        ids = self._ours(ids, "resolve_routes")
        check_int("timeout_ms", timeout_ms, 0xFFFFFFFF, 1)
        if ids:
            data = [_ROUTE_CMD(_H_RESOLVE_ROUTE, cm_id.handle, timeout_ms) for cm_id in ids]
            ids[0]._call(Call.RESOLVE_ROUTE, data[0], "RESOLVE_ROUTE", None, zip(ids[1:], data[1:]))

    def _ours(self, ids: Iterable[CmId], call: str) -> List[CmId]:
        """``ids`` as a list, every one an id of this channel (UsageError naming the first that
        is not); the channel open (StateError)."""
        ids = list(ids)
        if self._live != _process.PID:
            self._check()
        try:
            ok = all([cm_id.channel is self for cm_id in ids])
        except AttributeError:
            ok = False
        if not ok:
            stranger = next(i for i in ids if not isinstance(i, CmId) or i.channel is not self)
            raise UsageError("%s takes ids of this channel, got %r" % (call, stranger))
        return ids

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
