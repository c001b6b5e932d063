"""The fabric check on the lab's fabric: four guests, two rails each on two segments, lab-c's
eth1 broken on purpose (an address, no RDMA device). Each guest runs the mesh against all
eight rail addresses, one command per host as srun or clush launch them; the merged matrix
must hold exactly the broken cells, each with its reason, and reason 8 everywhere else.
On the oldest and newest kernels.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

pytestmark = pytest.mark.kernel(topology="fabric", suites=("bullseye", "sid"))

HOSTS = ("lab-a", "lab-b", "lab-c", "lab-d")
TARGETS = ["10.2%d.0.%d" % (rail, n) for rail in (0, 1) for n in (1, 2, 3, 4)]
BROKEN = ("lab-c", "eth1", "10.21.0.3")  # tools/lab's FABRIC_BROKEN: no RDMA device behind it
MESH = ["-m", "pyrdmacm", "mesh", "--rails", "eth0,eth1", "--same-subnet", "--timeout", "4000", "--json", *TARGETS]


def cells(out: str) -> List[dict]:
    return [r["cell"] for r in map(json.loads, out.splitlines()) if "cell" in r]


def test_the_merged_matrix_holds_exactly_the_broken_rail_with_its_reasons(peers, tmp_path):
    assert [p.host for p in peers] == list(HOSTS[:3])
    runs = [p.start([sys.executable, *MESH]) for p in peers]  # the three peers at once, as clush does
    here = subprocess.run([sys.executable, *MESH], capture_output=True, text=True, timeout=600)
    print("--- %s: exit %d\n%s%s" % (os.uname().nodename, here.returncode, here.stdout, here.stderr))
    results = [(os.uname().nodename, here.returncode, here.stdout, here.stderr)]
    for p, r in zip(peers, runs):
        code, out, err = r.wait(timeout=600)
        print("--- %s: exit %d\n%s%s" % (p.host, code, out, err))
        results.append((p.host, code, out, err))
    files = []
    for host, code, out, err in results:
        assert "Traceback" not in err, (host, err)
        path = tmp_path / ("mesh-%s.json" % host)
        path.write_text(out)
        files.append(str(path))
        mine = cells(out)
        assert len(mine) == 8 and {c["host"] for c in mine} == {host}, (host, out, err)  # 2 rails x 4 on its subnet
        assert code == 1, (host, code, err)  # every host sees the broken rail: as a row or as a target
    merged = subprocess.run([sys.executable, "-m", "pyrdmacm", "mesh", "--merge", *files, "--json"],
                            capture_output=True, text=True, timeout=120)
    assert merged.returncode == 1 and "Traceback" not in merged.stderr, merged.stderr
    got: Dict[Tuple[str, str, str], dict] = {(c["host"], c["rail"], c["dst"]): c for c in cells(merged.stdout)}
    assert len(got) == 4 * 2 * 4
    broken = {k for k, c in got.items() if not c["ok"]}
    row = {k for k in got if k[:2] == BROKEN[:2]}
    column = {k for k in got if k[2] == BROKEN[2] and k[0] != BROKEN[0]}
    assert broken == row | column, sorted(broken ^ (row | column))
    assert len(row) == 4 and len(column) == 3
    for k in sorted(set(got) - broken):
        assert got[k]["outcome"] == "no-listener" and got[k]["status"] == 8, got[k]
        assert got[k]["device"] == "rxe" + k[1][-1] and got[k]["dgid"] == "::ffff:" + k[2], got[k]
    for k in sorted(row):  # the broken rail's own row: the kernel refuses, the pre-check says why
        c = got[k]
        assert c["device"] is None and (c["outcome"], c["status"]) == ("refused", -19), c
        assert any("eth1" in w and "no RDMA device" in w for w in c["why"]), c["why"]
    for k in sorted(column):  # the others' cells to it: no CM answers, and the merge names the rail
        c = got[k]
        assert c["outcome"] in ("timeout", "unreachable") and c["device"] == "rxe1", c
        assert c["why"][0].startswith("the target is lab-c/eth1, whose own run reaches 0 of its 4 targets"), c["why"]
    # the pictures of the whole cluster, for people (the README shows the SVG of such a run)
    svg = tmp_path / "fabric.svg"
    table = subprocess.run([sys.executable, "-m", "pyrdmacm", "mesh", "--merge", *files, "--svg", str(svg)],
                           capture_output=True, text=True, timeout=120)
    print(table.stdout)
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["rail", *TARGETS]
    assert [line.split()[0] for line in lines[1:9]] == ["%s/eth%d" % (h, r) for h in (os.uname().nodename,
                                                                                     *HOSTS[:3]) for r in (0, 1)]
    assert "32 cells: 25 reach the far CM, 7 do not" in table.stdout
    assert svg.read_text().count("<rect") > 32
    keep = os.environ.get("LAB_OUT", str(tmp_path))  # the picture and the runs, on the host too
    for f in [str(svg), *files]:
        shutil.copy(f, keep)
