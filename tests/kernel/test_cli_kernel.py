"""The CLI against the real kernel (single topology: rxe0 on eth0 10.0.2.15/24)."""

import json
from pathlib import Path
import os
import subprocess
import sys

import pytest

# The command line over the lab's oldest and newest kernels: each test starts the program
# (8-10 s under emulation), and what it prints depends on the library, which the behavioural
# suites check on every kernel.
pytestmark = pytest.mark.kernel(suites=("bullseye", "sid"))


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
    # abi/since.json's "lab" record of the newest commands is what this very check measures:
    # a kernel series it does not name is one to add there
    series = ".".join(os.uname().release.split(".")[:2])
    since = json.loads((Path(__file__).resolve().parents[2] / "abi" / "since.json").read_text())
    for name in ("RESOLVE_IB_SERVICE", "WRITE_CM_EVENT"):
        lab = since["commands"]["RDMA_USER_CM_CMD_" + name]["lab"]
        assert series in lab["present"] + lab["absent"], "record %s on %s in abi/since.json" % (name, series)
        assert cmds[name] == ("yes" if series in lab["present"] else "no"), (name, series, cmds[name])
    assert j["netns_mode"] == "shared"
    assert j["open"] is True and j["errors"] == {} and (j["schema"], j["exit"]) == (1, 0)


def test_progress_line_while_the_kernel_arps():
    code, out, err = pyrdmacm("resolve", "10.0.2.200", "--timeout", "1500", "--progress")
    assert code == 1 and "ADDR_ERROR" in out
    assert err.splitlines()[0] == "waiting for ADDR_RESOLVED from 10.0.2.200 ... 1.0 s / timeout 1.5 s"


def test_path_record_fields_named_and_the_mtu_devices_predicts():
    code, out, err = pyrdmacm("resolve", "10.0.2.2", "--route", "--json")
    assert code == 0, err
    j = json.loads(out)
    k, path = j["kernel"], j["route"]["paths"][0]
    with open("/sys/class/net/eth0/mtu") as f:
        netdev_mtu = int(f.read())
    from pyrdmacm.devices import roce_path_mtu

    # the kernel's path record MTU is iboe_get_mtu() of eth0's MTU, in bytes here
    assert path["mtu"] == roce_path_mtu(netdev_mtu) == 128 << path["mtu_code"]
    assert path["pkey"] == "0xffff" and k["pkey"] == "0x0000"  # RoCE: the path's default, QUERY ADDR's none
    code, out, _ = pyrdmacm("devices", "--json")
    rxe = next(d for d in json.loads(out)["devices"] if d["name"] == "rxe0")
    assert rxe["node_guid"] == k["node_guid"] and len(k["node_guid"]) == 19 and k["node_guid"].count(":") == 3
    assert rxe["ports"][0]["path_mtu"] == path["mtu"]
    code, out, _ = pyrdmacm("resolve", "10.0.2.2", "--route")
    assert "  pkey         0x0000 (none: RoCE and iWARP have no partitions)" in out
    assert "    pkey 0xffff (the default partition, full member) mtu %d rate " % path["mtu"] in out
    assert "  node_guid    %s" % k["node_guid"] in out


def test_route_is_complete_where_rdma_is_and_takes_every_form():
    for dst in ("10.0.2.2", "10.0.2.2:7471", "10.0.2.15:1"):
        code, out, err = pyrdmacm("route", dst, "--json")
        j = json.loads(out)
        assert code == 0 == j["exit"], (dst, err)
        p = j["prediction"]
        assert p["complete"] is True and p["missing"] == [] and p["device"] == "rxe0"
    code, out, _ = pyrdmacm("route", "localhost", "--json")  # a name: getaddrinfo's first answer
    j = json.loads(out)
    assert code == 0 and j["names"][0].startswith("localhost is ") and j["prediction"]["device"] == "rxe0"


def test_resolve_neighbour_first_answers_a_cold_resolve_at_once():
    """With the gateway's entry flushed, --neighbour-first solicits it (the pre-check names
    it as the next hop) and RESOLVE_ADDR then answers in milliseconds, not at its timeout."""
    subprocess.run(["ip", "neigh", "flush", "dev", "eth0"], check=True)
    code, out, err = pyrdmacm("resolve", "10.0.2.2", "--timeout", "3000", "--neighbour-first", "--json")
    assert code == 0, err
    j = json.loads(out)
    nf, k = j["neighbour_first"], j["kernel"]
    assert nf["done"] is True and nf["next_hop"] == "10.0.2.2", nf
    assert nf["state"] in ("REACHABLE", "STALE", "DELAY"), nf
    assert k["event"] == "ADDR_RESOLVED" and k["ms"] < 1000 and k["at_timeout"] is False, k
    # the entry is valid now: a second run has nothing to solicit
    code, out, err = pyrdmacm("resolve", "10.0.2.2", "--neighbour-first", "--json")
    assert code == 0 and json.loads(out)["neighbour_first"]["done"] is False, out
