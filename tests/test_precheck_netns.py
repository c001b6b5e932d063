"""precheck.predict() against real kernel routing in network namespaces, and its device mapping.

The ``netns`` tests build a small multihomed host in a fresh namespace "A" (veth
pairs to a namespace "B" that plays the gateways), run predict() *inside* A
(``ip netns exec A python3 -c ...``: the prediction must hold in the caller's
namespace), and compare netdev, gateway and source with ``ip -j route get`` in
A for the same lookup inputs the kernel uses.  RDMA devices come from a fake
sysfs tree.  The other tests are pure: a fake routing view and fake devices.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple

import pytest

from pyrdmacm import devices as D
from pyrdmacm.errors import UsageError
from pyrdmacm.precheck import predict

sys.path.insert(0, os.path.dirname(__file__))
from test_devices import FakeSysfs, roce_gids  # noqa: E402
from precheck_fakes import _net, devs  # noqa: E402,F401  (devs: a fixture)

REPO = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------------------
# namespaces


def _run(*cmd: str, check: bool = True, input: Optional[str] = None) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, input=input)


@dataclass
class Lab:
    a: str  # the host under test
    b: str  # its neighbours (gateways .2)
    sysfs: Path
    ll: Dict[str, str]  # netdev of A -> its fe80:: address
    peer_ll: Dict[str, str]  # netdev of A -> the fe80:: address of its peer in B
    ifindex: Dict[str, int]

    def ip_json(self, *args: str) -> Any:
        r = _run("ip", "-n", self.a, "-j", *args, check=False)
        if r.returncode:
            return r.stderr.strip()
        return json.loads(r.stdout)

    def route_get(self, dst: str, src: Optional[str] = None, oif: Optional[str] = None) -> Any:
        args = ["route", "get", dst]
        if src:
            args += ["from", src]
        if oif:
            args += ["oif", oif]
        ans = self.ip_json(*args)
        return ans[0] if isinstance(ans, list) else ans  # dict, or the error text

    def predict(self, cases: Dict[str, Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
        req = json.dumps({"sysfs": str(self.sysfs), "cases": cases})
        env = dict(os.environ, PYTHONPATH=str(REPO), PYTHONDONTWRITEBYTECODE="1")
        r = subprocess.run(["ip", "netns", "exec", self.a, sys.executable, "-c", CHILD], input=req,
                           capture_output=True, text=True, cwd=str(REPO), env=env)
        assert r.returncode == 0, r.stderr
        result: Dict[str, Dict[str, Any]] = json.loads(r.stdout)
        return result


CHILD = r"""
import json, sys
from pyrdmacm.devices import list_devices
from pyrdmacm.errors import PrecheckError, UsageError
from pyrdmacm.precheck import predict

req = json.load(sys.stdin)
devs = list_devices(sysfs_root=req["sysfs"], use_netlink=False)
s = lambda v: None if v is None else str(v)
out = {}
for key, c in req["cases"].items():
    try:
        p = predict(c["dst"], c.get("src"), scope_id=c.get("scope_id"), strict=c.get("strict", False), devices=devs)
    except PrecheckError as e:
        out[key] = {"errno": e.errno, "message": str(e)}
        continue
    except UsageError as e:
        out[key] = {"errno": "usage", "message": str(e)}
        continue
    ch = p.chosen
    out[key] = {
        "errno": 0, "src": s(p.src), "netdev": p.netdev, "route_netdev": p.route_netdev,
        "gateway": s(p.gateway), "table": p.table, "route_type": s(p.route_type), "prefix": s(p.prefix),
        "bound_ifindex": p.bound_ifindex, "network": p.network, "device_chosen_at": p.device_chosen_at,
        "device": p.device, "port": p.port, "gid_index": ch.gid_index if ch else None,
        "gid": s(p.sgid), "gid_type": s(ch.gid_type) if ch else None,
        "candidates": [[c.device, c.gid_index, s(c.gid_type), c.default] for c in p.candidates],
        "next_hop": s(p.next_hop), "neighbour": s(p.neighbour), "needs": p.needs_neighbour_resolution,
        "warnings": list(p.warnings), "reasoning": list(p.reasoning),
    }
