"""tools/bench --instructions (tools/bench_instructions.py): the direct path's phases counted
by callgrind, each between two marks; a small N, so that the test stays short."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "bench_instructions.py"

pytestmark = pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed (tools/setup installs it)")


def _run(*args: str) -> dict:
    out = subprocess.run([sys.executable, str(TOOL), "--json", *args], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_each_phase_is_counted_for_the_floor_and_the_library():
    res = _run("--n", "30")
    table = res["instructions_per_id"]
    phases = ("create", "resolve_addr", "addr_events", "resolve_route", "route_events", "destroy")
    assert set(table) == {"bare", "pyrdmacm"} and res["n"] == 30
    for impl in ("bare", "pyrdmacm"):
        assert set(table[impl]) == set(phases) | {"total"}
        assert all(table[impl][p] > 0 for p in phases)
        assert table[impl]["total"] == pytest.approx(sum(table[impl][p] for p in phases))
    # the library checks and records what the floor does not: more work in every phase, and
    # the events' (a GET_EVENT, an Event, the id's move) more than a resolve_route's write
    for p in phases:
        assert table["pyrdmacm"][p] > table["bare"][p], p
    assert table["pyrdmacm"]["addr_events"] > table["pyrdmacm"]["resolve_route"]


def test_a_wrong_n_is_refused_with_a_message():
    out = subprocess.run([sys.executable, str(TOOL), "--n", "0"], capture_output=True, text=True)
    assert out.returncode == 2 and "--n must be at least 1" in out.stderr
