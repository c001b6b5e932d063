"""The fabric check (`pyrdmacm mesh`, pyrdmacm.mesh) on the fake fabric: the CLI runs on host B
(10.9.0.2) with one rail; host A (10.9.0.1) listens or not.  Each outcome, the outputs
(table, JSON Lines, SVG, Prometheus), --merge of two hosts' runs, Ctrl-C, and bad input."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from typing import List

import pytest

from pyrdmacm import CmId, EventChannel, cli, devices, mesh
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.cli import conn
from pyrdmacm.mesh import engine, render
from pyrdmacm.mesh.cells import OUTCOMES, Cell, identity, parse_identity
from pyrdmacm.testing import FakeFabric

from fabric_helpers import fake0_device

A, B = "10.9.0.1", "10.9.0.2"


@pytest.fixture
def fabric():
    fab = FakeFabric(timewait_ms=50, cm_timeout_ms=300, cm_retry_ms=20)
    yield fab
    fab.close()


@pytest.fixture
def on_b(fabric, monkeypatch):
    """The CLI's channel on host B, one rail (fake0's netdev, B's address); the pre-check's
    explanation is this machine's, so it is replaced by a marker."""
    host_a = fabric.host(A)  # on the fabric: it answers ARP, and its CM answers REQs
    host_b = fabric.host(B)
    monkeypatch.setattr(conn, "_open_channel", lambda: EventChannel(host_b()))
    monkeypatch.setattr(engine, "rails", lambda names=None, devices=None: [mesh.Rail("eth0", (B,), "fake0", 1)]
                        if names in (None, ["eth0"]) else (_ for _ in ()).throw(ValueError("no netdev %s" % names)))
    monkeypatch.setattr(engine, "_why", lambda dst, src, devs=None: ["explained: %s from %s" % (dst, src)])
    monkeypatch.setattr(devices, "list_devices", lambda *a, **k: [fake0_device(B, netdev_mtu=9000)])
    return host_a, host_b


def _listener(host, data=b"", reject=False, port=7471):
    ch = EventChannel(host())
    lst = CmId(ch)
    lst.bind_addr("0.0.0.0:%d" % port)
    lst.listen()
    import threading

    stop = threading.Event()

    def serve():
        while not stop.is_set():
            ev = ch.get_event(0.05)
            if ev is None:
                continue
            ev.ack()
            if ev.event is E.CONNECT_REQUEST:
                if reject:
                    ev.id.reject(b"no")
                else:
                    ev.id.accept(private_data=data, responder_resources=1, initiator_depth=1)
            elif ev.event is E.DISCONNECTED:
                ev.id.destroy()

    t = threading.Thread(target=serve, daemon=True)
    t.start()

    def close():
        stop.set()
        t.join(2)
        ch.close()

    return close


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _cells(out: str) -> List[dict]:
    lines = [json.loads(line) for line in out.splitlines()]
    assert all(r["schema"] == 1 for r in lines)
    return [r["cell"] for r in lines if "cell" in r]


def test_no_listener_is_reason_8_and_proves_the_path(capsys, on_b):
    code, out, err = run(capsys, "mesh", A, "--json")
    (cell,) = _cells(out)
    assert code == 0, err
    assert cell["outcome"] == "no-listener" and cell["ok"] and cell["status"] == 8
    assert cell["src"] == B and cell["dst"] == A and cell["rail"] == "eth0" and cell["device"] == "fake0"
    assert cell["sgid"] == "::ffff:" + B and cell["dgid"] == "::ffff:" + A and cell["port"] == 1
    assert set(cell["ms"]) == {"addr", "route", "connect"} and cell["why"] == []
    # the data path as this end programs it: the port's MTU (from its netdev's 9000) is not
    # the path record's; no QP view without a REP
    assert (cell["gid_index"], cell["gid_type"]) == (1, "RoCE v2")
    assert cell["path"] == {"mtu": 1024, "port_mtu": 4096, "netdev_mtu": 9000, "link_local": False, "tclass": 0,
                            "sl": 0, "hop_limit": 64, "flow_label": 0, "pkey": 0xFFFF}
    assert cell["qp"] == {}
    summary = json.loads(out.splitlines()[-1])
    assert summary["exit"] == 0 and summary["summary"]["cells"] == 1 and summary["summary"]["failed"] == 0
    code, out, err = run(capsys, "mesh", A, "--verdicts")  # a live run: this host's verdict
    assert code == 0 and out.split() == [cell["host"], "healthy"], out + err


