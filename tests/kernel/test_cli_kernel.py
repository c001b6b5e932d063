"""The CLI against the real kernel (single topology: rxe0 on eth0 10.0.2.15/24)."""

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.kernel


def pyrdmacm(*args):
    r = subprocess.run([sys.executable, "-m", "pyrdmacm", *args], capture_output=True, text=True, timeout=120)
    return r.returncode, r.stdout, r.stderr


def test_resolve_own_address_with_route():
    code, out, err = pyrdmacm("resolve", "10.0.2.15", "--route", "--json")
    assert code == 0, err
    j = json.loads(out)
    k = j["kernel"]
    assert k["event"] == "ADDR_RESOLVED" and k["status"] == 0
    assert k["device"] == "rxe0" and k["port"] == 1
    assert k["src"].startswith("10.0.2.15:") and k["dst"] == "10.0.2.15"
    assert k["sgid"] == "::ffff:10.0.2.15"  # the RoCE v2 GID, dotted as inet_ntop writes it
    assert j["route"]["event"] == "ROUTE_RESOLVED" and j["route"]["paths"]
    assert j["prediction"]["src"] == "10.0.2.15"
    assert j["mismatches"] == []


def test_resolve_silent_destination_exits_1():
    code, out, _ = pyrdmacm("resolve", "10.0.2.200", "--timeout", "300", "--json")
    assert code == 1
    k = json.loads(out)["kernel"]
    assert k["event"] == "ADDR_ERROR" and k["status"] == -110 and k["status_name"] == "ETIMEDOUT"


def test_resolve_human_output():
    code, out, _ = pyrdmacm("resolve", "10.0.2.2")
    assert code == 0
    assert "ADDR_RESOLVED" in out and "rxe0" in out and "prediction agrees with the kernel" in out


def test_probe_reports_what_this_kernel_knows():
    code, out, err = pyrdmacm("probe", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["abi_version"] == 4
    cmds = j["commands"]
    for name in ("CREATE_ID", "RESOLVE_ADDR", "QUERY", "BIND", "JOIN_MCAST", "MIGRATE_ID"):
        assert cmds[name] == "yes", name
    assert cmds["GET_OPTION"] == "not implemented (ENOSYS)"
    major, minor = (int(x) for x in os.uname().release.split(".")[:2])
    newest = (major, minor) >= (6, 17)  # RESOLVE_IB_SERVICE and WRITE_CM_EVENT (abi/since.json)
    assert cmds["RESOLVE_IB_SERVICE"] == ("yes" if newest else "no")
    assert cmds["WRITE_CM_EVENT"] == ("yes" if newest else "no")
    assert j["netns_mode"] == "shared"


def test_progress_line_while_the_kernel_arps():
    code, out, err = pyrdmacm("resolve", "10.0.2.200", "--timeout", "1500", "--progress")
    assert code == 1 and "ADDR_ERROR" in out
    assert err.splitlines()[0] == "waiting for ADDR_RESOLVED from 10.0.2.200 ... 1.0 s / timeout 1.5 s"
