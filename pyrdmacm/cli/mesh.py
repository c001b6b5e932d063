"""``mesh``: the fabric check (:mod:`pyrdmacm.mesh`) from the command line: every local rail
against every target, as a table, JSON Lines, an SVG picture and a Prometheus text file;
``--merge`` joins the JSON of many hosts' runs into one matrix."""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from typing import Any, List, Optional

from . import conn
from .inputs import DEFAULT_PORT, _BadInput, _timeout_ms
from .output import (EXIT_EVENT, EXIT_INTERRUPTED, EXIT_NODEV, EXIT_OK, EXIT_OUTPUT, EXIT_USAGE, _err, _text, error_json,
                     json_line)


def _targets_from(args: argparse.Namespace) -> List[str]:
    words = list(args.targets)
    if args.hosts:
        try:
            with open(args.hosts) as f:
                for line in f:
                    line = line.split("#", 1)[0].strip()
                    words.extend(line.split())
        except OSError as e:
            raise _BadInput("--hosts %s: %s" % (args.hosts, e.strerror or e)) from None
    if not words:
        raise _BadInput("give the targets to check (addresses or host names), or --hosts FILE, or --merge FILES")
    return words


def _int(text: str, flag: str, lo: int, hi: int) -> int:
    try:
        value = int(text, 10)
    except ValueError:
        value = lo - 1
    if not lo <= value <= hi:
        raise _BadInput("%s takes a number %d..%d, got %r" % (flag, lo, hi, text))
    return value


def _outputs(args: argparse.Namespace, m: Any, code: int, started: float) -> int:
    try:
        if args.svg:
            from ..mesh import render

            render.write_atomically(args.svg, render.svg(m))
        if args.prometheus:
            from ..mesh import render

            render.write_atomically(args.prometheus, render.prometheus(m))
    except OSError as e:
        _err("cannot write %s: %s" % (e.filename, _text(e)))
        code = EXIT_OUTPUT
    cells = list(m.cells.values())
    ok = sum(1 for c in cells if c.ok)
    vs = None
    if args.verdicts:
        from ..mesh.verdicts import verdicts

        vs = verdicts(m)
        if code in (EXIT_OK, EXIT_EVENT):  # a host that is not healthy fails the check
            code = EXIT_EVENT if any(not v["healthy"] for v in vs) else EXIT_OK
    made = None
    if args.settings:
        from ..mesh.settings import settings

        made = settings(m)
    if args.json:
        for v in vs or ():
            json_line({"verdict": v})
        for s in made[0] if made else ():
            json_line({"settings": s})
        summary = {"cells": len(cells), "ok": ok, "failed": len(cells) - ok, "refused": len(m.refused),
                   "asymmetries": len(m.asymmetries), "rows": ["%s/%s" % r for r in m.rows], "targets": m.columns,
                   "seconds": round(time.monotonic() - started, 3)}
        if vs is not None:
            summary["unhealthy"] = sum(1 for v in vs if not v["healthy"])
        if made is not None:
            summary["settings_notes"] = made[1]
        json_line({"summary": summary, "exit": code})
    elif vs is not None or made is not None:
        lines: List[str] = []
        if vs is not None:
            from ..mesh.verdicts import verdict_lines

            lines += verdict_lines(vs)
        if made is not None:
            from ..mesh.settings import settings_lines

            lines += ([""] if lines else []) + settings_lines(*made)
        sys.stdout.write("\n".join(lines) + "\n")
    else:
        from ..mesh import render  # not for JSON: the SVG's escaping brings in urllib (a tenth of a second)

        sys.stdout.write(render.table(m, explain=not args.brief))
    return code


def _merge(args: argparse.Namespace) -> int:
    from ..mesh import merge

    started = time.monotonic()
    m = merge(args.merge)
    for why in m.refused:  # each on its own line; the rest is merged all the same
        _err("--merge: refused %s" % why)
    if not m.cells:
        _err("--merge: no cells to merge in %s" % ", ".join(args.merge))
        return EXIT_USAGE
    if args.json:
        for c in m.cells.values():
            json_line({"cell": c.to_json()})
        for a in m.asymmetries:  # findings of their own: no cell failed for them
            json_line({"asymmetry": a})
    code = EXIT_USAGE if m.refused else EXIT_OK if not m.failed else EXIT_EVENT
    return _outputs(args, m, code, started)


