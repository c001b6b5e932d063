"""The fake kernel's file: what one open ``/dev/infiniband/rdma_cm`` holds -- its fd, its ids
with their IB CM ids and memberships, its event queue -- and the machine's tables of ids and
files.

Theory of operation
-------------------
A :class:`UcmaFile` is ``struct ucma_file`` with the ``ucma_context`` of each id it holds.
Events are real ``rdma_ucm_event_resp`` structs in a queue; a pipe carries one byte per
queued event, so the file's fd (the pipe's read end) polls readable exactly when the
kernel's fd would.  Events due later (an ARP time-out) are queued by a timer, on the file
that holds the id by then.  The file answers the commands that are about it rather than
about one id's life: GET_EVENT and WRITE_CM_EVENT; MIGRATE_ID takes an id from another file
with :meth:`UcmaFile.take_over`.

A :class:`Machine` is the kernel's tables of one host: which file holds each id (the
kernel's ``ctx_table`` is the machine's, so an id keeps its handle when MIGRATE_ID moves it,
and an id named on another file than its own is EINVAL, not ENOENT) and its open files.
Every lone fake of a process is one machine; a fabric's host is one.
"""

from __future__ import annotations

import errno
import itertools
import os
import threading
import weakref
from typing import Callable, Dict, List, Optional

from ..abi import structs as _structs
from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ..errors import UsageError
from ._ibcm import IbCmId
from .fake_ids import IdContext, Membership, Queued, command_fields, kernel_error

__all__ = ["Machine", "LONE", "UcmaFile", "next_handle", "next_mc"]

E = abi.CmEventType
S = abi.RdmaCmState

_EVENT = CODECS["rdma_ucm_event_resp"]

#: The kernel's id and multicast handles come from two tables of the whole machine
#: (``ctx_table``, ``multicast_table``), not one per file.  The fake's are counters shared by
#: all its kernels (unique across machines too, which no test can tell from the kernel's).
next_handle = itertools.count(1).__next__
next_mc = itertools.count(1).__next__


class Machine:
    """The tables of one machine's rdma_cm: which file holds each id, and its open files."""

    def __init__(self) -> None:
        #: handle -> the file holding the id
        self.holders: "weakref.WeakValueDictionary[int, UcmaFile]" = weakref.WeakValueDictionary()
        #: the machine's open files
        self.fds: "weakref.WeakSet[UcmaFile]" = weakref.WeakSet()

    def holder(self, handle: int) -> "Optional[UcmaFile]":
        """The open file that holds id ``handle``, or None."""
        f = self.holders.get(handle)
        return f if f is not None and not f.closed else None


#: the machine of every fake that is not a fabric's host's
LONE = Machine()


