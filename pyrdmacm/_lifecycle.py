"""An id entering and leaving its channel: CREATE_ID and DESTROY_ID.  Each is written here once, for the single calls
(``CmId()``, ``destroy()``) and the batches (``EventChannel.create_ids``, ``destroy_ids``)
alike: the registry (uid -> id) changes only here and in the channel.

An id leaves the registry after its DESTROY_ID returns, and while a reader holds the
channel's reader guard it stays findable in the channel's grave: an event the reader had
taken before (the kernel counted it in ``events_reported``) is still handed out.
"""

from __future__ import annotations

from typing import Any

from . import _process, wire
from ._device import ReplyBuffer
from .state import Call, Rules

__all__ = ["create", "destroy_one"]

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


def destroy_one(cm_id: Any, notify: bool = True) -> int:
    """DESTROY_ID for an id of a live channel (its state checked here): ``events_reported``.
    The one place that writes it (``destroy()``, ``destroy_ids`` and ``create_ids``' undo end
    here).  ``notify``: tell the channel's watchers (a batch tells them once)."""
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
    if notify and ch._watchers:
        ch._ended([uid], "destroyed")
    return reported


_CREATE, _DESTROY = _CMD["CREATE_ID"], _CMD["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.size, _DESTROY.out
_DESTROY_CALL = Call.DESTROY
