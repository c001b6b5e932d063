"""Multicast memberships: one group an id joined (``CmId.join_multicast``).

A membership has a uid of its own, under which the kernel queues its events
(MULTICAST_JOIN, MULTICAST_ERROR); the channel's registry keeps it beside the ids.
"""

from __future__ import annotations

from typing import Any

from . import process as _process
from .. import wire
from .device import ReplyBuffer
from ..addr import Address
from ..errors import StateError

__all__ = ["Membership"]

_CMD = wire.COMMAND


class Membership:
    """One multicast group an id joined (``join_multicast``): its events (MULTICAST_JOIN,
    MULTICAST_ERROR) carry it as ``event.membership``; ``leave()`` ends it."""

    __slots__ = ("id", "addr", "uid", "handle", "send_only", "context", "__weakref__")

    def __init__(self, cm_id: Any, addr: Address, send_only: bool, context: Any) -> None:
        self.id = cm_id
        self.addr = addr
        self.uid = _process.next_uid()
        self.handle = -1
        self.send_only = send_only
        self.context = context

    @property
    def joined(self) -> bool:
        """True until leave() (or the id's destroy) ends the membership."""
        return self.uid in getattr(self.id, "_mcs", {})

    def leave(self) -> int:
        """``rdma_leave_multicast`` (LEAVE_MCAST): returns ``events_reported``; the group's
        events not read yet are dropped by the kernel."""
        cm = self.id
        if not self.joined:
            raise StateError("leave: the membership of %s (uid %d) was left already" % (self.addr, self.uid))
        cm._alive("leave_multicast")
        ch = cm.channel
        reply = ReplyBuffer(_CMD["LEAVE_MCAST"].out)
        ch.submit(_CMD["LEAVE_MCAST"].encode(reply.address, self.handle, 0), "LEAVE_MCAST", dst=self.addr)
        cm._drop_group(self.uid)
        ch.registry.leave(self.uid)
        ch._ended([self.uid], "left")
        reported: int = reply.u32[0]
        return reported

    def __repr__(self) -> str:
        return "<Membership %s uid=%d of %r%s>" % (self.addr, self.uid, self.id, " send-only" if self.send_only else "")
