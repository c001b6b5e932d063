"""Many hosts' runs of the fabric check joined into one matrix: rows are each host's rails,
columns the targets, in the order first seen."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Tuple

from .cells import Cell, shown


@dataclass
class Matrix:
    """Cells by (host, rail) row and target column; ``refused``: what a merge could not
    take (each "FILE line N: why"), the rest merged all the same."""

    rows: List[Tuple[str, str]] = field(default_factory=list)
    columns: List[str] = field(default_factory=list)
    cells: Dict[Tuple[str, str, str], Cell] = field(default_factory=dict)
    refused: List[str] = field(default_factory=list)
    #: pairs of rails whose cells each way (A -> B in A's run, B -> A in B's) see the data
    #: path differently (:func:`asymmetries`): ``{"a", "b", "a_addr", "b_addr", "mismatches"}``
    asymmetries: List[Dict[str, Any]] = field(default_factory=list)

    def add(self, cell: Cell) -> None:
        """Put ``cell`` in its place (a later run of the same cell replaces an earlier one)."""
        row = (cell.host, cell.rail)
        if row not in self.rows:
            self.rows.append(row)
        if cell.target not in self.columns:
            self.columns.append(cell.target)
        self.cells[(cell.host, cell.rail, cell.target)] = cell

    def get(self, row: Tuple[str, str], column: str) -> "Cell | None":
        return self.cells.get((row[0], row[1], column))

    @classmethod
    def of(cls, cells: Iterable[Cell]) -> "Matrix":
        m = cls()
        for c in cells:
            m.add(c)
        return m

    @property
    def failed(self) -> List[Cell]:
        return [c for c in self.cells.values() if not c.ok]


_WHAT = "give the output of `pyrdmacm mesh --json`"


def _strings(v: Any) -> bool:
    return v.__class__ is list and all(x.__class__ is str for x in v)


def _record(line: str) -> Dict[str, Any]:
    """One line of a run's output as a record of schema 1 (ValueError saying why not)."""
    try:
        record = json.loads(line)
    except ValueError as e:
        raise ValueError("not JSON (%s): %s" % (e, _WHAT)) from None
    except RecursionError:  # brackets nested deeper than the parser goes
        raise ValueError("not JSON (nested too deep): %s" % _WHAT) from None
    if not isinstance(record, dict):
        raise ValueError("not a JSON object: %s" % _WHAT)
    if record.get("schema") != 1:
        raise ValueError("schema %s; this pyrdmacm reads schema 1" % shown(record.get("schema")))
    summary = record.get("summary")
    if summary is not None:
        if not isinstance(summary, dict):
            raise ValueError("\"summary\" is %s, not a JSON object" % shown(summary))
        for key in ("rows", "targets"):
            if key in summary and not _strings(summary[key]):
                raise ValueError("the summary's %r is %s, not a list of strings" % (key, shown(summary[key])))
    return record


def read_cells(lines: Iterable[str], source: str = "input", order: "Matrix | None" = None,
               refused: "List[str] | None" = None) -> List[Cell]:
    """The cells of a run's JSON Lines output (``pyrdmacm mesh --json``): lines with a
    ``cell`` are taken; the summary's rows and targets, in the run's own order, go into
    ``order`` when given (the cells come in the order they ended).  A line that is not
    such output ("SOURCE line N: why", naming the field) is appended to ``refused`` and the
    rest read on; without ``refused``, it raises ValueError."""
    out = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = _record(line)
            summary = record.get("summary")
            if order is not None and summary is not None:
                for row in summary.get("rows", ()):
                    host, _, rail = row.rpartition("/")
                    if host and (host, rail) not in order.rows:
                        order.rows.append((host, rail))
                order.columns.extend(t for t in summary.get("targets", ()) if t not in order.columns)
            if "cell" in record:
                out.append(Cell.from_json(record["cell"]))
        except ValueError as e:
            why = "%s line %d: %s" % (source, n, e)
            if refused is None:
                raise ValueError(why) from None
            refused.append(why)
    return out


