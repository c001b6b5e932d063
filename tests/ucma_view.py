"""The fuzzers' view of the kernel they run on, beside the model (:mod:`ucma_world`): RDMA
netlink's states of this process' ids and how they match the model's, the RDMA devices there
are, and what must be left when every channel is closed."""


from __future__ import annotations

import collections
import os
import time
from typing import Any, Callable, List, Sequence, Tuple


def netlink_states(pid: int) -> List[str]:
    """The rdma_cm_state names of this pid's cm_ids, as RDMA netlink lists them."""
    from pyrdmacm import netlink

    out = []
    for i in netlink.cm_ids():
        if i.pid == pid:
            st = i.state
            out.append(st.name if hasattr(st, "name") else str(st))
    return sorted(out)


def rdma_device_count() -> int:
    try:
        return len(os.listdir("/sys/class/infiniband"))
    except OSError:
        return 0


def match_states(options: Sequence[Sequence[Tuple[str, ...]]], seen: Sequence[str]) -> bool:
    """Can each id pick one of its options (the states it adds to netlink's list) so that
    together they make ``seen`` exactly?"""
    need = collections.Counter(seen)

    def go(i: int, left: collections.Counter) -> bool:
        if i == len(options):
            return not +left
        for opt in options[i]:
            c = collections.Counter(opt)
            if all(left[k] >= v for k, v in c.items()):
                if go(i + 1, left - c):
                    return True
        return False

    return go(0, need)


def nothing_left(pid: int, baseline: Sequence[str], log: Any, fail: Callable[[str], None], wait_s: float = 0.0) -> None:
    """The end of a sequence, every channel closed: no cm_id of ``pid`` beyond ``baseline`` in
    RDMA netlink (waiting up to ``wait_s`` for ids that go when a timewait ends), no new
    problem line in the kernel ``log``; ``fail`` otherwise."""
    deadline = time.monotonic() + wait_s
    while True:
        left = list((collections.Counter(netlink_states(pid)) - collections.Counter(baseline)).elements())
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if left:
        fail("every channel is closed, yet RDMA netlink still lists cm_ids of this process: %s" % left)
    problems = log.new_problems()
    if problems:
        fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))
