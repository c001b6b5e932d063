"""A channel's registry: whose events each uid's are, the one place that writes it.

The kernel echoes a uid in every event (an id's, given by CREATE_ID or ACCEPT; a
membership's, given by JOIN_MCAST).  The registry says who that uid is on this channel:
``ids`` (uid -> id), ``mcs`` (uid -> membership); ``unanswered`` holds the ids of
connection requests handed out and not accepted yet (uid 0: the kernel queues no event
for them, but closing the fd destroys them too); ``grave`` holds ids destroyed or migrated
away while a reader held the channel's reader guard (an event it had read already still
finds its id there; the reader empties it when it lets go).

Every change of these is a method here: an id's birth (:attr:`Registry.add`, a C call on
CREATE_ID's path), ACCEPT's registration, a join and a leave, a migration (the new
channel's side, then the old one's), a destroy, and the close of the channel.  The rest
of the engine reads them.
"""

from __future__ import annotations

import weakref
from functools import partial
from operator import setitem
from typing import Any, Callable, Dict, Generic, Iterable, List, Protocol, Sequence, TypeVar

from . import process as _process
from ..errors import StateError, UsageError
from ..state import State
from .membership import Membership

__all__ = ["Registry", "ChannelId"]


class ChannelId(Protocol):
    """What a channel asks of the ids on it (a :class:`~pyrdmacm.CmId`): the engine knows ids
    by this alone, so that their module can stand above the channel's."""

    uid: int
    handle: int
    channel: Any
    _state: State

    def _on_event(self, number: int, count: bool = True) -> Any: ...

    def _on_event_with_effects(self, event: Any) -> None: ...

    def _counted(self) -> None: ...

    def _closed(self) -> None: ...

    def _spawn(self, channel: Any, handle: int) -> Any: ...

    def _requested(self, event: Any) -> Any: ...

    def _answer_dreq(self) -> None: ...

    def _group_uids(self) -> List[int]: ...

    def _drop_group(self, uid: int) -> None: ...


#: the class of a registry's ids (CmId on an EventChannel)
_I = TypeVar("_I", bound=ChannelId)


class Registry(Generic[_I]):
    """The uids of one channel (see the module doc)."""

    __slots__ = ("ids", "mcs", "unanswered", "grave", "add")

    def __init__(self) -> None:
        #: uid -> the id its events are for
        self.ids: Dict[int, _I] = {}
        #: uid -> the multicast membership its events are for
        self.mcs: Dict[int, Membership] = {}
        #: requests' ids handed out and not registered (uid 0 until ACCEPT)
        self.unanswered: "weakref.WeakSet[Any]" = weakref.WeakSet()
        #: ids that left while a reader held the guard: its events read already still find them
        self.grave: Dict[int, _I] = {}
        #: ``add(uid, id)``: a new id (CREATE_ID's registration; a C call, on every create's path)
        self.add: Callable[[int, _I], None] = partial(setitem, self.ids)  # cheaper than a method-wrapper

    # -- connection requests
    def hand_out(self, cm_id: _I) -> None:
        """A connection request's new id, handed out with its event: not registered (uid 0)."""
        self.unanswered.add(cm_id)

    def register(self, cm_id: _I, channel: Any) -> int:
        """Give a connection request's id (uid 0) a fresh uid and register it: what ACCEPT
        needs (the kernel queues the id's events under the uid ACCEPT carries)."""
        if cm_id.uid:
            raise StateError("id uid %d is registered already" % cm_id.uid)
        if cm_id.channel is not channel:
            raise UsageError("%r is not an id of this channel" % (cm_id,))
        uid = cm_id.uid = _process.next_uid()
        self.ids[uid] = cm_id
        return uid

    def unregister(self, cm_id: _I) -> None:
        """Undo :meth:`register` (the ACCEPT it was for did not go through)."""
        self.ids.pop(cm_id.uid, None)
        cm_id.uid = 0

    # -- multicast
    def join(self, m: Membership) -> None:
        """A membership being joined: registered before JOIN_MCAST (its event may come at once)."""
        self.mcs[m.uid] = m

    def leave(self, uid: int) -> None:
        """A membership left (LEAVE_MCAST), or its join refused."""
        self.mcs.pop(uid, None)

    # -- migration: the new channel adopts, the old one lets go
    def adopt(self, cm_id: _I, groups: Iterable[Membership]) -> None:
        """An id and its memberships migrating here: registered before MIGRATE_ID (their
        events may arrive at once).  A request not answered yet (uid 0) joins ``unanswered``
        once the move is done (:meth:`moved`)."""
        if cm_id.uid:
            self.ids[cm_id.uid] = cm_id
        for m in groups:
            self.mcs[m.uid] = m

    def disown(self, cm_id: _I, groups: Iterable[Membership]) -> None:
        """Undo :meth:`adopt` (MIGRATE_ID refused)."""
        if cm_id.uid:
            self.ids.pop(cm_id.uid, None)
        for m in groups:
            self.mcs.pop(m.uid, None)

    def moved(self, cm_id: _I, groups: Iterable[Membership], to: "Registry[_I]", reader_holds: bool) -> None:
        """The id and its memberships went to ``to`` (MIGRATE_ID done): they leave this
        registry; into the grave while a reader holds this channel's guard."""
        if cm_id.uid:
            if reader_holds:
                self.grave[cm_id.uid] = cm_id
            self.ids.pop(cm_id.uid, None)
        else:  # a request not answered yet: the new channel's close() destroys it
            self.unanswered.discard(cm_id)
            to.unanswered.add(cm_id)
        for m in groups:
            self.mcs.pop(m.uid, None)

    # -- death
    def destroyed(self, cm_id: _I, reader_holds: bool) -> Sequence[int]:
        """DESTROY_ID returned: the id leaves (into the grave while a reader holds the guard),
        and its memberships with it.  The uids of those memberships (whose waits end with the
        id's): none, nearly always, and then nothing is made."""
        uid = cm_id.uid
        if not uid:  # a request not answered yet: on no registry but unanswered
            self.unanswered.discard(cm_id)
        elif reader_holds:
            self.grave[uid] = cm_id
        self.ids.pop(uid, None)
        if not self.mcs:
            return ()
        groups = cm_id._group_uids()
        for m in groups:
            self.mcs.pop(m, None)
        return groups

    def bury(self) -> None:
        """The reader let go: ids that left meanwhile can have no event read any more."""
        self.grave.clear()

    def close(self) -> None:
        """The channel closed: the kernel destroyed every id on it, and their memberships."""
        for cm_id in list(self.ids.values()) + [c for c in list(self.unanswered) if not c.uid]:
            cm_id._closed()
        self.ids.clear()
        self.unanswered.clear()
        for m in list(self.mcs.values()):
            m.id._drop_group(m.uid)
        self.mcs.clear()
