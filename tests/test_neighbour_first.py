"""resolve --neighbour-first: the next hop solicited before RESOLVE_ADDR, only where the
pre-check says it needs resolving (the kernel's own answer is tested in the lab)."""

import dataclasses
import ipaddress

from pyrdmacm import precheck
from pyrdmacm.cli import resolve as cli
from pyrdmacm.netlink import NudState


def _pred(**kw):
    base = dict(dst=ipaddress.ip_address("127.0.0.1"), src_given=None, src=ipaddress.ip_address("127.0.0.1"),
                netdev="lo", ifindex=1, route_netdev="lo", route_ifindex=1, gateway=None, route_type=None,
                table=254, prefix=None, bound_ifindex=0, device_chosen_at="resolve", network="IB",
                next_hop=ipaddress.ip_address("127.0.0.1"), neighbour=NudState.NONE,
                needs_neighbour_resolution=True, candidates=(), ipoib=None, warnings=(), reasoning=())
    base.update(kw)
    return precheck.Prediction(**base)


class Network:
    """The neighbour's states as netlink would report them, one per look."""

    def __init__(self, *states):
        self.states, self.looks = list(states), []

    def neighbour(self, ifindex, addr):
        self.looks.append((ifindex, addr))
        return self.states.pop(0) if len(self.states) > 1 else self.states[0]


def test_the_next_hop_is_solicited_until_its_entry_is_valid():
    net = Network(NudState.NONE, NudState.INCOMPLETE, NudState.INCOMPLETE, NudState.REACHABLE)
    state, ms = precheck.solicit_neighbour(_pred(), timeout=2.0, network=net)
    assert state is NudState.REACHABLE and len(net.looks) == 4 and ms < 2000
    assert net.looks[0] == (1, ipaddress.ip_address("127.0.0.1"))


def test_a_failed_or_silent_next_hop_ends_the_wait():
    state, _ = precheck.solicit_neighbour(_pred(), timeout=2.0, network=Network(NudState.INCOMPLETE, NudState.FAILED))
    assert state is NudState.FAILED
    state, ms = precheck.solicit_neighbour(_pred(), timeout=0.05, network=Network(NudState.INCOMPLETE))
    assert state is NudState.INCOMPLETE and ms >= 50


def test_only_a_next_hop_that_needs_resolving_is_solicited(monkeypatch):
    called = []
    monkeypatch.setattr(precheck, "solicit_neighbour", lambda p, t: called.append(t) or (NudState.REACHABLE, 3.0))
    assert cli._neighbour_first(None, 2000)["done"] is False  # no pre-check: no next hop known
    valid = _pred(neighbour=NudState.REACHABLE, needs_neighbour_resolution=False)
    out = cli._neighbour_first(valid, 2000)
    assert out["done"] is False and "REACHABLE" in out["why"] and not called
    out = cli._neighbour_first(_pred(), 2000)
    assert out == {"done": True, "next_hop": "127.0.0.1", "state": "REACHABLE", "ms": 3.0} and called == [2.0]
    assert cli._neighbour_first_line(out) == "neighbour first: 127.0.0.1 is REACHABLE after 3.0 ms"
