"""The next hop's neighbour entry: whether the resolution must wait for ARP/ND
(:func:`check_neighbour`, a step of the prediction), and :func:`solicit_neighbour`, which has
the kernel resolve it before RESOLVE_ADDR asks."""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING, Any, Optional, Tuple

from .model import Checks, IPAddress, Prediction

if TYPE_CHECKING:  # pragma: no cover
    from ..netlink import Link, NudState, Route

__all__ = ["check_neighbour", "solicit_neighbour"]


def check_neighbour(ck: Checks, network: Any, route: "Route", route_link: "Link", eff: "Link", dst_p: IPAddress,
                    routed: bool) -> None:
    """Whose link-layer address the resolution needs, and whether the neighbour table has it."""
    next_hop: Optional[IPAddress] = None
    nud = None
    needs = False
    if route_link.is_loopback:
        ck.say("no ARP/ND: loopback")
    elif route_link.noarp:
        ck.say("no ARP/ND: %s is NOARP" % route_link.name)
    else:
        next_hop = route.gateway if route.gateway is not None else dst_p
        if route.gateway is not None and not routed:
            ck.say("InfiniBand with a gateway: the kernel asks ibacm (RDMA netlink, LS group) for the "
                   "gateway's path")
            ck.warn("InfiniBand route through gateway %s: without an ibacm daemon listening the kernel "
                    "answers EADDRNOTAVAIL" % route.gateway, _errno.EADDRNOTAVAIL)
            needs = True
        else:
            nud = network.neighbour(route_link.index, next_hop)
            needs = not nud.valid
            ck.say("next hop %s on %s: neighbour %s%s" % (
                next_hop, route_link.name, nud,
                "" if not needs else " -> the kernel sends ARP/ND and waits up to the resolution's timeout "
                "(no answer: ADDR_ERROR -110 ETIMEDOUT)"))
            if nud.name == "FAILED":
                ck.warn("the last ARP/ND for %s on %s failed: expect ETIMEDOUT" % (next_hop, route_link.name),
                        _errno.ETIMEDOUT)
        if not eff.is_up or eff.operstate == "DOWN":
            ck.warn("%s is down (%s)" % (eff.name, eff.operstate), _errno.ENETDOWN)
    ck.known.update(next_hop=next_hop, neighbour=nud, needs_neighbour_resolution=needs)


#: how often solicit_neighbour looks at the neighbour's state (seconds)
_NEIGHBOUR_POLL = 0.002


def solicit_neighbour(prediction: Prediction, timeout: float, network: Any = None) -> Tuple[Optional["NudState"], float]:
    """Have the kernel resolve the prediction's next hop (ARP/ND) before RESOLVE_ADDR asks:
    one empty UDP datagram to the destination's discard port (9) makes the kernel solicit
    the next hop; then its state is read until it is valid, FAILED, or ``timeout`` seconds
    have passed.  Returns (the last state seen, milliseconds taken).

    Why: a cold resolve's RESOLVE_ADDR often waits to its timeout, because the neighbour's
    answer can come before the request is queued, and the queued request then retries only at
    its deadline (addr.c).  A neighbour already valid is used at once."""
    import socket
    import time

    if network is None:
        from .. import netlink as network
    hop, ifindex = prediction.next_hop, prediction.route_ifindex or prediction.ifindex
    if hop is None or ifindex is None:
        return prediction.neighbour, 0.0
    start = time.monotonic()
    family = socket.AF_INET if prediction.dst.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            if prediction.src is not None:
                s.bind((str(prediction.src), 0))
            s.sendto(b"", (str(prediction.dst), 9))
        except OSError:
            pass  # the state read below says what became of the neighbour
    state = network.neighbour(ifindex, hop)
    while not state.valid and state != state.FAILED and time.monotonic() - start < timeout:
        time.sleep(_NEIGHBOUR_POLL)
        state = network.neighbour(ifindex, hop)
    return state, (time.monotonic() - start) * 1000
