"""``pyrdmacm ids``: the kernel's rdma_cm ids on this host, as ``rdma resource show cm_id``
shows them (RDMA netlink's cm_id dump), for hosts without iproute2's ``rdma``; ``--watch``
shows what changes."""

from __future__ import annotations

import argparse
import errno
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

from .output import EXIT_NODEV, EXIT_OK, EXIT_USAGE, _err, _ip_text, _print_json, _text, error_json, json_line

#: what identifies an id across two dumps: its device and its restrack number
_Key = Tuple[int, Optional[int]]


def _order(key: _Key) -> Tuple[int, int]:
    return key[0], key[1] if key[1] is not None else -1


def _comm(pid: Optional[int]) -> Optional[str]:
    """The command name of ``pid`` (as ``rdma`` shows it: /proc/PID/comm), None when gone."""
    if pid is None:
        return None
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return None


def _addr(a: Any) -> Optional[str]:
    if a is None:
        return None
    ip, port = a
    text = _ip_text(ip)
    return ("[%s]:%d" % (text, port)) if ":" in text else ("%s:%d" % (text, port))


def _record(i: Any) -> Dict[str, Any]:
    state = i.state
    return {
        "dev": i.dev_name, "port": i.port, "cm_idn": i.cm_idn,
        "state": state.name if hasattr(state, "name") else ("unknown" if state == -1 else int(state)),
        "ps": i.ps_name, "qp_num": i.qp_num,
        "pid": i.pid, "comm": i.kern_name if i.pid is None else _comm(i.pid), "kernel": i.pid is None,
        "src": _addr(i.src), "dst": _addr(i.dst),
    }


def _line(r: Dict[str, Any]) -> str:
    """One id in ``rdma resource show cm_id``'s words."""
    parts = ["link %s/%s" % (r["dev"], r["port"] if r["port"] is not None else "-"), "cm-idn %s" % r["cm_idn"]]
    if r["qp_num"] is not None:
        parts.append("lqpn %d" % r["qp_num"])
    parts += ["state %s" % r["state"], "ps %s" % r["ps"]]
    if r["pid"] is not None:
        parts.append("pid %d" % r["pid"])
    if r["comm"]:
        parts.append(("comm [%s]" if r["kernel"] else "comm %s") % r["comm"])
    if r["src"]:
        parts.append("src-addr %s" % r["src"])
    if r["dst"]:
        parts.append("dst-addr %s" % r["dst"])
    return " ".join(parts)


def _snapshot(args: argparse.Namespace) -> Dict[_Key, Dict[str, Any]]:
    from .. import netlink

    out: Dict[_Key, Dict[str, Any]] = {}
    for i in netlink.cm_ids():
        r = _record(i)
        if args.pid is not None and r["pid"] != args.pid:
            continue
        if args.dev is not None and r["dev"] != args.dev:
            continue
        if args.state is not None and str(r["state"]).upper() != args.state.upper():
            continue
        if args.ps is not None and r["ps"].upper() != args.ps.upper():
            continue
        out[(i.dev_index, i.cm_idn)] = r
    return out


def _interval(text: Optional[str]) -> Optional[float]:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.05 <= value <= 3600:
        raise ValueError("--watch takes the seconds between looks, 0.05..3600 (default 1), got %r" % text)
    return value


def cmd_ids(args: argparse.Namespace) -> int:
    from ..errors import RdmaCmError

    try:
        interval = _interval(args.watch)
    except ValueError as e:
        _err(str(e))
        return EXIT_USAGE
    try:
        now = _snapshot(args)
    except RdmaCmError as e:
        if getattr(e, "errno", None) in (errno.EPROTONOSUPPORT, errno.ENOENT, errno.EOPNOTSUPP):
            _err(_text(e))  # no RDMA netlink: no RDMA here
            return _print_json({"ids": [], "error": error_json(e)}, EXIT_NODEV) if args.json else EXIT_NODEV
        raise
    rows = [now[key] for key in sorted(now, key=_order)]
    if interval is None:
        if args.json:
            _print_json({"ids": rows}, EXIT_OK)
        else:
            for r in rows:
                print(_line(r))
        return EXIT_OK
    return _watch(args, now, rows, interval)


def _watch(args: argparse.Namespace, now: Dict[_Key, Dict[str, Any]], rows: List[Dict[str, Any]],
           interval: float) -> int:
    """The ids now, then each change as it is seen (``+`` new, ``-`` gone, ``~`` moved),
    until Ctrl-C or SIGTERM: then exit 0 (stopped as asked)."""
    import signal

    def show(change: str, r: Dict[str, Any]) -> None:
        if args.json:
            json_line({"change": change, "time": round(time.time(), 3), "id": r})
            sys.stdout.flush()
        else:
            print("%s %s" % ({"present": " ", "new": "+", "gone": "-", "changed": "~"}[change], _line(r)), flush=True)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, on_term)
    try:
        for r in rows:
            show("present", r)
        while True:
            time.sleep(interval)
            then, now = now, _snapshot(args)
            for key in sorted(then.keys() - now.keys(), key=_order):
                show("gone", then[key])
            for key in sorted(now.keys(), key=_order):
                if key not in then:
                    show("new", now[key])
                elif then[key] != now[key]:
                    show("changed", now[key])
    except KeyboardInterrupt:
        if args.json:  # the stream's last line
            json_line({"change": "stopped", "time": round(time.time(), 3), "exit": EXIT_OK})
        return EXIT_OK
    finally:
        signal.signal(signal.SIGTERM, old)
