"""``listen``: bind, listen, and for each CONNECT_REQUEST show who asked, accept (or
--reject) it and show what follows, until --count connections have ended or a signal.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any, Dict, Optional, Tuple

from . import conn
from .conn import TIMEWAIT_GRACE, _conn_peer, _destroy_quietly, _pd_info, _pd_text, _status_text
from .inputs import _BadInput, _count, _listen_addr, _ms_after, _port_space, _private_data_arg
from .output import (EXIT_EVENT, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _clock, _err, _ip_text, _name_lines, _refused_exit,
                     _text, error_json, json_line)

class _Stop(Exception):
    """SIGTERM during ``listen``: stop as on Ctrl-C."""


class _Conn:
    """One connection ``listen`` follows: its number, its id, when its request came."""

    def __init__(self, n: int, cm: Any, t0: float) -> None:
        self.n, self.cm, self.t0 = n, cm, t0
        self.deadline: Optional[float] = None  # after DISCONNECTED: TIMEWAIT_EXIT expected by then
        self.disconnect_at: Optional[float] = None  # --disconnect-after: when this side disconnects


def _failed(args: argparse.Namespace, e: BaseException, code: int) -> int:
    """listen could not start: the message on stderr, and with --json the stream's one line
    (STOPPED, why "error", the error object and the exit status)."""
    _err(_text(e))
    if args.json:
        json_line({"event": "STOPPED", "why": "error", "error": error_json(e), "exit": code})
    return code


def cmd_listen(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..abi import AF_INET, PortSpace
    from ..errors import DeviceNodeError, KernelError

    try:
        ps = _port_space(args.ps)
        addr, name = _listen_addr(args.addr, args.numeric, "udp" if ps is PortSpace.UDP else "tcp")
        count = _count(args.count, None)
        args.disconnect_ms = _ms_after(args.disconnect_after, "--disconnect-after")
        ud = ps is PortSpace.UDP
        family = addr.family or AF_INET
        if getattr(args, "identify", False) and (args.reject or args.private_data is not None or ud):
            raise _BadInput("--identify answers each REP with this host's name, rail and address: it takes no "
                            "--private-data or --reject, and a SIDR REP (--ps udp) is not read by mesh")
        if args.reject:
            data = _private_data_arg(args.private_data, [("SIDR_REP" if ud else "REJ", family)])
        else:
            data = _private_data_arg(args.private_data, [("SIDR_REP" if ud else "REP", family)])
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE

    def emit(record: Dict[str, Any], *lines: str) -> None:
        if args.json:
            json_line(dict(record, time=round(time.time(), 6)))
        else:
            clock = _clock()
            sys.stdout.write("".join("%s %s\n" % (clock, line) for line in lines))
        sys.stdout.flush()

    try:
        ch = conn._open_channel()
    except DeviceNodeError as e:
        return _failed(args, e, EXIT_NODEV)
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
    from ..core.cmid import CmId

    lst = None
    try:
        with ch:
            lst = CmId(ch, ps)
            try:
                lst.bind_addr(addr)
                lst.listen()
            except KernelError as e:
                return _failed(args, e, _refused_exit(e.errno))
            if getattr(args, "identify", False):
                _identity(args, None)  # the table of this host's addresses, before the first request
            try:
                bound = lst.query_addr().src or addr
            except KernelError:
                bound = addr
            try:  # a SIGTERM right after LISTENING is read stops it as any other
                answer = "rejecting" if args.reject else "accepting"
                emit({"event": "LISTENING", "addr": str(bound), "ps": ps.name,
                      "answer": "REJECT" if args.reject else "ACCEPT", "private_data": data.hex(), "count": count, "names": [str(name)] if name is not None else []},
                     *_name_lines([name] if name is not None else []),
                     "LISTEN %s (rdma_cm PS_%s, %s): %s with %d bytes of private data in the %s; %s" % (
                         bound, ps.name, "UD: SIDR" if ud else "RC", answer, len(data),
                         ("SIDR REP" if ud else "REJ" if args.reject else "REP"),
                         "stops after %d connection%s" % (count, "s" if count != 1 else "") if count
                         else "Ctrl-C stops"))
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
    emit(dict({"event": "STOPPED", "why": why}, **stats, exit=code),
         "--- stopped (%s): %d request%s, %d accepted, %d rejected, %d ended ---" % (
             why if why != "count" else "count reached", stats["requests"], "s" if stats["requests"] != 1 else "",
             stats["accepted"], stats["rejected"], stats["ended"]))
    return code


def _identity(args: argparse.Namespace, local: Any, req: Any = None) -> bytes:
    """--identify's REP private data for a request ``req`` to ``local``: this host, the
    netdev that owns the address (the rail) and the address, as ``pyrdmacm mesh`` and
    ``ping`` read it (looked up once per address), then this end's view of the request's
    path (:func:`pyrdmacm.mesh.path.view_words`: the devices read once)."""
    import socket

    from ..devices import list_devices
    from ..errors import KernelError
    from ..mesh.cells import identity
    from ..mesh.path import gid_entries, qp_view, view_words, where
    from ..netlink.route import addresses, links

    known: Dict[str, Tuple[str, str, str]] = args.__dict__.setdefault("_identities", {})
    ip = _ip_text(local.ip) if local is not None else None
    if ip not in known:  # every address of this host, at once (before LISTENING: a request is answered at once)
        names = {link.index: link.name for link in links()}
        host = socket.gethostname()
        for i, addrs in addresses().items():
            for a in addrs:
                known.setdefault(_ip_text(a.ip), (host, names.get(i, "?"), _ip_text(a.ip)))
        if ip is not None and ip not in known:
            known[ip] = (host, "?", ip)
        devs = list_devices(use_netlink=False)
        args.__dict__["_devices"] = (devs, gid_entries(devs))
    if ip is None:
        return b""
    view: Tuple[str, ...] = ()
    if req is not None:
        devs, gids = args.__dict__["_devices"]
        try:
            view = tuple(view_words(where(req, devs, gids), qp_view(req)))
        except KernelError:
            pass  # the identity alone
    return identity(*known[ip], view=view)


def _listen_step(ch: Any, lst: Any, conns: Dict[int, "_Conn"], stats: Dict[str, int], args: argparse.Namespace,
                 data: bytes, ud: bool, emit: Any) -> int:
    """Read one event (or wait until the nearest TIMEWAIT_EXIT deadline) and answer it."""
    from ..abi import CmEventType as E
    from ..errors import KernelError

    deadlines = [t for c in conns.values() for t in (c.deadline, c.disconnect_at) if t is not None]
    now = time.monotonic()
    for c in [c for c in conns.values() if c.deadline is not None and c.deadline <= now]:
        emit({"event": "DESTROYED", "conn": c.n, "ms": round((now - c.t0) * 1000, 3),
              "why": "no TIMEWAIT_EXIT within %g s of DISCONNECTED" % TIMEWAIT_GRACE},
             "#%d destroyed: no TIMEWAIT_EXIT within %g s of DISCONNECTED" % (c.n, TIMEWAIT_GRACE))
        _end(conns, c, stats)
        return EXIT_OK
    for c in [c for c in conns.values() if c.disconnect_at is not None and c.disconnect_at <= now]:
        c.disconnect_at = None
        try:
            c.cm.disconnect()  # the DREQ; DISCONNECTED follows when the peer's DREP comes
        except KernelError as e:
            emit({"event": "REFUSED", "conn": c.n, "command": e.command, "errno": e.errno, "message": _text(e)},
                 "#%d the kernel refused %s: %s" % (c.n, e.command, e))
            _end(conns, c, stats)
            return EXIT_OK
        emit({"event": "DISCONNECT", "conn": c.n, "ms": round((now - c.t0) * 1000, 3)},
             "#%d disconnecting (--disconnect-after %d ms) +%.2f ms" % (c.n, args.disconnect_ms,
                                                                       (now - c.t0) * 1000))
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
        if getattr(args, "identify", False) and local is not None:
            data = _identity(args, local, req)
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
    if ev.event is E.ESTABLISHED and args.disconnect_ms is not None:
        c2.disconnect_at = now + args.disconnect_ms / 1000.0
    elif ev.event is E.DISCONNECTED:
        c2.disconnect_at = None  # the peer was first
        c2.deadline = now + TIMEWAIT_GRACE
    elif ev.event is E.TIMEWAIT_EXIT or not ev.ok:
        _end(conns, c2, stats)
    return EXIT_OK


def _end(conns: Dict[int, "_Conn"], c: "_Conn", stats: Dict[str, int]) -> None:
    conns.pop(id(c.cm), None)
    _destroy_quietly(c.cm)
    stats["ended"] += 1
