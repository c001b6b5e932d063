"""`pyrdmacm mcast` on a real kernel (Soft-RoCE), beside librdmacm's ``mckey``.

The pair topology: mckey joins the group on the peer lab-a (10.9.0.1) while pyrdmacm joins it
here on lab-b (10.9.0.2); each prints the group's address handle as its MULTICAST_JOIN gave
it, and the two must agree (mckey's ``joined dgid: ... mlid ... sl ...`` line is ours without
its ``mckey: `` prefix).  The kernel's refusals are checked beside mckey's too: an IPv6 group
on RoCE, the IPoIB port space on RoCE, a group with no route (the pair has no default route:
a source must be given, as mckey's -b).
"""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
import sys
import time
from typing import List, Tuple

import pytest

from pyrdmacm import cli

pytestmark = pytest.mark.kernel(topology="pair", suites=("bullseye", "sid"))  # mckey beside: the oldest and newest kernels (CI within 40 minutes)

HERE, HERE6 = "10.9.0.2", "fd09::2"


def mcast(*args: str) -> Tuple[int, str, str]:
    """``pyrdmacm mcast ARGS`` in this process (a Python start costs seconds under emulation)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["mcast", *args])
    print("--- pyrdmacm mcast %s: exit %s\n%s%s" % (" ".join(args), code, out.getvalue(), err.getvalue()))
    return code, out.getvalue(), err.getvalue()


def records(text: str) -> List[dict]:
    return [json.loads(line) for line in text.splitlines()]


def mckey_here(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["mckey", *args], capture_output=True, text=True, timeout=60)
    print("--- mckey %s: exit %s\n%s%s" % (" ".join(args), done.returncode, done.stdout, done.stderr))
    return done


@pytest.mark.parametrize("send_only", [False, True], ids=["full-member", "send-only"])
def test_the_group_mckey_joined_on_the_peer_has_the_same_parameters_here(peer, send_only):
    group = "239.1.2.%d" % (2 if send_only else 1)
    extra = ["-o"] if send_only else []
    # mckey stays joined for 3 s after MULTICAST_JOIN (its pause for the SM): we join meanwhile
    theirs = peer.start(["mckey", "-m", group, "-b", peer.address, "-C", "0", *extra], line_buffered=True)
    joined = theirs.wait_for_line("^mckey: joined dgid:")
    code, out, err = mcast(group, "--src", HERE, "--count", "0", *(["--send-only"] if send_only else []))
    assert code == cli.EXIT_OK and err == ""
    ours = [line for line in out.splitlines() if line.startswith("joined dgid:")]
    assert ["mckey: " + line for line in ours] == [joined.strip()]
    assert "group: qp 0xffffff qkey 0x01234567" in out.splitlines()
    status, m_out, m_err = theirs.wait(30)
    assert status == 0 and m_out.splitlines()[-2:] == ["test complete", "return status 0"], (m_out, m_err)


def test_the_address_handle_and_the_leave_as_the_kernel_gives_them():
    code, out, err = mcast("239.1.2.3", "--src", HERE, "--count", "0", "--json")
    assert code == cli.EXIT_OK and err == ""
    recs = records(out)
    assert [r["event"] for r in recs] == ["MCAST", "ADDR_RESOLVED", "MULTICAST_JOIN", "LEFT", "STOPPED"]
    _start, resolved, join, left, stopped = recs
    assert (resolved["src"], resolved["device"], resolved["port_num"]) == (HERE, "rxe0", 1)
    # RoCE v2: the IPv4 group's GID, no LID, the UDP port space's qkey, the multicast QP number
    assert (join["dgid"], join["mlid"], join["sl"], join["qp_num"], join["qkey"]) == (
        "::ffff:239.1.2.3", 0, 0, 0xFFFFFF, 0x01234567)
    assert (join["ah"]["is_global"], join["ah"]["hop_limit"], join["ah"]["port_num"]) == (1, 64, 1)
    assert left["events_reported"] == 1  # the MULTICAST_JOIN, as LEAVE_MCAST's reply counts it
    assert (stopped["why"], stopped["events"], stopped["exit"]) == ("count", 0, 0)


def test_an_ipv6_group_on_roce_is_refused_as_mckey_is():
    theirs = mckey_here("-m", "ff0e::1", "-b", HERE6, "-C", "0")
    assert "mckey: failure joining: Unknown error 524" in theirs.stdout + theirs.stderr
    code, out, err = mcast("ff0e::1", "--src", HERE6, "--json")
    recs = records(out)
    assert code == cli.EXIT_KERNEL and err == ""
    assert recs[1]["event"] == "ADDR_RESOLVED" and recs[1]["src"] == HERE6
    assert (recs[2]["event"], recs[2]["command"], recs[2]["errno"]) == ("REFUSED", "JOIN_MCAST", 524)
    error = recs[-1]["error"]
    assert (error["errno"], error["name"], error["step"]) == (524, "ENOTSUPP", "join")
    assert "give an IPv4 group" in error["message"]


def test_without_a_source_or_a_route_the_resolution_is_refused_as_mckeys():
    """The pair has no default route: the kernel's route lookup for a group finds none
    (ENETUNREACH, from the write) unless a source is bound, whose netdev it then takes."""
    theirs = mckey_here("-m", "239.1.2.6", "-C", "0")
    assert "mckey: resolve addr failure: Network is unreachable" in theirs.stderr
    code, out, err = mcast("239.1.2.6", "--json")
    recs = records(out)
    assert code == cli.EXIT_KERNEL and err == ""
    assert (recs[1]["event"], recs[1]["command"], recs[1]["errno"]) == ("REFUSED", "RESOLVE_ADDR", 101)
    assert "give --src" in recs[1]["message"] and recs[-1]["error"]["name"] == "ENETUNREACH"


def test_the_ipoib_port_space_on_roce_is_refused_as_for_mckey_p2():
    theirs = mckey_here("-p", "2", "-m", "239.1.2.4", "-b", HERE, "-C", "0")
    assert "mckey: addr bind failure: Invalid argument" in theirs.stderr
    code, out, err = mcast("239.1.2.4", "--src", HERE, "--ps", "ipoib", "--json")
    recs = records(out)
    assert code == cli.EXIT_KERNEL and err == ""
    assert (recs[1]["event"], recs[1]["step"], recs[1]["command"], recs[1]["errno"]) == ("REFUSED", "bind", "BIND",
                                                                                        22)
    assert "needs an InfiniBand port" in recs[1]["message"]
    assert recs[-1]["why"] == "bind" and recs[-1]["exit"] == 2


def test_sigterm_after_the_join_leaves_and_exits_0():
    """Run as a program: it waits for the group's events until SIGTERM, then leaves; the
    kernel's cm_id dump (RDMA netlink) shows the id while it waits, and not after."""
    from pyrdmacm.netlink import cm_ids

    proc = subprocess.Popen([sys.executable, "-m", "pyrdmacm", "mcast", "239.1.2.5", "--src", HERE, "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1]["event"] == "WAITING":
                break
        assert seen[-1]["event"] == "WAITING", seen
        mine = [i for i in cm_ids() if i.pid == proc.pid]
        assert len(mine) == 1 and mine[0].ps == 0x0111, mine  # RDMA_PS_UDP
        proc.terminate()
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    recs = seen + records(rest)
    assert proc.returncode == 0 and err == ""
    assert [r["event"] for r in recs[-2:]] == ["LEFT", "STOPPED"]
    assert (recs[-1]["why"], recs[-1]["exit"]) == ("SIGTERM", 0)
    deadline = time.monotonic() + 5
    while [i for i in cm_ids() if i.pid == proc.pid] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [i for i in cm_ids() if i.pid == proc.pid] == []


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), check=check, capture_output=True, text=True, timeout=120)


