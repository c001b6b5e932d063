"""The fabric check's matrix drawn for people and for monitoring: a text table (rows the
rails, columns the targets), an SVG picture to paste into a ticket, and a Prometheus text
file for node_exporter's textfile collector."""

from __future__ import annotations

import contextlib
import os
import time
from typing import Dict, List, Optional, Tuple
from xml.sax.saxutils import escape

from .cells import OUTCOMES, Cell
from .merge import Matrix

#: outcome -> (the table's short form, the picture's colour)
_LOOK: Dict[str, Tuple[str, str]] = {
    "established": ("OK", "#1a9850"),
    "no-listener": ("ok8", "#91cf60"),
    "rejected": ("rej", "#d9ef8b"),
    "wrong-host": ("WRONG", "#7b3294"),
    "addr-error": ("ADDR", "#d73027"),
    "route-error": ("ROUTE", "#f46d43"),
    "unreachable": ("UNREACH", "#a50026"),
    "refused": ("REFUSED", "#e34a33"),
    "timeout": ("TIMEOUT", "#fdae61"),
    "no-source": ("NOSRC", "#bababa"),
    "not-checked": ("-", "#f0f0f0"),
    "bad-target": ("BAD", "#878787"),
}
assert set(_LOOK) == set(OUTCOMES), "every outcome has a look"


def clean(text: str) -> str:
    """``text`` safe for a terminal and for XML: every character that is not printable (a
    control character of a damaged or hostile host name: an escape sequence, a NUL, a lone
    surrogate) written as its escape (``\\x1b``).  Names come from other hosts' files."""
    if text.isprintable():  # the common case, in C
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


def _row_name(m: Matrix, row: Tuple[str, str]) -> str:
    return clean(row[1] if len({h for h, _ in m.rows}) == 1 else "%s/%s" % row)


def short(cell: Optional[Cell]) -> str:
    """A cell as the table shows it: the outcome's short form, and the REJ's reason or the
    failure's status."""
    if cell is None:
        return "."
    text = _LOOK[cell.outcome][0]
    if cell.outcome == "rejected" and cell.status is not None:
        text += str(cell.status)
    elif not cell.ok and cell.status is not None and cell.outcome != "wrong-host":
        text += " %d" % cell.status
    return text


def legend() -> List[str]:
    return ["%-8s %s" % (_LOOK[o][0], what) for o, (_ok, what) in OUTCOMES.items()]


def table(m: Matrix, *, explain: bool = True) -> str:
    """The matrix as text: a row per rail, a column per target; then each failed cell with
    its status, where it went and the pre-check's explanation; then each cell whose two ends'
    views of the data path differ (an identifying listener's), with what differs; then each
    pair of rails whose runs each way see it differently (a merge's asymmetries)."""
    names = [_row_name(m, r) for r in m.rows]
    first = max([len("rail")] + [len(n) for n in names])
    columns = [clean(c) for c in m.columns]
    widths = [max([len(c)] + [len(short(m.get(r, c))) for r in m.rows]) for c in m.columns]
    widths = [max(w, len(c)) for w, c in zip(widths, columns)]
    lines = ["%-*s  %s" % (first, "rail", "  ".join("%-*s" % (w, c) for w, c in zip(widths, columns)))]
    for name, row in zip(names, m.rows):
        lines.append("%-*s  %s" % (first, name, "  ".join("%-*s" % (w, short(m.get(row, c)))
                                                           for w, c in zip(widths, m.columns))))
    cells = list(m.cells.values())
    ok = sum(1 for c in cells if c.ok)
    lines.append("%d cells: %d reach the far CM, %d do not" % (len(cells), ok, len(cells) - ok))
    if m.refused:
        lines.append("%d %s of the input refused (stderr says which and why); the rest merged"
                     % (len(m.refused), "line or file" if len(m.refused) == 1 else "lines or files"))
    failed = m.failed
    if failed and explain:
        lines.append("")
        for c in failed:
            where = " via %s port %s" % (c.device, c.port) if c.device else ""
            lines.append(clean("%s -> %s (%s): %s%s%s" % (_row_name(m, (c.host, c.rail)), c.target, c.dst or "?",
                                                          c.outcome, " -- %s" % c.detail if c.detail else "", where)))
            lines += ["    " + clean(w) for w in c.why[:8]]
    found = [c for c in cells if c.mismatches]
    if found and explain:  # findings of their own: the CM path works, the data path may not
        lines.append("")
        lines.append("%d cell%s whose two ends do not agree on the data path:" % (len(found),
                                                                                "s" if len(found) != 1 else ""))
        for c in found:
            lines.append(clean("%s -> %s (%s):" % (_row_name(m, (c.host, c.rail)), c.target, c.dst or "?")))
            lines += ["    " + clean(w) for w in c.mismatches]
    if m.asymmetries and explain:  # the two ends of one path, each from its own host's run
        lines.append("")
        n = len(m.asymmetries)
        lines.append("%d pair%s of rails whose two ends see the data path differently:" % (n, "s" if n != 1 else ""))
        for a in m.asymmetries:
            lines.append(clean("%s (%s) <-> %s (%s):" % (a["a"], a["a_addr"], a["b"], a["b_addr"])))
            lines += ["    " + clean(w) for w in a["mismatches"]]
    return "\n".join(lines) + "\n"


