"""The results of a run: one :class:`Result` row per case, and the rows as KTAP.

``pyrdmacm conformance`` prints the rows as a table, as JSON (:meth:`Result.to_dict`) or as
KTAP version 1 (:func:`ktap`), what kselftest harnesses read.  A case that could not run
here (it needs a local address there is none of) is observed as ``"not run"``: it neither
passes nor fails, and KTAP marks it ``# SKIP``.
"""

from __future__ import annotations

import platform
from dataclasses import asdict, dataclass
from typing import Dict, Optional, Sequence

__all__ = ["Result", "NOT_RUN", "ktap"]

#: what a case that could not run here observed
NOT_RUN = "not run"


@dataclass(frozen=True)
class Result:
    """One case's row: what it expected and observed (as text: ``"EINVAL"``, ``"ok"`` ...),
    whether it passed, and a detail (what else it saw, why it failed or did not run)."""

    case: str
    what: str
    expected: str
    observed: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> Dict[str, object]:
        """The result as JSON-able data (``conformance --json``'s ``results``)."""
        return asdict(self)


def ktap(results: Sequence[Result], release: Optional[str] = None) -> str:
    """The results as KTAP version 1: one ``ok`` / ``not ok`` line per case, what was expected
    and observed as a diagnostic, ``# SKIP`` for a case that could not run here."""
    lines = ["KTAP version 1", "# pyrdmacm conformance on Linux %s" % (release or platform.release()),
             "1..%d" % len(results)]
    for n, r in enumerate(results, 1):
        if r.observed == NOT_RUN:
            lines.append("ok %d %s # SKIP %s" % (n, r.case, r.detail))
            continue
        lines.append("# %s: expected %s, observed %s%s" % (r.case, r.expected, r.observed,
                                                           "; " + r.detail if r.detail else ""))
        lines.append("%s %d %s" % ("ok" if r.passed else "not ok", n, r.case))
    failed = sum(1 for r in results if not r.passed and r.observed != NOT_RUN)
    skipped = sum(1 for r in results if r.observed == NOT_RUN)
    lines.append("# totals: pass:%d fail:%d skip:%d" % (len(results) - failed - skipped, failed, skipped))
    return "\n".join(lines) + "\n"
