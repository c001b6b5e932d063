"""A fake rdma_cm kernel that speaks the real bytes, for tests without a kernel.

Theory of operation
-------------------
:class:`FakeKernel` is a :class:`~pyrdmacm._device.Transport` as
:class:`~pyrdmacm._device.KernelDevice` is -- ``write``, ``fileno``, ``close``
and the rest -- so an :class:`~pyrdmacm.EventChannel` cannot tell it from the device.
``write`` decodes the real ``rdma_ucm_cmd_hdr`` and command struct (with the
codecs of :mod:`pyrdmacm.abi`), validates them the way ``ucma_write`` does
(same order, same errno), and answers by writing the real reply struct to the
address in the command's ``response`` field, as ``copy_to_user`` would.

Events are real ``rdma_ucm_event_resp`` structs in a queue; a pipe carries
one byte per queued event, so ``fileno()`` polls readable exactly when the
kernel's fd would.  Events due later (an ARP time-out) are queued by a timer.

The network is a small :class:`FakeNet`: local addresses with their RDMA
device, peers that answer, destinations without a route.  It models what the
lab's real kernels answered (see ``tests/kernel``), and the InfiniBand paths
(GIDs, pkeys, IPoIB) that Soft-RoCE cannot show.

What a test may do to it or ask of it, without reaching into its fields:
:meth:`FakeKernel.inject_event` (queue any event, as the kernel would),
:meth:`FakeKernel.incoming_request` (a connection request arrives at a listener),
:attr:`FakeKernel.ids` (every id the fake holds, with its state as the kernel
would keep it) and :attr:`FakeKernel.commands` (every command written).

Past connection set-up it answers SET_OPTION (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT,
IB_PATH with its ROUTE_RESOLVED), INIT_QP_ATTR, NOTIFY, JOIN_MCAST / JOIN_IP_MCAST /
LEAVE_MCAST (memberships with their own handles, MULTICAST_JOIN at once as on RoCE),
MIGRATE_ID (between any two fakes of one machine, named by their fd), RESOLVE_IB_SERVICE
and WRITE_CM_EVENT (commands above ``max_cmd`` are EINVAL, as a kernel without them says),
with the kernel's errnos (``../shared/cm-notes.md`` sections 4 and 5).

Alone, the fake is one host whose CONNECT is always rejected (28).  Several hosts that
connect to each other, listen, accept, reject and disconnect as the kernel does for ids
without a QP are :class:`pyrdmacm.testing.FakeFabric`'s (:mod:`pyrdmacm.testing.fabric`).
"""

from __future__ import annotations

import ctypes
import errno
import ipaddress
import itertools
import os
import random
import struct
import threading
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Set, Tuple

from .. import abi
from .._codec import CODECS
from .._device import write_to_address
from ..addr import AF_IB, AF_INET, AF_INET6, Address, unpack_sockaddr
from ..errors import DecodeError

C = abi.UserCmCmd
E = abi.CmEventType

_HDR = CODECS["rdma_ucm_cmd_hdr"]
_QP_ATTR = CODECS["ib_uverbs_qp_attr"]
_PATH_DATA = CODECS["ib_path_rec_data"]
_SA_PATH = CODECS["ib_sa_path_rec"]

#: The kernel's id and multicast handles come from two tables of the whole machine
#: (``ctx_table``, ``multicast_table``), not one per fd: an id keeps its handle when it
#: moves to another fd (MIGRATE_ID).  The fake's are counters shared by all its kernels.
_next_handle = itertools.count(1).__next__
_next_mc = itertools.count(1).__next__
#: The open fakes by the fd number they poll on: what MIGRATE_ID's ``fd`` names.
_BY_FD: "weakref.WeakValueDictionary[int, FakeKernel]" = weakref.WeakValueDictionary()

#: ``KMALLOC_MAX_SIZE`` on x86_64 (4 MiB): a larger SET_OPTION ``optlen`` is EINVAL before anything
#: else is looked at (``ucma_set_option``)
KMALLOC_MAX_SIZE = 1 << 22
#: ``RDMA_UDP_QKEY``: the qkey of PS_UDP ids (``cma_set_default_qkey``)
UDP_QKEY = 0x01234567
#: ``-ENOTSUPP``: the kernel-internal errno (524) a write may return as is
ENOTSUPP = 524


#: the QP states and attribute mask bits (the ABI layer's)
QpState = abi.QpState
QpAttrMask = abi.QpAttrMask


#: ``IB_ACCESS_REMOTE_WRITE``, ``_READ``, ``_ATOMIC``
ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_ATOMIC = 2, 4, 8
#: What the lab's rxe gave INIT_QP_ATTR (cm-notes.md section 1): IB MTU 1024 (3) on a 1500-byte
#: netdev, the RoCEv2 GID of an IPv4 address at index 1, hop limit 64, RTS timeout 19
PATH_MTU_1024, SGID_INDEX, HOP_LIMIT, DEFAULT_TIMEOUT = 3, 1, 64, 19
#: the packet life time of the fake's RoCE path records (``CMA_IBOE_PACKET_LIFETIME``)
PACKET_LIFETIME = 16


class _Queued(NamedTuple):
    """One queued event: the id it reports (``handle``: the new id of a CONNECT_REQUEST, the
    owning id of a membership's event), its bytes, the id whose event it is for the kernel
    (``owner``: the listener for a CONNECT_REQUEST) and the membership it belongs to (or 0)."""

    handle: int
    raw: bytes
    owner: int
    mc: int = 0


class _Mc:
    """One multicast membership (``struct ucma_multicast``)."""

    __slots__ = ("id", "handle", "uid", "addr", "flags", "reported")

    def __init__(self, mc_id: int, handle: int, uid: int, addr: Address, flags: int) -> None:
        self.id = mc_id
        self.handle = handle  #: the id that joined
        self.uid = uid
        self.addr = addr
        self.flags = flags
        self.reported = 0