def test_a_step_with_no_answer_times_out_and_the_run_goes_on(capsys, on_b, monkeypatch):
    """A connect that no answer follows (the REQ made to vanish) ends at --timeout as a
    "timeout" cell naming the step, its id destroyed; the run's other cells are checked."""
    monkeypatch.setattr(CmId, "connect", lambda self, *a, **k: None)  # 10.9.0.77 does not get that far
    code, out, err = run(capsys, "mesh", A, "10.9.0.77", "--timeout", "200", "--json")
    cells = {c["target"]: c for c in _cells(out)}
    assert cells[A]["outcome"] == "timeout", cells[A]["detail"]
    assert cells[A]["detail"] == "no answer to connect within 0.2 s"
    assert 200 <= cells[A]["ms"]["connect"] < 1000
    assert cells["10.9.0.77"]["outcome"] in ("addr-error", "timeout")
    assert code != 0, err


def test_a_listener_that_identifies_itself(capsys, on_b, fabric):
    close = _listener(on_b[0], identity("node-a", "eth0", A))
    try:
        code, out, err = run(capsys, "mesh", A, "--json")
    finally:
        close()
    (cell,) = _cells(out)
    assert code == 0, err
    assert cell["outcome"] == "established" and cell["agent"] == {"host": "node-a", "rail": "eth0", "addr": A}
    assert set(cell["ms"]) == {"addr", "route", "connect", "disconnect"}
    assert cell["qp"] == {"path_mtu": 1024, "sgid_index": 1, "tclass": 0, "hop_limit": 64, "sl": 0, "flow_label": 0,
                          "timeout": 19, "retry_cnt": 7, "rnr_retry": 7, "min_rnr_timer": 0, "max_dest_rd_atomic": 1,
                          "max_rd_atomic": 1}


def test_an_address_answered_by_the_wrong_node(capsys, on_b, fabric):
    close = _listener(on_b[0], identity("node-c", "eth1", "10.9.0.3"))
    try:
        code, out, err = run(capsys, "mesh", A)
    finally:
        close()
    assert code == 1, err
    assert "WRONG" in out and "answered by node-c (rail eth1, address 10.9.0.3), not 10.9.0.1" in out


def test_a_rejecting_listener_still_proves_the_path(capsys, on_b, fabric):
    close = _listener(on_b[0], reject=True)
    try:
        code, out, _ = run(capsys, "mesh", A, "--json")
    finally:
        close()
    (cell,) = _cells(out)
    assert code == 0 and cell["outcome"] == "rejected" and cell["status"] == 28 and cell["ok"]


def test_failures_say_why_and_the_other_cells_are_still_checked(capsys, on_b):
    code, out, err = run(capsys, "mesh", A, "10.9.0.77", "fe80::1%lo", "no-such-host.invalid", "--timeout", "300",
                         "--json")
    cells = {c["target"]: c for c in _cells(out)}
    assert code == 1, err
    assert cells[A]["outcome"] == "no-listener"
    bad = cells["10.9.0.77"]
    assert bad["outcome"] in ("addr-error", "timeout", "unreachable") and not bad["ok"]
    assert bad["why"] == ["explained: 10.9.0.77 from 10.9.0.2"]
    assert cells["fe80::1%lo"]["outcome"] == "no-source" and "no IPv6 address" in cells["fe80::1%lo"]["detail"]
    assert cells["no-such-host.invalid"]["outcome"] == "bad-target"
    assert "no-such-host.invalid" in cells["no-such-host.invalid"]["detail"]


def test_the_table_svg_and_prometheus(capsys, on_b, tmp_path):
    svg, prom = tmp_path / "m.svg", tmp_path / "m.prom"
    code, out, _ = run(capsys, "mesh", A, "10.9.0.77", "--timeout", "300", "--svg", str(svg),
                       "--prometheus", str(prom))
    assert code == 1
    lines = out.splitlines()
    assert lines[0].split() == ["rail", A, "10.9.0.77"]
    assert lines[1].split()[:2] == ["eth0", "ok8"]
    assert "2 cells: 1 reach the far CM, 1 do not" in out
    assert "    explained: 10.9.0.77 from 10.9.0.2" in out
    root = ET.fromstring(svg.read_text())  # well-formed, a square per cell with its details
    rects = [r for r in root.iter("{http://www.w3.org/2000/svg}rect") if r.find("{http://www.w3.org/2000/svg}title")
             is not None]
    assert len(rects) == 2 and "no-listener" in rects[0][0].text
    text = prom.read_text()
    assert ('pyrdmacm_mesh_cell_ok{host="%s",rail="eth0",target="10.9.0.1",dst="10.9.0.1",outcome="no-listener"} 1'
            % engine.socket.gethostname()) in text
    assert "# TYPE pyrdmacm_mesh_handshake_seconds gauge" in text and "pyrdmacm_mesh_last_run_timestamp_seconds" in text
    assert not list(tmp_path.glob("*.tmp"))  # written by rename


