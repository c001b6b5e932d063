"""Event channels: ``rdma_create_event_channel``, and the ids made on one.

An :class:`EventChannel` is one open rdma_cm fd: the ids made on it (``CmId(channel)``,
:meth:`EventChannel.create_id`, :meth:`EventChannel.create_ids`) have their events read
from it (``get_event``; the asyncio adapter, :mod:`pyrdmacm.aio`, reads it from a loop).
What it does with the fd -- the writes, the one reader, the registry of ids, the waits
for the events that answer calls, the faults -- is its engine's,
:class:`pyrdmacm.core.channel.Channel`: this module adds what needs the ids' class.
"""

from __future__ import annotations

import warnings
from typing import Any, Iterable, List, Optional, Union

from . import process as _process
from .. import abi
from .channel import Channel
from .cmid import CmId, UnackedEventsWarning, _batch, unacked_warning
from .params import port_space
from ..errors import StateError, UsageError
from ..state import State, rules_for

_PS_TCP = abi.PortSpace.TCP
_TCP_RC = rules_for(_PS_TCP, abi.QpType.RC)
_new_object = object.__new__

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
