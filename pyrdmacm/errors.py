"""Exceptions: who is at fault, and what to do next.

Four kinds of failure, four classes, one base (:class:`RdmaCmError`):

* :class:`KernelError` -- the kernel refused a command (``write()`` failed).  An
  :class:`OSError` with the real ``errno``, the command's name and the
  addresses involved.
* :class:`EventError` -- a command was accepted but its outcome arrived as a
  failure event (``ADDR_ERROR`` with ``status == -ETIMEDOUT`` ...).  Also an
  :class:`OSError` whose ``errno`` is ``-status``; the event is attached.
* :class:`PrecheckError` -- the routing pre-check found that the kernel will
  certainly refuse (no route, a source that is not local, an egress netdev
  without an RDMA device).  Same ``errno`` the kernel would give.
* :class:`UsageError` -- a misuse caught before any system call (a wrong-state
  call, a bad argument).  A :class:`ValueError`; :class:`StateError` is the
  wrong-state kind.
* :class:`DecodeError` -- bytes that do not decode as the named struct.
* :class:`DeviceNodeError` -- the rdma_cm device node cannot be used; also the built-in
  class of its errno (:class:`FileNotFoundError` for ENOENT ...).
* :class:`~pyrdmacm.addr.lookup.NameServiceError` -- the C library's name service did not
  answer a lookup: a :class:`socket.gaierror` (its ``errno`` the ``EAI_*`` code).  It is
  defined beside the lookups, which load :mod:`socket`, so that this module does not.

Every message ends with a hint: what the user can do about it.
"""

from __future__ import annotations

import errno as _errno
import os
from typing import Any, Dict, Optional, Tuple

__all__ = [
    "RdmaCmError",
    "KernelError",
    "EventError",
    "PrecheckError",
    "UsageError",
    "StateError",
    "DecodeError",
    "DeviceNodeError",
    "errno_name",
    "hint_for",
]


#: errnos of the kernel's own (include/linux/errno.h, "should never be seen by user
#: programs") that rdma_cm's commands return as they are: name and meaning
_KERNEL_ERRNOS = {
    524: ("ENOTSUPP", "Operation is not supported (the kernel's internal ENOTSUPP)"),
}


def errno_name(err: int) -> str:
    """``110`` -> ``'ETIMEDOUT'``; unknown numbers print as ``'E?123'``."""
    name = _errno.errorcode.get(abs(err))
    if name is None:
        known = _KERNEL_ERRNOS.get(abs(err))
        return known[0] if known else "E?%d" % abs(err)
    return name


def _strerror(err: int) -> str:
    """``os.strerror``, and the meaning of the kernel's own errnos the C library does not know."""
    known = _KERNEL_ERRNOS.get(abs(err))
    return known[1] if known else os.strerror(abs(err))


