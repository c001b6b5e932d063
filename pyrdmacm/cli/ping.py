"""``ping``: connect to DST as a client would, N times (resolve, route, connect, RTU,
disconnect; SIDR with --ps udp), each step timed by its own event wait, and a summary.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, List, Optional

from . import conn
from .conn import (TIMEWAIT_GRACE, _conn_peer, _destroy_quietly, _event_reason, _next_event, _pd_text, _peer_lines,
                   _reason_text, _ud_peer)
from .inputs import (DEFAULT_PORT, _BadInput, _addr_text, _count, _dst_src, _explicit_port, _port_space,
                     _private_data_arg, _timeout_ms)
from ..devices import list_devices
from ..mesh.cells import parse_identity
from ..mesh.path import (flat_view, gid_entries, mismatches, path_text, qp_text, qp_view, there_text, view_of_words,
                         where)
from .output import (EXIT_INTERRUPTED, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _err, _event_exit, _ip_text, _name_lines,
                     _print_json, _refused_exit, _text, error_json)

_STEP_TIMEOUT_HINTS = {
    "addr": "the kernel did not answer the address resolution in time",
    "route": "the kernel did not answer the route resolution in time",
    "connect": "the peer's CM sent neither a REP nor a REJ: is the peer up and reachable, is its listener's "
               "backlog full, or is its application slow to accept? (raise --timeout)",
    "connect-ud": "the peer's CM sent no SIDR REP: is the peer up and reachable? (raise --timeout)",
    "disconnect": "the peer's CM did not answer the disconnect request (no DREP)",
    "timewait": "the kernel sent no TIMEWAIT_EXIT",
}


def _attempt(ch: Any, seq: int, dst: Any, src: Any, ps: Any, data: bytes, timeout_ms: int,
             timewait: bool, holder: List[Any], devs: List[Any], gids: Any) -> Dict[str, Any]:
    """One connection: resolve, connect, establish, disconnect, destroy; what each step took,
    where the route landed and the data path (``path``), and a connected QP's attributes
    (``qp``, from the REP: before the RTU)."""
    from ..abi import CmEventType as E
    from ..core.cmid import CmId
    from ..errors import KernelError
    from ..state import OUTCOMES, Call, Kind

    att: Dict[str, Any] = {"seq": seq, "established": False, "reason": None, "steps": {}, "qp_num": None,
                           "src": None, "device": None, "port_num": None, "gid_index": None, "gid_type": None,
                           "sgid": None, "dgid": None, "path": None, "qp": None, "peer": None, "agent": None,
                           "there": None, "mismatches": []}
    steps: Dict[str, float] = att["steps"]
    cm = CmId(ch, ps)
    holder[0] = cm
    ud = cm.kind is Kind.DATAGRAM
    bound = timeout_ms / 1000.0

    def step(name: str, call: Any, waiting_for: str, wait_s: float, ok: Any, failed: Any,
             fail_message: Optional[str]) -> Any:
        t = time.monotonic()
        try:
            call()
        except KernelError as e:
            att["reason"] = error_json(e, step=name, refused=e.command)
            return None
        w = _next_event(ch, cm.uid, ok, failed, wait_s, t)
        steps[name] = round(w.ms, 3)
        if w.ev is None:
            key = "connect-ud" if name == "connect" and ud else name
            att["reason"] = {"step": name, "event": None, "timed_out": True, "waiting_for": waiting_for,
                             "timeout_ms": int(wait_s * 1000), "hint": _STEP_TIMEOUT_HINTS[key]}
            return None
        if w.ev.event not in ok or w.ev.status:
            carries = w.ev.event is E.REJECTED or (w.ev.event is E.UNREACHABLE and ud and w.ev.status > 0)
            att["reason"] = _event_reason(w.ev, name, fail_message if carries else None)
            att["reason"]["ms"] = steps[name]
            return None
        return w.ev

    kind = cm.kind
    o = OUTCOMES[(kind, Call.RESOLVE_ADDR)]
    margin = bound + 1.0  # the kernel's own ADDR_ERROR / ROUTE_ERROR comes at timeout_ms: let it
    if step("addr", lambda: cm.resolve_addr(dst, src=src, timeout_ms=timeout_ms), "ADDR_RESOLVED", margin,
            o.ok, o.failed, None) is None:
        return att
    o = OUTCOMES[(kind, Call.RESOLVE_ROUTE)]
    if step("route", lambda: cm.resolve_route(timeout_ms), "ROUTE_RESOLVED", margin, o.ok, o.failed,
            None) is None:
        return att
    try:
        info = cm.query_addr()
        att["src"] = str(info.src) if info.src else None
        w = where(cm, devs, gids)
    except KernelError:
        pass
    else:
        att["device"], att["port_num"], att["path"] = w["device"], w["port"], w["path"]
        att.update((k, w[k]) for k in ("gid_index", "gid_type", "sgid", "dgid"))
    o = OUTCOMES[(kind, Call.CONNECT)]
    ok = frozenset([E.ESTABLISHED]) if ud else frozenset([E.CONNECT_RESPONSE])
    ev = step("connect", lambda: cm.connect(qp_num=None, private_data=data, responder_resources=1,
                                            initiator_depth=1),
              "ESTABLISHED (SIDR REP)" if ud else "CONNECT_RESPONSE (REP)", bound, ok, o.failed,
              "SIDR_REP" if ud else "REJ")
    if not ud:  # a SIDR REQ carries no QP number: the peer learns ours some other way
        att["qp_num"] = cm.qp_num
    if ev is None:
        return att
    if ud:
        att["peer"] = _ud_peer(ev.param, "SIDR_REP")
        att["established"] = True
        return att
    att["peer"] = _conn_peer(ev.param, "REP")
    try:
        att["qp"] = qp_view(cm)
    except KernelError:
        pass
    who = parse_identity(ev.param.private_data)  # an identifying listener: its own view of the path
    if who is not None:
        att["agent"] = {k: who[k] for k in ("host", "rail", "addr") if k in who}
        att["there"] = view_of_words(who)
        if att["path"] is not None:
            att["mismatches"] = mismatches(flat_view(att, att["qp"] or {}), att["there"])
    t = time.monotonic()
    try:
        cm.establish()
    except KernelError as e:
        att["reason"] = error_json(e, step="establish", refused=e.command)
        return att
    steps["establish"] = round((time.monotonic() - t) * 1000, 3)
    att["established"] = True
    o = OUTCOMES[(kind, Call.DISCONNECT)]
    if step("disconnect", cm.disconnect, "DISCONNECTED (DREP)", bound, o.ok, o.failed, None) is None:
        return att
    if timewait:
        step("timewait", lambda: None, "TIMEWAIT_EXIT", max(bound, TIMEWAIT_GRACE), frozenset([E.TIMEWAIT_EXIT]),
             frozenset([E.DEVICE_REMOVAL]), None)
    return att


def _ping_summary(attempts: List[Dict[str, Any]], started: float, interrupted: bool) -> Dict[str, Any]:
    est = [a for a in attempts if a["established"]]
    times = [a["steps"]["connect"] for a in est if "connect" in a["steps"]]
    return {
        "sent": len(attempts),
        "established": len(est),
        "failed": len(attempts) - len(est),
        "errors_after_established": len([a for a in est if a["reason"] is not None]),
        "time_ms": round((time.monotonic() - started) * 1000, 3),
        "connect_ms": {"min": min(times), "avg": round(sum(times) / len(times), 3), "max": max(times)}
        if times else None,
        "interrupted": interrupted,
    }


def _attempt_lines(a: Dict[str, Any], ud: bool) -> List[str]:
    s = a["steps"]
    order = ("addr", "route", "connect", "establish", "disconnect", "timewait")
    taken = ", ".join("%s %.2f" % (k, s[k]) for k in order if k in s)
    if a["established"]:
        p = a["peer"]
        head = "seq=%d ESTABLISHED peer qp %#x connect=%.2f ms (%s ms)" % (a["seq"], p["qp_num"], s["connect"],
                                                                          taken)
        ours = "our qp %#x from" % a["qp_num"] if a["qp_num"] is not None else "from"
        lines = [head, "      %s %s on %s port %s" % (ours, a["src"], a["device"], a["port_num"])]
        if a["path"] is not None:
            lines.append("      path: " + path_text(a))
        if a["qp"] is not None:
            lines.append("      QP: " + qp_text(a["qp"]))
        if a["there"] is not None:
            ag = a["agent"]
            lines.append("      there (%s %s %s): %s" % (ag.get("host", "?"), ag.get("rail", "?"), ag.get("addr", "?"),
                                                     there_text(a["there"])))
            lines += ["      mismatch: " + m for m in a["mismatches"]]
        lines += ["      " + x for x in _peer_lines(p)]
        if a["reason"] is not None:
            lines.append("      then " + _reason_text(a["reason"]))
            if a["reason"].get("hint"):
                lines.append("      " + a["reason"]["hint"])
        return lines
    r = a["reason"]
    lines = ["seq=%d %s%s" % (a["seq"], _reason_text(r), " (%s ms)" % taken if taken else "")]
    if a["path"] is not None:
        lines.append("      path: " + path_text(a))
    if r.get("hint"):
        lines.append("      " + r["hint"])
    if r.get("private_data") is not None:
        lines.append("      peer private data: " + _pd_text(r["private_data"]))
    return lines


def cmd_ping(args: argparse.Namespace) -> int:
    import dataclasses

    from ..abi import AF_IB, AF_INET, PortSpace
    from ..errors import DeviceNodeError, UsageError

    try:
        ps = _port_space(args.ps)
        dst, src, names = _dst_src(args)
        if _explicit_port(args.dst) and not dst.port:
            raise _BadInput("bad port 0 in %r: give DST:PORT with a port 1..65535 (default %d)"
                            % (args.dst, DEFAULT_PORT))
        if not dst.port and dst.family != AF_IB:
            dst = dataclasses.replace(dst, port=DEFAULT_PORT)
        elif dst.family == AF_IB and not dst.sid_mask:  # no sid=/port=: librdmacm's service id of the default port
            from ..addr import Address

            dst = Address.ib(dst.ip, pkey=dst.pkey, port=DEFAULT_PORT, port_space=ps)
        count = _count(args.count, 1)
        timeout_ms = _timeout_ms(args.timeout)
        ud = ps is PortSpace.UDP
        data = _private_data_arg(args.private_data, [("SIDR_REQ" if ud else "REQ", dst.family or AF_INET)])
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE
    assert count is not None
    result: Dict[str, Any] = {"dst": _ip_text(dst.ip), "port": dst.port, "ps": ps.name, "src": _addr_text(src),
                              "names": [str(n) for n in names], "count": count, "timeout_ms": timeout_ms,
                              "private_data": data.hex()}
    try:
        ch = conn._open_channel()
    except DeviceNodeError as e:
        _err(_text(e))
        if args.json:
            result["error"] = error_json(e)
            _print_json(result, EXIT_NODEV)
        return EXIT_NODEV
    where = "%s port %d" % (_ip_text(dst.ip), dst.port)
    if not args.json:
        if names:
            print("\n".join(_name_lines(names)))
        print("PING %s (rdma_cm PS_%s, %s)%s: %d attempt%s, %d bytes of private data in the %s" % (
            where, ps.name, "UD: SIDR" if ud else "RC", " from %s" % _addr_text(src) if src else "", count,
            "s" if count != 1 else "", len(data), "SIDR REQ" if ud else "REQ"), flush=True)
    devs = list_devices(use_netlink=False)  # the GID tables and MTUs, read once (sysfs)
    gids = gid_entries(devs)
    attempts: List[Dict[str, Any]] = []
    started = time.monotonic()
    interrupted = False
    code = EXIT_OK
    holder: List[Any] = [None]
    with ch:
        try:
            for seq in range(1, count + 1):
                try:
                    a = _attempt(ch, seq, dst, src, ps, data, timeout_ms, args.timewait, holder, devs, gids)
                except UsageError as e:  # what the library refuses before any syscall
                    _err(_text(e))
                    return EXIT_USAGE
                finally:
                    _destroy_quietly(holder[0])
                    holder[0] = None
                attempts.append(a)
                if not args.json:
                    print("\n".join(_attempt_lines(a, ud)), flush=True)
                r = a["reason"]
                if r is not None and r.get("refused"):
                    code = _refused_exit(r.get("errno"))
                    break
                if r is not None and code != EXIT_NODEV:
                    code = _event_exit(r.get("event") or "", r.get("status") or 0)
        except KeyboardInterrupt:
            interrupted = True
            code = EXIT_INTERRUPTED
    summary = _ping_summary(attempts, started, interrupted)
    if args.json:
        result["attempts"] = attempts
        result["summary"] = summary
        _print_json(result, code)
        return code
    errs = summary["errors_after_established"]
    print("\n--- %s rdma_cm ping statistics ---" % where)
    print("%d attempt%s, %d established, %d failed%s, time %.0f ms%s" % (
        summary["sent"], "s" if summary["sent"] != 1 else "", summary["established"], summary["failed"],
        ", %d error%s after ESTABLISHED" % (errs, "s" if errs != 1 else "") if errs else "",
        summary["time_ms"], " (interrupted)" if interrupted else ""))
    c = summary["connect_ms"]
    if c:
        print("connect min/avg/max = %.3f/%.3f/%.3f ms" % (c["min"], c["avg"], c["max"]))
    sys.stdout.flush()
    return code
