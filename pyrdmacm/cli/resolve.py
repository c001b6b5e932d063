"""``resolve``: the pre-check, then RESOLVE_ADDR (and with --route RESOLVE_ROUTE) on a real
channel, what the kernel chose beside what was predicted; its progress line and its wait.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional

from . import route as route_cmd
from .inputs import _BadInput, _addr_text, _dst_src, _timeout_ms
from .output import (EXIT_EVENT, EXIT_KERNEL, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _err, _event_exit, _ip_text,
                     _jsonable, _name_lines, _print_json, _refused_exit, _text, error_json)
from .route import _precheck_exit, _prediction_json, _prediction_lines

def _pkey_text(pkey: int) -> str:
    """A partition key as a reader wants it: its number and what it means."""
    if pkey == 0:
        return "0x0000 (none: RoCE and iWARP have no partitions)"
    member = "full member" if pkey & 0x8000 else "limited member"
    if pkey & 0x7FFF == 0x7FFF:
        return "%#06x (the default partition, %s)" % (pkey, member)
    return "%#06x (partition %#06x, %s)" % (pkey, pkey & 0x7FFF, member)


def _id_summary(cm: Any) -> Dict[str, Any]:
    from ..devices import guid_text

    info = cm.query_addr()
    out: Dict[str, Any] = {
        "src": str(info.src) if info.src else None,
        "dst": str(info.dst) if info.dst else None,
        "src_port": info.src.port if info.src else None,
        "dst_port": info.dst.port if info.dst else None,
        "device": info.device.name if info.device else None,
        "device_index": info.device.index if info.device else None,
        "node_guid": guid_text(info.device.node_guid) if info.device else None,
        "port": info.port_num,
        "pkey": "%#06x" % info.pkey,
    }
    try:
        out["sgid"] = _ip_text(cm.sgid) if cm.sgid else None
        out["dgid"] = _ip_text(cm.dgid) if cm.dgid else None
    except OSError:
        out["sgid"] = out["dgid"] = None
    return out


#: IBTA's static rate codes (``enum ib_rate``) -> Gb/s; 0 is "the port's current rate"
_RATE_GBPS = {2: 2.5, 5: 5, 3: 10, 6: 20, 4: 30, 7: 40, 8: 60, 9: 80, 10: 120, 11: 14, 12: 56, 13: 112,
              14: 168, 15: 25, 16: 100, 17: 200, 18: 300, 19: 28, 20: 50, 21: 400, 22: 600, 23: 800}


def _path_json(p: Any) -> Dict[str, Any]:
    """A path record with its fields named: MTU in bytes, the rate in Gb/s, the pkey in hex,
    the packet lifetime in microseconds (4.096 us x 2^code); the IBTA codes kept beside."""
    out: Dict[str, Any] = _jsonable(p)
    out.update(mtu=p.mtu_bytes, mtu_code=p.mtu, rate_gbps=_RATE_GBPS.get(p.rate), rate_code=p.rate,
               pkey="%#06x" % p.pkey, packet_life_time_us=round(4.096 * (1 << min(p.packet_life_time, 31)), 3),
               packet_life_time_code=p.packet_life_time)
    out.pop("packet_life_time", None)
    out.pop("rate", None)
    return out


def _path_lines(n: int, p: Dict[str, Any]) -> List[str]:
    mtu = "%d" % p["mtu"] if p["mtu"] else "code %d (not an IBTA MTU)" % p["mtu_code"]
    rate = "%g Gb/s" % p["rate_gbps"] if p["rate_gbps"] else (
        "the port's current rate" if p["rate_code"] == 0 else "code %d" % p["rate_code"])
    return ["  path %d: sgid %s dgid %s" % (n, p["sgid"], p["dgid"]),
            "    pkey %s mtu %s rate %s" % (_pkey_text(int(p["pkey"], 16)), mtu, rate),
            "    hop_limit %d traffic_class %d flow_label %#x sl %d packet_life_time %s"
            % (p["hop_limit"], p["traffic_class"], p["flow_label"], p["sl"], _us_text(p["packet_life_time_us"]))]


def _us_text(us: float) -> str:
    return "%g us" % us if us < 1000 else "%.0f ms" % (us / 1000) if us < 1e6 else "%.1f s" % (us / 1e6)


PROGRESS_AFTER, PROGRESS_EVERY = 1.0, 0.5  # seconds
#: ADDR_RESOLVED this close to the timeout (as a fraction of it) came with the kernel's retry at the deadline
AT_TIMEOUT = 0.9


def _wait(ch: Any, cm: Any, call: Any, peer: Any, timeout_ms: int, progress: bool) -> Any:
    """Wait for the outcome of cm's ``call`` (acked; other events are dropped); with
    ``progress``, a line on stderr once it takes over a second.

    On a terminal the line is rewritten in place and erased at the end; elsewhere
    (``--progress`` into a file) each update is a line of its own.
    """
    from ..core.router import Waiter

    waiter = Waiter.for_call(cm.kind, call)
    what = " or ".join(e.name for e, ok in waiter.take.items() if ok)
    start = time.monotonic()
    deadline = start + timeout_ms / 1000.0 + 30
    tty = sys.stderr.isatty()
    shown = False
    next_at = start + PROGRESS_AFTER
    while True:
        # a slice at a time (the progress line between): given up after each, its event stays
        # in the kernel's queue until the next slice reads it
        if ch.wait_for(cm.uid, waiter, max(0.0, min(next_at, deadline) - time.monotonic()), drop=True).done:
            if shown and tty:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            return waiter.event
        now = time.monotonic()
        if now >= deadline:
            return None
        if now >= next_at:
            next_at = now + PROGRESS_EVERY
            if progress:
                line = "waiting for %s from %s ... %.1f s / timeout %.1f s" % (
                    what, peer, now - start, timeout_ms / 1000.0)
                sys.stderr.write("\r%s\033[K" % line if tty else line + "\n")
                sys.stderr.flush()
                shown = True


def cmd_resolve(args: argparse.Namespace) -> int:
    from ..abi import PortSpace
    from ..core import event_channel as _channel
    from ..core.cmid import CmId
    from ..errors import DeviceNodeError, KernelError, UsageError
    from ..state import Call

    if args.strict and args.no_precheck:
        _err("--strict needs the pre-check: drop --no-precheck")
        return EXIT_USAGE
    progress = args.progress or (not args.json and sys.stderr.isatty())
    try:
        dst, src, names = _dst_src(args)
        timeout_ms = _timeout_ms(args.timeout)
        ps = PortSpace[args.ps.upper()]
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE
    result: Dict[str, Any] = {"dst": _addr_text(dst), "src": _addr_text(src), "names": [str(n) for n in names]}
    if not args.json and names:
        print("\n".join(_name_lines(names)))

    pred = None
    if not args.no_precheck:
        stop = _resolve_precheck(args, dst, src, result)
        if stop is not None:
            return stop
        pred = result.get("_prediction")
    result.pop("_prediction", None)
    if args.neighbour_first:
        result["neighbour_first"] = _neighbour_first(pred, timeout_ms)
        if not args.json:
            print(_neighbour_first_line(result["neighbour_first"]))

    try:
        ch = _channel.EventChannel()
    except DeviceNodeError as e:
        _err(_text(e))
        if args.json:
            result["error"] = error_json(e)
            _print_json(result, EXIT_NODEV)
        return EXIT_NODEV

    with ch:
        cm = CmId(ch, ps)
        t0 = time.monotonic()
        try:
            cm.resolve_addr(dst, src=src, timeout_ms=timeout_ms)
        except KernelError as e:
            result["kernel"] = error_json(e, refused="RESOLVE_ADDR")
            return _finish(args, result, _refused_exit(e.errno), _text(e))
        except UsageError as e:  # what the library refuses before the syscall
            _err(_text(e))
            return EXIT_USAGE
        ev = _wait(ch, cm, Call.RESOLVE_ADDR, _addr_text(dst), timeout_ms, progress)
        took = (time.monotonic() - t0) * 1000
        if ev is None:
            result["kernel"] = {"event": None, "message": "no event from the kernel"}
            return _finish(args, result, EXIT_EVENT, "no event from the kernel")
        kern: Dict[str, Any] = {"event": ev.event.name, "status": ev.status, "status_name": ev.status_name,
                                "ms": round(took, 3)}
        result["kernel"] = kern
        if ev.event.name != "ADDR_RESOLVED":
            code = _event_exit(ev.event.name, ev.status)
        else:
            code = EXIT_OK
            kern.update(_id_summary(cm))
            kern["at_timeout"] = took >= AT_TIMEOUT * timeout_ms
            if kern["at_timeout"]:
                kern["note"] = _at_timeout_note(took, timeout_ms, pred)
            if pred is not None:
                from .. import precheck

                result["mismatches"] = precheck.explain(pred, _KernelView(cm))
            if args.route:
                code = _resolve_route(ch, cm, dst, timeout_ms, progress, result)
        cm.destroy()
    return _finish(args, result, code, None)


def _resolve_precheck(args: argparse.Namespace, dst: Any, src: Any, result: Dict[str, Any]) -> Optional[int]:
    """The pre-check of ``resolve``: shown, kept in ``result``; an exit status when --strict stops here."""
    from ..errors import PrecheckError

    pred = None
    try:
        pred = route_cmd._predict(dst, src, args.strict)
    except PrecheckError as e:
        pred = e.prediction
        result["prediction_error"] = error_json(e)
        if args.strict:
            code = _precheck_exit(e)
            return _strict_stop(args, result, pred, _text(e), code)
    except OSError as e:  # the routing tables could not be read (no rtnetlink here)
        message = "the pre-check could not read the routing tables: %s" % e
        result["prediction_error"] = error_json(e, message)
        if args.strict:
            return _strict_stop(args, result, None, message, EXIT_KERNEL)
    result["prediction"] = _prediction_json(pred)
    result["_prediction"] = pred
    if not args.json:
        if pred is not None:
            print("\n".join(_prediction_lines(pred)))
        if "prediction_error" in result:
            if pred is None or not pred.missing:
                print("pre-check: %s" % result["prediction_error"]["message"])
            print("the pre-check expects the kernel to refuse; without --strict it is asked all the same")
    return None


def _strict_stop(args: argparse.Namespace, result: Dict[str, Any], pred: Any, message: str, code: int) -> int:
    result["prediction"] = _prediction_json(pred)
    if args.json:
        _print_json(result, code)
    elif pred is not None:
        print("\n".join(_prediction_lines(pred)))
    _err(message + " (--strict: nothing was sent to the kernel)")
    return code


def _neighbour_first(pred: Any, timeout_ms: int) -> Dict[str, Any]:
    """--neighbour-first: the next hop resolved (ARP/ND) before RESOLVE_ADDR, when it needs it."""
    if pred is None:
        return {"done": False, "why": "the pre-check names the next hop, and it did not run"}
    if pred.next_hop is None or not pred.needs_neighbour_resolution:
        return {"done": False, "next_hop": _ip_text(pred.next_hop) if pred.next_hop is not None else None,
                "why": "no next hop needs resolving (%s)" % (
                    "its entry is %s" % pred.neighbour.name if pred.neighbour is not None else "none on the path")}
    from .. import precheck

    state, ms = precheck.solicit_neighbour(pred, timeout_ms / 1000)
    return {"done": True, "next_hop": _ip_text(pred.next_hop), "state": state.name if state is not None else None,
            "ms": round(ms, 1)}


def _neighbour_first_line(nf: Dict[str, Any]) -> str:
    if not nf["done"]:
        return "neighbour first: not needed: %s" % nf["why"]
    return "neighbour first: %s is %s after %.1f ms" % (nf["next_hop"], nf["state"], nf["ms"])


def _at_timeout_note(took: float, timeout_ms: int, pred: Any) -> str:
    hop = " of %s" % pred.next_hop if pred is not None and pred.next_hop is not None else ""
    return ("ADDR_RESOLVED came at the timeout (%.0f ms of %d ms): the neighbour%s (ARP/ND) was not resolved "
            "when the kernel first looked, and the kernel looks again when the timeout runs out (addr.c retries "
            "a pending resolution at its deadline, unless a neighbour update wakes it first); the answer was "
            "there by then. While the neighbour stays REACHABLE, a resolve answers at once; --neighbour-first "
            "resolves it before the kernel is asked" % (took, timeout_ms, hop))


def _resolve_route(ch: Any, cm: Any, dst: Any, timeout_ms: int, progress: bool, result: Dict[str, Any]) -> int:
    from ..errors import KernelError
    from ..state import Call

    t1 = time.monotonic()
    code = EXIT_OK
    try:
        cm.resolve_route(timeout_ms)
        rev = _wait(ch, cm, Call.RESOLVE_ROUTE, _addr_text(dst), timeout_ms, progress)
        route: Dict[str, Any] = {"event": rev.event.name if rev else None, "status": rev.status if rev else None,
                                 "status_name": rev.status_name if rev else None,
                                 "ms": round((time.monotonic() - t1) * 1000, 3)}
        if rev is not None and rev.event.name == "ROUTE_RESOLVED":
            route["paths"] = [_path_json(p) for p in cm.query_path()]
        else:
            code = EXIT_EVENT
    except KernelError as e:
        route = {"refused": "RESOLVE_ROUTE", "errno": e.errno, "message": _text(e)}
        code = EXIT_KERNEL
    result["route"] = route
    return code


class _KernelView:
    """What the kernel chose, in the shape precheck.explain() compares."""

    def __init__(self, cm: Any) -> None:
        info = cm.query_addr()
        self.src_addr = info.src.ip if info.src else None
        self.device_name = info.device.name if info.device else None
        self.device_index = info.device.index if info.device else None
        self.port_num = info.port_num
        self.sgid = cm.sgid


def _finish(args: argparse.Namespace, result: Dict[str, Any], code: int, message: Optional[str]) -> int:
    if args.json:
        _print_json(result, code)
        return code
    k = result.get("kernel", {})
    if "refused" in k:
        print("kernel:\n  %s" % k["message"])
    elif k.get("event"):
        status = "" if not k["status"] else "  status %d %s" % (k["status"], k["status_name"])
        print("kernel:\n  %s in %.1f ms%s" % (k["event"], k["ms"], status))
        if k["event"] == "ADDR_ERROR":
            from ..errors import hint_for

            h = hint_for(k["status"])
            if h:
                print("  " + h.replace("timeout_ms", "--timeout"))
        for key in ("src", "dst", "device", "device_index", "node_guid", "port", "pkey", "sgid", "dgid"):
            if key in k:
                print("  %-12s %s" % (key, _pkey_text(int(k[key], 16)) if key == "pkey" else k[key]))
        if k.get("note"):
            print("  note: " + k["note"])
    elif message:
        print("kernel:\n  %s" % message)
    r = result.get("route")
    if r:
        if "refused" in r:
            print("route:\n  %s" % r["message"])
        else:
            status = "" if not r["status"] else "  status %d %s" % (r["status"], r["status_name"])
            print("route:\n  %s in %.1f ms%s" % (r["event"], r["ms"], status))
            for n, p in enumerate(r.get("paths", []), 1):
                print("\n".join(_path_lines(n, p)))
    mm = result.get("mismatches")
    if mm:
        print("MISMATCH between prediction and kernel (a bug in one of them):")
        for m in mm:
            print("  " + m)
    elif mm is not None:
        print("prediction agrees with the kernel")
    return code
