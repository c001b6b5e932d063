"""A matrix's verdicts, as node health checks print them: one per host, healthy or what is
wrong with the likely culprit, the culprits ranked from the widest to the narrowest:

1. ``rail``: a rail whose own row reaches none of its targets -- the NIC or the host;
2. ``far-end``: a target that fails from every rail that tried it -- the far end (its host,
   when the matrix has that host's run);
3. ``path``: a failed cell that neither explains -- the path between the two;
4. ``config``: the two ends of a path that see the data path differently (a listener's REP,
   or a merge's asymmetry) -- their configuration.

A finding names every host it concerns: a path's belongs to both ends, an asymmetry's to
both hosts.  A target that is no row's source (no run of its own) gets a verdict under its
own name.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .cells import Cell
from .merge import Matrix

#: kind -> (rank, the likely culprit in words)
KINDS: Dict[str, Tuple[int, str]] = {
    "rail": (1, "the NIC or the host"),
    "far-end": (2, "the far end"),
    "path": (3, "the path between"),
    "config": (4, "the configuration of the two ends"),
}


def _failure(c: Cell) -> str:
    return "%s%s" % (c.outcome, " (%s)" % c.detail if c.detail else "")


def verdicts(m: Matrix) -> List[Dict[str, Any]]:
    """One verdict per host of the matrix (rows' hosts first, in their order, then targets
    with no run of their own that something is wrong with): ``{"host", "healthy",
    "findings": [{"kind", "rank", "culprit", "what"}]}``, findings ranked."""
    rows: Dict[Tuple[str, str], List[Cell]] = {}
    columns: Dict[str, List[Cell]] = {}
    owner: Dict[str, Tuple[str, str]] = {}  # an address -> the row whose source it is
    for c in m.cells.values():
        rows.setdefault((c.host, c.rail), []).append(c)
        columns.setdefault(c.target, []).append(c)
        if c.src:
            owner.setdefault(c.src.split("%")[0], (c.host, c.rail))
    hosts: Dict[str, List[Dict[str, Any]]] = {h: [] for h, _ in m.rows}

    def add(host: str, kind: str, what: str) -> None:
        rank, culprit = KINDS[kind]
        found = hosts.setdefault(host, [])
        item = {"kind": kind, "rank": rank, "culprit": culprit, "what": what}
        if item not in found:
            found.append(item)

    dead_rows = {r for r, cells in rows.items() if not any(c.ok for c in cells)}
    for r in m.rows:
        if r in dead_rows:
            first = rows[r][0]
            add(r[0], "rail", "rail %s reaches none of its %d targets (%s)" % (r[1], len(rows[r]), _failure(first)))
    dead_columns = set()
    for t in m.columns:
        cells = columns.get(t, [])
        tried = [c for c in cells if (c.host, c.rail) not in dead_rows]  # a dead row says nothing of the target
        if tried and not any(c.ok for c in tried):
            dead_columns.add(t)
            where = owner.get((tried[0].dst or "").split("%")[0])
            host = where[0] if where else t
            add(host, "far-end", "%s%s fails from %s that tried it (%s)" % (
                t, " (rail %s)" % where[1] if where else "",
                "all %d rails" % len(tried) if len(tried) > 1 else "the one rail", _failure(tried[0])))
    for c in m.failed:
        if (c.host, c.rail) in dead_rows or c.target in dead_columns:
            continue  # explained by its row or its column
        where = owner.get((c.dst or "").split("%")[0])
        what = "%s/%s -> %s: %s" % (c.host, c.rail, c.target, _failure(c))
        add(c.host, "path", what)
        if where is not None and where[0] != c.host:
            add(where[0], "path", what)
    for a in m.asymmetries:  # first: they name both hosts
        what = "%s <-> %s: %s" % (a["a"], a["b"], "; ".join(a["mismatches"]))
        for side in (a["a"], a["b"]):
            add(side.rpartition("/")[0], "config", what)
    for c in m.cells.values():
        if c.mismatches:
            what = "%s/%s -> %s (here), its listener (there): %s" % (c.host, c.rail, c.target,
                                                                     "; ".join(c.mismatches))
            add(c.host, "config", what)
            if c.agent and c.agent.get("host") and c.agent["host"] != c.host:
                add(c.agent["host"], "config", what)
    out = []
    for host, found in hosts.items():
        found.sort(key=lambda f: f["rank"])
        out.append({"host": host, "healthy": not found, "findings": found})
    return out


def verdict_lines(vs: List[Dict[str, Any]]) -> List[str]:
    """The verdicts as text, a line per host: ``node1  healthy``, or ``node2  rail eth1
    reaches none of its 8 targets (timeout) -- likely the NIC or the host (+1 more)``."""
    width = max([len(v["host"]) for v in vs] + [4])
    lines = []
    for v in vs:
        if v["healthy"]:
            lines.append("%-*s  healthy" % (width, v["host"]))
            continue
        top, more = v["findings"][0], len(v["findings"]) - 1
        lines.append("%-*s  %s -- likely %s%s" % (width, v["host"], top["what"], top["culprit"],
                                                   " (+%d more)" % more if more else ""))
    return lines
