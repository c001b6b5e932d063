"""The fabric's IB CM: the messages between the hosts' IB CM ids, moved through the IB CM's
table (:mod:`pyrdmacm.testing._ibcm`).

Theory of operation
-------------------
Each id that has sent or received a REQ or SIDR REQ has an IB CM id, a :class:`CmEnd`; the
fabric (:class:`IbCmWire`, the base of :class:`~pyrdmacm.testing.FakeFabric`) carries
REQ, REP, RTU, REJ, DREQ, DREP and SIDR REQ/REP from end to end at once, in the writer's
thread (a DREQ after ``dreq_latency_ms`` when asked to), and logs them
(:attr:`IbCmWire.messages`).  Every move of an end is a row of the table: a method here asks
:meth:`IbCmWire._move`, which applies it and does what entering the new state does
(``cm_reset_to_idle``, ``cm_enter_timewait``), and a message the table has no row for is
dropped.

The IB CM talks to the rdma_cm above it as cm.c talks to cma.c: through the id's handler.
Here that is the rdma_cm of the file holding the id (a :class:`CmKernel`: the id part of a
fabric's kernel, :class:`~pyrdmacm.testing.fabric_ids.FabricIdCommands`), and for a REQ the
host's listener (a :class:`CmHost` finds it).  A host's table of live
connections by (remote QPN, remote CA GUID) rejects a second REQ with the same pair (REJ 10,
stale connection; the live connection is sent a DREQ, as ``cm_match_req`` does) and a REP
with a pair already connected to this host (REJ 10 to the passive side, ``cm_rep_handler``).

Not modelled: MRA and the REP / RTU time-outs (an unanswered request or an unsent RTU waits
for ever, as the kernel's delayed MRA makes it wait in practice), lost messages.  A REQ (or
SIDR REQ, or DREQ) that nobody can receive is sent again every ``cm_retry_ms`` until
``cm_timeout_ms``, then fails as REQ_ERROR / SIDR_REQ_ERROR / DREQ_ERROR do.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Protocol, Tuple

from .. import abi
from ..abi.codec import CODECS
from ..addr import Address
from ._ibcm import (ON_DESTROY, REJ_CONSUMER_DEFINED, REJ_INVALID_SERVICE_ID, REJ_STALE_CONN, IbCmId, IbCmState)
from ._ibcm import CmInput as In
from .fake_ids import kernel_error
from .fake_net import UDP_QKEY

__all__ = ["CmEnd", "CmRequest", "CmMessage", "CmKernel", "CmHost", "IbCmWire", "wire_size", "SIDR_SUCCESS",
           "SIDR_UNSUPPORTED", "SIDR_REJECT"]

E = abi.CmEventType
St = IbCmState

_CONN = CODECS["rdma_ucm_conn_param"]
_UD = CODECS["rdma_ucm_ud_param"]
#: SIDR REP status (``enum ib_cm_sidr_status``)
SIDR_SUCCESS, SIDR_UNSUPPORTED, SIDR_REJECT = 0, 1, 2


def wire_size(message: str, family: int = abi.AF_INET) -> int:
    """How many bytes of private data an event of ``message`` carries (and the most the
    sender may give): ``"REQ"``, ``"REP"``, ``"REJ"``, ``"SIDR_REQ"``, ``"SIDR_REP"``; the
    REQs of IP ids lose the 36 bytes of the rdma_cm header (:func:`pyrdmacm.abi.cm_private_data_limit`)."""
    return abi.cm_private_data_limit(message, family)


REP_DATA, REJ_DATA, SIDR_REP_DATA = wire_size("REP"), wire_size("REJ"), wire_size("SIDR_REP")


class CmMessage(NamedTuple):
    """One IB CM message the fabric carried: ``kind`` (REQ, REP, RTU, REJ, DREQ, DREP,
    SIDR_REQ, SIDR_REP), the sending and receiving host (their first address; ``dst`` is
    None for a message no host received) and what matters of its fields."""

    kind: str
    src: str
    dst: Optional[str]
    info: Dict[str, Any]


@dataclass
class CmRequest:
    """What a REQ or SIDR REQ carries (``cma_connect_ib``, ``cma_resolve_ib_udp``)."""

    ps: int
    qp_type: int
    src: Address
    dst: Address
    qp_num: int
    private_data: bytes
    srq: int = 0
    responder_resources: int = 0
    initiator_depth: int = 0
    flow_control: int = 0
    retry_count: int = 0
    rnr_retry_count: int = 0
    ece: Tuple[int, int] = (0, 0)
    attempts: int = 0
    #: the requester's starting PSN and its path's traffic class (its TOS when the route was resolved)
    psn: int = 0
    traffic_class: int = 0


class CmKernel(Protocol):
    """What the IB CM needs of the rdma_cm above an end (the ids of one of a host's files: a
    FabricIdCommands)."""

    @property
    def host(self) -> "CmHost": ...

    def holds(self, end: "CmEnd") -> bool:
        """Whether ``end``'s id still exists there (not destroyed, its fd not closed)."""

    def cm_event(self, end: "CmEnd", event: int, status: int = 0, param: bytes = b"",
                 ece: Tuple[int, int] = (0, 0)) -> None:
        """An IB CM event for ``end``'s id (``cma_ib_handler``, ``cma_sidr_rep_handler``)."""

    def psn_of(self, handle: int) -> int:
        """The starting PSN of the id ``handle``."""

    def ah_to_peer(self, handle: int) -> Dict[str, Any]:
        """The address handle to the peer of id ``handle`` (``ah_attr`` fields)."""

    def take_request(self, listener: int, req: CmRequest, ud: bool, param: bytes) -> "Optional[CmEnd]":
        """A REQ (SIDR REQ) for the listener ``listener``: the new id's end, its
        CONNECT_REQUEST queued with ``param``; None when the listener's backlog is full."""


