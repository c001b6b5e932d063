"""``pyrdmacm``: resolve RDMA addresses and say where they land, and why.

Subcommands (``pyrdmacm COMMAND --help`` for each)::

    pyrdmacm resolve DST [--src SRC] [--timeout MS] [--route] [--ps tcp|udp|ipoib|ib] [--json]
    pyrdmacm route DST [--src SRC] [--json]          prediction only; needs no RDMA at all
    pyrdmacm devices [--json]                        devices, ports, GID tables, netdevs
    pyrdmacm probe [--json]                          device node, ABI, commands, netns mode
    pyrdmacm decode HEX|STRACE-LINE [--reply KIND]   name the fields of a write or a reply
    pyrdmacm conformance [--json] [--local ADDR] [--case NAME]...
                                                     check the running kernel's rdma_cm contract

Exit status of ``resolve``: 0 resolved; 1 a failure event (ADDR_ERROR,
ROUTE_ERROR: the status says why); 2 the kernel refused the command (errno),
or, with ``--strict``, the pre-check refused or warned (nothing was sent);
3 bad input; 4 no usable rdma_cm here (module not loaded, node missing).
``route``: 0 a prediction, 2 the kernel will certainly refuse (errno), or a
warning with ``--strict``; 3 bad input.
``conformance``: 0 every case as expected; 1 some case was not (the table says
which); 4 no usable rdma_cm here.

``resolve`` shows a progress line on stderr while it waits longer than a
second for an event, when stderr is a terminal (or always with ``--progress``).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
import time
from typing import Any, Dict, List, Optional, Sequence

EXIT_OK, EXIT_EVENT, EXIT_KERNEL, EXIT_USAGE, EXIT_NODEV = 0, 1, 2, 3, 4


def _ip_text(v: Any) -> str:
    """An address as ``ip`` and librdmacm users read it: RoCE v2 GIDs of IPv4 in dotted form."""
    import ipaddress
    import socket

    if isinstance(v, ipaddress.IPv6Address) and not v.scope_id:
        return socket.inet_ntop(socket.AF_INET6, v.packed)  # ::ffff:10.0.2.15, not ::ffff:a00:20f
    return str(v)


def _jsonable(v: Any) -> Any:
    import dataclasses
    import enum
    import ipaddress

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return _ip_text(v)
    if isinstance(v, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.hex()
    return v


def _print_json(obj: Any) -> None:
    json.dump(_jsonable(obj), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def _err(msg: str) -> None:
    sys.stderr.write("pyrdmacm: %s\n" % msg)


# ------------------------------------------------------------------ route (prediction)


def _predict(dst: Any, src: Any, strict: bool = False) -> Any:
    from . import precheck

    return precheck.predict(dst, src, strict=strict)


def _prediction_lines(p: Any) -> List[str]:
    lines = ["prediction:"]
    lines += ["  " + r for r in p.reasoning]
    lines += ["  warning: " + w for w in p.warnings]
    return lines


def cmd_route(args: argparse.Namespace) -> int:
    from .errors import PrecheckError, UsageError

    try:
        p = _predict(args.dst, args.src, args.strict)
    except PrecheckError as e:
        if args.json:
            _print_json({"error": {"errno": e.errno, "name": errno.errorcode.get(e.errno or 0, "?"), "message": str(e)},
                         "prediction": e.prediction})
        else:
            _err(str(e))
        return EXIT_KERNEL
    except UsageError as e:
        _err(str(e))
        return EXIT_USAGE
    if args.json:
        _print_json(p)
    else:
        print("\n".join(_prediction_lines(p)))
    return EXIT_OK


# ------------------------------------------------------------------ resolve


def _id_summary(cm: Any) -> Dict[str, Any]:
    info = cm.query_addr()
    out: Dict[str, Any] = {
        "src": str(info.src) if info.src else None,
        "dst": str(info.dst) if info.dst else None,
        "src_port": info.src.port if info.src else None,
        "dst_port": info.dst.port if info.dst else None,
        "device": info.device.name if info.device else None,
        "device_index": info.device.index if info.device else None,
        "node_guid": "%016x" % info.device.node_guid if info.device else None,
        "port": info.port_num,
        "pkey": "%#06x" % info.pkey,
    }
    try:
        out["sgid"] = _ip_text(cm.sgid) if cm.sgid else None
        out["dgid"] = _ip_text(cm.dgid) if cm.dgid else None
    except OSError:
        out["sgid"] = out["dgid"] = None
    return out


PROGRESS_AFTER, PROGRESS_EVERY = 1.0, 0.5  # seconds


def _wait(ch: Any, cm: Any, what: str, peer: Any, timeout_ms: int, progress: bool) -> Any:
    """Wait for cm's next event; with ``progress``, a line on stderr once it takes over a second.

    On a terminal the line is rewritten in place and erased at the end; elsewhere
    (``--progress`` into a file) each update is a line of its own.
    """
    start = time.monotonic()
    deadline = start + timeout_ms / 1000.0 + 30
    tty = sys.stderr.isatty()
    shown = False
    next_at = start + PROGRESS_AFTER
    while True:
        ev = ch.get_event(max(0.0, min(next_at, deadline) - time.monotonic()))
        if ev is not None and ev.id is cm:
            if shown and tty:
                sys.stderr.write("\r\033[K")
                sys.stderr.flush()
            return ev
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
    from .abi import PortSpace
    from .addr import parse_address
    from . import channel as _channel
    from .cmid import CmId
    from .errors import DeviceNodeError, KernelError, PrecheckError, UsageError

    result: Dict[str, Any] = {"dst": args.dst, "src": args.src}
    if args.strict and args.no_precheck:
        _err("--strict needs the pre-check: drop --no-precheck")
        return EXIT_USAGE
    progress = args.progress or (not args.json and sys.stderr.isatty())
    try:
        dst = parse_address(args.dst)
        src = parse_address(args.src) if args.src else None
        ps = PortSpace[args.ps.upper()]
    except (UsageError, KeyError) as e:
        _err(str(e))
        return EXIT_USAGE

    pred = None
    if not args.no_precheck:
        try:
            pred = _predict(args.dst, args.src, args.strict)
            result["prediction"] = pred
        except PrecheckError as e:
            result["prediction_error"] = {"errno": e.errno, "message": str(e)}
            if args.strict:
                _err(str(e) + " (--strict: nothing was sent to the kernel)")
                if args.json:
                    result["exit"] = EXIT_KERNEL
                    _print_json(result)
                return EXIT_KERNEL
        except Exception as e:  # the pre-check never stops the kernel from being asked
            result["prediction_error"] = {"errno": None, "message": "pre-check unavailable: %s" % e}
        if not args.json:
            if pred is not None:
                print("\n".join(_prediction_lines(pred)))
            else:
                print("prediction: %s" % result["prediction_error"]["message"])

    try:
        ch = _channel.EventChannel()
    except DeviceNodeError as e:
        _err(str(e))
        if args.json:
            result["error"] = {"errno": e.errno, "message": str(e)}
            _print_json(result)
        return EXIT_NODEV

    code = EXIT_OK
    with ch:
        cm = CmId(ch, ps)
        t0 = time.monotonic()
        try:
            cm.resolve_addr(dst, src=src, timeout_ms=args.timeout)
        except KernelError as e:
            result["kernel"] = {"refused": "RESOLVE_ADDR", "errno": e.errno, "name": errno.errorcode.get(e.errno or 0),
                                "message": str(e)}
            return _finish(args, result, EXIT_KERNEL, str(e))
        ev = _wait(ch, cm, "ADDR_RESOLVED", dst.ip, args.timeout, progress)
        took = (time.monotonic() - t0) * 1000
        if ev is None:
            result["kernel"] = {"event": None, "message": "no event from the kernel"}
            return _finish(args, result, EXIT_EVENT, "no event from the kernel")
        kern: Dict[str, Any] = {"event": ev.event.name, "status": ev.status, "status_name": ev.status_name,
                                "ms": round(took, 3)}
        result["kernel"] = kern
        if ev.event.name != "ADDR_RESOLVED":
            code = EXIT_EVENT
        else:
            kern.update(_id_summary(cm))
            if pred is not None:
                from . import precheck

                try:
                    result["mismatches"] = precheck.explain(pred, _KernelView(cm))
                except Exception as e:  # pragma: no cover - defensive
                    result["mismatches"] = ["cannot compare: %s" % e]
            if args.route:
                t1 = time.monotonic()
                try:
                    cm.resolve_route(max(args.timeout, 1))
                    rev = _wait(ch, cm, "ROUTE_RESOLVED", dst.ip, args.timeout, progress)
                    route: Dict[str, Any] = {"event": rev.event.name if rev else None,
                                             "status": rev.status if rev else None,
                                             "ms": round((time.monotonic() - t1) * 1000, 3)}
                    if rev is not None and rev.event.name == "ROUTE_RESOLVED":
                        route["paths"] = cm.query_path()
                    else:
                        code = EXIT_EVENT
                except KernelError as e:
                    route = {"refused": "RESOLVE_ROUTE", "errno": e.errno, "message": str(e)}
                    code = EXIT_KERNEL
                result["route"] = route
        cm.destroy()
    return _finish(args, result, code, None)


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
        result["exit"] = code
        _print_json(result)
        return code
    k = result.get("kernel", {})
    if "refused" in k:
        print("kernel:\n  %s" % k["message"])
    elif k.get("event"):
        status = "" if not k["status"] else "  status %d %s" % (k["status"], k["status_name"])
        print("kernel:\n  %s in %.1f ms%s" % (k["event"], k["ms"], status))
        if k["event"] == "ADDR_ERROR":
            from .errors import hint_for

            h = hint_for(k["status"])
            if h:
                print("  " + h)
        for key in ("src", "dst", "device", "device_index", "node_guid", "port", "pkey", "sgid", "dgid"):
            if key in k:
                print("  %-12s %s" % (key, k[key]))
    elif message:
        print("kernel:\n  %s" % message)
    r = result.get("route")
    if r:
        if "refused" in r:
            print("route:\n  %s" % r["message"])
        else:
            print("route:\n  %s in %.1f ms" % (r["event"], r["ms"]))
            for p in r.get("paths", []):
                print("  path sgid %s dgid %s pkey %#06x mtu %d hop_limit %d"
                      % (_ip_text(p.sgid), _ip_text(p.dgid), p.pkey, p.mtu, p.hop_limit))
    mm = result.get("mismatches")
    if mm:
        print("MISMATCH between prediction and kernel (a bug in one of them):")
        for m in mm:
            print("  " + m)
    elif mm is not None:
        print("prediction agrees with the kernel")
    return code


# ------------------------------------------------------------------ devices, probe, decode


def cmd_devices(args: argparse.Namespace) -> int:
    from . import devices

    devs = devices.list_devices()
    if args.json:
        _print_json(devs)
        return EXIT_OK
    if not devs:
        print("no RDMA devices in this network namespace (see `rdma link`, `rdma system`)")
        return EXIT_OK
    for d in devs:
        print("%s: index %s node_guid %s node_type %s (%s)" % (
            d.name, "?" if d.index is None else d.index, d.node_guid_text,
            d.node_type.name if d.node_type is not None else "?", d.source))
        for p in d.ports:
            print("    port %d: %s link_layer %s mtu %s netdev %s" % (
                p.number, p.state.name if p.state is not None else "?", p.link_layer.value,
                p.active_mtu or "?", p.netdev or "-"))
            for g in p.gids:
                print("        gid %-3d %-40s %-8s %s %s" % (g.index, g.gid, g.type.value, g.netdev or "", g.ip or ""))
    return EXIT_OK


def probe_commands(dev: Any) -> Dict[str, str]:
    """Which commands this kernel knows, without changing anything (see GuardedHeader)."""
    from ._device import GuardedHeader
    from .abi import COMMANDS, UserCmCmd

    guard = GuardedHeader()
    out: Dict[str, str] = {}
    for cmd in UserCmCmd:
        body, reply = COMMANDS[cmd]
        size_out = reply.sizeof() if reply is not None else 0
        err = guard.probe(dev, cmd, body.sizeof() if body is not None else 0, size_out)
        if err == errno.EINVAL:
            out[cmd.name] = "no"
        elif err == errno.ENOSYS:
            out[cmd.name] = "not implemented (ENOSYS)"
        elif err in (errno.EFAULT, errno.ENOSPC):
            out[cmd.name] = "yes"
        else:
            out[cmd.name] = "unexpected %s" % errno.errorcode.get(err, err)
    return out


def cmd_probe(args: argparse.Namespace) -> int:
    from . import _device

    info: Dict[str, Any] = {"kernel": os.uname().release, "device_node": _device.DEFAULT_PATH}
    info["abi_version_sysfs"] = _device.read_abi_version_sysfs()
    try:
        from . import netlink

        c = netlink.get_chardev("rdma_cm")
        info["chardev_netlink"] = {"dev": "%d:%d" % c.dev, "name": c.name, "abi": c.abi} if c else None
    except Exception as e:
        info["chardev_netlink"] = "unavailable: %s" % e
    try:
        from . import netlink

        info["netns_mode"] = netlink.sys_netns_mode()
    except Exception as e:
        info["netns_mode"] = "unavailable: %s" % e
    try:
        dev = _device.KernelDevice()
    except Exception as e:
        info["open"] = str(e)
        code = EXIT_NODEV
    else:
        info["open"] = "ok"
        info["abi_version"] = dev.abi_version
        info["commands"] = probe_commands(dev)
        dev.close()
        code = EXIT_OK
    if args.json:
        _print_json(info)
    else:
        for k, v in info.items():
            if k == "commands":
                print("commands this kernel knows:")
                for c, r in v.items():
                    print("    %-20s %s" % (c, r))
            else:
                print("%-18s %s" % (k, v))
    return code


def cmd_decode(args: argparse.Namespace) -> int:
    from .decode import decode_command, decode_reply, parse_input
    from .errors import DecodeError

    text = " ".join(args.data) if args.data else sys.stdin.read()
    try:
        data = parse_input(text)
        out = decode_reply(args.reply, data) if args.reply else decode_command(data)
    except DecodeError as e:
        _err(str(e))
        return EXIT_USAGE
    _print_json(out)
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from . import conformance
    from .errors import DeviceNodeError

    names = [c.name for c in conformance.CASES]
    unknown = [n for n in args.case if n not in names]
    if unknown:
        _err("unknown case %s; the cases are: %s" % (", ".join(unknown), ", ".join(names)))
        return EXIT_USAGE
    try:
        results = conformance.run(local=args.local, only=args.case)
    except DeviceNodeError as e:
        _err(str(e))
        return EXIT_NODEV
    failed = [r for r in results if not r.passed]
    if args.json:
        _print_json({"kernel": os.uname().release, "passed": len(results) - len(failed), "failed": len(failed),
                     "results": [r.to_dict() for r in results]})
    else:
        width = max(len(r.case) for r in results) if results else 4
        print("%-*s  %-13s %-13s %s" % (width, "case", "expected", "observed", "result"))
        for r in results:
            line = "%-*s  %-13s %-13s %s" % (width, r.case, r.expected, r.observed, "pass" if r.passed else "FAIL")
            print(line + ("  (%s)" % r.detail if r.detail and not r.passed else ""))
        print("%d cases on Linux %s: %d passed, %d failed"
              % (len(results), os.uname().release, len(results) - len(failed), len(failed)))
    return EXIT_OK if not failed else EXIT_EVENT


# ------------------------------------------------------------------ main


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pyrdmacm", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    r = sub.add_parser("resolve", help="resolve DST as rdma_resolve_addr does; show prediction and result")
    r.add_argument("dst", help="10.0.0.2, fe80::1%%eth0, [2001:db8::1]:7471, gid:...")
    r.add_argument("--src", help="source address to bind (default: the routing tables choose)")
    r.add_argument("--timeout", type=int, default=2000, metavar="MS", help="timeout_ms (default 2000)")
    r.add_argument("--route", action="store_true", help="also resolve the route and show the path record")
    r.add_argument("--ps", default="tcp", choices=["tcp", "udp", "ipoib", "ib"], help="port space (default tcp)")
    r.add_argument("--json", action="store_true", help="JSON output for scripts")
    r.add_argument("--strict", action="store_true", help="pre-check warnings become errors (nothing is sent)")
    r.add_argument("--no-precheck", action="store_true", help="ask the kernel only")
    r.add_argument("--progress", action="store_true",
                   help="show a progress line on stderr during long waits even when it is not a terminal")
    r.set_defaults(func=cmd_resolve)

    rt = sub.add_parser("route", help="predict where DST will land (routing tables, RDMA devices), no RDMA needed")
    rt.add_argument("dst")
    rt.add_argument("--src")
    rt.add_argument("--json", action="store_true")
    rt.add_argument("--strict", action="store_true")
    rt.set_defaults(func=cmd_route)

    d = sub.add_parser("devices", help="RDMA devices, ports, GID tables and netdevs (no libibverbs)")
    d.add_argument("--json", action="store_true")
    d.set_defaults(func=cmd_devices)

    pr = sub.add_parser("probe", help="the device node, ABI version, netns mode and kernel version")
    pr.add_argument("--json", action="store_true")
    pr.set_defaults(func=cmd_probe)

    dc = sub.add_parser("decode", help="decode a command write or a reply buffer (hex or strace -X raw -xx line)")
    dc.add_argument("data", nargs="*", help="hex bytes or an strace write(...) line (default: stdin)")
    dc.add_argument("--reply", metavar="KIND", help="decode a reply: CREATE_ID, GET_EVENT, QUERY:ADDR, QUERY:PATH, ...")
    dc.set_defaults(func=cmd_decode)

    cf = sub.add_parser("conformance", help="check the running kernel's rdma_cm contract (bad input answered "
                                            "with the documented errno, known bugs fixed)")
    cf.add_argument("--json", action="store_true")
    cf.add_argument("--local", metavar="ADDR",
                    help="an IPv4 address of an RDMA netdev, for the cases that resolve (default: found in sysfs)")
    cf.add_argument("--case", action="append", default=[], metavar="NAME", help="run only this case (repeatable)")
    cf.set_defaults(func=cmd_conformance)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
