#!/usr/bin/env python3
"""Instructions per id on the direct write path (tools/bench_direct.py: the channel writing
through the kernel device's own write, /dev/null as the device), counted by valgrind's
callgrind: the library's own cost, per phase, without the noise of a shared or emulated
machine (the same binary and inputs count the same, whatever else the machine does).

    tools/bench_instructions.py [--n 1000] [--connections | --batch] [--baseline REV ...] [--json]

Each implementation runs in a process of its own under ``valgrind --tool=callgrind``:
``bare`` (the hand-written floor: struct.pack and os.write), ``pyrdmacm`` (this tree's
blocking API) and, for each ``--baseline REV``, that revision's package (extracted as
tools/bench --baseline does, put first on sys.path, and checked to be the one imported).
Between phases the driver calls getppid(), and callgrind dumps its counts before each call
(``--dump-before``): the instructions of a phase are those of its dump, divided by N. The
table gives instructions per id and phase, the ratio to the floor, and each baseline against
this tree.  No time is measured.

``--batch`` measures the calls for many ids (create_ids, get_batch, destroy_ids) against the
floor's same commands.  Their event phases read bursts, so no caller can put each event into
the reply buffer before its GET_EVENT: in both runs (floor and library) the channel's write is,
for the event phases only, an event source in Python that fills the reply in place of the
GET_EVENT system call (the same function, the same cost per event in both; the command phases
write to /dev/null as the others do).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # bench_direct and tools/bench, beside this file
MARK = "getppid"  # the C function the driver calls between phases: callgrind dumps before it


def child(impl: str, n: int, connections: bool, batch: bool = False) -> None:
    """Run one implementation's phases, a mark before the first and after each."""
    import bench_direct as bd
    import pyrdmacm

    want = os.environ.get("PYRDMACM_BENCH_TREE")
    if want and not Path(pyrdmacm.__file__).resolve().is_relative_to(Path(want).resolve()):
        raise SystemExit("bench_instructions: %s imported pyrdmacm from %s, not %s" % (impl, pyrdmacm.__file__, want))

    class Marks:  # bench_direct reads time.perf_counter() between phases: each is a mark
        @staticmethod
        def perf_counter() -> float:
            os.getppid()
            return 0.0

    bd.time = Marks
    dst = pyrdmacm.parse_address("10.0.0.2:7099" if connections else "10.0.0.2")
    if batch:
        fn = (lambda n, dst: bd.direct_bare(n, dst, batch=True)) if impl == "bare" else bd.direct_batch_pyrdmacm
    else:
        fns = {("bare", False): bd.direct_bare, ("bare", True): bd.direct_connections_bare}
        fn = fns.get((impl, connections)) or (bd.direct_connections_pyrdmacm if connections else bd.direct_pyrdmacm)
    fn(n, dst)
    os.getppid()  # the end of the last phase


def _totals(files: list) -> list:
    """The instruction count of each numbered dump (``cg.out.N``), in order."""
    out = []
    for path in sorted(files, key=lambda p: int(p.rpartition(".")[2])):
        with open(path) as f:
            text = f.read()
        m = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        out.append(int(m.group(1)) if m else 0)
    return out


