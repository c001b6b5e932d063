"""tools/abi_probe.py: the recorded uAPI layouts are what the compiler says, and agree with since.json.

One gcc run per session (the installed header); everything else is pure.  Without gcc or the
installed kernel headers the probe test skips, except under CI (env CI set), where it fails.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "tools") not in sys.path:
    sys.path.insert(0, str(REPO / "tools"))

import abi_probe  # noqa: E402


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the ABI probe: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def committed():
    return {suite: abi_probe.load_layout(suite) for suite in abi_probe.SUITES}


# (a) the installed header, measured now, equals the committed layout of its kernel series


def test_installed_header_matches_committed_layout():
    try:
        installed = abi_probe.installed_layout()
    except abi_probe.ProbeUnavailable as exc:
        _unavailable(str(exc))
    suite = abi_probe.matching_suite(installed)
    if suite is None:
        pytest.skip(
            f"installed headers are Linux {installed['linux_version']}; no committed layout of that series "
            f"(add its Debian suite to abi_probe.SUITES and run tools/abi_probe.py fetch && write)"
        )
    expected = abi_probe.load_layout(suite)
    common = set(installed["headers"]) & set(expected["headers"])
    assert {h.path for h in abi_probe.HEADERS if not h.optional} <= common

    def restrict(layout):
        return {
            section: {k: v for k, v in layout[section].items() if v["header"] in common}
            for section in ("structs", "enums", "defines")
        }

    assert installed["arch"] == expected["arch"]
    changes = abi_probe.diff(restrict(expected), restrict(installed))
    assert not changes, f"installed Linux {installed['linux_version']} differs from {suite}.json:\n" + "\n".join(
        changes
    )
    assert restrict(installed) == restrict(expected)


# (b) committed data is consistent


def test_committed_layouts_are_the_expected_series(committed):
    for suite, layout in committed.items():
        assert layout["suite"] == suite
        assert layout["schema"] == abi_probe.SCHEMA
        expected = abi_probe.SUITES[suite]
        if expected is not None:
            assert abi_probe.series(layout) == expected


def test_since_is_consistent_with_every_layout(committed):
    since = json.loads(abi_probe.SINCE_PATH.read_text())
    assert abi_probe.check_since(committed, since) == []


def test_since_is_what_the_tool_generates(committed):
    since = json.loads(abi_probe.SINCE_PATH.read_text())
    assert since == json.loads(json.dumps(abi_probe.build_since(committed)))


def test_check_since_catches_a_date_the_headers_contradict(committed):
    since = json.loads(abi_probe.SINCE_PATH.read_text())
    since["commands"]["RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE"]["since"] = "6.1"  # absent from 6.1 and 6.12
    since["fields"]["rdma_ucm_event_resp.ece"]["since"] = "7.2"  # present in 6.1
    del since["structs"]["rdma_ucm_cmd_hdr"]
    problems = "\n".join(abi_probe.check_since(committed, since))
    assert "RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE is absent from bookworm" in problems
    assert "rdma_ucm_event_resp.ece is in bookworm" in problems
    assert "rdma_ucm_cmd_hdr (in sid) has no since entry" in problems


@pytest.mark.parametrize("suite", list(abi_probe.SUITES))
def test_layouts_have_the_sizes_the_kernel_checks(committed, suite):
    """A few sizes and offsets the kernel's ucma.c relies on (abi-notes §0), as a smoke test of the tool."""
    s = committed[suite]["structs"]
    assert s["rdma_ucm_cmd_hdr"]["size"] == 8
    event = s["rdma_ucm_event_resp"]
    assert (event["size"], event["fields"]["param"]["offset"], event["fields"]["reserved"]["offset"]) == (336, 20, 324)
    assert event["fields"]["param.conn.private_data"] == {
        "count": 256, "declared_in": "rdma_ucm_conn_param", "elem_size": 1, "offset": 28, "size": 256, "type": "__u8"
    }
    assert s["rdma_ucm_resolve_addr"]["fields"]["dst_addr"]["offset"] == 144
    assert s["rdma_ucm_query_addr_resp"]["fields"]["ibdev_index"]["offset"] == 272
    assert s["rdma_ucm_query_path_resp"]["fields"]["path_data"]["flexible"] is True
    assert s["__kernel_sockaddr_storage"]["size"] == 128
    assert s["sockaddr_ib"]["size"] == 48 and s["sockaddr_ib"]["fields"]["sib_sid"]["be"] is True
    assert s["ib_user_path_rec"]["fields"]["dlid"]["be"] is True
    assert committed[suite]["enums"]["RDMA_PS_TCP"]["value"] == 0x0106
    assert committed[suite]["defines"]["RDMA_USER_CM_ABI_VERSION"]["value"] == 4


# (c) the parser on synthetic headers (no compiler)