@dataclass
class FakeDevice:
    name: str = "fake0"
    index: int = 1
    node_guid: int = 0x0002C9030000ABCD
    port_num: int = 1
    pkey: int = 0xFFFF
    link_layer: str = "Ethernet"  # or "InfiniBand"
    netdev: str = "eth0"


@dataclass
class FakeNet:
    """Who is where.  Addresses are strings for brevity."""

    local: Dict[str, FakeDevice] = field(
        default_factory=lambda: {"10.0.0.1": FakeDevice(), "fd00::1": FakeDevice()}
    )
    peers: Set[str] = field(default_factory=lambda: {"10.0.0.2", "fd00::2"})
    no_route: Set[str] = field(default_factory=lambda: {"192.0.2.1"})
    #: destination -> the source the routing tables pick for it
    default_src: Dict[int, str] = field(default_factory=lambda: {4: "10.0.0.1", 6: "fd00::1"})
    ipoib_peers: bool = True

    def gid_of(self, ip: Any, dev: FakeDevice) -> ipaddress.IPv6Address:
        ip = ipaddress.ip_address(ip)
        if dev.link_layer == "InfiniBand":
            # an IB port GID: subnet prefix + port GUID
            return ipaddress.IPv6Address((0xFE80 << 112) | (dev.node_guid + (int(ip) & 0xFF)))
        if ip.version == 4:
            return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
        return ipaddress.IPv6Address(ip.packed)


@dataclass(frozen=True)
class FakeId:
    """What the fake kernel holds for one id (a snapshot: :attr:`FakeKernel.ids`)."""

    handle: int
    uid: int
    ps: int
    qp_type: int
    state: str  #: the kernel's ``rdma_cm_state`` name (IDLE, ADDR_BOUND, ADDR_RESOLVED, ...)
    src: Optional[Address]
    dst: Optional[Address]
    device: Optional[str]
    events_reported: int


class _Ctx:
    __slots__ = ("uid", "ps", "qp_type", "state", "src", "dst", "dev", "reported", "handle", "loopback", "kernel",
                 "psn", "tos", "ack_timeout", "reuseaddr", "afonly", "route_tc", "route_plt", "path")

    def __init__(self, handle: int, uid: int, ps: int, qp_type: int, kernel: "Optional[FakeKernel]" = None) -> None:
        self.handle = handle
        self.uid = uid
        self.ps = ps
        self.qp_type = qp_type
        self.state = "IDLE"
        self.src: Optional[Address] = None
        self.dst: Optional[Address] = None
        self.dev: Optional[FakeDevice] = None
        self.reported = 0
        self.loopback = False
        #: the kernel (fd) that holds the id now: MIGRATE_ID changes it
        self.kernel = kernel
        #: ``id_priv->seq_num``: the id's starting PSN, random, 24 bits
        self.psn = random.getrandbits(24)
        #: SET_OPTION: TOS (``tos``), ACK_TIMEOUT (None: not set), REUSEADDR, AFONLY
        self.tos = 0
        self.ack_timeout: Optional[int] = None
        self.reuseaddr = False
        self.afonly = False
        #: the route's traffic class and packet life time (fixed when the route is resolved)
        self.route_tc = 0
        self.route_plt = PACKET_LIFETIME
        #: the ``ib_path_rec_data`` SET_OPTION IB_PATH gave, if it did
        self.path: Optional[bytes] = None


