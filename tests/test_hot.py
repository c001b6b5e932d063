"""The hot paths (pyrdmacm._hot) write the same bytes and leave the same states and events as
the reference path (the state table, the wire layer, the channel's submit and _dispatch).

Each scenario runs twice on the fake kernel, once through the calls users make (the hot
paths) and once through the reference functions; the command streams are compared with uids,
handles and reply addresses replaced by their order of first appearance (they differ between
runs by construction), and so are the ids' states and the events after every step.
"""

from __future__ import annotations

import struct

import pytest

from pyrdmacm import CmId, EventChannel, State
from pyrdmacm import _hot, cmid
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import UserCmCmd as C
from pyrdmacm._codec import CODECS
from pyrdmacm.testing import FakeKernel, FakeNet
from pyrdmacm.state import Call

class LegacyFakeKernel(FakeKernel):
    legacy = True  # BIND_IP / RESOLVE_IP / QUERY_ROUTE: the hot paths hand over to the reference path


BODY = {C.CREATE_ID: "rdma_ucm_create_id", C.DESTROY_ID: "rdma_ucm_destroy_id", C.RESOLVE_ADDR: "rdma_ucm_resolve_addr",
        C.RESOLVE_ROUTE: "rdma_ucm_resolve_route", C.GET_EVENT: "rdma_ucm_get_event",
        C.RESOLVE_IP: "rdma_ucm_resolve_ip", C.QUERY: "rdma_ucm_query", C.QUERY_ROUTE: "rdma_ucm_query"}
#: fields whose values differ between two runs of one scenario by construction: uids and
#: handles are numbered by first use; a reply address only has to be there (pooled buffers
#: on one path, fresh ones on the other, whose addresses the allocator may reuse)
RENAMED = {"uid": "uid", "id": "handle"}


def normalise(log):
    """The fake's command log, each body decoded, uids/handles/addresses numbered by first use."""
    names = {k: {} for k in set(RENAMED.values())}
    out = []
    for cmd, size_in, size_out, body in log:
        fields = CODECS[BODY[C(cmd)]].unpack_dict(body) if C(cmd) in BODY else {"raw": body}
        if "response" in fields:
            fields["response"] = fields["response"] != 0
        for f, kind in RENAMED.items():
            if f in fields:
                seen = names[kind]
                fields[f] = seen.setdefault(fields[f], len(seen))
        out.append((C(cmd).name, size_in, size_out, sorted(fields.items())))
    return out


def run(scenario, hot: bool, kernel_class=FakeKernel):
    kernel = kernel_class(FakeNet())
    trace = []
    with EventChannel(kernel) as ch:
        if not hot:
            ch._fast = 0  # get_event takes the reference path (_guarded -> _wait_event -> _dispatch)
        scenario(ch, hot, trace)
    return normalise(kernel.log), trace


def snapshot(ids, events=()):
    return ([i.state for i in ids], [(e.event, e.status, ids.index(e.id) if e.id in ids else None) for e in events])


def make(ch, hot, n):
    if hot:
        return [ch.create_id() for _ in range(n)]
    return [cmid.create_reference(object.__new__(CmId), ch, 0x0106, 2) for _ in range(n)]


def get(ch, n):
    out = []
    while len(out) < n:
        ev = ch.get_event(5)
        assert ev is not None
        out.append(ev)
    return out


def resolve_route_destroy(ch, hot, trace):
    ids = make(ch, hot, 3)
    trace.append(snapshot(ids))
    for i in ids:
        if hot:
            i.resolve_addr("10.0.0.2", timeout_ms=2000)
        else:
            i._resolve_addr("10.0.0.2", None, 2000)
    trace.append(snapshot(ids))
    evs = get(ch, 3)
    trace.append(snapshot(ids, evs))
    for e in evs:
        e.ack()
    for i in ids:
        (i.resolve_route if hot else i._resolve_route)(1500)
    trace.append(snapshot(ids))
    evs = get(ch, 3)
    trace.append(snapshot(ids, evs))
    for e in evs:
        e.ack()
    trace.append([i.destroy() if hot else cmid.destroy_reference(i) for i in ids])
    trace.append(snapshot(ids))


def failures(ch, hot, trace):
    """Refused commands and failure events: the same errors, the same states after."""
    ids = make(ch, hot, 2)
    for i, dst in zip(ids, ("192.0.2.1", "10.0.0.99")):  # no route (refused), silent (ADDR_ERROR)
        try:
            if hot:
                i.resolve_addr(dst, timeout_ms=100)
            else:
                i._resolve_addr(dst, None, 100)
        except Exception as e:  # noqa: BLE001 - compared below
            trace.append((type(e).__name__, getattr(e, "errno", None)))
    trace.append(snapshot(ids))
    evs = get(ch, 1)
    trace.append(snapshot(ids, evs))
    evs[0].ack()
    for i in ids:  # ADDR_BOUND / IDLE: resolve_route is refused before the syscall
        try:
            (i.resolve_route if hot else i._resolve_route)(100)
        except Exception as e:  # noqa: BLE001
            trace.append((type(e).__name__, str(e).replace("uid %d" % i.uid, "uid N")))
    trace.append([i.destroy() if hot else cmid.destroy_reference(i) for i in ids])


@pytest.mark.parametrize("scenario", [resolve_route_destroy, failures])
@pytest.mark.parametrize("kernel_class", [FakeKernel, LegacyFakeKernel])
def test_hot_paths_equal_the_reference_path(scenario, kernel_class):
    hot_log, hot_trace = run(scenario, True, kernel_class)
    ref_log, ref_trace = run(scenario, False, kernel_class)
    assert hot_log == ref_log
    assert hot_trace == ref_trace
    assert len(hot_log) >= 6


def test_batch_calls_equal_the_calls_per_id():
    def one(ch, hot, trace):
        ids = ch.create_ids(4) if hot else [ch.create_id() for _ in range(4)]
        for i in ids:
            i.resolve_addr("10.0.0.1", timeout_ms=2000)
        evs = ch.get_events(4, timeout=5, ack=True) if hot else [e for e in get(ch, 4) if e.ack() is None]
        trace.append(snapshot(ids, evs))
        trace.append(ch.destroy_ids(ids) if hot else [i.destroy() for i in ids])
        trace.append(snapshot(ids))

    assert run(one, True) == run(one, False)


def test_the_hot_methods_are_the_hot_module():
    """What users call is the written-out code this file checks (no second copy elsewhere)."""
    assert CmId.resolve_addr is _hot.resolve_addr and CmId.resolve_route is _hot.resolve_route
    assert CmId.destroy is _hot.destroy
    assert EventChannel.get_event is _hot.get_event and EventChannel.get_events is _hot.get_events


def test_a_refused_command_puts_the_state_back():
    class Refusing(FakeKernel):
        def write(self, data):
            if struct.unpack_from("<I", data)[0] in (C.RESOLVE_ADDR, C.RESOLVE_ROUTE):
                raise OSError(12, "ENOMEM")
            return super().write(data)

    for hot in (True, False):
        with EventChannel(Refusing(FakeNet())) as ch:
            cm = ch.create_id()
            for call in (lambda: cm.resolve_addr("10.0.0.2", timeout_ms=100),
                         lambda: cm._resolve_addr("10.0.0.3", None, 100)):
                with pytest.raises(OSError):
                    call()
                assert cm.state is State.IDLE
            assert cm.destroy() == 0
    assert Call.RESOLVE_ADDR in {c for c in Call}
