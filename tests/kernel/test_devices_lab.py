"""RDMA devices through the real RDMA netlink and sysfs of a kernel with Soft-RoCE (the lab).

Run: tools/lab run --kernel bookworm -- python3 -m pytest -p no:cacheprovider tests/kernel/test_devices_lab.py
(default topology "single": rxe0 on eth0, 10.0.2.15/24).
"""

from __future__ import annotations

import errno
import json
import os
from typing import Any, Dict

import pytest

from pyrdmacm import devices as D

pytestmark = pytest.mark.kernel


def _topology() -> Dict[str, Any]:
    path = os.environ.get("PYRDMACM_LAB_TOPOLOGY")
    if not path or not os.path.exists(path):
        pytest.skip("needs the kernel lab (tools/lab run ...): PYRDMACM_LAB_TOPOLOGY is not set")
    with open(path) as f:
        topo: Dict[str, Any] = json.load(f)
    return topo


@pytest.fixture(scope="module")
def topo() -> Dict[str, Any]:
    return _topology()


def _facts(d: D.Device) -> Any:
    return (d.name, d.node_guid, d.node_type, tuple(
        (p.number, p.state, p.phys_state, p.link_layer, p.netdev, p.gids) for p in d.ports))


def test_netlink_and_sysfs_agree(topo: Dict[str, Any]) -> None:
    via_netlink = D.list_devices()
    via_sysfs = D.list_devices(use_netlink=False)
    assert via_netlink, "no RDMA device in the lab"
    assert all(d.index is not None and d.source == "netlink+sysfs" for d in via_netlink)
    assert all(d.index is None and d.source == "sysfs" for d in via_sysfs)
    assert sorted(map(_facts, via_netlink)) == sorted(map(_facts, via_sysfs))
    # every rxe the lab made is there, on its netdev, with the netdev's IPv4 address as a v2 GID
    for netdev, nd in topo["netdevs"].items():
        if not nd.get("rxe") or nd.get("netns"):
            continue
        dev = next(d for d in via_netlink if d.name == nd["rxe"])
        assert dev.protocol == "roce" and dev.ports[0].netdev == netdev
        assert dev.ports[0].netdev_index is not None
        ip = nd["ipv4"].split("/")[0]
        assert any(str(g.ip) == ip and g.type is D.GidType.ROCE_V2 and g.netdev == netdev
                   for g in dev.ports[0].gids)
        assert D.find_device(index=dev.index, node_guid=dev.node_guid, devices=via_netlink) is dev
        assert netdev in D.rdma_netdevs(devices=via_netlink)


def test_get_chardev_is_the_rdma_cm_node(topo: Dict[str, Any]) -> None:
    from pyrdmacm import netlink

    info = netlink.get_chardev()
    assert info.abi == 4 and info.name == "rdma_cm"
    st = os.stat("/dev/infiniband/rdma_cm")
    assert info.dev == (os.major(st.st_rdev), os.minor(st.st_rdev))
    with pytest.raises(Exception) as ei:
        netlink.get_chardev("no-such-chardev")
    assert getattr(ei.value, "errno", None) in (errno.EOPNOTSUPP, errno.ENOENT, errno.EINVAL)


def test_sys_netns_mode_and_ports(topo: Dict[str, Any]) -> None:
    from pyrdmacm import netlink

    assert netlink.sys_netns_mode() == "shared"
    ports = netlink.ports()
    names = {nd["rxe"]: n for n, nd in topo["netdevs"].items() if nd.get("rxe") and not nd.get("netns")}
    for p in ports:
        if p.dev_name in names:
            assert p.netdev == names[p.dev_name] and p.state == 4  # ACTIVE


def test_cm_ids_count_a_resolved_id(topo: Dict[str, Any]) -> None:
    from pyrdmacm import netlink

    from pyrdmacm import CmId

    before = [i for i in netlink.cm_ids() if i.pid == os.getpid()]
    gw = next(nd["gateway"] for nd in topo["netdevs"].values() if nd.get("rxe") and nd.get("gateway"))
    cm_id = CmId(None)
    try:
        cm_id.resolve_addr(gw, timeout_ms=2000)
        mine = [i for i in netlink.cm_ids() if i.pid == os.getpid()]
        assert len(mine) == len(before) + 1
        (new,) = [i for i in mine if i not in before]
        assert new.ps_name == "TCP" and str(new.state) == "ADDR_RESOLVED"
        assert new.dst is not None and str(new.dst[0]) == gw
    finally:
        cm_id.destroy()
    assert [i for i in netlink.cm_ids() if i.pid == os.getpid()] == before


def test_links_and_addresses_read_what_pyroute2_reads(topo: Dict[str, Any]) -> None:
    """pyrdmacm reads the netdevs and addresses on netlink's wire format itself (no
    pyroute2 before a run's first command): the same as pyroute2 reads, on a real kernel
    with Soft-RoCE's netdevs and IPv6."""
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from test_devices import netlink_reads_as_pyroute2_does

    n_links, n_addrs = netlink_reads_as_pyroute2_does()
    assert n_links >= 2 and n_addrs >= 3, (n_links, n_addrs)  # lo and eth0, IPv4 and IPv6
