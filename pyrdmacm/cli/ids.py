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
    """One id, under ``rdma -j resource show cm_id``'s keys where the fact is the same
    (``ifname``, ``cm-idn``, ``lqpn``, ``src-addr`` as ADDR:PORT ...); ``kernel`` is ours
    (an id of a kernel user: ``comm`` is its module)."""
    state = i.state
    return {
        "ifindex": i.dev_index, "ifname": i.dev_name, "port": i.port, "cm-idn": i.cm_idn, "lqpn": i.qp_num,
        "state": state.name if hasattr(state, "name") else ("unknown" if state == -1 else int(state)),
        "ps": i.ps_name, "pid": i.pid, "comm": i.kern_name if i.pid is None else _comm(i.pid),
        "kernel": i.pid is None, "src-addr": _addr(i.src), "dst-addr": _addr(i.dst),
    }


def _line(r: Dict[str, Any]) -> str:
    """One id in ``rdma resource show cm_id``'s words."""
    parts = ["link %s/%s" % (r["ifname"], r["port"] if r["port"] is not None else "-"), "cm-idn %s" % r["cm-idn"]]
    if r["lqpn"] is not None:
        parts.append("lqpn %d" % r["lqpn"])
    parts += ["state %s" % r["state"], "ps %s" % r["ps"]]
    if r["pid"] is not None:
        parts.append("pid %d" % r["pid"])
    if r["comm"]:
        parts.append(("comm [%s]" if r["kernel"] else "comm %s") % r["comm"])
    if r["src-addr"]:
        parts.append("src-addr %s" % r["src-addr"])
    if r["dst-addr"]:
        parts.append("dst-addr %s" % r["dst-addr"])
    return " ".join(parts)


def _kept(args: argparse.Namespace, i: Any, r: Dict[str, Any]) -> bool:
    """Whether the id passes the filters, rdma's: ``--pid``, ``--dev``, ``--state``, ``--ps``,
    ``--src-addr``/``--dst-addr`` (the address) and ``--src-port``/``--dst-port``."""
    if args.pid is not None and r["pid"] != args.pid:
        return False
    if args.dev is not None and r["ifname"] != args.dev:
        return False
    if args.state is not None and str(r["state"]).upper() != args.state.upper():
        return False
    if args.ps is not None and r["ps"].upper() != args.ps.upper():
        return False
    for side, addr in (("src", i.src), ("dst", i.dst)):
        want_ip, want_port = getattr(args, side + "_ip"), getattr(args, side + "_port_number")
        if want_ip is not None and (addr is None or addr[0] != want_ip):
            return False
        if want_port is not None and (addr is None or addr[1] != want_port):
            return False
    return True


def _snapshot(args: argparse.Namespace) -> Dict[_Key, Dict[str, Any]]:
    from .. import netlink

    out: Dict[_Key, Dict[str, Any]] = {}
    for i in netlink.cm_ids():
        r = _record(i)
        if _kept(args, i, r):
            out[(i.dev_index, i.cm_idn)] = r
    return out


def _filters(args: argparse.Namespace) -> Optional[str]:
    """The filters' values checked, as rdma checks them (a state it knows, an address, a
    port); the reason one is refused, or None.  Sets ``src_ip``, ``src_port_number`` ..."""
    import ipaddress

    from ..abi import RdmaCmState

    if args.state is not None and args.state.upper() not in RdmaCmState.__members__:
        return "--state %r is no state of an id: give one of %s" % (args.state, ", ".join(RdmaCmState.__members__))
    for side in ("src", "dst"):
        text, port = getattr(args, side + "_addr"), getattr(args, side + "_port")
        ip = number = None
        if text is not None:
            try:
                ip = ipaddress.ip_address(text.strip("[]"))
            except ValueError:
                return "--%s-addr %r is not an IP address (10.0.2.15, fe80::1)" % (side, text)
        if port is not None:
            number = int(port) if port.isascii() and port.isdigit() else -1
            if not 0 <= number <= 0xFFFF:
                return "--%s-port %r is not a port: give 0..65535" % (side, port)
        setattr(args, side + "_ip", ip)
        setattr(args, side + "_port_number", number)
    return None


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
    refused = _filters(args)
    if refused:
        _err(refused)
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
