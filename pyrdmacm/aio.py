"""asyncio on top of the core: a reader on the channel's fd, and the outcome of any call awaited.

Theory of operation
-------------------
:class:`AsyncChannel` wraps an :class:`~pyrdmacm.channel.EventChannel`.  On first use
it registers the channel's fd with the running loop (``loop.add_reader``); when the fd
is readable it drains every queued event with ``get_events(n, 0)`` (non-blocking
GET_EVENTs under one reader guard) and hands each to the waiter of its id, or to the
queue that :meth:`AsyncChannel.get_event` reads.  Commands are the core's own calls (a
``write()`` each, which never blocks), so thousands of ids resolve concurrently from
one task and no thread is involved.

One mechanism awaits every verb.  :data:`pyrdmacm.state.OUTCOMES` says which events
answer a call on an id of a given kind, and :meth:`AsyncChannel.outcome_of` makes the
call and returns a future of the id's next event among those::

    fut = ach.outcome_of(cm_id, Call.RESOLVE_ROUTE, cm_id.resolve_route, 2000)
    ev = await fut      # ROUTE_RESOLVED; ROUTE_ERROR raises EventError

The future is resolved with the event, acknowledged (an ok event with a non-zero status
counts as failed, as in sync mode); a failure event sets
:class:`~pyrdmacm.errors.EventError` instead, unless ``raise_on_error=False``.  A
synchronous refusal (``KernelError``, ``StateError``, ``UsageError``) is set on the
future, so ``await`` raises it either way.  Events of the id that do not answer the
call (DISCONNECTED, ADDR_CHANGE ...) go to :meth:`~AsyncChannel.get_event`.
:meth:`~AsyncChannel.outcomes_of` is the batch form: one call per id, one future of
all their outcome events, in order (and no waiter object per id: the cheapest way).
A new verb needs nothing here: its row in OUTCOMES is enough.

The verbs spell it out.  ``resolve_addr``, ``resolve_route`` and their ``_many`` forms
are coroutines (a coroutine sends its command when it first runs: when awaited, or when
the Task made by ``create_task`` or ``gather`` starts).  ``start_resolve_addr`` and
``start_resolve_route`` are :meth:`~AsyncChannel.outcome_of` with the verb's arguments
named: the command is written at once and a future returned, so ``gather`` over them
needs no Task per id.  What each form costs in the lab (10,000 ids, docs/benchmarks.md):
the batch call about 1.15x the blocking API; ``gather`` over ``start_*`` futures about
1.8x (most of it asyncio's own cost per future); ``gather`` over the coroutines more
again (a Task each)::

    async with AsyncChannel() as ach:
        ids = ach.channel.create_ids(1000)
        events = await ach.resolve_addr_many(ids, "10.0.0.2")               # one future for all
        events = await asyncio.gather(*(ach.start_resolve_route(i, 2000) for i in ids))  # one per id
        ev = await ach.resolve_addr(other, "10.0.0.3")                      # one coroutine

Connections are awaited the same way, the handshake's own steps done by the helpers::

    async def serve(ach, lst):                      # lst: a listening CmId of ach's channel
        async for req in ach.requests(lst):         # the CONNECT_REQUESTs of that listener
            ev = await ach.accept(req, private_data=b"welcome")     # ESTABLISHED

    ev = await ach.connect(cm, private_data=b"hello")   # CONNECT_RESPONSE; the RTU is sent
    ev = await ach.disconnect(cm)                   # this side's DISCONNECTED
    ev = await ach.wait_event(cm, CmEventType.TIMEWAIT_EXIT, timeout=5)
    membership, ev = await ach.join_multicast(ud_id, "239.1.1.1")   # MULTICAST_JOIN

``connect`` sends the RTU (``establish()``) on CONNECT_RESPONSE before it returns; a
datagram id's connect returns ESTABLISHED (the SIDR REP), its accept None at once (no
event follows).  REJECTED, UNREACHABLE, CONNECT_ERROR, MULTICAST_ERROR raise EventError
(the event attached: reason, private data, ``explain()``) unless ``raise_on_error=False``.
The reader routes what no id's waiter takes: a CONNECT_REQUEST (its ``id`` a new id, not
registered until accept gives it a uid) to its listener's ``requests()`` iterators, a
multicast event to the waiter of its membership (the uid is the membership's), everything
else to ``get_event``.  ``wait_event`` takes an event of the id that came before it was
called from get_event's queue; ``requests()`` takes the listener's requests queued there
before it started, and gives back those it did not yield when it ends.  A peer's DREQ is
answered by the channel itself; ``disconnect`` after it sends nothing.

Faults have defined outcomes.  :meth:`AsyncChannel.close` (and the EventChannel's own
``close()``, even behind the adapter's back: the adapter watches a copy of the channel's
waker, which ``close()`` signals) fails every waiter -- outcome futures, batches,
``get_event`` -- with :class:`~pyrdmacm.errors.StateError` "the channel was closed";
every later call fails the same way; ``requests()`` iterations end.  The loop's readers are removed by the fd numbers
they were registered under, and an adapter that finds a dead one's reader under its
channel's fd number replaces it, so a new channel given the same number by the kernel
sees its events.

A waiter whose future is done before its event comes (cancelled: ``task.cancel()``,
``asyncio.wait_for`` timing out) keeps its place until the event arrives, which is then
acknowledged and dropped: the id's state has followed it (``cm_id.state``), and
``get_event`` is not handed an event its reader did not ask for (and that was acked
already).  No done-callback is put on the per-id futures to drop the place sooner: it
would cost more per id than the rest of the adapter's work (add and remove: about 0.3 us
on the host; a callback that runs: 1.7 us).  Waiters of ids destroyed before their event
came (the kernel drops a destroyed id's events) are swept out as the table grows (a set
difference, amortized); a future still pending there fails with StateError.

Read the channel's events through the adapter only: a second reader takes events the
adapter's waiters are owed.  A reader in another thread makes the adapter's
``get_events`` refused: every waiter then fails with that StateError (rather than the
loop spinning on a readable fd), and reading starts again with the next call.
"""

from __future__ import annotations

import asyncio
import keyword
import os
import weakref
from collections import deque
from typing import Any, AsyncIterator, Callable, Deque, Dict, FrozenSet, Iterable, List, Optional, Tuple, Union

from .abi import CmEventType
from .addr import parse_address
from ._device import timeout_seconds
from .channel import EventChannel
from .cmid import CmId
from .membership import Membership
from .errors import EventError, RdmaCmError, StateError, UsageError
from .events import Event
from .state import OUTCOMES, Call, Kind, Outcome, State

__all__ = ["AsyncChannel"]

_DRAIN = 256  # events taken per get_events call when the fd is readable
#: the waiter table is swept for destroyed ids when it grows past this (then past 4x its size)
#: how often (seconds) a waiting ``requests()`` iterator looks whether its listener was destroyed
#: (the core says nothing when an id is destroyed: see AsyncChannel.requests)
_LISTENER_POLL = 0.2

