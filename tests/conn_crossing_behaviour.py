"""The connection manager's behavioural suite, requests left unanswered and messages that
cross (run in both tiers as tests/conn_behaviour.py is): the active end of an unanswered
request, a request's channel closed or its id destroyed before the answer, disconnects
crossing, a listener destroyed while its requests are read, a DREQ or DREP meeting a
migration.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any, Callable, List

import pytest

from pyrdmacm import CmId, EventChannel, State, wire
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import RejectReason
from pyrdmacm.errors import StateError
from pyrdmacm.core.life import Life

from conn_behaviour import Link, handshake, requested, routed, serve, wait


def _refused_then_destroyed_at_once(cm: CmId, mad: str) -> None:
    """``cm``'s REJECT and ACCEPT refused before any write (StateError: the id is in CONNECT),
    and its destroy not waiting for the retries of its ``mad`` (REQ, REP)."""
    import time as _time

    for call in (cm.reject, cm.accept):
        with pytest.raises(StateError, match="CONNECT"):
            call()
    assert cm.state is State.CONNECT
    started = _time.monotonic()
    cm.destroy()
    assert _time.monotonic() - started < 30, "destroy waited for the %s's retries" % mad


def test_the_active_end_of_an_unanswered_request_cannot_reject_or_accept_it(link: Link):
    """REJECT or ACCEPT on the active id while its request is unanswered (the IB CM in
    REQ_SENT) would leave the kernel's REQ retrying, and the id's destroy waiting 77-102 s
    (conformance.bugs: rej_in_req_sent_keeps_the_req): refused before any write, and the id
    is destroyed at once (the request's id is then rejected, REJ 4 or dropped)."""
    with link.server() as sc, link.client() as cc:
        lst, c, req = requested(sc, cc, link)
        _refused_then_destroyed_at_once(c, "REQ")
        req.destroy()
        lst.destroy()


def test_an_accepted_request_cannot_be_rejected_or_accepted_again_before_the_rtu(link: Link):
    """REJECT, or a second ACCEPT, on a request's id whose ACCEPT went out and whose peer has
    not sent its RTU (the IB CM in REP_SENT) would leave the kernel's REP retrying, and the
    id's destroy waiting about 68 s (conformance.bugs: rej_in_rep_sent_keeps_the_rep):
    refused before any write, and the id is destroyed at once (the peer gets REJECTED 28)."""
    with link.server() as sc, link.client() as cc:
        lst, c, req = requested(sc, cc, link)
        req.accept()
        wait(cc, E.CONNECT_RESPONSE)  # no RTU: the client has no QP and does not establish
        _refused_then_destroyed_at_once(req, "REP")
        wait(cc, E.REJECTED, status=28)
        c.destroy()
        lst.destroy()


def test_closing_the_channel_destroys_a_request_not_answered_yet(link: Link):
    """Found by the library's fuzzer (tests/lib_model.py): a request's id handed out and not
    answered (not registered until ACCEPT) still said REQUEST after its channel was closed,
    though the kernel destroyed it with the fd; now it is DESTROYED, as the channel's other
    ids, and its calls say the channel is closed. The active end gets the kernel's REJ."""
    with link.client() as cc:
        sc = link.server()
        lst, c, req = requested(sc, cc, link)
        sc.close()
        assert req.state is State.DESTROYED and lst.state is State.DESTROYED
        for call in (req.accept, req.reject, req.destroy):
            with pytest.raises(StateError, match="closed"):
                call()
        ev = wait(cc, E.REJECTED, status=None)
        assert ev.status == RejectReason.CONSUMER_DEFINED
        c.destroy()


def test_closing_the_channel_a_request_was_migrated_to_destroys_it(link: Link):
    """Found by the library's fuzzer with an asyncio reader (tests/lib_model.py): a request's
    id migrated before it was answered still said REQUEST after the channel it was moved to
    was closed (the old channel's close() would have destroyed it; the new one's did not know
    it).  Its old channel stays open, and does not take it back."""
    with link.client() as cc, link.server() as sc, link.server() as other:
        lst, c, req = requested(sc, cc, link)
        req.migrate(other)
        other.close()
        assert req.state is State.DESTROYED
        with pytest.raises(StateError, match="closed"):
            req.accept()
        ev = wait(cc, E.REJECTED, status=None)
        assert ev.status == RejectReason.CONSUMER_DEFINED
        assert lst.state is State.LISTEN and not sc.closed
        c.destroy()


@pytest.mark.parametrize("how", ["destroy", "migrate"])
def test_a_request_gone_unanswered_leaves_the_asyncio_adapter_its_close_watch(link: Link, how: str):
    """Found by the library's fuzzer with an asyncio reader (tests/lib_model.py): destroying or
    migrating a request's id before it was answered (uid 0 until ACCEPT) ended the channel's
    waits under uid 0, and the asyncio adapter's own close watch is one: a later close() of
    the EventChannel behind the adapter left its get_event waiting for ever."""
    import asyncio

    from pyrdmacm.aio import AsyncChannel

    async def main() -> Any:
        with link.client() as cc, link.server() as other:
            sc = link.server()
            ach = AsyncChannel(sc)
            lst, dst = serve(sc, link)
            c = routed(cc, dst)
            c.connect()
            ev = await asyncio.wait_for(ach.get_event(), 10)
            assert ev.event is E.CONNECT_REQUEST and ev.id.uid == 0
            if how == "destroy":
                ev.id.destroy()
            else:
                ev.id.migrate(other)
            reader = asyncio.ensure_future(ach.get_event())
            await asyncio.sleep(0.05)
            assert not reader.done()
            sc.close()
            try:
                await asyncio.wait_for(reader, 5)
            except StateError as e:
                return str(e)
            except asyncio.TimeoutError:
                return "still waiting 5 s after the channel's close()"
            return "an event"

    got = asyncio.run(main())
    assert "closed" in got, got


def test_destroying_a_request_unanswered_rejects_it_28(link: Link):
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        c = routed(cc, dst)
        c.connect()
        wait(sc, E.CONNECT_REQUEST).id.destroy()
        ev = wait(cc, E.REJECTED, status=28)
        assert ev.private_data == bytes(148)  # kernel-made: no data


def _read_until(channels: List[EventChannel], done: Callable[[List[Any]], bool], seconds: float) -> List[Any]:
    """Read (and ack) the channels' events until ``done(events so far)`` or ``seconds`` passed."""
    got: List[Any] = []
    deadline = time.monotonic() + seconds
    while not done(got) and time.monotonic() < deadline:
        for ch in channels:
            got.extend(ch.get_events(64, 0.02, ack=True))
    return got


def test_crossing_disconnects_reach_timewait_on_both_ends(link: Link):
    """Both ends of 20 connections call disconnect() back to back, so the DREQs cross: each
    IB CM then waits in DREQ_RCVD for a DREP, which the channel sends on every DISCONNECTED.
    Every id gets DISCONNECTED, then TIMEWAIT_EXIT (it used to stop at DISCONNECTED)."""
    n = 20
    with link.server() as sc, link.client() as cc:
        pairs = [handshake(sc, cc, link) for _ in range(n)]
        ids = [cm for _, req, c in pairs for cm in (req, c)]
        for _, req, c in pairs:
            c.disconnect()
            req.disconnect()
        seen: dict = {id(cm): [] for cm in ids}

        def done(events: List[Any]) -> bool:
            return sum(ev.event is E.TIMEWAIT_EXIT for ev in events) >= len(ids)

        for ev in _read_until([sc, cc], done, link.timewait + 10):
            seen.setdefault(id(ev.id), []).append(ev.event)
        stuck = [(cm, seen[id(cm)]) for cm in ids if E.TIMEWAIT_EXIT not in seen[id(cm)]]
        assert not stuck, "%d of %d ids got no TIMEWAIT_EXIT: %s" % (len(stuck), len(ids), stuck[:4])
        for cm in ids:
            assert seen[id(cm)].count(E.DISCONNECTED) == 1 and seen[id(cm)][-1] is E.TIMEWAIT_EXIT, seen[id(cm)]
            cm.destroy()
        for lst, _, _ in pairs:
            lst.destroy()


def _held_dispatch(ch: EventChannel, event: E) -> tuple:
    """Make ``ch``'s reader stop after it read an ``event`` (between GET_EVENT and handing the
    event out), until released: (read: set when it stopped there, go: release it)."""
    read, go = threading.Event(), threading.Event()
    real = ch._dispatch  # where a request is handed out

    def held(uid: int, handle: int, number: int, *args: Any) -> Any:
        if number == event and not read.is_set():
            read.set()
            assert go.wait(20)
        return real(uid, handle, number, *args)

    ch._dispatch = held  # type: ignore[method-assign]
    return read, go


def test_a_request_read_while_its_listener_is_destroyed_is_handed_out(link: Link):
    """A reader thread has read a CONNECT_REQUEST from the kernel when another thread destroys
    the listener: the request is still handed out (destroy's events_reported counts it), so
    its id can be answered; the peer gets the reject (it used to be dropped, the id left in
    the kernel and the peer unanswered)."""
    with link.server() as sc, link.client() as cc:
        lst, dst = serve(sc, link)
        read, go = _held_dispatch(sc, E.CONNECT_REQUEST)
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c = routed(cc, dst)
        c.connect()
        try:
            assert read.wait(20), "no CONNECT_REQUEST"
            reported = lst.destroy()
        finally:
            go.set()
            reader.join(20)
        ev = got[0]
        assert ev is not None and ev.event is E.CONNECT_REQUEST and ev.listen_id is lst, got
        assert reported == 1  # the kernel counted the request handed to the reader
        ev.ack()
        ev.id.reject(b"listener gone")
        rej = wait(cc, E.REJECTED, status=RejectReason.CONSUMER_DEFINED)
        assert rej.private_data.startswith(b"listener gone")
        ev.id.destroy()
        c.destroy()


def test_a_listener_destroyed_during_a_burst_hands_out_what_destroy_reports(link: Link):
    """A reader thread takes a burst of requests one at a time (rejecting each) while the main
    thread destroys the listener, five rounds: what the reader was handed equals the listener's
    events_reported, and every client gets an answer."""
    for _ in range(5):
        with link.server() as sc, link.client() as cc:
            lst, dst = serve(sc, link)
            clients = [routed(cc, dst) for _ in range(12)]
            handed: List[Any] = []
            stop = threading.Event()

            def read() -> None:
                while not stop.is_set():
                    ev = sc.get_event(0.05)
                    if ev is not None and ev.event is E.CONNECT_REQUEST:
                        handed.append(ev)
                        ev.ack()
                        ev.id.reject()

            reader = threading.Thread(target=read)
            reader.start()
            try:
                for c in clients:
                    c.connect()
                while len(handed) < 4:
                    time.sleep(0.001)
                reported = lst.destroy()
            finally:
                time.sleep(0.3)
                stop.set()
                reader.join(20)
            assert len(handed) == reported, (len(handed), reported)
            answers = _read_until([cc], lambda evs: len(evs) >= len(clients), 10.0)
            answered = {ev.id for ev in answers if ev.event in (E.REJECTED, E.UNREACHABLE)}
            assert answered == set(clients), "%d of %d clients unanswered" % (len(clients) - len(answered), len(clients))
            for c in clients:
                c.destroy()
            for ev in handed:
                ev.id.destroy()


def _the_drep_went_out(got: List[Any], req: CmId, cc: EventChannel, now_on: EventChannel, link: Link) -> None:
    """The reader was handed ``req``'s DISCONNECTED and the channel's DREP went out: the
    client's disconnect completes (status 0) and both ends reach timewait (``req`` on the
    channel it is on now)."""
    ev = got[0]
    assert ev is not None and ev.event is E.DISCONNECTED and ev.id is req, got
    ev.ack()
    wait(cc, E.DISCONNECTED, 5)  # status 0: the DREP came
    wait(cc, E.TIMEWAIT_EXIT, link.timewait)
    wait(now_on, E.TIMEWAIT_EXIT, link.timewait)


@pytest.mark.parametrize("window", ["read", "answer"])
def test_a_dreq_read_before_a_migration_is_answered_on_the_new_channel(link: Link, window: str):
    """The server's reader has read the peer's DISCONNECTED (its DREQ) when another thread
    migrates the id to another channel: the DREP goes out on the id's new fd, so the peer's
    disconnect completes (DISCONNECTED with status 0, then TIMEWAIT_EXIT) and so does this
    side's (it used to be written on the old fd, refused, and dropped).  The migration lands
    right after the GET_EVENT (``read``: the reader finds the id in the old channel's grave,
    not among its ids) or once the id has moved, before the answer (``answer``)."""
    with link.server() as sc, link.client() as cc, link.server() as moved:
        lst, req, c = handshake(sc, cc, link)
        read, go = threading.Event(), threading.Event()
        real = Life._answer_dreq  # the reader's answer to DISCONNECTED, once the id has moved
        real_write, get_event, reply = sc._write, sc._b_get_event, sc._r_event.view

        def held(cm_id: Any) -> None:
            if window == "answer" and cm_id is req and not read.is_set():
                read.set()  # read and moved, not answered yet
                assert go.wait(20)
            real(cm_id)

        def held_read(data: bytes) -> int:
            n = real_write(data)
            if data == get_event and int.from_bytes(reply[12:16], sys.byteorder) == E.DISCONNECTED \
                    and not read.is_set():
                read.set()  # read, its id not looked up yet
                assert go.wait(20)
            return n

        Life._answer_dreq = held  # type: ignore[method-assign]
        if window == "read":
            sc._write = held_read  # type: ignore[method-assign]
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c.disconnect()
        try:
            assert read.wait(20), "no DISCONNECTED"
            req.migrate(moved)
        finally:
            go.set()
            reader.join(20)
            Life._answer_dreq = real  # type: ignore[method-assign]
            sc._write = real_write  # type: ignore[method-assign]
        _the_drep_went_out(got, req, cc, moved, link)
        for cm in (c, req, lst):
            cm.destroy()


def test_a_drep_refused_while_the_id_moved_away_and_back_is_sent_where_it_is(link: Link):
    """The reader answers the peer's DREQ on the channel the id was on (C1), but two
    migrations move it to C2 and back to C1 around that write: the kernel refuses the write
    (the id was on C2 then), and by the time the reader looks, the id is on C1 again.  The
    DREP must still go out (on C1): the peer's disconnect completes and both ends reach
    timewait.  (The reader used to take the unchanged channel for "a migration is in flight"
    and leave the DREP to a migrate() that had already come and gone.)"""
    with link.server() as sc, link.client() as cc, link.server() as other:
        lst, req, c = handshake(sc, cc, link)
        drep = wire.DISCONNECT(req.handle)
        real = sc._write
        first, second, go_on, released = (threading.Event() for _ in range(4))

        def write(data: bytes) -> int:
            if data != drep or released.is_set():
                return real(data)
            first.set()  # the reader is about to answer, on C1: the id moves to C2 now
            assert go_on.wait(20)
            go_on.clear()
            try:
                return real(data)  # refused: the id is on C2
            finally:
                second.set()  # ... and back to C1 before the reader looks
                assert go_on.wait(20)
                released.set()

        sc._write = write  # type: ignore[method-assign]
        got: List[Any] = []
        reader = threading.Thread(target=lambda: got.append(sc.get_event(20)))
        reader.start()
        c.disconnect()
        try:
            assert first.wait(20), "no DISCONNECTED"
            req.migrate(other)
            go_on.set()
            assert second.wait(20)
            req.migrate(sc)
        finally:
            go_on.set()
            reader.join(20)
        _the_drep_went_out(got, req, cc, sc, link)
        for cm in (c, req, lst):
            cm.destroy()
