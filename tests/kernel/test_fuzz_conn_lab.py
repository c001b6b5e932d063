"""The connection half of the model-based fuzzer (tests/ucma_conn_model.py): a short bounded
campaign on every kernel of the lab, and the replays of what campaigns found.

The campaign is derandomized per kernel (its seed from the kernel's release, printed): a
failure in CI reproduces with ``tools/fuzz --kernel K --machine connections --seed S``.
"""

from __future__ import annotations

import os
import sys
import time
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ucma_conn_model as cm  # noqa: E402
from ucma_conn_ends import DUE  # noqa: E402
from pyrdmacm.conformance import kernel_version  # noqa: E402

pytestmark = pytest.mark.kernel

#: the CI budget: sequences x steps, under a minute on the lab's emulated CPU
EXAMPLES, STEPS = 15, 25


def _reset_stats():
    cm.use_peer(None)
    cm.reset_stats()


def test_bounded_connection_campaign():
    release = os.uname().release
    seed = zlib.crc32(b"connections " + release.encode())
    _reset_stats()
    start = time.monotonic()
    report = cm.bounded(seed, EXAMPLES, STEPS)
    stats = cm.ConnMachine.stats
    print("connection fuzz campaign on %s: seed %d, %d sequences (over %s), %d commands, events %s, %.1f s"
          % (release, seed, stats["sequences"], dict(stats["addresses"]), stats["commands"], dict(stats["events"]),
             time.monotonic() - start))
    assert report is None, "seed %d (tools/fuzz --kernel ... --machine connections --seed %d):\n%s" % (
        seed, seed, report)
    assert stats["commands"] > EXAMPLES * 3, "the campaign ran almost nothing: %s" % stats
    requests = stats["events"]["CONNECT_REQUEST"] + stats["events"]["CONNECT_REQUEST (UD)"]
    assert requests > 3, "the campaign made almost no connection: %s" % stats
    assert set(stats["addresses"]) == set(cm.WHERE), "not every address family was drawn: %s" % stats
    assert stats["events"]["CONNECT_REQUEST (UD)"] > 0, "no datagram (SIDR) request was made: %s" % stats


def _machine():
    _reset_stats()
    return cm.ConnMachine()


def _requested(m, listener_ch, active_ch, port=cm.PORTS[0]):
    """A listener on ``port`` (channel ``listener_ch``), an active id connected to it (channel
    ``active_ch``), the request read: (the active id, the request's id)."""
    m.listen(listener_ch, port, 8)
    m.prepare(active_ch, port, listener_ch)
    a = m.ids[-1]
    m._connect(a)
    m._settle()
    return a, a.peer


def test_replay_a_whole_connection_and_its_teardown_from_the_passive_end():
    """The handshake on the lab's own address, the passive end's DREQ, the active end's
    DREP: both ends DISCONNECTED once, netlink's states as the model's after each step."""
    m = _machine()
    try:
        m.handshake(0, 1, cm.PORTS[0])
        m.kernel_agrees()
        cm.passive_end_disconnects(m, next(c for c in m.ids if c.role == "active"))
    finally:
        m.teardown()


def test_replay_the_rtu_then_the_passive_end_destroyed_at_once():
    """Found by the first campaign on 6.1 (seed 5; a model bug): the RTU and, right after it,
    DESTROY_ID of the passive end. The RTU arrived first: the passive end went established,
    so it sent a DREQ, and the active end's id went to DISCONNECT (netlink) with a
    DISCONNECTED queued; the model now allows that as well as the REJ 28 of the other order."""
    m = _machine()
    try:
        a, p = _requested(m, 0, 0, cm.PORTS[1])
        m._accept(p, 1)
        m._settle()
        m.establish_then_destroy_passive(cm.Pinned(**{"active id": a}))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and a.may and m._read(a.ch, 0.5):
            m.kernel_agrees()
        m.kernel_agrees()
    finally:
        m.teardown()