_E = CmEventType
_CONNECT_RESPONSE = _E.CONNECT_RESPONSE
_DESTROYED = State.DESTROYED

#: how one call is awaited: (event -> True for an ok event, False for a failure -- True for
#: every outcome event when failures are not raised; the call; raise_on_error; the events
#: that, with a zero status, simply resolve the wait).  Made once per (call, kind,
#: raise_on_error): see _spec_tables.  The call is a Call, or the name of a wait that is no
#: call's outcome ("DISCONNECT", "wait_event").
_Spec = Tuple[Dict[Any, bool], Union[Call, str], bool, FrozenSet[Any]]


def _make_spec(take: Dict[Any, bool], call: Union[Call, str], raise_on_error: bool) -> _Spec:
    return (take, call, raise_on_error, frozenset(e for e, ok in take.items() if ok))


def _take(outcome: Outcome) -> Dict[Any, bool]:
    take = dict.fromkeys(outcome.failed, False)
    take.update(dict.fromkeys(outcome.ok, True))
    return take


def _spec_tables() -> Tuple[Dict[Call, Tuple[_Spec, _Spec]], Dict[Tuple[Kind, Call], Tuple[_Spec, _Spec]]]:
    """The specs of every call with an outcome: by call alone where every kind has the same
    outcome (no ``cm_id.kind`` to compute per call), and by (kind, call)."""
    by_kind: Dict[Tuple[Kind, Call], Tuple[_Spec, _Spec]] = {}
    for (kind, call), outcome in OUTCOMES.items():
        # raise_on_error=False: every outcome event is taken as it comes (the fast paths ask one thing)
        by_kind[(kind, call)] = (_make_spec(_take(outcome), call, True),
                                 _make_spec(dict.fromkeys(outcome.events, True), call, False))
    any_kind: Dict[Call, Tuple[_Spec, _Spec]] = {}
    for call in Call:
        outs = [OUTCOMES.get((kind, call)) for kind in Kind]
        if outs[0] is not None and all(o == outs[0] for o in outs):
            any_kind[call] = by_kind[(Kind.CONNECTED, call)]
    return any_kind, by_kind


_ANY_KIND, _BY_KIND = _spec_tables()
_ADDR_SPECS = _ANY_KIND[Call.RESOLVE_ADDR]
_ROUTE_SPECS = _ANY_KIND[Call.RESOLVE_ROUTE]


def _spec(cm_id: Any, call: Any, raise_on_error: Any) -> _Spec:
    """The spec of ``call`` on ``cm_id`` (the general path: a kind-dependent outcome, or a
    misuse named)."""
    if not isinstance(call, Call):
        raise UsageError("the call must be a pyrdmacm.Call (Call.RESOLVE_ADDR, Call.CONNECT ...), got %r" % (call,))
    pair = _ANY_KIND.get(call)
    if pair is None:
        kind = cm_id.kind
        pair = _BY_KIND.get((kind, call))
        if pair is None:
            others = [k.value for k in Kind if (k, call) in OUTCOMES]
            raise UsageError(
                "%s on a %s id has no outcome event to await%s: it is complete when the call returns; "
                "call it directly" % (call, kind.value, " (%s ids have one)" % ", ".join(others) if others else ""))
    return pair[0] if raise_on_error else pair[1]


def _command(call: Union[Call, str], cm_id: Any) -> str:
    if not isinstance(call, Call):  # a wait's name (Call is a str enum: test for it, not for str)
        return call
    if call is Call.RESOLVE_ADDR and getattr(cm_id.channel, "legacy", False):
        return "RESOLVE_IP"
    return call.name


def _event_error(ev: Event, call: Union[Call, str], kwargs: Optional[Dict[str, Any]]) -> EventError:
    """The EventError for a failure event answering ``call`` (error path only)."""
    cm_id = ev.id
    src = kwargs.get("src") if kwargs else None
    if src is not None:
        try:
            src = parse_address(src)
        except Exception:
            pass
    return EventError(ev, _command(call, cm_id), src=src, dst=getattr(cm_id, "destination", None))


def _ack(ev: Event) -> None:
    """``ev.ack()``, lenient: an event the user acked already is not an error here."""
    try:
        ev.ack()
    except StateError:
        pass


# -- the batch's call loop: fn(cm_id, *args, **kwargs) per id, without the per-id cost of
# spreading them (a tuple and a dict per call: about 140 ns an id on the host, 5% of a
# batched resolve_addr); one loop is written out per shape of arguments, and cached.

_Run = Callable[[Callable[..., Any], List[Any], Tuple[Any, ...], Dict[str, Any]], Tuple[int, Optional[Exception]]]


def _run_any(fn: Callable[..., Any], ids: List[Any], args: Tuple[Any, ...],
             kwargs: Dict[str, Any]) -> Tuple[int, Optional[Exception]]:
    k = 0
    try:
        for k, cm_id in enumerate(ids):
            fn(cm_id, *args, **kwargs)
    except Exception as e:
        return k, e
    return -1, None


_RUNS: Dict[Tuple[int, Tuple[str, ...]], _Run] = {}


def _run_for(n_args: int, names: Tuple[str, ...]) -> _Run:
    """The call loop for ``n_args`` positional arguments and these keyword names: it
    returns ``(k, exception)`` for the first id refused, ``(-1, None)`` when all went."""
    run = _RUNS.get((n_args, names))
    if run is not None:
        return run
    if len(_RUNS) >= 64 or n_args > 16 or not all(n.isidentifier() and not keyword.iskeyword(n) for n in names):
        return _run_any
    a = ["a%d" % i for i in range(n_args)]
    v = ["v%d" % i for i in range(len(names))]
    lines = ["def run(fn, ids, args, kwargs):"]
    if a:
        lines.append("    %s, = args" % ", ".join(a))
    if v:
        lines.append("    %s, = kwargs.values()" % ", ".join(v))
    lines += [
        "    k = 0",
        "    try:",
        "        for k, cm_id in enumerate(ids):",
        "            fn(%s)" % ", ".join(["cm_id"] + a + ["%s=%s" % (n, x) for n, x in zip(names, v)]),
        "    except Exception as e:",
        "        return k, e",
        "    return -1, None",
    ]
    namespace: Dict[str, Any] = {}
    exec("\n".join(lines), namespace)  # only identifiers of our own making and checked keyword names
    made: _Run = namespace["run"]
    _RUNS[(n_args, names)] = made
    return made


