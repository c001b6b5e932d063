"""Connection faults that need two hosts racing each other, between the lab's two guests.

The pair topology: pyrdmacm runs on both guests, the tests here on lab-b (10.9.0.2) and a
Python snippet on lab-a (10.9.0.1), started through the peer agent (tests/lab_peer.py).
The snippet prints what it saw as JSON lines, which the test reads with ``wait_for_line``;
the test's orders (a round's parameters, its "go") travel over a TCP control connection
the snippet opens, so that both hosts act within a few milliseconds of each other.

Each test repeats its race on fresh connections and asserts what a user between two hosts
must see:

* crossing disconnects: both ends call disconnect() on 24 connections at once, so DREQs
  cross; every id on both sides gets DISCONNECTED, then TIMEWAIT_EXIT;
* listeners destroyed while a reader thread takes a burst of requests: the reader was
  handed exactly what each listener's DESTROY_ID reports, and every client gets its
  REJECTED;
* migrate() racing the peer's DREQ: every id on both sides reaches TIMEWAIT_EXIT.

The DREQs cross by themselves (the IB CM's message counters of both hosts tell how many
did).  The other two races are between two threads of lab-b, and a guest has one CPU: there
a reader thread goes from its GET_EVENT to the event's dispatch without another thread
getting a look in, so these tests choose the interleaving (Pauser: the reader stops at the
k-th call of a turn while the main thread destroys or migrates, k swept over the turn) and
count how often the other thread's call landed inside the reader's window.  The same faults
on one host (tests/conn_behaviour.py) are forced by holding the reader at the library's
dispatch; here the kernel, the events and the peer are those of two real hosts.  The
helpers both hosts run, the snippet's control connection and the Pauser are in
tests/pair_races.py.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from pair_races import (Pauser, PeerScript, cm_counters, connect_all, counters_since, first, paced,  # noqa: E402
                        stuck_ids, until_timewait)
from pyrdmacm import CmId, EventChannel  # noqa: E402
from pyrdmacm.abi import CmEventType as E  # noqa: E402

pytestmark = pytest.mark.kernel(topology="pair")

HERE = "10.9.0.2"
#: rxe's timewait is 2.1-2.3 s; emulation and a busy host stretch everything
TIMEWAIT_BOUND = 15.0
#: how long a client may wait for the answer (REJECTED) to its connection request
ANSWER_BOUND = 10.0


# ----------------------------------------------------------------------------------------
# Crossing disconnects
# ----------------------------------------------------------------------------------------

#: lab-a: a listener; each round it accepts ``n`` connections, says it is ready, disconnects them
#: in the order the test gives at its "go", and reports what each of its ids saw
DISCONNECTING_PEER = r'''
n, port = map(int, sys.argv[1:3])
ch = EventChannel()
lst = CmId(ch)
lst.bind_addr("10.9.0.1:%d" % port)
lst.listen()
answer(listening=port)
while True:
    r = order()["round"]
    ids = accept_all(ch, n)
    before = cm_counters()
    answer(ready=r)
    o = order()
    spent = paced([ids[i].disconnect for i in o["order"]], o["gap"])
    seen = until_timewait([ch], ids, o["bound"])
    say(report="disconnect", round=r, spent=spent, events=seen, counters=counters_since(before))
    for cm in ids.values():
        cm.destroy()
'''


def test_crossing_disconnects_between_hosts_reach_timewait_on_both_ends(peer):
    """Both hosts disconnect the same 24 connections at once, in the same order, every round:
    lab-b sends lab-a the go over the control connection and disconnects one id every GAP_B
    (1, 1.5, then 0.75 ms by round), while lab-a, which starts a few ms later (the go's
    latency), disconnects one every 0.5 ms, so its lag shrinks by GAP_B - 0.5 ms an id
    (from 0-12, 0-24, 0-6 ms).  Where it is below the DREQ's own latency, each host sends
    its DREQ before the other's arrives: the DREQs cross (each IB CM goes from DREQ_SENT to
    DREQ_RCVD and waits for a DREP).

    Every id on both hosts must get DISCONNECTED (status 0), then TIMEWAIT_EXIT, within
    TIMEWAIT_BOUND.  How many crossed is counted from the IB CM's counters of both hosts: a
    crossing makes two DREQs arrive for one connection, so crossed = DREQs received (both
    hosts) - connections: 4 (6.1) and 18 (7.2) of the 72 of 3 rounds on quiet guests, more
    on a busy host.  3 rounds, and up to 6 while none crossed: the test fails if none did,
    as it would then test nothing.  Before the fix (pyrdmacm answered a DISCONNECTED only
    when the id had not disconnected itself) both ends of each crossed connection stopped at
    DISCONNECTED."""
    n, rounds, port, gap_a, gaps_b = 24, 3, 7301, 0.0005, (0.001, 0.0015, 0.00075)
    script = PeerScript(peer, DISCONNECTING_PEER, n, port)
    assert script.answer() == {"listening": port}
    lines, crossed_total, stuck, r = [], 0, [], 0
    try:
        while r < rounds or (crossed_total == 0 and r < 2 * rounds):
            with EventChannel() as ch:
                script.send(round=r)
                ids = connect_all(ch, "%s:%d" % (peer.address, port), range(n))
                assert script.answer() == {"ready": r}
                before = cm_counters()
                script.send(order=list(range(n)), gap=gap_a, bound=TIMEWAIT_BOUND)
                spent = paced([ids[i].disconnect for i in range(n)], gaps_b[r % len(gaps_b)])
                seen = until_timewait([ch], ids, TIMEWAIT_BOUND)
                ours = counters_since(before)
                theirs = script.report("disconnect", r, TIMEWAIT_BOUND + 30)
                crossed = sum(c["rx_dreq"] - c["rxdup_dreq"]
                              for c in (ours, theirs["counters"])) - n
                crossed_total += crossed
                here = stuck_ids(seen)
                there = stuck_ids({int(i): evs for i, evs in theirs["events"].items()})
                stuck.append((here, there))
                lines.append("round %d: %d of %d DREQs crossed (loops %.0f ms here, %.0f ms on "
                             "lab-a); ids without DISCONNECTED then TIMEWAIT_EXIT: %d of %d here, "
                             "%d of %d on lab-a" % (r, crossed, n, spent * 1e3,
                                                   theirs["spent"] * 1e3, len(here), n,
                                                   len(there), n))
                for cm in ids.values():
                    cm.destroy()
            r += 1
        script.close()
    finally:
        print("\n".join(lines))
    report = "\n".join(lines + ["first ids stuck, lab-b %s, lab-a %s" % (
        first(h for h, _ in stuck), first(t for _, t in stuck))])
    assert not any(h or t for h, t in stuck), report
    assert crossed_total > 0, "no DREQs crossed in %d rounds: nothing was tested\n%s" % (
        r, report)


# ----------------------------------------------------------------------------------------
# Listeners destroyed while a reader thread takes a burst of requests
# ----------------------------------------------------------------------------------------

BURST_PEER = r'''
while True:
    o = order()
    r, per = o["round"], o["per"]
    ch = EventChannel()
    clients = {}
    for j, dst in enumerate(o["dsts"]):  # client i goes to listener i // per
        clients.update(routed_all(ch, dst, range(j * per, (j + 1) * per)))
    n = len(clients)
    answer(ready=r)
    order()  # go
    t0 = time.monotonic()
    for i in range(n):
        clients[i].connect(private_data=pdata(i), responder_resources=1, initiator_depth=1)
    answers = {}
    while len(answers) < n and time.monotonic() - t0 < o["bound"]:
        for ev in ch.get_events(64, 0.05, ack=True):
            answers.setdefault(ev.id.context, [ev.event.name, ev.status,
                                               round(time.monotonic() - t0, 3)])
    say(report="burst", round=r, answers=answers, unanswered=sorted(set(range(n)) - set(answers)))
    ch.close()
'''


def test_listeners_destroyed_during_a_burst_from_the_other_host(peer):
    """10 listeners on one channel of lab-b, whose reader thread takes the requests one at a
    time and rejects each; lab-a connects a burst of 3 clients to each listener, listener by
    listener.  Once the reader has been handed the first request of a listener, the main
    thread stops the reader at the k-th call of its next turn (Pauser), destroys that
    listener meanwhile, and lets the reader go on: k sweeps the reader's turn (0 to 116, by
    4) over the 30 listeners of 3 rounds, so that some destroys come between the reader's
    GET_EVENT of a request and the request's dispatch (the reader is then handed a request
    whose listener's destroy() had begun: 5 to 11 of the 30 on 6.1 and 7.2).

    For each listener the reader must have been handed exactly what its DESTROY_ID reports
    (events_reported), and every client on lab-a must get its answer within ANSWER_BOUND:
    REJECTED, 28 from the reader's reject or from the kernel's clean-up of the requests still
    queued, 8 for the REQs that came after their listener.  Before the fix a request the
    reader had read as its listener went was dropped: events_reported > handed, and its
    client had no answer (until the channel closed; so it stays open until lab-a has
    reported)."""
    listeners, per, rounds, port, step = 10, 3, 3, 7401, 4
    script = PeerScript(peer, BURST_PEER)
    lines, bad = [], []
    for r in range(rounds):
        with EventChannel() as ch:
            lsts = []
            for j in range(listeners):
                lst = CmId(ch)
                lst.context = j
                lst.bind_addr("%s:%d" % (HERE, port + r * listeners + j))
                lst.listen()
                lsts.append(lst)
            handed: dict = {j: [] for j in range(listeners)}
            failed: list = []
            going: set = set()  # the listeners whose destroy() has begun
            late: list = []  # requests handed out once their listener's destroy() had begun
            stop, pauser = threading.Event(), Pauser()

            def read(ch=ch, pauser=pauser, stop=stop, handed=handed, going=going, late=late,
                     failed=failed) -> None:
                with pauser.running():
                    while not stop.is_set():
                        pauser.turn()
                        ev = ch.get_event(0.05)
                        if ev is not None and ev.event is E.CONNECT_REQUEST:
                            handed[ev.listen_id.context].append(ev)
                            if ev.listen_id.context in going:
                                late.append(ev.listen_id.context)
                            ev.ack()
                            try:
                                ev.id.reject(b"not now")
                            except Exception as e:  # noqa: BLE001 - reported below
                                failed.append(repr(e))

            dsts = ["%s:%d" % (HERE, port + r * listeners + j) for j in range(listeners)]
            script.send(round=r, dsts=dsts, per=per, bound=ANSWER_BOUND)
            assert script.answer() == {"ready": r}
            reader = threading.Thread(target=read)
            reader.start()
            reported, at = {}, {}
            try:
                script.send(go=r)
                for j, lst in enumerate(lsts):
                    deadline = time.monotonic() + 10
                    while not handed[j] and time.monotonic() < deadline:
                        time.sleep(0.0005)
                    at[j] = (j * 12 + r * step) % 120
                    pauser.stop_next(at[j])
                    pauser.wait_stopped(5)
                    going.add(j)
                    try:
                        reported[j] = lst.destroy()
                    finally:
                        pauser.release()
                # lab-a reports once every client has its answer, or after ANSWER_BOUND
                theirs = script.report("burst", r, ANSWER_BOUND + 30)
            finally:
                stop.set()
                pauser.disarm()
                reader.join(20)
            wrong = {j: (at[j], reported[j], len(handed[j])) for j in range(listeners)
                     if reported[j] != len(handed[j])}
            statuses = sorted({(a[0], a[1]) for a in theirs["answers"].values()})
            lines.append("round %d: events_reported/handed by listener %s; requests handed out "
                         "once their listener's destroy() had begun: %d (stops at call %s); "
                         "listeners with events_reported != handed (stop at call, reported, "
                         "handed): %s; lab-a's answers %s, unanswered %d%s" % (
                             r, [(reported[j], len(handed[j])) for j in range(listeners)],
                             len(late), sorted(at[j] for j in set(late)), wrong or "none",
                             statuses, len(theirs["unanswered"]),
                             "; rejects refused: %s" % failed if failed else ""))
            if wrong or theirs["unanswered"] or failed or \
                    any(a[0] != "REJECTED" for a in theirs["answers"].values()):
                bad.append(lines[-1])
            for evs in handed.values():
                for ev in evs:
                    ev.id.destroy()
    script.close()
    print("\n".join(lines))
    assert not bad, "\n".join(["%d of %d rounds went wrong:" % (len(bad), rounds)] + lines)


# ----------------------------------------------------------------------------------------
# migrate() racing the peer's DREQ
# ----------------------------------------------------------------------------------------

def test_migrate_racing_the_peers_disconnect_reaches_timewait(peer):
    """80 connections from lab-b to lab-a, their ids on one channel of lab-b that a reader
    thread reads (it acks each event; the channel answers each DISCONNECTED with the DREP);
    a second channel has its reader too.  lab-a disconnects all 80 back to back; once their
    DREQs are in, the reader starts, and before each of its turns the main thread has it
    stop at the k-th call of the turn (Pauser; k = 0 to 79, one per turn), migrates the id
    whose DISCONNECTED it is reading (the first not yet handed out, nor migrated) to the
    second channel meanwhile, and lets it go on: the MIGRATE_IDs sweep the reader's turn,
    and some land between its GET_EVENT and its DREP (about 20 of the 80 on 6.1 and 7.2).

    Every id on both hosts must get DISCONNECTED (status 0: the DREP came), then
    TIMEWAIT_EXIT, within TIMEWAIT_BOUND.  How many raced is counted: DISCONNECTEDs that
    the old channel's reader handed out for an id that had moved meanwhile, and DREPs the
    kernel refused on the old fd (the fixed library then sends them from migrate(): the id's
    _drep).  Before the fix such an event was dropped, or its DREP written on the old fd,
    refused and dropped: lab-a's DREQ went unanswered (no DISCONNECTED there within the
    bound) and lab-b's id never reached timewait."""
    n, port = 80, 7501
    script = PeerScript(peer, DISCONNECTING_PEER, n, port)
    assert script.answer() == {"listening": port}
    old, new = EventChannel(), EventChannel()
    seen: list = []  # (index, event name, status, when)
    moved: list = []  # DISCONNECTEDs the old channel's reader handed out for an id gone elsewhere
    errors: list = []
    done: set = set()  # the ids whose DISCONNECTED a reader has handed out
    stop, pauser = threading.Event(), Pauser()

    def read(ch: EventChannel) -> None:
        try:
            with pauser.running() if ch is old else contextlib.nullcontext():
                while not stop.is_set():
                    if ch is old:
                        pauser.turn()
                    ev = ch.get_event(0.05)
                    if ev is None:
                        continue
                    ev.ack()
                    i = ev.id.context
                    seen.append((i, ev.event.name, ev.status, time.monotonic()))
                    if ev.event is E.DISCONNECTED:
                        if ev.id.channel is not ch:
                            moved.append(i)
                        done.add(i)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))

    readers = [threading.Thread(target=read, args=(ch,)) for ch in (old, new)]
    migrated: set = set()
    try:
        script.send(round=0)
        ids = connect_all(old, "%s:%d" % (peer.address, port), range(n))
        assert script.answer() == {"ready": 0}
        before = cm_counters()
        script.send(order=list(range(n)), gap=0, bound=TIMEWAIT_BOUND)
        deadline = time.monotonic() + 20
        while counters_since(before)["rx_dreq"] < n and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the DISCONNECTEDs of the last DREQs are queued too
        t0 = time.monotonic()
        pauser.stop_next(0)
        for t in readers:
            t.start()
        for k in range(n):
            if not pauser.wait_stopped(5):
                pauser.disarm()
                break
            left = [i for i in range(n) if i not in done and i not in migrated]
            if left:
                ids[left[0]].migrate(new)
                migrated.add(left[0])
            if k + 1 < n and len(left) > 1:
                pauser.stop_next(k + 1)
            pauser.release()
            if len(left) <= 1:
                break
        spent = time.monotonic() - t0
        deadline = time.monotonic() + TIMEWAIT_BOUND
        while time.monotonic() < deadline and \
                sum(e[1] == "TIMEWAIT_EXIT" for e in list(seen)) < n:
            time.sleep(0.05)
        theirs = script.report("disconnect", 0, TIMEWAIT_BOUND + 30)
    finally:
        stop.set()
        pauser.disarm()
        for t in readers:
            t.join(20)
        old.close()
        new.close()
    script.close()
    events: dict = {i: [] for i in range(n)}
    for i, name, status, _ in sorted(seen, key=lambda e: e[3]):
        events[i].append([name, status])
    here = stuck_ids(events)
    there = stuck_ids({int(i): evs for i, evs in theirs["events"].items()})
    # the fixed library's own mark of a DREP refused on the old fd and left to migrate()
    refused = [i for i, cm in ids.items() if getattr(cm, "_drep", None) is not None]
    summary = ("%d ids migrated over %.0f ms; raced: %d DISCONNECTEDs handed out for an id "
               "that had moved, %d DREPs refused on the old fd; ids without DISCONNECTED then "
               "TIMEWAIT_EXIT: %d of %d here, %d of %d on lab-a%s"
               % (len(migrated), spent * 1e3, len(moved), len(refused), len(here), n,
                  len(there), n, "; reader errors: %s" % errors if errors else ""))
    print(summary)
    assert not errors and not here and not there, "%s\nlab-b: %s\nlab-a: %s" % (
        summary, first([here]), first([there]))
