"""Two process-wide facts the channel and its ids read on every call.

``PID``: this process's id, kept current by a fork hook, so that checking "is this a forked
child of the process that opened the channel?" costs a global read, not a ``getpid()``.

``next_uid()``: the next uid (``rdma_ucm_create_id.uid``, which the kernel echoes in the id's
events): unique in the process, so an id migrated to another channel keeps its uid; never 0
(the kernel queues no event for uid 0).  A C call, atomic under the GIL.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["PID", "next_uid"]

#: This process's id, kept current by a fork hook.
PID = os.getpid()


def _after_fork_in_child() -> None:
    global PID
    PID = os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)

next_uid = itertools.count(1).__next__
