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

Alone, the fake is one host whose CONNECT is always rejected (28).  Several hosts that
connect to each other, listen, accept, reject and disconnect as the kernel does for ids
without a QP are :class:`pyrdmacm.testing.FakeFabric`'s (:mod:`pyrdmacm.testing.fabric`).
"""

from __future__ import annotations

import errno
import ipaddress
import os
import struct
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

from .. import abi
from .._codec import CODECS
from .._device import write_to_address
from ..addr import AF_IB, AF_INET, AF_INET6, Address, unpack_sockaddr

C = abi.UserCmCmd
E = abi.CmEventType

_HDR = CODECS["rdma_ucm_cmd_hdr"]


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
    __slots__ = ("uid", "ps", "qp_type", "state", "src", "dst", "dev", "reported", "handle", "loopback")

    def __init__(self, handle: int, uid: int, ps: int, qp_type: int) -> None:
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


class FakeKernel:
    """An in-process stand-in for ``/dev/infiniband/rdma_cm``."""

    legacy = False
    #: False: answer QUERY / QUERY_ROUTE as kernels before 5.8 did, without ``ibdev_index``
    #: (only the old, shorter reply is written; the rest of the buffer stays as it was)
    ibdev_index = True

    def __init__(self, net: Optional[FakeNet] = None, *, max_cmd: int = C.WRITE_CM_EVENT) -> None:
        self.net = net or FakeNet()
        self.max_cmd = max_cmd
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ctx: Dict[int, _Ctx] = {}
        self._next = 1
        self._events: List[Tuple[int, bytes]] = []
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
                     param: bytes = b"") -> None:
        """Queue an event for the id ``handle`` as the kernel would (``uid``: the id's, unless
        given -- an id the fake does not hold needs one); any type number, any status."""
        if uid is None:
            uid = self._get(handle).uid
        raw = CODECS["rdma_ucm_event_resp"].pack_dict(
            {"uid": uid, "id": handle, "event": int(event), "status": status & 0xFFFFFFFF, "param": param})
        with self._lock:
            self._events.append((handle, raw))
            os.write(self._w, b"e")

    def incoming_request(self, listener: int) -> int:
        """A connection request arrives at the listening id ``listener``: the fake makes the
        request's id (uid 0, state CONNECT, as the kernel does) and queues CONNECT_REQUEST
        with the listener's uid.  Returns the new id's handle."""
        with self._lock:
            lst = self._get(listener)
            if lst.state != "LISTEN":
                raise ValueError("handle %d is not listening" % listener)
            handle = self._next
            self._next += 1
            ctx = self._ctx[handle] = _Ctx(handle, 0, lst.ps, lst.qp_type)
            ctx.state, ctx.dev = "CONNECT", lst.dev
            self.inject_event(handle, E.CONNECT_REQUEST, uid=lst.uid)
        return handle

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        """The Transport's device naming: by this fake network's devices."""
        dev = self.find_device(index=index, node_guid=node_guid or None)
        if dev is None:
            return None, index
        return dev.name, (index if index is not None else dev.index)

    def direct_fd(self) -> int:
        return -1  # commands go through write(): this fake decodes them

    # -- the device's operations
    def fileno(self) -> int:
        if self.closed:
            from ..errors import UsageError

            raise UsageError("the rdma_cm channel is closed")
        return self._r

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
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
            with self._lock:
                if self.closed or ctx.handle not in self._ctx:
                    return
                if event == E.ADDR_RESOLVED:
                    ctx.state = "ADDR_RESOLVED"
                elif event == E.ADDR_ERROR:
                    ctx.state = "ADDR_BOUND"
                elif event == E.ROUTE_RESOLVED:
                    ctx.state = "ROUTE_RESOLVED"
                if ctx.uid:
                    self._events.append((ctx.handle, raw))
                    os.write(self._w, b"e")

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
        handle = self._next
        self._next += 1
        self._ctx[handle] = _Ctx(handle, f["uid"], ps, qp)
        try:
            self._reply(f["response"], "rdma_ucm_create_id_resp", size_out, {"id": handle})
        except OSError:
            del self._ctx[handle]
            raise

    def _discard_events(self, handle: int) -> None:
        """The queued but unread events of id ``handle`` go, with their pipe bytes."""
        kept = [e for e in self._events if e[0] != handle]
        dropped = len(self._events) - len(kept)
        self._events = kept
        if dropped:
            try:
                os.read(self._r, dropped)
            except BlockingIOError:
                pass

    def _cmd_destroy_id(self, body: bytes, size_out: int) -> None:
        f = self._struct("rdma_ucm_destroy_id", body)
        if size_out < 4:
            raise _err(errno.ENOSPC)
        ctx = self._get(f["id"])
        del self._ctx[ctx.handle]
        self._discard_events(ctx.handle)
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
        port = a.port or 40000 + ctx.handle
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
        elif d in self.net.peers or d in self.net.local or dst.ip.is_loopback:
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
        self._queue(ctx, E.ROUTE_RESOLVED)

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
            if n and ctx.dev is not None and ctx.src is not None and ctx.dst is not None:
                rec = struct.pack(
                    ">Q16s16sHHIBBHHBBBB6x",
                    0,
                    self.net.gid_of(ctx.dst.ip, ctx.dev).packed,
                    self.net.gid_of(ctx.src.ip, ctx.dev).packed,
                    0,
                    0,
                    (1 << 31) | 64,
                    0,
                    (1 << 7) | 1,
                    ctx.dev.pkey,
                    0,
                    (2 << 6) | 3,
                    (2 << 6) | 3,
                    (2 << 6) | 16,
                    0,
                )
                flags = abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL
                raw += struct.pack("<II", int(flags), 0) + rec
            write_to_address(f["response"], raw)
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
        handle, raw = self._events.pop(0)
        os.read(self._r, 1)
        ctx = self._ctx.get(handle)
        if ctx is not None:
            ctx.reported += 1
        write_to_address(f["response"], raw[: min(size_out, len(raw))])

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


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))
