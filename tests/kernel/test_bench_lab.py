"""tools/bench on a real kernel, tiny: every implementation resolves every id, the JSON has its shape.

Not a measurement (N=20, one round): it keeps the benchmark from rotting between the
occasions someone runs it for real (docs/benchmarks.md).
"""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

#: tools/bench is tested, not the kernel: once, on bookworm (its figures are taken there too)
pytestmark = pytest.mark.kernel(suites=("bookworm",))

ROOT = Path(__file__).resolve().parents[2]
PHASES = ("create", "resolve_addr", "resolve_route", "destroy", "total")
N = 20


def test_bench_runs_every_implementation(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench"), "--n", str(N), "--runs", "1", "--no-memory",
         "--no-startup", "--json", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    impls = result["impls"]
    assert {"c", "pyrdmacm", "batch", "aio", "aio-many", "ctypes"} <= set(impls), (impls, proc.stderr)
    assert result["runs"] == 1 and result["ns"] == [N] and result["kernel"]
    res = result["results"][str(N)]
    for impl in impls:
        assert res["runs"][impl] == 1, impl
        assert res["failures"][impl] == 0, (impl, [r for r in result["raw"] if r["impl"] == impl])
        for phase in PHASES:
            assert res[phase]["per_id_us"][impl] > 0, (impl, phase)
    for phase in PHASES:
        ratio = res[phase]["ratio"]
        assert ratio == pytest.approx(res[phase]["per_id_us"]["pyrdmacm"] / res[phase]["per_id_us"]["c"])
    rows = [r for r in result["raw"] if r["impl"] != "cmtime"]
    assert all(r["n"] == N and not r["failures"] for r in rows)


def test_bench_baseline_head_runs_beside_the_tree(tmp_path):
    """--baseline HEAD: HEAD's package extracted (into scratch: the guest cannot write the
    checkout), run as the 'baseline' implementation in the same rounds, compared per phase."""
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench"), "--baseline", "HEAD", "--impl", "pyrdmacm", "--n", str(N),
         "--runs", "2", "--no-memory", "--no-startup", "--json", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["impls"] == ["pyrdmacm", "baseline"]
    base = result["baseline"]
    assert base["rev"] == "HEAD" and len(base["sha"]) == 40
    res = result["results"][str(N)]
    assert res["runs"] == {"pyrdmacm": 2, "baseline": 2} and not any(res["failures"].values()), result["raw"]
    cmp_ = base["compare"][str(N)]
    for phase in PHASES:
        row = cmp_[phase]
        assert row["current"] == pytest.approx(res[phase]["per_id_us"]["pyrdmacm"])
        assert row["baseline"] == pytest.approx(res[phase]["per_id_us"]["baseline"])
        assert row["ratio"] == pytest.approx(row["current"] / row["baseline"])
        assert len(row["round_ratios"]) == 2 and row["spread"][0] <= row["spread"][1]
        assert row["verdict"] == "within spread" or "(beyond spread)" in row["verdict"], row


CONN_N = 5
CONN_PORT = 7098  # not the benchmark's default, which a listener of a manual run may hold


@pytest.mark.kernel(topology="pair", suites=("bookworm",))
def test_bench_connection_phase_completes_every_connection(peer, tmp_path):
    """--connections on the pair, tiny (N=5, one round, both modes, C, pyrdmacm and the floor)
    against the listener on the peer: the JSON has its shape, every connection was
    established and completed, and the listener saw each one accepted, established (the
    RTU came) and disconnected.  Nothing about speed."""
    listener = peer.start([sys.executable, str(ROOT / "tools" / "bench"), "--listen", str(CONN_PORT)])
    listener.wait_for_line(r"^listening on port %d$" % CONN_PORT, timeout=90)  # it may compile first
    out = tmp_path / "connections.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "bench"), "--connections", "--dst", peer.address,
         "--port", str(CONN_PORT), "--n", str(CONN_N), "--runs", "1", "--json", str(out), "--quiet"],
        capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["phase"] == "connections" and result["impls"] == ["c", "pyrdmacm", "floor"]
    assert result["modes"] == ["serial", "pipelined"] and result["ns"] == [CONN_N] and result["runs"] == 1
    assert result["listener"]["tries"] >= 1
    assert len(result["raw"]) == 6
    for row in result["raw"]:
        assert (row["n"], row["established"], row["completed"], row["failures"]) == (CONN_N, CONN_N, CONN_N, 0), row
        assert row["total"] > 0
    res = result["connections"][str(CONN_N)]
    for mode in ("serial", "pipelined"):
        r = res[mode]
        every = {"c": CONN_N, "pyrdmacm": CONN_N, "floor": CONN_N}
        assert r["attempted"] == r["established"] == r["completed"] == every, r
        assert r["failures"] == {"c": 0, "pyrdmacm": 0, "floor": 0}
        assert r["ratio"] == pytest.approx(r["ms_per_conn"]["pyrdmacm"] / r["ms_per_conn"]["c"])
        assert r["floor_ratio"] == pytest.approx(r["ms_per_conn"]["pyrdmacm"] / r["ms_per_conn"]["floor"])
        for impl in ("c", "pyrdmacm", "floor"):
            assert r["conn_per_s"][impl] == pytest.approx(1000 / r["ms_per_conn"][impl])
        assert len(r["round_ratios"]) == 1
    assert set(res["serial"]["steps_us"]["pyrdmacm"]) == {"setup", "connect", "establish", "disconnect", "destroy"}
    assert {t["target"].split()[1] for t in result["targets"] if t["target"].startswith("N=")} == {"serial",
                                                                                                  "pipelined"}
    # the listener's own counts (printed when it is stopped): the probe connection and 6 x N
    listener.signal(signal.SIGTERM)
    code, stdout, stderr = listener.wait(20)
    counts = json.loads(stdout.strip().splitlines()[-1])
    done = 6 * CONN_N + 1
    assert (code, counts["established"], counts["disconnected"], counts["refused"]) == (0, done, done, 0), \
        (counts, stderr)
    assert counts["requests"] == counts["accepted"] == done, counts