class FakeKernel:
    """An in-process stand-in for ``/dev/infiniband/rdma_cm``."""

    legacy = False
    #: False: answer QUERY / QUERY_ROUTE as kernels before 5.8 did, without ``ibdev_index``
    #: (only the old, shorter reply is written; the rest of the buffer stays as it was)
    ibdev_index = True

    #: False: IPv6 (and AF_IB) groups on a RoCE device fail as the kernel read does (-ENOTSUPP,
    #: ``cma_iboe_join_multicast`` on RoCEv2); True: they join as IPv4 groups do
    roce_ipv6_multicast = False

    def __init__(self, net: Optional[FakeNet] = None, *, max_cmd: int = C.WRITE_CM_EVENT) -> None:
        self.net = net or FakeNet()
        self.max_cmd = max_cmd
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ctx: Dict[int, _Ctx] = {}
        self._events: List[_Queued] = []
        #: the multicast memberships of this fd's ids, by membership id
        self._mcs: Dict[int, _Mc] = {}
        _BY_FD[self._r] = self
        self._lock = threading.RLock()
        self._timers: List[threading.Timer] = []
        self.closed = False
        #: every command written: (cmd, in, out, body bytes) -- for tests
        self.log: List[Tuple[int, int, int, bytes]] = []
        self.abi_version = 4

    def find_device(self, index: Optional[int] = None, node_guid: Optional[int] = None) -> Optional[FakeDevice]:
        """The device lookup the core uses to name a QUERY reply's device (sysfs/netlink on a real host)."""
        for dev in self.net.local.values():
            if (index is not None and dev.index == index) or (index is None and node_guid and dev.node_guid == node_guid):
                return dev
        return None

    # -- what tests may do and ask
    @property
    def commands(self) -> List[Tuple[int, int, int, bytes]]:
        """Every command written, in order: ``(cmd, in, out, body bytes)``."""
        return self.log

    @property
    def ids(self) -> Dict[int, FakeId]:
        """The ids the fake holds, by handle."""
        with self._lock:
            return {
                h: FakeId(h, c.uid, c.ps, c.qp_type, c.state, c.src, c.dst, c.dev.name if c.dev else None, c.reported)
                for h, c in self._ctx.items()
            }

    def inject_event(self, handle: int, event: int, status: int = 0, *, uid: Optional[int] = None,
                     param: bytes = b"", owner: Optional[int] = None) -> None:
        """Queue an event for the id ``handle`` as the kernel would (``uid``: the id's, unless
        given -- an id the fake does not hold needs one); any type number, any status.  ``owner``:
        the id whose event it is for the kernel (a CONNECT_REQUEST's listener), ``handle`` if not given."""
        if uid is None:
            uid = self._get(handle).uid
        raw = CODECS["rdma_ucm_event_resp"].pack_dict(
            {"uid": uid, "id": handle, "event": int(event), "status": status & 0xFFFFFFFF, "param": param})
        with self._lock:
            self._push(handle, raw, owner)

    def incoming_request(self, listener: int) -> int:
        """A connection request arrives at the listening id ``listener``: the fake makes the
        request's id (uid 0, state CONNECT, as the kernel does) and queues CONNECT_REQUEST
        with the listener's uid.  Returns the new id's handle."""
        with self._lock:
            lst = self._get(listener)
            if lst.state != "LISTEN":
                raise ValueError("handle %d is not listening" % listener)
            ctx = self._new_ctx(0, lst.ps, lst.qp_type)
            ctx.state, ctx.dev = "CONNECT", lst.dev
            self.inject_event(ctx.handle, E.CONNECT_REQUEST, uid=lst.uid, owner=lst.handle)
        return ctx.handle

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        """The Transport's device naming: by this fake network's devices."""
        dev = self.find_device(index=index, node_guid=node_guid or None)
        if dev is None:
            return None, index
        return dev.name, (index if index is not None else dev.index)

    # -- the device's operations
    def reopen(self) -> "FakeKernel":
        """Another fd on the same (fake) device: a sync id's private channel, MIGRATE_ID's target."""
        return type(self)(self.net, max_cmd=self.max_cmd)

    def fileno(self) -> int:
        if self.closed:
            from ..errors import UsageError

            raise UsageError("the rdma_cm channel is closed")
        return self._r

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if _BY_FD.get(self._r) is self:
            del _BY_FD[self._r]
        self._mcs.clear()
        for t in self._timers:
            t.cancel()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError as e:  # EBADF: a test os.close()d it behind the channel's back
                if e.errno != errno.EBADF:
                    raise
        self._ctx.clear()

    def write(self, data: bytes) -> int:
        if self.closed:
            raise OSError(errno.EBADF, os.strerror(errno.EBADF))
        data = bytes(data)
        if len(data) < _HDR.size:
            raise _err(errno.EINVAL)
        cmd, size_in, size_out = _HDR.unpack_from(data)
        if cmd > self.max_cmd:
            raise _err(errno.EINVAL)
        if size_in + _HDR.size > len(data):
            raise _err(errno.EINVAL)
        if cmd == C.GET_OPTION:
            raise _err(errno.ENOSYS)
        body = data[_HDR.size : _HDR.size + size_in]
        self.log.append((cmd, size_in, size_out, body))
        handler = getattr(self, "_cmd_" + C(cmd).name.lower(), None)
        if handler is None:
            raise _err(errno.ENOSYS)
        queued = len(self._events)
        with self._lock:
            handler(body, size_out)
        if len(self._events) > queued and cmd != C.GET_EVENT:
            # As on the kernel, an event the command queued may be read by another thread
            # before write() returns to its caller: let the other threads run here.
            time.sleep(0)
        return len(data)

    # -- helpers
    def _push(self, handle: int, raw: bytes, owner: Optional[int] = None, mc: int = 0) -> None:
        """Queue one event (its byte on the pipe makes the fd readable)."""
        self._events.append(_Queued(handle, raw, handle if owner is None else owner, mc))
        os.write(self._w, b"e")

    def _new_ctx(self, uid: int, ps: int, qp_type: int) -> _Ctx:
        """A new id of this fd, with a handle no other id of the machine has."""
        ctx = _Ctx(_next_handle(), uid, ps, qp_type, self)
        self._ctx[ctx.handle] = ctx
        return ctx

    def _struct(self, name: str, body: bytes) -> Dict[str, Any]:
        c = CODECS[name]
        if len(body) < c.size:  # the real kernel would read past the buffer
            raise _err(errno.EFAULT)
        return c.unpack_dict(body)

    def _reply_size(self, name: str) -> int:
        return CODECS[name].size if self.ibdev_index else abi.MIN_REPLY[name]

    def _get(self, handle: int) -> _Ctx:
        ctx = self._ctx.get(handle)
        if ctx is None:
            raise _err(errno.ENOENT)
        return ctx

    def _reply(self, address: int, name: str, size_out: int, values: Dict[str, Any]) -> None:
        c = CODECS[name]
        if size_out < c.size:
            raise _err(errno.ENOSPC)
        if not address:
            raise _err(errno.EFAULT)
        write_to_address(address, c.pack_dict(values))

    def _queue(self, ctx: _Ctx, event: E, status: int = 0, delay_ms: int = 0) -> None:
        c = CODECS["rdma_ucm_event_resp"]
        raw = c.pack_dict({"uid": ctx.uid, "id": ctx.handle, "event": int(event), "status": status & 0xFFFFFFFF})

        def post() -> None:
            k = ctx.kernel or self  # the fd the id is on now (MIGRATE_ID may have moved it)
            with k._lock:
                if k.closed or k._ctx.get(ctx.handle) is not ctx:
                    return
                if event == E.ADDR_RESOLVED:
                    ctx.state = "ADDR_RESOLVED"
                elif event == E.ADDR_ERROR:
                    ctx.state = "ADDR_BOUND"
                elif event == E.ROUTE_RESOLVED:
                    ctx.state = "ROUTE_RESOLVED"
                if ctx.uid:
                    k._push(ctx.handle, raw)

        if delay_ms:
            t = threading.Timer(delay_ms / 1000.0, post)
            t.daemon = True
            self._timers.append(t)
            t.start()
        else:
            post()

    # -- commands
    def _cmd_create_id(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_create_id", body)
        if size_out < CODECS["rdma_ucm_create_id_resp"].size:
            raise _err(errno.ENOSPC)
        ps = f["ps"]
        if ps not in (abi.PortSpace.TCP, abi.PortSpace.UDP, abi.PortSpace.IPOIB, abi.PortSpace.IB):
            raise _err(errno.EINVAL)
        qp = {abi.PortSpace.TCP: 2, abi.PortSpace.UDP: 4, abi.PortSpace.IPOIB: 4}.get(ps, f["qp_type"])
        handle = self._new_ctx(f["uid"], ps, qp).handle
        try:
            self._reply(f["response"], "rdma_ucm_create_id_resp", size_out, {"id": handle})
        except OSError:
            del self._ctx[handle]
            raise

    def _discard_events(self, handle: int) -> None:
        """The queued but unread events of id ``handle`` go (its memberships' and, for a
        listener, its CONNECT_REQUESTs too), with their pipe bytes."""
        self._take_events(lambda q: q.handle == handle or q.owner == handle)

    def _take_events(self, which: Any) -> List[_Queued]:
        """Remove the queued events ``which(q)`` selects, with their pipe bytes; return them in order."""
        taken = [q for q in self._events if which(q)]
        if taken:
            self._events = [q for q in self._events if not which(q)]
            try:
                os.read(self._r, len(taken))
            except BlockingIOError:
                pass
        return taken

    def _cmd_destroy_id(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_destroy_id", body)
        if size_out < 4:
            raise _err(errno.ENOSPC)
        ctx = self._get(f["id"])
        del self._ctx[ctx.handle]
        self._discard_events(ctx.handle)
        # ucma_cleanup_multicast: the id's memberships go with it
        for mc_id in [m.id for m in self._mcs.values() if m.handle == ctx.handle]:
            del self._mcs[mc_id]
        self._reply(f["response"], "rdma_ucm_destroy_id_resp", size_out, {"events_reported": ctx.reported})

    def _bind(self, ctx: _Ctx, a: Address) -> None:
        if ctx.state != "IDLE":
            raise _err(errno.EINVAL)
        if a.family == AF_INET6 and a.ip.is_link_local and not a.scope_id:
            raise _err(errno.EINVAL)
        if not a.is_any and a.family != AF_IB:
            dev = self.net.local.get(str(a.ip))
            if dev is None:
                raise _err(errno.EADDRNOTAVAIL)
            ctx.dev = dev
        port = a.port or 40000 + ctx.handle % 25000
        ctx.src = Address(a.ip, port, a.scope_id, a.flowinfo, a.family, a.pkey, a.sid, a.sid_mask)
        ctx.state = "ADDR_BOUND"

    def _cmd_bind(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_bind", body)
        a = unpack_sockaddr(f["addr"]) if f["addr_size"] else None
        if f["reserved"] or not f["addr_size"] or a is None or a.size != f["addr_size"]:
            raise _err(errno.EINVAL)
        self._bind(self._get(f["id"]), a)

    def _cmd_bind_ip(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_bind_ip", body)
        a = unpack_sockaddr(f["addr"])
        if a is None or a.family == AF_IB:
            raise _err(errno.EINVAL)
        self._bind(self._get(f["id"]), a)

    def _resolve(self, ctx: _Ctx, src: Optional[Address], dst: Address, timeout_ms: int) -> None:
        if ctx.state == "IDLE":
            if src is not None and src.family != dst.family:
                raise _err(errno.EINVAL)
            self._bind(ctx, src if src is not None else Address(ipaddress.ip_address(0 if dst.family == AF_INET else "::"), 0, dst.scope_id))
        elif ctx.state != "ADDR_BOUND":
            raise _err(errno.EINVAL)
        assert ctx.src is not None
        if ctx.src.family != dst.family:
            raise _err(errno.EINVAL)
        d = str(dst.ip)
        if d in self.net.no_route:
            raise _err(errno.ENETUNREACH)
        ctx.dst = dst
        ctx.state = "ADDR_QUERY"
        if ctx.src.is_any:
            # the routing tables: a local destination is its own source
            chosen = d if (d in self.net.local or dst.ip.is_loopback) else self.net.default_src.get(dst.ip.version)
            if chosen is None:
                raise _err(errno.ENETUNREACH)
            ctx.src = Address(ipaddress.ip_address(chosen), ctx.src.port, ctx.src.scope_id)
        if ctx.dev is None:
            ctx.dev = self.net.local.get(str(ctx.src.ip))
            if ctx.dev is None and dst.ip.is_loopback and self.net.local:
                # loopback binds to the first device with an active port (cma_resolve_loopback)
                ctx.dev = next(iter(self.net.local.values()))
                ctx.src = Address(ctx.src.ip, ctx.src.port, ctx.src.scope_id, 0, 0)
                ctx.loopback = True
        if ctx.dev is None:
            self._queue(ctx, E.ADDR_ERROR, -errno.ENODEV)
        elif d in self.net.peers or d in self.net.local or dst.ip.is_loopback or dst.ip.is_multicast:
            # a multicast group needs no neighbour: its L2 address is mapped (how mckey resolves)
            self._queue(ctx, E.ADDR_RESOLVED)
        else:
            self._queue(ctx, E.ADDR_ERROR, -errno.ETIMEDOUT, delay_ms=max(timeout_ms, 1))

    def _cmd_resolve_addr(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_resolve_addr", body)
        src = unpack_sockaddr(f["src_addr"]) if f["src_size"] else None
        dst = unpack_sockaddr(f["dst_addr"]) if f["dst_size"] else None
        if f["reserved"] or dst is None or dst.size != f["dst_size"] or (src is not None and src.size != f["src_size"]):
            raise _err(errno.EINVAL)
        self._resolve(self._get(f["id"]), src, dst, f["timeout_ms"])

    def _cmd_resolve_ip(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_resolve_ip", body)
        src = unpack_sockaddr(f["src_addr"])
        dst = unpack_sockaddr(f["dst_addr"])
        if dst is None or dst.family == AF_IB or (src is not None and src.family == AF_IB):
            raise _err(errno.EINVAL)
        self._resolve(self._get(f["id"]), src, dst, f["timeout_ms"])

    def _cmd_resolve_route(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_resolve_route", body)
        ctx = self._get(f["id"])
        if ctx.dev is None or ctx.state != "ADDR_RESOLVED" or not f["timeout_ms"]:
            raise _err(errno.EINVAL)
        if ctx.loopback:  # no netdev to route over (the lab's 6.1 answers ENODEV)
            raise _err(errno.ENODEV)
        ctx.state = "ROUTE_QUERY"
        self._set_route(ctx)
        self._queue(ctx, E.ROUTE_RESOLVED)

    @staticmethod
    def _set_route(ctx: _Ctx) -> None:
        """The path a resolved route takes on RoCE: its traffic class is the id's TOS; an
        ACK_TIMEOUT set before makes its packet life time timeout - 1 (cm-notes.md section 5)."""
        ctx.route_tc = ctx.tos
        ctx.route_plt = ctx.ack_timeout - 1 if ctx.ack_timeout else PACKET_LIFETIME

    @staticmethod
    def _device_fields(dev: Optional[FakeDevice]) -> Tuple[int, int, int, int]:
        """(node_guid, port_num, pkey, ibdev_index) of a query reply; an unbound id has none."""
        return (dev.node_guid, dev.port_num, dev.pkey, dev.index) if dev else (0, 0, 0, 0xFFFFFFFF)

    def _addr_reply(self, ctx: _Ctx, gid: bool) -> Dict[str, Any]:
        dev = ctx.dev
        guid, port, pkey, index = self._device_fields(dev)
        out: Dict[str, Any] = {"node_guid": guid, "port_num": port, "pkey": pkey, "ibdev_index": index}
        for key, a in (("src", ctx.src), ("dst", ctx.dst)):
            if a is None:
                continue
            if gid and dev is not None and a.family != AF_IB:
                g = Address.ib(self.net.gid_of(a.ip, dev), pkey=dev.pkey, sid=(ctx.ps << 16) + a.port)
                a = g
            out[key + "_size"] = a.size
            out[key + "_addr"] = a.pack_storage()
        return out

    def _cmd_query(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_query", body)
        ctx = self._get(f["id"])
        opt = f["option"]
        if opt in (abi.QueryOption.ADDR, abi.QueryOption.GID):
            if size_out < abi.MIN_REPLY["rdma_ucm_query_addr_resp"]:
                raise _err(errno.ENOSPC)
            c = CODECS["rdma_ucm_query_addr_resp"]
            raw = c.pack_dict(self._addr_reply(ctx, opt == abi.QueryOption.GID))
            write_to_address(f["response"], raw[: min(size_out, self._reply_size("rdma_ucm_query_addr_resp"))])
        elif opt == abi.QueryOption.PATH:
            if size_out < 8:
                raise _err(errno.ENOSPC)
            n = 1 if ctx.state == "ROUTE_RESOLVED" and (size_out - 8) >= 72 else 0
            raw = struct.pack("<II", n, 0)
            if n and ctx.path is not None:  # the path SET_OPTION IB_PATH gave
                raw += ctx.path
            elif n and ctx.dev is not None and ctx.src is not None and ctx.dst is not None:
                rec = struct.pack(
                    ">Q16s16sHHIBBHHBBBB6x",
                    0,
                    self.net.gid_of(ctx.dst.ip, ctx.dev).packed,
                    self.net.gid_of(ctx.src.ip, ctx.dev).packed,
                    0,
                    0,
                    (1 << 31) | 64,
                    ctx.route_tc,
                    (1 << 7) | 1,
                    ctx.dev.pkey,
                    0,
                    (2 << 6) | 3,
                    (2 << 6) | 3,
                    (2 << 6) | ctx.route_plt,
                    0,
                )
                flags = abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL
                raw += struct.pack("<II", int(flags), 0) + rec
            write_to_address(f["response"], raw)
        elif opt == abi.QueryOption.IB_SERVICE and self.max_cmd >= C.RESOLVE_IB_SERVICE:
            # 6.17+: the service records of the last RESOLVE_IB_SERVICE; the fake's SA finds none,
            # and a kernel with none answers ENODATA (seen on 7.2)
            raise _err(errno.ENODATA)
        else:
            raise _err(errno.ENOSYS)

    def _cmd_query_route(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_query", body)
        ctx = self._get(f["id"])
        if size_out < abi.MIN_REPLY["rdma_ucm_query_route_resp"]:
            raise _err(errno.ENOSPC)
        c = CODECS["rdma_ucm_query_route_resp"]
        guid, port, pkey, index = self._device_fields(ctx.dev)
        vals: Dict[str, Any] = {"node_guid": guid, "port_num": port, "ibdev_index": index, "ib_route[0].pkey": pkey}
        for key, a in (("src_addr", ctx.src), ("dst_addr", ctx.dst)):
            if a is not None:
                vals[key] = a.pack_in6()
        raw = c.pack_dict(vals)
        write_to_address(f["response"], raw[: min(size_out, self._reply_size("rdma_ucm_query_route_resp"))])

    def _cmd_get_event(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_get_event", body)
        if size_out < abi.MIN_REPLY["rdma_ucm_event_resp"]:
            raise _err(errno.ENOSPC)
        if not self._events:
            raise _err(errno.EAGAIN)
        q = self._events.pop(0)
        os.read(self._r, 1)
        # ucma_get_event counts the event on the id it belongs to (a CONNECT_REQUEST's is its
        # listener's, uevent->ctx), and on its membership too
        ctx = self._ctx.get(q.owner)
        if ctx is not None:
            ctx.reported += 1
        mc = self._mcs.get(q.mc) if q.mc else None
        if mc is not None:
            mc.reported += 1
        write_to_address(f["response"], q.raw[: min(size_out, len(q.raw))])

    def _cmd_listen(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_listen", body)
        ctx = self._get(f["id"])
        if ctx.state not in ("IDLE", "ADDR_BOUND"):
            raise _err(errno.EINVAL)
        ctx.state = "LISTEN"

    def _cmd_connect(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_connect", body)
        ctx = self._get(f["id"])
        if ctx.dev is None or ctx.state != "ROUTE_RESOLVED":
            raise _err(errno.EINVAL)
        ctx.state = "CONNECT"
        self._queue(ctx, E.REJECTED, int(abi.RejectReason.CONSUMER_DEFINED))

    # -- SET_OPTION (ucma_set_option, ucma_set_option_id, ucma_set_ib_path)
    def _cmd_set_option(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_set_option", body)
        n = f["optlen"]
        if n > KMALLOC_MAX_SIZE:  # before the id is looked up
            raise _err(errno.EINVAL)
        ctx = self._get(f["id"])
        if n and not f["optval"]:  # memdup_user of the user's buffer
            raise _err(errno.EFAULT)
        value = ctypes.string_at(f["optval"], n) if n else b""
        level, name = f["level"], f["optname"]
        if level == abi.OptionLevel.ID:
            self._set_option_id(ctx, name, value)
        elif level == abi.OptionLevel.IB and name == abi.OptionIb.PATH:
            self._set_ib_path(ctx, value)
        else:  # an unknown level, or an unknown name at level IB
            raise _err(errno.ENOSYS)

    @staticmethod
    def _set_option_id(ctx: _Ctx, name: int, value: bytes) -> None:
        O = abi.OptionId
        if name in (O.TOS, O.ACK_TIMEOUT):  # u8
            if len(value) != 1:
                raise _err(errno.EINVAL)
            if name == O.TOS:  # rdma_set_service_type: any state; the route takes it when resolved
                ctx.tos = value[0]
                return
            if ctx.qp_type != abi.QpType.RC:  # rdma_set_ack_timeout
                raise _err(errno.EINVAL)
            ctx.ack_timeout = value[0]
            return
        if name in (O.REUSEADDR, O.AFONLY):  # int
            if len(value) != 4:
                raise _err(errno.EINVAL)
            on = struct.unpack("=i", value)[0] != 0
            if name == O.REUSEADDR:  # rdma_set_reuseaddr: setting it is always allowed, clearing it in IDLE only
                if not on and ctx.state != "IDLE":
                    raise _err(errno.EINVAL)
                ctx.reuseaddr = on
            else:  # rdma_set_afonly: before the id listens or resolves
                if ctx.state not in ("IDLE", "ADDR_BOUND"):
                    raise _err(errno.EINVAL)
                ctx.afonly = on
            return
        raise _err(errno.ENOSYS)

    def _set_ib_path(self, ctx: _Ctx, value: bytes) -> None:
        """An array of ``ib_path_rec_data``; the one flagged GMP|PRIMARY|BIDIRECTIONAL (0x2b)
        becomes the route, and the kernel itself reports ROUTE_RESOLVED."""
        size = _PATH_DATA.size
        if len(value) % size:
            raise _err(errno.EINVAL)
        want = int(abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL)
        entry = None
        for off in range(0, len(value), size):
            if _PATH_DATA.unpack_dict(value[off : off + size])["flags"] == want:
                entry = value[off : off + size]
                break
        if entry is None or ctx.dev is None:
            raise _err(errno.EINVAL)
        if ctx.state != "ADDR_RESOLVED":  # rdma_set_ib_path: ADDR_RESOLVED -> ROUTE_QUERY
            raise _err(errno.EINVAL)
        if ctx.loopback:  # RoCE: the path needs the id's netdev (cma_iboe_set_path_rec_l2_fields)
            raise _err(errno.ENODEV)
        rec = _SA_PATH.unpack_dict(_PATH_DATA.unpack_dict(entry)["path_rec"])
        ctx.path = entry
        ctx.route_tc = rec["tclass"]
        ctx.route_plt = rec["packet_life_time"] & 0x3F
        ctx.state = "ROUTE_QUERY"
        self._queue(ctx, E.ROUTE_RESOLVED)  # ucma_set_ib_path calls ucma_event_handler itself

    # -- INIT_QP_ATTR (ucma_init_qp_attr, rdma_init_qp_attr, cma_ib_init_qp_attr, ib_cm_init_qp_attr)
    def _cmd_init_qp_attr(self, body: bytes, size_out: int) -> None:
        if size_out < _QP_ATTR.size:
            raise _err(errno.ENOSPC)
        f = self._struct("rdma_ucm_init_qp_attr", body)
        state = f["qp_state"]
        if state > QpState.ERR:
            raise _err(errno.EINVAL)
        ctx = self._get(f["id"])
        if ctx.dev is None:  # ucma_get_ctx_dev
            raise _err(errno.EINVAL)
        attr = self._qp_attr(ctx, QpState(state))
        attr["qp_state"] = state
        if not f["response"]:
            raise _err(errno.EFAULT)
        write_to_address(f["response"], _QP_ATTR.pack_dict(attr))

    def _qp_attr(self, ctx: _Ctx, state: QpState) -> Dict[str, Any]:
        """What ``rdma_init_qp_attr`` fills in.  A UD id, or an id without an IB CM cm_id yet
        (no CONNECT, no request), gets ``cma_ib_init_qp_attr``'s attributes whatever the
        state: pkey index and port, and the qkey (UD, mask 0x71) or no access rights (RC,
        mask 0x39).  A connection's attributes are the IB CM's (:meth:`_cm_qp_attr`)."""
        dev = ctx.dev
        assert dev is not None
        M = QpAttrMask
        out: Dict[str, Any] = {"pkey_index": 0, "port_num": dev.port_num}
        if ctx.qp_type == abi.QpType.UD:
            out.update(qp_attr_mask=int(M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY), qkey=UDP_QKEY)
            return out
        cm = self._cm_qp_attr(ctx, state)
        if cm is not None:
            return cm
        out.update(qp_attr_mask=int(M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS), qp_access_flags=0)
        return out

    def _cm_qp_attr(self, ctx: _Ctx, state: QpState) -> Optional[Dict[str, Any]]:
        """The IB CM's attributes of the id's connection, or None if it has no cm_id.  Alone,
        the fake rejects every CONNECT at once: the cm_id it leaves is idle, and
        ``ib_cm_init_qp_attr`` refuses an idle cm_id (EINVAL)."""
        if ctx.state in ("CONNECT", "DISCONNECT"):
            raise _err(errno.EINVAL)
        return None

    def _connection_qp_attr(self, ctx: _Ctx, state: QpState, *, cm_state: str, remote_qpn: int, remote_psn: int,
                            responder_resources: int, initiator_depth: int, retry_count: int,
                            rnr_retry_count: int, traffic_class: int) -> Dict[str, Any]:
        """``ib_cm_init_qp_attr`` for a connection in ``cm_state``, with the overrides of
        ``rdma_init_qp_attr`` (RTR ``rq_psn`` = the id's own PSN; RTS ``timeout`` = the
        ACK_TIMEOUT option when set).  The numbers are the lab's (cm-notes.md section 1):
        RTR mask 0x129181, MTU 3, the AH to the peer's GID (index 1, hop limit 64, global);
        RTS mask 0x12e01, timeout 19."""
        dev, dst = ctx.dev, ctx.dst
        assert dev is not None and dst is not None
        M = QpAttrMask
        live = ("REQ_RCVD", "REP_SENT", "REP_RCVD", "ESTABLISHED")
        out: Dict[str, Any] = {}
        if state == QpState.INIT and cm_state in ("REQ_SENT",) + live:
            # cm_init_qp_init_attr: remote write always; read and atomics if the id takes reads
            access = ACCESS_REMOTE_WRITE
            if responder_resources:
                access |= ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC
            out.update(qp_attr_mask=int(M.STATE | M.ACCESS_FLAGS | M.PKEY_INDEX | M.PORT), qp_access_flags=access,
                       pkey_index=0, port_num=dev.port_num)
        elif state == QpState.RTR and cm_state in live:
            out.update(qp_attr_mask=int(M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC
                                        | M.MIN_RNR_TIMER),
                       path_mtu=PATH_MTU_1024, dest_qp_num=remote_qpn, rq_psn=ctx.psn,
                       max_dest_rd_atomic=responder_resources, min_rnr_timer=0)
            out.update({"ah_attr.grh.dgid": self.net.gid_of(dst.ip, dev).packed, "ah_attr.grh.sgid_index": SGID_INDEX,
                        "ah_attr.grh.hop_limit": HOP_LIMIT, "ah_attr.grh.traffic_class": traffic_class,
                        "ah_attr.is_global": 1, "ah_attr.port_num": dev.port_num})
        elif state == QpState.RTS and cm_state in live:
            out.update(qp_attr_mask=int(M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY
                                        | M.MAX_QP_RD_ATOMIC),
                       sq_psn=remote_psn, retry_cnt=retry_count, rnr_retry=rnr_retry_count,
                       max_rd_atomic=initiator_depth,
                       timeout=ctx.ack_timeout if ctx.ack_timeout is not None else DEFAULT_TIMEOUT)
        else:  # another state, or a cm_id that is not (or no longer) connecting
            raise _err(errno.EINVAL)
        return out

    # -- NOTIFY (ucma_notify, rdma_notify)
    def _cmd_notify(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_notify", body)
        self._get(f["id"])
        # without a device, EINVAL; with one, rdma_notify needs a cm_id in a state that takes the
        # event -- and alone the fake has none: every CONNECT was rejected at once (an idle cm_id)
        raise _err(errno.EINVAL)

    # -- multicast (ucma_process_join, rdma_join_multicast, cma_iboe_join_multicast, ucma_leave_multicast)
    def _cmd_join_ip_mcast(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_join_ip_mcast", body)
        a = _sockaddr(f["addr"])
        if a is None or a.family == AF_IB:  # rdma_addr_size_in6: nothing but IPv4 and IPv6 fit
            raise _err(errno.EINVAL)
        self._join(f["response"], f["uid"], f["id"], a, int(abi.McJoinFlag.FULLMEMBER), size_out)

    def _cmd_join_mcast(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_join_mcast", body)
        a = _sockaddr(f["addr"])
        if a is None:  # rdma_addr_size_kss: an unknown family
            raise _err(errno.EINVAL)
        if size_out < CODECS["rdma_ucm_create_id_resp"].size:
            raise _err(errno.ENOSPC)
        if f["addr_size"] != a.size:
            raise _err(errno.EINVAL)
        self._join(f["response"], f["uid"], f["id"], a, f["join_flags"], size_out)

    def _join(self, response: int, uid: int, handle: int, group: Address, flags: int, size_out: int) -> None:
        if size_out < CODECS["rdma_ucm_create_id_resp"].size:
            raise _err(errno.ENOSPC)
        if flags not in (abi.McJoinFlag.FULLMEMBER, abi.McJoinFlag.SENDONLY_FULLMEMBER):
            raise _err(errno.EINVAL)
        ctx = self._get(handle)
        dev = ctx.dev
        if dev is None or ctx.state not in ("ADDR_BOUND", "ADDR_RESOLVED") or ctx.qp_type != abi.QpType.UD:
            raise _err(errno.EINVAL)  # ucma_get_ctx_dev; rdma_join_multicast's state and UD checks
        roce = dev.link_layer != "InfiniBand"
        if roce and group.family != AF_INET and not self.roce_ipv6_multicast:
            raise _err(ENOTSUPP)  # cma_iboe_join_multicast on RoCEv2: IPv4 groups only
        mc = _Mc(_next_mc(), handle, uid, group, flags)
        if not response:
            raise _err(errno.EFAULT)
        write_to_address(response, CODECS["rdma_ucm_create_id_resp"].pack_dict({"id": mc.id}))
        self._mcs[mc.id] = mc
        # RoCE joins without an SA: the event is made at once (cm-notes.md section 4)
        if ctx.uid:
            self._push(ctx.handle, self._join_event(ctx, mc), mc=mc.id)

    def _join_event(self, ctx: _Ctx, mc: _Mc) -> bytes:
        """MULTICAST_JOIN as ``cma_make_mc_event`` makes it: under the membership's uid and id,
        the ud arm with QPN 0xFFFFFF, the qkey, the AH to the group's MGID; no private data."""
        dev = ctx.dev
        assert dev is not None
        if dev.link_layer == "InfiniBand":
            # an SA join, modelled as answered at once: the IPoIB mapping of the group (inferred)
            ip = mc.addr.ip
            mgid = ip.packed if ip.version == 6 else (b"\xff\x12\x40\x01\xff\xff" + bytes(6) + ip.packed)
            hop = 0
        else:
            mgid = self.net.gid_of(mc.addr.ip, dev).packed if mc.addr.family != AF_IB else mc.addr.ip.packed
            hop = HOP_LIMIT
        ud = CODECS["rdma_ucm_ud_param"].pack_dict({
            "qp_num": 0xFFFFFF, "qkey": UDP_QKEY, "ah_attr.grh.dgid": mgid, "ah_attr.grh.hop_limit": hop,
            "ah_attr.grh.sgid_index": SGID_INDEX, "ah_attr.is_global": 1, "ah_attr.port_num": dev.port_num})
        return CODECS["rdma_ucm_event_resp"].pack_dict(
            {"uid": mc.uid, "id": mc.id, "event": int(E.MULTICAST_JOIN), "status": 0, "param": ud})

    def _cmd_leave_mcast(self, body: bytes, size_out: int) -> None:
        if size_out < CODECS["rdma_ucm_destroy_id_resp"].size:
            raise _err(errno.ENOSPC)
        f = self._struct("rdma_ucm_destroy_id", body)  # LEAVE_MCAST's body is DESTROY_ID's
        mc = self._mcs.pop(f["id"], None)
        if mc is None:
            if any(f["id"] in k._mcs for k in list(_BY_FD.values()) if k is not self):
                raise _err(errno.EINVAL)  # a membership of an id of another fd
            raise _err(errno.ENOENT)
        self._take_events(lambda q: q.mc == mc.id)  # ucma_cleanup_mc_events
        self._reply(f["response"], "rdma_ucm_destroy_id_resp", size_out, {"events_reported": mc.reported})

    # -- MIGRATE_ID (ucma_migrate_id), written on the new fd
    def _cmd_migrate_id(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_migrate_id", body)
        fd, handle = f["fd"], f["id"]
        old = _BY_FD.get(fd)
        if old is None or old.closed:
            try:
                os.fstat(fd)
            except OSError:
                raise _err(errno.ENOENT) from None  # fdget: no such fd
            raise _err(errno.EINVAL)  # an fd, but no rdma_cm
        if not self._can_migrate_from(old):
            raise _err(errno.EINVAL)  # an rdma_cm fd of another (fake) machine
        with old._lock:
            ctx = old._ctx.get(handle)
            if ctx is None:
                raise _err(errno.EINVAL if any(handle in k._ctx for k in list(_BY_FD.values())) else errno.ENOENT)
            if not f["response"]:
                raise _err(errno.EFAULT)
            # the id, every unread event of it (its memberships' and a listener's requests
            # included), and its memberships go to this fd; the events keep their order, after
            # the ones already queued here
            events = old._take_events(lambda q: q.owner == handle)
            moved = [handle] + [q.handle for q in events if q.handle != handle and q.handle in old._ctx and not q.mc]
            for h in moved:
                c = old._ctx.pop(h)
                c.kernel = self
                self._ctx[h] = c
            for mc_id in [m.id for m in old._mcs.values() if m.handle == handle]:
                self._mcs[mc_id] = old._mcs.pop(mc_id)
            self._adopt(old, moved)
            for q in events:
                self._push(q.handle, q.raw, q.owner, q.mc)
        write_to_address(f["response"], CODECS["rdma_ucm_migrate_resp"].pack_dict({"events_reported": ctx.reported}))

    def _can_migrate_from(self, old: "FakeKernel") -> bool:
        """Whether ``old`` is an fd of this fd's machine: every lone fake is (a fabric's kernel
        says which host it is on)."""
        return self._machine() is old._machine()

    def _machine(self) -> object:
        return FakeKernel

    def _adopt(self, old: "FakeKernel", handles: List[int]) -> None:
        """What else of the ids ``handles`` the fd ``old`` held moves with them (nothing, alone)."""

    # -- RESOLVE_IB_SERVICE (6.17+: rdma_resolve_ib_service) and WRITE_CM_EVENT (6.17+)
    def _cmd_resolve_ib_service(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_resolve_ib_service", body)
        ctx = self._get(f["id"])
        if ctx.dev is None:  # ucma_get_ctx_dev
            raise _err(errno.EINVAL)
        if ctx.dev.link_layer != "InfiniBand":  # rdma_cap_ib_sa: RoCE has no SA
            raise _err(errno.EOPNOTSUPP)
        if ctx.state != "ADDR_BOUND":
            raise _err(errno.EINVAL)
        # the fake's fabric has no SA holding service records: the query finds none
        ctx.state = "ADDRINFO_QUERY"
        self._queue_addrinfo_error(ctx)

    def _queue_addrinfo_error(self, ctx: _Ctx) -> None:
        ctx.state = "ADDR_BOUND"  # ADDRINFO_ERROR takes the id back to ADDR_BOUND
        if ctx.uid:
            self._push(ctx.handle, CODECS["rdma_ucm_event_resp"].pack_dict(
                {"uid": ctx.uid, "id": ctx.handle, "event": int(E.ADDRINFO_ERROR),
                 "status": -errno.ENOENT & 0xFFFFFFFF}))

    def _cmd_write_cm_event(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_write_cm_event", body)
        if f["event"] not in (E.USER, E.INTERNAL):
            raise _err(errno.EINVAL)
        ctx = self._get(f["id"])
        # the event is queued on the id's fd under its uid and handle, with the status given and
        # the u64 ``arg`` of the command in ``param.arg32`` (the union's first 8 bytes)
        param = f["param"][:8]
        self._push(ctx.handle, CODECS["rdma_ucm_event_resp"].pack_dict(
            {"uid": ctx.uid, "id": ctx.handle, "event": f["event"], "status": f["status"], "param": param}))


def _sockaddr(blob: bytes) -> Optional[Address]:
    """The sockaddr at the start of ``blob``; None for family 0 or a family the kernel does not
    know (``rdma_addr_size`` 0)."""
    try:
        return unpack_sockaddr(blob)
    except DecodeError:
        return None


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))
