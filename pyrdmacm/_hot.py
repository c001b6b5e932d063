"""The hot paths, written out: CREATE_ID, RESOLVE_ADDR, RESOLVE_ROUTE, DESTROY_ID, GET_EVENT.

Theory of operation
-------------------
Under emulation a Python call costs about what the system call it wraps
costs, so the five commands that every id takes are written out here, each in
one function with no call of ours between the caller and ``write()``:
``EventChannel.get_event`` / ``get_events`` / ``create_ids`` / ``destroy_ids``
and ``CmId.resolve_addr`` / ``resolve_route`` / ``destroy`` *are* these
functions.  Each does what the reference path does -- the transition of
:mod:`pyrdmacm.state`, the command of :mod:`pyrdmacm.wire`, the channel's
``submit`` and ``_dispatch`` -- and ``tests/test_hot.py`` proves, on a
recording fake kernel, that both write the same bytes and leave the same states
and events.  Where a fast path's conditions do not hold (a legacy kernel, a
forked child, a closed channel, a state only one kind of id allows ...) it hands
over to the reference path.

The rules every function here keeps, as the reference path does: the id's
new state is set *before* the write (so that an event another thread reads
meanwhile finds the id where the command left it) and put back if the kernel
refuses the command; a refusal raises through the channel's ``_refused``.

This module also holds the two process-wide facts the hot paths read: this
process's id (kept current by a fork hook, so checking for a forked child costs
a global read, not a ``getpid()``), and the uid counter (uids are unique in the
process, so an id migrated to another channel keeps its uid).
"""

from __future__ import annotations

import itertools
import os
import time
import warnings
from typing import TYPE_CHECKING, Any, List, Optional, Type

from . import abi, wire
from ._device import ReplyBuffer
from .errors import StateError, UsageError
from .events import _UNPACK_EVENT, Event
from .state import Call, Rules, State, calls_after

if TYPE_CHECKING:  # pragma: no cover
    from .channel import EventChannel
    from .cmid import CmId

#: This process's id, kept current by a fork hook.
PID = os.getpid()


def _after_fork_in_child() -> None:
    global PID
    PID = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)

#: The next uid (``rdma_ucm_create_id.uid``, echoed in the id's events): unique in the
#: process, never 0 (the kernel queues no event for uid 0).  A C call, atomic under the GIL.
next_uid = itertools.count(1).__next__

AFTER_RESOLVE_ADDR = calls_after(Call.RESOLVE_ADDR)
AFTER_RESOLVE_ROUTE = calls_after(Call.RESOLVE_ROUTE)
_IDLE, _DESTROYED = State.IDLE, State.DESTROYED
_new_event = tuple.__new__
_new_object = object.__new__
NO_ECE = (0, 0)  # the ece of nearly every event, shared: one allocation less per event
_UNSET = object()  # get_event's deadline before its first wait
_monotonic = time.monotonic

_CREATE = wire.COMMAND["CREATE_ID"]
_DESTROY = wire.COMMAND["DESTROY_ID"]
_RESOLVE_ADDR = wire.COMMAND["RESOLVE_ADDR"]
_RESOLVE_ROUTE = wire.COMMAND["RESOLVE_ROUTE"]
_CREATE_CMD, H_CREATE, N_CREATE = _CREATE.pack, _CREATE.header, _CREATE.size
_DESTROY_CMD, H_DESTROY, N_DESTROY = _DESTROY.pack, _DESTROY.header, _DESTROY.size
_ROUTE_CMD, H_RESOLVE_ROUTE, N_RESOLVE_ROUTE = _RESOLVE_ROUTE.pack, _RESOLVE_ROUTE.header, _RESOLVE_ROUTE.size
H_RESOLVE_ADDR, N_RESOLVE_ADDR = _RESOLVE_ADDR.header, _RESOLVE_ADDR.size
#: RESOLVE_ADDR's header and its first two fields (id, timeout_ms): the rest depends on the
#: addresses only, and is packed once per destination (:func:`resolve_addr_tail`)
_RESOLVE_ADDR_HEAD, _RESOLVE_ADDR_HEAD_SIZE = _RESOLVE_ADDR.head(2)
assert _RESOLVE_ADDR.fields[:2] == ("id", "timeout_ms")
CREATE_REPLY_SIZE = _CREATE.out
DESTROY_REPLY_SIZE = _DESTROY.out


def resolve_addr_tail(src: Any, dst: Any) -> bytes:
    """RESOLVE_ADDR's bytes after ``id`` and ``timeout_ms`` for these addresses (src may be None)."""
    data = _RESOLVE_ADDR.encode(0, 0, src.size if src is not None else 0, dst.size, 0,
                                src.pack_storage() if src is not None else b"", dst.pack_storage())
    return data[len(H_RESOLVE_ADDR) + _RESOLVE_ADDR_HEAD_SIZE:]