def test_merge_joins_two_hosts_runs(capsys, on_b, tmp_path):
    code, out, _ = run(capsys, "mesh", A, "--json")
    one = tmp_path / "b.json"
    one.write_text(out)
    other = [json.loads(line) for line in out.splitlines()]
    for r in other:
        if "cell" in r:
            r["cell"].update(host="node-z", rail="eth7", outcome="route-error", status=-110)
    two = tmp_path / "z.json"
    two.write_text("\n".join(json.dumps(r) for r in other) + "\n")
    code, out, _ = run(capsys, "mesh", "--merge", str(one), str(two))
    assert code == 1
    rows = [line.split()[0] for line in out.splitlines()[1:3]]
    assert rows == ["%s/eth0" % engine.socket.gethostname(), "node-z/eth7"]
    assert "ROUTE -110" in out
    code, out, err = run(capsys, "mesh", "--merge", str(tmp_path / "nope.json"))
    assert code == 3 and "nope.json" in err
    (tmp_path / "junk.json").write_text("hello\n")
    code, out, err = run(capsys, "mesh", "--merge", str(tmp_path / "junk.json"))
    assert code == 3 and "junk.json line 1: not JSON" in err


def test_merge_refuses_each_damaged_line_naming_it_and_merges_the_rest(capsys, tmp_path):
    """Runs gathered from many hosts get damaged: each line whose field has the wrong type
    (or that is no run's output) is one line on stderr naming the file, the line and the
    field; the good lines still merge; the summary counts the refused; exit 3."""
    T = ["10.1.0.1", "10.1.0.2"]
    good = [Cell(host="x", rail="eth1", target=t, dst=t, src=T[0], outcome="no-listener", status=8) for t in T]
    path = _run_file(tmp_path / "x.json", "x", good, T)
    cell = good[0].to_json()
    damaged = [({"status": "bad"}, "field 'status' is \"bad\", not an integer or null"),
               ({"ms": "fast"}, "field 'ms' is \"fast\", not an object of numbers"),
               ({"ms": {"addr": "fast"}}, "field 'ms' is {\"addr\": \"fast\"}, not an object of numbers"),
               ({"src": 5}, "field 'src' is 5, not a string or null"),
               ({"why": [1, 2]}, "field 'why' is [1, 2], not a list of strings"),
               ({"host": [1]}, "field 'host' is [1], not a string"),
               ({"port": True}, "field 'port' is true, not an integer or null")]
    lines = [json.dumps({"schema": 1, "cell": dict(cell, target="t%d" % k, **bad)}) for k, (bad, _) in enumerate(damaged)]
    lines += [json.dumps({"schema": 1, "cell": None}), json.dumps({"schema": 1, "summary": {"rows": 5}}),
              json.dumps({"schema": 1, "summary": ["x"]}), "[" * 100000, "{\"schema\": 1, \"cell\": {"]
    says = [w for _, w in damaged] + ["\"cell\" is null, not a JSON object",
                                      "the summary's 'rows' is 5, not a list of strings",
                                      "\"summary\" is [\"x\"], not a JSON object",
                                      "not JSON (nested too deep)", "not JSON (Expecting"]
    with open(path, "a") as f:
        f.write("\n".join(lines) + "\n")
    (tmp_path / "bin.json").write_bytes(b"\xff\xfe{}\n")
    (tmp_path / "empty.json").write_text("\n")
    files = [path, str(tmp_path / "bin.json"), str(tmp_path / "empty.json"), str(tmp_path / "gone.json")]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--json")
    assert code == 3, err
    errs = err.splitlines()
    assert len(errs) == len(says) + 3 and "Traceback" not in err
    for k, (line, want) in enumerate(zip(errs, says)):
        assert line.startswith("pyrdmacm: --merge: refused %s line %d: " % (path, 4 + k)) and want in line, line
    assert errs[-3:] == ["pyrdmacm: --merge: refused %s: not UTF-8 text (invalid start byte): give the output of "
                         "`pyrdmacm mesh --json`" % files[1],
                         "pyrdmacm: --merge: refused %s holds no cells: give the output of `pyrdmacm mesh --json`"
                         % files[2],
                         "pyrdmacm: --merge: refused %s: No such file or directory" % files[3]]
    assert sorted(c["target"] for c in _cells(out)) == T  # the good lines merged
    summary = json.loads(out.splitlines()[-1])
    assert summary["summary"]["refused"] == len(says) + 3 and summary["exit"] == 3
    code, out, err = run(capsys, "mesh", "--merge", *files)
    assert code == 3 and "%d lines or files of the input refused" % (len(says) + 3) in out
    code, out, err = run(capsys, "mesh", "--merge", *files[1:])
    assert code == 3 and out == "" and err.splitlines()[-1] == "pyrdmacm: --merge: no cells to merge in %s" % (
        ", ".join(files[1:]))


