"""The commands of an id's life on one host of a fake fabric: :class:`FabricIdCommands`, the
id part of a :class:`~pyrdmacm.testing.FabricKernel`, which does what the kernel's rdma_cm
layer does past ``resolve_route`` for user-space ids, which never have a QP
(``../shared/cm-notes.md`` sections 0-5 are the reference; the kernel functions are named
where they decide).

The commands CONNECT, ACCEPT (valid=1 on the passive side; valid=0, the RTU, on the active
side), REJECT, NOTIFY, DISCONNECT, DESTROY_ID and LISTEN, with their errnos, the
private-data limits of IP ids (REQ 56, REP 196, REJ 148, SIDR REQ 180, SIDR REP 136), the
new id of a CONNECT_REQUEST (uid 0 until ACCEPT gives it one; events for uid 0 are dropped
as ``ucma_event_handler`` drops them), the event filter of ``cma_ib_handler`` (state
CONNECT, or DISCONNECT for TIMEWAIT_EXIT) and the real ``rdma_ucm_event_resp`` layout with
the ``conn`` or ``ud`` arm padded to the wire size.  BIND and LISTEN take their ports in the
host's port table.  The messages between hosts are the fabric's IB CM's
(:mod:`pyrdmacm.testing.fabric_cm`), which talks to the part as cm.c talks to cma.c: it is
the :class:`~pyrdmacm.testing.fabric_cm.CmKernel` of the ids of its file.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import Any, Dict, List, Optional, Protocol, Set, Tuple

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..addr import AF_IB, Address
from ._ibcm import REJ_CONSUMER_DEFINED
from ._ibcm import CmInput as In
from .fabric_cm import SIDR_REJECT, CmEnd, CmHost, CmRequest, IbCmWire, wire_size
from .fake_commands import IdCommands
from .fake_file import UcmaFile
from .fake_ids import IdContext, command_fields, kernel_error
from .fake_net import FakeDevice, FakeNet

__all__ = ["FabricIdCommands", "PortHost", "MAX_BACKLOG"]

E = abi.CmEventType
S = abi.RdmaCmState

_EVENT = CODECS["rdma_ucm_event_resp"]
_CONNECT = CODECS["rdma_ucm_connect"]
_ACCEPT = CODECS["rdma_ucm_accept"]
#: ``net.rdma_ucm.max_backlog``
MAX_BACKLOG = 1024
#: ``enum ib_event_type`` values NOTIFY takes
IB_EVENT_COMM_EST = int(abi.NotifyEvent.COMM_EST)


class PortHost(CmHost, Protocol):
    """What the rdma_cm of one file needs of its host (a :class:`~pyrdmacm.testing.FakeHost`)
    besides what the IB CM does: its network and device, the fabric it is on, and its port table."""

    @property
    def net(self) -> FakeNet: ...

    @property
    def device(self) -> FakeDevice: ...

    @property
    def fabric(self) -> IbCmWire: ...

    def check_port(self, ps: int, a: Address) -> None:
        """``cma_check_port``: EADDRNOTAVAIL / EADDRINUSE if ``a`` overlaps another binding."""

    def ephemeral(self, ps: int) -> int:
        """``cma_alloc_any_port``: a free port of ``ps``."""


class FabricIdCommands(IdCommands):
    """The commands of an id's life for the ids of one file on a host of a fabric: the
    single-host commands as :class:`~pyrdmacm.testing.fake_commands.IdCommands` answers them,
    and the connection-management commands routed over the fabric.

    Besides what its base holds (the file, the network, the kernel's rules), it holds the
    host (:class:`PortHost`: its port table, its device, the fabric whose IB CM carries the
    messages), each listener's backlog, and the ids a user bound (their ports are taken in
    the host's port table)."""

    def __init__(self, file: UcmaFile, host: PortHost, *, version: kernel_rules.Version, max_cmd: int,
                 ibdev_index: bool) -> None:
        super().__init__(file, host.net, version=version, max_cmd=max_cmd, ibdev_index=ibdev_index)
        self.host = host
        self.fabric = host.fabric
        #: listener handle -> backlog (LISTEN's, clamped as ucma_listen does)
        self._backlog: Dict[int, int] = {}
        #: the ids a user bound (their ports are taken in the host's port table)
        self._bound: Set[int] = set()

    @property
    def closed(self) -> bool:
        """Whether the file is closed."""
        return self._file.closed

    # -- what the IB CM asks of the rdma_cm above it (fabric_cm.CmKernel)
    def holds(self, end: CmEnd) -> bool:
        return not self._file.closed and self._file.cms.get(end.handle) is end

    def cm_event(self, end: CmEnd, event: int, status: int = 0, param: bytes = b"",
                 ece: Tuple[int, int] = (0, 0)) -> None:
        """An IB CM event reaches the id of ``end`` (``cma_ib_handler``, ``cma_sidr_rep_handler``):
        only in state CONNECT (DISCONNECT for TIMEWAIT_EXIT); DISCONNECTED moves it to
        DISCONNECT, once."""
        if not self.holds(end):
            return
        ctx = self._file.contexts[end.handle]
        if event == E.TIMEWAIT_EXIT:
            if ctx.state is not S.DISCONNECT:
                return
        elif ctx.state is not S.CONNECT:
            return
        if event == E.DISCONNECTED:
            ctx.move(S.DISCONNECT)
        self._post(ctx, event, status, param, ece)

    def psn_of(self, handle: int) -> int:
        ctx = self._file.contexts.get(handle)
        return ctx.psn if ctx is not None else 0

    def ah_to_peer(self, handle: int) -> Dict[str, Any]:
        """``ib_init_ah_attr_from_path`` over the fake's path record: hop limit 64, flow label
        and class 0."""
        ctx = self._file.contexts[handle]
        assert ctx.dst is not None and ctx.dev is not None
        return {"grh.dgid": self._net.gid_of(ctx.dst.ip, ctx.dev).packed, "grh.hop_limit": 64, "is_global": 1,
                "port_num": ctx.dev.port_num}

    def take_request(self, listener: int, req: CmRequest, ud: bool, param: bytes) -> Optional[CmEnd]:
        """``cma_ib_req_handler`` / ``cma_ib_new_conn_id`` (``cma_ib_new_udp_id``), and
        ``ucma_connect_event_handler``'s backlog: the request's id, in state CONNECT, with uid
        0 and the addresses the REQ's cma header gives, its CONNECT_REQUEST queued under the
        listener's uid; None when the listener's backlog is full."""
        lst = self._file.contexts[listener]
        if self._unread_requests(listener) >= self._backlog.get(listener, MAX_BACKLOG):
            return None
        ctx = self._file.new_ctx(0, lst.ps, abi.QpType.UD if ud else req.qp_type)
        ctx.move(S.CONNECT)
        ctx.dev = self._net.local.get(str(req.dst.ip), self.host.device)
        ctx.src = Address(req.dst.ip, req.dst.port, req.dst.scope_id, 0, req.dst.family)
        ctx.dst = Address(req.src.ip, req.src.port, req.src.scope_id, 0, req.src.family)
        ctx.paths = 0 if ud else 1  # cma_ib_new_conn_id keeps the REQ's path; a SIDR id has none
        end = CmEnd(self, ctx.handle, ud)
        self._file.cms[ctx.handle] = end
        end.listener = listener
        self._file.unread[ctx.handle] = listener
        self._post(ctx, E.CONNECT_REQUEST, 0, param, req.ece, uid=lst.uid, owner=listener)
        return end

    # -- events
    def _post(self, ctx: IdContext, event: int, status: int = 0, param: bytes = b"", ece: Tuple[int, int] = (0, 0),
              uid: Optional[int] = None, owner: Optional[int] = None) -> None:
        """Queue an event as ``ucma_event_handler`` does: for uid 0 (a request not accepted
        yet), nothing -- except a CONNECT_REQUEST, queued under the listener's uid (``uid``) as
        the listener's event (``owner``)."""
        if self._file.closed:
            return
        if uid is None:
            uid = ctx.uid
            if not uid:
                return
        raw = _EVENT.pack_dict({"uid": uid, "id": ctx.handle, "event": int(event), "status": status & 0xFFFFFFFF,
                                "param": param, "ece.vendor_id": ece[0], "ece.attr_mod": ece[1]})
        self._file.push(ctx.handle, raw, owner)

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
            end = self._file.cms[ctx.handle] = CmEnd(self, ctx.handle, ctx.qp_type == abi.QpType.UD)
            end.move(In.LISTEN)

    def _end(self, ctx: IdContext) -> CmEnd:
        end = self._file.cms[ctx.handle]
        assert isinstance(end, CmEnd)
        return end

    def connect(self, body: bytes, size_out: int) -> None:
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
        self._file.cms[ctx.handle] = end
        ctx.move(S.CONNECT)
        self.fabric.send_req(end)

    def accept(self, body: bytes, size_out: int) -> None:
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

    def reject(self, body: bytes, size_out: int) -> None:
        f, ctx, _cm = self._reject_args(body)
        end = self._end(ctx)
        pd = f["private_data"][: f["private_data_len"]]
        if end.ud:
            if len(pd) > wire_size("SIDR_REP") or not self.fabric.send_sidr_rep(end, SIDR_REJECT, private_data=pd):
                raise kernel_error(errno.EINVAL)
        elif len(pd) > wire_size("REJ") or not self.fabric.send_rej(end, f["reason"] or REJ_CONSUMER_DEFINED, pd):
            raise kernel_error(errno.EINVAL)

    def notify(self, body: bytes, size_out: int) -> None:
        event, ctx, _cm = self._notify_args(body)
        end = self._end(ctx)
        verb = In.ESTABLISH if event == IB_EVENT_COMM_EST else In.MIGRATE
        err = end.refusal(verb)
        if err:
            raise kernel_error(err)
        end.move(verb)
        if verb is In.ESTABLISH:
            self.cm_event(end, E.ESTABLISHED)  # IB_CM_USER_ESTABLISHED

    def disconnect(self, body: bytes, size_out: int) -> None:
        ctx, _cm = self._disconnect_args(body)
        end = self._end(ctx)
        # a DREQ if established, else the DREP if a DREQ came, else nothing -- and 0 all the same
        if not self.fabric.send_dreq(end):
            self.fabric.send_drep(end)

    def destroy_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_destroy_id", body)
        ctx = self._file.contexts.get(f["id"])
        if size_out >= CODECS["rdma_ucm_destroy_id_resp"].size and ctx is not None:
            self._teardown(ctx)  # the base refuses nothing past these two checks
        super().destroy_id(body, size_out)
        self._forget(f["id"])

    def close(self) -> None:
        """The file closes: ``ucma_close`` destroys every id of it, each sending what
        destroying it sends."""
        for ctx in list(self._file.contexts.values()):
            if ctx.handle in self._file.contexts:
                self._teardown(ctx)
                self._forget(ctx.handle)
        super().close()

    # -- MIGRATE_ID past the single host
    def adopt(self, old: IdCommands, handles: List[int]) -> None:
        """The IB CM ids of the migrated ids answer to this file now; their listener state
        and port bindings come along."""
        assert isinstance(old, FabricIdCommands)
        for h in handles:
            end = self._file.cms.get(h)
            if isinstance(end, CmEnd):
                end.kernel = self
            if h in old._backlog:
                self._backlog[h] = old._backlog.pop(h)
            if h in old._bound:
                old._bound.discard(h)
                self._bound.add(h)

    # -- destruction
    def _forget(self, handle: int) -> None:
        self._file.cms.pop(handle, None)
        self._backlog.pop(handle, None)
        self._file.unread.pop(handle, None)
        self._bound.discard(handle)

    def _teardown(self, ctx: IdContext) -> None:
        """What destroying the id sends (``ucma_destroy_private_ctx``, ``cm_destroy_id``).  The
        id is gone first: nothing the peer answers reaches it."""
        if ctx.state is S.LISTEN:
            # requests whose CONNECT_REQUEST was not read die with the listener (REJ 28)
            for child in [c for c, lst in self._file.unread.items() if lst == ctx.handle]:
                cctx = self._file.contexts.get(child)
                if cctx is not None:
                    self._teardown(cctx)
                    self._drop(child)
        self._backlog.pop(ctx.handle, None)
        self._bound.discard(ctx.handle)
        end = self._file.cms.pop(ctx.handle, None)
        if isinstance(end, CmEnd):
            self.fabric.destroy_end(end)

    def _drop(self, handle: int) -> None:
        """The kernel destroys an id of this file by itself: its queued events go too."""
        self._file.drop_ctx(handle)
        self._file.discard_events(handle)
        self._forget(handle)

    # -- the passive side of a request, and the port table
    def listeners(self, ps: int, port: int) -> List[IdContext]:
        """This file's listeners on ``port`` of port space ``ps``."""
        return [c for c in self._file.contexts.values() if c.state is S.LISTEN and c.ps == ps and c.src is not None
                and c.src.port == port]

    def _unread_requests(self, listener: int) -> int:
        return sum(1 for lst in self._file.unread.values() if lst == listener)

    def bound_addresses(self, ps: int) -> List[Address]:
        """The addresses this file's ids of port space ``ps`` are bound to (the host's port table)."""
        out = []
        for h in self._bound:
            c = self._file.contexts.get(h)
            if c is not None and c.ps == ps and c.src is not None and c.state is not S.IDLE:
                out.append(c.src)
        return out
