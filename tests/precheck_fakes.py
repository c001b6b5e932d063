"""A fake routing view (:class:`FakeNetwork`, answering as pyrdmacm.netlink does from tables
a test gives; :func:`_net`, a host with RoCE, VLAN, IPoIB and iWARP netdevs) and the fake
devices of a fake sysfs tree (the ``devs`` fixture): for the precheck tests that need no root
(tests/test_precheck_fake_routes.py, tests/test_cli_inputs.py).
"""


from __future__ import annotations

import ipaddress
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

from pyrdmacm import devices as D

sys.path.insert(0, os.path.dirname(__file__))
from test_devices import IB_HWADDR, build_two_devices  # noqa: E402


class FakeNetwork:
    """Answers like pyrdmacm.netlink from tables given by the test."""

    def __init__(self, links: List[Any], addrs: Dict[int, Tuple[Any, ...]], routes: Dict[str, Any],
                 neigh: Optional[Dict[str, str]] = None) -> None:
        self._links, self._addrs, self._routes, self._neigh = links, addrs, routes, neigh or {}
        self.lookups: List[Tuple[str, Optional[str], Optional[int]]] = []

    def links(self) -> List[Any]:
        return self._links

    def addresses(self) -> Dict[int, Tuple[Any, ...]]:
        return self._addrs

    def route_get(self, dst: Any, src: Any = None, oif: Optional[int] = None) -> Any:
        self.lookups.append((str(dst), None if src is None else str(src), oif))
        return self._routes[str(dst)]

    def neighbour(self, ifindex: int, addr: Any) -> Any:
        from pyrdmacm.netlink import NudState

        return NudState[self._neigh.get(str(addr), "REACHABLE")]


def _net(extra_routes: Optional[Dict[str, Any]] = None) -> FakeNetwork:
    from pyrdmacm import netlink as N

    ip = ipaddress.ip_address
    links = [
        N.Link(1, "lo", N.ARPHRD_LOOPBACK, 0x49, "UNKNOWN", bytes(6)),
        N.Link(2, "eth0", N.ARPHRD_ETHER, 0x1003, "UP", bytes.fromhex("525400123456")),
        N.Link(3, "eth0.100", N.ARPHRD_ETHER, 0x1003, "UP", bytes.fromhex("525400123456")),
        N.Link(4, "ib0", N.ARPHRD_INFINIBAND, 0x1003, "UP", bytes.fromhex(IB_HWADDR.replace(":", ""))),
        N.Link(5, "iw0", N.ARPHRD_ETHER, 0x1003, "UP", bytes(6)),
    ]

    def a(idx: int, text: str) -> Any:
        return N.IfAddress(idx, ipaddress.ip_interface(text), 0, 0x80)

    addrs = {1: (a(1, "127.0.0.1/8"),), 2: (a(2, "10.0.2.15/24"), a(2, "2001:db8::15/64")),
             3: (a(3, "10.100.0.15/24"),), 4: (a(4, "10.10.0.15/24"),), 5: (a(5, "10.20.0.15/24"),)}

    def r(dst: str, dev: int, src: str, gw: Optional[str] = None, prefix: str = "") -> Any:
        return N.Route(dst=ip(dst), src=None, oif=None, errno=0, type=N.RouteType.UNICAST, ifindex=dev,
                       ifname=links[dev - 1].name, gateway=ip(gw) if gw else None, prefsrc=ip(src), table=254,
                       prefix=ipaddress.ip_network(prefix) if prefix else None)

    routes = {
        "10.0.2.2": r("10.0.2.2", 2, "10.0.2.15", prefix="10.0.2.0/24"),
        "10.100.0.2": r("10.100.0.2", 3, "10.100.0.15", prefix="10.100.0.0/24"),
        "10.10.0.2": r("10.10.0.2", 4, "10.10.0.15", prefix="10.10.0.0/24"),
        "10.11.0.2": r("10.11.0.2", 4, "10.10.0.15", gw="10.10.0.1", prefix="10.11.0.0/24"),
        "10.20.0.2": r("10.20.0.2", 5, "10.20.0.15", prefix="10.20.0.0/24"),
        "192.0.2.1": r("192.0.2.1", 2, "10.0.2.15", gw="10.0.2.2", prefix="0.0.0.0/0"),
    }
    routes.update(extra_routes or {})
    return FakeNetwork(links, addrs, routes)


@pytest.fixture
def devs(tmp_path: Path) -> List[D.Device]:
    fs = build_two_devices(tmp_path)
    fs.device("iwp0", node_guid="0007:4301:0000:0001", node_type="4: RNIC")
    fs.port("iwp0", 1, gids=[("fe80::1", "IB/RoCE v1", "iw0")], table_size=1)
    order = {"rxe0": 0, "mlx5_0": 1, "iwp0": 2}
    listed = D.list_devices(sysfs_root=str(tmp_path), use_netlink=False)
    return sorted((replace(d, index=order[d.name]) for d in listed), key=lambda d: d.index or 0)