def test_bad_input_is_refused_naming_it(capsys, on_b):
    for argv, says in ((["mesh"], "give the targets"), (["mesh", A, "--port", "70000"], "--port takes"),
                       (["mesh", A, "--concurrency", "0"], "--concurrency takes"),
                       (["mesh", A, A], "targets given twice"), (["mesh", A, "--rails", "nosuch0"], "no netdev"),
                       (["mesh", A, A, "--rails", "nosuch0"], "targets given twice"),  # what was written first
                       (["mesh", A, "--timeout", "x"], "--timeout"), (["mesh", A, "--hosts", "/nonexistent"], "--hosts"),
                       (["mesh", A, "--merge", "x"], "no targets")):
        code, out, err = run(capsys, *argv)
        assert code == 3 and says in err and out == "", (argv, err)


def test_ctrl_c_prints_what_was_checked(capsys, on_b, monkeypatch):
    def interrupted(rails, targets, **kw):  # one cell done, then Ctrl-C
        kw["on_cell"](Cell(host="h", rail="eth0", target=A, outcome="no-listener", dst=A, src=B))
        raise KeyboardInterrupt

    monkeypatch.setattr(mesh, "check", interrupted)
    code, out, _ = run(capsys, "mesh", A, "10.9.0.5", "--json")
    assert code == 130
    cells = {c["target"]: c["outcome"] for c in _cells(out)}
    assert cells == {A: "no-listener", "10.9.0.5": "not-checked"}  # the one not checked says so
    assert json.loads(out.splitlines()[-1])["exit"] == 130


def test_every_outcome_has_a_look_and_cells_round_trip():
    for o in OUTCOMES:
        c = Cell(host="h", rail="r", target="t", outcome=o, status=3)
        assert render.short(c)
        assert Cell.from_json(json.loads(json.dumps(c.to_json()))) == c
    with pytest.raises(ValueError, match="unknown outcome"):
        Cell.from_json({"host": "h", "rail": "r", "target": "t", "outcome": "fine"})


def test_the_identity_fits_a_rep_and_reads_back():
    data = identity("h" * 300, "eth0", "10.0.0.1")
    assert len(data) <= 196
    assert parse_identity(identity("n1", "ib0", "10.1.0.1") + b"\0" * 100) == {
        "host": "n1", "rail": "ib0", "addr": "10.1.0.1"}
    assert parse_identity(b"hello") is None


def test_the_engine_refuses_a_bad_bound():
    with pytest.raises(ValueError, match="concurrency"):
        mesh.check([], [], concurrency=0)
    with pytest.raises(ValueError, match="port"):
        mesh.check([], [], port=0)



def test_same_subnet_pairs_each_rail_with_its_own_segment():
    r0 = mesh.Rail("eth0", ("10.20.0.4",), "rxe0", 1, ("10.20.0.0/24",))
    r1 = mesh.Rail("eth1", ("10.21.0.4",), "rxe1", 1, ("10.21.0.0/24",))
    ts = [mesh.Target(a, a) for a in ("10.20.0.1", "10.21.0.1")] + [mesh.Target("nosuch", None, "no such host")]
    every = engine.pairs([r0, r1], ts)
    assert [(r.netdev, t.name) for r, t in every] == [(r.netdev, t.name) for r in (r0, r1) for t in ts]
    own = [(r.netdev, t.name) for r, t in engine.pairs([r0, r1], ts, same_subnet=True)]
    assert own == [("eth0", "10.20.0.1"), ("eth0", "nosuch"), ("eth1", "10.21.0.1"), ("eth1", "nosuch")]


def _run_file(path, host, cells, targets):
    rows = list(dict.fromkeys("%s/%s" % (host, c.rail) for c in cells))
    lines = [{"schema": 1, "cell": c.to_json()} for c in reversed(cells)]  # in the order they ended
    lines.append({"schema": 1, "summary": {"cells": len(cells), "rows": rows, "targets": targets}, "exit": 1})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return str(path)