# --------------------------------------------------------------------------- ids

def create(cm_id: "CmId", channel: "EventChannel", rules: Rules) -> "CmId":
    """CREATE_ID for a checked, not yet created ``cm_id`` on a live ``channel``, of the port
    space and QP type of ``rules``: the one place that writes it for one id (``CmId()`` and
    ``EventChannel.create_id`` end here)."""
    cm_id.channel = channel
    cm_id._rules = rules
    cm_id._state = _IDLE
    cm_id._unacked = 0
    pool = channel._create_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(CREATE_REPLY_SIZE)
    uid = cm_id.uid = next_uid()
    data = _CREATE_CMD(H_CREATE, uid, reply.address, rules.ps, rules.qp_type, b"")
    try:
        n = channel._write(data)
    except OSError as e:
        pool.append(reply)
        raise channel._refused(e, "CREATE_ID", {}) from None
    if n != N_CREATE:
        pool.append(reply)
        raise channel._short(n, data, "CREATE_ID")
    cm_id.handle = reply.u32[0]
    pool.append(reply)
    channel._ids[uid] = cm_id
    return cm_id


def create_many(channel: "EventChannel", cls: "Type[CmId]", n: int, rules: Rules) -> "List[CmId]":
    """``n`` CREATE_IDs, all or nothing: :func:`create` per id, with what it looks up taken once."""
    out: List[CmId] = []
    append = out.append
    table, pool = channel._ids, channel._create_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(CREATE_REPLY_SIZE)
    address, u32 = reply.address, reply.u32
    space, qp = rules.ps, rules.qp_type
    try:
        for _ in range(n):
            cm_id = _new_object(cls)
            cm_id.channel = channel
            cm_id._rules = rules
            cm_id._state = _IDLE
            cm_id._unacked = 0
            uid = cm_id.uid = next_uid()
            data = _CREATE_CMD(H_CREATE, uid, address, space, qp, b"")
            try:
                written = channel._write(data)
            except OSError as e:
                raise channel._refused(e, "CREATE_ID", {}) from None
            if written != N_CREATE:
                raise channel._short(written, data, "CREATE_ID")
            cm_id.handle = u32[0]
            table[uid] = cm_id
            append(cm_id)
    except BaseException:
        pool.append(reply)
        for cm_id in out:  # all or nothing
            try:
                cm_id.destroy()
            except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                pass
        raise
    pool.append(reply)
    return out


def destroy(self: "CmId") -> int:
    """``CmId.destroy``: DESTROY_ID; ``events_reported``."""
    if self._state is _DESTROYED:
        raise StateError("destroy: id uid %d is already destroyed" % self.uid)
    ch = self.channel
    if ch._live != PID:
        if ch.closed:
            self._state = _DESTROYED
            raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
        ch._check()
    pool = ch._destroy_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(DESTROY_REPLY_SIZE)
    data = _DESTROY_CMD(H_DESTROY, reply.address, self.handle, 0)
    old = self._state
    self._state = _DESTROYED  # no call of the id from here on; its events read meanwhile stay its
    try:
        n = ch._write(data)
    except OSError as e:
        pool.append(reply)
        if not ch.closed:  # refused: the id lives on (a closed channel destroyed it anyway)
            self._state = old
        raise ch._refused(e, "DESTROY_ID", {}) from None
    if n != N_DESTROY:
        pool.append(reply)
        raise ch._short(n, data, "DESTROY_ID")
    # Off the registry after DESTROY_ID: the kernel queues no event of the id from now on, and
    # one that a reader took before (counted in events_reported) must still find its id -- in
    # the grave while that reader holds the guard (it empties the grave when it lets go).
    if not ch._reader_slot:
        ch._grave[self.uid] = self
    ch._ids.pop(self.uid, None)
    if ch._watchers:
        ch._ended([self.uid], "destroyed")
    reported: int = reply.u32[0]
    pool.append(reply)
    if self._unacked:
        warnings.warn(ch._unacked_warning([self], True), stacklevel=2)
    if ch._wait_first and self.sync and not ch._ids:  # a sync id's channel is its own: closed with
        ch.close()  # its last id (a sync listener's rejected request must not close the listener's)
    return reported


