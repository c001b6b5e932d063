"""Cases: an id and the fd it lives on -- an id named on another fd, and MIGRATE_ID.

An id belongs to the fd that created it: another fd that names it is refused.  MIGRATE_ID
moves an id, with its unread events, from the fd it names (``fd``: which must be an open
rdma_cm fd that has the id) to the fd it is written on.
"""

from __future__ import annotations

import errno
import os
import time

from .. import kernel_rules
from .expect import outcome_text
from .raw import Raw
from .registry import CaseList, Context
from .steps import NO_SUCH_ID, CaseFd, E, on_own_fd

__all__ = ["CASES"]

CASES = CaseList()

#: fd -1, as the ``__u32`` of MIGRATE_ID's ``fd`` carries it
NO_FD = 0xFFFFFFFF


@CASES.case("id_of_another_fd", "RESOLVE_ROUTE naming an id created on another fd", kernel_rules.ANOTHER_FDS_ID)
def _other_fd(ctx: Context) -> int:
    other = Raw.beside(ctx.raw)
    try:
        h = other.create()
        try:
            return ctx.raw.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 1000})
        finally:
            other.destroy(h)
    finally:
        other.close()


@CASES.case("migrate_not_rdma_cm", "MIGRATE_ID naming a pipe as the old fd (not an rdma_cm fd)", errno.EINVAL)
@on_own_fd
def _migrate_pipe(fd: CaseFd, ctx: Context) -> int:
    r, w = os.pipe()
    try:
        return fd.send("MIGRATE_ID", {"id": 0, "fd": r})
    finally:
        os.close(r)
        os.close(w)


@CASES.case("migrate_bad_fd", "MIGRATE_ID naming fd -1 (fdget fails)", errno.ENOENT)
@on_own_fd
def _migrate_badfd(fd: CaseFd, ctx: Context) -> int:
    return fd.send("MIGRATE_ID", {"id": 0, "fd": NO_FD})


@CASES.case("migrate_unknown_id", "MIGRATE_ID of an id the old fd does not have", kernel_rules.UNKNOWN_ID)
@on_own_fd
def _migrate_unknown(fd: CaseFd, ctx: Context) -> int:
    with CaseFd.beside(ctx.raw) as old:
        return fd.send("MIGRATE_ID", {"id": NO_SUCH_ID, "fd": old.dev.fileno()})


@CASES.case("migrate_moves_unread_events", "MIGRATE_ID of an id with an unread ADDR_RESOLVED: the event is read "
            "on the new fd, none on the old", "new fd ADDR_RESOLVED, old fd nothing", needs_local=True)
@on_own_fd
def _migrate_events(fd: CaseFd, ctx: Context) -> str:
    with CaseFd.beside(ctx.raw) as old:
        h = old.create()
        err = old.resolve(h, ctx.local)
        if err:
            return "RESOLVE_ADDR failed: %s" % outcome_text(err)
        time.sleep(0.5)  # ADDR_RESOLVED queued on the old fd, unread
        err = fd.send("MIGRATE_ID", {"id": h, "fd": old.dev.fileno()})
        if err:
            return "MIGRATE_ID failed: %s" % outcome_text(err)
        new = [E(s.event).name for s in fd.events(1.0)]
        was = [E(s.event).name for s in old.events(0.2)]
        return "new fd %s, old fd %s" % (" ".join(new) or "nothing", " ".join(was) or "nothing")
