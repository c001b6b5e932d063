"""The diagnostics: ``devices`` (RDMA devices, ports, GID tables), ``probe`` (the device
node, the ABI, the commands this kernel knows), ``decode`` (a command write or a reply,
field by field) and ``conformance`` (the running kernel's rdma_cm contract).
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import sys
from typing import Any, Dict, List

from .inputs import _BadInput
from .output import (EXIT_EVENT, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _err, _ip_text, _jsonable, _print_json, _text,
                     error_json, json_line)

def _port_mtu_text(p: Any) -> str:
    if p.active_mtu:
        return "mtu %d" % p.active_mtu
    if p.path_mtu:
        return "mtu %d (rdma_cm's path MTU for %s's %d)" % (p.path_mtu, p.netdev, p.netdev_mtu)
    return "mtu unknown (neither sysfs nor RDMA netlink tells it)"


def _device_json(d: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = _jsonable(d)
    out["node_guid"] = d.node_guid_text
    for pj, p in zip(out["ports"], d.ports):
        pj["path_mtu"] = p.path_mtu
    return out


def cmd_devices(args: argparse.Namespace) -> int:
    from .. import devices

    devs = devices.list_devices()
    if args.json:
        return _print_json({"devices": [_device_json(d) for d in devs]}, EXIT_OK if devs else EXIT_NODEV)
    if not devs:  # as ibv_devinfo, a failure: nothing here to use
        _err("no RDMA devices in this network namespace (see `rdma link`, `rdma system`)")
        return EXIT_NODEV
    for d in devs:
        print("%s: index %s node_guid %s node_type %s (%s)" % (
            d.name, "unknown (no RDMA netlink)" if d.index is None else d.index, d.node_guid_text,
            d.node_type.name if d.node_type is not None else "unknown", d.source))
        for p in d.ports:
            print("    port %d: %s link_layer %s %s netdev %s" % (
                p.number, p.state.name if p.state is not None else "state unknown", p.link_layer.value,
                _port_mtu_text(p), p.netdev or "none"))
            for g in p.gids:
                print("        gid %-3d %-40s %-8s %s %s" % (g.index, _ip_text(g.gid), g.type.value, g.netdev or "",
                                                          g.ip or ""))
    return EXIT_OK


def probe_commands(dev: Any) -> Dict[str, str]:
    """Which commands this kernel knows, without changing anything (see GuardedHeader)."""
    from ..core.device import GuardedHeader
    from ..abi.structs import COMMANDS
    from ..abi import UserCmCmd

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
    from ..core import device as _device

    # Each value is a value or null (unknown); why a value is unknown is in "errors", keyed
    # by its field, as the one error object (JSON), or said on its line (text).
    info: Dict[str, Any] = {"kernel": os.uname().release, "device_node": _device.DEFAULT_PATH}
    errors: Dict[str, Dict[str, Any]] = {}
    info["abi_version_sysfs"] = _device.read_abi_version_sysfs()
    try:
        from .. import netlink

        c = netlink.get_chardev("rdma_cm")
        info["chardev_netlink"] = {"dev": "%d:%d" % c.dev, "name": c.name, "abi": c.abi} if c else None
    except Exception as e:
        info["chardev_netlink"] = None
        errors["chardev_netlink"] = error_json(e)
    try:
        from .. import netlink

        info["netns_mode"] = netlink.sys_netns_mode()
    except Exception as e:
        info["netns_mode"] = None
        errors["netns_mode"] = error_json(e)
    try:
        dev = _device.KernelDevice()
    except Exception as e:
        info["open"] = False
        errors["open"] = error_json(e)
        code = EXIT_NODEV
    else:
        info["open"] = True
        info["abi_version"] = dev.abi_version
        info["commands"] = probe_commands(dev)
        dev.close()
        code = EXIT_OK
    if args.json:
        return _print_json(dict(info, errors=errors), code)
    for k, v in info.items():
        if k == "commands":
            print("commands this kernel knows:")
            for c, r in v.items():
                print("    %-20s %s" % (c, r))
        elif k in errors:
            print("%-18s %s" % (k, "unavailable: " + errors[k]["message"] if k != "open" else errors[k]["message"]))
        elif v is None:  # unknown, and nothing failed: say what was not there
            print("%-18s %s" % (k, _UNKNOWN.get(k, "unknown") % {"sysfs": " nor ".join(_device.SYSFS_ABI)}))
        else:
            print("%-18s %s" % (k, "ok" if v is True else v))
    return code


#: what an unknown value of probe means, in its text (JSON says null)
_UNKNOWN = {
    "abi_version_sysfs": "absent (neither %(sysfs)s: rdma_ucm is not loaded, or this sysfs is not the host's)",
    "chardev_netlink": "none (RDMA netlink knows no rdma_cm character device: rdma_ucm is not loaded)",
}


#: the fields that hold a pointer of the writing process (uid: librdmacm's is its id's address)
_POINTERS = frozenset(("uid", "response", "optval"))


def _hex_pointers(obj: Any) -> Any:
    """``obj`` with the pointers' values as 0x... text (a decimal address says nothing)."""
    if isinstance(obj, dict):
        return {k: ("0x%x" % v if k in _POINTERS and isinstance(v, int) else _hex_pointers(v)) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_hex_pointers(v) for v in obj]
    return obj