class CmHost(Protocol):
    """What the IB CM needs of a host: its name and CA GUID, its table of live connections,
    and the listener a request reaches."""

    @property
    def name(self) -> str: ...

    @property
    def guid(self) -> int: ...

    @property
    def remote_qpns(self) -> "Dict[Tuple[int, int], CmEnd]": ...

    def listener_for(self, req: CmRequest, ud: bool) -> Tuple[Optional[Tuple[CmKernel, int]], bool]:
        """The kernel and listener handle a request reaches, or None; and whether any
        listener holds its service id (port space and port) at all."""


class CmEnd(IbCmId):
    """One IB CM id of the fabric (cm.c's ``cm_id_private``): its state and connection
    figures (:class:`~pyrdmacm.testing._ibcm.IbCmId`), the id it serves, its peer, the REQ
    it sent, the timer of the message it waits an answer for."""

    __slots__ = ("kernel", "handle", "ud", "peer", "qp_num", "remote_guid", "key", "listener", "req", "timer")

    def __init__(self, kernel: CmKernel, handle: int, ud: bool, state: IbCmState = St.IDLE) -> None:
        super().__init__(state)
        self.kernel = kernel
        self.handle = handle
        self.ud = ud
        self.peer: Optional[CmEnd] = None
        self.qp_num = 0
        self.remote_guid = 0
        #: this end's entry in its host's table of live connections
        self.key: Optional[Tuple[int, int]] = None
        #: a request's end: the handle of the listener whose CONNECT_REQUEST made it
        self.listener: Optional[int] = None
        #: an active end: what its REQ (or SIDR REQ) carries
        self.req: Optional[CmRequest] = None
        #: the retransmission / time-out timer of the message this end waits an answer for
        self.timer: Optional[threading.Timer] = None

    @property
    def host(self) -> CmHost:
        return self.kernel.host

    @property
    def alive(self) -> bool:
        """The id still exists (not destroyed, its fd not closed)."""
        return self.kernel.holds(self)

    def __repr__(self) -> str:
        return "<CmEnd %s handle %d %s>" % (self.host.name, self.handle, self.state.name)


