#!/usr/bin/env python3
"""The fabric check's benchmark: ``pyrdmacm mesh`` against a shell loop of librdmacm's ucmatose.

    tools/bench --mesh [--kernel SUITE] [--n 10,100,1000] [--runs 3] [--loop-max 1000]
    tools/bench_mesh.py ...                              the same

Boots the kernel lab's fabric topology (tools/lab: four guests, two rails each) once. On the
peers lab-a and lab-b it adds the targets as aliases to each rail's netdev, N/4 each
(10.2R.1.1 ... on lab-a's ethR, 10.2R.2.1 ... on lab-b's, in a /16 with no prefix route;
at most 250 a port, see aliases()), and waits until their GIDs are in the tables; here (lab-d) each rail gets a second address in that
/16 (10.20.255.4, 10.21.255.4), so that with ``--same-subnet`` each rail checks the aliases of
its own segment. Nobody listens on the port: each cell is a whole CM path proven by REJ
reason 8 (create, resolve the address with its ARP, the route, REQ, REJ, destroy).

For each N (the number of targets; the cells are N too, each target on one rail's segment):

``mesh``  one process: ``python -m pyrdmacm mesh --rails eth0,eth1 --same-subnet --json
          TARGETS``, all cells through one event channel, ``--concurrency`` (default 64) in
          flight. Wall time from the process' start to its exit, cells per second, its peak
          RSS (wait4's ru_maxrss) and so the memory a cell adds ((RSS at N - RSS at the
          smallest N) / (N - smallest N)).
``loop``  the C way an operator scripts it today: ``for t in TARGETS; do ucmatose -s $t -b
          SRC -p PORT -C 0; done`` in one bash (each ucmatose a new process that opens the
          RDMA devices, connects, prints REJECTED error 8 and exits with status 8), N up to
          ``--loop-max``.

The neighbour cache is flushed before every run (each pays its ARPs, as a first check does).
A run's cells must all be REJ reason 8 (exit status 8 for ucmatose): failures are counted and
shown. Rounds rotate the order; the figures are medians. The target of the fabric-check issue:
the mesh at least 20x faster than the loop at 1,000 targets, its rate flat in N.
Results and their reading: docs/benchmarks.md ("Fabric check").
"""

from __future__ import annotations

import argparse
import ipaddress
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
READY_PORT = 7008  # lab-a accepts TCP here once its aliases are up
PORT = 7471  # nobody listens: REJ reason 8
HERE_SECOND = {"eth0": "10.20.255.4/16", "eth1": "10.21.255.4/16"}
SOURCES = {"eth0": "10.20.0.4", "eth1": "10.21.0.4"}


def say(msg: str) -> None:
    print("bench-mesh: %s" % msg, file=sys.stderr, flush=True)


PEERS = ("lab-a", "lab-b")  # the aliases' hosts: 250 a rail each at most (below)
PER_TABLE = 250


def aliases(count: int, host: str | None = None) -> dict:
    """netdev -> the targets on that rail's segment, ``count`` in all, half a rail, spread
    over the peers (10.2R.P.1 ... on peer P's ethR; ``host``: just that peer's). Measured on
    6.1 with 500 aliases on one rxe port: REQs to the first 251 were answered, from the 301st
    on they timed out (their GIDs were in the table), so a port takes at most 250 here."""
    out: dict = {"eth0": [], "eth1": []}
    for i in range(count):
        rail = "eth%d" % (i % 2)
        k = i // 2  # the k-th target of that rail
        peer, j = k % len(PEERS), k // len(PEERS)
        if j >= PER_TABLE:
            raise SystemExit("bench-mesh: at most %d targets" % (2 * len(PEERS) * PER_TABLE))
        if host in (None, PEERS[peer]):
            out[rail].append("10.2%s.%d.%d" % (rail[-1], peer + 1, j + 1))
    return out


def sh(*argv: str, stdin: str | None = None) -> None:
    subprocess.run(argv, input=stdin, text=True, check=True, stdout=subprocess.DEVNULL)


