"""The host micro-benchmark (tools/bench_codec.py --commands, and --direct through
tools/bench_direct.py) still runs every way it measures, and its echo transport answers what
pyrdmacm sends (so a regression guard that cannot silently stop measuring)."""

import importlib
import importlib.util
import math
import os

import pytest

TOOL = os.path.join(os.path.dirname(__file__), "..", "tools", "bench_codec.py")


@pytest.fixture(scope="module")
def bench_codec():
    spec = importlib.util.spec_from_file_location("bench_codec", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def bench_direct(bench_codec):
    """The direct path's module, as bench_codec imported it (beside it)."""
    return importlib.import_module("bench_direct")


def test_commands_measures_every_way_and_phase(bench_codec):
    res = bench_codec.commands(40, runs=1)
    assert set(res) == {"bare", "pyrdmacm", "batch", "aio-many", "aio", "fake"}
    for name, phases in res.items():
        assert set(phases) == set(bench_codec.PHASES) | {"total"}, name
        assert all(v > 0 and math.isfinite(v) for v in phases.values()), (name, phases)
        assert phases["total"] == pytest.approx(sum(phases[p] for p in bench_codec.PHASES))


def test_echo_transport_answers_what_pyrdmacm_sends(bench_codec):
    from pyrdmacm import CmEventType, EventChannel, parse_address
    from pyrdmacm import State

    kernel = bench_codec.EchoKernel()
    with EventChannel(kernel) as ch:
        ids = [ch.create_id() for _ in range(3)]
        assert [i.handle for i in ids] == [i.uid for i in ids]  # the echo's handle is the uid
        for i in ids:
            i.resolve_addr(parse_address("10.0.0.2"))
        evs = ch.get_events(8, timeout=1)
        assert [(e.event, e.id) for e in evs] == [(CmEventType.ADDR_RESOLVED, i) for i in ids]
        assert ch.get_event(0) is None and not kernel.events
        assert all(i.state is State.ADDR_RESOLVED for i in ids)


def test_direct_runs_the_direct_write_path_and_every_phase(bench_direct, monkeypatch):
    writes = []
    real_init = bench_direct.NullDevice.__init__

    def init(self, *args, **kwargs):  # the device's write: the one way every command goes
        real_init(self, *args, **kwargs)
        real = self.write
        self.write = lambda data: writes.append(data[0]) or real(data)

    monkeypatch.setattr(bench_direct.NullDevice, "__init__", init)
    res = bench_direct.direct(30, runs=1)
    assert set(res) == {"bare", "pyrdmacm"}
    for phases in res.values():
        assert set(phases) == set(bench_direct.DIRECT_PHASES) | {"total"}
        assert all(v > 0 and math.isfinite(v) for v in phases.values())
    # pyrdmacm wrote every command itself on the fd (the lab's path), through the device's
    # write: per id CREATE_ID (0), RESOLVE_ADDR (21), RESOLVE_ROUTE (4), DESTROY_ID (1) and
    # two GET_EVENTs (12)
    assert sorted(set(writes)) == [0, 1, 4, 12, 21] and len(writes) == 30 * 6
    assert writes.count(12) == 30 * 2


def test_direct_connections_times_every_step_and_writes_what_the_floor_writes(bench_direct, monkeypatch):
    """--direct-connections: every step timed for both, and pyrdmacm and the hand-written floor
    write the same commands in the same order (what the table compares)."""
    from pyrdmacm import parse_address

    writes = {"bare": [], "pyrdmacm": []}
    into = []
    real = os.write
    # the floor writes with os.write, pyrdmacm in its device's write (so does the channel's
    # waker at close(): 8 bytes, no command)
    from pyrdmacm.core import device as _device

    capture = lambda fd, data: (len(data) > 8 and into.append(data)) or real(fd, data)  # noqa: E731
    monkeypatch.setattr(bench_direct.os, "write", capture)
    monkeypatch.setattr(_device, "_os_write", capture)
    dst = parse_address("10.0.0.2:7099")
    for name, fn in (("bare", bench_direct.direct_connections_bare), ("pyrdmacm", bench_direct.direct_connections_pyrdmacm)):
        into.clear()
        t = fn(3, dst)
        assert len(t) == len(bench_direct.CONN_PHASES) + 1 and t == sorted(t)
        writes[name] = [data[0] for data in into]
    # CREATE_ID, RESOLVE_ADDR, GET_EVENT, RESOLVE_ROUTE, GET_EVENT, CONNECT, GET_EVENT, ACCEPT,
    # DISCONNECT, then GET_EVENT and DISCONNECT (the answer to DISCONNECTED) per id, DESTROY_ID
    assert writes["pyrdmacm"] == writes["bare"], writes
    assert writes["bare"] == ([c for c in (0, 21, 12, 4, 12, 6, 12, 8, 10) for _ in range(3)]
                              + [12, 10] * 3 + [1] * 3)
    res = bench_direct.direct(20, runs=1, connections=True)
    for phases in res.values():
        assert set(phases) == set(bench_direct.CONN_PHASES) | {"total"}
        assert all(v > 0 and math.isfinite(v) for v in phases.values())
