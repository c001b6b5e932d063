"""The two ends of a connection, as the connection fuzzer's model keeps them
(tests/ucma_conn_model.py): each id's rdma_cm state and IB CM state, the events it owes or
may get, and what each message one end sends makes the other end owe -- the REP, the RTU,
a REJ, a DREQ or DREP, an end going away (cm.c: cm_destroy_id).  No I/O here: the machine
sends the commands and judges the answers, these functions say what follows."""

from __future__ import annotations

import dataclasses
import errno
import time
from typing import Dict, FrozenSet, List, Optional, Tuple

from pyrdmacm import abi

K = abi.RdmaCmState
EINVAL = errno.EINVAL
ETIMEDOUT = errno.ETIMEDOUT

#: the ports listeners bind (LOCAL:port); CLOSED_PORT has none
PORTS = (7481, 7482)
#: seconds within which an owed event must come (loopback MADs under emulation take ms)
DUE = 5.0
MAX_IDS = 8
#: the machine's channels: on one host all four are this one's; across the pair topology's two
#: guests channels 2 and 3 are the peer's (tests/ucma_remote.py)
CHANNELS = 4
#: the connection parameters every CONNECT and ACCEPT carries besides valid and qp_num
CONN_PARAM = {"conn_param.retry_count": 5, "conn_param.rnr_retry_count": 5, "conn_param.responder_resources": 1,
              "conn_param.initiator_depth": 1}
#: the IB CM's states of one end, as far as the model follows them
CM = ("", "req_sent", "req_rcvd", "rej_coming", "rep_sent", "rep_rcvd", "est", "dreq_sent", "dreq_rcvd", "timewait",
      "ending", "idle", "sidr_sent", "sidr_rcvd", "done")


@dataclasses.dataclass(eq=False)
class Cid:
    """One id of the machine, as the model sees its kernel side."""

    name: str  #: the reproducer's variable
    handle: int
    ch: int
    uid: int  #: 0: the kernel queues no event for it (a request's id before ACCEPT)
    role: str  #: "listener", "active", "passive"; a datagram id's (UDP, SIDR): "ud-listener", "ud-active", "ud-passive"
    state: K  #: the rdma_cm's state
    cm: str = ""  #: the IB CM's state (:data:`CM`)
    port: int = 0  #: a listener's own port; an active id's destination port (the REQ's service id)
    at: int = 0  #: the host it lives on (0: this one; 1: the pair topology's peer)
    to: int = 0  #: an active id's destination host
    qpn: int = 0  #: the QP number it sent (CONNECT's, ACCEPT's)
    peer: Optional["Cid"] = None
    #: events that must come, in order: (event, statuses, due time, QP number the event carries or None)
    owed: List[Tuple[str, FrozenSet[int], float, Optional[int]]] = dataclasses.field(default_factory=list)
    #: events that may come, each once: event -> statuses
    may: Dict[str, FrozenSet[int]] = dataclasses.field(default_factory=dict)
    read: int = 0  #: events read for it (DESTROY_ID's events_reported)
    disc: bool = False  #: a DISCONNECTED is owed or was read (the rdma_cm sends one at most)
    #: a listener's requests on their way: the active ids whose CONNECT_REQUEST is owed, by QP number
    coming: Dict[int, "Cid"] = dataclasses.field(default_factory=dict)

    @property
    def ud(self) -> bool:
        """A datagram id (UDP's port space, a UD QP): its requests and answers are SIDR's."""
        return self.role.startswith("ud-")


def owe(c: Cid, event: str, statuses: FrozenSet[int], qpn: Optional[int] = None) -> None:
    if c.uid:
        c.owed.append((event, statuses, time.monotonic() + DUE, qpn))


def show(c: Cid) -> str:
    return "%s (%s, %s%s, ch[%d]%s)" % (c.name, c.role or "new", c.state.name, "/" + c.cm if c.cm else "", c.ch,
                                        ", peer %s" % c.peer.name if c.peer is not None else "")


def accepted(ids: List[Cid], c: Cid, valid: int, qpn: int, uid: int) -> int:
    """ACCEPT on ``c`` (with ``valid``, the ``qpn`` and ``uid`` it carries) once the rdma_cm's
    state checks passed: the errno the IB CM's state gives, and what the other end gets."""
    peer = c.peer if c.peer in ids else None
    if c.cm == "req_rcvd" and valid:  # the REP
        c.cm, c.qpn, c.uid = "rep_sent", qpn, uid  # ucma_accept: the uid takes from now on
        if peer is not None and peer.cm == "req_sent":
            peer.cm = "rep_rcvd"
            owe(peer, "CONNECT_RESPONSE", frozenset({0}), qpn)
        return 0
    if c.cm == "rep_rcvd" and not valid:  # the RTU (rdma_establish)
        c.cm = "est"
        if peer is not None and peer.cm == "rep_sent":
            peer.cm = "est"
            owe(peer, "ESTABLISHED", frozenset({0}))
        return 0
    # the IB CM refuses the REP or RTU here; rdma_accept's error path rejects (REJ 28), which
    # the IB CM sends in the states where a REJ is legal
    rejected_by(ids, c, 28)
    return EINVAL