def destroy_many(channel: "EventChannel", ids: "List[CmId]") -> List[int]:
    """DESTROY_ID for checked ids of ``channel``: :func:`destroy` per id, with what it looks
    up taken once."""
    out: List[int] = []
    append = out.append
    table, pool = channel._ids, channel._destroy_replies
    pop, write, slot, grave = table.pop, channel._write, channel._reader_slot, channel._grave
    try:
        reply = pool.pop()
    except IndexError:
        reply = ReplyBuffer(DESTROY_REPLY_SIZE)
    address, u32 = reply.address, reply.u32
    unacked = []
    try:
        for cm_id in ids:
            data = _DESTROY_CMD(H_DESTROY, address, cm_id.handle, 0)
            old = cm_id._state
            cm_id._state = _DESTROYED
            try:
                written = write(data)
            except OSError as e:
                if not channel.closed:
                    cm_id._state = old
                raise channel._refused(e, "DESTROY_ID", {}) from None
            if written != N_DESTROY:
                raise channel._short(written, data, "DESTROY_ID")
            if not slot:  # a reader holds the guard: see destroy()
                grave[cm_id.uid] = cm_id
            pop(cm_id.uid, None)
            append(u32[0])
            if cm_id._unacked:
                unacked.append(cm_id)
    finally:
        pool.append(reply)
        if channel._watchers and out:
            channel._ended([cm_id.uid for cm_id in ids[: len(out)]], "destroyed")
        if unacked:
            warnings.warn(channel._unacked_warning(unacked), stacklevel=3)
    return out


def resolve_addr(self: "CmId", dst: Any, *, src: Any = None, timeout_ms: int = 2000) -> Optional[Event]:
    """``CmId.resolve_addr``: the common case (the destination this channel packed last, no
    source, a valid timeout, a legal state) here; every other case in ``_resolve_addr``."""
    ch = self.channel
    cached = ch._packed_dst
    if (
        dst is cached[0]
        and src is None
        and timeout_ms.__class__ is int
        and 0 <= timeout_ms <= 0xFFFFFFFF
        and ch._live == PID
    ):
        old = self._state
        try:
            new = AFTER_RESOLVE_ADDR[old]
        except KeyError:
            return self._resolve_addr(dst, src, timeout_ms)
        data = _RESOLVE_ADDR_HEAD(H_RESOLVE_ADDR, self.handle, timeout_ms) + cached[2]
        self._state = new
        self._dst = cached[1]
        self._cache = None
        try:
            n = ch._write(data)
        except OSError as e:
            if self._state is new:
                self._state = old
            raise ch._refused(e, "RESOLVE_ADDR", {"src": None, "dst": cached[1]}) from None
        if n != N_RESOLVE_ADDR:
            raise ch._short(n, data, "RESOLVE_ADDR")
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(Call.RESOLVE_ADDR, "RESOLVE_ADDR", src=None, dst=cached[1])
        return None
    return self._resolve_addr(dst, src, timeout_ms)


def resolve_route(self: "CmId", timeout_ms: int = 2000) -> Optional[Event]:
    """``CmId.resolve_route``: RESOLVE_ROUTE; the reference path is ``_resolve_route``."""
    if (
        timeout_ms.__class__ is not int and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool))
    ) or not 0 < timeout_ms <= 0xFFFFFFFF:
        raise UsageError("timeout_ms must be an int in 1..4294967295 (milliseconds), got %r" % (timeout_ms,))
    ch = self.channel
    old = self._state
    try:
        new = AFTER_RESOLVE_ROUTE[old]
    except KeyError:
        return self._resolve_route(timeout_ms)
    if ch._live != PID:
        return self._resolve_route(timeout_ms)
    data = _ROUTE_CMD(H_RESOLVE_ROUTE, self.handle, timeout_ms)
    self._state = new
    self._cache = None
    try:
        n = ch._write(data)
    except OSError as e:
        if self._state is new:
            self._state = old
        raise ch._refused(e, "RESOLVE_ROUTE", {"dst": self._peer()}) from None
    if n != N_RESOLVE_ROUTE:
        raise ch._short(n, data, "RESOLVE_ROUTE")
    if ch._wait_first and self.sync:  # a sync id's channel is its own
        return self._complete(Call.RESOLVE_ROUTE, "RESOLVE_ROUTE", dst=self._peer())
    return None


# --------------------------------------------------------------------------- events

