"""One host of a fake fabric: its ucma files (:class:`FabricKernel`) and its machine-wide
tables (:class:`FakeHost`: the port table, the IB CM's live connections, the listeners a
request reaches).

A :class:`FabricKernel` is a :class:`~pyrdmacm.testing.FakeKernel` (every command it had
behaves as before) that also does what the kernel's rdma_cm layer does past
``resolve_route`` for user-space ids, which never have a QP (``../shared/cm-notes.md``
sections 0-5 are the reference; the kernel functions are named where they decide): the
commands CONNECT, ACCEPT (valid=1 on the passive side; valid=0, the RTU, on the active
side), REJECT, NOTIFY, DISCONNECT, DESTROY_ID and LISTEN, with their errnos, the
private-data limits of IP ids (REQ 56, REP 196, REJ 148, SIDR REQ 180, SIDR REP 136), the
new id of a CONNECT_REQUEST (uid 0 until ACCEPT gives it one; events for uid 0 are dropped
as ``ucma_event_handler`` drops them), the event filter of ``cma_ib_handler`` (state
CONNECT, or DISCONNECT for TIMEWAIT_EXIT) and the real ``rdma_ucm_event_resp`` layout with
the ``conn`` or ``ud`` arm padded to the wire size.  The messages between hosts are the
fabric's IB CM's (:mod:`pyrdmacm.testing.fabric_cm`).
"""

from __future__ import annotations

import errno
import ipaddress
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Set, Tuple

from .. import abi
from ..abi.codec import CODECS
from ..addr import AF_IB, AF_INET6, Address
from ._ibcm import REJ_CONSUMER_DEFINED, IbCmState
from ._ibcm import CmInput as In
from .fabric_cm import SIDR_REJECT, CmEnd, CmKernel, CmRequest, IbCmWire, wire_size
from .fake import FakeKernel
from .fake_ids import IdContext, command_fields, kernel_error
from .fake_net import FakeDevice, FakeNet
from .fake_file import KernelCore, Machine

if TYPE_CHECKING:  # pragma: no cover
    from ..core.event_channel import EventChannel

__all__ = ["FabricKernel", "FakeHost", "MAX_BACKLOG"]

E = abi.CmEventType
S = abi.RdmaCmState

_EVENT = CODECS["rdma_ucm_event_resp"]
_CONNECT = CODECS["rdma_ucm_connect"]
_ACCEPT = CODECS["rdma_ucm_accept"]
#: ``net.rdma_ucm.max_backlog``
MAX_BACKLOG = 1024
#: ``enum ib_event_type`` values NOTIFY takes
IB_EVENT_COMM_EST = int(abi.NotifyEvent.COMM_EST)


