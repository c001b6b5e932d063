"""Event channels: ``rdma_create_event_channel``, and the ids made on one.

An :class:`EventChannel` is one open rdma_cm fd: the ids made on it (``CmId(channel)``,
:meth:`EventChannel.create_id`, :meth:`EventChannel.create_ids`) have their events read
from it (``get_event``; the asyncio adapter, :mod:`pyrdmacm.aio`, reads it from a loop).
What it does with the fd -- the writes, the one reader, the registry of ids, the waits
for the events that answer calls, the faults -- is its engine's,
:class:`pyrdmacm.core.channel.Channel`: this module adds what needs the ids' class.
"""

from __future__ import annotations

from typing import Any, Iterable, List, Optional, Union

from . import process as _process
from .. import abi
from .channel import Channel
from .life import UnackedEventsWarning, create_many, destroy_many
from .cmid import CmId
from ..state import rules_for

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
        return create_many(self, CmId, n, ps, qp_type)

    def destroy_ids(self, ids: Iterable[CmId]) -> List[int]:
        """Destroy many ids of this channel; their ``events_reported``, in order.

        Every id is checked first (of this channel, not destroyed, given once: UsageError
        or StateError before any syscall). Ids with events not acked are reported in one
        :class:`UnackedEventsWarning`.
        """
        return destroy_many(self, CmId, list(ids))
