"""``pyrdmacm``: resolve RDMA addresses and say where they land, and why.

Subcommands (``pyrdmacm COMMAND --help`` for each)::

    pyrdmacm resolve DST [--src SRC] [--timeout MS] [--route] [--ps tcp|udp|ipoib|ib] [--json]
    pyrdmacm route DST [--src SRC] [--json]          prediction only; needs no RDMA at all
    pyrdmacm devices [--json]                        devices, ports, GID tables, netdevs
    pyrdmacm probe [--json]                          device node, ABI, commands, netns mode
    pyrdmacm decode HEX|STRACE-LINE [--reply KIND]   name the fields of a write or a reply
    pyrdmacm conformance [--json] [--local ADDR] [--case NAME]...
                                                     check the running kernel's rdma_cm contract
    pyrdmacm ping DST[:PORT] [--src SRC] [--ps tcp|udp] [--count N] [--private-data HEX]
                  [--timeout MS] [--timewait] [--json]
                                                     connect N times, time each step, show the peer
    pyrdmacm listen [ADDR:]PORT [--ps tcp|udp] [--count N] [--reject] [--private-data HEX] [--json]
                                                     show each request and its events; accept or reject

The exit status is the same for every subcommand (``EXIT_CODES``, shown by
``--help`` and docs/cli.md): 0 success, 1 a failure event, 2 the kernel
refused (or would refuse, or ``--strict`` refused), 3 bad input, 4 no usable
RDMA here, 130 interrupted.

Addresses are written as the library takes them (``10.0.0.2``,
``10.0.0.2:7471``, ``fe80::1%eth0``, ``[fe80::1%eth0]:7471``, ``gid:...``) or as
host names, looked up as rping does (getaddrinfo, its first answer; the one
taken is shown); ``-n``/``--numeric`` looks up no names.  The address parsed
here is the one the pre-check and the library get.

``ping`` makes the connection a client would, without a QP: RESOLVE_ADDR, RESOLVE_ROUTE,
CONNECT (a QP number allocated unique in the process; the peer's data would go there),
on CONNECT_RESPONSE the RTU (ESTABLISH), then DISCONNECT and, on DISCONNECTED, DESTROY
(``--timewait``: after TIMEWAIT_EXIT); with ``--ps udp`` a SIDR exchange, ESTABLISHED
with the peer's QP number, qkey and address handle, and no disconnect (UD has none).
Its port defaults to 7471, the port of librdmacm's examples (ucmatose, cmtime); rping
and udaddy use 7174.  ``listen`` binds (address 0.0.0.0 by default), listens, and for
each CONNECT_REQUEST prints who asked, then accepts (``--reject``: rejects) it and
prints what follows (ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT); its ``--json`` is one
object per line, flushed at once, for scripts that follow it.  Received private data
is shown whole: the kernel gives the message's field (REQ 56, REP 196, REJ 148, SIDR
REQ 180, SIDR REP 136 bytes), the sender's data padded with zeros.

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
from typing import Any, Dict, List, Optional, Sequence, Tuple

EXIT_OK, EXIT_EVENT, EXIT_KERNEL, EXIT_USAGE, EXIT_NODEV, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

#: every subcommand's exit status, and what it means: the code returns these, --help and
#: docs/cli.md show this table (a test holds the document to it)
EXIT_CODES: Tuple[Tuple[int, str], ...] = (
    (EXIT_OK, "success: resolved, connected, stopped as asked, every conformance case as expected; "
              "route: the prediction is complete, the kernel would resolve"),
    (EXIT_EVENT, "a failure event (ADDR_ERROR, ROUTE_ERROR, REJECTED, UNREACHABLE ...: its status says why), "
                 "or no answer in time; conformance: a case was not as expected"),
    (EXIT_KERNEL, "the kernel refused a command (the errno of write()); route: the kernel would refuse; "
                  "--strict: the pre-check refused or warned, and nothing was sent"),
    (EXIT_USAGE, "bad input: an argument or flag that cannot be used (argparse's refusals too); nothing was sent"),
    (EXIT_NODEV, "no usable RDMA here: no rdma_cm device node (rdma_ucm not loaded, node not passed into the "
                 "container), no RDMA device, or none with a GID for the source (ADDR_ERROR status -19 ENODEV too)"),
    (EXIT_INTERRUPTED, "interrupted (SIGINT) before the end: ping prints its summary so far; ids are destroyed "
                       "(listen, which runs until stopped, exits 0)"),
)


_EXIT_CODES_TEXT: Dict[int, str] = {}


def exit_codes_text(width: int = 78) -> str:
    """The exit-code table as --help and docs/cli.md show it (wrapped once: every subcommand's
    parser carries it)."""
    text = _EXIT_CODES_TEXT.get(width)
    if text is None:
        import textwrap

        lines = ["exit status (every subcommand):"]
        for code, meaning in EXIT_CODES:
            lines += textwrap.wrap(meaning, width, initial_indent="  %-4d" % code, subsequent_indent=" " * 6)
        text = _EXIT_CODES_TEXT[width] = "\n".join(lines)
    return text


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


def _text(e: BaseException) -> str:
    """An exception's message; an OSError's without Python's "[Errno N]" (ours name the errno)."""
    if isinstance(e, OSError) and isinstance(e.strerror, str) and e.strerror:
        return e.strerror
    return str(e)


# ------------------------------------------------------------------ addresses from the command line


class _BadInput(Exception):
    """A command-line value that cannot be used: the message says which and what to do."""