class _Batch:
    """The outcome events of many ids, in their order, behind one future.  It is its ids'
    waiter itself (``_waiters[uid] = batch``): no per-id entry is made."""

    __slots__ = ("fut", "take", "quiet", "raise_on_error", "call", "kwargs", "index", "events", "left")

    def __init__(self, fut: "asyncio.Future[List[Event]]", spec: _Spec, kwargs: Dict[str, Any],
                 index: Dict[int, int]) -> None:
        self.fut = fut
        #: quiet: the events that, with a zero status, neither fail the batch nor need more than a place
        self.take, self.call, self.raise_on_error, self.quiet = spec
        self.kwargs = kwargs
        #: uid -> the id's place in the batch (and in the result)
        self.index = index
        self.events: List[Any] = [None] * len(index)
        self.left = len(index)

    def deliver(self, ev: Event, ok: bool) -> None:
        _ack(ev)
        self.events[self.index[ev.id.uid]] = ev
        self.left -= 1
        fut = self.fut
        if fut.done():  # failed already, or cancelled: the event is acked and dropped
            return
        if self.raise_on_error and (not ok or ev.status):
            fut.set_exception(_event_error(ev, self.call, self.kwargs))
        elif not self.left:
            fut.set_result(self.events)


class _Requests:
    """The connection requests of one listener, for its ``requests()`` iterators: the
    CONNECT_REQUEST events not taken yet (not acked), and the iterators waiting."""

    __slots__ = ("listener", "ready", "waiters", "users", "timer", "ended")

    def __init__(self, listener: CmId) -> None:
        self.listener = listener
        #: CONNECT_REQUEST events (or an exception to raise: the listener's failure event)
        self.ready: Deque[Any] = deque()
        self.waiters: "Deque[asyncio.Future[Optional[Event]]]" = deque()
        #: the iterators reading it (it is dropped when the last one ends)
        self.users = 0
        #: the look for a destroyed listener, armed while an iterator waits
        self.timer: Optional[asyncio.TimerHandle] = None
        self.ended = False

    def put(self, item: Any) -> None:
        """A request (or the listener's failure) to the oldest waiting iterator, else kept."""
        waiters = self.waiters
        while waiters:
            w = waiters.popleft()
            if not w.done():
                if isinstance(item, BaseException):
                    w.set_exception(item)
                else:
                    w.set_result(item)
                return
        self.ready.append(item)

    def end(self, error: Optional[BaseException] = None) -> None:
        """The iterators end (``error``: they raise it instead; reading may start again)."""
        if error is None:
            self.ended = True
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        waiters = list(self.waiters)
        self.waiters.clear()
        for w in waiters:
            if not w.done():
                try:
                    if error is None:
                        w.set_result(None)
                    else:
                        w.set_exception(error)
                except RuntimeError:  # its loop is closed: nobody awaits it any more
                    pass


#: (id(loop), fd) -> the adapter whose reader the loop has under that fd number: a new adapter
#: given a closed channel's fd number evicts the dead one, and a dead one removes only its own
_READERS: "Dict[Tuple[int, int], weakref.ReferenceType[AsyncChannel]]" = {}


def _no_call(*args: Any, **kwargs: Any) -> None:
    """The call of something that is no id (never made: outcome_of refuses the id first)."""
    raise UsageError("no call: the id is no CmId")  # pragma: no cover


def _closed_error(how: str) -> StateError:
    return StateError("the channel was closed (%s): the kernel destroyed its ids; open a new AsyncChannel" % how)


