"""Event channels and CM ids: librdmacm's API over the ucma ABI.

Theory of operation
-------------------
An :class:`EventChannel` is one open rdma_cm fd (``rdma_create_event_channel``).
Every command is one ``write()`` of header + struct; commands that have a
reply name one of the channel's :class:`~pyrdmacm._device.ReplyBuffer`\\ s,
so commands are serialised by the channel's command lock (many threads may
issue them).  Events are read by one reader at a time: ``get_event`` polls
the non-blocking fd, then writes GET_EVENT; a second concurrent reader is
refused with :class:`~pyrdmacm.errors.StateError` instead of interleaving.
``get_events(max)`` takes whatever is queued under one such guard.  The hot
paths (CREATE_ID, RESOLVE_ADDR, RESOLVE_ROUTE, DESTROY_ID, GET_EVENT and the
dispatch of its event) are written out inline, because under emulation each
Python call costs about as much as the system call it wraps: what they do is
what :meth:`EventChannel.execute`, ``_check`` and ``_dispatch`` do.

Faults have defined outcomes.  ``close()`` from another thread wakes a reader
blocked in ``get_event`` (through an eventfd polled beside the device: closing
an fd does not wake a ``poll()`` on it), which raises StateError.  An fd
closed behind the channel's back (EBADF, POLLNVAL) is a StateError too.  A
signal during a wait runs its handler and the wait goes on with the time left;
a handler that raises ends the wait, and the channel stays usable.  A forked
child may not use its parent's channel (the fd, the ids and their events are
the parent's): every call raises StateError before any syscall.

A :class:`CmId` is one kernel id (``rdma_create_id``).  Its ``uid`` -- echoed
by the kernel in each of its events -- is a per-channel counter starting at
1 (uid 0 would silence the kernel's events).  The id's state follows the
kernel's, from the calls made and the events read; :data:`TRANSITIONS` is the
one table of what is legal where, and an illegal call raises
:class:`~pyrdmacm.errors.StateError` before any syscall.

librdmacm queries the kernel (QUERY ADDR, GID, PATH) after every event;
pyrdmacm asks on first use of what they return (``local_addr``, ``device``,
``sgid``, ``path_records`` ...) and caches the answer until the id's state
changes: the same answers, without the cost for callers that never ask.

With no channel (``CmId(None, ...)``), an id gets a private channel and its
calls block until their outcome (librdmacm's synchronous mode); a failure
event raises :class:`~pyrdmacm.errors.EventError` with the real errno and
the event attached.
"""

from __future__ import annotations

import enum
import errno
import ipaddress
import os
import select
import struct
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple, Union

from . import abi
from ._codec import CODECS
from ._device import KernelDevice, ReplyBuffer, device_write as _device_write
from .addr import AF_IB, Address, parse_address, unpack_sockaddr
from .errors import EventError, KernelError, StateError, UsageError
from .events import _UNPACK_EVENT, EVENT_RESP_SIZE, Event, decode_event_head

__all__ = [
    "EventChannel",
    "CmId",
    "State",
    "TRANSITIONS",
    "AddrInfo",
    "PathRecord",
    "SourceIgnoredWarning",
    "UnackedEventsWarning",
]

C = abi.UserCmCmd
E = abi.CmEventType

_HDR = struct.Struct("<IHH")


def _hdr(cmd: int, body: str, reply: Optional[str] = None, out: Optional[int] = None) -> bytes:
    size_out = out if out is not None else (CODECS[reply].size if reply else 0)
    return _HDR.pack(cmd, CODECS[body].size, size_out)


_CREATE = CODECS["rdma_ucm_create_id"].pack
_DESTROY = CODECS["rdma_ucm_destroy_id"].pack
_BIND = CODECS["rdma_ucm_bind"].pack
_BIND_IP = CODECS["rdma_ucm_bind_ip"].pack
_RESOLVE_ADDR = CODECS["rdma_ucm_resolve_addr"].pack
_RESOLVE_IP = CODECS["rdma_ucm_resolve_ip"].pack
_RESOLVE_ROUTE = CODECS["rdma_ucm_resolve_route"].pack
_QUERY = CODECS["rdma_ucm_query"].pack
_GET_EVENT = CODECS["rdma_ucm_get_event"].pack
_LISTEN = CODECS["rdma_ucm_listen"].pack
_CONNECT = CODECS["rdma_ucm_connect"].pack
_DISCONNECT = CODECS["rdma_ucm_disconnect"].pack
_U32 = struct.Struct("<I")
_new_event = tuple.__new__
_get_ident = threading.get_ident
_NO_ECE = (0, 0)  # the ece of nearly every event, shared: one allocation less per event

QUERY_PATH_MAX = 6  # librdmacm's buffer: 8 + 6 * 72 = 440 bytes
_PATH_SIZE = CODECS["ib_path_rec_data"].size
_QUERY_PATH_REPLY = CODECS["rdma_ucm_query_path_resp"].size + QUERY_PATH_MAX * _PATH_SIZE

H_CREATE = _hdr(C.CREATE_ID, "rdma_ucm_create_id", "rdma_ucm_create_id_resp")
H_DESTROY = _hdr(C.DESTROY_ID, "rdma_ucm_destroy_id", "rdma_ucm_destroy_id_resp")
H_BIND = _hdr(C.BIND, "rdma_ucm_bind")
H_BIND_IP = _hdr(C.BIND_IP, "rdma_ucm_bind_ip")
H_RESOLVE_ADDR = _hdr(C.RESOLVE_ADDR, "rdma_ucm_resolve_addr")
H_RESOLVE_IP = _hdr(C.RESOLVE_IP, "rdma_ucm_resolve_ip")
H_RESOLVE_ROUTE = _hdr(C.RESOLVE_ROUTE, "rdma_ucm_resolve_route")
H_QUERY_ADDR = _hdr(C.QUERY, "rdma_ucm_query", "rdma_ucm_query_addr_resp")
H_QUERY_PATH = _hdr(C.QUERY, "rdma_ucm_query", out=_QUERY_PATH_REPLY)
H_QUERY_ROUTE = _hdr(C.QUERY_ROUTE, "rdma_ucm_query", "rdma_ucm_query_route_resp")
H_GET_EVENT = _hdr(C.GET_EVENT, "rdma_ucm_get_event", "rdma_ucm_event_resp")
H_LISTEN = _hdr(C.LISTEN, "rdma_ucm_listen")
H_CONNECT = _hdr(C.CONNECT, "rdma_ucm_connect")
H_DISCONNECT = _hdr(C.DISCONNECT, "rdma_ucm_disconnect")


def _with_header(header: bytes, body: str) -> "struct.Struct":
    """The command's header (as one ``Ns`` field) and its body in one format: one pack, no
    concatenation.  Derived from the body's codec, so the layout is still declared once."""
    codec = CODECS[body]
    assert not codec._be, "a body with big-endian fields needs Codec.pack"
    return struct.Struct("<%ds%s" % (len(header), codec.format[1:]))


_CREATE_CMD = _with_header(H_CREATE, "rdma_ucm_create_id").pack
_DESTROY_CMD = _with_header(H_DESTROY, "rdma_ucm_destroy_id").pack
_RESOLVE_ROUTE_CMD = _with_header(H_RESOLVE_ROUTE, "rdma_ucm_resolve_route").pack
_N_CREATE = len(H_CREATE) + CODECS["rdma_ucm_create_id"].size
_N_DESTROY = len(H_DESTROY) + CODECS["rdma_ucm_destroy_id"].size
_N_RESOLVE_ADDR = len(H_RESOLVE_ADDR) + CODECS["rdma_ucm_resolve_addr"].size
_N_RESOLVE_ROUTE = len(H_RESOLVE_ROUTE) + CODECS["rdma_ucm_resolve_route"].size


