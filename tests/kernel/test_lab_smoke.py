"""Facts of the kernel lab's guests that the rest of the kernel tier relies on.

Standard library only: these tests check the lab, not pyrdmacm.
"""

import errno
import json
import os
import socket
import stat
import struct
import subprocess
import time

import pytest

#: where the multihomed topology boots: the kernels its tests run on (test_precheck_lab,
#: test_cli_strict_lab, the parity rows)
MULTIHOMED_SUITES = ("bullseye", "bookworm", "sid")

RDMA_CM = "/dev/infiniband/rdma_cm"
# struct rdma_ucm_cmd_hdr { __u32 cmd; __u16 in; __u16 out; }
CMD_HDR = struct.Struct("<IHH")
# RDMA_USER_CM_CMD_GET_OPTION: a command number with no handler in the kernel's table.
RDMA_USER_CM_CMD_GET_OPTION = 13


def lab_topology() -> dict:
    path = os.environ.get("PYRDMACM_LAB_TOPOLOGY")
    if not path:
        pytest.skip("needs the kernel lab's topology description ($PYRDMACM_LAB_TOPOLOGY)")
    with open(path) as f:
        return json.load(f)


def run_json(*argv: str):
    return json.loads(subprocess.run(argv, check=True, capture_output=True, text=True).stdout)


@pytest.mark.kernel
def test_rdma_cm_is_a_character_device_anyone_may_open():
    st = os.stat(RDMA_CM)
    assert stat.S_ISCHR(st.st_mode)
    assert stat.S_IMODE(st.st_mode) == 0o666


@pytest.mark.kernel
def test_ucma_abi_version_is_4():
    with open("/sys/class/misc/rdma_cm/abi_version") as f:
        assert f.read().strip() == "4"


@pytest.mark.kernel
def test_rxe0_on_eth0_is_active():
    assert lab_topology()["netdevs"]["eth0"]["rxe"] == "rxe0"
    with open("/sys/class/infiniband/rxe0/ports/1/state") as f:
        assert f.read().strip() == "4: ACTIVE"
    with open("/sys/class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0") as f:
        assert f.read().strip() == "eth0"


@pytest.mark.kernel
def test_command_without_handler_fails_with_enosys():
    fd = os.open(RDMA_CM, os.O_RDWR)
    try:
        with pytest.raises(OSError) as raised:
            os.write(fd, CMD_HDR.pack(RDMA_USER_CM_CMD_GET_OPTION, 0, 0))
        assert raised.value.errno == errno.ENOSYS
    finally:
        os.close(fd)


@pytest.mark.kernel
def test_write_shorter_than_the_header_fails_with_einval():
    fd = os.open(RDMA_CM, os.O_RDWR)
    try:
        with pytest.raises(OSError) as raised:
            os.write(fd, CMD_HDR.pack(RDMA_USER_CM_CMD_GET_OPTION, 0, 0)[:4])
        assert raised.value.errno == errno.EINVAL
    finally:
        os.close(fd)


@pytest.mark.kernel
def test_ipv6_gateway_answers_neighbour_discovery():
    eth0 = lab_topology()["netdevs"]["eth0"]
    with socket.socket(socket.AF_INET6, socket.SOCK_DGRAM) as s:
        s.connect((eth0["gateway6"], 9))  # resolving the route is enough; send to start ND
        s.send(b"x")
    for _ in range(50):
        neighbours = run_json("ip", "-j", "-6", "neigh", "show", eth0["gateway6"])
        if neighbours and "lladdr" in neighbours[0]:
            break
        time.sleep(0.1)
    assert neighbours and "lladdr" in neighbours[0], neighbours


@pytest.mark.kernel(topology="pair")
def test_peer_answers_and_is_in_the_arp_cache():
    peer = lab_topology()["peer"]
    socket.create_connection((peer["ipv4"], peer["ready_port"]), timeout=5).close()
    with open("/proc/net/arp") as f:
        entries = [line.split() for line in f.read().splitlines()[1:]]
    ATF_COM = 0x2  # completed entry
    [entry] = [e for e in entries if e[0] == peer["ipv4"]]
    assert entry[3] == peer["mac"]
    assert int(entry[2], 16) & ATF_COM


@pytest.mark.kernel(topology="pair")
def test_both_ends_of_the_pair_have_rxe0():
    topology = lab_topology()
    assert topology["netdevs"]["eth0"]["rxe"] == "rxe0"
    links = run_json("rdma", "-j", "link", "show")
    assert [(l["ifname"], l.get("netdev")) for l in links] == [("rxe0", "eth0")]


@pytest.mark.kernel(topology="multihomed", suites=MULTIHOMED_SUITES)
def test_topology_json_matches_rdma_link():
    netdevs = lab_topology()["netdevs"]
    links = {l["ifname"]: l for l in run_json("rdma", "-j", "link", "show")}
    expected = {d["rxe"]: name for name, d in netdevs.items() if d["rxe"] and not d["netns"]}
    # rdma link shows the netdev of a device only to its own network namespace
    shown = {l["ifname"]: l.get("netdev") for l in links.values() if l.get("netdev")}
    assert shown == expected
    assert all(links[rxe]["state"] == "ACTIVE" for rxe in expected)
    assert netdevs["eth5"]["rxe"] is None
    assert netdevs["eth3"]["subnet"] == netdevs["eth4"]["subnet"]
    for name, dev in netdevs.items():
        if dev["netns"] and dev["rxe"]:
            inner = run_json("ip", "netns", "exec", dev["netns"], "rdma", "-j", "link", "show")
            assert {l["ifname"]: l.get("netdev") for l in inner}[dev["rxe"]] == name


@pytest.mark.kernel(topology="multihomed", suites=MULTIHOMED_SUITES)
def test_topology_json_matches_the_addresses():
    netdevs = lab_topology()["netdevs"]
    addresses = {
        link["ifname"]: {f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"]}
        for link in run_json("ip", "-j", "addr", "show")
    }
    for name, dev in netdevs.items():
        if not dev["netns"]:
            assert dev["ipv4"] in addresses[name], name