def get_event(self: "EventChannel", timeout: Optional[float] = None) -> Optional[Event]:
    """``EventChannel.get_event``: the common case -- an event queued, or one to wait for --
    decoded and dispatched right here (what ``_dispatch`` does, without its calls); every
    other case (a fault, an event with effects beyond its id's move) in general."""
    if timeout is not None and (timeout.__class__ is not int or timeout < 0):
        timeout = self._seconds(timeout)
    if self._fast != PID:  # closed, a forked child, or a sync id's channel
        if self._live != PID:
            self._check()
        return self._guarded(timeout)
    slot = self._reader_slot  # the one-reader guard, tried (list.pop is atomic)
    try:
        slot.pop()
    except IndexError:
        raise self._busy() from None
    try:
        deadline: Any = _UNSET
        if self._drained and timeout != 0:
            # the last look found the queue empty: wait first (as librdmacm's blocking read
            # does), instead of a GET_EVENT that most likely says EAGAIN again
            deadline = None if timeout is None else _monotonic() + timeout
            if not self._wait_readable(deadline):
                return None
            self._drained = False
        while True:
            try:
                n = self._write(self._b_get_event)
            except BlockingIOError:
                self._drained = True
                if timeout == 0:
                    return None  # only polling: nothing queued
                if deadline is _UNSET:
                    deadline = None if timeout is None else _monotonic() + timeout
                if not self._wait_readable(deadline):
                    return None
                continue
            except (OSError, UsageError):
                return self._get_event(timeout)  # it reports the fault
            if n <= 0:
                return self._get_event(timeout)
            uid, handle, ev, status, raw, vid, mod = _UNPACK_EVENT(self._event_view)
            try:
                cm_id = self._ids[uid]
                ev, cm_id._state = cm_id._rules.events[ev][cm_id._state]
            except KeyError:  # no such id (a membership's, or destroyed meanwhile), an event with effects
                event = self._dispatch(self._event_view)
                if event is not None:
                    return event
                # dropped (its id destroyed meanwhile): read the next, within the deadline
                if timeout is not None:
                    if deadline is _UNSET:
                        deadline = _monotonic() + timeout
                    elif _monotonic() >= deadline:
                        return None
                continue
            cm_id._cache = None
            cm_id._unacked += 1
            return _new_event(Event, (ev, status, cm_id, handle, raw, (vid, mod) if vid or mod else NO_ECE, None, None))
    finally:
        if self._grave:  # ids destroyed while this reader held the guard: no event of theirs can come now
            self._grave.clear()
        if self.closed:
            self._waker.close()
        slot.append(True)


def get_events(self: "EventChannel", max_events: int = 64, timeout: Optional[float] = 0, *,
               ack: bool = False) -> List[Event]:
    """``EventChannel.get_events``: get_event's fast path in a loop, under one reader guard."""
    if self._live != PID:
        self._check()
    if max_events.__class__ is not int or max_events < 1:
        raise UsageError("max_events must be an int >= 1, got %r" % (max_events,))
    if timeout is not None and (timeout.__class__ is not int or timeout < 0):
        timeout = self._seconds(timeout)
    slot = self._reader_slot
    try:
        slot.pop()
    except IndexError:
        raise self._busy() from None
    out: List[Event] = []
    append = out.append
    deadline: Any = _UNSET
    try:
        if self._wait_first:  # a sync id's channel: wait first (see _wait_event)
            first = self._get_event(timeout)
            if first is None:
                return out
            out.append(_acked(first) if ack else first)
        elif self._drained and timeout != 0:  # the last look found nothing: wait first (see get_event)
            if not self._wait_readable(None if timeout is None else _monotonic() + timeout):
                return out
            self._drained = False
        data, view, ids = self._b_get_event, self._event_view, self._ids
        while len(out) < max_events:
            try:
                if self._write(data) <= 0:
                    raise BlockingIOError
            except (OSError, UsageError) as e:
                if out:
                    break  # drained (a fault shows at the next call): a burst read, not an empty look
                if isinstance(e, BlockingIOError):
                    self._drained = True
                    if timeout == 0:
                        break  # only polling: nothing queued
                # wait for the first event (or report the fault)
                first = self._get_event(timeout, isinstance(e, BlockingIOError))
                if first is None:
                    break
                out.append(_acked(first) if ack else first)
                continue
            uid, handle, ev, status, raw, vid, mod = _UNPACK_EVENT(view)
            try:
                cm_id = ids[uid]
                ev, cm_id._state = cm_id._rules.events[ev][cm_id._state]
            except KeyError:
                event = self._dispatch(view)
                if event is not None:
                    out.append(_acked(event) if ack else event)
                elif out:
                    break  # dropped (its id destroyed meanwhile): the burst ends; the rest stays queued
                elif timeout is not None:  # dropped, nothing read yet: read on, within the deadline
                    if deadline is _UNSET:
                        deadline = _monotonic() + timeout
                    elif _monotonic() >= deadline:
                        break
            else:
                cm_id._cache = None
                if not ack:
                    cm_id._unacked += 1
                append(_new_event(Event, (ev, status, cm_id, handle, raw, (vid, mod) if vid or mod else NO_ECE, None, None)))
        return out
    finally:
        if self._grave:  # ids destroyed while this reader held the guard: no event of theirs can come now
            self._grave.clear()
        if self.closed:
            self._waker.close()
        slot.append(True)


def _acked(event: Event) -> Event:
    """``event`` after ``event.ack()``, for get_events(ack=True)."""
    event.ack()
    return event
