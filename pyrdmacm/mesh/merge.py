"""Many hosts' runs of the fabric check joined into one matrix: rows are each host's rails,
columns the targets, in the order first seen."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Tuple

from .cells import Cell


@dataclass
class Matrix:
    """Cells by (host, rail) row and target column."""

    rows: List[Tuple[str, str]] = field(default_factory=list)
    columns: List[str] = field(default_factory=list)
    cells: Dict[Tuple[str, str, str], Cell] = field(default_factory=dict)

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


def read_cells(lines: Iterable[str], source: str = "input") -> List[Cell]:
    """The cells of a run's JSON Lines output (``pyrdmacm mesh --json``): lines with a
    ``cell`` are taken, the others (the summary) skipped.  ValueError naming the source and
    the line for anything that is not such output."""
    out = []
    for n, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            record = json.loads(line)
        except ValueError as e:
            raise ValueError("%s line %d is not JSON (%s): give the output of `pyrdmacm mesh --json`"
                             % (source, n, e)) from None
        if not isinstance(record, dict):
            raise ValueError("%s line %d is not a JSON object: give the output of `pyrdmacm mesh --json`"
                             % (source, n))
        if record.get("schema") != 1:
            raise ValueError("%s line %d has schema %r; this pyrdmacm reads schema 1" % (source, n,
                                                                                         record.get("schema")))
        if "cell" not in record:
            continue
        try:
            out.append(Cell.from_json(record["cell"]))
        except (TypeError, ValueError) as e:
            raise ValueError("%s line %d: %s" % (source, n, e)) from None
    return out


def merge(paths: Iterable[str]) -> Matrix:
    """One matrix of the runs saved in ``paths`` (each a run's ``--json`` output, one per
    host); OSError or ValueError naming the file that cannot be read."""
    m = Matrix()
    for p in paths:
        with open(p) as f:
            cells = read_cells(f, p)
        if not cells:
            raise ValueError("%s holds no cells: give the output of `pyrdmacm mesh --json`" % p)
        for c in cells:
            m.add(c)
    return m
