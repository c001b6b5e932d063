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

pytestmark = pytest.mark.kernel


def test_bounded_library_campaign_on_the_kernel():
    release = os.uname().release
    seed = zlib.crc32(b"library " + release.encode())
    lib_model.LibMachine.stats = lib_model.fresh_stats()
    report = lib_model.run(lib_model.kernel_tier(), seed, examples=10, steps=15)
    stats = lib_model.LibMachine.stats
    print("library campaign on %s: seed %d, %s" % (release, seed, stats))
    assert report is None, "seed %d:\n%s" % (seed, report)
    requests = stats["events"].get("CONNECT_REQUEST", 0) + stats["events"].get("CONNECT_REQUEST (UD)", 0)
    assert requests > 3, "the campaign made almost no connection: %s" % stats
    assert all(stats["readers"].values()), "a way of reading a channel went untried: %s" % stats["readers"]
    assert stats["events"].get("CONNECT_REQUEST (UD)", 0) and stats["events"].get("MULTICAST_JOIN", 0), \
        "no SIDR request or no multicast join: %s" % stats["events"]
    assert sum(stats["refusals"].values()), "no resolve was refused (the library's state after it went unchecked)"


def test_a_sequence_replays_from_its_script_on_the_kernel():
    """The script of a sequence (what a failure's report carries) runs on the kernel tier on
    its own: the same calls (MIGRATE_ID too: both channels on one host), the same picks."""
    code, again = lib_model.replay_twice(lib_model.kernel_tier())
    assert "m.migrate(data=Pick(0))" in code and again == code