def peer(count: int) -> int:
    """On each peer of the fabric (tools/lab's --peer-command): lab-a takes the aliases."""
    me = socket.gethostname()
    if me not in PEERS:
        return 0
    batch = "".join("addr add %s/16 dev %s noprefixroute\n" % (a, rail)
                    for rail, addrs in aliases(count, me).items() for a in addrs)
    sh("ip", "-batch", "-", stdin=batch)
    # ib_core adds an address's RoCE GIDs (v1 and v2) from a workqueue, after `ip` returns:
    # a REQ to an address whose GID is not in the table yet is dropped by rxe. Ready once
    # every alias is there.
    started = time.monotonic()
    for rail, addrs in aliases(count, me).items():
        want = {ipaddress.IPv6Address("::ffff:%s" % a) for a in addrs}
        gids = Path("/sys/class/infiniband/rxe%s/ports/1/gids" % rail[-1])
        while True:
            have = set()
            for f in gids.iterdir():
                text = f.read_text().strip()
                if text.startswith("0000:0000:0000:0000:0000:ffff:"):
                    have.add(ipaddress.IPv6Address(text))
            if want <= have:
                break
            say("%s: %d of %d aliases of %s in the GID table after %.0f s" % (
                me, len(want & have), len(want), rail, time.monotonic() - started))
            if time.monotonic() - started > 600:
                raise SystemExit("bench-mesh: %s: %d of %d aliases of %s in the GID table after 600 s" % (
                    me, len(want & have), len(want), rail))
            time.sleep(5)
    say("%s: its aliases up, their GIDs in the tables after %.1f s" % (me, time.monotonic() - started))
    server = socket.create_server(("", READY_PORT), backlog=16)
    while True:
        server.accept()[0].close()


def wait_ready(timeout: float = 900.0) -> None:
    deadline = time.monotonic() + timeout
    for n in range(1, len(PEERS) + 1):
        while True:
            try:
                socket.create_connection(("10.20.0.%d" % n, READY_PORT), timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("bench-mesh: %s never said its aliases were up" % PEERS[n - 1])
                time.sleep(0.5)


def run_mesh(targets: dict, concurrency: int, profile: str | None = None) -> dict:
    words = [a for addrs in targets.values() for a in addrs]
    runner = ["-m", "cProfile", "-o", profile] if profile else []
    argv = [sys.executable, *runner, "-m", "pyrdmacm", "mesh", "--rails", "eth0,eth1", "--same-subnet", "--json", "-n",
            "--timeout", "5000", "--port", str(PORT), "--concurrency", str(concurrency), *words]
    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as errf:  # a file, not a pipe: stdout is read to its end first
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=errf, text=True)
        out = proc.stdout.read()  # type: ignore[union-attr]
        _pid, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its peak RSS
        seconds = time.monotonic() - started
        errf.seek(0)
        err = errf.read()
    code = proc.returncode = os.waitstatus_to_exitcode(status)  # Popen knows it is reaped
    proc.stdout.close()  # type: ignore[union-attr]
    cells = [r["cell"] for r in map(json.loads, out.splitlines()) if "cell" in r]
    good = sum(1 for c in cells if c["outcome"] == "no-listener")
    failed = {}
    for c in cells:
        if c["outcome"] != "no-listener":
            failed[c["outcome"]] = failed.get(c["outcome"], 0) + 1
    if len(cells) != len(words):
        failed["cells missing"] = len(words) - len(cells)
    for c in [c for c in cells if c["outcome"] != "no-listener"][:3]:
        say("failed: %s -> %s: %s %s" % (c["rail"], c["dst"], c["outcome"], c["detail"]))
    if "Traceback" in err:
        failed["traceback"] = 1
        say(err[-2000:])
    return {"seconds": seconds, "cells": len(words), "ok": good, "failed": failed, "rss_kib": usage.ru_maxrss,
            "user_s": round(usage.ru_utime, 3), "sys_s": round(usage.ru_stime, 3), "exit": code}