def _address(text: str, what: str, numeric: bool, port: Optional[int] = None, family: int = 0) -> Tuple[Any, Any]:
    """``(Address, HostName or None)``: what the user wrote for ``what`` (DST, --src ...),
    a host name looked up unless ``numeric``; the Address is what the pre-check and the
    library get."""
    from .addr import host_name, lookup_host, parse_address
    from .errors import UsageError

    try:
        if numeric:
            return parse_address(text, port), None
        return lookup_host(text, port, family=family)
    except UsageError as e:
        if numeric and host_name(text) is not None:
            raise _BadInput("%s %r is a host name, and -n/--numeric looks up none: write an IP address"
                            % (what, text)) from None
        raise _BadInput("%s: %s" % (what, e)) from None


def _family_text(a: Any) -> str:
    from .addr import AF_IB

    return "an InfiniBand GID" if a.family == AF_IB else "IPv%d" % a.ip.version


def _dst_src(args: argparse.Namespace, port: Optional[int] = None) -> Tuple[Any, Any, List[Any]]:
    """DST and --src as Addresses (the source first: a DST name is looked up in its family),
    and the host names looked up."""
    numeric = getattr(args, "numeric", False)
    src, src_name = _address(args.src, "--src", numeric) if args.src else (None, None)
    dst, dst_name = _address(args.dst, "DST", numeric, port, src.family if src is not None else 0)
    if src is not None and (src.family != dst.family or src.ip.version != dst.ip.version):
        raise _BadInput("--src %s is %s but DST %s is %s: give a --src of the destination's family, or none"
                        % (args.src, _family_text(src), args.dst, _family_text(dst)))
    return dst, src, [n for n in (dst_name, src_name) if n is not None]


def _addr_text(a: Any) -> str:
    """An Address as the user wrote it, port left out (it does not change where it lands)."""
    from .addr import AF_IB

    if a is None:
        return None  # type: ignore[return-value]
    if a.family == AF_IB:
        return "gid:%s" % a.ip
    if a.scope_id:
        from .addr import _zone_name

        return "%s%%%s" % (a.ip, _zone_name(a.scope_id))
    return str(a.ip)


def _timeout_ms(text: str) -> int:
    try:
        n = int(text, 10) if text.isascii() else 0
    except ValueError:
        n = 0
    if not 1 <= n <= 0xFFFFFFFF:
        raise _BadInput("bad --timeout %r: give milliseconds, a whole number from 1 to 4294967295" % text)
    return n


# ------------------------------------------------------------------ route (prediction)


def _predict(dst: Any, src: Any, strict: bool = False) -> Any:
    from . import precheck

    return precheck.predict(dst, src, strict=strict, check_node=True)


def _missing_json(m: Any) -> Dict[str, Any]:
    from .errors import errno_name

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


def _error_json(e: Any) -> Dict[str, Any]:
    from .errors import errno_name

    return {"errno": e.errno, "name": errno_name(e.errno or 0), "message": _text(e)}


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
    from .errors import errno_name

    return "%s %s" % (errno_name(err), os.strerror(err))


def _name_lines(names: List[Any]) -> List[str]:
    return ["host name: %s" % n for n in names]


def _stops_short(p: Any) -> str:
    return "the prediction stops short: %s (see missing)" % "; ".join(m.message for m in p.missing)


def _precheck_exit(e: Any) -> int:
    """A pre-check refusal: 4 when what the host lacks is the reason (no device, no GID), else 2."""
    p = e.prediction
    lacking = p is not None and any(m.errno == e.errno and m.what != "rdma_cm" for m in p.missing)
    return EXIT_NODEV if lacking else EXIT_KERNEL


def cmd_route(args: argparse.Namespace) -> int:
    from .errors import PrecheckError, UsageError

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
        out["error"] = _error_json(e)
    except UsageError as e:
        _err(_text(e))
        return EXIT_USAGE
    out["prediction"] = _prediction_json(p)
    if args.json:
        out["exit"] = code
        _print_json(out)
        return code
    lines = _name_lines(names) + (_prediction_lines(p) if p is not None else [])
    if lines:
        print("\n".join(lines))
    if problem:
        _err(problem)
    return code


# ------------------------------------------------------------------ resolve


def _pkey_text(pkey: int) -> str:
    """A partition key as a reader wants it: its number and what it means."""
    if pkey == 0:
        return "0x0000 (none: RoCE and iWARP have no partitions)"
    member = "full member" if pkey & 0x8000 else "limited member"
    if pkey & 0x7FFF == 0x7FFF:
        return "%#06x (the default partition, %s)" % (pkey, member)
    return "%#06x (partition %#06x, %s)" % (pkey, pkey & 0x7FFF, member)


def _id_summary(cm: Any) -> Dict[str, Any]:
    from .devices import guid_text

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
    from . import channel as _channel
    from .cmid import CmId
    from .errors import DeviceNodeError, KernelError, UsageError

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
            result["error"] = {"errno": e.errno, "message": _text(e)}
            result["exit"] = EXIT_NODEV
            _print_json(result)
        return EXIT_NODEV

    with ch:
        cm = CmId(ch, ps)
        t0 = time.monotonic()
        try:
            cm.resolve_addr(dst, src=src, timeout_ms=timeout_ms)
        except KernelError as e:
            result["kernel"] = {"refused": "RESOLVE_ADDR", "errno": e.errno, "name": errno.errorcode.get(e.errno or 0),
                                "message": _text(e)}
            return _finish(args, result, _refused_exit(e.errno), _text(e))
        except UsageError as e:  # what the library refuses before the syscall
            _err(_text(e))
            return EXIT_USAGE
        ev = _wait(ch, cm, "ADDR_RESOLVED", _addr_text(dst), timeout_ms, progress)
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
                from . import precheck

                result["mismatches"] = precheck.explain(pred, _KernelView(cm))
            if args.route:
                code = _resolve_route(ch, cm, dst, timeout_ms, progress, result)
        cm.destroy()
    return _finish(args, result, code, None)


