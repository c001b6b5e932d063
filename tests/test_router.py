"""The router's table (pyrdmacm.core.router) on its own: who an event goes to, and the
interleavings with another thread's end() that the channel's reader can meet (a thread
destroying an id while the reader routes one of its events), made deterministic by a take
that runs the other thread's step in the middle of a route."""

from __future__ import annotations

from typing import Any, Callable, Dict

import pytest

from pyrdmacm import Call, CmEventType as E, Kind, StateError, UsageError, Waiter
from pyrdmacm.core.router import Router


class Ev:
    """An event as the router reads it: its type."""

    def __init__(self, event: E) -> None:
        self.event = event


class Meanwhile(Dict[Any, bool]):
    """A take that runs ``step`` (another thread's work) when the router looks at it."""

    def __init__(self, take: Dict[Any, bool], step: Callable[[], None]) -> None:
        super().__init__(take)
        self.step = step

    def get(self, key: Any, default: Any = None) -> Any:  # type: ignore[override]
        self.step()
        return super().get(key, default)


def test_an_event_goes_to_the_wait_it_answers_and_only_then_leaves_the_table():
    r = Router()
    w = Waiter.for_call(Kind.CONNECTED, Call.RESOLVE_ADDR)
    r.add(7, w)
    assert not r.route(7, Ev(E.ROUTE_RESOLVED)) and r[7] is w and not w.done
    assert r.route(7, Ev(E.ADDR_ERROR)) and not r and w.event.event is E.ADDR_ERROR and w.ok is False


def test_several_waits_of_one_uid_each_take_the_oldest_event_they_answer():
    r = Router()
    route = Waiter.for_events(E.ROUTE_RESOLVED)
    first, second = Waiter.for_events(E.ADDR_RESOLVED), Waiter.for_events(E.ADDR_RESOLVED)
    for w in (route, first, second):
        r.add(3, w)
    assert r.route(3, Ev(E.ADDR_RESOLVED)) and first.done and not second.done
    assert r.route(3, Ev(E.ROUTE_RESOLVED)) and route.done
    assert r.route(3, Ev(E.ADDR_RESOLVED)) and second.done and not r


def test_end_while_a_route_looks_at_a_wait_that_the_event_does_not_answer_ends_it():
    """The reader has found the wait (its event does not answer it) when another thread
    destroys the id: the wait ends, and nothing puts it back in the table."""
    r = Router()
    w = Waiter({})
    w.take = Meanwhile({E.ADDR_RESOLVED: True}, lambda: r.end([5], "destroyed"))
    r.add(5, w)
    assert not r.route(5, Ev(E.DISCONNECTED))
    assert isinstance(w.error, StateError) and "destroyed" in str(w.error) and not r


def test_end_while_a_route_delivers_leaves_the_wait_ended_and_the_table_empty():
    r = Router()
    w = Waiter({})
    w.take = Meanwhile({E.ADDR_RESOLVED: True}, lambda: r.end([5], "destroyed"))
    r.add(5, w)
    assert r.route(5, Ev(E.ADDR_RESOLVED))  # taken: an event of an id destroyed meanwhile
    assert isinstance(w.error, StateError) and not r


def test_end_finds_every_wait_of_a_uid_with_several_while_a_route_looks():
    r = Router()
    a, b = Waiter({}), Waiter.for_events(E.ROUTE_RESOLVED)
    a.take = Meanwhile({E.ADDR_RESOLVED: True}, lambda: r.end([9], "migrated"))
    r.add(9, a)
    r.add(9, b)
    assert not r.route(9, Ev(E.DISCONNECTED))
    assert isinstance(a.error, StateError) and isinstance(b.error, StateError) and "migrated" in str(b.error)
    assert not r


def test_a_wait_added_while_a_route_delivers_stays():
    r = Router()
    late = Waiter.for_events(E.ROUTE_RESOLVED)
    w = Waiter({})
    w.take = Meanwhile({E.ADDR_RESOLVED: True}, lambda: r.add(4, late))
    r.add(4, w)
    assert r.route(4, Ev(E.ADDR_RESOLVED)) and w.done
    assert r.route(4, Ev(E.ROUTE_RESOLVED)) and late.done and not r


def test_forget_and_end_all():
    r = Router()
    a, b = Waiter.for_events(E.ESTABLISHED), Waiter.for_events(E.ESTABLISHED)
    r.add(1, a)
    r.add(1, b)
    r.forget(1, a)
    assert r.route(1, Ev(E.ESTABLISHED)) and b.done and not a.done and not r
    c = Waiter.for_events(E.ESTABLISHED)
    r.add_many([1, 2, 3], c)
    r.end_all(StateError("closed"))
    assert isinstance(c.error, StateError) and not r


def test_takes_are_the_outcomes():
    assert Waiter.for_call(Kind.DATAGRAM, Call.CONNECT).take[E.ADDR_ERROR] is False
    assert Waiter.for_call(Kind.CONNECTED, Call.DISCONNECT).take == {E.DISCONNECTED: True, E.DEVICE_REMOVAL: False}
    with pytest.raises(UsageError, match="must be a pyrdmacm.Call"):
        Waiter.for_call(Kind.CONNECTED, "resolve_addr")  # type: ignore[arg-type]
