#!/usr/bin/env python3
"""The parity table, in Markdown, from the records of a kernel-tier run.

    tools/parity/table.py RUN_DIR [RUN_DIR...] > docs/parity.md

Each guest of ``pytest --lab=...`` writes parity.jsonl into its output folder (a
folder per kernel and topology under build/lab/pytest/RUN); this prints one row per
case: the steps, what librdmacm and pyrdmacm reported (the outcome of each call, as
``call=result``), the result on every kernel, and, for a known difference, why.
"""

from __future__ import annotations

import json
import sys
from collections import OrderedDict
from pathlib import Path


def outcome(steps: list) -> str:
    parts = []
    for s in steps:
        call = s.get("call", "?")
        if call == "info":
            parts.append("info: %s on %s" % (s.get("local"), s.get("device")))
        elif s.get("event"):
            parts.append("%s %d" % (s["event"].replace("RDMA_CM_EVENT_", ""), s.get("status", 0)))
        elif s.get("ret"):
            parts.append("%s: %s" % (call, s.get("refused") or "errno %s" % s.get("errno")))
        elif s.get("warning"):
            parts.append("%s: %s" % (call, s["warning"]))
    return "; ".join(parts) or "all calls 0"


def main(dirs: list) -> int:
    rows: "OrderedDict[str, dict]" = OrderedDict()
    kernels: list = []
    for d in dirs:
        order = {"single": 0, "pair": 1, "multihomed": 2}
        for path in sorted(Path(d).glob("**/parity.jsonl"),
                           key=lambda p: (order.get(p.parent.name.rsplit("-", 1)[-1], 3), str(p))):
            for line in path.read_text().splitlines():
                r = json.loads(line)
                row = rows.setdefault(r["case"], {"first": r, "kernels": {}})
                row["kernels"][r["kernel"]] = "pass" if not r["problems"] else "FAIL"
                if r["kernel"] not in kernels:
                    kernels.append(r["kernel"])
    kernels.sort()
    if not rows:
        print("no parity.jsonl under %s" % ", ".join(dirs), file=sys.stderr)
        return 1
    print("| case | steps | librdmacm | pyrdmacm | %s | why they differ |" % " | ".join(kernels))
    print("|---|---|---|---|%s---|" % ("---|" * len(kernels)))
    for name, row in rows.items():
        r = row["first"]
        lib = outcome(r["librdmacm"]) + ("; then hangs (killed)" if r.get("librdmacm_hung") else "")
        cells = [row["kernels"].get(k, "-") for k in kernels]
        print("| %s | `%s` | %s | %s | %s | %s |" % (name, r["steps"], lib, outcome(r["pyrdmacm"]),
                                                    " | ".join(cells), r["known"] or ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]) if len(sys.argv) > 1 else print(__doc__) or 2)