def startup(runs: int) -> dict:
    """What a check costs before its first cell: ``python -c pass`` and ``mesh`` with one
    target (lab-a's rail 0: REJ reason 8), each ``runs`` times, in the same boot (medians
    in seconds, and the ratio the fabric-check issue asks about: at most 2x)."""
    one = [sys.executable, "-m", "pyrdmacm", "mesh", "--rails", "eth0", "--json", "-n", "--timeout", "5000",
           "--port", str(PORT), "10.20.0.1"]
    got: dict = {"pass": [], "one_target": [], "pyroute2": []}
    for r in range(runs):
        for kind in (("pass", "one_target") if r % 2 == 0 else ("one_target", "pass")):
            sh("ip", "neigh", "flush", "all")
            argv = [sys.executable, "-c", "pass"] if kind == "pass" else one
            started = time.monotonic()
            done = subprocess.run(argv, capture_output=True, text=True)
            got[kind].append(time.monotonic() - started)
            if kind == "one_target":
                cells = [r["cell"] for r in map(json.loads, done.stdout.splitlines()) if "cell" in r]
                if [c["outcome"] for c in cells] != ["no-listener"]:
                    raise SystemExit("bench: the one-target mesh did not get REJ 8: %s%s" % (done.stdout, done.stderr))
    # whether the run imported pyroute2 (-X importtime's lines name every module imported)
    done = subprocess.run([sys.executable, "-X", "importtime", *one[1:]], capture_output=True, text=True)
    got["pyroute2"] = any(line.rstrip().endswith(" pyroute2") for line in done.stderr.splitlines())
    med = {k: round(statistics.median(v), 3) for k, v in got.items() if isinstance(v, list)}
    return {"raw": got, "median": med, "ratio": round(med["one_target"] / med["pass"], 2),
            "imports_pyroute2": got["pyroute2"]}


def run_loop(targets: dict) -> dict:
    script = ("ok=0; bad=0; for t in %s; do ucmatose -s \"$t\" -b \"$SRC\" -p %d -C 0 >/dev/null 2>&1; "
              "if [ $? -eq 8 ]; then ok=$((ok+1)); else bad=$((bad+1)); fi; done; echo \"$ok $bad\"")
    seconds = 0.0
    ok = bad = 0
    for rail, addrs in targets.items():  # one loop per rail: its source, as an operator's script binds
        if not addrs:
            continue
        started = time.monotonic()
        done = subprocess.run(["bash", "-c", script % (" ".join(addrs), PORT)], capture_output=True, text=True,
                              env=dict(os.environ, SRC=SOURCES[rail]))
        seconds += time.monotonic() - started
        a, b = done.stdout.split()
        ok, bad = ok + int(a), bad + int(b)
    count = sum(len(a) for a in targets.values())
    return {"seconds": seconds, "cells": count, "ok": ok, "failed": {"not REJ 8": bad} if bad else {}}


def guest(args: argparse.Namespace) -> int:
    ns = sorted(args.ns)
    wait_ready()
    for rail, addr in HERE_SECOND.items():
        sh("ip", "addr", "add", addr, "dev", rail)
    for key, value in (("gc_thresh1", 4096), ("gc_thresh2", 8192), ("gc_thresh3", 16384)):
        Path("/proc/sys/net/ipv4/neigh/default/%s" % key).write_text("%d\n" % value)
    first = startup(args.runs)
    say("start-up: python -c pass %.2f s, mesh with one target %.2f s (%.1fx)%s" % (
        first["median"]["pass"], first["median"]["one_target"], first["ratio"],
        ", pyroute2 imported" if first["imports_pyroute2"] else ", no pyroute2"))
    runs: dict = {}
    for r in range(args.runs):
        for n in ns:
            targets = aliases(n)
            kinds = ["mesh"] + (["loop"] if n <= args.loop_max else [])
            for kind in (kinds if r % 2 == 0 else kinds[::-1]):  # the order rotates between rounds
                sh("ip", "neigh", "flush", "all")
                time.sleep(args.settle)
                got = run_mesh(targets, args.concurrency) if kind == "mesh" else run_loop(targets)
                runs.setdefault("%s/%d" % (kind, n), []).append(got)
                say("round %d, N=%d, %s: %.2f s%s, %d of %d cells REJ 8%s" % (
                    r + 1, n, kind, got["seconds"],
                    " (user %.2f, sys %.2f)" % (got["user_s"], got["sys_s"]) if "user_s" in got else "",
                    got["ok"], got["cells"],
                    ", failed %s" % got["failed"] if got["failed"] else ""))
    if args.profile:  # one more run of the largest N under cProfile: where a cell's time goes
        import pstats

        stats = str(Path(args.json).with_suffix(".prof"))
        sh("ip", "neigh", "flush", "all")
        time.sleep(args.settle)
        got = run_mesh(aliases(max(ns)), args.concurrency, profile=stats)
        say("profiled run, N=%d: %.2f s (user %.2f, sys %.2f), %d of %d cells REJ 8" % (
            max(ns), got["seconds"], got["user_s"], got["sys_s"], got["ok"], got["cells"]))
        with open(Path(args.json).with_suffix(".prof.txt"), "w") as f:
            pstats.Stats(stats, stream=f).sort_stats("tottime").print_stats(45)
            pstats.Stats(stats, stream=f).sort_stats("cumulative").print_stats(45)
    result = {"phase": "mesh", "kernel": os.uname().release, "lab": os.environ.get("PYRDMACM_LAB", ""),
              "runs": args.runs, "concurrency": args.concurrency, "ns": ns, "raw": runs}
    result["summary"] = summarise(runs, ns)
    result["startup"] = first
    Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    failed = any(g["failed"] for v in runs.values() for g in v)
    return 1 if failed else 0


