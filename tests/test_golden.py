"""Golden vectors: real bytes from librdmacm and from the kernel (abi/golden/, by tools/golden).

For every kernel of the lab, abi/golden/SUITE.json holds what librdmacm wrote to
rdma_cm (its start-up probe and a resolve-route-destroy scenario) and the reply buffers
the kernel wrote back to pyrdmacm, with facts read from sysfs at capture time.  Here,
on any host:

* librdmacm's commands have the sizes the ABI prescribes, pyrdmacm's command headers
  are librdmacm's byte for byte, every body survives construct and the derived codec
  unchanged, and every socket address pyrdmacm builds from what it decodes is
  librdmacm's exact 128 bytes: together, pyrdmacm writes what librdmacm writes;
* the kernel's replies decode the same through construct and through the codec, and
  decode to the facts: the events waited for, the addresses of the topology, the
  device's node GUID from sysfs (a field that arrives in network order).
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path

import pytest

from pyrdmacm.abi import structs as _structs
from pyrdmacm import abi, decode
from pyrdmacm.wire import COMMAND
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.addr import unpack_sockaddr

GOLDEN = sorted((Path(__file__).resolve().parent.parent / "abi" / "golden").glob("*.json"))


def load(path):
    return json.loads(path.read_text())


def librdmacm_vectors(path, phase=None):
    data = load(path)
    for v in data["vectors"]:
        if v["source"] == "librdmacm" and (phase is None or v["phase"].startswith(phase)):
            yield bytes.fromhex(v["hex"]), v


def kernel_vectors(path):
    for v in load(path)["vectors"]:
        if v["source"] == "kernel":
            yield bytes.fromhex(v["hex"]), v


def test_every_kernel_of_the_lab_has_golden_vectors():
    assert [p.stem for p in GOLDEN] == ["bookworm", "sid", "trixie"]


# The sizes of abi-notes.md and of the ABI issue: (command, QUERY option) -> (in, out, written)
SIZES = {
    ("CREATE_ID", None): (24, 4, 32),
    ("RESOLVE_ADDR", None): (272, 0, 280),
    ("GET_EVENT", None): (8, 336, 16),
    ("QUERY", "ADDR"): (16, 280, 24),
    ("QUERY", "GID"): (16, 280, 24),
    ("QUERY", "PATH"): (16, 440, 24),
    ("RESOLVE_ROUTE", None): (8, 0, 16),
    ("DESTROY_ID", None): (16, 4, 24),
    ("BIND", None): (136, 0, 144),
}

HEADERS = {
    ("CREATE_ID", None): COMMAND["CREATE_ID"].header,
    ("RESOLVE_ADDR", None): COMMAND["RESOLVE_ADDR"].header,
    ("GET_EVENT", None): COMMAND["GET_EVENT"].header,
    ("QUERY", "ADDR"): COMMAND["QUERY_ADDR"].header,
    ("QUERY", "GID"): COMMAND["QUERY_ADDR"].header,
    ("QUERY", "PATH"): COMMAND["QUERY_PATH"].header,
    ("RESOLVE_ROUTE", None): COMMAND["RESOLVE_ROUTE"].header,
    ("DESTROY_ID", None): COMMAND["DESTROY_ID"].header,
    ("BIND", None): COMMAND["BIND"].header,
}


def key_of(cmd):
    return cmd["cmd"], cmd["body"].get("option") if cmd["cmd"] == "QUERY" else None


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_librdmacm_commands_have_the_abi_sizes_and_pyrdmacm_headers(path):
    seen = set()
    for data, v in librdmacm_vectors(path):
        cmd = decode.decode_command(data)
        key = key_of(cmd)
        assert (cmd["in"], cmd["out"], len(data)) == SIZES[key], (key, v)
        assert data[:8] == HEADERS[key], "pyrdmacm's %s header differs from librdmacm's" % (key,)
        assert v["result"] == len(data), "the kernel accepted librdmacm's %s whole" % (key,)
        seen.add(key)
    assert seen == set(SIZES), "a command of the scenario is missing from the capture"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_librdmacm_bodies_round_trip_through_construct_and_the_codec(path):
    for data, _v in librdmacm_vectors(path):
        cmd = decode.decode_command(data)
        body = data[8:]
        con = _structs.STRUCTS[cmd["struct"]]
        assert con.build(con.parse(body)) == body
        codec = CODECS[cmd["struct"]]
        assert codec.pack(*codec.unpack(body)) == body


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_pyrdmacm_builds_librdmacm_socket_addresses_exactly(path):
    checked = 0
    for data, _v in librdmacm_vectors(path):
        cmd = decode.decode_command(data)
        if cmd["cmd"] not in ("RESOLVE_ADDR", "BIND"):
            continue
        codec = CODECS[cmd["struct"]]
        fields = codec.unpack_dict(data, 8)
        for name in ("src_addr", "dst_addr", "addr"):
            raw = fields.get(name)
            if raw is None or not any(raw):
                continue
            addr = unpack_sockaddr(raw)
            assert addr.pack_storage() == raw, (cmd["cmd"], name, str(addr))
            checked += 1
    assert checked >= 2  # the scenario's destination and the probe's AF_IB address


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_librdmacm_scenario_fields(path):
    cmds = [decode.decode_command(d) for d, _ in librdmacm_vectors(path, "scenario")]
    assert [key_of(c) for c in cmds] == [
        ("CREATE_ID", None), ("RESOLVE_ADDR", None), ("GET_EVENT", None), ("QUERY", "ADDR"), ("QUERY", "GID"),
        ("RESOLVE_ROUTE", None), ("GET_EVENT", None), ("QUERY", "PATH"), ("DESTROY_ID", None),
    ]
    create, resolve = cmds[0]["body"], cmds[1]["body"]
    assert (create["ps"], create["qp_type"]) == ("TCP", "RC")
    assert resolve["dst_addr"] == "10.0.2.2" and resolve["src_size"] == 0 and resolve["timeout_ms"] == 2000
    assert resolve["dst_size"] == 16 and resolve["reserved"] == 0
    probe = [decode.decode_command(d) for d, _ in librdmacm_vectors(path, "start-up")]
    assert probe[0]["body"]["ps"] == "IB" and probe[1]["cmd"] == "BIND"
    assert probe[1]["body"]["addr_size"] == 48  # sizeof(struct sockaddr_ib)


def _guid(text):
    return int(text.replace(":", ""), 16)


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_kernel_replies_decode_to_the_facts(path):
    data = load(path)
    facts = data["facts"]
    mapped = {ipaddress.IPv6Address("::ffff:" + facts[k]) for k in ("local", "gateway")}
    events, queries, destroyed = [], {}, []
    for raw, v in kernel_vectors(path):
        kind = v["command"]
        name = decode.REPLY_KINDS[kind]
        codec = CODECS[name]
        fixed = raw[: codec.size]
        con = _structs.STRUCTS[name]
        assert con.build(con.parse(fixed)) == fixed
        assert codec.pack(*codec.unpack(fixed)) == fixed
        fields = codec.unpack_dict(fixed)
        if kind == "GET_EVENT":
            ev = abi.CmEventType(fields["event"])
            status = fields["status"] - (1 << 32) if fields["status"] & 0x80000000 else fields["status"]
            events.append((ev.name, status))
            assert ev.name == v["event"]
        elif kind == "DESTROY_ID":
            destroyed.append(fields["events_reported"])
        else:
            queries[kind] = (fields, raw)
    assert events == [("ADDR_RESOLVED", 0), ("ROUTE_RESOLVED", 0), ("ADDR_ERROR", -110)]
    assert destroyed == [2, 1]  # events read for each id before DESTROY_ID

    addr, _ = queries["QUERY:ADDR"]
    assert str(unpack_sockaddr(addr["src_addr"]).ip) == facts["local"]
    assert str(unpack_sockaddr(addr["dst_addr"]).ip) == facts["gateway"]
    assert addr["node_guid"] == _guid(facts["node_guid"])  # arrives in network order
    assert addr["port_num"] == 1 and addr["ibdev_index"] == 0

    gid, _ = queries["QUERY:GID"]
    src, dst = unpack_sockaddr(gid["src_addr"]), unpack_sockaddr(gid["dst_addr"])
    assert {src.ip, dst.ip} == mapped  # RoCE v2 GIDs of IPv4 addresses

    path_hdr, raw = queries["QUERY:PATH"]
    assert path_hdr["num_paths"] == 1
    rec = decode.decode_reply("QUERY:PATH", raw)["reply"]["path_data"][0]
    F = abi.IbPathFlag
    assert rec["flags"] == F.GMP | F.PRIMARY | F.BIDIRECTIONAL  # what the kernel reports for a resolved route


def test_decode_reads_strace_lines_with_fd_paths():
    line = ('write(5<\\x2f\\x64\\x65\\x76>, "\\x0c\\x00\\x00\\x00\\x08\\x00\\x50\\x01'
            '\\x90\\x0f\\x5e\\x7a\\xfc\\x7f\\x00\\x00", 16) = 16')
    assert decode.decode_command(decode.parse_input(line))["cmd"] == "GET_EVENT"