class AsyncChannel:
    """An :class:`EventChannel` driven by an asyncio loop: ``AsyncChannel()`` opens one,
    ``AsyncChannel(channel)`` drives the given one.  ``async with`` closes it."""

    def __init__(self, channel: Optional[EventChannel] = None) -> None:
        if channel is not None and not isinstance(channel, EventChannel):
            raise UsageError("AsyncChannel takes an EventChannel (or nothing: it opens one), got %r" % (channel,))
        self.channel = channel if channel is not None else EventChannel()
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        #: the fd numbers the loop's readers are registered under (-1: none)
        self._fd = -1
        self._wake_fd = -1
        #: why the adapter is closed (None while open)
        self._closed: Optional[str] = None
        #: uid -> where its next outcome event goes: a batch, or ``(future, spec, kwargs)``, or a
        #: list of them, oldest first, when several calls of one id are pending (rare)
        self._waiters: Dict[int, Any] = {}
        self._queue: Deque[Event] = deque()
        self._queue_waiters: "Deque[asyncio.Future[Event]]" = deque()
        #: listener uid -> its requests, while a ``requests()`` iterator reads them
        self._requests: Dict[int, _Requests] = {}

    @property
    def closed(self) -> bool:
        """True once close() ran or the channel below was closed."""
        return self._closed is not None

    def __repr__(self) -> str:
        return "<AsyncChannel %r%s waiters=%d queued=%d>" % (
            self.channel, " closed" if self._closed else "", len(self._waiters), len(self._queue))

    # -- lifecycle
    def _start(self) -> asyncio.AbstractEventLoop:
        """The running loop, with this adapter's readers on it (registered on first use)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise UsageError("AsyncChannel's calls need a running asyncio loop: make them in a coroutine "
                             "(asyncio.run(main()))") from None
        if self._closed is not None:
            raise _closed_error(self._closed)
        old = self._loop
        if old is not None:
            if old is loop:
                return loop
            if old.is_running():
                raise UsageError("this AsyncChannel is driven by another running asyncio loop: use it from that "
                                 "loop, or make an AsyncChannel per loop")
            # that loop stopped (asyncio.run returned): move to this one; what waited there is told
            self._shutdown(None, error=StateError("the AsyncChannel moved to another asyncio loop, %r: waits made "
                                                  "on the stopped loop ended" % (loop,)))
        ch = self.channel
        if ch.closed:
            self._shutdown("by EventChannel.close()")
            raise _closed_error(self._closed or "")
        fd = ch.fileno()
        key = (id(loop), fd)
        ref = _READERS.get(key)
        other = ref() if ref is not None else None
        if other is not None and other is not self and other._loop is loop:
            if not other.channel.closed:
                raise UsageError("this EventChannel already has an AsyncChannel on this loop (%r): read its "
                                 "events through that one" % (other,))
            other._shutdown("by EventChannel.close()", evicted=True)
        # a reader left under this number by a closed fd (the loop's selector still maps the number
        # to it, the kernel's epoll dropped it) would take our registration's place: remove it
        loop.remove_reader(fd)
        try:
            loop.add_reader(fd, self._on_readable)
        except OSError as e:  # EBADF: closed with os.close() behind the channel's back
            raise StateError("the event channel's fd %d is not open (%s): close channels with close(), and "
                             "open a new AsyncChannel" % (fd, os.strerror(e.errno or 0))) from None
        self._loop, self._fd = loop, fd
        _READERS[key] = weakref.ref(self)
        ch.watch(self)  # destroy() and migrate() end our waits for the ids they take away
        # The channel's close() signals its waker (an eventfd) and closes it: a copy of that fd
        # keeps it open and readable, so a close behind the adapter's back is seen at once.
        waker = getattr(getattr(ch, "_waker", None), "fd", -1)
        if isinstance(waker, int) and waker >= 0:
            try:
                self._wake_fd = os.dup(waker)
                loop.add_reader(self._wake_fd, self._on_woken)
            except OSError:  # no fd left: the close is seen later (the fd number reused, a call made)
                if self._wake_fd >= 0:
                    os.close(self._wake_fd)
                self._wake_fd = -1
        return loop

    def _unregister(self, evicted: bool = False) -> None:
        """Remove the loop's readers, by the fd numbers they were registered under."""
        loop, fd, wake = self._loop, self._fd, self._wake_fd
        self._loop, self._fd, self._wake_fd = None, -1, -1
        if loop is None:
            return
        self.channel.unwatch(self)
        key = (id(loop), fd)
        ref = _READERS.get(key)
        if ref is not None and ref() in (self, None):
            del _READERS[key]
            if not evicted:  # evicted: the adapter that evicts us replaces the reader itself
                loop.remove_reader(fd)
        if wake >= 0:
            loop.remove_reader(wake)
            os.close(wake)

    def _shutdown(self, how: Optional[str], evicted: bool = False, error: Optional[Exception] = None) -> None:
        """Stop reading; fail every waiter.  ``how``: the channel was closed (the adapter is
        done); else ``error`` is what the waiters get, and the next call starts reading again."""
        self._unregister(evicted)
        if how is not None:
            if self._closed is None:
                self._closed = how
            self._queue.clear()  # events of ids the kernel destroyed
        waiters = list(self._waiters.values())
        self._waiters.clear()
        queue_waiters = list(self._queue_waiters)
        self._queue_waiters.clear()

        def fail(fut: "asyncio.Future[Any]") -> None:
            if not fut.done():
                exc = _closed_error(self._closed or "") if how is not None or error is None else error
                try:
                    fut.set_exception(exc)
                except RuntimeError:  # its loop is closed: nobody awaits it any more
                    pass

        for entry in waiters:
            for one in entry if entry.__class__ is list else (entry,):
                fail(one.fut if one.__class__ is _Batch else one[0])
        for fut in queue_waiters:
            fail(fut)
        requests = list(self._requests.values())
        if how is not None:  # the listeners are gone with the channel: their iterators end
            self._requests.clear()
            for rq in requests:
                rq.ready.clear()
                rq.end()
        else:
            for rq in requests:
                rq.end(error)

    def close(self) -> None:
        """Close the channel (the kernel destroys its ids): every waiter fails with StateError
        "the channel was closed", the loop's readers are removed.  Idempotent."""
        if self._closed is None:
            self._shutdown("by AsyncChannel.close()")
        self.channel.close()

    async def __aenter__(self) -> "AsyncChannel":
        self._start()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    # -- events
    def _on_woken(self) -> None:
        """The channel's waker: its close() signals it."""
        if self.channel.closed:
            self._shutdown("by EventChannel.close()")
            return
        try:  # a signal without a close (none is made today): take it, so that it does not spin
            os.read(self._wake_fd, 8)
        except OSError:
            pass

    def _on_readable(self) -> None:
        ch = self.channel
        if ch.closed:
            self._shutdown("by EventChannel.close()")
            return
        drain = ch.get_events  # many events under one reader guard
        waiters = self._waiters
        pop = waiters.pop
        while True:
            try:
                events = drain(_DRAIN, 0)
            except RdmaCmError as e:
                if ch.closed:
                    self._shutdown("by EventChannel.close()")
                else:  # another reader, a failing fd: the waiters are told, reading restarts on the next call
                    self._shutdown(None, error=e)
                return
            for ev in events:
                cm_id = ev.id
                uid = cm_id.uid
                entry = pop(uid, None)
                if entry is not None:
                    kind, status = ev.event, ev.status
                    cls = entry.__class__
                    if cls is _Batch:
                        if kind in entry.quiet and not status and entry.left > 1:
                            ev.ack()  # _Batch.deliver, inlined for the events that neither fail
                            entry.events[entry.index[uid]] = ev  # nor complete the batch
                            entry.left -= 1
                            continue
                        ok = entry.take.get(kind)
                        if ok is not None:
                            entry.deliver(ev, ok)
                            continue
                        waiters[uid] = entry
                    elif cls is tuple:
                        fut, spec, kwargs = entry
                        if kind in spec[3] and not status:  # the common case: an ok event
                            ev.ack()
                            if not fut.done():  # done: cancelled; acked, and dropped
                                fut.set_result(ev)
                            continue
                        ok = spec[0].get(kind)
                        if ok is not None:
                            ev.ack()
                            if fut.done():  # cancelled: acked, and dropped
                                continue
                            if spec[2] and (not ok or status):
                                fut.set_exception(_event_error(ev, spec[1], kwargs))
                            else:
                                fut.set_result(ev)
                            continue
                        waiters[uid] = entry
                    elif self._deliver_to_one_of(uid, entry, ev):
                        continue
                # a connection request, a membership's event, a listener's failure: routed on
                if (ev.listen_id is not None or ev.membership is not None or self._requests) and self._route(ev):
                    continue
                # not an outcome anybody awaits: to get_event
                qw = self._queue_waiters
                while qw:
                    w = qw.popleft()
                    if not w.done():
                        w.set_result(ev)
                        break
                else:
                    self._queue.append(ev)
            if len(events) < _DRAIN:  # get_events stopped short: nothing more is queued
                return

    def _route(self, ev: Event) -> bool:
        """An event no waiter of its id took: a membership's goes to the waiter of the membership
        (its uid); a CONNECT_REQUEST to its listener's ``requests()``; a listener's failure
        event (DEVICE_REMOVAL) ends them with EventError.  False: it goes to get_event."""
        membership = ev.membership
        if membership is not None:
            return self._deliver(membership.uid, ev)
        listener = ev.listen_id
        if listener is not None:
            rq = self._requests.get(listener.uid)
            if rq is None:
                return False
            rq.put(ev)  # acked when an iterator takes it
            return True
        rq = self._requests.get(ev.id.uid)
        if rq is None or ev.ok:
            return False
        _ack(ev)
        rq.put(EventError(ev, "LISTEN"))
        return True

    def _deliver(self, uid: int, ev: Event) -> bool:
        """``ev`` to the waiter of ``uid`` if its outcome is among its events; False if not."""
        entry = self._waiters.pop(uid, None)
        if entry is None:
            return False
        if entry.__class__ is list:
            return self._deliver_to_one_of(uid, entry, ev)
        if self._deliver_to_one_of(uid, [entry], ev):
            return True
        self._waiters[uid] = entry
        return False

    def _to_get_event(self, ev: Event) -> None:
        """Hand ``ev`` to the oldest get_event waiter, or queue it."""
        qw = self._queue_waiters
        while qw:
            w = qw.popleft()
            if not w.done():
                w.set_result(ev)
                return
        self._queue.append(ev)

    def _deliver_to_one_of(self, uid: int, entries: List[Any], ev: Event) -> bool:
        """An event for an id with several calls pending: the oldest that it answers takes it."""
        for i, entry in enumerate(entries):
            if entry.__class__ is _Batch:
                ok = entry.take.get(ev.event)
            else:
                ok = entry[1][0].get(ev.event)
            if ok is None:
                continue
            del entries[i]
            if entries:
                self._waiters[uid] = entries[0] if len(entries) == 1 else entries
            if entry.__class__ is _Batch:
                entry.deliver(ev, ok)
            else:
                fut, spec, kwargs = entry
                _ack(ev)
                if not fut.done():
                    if spec[2] and (not ok or ev.status):
                        fut.set_exception(_event_error(ev, spec[1], kwargs))
                    else:
                        fut.set_result(ev)
            return True
        self._waiters[uid] = entries
        return False

    async def get_event(self) -> Event:
        """The next event that no pending call of this adapter awaits (a coroutine).

        Events come as the channel's ``get_event`` gives them: not acknowledged (``ev.ack()``
        is optional).  After :meth:`close`, StateError.
        """
        if self._loop is None or self._loop.is_closed():  # None once closed
            self._start()  # raises on a closed adapter
        if self._queue:
            return self._queue.popleft()
        assert self._loop is not None
        fut: asyncio.Future[Event] = self._loop.create_future()
        self._queue_waiters.append(fut)
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                self._queue_waiters.remove(fut)
            except ValueError:
                pass
            if fut.done() and not fut.cancelled() and fut.exception() is None:
                self._queue.appendleft(fut.result())  # given to us as we were cancelled: not lost
            raise

    # -- waiters
    def _add(self, uid: int, entry: Any) -> None:
        """Route the next outcome event of id ``uid`` to ``entry`` as well (a call is pending)."""
        waiters = self._waiters
        old = waiters.get(uid)
        if old is None:
            waiters[uid] = entry
        elif old.__class__ is list:
            old.append(entry)
        else:
            waiters[uid] = [old, entry]

    def ids_ended(self, uids: Iterable[int], why: str) -> None:
        """The channel's word that ids stopped being its own (``EventChannel.watch``): destroyed,
        or migrated to another channel.  Their outcome events never come here now: each wait
        for one fails at once with StateError (from another thread: on the loop's)."""
        loop = self._loop
        if loop is None:
            return
        try:
            here = asyncio.get_running_loop() is loop
        except RuntimeError:
            here = False
        if here:
            self._end_waits(uids, why)
        else:
            try:
                loop.call_soon_threadsafe(self._end_waits, list(uids), why)
            except RuntimeError:  # that loop is closed: nobody awaits its futures any more
                pass

    def _end_waits(self, uids: Iterable[int], why: str) -> None:
        pop = self._waiters.pop
        for uid in uids:
            entry = pop(uid, None)
            if entry is None:
                continue
            for one in entry if entry.__class__ is list else (entry,):
                fut = one.fut if one.__class__ is _Batch else one[0]
                if not fut.done():
                    fut.set_exception(StateError(
                        "id uid %d was %s before the outcome of its %s arrived (its events no longer come "
                        "to this channel): destroy or migrate an id after its outcome, or cancel the wait "
                        "first" % (uid, why, one.call if one.__class__ is _Batch else one[1][1])))

    def _not_ours(self, what: str, cm_id: Any) -> UsageError:
        if isinstance(cm_id, CmId) and getattr(cm_id, "channel", None) is not None:
            return UsageError("%s: id uid %d is on another event channel than this AsyncChannel's: its events "
                              "are read there (use that channel's AsyncChannel)" % (what, cm_id.uid))
        return UsageError("%s takes CmIds of this AsyncChannel's channel, got %r" % (what, cm_id))

    # -- the generic mechanism: await the outcome of any call
    def outcome_of(self, cm_id: CmId, call: Call, fn: Callable[..., Any], *args: Any, raise_on_error: bool = True,
                   **kwargs: Any) -> "asyncio.Future[Event]":
        """Make a call on ``cm_id`` and return a future of its outcome event (not a coroutine:
        the call is made at once, and no Task is needed to hold it).

        ``fn(*args, **kwargs)`` is the call (``cm_id.resolve_route``, ``cm_id.connect`` ...)
        and ``call`` names it (:class:`~pyrdmacm.Call`): the future gets the id's next event
        among ``OUTCOMES[(cm_id.kind, call)]``, acknowledged; a failure event (or a non-zero
        status) sets EventError unless ``raise_on_error`` is false.  A refusal of the call
        is set on the future.  Must be called with the loop running.
        """
        loop = self._loop
        if loop is None or loop.is_closed():  # None once closed; closed: asyncio.run returned
            loop = self._start_or_none()
            if loop is None:
                fut: asyncio.Future[Event] = asyncio.get_running_loop().create_future()
                fut.set_exception(_closed_error(self._closed or ""))
                return fut
        fut = loop.create_future()
        try:
            pair = _ANY_KIND.get(call) if call.__class__ is Call else None
            if pair is not None:
                spec = pair[0] if raise_on_error else pair[1]
            else:
                spec = _spec(cm_id, call, raise_on_error)
            if cm_id.channel is not self.channel:
                raise self._not_ours("outcome_of", cm_id)
        except AttributeError:  # no CmId
            fut.set_exception(self._not_ours("outcome_of", cm_id))
            return fut
        except UsageError as e:
            fut.set_exception(e)
            return fut
        owner = getattr(fn, "__self__", cm_id)
        if owner is not cm_id and isinstance(owner, CmId):
            fut.set_exception(UsageError("outcome_of: %r is a call of id uid %d, not of id uid %d: pass the "
                                         "id's own method (cm_id.%s)" % (fn, owner.uid, cm_id.uid, call)))
            return fut
        try:
            fn(*args, **kwargs)
        except Exception as e:  # refused before or by the kernel: the future says so
            fut.set_exception(e)
            return fut
        # Registered after the call: its event is read by this loop, which is here now.
        waiters = self._waiters
        entry = (fut, spec, kwargs)
        if waiters.setdefault(cm_id.uid, entry) is not entry:
            self._add(cm_id.uid, entry)
        return fut

    def _start_or_none(self) -> Optional[asyncio.AbstractEventLoop]:
        """``_start()``, or None when the adapter is closed (the caller sets that on its future)."""
        try:
            return self._start()
        except StateError:
            if self._closed is None:
                raise
            return None

    def outcomes_of(self, ids: Iterable[CmId], call: Call, fn: Callable[..., Any], *args: Any,
                    raise_on_error: bool = True, **kwargs: Any) -> "asyncio.Future[List[Event]]":
        """``fn(cm_id, *args, **kwargs)`` for every id (``CmId.resolve_route``, or any function of
        an id); one future of all their outcome events, in the ids' order.

        Every id is checked first (a CmId of this channel, given once: UsageError, nothing
        sent).  With ``raise_on_error`` the first failure event sets EventError (the other
        events are still taken and acked).  A refusal part-way stops the calls and is set on
        the future: the ids before the refused one are under way (their events still come
        to the batch, and are acked), the refused one and those after it were not called.
        """
        loop = self._loop
        if loop is None or loop.is_closed():  # None once closed; closed: asyncio.run returned
            loop = self._start_or_none()
            if loop is None:
                closed: asyncio.Future[List[Event]] = asyncio.get_running_loop().create_future()
                closed.set_exception(_closed_error(self._closed or ""))
                return closed
        fut: asyncio.Future[List[Event]] = loop.create_future()
        ids = list(ids)
        ch = self.channel
        try:
            uids = [cm_id.uid for cm_id in ids if cm_id.channel is ch]
            pair = _ANY_KIND.get(call) if call.__class__ is Call else None
            if pair is not None:
                spec = pair[0] if raise_on_error else pair[1]
            else:
                spec = self._batch_spec(ids, call, raise_on_error)
        except AttributeError:
            fut.set_exception(self._not_ours("outcomes_of", next((i for i in ids if not isinstance(i, CmId)), ids)))
            return fut
        except UsageError as e:
            fut.set_exception(e)
            return fut
        index = dict(zip(uids, range(len(uids))))
        if len(index) != len(ids):
            fut.set_exception(self._batch_refusal(ids, index))
            return fut
        if not ids:
            fut.set_result([])
            return fut
        sink = _Batch(fut, spec, kwargs, index)
        k, exc = _run_for(len(args), tuple(kwargs))(fn, ids, args, kwargs)
        if exc is not None:
            # id k and those after it were not called; those before it are under way
            del uids[k:]
            sink.left = k
            text = "in a batch of %d ids: id %d (uid %d) was refused; %s" % (
                len(ids), k, ids[k].uid, "the %d before it are under way (their events are taken and "
                "acked), the rest were not called" % k if k else "no id was called")
            if hasattr(exc, "add_note"):
                exc.add_note(text)
            else:  # before Python 3.11: the same attribute (PEP 678), which tracebacks do not show there
                exc.__notes__ = [*getattr(exc, "__notes__", ()), text]
            fut.set_exception(exc)
            if not k:
                return fut
        waiters = self._waiters
        if not waiters or waiters.keys().isdisjoint(index.keys()):
            waiters.update(dict.fromkeys(uids, sink))  # the batch is its ids' waiter: one C call
        else:  # some ids have a call pending already (rare)
            for uid in uids:
                self._add(uid, sink)
        return fut

    @staticmethod
    def _batch_spec(ids: List[CmId], call: Call, raise_on_error: bool) -> _Spec:
        """The spec of a kind-dependent call for a batch: the union of the outcomes of the
        kinds in it (an event is ok or failed the same way for every kind)."""
        if not ids:
            if not isinstance(call, Call):
                _spec(None, call, raise_on_error)  # raises, naming the misuse
            return _make_spec({}, call, raise_on_error)  # nothing will be awaited
        specs = list({id(s): s for s in (_spec(cm_id, call, raise_on_error) for cm_id in ids)}.values())
        if len(specs) == 1:
            return specs[0]
        take: Dict[Any, bool] = {}
        for one in specs:
            take.update(one[0])
        return _make_spec(take, call, raise_on_error)

    def _batch_refusal(self, ids: List[Any], index: Dict[int, int]) -> UsageError:
        seen: Dict[int, int] = {}
        ch = self.channel
        for k, cm_id in enumerate(ids):
            if getattr(cm_id, "channel", None) is not ch:
                return self._not_ours("outcomes_of", cm_id)
            if cm_id.uid in seen:
                return UsageError("outcomes_of: id uid %d is given twice (places %d and %d of the batch): its "
                                  "events could not be told apart; give each id once (nothing was called)"
                                  % (cm_id.uid, seen[cm_id.uid], k))
            seen[cm_id.uid] = k
        return UsageError("outcomes_of: ids that cannot be told apart: give each id once")  # pragma: no cover

    # -- the verbs: a future at once (start_*), or a coroutine
    def start_resolve_addr(self, cm_id: CmId, dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                           raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_addr(dst, src=src, timeout_ms=...)`` now; a future of ADDR_RESOLVED
        (ADDR_ERROR: EventError, unless not ``raise_on_error``).

        :meth:`outcome_of` for this call with its arguments spelled out: the cheapest
        per-id form (``asyncio.gather`` over these futures needs no Task per id).
        """
        loop = self._loop  # None once closed
        try:
            slow = loop is None or cm_id.channel is not self.channel or loop.is_closed()
        except AttributeError:
            slow = True
        if slow or loop is None:  # the general path says what is wrong
            return self.outcome_of(cm_id, Call.RESOLVE_ADDR, getattr(cm_id, "resolve_addr", _no_call), dst, src=src,
                                   timeout_ms=timeout_ms, raise_on_error=raise_on_error)
        fut: asyncio.Future[Event] = loop.create_future()
        try:
            cm_id.resolve_addr(dst, src=src, timeout_ms=timeout_ms)
        except Exception as e:  # refused before or by the kernel: the future says so
            fut.set_exception(e)
            return fut
        waiters = self._waiters
        entry = (fut, _ADDR_SPECS[0] if raise_on_error else _ADDR_SPECS[1], None if src is None else {"src": src})
        if waiters.setdefault(cm_id.uid, entry) is not entry:
            self._add(cm_id.uid, entry)
        return fut

    def start_resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *,
                            raise_on_error: bool = True) -> "asyncio.Future[Event]":
        """``cm_id.resolve_route(timeout_ms)`` now; a future of ROUTE_RESOLVED (ROUTE_ERROR:
        EventError, unless not ``raise_on_error``).  As :meth:`start_resolve_addr`."""
        loop = self._loop  # None once closed
        try:
            slow = loop is None or cm_id.channel is not self.channel or loop.is_closed()
        except AttributeError:
            slow = True
        if slow or loop is None:  # the general path says what is wrong
            return self.outcome_of(cm_id, Call.RESOLVE_ROUTE, getattr(cm_id, "resolve_route", _no_call), timeout_ms,
                                   raise_on_error=raise_on_error)
        fut: asyncio.Future[Event] = loop.create_future()
        try:
            cm_id.resolve_route(timeout_ms)
        except Exception as e:
            fut.set_exception(e)
            return fut
        waiters = self._waiters
        entry = (fut, _ROUTE_SPECS[0] if raise_on_error else _ROUTE_SPECS[1], None)
        if waiters.setdefault(cm_id.uid, entry) is not entry:
            self._add(cm_id.uid, entry)
        return fut

    async def resolve_addr(self, cm_id: CmId, dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                           raise_on_error: bool = True) -> Event:
        """``cm_id.resolve_addr(dst, src=src, timeout_ms=...)``, awaited (a coroutine: the command is
        sent when it first runs): ADDR_RESOLVED; ADDR_ERROR raises EventError unless not
        ``raise_on_error``.  The future form: :meth:`start_resolve_addr`."""
        return await self.start_resolve_addr(cm_id, dst, src=src, timeout_ms=timeout_ms,
                                             raise_on_error=raise_on_error)

    async def resolve_route(self, cm_id: CmId, timeout_ms: int = 2000, *, raise_on_error: bool = True) -> Event:
        """``cm_id.resolve_route(timeout_ms)``, awaited (a coroutine): ROUTE_RESOLVED; ROUTE_ERROR
        raises EventError unless not ``raise_on_error``.  The future form: :meth:`start_resolve_route`."""
        return await self.start_resolve_route(cm_id, timeout_ms, raise_on_error=raise_on_error)

    async def resolve_addr_many(self, ids: Iterable[CmId], dst: Any, *, src: Any = None, timeout_ms: int = 2000,
                                raise_on_error: bool = True) -> List[Event]:
        """``resolve_addr`` for every id; all their outcome events, in order (a coroutine over
        :meth:`outcomes_of`: one future for the batch, the cheapest way for many ids)."""
        return await self.outcomes_of(ids, Call.RESOLVE_ADDR, CmId.resolve_addr, dst, src=src,
                                      timeout_ms=timeout_ms, raise_on_error=raise_on_error)

    async def resolve_route_many(self, ids: Iterable[CmId], timeout_ms: int = 2000, *,
                                 raise_on_error: bool = True) -> List[Event]:
        """``resolve_route`` for every id; all their outcome events, in order (over :meth:`outcomes_of`)."""
        return await self.outcomes_of(ids, Call.RESOLVE_ROUTE, CmId.resolve_route, timeout_ms,
                                      raise_on_error=raise_on_error)

    # -- connections: every verb awaited, the RTU sent by the helper
    def _ours(self, what: str, cm_id: Any) -> asyncio.AbstractEventLoop:
        """The running loop, once ``cm_id`` is known to be an id of this adapter's channel (else
        UsageError; a closed adapter: StateError)."""
        loop = self._start()
        if not isinstance(cm_id, CmId) or getattr(cm_id, "channel", None) is not self.channel:
            raise self._not_ours(what, cm_id)
        return loop

    def _wait_for(self, loop: asyncio.AbstractEventLoop, uid: int, spec: _Spec,
                  kwargs: Optional[Dict[str, Any]] = None) -> "asyncio.Future[Event]":
        """A future of the next event of ``uid`` (an id's or a membership's) among ``spec``'s."""
        fut: asyncio.Future[Event] = loop.create_future()
        waiters = self._waiters
        entry = (fut, spec, kwargs)
        if waiters.setdefault(uid, entry) is not entry:
            self._add(uid, entry)
        return fut

    def _take_queued(self, cm_id: CmId, spec: _Spec, kwargs: Optional[Dict[str, Any]] = None) -> Optional[Event]:
        """The oldest event of ``cm_id`` among ``spec``'s that came before anybody waited for it
        (it is in get_event's queue): taken from there and acked; a failure raised as the
        spec says.  None if there is none."""
        queue = self._queue
        take = spec[0]
        for i, ev in enumerate(queue):
            if ev.id is cm_id and ev.listen_id is None and ev.membership is None and ev.event in take:
                del queue[i]
                _ack(ev)
                if spec[2] and (not take[ev.event] or ev.status):
                    raise _event_error(ev, spec[1], kwargs)
                return ev
        return None

    async def connect(self, cm_id: CmId, param: Any = None, *, raise_on_error: bool = True,
                      **fields: Any) -> Event:
        """``cm_id.connect(param, **fields)`` (CONNECT), awaited; on CONNECT_RESPONSE the RTU is
        sent here (``cm_id.establish()``) before the event is returned, so the peer gets
        ESTABLISHED.  ``param`` and ``fields`` as for :meth:`CmId.connect` (a ConnParam, or
        ``qp_num=...``, ``private_data=b"..."`` ...).

        A connected id returns CONNECT_RESPONSE (``event.param``: the peer's ConnParam, its
        private data padded to 196 bytes); a datagram id ESTABLISHED (the SIDR REP:
        ``event.param`` a UdParam).  REJECTED, UNREACHABLE, CONNECT_ERROR raise EventError
        (``.event``: the event, with ``status``, ``private_data`` and ``explain()``) unless
        not ``raise_on_error``: then the event is returned and no RTU is sent.  If the wait
        is cancelled the id stays where the kernel's answer puts it (CONNECT, or RESPONSE
        without an RTU): destroy it, and the peer gets REJECTED.
        """
        ev = await self.outcome_of(cm_id, Call.CONNECT, getattr(cm_id, "connect", _no_call), param,
                                   raise_on_error=raise_on_error, **fields)
        if ev.event is _CONNECT_RESPONSE and not ev.status:
            cm_id.establish()
        return ev

    async def accept(self, cm_id: CmId, param: Any = None, *, raise_on_error: bool = True,
                     **fields: Any) -> Optional[Event]:
        """``cm_id.accept(param, **fields)`` (ACCEPT) on a connection request's id (what
        :meth:`requests` yields), awaited: the ESTABLISHED event, when the peer's RTU comes.
        REJECTED (the peer destroyed its id instead), UNREACHABLE, CONNECT_ERROR raise
        EventError unless not ``raise_on_error``.  A datagram id gets no event: the SIDR REP
        is sent and this returns None at once.  A refusal raises (KernelError: the kernel
        then rejected the request itself, the peer gets REJECTED 28)."""
        if isinstance(cm_id, CmId) and cm_id.kind is Kind.DATAGRAM:
            self._ours("accept", cm_id)
            cm_id.accept(param, **fields)
            return None
        return await self.outcome_of(cm_id, Call.ACCEPT, getattr(cm_id, "accept", _no_call), param,
                                     raise_on_error=raise_on_error, **fields)

    def requests(self, listener: CmId) -> AsyncIterator[CmId]:
        """The ids of the connection requests to ``listener`` (its CONNECT_REQUEST events), as
        they come: ``async for req in ach.requests(lst): await ach.accept(req, ...)``.

        Each event is acked when its id is yielded (``req.request`` is the event: the peer's
        ConnParam, ``req.query_addr()`` its address).  Requests that came before the
        iteration started (queued for :meth:`get_event`) are yielded first; those that come
        while the body runs wait for the next step; several iterators of one listener share
        its requests.  The iteration ends when the listener is destroyed (seen within
        0.2 s) or the channel is closed; the listener's failure event (DEVICE_REMOVAL)
        raises EventError.  A cancelled step loses nothing: when the iterator ends (its
        ``aclose()``, a ``break`` or a cancel), the requests it did not yield go back to
        :meth:`get_event`.  The listener must be listening (StateError)."""
        self._ours("requests", listener)
        if listener.state is not State.LISTEN:
            raise StateError("requests needs a listening id (state LISTEN), this one is %s (uid %d): call "
                             "listen() first" % (listener.state, listener.uid))
        return self._iterate(listener)

    async def _iterate(self, listener: CmId) -> AsyncIterator[CmId]:
        rq = self._attach(listener)
        try:
            while True:
                ev = await self._next_request(rq)
                if ev is None:
                    return
                _ack(ev)
                yield ev.id
        finally:
            self._detach(rq)

    def _attach(self, listener: CmId) -> _Requests:
        rq = self._requests.get(listener.uid)
        if rq is None:
            rq = self._requests[listener.uid] = _Requests(listener)
            queue = self._queue
            if queue:  # requests read before anybody iterated: they are the iterator's now
                others = [ev for ev in queue if ev.listen_id is not listener]
                if len(others) != len(queue):
                    rq.ready.extend(ev for ev in queue if ev.listen_id is listener)
                    queue.clear()
                    queue.extend(others)
        rq.users += 1
        return rq

    def _detach(self, rq: _Requests) -> None:
        rq.users -= 1
        if rq.users > 0:
            return
        if self._requests.get(rq.listener.uid) is rq:
            del self._requests[rq.listener.uid]
        if rq.timer is not None:
            rq.timer.cancel()
            rq.timer = None
        left = [ev for ev in rq.ready if not isinstance(ev, BaseException)]
        rq.ready.clear()
        if self._closed is None:
            for ev in left:  # not yielded: not lost
                self._to_get_event(ev)

    async def _next_request(self, rq: _Requests) -> Optional[Event]:
        """The next request of ``rq`` (None: the iteration ends)."""
        if rq.ready:
            item = rq.ready.popleft()
            if isinstance(item, BaseException):
                raise item
            return item  # type: ignore[no-any-return]
        if rq.ended or self._closed is not None or rq.listener.state is _DESTROYED:
            return None
        loop = self._loop
        if loop is None or loop.is_closed():  # reading stopped (a fault): start again
            loop = self._start_or_none()
            if loop is None:
                return None
        fut: asyncio.Future[Optional[Event]] = loop.create_future()
        rq.waiters.append(fut)
        if rq.timer is None:
            rq.timer = loop.call_later(_LISTENER_POLL, self._look_at_listener, rq)
        try:
            return await fut
        except asyncio.CancelledError:
            try:
                rq.waiters.remove(fut)
            except ValueError:
                pass
            if fut.done() and not fut.cancelled() and fut.exception() is None and fut.result() is not None:
                rq.ready.appendleft(fut.result())  # given to us as we were cancelled: not lost
            raise

    def _look_at_listener(self, rq: _Requests) -> None:
        """While an iterator waits: end it if its listener was destroyed (no event says so)."""
        rq.timer = None
        if not any(not w.done() for w in rq.waiters):
            return
        if rq.listener.state is _DESTROYED or self.channel.closed:
            rq.end()
            return
        loop = self._loop
        if loop is not None and not loop.is_closed():
            rq.timer = loop.call_later(_LISTENER_POLL, self._look_at_listener, rq)

    async def disconnect(self, cm_id: CmId, *, raise_on_error: bool = True) -> Optional[Event]:
        """``cm_id.disconnect()`` (DISCONNECT: the DREQ), awaited: this side's DISCONNECTED
        event, when the peer's DREP comes.  If the peer disconnected first (DISCONNECTED
        came already, and the channel answered its DREQ), nothing is sent: that event is
        returned if it is still queued for :meth:`get_event`, else None.  DISCONNECTED with
        a status (-110: the peer never answered the DREQ) raises EventError unless not
        ``raise_on_error``; the connection is down either way.  TIMEWAIT_EXIT follows:
        :meth:`wait_event`."""
        loop = self._ours("disconnect", cm_id)
        spec = _DISCONNECT_SPECS[0] if raise_on_error else _DISCONNECT_SPECS[1]
        if cm_id.state is State.DISCONNECTED:
            return self._take_queued(cm_id, spec)
        cm_id.disconnect()
        return await self._wait_for(loop, cm_id.uid, spec)

    async def wait_event(self, cm_id: CmId, *events: CmEventType, timeout: Optional[float] = None,
                         raise_on_error: bool = False) -> Event:
        """The next event of ``cm_id`` among ``events`` (ESTABLISHED after ``notify()``,
        TIMEWAIT_EXIT after a disconnect, DISCONNECTED ...), acked; one that came before
        the call (queued for :meth:`get_event`) is taken first.  The event is returned
        whatever its status, unless ``raise_on_error``: then a failure event or a
        non-zero status raises EventError.  ``timeout`` in seconds (None: for ever):
        asyncio.TimeoutError; a wait that timed out or was cancelled keeps its place, and
        the event, if it comes, is acked and dropped."""
        loop = self._ours("wait_event", cm_id)
        if not events:
            raise UsageError("wait_event needs the events to wait for (CmEventType.ESTABLISHED, ...)")
        take: Dict[Any, bool] = {}
        for e in events:
            if not isinstance(e, CmEventType):
                raise UsageError("wait_event takes CmEventType members (CmEventType.TIMEWAIT_EXIT ...), got %r" % (e,))
            take[e] = e.name not in _FAILURE_NAMES
        t = timeout_seconds(timeout)
        spec = _make_spec(take, "wait_event", raise_on_error)
        ev = self._take_queued(cm_id, spec)
        if ev is not None:
            return ev
        fut = self._wait_for(loop, cm_id.uid, spec)
        if t is None:
            return await fut
        return await asyncio.wait_for(fut, t)

    async def join_multicast(self, cm_id: CmId, addr: Any, *, send_only: bool = False, context: Any = None,
                             raise_on_error: bool = True) -> Tuple[Membership, Event]:
        """``cm_id.join_multicast(addr, send_only=..., context=...)`` (JOIN_MCAST), awaited:
        the membership and its MULTICAST_JOIN event (``event.param``: the group's UdParam,
        qp_num 0xffffff, qkey, ``ah.dgid``).  MULTICAST_ERROR raises EventError (its
        ``event.membership`` is the membership: ``leave()`` it) unless not
        ``raise_on_error``.  ``membership.leave()`` ends it (no event)."""
        loop = self._ours("join_multicast", cm_id)
        m = cm_id.join_multicast(addr, send_only=send_only, context=context)
        spec = _JOIN_SPECS[0] if raise_on_error else _JOIN_SPECS[1]
        ev = await self._wait_for(loop, m.uid, spec)
        return m, ev


_DISCONNECT_SPECS = _BY_KIND[(Kind.CONNECTED, Call.DISCONNECT)]
_JOIN_SPECS = _BY_KIND[(Kind.DATAGRAM, Call.JOIN_MULTICAST)]
_FAILURE_NAMES = frozenset(e.name for o in OUTCOMES.values() for e in o.failed)
