"""The library's contract fuzzed (tests/lib_model.py) on the fake fabric's two hosts: a
bounded campaign (seeded, printed), each channel read by the caller, a reader thread or an
asyncio task."""

import contextlib

import pytest

import lib_model
from conn_behaviour import Link
from pyrdmacm.testing import FakeFabric


@pytest.fixture
def make_link():
    with contextlib.ExitStack() as stack:
        def make():
            fab = stack.enter_context(FakeFabric(timewait_ms=50, dreq_latency_ms=5))
            server, client = fab.host("10.9.0.1"), fab.host("10.9.0.2")
            return Link(server_transport=server, client_transport=client, server_ip="10.9.0.1",
                        client_ip="10.9.0.2", timewait=1.0)
        yield make


def test_bounded_library_campaign_on_the_fake_fabric(make_link):
    seed = 20261203
    lib_model.LibMachine.stats = lib_model.fresh_stats()
    report = lib_model.run(make_link, seed, examples=8, steps=15)
    stats = lib_model.LibMachine.stats
    print("library campaign on the fake fabric: seed %d, %s" % (seed, stats))
    assert report is None, report
    assert stats["events"].get("CONNECT_REQUEST", 0) > 3, "the campaign made almost no connection: %s" % stats
    assert all(stats["readers"].values()), "a way of reading a channel went untried: %s" % stats["readers"]
