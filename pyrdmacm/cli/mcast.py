"""``mcast``: mckey's job without a QP -- join a multicast group, show the group's address
handle, follow the group's events, leave.

The steps are mckey's (librdmacm's examples/mckey.c): a datagram id (PS_UDP, or PS_IPOIB
with ``--ps ipoib``, as mckey's ``-p``); BIND to ``--src`` when one is given; RESOLVE_ADDR
to the group (the kernel maps a group's L2 address: no neighbour answers); on
ADDR_RESOLVED, JOIN_MCAST (full member, or with ``--send-only`` a send-only full member,
mckey's ``-o``); MULTICAST_JOIN carries the group's address handle.  Then the events
(MULTICAST_ERROR, ADDR_CHANGE, DEVICE_REMOVAL ...) until ``--count`` of them came, or
SIGINT / SIGTERM; then LEAVE_MCAST and DESTROY_ID.  No QP is attached: attaching one
(``ibv_attach_mcast`` with the group's GID) is its owner's job, and the group's QP number
(0xffffff) and qkey are what its sends need.
"""

from __future__ import annotations

import argparse
import errno
import sys
import time
from typing import Any, Dict, List, Optional

from . import conn
from .conn import _destroy_quietly, _next_event, _status_text
from .inputs import _BadInput, _event_count, _group_src, _timeout_ms
from .output import (EXIT_EVENT, EXIT_INTERRUPTED, EXIT_NODEV, EXIT_OK, EXIT_USAGE, _clock, _err, _event_exit,
                     _ip_text, _name_lines, _refused_exit, _text, error_json, json_line)


class _Stop(Exception):
    """SIGTERM during ``mcast``: stop as on Ctrl-C."""


#: what EINVAL means for a PS_IPOIB id, from BIND or as ADDR_ERROR (seen with Soft-RoCE in
#: the lab: mckey -p 2 gets the same)
_IPOIB_HINT = ("--ps ipoib needs an InfiniBand port (IPoIB's port space): on RoCE the kernel refuses it with "
               "EINVAL; use --ps udp")
#: what ENETUNREACH from RESOLVE_ADDR means for a group when no source was bound: the
#: kernel's route lookup for a multicast destination with a source takes the source's
#: netdev (seen in the lab's pair topology, which has no default route; mckey too)
_NO_ROUTE_HINT = ("no route to the group in this network namespace: give --src, an address of the netdev to join "
                  "on (as mckey -b), or add a route for 224.0.0.0/4 (ff00::/8 for IPv6)")

#: how many seconds past --timeout the waits for ADDR_RESOLVED and MULTICAST_JOIN last: the
#: kernel's own ADDR_ERROR comes at the timeout
_MARGIN = 1.0


class _Report:
    """What ``mcast`` prints: each record as one JSON line (``--json``, flushed at once, with
    its ``time``) or as text lines; the exit status and why it stopped."""

    def __init__(self, as_json: bool) -> None:
        self.json = as_json
        self.code = EXIT_OK
        self.why = "count"
        self.error: Optional[Dict[str, Any]] = None
        self.events = 0  # the events that came after the join

    def emit(self, record: Dict[str, Any], *lines: str) -> None:
        if self.json:
            json_line(dict(record, time=round(time.time(), 6)))
        else:
            sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()

    def fail(self, code: int, why: str, error: Dict[str, Any]) -> None:
        """The run ends here: ``code``, ``why`` (the step), ``error`` (the one error object)."""
        self.code, self.why, self.error = code, why, error


