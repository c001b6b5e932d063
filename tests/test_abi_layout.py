"""The construct declarations against the compiler: sizes, offsets, enum values.

Ground truth is ``tools/abi_probe.py``: it compiles a probe of the uapi headers
with gcc.  The installed header is probed on every run (CI fails rather than
skips without gcc or the header); the committed layouts of the other Debian
suites (6.1, 6.12, 7.x) are checked too, so a declaration that only fits one
kernel fails here.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest
from construct import Array, Bytes, FormatField, Padded, Pass, Renamed, Struct, Union

from pyrdmacm.abi import structs as _structs
from pyrdmacm import abi

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tools"))
import abi_probe  # noqa: E402

SUITES = ("bullseye", "bookworm", "trixie", "sid")

#: Probe structs pyrdmacm does not declare on purpose, and why.
NOT_DECLARED = {
    "in_addr": "declared as Bytes(4) inside sockaddr_in",
    "in6_addr": "declared as Bytes(16) inside sockaddr_in6",
    "ib_addr": "declared as Bytes(16) inside sockaddr_ib",
    "ib_uverbs_qp_dest": "a verbs struct no rdma_cm command carries",
}


def construct_fields(con, prefix="", offset=0, out=None) -> Dict[str, Tuple[int, int, str]]:
    """dotted name -> (offset, size, kind) of a construct declaration, union arms included."""
    if out is None:
        out = {}
    if isinstance(con, Renamed):
        return construct_fields(con.subcon, prefix, offset, out)
    if isinstance(con, Struct):
        off = offset
        for sub in con.subcons:
            name = sub.name if isinstance(sub, Renamed) else None
            inner = sub.subcon if isinstance(sub, Renamed) else sub
            size = inner.sizeof()
            if name:
                dotted = prefix + "." + name if prefix else name
                kind = "bytes" if isinstance(inner, Bytes) else type(inner).__name__
                out[dotted] = (off, size, kind)
                construct_fields(inner, dotted, off, out)
            off += size
        return out
    if isinstance(con, Padded) and con.subcon is not Pass:
        return construct_fields(con.subcon, prefix, offset, out)
    if isinstance(con, Union):
        for sub in con.subcons:
            dotted = prefix + "." + sub.name
            inner = sub.subcon
            size = inner.sizeof()
            out[dotted] = (offset, size, type(inner).__name__)
            construct_fields(inner, dotted, offset, out)
        return out
    if isinstance(con, Array) and not isinstance(con.subcon, FormatField):
        step = con.subcon.sizeof()
        for i in range(con.count):
            construct_fields(con.subcon, "%s[%d]" % (prefix, i), offset + i * step, out)
    return out


def _probe_fields(layout, struct_name):
    return layout["structs"][struct_name]["fields"]


def _covered_by_blob(dotted: str, ours: Dict[str, Tuple[int, int, str]]) -> bool:
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        parent = ".".join(parts[:i])
        if parent in ours and ours[parent][2] in ("bytes", "Array", "FormatField"):
            return True
    return False


def _probe_name(dotted: str) -> str:
    # the probe writes arrays of structs as one member; our declaration unrolls them
    return dotted


def check_layout(layout) -> list:
    problems = []
    structs = layout["structs"]
    version = abi_probe.parse_version(layout["linux_version"])
    for name, con in _structs.STRUCTS.items():
        if name not in structs:
            # must be newer than this header: since.json says so
            since = abi_probe_since().get("structs", {}).get(name, {}).get("since", "")
            lo, _hi = abi_probe.since_bounds(since) if since else (None, (0,))
            if lo is None or lo <= version:
                problems.append("%s: declared but absent from the %s header (since %r)" % (name, layout["suite"], since))
            continue
        if con.sizeof() != structs[name]["size"]:
            problems.append("%s: sizeof %d, compiler says %d" % (name, con.sizeof(), structs[name]["size"]))
        ours = construct_fields(con)
        for dotted, f in structs[name]["fields"].items():
            if f.get("flexible"):
                continue
            if dotted.split(".")[-1] == "__align":
                continue  # an alignment member of the union, no bytes of its own
            if dotted in ours:
                off, size, _kind = ours[dotted]
                if (off, size) != (f["offset"], f["size"]):
                    problems.append(
                        "%s.%s: offset/size %d/%d, compiler says %d/%d" % (name, dotted, off, size, f["offset"], f["size"])
                    )
            elif not _covered_by_blob(dotted, ours) and not _is_padding(dotted, f, ours):
                problems.append("%s.%s: in the header, not declared" % (name, dotted))
    for name in structs:
        if name not in _structs.STRUCTS and name not in NOT_DECLARED:
            problems.append("%s: in the header, not declared" % name)
    return problems


def _is_padding(dotted, f, ours) -> bool:
    # sockaddr_in's __pad is our sin_zero; element-wise names of unrolled arrays
    return dotted.endswith("__pad") and any(o[0] == f["offset"] and o[1] == f["size"] for o in ours.values())


_SINCE = None


def abi_probe_since():
    global _SINCE
    if _SINCE is None:
        import json

        _SINCE = json.loads((REPO / "abi" / "since.json").read_text())
    return _SINCE


@pytest.mark.parametrize("suite", SUITES)
def test_declarations_match_committed_layout(suite):
    assert check_layout(abi_probe.load_layout(suite)) == []


def test_declarations_match_installed_header():
    """Compiles the probe against the header installed on this machine, every run."""
    try:
        layout = abi_probe.installed_layout()
    except Exception as e:  # pragma: no cover - environment
        if os.environ.get("CI"):
            pytest.fail("cannot probe the installed uapi headers (gcc and linux-libc-dev needed): %s" % e)
        pytest.skip("cannot probe the installed uapi headers: %s" % e)
    assert layout["structs"]["rdma_ucm_event_resp"]["size"] == 336
    assert check_layout(layout) == []


ENUMS = {
    "RDMA_USER_CM_CMD_": abi.UserCmCmd,
    "RDMA_PS_": abi.PortSpace,
    "RDMA_USER_CM_QUERY_": abi.QueryOption,
    "RDMA_OPTION_ID_": abi.OptionId,
    "RDMA_OPTION_IB_": abi.OptionIb,
    "RDMA_MC_JOIN_FLAG_": abi.McJoinFlag,
    "RDMA_USER_CM_IB_SERVICE_FLAG_": abi.IbServiceFlag,
    "IB_PATH_": abi.IbPathFlag,
}


@pytest.mark.parametrize("suite", SUITES)
def test_enum_values_match_header(suite):
    layout = abi_probe.load_layout(suite)
    seen = 0
    for cname, entry in layout["enums"].items():
        if cname in ("RDMA_OPTION_ID", "RDMA_OPTION_IB"):
            assert abi.OptionLevel[cname[len("RDMA_OPTION_"):]] == entry["value"]
            seen += 1
            continue
        for prefix, enum in sorted(ENUMS.items(), key=lambda kv: -len(kv[0])):
            if cname.startswith(prefix):
                assert enum[cname[len(prefix):]] == entry["value"], cname
                seen += 1
                break
        else:
            pytest.fail("enum constant %s of the header has no pyrdmacm enum" % cname)
    assert seen >= 40
    assert layout["defines"]["RDMA_USER_CM_ABI_VERSION"]["value"] == abi.RDMA_USER_CM_ABI_VERSION
    assert layout["defines"]["RDMA_MAX_PRIVATE_DATA"]["value"] == abi.RDMA_MAX_PRIVATE_DATA
    assert layout["defines"]["AF_IB"]["value"] == abi.AF_IB


def test_every_enum_member_exists_in_newest_header():
    layout = abi_probe.load_layout("sid")
    for prefix, enum in ENUMS.items():
        for member in enum:
            assert prefix + member.name in layout["enums"], prefix + member.name


def test_network_order_fields_are_big_endian_in_declarations():
    """Every __be* field of the header, and the ones known to arrive in network order, decode big-endian."""
    layout = abi_probe.load_layout("sid")
    since = abi_probe_since()
    for entry in since["network_order_fields"]:
        sname, _, dotted = entry["field"].partition(".") if isinstance(entry, dict) else entry.partition(".")
        con = _structs.STRUCTS.get(sname)
        if con is None:
            continue
        node = con
        for part in dotted.split("."):
            part = part.split("[")[0]
            sub = {s.name: s.subcon for s in node.subcons if isinstance(s, Renamed)}.get(part)
            if sub is None:
                node = None
                break
            node = sub
            while isinstance(node, (Padded, Renamed)) and not isinstance(node, Struct):
                node = node.subcon
        if node is None or isinstance(node, (Bytes, Union)):
            continue  # a byte array or a union arm: no integer byte order to get wrong
        if isinstance(node, Array):
            node = node.subcon
        if isinstance(node, FormatField) and node.sizeof() > 1:
            assert node.fmtstr.startswith(">"), entry
    for sname, field in _structs.NETWORK_ORDER_DESPITE_TYPE:
        f = construct_fields(_structs.STRUCTS[sname])[field]
        assert layout["structs"][sname]["fields"][field]["size"] == f[1]


def test_sizes_used_by_librdmacm():
    """The sizes librdmacm 44 writes (abi-notes section 0) equal our declarations."""
    s = {n: c.sizeof() for n, c in _structs.STRUCTS.items()}
    assert s["rdma_ucm_create_id"] == 24 and s["rdma_ucm_create_id_resp"] == 4
    assert s["rdma_ucm_resolve_addr"] == 272
    assert s["rdma_ucm_event_resp"] == 336 and s["rdma_ucm_get_event"] == 8
    assert s["rdma_ucm_query"] == 16 and s["rdma_ucm_query_addr_resp"] == 280
    assert s["rdma_ucm_query_path_resp"] + 6 * s["ib_path_rec_data"] == 440
    assert s["rdma_ucm_resolve_route"] == 8
    assert s["rdma_ucm_destroy_id"] == 16 and s["rdma_ucm_destroy_id_resp"] == 4
    assert s["rdma_ucm_bind"] == 136
    assert _structs.MIN_REPLY == {
        "rdma_ucm_event_resp": 324,
        "rdma_ucm_query_addr_resp": 272,
        "rdma_ucm_query_route_resp": 200,
    }
