"""The network changing under live ids (#39 item 3): a neighbour's hardware address changes
while ids are routed to it; an RDMA device is deleted under the ids on it.  What each id must see on which kernel is data
(:data:`pyrdmacm.kernel_rules.NET_CHANGES`); here the lab's kernels are held to it.

The single topology's neighbour is the gateway 10.0.2.2 on eth0: ids resolved to it, routed to
it, connecting to it (its REQ goes unanswered), routed through it to a further address, and
routed to the host's own address.  The change is ``ip neigh replace`` with another hardware
address, once, then twice in one ``ip -batch`` (the two updates back to back: where the
2025 fix "RDMA/cma: Fix workqueue crash in cma_netevent_work_handler" is missing, the second
re-initialises work the first queued).  Every id must then be destroyed promptly (a work item
that holds an id forever makes DESTROY_ID wait), and the kernel log must stay clean.
"""

from __future__ import annotations

import errno
import os
import subprocess
import threading
import time
from typing import Dict, List, Tuple

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, kernel_rules
from pyrdmacm.abi import CmEventType as E

pytestmark = pytest.mark.kernel

GATEWAY, FAR, LOCAL = "10.0.2.2", "192.0.2.1", "10.0.2.15"


def _kernel() -> Tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int(minor)


def _ip(*commands: str) -> None:
    """``ip -batch -``: the commands in one process, their netlink messages back to back."""
    done = subprocess.run(["ip", "-batch", "-"], input="\n".join(commands) + "\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def _gateway_mac() -> str:
    words = subprocess.run(["ip", "neigh", "show", GATEWAY, "dev", "eth0"], capture_output=True, text=True).stdout.split()
    assert "lladdr" in words, "no neighbour entry for %s after resolving it: %s" % (GATEWAY, words)
    return words[words.index("lladdr") + 1]


def _events(ch: EventChannel, seconds: float) -> List[Tuple[int, E, int]]:
    out = []
    end = time.monotonic() + seconds
    while True:
        ev = ch.get_event(max(0.0, end - time.monotonic()))
        if ev is None:
            return out
        out.append((ev.id.uid, ev.event, ev.status))
        ev.ack()


def _next(ch: EventChannel, event: E) -> None:
    ev = ch.get_event(5)
    assert ev is not None and ev.event is event, (ev, event)
    ev.ack()


def _replace(mac: str) -> str:
    return "neigh replace %s lladdr %s dev eth0 nud permanent" % (GATEWAY, mac)


def test_a_neighbour_change_tells_the_ids_routed_to_it_and_no_other():
    from pyrdmacm.conformance import KernelLog

    log = KernelLog()
    rule = kernel_rules.net_change("neighbour", _kernel())
    with EventChannel() as ch:
        ids: Dict[str, CmId] = {}

        def make(name: str, dst: str, route: bool = True, connect: bool = False,
                 ps: PortSpace = PortSpace.TCP) -> None:
            cm = ids[name] = CmId(ch, ps=ps)
            cm.resolve_addr(dst, timeout_ms=3000)
            for step, event in ((None, E.ADDR_RESOLVED), (cm.resolve_route, E.ROUTE_RESOLVED))[: 1 + route]:
                if step:
                    step(3000)
                ev = ch.get_event(5)
                assert ev is not None and ev.event is event, (name, ev)
                ev.ack()
            if connect:
                cm.connect()

        make("resolved to it", GATEWAY, route=False)
        make("routed to it", GATEWAY)
        make("routed to it (UD)", GATEWAY, ps=PortSpace.UDP)
        make("connecting to it", GATEWAY, connect=True)
        make("routed through it", FAR)
        make("routed to itself", LOCAL)
        told = {ids[n].uid for n in ("routed to it", "routed to it (UD)", "connecting to it")}
        names = {cm.uid: n for n, cm in ids.items()}
        original = _gateway_mac()
        try:
            _ip(_replace("02:00:00:00:00:99"))
            once = _events(ch, 3)
            _ip(_replace("02:00:00:00:00:98"), _replace("02:00:00:00:00:97"))
            twice = _events(ch, 3)
        finally:
            _ip("neigh replace %s lladdr %s dev eth0 nud reachable" % (GATEWAY, original))
        print("%s: one change: %s; two at once: %s" % (_kernel(), [(names[u], e.name, s) for u, e, s in once],
                                                       [(names[u], e.name, s) for u, e, s in twice]))
        if rule is None:
            assert once == [] and twice == [], (once, twice)
        else:
            assert all((e, s) == (rule.event, rule.status) for _, e, s in once + twice), (once, twice)
            assert sorted(u for u, _, _ in once) == sorted(told), (once, names)
            per_id = {u: sum(1 for x, _, _ in twice if x == u) for u in told}
            # each update with an address the id does not hold queues the work; the second may
            # find it still queued (then one event), never more than one per update
            assert {u for u, _, _ in twice} <= told and all(1 <= n <= 2 for n in per_id.values()), (twice, names)
        # every id goes at once: a work item holding an id would make DESTROY_ID wait forever
        gone = threading.Event()

        def destroy() -> None:
            for cm in ids.values():
                cm.destroy()
            gone.set()

        threading.Thread(target=destroy, daemon=True).start()
        assert gone.wait(20), "DESTROY_ID hung after the neighbour changes"
    assert log.new_problems() == []


DUMMY, DUMMY_DEV, HERE, THERE = "rmtest0", "rxetest0", "10.99.0.1", "10.99.0.2"


def test_deleting_an_rdma_device_tells_the_ids_on_it_and_closes_them():
    """``rdma link delete`` of a device with live ids (a Soft-RoCE device on a veth of its own,
    so that rxe0 and the tests after this one are untouched): every id attached to
    it gets DEVICE_REMOVAL (status 0) and is closed -- its next command answers ENXIO, its
    destroy works -- while ids on no device hear nothing and go on (kernel_rules.NET_CHANGES);
    once the device is back, a new id resolves over it."""
    from pyrdmacm.conformance import KernelLog
    from pyrdmacm.errors import KernelError

    log = KernelLog()
    rule = kernel_rules.net_change("device", _kernel())
    assert rule is not None
    _ip("link add %s type veth peer name %s" % (DUMMY, DUMMY + "p"), "link set %s up" % (DUMMY + "p"),
        "link set %s up" % DUMMY, "addr add %s/24 dev %s" % (HERE, DUMMY),
        "neigh add %s lladdr 02:00:00:00:00:01 dev %s nud permanent" % (THERE, DUMMY))
    try:
        subprocess.run(["rdma", "link", "add", DUMMY_DEV, "type", "rxe", "netdev", DUMMY], check=True)
        with EventChannel() as ch:
            ids: Dict[str, CmId] = {n: CmId(ch, ps=PortSpace.UDP if "UD" in n else PortSpace.TCP) for n in (
                "idle", "bound to it", "bound to any", "listening on it", "listening on any", "resolved over it",
                "routed over it", "routed over it (UD)", "connecting over it")}
            ids["bound to it"].bind_addr(HERE)
            ids["bound to any"].bind_addr("0.0.0.0")
            ids["listening on it"].bind_addr(HERE)
            ids["listening on it"].listen()
            ids["listening on any"].listen()
            for n in ("resolved over it", "routed over it", "routed over it (UD)", "connecting over it"):
                ids[n].resolve_addr(THERE, src=HERE, timeout_ms=3000)
                _next(ch, E.ADDR_RESOLVED)
                if n != "resolved over it":
                    ids[n].resolve_route(3000)
                    _next(ch, E.ROUTE_RESOLVED)
            ids["connecting over it"].connect()
            on_it = {n for n in ids if "over it" in n or n.endswith("on it") or n == "bound to it"}
            names = {cm.uid: n for n, cm in ids.items()}
            subprocess.run(["rdma", "link", "delete", DUMMY_DEV], check=True)
            seen = _events(ch, 3)
            print("%s: %s" % (_kernel(), [(names[u], e.name, s) for u, e, s in seen]))
            assert sorted(names[u] for u, _, _ in seen) == sorted(on_it), seen
            assert all((e, s) == (rule.event, rule.status) for _, e, s in seen), seen
            for n in sorted(on_it):
                with pytest.raises(KernelError) as err:
                    ids[n].query_route()
                assert err.value.errno == errno.ENXIO and "was removed" in str(err.value), (n, err.value)
            assert ids["bound to any"].query_route().device is None
            subprocess.run(["rdma", "link", "add", DUMMY_DEV, "type", "rxe", "netdev", DUMMY], check=True)
            fresh = CmId(ch)
            fresh.resolve_addr(THERE, src=HERE, timeout_ms=3000)
            _next(ch, E.ADDR_RESOLVED)
            assert fresh.device is not None and fresh.device.name == DUMMY_DEV, fresh.device
            for cm in (*ids.values(), fresh):
                cm.destroy()
    finally:
        subprocess.run(["rdma", "link", "delete", DUMMY_DEV], capture_output=True)
        subprocess.run(["ip", "link", "del", DUMMY], capture_output=True)
    assert log.new_problems() == []