class FabricKernel(FakeKernel):
    """A :class:`FakeKernel` on one host of a :class:`~pyrdmacm.testing.FakeFabric`: the
    single-host commands as before, and the connection-management commands routed over the
    fabric."""

    def __init__(self, host: "FakeHost") -> None:
        super().__init__(host.net, machine=host.machine)
        self.host = host
        self.fabric = host.fabric
        self._lock = host.fabric.lock  # one lock for the whole fabric: a command and its effects are one step
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
    def cm_states(self) -> Dict[int, IbCmState]:
        """The IB CM state of each id that has an IB CM id, by handle (REQ_SENT, ESTABLISHED ...)."""
        with self._lock:
            return {h: e.state for h, e in self._cms.items()}

    def __repr__(self) -> str:
        return "<FabricKernel on %s%s>" % (self.host.name, " closed" if self.closed else "")

    # -- what the IB CM asks of the rdma_cm above it (fabric_cm.CmKernel)
    def holds(self, end: CmEnd) -> bool:
        return not self.closed and self._cms.get(end.handle) is end

    def cm_event(self, end: CmEnd, event: int, status: int = 0, param: bytes = b"",
                 ece: Tuple[int, int] = (0, 0)) -> None:
        """An IB CM event reaches the id of ``end`` (``cma_ib_handler``, ``cma_sidr_rep_handler``):
        only in state CONNECT (DISCONNECT for TIMEWAIT_EXIT); DISCONNECTED moves it to
        DISCONNECT, once."""
        if not self.holds(end):
            return
        ctx = self._ctx[end.handle]
        if event == E.TIMEWAIT_EXIT:
            if ctx.state is not S.DISCONNECT:
                return
        elif ctx.state is not S.CONNECT:
            return
        if event == E.DISCONNECTED:
            ctx.move(S.DISCONNECT)
        self._post(ctx, event, status, param, ece)

    def psn_of(self, handle: int) -> int:
        ctx = self._ctx.get(handle)
        return ctx.psn if ctx is not None else 0

    def ah_to_peer(self, handle: int) -> Dict[str, Any]:
        """``ib_init_ah_attr_from_path`` over the fake's path record: hop limit 64, flow label
        and class 0."""
        ctx = self._ctx[handle]
        assert ctx.dst is not None and ctx.dev is not None
        return {"grh.dgid": self.net.gid_of(ctx.dst.ip, ctx.dev).packed, "grh.hop_limit": 64, "is_global": 1,
                "port_num": ctx.dev.port_num}

    def take_request(self, listener: int, req: CmRequest, ud: bool, param: bytes) -> Optional[CmEnd]:
        """``cma_ib_req_handler`` / ``cma_ib_new_conn_id`` (``cma_ib_new_udp_id``), and
        ``ucma_connect_event_handler``'s backlog: the request's id, in state CONNECT, with uid
        0 and the addresses the REQ's cma header gives, its CONNECT_REQUEST queued under the
        listener's uid; None when the listener's backlog is full."""
        lst = self._ctx[listener]
        if self._unread_requests(listener) >= self._backlog.get(listener, MAX_BACKLOG):
            return None
        ctx = self._new_ctx(0, lst.ps, abi.QpType.UD if ud else req.qp_type)
        ctx.move(S.CONNECT)
        ctx.dev = self.net.local.get(str(req.dst.ip), self.host.device)
        ctx.src = Address(req.dst.ip, req.dst.port, req.dst.scope_id, 0, req.dst.family)
        ctx.dst = Address(req.src.ip, req.src.port, req.src.scope_id, 0, req.src.family)
        end = CmEnd(self, ctx.handle, ud)
        self._cms[ctx.handle] = end
        end.listener = listener
        self._unread[ctx.handle] = listener
        self._post(ctx, E.CONNECT_REQUEST, 0, param, req.ece, uid=lst.uid, owner=listener)
        return end

    # -- events
    def _post(self, ctx: IdContext, event: int, status: int = 0, param: bytes = b"", ece: Tuple[int, int] = (0, 0),
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

    # -- commands the fabric adds or changes
    def _bind(self, ctx: IdContext, a: Address) -> None:
        if ctx.state is S.IDLE and a.port and a.family != AF_IB:
            self.host.check_port(ctx.ps, a)
        super()._bind(ctx, a)
        src = ctx.src
        assert src is not None
        if not a.port and src.family != AF_IB:
            ctx.src = Address(src.ip, self.host.ephemeral(ctx.ps), src.scope_id, src.flowinfo, src.family)
        self._bound.add(ctx.handle)

    def _listen(self, ctx: IdContext, backlog: int) -> None:
        if ctx.state is S.IDLE:  # rdma_listen binds an unbound id to the IPv4 any address
            self._bind(ctx, Address(ipaddress.IPv4Address(0), 0))
        if backlog >= 0x80000000:
            backlog -= 0x100000000
        self._backlog[ctx.handle] = MAX_BACKLOG if backlog <= 0 or backlog > MAX_BACKLOG else backlog
        ctx.move(S.LISTEN)
        if ctx.dev is not None:  # on a device: an IB CM listen id (cma_ib_listen)
            end = self._cms[ctx.handle] = CmEnd(self, ctx.handle, ctx.qp_type == abi.QpType.UD)
            end.move(In.LISTEN)

    def _cmd_get_event(self, body: bytes, size_out: int) -> None:
        handle = self._events[0].handle if self._events else None
        super()._cmd_get_event(body, size_out)
        if handle is not None:
            # ucma_get_event gives the listener its backlog slot back when the request is read
            self._unread.pop(handle, None)

    def _end(self, ctx: IdContext) -> CmEnd:
        end = self._cms[ctx.handle]
        assert isinstance(end, CmEnd)
        return end

    def _cmd_connect(self, body: bytes, size_out: int) -> None:
        f, ctx = self._connect_args(body)
        assert ctx.src is not None and ctx.dst is not None
        n = f["conn_param.private_data_len"]
        ud = ctx.qp_type == abi.QpType.UD
        end = CmEnd(self, ctx.handle, ud)
        end.qp_num = f["conn_param.qp_num"] & 0xFFFFFF
        end.req = req = CmRequest(
            ps=ctx.ps, qp_type=ctx.qp_type, src=ctx.src, dst=ctx.dst, qp_num=end.qp_num,
            private_data=f["conn_param.private_data"][:n], srq=1 if f["conn_param.srq"] else 0,
            responder_resources=f["conn_param.responder_resources"],
            initiator_depth=f["conn_param.initiator_depth"], flow_control=f["conn_param.flow_control"],
            retry_count=min(7, f["conn_param.retry_count"]), rnr_retry_count=min(7, f["conn_param.rnr_retry_count"]),
            ece=(f["ece.vendor_id"] & 0xFFFFFF, f["ece.attr_mod"]) if len(body) >= _CONNECT.size else (0, 0),
            psn=ctx.psn, traffic_class=ctx.route_tc,
        )
        end.rr, end.idepth, end.retry, end.rnr = (req.responder_resources, req.initiator_depth, req.retry_count,
                                                  req.rnr_retry_count)
        end.tc = req.traffic_class
        self._cms[ctx.handle] = end
        ctx.move(S.CONNECT)
        self.fabric.send_req(end)

    def _cmd_accept(self, body: bytes, size_out: int) -> None:
        f, ctx, _cm = self._accept_args(body)
        end = self._end(ctx)
        fab = self.fabric
        if not f["conn_param.valid"]:
            if end.ud:  # rdma_accept(id, NULL) on a UD id: a SIDR REP without data, qp_num never set
                fab.accept_ud(end, qp_num=end.qp_num, private_data=b"")
            else:  # rdma_accept(id, NULL): cma_rep_recv, the RTU
                fab.send_rtu(end)
            return
        n = f["conn_param.private_data_len"]
        pd = f["conn_param.private_data"][:n]
        qp_num = f["conn_param.qp_num"] & 0xFFFFFF
        # ucma_accept gives the id the uid on success only, under the handler lock: the
        # events the accept causes for the id itself come after it (uid 0 stays 0: dropped)
        old, ctx.uid = ctx.uid, f["uid"]
        try:
            if end.ud:
                fab.accept_ud(end, qp_num=qp_num, private_data=pd)
            else:
                ece = (f["ece.vendor_id"] & 0xFFFFFF, f["ece.attr_mod"]) if len(body) >= _ACCEPT.size else (0, 0)
                fab.send_rep(end, qp_num=qp_num, private_data=pd, srq=1 if f["conn_param.srq"] else 0,
                             responder_resources=f["conn_param.responder_resources"],
                             initiator_depth=f["conn_param.initiator_depth"], flow_control=f["conn_param.flow_control"],
                             rnr_retry_count=min(7, f["conn_param.rnr_retry_count"]), ece=ece)
        except BaseException:
            ctx.uid = old
            raise

    def _cmd_reject(self, body: bytes, size_out: int) -> None:
        f, ctx, _cm = self._reject_args(body)
        end = self._end(ctx)
        pd = f["private_data"][: f["private_data_len"]]
        if end.ud:
            if len(pd) > wire_size("SIDR_REP") or not self.fabric.send_sidr_rep(end, SIDR_REJECT, private_data=pd):
                raise kernel_error(errno.EINVAL)
        elif len(pd) > wire_size("REJ") or not self.fabric.send_rej(end, f["reason"] or REJ_CONSUMER_DEFINED, pd):
            raise kernel_error(errno.EINVAL)

    def _cmd_notify(self, body: bytes, size_out: int) -> None:
        event, ctx, _cm = self._notify_args(body)
        end = self._end(ctx)
        verb = In.ESTABLISH if event == IB_EVENT_COMM_EST else In.MIGRATE
        err = end.refusal(verb)
        if err:
            raise kernel_error(err)
        end.move(verb)
        if verb is In.ESTABLISH:
            self.cm_event(end, E.ESTABLISHED)  # IB_CM_USER_ESTABLISHED

    def _cmd_disconnect(self, body: bytes, size_out: int) -> None:
        ctx, _cm = self._disconnect_args(body)
        end = self._end(ctx)
        # a DREQ if established, else the DREP if a DREQ came, else nothing -- and 0 all the same
        if not self.fabric.send_dreq(end):
            self.fabric.send_drep(end)

    def _cmd_destroy_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_destroy_id", body)
        ctx = self._ctx.get(f["id"])
        if size_out >= CODECS["rdma_ucm_destroy_id_resp"].size and ctx is not None:
            self._teardown(ctx)  # the base refuses nothing past these two checks
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
            self.host.forget(self)

    # -- MIGRATE_ID past the single host
    def _adopt(self, old: KernelCore, handles: List[int]) -> None:
        """The IB CM ids (and listener state, port bindings) of the migrated ids come along."""
        assert isinstance(old, FabricKernel)
        for h in handles:
            end = self._cms.get(h)
            if isinstance(end, CmEnd):
                end.kernel = self
            if h in old._backlog:
                self._backlog[h] = old._backlog.pop(h)
            if h in old._unread:
                self._unread[h] = old._unread.pop(h)
            if h in old._bound:
                old._bound.discard(h)
                self._bound.add(h)

    # -- destruction
    def _forget(self, handle: int) -> None:
        self._cms.pop(handle, None)
        self._backlog.pop(handle, None)
        self._unread.pop(handle, None)
        self._bound.discard(handle)

    def _teardown(self, ctx: IdContext) -> None:
        """What destroying the id sends (``ucma_destroy_private_ctx``, ``cm_destroy_id``).  The
        id is gone first: nothing the peer answers reaches it."""
        if ctx.state is S.LISTEN:
            # requests whose CONNECT_REQUEST was not read die with the listener (REJ 28)
            for child in [c for c, lst in self._unread.items() if lst == ctx.handle]:
                cctx = self._ctx.get(child)
                if cctx is not None:
                    self._teardown(cctx)
                    self._drop(child)
        self._backlog.pop(ctx.handle, None)
        self._bound.discard(ctx.handle)
        end = self._cms.pop(ctx.handle, None)
        if isinstance(end, CmEnd):
            self.fabric.destroy_end(end)

    def _drop(self, handle: int) -> None:
        """The kernel destroys an id of this file by itself: its queued events go too."""
        self._drop_ctx(handle)
        self._discard_events(handle)
        self._forget(handle)

    # -- the passive side of a request
    def listeners(self, ps: int, port: int) -> List[IdContext]:
        """This fd's listeners on ``port`` of port space ``ps``."""
        return [c for c in self._ctx.values() if c.state is S.LISTEN and c.ps == ps and c.src is not None
                and c.src.port == port]

    def _unread_requests(self, listener: int) -> int:
        return sum(1 for lst in self._unread.values() if lst == listener)

    def bound_addresses(self, ps: int) -> List[Address]:
        """The addresses this fd's ids of port space ``ps`` are bound to (the host's port table)."""
        out = []
        for h in self._bound:
            c = self._ctx.get(h)
            if c is not None and c.ps == ps and c.src is not None and c.state is not S.IDLE:
                out.append(c.src)
        return out


class FakeHost:
    """One machine of a :class:`~pyrdmacm.testing.FakeFabric` (made by its ``host()``).  Call
    it for a new transport of this host: ``EventChannel(host())`` (as many as wanted; they
    share the host's network, ports and IB CM)."""

    def __init__(self, fabric: IbCmWire, addresses: Tuple[str, ...], device: FakeDevice, net: FakeNet) -> None:
        self.fabric = fabric
        #: the host's addresses, all on :attr:`device`
        self.addresses = addresses
        self.device = device
        #: what its kernels know of the network (a test may change it: ``net.peers``, ``net.no_route``)
        self.net = net
        #: the host's rdma_cm tables (which fd holds each id)
        self.machine = Machine()
        self._kernels: Set[FabricKernel] = set()
        #: (remote QPN, remote CA GUID) -> the end of the live connection (cm.c's remote_qp_table)
        self.remote_qpns: Dict[Tuple[int, int], CmEnd] = {}
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
        with self.fabric.lock:
            k = FabricKernel(self)
            self._kernels.add(k)
        return k

    kernel = __call__

    def channel(self) -> "EventChannel":
        """``EventChannel(host())``."""
        from ..core.event_channel import EventChannel

        return EventChannel(self())

    @property
    def kernels(self) -> List[FabricKernel]:
        """The host's open transports."""
        return [k for k in self._kernels if not k.closed]

    def forget(self, kernel: FabricKernel) -> None:
        """``kernel`` (an fd of this host) is closed."""
        self._kernels.discard(kernel)

    def close(self) -> None:
        """Close every transport of the host."""
        for k in list(self._kernels):
            k.close()

    # -- the listener a request reaches (cm_match_req by service id, then cma's listener match)
    def listener_for(self, req: CmRequest, ud: bool) -> Tuple[Optional[Tuple[CmKernel, int]], bool]:
        """The listener a request reaches, ``(kernel, listener handle)`` or None, and whether
        any listener holds its service id (port space and port) at all -- no: REJ 8, SIDR
        UNSUPPORTED; yes but none matches: the rdma_cm refuses (REJ 28, SIDR REJECT)."""
        any_service = False
        for k in self.kernels:
            for lst in k.listeners(req.ps, req.dst.port):
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
                return (k, lst.handle), True
        return None, any_service

    # -- the host's port table (cma_check_port, cma_alloc_any_port)
    def _bound(self, ps: int) -> List[Address]:
        return [a for k in self.kernels for a in k.bound_addresses(ps)]

    def check_port(self, ps: int, a: Address) -> None:
        """``cma_check_port``: a wildcard overlapping another binding of the port is
        EADDRNOTAVAIL, the same address EADDRINUSE."""
        for other in self._bound(ps):
            if other.port != a.port:
                continue
            if other.is_any or a.is_any:
                raise kernel_error(errno.EADDRNOTAVAIL)
            if other.ip == a.ip:
                raise kernel_error(errno.EADDRINUSE)

    def ephemeral(self, ps: int) -> int:
        """``cma_alloc_any_port``: the next free port of ``ps`` from 40000 up."""
        used = {a.port for a in self._bound(ps)}
        port = self._next_port.get(ps, 40000)
        while port in used:
            port += 1
        self._next_port[ps] = port + 1
        return port
