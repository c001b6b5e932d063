"""An id entering and leaving its channel: CREATE_ID and DESTROY_ID.  Each is written here once, for the single calls
(``CmId()``, ``destroy()``) and the batches (``EventChannel.create_ids``, ``destroy_ids``)
alike: the registry (uid -> id) changes only here and in the channel.

An id leaves the registry after its DESTROY_ID returns, and while a reader holds the
channel's reader guard it stays findable in the channel's grave: an event the reader had
taken before (the kernel counted it in ``events_reported``) is still handed out.
"""

from __future__ import annotations

import warnings
from typing import Any, List, Optional, Type

from . import _process, abi, wire
from ._device import ReplyBuffer
from ._params import port_space
from .errors import StateError, UsageError
from .state import Call, Rules, State, rules_for

__all__ = ["UnackedEventsWarning", "create", "create_many", "destroy_many", "destroy_one", "unacked_warning"]


class UnackedEventsWarning(ResourceWarning):
    """An id was destroyed with events still unacknowledged (librdmacm would hang here)."""

_CMD = wire.COMMAND


def create(cm_id: Any, channel: Any, rules: Rules) -> Any:
    """CREATE_ID for a checked, not yet created ``cm_id`` on a live ``channel``, of the port
    space and QP type of ``rules``: the one place that writes it (``CmId()``,
    ``EventChannel.create_id`` and ``create_ids`` end here)."""
    cm_id.channel = channel
    cm_id._born(rules)
    pool = channel._create_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(_N_CREATE_REPLY)
    uid = cm_id.uid = _process.next_uid()
    data = _CREATE_CMD(_H_CREATE, uid, reply.address, rules.ps, rules.qp_type, b"")
    try:
        n = channel._write(data)
    except OSError as e:
        pool.append(reply)
        raise channel._refused(e, "CREATE_ID", {}) from None
    if n != _N_CREATE:
        pool.append(reply)
        raise channel._short(n, data, "CREATE_ID")
    cm_id.handle = reply.u32[0]
    pool.append(reply)
    channel._ids[uid] = cm_id
    return cm_id


def destroy_one(cm_id: Any) -> int:
    """DESTROY_ID for an id of a live channel (its state checked here): ``events_reported``.
    The one place that writes it (``destroy()``, ``destroy_ids`` and ``create_ids``' undo end
    here).  The waits for its events, and its memberships', end (``EventChannel._ended``)."""
    ch = cm_id.channel
    pool = ch._destroy_replies
    old = cm_id._begin(_DESTROY_CALL)  # no call of the id from here on; its events read meanwhile stay its
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(_N_DESTROY_REPLY)
    data = _DESTROY_CMD(_H_DESTROY, reply.address, cm_id.handle, 0)
    try:
        n = ch._write(data)
    except OSError as e:
        pool.append(reply)
        if not ch.closed:  # refused: the id lives on (a closed channel destroyed it anyway)
            cm_id._rollback(_DESTROY_CALL, old)
        raise ch._refused(e, "DESTROY_ID", {}) from None
    except BaseException:
        pool.append(reply)
        cm_id._rollback(_DESTROY_CALL, old, refused=False)
        raise
    if n != _N_DESTROY:
        pool.append(reply)
        raise ch._short(n, data, "DESTROY_ID")
    reported: int = reply.u32[0]
    pool.append(reply)
    # Off the registry after DESTROY_ID: the kernel queues no event of the id from now on, and
    # one that a reader took before (counted in events_reported) must still find its id -- in
    # the grave while that reader holds the guard (it empties the grave when it lets go).
    uid = cm_id.uid
    if not ch._reader_slot:
        ch._grave[uid] = cm_id
    ch._ids.pop(uid, None)
    mcs = getattr(cm_id, "_mcs", None) if ch._mcs else None
    if mcs:  # its groups went with it
        for m in mcs:
            ch._mcs.pop(m, None)
    if ch._waits or ch._queued:
        ch._ended([uid, *mcs] if mcs else [uid], "destroyed")
    return reported