def _resolve_addr_head() -> "struct.Struct":
    """RESOLVE_ADDR's header and its first two fields (id, timeout_ms): the rest of the
    command depends on the addresses only, and is packed once per destination."""
    codec = CODECS["rdma_ucm_resolve_addr"]
    assert codec.names[:2] == ("id", "timeout_ms") and not codec._be
    return struct.Struct("<%ds%s" % (len(H_RESOLVE_ADDR), codec.format[1:3]))


_RESOLVE_ADDR_HEAD = _resolve_addr_head().pack
_RESOLVE_ADDR_HEAD_SIZE = struct.calcsize("<" + CODECS["rdma_ucm_resolve_addr"].format[1:3])

_ADDR_RESP = CODECS["rdma_ucm_query_addr_resp"]
_ROUTE_RESP = CODECS["rdma_ucm_query_route_resp"]
_NO_INDEX = 0xFFFFFFFF


class SourceIgnoredWarning(UserWarning):
    """resolve_addr was given a source, but the id was already bound: the kernel ignores it."""


class UnackedEventsWarning(ResourceWarning):
    """An id was destroyed with events still unacknowledged (librdmacm would hang here)."""


class State(enum.Enum):
    """The id's state as the kernel keeps it (``enum rdma_cm_state``), seen from userspace."""

    IDLE = "idle"
    ADDR_BOUND = "addr_bound"
    ADDR_QUERY = "addr_query"
    ADDR_RESOLVED = "addr_resolved"
    ROUTE_QUERY = "route_query"
    ROUTE_RESOLVED = "route_resolved"
    CONNECT = "connect"
    CONNECTED = "connected"
    LISTEN = "listen"
    DISCONNECTED = "disconnected"
    DESTROYED = "destroyed"

    def __str__(self) -> str:
        return self.name

    # members are singletons: an identity hash keeps TRANSITIONS lookups off Enum's Python-level __hash__
    __hash__ = object.__hash__


S = State
# Enum members read as module globals in the hot paths: ``State.IDLE`` goes through the
# enum metaclass and costs ten times a global read.
_IDLE, _ADDR_BOUND, _DESTROYED = State.IDLE, State.ADDR_BOUND, State.DESTROYED

#: (state, call or event) -> new state.  Anything absent is illegal for a
#: call (StateError before the syscall) and leaves the state alone for an event.
TRANSITIONS: Dict[Tuple[State, Any], State] = {
    (S.IDLE, "bind_addr"): S.ADDR_BOUND,
    (S.IDLE, "resolve_addr"): S.ADDR_QUERY,
    (S.ADDR_BOUND, "resolve_addr"): S.ADDR_QUERY,
    (S.ADDR_QUERY, E.ADDR_RESOLVED): S.ADDR_RESOLVED,
    (S.ADDR_QUERY, E.ADDR_ERROR): S.ADDR_BOUND,
    (S.ADDR_RESOLVED, "resolve_route"): S.ROUTE_QUERY,
    (S.ROUTE_QUERY, E.ROUTE_RESOLVED): S.ROUTE_RESOLVED,
    (S.ROUTE_QUERY, E.ROUTE_ERROR): S.ADDR_RESOLVED,
    (S.ROUTE_RESOLVED, "connect"): S.CONNECT,
    (S.CONNECT, E.CONNECT_RESPONSE): S.CONNECT,
    (S.CONNECT, E.ESTABLISHED): S.CONNECTED,
    (S.CONNECT, E.REJECTED): S.ROUTE_RESOLVED,
    (S.CONNECT, E.UNREACHABLE): S.ROUTE_RESOLVED,
    (S.CONNECT, E.CONNECT_ERROR): S.ROUTE_RESOLVED,
    (S.CONNECTED, "disconnect"): S.DISCONNECTED,
    (S.CONNECT, "disconnect"): S.DISCONNECTED,
    (S.CONNECTED, E.DISCONNECTED): S.DISCONNECTED,
    (S.IDLE, "listen"): S.LISTEN,
    (S.ADDR_BOUND, "listen"): S.LISTEN,
}


def _after(call: str) -> Dict[State, State]:
    """The states ``call`` is legal in, and where it leads: TRANSITIONS' rows of one call."""
    return {st: new for (st, what), new in TRANSITIONS.items() if what == call}


# the hot calls look their row up by state alone (no key tuple to build)
_AFTER_RESOLVE_ADDR = _after("resolve_addr")
_AFTER_RESOLVE_ROUTE = _after("resolve_route")


def _on_event() -> Dict[int, Dict[State, Tuple[Any, State]]]:
    """TRANSITIONS' event rows for get_event's fast path: the event's number as the kernel
    writes it -> {state before: (the event type, state after)}, so that one lookup both
    names the event and moves the id.  Events absent here (no transition from the id's
    state, CONNECT_REQUEST, unknown types) take the general path, ``_dispatch``."""
    rows: Dict[int, Dict[State, Tuple[Any, State]]] = {}
    for (st, what), new in TRANSITIONS.items():
        if isinstance(what, E):
            rows.setdefault(int(what), {})[st] = (what, new)
    return rows


_ON_EVENT = _on_event()

#: What to tell the user when a call is illegal in a state.
_WHY = {
    "resolve_addr": "resolve_addr needs a fresh or merely bound id (IDLE or ADDR_BOUND); "
    "an id resolves once: create a new id to resolve again",
    "resolve_route": "resolve_route needs ADDR_RESOLVED: call resolve_addr and wait for its event first",
    "bind_addr": "bind_addr needs a fresh id (IDLE): an id binds once",
    "connect": "connect needs ROUTE_RESOLVED: resolve_addr, then resolve_route, each with its event",
    "listen": "listen needs a fresh or bound id",
    "disconnect": "disconnect needs a connection",
}


@dataclass(frozen=True)
class DeviceRef:
    """The RDMA device an id is bound to, as the kernel named it in QUERY replies."""

    name: Optional[str]
    index: Optional[int]
    node_guid: int

    def __str__(self) -> str:
        return self.name or ("ibdev#%d" % self.index if self.index is not None else "guid %016x" % self.node_guid)


@dataclass(frozen=True)
class AddrInfo:
    """QUERY ADDR's answer: where the id is bound and to what."""

    src: Optional[Address]
    dst: Optional[Address]
    device: Optional[DeviceRef]
    port_num: int
    pkey: int


@dataclass(frozen=True)
class PathRecord:
    """One IB path record (IBTA SA PathRecord, as QUERY PATH returns it)."""

    flags: int
    service_id: int
    dgid: ipaddress.IPv6Address
    sgid: ipaddress.IPv6Address
    dlid: int
    slid: int
    raw_traffic: int
    flow_label: int
    hop_limit: int
    traffic_class: int
    reversible: int
    numb_path: int
    pkey: int
    sl: int
    mtu_selector: int
    mtu: int
    rate_selector: int
    rate: int
    packet_life_time_selector: int
    packet_life_time: int
    preference: int

    @classmethod
    def decode(cls, flags: int, rec: bytes) -> "PathRecord":
        sid, dgid, sgid, dlid, slid, w, tclass, rn, pkey, qsl, mtu, rate, plt, pref = struct.unpack_from(
            ">Q16s16sHHIBBHHBBBB", rec
        )
        return cls(
            flags,
            sid,
            ipaddress.IPv6Address(dgid),
            ipaddress.IPv6Address(sgid),
            dlid,
            slid,
            w >> 31,
            (w >> 8) & 0xFFFFF,
            w & 0xFF,
            tclass,
            rn >> 7,
            rn & 0x7F,
            pkey,
            qsl & 0xF,
            mtu >> 6,
            mtu & 0x3F,
            rate >> 6,
            rate & 0x3F,
            plt >> 6,
            plt & 0x3F,
            pref,
        )


def _device_ref(transport: Any, index: Optional[int], guid: int) -> DeviceRef:
    """Name the device of a QUERY reply: by kernel index, else by node GUID (0 = unknown)."""
    name = None
    try:
        find = getattr(transport, "find_device", None)
        if find is None:
            # a GUID that one device has in sysfs names it in a few reads; the device list
            # (RDMA netlink through pyroute2, ~150 ms to import) is for the other cases
            name = _name_by_guid_sysfs(guid)
            if name is not None:
                return DeviceRef(name, index, guid)
            from . import devices

            find = devices.find_device
        dev = find(index=index, node_guid=guid or None)
        if dev is not None:
            name = dev.name
            if index is None:
                index = getattr(dev, "index", None)
    except Exception:
        name = None
    return DeviceRef(name, index, guid)