def test_merge_keeps_each_runs_order_and_names_the_broken_rail_of_a_target(capsys, tmp_path):
    """Host y's eth1 is broken (its own cells refused): x's cell to y's eth1 address says so
    first; y's own failures are not blamed on x; columns in the runs' order, not the
    order the cells ended."""
    T = ["10.1.0.1", "10.1.0.2"]

    def c(host, rail, dst, src, outcome, **kw):
        return Cell(host=host, rail=rail, target=dst, dst=dst, src=src, outcome=outcome, **kw)
    x = [c("x", "eth1", T[0], T[0], "no-listener", status=8),
         c("x", "eth1", T[1], T[0], "timeout", detail="no answer to connect", why=["route: fine"])]
    y = [c("y", "eth1", t, T[1], "refused", status=-19, detail="ENODEV", why=["pre-check: eth1 has no RDMA device"])
         for t in T]
    files = [_run_file(tmp_path / "x.json", "x", x, T), _run_file(tmp_path / "y.json", "y", y, T)]
    code, out, _ = run(capsys, "mesh", "--merge", *files, "--json")
    got = {(d["host"], d["target"]): d for d in _cells(out)}
    assert code == 1
    assert got[("x", T[1])]["why"] == ["the target is y/eth1, whose own run reaches 0 of its 2 targets (refused: "
                                       "ENODEV; pre-check: eth1 has no RDMA device)", "route: fine"]
    assert got[("y", T[0])]["why"] == ["pre-check: eth1 has no RDMA device"]  # y reaches nobody: its own fault
    code, out, _ = run(capsys, "mesh", "--merge", *files)
    assert out.splitlines()[0].split() == ["rail", *T] and [ln.split()[0] for ln in out.splitlines()[1:3]] == [
        "x/eth1", "y/eth1"]


def test_control_characters_in_names_reach_neither_the_terminal_nor_the_svg(capsys, tmp_path):
    """Names come from other hosts' files: an escape sequence, a NUL or a lone surrogate in a
    host name or a failure's explanation is written as its escape in the table, and the
    SVG stays well-formed XML (control characters are not allowed in XML, escaped or not)."""
    evil = "node\x1b[31m-7\x00"
    cells = [Cell(host=evil, rail="eth0", target="10.1.0.2\x07", dst="10.1.0.2", src="10.1.0.1", outcome="timeout",
                  detail="no answer\x0b", why=["route: via \x1b]0;title\x07 eth0\udcff"]),
             Cell(host="plain", rail="eth0", target="10.1.0.2\x07", dst="10.1.0.2", src="10.1.0.3",
                  outcome="no-listener", status=8)]
    path = _run_file(tmp_path / "evil.json", evil, cells, ["10.1.0.2\x07"])
    svg_path = tmp_path / "m.svg"
    code, out, _ = run(capsys, "mesh", "--merge", path, "--svg", str(svg_path))
    assert code == 1
    assert not any(ord(ch) < 32 and ch != "\n" or 0x7F <= ord(ch) < 0xA0 for ch in out), repr(out)
    assert "node\\x1b[31m-7\\x00/eth0" in out and "10.1.0.2\\x07" in out and "eth0\\udcff" in out
    ET.fromstring(svg_path.read_text())  # well-formed
    assert "node\\x1b[31m-7\\x00/eth0" in svg_path.read_text()


def test_a_listener_whose_view_of_the_path_differs_is_a_finding_not_a_failure(capsys, on_b, fabric):
    """An identifying listener that tells a RoCE v1 GID and a 4096 MTU: the cell is
    established (the CM path works) and carries the listener's view and each mismatch; the
    table lists them after the failures, in a section of their own."""
    close = _listener(on_b[0], identity("node-a", "eth0", A, ("gi=0", "gt=v1", "ll=0", "mtu=4096", "pm=4096",
                                                              "tc=0", "sl=0", "pk=ffff", "qm=4096", "qg=0")))
    try:
        code, out, err = run(capsys, "mesh", A, "--json")
        (cell,) = _cells(out)
        code2, text, _ = run(capsys, "mesh", A)
    finally:
        close()
    assert code == code2 == 0 and cell["outcome"] == "established" and cell["ok"], err
    assert cell["agent"] == {"host": "node-a", "rail": "eth0", "addr": A}
    assert cell["there"]["gid_type"] == "RoCE v1" and cell["there"]["qp_path_mtu"] == 4096
    assert cell["mismatches"] == ["GID type RoCE v2 here, RoCE v1 there", "path MTU 1024 here, 4096 there",
                                  "the QP's path MTU 1024 here, 4096 there"]  # port MTUs agree: 4096 (netdev 9000)
    lines = text.splitlines()
    k = lines.index("1 cell whose two ends do not agree on the data path:")
    assert lines[k + 1:k + 5] == ["eth0 -> 10.9.0.1 (10.9.0.1):", "    GID type RoCE v2 here, RoCE v1 there",
                                  "    path MTU 1024 here, 4096 there", "    the QP's path MTU 1024 here, 4096 there"]
    assert "1 cells: 1 reach the far CM, 0 do not" in text


