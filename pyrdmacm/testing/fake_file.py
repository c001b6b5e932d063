"""The fake kernel's transport and registry: the fd, ``ucma_write``'s checks, the event queue,
and the machine's tables of ids and fds.

Theory of operation
-------------------
:class:`KernelCore` is a :class:`~pyrdmacm.core.device.Transport` as
:class:`~pyrdmacm.core.device.KernelDevice` is -- ``write``, ``fileno``, ``close`` -- so that an
:class:`~pyrdmacm.EventChannel` cannot tell the two apart.  ``write`` decodes the real
``rdma_ucm_cmd_hdr``, validates it the way ``ucma_write`` does (same order, same errno) and
hands the body to the command's handler, ``_cmd_<name>`` (the handlers are the fake
kernel's other modules').  A handler answers by writing the real reply struct to the
address in the command's ``response`` field, as ``copy_to_user`` would, or raises the
kernel's errno.

Events are real ``rdma_ucm_event_resp`` structs in a queue; a pipe carries one byte per
queued event, so ``fileno()`` polls readable exactly when the kernel's fd would.  Events due
later (an ARP time-out) are queued by a timer, on the fd that holds the id by then.

A :class:`Machine` is the kernel's tables of one host: which fd holds each id (the kernel's
``ctx_table`` is the machine's, so an id keeps its handle when MIGRATE_ID moves it, and an
id named on another fd than its own is EINVAL, not ENOENT) and its fds.  Every lone fake of a
process is one machine; a fabric's host is one.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import time
import weakref
from typing import Any, Callable, Dict, List, Optional, Tuple

from ..abi import structs as _structs
from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ..errors import UsageError
from ._ibcm import IbCmId, IbCmState
from .fake_ids import FakeId, IdContext, Membership, Queued, command_fields, kernel_error
from .fake_net import FakeDevice, FakeNet

__all__ = ["Machine", "LONE", "KernelCore", "fake_for_fd"]

C = abi.UserCmCmd
E = abi.CmEventType
S = abi.RdmaCmState

_HDR = CODECS["rdma_ucm_cmd_hdr"]
_EVENT = CODECS["rdma_ucm_event_resp"]

#: The kernel's id and multicast handles come from two tables of the whole machine
#: (``ctx_table``, ``multicast_table``), not one per fd.  The fake's are counters shared by
#: all its kernels (unique across machines too, which no test can tell from the kernel's).
next_handle = itertools.count(1).__next__
next_mc = itertools.count(1).__next__
#: The open fakes by the fd number they poll on: what MIGRATE_ID's ``fd`` names.
_BY_FD: "weakref.WeakValueDictionary[int, KernelCore]" = weakref.WeakValueDictionary()
#: The newest kernel without RESOLVE_IB_SERVICE among the lab's: the rules a fake whose
#: command table stops before it follows.
_BEFORE_IB_SERVICE = max(v for v in kernel_rules.LAB_KERNELS.values() if v < (6, 17))


def fake_for_fd(fd: int) -> "Optional[KernelCore]":
    """The open fake that polls on ``fd`` (as ``fdget`` finds a file), or None."""
    return _BY_FD.get(fd)


class Machine:
    """The tables of one machine's rdma_cm: which fd holds each id, and its fds."""

    def __init__(self) -> None:
        #: handle -> the fd (kernel) holding the id
        self.holders: "weakref.WeakValueDictionary[int, KernelCore]" = weakref.WeakValueDictionary()
        #: the machine's open fds
        self.fds: "weakref.WeakSet[KernelCore]" = weakref.WeakSet()

    def holder(self, handle: int) -> "Optional[KernelCore]":
        """The open fd that holds id ``handle``, or None."""
        k = self.holders.get(handle)
        return k if k is not None and not k.closed else None


#: the machine of every fake that is not a fabric's host's
LONE = Machine()