def error_object(e: BaseException, message: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
    """The one error object of the JSON pyrdmacm prints (every subcommand's, the fabric
    check's cells): ``{errno, name, message}`` (``name`` null when there is no errno),
    with ``extra`` first (``step``, ``refused`` ...); an OSError's message without
    Python's "[Errno N]" (the name says it)."""
    err = getattr(e, "errno", None)
    if message is None:
        message = e.strerror if isinstance(e, OSError) and isinstance(e.strerror, str) and e.strerror else str(e)
    out: Dict[str, Any] = dict(extra)
    out.update(errno=err, name=errno_name(err) if err else None, message=message)
    return out


# What the user can do about an errno, in the context of address resolution.
_HINTS = {
    _errno.ENODEV: "the route's egress netdev has no RDMA device (check `pyrdmacm route DST` "
    "and `rdma link`; in a container, the RDMA device must be in this network namespace)",
    _errno.ETIMEDOUT: "no ARP/ND reply from the destination (or its gateway) within timeout_ms: "
    "is the host up and on-link, or is the timeout too short?",
    _errno.ENETUNREACH: "no route to the destination in this network namespace (see `ip route get DST`)",
    _errno.EHOSTUNREACH: "the routing tables refuse this destination (see `ip route get DST`)",
    _errno.EADDRNOTAVAIL: "the source address is not a local address of this network namespace, "
    "or no free port is left (see `ip addr`)",
    _errno.EADDRINUSE: "the id is already bound, or that address and port are taken: use a fresh id",
    _errno.EINVAL: "the kernel refused the call in this id's state or with these arguments",
    _errno.EACCES: "ports below 1024 need CAP_NET_BIND_SERVICE; or the fd is used by a process "
    "with other credentials than the one that opened it",
    _errno.ENOENT: "the kernel does not know this id (already destroyed?)",
    _errno.ENOSYS: "this kernel does not implement the command",
    # every command but DESTROY_ID after DEVICE_REMOVAL (ucma_get_ctx: the context is closing)
    _errno.ENXIO: "the id's RDMA device was removed (DEVICE_REMOVAL): destroy the id and make a new one",
    _errno.EAFNOSUPPORT: "address family not supported by rdma_cm",
}


# What an errno means for one command, where it means something else than in general
# (cm-notes: the kernel's rules for each command).
_COMMAND_HINTS = {
    ("CONNECT", _errno.EINVAL): "the kernel refused the connection request: the id must be ROUTE_RESOLVED "
    "and connect once; private data at most 56 bytes (180 for UDP)",
    # 5.10 and 7.2 (Soft-RoCE): CONNECT after SET_OPTION IB_PATH with an all-zero record
    ("CONNECT", _errno.ENOENT): "the path record set with set_option(OptionIb.PATH) names a source GID this port "
    "does not have: give a record with one of its GIDs (query_path() on a routed id gives one), or resolve_route()",
    ("SET_OPTION", _errno.ENODEV): "an IB path needs the id's netdev on RoCE: an id resolved to the any address "
    "has none (resolve a local address instead)",
    ("ACCEPT", _errno.EINVAL): "the kernel refused the accept and rejected the peer's request (REJ 28): "
    "destroy this id; the peer may retry",
    ("REJECT", _errno.EINVAL): "nothing to reject: the request was answered already (or the id never had one)",
    ("NOTIFY", _errno.EINVAL): "NOTIFY needs an accepted connection (after accept(), before ESTABLISHED)",
    ("DISCONNECT", _errno.EINVAL): "the id has no connection to disconnect",
    ("JOIN_MCAST", _errno.EINVAL): "a join needs a datagram id (PortSpace.UDP or IPOIB) bound to an RDMA "
    "device, and join flags 0 or 1",
    ("JOIN_MCAST", 524): "on RoCE the kernel joins IPv4 groups only (cma.c:cma_iboe_join_multicast: an IPv6 "
    "group on a RoCE v2 port is ENOTSUPP; seen on 6.1 and 7.2 with Soft-RoCE): give an IPv4 group",
    ("JOIN_IP_MCAST", _errno.EINVAL): "a join needs a datagram id (PortSpace.UDP or IPOIB) bound to an RDMA device",
    ("LEAVE_MCAST", _errno.ENOENT): "the kernel knows no such membership (left already?)",
    ("SET_OPTION", _errno.ENOSYS): "the kernel has no such option",
    ("QUERY", _errno.ENOSYS): "this kernel does not know that QUERY option (IB_SERVICE needs Linux 6.17)",
    ("SET_OPTION", _errno.EINVAL): "the kernel refused the option in this state or with this value",
    ("MIGRATE_ID", _errno.EINVAL): "the id's channel is no rdma_cm fd of this process",
    ("MIGRATE_ID", _errno.ENOENT): "the kernel knows no such id on the old channel",
    ("INIT_QP_ATTR", _errno.EINVAL): "INIT_QP_ATTR needs an id bound to an RDMA device, and a QP state 0..6 "
    "(and, on a connected id, a connection in progress for RTR and RTS)",
    ("WRITE_CM_EVENT", _errno.EINVAL): "this kernel has no WRITE_CM_EVENT (Linux 6.17 and later have it), "
    "or the event is not USER",
    ("RESOLVE_IB_SERVICE", _errno.EINVAL): "this kernel has no RESOLVE_IB_SERVICE (Linux 6.17 and later have it)",
    ("RESOLVE_IB_SERVICE", _errno.EOPNOTSUPP): "service records need an InfiniBand SA: RoCE and iWARP have none",
    # AF_IB on RoCE (5.10 and 7.2, Soft-RoCE): a source GID binds no port (ENODEV), an AF_IB
    # destination resolves to the device, and its route has no netdev to go over (ENODEV)
    ("BIND", _errno.ENODEV): "no RDMA port has this source address (check `rdma link` and `pyrdmacm devices`); "
    "an AF_IB source GID must be an InfiniBand port's: RoCE ports take IP sources",
    ("RESOLVE_ADDR", _errno.ENODEV): "the source address has no RDMA device behind it (check `rdma link`); an AF_IB "
    "source GID must be an InfiniBand port's (RoCE ports take IP sources), and an AF_IB destination needs a local "
    "port with a GID of its subnet prefix (see `pyrdmacm devices`)",
    ("RESOLVE_ROUTE", _errno.ENODEV): "the id's netdev has no RDMA device, or is gone (check `pyrdmacm route DST` and "
    "`rdma link`); an AF_IB destination is routed over InfiniBand only: on RoCE the kernel has no netdev for it",
}


def hint_for(err: int, command: Optional[str] = None) -> str:
    """What to do about ``err`` (for ``command``, when it means something particular there)."""
    if command is not None:
        hint = _COMMAND_HINTS.get((command, abs(err)))
        if hint:
            return hint
    return _HINTS.get(abs(err), "")


class RdmaCmError(Exception):
    """Base of every pyrdmacm exception."""


class _Located(RdmaCmError, OSError):
    """An OSError that also says which command and which addresses were involved."""

    def __init__(
        self,
        err: int,
        what: str,
        *,
        command: Optional[str] = None,
        src: Any = None,
        dst: Any = None,
        netdev: Optional[str] = None,
        device: Optional[str] = None,
        hint: Optional[str] = None,
    ) -> None:
        err = abs(err)
        self.command = command
        self.src = src
        self.dst = dst
        self.netdev = netdev
        self.device = device
        self.hint = hint_for(err, command) if hint is None else hint
        ctx = []
        if src is not None:
            ctx.append("src %s" % (src,))
        if dst is not None:
            ctx.append("dst %s" % (dst,))
        if netdev:
            ctx.append("netdev %s" % netdev)
        if device:
            ctx.append("device %s" % device)
        msg = what
        if ctx:
            msg += " (" + ", ".join(ctx) + ")"
        msg += ": %s %s" % (errno_name(err), _strerror(err))
        if self.hint:
            msg += " -- " + self.hint
        OSError.__init__(self, err, msg)
        if self.strerror != msg:  # a class with its own __new__ (DeviceNodeError's): OSError's
            self.args, self.errno, self.strerror = (err, msg), err, msg  # __init__ did nothing

    def __reduce__(self) -> Any:  # keep pickling/copy working with keyword-only args
        return (_rebuild, (type(self), self.__dict__.copy(), self.args))


def _rebuild(cls: Any, state: Dict[str, Any], args: Tuple[Any, ...]) -> Any:
    obj = OSError.__new__(cls, *args)  # not cls.__new__: DeviceNodeError's takes other arguments
    OSError.__init__(obj, *args)
    obj.__dict__.update(state)
    return obj


class KernelError(_Located):
    """The kernel refused a command: ``write()`` to rdma_cm failed with ``errno``."""

    def __init__(self, err: int, command: str, **kw: Any) -> None:
        super().__init__(err, "%s refused by the kernel" % command, command=command, **kw)


class EventError(_Located):
    """A command's outcome arrived as a failure event; ``event`` is attached."""

    def __init__(self, event: Any, command: Optional[str] = None, **kw: Any) -> None:
        self.event = event
        status = getattr(event, "status", 0) or 0
        name = getattr(getattr(event, "event", None), "name", str(getattr(event, "event", "?")))
        err = -status if status < 0 else status
        what = "%s (status %d)" % (name, status)
        explain = getattr(event, "explain", None)
        if status > 0 and explain is not None:  # a reject reason or a SIDR status, not an errno
            reason = getattr(event, "status_name", "")
            what = "%s (reason %d %s)" % (name, status, reason) if reason else what
            kw.setdefault("hint", explain())
            err = _errno.ECONNREFUSED
        elif explain is not None and "hint" not in kw:
            kw["hint"] = explain() or None
        super().__init__(err or _errno.EIO, what, command=command, **kw)


class PrecheckError(_Located):
    """The routing pre-check shows the kernel will refuse; ``prediction`` is attached."""

    def __init__(self, err: int, what: str, prediction: Any = None, **kw: Any) -> None:
        self.prediction = prediction
        super().__init__(err, what, **kw)


class DeviceNodeError(_Located):
    """``/dev/infiniband/rdma_cm`` cannot be used (absent, wrong kind, wrong ABI).  As
    ``OSError(errno, ...)`` is, it is also the built-in class of its errno: ENOENT's a
    :class:`FileNotFoundError`, EACCES's and EPERM's a :class:`PermissionError`."""

    def __new__(cls, err: int, what: str, hint: str) -> "DeviceNodeError":
        if cls is DeviceNodeError:
            cls = _DEVICE_NODE_ERRORS.get(abs(err), cls)
        return super().__new__(cls, err, what)

    def __init__(self, err: int, what: str, hint: str) -> None:
        super().__init__(err, what, hint=hint)


class _DeviceNodeMissing(DeviceNodeError, FileNotFoundError):
    """A DeviceNodeError of ENOENT (a FileNotFoundError too)."""


class _DeviceNodeForbidden(DeviceNodeError, PermissionError):
    """A DeviceNodeError of EACCES or EPERM (a PermissionError too)."""


_DEVICE_NODE_ERRORS = {_errno.ENOENT: _DeviceNodeMissing, _errno.EACCES: _DeviceNodeForbidden,
                       _errno.EPERM: _DeviceNodeForbidden}


class UsageError(RdmaCmError, ValueError):
    """A misuse caught before any system call."""


class StateError(UsageError):
    """The call is not legal in the id's (or channel's) current state.

    ``errno`` is EINVAL, what the kernel answers a command in the wrong state.
    """

    errno = _errno.EINVAL


class DecodeError(RdmaCmError, ValueError):
    """Bytes that do not decode as ``struct`` (at ``offset``, if known)."""

    def __init__(self, struct: str, message: str, offset: Optional[int] = None) -> None:
        self.struct = struct
        self.offset = offset
        where = " at offset %d" % offset if offset is not None else ""
        super().__init__("cannot decode %s%s: %s" % (struct, where, message))