def test_merge_compares_each_pair_of_rails_both_ways(capsys, tmp_path):
    """Two hosts' own runs, no agent: x's cell to y and y's cell to x are the two ends of one
    path; where their views differ (a RoCE v1 GID and a 4096 MTU at y) the merge names each
    difference once per pair, as a finding of its own (no cell failed: exit 0), in the
    table, the JSON Lines and the Prometheus text."""
    X, Y, Z = "10.1.0.1", "10.1.0.2", "10.1.0.3"
    path = {"mtu": 1024, "port_mtu": 1024, "netdev_mtu": 1500, "link_local": False, "tclass": 0, "sl": 0,
            "hop_limit": 64, "flow_label": 0, "pkey": 0xFFFF}
    x = [Cell(host="x", rail="eth1", target=t, dst=t, src=X, outcome="no-listener", status=8, gid_index=1,
              gid_type="RoCE v2", path=dict(path)) for t in (Y, Z)]
    y = [Cell(host="y", rail="eth1", target=X, dst=X, src=Y, outcome="no-listener", status=8, gid_index=3,
              gid_type="RoCE v1", path=dict(path, mtu=4096, port_mtu=4096, netdev_mtu=9000))]
    z = [Cell(host="z", rail="eth1", target=X, dst=X, src=Z, outcome="no-listener", status=8, gid_index=1,
              gid_type="RoCE v2", path=dict(path))]  # the same view as x's: no finding
    files = [_run_file(tmp_path / n, n, cells, [c.target for c in cells]) for n, cells in (("x", x), ("y", y),
                                                                                           ("z", z))]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--json")
    assert code == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    found = [r["asymmetry"] for r in records if "asymmetry" in r]
    assert found == [{"a": "x/eth1", "b": "y/eth1", "a_addr": X, "b_addr": Y, "mismatches": [
        "GID type RoCE v2 at x/eth1, RoCE v1 at y/eth1", "path MTU 1024 at x/eth1, 4096 at y/eth1",
        "port MTU 1024 at x/eth1, 4096 at y/eth1"]}]
    assert records[-1]["summary"]["asymmetries"] == 1 and records[-1]["summary"]["failed"] == 0
    prom = tmp_path / "m.prom"
    code, out, err = run(capsys, "mesh", "--merge", *files, "--prometheus", str(prom))
    assert code == 0, err
    lines = out.splitlines()
    k = lines.index("1 pair of rails whose two ends see the data path differently:")
    assert lines[k + 1:] == ["x/eth1 (10.1.0.1) <-> y/eth1 (10.1.0.2):",
                             "    GID type RoCE v2 at x/eth1, RoCE v1 at y/eth1",
                             "    path MTU 1024 at x/eth1, 4096 at y/eth1", "    port MTU 1024 at x/eth1, 4096 at y/eth1"]
    assert ('pyrdmacm_mesh_path_mismatches{a="x/eth1",b="y/eth1",a_addr="10.1.0.1",b_addr="10.1.0.2"} 3'
            in prom.read_text().splitlines())