_CREATE, _DESTROY = _CMD["CREATE_ID"], _CMD["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.size, _DESTROY.out
_DESTROY_CALL = Call.DESTROY


_TCP_RC = rules_for(abi.PortSpace.TCP, abi.QpType.RC)
_new_object = object.__new__


def create_many(channel: Any, cls: Type[Any], n: int, ps: Any, qp_type: Optional[int]) -> List[Any]:
    """``EventChannel.create_ids``: ``n`` ids of class ``cls`` made by :func:`create`, all or nothing."""
    if n.__class__ is not int or n < 0:
        raise UsageError("n must be an int >= 0 (how many ids), got %r" % (n,))
    custom = ps is not abi.PortSpace.TCP or qp_type is not None
    rules = rules_for(*port_space(ps, qp_type)) if custom else _TCP_RC
    if channel._live != _process.PID:
        channel._check()
    out: List[Any] = []
    append = out.append
    try:
        for _ in range(n):
            append(create(_new_object(cls), channel, rules))
    except BaseException:
        for cm_id in out:  # all or nothing
            try:
                destroy_one(cm_id)
            except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                pass
        raise
    return out


def destroy_many(channel: Any, cls: Type[Any], ids: List[Any]) -> List[int]:
    """``EventChannel.destroy_ids``: every id checked first, then :func:`destroy_one` each."""
    if channel._live != _process.PID:
        if channel.closed:
            for cm_id in ids:
                if getattr(cm_id, "channel", None) is channel:
                    cm_id._closed()
            raise StateError("destroy_ids: the event channel is closed (the kernel destroyed its ids then)")
        channel._check()
    try:  # one pass that only says yes or no; _destroy_refusal says what is wrong
        ok = all([cm_id.channel is channel and cm_id._state is not State.DESTROYED for cm_id in ids])
        ok = ok and len(set(ids)) == len(ids)
    except (AttributeError, TypeError):
        ok = False
    if not ok:
        raise _destroy_refusal(channel, cls, ids)
    if channel._wait_first:  # a sync id's own channel: its destroy() closes the channel too
        return [cm_id.destroy() for cm_id in ids]
    out: List[int] = []
    try:
        for cm_id in ids:
            out.append(destroy_one(cm_id))
    finally:
        unacked = [cm_id for cm_id in ids[: len(out)] if cm_id._unacked]
        if unacked:
            warnings.warn(unacked_warning(unacked), stacklevel=3)
    return out


def _destroy_refusal(channel: Any, cls: Type[Any], ids: List[Any]) -> Exception:
    seen = set()
    for cm_id in ids:
        if not isinstance(cm_id, cls) or cm_id.channel is not channel:
            return UsageError("destroy_ids takes ids of this channel, got %r" % (cm_id,))
        if cm_id._state is State.DESTROYED:
            return StateError("destroy_ids: id uid %d is already destroyed" % cm_id.uid)
        if id(cm_id) in seen:
            return UsageError("destroy_ids: id uid %d is given twice" % cm_id.uid)
        seen.add(id(cm_id))
    return UsageError("destroy_ids: %d ids that cannot be told apart" % len(ids))  # pragma: no cover


def unacked_warning(ids: List[Any], one: bool = False) -> UnackedEventsWarning:
    """The warning of destroy() (``one``) or destroy_ids() for ids with events not acked."""
    if one:
        return UnackedEventsWarning(
            "id uid %d destroyed with %d event(s) not acked (harmless here; librdmacm would block)"
            % (ids[0].uid, ids[0]._unacked))
    return UnackedEventsWarning(
        "%d id(s) destroyed with %d event(s) not acked, uid %s (harmless here; librdmacm "
        "would block)" % (len(ids), sum(i._unacked for i in ids),
                          ", ".join(str(i.uid) for i in ids[:8]) + (" ..." if len(ids) > 8 else "")))
