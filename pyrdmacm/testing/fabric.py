"""Several fake hosts joined by a fabric: connection management without a kernel.

Theory of operation
-------------------
:class:`FakeFabric` makes hosts (:meth:`FakeFabric.host`); a :class:`FakeHost` is a
factory of :class:`FabricKernel` transports (``EventChannel(host())``), all sharing
that host's :class:`~pyrdmacm.testing.FakeNet` (its addresses on one
:class:`~pyrdmacm.testing.FakeDevice` with a node GUID of its own; every other
host's addresses as peers that answer ARP) and its port table, as the ucma files
of one machine share its rdma_cm.

A :class:`FabricKernel` is a :class:`~pyrdmacm.testing.FakeKernel` (every command
it had behaves as before) that also does what the kernel does past
``resolve_route`` for user-space ids, which never have a QP (``../shared/cm-notes.md``
sections 0-5 are the reference; the kernel functions are named where they decide):

* the rdma_cm layer (ucma.c, cma.c): the commands CONNECT, ACCEPT (valid=1 on the
  passive side; valid=0, the RTU, on the active side), REJECT, NOTIFY, DISCONNECT,
  DESTROY_ID and LISTEN, with their errnos, the private-data limits of IP ids (REQ 56,
  REP 196, REJ 148, SIDR REQ 180, SIDR REP 136), the new id of a CONNECT_REQUEST (uid 0
  until ACCEPT gives it one; events for uid 0 are dropped as ``ucma_event_handler``
  drops them), the event filter of ``cma_ib_handler`` (state CONNECT, or DISCONNECT
  for TIMEWAIT_EXIT) and the real ``rdma_ucm_event_resp`` layout with the
  ``conn`` or ``ud`` arm padded to the wire size;
* the IB CM (cm.c), one per host: each id that has sent or received a REQ or SIDR
  REQ has a cm_id (:class:`_End`) in one of the IB CM states (REQ_SENT, REQ_RCVD,
  REP_SENT, REP_RCVD, ESTABLISHED, DREQ_SENT, DREQ_RCVD, TIMEWAIT, SIDR_REQ_SENT,
  SIDR_REQ_RCVD, IDLE); messages (REQ, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP) go
  from end to end at once, in the writer's thread, and are logged
  (:attr:`FakeFabric.messages`).  The host's table of live connections by (remote
  QPN, remote CA GUID) rejects a second REQ with the same pair (REJ 10, stale
  connection; the live connection is sent a DREQ, as ``cm_match_req`` does) and a
  REP with a pair already connected to this host (REJ 10 to the passive side,
  ``cm_rep_handler``).  A connection leaves the table when it goes idle or enters
  timewait; TIMEWAIT_EXIT follows :attr:`FakeFabric.timewait_ms` later.

What is not modelled: MRA and the REP / RTU time-outs (an unanswered request or an
unsent RTU waits for ever, as the kernel's delayed MRA makes it wait in practice);
lost messages.  A REQ (or SIDR REQ, or DREQ) that nobody can receive (no host owns
the destination; the listener's backlog is full) is sent again every
:attr:`~FakeFabric.cm_retry_ms` until :attr:`~FakeFabric.cm_timeout_ms`, then fails
as the kernel's REQ_ERROR / SIDR_REQ_ERROR / DREQ_ERROR do (UNREACHABLE or
DISCONNECTED, status -ETIMEDOUT).  AF_IB ids and iWARP are not part of the fabric;
multicast joins are each host's own (RoCE joins need no SA).  INIT_QP_ATTR reads the
connection (peer QPN, both PSNs, atomics, retry counts, the path's traffic class), the
ACK_TIMEOUT and TOS options reach it, AFONLY keeps an IPv6 wildcard listener from IPv4
requests, and MIGRATE_ID moves an id with its cm_id between the fds of one host.

Everything of one fabric runs under one lock (the kernels' ``_lock``), so a command
and the events it causes on another host are one step.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Set, Tuple

from .. import abi
from .._codec import CODECS
from ..addr import AF_IB, AF_INET, AF_INET6, Address
from .fake import FakeDevice, FakeKernel, FakeNet, QpState, _Ctx, _err

if TYPE_CHECKING:  # pragma: no cover
    from ..channel import EventChannel

__all__ = ["FakeFabric", "FakeHost", "FabricKernel", "CmMessage", "wire_size"]

E = abi.CmEventType

_EVENT = CODECS["rdma_ucm_event_resp"]
_CONN = CODECS["rdma_ucm_conn_param"]
_UD = CODECS["rdma_ucm_ud_param"]
_CONNECT = CODECS["rdma_ucm_connect"]
_ACCEPT = CODECS["rdma_ucm_accept"]

#: The IB CM's private-data sizes and the rdma_cm header of IP ids: :data:`pyrdmacm.abi.CM_PRIVATE_DATA`
#: and :data:`pyrdmacm.abi.CMA_HDR_SIZE` (the one statement of them), by the names used here.
REQ_DATA, REP_DATA, REJ_DATA, SIDR_REQ_DATA, SIDR_REP_DATA = (
    abi.CM_PRIVATE_DATA[m] for m in ("REQ", "REP", "REJ", "SIDR_REQ", "SIDR_REP"))
CMA_HDR = abi.CMA_HDR_SIZE
#: ``RDMA_UDP_QKEY``: the qkey of every PS_UDP / PS_IB SIDR REP of an IP id
UDP_QKEY = 0x01234567
#: ``enum ib_cm_rej_reason`` values the fabric sends
REJ_TIMEOUT, REJ_INVALID_SERVICE_ID, REJ_STALE_CONN = 4, 8, 10
REJ_CONSUMER_DEFINED = int(abi.RejectReason.CONSUMER_DEFINED)
#: SIDR REP status (``enum ib_cm_sidr_status``)
SIDR_SUCCESS, SIDR_UNSUPPORTED, SIDR_REJECT = 0, 1, 2
#: ``enum ib_event_type`` values NOTIFY takes
IB_EVENT_PATH_MIG, IB_EVENT_COMM_EST = 6, 4
#: ``net.rdma_ucm.max_backlog``
MAX_BACKLOG = 1024


def wire_size(message: str, family: int = AF_INET) -> int:
    """How many bytes of private data an event of ``message`` carries (and the most the
    sender may give): ``"REQ"``, ``"REP"``, ``"REJ"``, ``"SIDR_REQ"``, ``"SIDR_REP"``; the
    REQs of IP ids lose the 36 bytes of the rdma_cm header (:func:`pyrdmacm.abi.cm_private_data_limit`)."""
    return abi.cm_private_data_limit(message, family)


class CmMessage(NamedTuple):
    """One IB CM message the fabric carried: ``kind`` (REQ, REP, RTU, REJ, DREQ, DREP,
    SIDR_REQ, SIDR_REP), the sending and receiving host (their first address; ``dst`` is
    None for a message no host received) and what matters of its fields."""

    kind: str
    src: str
    dst: Optional[str]
    info: Dict[str, Any]


class _End:
    """One cm_id of the IB CM: the connection state of one id (cm.c's ``cm_id_private``)."""

    __slots__ = ("kernel", "handle", "ud", "cm", "peer", "qp_num", "remote_qpn", "remote_guid", "key",
                 "listener", "req", "timer", "remote_psn", "rr", "idepth", "retry", "rnr", "tc")

    def __init__(self, kernel: "FabricKernel", handle: int, ud: bool) -> None:
        self.kernel = kernel
        self.handle = handle
        self.ud = ud
        self.cm = "IDLE"
        self.peer: Optional[_End] = None
        self.qp_num = 0
        self.remote_qpn = 0
        self.remote_guid = 0
        #: this end's entry in its host's table of live connections
        self.key: Optional[Tuple[int, int]] = None
        #: a request's end: the handle of the listener whose CONNECT_REQUEST made it
        self.listener: Optional[int] = None
        #: an active end: what its REQ (or SIDR REQ) carries
        self.req: Optional[_Request] = None
        #: the retransmission / time-out timer of the message this end waits an answer for
        self.timer: Optional[threading.Timer] = None
        #: what INIT_QP_ATTR reads of the connection (``cm_id_priv``): the peer's starting PSN,
        #: this end's responder resources and initiator depth, retry and RNR retry counts, and
        #: the traffic class of its path
        self.remote_psn = 0
        self.rr = self.idepth = self.retry = self.rnr = self.tc = 0

    @property
    def host(self) -> "FakeHost":
        return self.kernel.host

    @property
    def alive(self) -> bool:
        """The id still exists (not destroyed, its fd not closed)."""
        k = self.kernel
        return not k.closed and k._ends.get(self.handle) is self

    def __repr__(self) -> str:
        return "<_End %s handle %d %s>" % (self.host.name, self.handle, self.cm)


@dataclass
class _Request:
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


class FabricKernel(FakeKernel):
    """A :class:`FakeKernel` on one host of a :class:`FakeFabric`: the single-host commands
    as before, and the connection-management commands routed over the fabric."""

    def __init__(self, host: "FakeHost") -> None:
        super().__init__(host.net)
        self.host = host
        self.fabric = host.fabric
        self._lock = host.fabric._lock  # one lock for the whole fabric: a command and its effects are one step
        #: the cm_id of each id that has one, by handle
        self._ends: Dict[int, _End] = {}
        #: listener handle -> backlog (LISTEN's, clamped as ucma_listen does)
        self._backlog: Dict[int, int] = {}
        #: request handle -> listener handle, while the request's CONNECT_REQUEST is unread
        self._unread: Dict[int, int] = {}
        #: the ids a user bound (their ports are taken in the host's port table)
        self._bound: Set[int] = set()

    def reopen(self) -> "FabricKernel":
        """Another fd on the same host."""
        return self.host()

    # -- what tests may ask
    @property
    def cm_states(self) -> Dict[int, str]:
        """The IB CM state of each id that has a cm_id, by handle (REQ_SENT, ESTABLISHED ...)."""
        with self._lock:
            return {h: e.cm for h, e in self._ends.items()}

    def __repr__(self) -> str:
        return "<FabricKernel on %s%s>" % (self.host.name, " closed" if self.closed else "")

    # -- events
    def _post(self, ctx: _Ctx, event: int, status: int = 0, param: bytes = b"", ece: Tuple[int, int] = (0, 0),
              uid: Optional[int] = None, owner: Optional[int] = None) -> None:
        """Queue an event as ``ucma_event_handler`` does: for uid 0 (a request not accepted
        yet), nothing -- except a CONNECT_REQUEST, queued under the listener's uid (``uid``) as
        the listener's event (``owner``)."""
        if self.closed:
            return
        if uid is None:
            uid = ctx.uid
            if not uid:
                return
        raw = _EVENT.pack_dict({"uid": uid, "id": ctx.handle, "event": int(event), "status": status & 0xFFFFFFFF,
                                "param": param, "ece.vendor_id": ece[0], "ece.attr_mod": ece[1]})
        self._push(ctx.handle, raw, owner)

    def _cma_event(self, end: _End, event: int, status: int = 0, param: bytes = b"",
                   ece: Tuple[int, int] = (0, 0)) -> None:
        """An IB CM event reaches the id of ``end`` (``cma_ib_handler``, ``cma_sidr_rep_handler``):
        only in state CONNECT (DISCONNECT for TIMEWAIT_EXIT); DISCONNECTED moves it to
        DISCONNECT, once."""
        if not end.alive:
            return
        ctx = self._ctx[end.handle]
        if event == E.TIMEWAIT_EXIT:
            if ctx.state != "DISCONNECT":
                return
        elif ctx.state != "CONNECT":
            return
        if event == E.DISCONNECTED:
            ctx.state = "DISCONNECT"
        self._post(ctx, event, status, param, ece)

    # -- commands the fabric adds or changes
    def _bind(self, ctx: _Ctx, a: Address) -> None:
        if ctx.state == "IDLE" and a.port and a.family != AF_IB:
            self.host._check_port(ctx.ps, a)
        super()._bind(ctx, a)
        src = ctx.src
        assert src is not None
        if not a.port and src.family != AF_IB:
            port = self.host._ephemeral(ctx.ps)
            ctx.src = Address(src.ip, port, src.scope_id, src.flowinfo, src.family)
        self._bound.add(ctx.handle)

    def _cmd_listen(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_listen", body)
        ctx = self._get(f["id"])
        if ctx.state not in ("IDLE", "ADDR_BOUND"):
            raise _err(errno.EINVAL)
        if ctx.state == "IDLE":  # rdma_listen binds an unbound id to the IPv4 any address
            self._bind(ctx, Address(ipaddress.IPv4Address(0), 0))
        backlog = f["backlog"]
        if backlog >= 0x80000000:
            backlog -= 0x100000000
        self._backlog[ctx.handle] = MAX_BACKLOG if backlog <= 0 or backlog > MAX_BACKLOG else backlog
        ctx.state = "LISTEN"

    def _cmd_get_event(self, body: bytes, size_out: int) -> None:
        handle = self._events[0][0] if self._events else None
        super()._cmd_get_event(body, size_out)
        if handle is not None:
            # ucma_get_event gives the listener its backlog slot back when the request is read
            self._unread.pop(handle, None)

    def _conn_body(self, codec: Any, body: bytes) -> Dict[str, Any]:
        """CONNECT / ACCEPT: at least up to ``reserved`` (EINVAL), the ECE when given."""
        if len(body) < codec.offset("ece.vendor_id"):
            raise _err(errno.EINVAL)
        out: Dict[str, Any] = codec.unpack_dict(body[: codec.size].ljust(codec.size, b"\0"))
        return out

    def _cmd_connect(self, body: bytes, size_out: int) -> None:
        f = self._conn_body(_CONNECT, body)
        if not f["conn_param.valid"]:
            raise _err(errno.EINVAL)
        ctx = self._get(f["id"])
        if ctx.dev is None or ctx.state != "ROUTE_RESOLVED":
            raise _err(errno.EINVAL)
        assert ctx.src is not None and ctx.dst is not None
        n = f["conn_param.private_data_len"]
        ud = ctx.qp_type == abi.QpType.UD
        if n > wire_size("SIDR_REQ" if ud else "REQ", ctx.src.family):
            raise _err(errno.EINVAL)  # the state stays ROUTE_RESOLVED: CONNECT may be written again
        end = _End(self, ctx.handle, ud)
        end.qp_num = f["conn_param.qp_num"] & 0xFFFFFF
        end.req = _Request(
            ps=ctx.ps, qp_type=ctx.qp_type, src=ctx.src, dst=ctx.dst, qp_num=end.qp_num,
            private_data=f["conn_param.private_data"][:n], srq=1 if f["conn_param.srq"] else 0,
            responder_resources=f["conn_param.responder_resources"],
            initiator_depth=f["conn_param.initiator_depth"], flow_control=f["conn_param.flow_control"],
            retry_count=min(7, f["conn_param.retry_count"]), rnr_retry_count=min(7, f["conn_param.rnr_retry_count"]),
            ece=(f["ece.vendor_id"] & 0xFFFFFF, f["ece.attr_mod"]) if len(body) >= _CONNECT.size else (0, 0),
            psn=ctx.psn, traffic_class=ctx.route_tc,
        )
        req = end.req
        end.rr, end.idepth, end.retry, end.rnr = (req.responder_resources, req.initiator_depth, req.retry_count,
                                                  req.rnr_retry_count)
        end.tc = req.traffic_class
        self._ends[ctx.handle] = end
        ctx.state = "CONNECT"
        self.fabric._send_req(end)

    def _cmd_accept(self, body: bytes, size_out: int) -> None:
        f = self._conn_body(_ACCEPT, body)
        ctx = self._get(f["id"])
        if ctx.dev is None:  # ucma_get_ctx_dev
            raise _err(errno.EINVAL)
        if ctx.state != "CONNECT":  # rdma_accept
            raise _err(errno.EINVAL)
        end = self._ends.get(ctx.handle)
        if end is None:
            raise _err(errno.EINVAL)
        fab = self.fabric
        if not f["conn_param.valid"]:
            if end.ud:  # rdma_accept(id, NULL) on a UD id: a SIDR REP without data, qp_num never set
                fab._accept_ud(end, qp_num=end.qp_num, private_data=b"")
            else:  # rdma_accept(id, NULL): cma_rep_recv, the RTU
                fab._send_rtu(end)
            return
        n = f["conn_param.private_data_len"]
        pd = f["conn_param.private_data"][:n]
        qp_num = f["conn_param.qp_num"] & 0xFFFFFF
        # ucma_accept gives the id the uid on success only, under the handler lock: the
        # events the accept causes for the id itself come after it (uid 0 stays 0: dropped)
        old, ctx.uid = ctx.uid, f["uid"]
        try:
            if end.ud:
                fab._accept_ud(end, qp_num=qp_num, private_data=pd)
            else:
                ece = (f["ece.vendor_id"] & 0xFFFFFF, f["ece.attr_mod"]) if len(body) >= _ACCEPT.size else (0, 0)
                fab._send_rep(end, qp_num=qp_num, private_data=pd, srq=1 if f["conn_param.srq"] else 0,
                              responder_resources=f["conn_param.responder_resources"],
                              initiator_depth=f["conn_param.initiator_depth"],
                              flow_control=f["conn_param.flow_control"],
                              rnr_retry_count=min(7, f["conn_param.rnr_retry_count"]), ece=ece)
        except BaseException:
            ctx.uid = old
            raise

    def _cmd_reject(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_reject", body)
        reason = f["reason"] or REJ_CONSUMER_DEFINED
        if reason not in (REJ_CONSUMER_DEFINED, int(abi.RejectReason.VENDOR_OPTION_NOT_SUPPORTED)):
            raise _err(errno.EINVAL)
        ctx = self._get(f["id"])
        if ctx.dev is None:
            raise _err(errno.EINVAL)
        end = self._ends.get(ctx.handle)
        if end is None:  # rdma_reject: no cm_id
            raise _err(errno.EINVAL)
        pd = f["private_data"][: f["private_data_len"]]
        if end.ud:
            if len(pd) > SIDR_REP_DATA or end.cm != "SIDR_REQ_RCVD":
                raise _err(errno.EINVAL)
            self.fabric._send_sidr_rep(end, SIDR_REJECT, private_data=pd)
        else:
            if len(pd) > REJ_DATA:
                raise _err(errno.EINVAL)
            if not self.fabric._send_rej(end, reason, pd):
                raise _err(errno.EINVAL)

    def _cmd_notify(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_notify", body)
        ctx = self._get(f["id"])
        if ctx.dev is None:
            raise _err(errno.EINVAL)
        end = self._ends.get(ctx.handle)
        if end is None:  # rdma_notify: no cm_id
            raise _err(errno.EINVAL)
        if f["event"] == IB_EVENT_COMM_EST:  # cm_establish
            if end.cm == "ESTABLISHED":
                raise _err(errno.EISCONN)
            if end.cm != "REP_SENT":
                raise _err(errno.EINVAL)
            end.cm = "ESTABLISHED"
            self._cma_event(end, E.ESTABLISHED)  # IB_CM_USER_ESTABLISHED
        elif f["event"] == IB_EVENT_PATH_MIG:  # cm_migrate
            if end.cm != "ESTABLISHED":
                raise _err(errno.EINVAL)
        else:
            raise _err(errno.EINVAL)

    def _cmd_disconnect(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_disconnect", body)
        ctx = self._get(f["id"])
        if ctx.dev is None:
            raise _err(errno.EINVAL)
        end = self._ends.get(ctx.handle)
        if end is None:  # rdma_disconnect: no cm_id (never connected) -> EINVAL
            raise _err(errno.EINVAL)
        # a DREQ if established, else the DREP if a DREQ came, else nothing -- and 0 all the same
        if end.cm == "ESTABLISHED":
            self.fabric._send_dreq(end)
        elif end.cm == "DREQ_RCVD":
            self.fabric._send_drep(end)

    def _cmd_destroy_id(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_destroy_id", body)
        ctx = self._ctx.get(f["id"])
        if size_out >= 4 and ctx is not None:  # the base refuses nothing past these two checks
            self._teardown(ctx)
        super()._cmd_destroy_id(body, size_out)
        self._forget(f["id"])

    def close(self) -> None:
        with self._lock:
            if not self.closed:
                for ctx in list(self._ctx.values()):  # ucma_close destroys every id of the file
                    if ctx.handle in self._ctx:
                        self._teardown(ctx)
                        self._forget(ctx.handle)
            super().close()
            self.host._kernels.discard(self)

    # -- MIGRATE_ID and INIT_QP_ATTR past the single host
    def _machine(self) -> object:
        return self.host  # the fds of one host; another host's fd cannot be named here

    def _adopt(self, old: FakeKernel, handles: List[int]) -> None:
        """The cm_ids (and listener state, port bindings) of the migrated ids come along."""
        assert isinstance(old, FabricKernel)
        for h in handles:
            end = old._ends.pop(h, None)
            if end is not None:
                end.kernel = self
                self._ends[h] = end
            if h in old._backlog:
                self._backlog[h] = old._backlog.pop(h)
            if h in old._unread:
                self._unread[h] = old._unread.pop(h)
            if h in old._bound:
                old._bound.discard(h)
                self._bound.add(h)

    def _cm_qp_attr(self, ctx: _Ctx, state: QpState) -> Optional[Dict[str, Any]]:
        end = self._ends.get(ctx.handle)
        if end is None:
            return None  # no cm_id yet: cma_ib_init_qp_attr
        return self._connection_qp_attr(ctx, state, cm_state=end.cm, remote_qpn=end.remote_qpn,
                                        remote_psn=end.remote_psn, responder_resources=end.rr,
                                        initiator_depth=end.idepth, retry_count=end.retry, rnr_retry_count=end.rnr,
                                        traffic_class=end.tc)

    # -- destruction
    def _forget(self, handle: int) -> None:
        self._ends.pop(handle, None)
        self._backlog.pop(handle, None)
        self._unread.pop(handle, None)
        self._bound.discard(handle)

    def _teardown(self, ctx: _Ctx) -> None:
        """What destroying the id sends (``ucma_destroy_private_ctx``, ``cm_destroy_id``).  The
        id is gone first: nothing the peer answers reaches it."""
        if ctx.state == "LISTEN":
            # requests whose CONNECT_REQUEST was not read die with the listener (REJ 28)
            for child in [c for c, lst in self._unread.items() if lst == ctx.handle]:
                cctx = self._ctx.get(child)
                if cctx is not None:
                    self._teardown(cctx)
                    self._drop(child)
        self._backlog.pop(ctx.handle, None)
        self._bound.discard(ctx.handle)
        end = self._ends.pop(ctx.handle, None)
        if end is not None:
            self.fabric._destroy_end(end)

    def _drop(self, handle: int) -> None:
        """The kernel destroys an id of this file by itself: its queued events go too."""
        self._ctx.pop(handle, None)
        self._discard_events(handle)
        self._forget(handle)

    # -- the passive side of a request
    def _listeners(self, ps: int, port: int) -> List[_Ctx]:
        return [c for c in self._ctx.values() if c.state == "LISTEN" and c.ps == ps and c.src is not None
                and c.src.port == port]

    def _unread_requests(self, listener: int) -> int:
        return sum(1 for lst in self._unread.values() if lst == listener)

    def _new_request(self, lst: _Ctx, req: _Request, dev: FakeDevice, ud: bool) -> Tuple[_Ctx, _End]:
        """``cma_ib_new_conn_id`` / ``cma_ib_new_udp_id``: the request's id, in state CONNECT,
        with uid 0, its addresses as the REQ's cma header gives them."""
        ctx = self._new_ctx(0, lst.ps, abi.QpType.UD if ud else req.qp_type)
        handle = ctx.handle
        ctx.state, ctx.dev = "CONNECT", dev
        ctx.src = Address(req.dst.ip, req.dst.port, req.dst.scope_id, 0, req.dst.family)
        ctx.dst = Address(req.src.ip, req.src.port, req.src.scope_id, 0, req.src.family)
        end = self._ends[handle] = _End(self, handle, ud)
        end.listener = lst.handle
        return ctx, end


class FakeHost:
    """One machine of a :class:`FakeFabric` (made by :meth:`FakeFabric.host`).  Call it for a
    new transport of this host: ``EventChannel(host())`` (as many as wanted; they share the
    host's network, ports and IB CM)."""

    def __init__(self, fabric: "FakeFabric", addresses: Tuple[str, ...], device: FakeDevice, net: FakeNet) -> None:
        self.fabric = fabric
        #: the host's addresses, all on :attr:`device`
        self.addresses = addresses
        self.device = device
        #: what its kernels know of the network (a test may change it: ``net.peers``, ``net.no_route``)
        self.net = net
        self._kernels: Set[FabricKernel] = set()
        #: (remote QPN, remote CA GUID) -> the end of the live connection (cm.c's remote_qp_table)
        self._remote_qpns: Dict[Tuple[int, int], _End] = {}
        self._next_port: Dict[int, int] = {}

    def __repr__(self) -> str:
        return "<FakeHost %s guid %#x>" % (" ".join(self.addresses), self.guid)

    @property
    def name(self) -> str:
        """The host's first address."""
        return self.addresses[0]

    @property
    def guid(self) -> int:
        """The CA GUID the host's IB CM puts in its messages (its device's node GUID)."""
        return self.device.node_guid

    def gid(self, address: Optional[str] = None) -> ipaddress.IPv6Address:
        """The GID of one of the host's addresses (the first by default) as the fake derives it."""
        return self.net.gid_of(address or self.name, self.device)

    def __call__(self) -> FabricKernel:
        """A new transport (a ucma file) on this host."""
        with self.fabric._lock:
            k = FabricKernel(self)
            self._kernels.add(k)
        return k

    kernel = __call__

    def channel(self) -> "EventChannel":
        """``EventChannel(host())``."""
        from ..channel import EventChannel

        return EventChannel(self())

    @property
    def kernels(self) -> List[FabricKernel]:
        """The host's open transports."""
        return [k for k in self._kernels if not k.closed]

    # -- the host's port table (cma_check_port, cma_alloc_any_port)
    def _bound(self, ps: int) -> List[Address]:
        out = []
        for k in self.kernels:
            for h in k._bound:
                c = k._ctx.get(h)
                if c is not None and c.ps == ps and c.src is not None and c.state != "IDLE":
                    out.append(c.src)
        return out

    def _check_port(self, ps: int, a: Address) -> None:
        for other in self._bound(ps):
            if other.port != a.port:
                continue
            if other.is_any or a.is_any:
                raise _err(errno.EADDRNOTAVAIL)
            if other.ip == a.ip:
                raise _err(errno.EADDRINUSE)

    def _ephemeral(self, ps: int) -> int:
        used = {a.port for a in self._bound(ps)}
        port = self._next_port.get(ps, 40000)
        while port in used:
            port += 1
        self._next_port[ps] = port + 1
        return port


class FakeFabric:
    """Hosts joined by a fabric: ``a = fabric.host("10.9.0.1")`` and ``b = fabric.host("10.9.0.2")``
    resolve each other and connect through :class:`FabricKernel` transports
    (``EventChannel(a())``).

    ``timewait_ms``: the time from DREQ/DREP to TIMEWAIT_EXIT (the kernel's is about 2 s
    on rxe); ``cm_timeout_ms``: how long a REQ, SIDR REQ or DREQ that nobody answers is
    sent again before it fails with -ETIMEDOUT (the kernel's: about a minute);
    ``cm_retry_ms``: how often it is sent again meanwhile; ``dreq_latency_ms``: how long a
    DREQ takes to reach the peer (0: at once), so that two DREQs sent at about the same
    moment cross on the wire, as they do between real hosts.
    """

    def __init__(self, *, timewait_ms: float = 50, cm_timeout_ms: float = 1000, cm_retry_ms: float = 20,
                 dreq_latency_ms: float = 0) -> None:
        self.timewait_ms = timewait_ms
        self.cm_timeout_ms = cm_timeout_ms
        self.cm_retry_ms = cm_retry_ms
        self.dreq_latency_ms = dreq_latency_ms
        self._lock = threading.RLock()
        self._hosts: List[FakeHost] = []
        self._by_ip: Dict[str, FakeHost] = {}
        self._timers: List[threading.Timer] = []
        #: every IB CM message the fabric carried, in order
        self.messages: List[CmMessage] = []
        self.closed = False

    # -- hosts
    def host(self, address: str, *more: str, device: Optional[FakeDevice] = None) -> FakeHost:
        """A new host with these addresses (IPv4 or IPv6, all on one device: ``device``, or a
        :class:`FakeDevice` with a node GUID of its own).  Every host resolves every other
        host's addresses; the first address of each family is the host's default source."""
        addrs = tuple(str(ipaddress.ip_address(a)) for a in (address,) + more)
        with self._lock:
            for a in addrs:
                if a in self._by_ip:
                    raise ValueError("address %s is already %s's" % (a, self._by_ip[a].name))
            n = len(self._hosts) + 1
            dev = device or FakeDevice(name="fake0", index=1, node_guid=0x0002C90300000000 + (n << 8))
            default: Dict[int, str] = {}
            for a in addrs:
                default.setdefault(ipaddress.ip_address(a).version, a)
            net = FakeNet(local={a: dev for a in addrs}, peers=set(self._by_ip), no_route=set(), default_src=default)
            h = FakeHost(self, addrs, dev, net)
            for other in self._hosts:
                other.net.peers.update(addrs)
            self._hosts.append(h)
            for a in addrs:
                self._by_ip[a] = h
        return h

    @property
    def hosts(self) -> List[FakeHost]:
        return list(self._hosts)

    def host_of(self, address: Any) -> Optional[FakeHost]:
        """The host that owns ``address``, or None."""
        try:
            return self._by_ip.get(str(ipaddress.ip_address(address)))
        except ValueError:
            return None

    def close(self) -> None:
        """Close every transport of every host and stop the timers."""
        with self._lock:
            self.closed = True
            for t in self._timers:
                t.cancel()
            self._timers.clear()
            for h in self._hosts:
                for k in list(h._kernels):
                    k.close()

    def __enter__(self) -> "FakeFabric":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- plumbing
    def _later(self, ms: float, fn: Callable[[], None]) -> threading.Timer:
        def run() -> None:
            with self._lock:
                if t in self._timers:
                    self._timers.remove(t)
                if not self.closed:
                    fn()

        t = threading.Timer(ms / 1000.0, run)
        t.daemon = True
        self._timers.append(t)
        t.start()
        return t

    def _log(self, kind: str, src: "FakeHost", dst: "Optional[FakeHost]", **info: Any) -> None:
        self.messages.append(CmMessage(kind, src.name, dst.name if dst is not None else None, info))

    @staticmethod
    def _cancel(end: _End) -> None:
        if end.timer is not None:
            end.timer.cancel()
            end.timer = None

    def _insert_remote(self, end: _End, qpn: int, guid: int) -> Optional[_End]:
        """``cm_insert_remote_qpn``: None if inserted, else the end already holding the pair."""
        key = (qpn, guid)
        table = end.host._remote_qpns
        held = table.get(key)
        if held is not None and held is not end:
            return held
        table[key] = end
        end.key = key
        return None

    @staticmethod
    def _remove_remote(end: _End) -> None:
        if end.key is not None:
            table = end.host._remote_qpns
            if table.get(end.key) is end:
                del table[end.key]
            end.key = None

    def _reset_to_idle(self, end: _End) -> None:
        self._cancel(end)
        self._remove_remote(end)
        end.cm = "IDLE"

    def _enter_timewait(self, end: _End) -> None:
        """``cm_enter_timewait``: out of the live table now; TIMEWAIT_EXIT after timewait_ms."""
        self._cancel(end)
        self._remove_remote(end)
        end.cm = "TIMEWAIT"

        def exit_timewait() -> None:
            if end.cm == "TIMEWAIT":
                end.cm = "IDLE"
                end.kernel._cma_event(end, E.TIMEWAIT_EXIT)

        self._later(self.timewait_ms, exit_timewait)

    def _retry_req(self, end: _End) -> None:
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

    # -- REQ (cm_req_handler, cm_match_req, cma_ib_req_handler)
    def _send_req(self, end: _End) -> None:
        req = end.req
        assert req is not None
        end.cm = "SIDR_REQ_SENT" if end.ud else "REQ_SENT"
        kind = "SIDR_REQ" if end.ud else "REQ"
        recv = self.host_of(req.dst.ip)
        self._log(kind, end.host, recv, qp_num=req.qp_num, port=req.dst.port, attempt=req.attempts)
        if recv is None:  # nobody owns the address: nobody answers
            self._retry_req(end)
        elif end.ud:
            self._deliver_sidr_req(end, recv)
        else:
            self._deliver_req(end, recv)

    def _resend_req(self, end: _End) -> None:
        if end.alive and end.cm in ("REQ_SENT", "SIDR_REQ_SENT") and end.peer is None:
            self._send_req(end)

    def _req_error(self, end: _End) -> None:
        """REQ_ERROR / SIDR_REQ_ERROR: UNREACHABLE -ETIMEDOUT."""
        end.timer = None
        if end.cm not in ("REQ_SENT", "SIDR_REQ_SENT") or end.peer is not None:
            return
        self._reset_to_idle(end)
        end.kernel._cma_event(end, E.UNREACHABLE, -errno.ETIMEDOUT, self._ud(b"", 0) if end.ud else b"")

    @staticmethod
    def _match_listener(recv: FakeHost, req: _Request, ud: bool) -> Tuple[Optional[Tuple[FabricKernel, _Ctx]], bool]:
        """The listener a request reaches, ``(kernel, listener)`` or None, and whether any
        listener holds its service id (port space and port) at all -- no: REJ 8, SIDR
        UNSUPPORTED; yes but none matches: the rdma_cm refuses (REJ 28, SIDR REJECT)."""
        any_service = False
        for k in recv.kernels:
            for lst in k._listeners(req.ps, req.dst.port):
                any_service = True
                src = lst.src
                assert src is not None
                if src.is_any:
                    # a wildcard listener takes its own family; an IPv6 one IPv4 too, unless AFONLY
                    if src.family != req.dst.family and (src.family != AF_INET6 or lst.afonly):
                        continue
                elif src.ip != req.dst.ip:
                    continue
                if (lst.qp_type == abi.QpType.UD) != ud:  # cma_ib_check_req_qp_type
                    continue
                return (k, lst), True
        return None, any_service

    def _deliver_req(self, end: _End, recv: FakeHost) -> None:
        req = end.req
        assert req is not None
        guid = end.host.guid
        # cm_match_req: a stale connection first, then the listener
        held = recv._remote_qpns.get((req.qp_num, guid))
        if held is not None:
            self._log("REJ", recv, end.host, reason=REJ_STALE_CONN)
            self._on_rej(end, REJ_STALE_CONN, b"")
            if held.cm == "ESTABLISHED":  # and it sends the connection it holds a DREQ
                self._send_dreq(held)
            return
        match, any_service = self._match_listener(recv, req, False)
        if match is None:
            reason = REJ_CONSUMER_DEFINED if any_service else REJ_INVALID_SERVICE_ID
            self._log("REJ", recv, end.host, reason=reason)
            self._on_rej(end, reason, b"")
            return
        k, lst = match
        if k._unread_requests(lst.handle) >= k._backlog.get(lst.handle, MAX_BACKLOG):
            # ucma_connect_event_handler: -ENOMEM; cm_destroy_id(-ENOMEM) sends no REJ: the REQ comes again
            self._log("DROP", recv, end.host, why="backlog full")
            self._retry_req(end)
            return
        ctx, child = k._new_request(lst, req, recv.net.local.get(str(req.dst.ip), recv.device), False)
        self._insert_remote(child, req.qp_num, guid)
        child.cm = "REQ_RCVD"
        child.remote_qpn, child.remote_guid = req.qp_num, guid
        # cm_req_handler: the REQ's initiator depth is the receiver's responder resources and the
        # other way round; its retry counts, PSN and path (traffic class) are the receiver's too
        child.rr, child.idepth, child.retry, child.rnr = (req.initiator_depth, req.responder_resources,
                                                          req.retry_count, req.rnr_retry_count)
        child.remote_psn, child.tc = req.psn, req.traffic_class
        child.peer, end.peer = end, child
        self._cancel(end)
        k._unread[ctx.handle] = lst.handle
        # cma_set_req_event_data, as cm_format_req_event reads the REQ: the sender's initiator
        # depth is the receiver's responder resources, and the other way round
        param = self._conn(req.qp_num, req.private_data, wire_size("REQ", req.src.family),
                           srq=req.srq, responder_resources=req.initiator_depth,
                           initiator_depth=req.responder_resources, flow_control=req.flow_control,
                           retry_count=req.retry_count, rnr_retry_count=req.rnr_retry_count)
        k._post(ctx, E.CONNECT_REQUEST, 0, param, req.ece, uid=lst.uid, owner=lst.handle)

    def _deliver_sidr_req(self, end: _End, recv: FakeHost) -> None:
        req = end.req
        assert req is not None
        match, any_service = self._match_listener(recv, req, True)
        if match is None:
            # no listener: cm_sidr_req_handler answers UNSUPPORTED; one that refuses, REJECT
            status = SIDR_REJECT if any_service else SIDR_UNSUPPORTED
            self._log("SIDR_REP", recv, end.host, status=status)
            self._on_sidr_rep(end, status, 0, b"")
            return
        k, lst = match
        if k._unread_requests(lst.handle) >= k._backlog.get(lst.handle, MAX_BACKLOG):
            # -ENOMEM from the handler: cm_destroy_id in SIDR_REQ_RCVD answers REJECT
            self._log("SIDR_REP", recv, end.host, status=SIDR_REJECT)
            self._on_sidr_rep(end, SIDR_REJECT, 0, b"")
            return
        ctx, child = k._new_request(lst, req, recv.net.local.get(str(req.dst.ip), recv.device), True)
        child.cm = "SIDR_REQ_RCVD"
        child.peer, end.peer = end, child
        self._cancel(end)
        k._unread[ctx.handle] = lst.handle
        # the ud arm carries only the private data (qp_num 0, no address handle)
        k._post(ctx, E.CONNECT_REQUEST, 0, self._ud(req.private_data, wire_size("SIDR_REQ", req.src.family)),
                uid=lst.uid, owner=lst.handle)

    # -- REP, RTU (ib_send_cm_rep, cm_rep_handler, ib_send_cm_rtu, cm_rtu_handler)
    def _send_rep(self, end: _End, *, qp_num: int, private_data: bytes, srq: int, responder_resources: int,
                  initiator_depth: int, flow_control: int, rnr_retry_count: int, ece: Tuple[int, int]) -> None:
        if len(private_data) > REP_DATA or end.cm != "REQ_RCVD":
            # ib_send_cm_rep refuses; rdma_accept's error path rejects (REJ 28), then EINVAL
            self._send_rej(end, REJ_CONSUMER_DEFINED, b"")
            raise _err(errno.EINVAL)
        end.cm = "REP_SENT"
        end.qp_num = qp_num
        end.rr, end.idepth, end.rnr = responder_resources, initiator_depth, rnr_retry_count
        peer = end.peer
        self._log("REP", end.host, peer.host if peer else None, qp_num=qp_num, private_data_len=len(private_data))
        if peer is None or not peer.alive or peer.cm != "REQ_SENT":
            return
        # cm_rep_handler: the REP's (QPN, CA GUID) against the requester's host's live connections
        if self._insert_remote(peer, qp_num, end.host.guid) is not None:
            self._log("REJ", peer.host, end.host, reason=REJ_STALE_CONN)
            self._on_rej(end, REJ_STALE_CONN, b"")
            # the requester's REQ stays unanswered: REQ_ERROR at cm_timeout_ms
            peer.peer = None
            peer.timer = self._later(self.cm_timeout_ms, lambda: self._req_error(peer))
            return
        peer.cm = "REP_RCVD"
        peer.remote_qpn, peer.remote_guid = qp_num, end.host.guid
        # cm_rep_handler: the REP's responder resources are the requester's initiator depth and
        # the other way round; its RNR retry count and starting PSN are the requester's from now
        peer.idepth, peer.rr, peer.rnr = responder_resources, initiator_depth, rnr_retry_count
        ctx = end.kernel._ctx.get(end.handle)
        peer.remote_psn = ctx.psn if ctx is not None else 0
        # cma_set_rep_event_data (no retry count), responder resources and initiator depth swapped
        param = self._conn(qp_num, private_data, REP_DATA, srq=srq, responder_resources=initiator_depth,
                           initiator_depth=responder_resources, flow_control=flow_control,
                           rnr_retry_count=rnr_retry_count)
        peer.kernel._cma_event(peer, E.CONNECT_RESPONSE, 0, param, ece)

    def _send_rtu(self, end: _End) -> None:
        """ACCEPT(valid=0): ``cma_rep_recv``; out of REP_RCVD the RTU fails, and a REJ 28 goes."""
        if end.cm != "REP_RCVD":
            self._send_rej(end, REJ_CONSUMER_DEFINED, b"")
            raise _err(errno.EINVAL)
        end.cm = "ESTABLISHED"
        peer = end.peer
        self._log("RTU", end.host, peer.host if peer else None)
        if peer is not None and peer.alive and peer.cm == "REP_SENT":
            peer.cm = "ESTABLISHED"
            peer.kernel._cma_event(peer, E.ESTABLISHED)

    # -- REJ (cm_send_rej_locked, cm_rej_handler)
    def _send_rej(self, end: _End, reason: int, private_data: bytes) -> bool:
        """A REJ from ``end`` if its state allows one (False: it does not: EINVAL)."""
        if end.cm in ("REQ_SENT", "REQ_RCVD", "REP_RCVD"):
            self._reset_to_idle(end)
        elif end.cm == "REP_SENT":
            self._enter_timewait(end)
        else:
            return False
        peer = end.peer
        self._log("REJ", end.host, peer.host if peer else None, reason=reason, private_data_len=len(private_data))
        if peer is not None and peer.alive:
            self._on_rej(peer, reason, private_data)
        return True

    def _on_rej(self, end: _End, reason: int, private_data: bytes) -> None:
        """A REJ reaches ``end``: REJECTED, status the reason, the data padded to 148 bytes
        (zeros for the rejects the kernel makes)."""
        if end.cm in ("REQ_SENT", "REQ_RCVD", "REP_SENT"):
            if reason == REJ_STALE_CONN:
                self._enter_timewait(end)
            else:
                self._reset_to_idle(end)
        elif end.cm in ("REP_RCVD", "DREQ_SENT"):
            self._enter_timewait(end)
        else:
            # an established end takes no REJ here (the lab saw no event, cm-notes.md section 10)
            return
        end.kernel._cma_event(end, E.REJECTED, reason, self._conn(0, private_data, REJ_DATA))

    # -- DREQ, DREP (cm_send_dreq_locked, cm_dreq_handler, cm_send_drep_locked, cm_drep_handler)
    def _send_dreq(self, end: _End) -> None:
        end.cm = "DREQ_SENT"
        peer = end.peer
        self._log("DREQ", end.host, peer.host if peer else None)
        # the DREQ waits for the DREP: DREQ_ERROR at cm_timeout_ms
        end.timer = self._later(self.cm_timeout_ms, lambda: self._dreq_error(end))
        if self.dreq_latency_ms:
            self._later(self.dreq_latency_ms, lambda: self._on_dreq(end, peer))
        else:
            self._on_dreq(end, peer)

    def _on_dreq(self, end: _End, peer: Optional[_End]) -> None:
        """``cm_dreq_handler``: the DREQ of ``end`` reaches ``peer``."""
        if end.cm != "DREQ_SENT":
            return  # answered or timed out meanwhile
        if peer is None or not peer.alive or peer.cm == "TIMEWAIT":
            # no live cm_id holds the connection there: that CM answers a DREP itself (cm_issue_drep)
            self._log("DREP", peer.host if peer else end.host, end.host)
            self._on_drep(end)
            return
        if peer.cm in ("REP_SENT", "ESTABLISHED", "DREQ_SENT"):
            # DREQ_SENT too: two DREQs crossed; each end now waits in DREQ_RCVD for a DREP
            self._cancel(peer)
            peer.cm = "DREQ_RCVD"
            peer.kernel._cma_event(peer, E.DISCONNECTED)
        # any other state drops it

    def _dreq_error(self, end: _End) -> None:
        end.timer = None
        if end.cm == "DREQ_SENT":
            self._enter_timewait(end)
            end.kernel._cma_event(end, E.DISCONNECTED, -errno.ETIMEDOUT)

    def _send_drep(self, end: _End) -> None:
        self._enter_timewait(end)
        peer = end.peer
        self._log("DREP", end.host, peer.host if peer else None)
        if peer is not None and peer.alive:
            self._on_drep(peer)

    def _on_drep(self, end: _End) -> None:
        if end.cm in ("DREQ_SENT", "DREQ_RCVD"):
            self._enter_timewait(end)
            end.kernel._cma_event(end, E.DISCONNECTED)

    # -- SIDR REP (cma_send_sidr_rep, cm_sidr_rep_handler, cma_sidr_rep_handler)
    def _accept_ud(self, end: _End, *, qp_num: int, private_data: bytes) -> None:
        if end.cm != "SIDR_REQ_RCVD":
            raise _err(errno.EINVAL)
        if len(private_data) > SIDR_REP_DATA:
            # ib_send_cm_sidr_rep refuses; rdma_accept's error path answers REJECT, then EINVAL
            self._send_sidr_rep(end, SIDR_REJECT)
            raise _err(errno.EINVAL)
        end.qp_num = qp_num
        self._send_sidr_rep(end, SIDR_SUCCESS, qp_num=qp_num, private_data=private_data)

    def _send_sidr_rep(self, end: _End, status: int, *, qp_num: int = 0, private_data: bytes = b"") -> None:
        end.cm = "IDLE"
        peer = end.peer
        self._log("SIDR_REP", end.host, peer.host if peer else None, status=status, qp_num=qp_num)
        if peer is not None and peer.alive:
            self._on_sidr_rep(peer, status, qp_num, private_data)

    def _on_sidr_rep(self, end: _End, status: int, qp_num: int, private_data: bytes) -> None:
        """UNREACHABLE with the SIDR status, or ESTABLISHED with the ud arm: the peer's QPN,
        the qkey, the address handle to the peer, the data padded to 136 bytes."""
        if end.cm != "SIDR_REQ_SENT":
            return
        self._reset_to_idle(end)
        k = end.kernel
        if status != SIDR_SUCCESS:
            k._cma_event(end, E.UNREACHABLE, status, self._ud(private_data, SIDR_REP_DATA))
            return
        ctx = k._ctx[end.handle]
        assert ctx.dst is not None and ctx.dev is not None
        # ib_init_ah_attr_from_path over the fake's path record: hop limit 64, flow label and class 0
        ah = {"grh.dgid": k.net.gid_of(ctx.dst.ip, ctx.dev).packed, "grh.hop_limit": 64, "is_global": 1,
              "port_num": ctx.dev.port_num}
        k._cma_event(end, E.ESTABLISHED, 0, self._ud(private_data, SIDR_REP_DATA, qp_num, UDP_QKEY, ah))

    # -- DESTROY_ID (cm_destroy_id)
    def _destroy_end(self, end: _End) -> None:
        """What the IB CM sends when the id of ``end`` (already gone) is destroyed, by state."""
        st = end.cm
        if st == "REQ_SENT":
            if end.peer is not None:
                self._send_rej(end, REJ_TIMEOUT, b"")  # the REQ is withdrawn: REJ 4
            else:
                self._reset_to_idle(end)
        elif st in ("REQ_RCVD", "REP_SENT", "REP_RCVD"):
            self._send_rej(end, REJ_CONSUMER_DEFINED, b"")
        elif st == "ESTABLISHED":
            self._send_dreq(end)
            if end.cm == "DREQ_SENT":
                self._enter_timewait(end)
        elif st == "DREQ_SENT":
            self._enter_timewait(end)
        elif st == "DREQ_RCVD":
            self._send_drep(end)
        elif st == "SIDR_REQ_RCVD":
            self._send_sidr_rep(end, SIDR_REJECT)
        else:  # SIDR_REQ_SENT (the SIDR REQ is cancelled), TIMEWAIT, IDLE
            self._cancel(end)
            self._remove_remote(end)