def svg(m: Matrix, title: str = "pyrdmacm mesh") -> str:
    """The matrix as an SVG picture: a square per cell coloured by its outcome (its tooltip
    the details), the rails down the side, the targets along the top, a legend below."""
    cell_px, gap = 28, 2
    names = [_row_name(m, r) for r in m.rows]
    left = 16 + 8 * max([4] + [len(n) for n in names])
    top = 40 + 7 * max([4] + [len(c) for c in m.columns])
    used = [o for o in OUTCOMES if any(c.outcome == o for c in m.cells.values())]
    legend_px = 40 + 8 * max([0] + [len("%s: %s" % (o, OUTCOMES[o][1])) for o in used])  # 12 px monospace: under 8 px a character
    width = max(left + len(m.columns) * (cell_px + gap) + 20, legend_px, 520)
    height = top + len(m.rows) * (cell_px + gap) + 30 + 18 * len(used)
    cells = list(m.cells.values())
    ok = sum(1 for c in cells if c.ok)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="monospace" '
           'font-size="12">' % (width, height),
           '<rect width="100%" height="100%" fill="white"/>',
           '<text x="10" y="20" font-size="14" font-weight="bold">%s: %d cells, %d reach the far CM, %d do not'
           '</text>' % (escape(clean(title)), len(cells), ok, len(cells) - ok)]
    for j, col in enumerate(m.columns):
        x = left + j * (cell_px + gap) + cell_px // 2
        out.append('<text transform="translate(%d,%d) rotate(-60)">%s</text>' % (x, top - 6, escape(clean(col))))
    for i, (name, row) in enumerate(zip(names, m.rows)):
        y = top + i * (cell_px + gap)
        out.append('<text x="8" y="%d">%s</text>' % (y + cell_px // 2 + 4, escape(name)))
        for j, col in enumerate(m.columns):
            c = m.get(row, col)
            x = left + j * (cell_px + gap)
            colour = _LOOK[c.outcome][1] if c is not None else "#ffffff"
            tip = "no cell" if c is None else clean("%s -> %s (%s): %s%s" % (
                name, col, c.dst or "?", c.outcome, " -- " + c.detail if c.detail else ""))
            if c is not None and c.ms:
                tip += "; " + clean(", ".join("%s %.1f ms" % kv for kv in c.ms.items()))
            if c is not None and c.why:
                tip += "\n" + "\n".join(clean(w) for w in c.why[:6])
            out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="%s" stroke="#555"><title>%s</title></rect>'
                       % (x, y, cell_px, cell_px, colour, escape(tip)))
    y = top + len(m.rows) * (cell_px + gap) + 20
    for o in used:
        out.append('<rect x="10" y="%d" width="12" height="12" fill="%s" stroke="#555"/>' % (y - 10, _LOOK[o][1]))
        out.append('<text x="28" y="%d">%s: %s</text>' % (y, o, escape(OUTCOMES[o][1])))
        y += 18
    out.append("</svg>")
    return "\n".join(out) + "\n"


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def prometheus(m: Matrix, now: Optional[float] = None) -> str:
    """The matrix in Prometheus' text format: per cell a gauge of whether the CM path works
    and, for cells that reached the far CM, the handshake's time; per pair of rails whose
    ends see the data path differently (a merge's), how many settings differ."""
    def labels(c: Cell) -> str:
        return 'host="%s",rail="%s",target="%s",dst="%s",outcome="%s"' % tuple(
            _label(v) for v in (c.host, c.rail, c.target, c.dst or "", c.outcome))

    cells = list(m.cells.values())
    lines = ["# HELP pyrdmacm_mesh_cell_ok 1 when the CM path from the rail to the target works (established, or "
             "rejected by the far CM), else 0.",
             "# TYPE pyrdmacm_mesh_cell_ok gauge"]
    lines += ["pyrdmacm_mesh_cell_ok{%s} %d" % (labels(c), c.ok) for c in cells]
    lines += ["# HELP pyrdmacm_mesh_handshake_seconds From the REQ to the REP or REJ, for cells that reached the "
              "far CM.", "# TYPE pyrdmacm_mesh_handshake_seconds gauge"]
    lines += ["pyrdmacm_mesh_handshake_seconds{%s} %g" % (labels(c), c.ms["connect"] / 1000.0)
              for c in cells if c.ok and "connect" in c.ms]
    lines += ["# HELP pyrdmacm_mesh_path_mismatches How many settings of the data path the two ends of a pair of "
              "rails see differently (from each host's own run; 0 lines: none).",
              "# TYPE pyrdmacm_mesh_path_mismatches gauge"]
    lines += ['pyrdmacm_mesh_path_mismatches{a="%s",b="%s",a_addr="%s",b_addr="%s"} %d' % (
        _label(a["a"]), _label(a["b"]), _label(a["a_addr"]), _label(a["b_addr"]), len(a["mismatches"]))
        for a in m.asymmetries]
    from .verdicts import KINDS, verdicts

    vs = verdicts(m)
    lines += ["# HELP pyrdmacm_mesh_host_healthy 1 when nothing is wrong with the host in this matrix (see "
              "`pyrdmacm mesh --verdicts`), else 0.", "# TYPE pyrdmacm_mesh_host_healthy gauge"]
    lines += ['pyrdmacm_mesh_host_healthy{host="%s"} %d' % (_label(v["host"]), v["healthy"]) for v in vs]
    lines += ["# HELP pyrdmacm_mesh_host_findings What is wrong with the host, by the likely culprit's kind (rail: "
              "the NIC or host; far-end; path: between two hosts; config: the two ends disagree).",
              "# TYPE pyrdmacm_mesh_host_findings gauge"]
    lines += ['pyrdmacm_mesh_host_findings{host="%s",kind="%s"} %d' % (
        _label(v["host"]), kind, sum(1 for f in v["findings"] if f["kind"] == kind)) for v in vs for kind in KINDS
        if any(f["kind"] == kind for f in v["findings"])]
    lines += ["# HELP pyrdmacm_mesh_last_run_timestamp_seconds When this check ran.",
              "# TYPE pyrdmacm_mesh_last_run_timestamp_seconds gauge",
              "pyrdmacm_mesh_last_run_timestamp_seconds %.3f" % (time.time() if now is None else now)]
    return "\n".join(lines) + "\n"


def write_atomically(path: str, text: str) -> None:
    """Write ``path`` as node_exporter's textfile collector needs it: a file beside it, then
    renamed over it, so that a scrape never reads half a file.  OSError names ``path``
    (not the file beside it, which is removed)."""
    tmp = "%s.%d.tmp" % (path, os.getpid())
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OSError(e.errno, e.strerror, path) from None