def _resolve_precheck(args: argparse.Namespace, dst: Any, src: Any, result: Dict[str, Any]) -> Optional[int]:
    """The pre-check of ``resolve``: shown, kept in ``result``; an exit status when --strict stops here."""
    from .errors import PrecheckError

    pred = None
    try:
        pred = _predict(dst, src, args.strict)
    except PrecheckError as e:
        pred = e.prediction
        result["prediction_error"] = _error_json(e)
        if args.strict:
            code = _precheck_exit(e)
            return _strict_stop(args, result, pred, _text(e), code)
    except OSError as e:  # the routing tables could not be read (no rtnetlink here)
        message = "the pre-check could not read the routing tables: %s" % e
        result["prediction_error"] = {"errno": e.errno, "name": errno.errorcode.get(e.errno or 0), "message": message}
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
        result["exit"] = code
        _print_json(result)
    elif pred is not None:
        print("\n".join(_prediction_lines(pred)))
    _err(message + " (--strict: nothing was sent to the kernel)")
    return code


def _refused_exit(err: Optional[int]) -> int:
    """A command the kernel refused: 4 for ENODEV (no RDMA device for the address), else 2."""
    return EXIT_NODEV if err == errno.ENODEV else EXIT_KERNEL


def _event_exit(event: str, status: int) -> int:
    """A failure event's exit status: 4 when it says this host has no RDMA device for it, else 1."""
    return EXIT_NODEV if event == "ADDR_ERROR" and status == -errno.ENODEV else EXIT_EVENT


def _neighbour_first(pred: Any, timeout_ms: int) -> Dict[str, Any]:
    """--neighbour-first: the next hop resolved (ARP/ND) before RESOLVE_ADDR, when it needs it."""
    if pred is None:
        return {"done": False, "why": "the pre-check names the next hop, and it did not run"}
    if pred.next_hop is None or not pred.needs_neighbour_resolution:
        return {"done": False, "next_hop": _ip_text(pred.next_hop) if pred.next_hop is not None else None,
                "why": "no next hop needs resolving (%s)" % (
                    "its entry is %s" % pred.neighbour.name if pred.neighbour is not None else "none on the path")}
    from . import precheck

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
    from .errors import KernelError

    t1 = time.monotonic()
    code = EXIT_OK
    try:
        cm.resolve_route(timeout_ms)
        rev = _wait(ch, cm, "ROUTE_RESOLVED", _addr_text(dst), timeout_ms, progress)
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


# ------------------------------------------------------------------ devices, probe, decode


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
    from . import devices

    devs = devices.list_devices()
    if args.json:
        _print_json([_device_json(d) for d in devs])
        return EXIT_OK
    if not devs:
        print("no RDMA devices in this network namespace (see `rdma link`, `rdma system`)")
        return EXIT_OK
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
        info["open"] = _text(e)
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
        _err(_text(e))
        return EXIT_USAGE
    _print_json(out)
    return EXIT_OK


def cmd_conformance(args: argparse.Namespace) -> int:
    from . import conformance
    from .errors import DeviceNodeError

    names = [c.name for c in conformance.CASES]
    unknown = [n for n in args.case if n not in names]
    if unknown:
        _err("unknown case %s; the cases are: %s (--list shows them)" % (", ".join(unknown), ", ".join(names)))
        return EXIT_USAGE
    if args.json and args.ktap:
        _err("--json and --ktap: choose one output")
        return EXIT_USAGE
    if args.list:  # what the cases are, on any host: no device needed
        chosen = [c for c in conformance.CASES if not args.case or c.name in args.case]
        if args.json:
            _print_json([{"case": c.name, "what": c.what, "needs_local": c.needs_local} for c in chosen])
        else:
            width = max(len(c.name) for c in chosen)
            for c in chosen:
                print("%-*s  %s" % (width, c.name, c.what))
        return EXIT_OK
    try:
        results = conformance.run(local=args.local, only=args.case)
    except DeviceNodeError as e:
        _err(_text(e))
        return EXIT_NODEV
    failed = [r for r in results if not r.passed]
    if args.ktap:
        sys.stdout.write(conformance.ktap(results, os.uname().release))
    elif args.json:
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


# ------------------------------------------------------------------ ping and listen: connections

#: the port of librdmacm's examples (ucmatose, cmtime, rdma_server ...) and of rdma-core's tests;
#: rping and udaddy use 7174
DEFAULT_PORT = 7471
#: how long ``listen`` waits for TIMEWAIT_EXIT after DISCONNECTED before it destroys the id anyway
TIMEWAIT_GRACE = 10.0


def _count(text: Optional[str], default: Optional[int]) -> Optional[int]:
    if text is None:
        return default
    try:
        n = int(text, 10)
    except ValueError:
        n = 0
    if n < 1:
        raise _BadInput("bad --count %r: give a whole number of connections, 1 or more" % text)
    return n


def _port_space(text: str) -> Any:
    from .abi import PortSpace

    if text.lower() not in ("tcp", "udp"):
        raise _BadInput("bad --ps %r: give tcp (RC connections) or udp (UD: SIDR)" % text)
    return PortSpace[text.upper()]