class UcmaFile:
    """One open rdma_cm file of a fake kernel, on a :class:`Machine`: its fd (a pipe's read
    end, readable while an event is queued), the ids it holds (:attr:`contexts`, by handle),
    their IB CM ids (:attr:`cms`) and multicast memberships (:attr:`mcs`), the requests whose
    CONNECT_REQUEST is unread (:attr:`unread`), its event queue (:attr:`events`) and the timers
    of events due later; and :attr:`lock`, under which every command on it runs."""

    def __init__(self, machine: Machine, lock: Optional[threading.RLock] = None) -> None:
        self.machine = machine
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        #: the ids of this file, by handle
        self.contexts: Dict[int, IdContext] = {}
        #: the queued events, oldest first (one byte on the pipe each)
        self.events: List[Queued] = []
        #: the multicast memberships of this file's ids, by membership id
        self.mcs: Dict[int, Membership] = {}
        #: the IB CM id of each id that has one (it connected, or is a request), by handle
        self.cms: Dict[int, IbCmId] = {}
        #: request handle -> its listener's handle, while the request's CONNECT_REQUEST is unread
        #: (a fabric's listener counts these against its backlog; GET_EVENT gives the slot back)
        self.unread: Dict[int, int] = {}
        machine.fds.add(self)
        #: the lock every command on the file runs under (a fabric's files share one)
        self.lock = lock if lock is not None else threading.RLock()
        self._timers: List[threading.Timer] = []
        self.closed = False

    def fileno(self) -> int:
        """The fd to poll: readable while an event is queued."""
        if self.closed:
            raise UsageError("the rdma_cm channel is closed")
        return self._r

    def close(self) -> None:
        """The file is closed: its ids leave the machine, its timers stop, its fd goes."""
        if self.closed:
            return
        self.closed = True
        self.mcs.clear()
        for t in self._timers:
            t.cancel()
        for fd in (self._r, self._w):
            try:
                os.close(fd)
            except OSError as e:  # EBADF: a test os.close()d it behind the channel's back
                if e.errno != errno.EBADF:
                    raise
        for h in self.contexts:
            if self.machine.holders.get(h) is self:
                del self.machine.holders[h]
        self.contexts.clear()
        self.cms.clear()
        self.unread.clear()

    # -- the ids
    def new_ctx(self, uid: int, ps: int, qp_type: int) -> IdContext:
        """A new id of this file, with a handle no other id of the machine has."""
        ctx = IdContext(next_handle(), uid, ps, qp_type)
        self.contexts[ctx.handle] = ctx
        self.machine.holders[ctx.handle] = self
        return ctx

    def get(self, handle: int) -> IdContext:
        """``ucma_get_ctx``: the id of this file; ENOENT for a handle no id has, EINVAL for an
        id another file of the machine holds."""
        ctx = self.contexts.get(handle)
        if ctx is None:
            holder = self.machine.holder(handle)
            raise kernel_error(kernel_rules.ANOTHER_FDS_ID if holder is not None and holder is not self
                               else kernel_rules.UNKNOWN_ID)
        return ctx

    def drop_ctx(self, handle: int) -> Optional[IdContext]:
        """The id leaves this file (destroyed): out of the machine's table too, its IB CM id with it."""
        ctx = self.contexts.pop(handle, None)
        self.cms.pop(handle, None)
        if self.machine.holders.get(handle) is self:
            del self.machine.holders[handle]
        return ctx

    # -- events
    def push(self, handle: int, raw: bytes, owner: Optional[int] = None, mc: int = 0) -> None:
        """Queue one event (its byte on the pipe makes the fd readable)."""
        self.events.append(Queued(handle, raw, handle if owner is None else owner, mc))
        os.write(self._w, b"e")

    def queue(self, ctx: IdContext, event: "abi.CmEventType", status: int = 0, delay_ms: int = 0) -> None:
        """The event of an address or route query: the id moves as ``addr_handler`` /
        ``cma_work_handler`` move it, and the event is queued (not for uid 0) on the file that
        holds the id when it comes (``delay_ms`` later: a timer)."""
        raw = _EVENT.pack_dict({"uid": ctx.uid, "id": ctx.handle, "event": int(event), "status": status & 0xFFFFFFFF})
        after = {E.ADDR_RESOLVED: S.ADDR_RESOLVED, E.ADDR_ERROR: S.ADDR_BOUND, E.ROUTE_RESOLVED: S.ROUTE_RESOLVED,
                 E.ROUTE_ERROR: S.ADDR_RESOLVED}.get(event)

        def post() -> None:
            f = self.machine.holder(ctx.handle) or self  # MIGRATE_ID may have moved the id
            with f.lock:
                if f.closed or f.contexts.get(ctx.handle) is not ctx:
                    return
                if after is not None:
                    ctx.move(after)
                if event == E.ADDR_RESOLVED and ctx.dev is None:
                    ctx.dev = ctx.resolving_dev  # addr_handler: cma_acquire_dev_by_src_ip
                if ctx.uid:
                    f.push(ctx.handle, raw)

        if delay_ms:
            t = threading.Timer(delay_ms / 1000.0, post)
            t.daemon = True
            self._timers.append(t)
            t.start()
        else:
            post()

    def take_events(self, which: Callable[[Queued], bool]) -> List[Queued]:
        """Remove the queued events ``which(q)`` selects, with their pipe bytes; return them in order."""
        taken = [q for q in self.events if which(q)]
        if taken:
            self.events = [q for q in self.events if not which(q)]
            try:
                os.read(self._r, len(taken))
            except BlockingIOError:
                pass
        return taken

    def discard_events(self, handle: int) -> None:
        """The queued but unread events of id ``handle`` go (its memberships' and, for a
        listener, its CONNECT_REQUESTs too), with their pipe bytes."""
        self.take_events(lambda q: q.handle == handle or q.owner == handle)

    # -- GET_EVENT, WRITE_CM_EVENT
    def get_event(self, body: bytes, size_out: int) -> None:
        """GET_EVENT (``ucma_get_event``): the oldest event, counted on the id whose event it is
        and on its membership; a request's CONNECT_REQUEST read frees its listener's backlog slot."""
        f = command_fields("rdma_ucm_get_event", body)
        if size_out < _structs.MIN_REPLY["rdma_ucm_event_resp"]:
            raise kernel_error(errno.ENOSPC)
        if not self.events:
            raise kernel_error(errno.EAGAIN)
        q = self.events.pop(0)
        os.read(self._r, 1)
        # ucma_get_event counts the event on the id it belongs to (a CONNECT_REQUEST's is its
        # listener's, uevent->ctx), and on its membership too
        ctx = self.contexts.get(q.owner)
        if ctx is not None:
            ctx.reported += 1
        mc = self.mcs.get(q.mc) if q.mc else None
        if mc is not None:
            mc.reported += 1
        write_to_address(f["response"], q.raw[: min(size_out, len(q.raw))])
        self.unread.pop(q.handle, None)

    def write_cm_event(self, body: bytes, size_out: int) -> None:
        """WRITE_CM_EVENT (6.17+): a USER or INTERNAL event queued on the id's file under its uid
        and handle, with the status given and the u64 ``arg`` in ``param.arg32`` (the union's
        first 8 bytes); EINVAL for an id created with uid 0."""
        f = command_fields("rdma_ucm_write_cm_event", body)
        if f["event"] not in (E.USER, E.INTERNAL):
            raise kernel_error(errno.EINVAL)
        ctx = self.get(f["id"])
        if not ctx.uid:  # an id made with uid 0 gets no event of its own: refused (7.2)
            raise kernel_error(errno.EINVAL)
        self.push(ctx.handle, _EVENT.pack_dict(
            {"uid": ctx.uid, "id": ctx.handle, "event": f["event"], "status": f["status"], "param": f["param"][:8]}))

    # -- MIGRATE_ID's move (ucma_migrate_id)
    def take_over(self, old: "UcmaFile", handle: int) -> List[int]:
        """Id ``handle`` of the file ``old`` comes to this one, and with it every unread event of
        it (its memberships' and a listener's requests included; they keep their order, after
        the ones queued here), the requests those events announce, their IB CM ids, and its
        memberships.  Returns the handles of the ids moved."""
        events = old.take_events(lambda q: q.owner == handle)
        moved = [handle] + [q.handle for q in events if q.handle != handle and q.handle in old.contexts and not q.mc]
        for h in moved:
            self.contexts[h] = old.contexts.pop(h)
            self.machine.holders[h] = self
            if h in old.cms:
                self.cms[h] = old.cms.pop(h)
            if h in old.unread:
                self.unread[h] = old.unread.pop(h)
        for mc_id in [m.id for m in old.mcs.values() if m.handle == handle]:
            self.mcs[mc_id] = old.mcs.pop(mc_id)
        for q in events:
            self.push(q.handle, q.raw, q.owner, q.mc)
        return moved
