"""precheck.predict() and explain() on a fake routing view and fake devices (no root needed):
which GID a RoCE source gets, IPoIB, iWARP, gateways on InfiniBand, RoCE v1-only ports, no
devices at all.  The same against real kernel routing is tests/test_precheck_netns.py.
"""


from __future__ import annotations

import errno
import ipaddress
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, List, Optional

import pytest

from pyrdmacm import devices as D
from pyrdmacm.errors import PrecheckError
from pyrdmacm.precheck import explain, predict

sys.path.insert(0, os.path.dirname(__file__))
from test_devices import IB_GID, FakeSysfs  # noqa: E402

from precheck_fakes import _net
from precheck_fakes import devs  # noqa: F401  (a fixture)


def test_roce_picks_the_v2_gid_of_the_source_on_that_netdev(devs: List[D.Device]) -> None:
    net = _net()
    p = predict(ipaddress.ip_address("10.100.0.2"), devices=devs, network=net)
    assert net.lookups == [("10.100.0.2", None, None)]
    assert (p.netdev, p.device, p.port, p.chosen.gid_index, str(p.chosen.gid_type)) == (  # type: ignore[union-attr]
        "eth0.100", "rxe0", 1, 7, "RoCE v2")
    assert [(c.gid_index, c.default) for c in p.candidates] == [(7, True), (6, False)]
    assert p.sgid == ipaddress.IPv6Address("::ffff:10.100.0.15")
    assert p.device_chosen_at == "resolve" and p.warnings == ()
    assert "route: 10.100.0.0/24 dev eth0.100 src 10.100.0.15 (table main)" in p.reasoning
    assert str(p).startswith("lookup: ip route get 10.100.0.2")


def test_node_guid_zero_device_is_still_predicted_by_index(devs: List[D.Device]) -> None:
    p = predict("10.0.2.2", devices=devs, network=_net())
    assert p.chosen is not None and (p.device, p.chosen.device_index) == ("rxe0", 0)
    assert D.find_device(index=p.chosen.device_index, node_guid=0, devices=devs).name == "rxe0"  # type: ignore[union-attr]


def test_infiniband_ipoib(devs: List[D.Device]) -> None:
    p = predict("10.10.0.2", devices=devs, network=_net())
    assert (p.netdev, p.device, p.chosen.gid_index, p.chosen.gid_type) == ("ib0", "mlx5_0", 0, D.GidType.IB)  # type: ignore[union-attr]
    assert p.sgid == ipaddress.IPv6Address(IB_GID) and p.network == "IB"
    assert p.ipoib is not None and p.ipoib.device == "mlx5_0" and p.ipoib.port_state is D.PortState.DOWN
    assert p.ipoib.addresses == ("10.10.0.15/24",)
    assert any("not ACTIVE" in w for w in p.warnings)
    with pytest.raises(PrecheckError) as ei:
        predict("10.10.0.2", devices=devs, network=_net(), strict=True)
    assert ei.value.errno == errno.ENETDOWN and ei.value.prediction.device == "mlx5_0"


def test_infiniband_gateway_needs_ibacm(devs: List[D.Device]) -> None:
    p = predict("10.11.0.2", devices=devs, network=_net())
    assert p.network == "IB" and p.needs_neighbour_resolution and p.neighbour is None
    assert any("ibacm" in w for w in p.warnings)


def test_iwarp_uses_gid0_of_the_netdev(devs: List[D.Device]) -> None:
    p = predict("10.20.0.2", devices=devs, network=_net())
    assert (p.device, p.chosen.gid_index) == ("iwp0", 0)  # type: ignore[union-attr]


def test_routed_roce_v1_only_port_warns(tmp_path: Path) -> None:
    fs = FakeSysfs(tmp_path)
    fs.device("roce1")
    fs.port("roce1", 1, gids=[("fe80::5054:ff:fe12:3456", "IB/RoCE v1", "eth0"),
                              ("::ffff:10.0.2.15", "IB/RoCE v1", "eth0")])
    devs = D.list_devices(sysfs_root=str(tmp_path), use_netlink=False)
    p = predict("192.0.2.1", devices=devs, network=_net())
    assert p.network == "IPv4" and p.chosen.gid_type is D.GidType.ROCE_V1  # type: ignore[union-attr]
    assert any("do not route" in w for w in p.warnings)


def test_no_devices_at_all_and_unknown_gid_tables(devs: List[D.Device]) -> None:
    with pytest.raises(PrecheckError) as ei:
        predict("10.0.2.2", devices=[], network=_net())
    assert ei.value.errno == errno.ENODEV and "no RDMA device is visible" in str(ei.value)
    # netlink-only view (no sysfs): no GIDs, but the port's netdev is known
    bare = [replace(d, ports=tuple(replace(p, gids=()) for p in d.ports)) for d in devs]
    p = predict("10.0.2.2", devices=bare, network=_net())
    assert p.device == "rxe0" and p.chosen.gid is None  # type: ignore[union-attr]


def test_explain(devs: List[D.Device]) -> None:
    p = predict("10.0.2.2", devices=devs, network=_net())

    @dataclass
    class Result:
        src_addr: Any = None
        device_name: Optional[str] = None
        device_index: Optional[int] = None
        port_num: Optional[int] = None
        sgid: Any = None

    assert explain(p, Result()) == []
    agree = Result((ipaddress.ip_address("10.0.2.15"), 4791), "rxe0", 0, 1,
                   ipaddress.IPv6Address("::ffff:10.0.2.15").packed)
    assert explain(p, agree) == []
    assert explain(p, Result(src_addr="10.0.2.15", sgid="::ffff:10.0.2.15", device_index=-1)) == []
    bad = explain(p, Result("10.0.2.99", "mlx5_0", 1, 2, "fe80::1"))
    assert len(bad) == 5
    assert bad[0] == "source address: predicted 10.0.2.15, the kernel chose 10.0.2.99"
    assert "device: predicted rxe0, the kernel chose mlx5_0" in bad
    assert any(m.startswith("source GID: predicted ::ffff:10.0.2.15 (index 3, RoCE v2)") for m in bad)
    assert explain(p, object()) == []
