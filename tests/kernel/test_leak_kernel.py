"""Nothing leaks: 100,000 create/resolve/destroy cycles against the real rdma_cm.

Single topology: each cycle creates an id, resolves the lab's own address
10.0.2.15 (ADDR_RESOLVED on rxe0), reads and acks its event and destroys the
id; ids go in batches of 1000 on one channel.  At the end the kernel lists no
id of ours (RDMA netlink ``RES_CM_ID``), the DESTROY_ID replies reported
exactly one event per id, and the process's resident memory after the first
10,000 cycles and after the last differ by less than a small bound.
``PYRDMACM_LEAK_CYCLES`` changes the count (a multiple of 1000).  The figures
go to ``$LAB_OUT/leak-SUITE.json`` when the lab provides LAB_OUT.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

from pyrdmacm import netlink
from pyrdmacm.abi import CmEventType as E
from pyrdmacm import CmId, EventChannel

pytestmark = pytest.mark.kernel

LOCAL = "10.0.2.15"
BATCH = 1000
CYCLES = int(os.environ.get("PYRDMACM_LEAK_CYCLES", "100000"))
RSS_BOUND = 4 << 20  # bytes the resident set may grow between 10k cycles and the end


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def _ours() -> int:
    pid = os.getpid()
    return sum(1 for i in netlink.cm_ids() if i.pid == pid)


def test_100k_create_resolve_destroy_cycles_leak_nothing() -> None:
    assert CYCLES % BATCH == 0 and CYCLES >= 20 * BATCH
    before = _ours()
    reported = 0
    rss_10k = 0
    t0 = time.monotonic()
    with EventChannel() as ch:
        for batch in range(CYCLES // BATCH):
            ids = [CmId(ch) for _ in range(BATCH)]
            for cm in ids:
                cm.resolve_addr(LOCAL, timeout_ms=2000)
            for _ in range(BATCH):
                ev = ch.get_event(10)
                assert ev is not None and ev.event is E.ADDR_RESOLVED and ev.status == 0, ev
                ev.ack()
            if batch == 0:
                # the counter sees live ids (bound to rxe0 once resolved): it can tell a leak
                assert _ours() - before == BATCH
            reported += sum(cm.destroy() for cm in ids)
            assert ch.ids == []
            del ids, cm, ev
            if batch == 10000 // BATCH - 1:
                rss_10k = _rss()
        left_open = _ours()
    took = time.monotonic() - t0
    rss_end = _rss()
    figures = {
        "cycles": CYCLES, "seconds": round(took, 2), "cycles_per_second": round(CYCLES / took),
        "rss_after_10k": rss_10k, "rss_end": rss_end, "rss_growth": rss_end - rss_10k,
        "events_reported": reported, "ids_left_in_kernel": left_open - before,
        "kernel": os.uname().release,
    }
    print("leak test:", json.dumps(figures))
    out = os.environ.get("LAB_OUT")
    if out and os.path.isdir(out):
        suite = os.environ.get("PYRDMACM_LAB", "host").split(":")[0]
        with open(os.path.join(out, "leak-%s.json" % suite), "w") as f:
            json.dump(figures, f)
    assert reported == CYCLES  # DESTROY_ID: one event read per id, none lost or extra
    assert left_open == before  # RES_CM_ID: the kernel holds no id of ours
    assert _ours() == before  # nor after the channel is closed
    assert rss_end - rss_10k < RSS_BOUND, figures