SNIPPET = r"""
#ifndef SNIPPET_H
#define SNIPPET_H
#define N_ITEMS 4  /* a comment */
#define SHIFTED (N_ITEMS << 2)
#define NOT_A_NUMBER in6_u.u6_addr8
#define LOOKS_LIKE_FN(x) ((x) + 1)
typedef unsigned long long my_u64;
struct inner {
	unsigned char a[N_ITEMS];
	unsigned short int b, c;
};
enum { A, B = 5, C, D = (1 << 3) | B, };
enum color { RED = 1 };
static inline int helper(const struct inner *p)
{
	struct inner copy = *p;
	return copy.a[0] + (int){ 0 };
}
struct outer {
	my_u64 id __attribute__((aligned(8)));
	union {
		struct inner in;
		unsigned int raw[2][3];
	} u;
	union {
		unsigned int x;
		struct {
			__be16 lo;
			__u16 hi;
		};
	};
	__be32 addr;
	void *ptr;
	char pad[8 - sizeof(short)];
	struct inner tail[];
} __attribute__((packed));
#endif
"""


def test_parser_reads_aggregates_members_and_types():
    parse = abi_probe.parse_text(SNIPPET, header="snippet.h")
    assert sorted(parse.aggregates) == ["inner", "outer"]
    inner = parse.aggregates["inner"]
    assert [(m.name, m.type, m.dims) for m in inner.members] == [
        ("a", "unsigned char", ("N_ITEMS",)),
        ("b", "unsigned short int", ()),
        ("c", "unsigned short int", ()),
    ]
    outer = parse.aggregates["outer"]
    assert outer.header == "snippet.h"
    assert [m.name for m in outer.members] == ["id", "u", None, "addr", "ptr", "pad", "tail"]
    assert outer.members[4].type == "void *"
    assert outer.members[5].dims == ("8 - sizeof ( short )",)
    assert outer.members[6].dims == ("",)


def test_flatten_gives_dotted_paths_through_unions_and_named_types():
    parse = abi_probe.parse_text(SNIPPET)
    fields = {f.path: f for f in abi_probe.flatten(parse.aggregates["outer"], parse.aggregates)}
    assert list(fields) == [
        "id", "u", "u.in", "u.in.a", "u.in.b", "u.in.c", "u.raw", "x", "lo", "hi", "addr", "ptr", "pad", "tail",
    ]
    assert fields["u"].type == "union" and fields["u"].declared_in is None
    assert fields["u.in.b"].declared_in == "inner"
    assert fields["u.raw"].dims == ("2", "3")
    assert fields["lo"].be and fields["addr"].be and not fields["hi"].be
    assert fields["lo"].declared_in is None  # anonymous members belong to the outer struct


def test_enums_and_integer_defines():
    parse = abi_probe.parse_text(SNIPPET)
    assert [(e.name, e.expr, e.enum) for e in parse.enums] == [
        ("A", None, None), ("B", "5", None), ("C", None, None), ("D", "( 1 << 3 ) | B", None), ("RED", "1", "color"),
    ]
    assert "LOOKS_LIKE_FN" not in parse.defines
    names = ["SNIPPET_H", "N_ITEMS", "SHIFTED", "NOT_A_NUMBER"]
    assert abi_probe.integer_defines(parse.defines, names) == ["N_ITEMS", "SHIFTED"]


def test_probe_source_measures_every_path():
    parse = abi_probe.parse_text(SNIPPET, header="snippet.h")
    spec = abi_probe.HeaderSpec("snippet.h", enums=True, defines=True)
    source = abi_probe.probe_source(parse, [spec])
    assert "#include <snippet.h>" in source
    assert "offsetof(struct outer, u.in.b)" in source
    assert "sizeof(((struct outer *)0)->u.raw[0][0])" in source  # element size of a 2-D array
    assert "sizeof(((struct outer *)0)->tail)" not in source  # flexible: no sizeof
    assert 'P("enum:D", D);' in source and 'P("define:SHIFTED", SHIFTED);' in source


def test_gcc_preprocessed_input_is_split_by_file():
    text = '# 1 "/x/other.h" 1\nstruct skipped { int a; };\n# 1 "/x/rdma/wanted.h" 1\nstruct kept { int b; };\n' \
           '#define WANTED_MAX 7\n# 3 "/x/other.h" 2\n#define OTHER 1\n'
    parse = abi_probe.parse_text(text, wanted={"/x/rdma/wanted.h": "rdma/wanted.h"})
    assert list(parse.aggregates) == ["kept"] and parse.aggregates["kept"].header == "rdma/wanted.h"
    assert list(parse.defines) == ["WANTED_MAX"]


@pytest.mark.parametrize(
    "member", ["void (*callback)(int);", "int;", "struct inner x y;"],
)
def test_parser_refuses_what_it_does_not_understand(member):
    with pytest.raises(abi_probe.ParseError):
        abi_probe.parse_text("struct bad { " + member + " };")


def test_since_bounds():
    assert abi_probe.since_bounds("6.17") == ((6, 17), (6, 17))
    assert abi_probe.since_bounds("<=6.1") == (None, (6, 1))
    assert abi_probe.since_bounds("6.13..7.2") == ((6, 13), (7, 2))
    assert abi_probe.since_bounds("<=2.6.39")[1] < (3, 11)


def test_dumps_is_stable_json():
    obj = {"b": {"fields": {"z": {"offset": 0}, "a": {"offset": 4}}, "size": 8}, "a": [1, 2]}
    text = abi_probe.dumps(obj)
    assert json.loads(text) == obj
    assert text.index('"z"') < text.index('"a": {')  # fields keep declaration order
    assert text.index('"a": [') < text.index('"b"')  # everything else is sorted