def _name_by_guid_sysfs(guid: int, root: str = "/sys/class/infiniband") -> Optional[str]:
    """The one RDMA device whose sysfs ``node_guid`` is ``guid``; None for none, several, or GUID 0."""
    if not guid:
        return None
    try:
        names = os.listdir(root)
    except OSError:
        return None
    found = []
    for name in names:
        try:
            with open(os.path.join(root, name, "node_guid")) as f:
                if int(f.read().strip().replace(":", ""), 16) == guid:
                    found.append(name)
        except (OSError, ValueError):
            continue
    return found[0] if len(found) == 1 else None


class _TryLock:
    """The one-reader rule's lock: never waited on, only tried.  A one-slot list whose
    ``pop``/``append`` are atomic; under qemu's emulation a ``threading.Lock`` round trip
    costs as much as the GET_EVENT it guards."""

    __slots__ = ("slot",)

    def __init__(self) -> None:
        self.slot = [True]

    def acquire(self, blocking: bool = False) -> bool:
        assert not blocking, "a _TryLock is only tried"
        try:
            self.slot.pop()
        except IndexError:
            return False
        return True

    def release(self) -> None:
        self.slot.append(True)


class EventChannel:
    """One rdma_cm fd: ``fileno()`` for select/poll, ``get_event()`` to read events.

    ``EventChannel()`` opens the kernel device; ``EventChannel(transport)``
    uses any object with ``write``, ``fileno`` and ``close`` (the fake kernel).
    """

    def __init__(self, transport: Any = None, *, legacy: Optional[bool] = None) -> None:
        self._t = transport if transport is not None else KernelDevice()
        # os.write bound to the fd when the device offers it (one Python call less per
        # command); close() puts the guarded write back before closing the fd
        writer = getattr(self._t, "writer", None)
        self._write = writer() if writer is not None else self._t.write
        # the hot paths write with device_write(_fd, ...) when the device allows it (_fd >= 0):
        # cheaper again than calling the bound writer; close() sets it to -1 first
        direct = getattr(self._t, "direct_fd", None)
        self._fd: int = direct() if direct is not None else -1
        self._ids: Dict[int, CmId] = {}
        self._next_uid = 1
        self._cmd_lock = threading.Lock()
        self._reader_lock = _TryLock()
        self._reader_slot = self._reader_lock.slot
        #: the thread id of a reader waiting in get_event (a reader that does not wait holds
        #: the guard for one GET_EVENT, and is not named)
        self._reader: Optional[int] = None
        #: what close() signals so that a thread blocked in get_event wakes up (closing
        #: an fd does not wake a poll() on it): an eventfd, or a pipe (read, write) before 3.10
        self._wake, self._wake_w = _wake_fds()
        self._pid = os.getpid()
        #: the opening process's id while the channel is open, 0 once closed: the hot paths
        #: check "open, and not a forked child" with one comparison (``_live != _PID``)
        self._live = self._pid
        #: as _live, and 0 on a sync id's channel too: get_event's fast path, in one comparison
        self._fast = self._pid
        self._wait_first = False  # set for the private channel of a sync id
        self.closed = False
        self._r_create = ReplyBuffer(CODECS["rdma_ucm_create_id_resp"].size)
        self._r_destroy = ReplyBuffer(CODECS["rdma_ucm_destroy_id_resp"].size)
        # CREATE_ID and DESTROY_ID take their reply buffer from these one-slot pools
        # (list.pop/append are atomic): cheaper than the command lock, and a second thread
        # meanwhile gets a buffer of its own.
        self._create_replies: List[ReplyBuffer] = [self._r_create]
        self._destroy_replies: List[ReplyBuffer] = [self._r_destroy]
        self._r_query = ReplyBuffer(max(_ADDR_RESP.size, _ROUTE_RESP.size, _QUERY_PATH_REPLY))
        self._r_event = ReplyBuffer(EVENT_RESP_SIZE)
        self._event_view = self._r_event.view
        self._b_get_event = H_GET_EVENT + _GET_EVENT(self._r_event.address)
        #: (what the caller passed as dst, its Address, the command's bytes after id and
        #: timeout_ms): many ids resolving one destination parse and pack it once
        self._packed_dst: Tuple[Any, Any, bytes] = (_NOTHING, None, b"")
        if legacy is None:
            legacy = getattr(self._t, "legacy", None)
            if legacy is None:
                legacy = not _kernel_at_least(3, 11)
        #: Use BIND_IP / RESOLVE_IP / QUERY_ROUTE (kernels before 3.11) instead of BIND / RESOLVE_ADDR / QUERY.
        self.legacy = bool(legacy)

    # -- fd
    def fileno(self) -> int:
        return self._t.fileno()

    def close(self) -> None:
        """Close the fd; the kernel destroys every id still on it."""
        if self.closed:
            return
        self.closed = True
        self._live = self._fast = 0
        for cm_id in list(self._ids.values()):
            cm_id._state = State.DESTROYED
        self._ids.clear()
        if self._wake_w >= 0:
            os.write(self._wake_w, _ONE)  # wake a waiting reader: it raises "closed"
        self._fd = -1
        self._write = self._t.write  # guarded: raises once the fd is closed
        self._t.close()
        if self._reader_lock.acquire(blocking=False):
            try:
                self._close_wake()
            finally:
                self._reader_lock.release()
        # else the waiting reader closes the eventfd on its way out

    def _close_wake(self) -> None:
        fds = {self._wake, self._wake_w}
        self._wake = self._wake_w = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)

    def __enter__(self) -> "EventChannel":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            if not self.closed and os.getpid() == self._pid:
                self.close()
        except Exception:
            pass

    def __repr__(self) -> str:
        return "<EventChannel fd=%s ids=%d%s>" % (
            "closed" if self.closed else self._t.fileno(),
            len(self._ids),
            " legacy" if self.legacy else "",
        )

    # -- commands
    def _check(self) -> None:
        if self.closed:
            raise StateError("the event channel is closed")
        if _PID != self._pid:
            raise StateError(
                "this event channel was opened by process %d, and process %d is a forked child: "
                "the fd is shared with the parent, whose ids and events it holds; open a new "
                "EventChannel in the child" % (self._pid, os.getpid())
            )

    def execute(self, data: bytes, command: str = "command", **ctx: Any) -> None:
        """Write one command; a refusal raises :class:`KernelError` with the real errno."""
        try:
            n = self._write(data)
        except OSError as e:
            raise self._refused(e, command, ctx) from None
        if n != len(data):
            raise self._short(n, data, command)

    # The hot paths (CREATE_ID, RESOLVE_ADDR, RESOLVE_ROUTE, DESTROY_ID, GET_EVENT) inline
    # execute() and _check(): a Python call costs more than the rest of a command's Python
    # work (see docs/benchmarks.md).  These two keep the error rules in one place.
    def _refused(self, e: OSError, command: str, ctx: Dict[str, Any]) -> Exception:
        """The exception for a write the kernel refused."""
        if self.closed:
            return StateError("the event channel is closed")
        if e.errno == errno.EBADF:
            return _fd_closed_behind()
        return KernelError(e.errno or errno.EIO, command, **ctx)

    @staticmethod
    def _short(n: int, data: bytes, command: str) -> Exception:
        return KernelError(errno.ENODATA, command, hint="short write (%d of %d bytes)" % (n, len(data)))

    # -- events
    def get_event(self, timeout: Optional[float] = None) -> Optional[Event]:
        """The next event; ``None`` if none came within ``timeout`` seconds.

        ``timeout=None`` waits for ever, ``0`` only polls.  EINTR is retried
        with the time left.  Only one thread may wait at a time.
        """
        if self._fast != _PID:  # closed, a forked child, or a sync id's channel
            if self._live != _PID:
                self._check()
            return self._guarded(timeout)
        slot = self._reader_slot  # _reader_lock.acquire(blocking=False), inlined
        try:
            slot.pop()
        except IndexError:
            raise self._busy() from None
        try:
            # the common case, an event already queued: one GET_EVENT, decoded and
            # dispatched right here (what _dispatch does, without its calls)
            try:
                fd = self._fd
                n = _device_write(fd, self._b_get_event) if fd >= 0 else self._write(self._b_get_event)
            except BlockingIOError:
                if timeout == 0:
                    return None  # only polling: nothing queued
                n = -1  # the loop below starts by waiting
            except (OSError, UsageError):
                n = 0  # the loop below reports it
            if n > 0:
                uid, handle, ev, status, raw, vid, mod = _UNPACK_EVENT(self._event_view)
                try:
                    cm_id = self._ids[uid]
                    ev, cm_id._state = _ON_EVENT[ev][cm_id._state]
                except KeyError:  # no such id (destroyed meanwhile), no transition: in general
                    event = self._dispatch(self._event_view)
                    if event is not None:
                        return event
                else:
                    cm_id._cache = None
                    cm_id._unacked += 1
                    return _new_event(Event, (ev, status, cm_id, handle, raw, (vid, mod) if vid or mod else _NO_ECE, None))
            return self._get_event(timeout, n < 0)
        finally:
            if self.closed:
                self._close_wake()
            slot.append(True)

    def _guarded(self, timeout: Optional[float]) -> Optional[Event]:
        """get_event without its fast path, under the reader guard."""
        slot = self._reader_slot
        try:
            slot.pop()
        except IndexError:
            raise self._busy() from None
        try:
            return self._get_event(timeout)
        finally:
            if self.closed:
                self._close_wake()
            slot.append(True)

    def get_events(self, max_events: int = 64, timeout: Optional[float] = 0, *, ack: bool = False) -> List[Event]:
        """Up to ``max_events`` events under one reader guard: waits for the first as
        ``get_event(timeout)`` does (an empty list if none came), then takes only what is
        already queued.  A cheaper way than a ``get_event`` call per event to drain a channel.
        ``ack=True`` returns them acknowledged (no ``ack()`` call each).
        """
        if self._live != _PID:
            self._check()
        if max_events.__class__ is not int or max_events < 1:
            raise UsageError("max_events must be an int >= 1, got %r" % (max_events,))
        slot = self._reader_slot
        try:
            slot.pop()
        except IndexError:
            raise self._busy() from None
        out: List[Event] = []
        try:
            if self._wait_first:  # a sync id's channel: wait first (see _wait_event)
                first = self._get_event(timeout)
                if first is None:
                    return out
                out.append(_acked(first) if ack else first)
            data, view, ids = self._b_get_event, self._event_view, self._ids
            while len(out) < max_events:
                try:
                    fd = self._fd  # read per command: a close() from another thread sets it to -1
                    if (_device_write(fd, data) if fd >= 0 else self._write(data)) <= 0:
                        raise BlockingIOError
                except (OSError, UsageError) as e:
                    if out:
                        break  # drained (a fault shows at the next call)
                    if timeout == 0 and isinstance(e, BlockingIOError):
                        break  # only polling: nothing queued
                    # wait for the first event (or report the fault)
                    first = self._get_event(timeout, isinstance(e, BlockingIOError))
                    if first is None:
                        break
                    out.append(_acked(first) if ack else first)
                    continue
                # get_event's fast path again, written out: a call per event would cost more
                # than the decoding itself (see the module docstring)
                uid, handle, ev, status, raw, vid, mod = _UNPACK_EVENT(view)
                try:
                    cm_id = ids[uid]
                    ev, cm_id._state = _ON_EVENT[ev][cm_id._state]
                except KeyError:
                    event = self._dispatch(view)
                    if event is not None:
                        out.append(_acked(event) if ack else event)
                else:
                    cm_id._cache = None
                    if not ack:
                        cm_id._unacked += 1
                    out.append(_new_event(Event, (ev, status, cm_id, handle, raw, (vid, mod) if vid or mod else _NO_ECE, None)))
            return out
        finally:
            if self.closed:
                self._close_wake()
            slot.append(True)

    def _busy(self) -> StateError:
        reader = self._reader
        return StateError(
            "another thread is already reading events from this channel%s; "
            "read events from one thread and hand them out" % (" (thread %s)" % reader if reader else "")
        )

    def _get_event(self, timeout: Optional[float], drained: bool = False) -> Optional[Event]:
        self._reader = _get_ident()  # named in the refusal of a second reader
        try:
            return self._wait_event(timeout, drained)
        finally:
            self._reader = None

    def _wait_event(self, timeout: Optional[float], drained: bool = False) -> Optional[Event]:
        """Read, and wait while nothing is queued; ``drained``: a GET_EVENT just said EAGAIN."""
        deadline = None if timeout is None else time.monotonic() + timeout
        data = self._b_get_event
        buf = self._r_event
        # A sync id's private channel reads right after its own command, when the event is
        # almost never there yet: wait first, as librdmacm's blocking read does, instead of
        # spending a GET_EVENT that can only say EAGAIN.
        skip_read = (self._wait_first or drained) and timeout != 0
        while True:
            try:
                if skip_read:
                    skip_read = False
                    raise BlockingIOError
                n = self._write(data)
            except BlockingIOError:
                n = -1
            except (OSError, UsageError) as e:
                if self.closed:
                    raise StateError("the event channel was closed while waiting") from None
                if isinstance(e, UsageError) or e.errno == errno.EBADF:
                    raise _fd_closed_behind() from None
                if e.errno == errno.EINTR:
                    continue
                raise KernelError(e.errno or errno.EIO, "GET_EVENT") from None
            if n > 0:
                ev = self._dispatch(buf.view)
                if ev is not None:
                    return ev
                continue
            # nothing queued: wait for the fd to become readable
            if deadline is None:
                wait_ms = -1
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                wait_ms = max(1, int(left * 1000 + 0.999))
            # A signal during poll(): Python runs its handler and polls again with the time
            # left (PEP 475); a handler that raises ends the wait with its exception, and
            # the channel stays usable (the finally of get_event releases the reader).
            try:
                fd = self._t.fileno()
                p = select.poll()
                p.register(fd, select.POLLIN)
                p.register(self._wake, select.POLLIN)
                ready = p.poll(wait_ms)
            except InterruptedError:  # pragma: no cover - retried by Python itself since 3.5
                continue
            except (ValueError, OSError, UsageError):
                if self.closed:
                    raise StateError("the event channel was closed while waiting") from None
                raise
            if self.closed:
                raise StateError("the event channel was closed (by another thread) while waiting for an event")
            for rfd, revents in ready:
                if rfd == fd and revents & select.POLLNVAL:
                    raise _fd_closed_behind()

    def _dispatch(self, view: Any) -> Optional[Event]:
        uid, handle, ev, status, raw, ece = decode_event_head(view)
        cm_id = self._ids.get(uid)
        if cm_id is None:
            return None  # an id destroyed meanwhile: its event is dropped
        listen_id = None
        if ev is _CONNECT_REQUEST:
            listen_id = cm_id
            cm_id = CmId._adopt(self, handle, listen_id)
        else:
            new = TRANSITIONS.get((cm_id._state, ev))
            if new is not None:
                cm_id._state = new
            cm_id._cache = None
        event = _new_event(Event, (ev, status, cm_id, handle, raw, ece, listen_id))  # Event(...) minus a frame
        cm_id._unacked += 1
        return event

    def events(self, timeout: Optional[float] = None) -> Iterator[Event]:
        """Iterate over events until none arrives within ``timeout``."""
        while True:
            ev = self.get_event(timeout)
            if ev is None:
                return
            yield ev

    @property
    def ids(self) -> List["CmId"]:
        return list(self._ids.values())

    def create_id(
        self, ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP, *, qp_type: Optional[int] = None, context: Any = None
    ) -> "CmId":
        """A new id on this channel: ``rdma_create_id(channel, &id, context, ps)``.

        The same id as ``CmId(channel, ps, ...)``, made without a class call (the cheaper
        way to create many ids: see docs/benchmarks.md).
        """
        if ps is _PS_TCP and qp_type is None and context is None and self._live == _PID:
            return _create(_new_object(CmId), self, _PS_TCP, _QP_RC)
        return CmId(self, ps, qp_type=qp_type, context=context)

    # -- many ids at once.  The loops below write CREATE_ID / DESTROY_ID as _create and
    # CmId.destroy do, with everything they look up taken once per call instead of once
    # per id: a call per id costs about what its Python work does (docs/benchmarks.md).
    def create_ids(
        self, n: int, ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP, *, qp_type: Optional[int] = None
    ) -> List["CmId"]:
        """``n`` new ids on this channel, the ids ``n`` ``create_id()`` calls would make.

        All or nothing: if the kernel refuses one (EMFILE, ENOMEM ...), the ids made so far
        are destroyed again and the refusal is raised.
        """
        if n.__class__ is not int or n < 0:
            raise UsageError("n must be an int >= 0 (how many ids), got %r" % (n,))
        custom = ps is not _PS_TCP or qp_type is not None
        space, qp = _port_space(ps, qp_type) if custom else (_PS_TCP, _QP_RC)
        if self._live != _PID:
            self._check()
        out: List[CmId] = []
        append = out.append
        table, pool = self._ids, self._create_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_CREATE_REPLY_SIZE)
        address, u32 = reply.address, reply.u32
        first = self._next_uid  # the block of uids taken at once (what n _create calls would take)
        self._next_uid = first + n
        try:
            for uid in range(first, first + n):
                cm_id = _new_object(CmId)
                cm_id.channel = self
                cm_id._state = _IDLE
                cm_id._unacked = 0
                if custom:
                    cm_id._ps, cm_id._qp_type = space, qp
                cm_id.uid = uid
                data = _CREATE_CMD(H_CREATE, uid, address, space, qp, b"")
                try:
                    fd = self._fd  # read per command: a close() from another thread sets it to -1
                    written = _device_write(fd, data) if fd >= 0 else self._write(data)
                except OSError as e:
                    raise self._refused(e, "CREATE_ID", {}) from None
                if written != _N_CREATE:
                    raise self._short(written, data, "CREATE_ID")
                cm_id.handle = u32[0]
                table[uid] = cm_id
                append(cm_id)
        except BaseException:
            pool.append(reply)
            for cm_id in out:  # all or nothing
                try:
                    cm_id.destroy()
                except Exception:  # pragma: no cover - the channel is failing: closing it frees them
                    pass
            raise
        pool.append(reply)
        return out

    def _destroy_refusal(self, ids: List[Any]) -> Exception:
        seen = set()
        for cm_id in ids:
            if not isinstance(cm_id, CmId) or cm_id.channel is not self:
                return UsageError("destroy_ids takes ids of this channel, got %r" % (cm_id,))
            if cm_id._state is _DESTROYED:
                return StateError("destroy_ids: id uid %d is already destroyed" % cm_id.uid)
            if id(cm_id) in seen:
                return UsageError("destroy_ids: id uid %d is given twice" % cm_id.uid)
            seen.add(id(cm_id))
        return UsageError("destroy_ids: %d ids that cannot be told apart" % len(ids))  # pragma: no cover

    def destroy_ids(self, ids: Iterable["CmId"]) -> List[int]:
        """Destroy many ids of this channel; their ``events_reported``, in order.

        Every id is checked first (of this channel, not destroyed, given once: UsageError
        or StateError before any syscall). Ids with events not acked are reported in one
        :class:`UnackedEventsWarning`.
        """
        ids = list(ids)
        if self._live != _PID:
            if self.closed:
                for cm_id in ids:
                    if getattr(cm_id, "channel", None) is self:
                        cm_id._state = _DESTROYED
                raise StateError("destroy_ids: the event channel is closed (the kernel destroyed its ids then)")
            self._check()
        try:  # one pass that only says yes or no; _destroy_refusal says what is wrong
            ok = all([cm_id.channel is self and cm_id._state is not _DESTROYED for cm_id in ids])
            ok = ok and len(set(ids)) == len(ids)
        except (AttributeError, TypeError):
            ok = False
        if not ok:
            raise self._destroy_refusal(ids)
        if self._wait_first:  # a sync id's own channel: its destroy() closes the channel too
            return [cm_id.destroy() for cm_id in ids]
        out: List[int] = []
        append = out.append
        table, pool = self._ids, self._destroy_replies
        pop = table.pop
        try:
            reply = pool.pop()
        except IndexError:
            reply = ReplyBuffer(_DESTROY_REPLY_SIZE)
        address, u32 = reply.address, reply.u32
        unacked = []
        try:
            for cm_id in ids:
                data = _DESTROY_CMD(H_DESTROY, address, cm_id.handle, 0)
                try:
                    fd = self._fd  # read per command: a close() from another thread sets it to -1
                    written = _device_write(fd, data) if fd >= 0 else self._write(data)
                except OSError as e:
                    raise self._refused(e, "DESTROY_ID", {}) from None
                if written != _N_DESTROY:
                    raise self._short(written, data, "DESTROY_ID")
                append(u32[0])
                cm_id._state = _DESTROYED
                other = pop(cm_id.uid, None)
                if other is not cm_id and other is not None:
                    table[cm_id.uid] = other  # an adopted id shares its listener's uid
                if cm_id._unacked:
                    unacked.append(cm_id)
        finally:
            pool.append(reply)
            if unacked:
                warnings.warn(
                    UnackedEventsWarning(
                        "%d id(s) destroyed with %d event(s) not acked, uid %s (harmless here; librdmacm "
                        "would block)" % (len(unacked), sum(i._unacked for i in unacked),
                                          ", ".join(str(i.uid) for i in unacked[:8]) + (" ..." if len(unacked) > 8 else ""))
                    ),
                    stacklevel=2,
                )
        return out


