"""``route``: the pre-check's prediction alone (no RDMA needed), and the prediction as
``resolve`` shows it too (its JSON and its lines, what is missing, the exit status of a
refusal).

:func:`_predict` is looked up here at each call, by ``resolve`` too: tests replace it.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List, Optional

from .inputs import _BadInput, _addr_text, _dst_src
from .output import (EXIT_KERNEL, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _err, _ip_text, _jsonable, _name_lines,
                     _print_json, _text, error_json)

def _predict(dst: Any, src: Any, strict: bool = False) -> Any:
    from .. import precheck

    return precheck.predict(dst, src, strict=strict, check_node=True)


def _missing_json(m: Any) -> Dict[str, Any]:
    from ..errors import errno_name

    return {"what": m.what, "errno": m.errno, "name": errno_name(m.errno), "message": m.message, "hint": m.hint,
            "netdev": m.netdev}


def _prediction_json(p: Any) -> Optional[Dict[str, Any]]:
    if p is None:
        return None
    out: Dict[str, Any] = _jsonable(p)
    out.update(device=p.device, port=p.port, sgid=_ip_text(p.sgid) if p.sgid is not None else None)
    out["missing"] = [_missing_json(m) for m in p.missing]
    out["complete"] = p.complete
    return out


def _prediction_lines(p: Any) -> List[str]:
    lines = ["prediction:" if p.complete else "prediction (partial: what this host lacks is under missing):"]
    lines += ["  " + r for r in p.reasoning]
    lines += ["  warning: " + w for w in p.warnings]
    if p.missing:
        lines.append("missing:")
        for m in p.missing:
            lines += ["  %s (%s)" % (m.message, _errno_text(m.errno)), "    " + m.hint]
    return lines


def _errno_text(err: int) -> str:
    from ..errors import errno_name

    return "%s %s" % (errno_name(err), os.strerror(err))


def _stops_short(p: Any) -> str:
    return "the prediction stops short: %s (see missing)" % "; ".join(m.message for m in p.missing)


def _precheck_exit(e: Any) -> int:
    """A pre-check refusal: 4 when what the host lacks is the reason (no device, no GID), else 2."""
    p = e.prediction
    lacking = p is not None and any(m.errno == e.errno and m.what != "rdma_cm" for m in p.missing)
    return EXIT_NODEV if lacking else EXIT_KERNEL


def cmd_route(args: argparse.Namespace) -> int:
    from ..errors import PrecheckError, UsageError

    try:
        dst, src, names = _dst_src(args)
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE
    out: Dict[str, Any] = {"dst": _addr_text(dst), "src": _addr_text(src), "names": [str(n) for n in names],
                           "prediction": None, "error": None}
    problem = None
    try:
        p = _predict(dst, src, args.strict)
        code = EXIT_NODEV if p.missing else EXIT_OK
        if p.missing:
            problem = _stops_short(p)
    except PrecheckError as e:
        p, code = e.prediction, _precheck_exit(e)
        problem = _stops_short(p) if code == EXIT_NODEV else _text(e)
        out["error"] = error_json(e)
    except UsageError as e:
        _err(_text(e))
        return EXIT_USAGE
    out["prediction"] = _prediction_json(p)
    if args.json:
        _print_json(out, code)
        return code
    lines = _name_lines(names) + (_prediction_lines(p) if p is not None else [])
    if lines:
        print("\n".join(lines))
    if problem:
        _err(problem)
    return code
