"""``--strict`` and the exit codes of the CLI on the lab's multihomed host.

eth3 (rxe3) and eth4 (rxe4) share 10.3.0.0/24: the pre-check warns that the
kernel's choice between them is ambiguous (ENOTUNIQ in strict mode).  eth5
(10.5.0.0/24) has no RDMA device: the pre-check is certain of ENODEV.
"""

import errno
import json
import subprocess
import sys

import pytest

#: the CLI's --strict rules are tested, on one kernel: the predictions they act on are checked
#: against every kernel by test_precheck_lab.py
pytestmark = pytest.mark.kernel(topology="multihomed", suites=("bookworm",))


def pyrdmacm(*args):
    r = subprocess.run([sys.executable, "-m", "pyrdmacm", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_route_warns_and_strict_refuses():
    code, out, _ = pyrdmacm("route", "10.3.0.2")
    assert code == 0 and "warning:" in out and "eth3" in out and "eth4" in out
    code, out, err = pyrdmacm("route", "10.3.0.2", "--strict")
    assert code == 2 and "strict pre-check" in err and "ENOTUNIQ" in err
    assert out.startswith("prediction:\n") and "warning: 2 RDMA netdevs" in out  # the prediction all the same
    code, out, _ = pyrdmacm("route", "10.3.0.2", "--strict", "--json")
    j = json.loads(out)
    assert code == 2 == j["exit"] and j["error"]["name"] == "ENOTUNIQ" and j["prediction"]["complete"] is True


def test_resolve_strict_sends_nothing_on_a_warning():
    code, out, _ = pyrdmacm("resolve", "10.3.0.2", "--json")
    j = json.loads(out)
    assert code == 0 and j["kernel"]["event"] == "ADDR_RESOLVED" and j["exit"] == 0
    assert any("subnet" in w for w in j["prediction"]["warnings"])
    code, out, err = pyrdmacm("resolve", "10.3.0.2", "--strict", "--json")
    j = json.loads(out)
    assert code == 2 and j["exit"] == 2 and "kernel" not in j
    assert j["prediction_error"]["errno"] == errno.ENOTUNIQ
    assert "nothing was sent to the kernel" in err


def test_no_rdma_device_for_the_egress_netdev_exits_4_everywhere():
    # the pre-check is sure of ENODEV; without --strict the kernel still decides (ADDR_ERROR -19);
    # route, resolve and resolve --strict all say 4: no RDMA device for this destination here
    code, out, _ = pyrdmacm("resolve", "10.5.0.2", "--json")
    j = json.loads(out)
    assert j["prediction_error"]["errno"] == errno.ENODEV
    assert j["kernel"]["event"] == "ADDR_ERROR" and j["kernel"]["status_name"] == "ENODEV"
    assert code == 4 == j["exit"]
    code, out, _ = pyrdmacm("resolve", "10.5.0.2", "--strict", "--json")
    assert code == 4 and "kernel" not in json.loads(out)
    code, out, err = pyrdmacm("route", "10.5.0.2", "--json")
    p = json.loads(out)["prediction"]
    assert code == 4 and [m["what"] for m in p["missing"]] == ["gid"] and p["missing"][0]["netdev"] == "eth5"
    assert (p["route_netdev"], p["src"], p["next_hop"]) == ("eth5", "10.5.0.15", "10.5.0.2")


def test_resolve_strict_without_warnings_resolves():
    code, out, _ = pyrdmacm("resolve", "10.1.0.2", "--strict", "--json")
    j = json.loads(out)
    assert code == 0 and j["kernel"]["event"] == "ADDR_RESOLVED" and j["kernel"]["device"] == "rxe1"
    assert j["prediction"]["warnings"] == [] and j["mismatches"] == []
