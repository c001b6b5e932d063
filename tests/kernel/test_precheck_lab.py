"""predict() on the lab's multihomed host, devices from the real RDMA netlink, checked against the kernel.

Run: tools/lab run --kernel bookworm --topology multihomed -- \
         python3 -m pytest -p no:cacheprovider tests/kernel/test_precheck_lab.py

Topology (from $PYRDMACM_LAB_TOPOLOGY): eth0 10.0.2.15/24 rxe0 + default route, eth1
10.1.0.0/24 rxe1, eth2 10.2.0.0/24 rxe2, eth3 and eth4 both on 10.3.0.0/24 (rxe3, rxe4),
eth5 10.5.0.0/24 without RDMA device; each subnet's gateway .2 answers ARP.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
from typing import Any, Dict, List, Optional, Tuple

import pytest

from pyrdmacm.errors import PrecheckError
from pyrdmacm.precheck import Prediction, explain, predict

#: the routing tables are read through rtnetlink, whose answers here have not changed from
#: 5.10 to 7.x: the predictions are checked on the lab's oldest and newest kernels
pytestmark = pytest.mark.kernel(topology="multihomed", suites=("bullseye", "sid"))


@pytest.fixture(scope="module")
def topo() -> Dict[str, Any]:
    path = os.environ.get("PYRDMACM_LAB_TOPOLOGY")
    if not path or not os.path.exists(path):
        pytest.skip("needs the kernel lab (tools/lab run --topology multihomed ...): "
                    "PYRDMACM_LAB_TOPOLOGY is not set")
    with open(path) as f:
        t: Dict[str, Any] = json.load(f)
    if t.get("topology") != "multihomed":
        pytest.skip("needs the multihomed topology, this lab runs %r" % t.get("topology"))
    return t


def _nics(topo: Dict[str, Any]) -> List[Tuple[str, Dict[str, Any]]]:
    return [(n, nd) for n, nd in sorted(topo["netdevs"].items()) if not nd.get("netns") and nd.get("gateway")]


def _addr(nd: Dict[str, Any]) -> str:
    return str(nd["ipv4"].split("/")[0])


def test_each_nic_resolves_to_its_rxe(topo: Dict[str, Any]) -> None:
    seen = 0
    for name, nd in _nics(topo):
        if not nd.get("rxe"):
            continue
        same_subnet = [n for n, o in _nics(topo) if o["subnet"] == nd["subnet"] and n != name and o.get("rxe")]
        # the FIB picks one of two NICs on a shared subnet: name the other one by its source
        src = _addr(nd) if same_subnet and name > min(same_subnet) else None
        p = predict(nd["gateway"], src)
        assert (p.netdev, p.device, p.port) == (name, nd["rxe"], 1), p
        assert p.gateway is None and p.src == ipaddress.ip_address(_addr(nd))
        ch = p.chosen
        assert ch is not None and ch.device_index is not None  # the index came from RDMA netlink
        assert str(ch.gid_type) == "RoCE v2" and ch.gid == ipaddress.IPv6Address("::ffff:" + _addr(nd))
        seen += 1
    assert seen >= 5


def test_nic_without_rdma_is_enodev(topo: Dict[str, Any]) -> None:
    (name, nd), = [(n, nd) for n, nd in _nics(topo) if not nd.get("rxe")]
    with pytest.raises(PrecheckError) as ei:
        predict(nd["gateway"])
    assert ei.value.errno == errno.ENODEV and name in str(ei.value)
    for other, o in _nics(topo):
        if o.get("rxe"):
            assert other in str(ei.value)


def test_same_subnet_pair_warns(topo: Dict[str, Any]) -> None:
    by_subnet: Dict[str, List[str]] = {}
    for n, nd in _nics(topo):
        if nd.get("rxe"):
            by_subnet.setdefault(nd["subnet"], []).append(n)
    ((subnet, pair),) = [(s, ns) for s, ns in by_subnet.items() if len(ns) > 1]
    gw = topo["netdevs"][pair[0]]["gateway"]
    p = predict(gw)
    (w,) = [w for w in p.warnings if "subnet" in w]
    assert all(n in w for n in pair)
    with pytest.raises(PrecheckError) as ei:
        predict(gw, strict=True)
    assert ei.value.errno == errno.ENOTUNIQ


def test_default_route_goes_through_eth0(topo: Dict[str, Any]) -> None:
    (name, nd), = [(n, nd) for n, nd in _nics(topo) if nd.get("default_route")]
    p = predict("192.0.2.1")
    assert (p.netdev, p.device, str(p.gateway), p.network) == (name, nd["rxe"], nd["gateway"], "IPv4")


# --------------------------------------------------------------------------------------
# the real kernel, where pyrdmacm's CM layer is available: the prediction must agree


class _Result:
    def __init__(self, cm_id: Any) -> None:
        info = cm_id.query_addr()
        self.src_addr = info.src
        self.device_name = info.device.name if info.device else None
        self.device_index = info.device.index if info.device else None
        self.port_num = info.port_num
        try:
            self.sgid: Optional[Any] = cm_id.sgid
        except Exception:
            self.sgid = None


def _kernel(dst: str, src: Optional[str], timeout_ms: int = 1000) -> Tuple[int, Any]:
    """(0, result) or (errno, None) from a real resolve_addr."""
    from pyrdmacm import CmId

    cm_id = CmId(None)
    try:
        cm_id.resolve_addr(dst, src=src, timeout_ms=timeout_ms)
        return 0, _Result(cm_id)
    except OSError as e:
        return e.errno or -1, None
    finally:
        cm_id.destroy()


def _cases(topo: Dict[str, Any]) -> List[Tuple[str, Optional[str]]]:
    cases: List[Tuple[str, Optional[str]]] = []
    for _, nd in _nics(topo):
        cases.append((nd["gateway"], None))
        cases.append((nd["gateway"], _addr(nd)))
    cases += [
        ("192.0.2.1", None),  # via the default route
        ("10.0.2.15", None),  # a local address: the route goes through lo
        ("10.2.0.15", "10.1.0.15"),  # local address, source bound to another NIC
        ("127.0.0.1", None),
        ("198.51.100.1", "10.1.0.15"),  # off-link, source on eth1: oif=eth1 makes it on-link there
    ]
    return cases


def test_predictions_agree_with_the_kernel(topo: Dict[str, Any]) -> None:
    disagreements = []
    for dst, src in _cases(topo):
        try:
            pred: Optional[Prediction] = predict(dst, src)
            want = 0
        except PrecheckError as e:
            pred, want = None, e.errno
        got, result = _kernel(dst, src)
        if pred is not None and pred.needs_neighbour_resolution and got == errno.ETIMEDOUT:
            # predicted: ARP must answer first; the kernel's timeout says it did not (who
            # answers is outside the prediction) -- the netdev/device choice still counts
            continue
        if got != want:
            disagreements.append("%s from %s: predicted %s, kernel %s" % (
                dst, src, errno.errorcode.get(want, want) if want else "success",
                errno.errorcode.get(got, got) if got else "success"))
            continue
        if pred is not None and result is not None:
            for m in explain(pred, result):
                disagreements.append("%s from %s: %s" % (dst, src, m))
    assert not disagreements, "\n".join(disagreements)


def test_bound_source_on_another_nic_arps_there(topo: Dict[str, Any]) -> None:
    """With a source on eth1, the lookup is restricted to eth1 (bound_dev_if): an off-link
    destination is ARPed on eth1 instead of going through eth0's gateway."""
    eth1 = topo["netdevs"].get("eth1")
    if not eth1:
        pytest.skip("no eth1 in this topology")
    p = predict("198.51.100.1", _addr(eth1))
    assert (p.netdev, p.gateway, p.next_hop) == ("eth1", None, ipaddress.ip_address("198.51.100.1"))
    got, _ = _kernel("198.51.100.1", _addr(eth1), timeout_ms=500)
    assert got == errno.ETIMEDOUT  # nobody answers ARP for 198.51.100.1 on eth1