def gid_of(ip: str, gids: str) -> bool:
    """Whether the GID table ``gids`` (a sysfs directory) holds the IPv4-mapped GID of ``ip``."""
    import ipaddress
    import os

    want = ipaddress.IPv6Address("::ffff:" + ip)
    for name in os.listdir(gids) if os.path.isdir(gids) else []:
        with contextlib.suppress(OSError, ValueError), open(os.path.join(gids, name)) as f:
            if ipaddress.IPv6Address(f.read().strip()) == want:
                return True
    return False


@pytest.fixture
def removable_rxe():
    """A Soft-RoCE device of the test's own, ``rxe_mc`` on a veth ``mc0`` (10.8.0.2/24), that
    the test may remove without taking rxe0 from the tests after it."""
    _run("ip", "link", "add", "mc0", "type", "veth", "peer", "name", "mc0p")
    try:
        _run("ip", "addr", "add", "10.8.0.2/24", "dev", "mc0")
        _run("ip", "link", "set", "mc0p", "up")
        _run("ip", "link", "set", "mc0", "up")
        _run("rdma", "link", "add", "rxe_mc", "type", "rxe", "netdev", "mc0")
        deadline = time.monotonic() + 20
        gids = "/sys/class/infiniband/rxe_mc/ports/1/gids"
        while time.monotonic() < deadline and not gid_of("10.8.0.2", gids):  # comes after the device
            time.sleep(0.1)
        yield "10.8.0.2"
    finally:
        _run("rdma", "link", "delete", "rxe_mc", check=False)
        _run("ip", "link", "del", "mc0", check=False)


def test_device_removal_ends_the_run_without_a_leave(removable_rxe):
    """``rdma link delete`` of the joined device: the kernel sends DEVICE_REMOVAL and waits
    until the id is destroyed; mcast stops (exit 1) and destroys the id without LEAVE_MCAST."""
    proc = subprocess.Popen([sys.executable, "-m", "pyrdmacm", "mcast", "239.1.2.7", "--src", removable_rxe,
                             "--json"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(json.loads(line))
            if seen[-1]["event"] == "WAITING":
                break
        assert seen[-1]["event"] == "WAITING", (seen, proc.stderr.read() if proc.stderr else "")
        assert seen[1]["device"] == "rxe_mc"
        removed = _run("rdma", "link", "delete", "rxe_mc", check=False)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    recs = seen + records(rest)
    print(json.dumps(recs, indent=1))
    assert removed.returncode == 0, removed.stderr
    assert proc.returncode == cli.EXIT_EVENT and err == ""
    assert [r["event"] for r in recs[-2:]] == ["DEVICE_REMOVAL", "STOPPED"]
    assert "LEFT" not in [r["event"] for r in recs]
    assert (recs[-1]["why"], recs[-1]["events"], recs[-1]["exit"]) == ("DEVICE_REMOVAL", 1, 1)