class IbCmWire:
    """The wire between the hosts and their IB CMs; the base of
    :class:`~pyrdmacm.testing.FakeFabric`, whose constructor documents the settings."""

    def __init__(self, *, timewait_ms: float, cm_timeout_ms: float, cm_retry_ms: float,
                 dreq_latency_ms: float) -> None:
        self.timewait_ms = timewait_ms
        self.cm_timeout_ms = cm_timeout_ms
        self.cm_retry_ms = cm_retry_ms
        self.dreq_latency_ms = dreq_latency_ms
        #: one lock for the whole fabric: a command and its effects on every host are one step
        self.lock = threading.RLock()
        self._timers: List[threading.Timer] = []
        #: every IB CM message the fabric carried, in order
        self.messages: List[CmMessage] = []
        self.closed = False

    def host_of(self, address: Any) -> Optional[CmHost]:
        """The host that owns ``address``, or None (the fabric's hosts are the subclass's)."""
        raise NotImplementedError

    # -- plumbing
    def _later(self, ms: float, fn: Callable[[], None]) -> threading.Timer:
        def run() -> None:
            with self.lock:
                if t in self._timers:
                    self._timers.remove(t)
                if not self.closed:
                    fn()

        t = threading.Timer(ms / 1000.0, run)
        t.daemon = True
        self._timers.append(t)
        t.start()
        return t

    def _stop_timers(self) -> None:
        for t in self._timers:
            t.cancel()
        self._timers.clear()

    def _log(self, kind: str, src: CmHost, dst: Optional[CmHost], **info: Any) -> None:
        self.messages.append(CmMessage(kind, src.name, dst.name if dst is not None else None, info))

    @staticmethod
    def _cancel(end: CmEnd) -> None:
        if end.timer is not None:
            end.timer.cancel()
            end.timer = None

    @staticmethod
    def _insert_remote(end: CmEnd, qpn: int, guid: int) -> Optional[CmEnd]:
        """``cm_insert_remote_qpn``: None if inserted, else the end already holding the pair."""
        key = (qpn, guid)
        table = end.host.remote_qpns
        held = table.get(key)
        if held is not None and held is not end:
            return held
        table[key] = end
        end.key = key
        return None

    @staticmethod
    def _remove_remote(end: CmEnd) -> None:
        if end.key is not None:
            table = end.host.remote_qpns
            if table.get(end.key) is end:
                del table[end.key]
            end.key = None

    def _move(self, end: CmEnd, what: In) -> Optional[IbCmState]:
        """``what`` reaches ``end``: the table's new state (None: no row, nothing moved), and
        what entering it does: IDLE (``cm_reset_to_idle``) and TIMEWAIT (``cm_enter_timewait``)
        take the end's timer and its entry in the table of live connections; TIMEWAIT ends
        ``timewait_ms`` later with TIMEWAIT_EXIT."""
        old = end.state
        new = end.move(what)
        if new is None or new is old:
            return new
        if new in (St.IDLE, St.TIMEWAIT):
            self._cancel(end)
            self._remove_remote(end)
        if new is St.TIMEWAIT:
            def exit_timewait() -> None:
                if self._move(end, In.TIMEWAIT_EXIT) is not None:
                    end.kernel.cm_event(end, E.TIMEWAIT_EXIT)

            self._later(self.timewait_ms, exit_timewait)
        return new

    def _retry_req(self, end: CmEnd) -> None:
        """A REQ (or SIDR REQ) nobody took: sent again every cm_retry_ms; at cm_timeout_ms,
        REQ_ERROR."""
        req = end.req
        assert req is not None
        req.attempts += 1
        if req.attempts * self.cm_retry_ms < self.cm_timeout_ms:
            end.timer = self._later(self.cm_retry_ms, lambda: self._resend_req(end))
        else:
            end.timer = self._later(self.cm_retry_ms, lambda: self._req_error(end))

    # -- event parameters
    @staticmethod
    def _conn(qp_num: int = 0, private_data: bytes = b"", size: int = 0, **fields: int) -> bytes:
        values: Dict[str, Any] = {"qp_num": qp_num, "private_data": private_data.ljust(size, b"\0"),
                                  "private_data_len": size}
        values.update(fields)
        return _CONN.pack_dict(values)

    @staticmethod
    def _ud(private_data: bytes, size: int, qp_num: int = 0, qkey: int = 0,
            ah: Optional[Dict[str, Any]] = None) -> bytes:
        values: Dict[str, Any] = {"qp_num": qp_num, "qkey": qkey, "private_data": private_data.ljust(size, b"\0"),
                                  "private_data_len": size}
        for k, v in (ah or {}).items():
            values["ah_attr." + k] = v
        return _UD.pack_dict(values)

    # -- REQ (ib_send_cm_req, cm_req_handler, cm_match_req, cma_ib_req_handler)
    def send_req(self, end: CmEnd) -> None:
        """``ib_send_cm_req`` / ``ib_send_cm_sidr_req`` of a new end."""
        if self._move(end, In.SEND_SIDR_REQ if end.ud else In.SEND_REQ) is None:
            raise kernel_error(errno.EINVAL)
        self._transmit_req(end)

    def _transmit_req(self, end: CmEnd) -> None:
        req = end.req
        assert req is not None
        kind = "SIDR_REQ" if end.ud else "REQ"
        recv = self.host_of(req.dst.ip)
        self._log(kind, end.host, recv, qp_num=req.qp_num, port=req.dst.port, attempt=req.attempts)
        if recv is None:  # nobody owns the address: nobody answers
            self._retry_req(end)
        elif end.ud:
            self._deliver_sidr_req(end, recv)
        else:
            self._deliver_req(end, recv)

    def _resend_req(self, end: CmEnd) -> None:
        if end.alive and end.state in (St.REQ_SENT, St.SIDR_REQ_SENT) and end.peer is None:
            self._transmit_req(end)

    def _req_error(self, end: CmEnd) -> None:
        """REQ_ERROR / SIDR_REQ_ERROR: UNREACHABLE -ETIMEDOUT."""
        end.timer = None
        if end.peer is not None or self._move(end, In.REQ_TIMEOUT) is None:
            return
        end.kernel.cm_event(end, E.UNREACHABLE, -errno.ETIMEDOUT, self._ud(b"", 0) if end.ud else b"")

    def _deliver_req(self, end: CmEnd, recv: CmHost) -> None:
        req = end.req
        assert req is not None
        guid = end.host.guid
        # cm_match_req: a stale connection first, then the listener
        held = recv.remote_qpns.get((req.qp_num, guid))
        if held is not None:
            self._log("REJ", recv, end.host, reason=REJ_STALE_CONN)
            self._on_rej(end, REJ_STALE_CONN, b"")
            if held.state is St.ESTABLISHED:  # and it sends the connection it holds a DREQ
                self.send_dreq(held)
            return
        match, any_service = recv.listener_for(req, False)
        if match is None:
            reason = REJ_CONSUMER_DEFINED if any_service else REJ_INVALID_SERVICE_ID
            self._log("REJ", recv, end.host, reason=reason)
            self._on_rej(end, reason, b"")
            return
        k, lst = match
        # cma_set_req_event_data, as cm_format_req_event reads the REQ: the sender's initiator
        # depth is the receiver's responder resources, and the other way round
        param = self._conn(req.qp_num, req.private_data, wire_size("REQ", req.src.family),
                           srq=req.srq, responder_resources=req.initiator_depth,
                           initiator_depth=req.responder_resources, flow_control=req.flow_control,
                           retry_count=req.retry_count, rnr_retry_count=req.rnr_retry_count)
        child = k.take_request(lst, req, False, param)
        if child is None:
            # ucma_connect_event_handler: -ENOMEM; cm_destroy_id(-ENOMEM) sends no REJ: the REQ comes again
            self._log("DROP", recv, end.host, why="backlog full")
            self._retry_req(end)
            return
        self._insert_remote(child, req.qp_num, guid)
        self._move(child, In.RECV_REQ)
        child.remote_qpn, child.remote_guid = req.qp_num, guid
        # cm_req_handler: the REQ's initiator depth is the receiver's responder resources and the
        # other way round; its retry counts, PSN and path (traffic class) are the receiver's too
        child.rr, child.idepth, child.retry, child.rnr = (req.initiator_depth, req.responder_resources,
                                                          req.retry_count, req.rnr_retry_count)
        child.remote_psn, child.tc = req.psn, req.traffic_class
        child.peer, end.peer = end, child
        self._cancel(end)

    def _deliver_sidr_req(self, end: CmEnd, recv: CmHost) -> None:
        req = end.req
        assert req is not None
        match, any_service = recv.listener_for(req, True)
        if match is None:
            # no listener: cm_sidr_req_handler answers UNSUPPORTED; one that refuses, REJECT
            status = SIDR_REJECT if any_service else SIDR_UNSUPPORTED
            self._log("SIDR_REP", recv, end.host, status=status)
            self._on_sidr_rep(end, status, 0, b"")
            return
        k, lst = match
        # the ud arm carries only the private data (qp_num 0, no address handle)
        child = k.take_request(lst, req, True, self._ud(req.private_data, wire_size("SIDR_REQ", req.src.family)))
        if child is None:
            # -ENOMEM from the handler: cm_destroy_id in SIDR_REQ_RCVD answers REJECT
            self._log("SIDR_REP", recv, end.host, status=SIDR_REJECT)
            self._on_sidr_rep(end, SIDR_REJECT, 0, b"")
            return
        self._move(child, In.RECV_SIDR_REQ)
        child.peer, end.peer = end, child
        self._cancel(end)

    # -- REP, RTU (ib_send_cm_rep, cm_rep_handler, ib_send_cm_rtu, cm_rtu_handler)
    def send_rep(self, end: CmEnd, *, qp_num: int, private_data: bytes, srq: int, responder_resources: int,
                 initiator_depth: int, flow_control: int, rnr_retry_count: int, ece: Tuple[int, int]) -> None:
        if len(private_data) > REP_DATA or not end.can(In.SEND_REP):
            # ib_send_cm_rep refuses; rdma_accept's error path rejects (REJ 28), then EINVAL
            self.send_rej(end, REJ_CONSUMER_DEFINED, b"")
            raise kernel_error(errno.EINVAL)
        self._move(end, In.SEND_REP)
        end.qp_num = qp_num
        end.rr, end.idepth, end.rnr = responder_resources, initiator_depth, rnr_retry_count
        peer = end.peer
        self._log("REP", end.host, peer.host if peer else None, qp_num=qp_num, private_data_len=len(private_data))
        if peer is None or not peer.alive or not peer.can(In.RECV_REP):
            return
        # cm_rep_handler: the REP's (QPN, CA GUID) against the requester's host's live connections
        if self._insert_remote(peer, qp_num, end.host.guid) is not None:
            self._log("REJ", peer.host, end.host, reason=REJ_STALE_CONN)
            self._on_rej(end, REJ_STALE_CONN, b"")
            # the requester's REQ stays unanswered: REQ_ERROR at cm_timeout_ms
            peer.peer = None
            peer.timer = self._later(self.cm_timeout_ms, lambda: self._req_error(peer))
            return
        self._move(peer, In.RECV_REP)
        peer.remote_qpn, peer.remote_guid = qp_num, end.host.guid
        # cm_rep_handler: the REP's responder resources are the requester's initiator depth and
        # the other way round; its RNR retry count and starting PSN are the requester's from now
        peer.idepth, peer.rr, peer.rnr = responder_resources, initiator_depth, rnr_retry_count
        peer.remote_psn = end.kernel.psn_of(end.handle)
        # cma_set_rep_event_data (no retry count), responder resources and initiator depth swapped
        param = self._conn(qp_num, private_data, REP_DATA, srq=srq, responder_resources=initiator_depth,
                           initiator_depth=responder_resources, flow_control=flow_control,
                           rnr_retry_count=rnr_retry_count)
        peer.kernel.cm_event(peer, E.CONNECT_RESPONSE, 0, param, ece)

    def send_rtu(self, end: CmEnd) -> None:
        """ACCEPT(valid=0): ``cma_rep_recv``; out of REP_RCVD the RTU fails, and a REJ 28 goes."""
        if self._move(end, In.SEND_RTU) is None:
            self.send_rej(end, REJ_CONSUMER_DEFINED, b"")
            raise kernel_error(errno.EINVAL)
        peer = end.peer
        self._log("RTU", end.host, peer.host if peer else None)
        if peer is not None and peer.alive and self._move(peer, In.RECV_RTU) is not None:
            peer.kernel.cm_event(peer, E.ESTABLISHED)

    # -- REJ (cm_send_rej_locked, cm_rej_handler)
    def send_rej(self, end: CmEnd, reason: int, private_data: bytes) -> bool:
        """A REJ from ``end`` if its state allows one (False: it does not: EINVAL)."""
        if self._move(end, In.SEND_REJ) is None:
            return False
        peer = end.peer
        self._log("REJ", end.host, peer.host if peer else None, reason=reason, private_data_len=len(private_data))
        if peer is not None and peer.alive:
            self._on_rej(peer, reason, private_data)
        return True

    def _on_rej(self, end: CmEnd, reason: int, private_data: bytes) -> None:
        """A REJ reaches ``end``: REJECTED, status the reason, the data padded to 148 bytes
        (zeros for the rejects the kernel makes)."""
        if self._move(end, In.RECV_REJ_STALE if reason == REJ_STALE_CONN else In.RECV_REJ) is None:
            return
        end.kernel.cm_event(end, E.REJECTED, reason, self._conn(0, private_data, REJ_DATA))

    # -- DREQ, DREP (cm_send_dreq_locked, cm_dreq_handler, cm_send_drep_locked, cm_drep_handler)
    def send_dreq(self, end: CmEnd) -> bool:
        """A DREQ from ``end`` if it is established (False: it is not)."""
        if self._move(end, In.SEND_DREQ) is None:
            return False
        peer = end.peer
        self._log("DREQ", end.host, peer.host if peer else None)
        # the DREQ waits for the DREP: DREQ_ERROR at cm_timeout_ms
        end.timer = self._later(self.cm_timeout_ms, lambda: self._dreq_error(end))
        if self.dreq_latency_ms:
            self._later(self.dreq_latency_ms, lambda: self._on_dreq(end, peer))
        else:
            self._on_dreq(end, peer)
        return True

    def _on_dreq(self, end: CmEnd, peer: Optional[CmEnd]) -> None:
        """``cm_dreq_handler``: the DREQ of ``end`` reaches ``peer`` -- unless ``end`` was
        answered or timed out meanwhile (a destroyed end's DREQ is on the wire all the same)."""
        if end.alive and end.state is not St.DREQ_SENT:
            return
        if peer is None or not peer.alive:
            # no live cm_id holds the connection there: that CM answers a DREP itself (cm_issue_drep)
            self._log("DREP", peer.host if peer else end.host, end.host)
            self._on_drep(end)
            return
        new = self._move(peer, In.RECV_DREQ)
        if new is St.TIMEWAIT:  # cm_issue_drep
            self._log("DREP", peer.host, end.host)
            self._on_drep(end)
        elif new is St.DREQ_RCVD:
            # REP_SENT, ESTABLISHED, or DREQ_SENT (two DREQs crossed: each end now waits for a DREP)
            self._cancel(peer)
            peer.kernel.cm_event(peer, E.DISCONNECTED)
        # any other state drops it

    def _dreq_error(self, end: CmEnd) -> None:
        end.timer = None
        if self._move(end, In.DREQ_TIMEOUT) is not None:
            end.kernel.cm_event(end, E.DISCONNECTED, -errno.ETIMEDOUT)

    def send_drep(self, end: CmEnd) -> bool:
        """The DREP of ``end``, which received a DREQ (False: it did not)."""
        if self._move(end, In.SEND_DREP) is None:
            return False
        peer = end.peer
        self._log("DREP", end.host, peer.host if peer else None)
        if peer is not None and peer.alive:
            self._on_drep(peer)
        return True

    def _on_drep(self, end: CmEnd) -> None:
        if self._move(end, In.RECV_DREP) is not None:
            end.kernel.cm_event(end, E.DISCONNECTED)

    # -- SIDR REP (cma_send_sidr_rep, cm_sidr_rep_handler, cma_sidr_rep_handler)
    def accept_ud(self, end: CmEnd, *, qp_num: int, private_data: bytes) -> None:
        if not end.can(In.SEND_SIDR_REP):
            raise kernel_error(errno.EINVAL)
        if len(private_data) > SIDR_REP_DATA:
            # ib_send_cm_sidr_rep refuses; rdma_accept's error path answers REJECT, then EINVAL
            self.send_sidr_rep(end, SIDR_REJECT)
            raise kernel_error(errno.EINVAL)
        end.qp_num = qp_num
        self.send_sidr_rep(end, SIDR_SUCCESS, qp_num=qp_num, private_data=private_data)

    def send_sidr_rep(self, end: CmEnd, status: int, *, qp_num: int = 0, private_data: bytes = b"") -> bool:
        if self._move(end, In.SEND_SIDR_REP) is None:
            return False
        peer = end.peer
        self._log("SIDR_REP", end.host, peer.host if peer else None, status=status, qp_num=qp_num)
        if peer is not None and peer.alive:
            self._on_sidr_rep(peer, status, qp_num, private_data)
        return True

    def _on_sidr_rep(self, end: CmEnd, status: int, qp_num: int, private_data: bytes) -> None:
        """UNREACHABLE with the SIDR status, or ESTABLISHED with the ud arm: the peer's QPN,
        the qkey, the address handle to the peer, the data padded to 136 bytes."""
        if self._move(end, In.RECV_SIDR_REP) is None:
            return
        k = end.kernel
        if status != SIDR_SUCCESS:
            k.cm_event(end, E.UNREACHABLE, status, self._ud(private_data, SIDR_REP_DATA))
            return
        k.cm_event(end, E.ESTABLISHED, 0, self._ud(private_data, SIDR_REP_DATA, qp_num, UDP_QKEY,
                                                    k.ah_to_peer(end.handle)))

    # -- DESTROY_ID (cm_destroy_id)
    def destroy_end(self, end: CmEnd) -> None:
        """What the IB CM sends when the id of ``end`` (already gone) is destroyed, by state
        (:data:`~pyrdmacm.testing._ibcm.ON_DESTROY`), and where the end is left."""
        action = ON_DESTROY.get(end.state)
        if action is not None:
            kind, code = action
            if kind == "REJ":
                self.send_rej(end, code, b"")
            elif kind == "DREQ":
                self.send_dreq(end)
            elif kind == "DREP":
                self.send_drep(end)
            else:
                self.send_sidr_rep(end, code)
        self._move(end, In.DESTROY)
        self._cancel(end)
        self._remove_remote(end)