def count(impl: str, n: int, connections: bool, tree: Path, scratch: Path, batch: bool = False) -> list:
    """Instructions per id of each phase of ``impl`` run from ``tree``."""
    out_dir = scratch / impl.replace("/", "_")
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(tree), PYTHONDONTWRITEBYTECODE="1", PYTHONHASHSEED="0",
               PYRDMACM_BENCH_TREE=str(tree / "pyrdmacm") if impl != "bare" else "")
    cmd = ["valgrind", "--tool=callgrind", "--dump-before=" + MARK, "--dump-instr=no",
           "--callgrind-out-file=%s/cg.out" % out_dir, sys.executable, str(Path(__file__).resolve()),
           "--child", impl, "--n", str(n)] + (["--connections"] if connections else []) + (["--batch"] if batch else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit("bench_instructions: %s failed:\n%s" % (impl, proc.stderr[-3000:]))
    dumps = _totals(glob.glob(str(out_dir / "cg.out.*")))  # the marks' dumps (cg.out: the exit's)
    phases = _phases(connections, batch)
    # dump 1: start-up until the first mark; then one a phase; then the end's mark
    if len(dumps) < len(phases) + 2:
        raise SystemExit("bench_instructions: %s: %d dumps, expected %d" % (impl, len(dumps), len(phases) + 2))
    return [d / n for d in dumps[1: 1 + len(phases)]]


def _phases(connections: bool, batch: bool = False) -> tuple:
    """The phases of a run, as its marks divide it (``setup``: not counted, not reported)."""
    import bench_direct as bd

    return bd.CONN_PHASES if connections else bd.BATCH_PHASES if batch else bd.DIRECT_PHASES


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1000, help="ids (connections) per run (default 1000)")
    ap.add_argument("--connections", action="store_true", help="a client connection's steps")
    ap.add_argument("--batch", action="store_true", help="the calls for many ids (create_ids, get_batch, destroy_ids)")
    ap.add_argument("--baseline", action="append", default=[], metavar="REV", help="another revision's package")
    ap.add_argument("--json", action="store_true", help="the figures as JSON")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.n, args.connections, args.batch)
        return 0
    if args.n < 1:
        ap.error("--n must be at least 1")
    if args.batch and (args.connections or args.baseline):
        ap.error("--batch measures this tree's calls for many ids (get_batch) against the floor: "
                 "not with --connections or --baseline")
    if shutil.which("valgrind") is None:
        raise SystemExit("bench_instructions: valgrind is not installed (apt-get install valgrind)")
    import importlib.util
    from importlib.machinery import SourceFileLoader

    loader = SourceFileLoader("bench_tool", str(HERE / "bench"))  # tools/bench: its --baseline extraction
    bench = importlib.util.module_from_spec(importlib.util.spec_from_loader("bench_tool", loader))
    loader.exec_module(bench)

    phases = _phases(args.connections, args.batch)
    res = {}
    with tempfile.TemporaryDirectory(prefix="pyrdmacm-instr-") as tmp:
        scratch = Path(tmp)
        res["bare"] = count("bare", args.n, args.connections, ROOT, scratch, args.batch)
        res["pyrdmacm"] = count("pyrdmacm", args.n, args.connections, ROOT, scratch, args.batch)
        for rev in args.baseline:
            sha, folder = bench.baseline_tree(rev)
            res[rev] = count(rev, args.n, args.connections, Path(folder), scratch, args.batch)
    table = {}
    for impl, v in res.items():
        row = dict(zip(phases, v))
        row.pop("setup", None)  # the event source's own preparation, outside the measure
        table[impl] = dict(row, total=sum(row.values()))
    phases = tuple(p for p in phases if p != "setup")
    if args.json:
        print(json.dumps({"n": args.n, "connections": args.connections, "batch": args.batch,
                          "instructions_per_id": table}, indent=1))
        return 0
    impls = list(table)
    print("instructions per %s, N=%d (callgrind; the direct path, /dev/null as the device%s)"
          % ("connection" if args.connections else "id", args.n,
             "; the calls for many ids, events from a source in Python" if args.batch else ""))
    print("%-20s" % "phase" + "".join("%12s" % i[:12] for i in impls) + "%10s" % "py/bare"
          + "".join("%12s" % ("py/" + r[:9]) for r in args.baseline))
    for p in phases + ("total",):
        row = table["pyrdmacm"][p]
        print("%-20s" % p + "".join("%12.0f" % table[i][p] for i in impls) + "%10.2f" % (row / table["bare"][p])
              + "".join("%12.2f" % (row / table[r][p]) for r in args.baseline))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