def _private_data_arg(text: Optional[str], limits: Sequence[Tuple[str, int]]) -> bytes:
    """``--private-data HEX`` as bytes, checked against the messages it goes in:
    ``limits`` is ``[(message, family), ...]``."""
    from .abi import cm_private_data_limit

    if text is None:
        return b""
    digits = text.strip()
    if digits[:2].lower() == "0x":
        digits = digits[2:]
    digits = digits.replace(":", "").replace(" ", "")
    try:
        data = bytes.fromhex(digits)
    except ValueError:
        raise _BadInput("bad --private-data %r: not hex; give pairs of hex digits (68656c6c6f is 'hello')"
                        % text) from None
    for message, family in limits:
        limit = cm_private_data_limit(message, family)
        if len(data) > limit:
            raise _BadInput("--private-data is %d bytes; a %s of this id carries at most %d: give at most %d "
                            "bytes (%d hex digits)" % (len(data), message.replace("_", " "), limit, limit,
                                                      2 * limit))
    return data


def _explicit_port(text: str) -> bool:
    """Whether an address as written carries a port (``10.0.0.2:7471``, ``[fe80::1%eth0]:7471``)."""
    import re

    return re.fullmatch(r"\[[^\]]*\]:[^:]*|[^:\[\]]+:[^:]*", text.strip()) is not None


def _printable(data: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 else "." for c in data)


def _pd_info(data: bytes, message: str) -> Dict[str, Any]:
    """Received private data: the whole field (``hex``, ``size``: the message's size, the
    sender's data padded with zeros: the IB CM does not send its length) and what is
    left without the trailing zeros (``data_hex``, ``text``)."""
    shown = data.rstrip(b"\0")
    return {"message": message, "size": len(data), "hex": data.hex(), "data_hex": shown.hex(),
            "text": _printable(shown)}


def _pd_text(info: Dict[str, Any]) -> str:
    pad = "%s: %d bytes, the sender's data padded with zeros; the CM does not send its length" % (
        info["message"].replace("_", " "), info["size"])
    if not info["data_hex"]:
        return "none (%s)" % pad
    return '%s "%s" (%s)' % (info["data_hex"], info["text"], pad)


def _conn_peer(p: Any, message: str) -> Dict[str, Any]:
    """The peer's parameters from a REQ or REP (``ConnParam``); a REP has no retry count."""
    return {
        "qp_num": p.qp_num,
        "responder_resources": p.responder_resources,
        "initiator_depth": p.initiator_depth,
        "flow_control": p.flow_control,
        "retry_count": p.retry_count if message == "REQ" else None,
        "rnr_retry_count": p.rnr_retry_count,
        "srq": p.srq,
        "ece": list(p.ece),
        "private_data": _pd_info(p.private_data, message),
    }


def _ud_peer(p: Any, message: str) -> Dict[str, Any]:
    """The peer's QP and address handle from a SIDR REP (``UdParam``)."""
    ah = p.ah
    return {
        "qp_num": p.qp_num,
        "qkey": p.qkey,
        "ah": {"dgid": _ip_text(ah.dgid), "sgid_index": ah.sgid_index, "hop_limit": ah.hop_limit,
               "traffic_class": ah.traffic_class, "flow_label": ah.flow_label, "port_num": ah.port_num,
               "sl": ah.sl, "dlid": ah.dlid, "is_global": ah.is_global},
        "private_data": _pd_info(p.private_data, message),
    }


def _peer_lines(peer: Dict[str, Any]) -> List[str]:
    if "qkey" in peer:
        ah = peer["ah"]
        lines = ["peer: qkey %#010x, address handle dgid %s sgid_index %d hop_limit %d traffic_class %d "
                 "flow_label %d port %d sl %d" % (peer["qkey"], ah["dgid"], ah["sgid_index"], ah["hop_limit"],
                                                 ah["traffic_class"], ah["flow_label"], ah["port_num"], ah["sl"])]
    else:
        retry = ("retry_count %d" % peer["retry_count"] if peer["retry_count"] is not None
                 else "(a REP carries no retry_count)")
        lines = ["peer: responder_resources %d initiator_depth %d flow_control %d rnr_retry_count %d srq %d %s"
                 % (peer["responder_resources"], peer["initiator_depth"], peer["flow_control"],
                    peer["rnr_retry_count"], peer["srq"], retry)]
    lines.append("peer private data: " + _pd_text(peer["private_data"]))
    return lines


def _event_reason(ev: Any, step: str, message: Optional[str]) -> Dict[str, Any]:
    """A failure event as ``reason``: the event, its status by number and name, the hint,
    the peer's private data when the message carries some."""
    out: Dict[str, Any] = {"step": step, "event": ev.event.name, "status": ev.status,
                           "name": ev.status_name or None, "hint": ev.explain() or None}
    if message is not None:
        out["private_data"] = _pd_info(ev.private_data, message)
    return out


def _status_text(ev: Any) -> str:
    """An event's status by number and name: a reject reason, a SIDR status or an errno."""
    if ev.reason is not None:
        kind = "reason" if ev.event.name == "REJECTED" else "SIDR status"
        return "%s %d %s" % (kind, ev.status, ev.status_name)
    return "status %d %s" % (ev.status, ev.status_name)


def _reason_text(r: Dict[str, Any]) -> str:
    if r.get("refused"):
        return "kernel refused %s in step %s: %s" % (r["refused"], r["step"], r["message"])
    if r.get("event") is None:
        return "timed out in step %s: no %s within %d ms" % (r["step"], r["waiting_for"], r["timeout_ms"])
    if r["event"] == "REJECTED":
        what = "REJECTED reason %d %s" % (r["status"], r["name"] or "")
    elif r["status"]:
        what = "%s status %d %s" % (r["event"], r["status"], r["name"] or "")
    else:
        what = r["event"]
    return "%s in step %s after %.2f ms" % (what.rstrip(), r["step"], r["ms"])


def _open_channel() -> Any:
    """The event channel of ``ping`` and ``listen`` (tests give the CLI a fake one here)."""
    from . import channel as _channel

    return _channel.EventChannel()