def merge(paths: Iterable[str]) -> Matrix:
    """One matrix of the runs saved in ``paths`` (each a run's ``--json`` output, one per
    host), failed cells explained by the runs of the hosts they aimed at (:func:`explain`).
    What cannot be taken -- a file that cannot be read or holds no cells, a line that is not
    a run's output or whose field has the wrong type -- is in the matrix's ``refused``
    ("FILE line N: why"); everything else is merged."""
    m = Matrix()
    for p in paths:
        refused = len(m.refused)
        try:
            with open(p, encoding="utf-8", errors="strict") as f:
                cells = read_cells(f, p, order=m, refused=m.refused)
        except OSError as e:
            m.refused.append("%s: %s" % (p, e.strerror or e))
            continue
        except UnicodeDecodeError as e:  # before ValueError's: the file is no run's output
            m.refused.append("%s: not UTF-8 text (%s): %s" % (p, e.reason, _WHAT))
            continue
        if not cells and len(m.refused) == refused:
            m.refused.append("%s holds no cells: %s" % (p, _WHAT))
        for c in cells:
            m.add(c)
    rows, columns = {k[:2] for k in m.cells}, {k[2] for k in m.cells}
    m.rows = [r for r in m.rows if r in rows]  # a summary's row or target with no cell: none
    m.columns = [t for t in m.columns if t in columns]
    explain(m)
    m.asymmetries = asymmetries(m)
    return m


def asymmetries(m: Matrix) -> List[Dict[str, Any]]:
    """Each pair of rails that checked each other (A's cell to B's address, B's cell to A's)
    whose two views of the data path differ: the two ends of one path, from the two hosts'
    own runs, no agent needed.  A pair is named once, its rows in the matrix's order."""
    from .path import mismatches

    by_way = {((c.src or "").split("%")[0], (c.dst or "").split("%")[0]): c for c in m.cells.values() if c.path}
    order = {row: k for k, row in enumerate(m.rows)}
    out = []
    for (src, dst), a in by_way.items():
        b = by_way.get((dst, src))
        if b is None or (order[(a.host, a.rail)], src) >= (order[(b.host, b.rail)], dst):
            continue  # no run the other way, or the pair is taken from its other cell
        names = ("at %s/%s" % (a.host, a.rail), "at %s/%s" % (b.host, b.rail))
        found = mismatches(a.view(), b.view(), names)
        if found:
            out.append({"a": "%s/%s" % (a.host, a.rail), "b": "%s/%s" % (b.host, b.rail), "a_addr": src,
                        "b_addr": dst, "mismatches": found})
    return out


def explain(m: Matrix) -> None:
    """Put first in the explanation of each failed cell whose target is another row's
    source (another host's rail) what that rail's own run found: a target that answers
    nobody because its own rail is broken then says so."""
    rows: Dict[str, Tuple[str, str]] = {}
    cells_of: Dict[Tuple[str, str], List[Cell]] = {}
    for c in m.cells.values():
        cells_of.setdefault((c.host, c.rail), []).append(c)
        if c.src:
            rows.setdefault(c.src.split("%")[0], (c.host, c.rail))
    said: Dict[Tuple[str, str], str] = {}  # what each row's run found, before any line is added
    for row, theirs in cells_of.items():
        bad = [d for d in theirs if not d.ok]
        said[row] = "%s/%s, whose own run reaches %d of its %d targets" % (
            row[0], row[1], len(theirs) - len(bad), len(theirs))
        if bad:
            said[row] += " (%s%s%s)" % (bad[0].outcome, ": " + bad[0].detail if bad[0].detail else "",
                                        "; " + bad[0].why[0].strip() if bad[0].why else "")
    for c in m.failed:
        owner = rows.get((c.dst or "").split("%")[0])
        if owner is None or owner == (c.host, c.rail) or all(d.ok for d in cells_of[owner]):
            continue  # no row of the target's, or it works: nothing to add
        if not any(d.ok for d in cells_of[(c.host, c.rail)]):
            continue  # this row reaches nobody: the fault is here, its own explanation says why
        line = "the target is " + said[owner]
        if line not in c.why:
            c.why.insert(0, line)