def _brief(out: Dict[str, Any]) -> str:
    """One line for a decoded command: its name and its body's fields (pointers in hex)."""
    body = out.get("body")
    if not isinstance(body, dict):
        return "%s %s" % (out["cmd"], body)
    fields = []
    for k, v in body.items():
        if k == "reserved" or (isinstance(v, str) and k.startswith("reserved")):
            continue
        fields.append("%s=%s" % (k, json.dumps(v, separators=(",", ":")) if isinstance(v, (dict, list)) else
                                 "-" if v is None else v))
    extra = " (+%d bytes beyond in)" % out["trailing_bytes"] if out.get("trailing_bytes") else ""
    return "%s %s%s" % (out["cmd"], " ".join(fields), extra)


def _decode_input(args: argparse.Namespace) -> str:
    """What decode reads: a trace file named as the one argument (``-``: stdin), the
    arguments themselves (hex, an strace line), or stdin."""
    if len(args.data) == 1 and (args.data[0] == "-" or os.path.isfile(args.data[0])):
        if args.data[0] == "-":
            return sys.stdin.read()
        try:
            with open(args.data[0], encoding="utf-8", errors="surrogateescape") as f:
                return f.read()
        except OSError as e:
            raise _BadInput("cannot read %s: %s" % (args.data[0], _text(e))) from None
    return " ".join(args.data) if args.data else sys.stdin.read()


def _result(w: Any) -> str:
    """A traced write's result as strace shows it: ``= 280``, ``= -1 ENODEV``, ``= ?``."""
    if w.ret is None:
        return "= ? (unfinished when the trace ended)"
    return "= %d%s" % (w.ret, " " + w.errno if w.errno else "")


def _decode_trace(args: argparse.Namespace, writes: List[Any]) -> int:
    """Every write of a trace to the rdma_cm device, one line each (JSON Lines, or --brief),
    with its pid, fd and result; the writes to other files counted as skipped."""
    from ..decode import decode_command, parse_input
    from ..errors import DecodeError

    mine = [w for w in writes if w.rdma_cm]
    skipped = [w for w in writes if not w.rdma_cm]
    failed = 0
    for w in mine:
        where = {"line": w.line, **({"pid": w.pid} if w.pid is not None else {}), "fd": w.fd, "ret": w.ret}
        if w.errno:
            where["errno"] = w.errno
        head = "line %d%s fd %d" % (w.line, " pid %d" % w.pid if w.pid is not None else "", w.fd)
        try:
            if w.truncated:
                raise DecodeError("strace line", "strace cut the buffer (its -s): trace again with -s 4096")
            out = _hex_pointers(decode_command(parse_input('write(%d, "%s")' % (w.fd, w.buffer))))
        except DecodeError as e:
            failed += 1
            if args.brief:
                print("%s: %s %s" % (head, _text(e), _result(w)))
            else:
                json_line(dict(where, error=error_json(e, struct=e.struct, offset=e.offset)))
            continue
        if args.brief:
            print("%s: %s %s" % (head, _brief(out), _result(w)))
        else:
            json_line(dict(where, **out))
    code = EXIT_USAGE if failed or not mine else EXIT_OK
    others = sorted({"fd %d (%s)" % (w.fd, w.path or "not opened in the trace") for w in skipped})
    if args.brief and skipped:
        print("%d writes to other files skipped: %s" % (len(skipped), ", ".join(others)))
    elif not args.brief:  # the stream's last line: what it held, and the exit status
        json_line({"writes": len(mine), "decoded": len(mine) - failed, "failed": failed, "skipped": len(skipped),
                   "exit": code})
    if not mine:
        _err("no write to the rdma_cm device in the trace (%d to other files): trace it with `strace -f -y -xx "
             "-s 4096 -e trace=openat,write,close,dup,clone`" % len(skipped))
    elif failed:
        _err("%d of %d writes to rdma_cm did not decode" % (failed, len(mine)))
    return code