def cmd_mesh(args: argparse.Namespace) -> int:
    from ..devices import list_devices
    from ..mesh import engine

    if args.merge:
        if args.targets or args.hosts:
            _err("--merge joins saved runs: give no targets with it")
            return EXIT_USAGE
        return _merge(args)
    try:
        names = None if args.rails in (None, "all") else [n for n in args.rails.split(",") if n]
        if names == []:
            raise _BadInput("--rails takes netdev names separated by commas, or all")
        if args.inventory:
            try:
                return _inventory(args, engine.rails(names, devices=list_devices()))
            except ValueError as e:
                raise _BadInput(str(e)) from None
        words = _targets_from(args)
        port = _int(args.port, "--port", 1, 65535) if args.port is not None else DEFAULT_PORT
        timeout_ms = _timeout_ms(args.timeout)
        concurrency = _int(args.concurrency, "--concurrency", 1, 100000)
        sample = _int(args.sample, "--sample", 1, 1000000) if args.sample is not None else None
        jitter_ms = _int(args.jitter, "--jitter", 0, 3600000) if args.jitter is not None else 0
        every = _int(args.every, "--every", 1, 86400) if args.every is not None else None
        try:  # the targets (what was written) first, then the rails (what this host has)
            targets = engine.targets(words, all_addresses=args.all_addresses, numeric=args.numeric)
            devs = list_devices()  # once: a Soft-RoCE port's GID table is 1,024 files
            rails = engine.rails(names, devices=devs)
        except ValueError as e:
            raise _BadInput(str(e)) from None
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE
    if not rails:
        _err("no rails here: no netdev has an RDMA device behind it (see `pyrdmacm devices`, `rdma link`); "
             "--rails NETDEV checks one anyway")
        return EXIT_NODEV
    import random

    rounds = random.Random()
    while True:  # one round, or with --every one each period until stopped
        t0 = time.monotonic()
        if jitter_ms:  # nodes started together do not send their REQs together
            _nap(rounds.uniform(0, jitter_ms / 1000.0))
        code = _round(args, rails, targets, devs, port, timeout_ms, concurrency, sample, rounds.random())
        if every is None or code in (EXIT_NODEV, EXIT_INTERRUPTED, EXIT_OUTPUT):
            return code
        try:
            _nap(max(0.0, every - (time.monotonic() - t0)))
        except KeyboardInterrupt:
            return EXIT_INTERRUPTED


def _nap(seconds: float) -> None:
    """The waits between rounds (one place: a test shortens them)."""
    time.sleep(seconds)


def _inventory(args: argparse.Namespace, rails: List[Any]) -> int:
    """``--inventory``: this node's rails as a line of targets (each rail's first address),
    to gather into a fleet's targets file."""
    host = socket.gethostname()
    if args.json:
        json_line({"inventory": {"host": host, "rails": [{"netdev": r.netdev, "addresses": list(r.addresses),
                                                          "device": r.device, "port": r.port} for r in rails]}})
        return EXIT_OK
    first = [r.addresses[0] for r in rails if r.addresses]
    if not first:
        _err("no rail here has an address: nothing to list")
        return EXIT_NODEV
    print("%s  # %s: %s" % (" ".join(first), host, " ".join(r.netdev for r in rails if r.addresses)))
    return EXIT_OK


def _round(args: argparse.Namespace, rails: List[Any], targets: List[Any], devs: Any, port: int, timeout_ms: int,
           concurrency: int, sample: Optional[int], seed: float) -> int:
    """One check of the plan (every rail against every target, or a sample), its outputs."""
    from ..errors import DeviceNodeError
    from ..mesh import Cell, Matrix, check, engine

    try:
        ch = conn._open_channel()
    except DeviceNodeError as e:
        _err(_text(e))
        if args.json:
            json_line({"error": error_json(e), "exit": EXIT_NODEV})
        return EXIT_NODEV
    done: List[Cell] = []
    plan = engine.pairs(rails, targets, args.same_subnet, sample=sample, seed=seed)
    total = len(plan)
    progress = sys.stderr.isatty() and not args.json

    bad = 0
    flush_due = False

    def flush() -> None:
        nonlocal flush_due
        flush_due = False
        sys.stdout.flush()

    def on_cell(c: Cell) -> None:
        nonlocal bad, flush_due
        done.append(c)
        if args.json:
            json_line({"cell": c.to_json()})
            if not flush_due:  # the lines of the cells that end in one turn of the loop: one write
                try:
                    asyncio.get_running_loop().call_soon(flush)
                    flush_due = True
                except RuntimeError:  # no loop runs (a cell reported after the run): now
                    sys.stdout.flush()
        if progress:
            bad += not c.ok
            sys.stderr.write("\r%d/%d cells checked, %d do not reach the far CM " % (len(done), total, bad))
            sys.stderr.flush()

    started = time.monotonic()
    code: Optional[int] = None
    try:
        check(rails, targets, port=port, timeout_ms=timeout_ms, concurrency=concurrency, on_cell=on_cell, channel=ch,
              same_subnet=args.same_subnet, devices=devs, sample=sample, seed=seed)
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    finally:
        ch.close()
        if progress:
            sys.stderr.write("\n")
    host = done[0].host if done else socket.gethostname()
    by_place = {(c.rail, c.target): c for c in done}
    m = Matrix.of(by_place.get((r.netdev, t.name)) or Cell(host=host, rail=r.netdev, target=t.name, dst=t.address)
                  for r, t in plan)  # in the plan's order: cells not checked (Ctrl-C) say so
    if args.json:  # the stream holds the whole matrix: the cells not checked too
        for c in m.cells.values():
            if c.outcome == "not-checked":
                json_line({"cell": c.to_json()})
    if code is None:
        code = EXIT_OK if not m.failed else EXIT_EVENT
    return _outputs(args, m, code, started)