def _destroy_quietly(cm: Any) -> None:
    from .state import State

    try:
        if cm is not None and cm.state is not State.DESTROYED and not cm.channel.closed:
            cm.destroy()
    except Exception:  # the id goes with the channel's fd in any case
        pass


class _Waited:
    """One step's outcome: the event (None: nothing within the time) and its time in ms."""

    def __init__(self, ev: Any, ms: float) -> None:
        self.ev, self.ms = ev, ms


def _next_event(ch: Any, cm: Any, events: Any, timeout_s: float, t0: float) -> _Waited:
    """Read (and ack) events until one of ``events`` comes for ``cm``, or ``timeout_s`` passes."""
    deadline = t0 + timeout_s
    while True:
        left = deadline - time.monotonic()
        ev = ch.get_event(left) if left > 0 else None
        if ev is None:
            return _Waited(None, (time.monotonic() - t0) * 1000)
        ev.ack()
        if ev.id is cm and ev.event in events:
            return _Waited(ev, (time.monotonic() - t0) * 1000)


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
             timewait: bool, holder: List[Any]) -> Dict[str, Any]:
    """One connection: resolve, connect, establish, disconnect, destroy; what each step took."""
    from .abi import CmEventType as E
    from .cmid import CmId
    from .errors import KernelError
    from .state import OUTCOMES, Call, Kind

    att: Dict[str, Any] = {"seq": seq, "established": False, "reason": None, "steps": {}, "qp_num": None,
                           "src": None, "device": None, "port_num": None, "peer": None}
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
            att["reason"] = {"step": name, "refused": e.command, "errno": e.errno,
                             "name": errno.errorcode.get(e.errno or 0), "message": _text(e)}
            return None
        w = _next_event(ch, cm, ok | failed, wait_s, t)
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
        att["device"] = info.device.name if info.device else None
        att["port_num"] = info.port_num
    except KernelError:
        pass
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
    t = time.monotonic()
    try:
        cm.establish()
    except KernelError as e:
        att["reason"] = {"step": "establish", "refused": e.command, "errno": e.errno,
                         "name": errno.errorcode.get(e.errno or 0), "message": _text(e)}
        return att
    steps["establish"] = round((time.monotonic() - t) * 1000, 3)
    att["established"] = True
    if step("disconnect", cm.disconnect, "DISCONNECTED (DREP)", bound, frozenset([E.DISCONNECTED]),
            frozenset([E.DEVICE_REMOVAL]), None) is None:
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
        lines += ["      " + x for x in _peer_lines(p)]
        if a["reason"] is not None:
            lines.append("      then " + _reason_text(a["reason"]))
            if a["reason"].get("hint"):
                lines.append("      " + a["reason"]["hint"])
        return lines
    r = a["reason"]
    lines = ["seq=%d %s%s" % (a["seq"], _reason_text(r), " (%s ms)" % taken if taken else "")]
    if r.get("hint"):
        lines.append("      " + r["hint"])
    if r.get("private_data") is not None:
        lines.append("      peer private data: " + _pd_text(r["private_data"]))
    return lines


def cmd_ping(args: argparse.Namespace) -> int:
    import dataclasses

    from .abi import AF_IB, AF_INET, PortSpace
    from .errors import DeviceNodeError, UsageError

    try:
        ps = _port_space(args.ps)
        dst, src, names = _dst_src(args)
        if _explicit_port(args.dst) and not dst.port:
            raise _BadInput("bad port 0 in %r: give DST:PORT with a port 1..65535 (default %d)"
                            % (args.dst, DEFAULT_PORT))
        if not dst.port and dst.family != AF_IB:
            dst = dataclasses.replace(dst, port=DEFAULT_PORT)
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
        ch = _open_channel()
    except DeviceNodeError as e:
        _err(_text(e))
        if args.json:
            result["error"] = {"errno": e.errno, "message": _text(e)}
            _print_json(result)
        return EXIT_NODEV
    where = "%s port %d" % (_ip_text(dst.ip), dst.port)
    if not args.json:
        if names:
            print("\n".join(_name_lines(names)))
        print("PING %s (rdma_cm PS_%s, %s)%s: %d attempt%s, %d bytes of private data in the %s" % (
            where, ps.name, "UD: SIDR" if ud else "RC", " from %s" % _addr_text(src) if src else "", count,
            "s" if count != 1 else "", len(data), "SIDR REQ" if ud else "REQ"), flush=True)
    attempts: List[Dict[str, Any]] = []
    started = time.monotonic()
    interrupted = False
    code = EXIT_OK
    holder: List[Any] = [None]
    with ch:
        try:
            for seq in range(1, count + 1):
                try:
                    a = _attempt(ch, seq, dst, src, ps, data, timeout_ms, args.timewait, holder)
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
        result["exit"] = code
        _print_json(result)
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


class _Stop(Exception):
    """SIGTERM during ``listen``: stop as on Ctrl-C."""


class _Conn:
    """One connection ``listen`` follows: its number, its id, when its request came."""

    def __init__(self, n: int, cm: Any, t0: float) -> None:
        self.n, self.cm, self.t0 = n, cm, t0
        self.deadline: Optional[float] = None  # after DISCONNECTED: TIMEWAIT_EXIT expected by then


