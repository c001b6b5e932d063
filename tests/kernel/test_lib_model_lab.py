"""The library's contract fuzzed (tests/lib_model.py) against the real rdma_cm: both ends on
the guest's own address over Soft-RoCE (two channels of one process, so MIGRATE_ID between
them is in the campaign too), a bounded campaign seeded from the kernel's release (printed),
and nothing of the process left in the kernel after each sequence (RDMA netlink)."""

import os
import sys
import zlib

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import lib_model  # noqa: E402
from conn_behaviour import Link  # noqa: E402
from pyrdmacm._device import KernelDevice  # noqa: E402
from ucma_world import netlink_states  # noqa: E402

pytestmark = pytest.mark.kernel


def _link():
    return Link(server_transport=KernelDevice, client_transport=KernelDevice, server_ip="10.0.2.15",
                client_ip="10.0.2.15", timewait=10.0)


def test_bounded_library_campaign_on_the_kernel():
    release = os.uname().release
    seed = zlib.crc32(b"library " + release.encode())
    lib_model.LibMachine.stats = lib_model.fresh_stats()
    report = lib_model.run(_link, seed, examples=8, steps=15, kernel_ids=lambda: netlink_states(os.getpid()))
    stats = lib_model.LibMachine.stats
    print("library campaign on %s: seed %d, %s" % (release, seed, stats))
    assert report is None, "seed %d:\n%s" % (seed, report)
    assert stats["events"].get("CONNECT_REQUEST", 0) > 3, "the campaign made almost no connection: %s" % stats
    assert all(stats["readers"].values()), "a way of reading a channel went untried: %s" % stats["readers"]
