"""Rows of the state table checked against the real kernel (the lab's two-guest topology)."""

from __future__ import annotations

import errno
import json
import os

import pytest

from pyrdmacm import CmId, EventChannel, State, StateError
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.errors import KernelError

pytestmark = pytest.mark.kernel(topology="pair")


def _peer() -> str:
    with open(os.environ["PYRDMACM_LAB_TOPOLOGY"]) as f:
        return json.load(f)["peer"]["ipv4"]


def _routed(ch: EventChannel, dst: str) -> CmId:
    cm = CmId(ch)
    cm.resolve_addr(dst, timeout_ms=3000)
    ev = ch.get_event(10)
    assert ev is not None and ev.event is E.ADDR_RESOLVED, ev
    ev.ack()
    cm.resolve_route(3000)
    ev = ch.get_event(10)
    assert ev is not None and ev.event is E.ROUTE_RESOLVED, ev
    ev.ack()
    return cm


def test_a_rejected_connect_leaves_the_id_where_only_destroy_helps():
    """Nobody listens on the port: REJECTED 8. The table says FAILED (only destroy); the kernel
    agrees: its id stays in CONNECT, and a second CONNECT written anyway gets EINVAL."""
    with EventChannel() as ch:
        cm = _routed(ch, _peer() + ":7999")
        cm.connect(0x1ABC00)
        ev = ch.get_event(20)
        assert ev is not None and ev.event is E.REJECTED and ev.status == 8, ev
        ev.ack()
        assert cm.state is State.FAILED
        with pytest.raises(StateError, match="destroy"):
            cm.connect(0x1ABC01)
        # the kernel's own answer to the same call, bypassing the table
        cm._state = State.ROUTE_RESOLVED
        with pytest.raises(KernelError) as e:
            cm.connect(0x1ABC02)
        assert e.value.errno == errno.EINVAL
        assert cm.state is State.ROUTE_RESOLVED  # refused: the state put back as it was
        cm.destroy()