def test_replay_a_rej_before_any_answer_is_dropped_far_and_wedges_destroy_near():
    """Found by the first campaigns on 5.10 and 7.2 (seed 25): the active end REJECTs its own
    request in REQ_SENT. The far end's IB CM drops that REJ (it names none of its comm ids):
    the request's id stays in REQ_RCVD, REJECT (reason 35 too) is still taken there (a model
    bug, fixed), and the active end hears nothing. And the kernel bug the campaign's time
    showed (conformance.bugs: rej_in_req_sent_keeps_the_req): the active id's REQ is not
    cancelled, so its DESTROY_ID waits about 102 s for the REQ's retries. The machine leaves
    that REJECT out; this replay sends it on purpose, and times the destroy."""
    from pyrdmacm.conformance import known_bug

    m = _machine()
    try:
        a, p = _requested(m, 1, 1)
        assert p is not None and p.cm == "req_rcvd"
        err = m._send(a.ch, "REJECT", {"id": a.handle, "reason": 0})
        assert err == 0
        cm.rejected_by(m.ids, a, 28)
        time.sleep(1.0)  # the REJ has arrived by now, had it been taken (cf. DESTROY's REJ 4 below)
        m._reject(p, 35)
        assert m.script[-1].endswith("REJECT -> ok"), m.script[-1]
        assert not m._read(a.ch, 0.5), "an event came on the active end's channel"
        m.kernel_agrees()
        started = time.monotonic()
        m._destroy(a)
        waited = time.monotonic() - started
        print("DESTROY_ID after REJECT in REQ_SENT: %.1f s" % waited)
        bug = known_bug("rej_in_req_sent_keeps_the_req", kernel_version())
        assert bug is not None
        assert 30 < waited < 300, "DESTROY_ID took %.1f s: the recorded bug says 77-102 s: update " \
                                  "pyrdmacm/conformance/bugs.py if this kernel is without it" % waited
        # the REQ's retries meanwhile: one that reached the listener after the request's id had
        # answered is a new request there (seen on 5.10 and 6.12), for an id that is gone
        lst = m.ids[0]
        again = 0
        while True:
            lst.coming[a.qpn] = a
            lst.owed.append(("CONNECT_REQUEST", frozenset({0}), time.monotonic() + DUE, None))
            if not m._read(lst.ch, 0.5):
                break
            again += 1
        lst.owed, lst.coming = [], {}
        print("new requests from the abandoned REQ's retries: %d" % again)
        assert all(c.cm == "idle" for c in m.ids if c.role == "passive")
        m.kernel_agrees()
    finally:
        m.teardown()


def test_replay_a_destroy_in_req_sent_rejects_the_request_with_its_rej_4():
    """Found by the 30-minute campaigns on 5.10 and 7.2 (seed 20261331; a model bug): unlike
    REJECT's REJ, DESTROY's REJ 4 (TIMEOUT) from REQ_SENT reaches the request's id (the IB CM
    looks a TIMEOUT up by the sender's comm id): once it has arrived, the request's id
    answers REJECT and ACCEPT with EINVAL. No event shows its arrival (the id has uid 0): a
    second is plenty on loopback."""
    m = _machine()
    try:
        a, p = _requested(m, 1, 0)
        m._destroy(a)
        assert p.cm == "rej_coming"
        time.sleep(1.0)
        m._reject(p, 28)
        assert m.script[-1].endswith("REJECT -> EINVAL"), m.script[-1]
        m._accept(p, 1)
        assert m.script[-1].endswith("ACCEPT -> EINVAL"), m.script[-1]
        m.kernel_agrees()
    finally:
        m.teardown()


def test_replay_a_reject_after_accept_keeps_the_rep_retrying_and_wedges_destroy():
    """Found by the bounded campaign across the lab's two guests (6.1, seed 1279527030: closing
    the peer's channel took 67 s), then recorded (conformance.bugs: rej_in_rep_sent_keeps_the_rep):
    REJECT on a request's id whose REP went out and was not answered by an RTU (the IB CM in
    REP_SENT) sends the REJ -- the active end gets REJECTED 28 -- but leaves the REP retrying,
    so the id's DESTROY_ID waits about 68 s. The machine leaves that REJECT out; this replay
    sends it on purpose, and times the destroy."""
    from pyrdmacm.conformance import known_bug

    m = _machine()
    try:
        a, p = _requested(m, 0, 1)
        m._accept(p, 1)
        m._settle()
        assert a.cm == "rep_rcvd" and p.cm == "rep_sent"
        err = m._send(p.ch, "REJECT", {"id": p.handle, "reason": 28})
        assert err == 0
        cm.rejected_by(m.ids, p, 28)
        m._settle()  # the active end's REJECTED 28
        m.kernel_agrees()
        started = time.monotonic()
        m._destroy(p)
        waited = time.monotonic() - started
        print("DESTROY_ID after REJECT in REP_SENT: %.1f s" % waited)
        assert known_bug("rej_in_rep_sent_keeps_the_rep", kernel_version()) is not None
        assert 30 < waited < 300, "DESTROY_ID took %.1f s: the recorded bug says about 68 s: update " \
                                  "pyrdmacm/conformance/bugs.py if this kernel is without it" % waited
        m.kernel_agrees()
    finally:
        m.teardown()
