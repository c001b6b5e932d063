"""A VRF in the lab's multihomed host: the pre-check's prediction against the kernel's choice.

The test adds, and removes again, a VRF ``vrf-blue`` (table 10) with one member
``vrf0`` (10.7.0.15/24, a veth whose peer 10.7.0.2 lives in a namespace of
its own and answers ARP) and a Soft-RoCE device ``rxe_vrf`` on it.  Table 10
has a default route via 10.7.0.2; the main table knows nothing of 10.7.0.0/24
(its default route goes through eth0).  rdma_cm routes with the id's bound
netdev as oif (``addr4_resolve``), so a source in the VRF sends the lookup to
table 10 and no source leaves it in the main table; predict() asks the kernel's
FIB the same question, and each prediction must match what resolve_addr did.
"""

from __future__ import annotations

import errno
import ipaddress
import subprocess
from typing import Any, Iterator, Optional, Tuple

import pytest

from test_precheck_lab import _kernel as _kernel_of_lab

from pyrdmacm.errors import PrecheckError
from pyrdmacm.precheck import explain, predict

pytestmark = pytest.mark.kernel(topology="multihomed", suites=("bullseye", "sid"))  # as test_precheck_lab

PEER_NS = "vrfpeer"


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True)


@pytest.fixture
def vrf() -> Iterator[None]:
    r = _run("ip", "link", "add", "vrf-blue", "type", "vrf", "table", "10", check=False)
    if r.returncode:
        pytest.fail("this kernel cannot make a VRF (is the vrf module in the lab's module list?): "
                    + r.stderr.strip())
    try:
        _run("ip", "link", "set", "vrf-blue", "up")
        _run("ip", "netns", "add", PEER_NS)
        _run("ip", "link", "add", "vrf0", "type", "veth", "peer", "name", "vrf0p", "netns", PEER_NS)
        _run("ip", "link", "set", "vrf0", "master", "vrf-blue")
        _run("ip", "addr", "add", "10.7.0.15/24", "dev", "vrf0")
        _run("ip", "link", "set", "vrf0", "up")
        _run("ip", "-n", PEER_NS, "addr", "add", "10.7.0.2/24", "dev", "vrf0p")
        _run("ip", "-n", PEER_NS, "link", "set", "vrf0p", "up")
        _run("ip", "-n", PEER_NS, "link", "set", "lo", "up")
        _run("ip", "route", "add", "default", "via", "10.7.0.2", "vrf", "vrf-blue")
        _run("rdma", "link", "add", "rxe_vrf", "type", "rxe", "netdev", "vrf0")
        yield
    finally:
        _run("rdma", "link", "delete", "rxe_vrf", check=False)
        _run("ip", "link", "del", "vrf0", check=False)
        _run("ip", "link", "del", "vrf-blue", check=False)
        _run("ip", "netns", "del", PEER_NS, check=False)


def _kernel(dst: str, src: Optional[str]) -> Tuple[int, Any]:
    return _kernel_of_lab(dst, src, timeout_ms=1500)


def test_vrf_predictions_agree_with_the_kernel(vrf: None) -> None:
    ip = ipaddress.ip_address
    cases = {
        # no source: the main table, whose default route leaves through eth0 (rxe0)
        ("10.7.0.2", None): ("eth0", "rxe0", ip("10.0.2.2")),
        # a source in the VRF binds the id to vrf0: table 10, on-link, rxe_vrf
        ("10.7.0.2", "10.7.0.15"): ("vrf0", "rxe_vrf", None),
        # off-link from inside the VRF: table 10's default route, its gateway is ARPed
        ("198.51.100.9", "10.7.0.15"): ("vrf0", "rxe_vrf", ip("10.7.0.2")),
        # the VRF's own address is not local to the main table: eth0's default route again
        ("10.7.0.15", None): ("eth0", "rxe0", ip("10.0.2.2")),
    }
    problems = []
    for (dst, src), (netdev, device, gateway) in cases.items():
        try:
            p = predict(dst, src)
        except PrecheckError as e:
            problems.append("%s from %s: pre-check refused: %s" % (dst, src, e))
            continue
        if (p.netdev, p.device, p.gateway) != (netdev, device, gateway):
            problems.append("%s from %s: predicted %s/%s via %s, expected %s/%s via %s" % (
                dst, src, p.netdev, p.device, p.gateway, netdev, device, gateway))
        if src is not None and p.table != 10:
            problems.append("%s from %s: predicted table %s, not the VRF's 10" % (dst, src, p.table))
        got, result = _kernel(dst, src)
        if got:
            problems.append("%s from %s: kernel %s" % (dst, src, errno.errorcode.get(got, got)))
            continue
        problems += ["%s from %s: %s" % (dst, src, m) for m in explain(p, result)]
        assert result.device_name == device
    assert not problems, "\n".join(problems)