json.dump(out, sys.stdout)
"""


def _skip_reason() -> Optional[str]:
    if not sys.platform.startswith("linux"):
        return "network namespaces are Linux-only"
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "needs root: `ip netns add` creates network namespaces (CAP_SYS_ADMIN)"
    return None


NICS = {  # netdev of A: (IPv4 of A, prefix, IPv4 of its peer in B, IPv6 of A or None)
    "eth1": ("10.1.0.15", 24, "10.1.0.2", "2001:db8:1::15"),
    "eth2": ("10.2.0.15", 24, "10.2.0.2", "2001:db8:2::15"),
    "eth3": ("10.3.0.15", 24, "10.3.0.2", None),
    "eth4": ("10.3.0.16", 24, "10.3.0.4", None),
    "eth5": ("10.5.0.15", 24, "10.5.0.2", None),
}
RXE = {"eth1": "rxe1", "eth2": "rxe2", "eth3": "rxe3", "eth4": "rxe4"}  # eth5: no RDMA device


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = "pyrdmacm-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    a, b = tag + "-a", tag + "-b"
    r = _run("ip", "netns", "add", a, check=False)
    if r.returncode:
        pytest.skip("`ip netns add` failed: %s" % r.stderr.strip())
    made = [a]
    try:
        _run("ip", "netns", "add", b)
        made.append(b)
        for ns in (a, b):
            _run("ip", "netns", "exec", ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0",
                 "net.ipv6.conf.default.accept_dad=0")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        for i, (nic, (ip4, plen, peer4, ip6)) in enumerate(NICS.items(), 1):
            peer = "p%d" % i
            _run("ip", "-n", a, "link", "add", nic, "type", "veth", "peer", "name", peer, "netns", b)
            _run("ip", "-n", a, "addr", "add", "%s/%d" % (ip4, plen), "dev", nic)
            _run("ip", "-n", b, "addr", "add", "%s/%d" % (peer4, plen), "dev", peer)
            if ip6:
                _run("ip", "-n", a, "addr", "add", ip6 + "/64", "dev", nic, "nodad")
                _run("ip", "-n", b, "addr", "add", ip6.replace("::15", "::2") + "/64", "dev", peer, "nodad")
            _run("ip", "-n", a, "link", "set", nic, "up")
            _run("ip", "-n", b, "link", "set", peer, "up")
        A = ("ip", "-n", a)
        _run(*A, "route", "add", "default", "via", "10.1.0.2")
        _run(*A, "route", "add", "192.0.2.0/24", "via", "10.2.0.2")
        _run(*A, "route", "add", "unreachable", "198.51.100.0/24")
        _run(*A, "route", "add", "prohibit", "203.0.113.0/24")
        _run(*A, "route", "add", "blackhole", "198.18.0.0/24")
        _run(*A, "route", "add", "throw", "198.18.1.0/24")
        _run(*A, "rule", "add", "from", "10.3.0.16", "table", "100")
        _run(*A, "route", "add", "default", "via", "10.3.0.2", "dev", "eth4", "table", "100")
        _run(*A, "-6", "route", "add", "2001:db8:99::/64", "via", "2001:db8:2::2")
        _run(*A, "-6", "route", "add", "unreachable", "2001:db8:97::/64")
        _run(*A, "-6", "route", "add", "prohibit", "2001:db8:98::/64")
        _run(*A, "-6", "route", "add", "blackhole", "2001:db8:96::/64")

        def lladdr(ns: str, dev: str) -> str:
            # addrconf adds the fe80:: address once the veth has carrier: wait for it
            for _ in range(100):
                out = _run("ip", "-n", ns, "-j", "-6", "addr", "show", "dev", dev, "scope", "link").stdout
                found = [x["local"] for i in json.loads(out) for x in i.get("addr_info", []) if "local" in x]
                if found:
                    return str(found[0])
                time.sleep(0.05)
            raise AssertionError("no link-local address on %s in %s" % (dev, ns))

        ll = {nic: lladdr(a, nic) for nic in NICS}
        peer_ll = {nic: lladdr(b, "p%d" % i) for i, nic in enumerate(NICS, 1)}
        links = json.loads(_run("ip", "-n", a, "-j", "link", "show").stdout)
        ifindex = {link["ifname"]: link["ifindex"] for link in links}

        # a fake sysfs: rxe1..rxe4 on eth1..eth4 (default GIDs from the real link-local
        # addresses, then each IP as RoCE v1 and v2); eth5 has none
        root = tmp_path_factory.mktemp("sysfs")
        fs = FakeSysfs(root)
        for nic, rxe in RXE.items():
            ip4, _, _, ip6 = NICS[nic]
            fs.device(rxe, node_guid="0000:0000:0000:000%s" % rxe[-1])
            fs.port(rxe, 1, gids=roce_gids(nic, ll[nic], [ip4] + ([ip6] if ip6 else [])))
        yield Lab(a=a, b=b, sysfs=root, ll=ll, peer_ll=peer_ll, ifindex=ifindex)
    finally:
        for ns in made:
            _run("ip", "netns", "del", ns, check=False)


# The cases: predict(dst, src, scope_id) and the lookup inputs the kernel will use
# (oif = the netdev owning a given source, or a link-local zone).  Built lazily: the
# link-local ones need the lab's addresses.
def _cases(lab: Lab) -> Dict[str, Tuple[Dict[str, Any], Optional[str]]]:
    return {
        "onlink": ({"dst": "10.1.0.2"}, None),
        "onlink2": ({"dst": "10.2.0.2"}, None),
        "default": ({"dst": "8.8.8.8"}, None),
        "static_via": ({"dst": "192.0.2.7"}, None),
        "same_subnet": ({"dst": "10.3.0.2"}, None),
        "policy_src": ({"dst": "8.8.8.8", "src": "10.3.0.16"}, "eth4"),
        "src_other_nic": ({"dst": "8.8.8.8", "src": "10.2.0.15"}, "eth2"),
        "src_same_nic": ({"dst": "10.1.0.2", "src": "10.1.0.15"}, "eth1"),
        "v6_onlink": ({"dst": "2001:db8:1::2"}, None),
        "v6_via": ({"dst": "2001:db8:99::1"}, None),
        "v6_src": ({"dst": "2001:db8:99::1", "src": "2001:db8:2::15"}, "eth2"),
        "v6_ll_zone": ({"dst": lab.peer_ll["eth2"] + "%eth2"}, "eth2"),
        "v6_ll_scope_id": ({"dst": lab.peer_ll["eth1"], "scope_id": lab.ifindex["eth1"]}, "eth1"),
        "v6_ll_src_zone": ({"dst": lab.peer_ll["eth1"] + "%eth1", "src": lab.ll["eth1"] + "%eth1"}, "eth1"),
    }


ROUTED = ["onlink", "onlink2", "default", "static_via", "same_subnet", "policy_src", "src_other_nic",
          "src_same_nic", "v6_onlink", "v6_via", "v6_src", "v6_ll_zone", "v6_ll_scope_id", "v6_ll_src_zone"]


@pytest.fixture(scope="module")
def routed(lab: Lab) -> Dict[str, Dict[str, Any]]:
    return lab.predict({k: c for k, (c, _) in _cases(lab).items()})


@pytest.mark.netns
@pytest.mark.parametrize("key", ROUTED)
def test_prediction_matches_ip_route_get(lab: Lab, routed: Dict[str, Dict[str, Any]], key: str) -> None:
    case, oif = _cases(lab)[key]
    p = routed[key]
    assert p["errno"] == 0, p.get("message")
    dst = case["dst"].split("%")[0]
    src = case.get("src", "").split("%")[0] or None
    kernel = lab.route_get(dst, src, oif)
    assert isinstance(kernel, dict), kernel
    assert p["route_netdev"] == kernel["dev"]
    assert p["netdev"] == kernel["dev"]
    assert p["gateway"] == kernel.get("gateway")
    assert p["src"] == (src or kernel["prefsrc"])
    assert p["bound_ifindex"] == (lab.ifindex[oif] if oif else 0)
    assert p["device"] == RXE[kernel["dev"]] and p["port"] == 1
    # the GID is the source address, RoCE v2 (the kernel's default type), on that netdev
    want_gid = ipaddress.ip_address(p["src"])
    gid = ipaddress.IPv6Address(p["gid"])
    assert (gid.ipv4_mapped or gid) == want_gid and p["gid_type"] == "RoCE v2"
    assert p["candidates"][0][3] is True and p["candidates"][-1][2] == "RoCE v1"


@pytest.mark.netns
def test_expected_decisions(lab: Lab, routed: Dict[str, Dict[str, Any]]) -> None:
    """The facts the comparison above stands on, spelled out."""
    assert routed["default"]["gateway"] == "10.1.0.2" and routed["default"]["network"] == "IPv4"
    assert routed["onlink"]["gateway"] is None and routed["onlink"]["network"] == "IB"
    assert routed["static_via"]["netdev"] == "eth2"
    assert routed["policy_src"]["netdev"] == "eth4" and routed["policy_src"]["table"] == 100
    assert routed["policy_src"]["device_chosen_at"] == "bind"
    # a source on eth2 binds the id to eth2, and with oif=eth2 the kernel treats the
    # off-link destination as on-link there: no gateway, unlike a plain lookup
    assert routed["src_other_nic"]["netdev"] == "eth2" and routed["src_other_nic"]["gateway"] is None
    plain = lab.route_get("8.8.8.8", "10.2.0.15")
    assert plain["dev"] == "eth1" and plain["gateway"] == "10.1.0.2"
    assert any("on-link" in r for r in routed["src_other_nic"]["reasoning"])
    assert routed["v6_via"]["gateway"] == "2001:db8:2::2" and routed["v6_via"]["src"] == "2001:db8:2::15"
    assert routed["v6_ll_zone"]["src"] == lab.ll["eth2"]
    assert routed["same_subnet"]["netdev"] == "eth3"
    (w,) = [w for w in routed["same_subnet"]["warnings"] if "subnet" in w]
    assert "eth3" in w and "eth4" in w
    assert routed["onlink"]["warnings"] == []
    assert any(r.startswith("route: 10.1.0.0/24 dev eth1 src 10.1.0.15 (table main)") for r in routed["onlink"]["reasoning"])


ERRNO_CASES = {
    "no_route": ({"dst": "198.18.1.1"}, errno.ENETUNREACH, "Network is unreachable"),
    "unreachable": ({"dst": "198.51.100.1"}, errno.EHOSTUNREACH, "No route to host"),
    "prohibit": ({"dst": "203.0.113.1"}, errno.EACCES, "Permission denied"),
    "blackhole": ({"dst": "198.18.0.1"}, errno.EINVAL, "Invalid argument"),
    "v6_no_route": ({"dst": "2001:db9::1"}, errno.ENETUNREACH, "Network is unreachable"),
    "v6_unreachable": ({"dst": "2001:db8:97::1"}, errno.EHOSTUNREACH, "No route to host"),
    "v6_prohibit": ({"dst": "2001:db8:98::1"}, errno.EACCES, "Permission denied"),
    "v6_blackhole": ({"dst": "2001:db8:96::1"}, errno.EINVAL, "Invalid argument"),
    "nonlocal_src": ({"dst": "10.1.0.2", "src": "10.9.9.9"}, errno.EADDRNOTAVAIL, None),
    "family_mismatch": ({"dst": "10.1.0.2", "src": "2001:db8:1::15"}, errno.EINVAL, None),
    "no_rdma_egress": ({"dst": "10.5.0.2"}, errno.ENODEV, None),
    "no_rdma_src": ({"dst": "10.5.0.2", "src": "10.5.0.15"}, errno.ENODEV, None),
    "bad_zone": ({"dst": "fe80::1", "scope_id": 999}, errno.ENODEV, None),
    "strict_same_subnet": ({"dst": "10.3.0.2", "strict": True}, errno.ENOTUNIQ, None),
    "strict_ll_wildcard_src": ({"dst": "10.1.0.2"}, errno.EINVAL, None),  # replaced below (needs lab)
}


@pytest.fixture(scope="module")
def refused(lab: Lab) -> Dict[str, Dict[str, Any]]:
    cases = {k: c for k, (c, _, _) in ERRNO_CASES.items()}
    cases["strict_ll_wildcard_src"] = {"dst": lab.peer_ll["eth1"] + "%eth1", "src": "::", "strict": True}
    return lab.predict(cases)


@pytest.mark.netns
@pytest.mark.parametrize("key", sorted(ERRNO_CASES))
def test_errno_cases(lab: Lab, refused: Dict[str, Dict[str, Any]], key: str) -> None:
    case, err, ip_says = ERRNO_CASES[key]
    p = refused[key]
    assert p["errno"] == err, p
    assert errno.errorcode[err] in p["message"]
    if ip_says:  # the kernel's own answer to the same lookup
        assert lab.route_get(case["dst"]) == "RTNETLINK answers: " + ip_says


@pytest.mark.netns
def test_enodev_names_the_rdma_netdevs(refused: Dict[str, Dict[str, Any]]) -> None:
    msg = refused["no_rdma_egress"]["message"]
    assert "eth5" in msg and all("%s (10." % n in msg for n in ("eth1", "eth2", "eth3", "eth4"))
    assert "ADDR_ERROR" in msg
    assert "eth5" in refused["no_rdma_src"]["message"]


@pytest.mark.netns
def test_local_destination_uses_the_owning_netdev(lab: Lab) -> None:
    out = lab.predict({"local": {"dst": "10.2.0.15"}, "local6": {"dst": "2001:db8:1::15"},
                       "any": {"dst": "0.0.0.0"}, "ll_no_zone": {"dst": lab.peer_ll["eth2"]},
                       "lo": {"dst": "127.0.0.2"}, "lo6": {"dst": "::1"},
                       "lo_src": {"dst": "127.0.0.1", "src": "10.2.0.15"}})
    p = out["local"]
    assert lab.route_get("10.2.0.15")["dev"] == "lo"
    assert (p["route_netdev"], p["netdev"], p["device"], p["src"]) == ("lo", "eth2", "rxe2", "10.2.0.15")
    assert p["next_hop"] is None and p["needs"] is False
    p6 = out["local6"]
    assert (p6["route_netdev"], p6["netdev"], p6["device"]) == ("lo", "eth1", "rxe1")
    # 0.0.0.0, 127.0.0.0/8 and ::1: cma_resolve_loopback, the first device with an ACTIVE
    # port, source 127.0.0.1 / ::1 -- or the device bound with a given source
    assert (out["any"]["netdev"], out["any"]["device"], out["any"]["src"]) == (None, "rxe1", "127.0.0.1")
    assert (out["lo"]["netdev"], out["lo"]["device"], out["lo"]["src"], out["lo"]["gid_index"]) == (
        None, "rxe1", "127.0.0.1", 0)
    assert (out["lo6"]["device"], out["lo6"]["src"]) == ("rxe1", "::1")
    assert (out["lo_src"]["device"], out["lo_src"]["src"], out["lo_src"]["device_chosen_at"]) == (
        "rxe2", "10.2.0.15", "bind")
    # a link-local destination without a zone: refused as resolve_addr refuses it
    assert out["ll_no_zone"] == {"errno": "usage", "message": _missing_zone(lab.peer_ll["eth2"])}
    # with a wildcard source the zone is not applied: the kernel routes it somewhere
    ll = lab.predict({"w": {"dst": lab.peer_ll["eth2"] + "%eth2", "src": "::"}})["w"]
    assert ll["errno"] == 0 and ll["bound_ifindex"] == 0
    assert ll["route_netdev"] == lab.route_get(lab.peer_ll["eth2"])["dev"]
    assert any("wildcard source" in w for w in ll["warnings"])


def _missing_zone(ip: str) -> str:
    """What resolve_addr says for a link-local address without a zone."""
    from pyrdmacm.addr import parse_address

    with pytest.raises(UsageError) as ei:
        parse_address(ip)
    return str(ei.value)


@pytest.mark.parametrize("dst,src", [("fe80::2", None), ("2001:db8::2", "fe80::15"), ("fe80::2", "::")])
def test_link_local_without_zone_is_refused_as_resolve_addr_refuses_it(devs: List[D.Device], dst: str,
                                                                        src: Optional[str]) -> None:
    from pyrdmacm import CmId, EventChannel
    from pyrdmacm.testing import FakeKernel

    with EventChannel(FakeKernel()) as ch, pytest.raises(UsageError) as lib:
        CmId(ch).resolve_addr(dst, src=src)
    for strict in (False, True):
        with pytest.raises(UsageError) as pre:
            predict(dst, src, devices=devs, network=_net(), strict=strict)
        assert str(pre.value) == str(lib.value)
        assert "needs a zone naming the interface" in str(pre.value)


@pytest.mark.netns
def test_neighbour_state(lab: Lab) -> None:
    _run("ip", "-n", lab.a, "neigh", "flush", "dev", "eth2")
    before = lab.predict({"n": {"dst": "10.2.0.2"}})["n"]
    assert before["next_hop"] == "10.2.0.2" and before["needs"] is True
    assert before["neighbour"] in ("NONE", "FAILED", "INCOMPLETE")
    # any packet to 10.2.0.2 makes A resolve it (B answers the ARP); wait for the entry
    poke = "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('10.2.0.2', 9))"
    _run("ip", "netns", "exec", lab.a, sys.executable, "-c", poke)
    for _ in range(100):
        if "REACHABLE" in _run("ip", "-n", lab.a, "neigh", "show", "10.2.0.2", "dev", "eth2").stdout:
            break
        time.sleep(0.02)
    after = lab.predict({"n": {"dst": "10.2.0.2"}, "g": {"dst": "192.0.2.9"}})
    assert after["n"]["neighbour"] == "REACHABLE" and after["n"]["needs"] is False
    # off-link: the gateway's entry is the one that counts
    assert after["g"]["next_hop"] == "10.2.0.2" and after["g"]["needs"] is False


@pytest.mark.netns
def test_vrf_prediction_matches_ip_route_get(tmp_path: Path) -> None:
    """A VRF (table 10) holding eth7; the main table's default route leaves through eth1.
    A source in the VRF binds the id to eth7, and the kernel's lookup with that oif uses
    the VRF's table: predict() must say so, as ``ip route get ... oif eth7`` does."""
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    tag = "pyrdmacm-vrf-%d-%s" % (os.getpid(), uuid.uuid4().hex[:6])
    a, b = tag + "-a", tag + "-b"
    made = []
    try:
        for ns in (a, b):
            _run("ip", "netns", "add", ns)
            made.append(ns)
            _run("ip", "-n", ns, "link", "set", "lo", "up")
        r = _run("ip", "-n", a, "link", "add", "vrf-blue", "type", "vrf", "table", "10", check=False)
        if r.returncode:
            pytest.skip("this kernel has no vrf link type (module vrf: %s); the kernel lab runs this test, "
                        "and tests/kernel/test_precheck_vrf_lab.py, on Debian kernels" % r.stderr.strip())
        _run("ip", "-n", a, "link", "set", "vrf-blue", "up")
        for nic, peer, mine, theirs in (("eth1", "p1", "10.1.0.15", "10.1.0.2"), ("eth7", "p7", "10.7.0.15", "10.7.0.2")):
            _run("ip", "-n", a, "link", "add", nic, "type", "veth", "peer", "name", peer, "netns", b)
            if nic == "eth7":
                _run("ip", "-n", a, "link", "set", nic, "master", "vrf-blue")
            _run("ip", "-n", a, "addr", "add", mine + "/24", "dev", nic)
            _run("ip", "-n", b, "addr", "add", theirs + "/24", "dev", peer)
            _run("ip", "-n", a, "link", "set", nic, "up")
            _run("ip", "-n", b, "link", "set", peer, "up")
        _run("ip", "-n", a, "route", "add", "default", "via", "10.1.0.2")
        _run("ip", "-n", a, "route", "add", "default", "via", "10.7.0.2", "vrf", "vrf-blue")
        fs = FakeSysfs(tmp_path)
        for nic, rxe, ip4 in (("eth1", "rxe1", "10.1.0.15"), ("eth7", "rxe7", "10.7.0.15")):
            fs.device(rxe, node_guid="0000:0000:0000:000%s" % rxe[-1])
            fs.port(rxe, 1, gids=roce_gids(nic, "fe80::%s" % rxe[-1], [ip4]))
        links = json.loads(_run("ip", "-n", a, "-j", "link", "show").stdout)
        lab = Lab(a=a, b=b, sysfs=tmp_path, ll={}, peer_ll={}, ifindex={x["ifname"]: x["ifindex"] for x in links})
        cases = {
            "main": ({"dst": "10.7.0.2"}, None),
            "vrf": ({"dst": "10.7.0.2", "src": "10.7.0.15"}, "eth7"),
            "vrf_via": ({"dst": "198.51.100.9", "src": "10.7.0.15"}, "eth7"),
        }
        out = lab.predict({k: c for k, (c, _) in cases.items()})
        for key, (case, oif) in cases.items():
            p = out[key]
            assert p["errno"] == 0, (key, p)
            kernel = lab.route_get(case["dst"], case.get("src"), oif)
            assert isinstance(kernel, dict), (key, kernel)
            assert (p["netdev"], p["gateway"], p["src"]) == (
                kernel["dev"], kernel.get("gateway"), case.get("src") or kernel["prefsrc"]), (key, p, kernel)
        assert (out["main"]["netdev"], out["main"]["device"], out["main"]["gateway"]) == ("eth1", "rxe1", "10.1.0.2")
        assert (out["vrf"]["netdev"], out["vrf"]["device"], out["vrf"]["gateway"]) == ("eth7", "rxe7", None)
        assert (out["vrf_via"]["device"], out["vrf_via"]["gateway"]) == ("rxe7", "10.7.0.2")
        assert out["vrf"]["table"] == out["vrf_via"]["table"] == 10
    finally:
        for ns in made:
            _run("ip", "netns", "del", ns, check=False)
