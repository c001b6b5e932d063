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

pytestmark = pytest.mark.kernel(topology="multihomed")


def pyrdmacm(*args):
    r = subprocess.run([sys.executable, "-m", "pyrdmacm", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_route_warns_and_strict_refuses():
    code, out, _ = pyrdmacm("route", "10.3.0.2")
    assert code == 0 and "warning:" in out and "eth3" in out and "eth4" in out
    code, out, err = pyrdmacm("route", "10.3.0.2", "--strict")
    assert code == 2 and "strict pre-check" in err and "ENOTUNIQ" in err and out == ""
    code, out, _ = pyrdmacm("route", "10.3.0.2", "--strict", "--json")
    assert code == 2 and json.loads(out)["error"]["name"] == "ENOTUNIQ"


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


def test_resolve_certain_refusal_asks_the_kernel_unless_strict():
    # the pre-check is sure of ENODEV; without --strict the kernel still decides (ADDR_ERROR -19)
    code, out, _ = pyrdmacm("resolve", "10.5.0.2", "--json")
    j = json.loads(out)
    assert j["prediction_error"]["errno"] == errno.ENODEV
    assert j["kernel"]["event"] == "ADDR_ERROR" and j["kernel"]["status_name"] == "ENODEV"
    assert code == 1
    code, out, _ = pyrdmacm("resolve", "10.5.0.2", "--strict", "--json")
    assert code == 2 and "kernel" not in json.loads(out)


def test_resolve_strict_without_warnings_resolves():
    code, out, _ = pyrdmacm("resolve", "10.1.0.2", "--strict", "--json")
    j = json.loads(out)
    assert code == 0 and j["kernel"]["event"] == "ADDR_RESOLVED" and j["kernel"]["device"] == "rxe1"
    assert j["prediction"]["warnings"] == [] and j["mismatches"] == []
