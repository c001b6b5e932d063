"""Fixtures of the kernel tier (tests that run in the kernel lab, tests/labplugin.py)."""

from __future__ import annotations

import json
import os
from typing import Iterator

import pytest

from lab_peer import Peer, PeerAgent, PeerError


class _PeerSession:
    """A peer's agent, found once per session, and the last clean-up's report."""

    def __init__(self, which: int = 0) -> None:
        lab = os.environ.get("PYRDMACM_LAB", "")
        if lab.partition(":")[2] not in ("pair", "fabric"):
            raise PeerError(f"the peer fixtures need the kernel lab's pair or fabric topology "
                            f"(this is {lab or 'not the lab'}): mark the test "
                            f"@pytest.mark.kernel(topology='pair')")
        with open(os.environ["PYRDMACM_LAB_TOPOLOGY"]) as f:
            topology = json.load(f)
        peer = (topology.get("peers") or [topology["peer"]])[which]
        self.address = peer["ipv4"]
        log = os.path.join(os.environ.get("LAB_OUT", "."), peer.get("host", "peer"),
                           "output.log")
        self.agent = PeerAgent(self.address, hint=(
            f"\n(the agent's log is {log}; tests/labplugin.py starts it with tools/lab's "
            "--peer-command 'python tests/lab_peer.py serve')"))
        self.hello = self.agent.wait_until_up(timeout=60.0)
        self.killed: list[dict] = []


@pytest.fixture(scope="session")
def _peer_session() -> _PeerSession:
    return _PeerSession()


@pytest.fixture
def peer(_peer_session: _PeerSession) -> Iterator[Peer]:
    """The pair topology's peer lab-a (tests/lab_peer.py): ``peer.start(argv)`` runs a
    program there and returns a ``Proc`` (``wait``, ``output``, ``wait_for_line``, ``kill``);
    ``peer.address`` is its IPv4 address. After the test every program still running there
    is stopped (SIGTERM, then SIGKILL) and forgotten; ``peer.killed_before`` is what that
    clean-up killed after the previous test that used the fixture."""
    yield from _handle(_peer_session)


def _handle(session: _PeerSession) -> Iterator[Peer]:
    handle = Peer(session.address, session.agent)
    handle.host = session.hello["host"]
    handle.killed_before = session.killed
    yield handle
    session.killed = handle.cleanup()


@pytest.fixture(scope="session")
def _peer_sessions() -> list[_PeerSession]:
    with open(os.environ["PYRDMACM_LAB_TOPOLOGY"]) as f:
        count = len(json.load(f).get("peers") or [None])
    return [_PeerSession(i) for i in range(count)]


@pytest.fixture
def peers(_peer_sessions: list[_PeerSession]) -> Iterator[list[Peer]]:
    """Every peer of the topology (the fabric's lab-a, lab-b, lab-c), each as ``peer`` is."""
    gens = [_handle(s) for s in _peer_sessions]
    handles = [next(g) for g in gens]
    yield handles
    for g in gens:
        next(g, None)