def test_verdicts_a_line_per_host_with_the_likely_culprit_ranked(capsys, tmp_path):
    """x's rail reaches nobody (rank 1: the NIC or host; and x's address fails from every
    rail that tried it: rank 2, the far end, x again); y's one failed cell (rank 3: the path
    between); y and z see the path's MTU differently (rank 4: configuration). A verdict per
    host, text, JSON and Prometheus; exit 1 as a host is not healthy."""
    X, Y, Z, W = "10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"
    path = {"mtu": 1024, "port_mtu": 1024, "netdev_mtu": 1500, "link_local": False, "tclass": 0, "sl": 0,
            "hop_limit": 64, "flow_label": 0, "pkey": 0xFFFF}

    def c(host, src, t, outcome="no-listener", **kw):
        return Cell(host=host, rail="eth1", target=t, dst=t, src=src, outcome=outcome, gid_index=1,
                    gid_type="RoCE v2", path=dict(path, **kw) if outcome == "no-listener" else {},
                    detail="ENODEV" if outcome == "refused" else None)

    runs = {"x": [c("x", X, t, "refused") for t in (Y, Z, W)],
            "y": [c("y", Y, X, "timeout"), c("y", Y, Z), c("y", Y, W, "timeout")],
            "z": [c("z", Z, X, "timeout"), c("z", Z, Y, mtu=4096), c("z", Z, W)]}
    files = [_run_file(tmp_path / h, h, cells, [d.target for d in cells]) for h, cells in runs.items()]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--verdicts")
    assert code == 1, err
    assert out.splitlines() == [
        "x     rail eth1 reaches none of its 3 targets (refused (ENODEV)) -- likely the NIC or the host (+1 more)",
        "y     y/eth1 -> 10.1.0.4: timeout -- likely the path between (+1 more)",
        "z     y/eth1 <-> z/eth1: path MTU 1024 at y/eth1, 4096 at z/eth1 -- likely the configuration of the two "
        "ends"]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--verdicts", "--json")
    vs = {r["verdict"]["host"]: r["verdict"] for r in map(json.loads, out.splitlines()) if "verdict" in r}
    assert [f["kind"] for f in vs["x"]["findings"]] == ["rail", "far-end"]
    assert vs["x"]["findings"][1]["what"] == "10.1.0.1 (rail eth1) fails from all 2 rails that tried it (timeout)"
    assert [f["kind"] for f in vs["y"]["findings"]] == ["path", "config"] and not vs["y"]["healthy"]
    assert json.loads(out.splitlines()[-1])["summary"]["unhealthy"] == 3 and code == 1
    prom = tmp_path / "m.prom"
    run(capsys, "mesh", "--merge", *files, "--prometheus", str(prom))
    text = prom.read_text().splitlines()
    assert 'pyrdmacm_mesh_host_healthy{host="x"} 0' in text and 'pyrdmacm_mesh_host_healthy{host="z"} 0' in text
    assert 'pyrdmacm_mesh_host_findings{host="x",kind="far-end"} 1' in text
    assert 'pyrdmacm_mesh_host_findings{host="y",kind="path"} 1' in text
    # y's run alone: its two failed targets have no run of their own, and each fails from the
    # one rail that tried it: the far ends, named by address; y itself is healthy
    code, out, _ = run(capsys, "mesh", "--merge", files[1], "--verdicts")
    assert code == 1 and out.splitlines() == [
        "y         healthy",
        "10.1.0.1  10.1.0.1 fails from the one rail that tried it (timeout) -- likely the far end",
        "10.1.0.4  10.1.0.4 fails from the one rail that tried it (timeout) -- likely the far end"]


def test_settings_per_node_for_the_rails_that_work(capsys, tmp_path):
    """NCCL's and UCX's settings per node from the merged matrix: the rails whose every cell
    works (x's does not: left out, saying why), their devices and netdevs; one GID index where
    one fits (y's two rails use 1 and 3: said plainly), and a statement when the nodes do not
    share one (w 1, z 3)."""
    T = ["10.1.0.10", "10.1.0.11"]

    def c(host, rail, dev, index, outcome="no-listener", t=T[0]):
        return Cell(host=host, rail=rail, target=t, dst=t, src="10.1.0.1", outcome=outcome, device=dev, port=1,
                    gid_index=index, gid_type="RoCE v2")

    runs = {"x": [c("x", "eth1", "rxe0", 1), c("x", "eth1", "rxe0", 1, "timeout", T[1])],
            "y": [c("y", "eth1", "rxe0", 1), c("y", "eth2", "rxe1", 3)],
            "z": [c("z", "eth1", "mlx5_0", 3)], "w": [c("w", "eth1", "mlx5_0", 1)]}
    files = [_run_file(tmp_path / h, h, cells, T) for h, cells in runs.items()]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--settings")
    assert code == 1, err  # x's failed cell
    assert out.splitlines() == [
        "x     no rail works: nothing to set",
        "        left out: eth1 (1 of its 2 targets fail)",
        "y     NCCL_IB_HCA==rxe0:1,rxe1:1 NCCL_SOCKET_IFNAME==eth1,eth2 UCX_NET_DEVICES=rxe0:1,rxe1:1",
        "z     NCCL_IB_HCA==mlx5_0:1 NCCL_SOCKET_IFNAME==eth1 UCX_NET_DEVICES=mlx5_0:1 NCCL_IB_GID_INDEX=3",
        "w     NCCL_IB_HCA==mlx5_0:1 NCCL_SOCKET_IFNAME==eth1 UCX_NET_DEVICES=mlx5_0:1 NCCL_IB_GID_INDEX=1",
        "y: no single GID index fits its rails (eth1 1, eth2 3): NCCL_IB_GID_INDEX takes one; leave it unset and "
        "let NCCL find each port's (NCCL_IB_ROCE_VERSION_NUM=2, NCCL_IB_ADDR_FAMILY=AF_INET)",
        "the nodes do not share one GID index (z 3, w 1): set NCCL_IB_GID_INDEX per node as listed, not once for "
        "the whole job"]
    code, out, err = run(capsys, "mesh", "--merge", *files, "--settings", "--json")
    made = {r["settings"]["host"]: r["settings"] for r in map(json.loads, out.splitlines()) if "settings" in r}
    assert made["z"] == {"host": "z", "rails": ["eth1"], "left_out": [], "gid_index": 3, "env": {
        "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_SOCKET_IFNAME": "=eth1", "UCX_NET_DEVICES": "mlx5_0:1",
        "NCCL_IB_GID_INDEX": "3"}}
    assert len(json.loads(out.splitlines()[-1])["summary"]["settings_notes"]) == 2