def summarise(runs: dict, ns: list) -> dict:
    out = {}
    for n in ns:
        row: dict = {}
        for kind in ("mesh", "loop"):
            got = runs.get("%s/%d" % (kind, n))
            if not got:
                continue
            s = statistics.median(g["seconds"] for g in got)
            row[kind] = {"seconds": round(s, 3), "cells_per_s": round(n / s, 1),
                         "spread": round(max(g["seconds"] for g in got) / min(g["seconds"] for g in got) - 1, 3)}
            if kind == "mesh":
                row[kind]["rss_mib"] = round(statistics.median(g["rss_kib"] for g in got) / 1024, 1)
        if "loop" in row:
            row["speedup"] = round(row["loop"]["seconds"] / row["mesh"]["seconds"], 1)
        out[str(n)] = row
    small = str(min(ns))
    if len(ns) > 1:  # the rate once started: the cells the largest N adds over the smallest, per second
        big = str(max(ns))
        added = out[big]["mesh"]["seconds"] - out[small]["mesh"]["seconds"]
        loops = [n for n in ns if "loop" in out[str(n)]]
        if added > 0:
            rate = (max(ns) - min(ns)) / added
            out["after_startup"] = {"mesh_cells_per_s": round(rate, 1)}
            if loops:
                loop_rate = out[str(max(loops))]["loop"]["cells_per_s"]
                out["after_startup"].update(loop_cells_per_s=loop_rate, speedup=round(rate / loop_rate, 1))
    for n in ns:
        if n != min(ns):
            grew = out[str(n)]["mesh"]["rss_mib"] - out[small]["mesh"]["rss_mib"]
            out[str(n)]["mesh"]["kib_per_cell"] = round(grew * 1024 / (n - min(ns)), 1)
    return out