def cmd_mcast(args: argparse.Namespace) -> int:
    import signal
    import threading

    from ..abi import PortSpace
    from ..errors import DeviceNodeError

    try:
        group, src, names = _group_src(args)
        timeout_ms = _timeout_ms(args.timeout)
        count = _event_count(args.count)
    except _BadInput as e:
        _err(_text(e))
        return EXIT_USAGE
    ps = PortSpace.IPOIB if args.ps == "ipoib" else PortSpace.UDP
    out = _Report(args.json)
    member = "send-only full member" if args.send_only else "full member"
    out.emit({"event": "MCAST", "group": _ip_text(group.ip), "src": _ip_text(src.ip) if src else None,
              "ps": ps.name, "send_only": args.send_only, "count": count,
              "names": [{"name": n.name, "addresses": list(n.addresses), "chosen": n.chosen} for n in names]},
             *(_name_lines(names) + ["mcast %s from %s (rdma_cm PS_%s, %s)" % (
                 _ip_text(group.ip), _ip_text(src.ip) if src else "the source the routing tables choose", ps.name,
                 member)]))
    try:
        ch = conn._open_channel()
    except DeviceNodeError as e:
        _err(_text(e))
        out.fail(EXIT_NODEV, "open", error_json(e))
        return _stopped(out)
    old_term: Any = None
    main_thread = threading.current_thread() is threading.main_thread()
    if main_thread:
        def on_term(signum: int, frame: Any) -> None:
            raise _Stop()
        old_term = signal.signal(signal.SIGTERM, on_term)
    try:
        with ch:
            _run(ch, ps, group, src, timeout_ms, count, args.send_only, out)
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, old_term)
    return _stopped(out)


def _stopped(out: _Report) -> int:
    seen = out.events
    record: Dict[str, Any] = {"event": "STOPPED", "why": out.why, "events": seen, "exit": out.code}
    if out.error is not None:
        record["error"] = out.error
    why = "count reached" if out.why == "count" else out.why
    out.emit(record, "--- stopped (%s): %d event%s, exit %d ---" % (why, seen, "s" if seen != 1 else "", out.code))
    return out.code


def _run(ch: Any, ps: Any, group: Any, src: Any, timeout_ms: int, count: Optional[int], send_only: bool,
         out: _Report) -> None:
    """Bind, resolve, join, follow, leave."""
    from ..core.cmid import CmId

    cm = CmId(ch, ps)
    held: List[Any] = []  # the membership, once JOIN_MCAST was written
    joined = False
    try:
        joined = _join(ch, cm, group, src, timeout_ms, send_only, out, held)
        if joined:
            _follow(ch, count, out)
    except KeyboardInterrupt:
        _interrupted(out, "SIGINT", joined)
    except _Stop:
        _interrupted(out, "SIGTERM", joined)
    finally:
        try:
            if held and held[0].joined and out.why != "DEVICE_REMOVAL":
                _leave(held[0], out)
        finally:
            _destroy_quietly(cm)


def _interrupted(out: _Report, why: str, joined: bool) -> None:
    """A signal: once joined, the stop asked for (the exit stays what the events made it);
    before, an interruption (130)."""
    if joined:
        out.why = why
    else:
        out.fail(EXIT_INTERRUPTED, why, {"errno": None, "name": None, "message": "interrupted (%s) before the "
                                         "join completed" % why})


