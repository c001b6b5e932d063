"""`pyrdmacm mesh` across the pair (lab-b here, lab-a the peer), on the oldest and newest
kernels: nobody listening is REJ reason 8 (the CM path works), an identifying listener on
the peer is established and names itself, an address nobody has fails with the kernel's
status and the pre-check's why; one run per guest (as srun or clush launch them), merged.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
from typing import List, Tuple

import pytest

from pyrdmacm import cli
from pyrdmacm.devices import roce_path_mtu

pytestmark = pytest.mark.kernel(topology="pair", suites=("bullseye", "sid"))

PYRDMACM = [sys.executable, "-m", "pyrdmacm"]
NOBODY = "10.9.0.77"  # on the segment, answered by nobody's ARP


def _here() -> str:
    with open(os.environ["PYRDMACM_LAB_TOPOLOGY"]) as f:
        return json.load(f)["netdevs"]["eth0"]["ipv4"].split("/")[0]


def _netdev_mtu(name: str) -> int:
    with open("/sys/class/net/%s/mtu" % name) as f:
        return int(f.read())


def mesh(*args: str) -> Tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["mesh", *args])
    print("--- here: pyrdmacm mesh %s: exit %s\n%s%s" % (" ".join(args), code, out.getvalue(), err.getvalue()))
    return code, out.getvalue(), err.getvalue()


def cells(out: str) -> List[dict]:
    return [r["cell"] for r in map(json.loads, out.splitlines()) if "cell" in r]


def test_the_peer_with_nobody_listening_and_an_address_nobody_has(peer, tmp_path):
    code, out, err = mesh(peer.address, "fd09::1", NOBODY, "--timeout", "1500", "--json")
    got = {c["target"]: c for c in cells(out)}
    assert code == 1 and "Traceback" not in err, err
    for target, here, gid in ((peer.address, _here(), "::ffff:%s" % peer.address), ("fd09::1", "fd09::2", "fd09::1")):
        c = got[target]
        assert c["outcome"] == "no-listener" and c["status"] == 8 and c["ok"], c
        assert (c["rail"], c["device"], c["port"], c["src"]) == ("eth0", "rxe0", 1, here), c
        assert c["dgid"] == gid and c["gid_type"] == "RoCE v2" and c["gid_index"] is not None, c
        assert c["ms"]["connect"] > 0 and c["why"] == []
        # the data path: the kernel's RoCE path record has the MTU it derives from the netdev's
        # (iboe_get_mtu), the one the port's is derived with here; no QP view without a REP
        p = c["path"]
        assert p["netdev_mtu"] == _netdev_mtu("eth0") and p["mtu"] == p["port_mtu"] == roce_path_mtu(
            p["netdev_mtu"]), c
        assert p["link_local"] is False and p["pkey"] == 0xFFFF and p["sl"] == 0 and c["qp"] == {}, c
    bad = got[NOBODY]
    assert bad["outcome"] == "addr-error" and bad["status"] == -110 and not bad["ok"], bad
    assert any("neighbour" in w for w in bad["why"]), bad["why"]  # the pre-check names the next hop
    # this node's rails as a targets line; a host list; a sample of one target per rail
    code, out, err = mesh("--inventory")
    assert code == 0 and out == "%s  # %s: eth0\n" % (_here(), os.uname().nodename), out + err
    code, out, err = mesh("10.9.0.[%s,77]" % peer.address.rsplit(".", 1)[1], "--timeout", "1500", "--json")
    assert sorted(c["target"] for c in cells(out)) == sorted([peer.address, NOBODY]), out + err
    code, out, err = mesh(peer.address, NOBODY, "--sample", "1", "--timeout", "1500", "--json")
    assert len(cells(out)) == 1, out + err
    # the table and the pictures, for people
    svg, prom = tmp_path / "m.svg", tmp_path / "m.prom"
    code, out, _ = mesh(peer.address, NOBODY, "--timeout", "1500", "--svg", str(svg), "--prometheus", str(prom))
    assert code == 1 and out.splitlines()[1].split()[:3] == ["eth0", "ok8", "ADDR"]
    assert svg.read_text().startswith("<svg") and 'outcome="no-listener"} 1' in prom.read_text()


def test_an_identifying_listener_on_the_peer_and_the_merge_of_both_guests_runs(peer, tmp_path):
    listener = peer.start([*PYRDMACM, "listen", "7471", "--identify", "--json"])
    try:
        peer.wait_listening(7471, timeout=120)
        code, out, err = mesh(peer.address, "--timeout", "10000", "--json")  # the peer's Python: slow under TCG
        (c,) = cells(out)
        assert code == 0, err
        assert c["outcome"] == "established" and c["agent"] == {"host": peer.host, "rail": "eth0",
                                                                "addr": peer.address}, c
        assert set(c["ms"]) == {"addr", "route", "connect", "disconnect"}
        # what the kernel gives the QP at RTR and RTS agrees with this end's path view: the
        # source GID index the GID table names for the route's GID (RoCE v2 first, the
        # kernel's default), the path record's MTU, traffic class and hop limit
        q, p = c["qp"], c["path"]
        assert (q["sgid_index"], q["path_mtu"], q["tclass"], q["hop_limit"]) == (
            c["gid_index"], p["mtu"], p["tclass"], p["hop_limit"]), c
        assert q["max_dest_rd_atomic"] >= 1 and q["retry_cnt"] == 7 and q["timeout"] > 0, c
        # the listener's own view, from its REP: the same path from the other end (the kernel
        # gives its request's id the REQ's path), two guests alike: no mismatch
        t = c["there"]
        assert (t["gid_type"], t["mtu"], t["qp_path_mtu"], t["link_local"]) == ("RoCE v2", p["mtu"], p["mtu"],
                                                                               False), c
        assert t["port_mtu"] == p["port_mtu"] and t["pkey"] == 0xFFFF and c["mismatches"] == [], c
        here = tmp_path / "here.json"
        here.write_text(out)
    finally:
        listener.kill()
    # the peer's own run, launched there as a cluster launcher would (one command per host)
    rc, theirs, err = peer.run([*PYRDMACM, "mesh", _here(), NOBODY, "--timeout", "1500", "--json"], timeout=240)
    print("--- peer: pyrdmacm mesh %s %s --json: exit %s\n%s%s" % (_here(), NOBODY, rc, theirs, err))
    assert rc == 1, err
    there = tmp_path / "peer.json"
    there.write_text(theirs)
    code, out, err = mesh("--merge", str(here), str(there), "--json")
    merged = {(c["host"], c["target"]): c["outcome"] for c in cells(out)}
    assert merged == {(os.uname().nodename, peer.address): "established", (peer.host, _here()): "no-listener",
                      (peer.host, NOBODY): "addr-error"}, merged
    assert code == 1 and json.loads(out.splitlines()[-1])["summary"]["failed"] == 1
    # the verdicts: both guests healthy (the same path settings both ways), the address
    # nobody has is the far end
    code, out, _ = mesh("--merge", str(here), str(there), "--verdicts")
    assert code == 1 and [line.split()[:2] for line in out.splitlines()] == [
        [os.uname().nodename, "healthy"], [peer.host, "healthy"], [NOBODY, NOBODY]], out
    assert out.splitlines()[2].endswith("fails from the one rail that tried it (addr-error (ETIMEDOUT)) -- likely the far end")
    # the settings: this guest's rail works (its GID index the one the kernel gave the QP),
    # the peer's is left out (one of its targets fails)
    code, out, _ = mesh("--merge", str(here), str(there), "--settings")
    assert out.splitlines() == [
        "%-5s  NCCL_IB_HCA==rxe0:1 NCCL_SOCKET_IFNAME==eth0 UCX_NET_DEVICES=rxe0:1 NCCL_IB_GID_INDEX=%d"
        % (os.uname().nodename, c["qp"]["sgid_index"]), "%-5s  no rail works: nothing to set" % peer.host,
        "         left out: eth0 (1 of its 2 targets fail)"], out
    code, out, _ = mesh("--merge", str(here), str(there))
    assert out.splitlines()[0].split() == ["rail", peer.address, _here(), NOBODY]
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ["%s/eth0" % os.uname().nodename,
                                                                  "%s/eth0" % peer.host]


def test_an_mtu_that_differs_between_the_ends_is_found_from_both_sides(peer, tmp_path):
    """The peer's rail at MTU 9000 (rxe's active MTU follows its netdev's: 4096), this one at
    1500 (1024): the CM path works both ways, and the data path's MTU does not agree. The
    peer's check of this host, answered by an identifying listener here, names the QP path
    MTU the REQ gives this end (4096) above this port's (1024): what fails late with
    retry-exceeded errors. The merge of both hosts' own runs names the asymmetry, no agent
    needed."""
    here = _here()
    rc, out, err = peer.run(["ip", "link", "set", "eth0", "mtu", "9000"])
    assert rc == 0, err
    listener = subprocess.Popen([*PYRDMACM, "listen", "7471", "--identify", "--count", "1", "--json"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert listener.stdout is not None and '"LISTENING"' in listener.stdout.readline()
        rc, theirs, err = peer.run([*PYRDMACM, "mesh", here, "--timeout", "10000", "--json"], timeout=240)
        print("--- peer: pyrdmacm mesh %s --json: exit %s\n%s%s" % (here, rc, theirs, err))
        assert rc == 0, err
        (c,) = cells(theirs)
        assert c["outcome"] == "established" and (c["path"]["mtu"], c["path"]["port_mtu"]) == (4096, 4096), c
        t = c["there"]  # this host's view, from its REP
        assert (t["port_mtu"], t["qp_path_mtu"]) == (roce_path_mtu(_netdev_mtu("eth0")), 4096), c
        assert "port MTU 4096 here, 1024 there" in c["mismatches"], c
        assert "the QP's path MTU 4096 is larger than the port's 1024 there: its full-size packets do not fit that port's MTU" \
            in c["mismatches"], c
        listener.wait(30)
        code, mine, err = mesh(peer.address, "--timeout", "10000", "--json")
        assert code == 0, err
        (a, b) = tmp_path / "here.json", tmp_path / "peer.json"
        a.write_text(mine)
        b.write_text(theirs)
        code, out, err = mesh("--merge", str(a), str(b), "--json")
        assert code == 0, err
        found = [json.loads(line)["asymmetry"] for line in out.splitlines() if '"asymmetry"' in line]
        me, them = "%s/eth0" % os.uname().nodename, "%s/eth0" % peer.host
        assert [(f["a"], f["b"]) for f in found] == [(me, them)], found
        assert "path MTU 1024 at %s, 4096 at %s" % (me, them) in found[0]["mismatches"], found
        assert "port MTU 1024 at %s, 4096 at %s" % (me, them) in found[0]["mismatches"], found
        code, out, err = mesh("--merge", str(a), str(b), "--verdicts")
        assert code == 1 and [line.split()[0] for line in out.splitlines()] == [os.uname().nodename, peer.host], out
        for line in out.splitlines():  # the asymmetry first: it names both hosts
            assert line.split(None, 1)[1].startswith("%s <-> %s: path MTU 1024 at %s, 4096 at %s" % (
                me, them, me, them)) and line.endswith("likely the configuration of the two ends (+1 more)"), out
    finally:
        if listener.poll() is None:
            listener.kill()
            listener.wait()
        peer.run(["ip", "link", "set", "eth0", "mtu", "1500"])


def test_the_ports_configfs_defaults_are_read_and_followed(peer):
    """rdma_cm's configfs group for rxe0: the port's default_roce_mode reads RoCE v2 (rxe has
    no RoCE v1: the kernel refuses it), and a default_roce_tos of 32 is what the route of an
    id with no TOS of its own gets as its traffic class, in the path this end's cell shows."""
    from pyrdmacm.devices import GidType, list_devices

    cfg = "/sys/kernel/config"
    if not os.path.isdir(os.path.join(cfg, "rdma_cm")):
        subprocess.run(["mount", "-t", "configfs", "none", cfg], check=False)
    group = os.path.join(cfg, "rdma_cm", "rxe0")
    assert os.path.isdir(os.path.join(cfg, "rdma_cm")), "no rdma_cm in configfs: the lab kernel has it"
    os.mkdir(group)
    try:
        port = os.path.join(group, "ports", "1")
        with open(os.path.join(port, "default_roce_mode")) as f:
            assert f.read().strip() == "RoCE v2"
        try:
            with open(os.path.join(port, "default_roce_mode"), "w") as f:
                f.write("IB/RoCE v1")
        except OSError as e:
            assert e.errno == 22, e  # EINVAL: the port has no RoCE v1
        else:
            raise AssertionError("the kernel took RoCE v1 on rxe")
        with open(os.path.join(port, "default_roce_tos"), "w") as f:
            f.write("32")
        (p,) = [d for d in list_devices() if d.name == "rxe0"][0].ports
        assert (p.roce_mode, p.roce_tos) == (GidType.ROCE_V2, 32), p
        code, out, err = mesh(peer.address, "--timeout", "1500", "--json")
        (c,) = cells(out)
        assert c["outcome"] == "no-listener" and c["path"]["tclass"] == 32 and c["gid_type"] == "RoCE v2", c
    finally:
        with open(os.path.join(group, "ports", "1", "default_roce_tos"), "w") as f:
            f.write("0")
        os.rmdir(group)
