"""The library's contract fuzzed (tests/lib_model.py) on the fake fabric's two hosts: a
bounded campaign (seeded, printed), each channel read by the caller, a reader thread or an
asyncio task; a failure's script replays it."""

import pytest

import lib_model
from pyrdmacm import CmId


def test_bounded_library_campaign_on_the_fake_fabric():
    seed = 20261203
    lib_model.LibMachine.stats = lib_model.fresh_stats()
    report = lib_model.run(lib_model.fake_tier(), seed, examples=8, steps=15)
    stats = lib_model.LibMachine.stats
    print("library campaign on the fake fabric: seed %d, %s" % (seed, stats))
    assert report is None, report
    requests = stats["events"].get("CONNECT_REQUEST", 0) + stats["events"].get("CONNECT_REQUEST (UD)", 0)
    assert requests > 3, "the campaign made almost no connection: %s" % stats
    assert all(stats["readers"].values()), "a way of reading a channel went untried: %s" % stats["readers"]
    assert stats["events"].get("CONNECT_REQUEST (UD)", 0) and stats["events"].get("MULTICAST_JOIN", 0), \
        "no SIDR request or no multicast join: %s" % stats["events"]
    assert sum(stats["refusals"].values()), "no resolve was refused (the library's state after it went unchecked)"


def _script_of(report: str) -> str:
    return report.split("it stops where the run did):\n", 1)[1]


def _replay_failing(lines):
    """Run a failing script here: its Broken; its machine torn down (its channels closed)."""
    env = {}
    with pytest.raises(lib_model.Broken) as replayed:
        exec(compile("\n".join(lines), "<script>", "exec"), env)  # noqa: S102 - the report's own script
    try:
        env["m"].m.teardown()
    except lib_model.Broken:
        pass
    return str(replayed.value)


def test_a_campaigns_failure_is_reported_with_a_script_that_fails_again(monkeypatch):
    """A broken promise found by a campaign (planted: the fd count moves at every look) comes
    back shrunk, with a script of the rules as the program called them; the script, run on its
    own, stops at the same broken promise."""
    looks = iter(range(1000, 10 ** 6))
    monkeypatch.setattr(lib_model, "_fds", lambda: next(looks))
    report = lib_model.run(lib_model.fake_tier(), 20261203, examples=4, steps=5)
    assert report is not None and "fds open" in report.splitlines()[0], report
    lines = _script_of(report).splitlines()
    assert lines[3:] == ["m = Replay(fake_tier())", "m.open(server='caller', client='caller')", "m.teardown()"], lines
    assert "fds open" in _replay_failing(lines).splitlines()[0]


def test_a_library_bug_breaks_the_same_promise_in_its_script(monkeypatch):
    """A library bug, planted (destroy() reports an event more than it handed): the rule that
    finds it ends its line of the script with what it picked; the script, run on its own, makes
    the same calls and finds the same bug."""
    real = CmId.destroy
    monkeypatch.setattr(CmId, "destroy", lambda self, *a, **k: real(self, *a, **k) + 1)
    r = lib_model.Replay(lib_model.fake_tier())
    r.open(server="caller", client="thread")
    r.handshake(udp=False)
    with pytest.raises(lib_model.Broken) as found:
        r.destroy(data=lib_model.Pick(1))
    r.m.teardown()
    report = str(found.value)
    assert report.startswith("active#1.destroy() reported 4 events; 3 were handed"), report
    lines = _script_of(report).splitlines()
    assert lines[4:] == ["m.open(server='caller', client='thread')", "m.handshake(udp=False)", "m.destroy(data=Pick(1))",
                         "m.teardown()"], lines
    assert _replay_failing(lines).splitlines()[0] == report.splitlines()[0]


def test_a_script_replays_the_sequence_it_was_made_from():
    """Rules called as a program calls them write the script's lines (each rule with what it
    picked); the script, run on its own, makes the same lines again."""
    code, again = lib_model.replay_twice(lib_model.fake_tier())
    assert code == ["m.open(server='asyncio', client='thread')", "m.handshake(udp=False)", "m.handshake(udp=True)",
                    "m.join(group='239.1.1.8', send_only=True, data=Pick())", "m.resolve_refused()",
                    "m.disconnect(data=Pick(1))",
                    "m.leave(data=Pick(0))", "m.destroy(data=Pick(2))"]
    assert again == code