def _listen_addr(text: str) -> Any:
    from .addr import parse_address
    from .errors import UsageError

    t = text.strip()
    if t.isdigit() and t.isascii():
        port = int(t)
        host = "0.0.0.0"
        text_addr = "%s:%d" % (host, port)
        if not 1 <= port <= 0xFFFF:
            raise _BadInput("bad port %r: give a port 1..65535 (librdmacm's examples use %d)" % (text, DEFAULT_PORT))
    else:
        text_addr = t
    try:
        a = parse_address(text_addr)
    except UsageError as e:
        raise _BadInput("%s (listen takes PORT or ADDR:PORT, e.g. %d or 10.0.0.1:%d)"
                        % (e, DEFAULT_PORT, DEFAULT_PORT)) from None
    if not a.port:
        raise _BadInput("no port in %r: give PORT or ADDR:PORT with a port 1..65535 (e.g. %d or %s:%d)"
                        % (text, DEFAULT_PORT, _ip_text(a.ip), DEFAULT_PORT))
    return a


def _clock() -> str:
    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + ".%03d" % (int(now * 1000) % 1000)


def cmd_listen(args: argparse.Namespace) -> int:
    import signal
    import threading

    from .abi import AF_INET, PortSpace
    from .errors import DeviceNodeError, KernelError

    try:
        addr = _listen_addr(args.addr)
        ps = _port_space(args.ps)
        count = _count(args.count, None)
        ud = ps is PortSpace.UDP
        family = addr.family or AF_INET
        if args.reject:
            data = _private_data_arg(args.private_data, [("SIDR_REP" if ud else "REJ", family)])
        else:
            data = _private_data_arg(args.private_data, [("SIDR_REP" if ud else "REP", family)])
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE

    def emit(record: Dict[str, Any], *lines: str) -> None:
        if args.json:
            record = dict(record, time=round(time.time(), 6))
            sys.stdout.write(json.dumps(_jsonable(record)) + "\n")
        else:
            clock = _clock()
            sys.stdout.write("".join("%s %s\n" % (clock, line) for line in lines))
        sys.stdout.flush()

    try:
        ch = _open_channel()
    except DeviceNodeError as e:
        _err(_text(e))
        return EXIT_NODEV
    conns: Dict[int, _Conn] = {}
    stats = {"requests": 0, "accepted": 0, "rejected": 0, "ended": 0}
    why = "count"
    code = EXIT_OK
    old_term: Any = None
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        def on_term(signum: int, frame: Any) -> None:
            raise _Stop()
        old_term = signal.signal(signal.SIGTERM, on_term)
    from .cmid import CmId

    lst = None
    try:
        with ch:
            lst = CmId(ch, ps)
            try:
                lst.bind_addr(addr)
                lst.listen()
            except KernelError as e:
                _err(_text(e))
                return _refused_exit(e.errno)
            try:
                bound = lst.query_addr().src or addr
            except KernelError:
                bound = addr
            answer = "rejecting" if args.reject else "accepting"
            emit({"event": "LISTENING", "addr": str(bound), "ps": ps.name, "answer": "REJECT" if args.reject else "ACCEPT",
                  "private_data": data.hex(), "count": count},
                 "LISTEN %s (rdma_cm PS_%s, %s): %s with %d bytes of private data in the %s; %s" % (
                     bound, ps.name, "UD: SIDR" if ud else "RC", answer, len(data),
                     ("SIDR REP" if ud else "REJ" if args.reject else "REP"),
                     "stops after %d connection%s" % (count, "s" if count != 1 else "") if count
                     else "Ctrl-C stops"))
            try:
                while count is None or stats["ended"] < count:
                    code = _listen_step(ch, lst, conns, stats, args, data, ud, emit)
                    if code != EXIT_OK:
                        why = "error"
                        break
            except KeyboardInterrupt:
                why = "SIGINT"
            except _Stop:
                why = "SIGTERM"
            finally:
                for c in list(conns.values()):
                    _destroy_quietly(c.cm)
                _destroy_quietly(lst)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
    emit(dict({"event": "STOPPED", "why": why}, **stats),
         "--- stopped (%s): %d request%s, %d accepted, %d rejected, %d ended ---" % (
             why if why != "count" else "count reached", stats["requests"], "s" if stats["requests"] != 1 else "",
             stats["accepted"], stats["rejected"], stats["ended"]))
    return code