def table(result: dict) -> str:
    lines = ["kernel %s, fabric topology, medians of %d rounds; mesh --concurrency %d" % (
        result["kernel"], result["runs"], result["concurrency"]),
        "%8s  %10s  %10s  %9s  %11s  %10s  %10s  %8s" % ("targets", "mesh s", "cells/s", "RSS MiB", "KiB/cell",
                                                         "loop s", "cells/s", "speed-up")]
    for n in result["ns"]:
        row = result["summary"][str(n)]
        m, lp = row["mesh"], row.get("loop")
        lines.append("%8d  %10.2f  %10.1f  %9.1f  %11s  %10s  %10s  %8s" % (
            n, m["seconds"], m["cells_per_s"], m["rss_mib"], m.get("kib_per_cell", "-"),
            "%.1f" % lp["seconds"] if lp else "-", "%.1f" % lp["cells_per_s"] if lp else "-",
            "%.1fx" % row["speedup"] if lp else "-"))
    bad = {k: [g["failed"] for g in v if g["failed"]] for k, v in result["raw"].items()}
    bad = {k: v for k, v in bad.items() if v}
    if bad:
        lines.append("FAILED cells: %s" % bad)
    first = result.get("startup")
    if first:
        lines.append("start-up: python -c pass %.2f s, mesh with one target %.2f s: %.1fx (target <= 2x: %s)%s" % (
            first["median"]["pass"], first["median"]["one_target"], first["ratio"],
            "met" if first["ratio"] <= 2 else "NOT met",
            "; it imported pyroute2" if first["imports_pyroute2"] else "; no pyroute2 imported"))
    after = result["summary"].get("after_startup")
    if after and "speedup" in after:
        lines.append("after start-up (%d -> %d targets): mesh %.1f cells/s, the loop %.1f: %.1fx (target >= 20x: %s)"
                     % (min(result["ns"]), max(result["ns"]), after["mesh_cells_per_s"], after["loop_cells_per_s"],
                        after["speedup"], "met" if after["speedup"] >= 20 else "NOT met"))
    if "1000" in result["summary"] and "speedup" in result["summary"]["1000"]:
        s = result["summary"]["1000"]["speedup"]
        lines.append("target: mesh >= 20x the ucmatose loop at 1,000 targets: %.1fx -> %s" % (s, "met" if s >= 20
                                                                                               else "NOT met"))
    return "\n".join(lines)


def host(args: argparse.Namespace) -> int:
    runs = ROOT / "build" / "bench" / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-mesh-"), dir=str(runs)))
    guest_json = out / "bench.json"
    python = sys.executable
    venv = ROOT / "build" / "venv" / "bin" / "python"
    if venv.exists():
        python = str(venv)
    me = str(Path(__file__).resolve())
    # as an installed package is: compiled (the guest's root is read-only, it writes no .pyc)
    subprocess.run([python, "-m", "compileall", "-q", str(ROOT / "pyrdmacm")], check=True)
    cmd = [sys.executable, str(ROOT / "tools" / "lab"), "run", "--kernel", args.kernel, "--topology", "fabric",
           "--timeout", str(args.lab_timeout), "--out", str(out),
           "--peer-command", "%s %s --peer %d" % (python, me, max(args.ns)), "--",
           python, me, "--guest", "--n", args.n, "--runs", str(args.runs), "--loop-max", str(args.loop_max),
           "--concurrency", str(args.concurrency), "--settle", str(args.settle), "--json", str(guest_json),
           *(["--profile"] if args.profile else [])]
    say("booting the kernel lab (%s, fabric): results in %s" % (args.kernel, out))
    code = subprocess.run(cmd).returncode
    if not guest_json.exists():
        say("the lab run left no results (exit %d); see %s" % (code, out))
        return code or 1
    result = json.loads(guest_json.read_text())
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return code


def main(argv: list) -> int:
    ap = argparse.ArgumentParser(prog="tools/bench --mesh", description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", default="bookworm", choices=("bullseye", "bookworm", "trixie", "sid"))
    ap.add_argument("--n", default="10,100,1000", help="target counts (default 10,100,1000; at most 1000: "
                    "Soft-RoCE's GID table holds 1024 entries a port, two per alias)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--loop-max", type=int, default=1000, help="largest N for the ucmatose loop (default 1000)")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--settle", type=float, default=1.0, help="seconds between runs (default 1)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--from", dest="from_json", metavar="FILE", help="print a saved --json result")
    ap.add_argument("--lab-timeout", type=float, default=5400)
    ap.add_argument("--profile", action="store_true", help="then one run of the largest N under cProfile: "
                    "its statistics beside the --json file (.prof, .prof.txt)")
    ap.add_argument("--peer", type=int, metavar="N", help=argparse.SUPPRESS)
    ap.add_argument("--guest", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.ns = [int(x) for x in args.n.split(",") if x]
    if not args.ns or min(args.ns) < 2 or max(args.ns) > 2 * len(PEERS) * PER_TABLE:
        ap.error("--n takes target counts 2..%d" % (2 * len(PEERS) * PER_TABLE))
    if args.peer:
        return peer(args.peer)
    if args.from_json:
        print(table(json.loads(Path(args.from_json).read_text())))
        return 0
    if args.guest:
        return guest(args)
    return host(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
