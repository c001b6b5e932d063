"""What ``ping``, ``listen`` and ``mcast`` share: their event channel, the wait for one
step's event and the ids' clean-up, the peer's parameters and private data as they show
them, a failure event's status and reason.

:func:`_open_channel` is looked up here at each call: tests give the CLI a fake channel.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional

from .output import _ip_text

#: how long ``listen`` waits for TIMEWAIT_EXIT after DISCONNECTED before it destroys the id anyway
TIMEWAIT_GRACE = 10.0


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


class _Waited:
    """One step's outcome: the event (None: nothing within the time) and its time in ms."""

    def __init__(self, ev: Any, ms: float) -> None:
        self.ev, self.ms = ev, ms


def _next_event(ch: Any, uid: int, ok: Any, failed: Any, timeout_s: float, t0: float) -> _Waited:
    """The next event of ``uid`` (an id's, a membership's) among ``ok`` and ``failed``
    (acked), or None when ``timeout_s`` passed; other events read meanwhile are acked and
    dropped."""
    from ..core.router import Waiter

    waiter = ch.wait_for(uid, Waiter({**dict.fromkeys(failed, False), **dict.fromkeys(ok, True)}),
                         max(0.0, t0 + timeout_s - time.monotonic()), drop=True)
    return _Waited(waiter.event, (time.monotonic() - t0) * 1000)


def _open_channel() -> Any:
    """The event channel of ``ping``, ``listen`` and ``mcast`` (tests give the CLI a fake one here)."""
    from ..core import event_channel as _channel

    return _channel.EventChannel()


def _destroy_quietly(cm: Any) -> None:
    from ..state import State

    try:
        if cm is not None and cm.state is not State.DESTROYED and not cm.channel.closed:
            cm.destroy()
    except Exception:  # the id goes with the channel's fd in any case
        pass