def _join(ch: Any, cm: Any, group: Any, src: Any, timeout_ms: int, send_only: bool, out: _Report,
          held: List[Any]) -> bool:
    """BIND (with --src), RESOLVE_ADDR to the group, JOIN_MCAST (its Membership put in
    ``held``): True once MULTICAST_JOIN came and was shown; False when a step failed
    (``out`` says why)."""
    from ..abi import CmEventType as E
    from ..errors import KernelError
    from ..state import OUTCOMES, Call

    wait_s = timeout_ms / 1000.0 + _MARGIN
    if src is not None:
        try:
            cm.bind_addr(src)
        except KernelError as e:
            return _refused(out, e, "bind", _hint(cm, e.errno, src))
    t = time.monotonic()
    try:
        cm.resolve_addr(group, timeout_ms=timeout_ms)
    except KernelError as e:
        return _refused(out, e, "addr", _hint(cm, e.errno, src))
    o = OUTCOMES[(cm.kind, Call.RESOLVE_ADDR)]
    w = _next_event(ch, cm.uid, o.ok, o.failed, wait_s, t)
    hint = _hint(cm, -w.ev.status, src) if w.ev is not None and w.ev.status < 0 else ""
    if not _arrived(out, w, "addr", "ADDR_RESOLVED", wait_s, hint):
        return False
    try:
        info = cm.query_addr()
        where = {"src": _ip_text(info.src.ip) if info.src else None,
                 "device": info.device.name if info.device else None, "port_num": info.port_num}
    except KernelError:
        where = {"src": None, "device": None, "port_num": None}
    out.emit(dict({"event": "ADDR_RESOLVED", "ms": round(w.ms, 3)}, **where),
             "ADDR_RESOLVED in %.2f ms: source %s on %s port %s" % (w.ms, where["src"], where["device"],
                                                                  where["port_num"]))
    t = time.monotonic()
    try:
        m = cm.join_multicast(group, send_only=send_only)
    except KernelError as e:
        return _refused(out, e, "join")
    held.append(m)  # left by the caller: the kernel holds the membership until LEAVE_MCAST
    o = OUTCOMES[(cm.kind, Call.JOIN_MULTICAST)]
    w = _next_event(ch, m.uid, o.ok, o.failed, wait_s, t)
    if not _arrived(out, w, "join", "MULTICAST_JOIN", wait_s):
        return False
    assert w.ev.event is E.MULTICAST_JOIN
    _show_join(out, w.ev.param, w.ms)
    return True


def _hint(cm: Any, err: Optional[int], src: Any) -> str:
    """What an errno of the bind or the group's resolution means for mcast, beyond its
    general meaning ("" when nothing)."""
    from ..abi import PortSpace

    if err == errno.EINVAL and cm.ps is PortSpace.IPOIB:
        return _IPOIB_HINT
    if err == errno.ENETUNREACH and src is None:
        return _NO_ROUTE_HINT
    return ""


def _refused(out: _Report, e: Any, step: str, hint: str = "") -> bool:
    """The kernel refused the command of ``step`` (``hint``: what it means here): shown; False."""
    message = _text(e) + (" (%s)" % hint if hint else "")
    out.fail(_refused_exit(e.errno), step, error_json(e, message, step=step, refused=e.command))
    out.emit({"event": "REFUSED", "step": step, "command": e.command, "errno": e.errno, "message": message},
             "the kernel refused %s (step %s): %s" % (e.command, step, message))
    return False


def _arrived(out: _Report, w: Any, step: str, wanted: str, wait_s: float, hint: str = "") -> bool:
    """Whether ``w`` is the event ``wanted``; otherwise the failure event (with ``hint``, or
    the event's own) or the time-out is shown, and the run ends with its exit status."""
    ev = w.ev
    if ev is None:
        message = "no %s within %d ms" % (wanted, int(wait_s * 1000))
        out.fail(EXIT_EVENT, step, {"errno": None, "name": None, "message": message})
        out.emit({"event": "TIMEOUT", "step": step, "waiting_for": wanted, "timeout_ms": int(wait_s * 1000)},
                 "timed out in step %s: %s" % (step, message))
        return False
    if ev.event.name == wanted and not ev.status:
        return True
    hint = hint or ev.explain()
    name = ev.status_name or None
    out.fail(_event_exit(ev.event.name, ev.status), step,
             {"errno": -ev.status if ev.status < 0 else None, "name": name,
              "message": "%s %s%s" % (ev.event.name, _status_text(ev), ": " + hint if hint else "")})
    out.emit({"event": ev.event.name, "step": step, "status": ev.status, "name": name, "ms": round(w.ms, 3),
              "hint": hint or None},
             "%s in %.2f ms (step %s): %s%s" % (ev.event.name, w.ms, step, _status_text(ev),
                                                ": " + hint if hint else ""))
    return False


