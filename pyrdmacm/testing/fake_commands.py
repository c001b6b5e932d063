"""The fake kernel's commands of an id's life: CREATE_ID and DESTROY_ID, BIND, address and
route resolution, QUERY, LISTEN, the connection verbs (CONNECT, ACCEPT, REJECT, DISCONNECT,
NOTIFY) as one host alone answers them, and MIGRATE_ID.

Each handler checks what ucma.c checks, in its order: the command's fields first (sizes,
families: EINVAL before the id is even looked up), then the id (``ucma_get_ctx``: ENOENT, or
EINVAL for another file's), then the state rule of :mod:`pyrdmacm.kernel_rules`, then what
cma.c and the IB CM (:mod:`pyrdmacm.testing._ibcm`) check.  Alone, the fake has no peer: a
CONNECT is rejected at once (REJECTED 28), and an accepted request
(:meth:`~pyrdmacm.testing.FakeKernel.incoming_request`) waits for an RTU that never comes.
:mod:`pyrdmacm.testing.fabric_ids` carries the connection verbs between a fabric's hosts.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import struct
import weakref
from typing import Any, Dict, List, Optional, Tuple

from ..abi import structs as _structs
from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ..addr import AF_IB, AF_INET, AF_INET6, Address
from ._ibcm import IbCmId, IbCmState
from ._ibcm import CmInput as In
from .fake_file import UcmaFile
from .fake_ids import IdContext, command_fields, kernel_error, sockaddr_or_none, write_reply
from .fake_net import PACKET_LIFETIME, FakeDevice, FakeNet
from ..wire import decode_path_record

__all__ = ["IdCommands", "commands_for_fd"]

C = abi.UserCmCmd
E = abi.CmEventType
S = abi.RdmaCmState

_FAMILY = struct.Struct("<H")
_CONNECT = CODECS["rdma_ucm_connect"]
_ACCEPT = CODECS["rdma_ucm_accept"]
_PATH_DATA = CODECS["ib_path_rec_data"]
#: ``enum ib_event_type`` values NOTIFY takes
IB_EVENT_COMM_EST, IB_EVENT_PATH_MIG = int(abi.NotifyEvent.COMM_EST), int(abi.NotifyEvent.PATH_MIG)
#: what a REJECT's reason 0 means, and the two reasons the command takes (ucma_reject)
REJ_CONSUMER_DEFINED = int(abi.RejectReason.CONSUMER_DEFINED)
REJECT_REASONS = (REJ_CONSUMER_DEFINED, int(abi.RejectReason.VENDOR_OPTION_NOT_SUPPORTED))
#: The id commands of the open files by the fd number they poll on: what MIGRATE_ID's ``fd`` names.
_BY_FD: "weakref.WeakValueDictionary[int, IdCommands]" = weakref.WeakValueDictionary()


def commands_for_fd(fd: int) -> "Optional[IdCommands]":
    """The id commands of the open fake file that polls on ``fd`` (as ``fdget`` finds a file), or None."""
    return _BY_FD.get(fd)


def in6(blob: bytes, optional: bool = False) -> Optional[Address]:
    """A ``sockaddr_in6`` slot (BIND_IP, RESOLVE_IP): an IPv4 or IPv6 address, None for
    family 0 where ``optional`` (RESOLVE_IP's source), else EINVAL (``rdma_addr_size_in6``)."""
    if optional and _FAMILY.unpack_from(blob)[0] == 0:
        return None
    a = sockaddr_or_none(blob)
    if a is None or a.family not in (AF_INET, AF_INET6):
        raise kernel_error(errno.EINVAL)
    return a


def kss(blob: bytes, size: int) -> Address:
    """A ``__kernel_sockaddr_storage`` of ``size`` bytes (BIND, RESOLVE_ADDR, JOIN_MCAST):
    EINVAL unless ``size`` is its family's (``rdma_addr_size_kss``; AF_IB included)."""
    a = sockaddr_or_none(blob)
    if a is None or a.size != size:
        raise kernel_error(errno.EINVAL)
    return a


class IdCommands:
    """The commands of an id's life, as a host alone answers them, for the ids of one file.

    It holds the file whose ids it answers for (:class:`~pyrdmacm.testing.fake_file.UcmaFile`:
    the ids, their IB CM ids and memberships, the event queue), the network it resolves over
    (:class:`~pyrdmacm.testing.FakeNet`) and the kernel's rules it follows: ``version`` (the
    state rules of :mod:`pyrdmacm.kernel_rules`), ``max_cmd`` (QUERY IB_SERVICE needs
    RESOLVE_IB_SERVICE) and ``ibdev_index`` (False: QUERY and QUERY_ROUTE write the shorter
    reply of the kernels before 5.8)."""

    def __init__(self, file: UcmaFile, net: FakeNet, *, version: kernel_rules.Version, max_cmd: int,
                 ibdev_index: bool) -> None:
        self._file = file
        self._net = net
        self._version = version
        self._max_cmd = max_cmd
        self._ibdev_index = ibdev_index
        self._fd = file.fileno()
        _BY_FD[self._fd] = self

    def close(self) -> None:
        """The file closes (``ucma_close``): its fd no longer names it to MIGRATE_ID.  Alone,
        destroying its ids sends nothing."""
        if _BY_FD.get(self._fd) is self:
            del _BY_FD[self._fd]

    # -- CREATE_ID, DESTROY_ID
    def create_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_create_id", body)
        if size_out < CODECS["rdma_ucm_create_id_resp"].size:
            raise kernel_error(errno.ENOSPC)
        ps = f["ps"]
        if ps not in (abi.PortSpace.TCP, abi.PortSpace.UDP, abi.PortSpace.IPOIB, abi.PortSpace.IB):
            raise kernel_error(errno.EINVAL)  # ucma_get_qp_type
        qp = {abi.PortSpace.TCP: abi.QpType.RC, abi.PortSpace.UDP: abi.QpType.UD,
              abi.PortSpace.IPOIB: abi.QpType.UD}.get(ps, f["qp_type"])
        handle = self._file.new_ctx(f["uid"], ps, int(qp)).handle
        try:
            write_reply(f["response"], "rdma_ucm_create_id_resp", size_out, {"id": handle})
        except OSError:
            self._file.drop_ctx(handle)
            raise

    def destroy_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_destroy_id", body)
        if size_out < CODECS["rdma_ucm_destroy_id_resp"].size:
            raise kernel_error(errno.ENOSPC)
        ctx = self._file.get(f["id"])
        self._file.drop_ctx(ctx.handle)
        self._file.discard_events(ctx.handle)
        # ucma_cleanup_multicast: the id's memberships go with it
        for mc_id in [m.id for m in self._file.mcs.values() if m.handle == ctx.handle]:
            del self._file.mcs[mc_id]
        write_reply(f["response"], "rdma_ucm_destroy_id_resp", size_out, {"events_reported": ctx.reported})

    # -- BIND, BIND_IP (rdma_bind_addr)
    def _bind(self, ctx: IdContext, a: Address) -> None:
        ctx.check(C.BIND, version=self._version)  # IDLE -> ADDR_BOUND
        if a.family == AF_INET6 and a.ip.is_link_local and not a.scope_id:
            raise kernel_error(errno.EINVAL)  # cma_check_linklocal
        if not a.is_any and a.family != AF_IB:
            dev = self._net.local.get(str(a.ip))
            if dev is None:
                raise kernel_error(errno.EADDRNOTAVAIL)  # rdma_translate_ip
            ctx.dev = dev
        port = a.port or 40000 + ctx.handle % 25000
        ctx.src = Address(a.ip, port, a.scope_id, a.flowinfo, a.family, a.pkey, a.sid, a.sid_mask)
        ctx.move(S.ADDR_BOUND)

    def bind(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_bind", body)
        if f["reserved"] or not f["addr_size"]:
            raise kernel_error(errno.EINVAL)
        a = kss(f["addr"], f["addr_size"])
        self._bind(self._file.get(f["id"]), a)

    def bind_ip(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_bind_ip", body)
        a = in6(f["addr"])
        assert a is not None
        self._bind(self._file.get(f["id"]), a)

    # -- RESOLVE_ADDR, RESOLVE_IP (rdma_resolve_addr, addr_handler)
    def _resolve(self, command: "abi.UserCmCmd", ctx: IdContext, src: Optional[Address], dst: Address,
                 timeout_ms: int) -> None:
        ctx.check(command, version=self._version)  # IDLE or ADDR_BOUND
        if ctx.state is S.IDLE:
            # cma_bind_addr: the source given, or a wildcard of dst's family (with its scope)
            wildcard = Address(ipaddress.ip_address(0 if dst.family == AF_INET else "::"), 0, dst.scope_id)
            self._bind(ctx, src if src is not None else wildcard)
        assert ctx.src is not None
        if ctx.src.family != dst.family:
            raise kernel_error(errno.EINVAL)  # the id stays bound
        d = str(dst.ip)
        if d in self._net.no_route:
            raise kernel_error(errno.ENETUNREACH)
        ctx.dst = dst
        ctx.move(S.ADDR_QUERY)
        # the any address (cma_any_addr: cma_resolve_loopback) and 127/8 resolve to ourselves
        here = dst.ip.is_loopback or dst.ip.is_unspecified
        if ctx.src.is_any:
            # the routing tables: a local destination is its own source
            chosen = d if (d in self._net.local or here) else self._net.default_src.get(dst.ip.version)
            if chosen is None:
                ctx.move(S.ADDR_BOUND)
                raise kernel_error(errno.ENETUNREACH)
            ctx.src = Address(ipaddress.ip_address(chosen), ctx.src.port, ctx.src.scope_id)
        # the device: an id bound to a device's address has it; a wildcard-bound id gets the
        # source's when the query succeeds (addr_handler: cma_acquire_dev_by_src_ip), a
        # loopback one the first device at once (cma_resolve_loopback)
        ctx.resolving_dev = ctx.dev or self._net.local.get(str(ctx.src.ip))
        if ctx.resolving_dev is None and here and self._net.local:
            ctx.dev = ctx.resolving_dev = next(iter(self._net.local.values()))
            ctx.src = Address(ctx.src.ip, ctx.src.port, ctx.src.scope_id, 0, 0)
            ctx.loopback = True
        if ctx.resolving_dev is None:
            self._file.queue(ctx, E.ADDR_ERROR, -errno.ENODEV)
        elif d in self._net.peers or d in self._net.local or here or dst.ip.is_multicast:
            # a multicast group needs no neighbour: its L2 address is mapped (how mckey resolves)
            self._file.queue(ctx, E.ADDR_RESOLVED)
        else:
            self._file.queue(ctx, E.ADDR_ERROR, -errno.ETIMEDOUT, delay_ms=max(timeout_ms, 1))

    def resolve_addr(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_resolve_addr", body)
        if f["reserved"] or not f["dst_size"]:
            raise kernel_error(errno.EINVAL)
        src = kss(f["src_addr"], f["src_size"]) if f["src_size"] else None
        dst = kss(f["dst_addr"], f["dst_size"])
        self._resolve(C.RESOLVE_ADDR, self._file.get(f["id"]), src, dst, f["timeout_ms"])

    def resolve_ip(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_resolve_ip", body)
        src = in6(f["src_addr"], optional=True)
        dst = in6(f["dst_addr"])
        assert dst is not None
        self._resolve(C.RESOLVE_IP, self._file.get(f["id"]), src, dst, f["timeout_ms"])

    # -- RESOLVE_ROUTE (rdma_resolve_route), RESOLVE_IB_SERVICE (6.17+: rdma_resolve_ib_service)
    def resolve_route(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_resolve_route", body)
        ctx = self._file.get(f["id"])
        ctx.check(C.RESOLVE_ROUTE, version=self._version)
        if not f["timeout_ms"]:
            raise kernel_error(errno.EINVAL)
        if ctx.loopback:  # no netdev to route over (the lab's 6.1 answers ENODEV)
            raise kernel_error(errno.ENODEV)
        ctx.move(S.ROUTE_QUERY)
        self._set_route(ctx)
        self._file.queue(ctx, E.ROUTE_RESOLVED)

    @staticmethod
    def _set_route(ctx: IdContext) -> None:
        """The path a resolved route takes on RoCE: its traffic class is the id's TOS; an
        ACK_TIMEOUT set before makes its packet life time timeout - 1 (cm-notes.md section 5)."""
        ctx.route_tc = ctx.tos
        ctx.route_plt = ctx.ack_timeout - 1 if ctx.ack_timeout else PACKET_LIFETIME
        ctx.paths = 1

    def resolve_ib_service(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_resolve_ib_service", body)
        ctx = self._file.get(f["id"])
        ctx.check(C.RESOLVE_IB_SERVICE, version=self._version)  # a device, ADDR_BOUND
        assert ctx.dev is not None
        if ctx.dev.link_layer != "InfiniBand":  # rdma_cap_ib_sa: RoCE has no SA
            raise kernel_error(errno.EOPNOTSUPP)
        # the fake's fabric has no SA holding service records: the query finds none, and
        # ADDRINFO_ERROR takes the id back to ADDR_BOUND
        ctx.move(S.ADDR_BOUND)
        if ctx.uid:
            self._file.push(ctx.handle, CODECS["rdma_ucm_event_resp"].pack_dict(
                {"uid": ctx.uid, "id": ctx.handle, "event": int(E.ADDRINFO_ERROR),
                 "status": -errno.ENOENT & 0xFFFFFFFF}))

    # -- QUERY, QUERY_ROUTE
    def _reply_size(self, name: str) -> int:
        """How much of the reply ``name`` is written: all of it, or before 5.8 the part before
        ``ibdev_index``."""
        return CODECS[name].size if self._ibdev_index else int(_structs.MIN_REPLY[name])

    @staticmethod
    def _device_fields(dev: Optional[FakeDevice]) -> Tuple[int, int, int, int]:
        """(node_guid, port_num, pkey, ibdev_index) of a query reply; an unbound id has none."""
        return (dev.node_guid, dev.port_num, dev.pkey, dev.index) if dev else (0, 0, 0, 0xFFFFFFFF)

    def _addr_reply(self, ctx: IdContext, gid: bool) -> Dict[str, Any]:
        dev = ctx.dev
        guid, port, pkey, index = self._device_fields(dev)
        out: Dict[str, Any] = {"node_guid": guid, "port_num": port, "pkey": pkey, "ibdev_index": index}
        for key, a in (("src", ctx.src), ("dst", ctx.dst)):
            if a is None:
                continue
            if gid and dev is not None and a.family != AF_IB:
                a = Address.ib(self._net.gid_of(a.ip, dev), pkey=dev.pkey, sid=(ctx.ps << 16) + a.port)
            out[key + "_size"] = a.size
            out[key + "_addr"] = a.pack_storage()
        return out

    def _path_reply(self, ctx: IdContext) -> bytes:
        """QUERY PATH's one record: the one SET_OPTION IB_PATH gave, or the RoCE path the
        route resolution made (GIDs, the route's traffic class and packet life time)."""
        if ctx.path is not None:
            return ctx.path
        assert ctx.dev is not None and ctx.src is not None and ctx.dst is not None
        rec = struct.pack(">Q16s16sHHIBBHHBBBB6x", 0, self._net.gid_of(ctx.dst.ip, ctx.dev).packed,
                          self._net.gid_of(ctx.src.ip, ctx.dev).packed, 0, 0, (1 << 31) | 64, ctx.route_tc,
                          (1 << 7) | 1, ctx.dev.pkey, 0, (2 << 6) | 3, (2 << 6) | 3, (2 << 6) | ctx.route_plt, 0)
        flags = abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL
        return struct.pack("<II", int(flags), 0) + rec

    def query(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_query", body)
        ctx = self._file.get(f["id"])
        opt = f["option"]
        if opt in (abi.QueryOption.ADDR, abi.QueryOption.GID):
            if size_out < _structs.MIN_REPLY["rdma_ucm_query_addr_resp"]:
                raise kernel_error(errno.ENOSPC)
            raw = CODECS["rdma_ucm_query_addr_resp"].pack_dict(self._addr_reply(ctx, opt == abi.QueryOption.GID))
            write_to_address(f["response"], raw[: min(size_out, self._reply_size("rdma_ucm_query_addr_resp"))])
        elif opt == abi.QueryOption.PATH:
            if size_out < 8:
                raise kernel_error(errno.ENOSPC)
            routed = bool(ctx.paths or ctx.path is not None) and (size_out - 8) >= 72 and ctx.dev is not None
            raw = struct.pack("<II", 1 if routed else 0, 0)
            write_to_address(f["response"], raw + self._path_reply(ctx) if routed else raw)
        elif opt == abi.QueryOption.IB_SERVICE and self._max_cmd >= C.RESOLVE_IB_SERVICE:
            # 6.17+: the service records of the last RESOLVE_IB_SERVICE; the fake's SA finds none,
            # and a kernel with none answers ENODATA (seen on 7.2)
            raise kernel_error(errno.ENODATA)
        else:
            raise kernel_error(errno.ENOSYS)

    def query_route(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_query", body)
        ctx = self._file.get(f["id"])
        if size_out < _structs.MIN_REPLY["rdma_ucm_query_route_resp"]:
            raise kernel_error(errno.ENOSPC)
        guid, port, pkey, index = self._device_fields(ctx.dev)
        vals: Dict[str, Any] = {"node_guid": guid, "port_num": port, "ibdev_index": index, "ib_route[0].pkey": pkey}
        for key, a in (("src_addr", ctx.src), ("dst_addr", ctx.dst)):
            if a is not None:
                vals[key] = a.pack_in6()
        if ctx.dev is not None:  # RoCE's route: the addresses' GIDs, one path once resolved
            for key, a in (("ib_route[0].sgid", ctx.src), ("ib_route[0].dgid", ctx.dst)):
                if a is not None and a.family != AF_IB:
                    vals[key] = self._net.gid_of(a.ip, ctx.dev).packed
            vals["num_paths"] = 1 if ctx.paths or ctx.path is not None else 0
        raw = CODECS["rdma_ucm_query_route_resp"].pack_dict(vals)
        write_to_address(f["response"], raw[: min(size_out, self._reply_size("rdma_ucm_query_route_resp"))])

    # -- LISTEN, CONNECT
    def listen(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_listen", body)
        ctx = self._file.get(f["id"])
        ctx.check(C.LISTEN, version=self._version)
        self._listen(ctx, f["backlog"])

    def _listen(self, ctx: IdContext, backlog: int) -> None:
        """rdma_listen: LISTEN; on a device (a specific address) through an IB CM listen id."""
        ctx.move(S.LISTEN)
        if ctx.dev is not None:
            self._file.cms[ctx.handle] = IbCmId(IbCmState.LISTEN)

    def _conn_body(self, codec: Any, body: bytes) -> Dict[str, Any]:
        """CONNECT / ACCEPT: at least up to ``reserved`` (EINVAL), the ECE when given."""
        if len(body) < codec.offset("ece.vendor_id"):
            raise kernel_error(errno.EINVAL)
        out: Dict[str, Any] = codec.unpack_dict(body[: codec.size].ljust(codec.size, b"\0"))
        return out

    def _connect_args(self, body: bytes) -> Tuple[Dict[str, Any], IdContext]:
        """CONNECT's fields and id, checked as ucma_connect and rdma_connect check them: the
        private data fits a REQ (SIDR REQ) after the rdma_cm header of an IP id
        (cma_connect_ib, cm_validate_req_param; the state stays ROUTE_RESOLVED)."""
        f = self._conn_body(_CONNECT, body)
        if not f["conn_param.valid"]:
            raise kernel_error(errno.EINVAL)
        ctx = self._file.get(f["id"])
        ctx.check(C.CONNECT, version=self._version)
        assert ctx.src is not None
        message = "SIDR_REQ" if ctx.qp_type == abi.QpType.UD else "REQ"
        if f["conn_param.private_data_len"] > abi.cm_private_data_limit(message, ctx.src.family):
            raise kernel_error(errno.EINVAL)
        if ctx.path is not None and ctx.dev is not None:
            # a route SET_OPTION IB_PATH gave, whose source GID the port lacks (an all-zero
            # record): the IB CM finds no GID for the REQ or SIDR REQ (measured on 5.10 and 7.2)
            sgid = decode_path_record(0, _PATH_DATA.unpack_dict(ctx.path)["path_rec"]).sgid
            if all(self._net.gid_of(a, d) != sgid for a, d in self._net.local.items() if d.name == ctx.dev.name):
                raise kernel_error(errno.ENOENT)
        return f, ctx

    def connect(self, body: bytes, size_out: int) -> None:
        """Alone, nobody answers as a listener would: the REQ is rejected at once (28), and the
        IB CM id it leaves is idle."""
        f, ctx = self._connect_args(body)
        ctx.move(S.CONNECT)
        cm = self._file.cms[ctx.handle] = IbCmId()
        cm.move(In.SEND_SIDR_REQ if ctx.qp_type == abi.QpType.UD else In.SEND_REQ)
        cm.move(In.RECV_SIDR_REP if ctx.qp_type == abi.QpType.UD else In.RECV_REJ)
        self._file.queue(ctx, E.REJECTED, REJ_CONSUMER_DEFINED)

    # -- ACCEPT, REJECT, DISCONNECT, NOTIFY: the rdma_cm's rules, then the IB CM id's
    def _accept_args(self, body: bytes) -> Tuple[Dict[str, Any], IdContext, IbCmId]:
        """ACCEPT's fields, id and IB CM id, checked as ucma_accept and rdma_accept check them."""
        f = self._conn_body(_ACCEPT, body)
        ctx = self._file.get(f["id"])
        ctx.check(C.ACCEPT, version=self._version)
        return f, ctx, self._file.cms[ctx.handle]

    def accept(self, body: bytes, size_out: int) -> None:
        """Alone: a request is accepted (its REP goes nowhere: no RTU ever comes); valid=0, the
        RTU, needs a REP received, which never is."""
        f, ctx, cm = self._accept_args(body)
        if ctx.qp_type == abi.QpType.UD:
            verb = In.SEND_SIDR_REP  # cma_send_sidr_rep, with the parameters or without
        else:
            verb = In.SEND_REP if f["conn_param.valid"] else In.SEND_RTU
        err = cm.refusal(verb)
        if err:
            cm.move(In.SEND_REJ)  # rdma_accept's error path rejects the request
            raise kernel_error(err)
        cm.move(verb)
        if f["conn_param.valid"]:
            ctx.uid = f["uid"]

    def _reject_args(self, body: bytes) -> Tuple[Dict[str, Any], IdContext, IbCmId]:
        f = command_fields("rdma_ucm_reject", body)
        if (f["reason"] or REJ_CONSUMER_DEFINED) not in REJECT_REASONS:
            raise kernel_error(errno.EINVAL)  # ucma_reject, before the id
        ctx = self._file.get(f["id"])
        ctx.check(C.REJECT, version=self._version)
        return f, ctx, self._file.cms[ctx.handle]

    def reject(self, body: bytes, size_out: int) -> None:
        f, ctx, cm = self._reject_args(body)
        verb = In.SEND_SIDR_REP if ctx.qp_type == abi.QpType.UD else In.SEND_REJ
        err = cm.refusal(verb)
        if err:
            raise kernel_error(err)
        if f["private_data_len"] > abi.cm_private_data_limit("SIDR_REP" if verb is In.SEND_SIDR_REP else "REJ"):
            raise kernel_error(errno.EINVAL)
        cm.move(verb)

    def _disconnect_args(self, body: bytes) -> Tuple[IdContext, IbCmId]:
        f = command_fields("rdma_ucm_disconnect", body)
        ctx = self._file.get(f["id"])
        ctx.check(C.DISCONNECT, version=self._version)
        return ctx, self._file.cms[ctx.handle]

    def disconnect(self, body: bytes, size_out: int) -> None:
        """rdma_disconnect: a DREQ if established, else the DREP if a DREQ came, else nothing
        -- and 0 all the same."""
        _ctx, cm = self._disconnect_args(body)
        if cm.move(In.SEND_DREQ) is None:
            cm.move(In.SEND_DREP)

    def _notify_args(self, body: bytes) -> Tuple[int, IdContext, IbCmId]:
        f = command_fields("rdma_ucm_notify", body)
        ctx = self._file.get(f["id"])
        ctx.check(C.NOTIFY, version=self._version)
        if f["event"] not in (IB_EVENT_COMM_EST, IB_EVENT_PATH_MIG):
            raise kernel_error(errno.EINVAL)  # ib_cm_notify: another event
        return f["event"], ctx, self._file.cms[ctx.handle]

    def notify(self, body: bytes, size_out: int) -> None:
        """ib_cm_notify: COMM_EST establishes an accepted request (ESTABLISHED follows), PATH_MIG
        needs an established connection."""
        event, ctx, cm = self._notify_args(body)
        verb = In.ESTABLISH if event == IB_EVENT_COMM_EST else In.MIGRATE
        err = cm.refusal(verb)
        if err:
            raise kernel_error(err)
        cm.move(verb)
        if verb is In.ESTABLISH:
            self._file.queue(ctx, E.ESTABLISHED)

    # -- MIGRATE_ID (ucma_migrate_id), written on the new file
    def migrate_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_migrate_id", body)
        fd, handle = f["fd"], f["id"]
        old = commands_for_fd(fd)
        if old is None or old._file.closed:
            if fd > 0x7FFFFFFF:  # fdget of a __u32 no fd table reaches
                raise kernel_error(errno.ENOENT)
            try:
                os.fstat(fd)
            except OSError:
                raise kernel_error(errno.ENOENT) from None  # fdget: no such fd
            raise kernel_error(errno.EINVAL)  # an fd, but no rdma_cm
        if old._file.machine is not self._file.machine:
            raise kernel_error(errno.EINVAL)  # an rdma_cm fd of another (fake) machine
        with old._file.lock:
            ctx = old._file.get(handle)  # the id is looked up on the file named
            if not f["response"]:
                raise kernel_error(errno.EFAULT)
            self.adopt(old, self._file.take_over(old._file, handle))
        write_to_address(f["response"], CODECS["rdma_ucm_migrate_resp"].pack_dict({"events_reported": ctx.reported}))

    def adopt(self, old: "IdCommands", handles: List[int]) -> None:
        """What else of the ids ``handles``, which MIGRATE_ID brought from ``old``'s file, moves
        with them: nothing, alone."""