def cmd_decode(args: argparse.Namespace) -> int:
    from ..decode import decode_command, decode_reply, parse_input, read_trace
    from ..errors import DecodeError

    if args.json and args.brief:
        _err("--json and --brief: choose one output")
        return EXIT_USAGE
    try:
        text = _decode_input(args)
    except _BadInput as e:
        _err(str(e))
        return EXIT_USAGE
    if not args.reply and len([line for line in text.splitlines() if line.strip()]) > 1:
        return _decode_trace(args, read_trace(text))  # a trace: every write, to whichever fd
    try:
        data = parse_input(text)
        out = decode_reply(args.reply, data) if args.reply else decode_command(data)
    except DecodeError as e:
        _err(_text(e))
        return EXIT_USAGE
    out = _hex_pointers(out)
    if args.brief and not args.reply:
        print(_brief(out))
    else:
        _print_json(out, EXIT_OK)
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from .. import conformance
    from ..errors import DeviceNodeError

    names = [c.name for c in conformance.CASES]
    unknown = [n for n in args.case if n not in names]
    if unknown:
        _err("unknown case %s; the cases are: %s (--list shows them)" % (", ".join(unknown), ", ".join(names)))
        return EXIT_USAGE
    if args.json and args.ktap:
        _err("--json and --ktap: choose one output")
        return EXIT_USAGE
    if args.list and (args.ktap or args.local):  # they were ignored, silently
        _err("--list prints the cases (with --json, as JSON); %s is for a run of them: give one or the other"
             % ("--ktap" if args.ktap else "--local"))
        return EXIT_USAGE
    if args.list:  # what the cases are, on any host: no device needed
        chosen = [c for c in conformance.CASES if not args.case or c.name in args.case]
        if args.json:
            _print_json({"cases": [{"case": c.name, "what": c.what, "needs_local": c.needs_local} for c in chosen]},
                        EXIT_OK)
        else:
            width = max(len(c.name) for c in chosen)
            for c in chosen:
                print("%-*s  %s" % (width, c.name, c.what))
        return EXIT_OK
    try:
        results = conformance.run(local=args.local, only=args.case)
    except DeviceNodeError as e:
        _err(_text(e))
        if args.json:
            return _print_json({"kernel": os.uname().release, "error": error_json(e)}, EXIT_NODEV)
        return EXIT_NODEV
    failed = [r for r in results if not r.passed]
    code = EXIT_OK if not failed else EXIT_EVENT
    if args.ktap:
        sys.stdout.write(conformance.ktap(results, os.uname().release))
    elif args.json:
        _print_json({"kernel": os.uname().release, "passed": len(results) - len(failed), "failed": len(failed),
                     "results": [r.to_dict() for r in results]}, code)
    else:
        width = max(len(r.case) for r in results) if results else 4
        print("%-*s  %-13s %-13s %s" % (width, "case", "expected", "observed", "result"))
        for r in results:
            line = "%-*s  %-13s %-13s %s" % (width, r.case, r.expected, r.observed, "pass" if r.passed else "FAIL")
            print(line + ("  (%s)" % r.detail if r.detail and not r.passed else ""))
        print("%d cases on Linux %s: %d passed, %d failed"
              % (len(results), os.uname().release, len(results) - len(failed), len(failed)))
    return code
