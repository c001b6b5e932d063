"""The kernel bugs the suite found, as data.

A :class:`KernelBug` says what triggers the bug, which kernel it was seen on and the first
one seen without it.  A case or test whose sequence would trigger it on an affected kernel
(where it may crash or wedge the kernel) asks :func:`known_bug` and leaves the trigger out
there, saying so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

__all__ = ["KernelBug", "KNOWN_BUGS", "known_bug"]


@dataclass(frozen=True)
class KernelBug:
    """One bug: its name, what triggers it and what follows, the kernel ``(major, minor)``
    it was seen on, the first one seen without it, and the evidence."""

    name: str
    what: str
    seen_on: Tuple[int, int]
    not_seen_from: Optional[Tuple[int, int]]  #: None: seen on every kernel tried
    evidence: str

    def affects(self, version: Tuple[int, int]) -> bool:
        return self.not_seen_from is None or version < self.not_seen_from


KNOWN_BUGS: Dict[str, KernelBug] = {b.name: b for b in (
    KernelBug(
        "path_mig_without_alternate",
        "NOTIFY(PATH_MIG) on an established connection that has no alternate path: cm_migrate copies "
        "the unset alternate address vector over the primary one, and the next CM message the id sends "
        "(the DREP when it is destroyed after the peer's DREQ) dereferences its NULL port: "
        "'BUG: kernel NULL pointer dereference' in cm_alloc_msg from cm_send_drep_locked, and the "
        "process closing the fd hangs",
        (5, 10), (6, 1),
        "Debian bullseye's 5.10.223 in the lab, every time (connect, accept, NOTIFY COMM_EST, NOTIFY "
        "PATH_MIG, the client closes, the server closes); 6.1, 6.12 and 7.2 survive the same sequence "
        "(5.11 to 6.0 not tried)"),
    KernelBug(
        "rej_in_req_sent_keeps_the_req",
        "REJECT on the active id of a connection request nobody answered yet (the IB CM in REQ_SENT; "
        "ACCEPT there does the same through rdma_accept's error path): the REJ goes out and the id's "
        "IB CM state goes back to IDLE, but its REQ is not cancelled, so the MAD layer goes on "
        "retrying it: DESTROY_ID of that id, and closing its fd, then wait 77-102 s (Soft-RoCE) "
        "for the retries to run out, and a retry that reaches the far end after its request's id "
        "answered is a new connection request there, from an id that no longer wants one. (The REJ "
        "itself names no comm id of the far end, whose request stays unanswered.) The library "
        "refuses both calls in that state before any write",
        (5, 10), None,
        "the connection fuzzer's first campaigns (tests/ucma_conn_model.py), then timed in the lab: "
        "DESTROY_ID blocked 101.6-102.4 s on 5.10 and 6.1 and 76.3-77.2 s on 6.12 and 7.2, whatever "
        "the far end did with the request (rejected, accepted, left), with one more CONNECT_REQUEST "
        "at the listener on each of the four; destroying the id without the REJECT returns at once"),
    KernelBug(
        "rej_in_rep_sent_keeps_the_rep",
        "REJECT on a connection request's id after its ACCEPT went out (the IB CM in REP_SENT: the "
        "peer has not sent its RTU; a second ACCEPT there does the same through rdma_accept's "
        "error path): the REJ goes out and the peer gets REJECTED 28, but the REP is not "
        "cancelled, so the MAD layer goes on retrying it: DESTROY_ID of that id, and closing its "
        "fd, then wait about 68 s (Soft-RoCE) for the retries to run out. The library refuses "
        "both calls in that state (CONNECT) before any write",
        (5, 10), None,
        "the connection fuzzer across the lab's two guests (bounded run on 6.1, seed 1279527030: "
        "closing the peer's channel took 67 s), then timed on one host in the lab: DESTROY_ID "
        "blocked 68.3 s on 5.10 and 6.1, 68.5 s on 6.12, 68.6 s on 7.2, after REJECT and after a "
        "refused second ACCEPT alike; destroying the id in REP_SENT without them, and REJECT on "
        "the active end in REP_RCVD (whose peer is in REP_SENT), return at once"),
    KernelBug(
        "set_ib_path_without_handler_lock",
        "SET_OPTION IB_PATH racing MIGRATE_ID of the same id: ucma_set_ib_path queues its "
        "ROUTE_RESOLVED event through ucma_event_handler without the id's handler lock, the lock "
        "ucma_migrate_id holds while it moves the id to its new fd; the event handler reads the "
        "id's file twice, so it can lock the old fd's event mutex and unlock the new one's, and "
        "the old fd's mutex stays held for good: the MIGRATE_ID never returns (a task blocked in "
        "ucma_migrate_id's mutex_lock), nor does any later command or the close of that fd. The "
        "stable fix 'RDMA/ucma: Lock the handler in ucma_set_ib_path()' (Debian's 6.12.111) takes "
        "the lock; 6.12 before it is affected too",
        (6, 1), (6, 12),
        "Debian bookworm's 6.1.176 in the lab (two CPUs, preempt=full): a loop of the two writes "
        "alone from two threads (SET_OPTION IB_PATH on an id resolved to the lab's own address, "
        "MIGRATE_ID of it to a second fd; tools/repro/set_ib_path_vs_migrate.py) blocked in "
        "ucma_migrate_id+0x177 (a mutex_lock of ucma_migrate_id's own, not the handler lock) "
        "after about 320, 500 and 1029 tries, in four runs of which one finished 1,000 tries; the "
        "cause above is read from 6.1's ucma.c, not traced. The fuzzer's races machine did not "
        "find it in 30 minutes with the pair allowed (1,342 races, 401 of this pair). trixie's "
        "6.12.117, which has the fix, ran 1,500 tries of the loop without a hang; 5.10 was not "
        "tried"),
)}


def known_bug(name: str, version: Tuple[int, int]) -> Optional[KernelBug]:
    """The recorded bug ``name`` if it affects kernel ``version``, else None."""
    bug = KNOWN_BUGS[name]
    return bug if bug.affects(version) else None
