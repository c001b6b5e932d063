"""The connection fuzzer across the lab's two guests (tests/ucma_conn_model.py with channels
2 and 3 on the peer, lab-a: tests/ucma_remote.py serves them there): a short bounded campaign
on every kernel, and replays of a connection whose ends are on two hosts.

The campaign is derandomized per kernel (its seed from the kernel's release, printed): a
failure in CI reproduces with ``tools/fuzz --kernel K --machine connections --topology pair
--seed S``.
"""

from __future__ import annotations

import os
import sys
import time
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import ucma_conn_model as cm  # noqa: E402

pytestmark = pytest.mark.kernel(topology="pair")

#: the CI budget: sequences x steps (each of the peer's commands is a round trip on the link)
EXAMPLES, STEPS = 20, 25


@pytest.fixture
def far(peer):
    """The peer's channel server, for channels 2 and 3 (stopped by the peer fixture after the test)."""
    proc = peer.start([sys.executable, "tests/ucma_remote.py", "serve"])
    proc.wait_for_line("serving rdma_cm channels", timeout=60)
    cm.use_peer(peer.address)
    cm.reset_stats()
    try:
        yield cm.ConnMachine.far
    finally:
        cm.use_peer(None)
        print("the channel server on the peer said:\n" + proc.output()[0])  # its slow commands


def test_bounded_connection_campaign_across_two_hosts(far):
    release = os.uname().release
    seed = zlib.crc32(b"connections pair " + release.encode())
    start = time.monotonic()
    report = cm.bounded(seed, EXAMPLES, STEPS)
    stats = cm.ConnMachine.stats
    print("connection fuzz campaign across two hosts on %s: seed %d, %d sequences (over %s), %d commands, "
          "%d requests across, events %s, %.1f s" % (release, seed, stats["sequences"], dict(stats["addresses"]),
                                                     stats["commands"], stats["across"], dict(stats["events"]),
                                                     time.monotonic() - start))
    assert report is None, "seed %d (tools/fuzz --kernel ... --machine connections --topology pair --seed %d):\n%s" % (
        seed, seed, report)
    assert stats["commands"] > EXAMPLES * 3, "the campaign ran almost nothing: %s" % stats
    assert stats["across"] > 0, "the campaign made no connection across the two hosts: %s" % stats
    assert set(stats["addresses"]) == set(cm.WHERE), "not every address family was drawn: %s" % stats


@pytest.mark.parametrize("where", cm.WHERE)
def test_replay_a_connection_from_here_to_the_peer_and_its_teardown_from_the_peer(far, where):
    """The handshake from lab-b to a listener on lab-a (each family: the link-local one with
    each host's own zone), the passive end's DREQ from lab-a, lab-b's DREP: both ends
    DISCONNECTED once, each host's netlink states as the model's after each step."""
    m = cm.ConnMachine()
    try:
        m.family(where)
        m.handshake(0, 2, cm.PORTS[0])
        m.kernel_agrees()
        a = next(c for c in m.ids if c.role == "active")
        p = a.peer
        assert (a.at, p.at) == (0, 1) and cm.ConnMachine.stats["across"] == 1
        cm.passive_end_disconnects(m, a)
    finally:
        m.teardown()


def test_replay_disconnects_crossing_between_the_hosts_and_a_peer_channel_closed(far):
    """A connection from lab-a to lab-b and both ends' DISCONNECT written at once (the DREQs
    cross on the link, or one is the other's DREP); then a second connection from lab-a whose
    channel is closed there: lab-b's end gets its DISCONNECTED; nothing is left on either host."""
    m = cm.ConnMachine()
    try:
        m.family("IPv4")
        m.handshake(3, 1, cm.PORTS[1])
        a = next(c for c in m.ids if c.role == "active")
        assert (a.at, a.peer.at) == (1, 0)
        m.disconnect_both(cm.Pinned(**{"connection": a, "active first": True}))
        m._settle()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(c.may for c in m.ids):
            m._read(a.ch, 0.2) or m._read(a.peer.ch, 0.2)
        m.kernel_agrees()
        m.handshake(2, 0, cm.PORTS[0])
        b = next(c for c in m.ids if c.role == "active" and c.ch == 2 and c.cm == "est")
        p = b.peer
        m.close_channel(2)
        assert b not in m.ids
        m._settle()
        assert p.state is cm.K.DISCONNECT
        m.kernel_agrees()
    finally:
        m.teardown()