def _listen_step(ch: Any, lst: Any, conns: Dict[int, "_Conn"], stats: Dict[str, int], args: argparse.Namespace,
                 data: bytes, ud: bool, emit: Any) -> int:
    """Read one event (or wait until the nearest TIMEWAIT_EXIT deadline) and answer it."""
    from .abi import CmEventType as E
    from .errors import KernelError

    deadlines = [c.deadline for c in conns.values() if c.deadline is not None]
    now = time.monotonic()
    for c in [c for c in conns.values() if c.deadline is not None and c.deadline <= now]:
        emit({"event": "DESTROYED", "conn": c.n, "ms": round((now - c.t0) * 1000, 3),
              "why": "no TIMEWAIT_EXIT within %g s of DISCONNECTED" % TIMEWAIT_GRACE},
             "#%d destroyed: no TIMEWAIT_EXIT within %g s of DISCONNECTED" % (c.n, TIMEWAIT_GRACE))
        _end(conns, c, stats)
        return EXIT_OK
    timeout = max(0.0, min(deadlines) - now) if deadlines else None
    ev = ch.get_event(timeout)
    if ev is None:
        return EXIT_OK
    ev.ack()
    now = time.monotonic()
    if ev.event is E.CONNECT_REQUEST:
        stats["requests"] += 1
        n = stats["requests"]
        req = ev.id
        c = _Conn(n, req, now)
        conns[id(req)] = c
        try:
            info = req.query_addr()
            peer_addr, local, device = info.dst, info.src, info.device
        except KernelError:
            peer_addr = local = device = None
        p = ev.param
        if ud:
            peer: Dict[str, Any] = {"qp_num": p.qp_num, "private_data": _pd_info(p.private_data, "SIDR_REQ")}
        else:
            peer = _conn_peer(p, "REQ")
        peer["addr"] = _ip_text(peer_addr.ip) if peer_addr else None
        peer["port"] = peer_addr.port if peer_addr else None
        record = {"event": "CONNECT_REQUEST", "conn": n, "peer": peer, "local": str(local) if local else None,
                  "device": device.name if device else None}
        who = "%s:%s" % (peer["addr"], peer["port"]) if peer_addr else "?"
        if ud:
            params = "(a SIDR REQ carries no QP number)"
        else:
            params = ("peer qp %#x responder_resources %d initiator_depth %d retry_count %d rnr_retry_count %d "
                      "flow_control %d srq %d" % (p.qp_num, p.responder_resources, p.initiator_depth,
                                                  p.retry_count, p.rnr_retry_count, p.flow_control, p.srq))
        emit(record, "#%d CONNECT_REQUEST from %s to %s %s" % (n, who, local, params),
             "#%d   peer private data: %s" % (n, _pd_text(peer["private_data"])))
        message = ("SIDR REP" if ud else "REJ") if args.reject else ("SIDR REP" if ud else "REP")
        try:
            if args.reject:
                req.reject(data)
            elif ud:
                req.accept(qp_num=None, private_data=data)
            else:
                req.accept(qp_num=None, private_data=data, responder_resources=p.initiator_depth,
                           initiator_depth=p.responder_resources)
        except KernelError as e:
            emit({"event": "REFUSED", "conn": n, "command": e.command, "errno": e.errno, "message": _text(e)},
                 "#%d the kernel refused %s: %s" % (n, e.command, e))
            _end(conns, c, stats)
            return EXIT_OK
        if args.reject:
            stats["rejected"] += 1
            emit({"event": "REJECT", "conn": n, "private_data": data.hex()},
                 "#%d rejected, %d bytes of private data in the %s" % (n, len(data), message))
            _end(conns, c, stats)
        else:
            stats["accepted"] += 1
            emit({"event": "ACCEPT", "conn": n, "qp_num": req.qp_num, "private_data": data.hex()},
                 "#%d accepted: our qp %#x, %d bytes of private data in the %s" % (n, req.qp_num, len(data),
                                                                                   message))
            if ud:  # the SIDR REP went: nothing follows on a datagram id
                _end(conns, c, stats)
        return EXIT_OK
    c2 = conns.get(id(ev.id))
    if c2 is None:
        if ev.id is lst:
            emit({"event": ev.event.name, "status": ev.status, "name": ev.status_name or None,
                  "hint": ev.explain() or None},
                 "listener: %s %s: %s" % (ev.event.name, _status_text(ev), ev.explain()))
            return EXIT_EVENT if not ev.ok else EXIT_OK
        return EXIT_OK
    ms = round((now - c2.t0) * 1000, 3)
    record = {"event": ev.event.name, "conn": c2.n, "status": ev.status, "ms": ms}
    text = "#%d %s +%.2f ms" % (c2.n, ev.event.name, ms)
    if ev.status:
        record["name"] = ev.status_name or None
        text += " " + _status_text(ev)
    hint = ev.explain() if not ev.ok or ev.status else ""
    if hint:
        record["hint"] = hint
        text += ": " + hint
    if ev.event is E.REJECTED:
        record["private_data"] = _pd_info(ev.private_data, "REJ")
    emit(record, text)
    if ev.event is E.DISCONNECTED:
        c2.deadline = now + TIMEWAIT_GRACE
    elif ev.event is E.TIMEWAIT_EXIT or not ev.ok:
        _end(conns, c2, stats)
    return EXIT_OK


def _end(conns: Dict[int, "_Conn"], c: "_Conn", stats: Dict[str, int]) -> None:
    conns.pop(id(c.cm), None)
    _destroy_quietly(c.cm)
    stats["ended"] += 1


# ------------------------------------------------------------------ main


