"""An id's birth and death on its channel: CREATE_ID and DESTROY_ID, for the single calls
and the batches (``EventChannel.create_ids``, ``destroy_ids``) alike.  The registry of the
channel (uid -> id) changes only here and in the channel; the id's state, as every other
change of its record, only in :mod:`pyrdmacm.state` (:class:`~pyrdmacm.state.Life`).

An id leaves the registry after its DESTROY_ID returns, and while a reader holds the
channel's reader guard it stays findable in the channel's grave: an event the reader had
taken before (the kernel counted it in ``events_reported``) is still handed out.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any, Dict, List, Optional, Type

from . import _process, abi, wire
from ._device import ReplyBuffer
from ._params import port_space
from .errors import StateError, UsageError
from .state import Call, Life, Rules, State, rules_for

__all__ = ["Lifecycle", "UnackedEventsWarning", "create_many", "destroy_many", "unacked_warning"]

_CMD = wire.COMMAND
_CREATE, _DESTROY = _CMD["CREATE_ID"], _CMD["DESTROY_ID"]
_CREATE_CMD, _H_CREATE, _N_CREATE, _N_CREATE_REPLY = _CREATE.pack, _CREATE.header, _CREATE.size, _CREATE.out
_DESTROY_CMD, _H_DESTROY, _N_DESTROY_REPLY = _DESTROY.pack, _DESTROY.header, _DESTROY.out
_DESTROY_CALL = Call.DESTROY
_NO_CONTEXT: Dict[str, Any] = {}  # a refused DESTROY_ID names no address
#: per thread: destroy_ids is destroying (its destroy() calls leave the unacked warning to it)
_batch = threading.local()
_TCP_RC = rules_for(abi.PortSpace.TCP, abi.QpType.RC)
_new_object = object.__new__


class UnackedEventsWarning(ResourceWarning):
    """An id was destroyed with events still unacknowledged (librdmacm would hang here)."""


class Lifecycle(Life):
    """An id's birth and death on its channel, the one place of each: CREATE_ID (and the
    registry's uid -> id) and DESTROY_ID (the registry, the waits and memberships that go
    with it).  The record and every move of its state are :class:`~pyrdmacm.state.Life`'s."""

    __slots__ = ()

    def _create(self, channel: Any, rules: Rules) -> Any:
        """CREATE_ID for this new id (checked, not yet created) on a live ``channel``, of the
        port space and QP type of ``rules``: the one place that writes it (``CmId()``,
        ``EventChannel.create_id`` and ``create_ids`` end here).  The id is registered
        (uid -> id) once the kernel made it.  Returns the id."""
        self.channel = channel
        self._born(rules)
        pool = channel._create_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_N_CREATE_REPLY)
        uid = self.uid = _process.next_uid()
        data = _CREATE_CMD(_H_CREATE, uid, reply.address, rules.ps, rules.qp_type, b"")
        try:
            n = channel._write(data)
        except OSError as e:
            pool.append(reply)
            raise channel._refused(e, "CREATE_ID", {}) from None
        if n != _N_CREATE:
            pool.append(reply)
            raise channel._short(n, data, "CREATE_ID")
        self.handle = reply.u32[0]
        pool.append(reply)
        channel._ids[uid] = self
        return self

    def destroy(self) -> int:
        """Destroy the id (DESTROY_ID): ``rdma_destroy_id``.  Returns ``events_reported``.

        Never blocks: events not yet acked are reported with an
        :class:`UnackedEventsWarning` (librdmacm would wait for them for ever).

        Destroying is a CM verb: by the connection's state the kernel's IB CM sends the peer
        a REJ 4 (TIMEOUT: our REQ was still outstanding), a REJ 28 without data (a request
        not yet answered, or a REP not yet answered by an RTU), a DREQ and timewait (an
        established connection), or the DREP (a DREQ received and not yet answered).  UD
        ids send nothing.  Closing the channel destroys all its ids the same way.
        """
        # The one place that writes DESTROY_ID (destroy_ids and create_ids' undo end here).
        ch = self.channel
        if ch._live != _process.PID:
            if ch.closed:
                self._closed()
                raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
            ch._check()
        pool = ch._destroy_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_N_DESTROY_REPLY)
        try:  # no call of the id from here on; its events read meanwhile stay its
            self._call(_DESTROY_CALL, _DESTROY_CMD(_H_DESTROY, reply.address, self.handle, 0), "DESTROY_ID",
                       _NO_CONTEXT)
        except BaseException:
            pool.append(reply)
            if ch.closed:  # refused because closed: closing the channel destroyed it anyway
                self._closed()
            raise
        reported: int = reply.u32[0]
        pool.append(reply)
        # Off the registry after DESTROY_ID: the kernel queues no event of the id from now on, and
        # one that a reader took before (counted in events_reported) must still find its id -- in
        # the grave while that reader holds the guard (it empties the grave when it lets go).  The
        # waits for its events, and its memberships', end (``Channel._ended``).
        uid = self.uid
        if not uid:  # a request not answered yet: on no registry but the channel's unanswered
            ch._unanswered.discard(self)
        elif not ch._reader_slot:
            ch._grave[uid] = self
        ch._ids.pop(uid, None)
        mcs = getattr(self, "_mcs", None) if ch._mcs else None
        if mcs:  # its groups went with it
            for m in mcs:
                ch._mcs.pop(m, None)
        if ch._waits or ch._queued:
            ch._ended([uid, *mcs] if mcs else [uid], "destroyed")
        if self._unacked and not getattr(_batch, "quiet", False):  # destroy_ids warns once for all
            warnings.warn(unacked_warning([self], True), stacklevel=2)
        if ch._wait_first and not ch._ids:  # a sync id's channel is its own: closed with its last id
            ch.close()  # (a sync listener's rejected request must not close the listener's)
        return reported


def create_many(channel: Any, cls: Type[Any], n: int, ps: Any, qp_type: Optional[int]) -> List[Any]:
    """``EventChannel.create_ids``: ``n`` ids of class ``cls`` made by :meth:`Lifecycle._create`, all or nothing."""
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
            append(_new_object(cls)._create(channel, rules))
    except BaseException:
        for cm_id in out:  # all or nothing
            try:
                cm_id.destroy()
            except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                pass
        raise
    return out


def destroy_many(channel: Any, cls: Type[Any], ids: List[Any]) -> List[int]:
    """``EventChannel.destroy_ids``: every id checked first, then :meth:`Lifecycle.destroy` each."""
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
    out: List[int] = []
    _batch.quiet = True  # one warning for the batch (this thread's destroy() calls say nothing)
    try:
        for cm_id in ids:
            out.append(cm_id.destroy())
    finally:
        _batch.quiet = False
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