def _acked(event: Event) -> Event:
    """``event`` after ``event.ack()``, for get_events(ack=True)."""
    event.ack()
    return event


_NOTHING = object()
_ONE = (1).to_bytes(8, "little")  # an eventfd takes a u64 (host order; any non-zero will do)


def _wake_fds() -> Tuple[int, int]:
    if hasattr(os, "eventfd"):
        fd = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
        return fd, fd
    return os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)


def _fd_closed_behind() -> StateError:
    return StateError(
        "the event channel's fd was closed behind its back (EBADF: os.close() on its fileno()?); "
        "close channels with close(), and open a new EventChannel"
    )


#: This process's id, kept current by a fork hook: checking for a forked child costs a
#: global read per command, not a getpid() system call.
_PID = os.getpid()


def _after_fork_in_child() -> None:
    global _PID
    _PID = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _kernel_at_least(major: int, minor: int) -> bool:
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return True


def _qp_type_for(ps: abi.PortSpace, qp_type: Optional[int]) -> abi.QpType:
    if ps is abi.PortSpace.IB:
        return abi.QpType(qp_type) if qp_type is not None else abi.QpType.RC
    if qp_type is not None:
        raise UsageError("qp_type is derived from the port space except for PortSpace.IB")
    return abi.QpType.RC if ps is abi.PortSpace.TCP else abi.QpType.UD


