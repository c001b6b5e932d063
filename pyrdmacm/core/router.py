"""Who an event goes to: the waits of a channel's ids, by uid.

Theory of operation
-------------------
Every wait for "the event that answers this call" is a :class:`Waiter`: the events that
answer it (``take``: event -> ok, made from :data:`pyrdmacm.state.OUTCOMES`) and what is
done with the one that comes.  A channel keeps its waiters in a :class:`Router`, a dict
``uid -> waiter`` (the uid the kernel echoes in the event: an id's, or a multicast
membership's; a listener's for its CONNECT_REQUESTs).  The channel's one read hands each
event whose uid has a waiter to :meth:`Router.route`: if the event answers the wait it
is delivered (and counts as acknowledged), and the reader goes on with the next;
otherwise it is the reader's, as if nobody waited.  Sync mode (:meth:`CmId._complete`), ``get_request``,
the asyncio adapter and the CLI all wait this way: they differ only in what their waiter
does with the event (keep it; set a future; set one place of a batch's result).

A waiter ends without its event when its id stops being the channel's (destroyed,
migrated away, the membership left, the channel closed): :meth:`Router.end` gives it the
error, and the blocking wait or the future ends at once.

A waiter is delivered one event, once; several waits of one id (two calls pending) are
kept oldest first, and an event goes to the oldest it answers.  A batch is one waiter
for many uids (no object per id).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Set, Tuple

from ..abi import CmEventType
from ..errors import StateError, UsageError
from ..state import FAILURE_EVENTS, OUTCOMES, Call, Kind

__all__ = ["Router", "Waiter", "take_of", "take_events"]

#: event -> True when it says the call succeeded, False when it says it failed
Take = Mapping[Any, bool]


def _take(ok: Iterable[Any], failed: Iterable[Any]) -> Dict[Any, bool]:
    take = dict.fromkeys(failed, False)
    take.update(dict.fromkeys(ok, True))
    return take


#: the take of every (kind, call) with an outcome, made once
TAKES: Dict[Tuple[Kind, Call], Dict[Any, bool]] = {key: _take(o.ok, o.failed) for key, o in OUTCOMES.items()}


#: the take of every call whose outcome is the same for every kind of id (no kind to look up)
TAKES_ANY_KIND: Dict[Call, Dict[Any, bool]] = {
    call: TAKES[(Kind.CONNECTED, call)] for call in Call
    if all(TAKES.get((kind, call)) == TAKES.get((Kind.CONNECTED, call)) is not None for kind in Kind)}


def take_of(kind: Kind, call: Call) -> Dict[Any, bool]:
    """The events that answer ``call`` on an id of ``kind`` (UsageError if none does)."""
    take = TAKES.get((kind, call))
    if take is None:
        if not isinstance(call, Call):
            raise UsageError("the call must be a pyrdmacm.Call (Call.RESOLVE_ADDR, Call.CONNECT ...), got %r"
                             % (call,))
        others = [k.value for k in Kind if (k, call) in OUTCOMES]
        raise UsageError(
            "%s on a %s id has no outcome event to await%s: it is complete when the call returns; "
            "call it directly" % (call, kind.value, " (%s ids have one)" % ", ".join(others) if others else ""))
    return take


def take_events(events: Iterable[Any]) -> Dict[Any, bool]:
    """A take of the given event types (a wait for one of them: each ok unless it is one of
    the events that say something failed)."""
    take: Dict[Any, bool] = {}
    for e in events:
        if not isinstance(e, CmEventType):
            raise UsageError("the events to wait for are CmEventType members (CmEventType.TIMEWAIT_EXIT ...), "
                             "got %r" % (e,))
        take[e] = e not in FAILURE_EVENTS
    if not take:
        raise UsageError("a wait needs the events to wait for (CmEventType.ESTABLISHED, ...)")
    return take


class Waiter:
    """A wait for the next event of one uid among ``take``'s (event -> True when it says the
    call succeeded, False when it failed): ``Waiter.for_call(cm_id.kind, Call.RESOLVE_ADDR)``
    or ``Waiter.for_events(CmEventType.TIMEWAIT_EXIT)``, given to
    :meth:`EventChannel.expect <pyrdmacm.core.channel.Channel.expect>` and waited for with
    :meth:`~pyrdmacm.core.channel.Channel.wait` (or delivered by the asyncio adapter's reader).

    Done once it was delivered (``event``, acknowledged; ``ok``: False for a failure event)
    or ended (``error``: why its event can no longer come -- the id destroyed or migrated,
    the channel closed).  Subclasses say what else is done then (the asyncio adapter's set
    a future)."""

    __slots__ = ("take", "event", "ok", "error")

    def __init__(self, take: Take) -> None:
        self.take = take
        self.event: Any = None
        self.ok = False
        self.error: Optional[BaseException] = None

    @classmethod
    def for_call(cls, kind: Kind, call: Call) -> "Waiter":
        """A wait for the outcome of ``call`` on an id of ``kind`` (``cm_id.kind``), as
        :data:`~pyrdmacm.state.OUTCOMES` says (UsageError for a call that has none)."""
        return cls(take_of(kind, call))

    @classmethod
    def for_events(cls, *events: CmEventType) -> "Waiter":
        """A wait for the next of ``events`` (each ok, unless it says something failed)."""
        return cls(take_events(events))

    @property
    def done(self) -> bool:
        """True once the event came (``event``) or the wait ended (``error``)."""
        return self.event is not None or self.error is not None

    def deliver(self, uid: int, ev: Any, ok: bool) -> None:
        """``ev`` (acknowledged already) answers the wait."""
        self.event, self.ok = ev, ok

    def end(self, uid: int, error: BaseException) -> None:
        """The event of ``uid`` cannot come any more (``error`` says why)."""
        if self.event is None and self.error is None:
            self.error = error


class Router(Dict[int, Any]):
    """A channel's waiters: ``uid -> waiter``, or a list of them, oldest first, when one id
    has several calls pending.  A dict, so that the channel's read tests "anybody waiting
    for this uid?" with no call."""

    def add(self, uid: int, waiter: Waiter) -> None:
        """Route the next event of ``uid`` that ``waiter`` takes to it."""
        old = self.setdefault(uid, waiter)
        if old is waiter:
            return
        if old.__class__ is list:
            old.append(waiter)
        else:
            self[uid] = [old, waiter]

    def add_many(self, uids: List[int], waiter: Waiter) -> None:
        """``add`` for many uids (a batch): one C call when none has a waiter yet."""
        if not self or self.keys().isdisjoint(uids):
            self.update(dict.fromkeys(uids, waiter))
        else:
            for uid in uids:
                self.add(uid, waiter)

    def route(self, uid: int, ev: Any) -> bool:
        """Give ``ev`` (an event of ``uid``) to the waiter it answers (True); False if no
        waiter of ``uid`` takes it.  A delivered event counts as acknowledged: the reader
        did not count it, or acknowledges it.

        The reader routes while another thread may end the uid's waits (destroy): a waiter
        leaves the table only when it takes its event, never to be put back, so that
        :meth:`end` always finds the waiters it must end."""
        waiter = self.get(uid)
        if waiter is None:  # ended meanwhile
            return False
        if waiter.__class__ is list:
            return self._to_one_of(uid, waiter, ev)
        ok = waiter.take.get(ev.event)
        if ok is None:
            return False
        entry = self.pop(uid, None)
        if entry is not waiter and entry is not None:  # another wait of the uid came meanwhile
            self._put_back(uid, entry, waiter)
        waiter.deliver(uid, ev, ok)  # ended meanwhile (entry None): it ignores the event
        return True

    def _to_one_of(self, uid: int, waiters: List[Waiter], ev: Any) -> bool:
        """An event of a uid with several waits: the oldest it answers takes it (the list is
        changed in place; it leaves the table once empty)."""
        kind = ev.event
        for waiter in waiters:
            ok = waiter.take.get(kind)
            if ok is None:
                continue
            try:
                waiters.remove(waiter)
            except ValueError:  # forgotten or ended meanwhile
                return False
            if not waiters and self.get(uid) is waiters:
                self.pop(uid, None)
            waiter.deliver(uid, ev, ok)
            return True
        return False

    def _put_back(self, uid: int, entry: Any, taken: Waiter) -> None:
        """``entry`` was popped with ``taken`` because it had become a list of waits: the
        others go back."""
        if entry.__class__ is list:
            rest = [w for w in entry if w is not taken]
            if rest:
                self[uid] = rest
        else:
            self[uid] = entry

    def forget(self, uid: int, waiter: Waiter) -> None:
        """Stop routing to ``waiter`` (a wait given up: timed out, interrupted)."""
        entry = self.get(uid)
        if entry is waiter:
            self.pop(uid, None)
        elif entry.__class__ is list and waiter in entry:
            entry.remove(waiter)
            if not entry and self.get(uid) is entry:
                self.pop(uid, None)

    def end(self, uids: Iterable[int], why: str) -> None:
        """The ids (or memberships) ``uids`` stopped being the channel's (``why``: "destroyed",
        "migrated", "left"): their waits end with StateError."""
        pop = self.pop
        for uid in uids:
            entry = pop(uid, None)
            if entry is None:
                continue
            for waiter in entry if entry.__class__ is list else (entry,):
                waiter.end(uid, StateError(
                    "id uid %d was %s before the outcome it waited for arrived (its events no longer come to "
                    "this channel): destroy or migrate an id after its outcome, or cancel the wait first"
                    % (uid, why)))

    def end_all(self, error: BaseException) -> None:
        """Every wait ends with ``error`` (the channel was closed; its reader failed)."""
        entries = list(self.items())
        self.clear()
        ended: Set[int] = set()
        for uid, entry in entries:
            for waiter in entry if entry.__class__ is list else (entry,):
                if id(waiter) not in ended:  # a batch is the waiter of many uids: ended once
                    ended.add(id(waiter))
                    waiter.end(uid, error)
