"""tools/bench_mesh.py on the host: the targets it spreads over the peers' rails, and the
table it prints from a run's figures (the run itself needs the lab: tools/bench --mesh)."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))
import bench_mesh  # noqa: E402


def test_targets_are_distinct_half_a_rail_and_at_most_250_a_port():
    for n in (2, 10, 101, 1000):
        got = bench_mesh.aliases(n)
        every = got["eth0"] + got["eth1"]
        assert len(every) == len(set(every)) == n
        assert len(got["eth0"]) - len(got["eth1"]) in (0, 1)
        for rail, addrs in got.items():  # each on its own rail's segment (the /16 of 10.2R.0.4)
            assert all(ipaddress.ip_address(a) in ipaddress.ip_network("10.2%s.0.0/16" % rail[-1]) for a in addrs)
        per_peer = [bench_mesh.aliases(n, host) for host in bench_mesh.PEERS]
        assert sorted(a for p in per_peer for r in p.values() for a in r) == sorted(every)
        assert max(len(r) for p in per_peer for r in p.values()) <= bench_mesh.PER_TABLE
    with pytest.raises(SystemExit, match="at most 1000"):
        bench_mesh.aliases(1002)


def test_the_table_gives_rates_memory_and_the_verdict():
    raw = {"mesh/10": [{"seconds": 4.0, "rss_kib": 38000, "failed": {}}],
           "mesh/1000": [{"seconds": 14.0, "rss_kib": 40500, "failed": {}}],
           "loop/10": [{"seconds": 1.2, "failed": {}}],
           "loop/1000": [{"seconds": 110.0, "failed": {"not REJ 8": 2}}]}
    result = {"kernel": "6.1", "runs": 1, "concurrency": 64, "ns": [10, 1000], "raw": raw,
              "summary": bench_mesh.summarise(raw, [10, 1000])}
    row = result["summary"]["1000"]
    assert row["speedup"] == 7.9 and row["mesh"]["cells_per_s"] == 71.4
    assert row["mesh"]["kib_per_cell"] == pytest.approx((40500 - 38000) / 990, abs=0.1)
    text = bench_mesh.table(result)
    assert "7.9x" in text and "NOT met" in text and "FAILED cells" in text


def test_the_table_gives_the_start_up_and_the_rate_once_started():
    raw = {"mesh/100": [{"seconds": 2.0, "rss_kib": 30000, "failed": {}}],
           "mesh/1000": [{"seconds": 6.5, "rss_kib": 32000, "failed": {}}],
           "loop/100": [{"seconds": 12.5, "failed": {}}]}
    result = {"kernel": "7.2", "runs": 1, "concurrency": 64, "ns": [100, 1000], "raw": raw,
              "summary": bench_mesh.summarise(raw, [100, 1000]),
              "startup": {"median": {"pass": 0.7, "one_target": 1.61}, "ratio": 2.3, "imports_pyroute2": False}}
    after = result["summary"]["after_startup"]
    assert after == {"mesh_cells_per_s": 200.0, "loop_cells_per_s": 8.0, "speedup": 25.0}  # 900 cells in 4.5 s
    text = bench_mesh.table(result)
    assert "mesh with one target 1.61 s: 2.3x (target <= 2x: NOT met); no pyroute2 imported" in text
    assert "after start-up (100 -> 1000 targets): mesh 200.0 cells/s, the loop 8.0: 25.0x (target >= 20x: met)" in text
