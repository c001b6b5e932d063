"""What a transport needs on each node so that it uses the paths a matrix shows working:
NCCL's and UCX's device, netdev and GID index settings, made from the cells, and a plain
statement where no single value fits.

A rail counts when every cell of its row reaches the far CM and none of its paths is named
for a mismatch; the others are left out with the reason.  The GID index is the one the
kernel gave the QP (a listener's REP came: ``qp.sgid_index``) where a cell has it, else the
GID table's index for the route's GID.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Set, Tuple

from .cells import Cell
from .merge import Matrix


def _gid_index(c: Cell) -> Optional[int]:
    index = c.qp.get("sgid_index")
    return index if isinstance(index, int) else c.gid_index


def settings(m: Matrix) -> Tuple[List[Dict[str, Any]], List[str]]:
    """Per host of the matrix, in row order: ``{"host", "rails", "left_out", "gid_index",
    "env"}`` (``env``: NCCL_IB_HCA, NCCL_SOCKET_IFNAME, UCX_NET_DEVICES and, where one index
    fits, NCCL_IB_GID_INDEX); and the statements that concern the nodes together."""
    rows: Dict[Tuple[str, str], List[Cell]] = {}
    for c in m.cells.values():
        rows.setdefault((c.host, c.rail), []).append(c)
    paired: Set[str] = set()  # the rows named in an asymmetry: their paths disagree with the far end
    for a in m.asymmetries:
        paired.update((a["a"], a["b"]))
    out: List[Dict[str, Any]] = []
    index_of: Dict[str, int] = {}
    notes: List[str] = []
    for host in dict.fromkeys(h for h, _ in m.rows):
        rails: List[str] = []
        left_out: List[Dict[str, str]] = []
        hcas: List[str] = []
        indexes: Dict[str, int] = {}
        for h, rail in m.rows:  # the rails in the run's own order
            cells = rows.get((h, rail), [])
            if h != host or not cells:
                continue
            bad = [c for c in cells if not c.ok]
            named = any(c.mismatches for c in cells) or "%s/%s" % (h, rail) in paired
            dev = next((c for c in cells if c.device), None)
            if bad or named or dev is None:
                why = ("%d of its %d targets fail" % (len(bad), len(cells)) if bad else
                       "its two ends disagree on the data path" if named else "no cell says its device")
                left_out.append({"rail": rail, "why": why})
                continue
            rails.append(rail)
            hcas.append("%s:%s" % (dev.device, dev.port))
            found = {i for i in map(_gid_index, cells) if i is not None}
            if len(found) == 1:
                indexes[rail] = found.pop()
        env: Dict[str, str] = {}
        gid_index: Optional[int] = None
        if rails:
            hca = ",".join(dict.fromkeys(hcas))
            env = {"NCCL_IB_HCA": "=" + hca, "NCCL_SOCKET_IFNAME": "=" + ",".join(rails), "UCX_NET_DEVICES": hca}
            values = set(indexes.values())
            if len(values) == 1 and len(indexes) == len(rails):
                gid_index = values.pop()
                env["NCCL_IB_GID_INDEX"] = str(gid_index)
                index_of[host] = gid_index
            elif values:
                notes.append("%s: no single GID index fits its rails (%s): NCCL_IB_GID_INDEX takes one; leave it "
                             "unset and let NCCL find each port's (NCCL_IB_ROCE_VERSION_NUM=2, "
                             "NCCL_IB_ADDR_FAMILY=AF_INET)" % (host, ", ".join("%s %d" % kv for kv in
                                                                                indexes.items())))
        out.append({"host": host, "rails": rails, "left_out": left_out, "gid_index": gid_index, "env": env})
    if len(set(index_of.values())) > 1:
        notes.append("the nodes do not share one GID index (%s): set NCCL_IB_GID_INDEX per node as listed, not once "
                     "for the whole job" % ", ".join("%s %d" % kv for kv in index_of.items()))
    return out, notes


def settings_lines(per_host: List[Dict[str, Any]], notes: List[str]) -> List[str]:
    """The settings as text: ``node1  NCCL_IB_HCA==rxe0:1 ...`` per host, what was left out
    beneath it, then the statements."""
    width = max([len(s["host"]) for s in per_host] + [4])
    lines = []
    for s in per_host:
        words = " ".join("%s=%s" % kv for kv in s["env"].items())
        lines.append("%-*s  %s" % (width, s["host"], words or "no rail works: nothing to set"))
        lines += ["%-*s    left out: %s (%s)" % (width, "", r["rail"], r["why"]) for r in s["left_out"]]
    return lines + notes