def test_a_run_whose_cells_all_work_imports_no_pyroute2():
    """pyroute2's import is seconds in an emulated guest: a run made with the rails and
    devices given (as the CLI has them read) imports it only to explain a failure that
    needs a routing decision (a source that is not local needs the addresses alone)."""
    import subprocess
    import sys

    code = """
import sys
from pyrdmacm import EventChannel, mesh
from pyrdmacm.mesh import engine
from pyrdmacm.testing import FakeFabric
sys.path.insert(0, "tests")
from fabric_helpers import fake0_device
fab = FakeFabric()
fab.host("10.9.0.1")
b = fab.host("10.9.0.2")
cells = engine.check([mesh.Rail("eth0", ("10.9.0.2",), "fake0", 1)], engine.targets(["10.9.0.1"], numeric=True),
                     channel=EventChannel(b()), devices=[fake0_device("10.9.0.2")], host="b")
print(cells[0].outcome, "pyroute2" in sys.modules)
cells = engine.check([mesh.Rail("eth0", ("10.9.0.2",), "fake0", 1)], engine.targets(["10.9.0.77"], numeric=True),
                     channel=EventChannel(b()), devices=[fake0_device("10.9.0.2")], host="b", timeout_ms=300)
print(cells[0].outcome, "not a local address" in cells[0].why[0])
fab.close()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split("\n")[:2] == ["no-listener False", "addr-error True"], out.stdout + out.stderr


def test_host_lists_expand_as_slurm_writes_them(capsys, on_b, monkeypatch):
    """``10.9.0.[1,77]`` is two targets (ClusterShell's NodeSet, the hostlist extra); a list
    that does not parse, or one without ClusterShell, is refused with what to do."""
    pytest.importorskip("ClusterShell")
    assert engine.expand(["node[001-003]", "[fd09::1]", "plain"]) == ["node001", "node002", "node003", "[fd09::1]",
                                                                      "plain"]
    code, out, err = run(capsys, "mesh", "10.9.0.[1,77]", "--timeout", "300", "--json")
    assert sorted(c["target"] for c in _cells(out)) == [A, "10.9.0.77"], err
    code, out, err = run(capsys, "mesh", "node[3-", "--json")
    assert code == 3 and err.startswith("pyrdmacm: bad host list 'node[3-': ")
    import builtins

    real = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", lambda name, *a, **k: (_ for _ in ()).throw(ImportError(name))
                        if name.startswith("ClusterShell") else real(name, *a, **k))
    code, out, err = run(capsys, "mesh", "node[1-2]")
    assert code == 3 and "'node[1-2]' is a host list: install ClusterShell" in err and "pyrdmacm[hostlist]" in err


def test_sample_inventory_and_every(capsys, on_b, monkeypatch, tmp_path):
    """--sample K checks K targets per rail (another draw each round); --inventory prints the
    rails as a targets line; --every repeats the round, each rewriting the Prometheus file,
    until stopped (130)."""
    code, out, err = run(capsys, "mesh", A, "10.9.0.77", "10.9.0.78", "--sample", "1", "--timeout", "300", "--json")
    assert len(_cells(out)) == 1, err
    code, out, err = run(capsys, "mesh", A, "--sample", "0")
    assert code == 3 and "--sample takes a number 1..1000000, got '0'" in err
    code, out, err = run(capsys, "mesh", "--inventory")
    import socket

    assert code == 0 and out == "%s  # %s: eth0\n" % (B, socket.gethostname()), err
    code, out, err = run(capsys, "mesh", "--inventory", "--json")
    assert json.loads(out)["inventory"]["rails"] == [{"netdev": "eth0", "addresses": [B], "device": "fake0", "port": 1}]
    from pyrdmacm.cli import mesh as cli_mesh

    naps = []

    def sleep(s):
        naps.append(s)
        if len(naps) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(cli_mesh, "_nap", sleep)
    prom = tmp_path / "m.prom"
    code, out, err = run(capsys, "mesh", A, "--every", "5", "--prometheus", str(prom), "--brief")
    assert code == 130 and out.count("1 cells: 1 reach the far CM") == 2 and all(0 < n <= 5 for n in naps), out
    assert 'outcome="no-listener"} 1' in prom.read_text()