def rejected_by(ids: List[Cid], c: Cid, reason: int) -> bool:
    """``c`` sends a REJ (with ``reason``) if its IB CM state allows one: whether it did."""
    if c.cm not in ("req_sent", "req_rcvd", "rep_sent", "rep_rcvd"):
        return False
    peer = c.peer if c.peer in ids else None
    if c.cm == "req_sent":
        # found by the first campaigns (5.10 and 7.2, model bugs): a REJ sent before any
        # answer names no comm id of the other end. REJECT's (reason 28 or 35) is dropped
        # there: the request's id stays in REQ_RCVD (REJECT and ACCEPT still legal), an
        # orphan whose answers reach nobody. DESTROY's (reason 4, TIMEOUT) is looked up by
        # the sender's comm id instead (cm.c: cm_acquire_rejected_id) and reaches it: the
        # request's id goes back to idle -- when it arrives, which no event shows (the
        # request's id has uid 0): until then its REJECT and ACCEPT may still be taken
        if peer is not None:
            peer.peer = None
            peer.may["UNREACHABLE"] = frozenset({-ETIMEDOUT})  # its REP's retries may run out
            if reason == 4 and peer.cm == "req_rcvd":
                peer.cm = "rej_coming"
        c.peer = None
    elif peer is not None and peer.cm in ("req_sent", "rep_sent", "rep_rcvd"):
        owe(peer, "REJECTED", frozenset({reason}))
        peer.cm = "idle"
    c.cm = "idle"
    return True


def disconnect_sent(ids: List[Cid], c: Cid) -> None:
    """What a DISCONNECT that ``c``'s rdma_cm took sends: a DREQ from an established end, the
    DREP from one that got the other's DREQ, else nothing (the IB CM refuses; ignored)."""
    peer = c.peer if c.peer in ids else None
    if c.cm == "est":  # the DREQ (rdma_disconnect; elsewhere the IB CM refuses it, and that is ignored)
        c.cm = "dreq_sent"
        if peer is not None and peer.cm == "est":
            peer.cm = "dreq_rcvd"
            disconnected(peer)
    elif c.cm == "dreq_rcvd":  # the DREP: both ends enter timewait
        c.cm = "timewait"
        if peer is not None and peer.cm == "dreq_sent":
            peer.cm = "timewait"
            disconnected(peer)


def disconnected(c: Cid) -> None:
    """``c``'s rdma_cm gets DISCONNECTED (once: CONNECT -> DISCONNECT)."""
    if not c.disc:
        c.disc = True
        owe(c, "DISCONNECTED", frozenset({0}))


def sidr_answered(ids: List[Cid], c: Cid, accept: bool, qpn: int) -> None:
    """ACCEPT (``accept``) or REJECT taken on a datagram request's id ``c`` in sidr_rcvd: the
    SIDR REP (cm.c: ib_send_cm_sidr_rep) ends the IB CM's part of both ends; the active end
    gets ESTABLISHED with the QP number sent, or UNREACHABLE with SIDR status 2 (REJECT)."""
    peer = c.peer if c.peer in ids else None
    c.cm, c.peer = "done", None
    if peer is not None and peer.cm == "sidr_sent":
        peer.cm = "done"
        if accept:
            owe(peer, "ESTABLISHED", frozenset({0}), qpn)
        else:
            owe(peer, "UNREACHABLE", frozenset({2}))


def _sidr_gone(ids: List[Cid], c: Cid) -> None:
    """A datagram id going away (cm.c: cm_destroy_id): a request's id not answered sends the
    SIDR REP with REJECT (status 2); a listener's requests on their way find none (status 1,
    UNSUPPORTED) or their ids go with it (status 2); an active end's going tells nobody."""
    if c.role == "ud-listener":
        for a in c.coming.values():
            if a in ids and a.cm == "sidr_sent":
                a.may["UNREACHABLE"] = frozenset({1, 2})
                a.cm = "done"
        return
    peer = c.peer if c.peer in ids else None
    if peer is not None and c.cm == "sidr_rcvd" and peer.cm == "sidr_sent":
        peer.cm = "done"
        owe(peer, "UNREACHABLE", frozenset({2}))
    if peer is not None:
        peer.peer = None


def gone(ids: List[Cid], c: Cid) -> None:
    """What ``c``'s end going away (DESTROY_ID, its fd closed) makes its peer see
    (cm.c: cm_destroy_id by the IB CM's state)."""
    ids.remove(c)
    if c.ud:
        return _sidr_gone(ids, c)
    if c.role == "listener":
        for a in c.coming.values():
            if a in ids and a.cm == "req_sent":
                # the REQ came after the listener went (REJ 8), or its request's id went with
                # the listener (REJ 28)
                a.owed = [o for o in a.owed if o[0] != "REJECTED"]
                a.may["REJECTED"] = frozenset({8, 28})
                a.cm = "idle"
        return
    peer = c.peer if c.peer in ids else None
    if peer is None:
        return
    if c.cm in ("req_sent", "req_rcvd", "rep_sent", "rep_rcvd"):
        rejected_by(ids, c, 28 if c.cm != "req_sent" else 4)  # REQ_SENT: REJ 4 (timeout)
    elif c.cm == "est" and peer.cm == "est":  # a DREQ
        peer.cm = "dreq_rcvd"
        disconnected(peer)
    elif c.cm == "dreq_rcvd" and peer.cm == "dreq_sent":  # the DREP
        peer.cm = "timewait"
        disconnected(peer)
    peer.peer = None