class _Parser(argparse.ArgumentParser):
    """argparse with its refusals (an unknown option, a missing argument, a bad choice) exiting
    with EXIT_USAGE, as every other refusal of bad input does (argparse's own 2 would say "the
    kernel refused"); every subcommand's --help ends with the exit-code table."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("epilog", exit_codes_text())
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*a, **kw)

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, "%s: error: %s\n" % (self.prog, message))


def _numeric_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--numeric", action="store_true",
                   help="look up no host names: DST and --src must be addresses (as `ip -n`, `ping -n`)")


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    p = _Parser(prog="pyrdmacm", description=__doc__.split("\n\n")[0])
    p.add_argument("--version", action="version", version="pyrdmacm %s" % __version__)
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    dst_help = ("10.0.0.2, 10.0.0.2:7471, fe80::1%%eth0, [fec0::2]:7471, gid:fe80::2:c903:0:1, or a host name "
                "(looked up as rping does: getaddrinfo's first answer)")

    r = sub.add_parser("resolve", help="resolve DST as rdma_resolve_addr does; show prediction and result")
    r.add_argument("dst", metavar="DST", help=dst_help)
    r.add_argument("--src", help="source address to bind (default: the routing tables choose)")
    r.add_argument("--timeout", default="2000", metavar="MS",
                   help="the resolutions' timeout in ms, 1..4294967295 (default 2000)")
    r.add_argument("--route", action="store_true", help="also resolve the route and show the path record")
    r.add_argument("--ps", default="tcp", choices=["tcp", "udp", "ipoib", "ib"], help="port space (default tcp)")
    r.add_argument("--json", action="store_true", help="JSON output for scripts")
    r.add_argument("--strict", action="store_true", help="pre-check warnings become errors (nothing is sent)")
    r.add_argument("--no-precheck", action="store_true", help="ask the kernel only")
    r.add_argument("--neighbour-first", action="store_true",
                   help="resolve the next hop (ARP/ND) before asking the kernel, when the pre-check says it "
                        "needs it: a cold resolve then need not wait for its timeout")
    r.add_argument("--progress", action="store_true",
                   help="show a progress line on stderr during long waits even when it is not a terminal")
    _numeric_flag(r)
    r.set_defaults(func=cmd_resolve)

    rt = sub.add_parser("route", help="predict where DST will land (routing tables, RDMA devices); "
                                      "needs no RDMA device: says what is missing")
    rt.add_argument("dst", metavar="DST", help=dst_help)
    rt.add_argument("--src", help="the source address resolve would bind")
    rt.add_argument("--json", action="store_true", help="JSON output for scripts")
    rt.add_argument("--strict", action="store_true", help="warnings become errors (exit 2)")
    _numeric_flag(rt)
    rt.set_defaults(func=cmd_route)

    d = sub.add_parser("devices", help="RDMA devices, ports, GID tables and netdevs (no libibverbs)")
    d.add_argument("--json", action="store_true", help="JSON output for scripts")
    d.set_defaults(func=cmd_devices)

    pr = sub.add_parser("probe", help="the device node, ABI version, netns mode and kernel version")
    pr.add_argument("--json", action="store_true", help="JSON output for scripts")
    pr.set_defaults(func=cmd_probe)

    dc = sub.add_parser("decode", help="decode a command write or a reply buffer (hex, or a line of strace -xx -s 4096 "
                        "-e trace=write -P /dev/infiniband/rdma_cm)")
    dc.add_argument("data", nargs="*", help="hex bytes or an strace write(...) line (default: stdin)")
    dc.add_argument("--reply", metavar="KIND", help="decode a reply: CREATE_ID, GET_EVENT, QUERY:ADDR, QUERY:PATH, ...")
    dc.set_defaults(func=cmd_decode)

    cf = sub.add_parser("conformance", help="check the running kernel's rdma_cm contract (bad input answered "
                                            "with the documented errno, known bugs fixed)")
    cf.add_argument("--json", action="store_true", help="JSON output for scripts")
    cf.add_argument("--local", metavar="ADDR",
                    help="an IPv4 address of an RDMA netdev, for the cases that resolve (default: found in sysfs)")
    cf.add_argument("--case", action="append", default=[], metavar="NAME", help="run only this case (repeatable)")
    cf.add_argument("--list", action="store_true", help="list the cases (name and what each checks) and exit")
    cf.add_argument("--ktap", action="store_true", help="KTAP version 1 output, as kselftest harnesses read it")
    cf.set_defaults(func=cmd_conformance)

    pg = sub.add_parser("ping", help="connect to DST as a client would (resolve, connect, RTU, disconnect), "
                                     "N times; time each step, show what the peer answered")
    pg.add_argument("dst", metavar="DST[:PORT]", help="10.0.0.2, 10.0.0.2:7471, [fe80::1%%eth0]:7471, peer:7471 "
                                                      "(port default " + str(DEFAULT_PORT)
                                                      + ", librdmacm's examples'; rping and udaddy use 7174)")
    pg.add_argument("--src", help="source address to bind (default: the routing tables choose)")
    pg.add_argument("--ps", default="tcp", metavar="tcp|udp", help="port space: tcp (RC, the default) or udp "
                                                                   "(UD: SIDR)")
    pg.add_argument("--count", metavar="N", help="connections to make, one after the other (default 1)")
    pg.add_argument("--private-data", metavar="HEX", help="private data for the REQ (at most 56 bytes; "
                                                          "SIDR REQ: 180)")
    pg.add_argument("--timeout", default="2000", metavar="MS",
                    help="the resolutions' timeout in ms, and how long each later step waits (default 2000)")
    pg.add_argument("--timewait", action="store_true",
                    help="also wait for TIMEWAIT_EXIT after DISCONNECTED (about 2 s on Soft-RoCE) and time it")
    pg.add_argument("--json", action="store_true", help="one JSON object: the attempts and a summary")
    _numeric_flag(pg)
    pg.set_defaults(func=cmd_ping)

    ls = sub.add_parser("listen", help="listen on [ADDR:]PORT; show each request and what follows, "
                                       "accept (or --reject) it")
    ls.add_argument("addr", metavar="[ADDR:]PORT", help="7471, 10.0.0.1:7471, [::]:7471 (default address 0.0.0.0)")
    ls.add_argument("--ps", default="tcp", metavar="tcp|udp", help="port space: tcp (RC, the default) or udp "
                                                                   "(UD: SIDR)")
    ls.add_argument("--count", metavar="N", help="stop after N connections have ended (default: run until "
                                                 "SIGINT or SIGTERM)")
    ls.add_argument("--reject", action="store_true", help="reject each request (REJ reason 28) instead of "
                                                          "accepting it")
    ls.add_argument("--private-data", metavar="HEX", help="private data for the REP (at most 196 bytes; "
                                                          "SIDR REP: 136) or, with --reject, the REJ (148)")
    ls.add_argument("--json", action="store_true", help="one JSON object per event, one per line, as they come")
    ls.set_defaults(func=cmd_listen)
    setattr(p, "_subcommands", {name: sp for name, sp in sub.choices.items()})
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    from .errors import RdmaCmError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the subcommand's parser, whose usage line fits
        sub = getattr(parser, "_subcommands", {}).get(getattr(args, "command", None), parser)
        sub.error("unrecognized arguments: %s" % " ".join(extra))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return EXIT_OK
    except RdmaCmError as e:  # a refusal no subcommand expected: still a message, not a traceback
        _err(_text(e))
        return EXIT_USAGE if isinstance(e, ValueError) else _refused_exit(getattr(e, "errno", None))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
