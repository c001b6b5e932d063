"""The steps the cases take to bring ids where they need them.

:func:`with_id` lends a case a fresh id on the shared fd and destroys it after.  The
connection manager's cases run on an fd of their own, a :class:`CaseFd` (closing it
destroys the case's ids and whatever connections they hold): :func:`on_own_fd` gives a case
one, :func:`routed`, :func:`listener` and :func:`request` make a resolved client, a
listener and a connection request on the local address, each at a port of its own
(:func:`at_new_port`), and :meth:`CaseFd.events` reads what follows.  A step that fails
raises OSError: the runner reports the case's set-up as failed.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any, Callable, Dict, Iterable, List, NamedTuple, Optional, Tuple

from .. import abi
from ..core.poll import Poller
from ..addr import Address, parse_address
from ..core.events import decode_event_head
from .expect import outcome_text
from .raw import Raw
from .registry import CaseResult, Context

__all__ = ["NO_SUCH_ID", "E", "CaseFd", "Seen", "with_id", "conn_fields", "at_new_port", "routed", "listener",
           "request", "connect_on", "on_own_fd", "peer_summary"]

E = abi.CmEventType
#: a handle that names no id (the kernel hands out small ones, from 0 up)
NO_SUCH_ID = 0xFFFFFF
#: the ports of the cases' listeners: a range of this process's own, one port per listener
_ports = iter(range(30000 + os.getpid() % 500 * 40, 65000))
#: QP numbers for the connections (no two alike while one is alive or in timewait: the IB CM
#: rejects a second connection with the same QP number and CA GUID as stale, reason 10)
_qpns = iter(range(0x100000 + int.from_bytes(os.urandom(3), "little") % 0xE00000, 0xFFFFFF))


class Seen(NamedTuple):
    """An event as a case sees it: the id's uid and handle, the type and the status (signed)."""

    uid: int
    handle: int
    event: int
    status: int


class CaseFd(Raw):
    """A case's own fd, closed (its ids with it) when the case ends."""

    def __enter__(self) -> "CaseFd":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self, timeout: float = 3.0, until: Optional[int] = None) -> List[Seen]:
        """The events queued within ``timeout`` seconds (or until one of type ``until``)."""
        out: List[Seen] = []
        deadline = time.monotonic() + timeout
        poller = Poller(self.dev.fileno(), -1)
        while True:
            err = self.get_event()
            if err == 0:
                uid, handle, kind, status, _param, _ece = decode_event_head(self.reply.view)
                seen = Seen(uid, handle, int(kind), status)
                out.append(seen)
                if until is not None and seen.event == until:
                    return out
                continue
            if err != errno.EAGAIN:
                raise OSError(err, "GET_EVENT failed: %s" % outcome_text(err))
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            poller.wait(int(left * 1000) + 1)

    def wait(self, event: int, timeout: float = 3.0) -> Seen:
        """The next event of type ``event`` (others before it are dropped), or OSError."""
        for seen in self.events(timeout, until=event):
            if seen.event == event:
                if seen.status:
                    raise OSError(errno.EIO, "%s with status %d" % (E(event).name, seen.status))
                return seen
        raise OSError(errno.ETIMEDOUT, "no %s within %.0f s" % (E(event).name, timeout))


def with_id(ctx: Context, fn: Callable[[int], int], ps: int = abi.PortSpace.TCP) -> int:
    """``fn(handle)`` of a fresh id on the shared fd, destroyed after."""
    h = ctx.raw.create(ps)
    try:
        return fn(h)
    finally:
        ctx.raw.destroy(h)


def conn_fields(handle: int, private_data: bytes = b"", valid: int = 1, qp_num: Optional[int] = None,
                uid: Optional[int] = None) -> Dict[str, object]:
    """CONNECT's (or, with ``uid``, ACCEPT's) fields: librdmacm's defaults, a made-up QP
    number (a fresh one unless given)."""
    fields: Dict[str, object] = {
        "id": handle, "conn_param.qp_num": next(_qpns) if qp_num is None else qp_num,
        "conn_param.private_data": private_data, "conn_param.private_data_len": len(private_data),
        "conn_param.responder_resources": 1, "conn_param.initiator_depth": 1, "conn_param.retry_count": 7,
        "conn_param.rnr_retry_count": 7, "conn_param.valid": valid}
    if uid is not None:
        fields["uid"] = uid
    return fields


def connect_on(fd: Raw, h: int, **kw: Any) -> int:
    """CONNECT of id ``h`` with :func:`conn_fields` (``kw``: theirs)."""
    return fd.send("CONNECT", conn_fields(h, **kw))


def at_new_port(ctx: Context) -> Address:
    """The local address at a port no other case of this process uses."""
    return parse_address(ctx.local.ip, port=next(_ports))


def routed(fd: CaseFd, dst: Address, ps: int = abi.PortSpace.TCP) -> int:
    """An id resolved to ``dst``, address and route (ROUTE_RESOLVED)."""
    h = fd.create(ps)
    err = fd.resolve(h, dst)
    if err:
        raise OSError(err, "RESOLVE_ADDR failed: %s" % outcome_text(err))
    fd.wait(E.ADDR_RESOLVED)
    err = fd.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 2000})
    if err:
        raise OSError(err, "RESOLVE_ROUTE failed: %s" % outcome_text(err))
    fd.wait(E.ROUTE_RESOLVED)
    return h


def listener(fd: CaseFd, addr: Address, backlog: int = 8, ps: int = abi.PortSpace.TCP) -> int:
    """An id bound to ``addr`` and listening."""
    h = fd.create(ps)
    err = fd.bind(h, addr) or fd.send("LISTEN", {"id": h, "backlog": backlog})
    if err:
        raise OSError(err, "BIND or LISTEN failed: %s" % outcome_text(err))
    return h


def request(fd: CaseFd, ctx: Context, private_data: bytes = b"") -> Tuple[int, int]:
    """(the client's handle, the handle of the listener's CONNECT_REQUEST) for a connection
    on the local address, the client's REQ carrying ``private_data``."""
    addr = at_new_port(ctx)
    listener(fd, addr)
    client = routed(fd, addr)
    err = connect_on(fd, client, private_data=private_data)
    if err:
        raise OSError(err, "CONNECT failed: %s" % outcome_text(err))
    return client, fd.wait(E.CONNECT_REQUEST).handle


def on_own_fd(fn: Callable[[CaseFd, Context], CaseResult]) -> Callable[[Context], CaseResult]:
    """A case that runs as ``fn(fd, ctx)`` on a :class:`CaseFd` of its own."""

    def run_it(ctx: Context) -> CaseResult:
        with CaseFd.beside(ctx.raw) as fd:
            return fn(fd, ctx)

    run_it.__name__ = fn.__name__
    return run_it


def peer_summary(err: int, seen: Iterable[Seen], client: int) -> str:
    """``"EINVAL, peer REJECTED 28"``: a command's errno and the events the peer ``client`` got."""
    peer = " ".join("%s %d" % (E(s.event).name, s.status) for s in seen if s.handle == client)
    return "%s, peer %s" % (outcome_text(err), peer or "nothing")
