"""Cases: regressions of known ucma bugs, where the contract is "no crash, and the fd keeps
working".

The sequences of the bugs that syzbot and others found -- RESOLVE_IP twice then DESTROY_ID,
closing an fd with events pending, MIGRATE_ID racing DESTROY_ID, LEAVE_MCAST racing
DESTROY_ID, a listener destroyed with requests queued -- each repeated so that a kernel with
the bug would likely show it (the runner fails a case whose kernel log then reports a BUG,
a WARNING or KASAN).  A race's case reports every answer it saw as its detail.
"""

from __future__ import annotations

import errno
import threading
import time
from typing import Dict, Tuple

from .. import abi, kernel_rules
from ..core.device import ReplyBuffer
from ..addr import parse_address
from ..wire import COMMAND
from .expect import outcome_text
from .raw import Raw
from .registry import CaseList, Context
from .steps import CaseFd, E, at_new_port, connect_on, listener, on_own_fd, routed

__all__ = ["CASES"]

C = abi.UserCmCmd
S = abi.RdmaCmState

CASES = CaseList()

RACE_GROUP = parse_address("239.1.2.4")  # a group of its own: the multicast cases join 239.1.2.3


@CASES.case("regression_resolve_ip_twice_destroy", "RESOLVE_IP twice, then DESTROY_ID at once (syzbot 2021, "
            "use-after-free in addr_handler): the second RESOLVE_IP refused, no crash",
            kernel_rules.expect(C.RESOLVE_IP, S.ADDR_QUERY), needs_local=True)
def _reg_resolve_ip(ctx: Context) -> Tuple[int, str]:
    errs = []
    for _ in range(20):
        h = ctx.raw.create()
        fields: Dict[str, object] = {"id": h, "timeout_ms": 1000, "dst_addr": ctx.local.pack_in6()}
        a = ctx.raw.send("RESOLVE_IP", fields)
        b = ctx.raw.send("RESOLVE_IP", fields)
        ctx.raw.destroy(h)
        if a:
            return a, "the first RESOLVE_IP failed"
        errs.append(b)
    return (errs[0] if len(set(errs)) == 1 else -1), "second RESOLVE_IP: %s" % sorted({outcome_text(e) for e in errs})


@CASES.case("regression_close_with_events", "close an fd whose ids have events queued and unread", 0,
            needs_local=True)
def _reg_close(ctx: Context) -> Tuple[int, str]:
    other = Raw.beside(ctx.raw)
    try:
        for _ in range(10):
            h = other.create()
            err = other.resolve(h, ctx.local)
            if err:
                return err, "RESOLVE_ADDR failed"
        time.sleep(0.2)  # let the ADDR_RESOLVED events queue up
    finally:
        other.close()
    return 0, ""


@CASES.case("regression_migrate_vs_destroy", "MIGRATE_ID between two fds racing DESTROY_ID from another thread "
            "(CVE-2020-36385): every call answers, no crash", 0)
def _reg_migrate(ctx: Context) -> Tuple[int, str]:
    a, b = Raw.beside(ctx.raw), Raw.beside(ctx.raw)
    seen: Dict[str, int] = {}
    try:
        for _ in range(50):
            h = a.create()
            start = threading.Event()

            def destroyer() -> None:
                start.wait()
                seen["destroy:" + outcome_text(a.destroy(h))] = 1

            t = threading.Thread(target=destroyer)
            t.start()
            start.set()
            err = b.send("MIGRATE_ID", {"id": h, "fd": a.dev.fileno()})
            t.join()
            seen["migrate:" + outcome_text(err)] = 1
            if err == 0:  # migrated before the destroy: the id now lives on b
                b.destroy(h)
    finally:
        a.close()
        b.close()
    return 0, ", ".join(sorted(seen))


@CASES.case("regression_leave_vs_destroy", "LEAVE_MCAST racing DESTROY_ID of the id that joined, 30 times "
            "(CVE-2018-14734, use-after-free in ucma_leave_multicast): every call answers, no crash", 0,
            needs_local=True)
@on_own_fd
def _reg_leave(fd: CaseFd, ctx: Context) -> Tuple[int, str]:
    seen: Dict[str, int] = {}
    for _ in range(30):
        h = fd.create(abi.PortSpace.UDP)
        if fd.bind(h, ctx.local):
            return -1, "BIND failed"
        err = fd.send("JOIN_MCAST", {"uid": 9, "id": h, "addr_size": RACE_GROUP.size, "join_flags": 0,
                                     "addr": RACE_GROUP.pack_storage()})
        if err:
            return err, "JOIN_MCAST failed"
        mc = int(fd.reply_of("JOIN_MCAST")["id"])
        start = threading.Event()
        # each thread's reply has a buffer of its own: the two commands run at once
        destroyed = ReplyBuffer(COMMAND["DESTROY_ID"].out)
        left = ReplyBuffer(COMMAND["LEAVE_MCAST"].out)

        def destroyer() -> None:
            start.wait()
            seen["destroy:" + outcome_text(fd.send("DESTROY_ID", {"response": destroyed.address, "id": h}))] = 1

        t = threading.Thread(target=destroyer)
        t.start()
        start.set()
        seen["leave:" + outcome_text(fd.send("LEAVE_MCAST", {"response": left.address, "id": mc}))] = 1
        t.join()
    fd.events(0.2)
    return 0, ", ".join(sorted(seen))


@CASES.case("regression_listener_destroyed_with_requests", "DESTROY_ID of a listener with connection requests "
            "queued and unread, 5 times over (the use-after-free that made 5.9 rework how ucma hands new "
            "connections over): every client's attempt ends (REJECTED), no crash", "every attempt ended",
            needs_local=True)
@on_own_fd
def _reg_listener(fd: CaseFd, ctx: Context) -> str:
    ended, attempts = 0, 0
    for _ in range(5):
        addr = at_new_port(ctx)
        lst = listener(fd, addr, backlog=8)
        clients = [routed(fd, addr) for _ in range(3)]
        for h in clients:
            if connect_on(fd, h) == 0:
                attempts += 1
        time.sleep(0.5)  # the requests are queued on the listener, unread
        err = fd.destroy(lst)
        if err:
            return "DESTROY_ID of the listener failed: %s" % outcome_text(err)
        done = {s.handle for s in fd.events(6.0) if s.handle in clients and s.event in (
            E.REJECTED, E.UNREACHABLE, E.CONNECT_ERROR)}
        ended += len(done)
        for h in clients:
            fd.destroy(h)
    return "every attempt ended" if ended == attempts else "%d of %d attempts ended" % (ended, attempts)