def _port_space(ps: Any, qp_type: Optional[int]) -> Tuple[abi.PortSpace, abi.QpType]:
    """The port space and QP type of a new id, checked (UsageError before any syscall)."""
    if ps.__class__ is not _PortSpace:
        try:
            ps = _PortSpace(ps)
        except ValueError:
            raise UsageError("unknown port space %r: use PortSpace.TCP, UDP, IPOIB or IB" % (ps,)) from None
    return ps, _qp_type_for(ps, qp_type)


_PortSpace = abi.PortSpace
_PS_TCP = abi.PortSpace.TCP
_QP_RC = abi.QpType.RC
_CONNECT_REQUEST = E.CONNECT_REQUEST
_CREATE_REPLY_SIZE = CODECS["rdma_ucm_create_id_resp"].size
_DESTROY_REPLY_SIZE = CODECS["rdma_ucm_destroy_id_resp"].size


class CmId:
    """An rdma_cm id (``struct rdma_cm_id``).

    ``CmId(channel, ps=PortSpace.TCP)`` creates it (CREATE_ID);
    ``CmId(None, ...)`` gives it a private channel and makes its calls blocking.
    """

    __slots__ = (
        "channel",
        "handle",
        "uid",
        "_ps",
        "_qp_type",
        "_sync",
        "_state",
        "_cache",
        "_dst",
        "_unacked",
        "_context",
        "__weakref__",
    )

    channel: EventChannel
    handle: int
    uid: int
    _state: State
    _unacked: int
    _cache: Optional[List[Any]]
    _dst: Optional[Address]

    def __init__(
        self,
        channel: Optional[EventChannel] = None,
        ps: Union[abi.PortSpace, int] = abi.PortSpace.TCP,
        *,
        qp_type: Optional[int] = None,
        context: Any = None,
    ) -> None:
        # Only what every id needs is set here.  What most ids share is not stored: ``ps``,
        # ``qp_type``, ``sync`` and ``context`` read as TCP, RC, False and None unless set;
        # ``_cache`` (the query answers, see query_addr) and ``_dst`` are set on first use.
        if ps is not _PS_TCP or qp_type is not None:
            ps, qp = _port_space(ps, qp_type)
        else:
            qp = _QP_RC
        if channel is None:
            self._sync = True
            channel = EventChannel()
            channel._wait_first = True
            channel._fast = 0
        elif channel.__class__ is not EventChannel and not isinstance(channel, EventChannel):
            raise UsageError("channel must be an EventChannel or None, got %r" % (channel,))
        if channel._live != _PID:
            channel._check()
        if ps is not _PS_TCP or qp is not _QP_RC:
            self._ps = ps
            self._qp_type = qp
        if context is not None:
            self._context = context
        _create(self, channel, ps, qp)

    @classmethod
    def _adopt(cls, channel: EventChannel, handle: int, listener: "CmId") -> "CmId":
        """An id the kernel created for an incoming connection request."""
        obj = cls.__new__(cls)
        obj.channel, obj.handle, obj._ps, obj._qp_type = channel, handle, listener.ps, listener.qp_type
        if listener.context is not None:
            obj._context = listener.context
        obj._state, obj._unacked = State.CONNECT, 0
        obj.uid = listener.uid  # the kernel reports the listener's uid for the new id
        return obj

    # -- what most ids share, stored only where it differs
    @property
    def ps(self) -> abi.PortSpace:
        """The port space given to the constructor (``PortSpace.TCP`` by default)."""
        return getattr(self, "_ps", _PS_TCP)

    @property
    def qp_type(self) -> abi.QpType:
        """The QP type: RC for TCP, UD for UDP and IPOIB, the one given for IB."""
        return getattr(self, "_qp_type", _QP_RC)

    @property
    def sync(self) -> bool:
        """True for an id made with ``CmId(None)``: a private channel, and blocking calls."""
        return getattr(self, "_sync", False)

    @property
    def context(self) -> Any:
        """Anything the caller wants to keep with the id (``rdma_cm_id.context``)."""
        return getattr(self, "_context", None)

    @context.setter
    def context(self, value: Any) -> None:
        self._context = value

    # -- state
    @property
    def state(self) -> State:
        return self._state

    def _transition(self, call: str) -> State:
        st = self._state
        if self.channel.closed:
            raise StateError("%s: the id's event channel is closed (closing it destroyed the id)" % call)
        if st is _DESTROYED:
            raise StateError("%s on a destroyed id (uid %d)" % (call, self.uid))
        new = TRANSITIONS.get((st, call))
        if new is None:
            raise StateError("%s is not allowed in state %s: %s" % (call, st, _WHY.get(call, "")))
        return new

    def __repr__(self) -> str:
        return "<CmId uid=%d handle=%s %s %s>" % (self.uid, getattr(self, "handle", "?"), self.ps.name, self._state)

    # -- commands
    def bind_addr(self, addr: Any) -> None:
        """Bind to a local address (BIND, or BIND_IP on old kernels): ``rdma_bind_addr``."""
        a = parse_address(addr)
        new = self._transition("bind_addr")
        ch = self.channel
        ch._check()
        if ch.legacy:
            data = H_BIND_IP + _BIND_IP(0, a.pack_in6(), self.handle)
        else:
            data = H_BIND + _BIND(self.handle, a.size, 0, a.pack_storage())
        ch.execute(data, "BIND" if not ch.legacy else "BIND_IP", src=a)
        self._state = new
        self._cache = None

    def resolve_addr(
        self,
        dst: Any,
        src: Any = None,
        timeout_ms: int = 2000,
    ) -> Optional[Event]:
        """Resolve ``dst`` (and bind to ``src`` or a routed source): ``rdma_resolve_addr``.

        Sends RESOLVE_ADDR (RESOLVE_IP on old kernels).  ADDR_RESOLVED or
        ADDR_ERROR follows on the channel; in sync mode this waits for it and
        raises :class:`EventError` on ADDR_ERROR.  A synchronous refusal (no
        route: ENETUNREACH, a non-local source: EADDRNOTAVAIL ...) raises
        :class:`KernelError`.  On an id that is already bound the kernel
        ignores ``src``; a different ``src`` is warned about.
        """
        ch = self.channel
        cached = ch._packed_dst
        new: Optional[State]
        if (
            dst is cached[0]
            and src is None
            and timeout_ms.__class__ is int
            and 0 <= timeout_ms <= 0xFFFFFFFF
            and ch._live == _PID
        ):
            # The common case, many ids resolving one destination: the one this channel
            # parsed and packed last (immutable, so still valid; never on a legacy kernel).
            # The general path below does the same, with every check spelled out.
            try:
                new = _AFTER_RESOLVE_ADDR[self._state]
            except KeyError:
                pass
            else:
                data = _RESOLVE_ADDR_HEAD(H_RESOLVE_ADDR, self.handle, timeout_ms) + cached[2]
                try:
                    fd = ch._fd
                    n = _device_write(fd, data) if fd >= 0 else ch._write(data)
                except OSError as e:
                    raise ch._refused(e, "RESOLVE_ADDR", {"src": None, "dst": cached[1]}) from None
                if n != _N_RESOLVE_ADDR:
                    raise ch._short(n, data, "RESOLVE_ADDR")
                self._state = new
                self._dst = cached[1]
                self._cache = None
                if ch._wait_first and self.sync:  # a sync id's channel is its own
                    return self._complete(E.ADDR_RESOLVED, "RESOLVE_ADDR", src=None, dst=cached[1])
                return None
        packed: Optional[Tuple[Any, Any, bytes]] = cached
        d: Address
        if dst is cached[0] and src is None:
            d = cached[1]
            s = None
        else:
            d = parse_address(dst)
            s = parse_address(src) if src is not None else None
            packed = None
        if (
            timeout_ms.__class__ is not int and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool))
        ) or not 0 <= timeout_ms <= 0xFFFFFFFF:
            raise UsageError("timeout_ms must be an int in 0..4294967295 (milliseconds), got %r" % (timeout_ms,))
        if s is not None and s.family != d.family:
            raise UsageError(
                "source %s and destination %s are of different families: the kernel requires one family" % (s, d)
            )
        try:
            new = _AFTER_RESOLVE_ADDR[self._state]  # the legal case, looked up without a call
        except KeyError:
            new = None
        if new is None or ch._live != _PID:
            new = self._transition("resolve_addr")  # raises, saying why (closed, illegal)
            ch._check()  # raises in a forked child
        if s is not None and self._state is _ADDR_BOUND:
            bound = self._bound_src()
            if bound is None or bound != s:
                warnings.warn(
                    SourceIgnoredWarning(
                        "id is already bound (to %s): the kernel ignores the source %s" % (bound, s)
                    ),
                    stacklevel=2,
                )
        if ch.legacy:
            data = H_RESOLVE_IP + _RESOLVE_IP(
                s.pack_in6() if s is not None else bytes(28), d.pack_in6(), self.handle, timeout_ms
            )
            size = len(data)
        elif s is None:
            # many ids resolving one destination: its part of the command is packed once per channel
            if packed is None:
                tail = _RESOLVE_ADDR(0, 0, 0, d.size, 0, b"", d.pack_storage())[_RESOLVE_ADDR_HEAD_SIZE:]
                packed = ch._packed_dst = (dst, d, tail)
            data = _RESOLVE_ADDR_HEAD(H_RESOLVE_ADDR, self.handle, timeout_ms) + packed[2]
            size = _N_RESOLVE_ADDR
        else:
            data = H_RESOLVE_ADDR + _RESOLVE_ADDR(
                self.handle, timeout_ms, s.size, d.size, 0, s.pack_storage(), d.pack_storage()
            )
            size = _N_RESOLVE_ADDR
        try:
            fd = ch._fd
            n = _device_write(fd, data) if fd >= 0 else ch._write(data)
        except OSError as e:
            raise ch._refused(e, "RESOLVE_ADDR" if not ch.legacy else "RESOLVE_IP", {"src": s, "dst": d}) from None
        if n != size:
            raise ch._short(n, data, "RESOLVE_ADDR")
        self._state = new
        self._dst = d
        self._cache = None
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(E.ADDR_RESOLVED, "RESOLVE_ADDR", src=s, dst=d)
        return None

    def resolve_route(self, timeout_ms: int = 2000) -> Optional[Event]:
        """Resolve the route to the destination (RESOLVE_ROUTE): ``rdma_resolve_route``.

        ROUTE_RESOLVED or ROUTE_ERROR follows.  The kernel refuses
        ``timeout_ms == 0`` with EINVAL; so do we, before the syscall.
        """
        if (
            timeout_ms.__class__ is not int and (not isinstance(timeout_ms, int) or isinstance(timeout_ms, bool))
        ) or not 0 < timeout_ms <= 0xFFFFFFFF:
            raise UsageError("timeout_ms must be an int in 1..4294967295 (milliseconds), got %r" % (timeout_ms,))
        ch = self.channel
        try:
            new = _AFTER_RESOLVE_ROUTE[self._state]  # the legal case, looked up without a call
        except KeyError:
            new = None
        if new is None or ch._live != _PID:
            new = self._transition("resolve_route")  # raises, saying why (closed, illegal)
            ch._check()  # raises in a forked child
        data = _RESOLVE_ROUTE_CMD(H_RESOLVE_ROUTE, self.handle, timeout_ms)
        try:
            fd = ch._fd
            n = _device_write(fd, data) if fd >= 0 else ch._write(data)
        except OSError as e:
            raise ch._refused(e, "RESOLVE_ROUTE", {"dst": self._peer()}) from None
        if n != _N_RESOLVE_ROUTE:
            raise ch._short(n, data, "RESOLVE_ROUTE")
        self._state = new
        self._cache = None
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(E.ROUTE_RESOLVED, "RESOLVE_ROUTE", dst=self._peer())
        return None

    def listen(self, backlog: int = 0) -> None:
        """Listen for connection requests (LISTEN): ``rdma_listen``."""
        if not isinstance(backlog, int) or not 0 <= backlog <= 0x7FFFFFFF:
            raise UsageError("backlog must be an int >= 0, got %r" % (backlog,))
        new = self._transition("listen")
        self.channel._check()
        self.channel.execute(H_LISTEN + _LISTEN(self.handle, backlog), "LISTEN")
        self._state = new
        self._cache = None

    def connect(
        self,
        qp_num: int = 0,
        private_data: bytes = b"",
        *,
        responder_resources: int = 0,
        initiator_depth: int = 0,
        retry_count: int = 7,
        rnr_retry_count: int = 7,
        flow_control: int = 0,
        srq: int = 0,
        qkey: int = 0,
        ece: Tuple[int, int] = (0, 0),
    ) -> Optional[Event]:
        """Connect to the resolved destination (CONNECT): ``rdma_connect``.

        Without libibverbs there is no QP here: ``qp_num`` names the QP the
        caller made elsewhere (the CM carries it to the peer).
        """
        if not isinstance(private_data, (bytes, bytearray)):
            raise UsageError("private_data must be bytes")
        if len(private_data) > abi.RDMA_MAX_PRIVATE_DATA:
            raise UsageError(
                "private_data is %d bytes; the CM carries at most %d" % (len(private_data), abi.RDMA_MAX_PRIVATE_DATA)
            )
        for name, v, hi in (
            ("qp_num", qp_num, 0xFFFFFF),
            ("responder_resources", responder_resources, 0xFF),
            ("initiator_depth", initiator_depth, 0xFF),
            ("retry_count", retry_count, 7),
            ("rnr_retry_count", rnr_retry_count, 7),
        ):
            if not isinstance(v, int) or not 0 <= v <= hi:
                raise UsageError("%s must be an int in 0..%d, got %r" % (name, hi, v))
        new = self._transition("connect")
        ch = self.channel
        ch._check()
        data = H_CONNECT + _CONNECT(
            qp_num,
            qkey,
            bytes(private_data),
            len(private_data),
            srq,
            responder_resources,
            initiator_depth,
            flow_control,
            retry_count,
            rnr_retry_count,
            1,
            self.handle,
            0,
            ece[0],
            ece[1],
        )
        ch.execute(data, "CONNECT", dst=self._peer())
        self._state = new
        self._cache = None
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            return self._complete(E.ESTABLISHED, "CONNECT", dst=self._peer())
        return None

    def disconnect(self) -> None:
        new = self._transition("disconnect")
        self.channel.execute(H_DISCONNECT + _DISCONNECT(self.handle), "DISCONNECT")
        self._state = new

    def destroy(self) -> int:
        """Destroy the id (DESTROY_ID): ``rdma_destroy_id``.  Returns ``events_reported``.

        Never blocks: events not yet acked are reported with an
        :class:`UnackedEventsWarning` (librdmacm would wait for them for ever).
        """
        if self._state is _DESTROYED:
            raise StateError("destroy: id uid %d is already destroyed" % self.uid)
        ch = self.channel
        if ch._live != _PID:
            if ch.closed:
                self._state = _DESTROYED
                raise StateError("destroy: the id's event channel is closed (the kernel destroyed its ids then)")
            ch._check()
        pool = ch._destroy_replies
        try:
            reply = pool.pop()
        except IndexError:  # another thread has it
            reply = ReplyBuffer(_DESTROY_REPLY_SIZE)
        data = _DESTROY_CMD(H_DESTROY, reply.address, self.handle, 0)
        try:
            fd = ch._fd
            n = _device_write(fd, data) if fd >= 0 else ch._write(data)
        except OSError as e:
            pool.append(reply)
            raise ch._refused(e, "DESTROY_ID", {}) from None
        if n != _N_DESTROY:
            raise ch._short(n, data, "DESTROY_ID")
        reported: int = reply.u32[0]
        pool.append(reply)
        self._state = _DESTROYED
        other = ch._ids.pop(self.uid, None)
        if other is not self and other is not None:
            ch._ids[self.uid] = other  # an adopted id shares its listener's uid: keep the listener
        if self._unacked:
            warnings.warn(
                UnackedEventsWarning(
                    "id uid %d destroyed with %d event(s) not acked (harmless here; librdmacm would block)"
                    % (self.uid, self._unacked)
                ),
                stacklevel=2,
            )
        if ch._wait_first and self.sync:  # a sync id's channel is its own
            ch.close()
        return reported

    def __enter__(self) -> "CmId":
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._state is not State.DESTROYED and not self.channel.closed:
            self.destroy()

    def _ack(self, event: Event) -> None:
        # Event.ack counts down _unacked itself (one call less per event); kept for callers
        # that ack through the id
        if self._unacked <= 0:
            raise StateError("ack: every event of id uid %d was already acked" % self.uid)
        self._unacked -= 1

    def _peer(self) -> Optional[Address]:
        """The destination given to resolve_addr (None before it)."""
        try:
            return self._dst
        except AttributeError:
            return None

    def _answers(self) -> List[Any]:
        """The cached query answers ``[addr info, gids]``, until the next state change or
        event (which drop the list: ``_cache = None``); made on first use."""
        try:
            cache = self._cache
        except AttributeError:
            cache = None
        if cache is None:
            cache = self._cache = [None, None]
        return cache

    def _complete(self, want: E, command: str, **ctx: Any) -> Event:
        """Sync mode: wait for this id's outcome event; raise on a failure event."""
        while True:
            ev = self.channel.get_event(None)
            if ev is None or ev.id is not self:
                continue
            ev.ack()
            if ev.event is want:
                return ev
            if not ev.ok or ev.status:
                raise EventError(ev, command, netdev=None, **ctx)
            if ev.event is E.CONNECT_RESPONSE:
                continue
            return ev

    # -- queries (lazy, cached until the next state change)
    def _bound_src(self) -> Optional[Address]:
        try:
            return self.query_addr().src
        except KernelError:
            return None

    def _alive(self, call: str) -> None:
        # before any cache or syscall: the kernel reuses a destroyed id's handle for new ids
        if self._state is State.DESTROYED:
            raise StateError("%s on a destroyed id (uid %d): create a new id" % (call, self.uid))

    def query_addr(self) -> AddrInfo:
        """QUERY ADDR (QUERY_ROUTE on old kernels): source, destination, device, port, pkey."""
        self._alive("query_addr")
        cache = self._answers()
        if cache[0] is not None:
            return cache[0]  # type: ignore[no-any-return]
        ch = self.channel
        ch._check()
        buf = ch._r_query
        with ch._cmd_lock:
            if ch.legacy:
                buf.clear()
                buf.fill(b"\0" * (_ROUTE_RESP.size - 8) + b"\xff\xff\xff\xff")  # ibdev_index = -1 before 5.8
                ch.execute(H_QUERY_ROUTE + _QUERY(buf.address, self.handle, 0), "QUERY_ROUTE")
                r = _ROUTE_RESP.unpack_dict(buf.view)
                src = unpack_sockaddr(r["src_addr"])
                dst = unpack_sockaddr(r["dst_addr"])
                guid, port, index = r["node_guid"], r["port_num"], r["ibdev_index"]
                pkey = r["ib_route[0].pkey"]
            else:
                buf.clear()
                buf.fill(b"\0" * (_ADDR_RESP.size - 8) + b"\xff\xff\xff\xff")  # ibdev_index = -1 on old kernels
                ch.execute(
                    H_QUERY_ADDR + _QUERY(buf.address, self.handle, abi.QueryOption.ADDR), "QUERY", dst=self._peer()
                )
                guid, port, _r, pkey, src_size, dst_size, s_raw, d_raw, index, _r1 = _ADDR_RESP.unpack_from(buf.view)
                src = unpack_sockaddr(s_raw) if src_size else None
                dst = unpack_sockaddr(d_raw) if dst_size else None
        device = None
        if guid or (index != _NO_INDEX and port):
            device = _device_ref(ch._t, None if index == _NO_INDEX else index, guid)
        info = AddrInfo(src, dst, device, port, pkey)
        cache[0] = info  # into the list taken before asking: an event meanwhile dropped it
        return info

    def query_gid(self) -> Tuple[Optional[Address], Optional[Address]]:
        """QUERY GID: source and destination as AF_IB addresses (the GIDs, pkey, service id)."""
        self._alive("query_gid")
        cache = self._answers()
        if cache[1] is not None:
            return cache[1]  # type: ignore[no-any-return]
        ch = self.channel
        ch._check()
        buf = ch._r_query
        with ch._cmd_lock:
            buf.clear()
            ch.execute(H_QUERY_ADDR + _QUERY(buf.address, self.handle, abi.QueryOption.GID), "QUERY", dst=self._peer())
            _g, _p, _r, _pk, src_size, dst_size, s_raw, d_raw, _i, _r1 = _ADDR_RESP.unpack_from(buf.view)
        res = (unpack_sockaddr(s_raw) if src_size else None, unpack_sockaddr(d_raw) if dst_size else None)
        cache[1] = res
        return res

    def query_path(self) -> List[PathRecord]:
        """QUERY PATH: the path records of the resolved route (up to 6)."""
        self._alive("query_path")
        ch = self.channel
        ch._check()
        buf = ch._r_query
        with ch._cmd_lock:
            buf.clear()
            ch.execute(H_QUERY_PATH + _QUERY(buf.address, self.handle, abi.QueryOption.PATH), "QUERY", dst=self._peer())
            raw = buf.bytes(_QUERY_PATH_REPLY)
        num = min(_U32.unpack_from(raw)[0], QUERY_PATH_MAX)
        out = []
        for i in range(num):
            off = 8 + i * _PATH_SIZE
            flags = _U32.unpack_from(raw, off)[0]
            out.append(PathRecord.decode(flags, raw[off + 8 : off + _PATH_SIZE]))
        return out

    # -- librdmacm's accessors
    def get_local_addr(self) -> Optional[Address]:
        """``rdma_get_local_addr``: the bound source address (and port)."""
        return self.query_addr().src

    def get_peer_addr(self) -> Optional[Address]:
        """``rdma_get_peer_addr``: the destination address (and port)."""
        info = self.query_addr()
        return info.dst if info.dst is not None else self._peer()

    def get_src_port(self) -> int:
        """``rdma_get_src_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_local_addr()
        return a.port if a is not None else 0

    def get_dst_port(self) -> int:
        """``rdma_get_dst_port``, as a host-order number (librdmacm returns it in network order)."""
        a = self.get_peer_addr()
        return a.port if a is not None else 0

    local_addr = property(get_local_addr)
    peer_addr = property(get_peer_addr)

    @property
    def device(self) -> Optional[DeviceRef]:
        return self.query_addr().device

    @property
    def port_num(self) -> int:
        return self.query_addr().port_num

    @property
    def pkey(self) -> int:
        return self.query_addr().pkey

    @property
    def sgid(self) -> Optional[ipaddress.IPv6Address]:
        s = self.query_gid()[0]
        return s.ip if s is not None and s.family == AF_IB else None  # type: ignore[return-value]

    @property
    def dgid(self) -> Optional[ipaddress.IPv6Address]:
        d = self.query_gid()[1]
        return d.ip if d is not None and d.family == AF_IB else None  # type: ignore[return-value]


def _create(cm_id: CmId, channel: EventChannel, ps: abi.PortSpace, qp: abi.QpType) -> CmId:
    """CREATE_ID for a checked, not yet created ``cm_id`` on a live ``channel``: the one
    place that writes it (``CmId()`` and ``EventChannel.create_id`` both end here)."""
    cm_id.channel = channel
    cm_id._state = _IDLE
    cm_id._unacked = 0
    pool = channel._create_replies
    try:
        reply = pool.pop()
    except IndexError:  # another thread has it
        reply = ReplyBuffer(_CREATE_REPLY_SIZE)
    uid = cm_id.uid = channel._next_uid
    channel._next_uid = uid + 1
    data = _CREATE_CMD(H_CREATE, uid, reply.address, ps, qp, b"")
    try:
        fd = channel._fd
        n = _device_write(fd, data) if fd >= 0 else channel._write(data)
    except OSError as e:
        pool.append(reply)
        raise channel._refused(e, "CREATE_ID", {}) from None
    if n != _N_CREATE:
        raise channel._short(n, data, "CREATE_ID")
    cm_id.handle = reply.u32[0]
    pool.append(reply)
    channel._ids[uid] = cm_id
    return cm_id


_new_object = object.__new__
