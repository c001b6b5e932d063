"""`pyrdmacm --netns NAME ...` runs the subcommand in that network namespace (by `ip netns
exec`, as operators look into a container from the host): a route lookup there sees that
namespace's tables, not the caller's. Needs root (creating a namespace)."""

import json
import os
import subprocess
import sys
import uuid

import pytest

PYRDMACM = [sys.executable, "-m", "pyrdmacm"]


def _run(*args):
    return subprocess.run([*PYRDMACM, *args], capture_output=True, text=True, timeout=120)


@pytest.fixture
def netns():
    if os.geteuid() != 0:
        pytest.skip("needs root: `ip netns add` creates network namespaces")
    name = "pyrdmacm-%s" % uuid.uuid4().hex[:8]
    r = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True)
    if r.returncode:
        pytest.skip("`ip netns add` failed here: %s" % r.stderr.strip())
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True)


@pytest.mark.netns
def test_route_in_another_netns_sees_its_tables(netns):
    """A new namespace has only a loopback that is down: no route to anything there."""
    inside = _run("--netns", netns, "route", "192.0.2.1", "--json")
    assert inside.returncode == 2, inside.stderr
    out = json.loads(inside.stdout)
    assert out["error"]["name"] == "ENETUNREACH" and out["exit"] == 2
    assert out["prediction"]["reasoning"] == ["lookup: ip route get 192.0.2.1 -> ENETUNREACH unspec"]
    # with its loopback up, a local address resolves there (and only there)
    subprocess.run(["ip", "-n", netns, "addr", "add", "198.51.100.7/32", "dev", "lo"], check=True)
    subprocess.run(["ip", "-n", netns, "link", "set", "lo", "up"], check=True)
    inside = json.loads(_run("--netns", netns, "route", "198.51.100.7", "--json").stdout)
    assert inside["prediction"]["route_type"] == "LOCAL" and inside["prediction"]["route_netdev"] == "lo", inside
    here = json.loads(_run("route", "198.51.100.7", "--json").stdout)
    assert (here["prediction"] or {}).get("route_type") != "LOCAL", here


def test_netns_refusals_name_the_input():
    r = _run("--netns", "no-such-ns-%s" % uuid.uuid4().hex[:6], "devices")
    assert r.returncode == 3 and "no network namespace" in r.stderr and "ip netns list" in r.stderr
    r = _run("--netns", "../etc", "devices")
    assert r.returncode == 3 and "--netns takes the name" in r.stderr