def _show_join(out: _Report, p: Any, ms: float) -> None:
    """MULTICAST_JOIN's UD parameters: mckey's line, the group's QP number and qkey, the whole
    address handle."""
    ah = p.ah
    dgid = _ip_text(ah.dgid)
    handle = {"dgid": dgid, "dlid": ah.dlid, "sl": ah.sl, "sgid_index": ah.sgid_index, "hop_limit": ah.hop_limit,
              "traffic_class": ah.traffic_class, "flow_label": ah.flow_label, "port_num": ah.port_num,
              "is_global": ah.is_global, "static_rate": ah.static_rate, "src_path_bits": ah.src_path_bits}
    out.emit({"event": "MULTICAST_JOIN", "ms": round(ms, 3), "dgid": dgid, "mlid": ah.dlid, "sl": ah.sl,
              "qp_num": p.qp_num, "qkey": p.qkey, "ah": handle},
             "MULTICAST_JOIN in %.2f ms" % ms,
             "joined dgid: %s mlid 0x%x sl %d" % (dgid, ah.dlid, ah.sl),
             "group: qp %#x qkey %#010x" % (p.qp_num, p.qkey),
             "address handle: dgid %s dlid %#x sl %d sgid_index %d hop_limit %d traffic_class %d flow_label %d "
             "port %d is_global %d static_rate %d src_path_bits %d" % (
                 dgid, ah.dlid, ah.sl, ah.sgid_index, ah.hop_limit, ah.traffic_class, ah.flow_label, ah.port_num,
                 ah.is_global, ah.static_rate, ah.src_path_bits))


def _follow(ch: Any, count: Optional[int], out: _Report) -> None:
    """The events after the join, each shown and counted (``out.events``), until ``count``
    of them (None: until a signal); a MULTICAST_ERROR makes the exit 1, DEVICE_REMOVAL ends
    the run (exit 1)."""
    from ..abi import CmEventType as E

    if count != 0:
        out.emit({"event": "WAITING", "count": count},
                 "waiting for the group's events (MULTICAST_ERROR, ADDR_CHANGE ...): %s" % (
                     "until %d came" % count if count else "Ctrl-C stops"))
    while count is None or out.events < count:
        ev = ch.get_event()
        ev.ack()
        out.events += 1
        name = ev.event.name if isinstance(ev.event, E) else str(ev.event)
        hint = ev.explain() if ev.status else ""
        record: Dict[str, Any] = {"event": name, "status": ev.status, "name": ev.status_name or None,
                                  "hint": hint or None}
        line = "%s %s" % (_clock(), name)
        if ev.status:
            line += " " + _status_text(ev) + (": " + hint if hint else "")
        out.emit(record, line)
        if ev.event is E.MULTICAST_ERROR:
            out.code = EXIT_EVENT
            out.error = {"errno": -ev.status if ev.status < 0 else None, "name": ev.status_name or None,
                         "message": "MULTICAST_ERROR %s: the membership is no longer valid; join again"
                                    % _status_text(ev)}
        elif ev.event is E.DEVICE_REMOVAL:
            out.fail(EXIT_EVENT, "DEVICE_REMOVAL", {"errno": None, "name": None, "message": "the RDMA device "
                                                    "was removed: the id is destroyed without leaving"})
            break


def _leave(m: Any, out: _Report) -> None:
    from ..errors import KernelError

    try:
        reported = m.leave()
    except KernelError as e:
        out.emit({"event": "REFUSED", "step": "leave", "command": e.command, "errno": e.errno, "message": _text(e)},
                 "the kernel refused %s (step leave): %s" % (e.command, _text(e)))
        if out.code in (EXIT_OK, EXIT_INTERRUPTED):
            out.fail(_refused_exit(e.errno), "leave", error_json(e, step="leave", refused=e.command))
        return
    out.emit({"event": "LEFT", "events_reported": reported},
             "left %s (LEAVE_MCAST): the kernel reported %d event%s of the membership" % (
                 _ip_text(m.addr.ip), reported, "s" if reported != 1 else ""))