class KernelCore:
    """What every fake kernel is: an fd (``write``, ``fileno``, ``close``), its ids, its event
    queue and its memberships, on a :class:`Machine`.  The commands are the subclasses'."""

    legacy = False
    #: False: answer QUERY / QUERY_ROUTE as kernels before 5.8 did, without ``ibdev_index``
    #: (only the old, shorter reply is written; the rest of the buffer stays as it was)
    ibdev_index = True
    #: False: IPv6 (and AF_IB) groups on a RoCE device fail as the kernel read does (-ENOTSUPP,
    #: ``cma_iboe_join_multicast`` on RoCEv2); True: they join as IPv4 groups do
    roce_ipv6_multicast = False

    def __init__(self, net: Optional[FakeNet] = None, *, max_cmd: int = C.WRITE_CM_EVENT,
                 version: Optional[kernel_rules.Version] = None, machine: Optional[Machine] = None) -> None:
        self.net = net or FakeNet()
        self.max_cmd = max_cmd
        #: the kernel version whose rules (pyrdmacm.kernel_rules) the fake follows: by default
        #: the newest of the lab's that has the commands up to ``max_cmd``
        self.version = version or (kernel_rules.NEWEST if max_cmd >= C.RESOLVE_IB_SERVICE else _BEFORE_IB_SERVICE)
        self.machine = machine or LONE
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._ctx: Dict[int, IdContext] = {}
        self._events: List[Queued] = []
        #: the multicast memberships of this fd's ids, by membership id
        self._mcs: Dict[int, Membership] = {}
        #: the IB CM id of each id that has one (it connected, or is a request), by handle
        self._cms: Dict[int, IbCmId] = {}
        _BY_FD[self._r] = self
        self.machine.fds.add(self)
        self._lock = threading.RLock()
        self._timers: List[threading.Timer] = []
        self.closed = False
        #: every command written: (cmd, in, out, body bytes) -- for tests
        self.log: List[Tuple[int, int, int, bytes]] = []
        self.abi_version = 4

    # -- what tests may do and ask
    @property
    def commands(self) -> List[Tuple[int, int, int, bytes]]:
        """Every command written, in order: ``(cmd, in, out, body bytes)``."""
        return self.log

    @property
    def ids(self) -> Dict[int, FakeId]:
        """The ids the fake holds, by handle."""
        with self._lock:
            return {h: c.snapshot() for h, c in self._ctx.items()}

    @property
    def memberships(self) -> Dict[int, Membership]:
        """The multicast memberships of this fd's ids, by membership id (``uid``: the one its
        events carry; ``handle``: the id that joined)."""
        with self._lock:
            return dict(self._mcs)

    def inject_event(self, handle: int, event: int, status: int = 0, *, uid: Optional[int] = None,
                     param: bytes = b"", owner: Optional[int] = None) -> None:
        """Queue an event for the id ``handle`` as the kernel would (``uid``: the id's, unless
        given -- an id the fake does not hold needs one); any type number, any status.  ``owner``:
        the id whose event it is for the kernel (a CONNECT_REQUEST's listener), ``handle`` if not given."""
        if uid is None:
            uid = self._get(handle).uid
        raw = _EVENT.pack_dict({"uid": uid, "id": handle, "event": int(event), "status": status & 0xFFFFFFFF,
                                "param": param})
        with self._lock:
            self._push(handle, raw, owner)

    def incoming_request(self, listener: int) -> int:
        """A connection request arrives at the listening id ``listener``: the fake makes the
        request's id (uid 0, state CONNECT, as the kernel does) and queues CONNECT_REQUEST
        with the listener's uid.  Returns the new id's handle."""
        with self._lock:
            lst = self._get(listener)
            if lst.state is not S.LISTEN:
                raise ValueError("handle %d is not listening" % listener)
            ctx = self._new_ctx(0, lst.ps, lst.qp_type)
            ctx.move(S.CONNECT)
            ctx.dev = lst.dev
            ud = lst.qp_type == abi.QpType.UD
            self._cms[ctx.handle] = IbCmId(IbCmState.SIDR_REQ_RCVD if ud else IbCmState.REQ_RCVD)
            self.inject_event(ctx.handle, E.CONNECT_REQUEST, uid=lst.uid, owner=lst.handle)
        return ctx.handle

    def find_device(self, index: Optional[int] = None, node_guid: Optional[int] = None) -> Optional[FakeDevice]:
        """The device lookup the core uses to name a QUERY reply's device (sysfs/netlink on a real host)."""
        for dev in self.net.local.values():
            if index is not None and dev.index == index:
                return dev
            if index is None and node_guid and dev.node_guid == node_guid:
                return dev
        return None

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        """The Transport's device naming: by this fake network's devices."""
        dev = self.find_device(index=index, node_guid=node_guid or None)
        if dev is None:
            return None, index
        return dev.name, (index if index is not None else dev.index)

    # -- the device's operations
    def reopen(self) -> "KernelCore":
        """Another fd on the same (fake) device: a sync id's private channel, MIGRATE_ID's target."""
        return type(self)(self.net, max_cmd=self.max_cmd, version=self.version, machine=self.machine)

    def fileno(self) -> int:
        if self.closed:
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
        for h in self._ctx:
            if self.machine.holders.get(h) is self:
                del self.machine.holders[h]
        self._ctx.clear()
        self._cms.clear()

    def write(self, data: bytes) -> int:
        if self.closed:
            raise kernel_error(errno.EBADF)
        data = bytes(data)
        # ucma_write: the header, the command's place in the table, in within the write, a handler
        if len(data) < _HDR.size:
            raise kernel_error(errno.EINVAL)
        cmd, size_in, size_out = _HDR.unpack_from(data)
        if cmd > self.max_cmd:
            raise kernel_error(errno.EINVAL)
        if size_in + _HDR.size > len(data):
            raise kernel_error(errno.EINVAL)
        if cmd == C.GET_OPTION:  # in the table, never implemented
            raise kernel_error(errno.ENOSYS)
        body = data[_HDR.size: _HDR.size + size_in]
        self.log.append((cmd, size_in, size_out, body))
        handler: Callable[[bytes, int], None] = getattr(self, "_cmd_" + C(cmd).name.lower())
        queued = len(self._events)
        with self._lock:
            handler(body, size_out)
        if len(self._events) > queued and cmd != C.GET_EVENT:
            # As on the kernel, an event the command queued may be read by another thread
            # before write() returns to its caller: let the other threads run here.
            time.sleep(0)
        return len(data)

    # -- the registry
    def _new_ctx(self, uid: int, ps: int, qp_type: int) -> IdContext:
        """A new id of this fd, with a handle no other id of the machine has."""
        ctx = IdContext(next_handle(), uid, ps, qp_type)
        self._ctx[ctx.handle] = ctx
        self.machine.holders[ctx.handle] = self
        return ctx

    def _get(self, handle: int) -> IdContext:
        """``ucma_get_ctx``: the id of this fd; ENOENT for a handle no id has, EINVAL for an
        id another fd of the machine holds."""
        ctx = self._ctx.get(handle)
        if ctx is None:
            holder = self.machine.holder(handle)
            raise kernel_error(kernel_rules.ANOTHER_FDS_ID if holder is not None and holder is not self
                               else kernel_rules.UNKNOWN_ID)
        return ctx

    def _drop_ctx(self, handle: int) -> Optional[IdContext]:
        """The id leaves this fd (destroyed): out of the machine's table too, its IB CM id with it."""
        ctx = self._ctx.pop(handle, None)
        self._cms.pop(handle, None)
        if self.machine.holders.get(handle) is self:
            del self.machine.holders[handle]
        return ctx

    def _check(self, ctx: IdContext, command: "abi.UserCmCmd", form: str = "") -> None:
        """The kernel's state rule of ``command`` for ``ctx`` (:mod:`pyrdmacm.kernel_rules`)."""
        ctx.check(command, form, self.version)

    # -- helpers of the handlers
    def _reply_size(self, name: str) -> int:
        return CODECS[name].size if self.ibdev_index else int(_structs.MIN_REPLY[name])

    # -- events
    def _push(self, handle: int, raw: bytes, owner: Optional[int] = None, mc: int = 0) -> None:
        """Queue one event (its byte on the pipe makes the fd readable)."""
        self._events.append(Queued(handle, raw, handle if owner is None else owner, mc))
        os.write(self._w, b"e")

    def _queue(self, ctx: IdContext, event: "abi.CmEventType", status: int = 0, delay_ms: int = 0) -> None:
        """The event of an address or route query: the id moves as ``addr_handler`` /
        ``cma_work_handler`` move it, and the event is queued (not for uid 0) on the fd that
        holds the id when it comes (``delay_ms`` later: a timer)."""
        raw = _EVENT.pack_dict({"uid": ctx.uid, "id": ctx.handle, "event": int(event), "status": status & 0xFFFFFFFF})
        after = {E.ADDR_RESOLVED: S.ADDR_RESOLVED, E.ADDR_ERROR: S.ADDR_BOUND, E.ROUTE_RESOLVED: S.ROUTE_RESOLVED,
                 E.ROUTE_ERROR: S.ADDR_RESOLVED}.get(event)

        def post() -> None:
            k = self.machine.holder(ctx.handle) or self  # MIGRATE_ID may have moved the id
            with k._lock:
                if k.closed or k._ctx.get(ctx.handle) is not ctx:
                    return
                if after is not None:
                    ctx.move(after)
                if event == E.ADDR_RESOLVED and ctx.dev is None:
                    ctx.dev = ctx.resolving_dev  # addr_handler: cma_acquire_dev_by_src_ip
                if ctx.uid:
                    k._push(ctx.handle, raw)

        if delay_ms:
            t = threading.Timer(delay_ms / 1000.0, post)
            t.daemon = True
            self._timers.append(t)
            t.start()
        else:
            post()

    def _take_events(self, which: Callable[[Queued], bool]) -> List[Queued]:
        """Remove the queued events ``which(q)`` selects, with their pipe bytes; return them in order."""
        taken = [q for q in self._events if which(q)]
        if taken:
            self._events = [q for q in self._events if not which(q)]
            try:
                os.read(self._r, len(taken))
            except BlockingIOError:
                pass
        return taken

    def _discard_events(self, handle: int) -> None:
        """The queued but unread events of id ``handle`` go (its memberships' and, for a
        listener, its CONNECT_REQUESTs too), with their pipe bytes."""
        self._take_events(lambda q: q.handle == handle or q.owner == handle)

    def _cmd_get_event(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_get_event", body)
        if size_out < _structs.MIN_REPLY["rdma_ucm_event_resp"]:
            raise kernel_error(errno.ENOSPC)
        if not self._events:
            raise kernel_error(errno.EAGAIN)
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

    def _cmd_write_cm_event(self, body: bytes, size_out: int) -> None:
        """WRITE_CM_EVENT (6.17+): a USER or INTERNAL event queued on the id's fd under its uid
        and handle, with the status given and the u64 ``arg`` in ``param.arg32`` (the union's
        first 8 bytes)."""
        f = command_fields("rdma_ucm_write_cm_event", body)
        if f["event"] not in (E.USER, E.INTERNAL):
            raise kernel_error(errno.EINVAL)
        ctx = self._get(f["id"])
        self._push(ctx.handle, _EVENT.pack_dict(
            {"uid": ctx.uid, "id": ctx.handle, "event": f["event"], "status": f["status"], "param": f["param"][:8]}))

    # -- MIGRATE_ID (ucma_migrate_id), written on the new fd
    def _cmd_migrate_id(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_migrate_id", body)
        fd, handle = f["fd"], f["id"]
        old = fake_for_fd(fd)
        if old is None or old.closed:
            if fd > 0x7FFFFFFF:  # fdget of a __u32 no fd table reaches
                raise kernel_error(errno.ENOENT)
            try:
                os.fstat(fd)
            except OSError:
                raise kernel_error(errno.ENOENT) from None  # fdget: no such fd
            raise kernel_error(errno.EINVAL)  # an fd, but no rdma_cm
        if old.machine is not self.machine:
            raise kernel_error(errno.EINVAL)  # an rdma_cm fd of another (fake) machine
        with old._lock:
            ctx = old._get(handle)  # the id is looked up on the fd named
            if not f["response"]:
                raise kernel_error(errno.EFAULT)
            # the id, every unread event of it (its memberships' and a listener's requests
            # included), and its memberships go to this fd; the events keep their order, after
            # the ones already queued here
            events = old._take_events(lambda q: q.owner == handle)
            moved = [handle] + [q.handle for q in events if q.handle != handle and q.handle in old._ctx and not q.mc]
            for h in moved:
                self._ctx[h] = old._ctx.pop(h)
                self.machine.holders[h] = self
                if h in old._cms:
                    self._cms[h] = old._cms.pop(h)
            for mc_id in [m.id for m in old._mcs.values() if m.handle == handle]:
                self._mcs[mc_id] = old._mcs.pop(mc_id)
            self._adopt(old, moved)
            for q in events:
                self._push(q.handle, q.raw, q.owner, q.mc)
        write_to_address(f["response"], CODECS["rdma_ucm_migrate_resp"].pack_dict({"events_reported": ctx.reported}))

    def _adopt(self, old: "KernelCore", handles: List[int]) -> None:
        """What else of the ids ``handles`` the fd ``old`` held moves with them (nothing, alone)."""
