"""The behavioural suite of the core, run twice: against the fake kernel on the
host (tests/test_cm_fake.py) and against the real rdma_cm in the kernel lab
(tests/kernel/test_cm_kernel.py).  Each tier subclasses ``behaviour.suite(...)`` of this
module and provides a ``world`` fixture (see :class:`World`): every ``test_*`` here runs
in both, and the expectations hold for both, which is what keeps the fake honest.
"""

from __future__ import annotations

import errno
import select
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, List, Optional

import pytest

from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import PortSpace, QpType
from pyrdmacm._device import KernelDevice
from pyrdmacm import Call, CmId, EventChannel, SourceIgnoredWarning, State, UnackedEventsWarning, Waiter
from pyrdmacm.errors import EventError, KernelError, StateError, UsageError


@dataclass
class World:
    transport: Callable[[], Any]  # a new rdma_cm device (real or fake)
    local: str  # an address of this host with an RDMA device
    peer: str  # an on-link address that answers ARP
    silent: str  # an on-link address nobody answers
    no_route: str  # an address with no route at all
    no_route_errno: int
    not_local: str  # an address of no interface here
    device: str  # the RDMA device name the local address maps to
    #: what ``EventChannel()`` opens (PYRDMACM_DEVICE) where the tier has no rdma_cm: a
    #: character device that takes writes, for the tests of opening itself
    device_path: Optional[str] = None

    def channel(self) -> EventChannel:
        return EventChannel(self.transport())

    def open_node(self, monkeypatch: Any) -> None:
        """Make ``EventChannel()`` open this tier's node: the real rdma_cm, or where the tier
        has none ``device_path`` standing in for it (its check as rdma_cm left out)."""
        if self.device_path:
            from pyrdmacm import _device

            monkeypatch.setenv("PYRDMACM_DEVICE", self.device_path)
            monkeypatch.setattr(_device, "_check_node", lambda *args: None)


def wait(ch: EventChannel, timeout: float = 10.0):
    ev = ch.get_event(timeout)
    assert ev is not None, "no event within %ss" % timeout
    return ev


def test_resolve_own_address(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED and ev.status == 0 and ev.id is cm
        assert cm.state is State.ADDR_RESOLVED
        assert str(cm.get_local_addr().ip) == world.local
        assert str(cm.get_peer_addr().ip) == world.local
        assert cm.get_src_port() != 0  # the kernel picked an ephemeral port
        assert cm.get_dst_port() == 0
        assert cm.device is not None and cm.device.name == world.device
        assert cm.port_num == 1
        ev.ack()
        assert cm.destroy() == 1


def test_query_addr_names_the_device_from_a_list_given(world: World):
    """``query_addr(devices=...)`` names the kernel's device from a list read before (the
    fabric check asks for a thousand ids); a device not in the list is looked up as without."""
    from dataclasses import replace

    from pyrdmacm.devices import Device

    with world.channel() as ch:
        ids = [CmId(ch) for _ in range(3)]
        for cm in ids:
            cm.resolve_addr(world.local, timeout_ms=2000)
            wait(ch).ack()
        plain = ids[0].query_addr().device
        assert plain is not None and plain.name == world.device
        listed = Device(index=plain.index, name="listed-%s" % plain.name, node_guid=plain.node_guid,
                        node_type=None, ports=())
        assert ids[1].query_addr(devices=[listed]).device.name == "listed-%s" % world.device
        other = replace(listed, index=None if plain.index is None else plain.index + 7, node_guid=plain.node_guid ^ 1)
        assert ids[2].query_addr(devices=[other]).device.name == world.device  # not in the list
        for cm in ids:
            cm.destroy()


def test_resolve_peer_then_route(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.peer, timeout_ms=3000)
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED, ev
        assert str(cm.get_peer_addr().ip) == world.peer
        sgid, dgid = cm.sgid, cm.dgid
        assert sgid is not None and dgid is not None and sgid != dgid
        cm.resolve_route(3000)
        ev = wait(ch)
        assert ev.event is E.ROUTE_RESOLVED, ev
        assert cm.state is State.ROUTE_RESOLVED
        paths = cm.query_path()
        assert paths and paths[0].sgid == sgid and paths[0].dgid == dgid


def test_query_route_gives_the_device_port_and_gids_in_one_command(world: World):
    """QUERY_ROUTE (the fabric check's one query a cell): an id on no device has none of
    them; after ADDR_RESOLVED the addresses' GIDs and no path; after ROUTE_RESOLVED the
    path's: the GIDs of QUERY GID and QUERY PATH, the device and port of QUERY ADDR."""
    with world.channel() as ch:
        cm = CmId(ch)
        r = cm.query_route()
        assert (r.device, r.port_num, r.sgid, r.dgid, r.num_paths) == (None, 0, None, None, 0), r
        cm.resolve_addr(world.peer, timeout_ms=3000)
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED, ev
        r = cm.query_route()
        assert r.device is not None and r.device.name == world.device and r.device == cm.device
        assert r.port_num == cm.port_num == 1
        assert r.num_paths == 0 and r.sgid is not None and (r.sgid, r.dgid) == (cm.sgid, cm.dgid), r
        cm.resolve_route(3000)
        ev = wait(ch)
        assert ev.event is E.ROUTE_RESOLVED, ev
        r = cm.query_route(devices=[])  # a list without the device: named as without one
        path = cm.query_path()[0]
        assert r.num_paths == 1 and (r.sgid, r.dgid, r.pkey) == (path.sgid, path.dgid, path.pkey), (r, path)
        assert r.device == cm.device
        cm.destroy()


def test_silent_destination_times_out(world: World):
    """A silent destination's resolution ends with ETIMEDOUT at the id's own timeout: not
    before it, and before that of an id that started at the same time with a longer one (an
    order, which a loaded host keeps; a deadline in seconds it may miss)."""
    with world.channel() as ch:
        longer = CmId(ch)
        cm = CmId(ch)
        t0 = time.monotonic()
        longer.resolve_addr(world.silent, timeout_ms=8000)
        cm.resolve_addr(world.silent, timeout_ms=300)
        ev = wait(ch, 10)
        took = time.monotonic() - t0
        assert ev.id is cm and ev.event is E.ADDR_ERROR, ev
        assert ev.status == -errno.ETIMEDOUT and ev.status_name == "ETIMEDOUT"
        assert not ev.ok
        assert took >= 0.25
        assert longer.state is State.ADDR_QUERY
        assert longer.destroy() == 0
        assert cm.state is State.ADDR_BOUND  # the kernel reverts, the id may resolve again
        cm.resolve_addr(world.local, timeout_ms=1000)
        assert wait(ch).event is E.ADDR_RESOLVED


def test_no_route_fails_in_write_and_channel_survives(world: World):
    with world.channel() as ch:
        other = CmId(ch)
        cm = CmId(ch)
        with pytest.raises(KernelError) as exc:
            cm.resolve_addr(world.no_route, timeout_ms=500)
        assert exc.value.errno == world.no_route_errno
        assert exc.value.command in ("RESOLVE_ADDR", "RESOLVE_IP")
        assert str(exc.value.dst) == world.no_route
        assert ch.get_event(0.2) is None  # no event for a refused command
        other.resolve_addr(world.local, timeout_ms=1000)
        assert wait(ch).id is other
        # the kernel bound the id before it looked for a route, and kept the bind: a second
        # bind is refused before the syscall, a second resolve goes from the bound id
        assert cm.state is State.ADDR_BOUND and cm.query_addr().src.port != 0
        with pytest.raises(StateError):
            cm.bind_addr(world.local)
        cm.resolve_addr(world.local, timeout_ms=1000)
        ev = wait(ch)
        assert ev.id is cm and ev.event is E.ADDR_RESOLVED, ev


def test_a_refused_bind_inside_resolve_leaves_the_id_idle(world: World):
    """RESOLVE_ADDR from IDLE whose own bind fails (a source of no interface here) leaves the
    id unbound, as a refused BIND does: it binds and resolves afterwards."""
    with world.channel() as ch:
        cm = CmId(ch)
        with pytest.raises(KernelError) as exc:
            cm.resolve_addr(world.local, src=world.not_local, timeout_ms=1000)
        assert exc.value.errno == errno.EADDRNOTAVAIL
        assert cm.state is State.IDLE
        cm.bind_addr(world.local)
        cm.resolve_addr(world.local, timeout_ms=1000)
        ev = wait(ch)
        assert ev.id is cm and ev.event is E.ADDR_RESOLVED, ev


def test_given_source_binds(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.peer, src=(world.local, 0), timeout_ms=3000)
        assert wait(ch).event is E.ADDR_RESOLVED
        assert str(cm.local_addr.ip) == world.local


def test_given_source_with_port(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.local, src=(world.local, 47123), timeout_ms=2000)
        assert wait(ch).event is E.ADDR_RESOLVED
        assert cm.get_src_port() == 47123


def test_non_local_source_is_refused(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        with pytest.raises(KernelError) as exc:
            cm.resolve_addr(world.peer, src=world.not_local)
        assert exc.value.errno == errno.EADDRNOTAVAIL
        assert "not a local address" in str(exc.value)


def test_bind_then_resolve_ignores_source(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.bind_addr(world.local)
        assert cm.state is State.ADDR_BOUND
        with pytest.warns(SourceIgnoredWarning):
            cm.resolve_addr(world.local, src=world.not_local, timeout_ms=2000)
        assert wait(ch).event is E.ADDR_RESOLVED
        assert str(cm.local_addr.ip) == world.local


def test_resolve_twice_is_a_state_error_before_the_syscall(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.silent, timeout_ms=5000)
        with pytest.raises(StateError, match="resolve_addr is not allowed in state ADDR_QUERY"):
            cm.resolve_addr(world.silent)
        with pytest.raises(StateError, match="wait for its event"):
            cm.resolve_route()
        cm.destroy()
        assert ch.get_event(0) is None


def test_destroy_before_event_drops_it(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.silent, timeout_ms=200)
        assert cm.destroy() == 0
        assert ch.get_event(0.6) is None
        with pytest.raises(StateError, match="already destroyed"):
            cm.destroy()
        with pytest.raises(StateError, match="destroyed id"):
            cm.resolve_addr(world.local)


def test_destroy_reports_events_and_never_blocks_on_unacked(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        with pytest.warns(UnackedEventsWarning):
            assert cm.destroy() == 1
        ev2_id = CmId(ch)
        ev2_id.resolve_addr(world.local)
        ev2 = wait(ch)
        ev2.ack()
        with pytest.raises(StateError, match="already acked"):
            ev2.ack()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ev2_id.destroy() == 1
        assert ev.id is cm


def test_loopback_resolves_but_has_no_route(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr("127.0.0.1", timeout_ms=1000)
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED
        assert str(cm.local_addr.ip) == "127.0.0.1"
        assert cm.device is not None
        with pytest.raises(KernelError) as exc:
            cm.resolve_route(1000)
        assert exc.value.errno == errno.ENODEV


@pytest.mark.parametrize("ps,qp", [(PortSpace.TCP, QpType.RC), (PortSpace.UDP, QpType.UD), (PortSpace.IPOIB, QpType.UD)])
def test_port_spaces(world: World, ps, qp):
    with world.channel() as ch:
        cm = CmId(ch, ps)
        assert cm.qp_type is qp
        if ps is not PortSpace.IPOIB:
            cm.resolve_addr(world.local, timeout_ms=1000)
            assert wait(ch).event is E.ADDR_RESOLVED


def test_ps_ib_takes_a_qp_type(world: World):
    with world.channel() as ch:
        assert CmId(ch, PortSpace.IB, qp_type=QpType.UD).qp_type is QpType.UD
        with pytest.raises(UsageError):
            CmId(ch, PortSpace.TCP, qp_type=QpType.UD)
        with pytest.raises(UsageError, match="unknown port space"):
            CmId(ch, 0x999)


def test_sync_mode(world: World, monkeypatch):
    import pyrdmacm._channel

    made = []

    def device():
        t = world.transport()
        made.append(t)
        return t

    monkeypatch.setattr(pyrdmacm._channel, "KernelDevice", device)
    cm = CmId(None)
    ev = cm.resolve_addr(world.local, timeout_ms=1000)
    assert ev.event is E.ADDR_RESOLVED
    bad = CmId(None)
    with pytest.raises(EventError) as exc:
        bad.resolve_addr(world.silent, timeout_ms=200)
    assert exc.value.errno == errno.ETIMEDOUT and exc.value.event.status == -errno.ETIMEDOUT
    assert "ADDR_ERROR" in str(exc.value) and "ARP" in str(exc.value)
    assert cm.channel is not bad.channel  # one private channel each
    cm.destroy()
    bad.destroy()
    assert len(made) == 2 and cm.channel.closed and bad.channel.closed


def test_fileno_and_polling(world: World):
    with world.channel() as ch:
        assert ch.get_event(0) is None
        r, _, _ = select.select([ch], [], [], 0)
        assert r == []
        cm = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=1000)
        r, _, _ = select.select([ch], [], [], 5)
        assert r == [ch]
        assert wait(ch, 0.5).id is cm


def test_closed_channel(world: World):
    ch = world.channel()
    cm = CmId(ch)
    ch.close()
    ch.close()  # twice is fine
    with pytest.raises(StateError, match="closed"):
        ch.get_event(0)
    with pytest.raises(StateError, match="closed"):
        cm.resolve_addr(world.local)
    with pytest.raises(StateError, match="closed"):
        CmId(ch)
    with pytest.raises(StateError, match="closed"):
        ch.create_id()


def test_create_id_makes_the_same_id_as_the_class(world: World):
    """``channel.create_id()`` (rdma_create_id's shape) and ``CmId(channel)`` give the same
    ids, numbered from one counter for the whole process; other port spaces, a QP type or a context take the
    class's checks, and a refusal leaves the channel and its ids as they were."""
    with world.channel() as ch:
        a = ch.create_id()
        b = CmId(ch)
        c = ch.create_id()
        assert type(a) is CmId and 0 < a.uid and (b.uid, c.uid) == (a.uid + 1, a.uid + 2)
        assert (a.ps, a.qp_type, a.sync, a.context, a.state) == (PortSpace.TCP, QpType.RC, False, None, State.IDLE)
        assert a.channel is ch and ch.ids == [a, b, c] and len({a.handle, b.handle, c.handle}) == 3
        u = ch.create_id(PortSpace.UDP, context="mine")
        assert (u.ps, u.qp_type, u.context) == (PortSpace.UDP, QpType.UD, "mine")
        assert ch.create_id(PortSpace.IB, qp_type=QpType.UD).qp_type is QpType.UD
        with pytest.raises(UsageError, match="unknown port space"):
            ch.create_id(0x999)
        with pytest.raises(UsageError):
            ch.create_id(PortSpace.TCP, qp_type=QpType.UD)
        assert len(ch.ids) == 5
        c.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        assert ev.id is c and ev.event is E.ADDR_RESOLVED and c.state is State.ADDR_RESOLVED
        ev.ack()
        assert c.destroy() == 1 and a.destroy() == 0 and c not in ch.ids


def test_many_ids_at_once(world: World):
    """create_ids / get_events(ack=True) / destroy_ids: the bulk forms give what the
    one-id calls give; refusals come before any syscall and leave every id as it was."""
    with world.channel() as ch, world.channel() as other:
        first = CmId(ch)
        ids = ch.create_ids(5)
        assert [i.uid for i in ids] == [first.uid + k for k in range(1, 6)]
        assert len({i.handle for i in ids} | {first.handle}) == 6
        assert all((i.ps, i.qp_type, i.state, i.channel) == (PortSpace.TCP, QpType.RC, State.IDLE, ch) for i in ids)
        assert ch.ids == [first] + ids and ch.create_ids(0) == []
        udp = ch.create_ids(2, PortSpace.UDP)
        assert [(i.ps, i.qp_type) for i in udp] == [(PortSpace.UDP, QpType.UD)] * 2
        for bad in (-1, 2.0, "3"):
            with pytest.raises(UsageError, match="n must be an int"):
                ch.create_ids(bad)
        with pytest.raises(UsageError, match="unknown port space"):
            ch.create_ids(2, 0x999)
        assert len(ch.ids) == 8
        for i in ids:
            i.resolve_addr(world.local, timeout_ms=2000)
        evs: list = []
        deadline = time.monotonic() + 10
        while len(evs) < 5 and time.monotonic() < deadline:
            evs += ch.get_events(8, timeout=1, ack=True)
        assert sorted(e.id.uid for e in evs) == [i.uid for i in ids]
        assert {e.event for e in evs} == {E.ADDR_RESOLVED} and all(i.unacked == 0 for i in ids)
        # refused before any syscall: another channel's id, an id twice, a destroyed id
        foreign = CmId(other)
        with pytest.raises(UsageError, match="ids of this channel"):
            ch.destroy_ids([ids[0], foreign])
        with pytest.raises(UsageError, match="given twice"):
            ch.destroy_ids([ids[0], ids[1], ids[0]])
        first.destroy()
        with pytest.raises(StateError, match="already destroyed"):
            ch.destroy_ids([ids[0], first])
        assert all(i.state is State.ADDR_RESOLVED for i in ids) and foreign.state is State.IDLE
        with warnings.catch_warnings():
            warnings.simplefilter("error", UnackedEventsWarning)  # all acked: no warning
            assert ch.destroy_ids(ids) == [1] * 5
        assert all(i.state is State.DESTROYED for i in ids) and ch.ids == udp
        # events not acked: one warning for the lot
        udp[0].resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).id is udp[0]
        with pytest.warns(UnackedEventsWarning, match="1 id\\(s\\) destroyed with 1 event"):
            assert ch.destroy_ids(udp) == [1, 0]
        assert ch.ids == [] and ch.destroy_ids([]) == []
    with pytest.raises(StateError, match="closed"):
        ch.create_ids(1)


def test_two_readers_are_refused(world: World):
    with world.channel() as ch:
        errors: list = []
        started = threading.Event()

        def reader():
            started.set()
            try:
                ch.get_event(1.0)
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        t = threading.Thread(target=reader)
        t.start()
        started.wait()
        time.sleep(0.1)
        with pytest.raises(StateError, match="another thread is already reading"):
            ch.get_event(0)
        t.join()
        assert errors == []


def test_commands_from_many_threads(world: World):
    with world.channel() as ch:
        ids = []
        lock = threading.Lock()

        def worker():
            for _ in range(10):
                cm = CmId(ch)
                cm.resolve_addr(world.local, timeout_ms=2000)
                with lock:
                    ids.append(cm)

        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seen = set()
        while len(seen) < 40:
            ev = wait(ch)
            assert ev.event is E.ADDR_RESOLVED
            seen.add(ev.id.uid)
        assert seen == {c.uid for c in ids}


def test_bad_arguments_raise_before_the_syscall(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        for bad, match in [
            (lambda: cm.resolve_addr("not an address"), "not an IP address"),
            (lambda: cm.resolve_addr("fe80::1"), "needs a zone"),
            (lambda: cm.resolve_addr("fe80::1%nosuchif0"), "unknown zone"),
            (lambda: cm.resolve_addr(world.local, timeout_ms=-1), "timeout_ms"),
            (lambda: cm.resolve_addr(world.local, timeout_ms=1.5), "timeout_ms"),
            (lambda: cm.resolve_addr(world.local, src="::1"), "different families"),
            (lambda: cm.resolve_addr((world.local, 70000)), "out of range"),
            (lambda: cm.resolve_addr(1234), "cannot use"),
        ]:
            with pytest.raises(UsageError, match=match):
                bad()
        assert cm.state is State.IDLE
        cm.resolve_addr(world.local, timeout_ms=1000)
        assert wait(ch).event is E.ADDR_RESOLVED


def test_many_ids_one_channel(world: World):
    with world.channel() as ch:
        ids = [CmId(ch) for _ in range(200)]
        for cm in ids:
            cm.resolve_addr(world.local, timeout_ms=2000)
        got = {wait(ch).id.uid for _ in ids}
        assert got == {cm.uid for cm in ids}
        for cm in ids:
            cm.resolve_route(2000)
        got = {wait(ch).event for _ in ids}
        assert got == {E.ROUTE_RESOLVED}
        assert sum(cm.destroy() for cm in ids) == 400
        assert ch.ids == []


def test_asyncio_resolves_many_ids_concurrently(world: World):
    import asyncio

    from pyrdmacm.aio import AsyncChannel

    async def main():
        async with AsyncChannel(world.channel()) as ach:
            ids = [CmId(ach.channel) for _ in range(50)]
            evs = await asyncio.gather(*(ach.resolve_addr(i, world.local, timeout_ms=2000) for i in ids))
            assert [e.id for e in evs] == ids and {e.event for e in evs} == {E.ADDR_RESOLVED}
            evs = await asyncio.gather(*(ach.resolve_route(i, 2000) for i in ids))
            assert {e.event for e in evs} == {E.ROUTE_RESOLVED}
            bad = CmId(ach.channel)
            with pytest.raises(EventError) as exc:
                await ach.resolve_addr(bad, world.silent, timeout_ms=200)
            assert exc.value.errno == errno.ETIMEDOUT
            with pytest.raises(KernelError):
                await ach.resolve_addr(CmId(ach.channel), world.no_route)
            # an event nobody awaits goes to get_event()
            other = CmId(ach.channel)
            other.resolve_addr(world.local, timeout_ms=1000)
            ev = await asyncio.wait_for(ach.get_event(), 10)
            assert ev.id is other
        assert ach.channel.closed

    asyncio.run(main())


# -- faults: each has a defined outcome, and the channel and the other ids keep working


def test_forked_child_is_refused_the_parents_channel(world: World):
    import os

    with world.channel() as ch:
        cm = CmId(ch)
        r, w = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() with threads alive
            pid = os.fork()
        if pid == 0:  # the child: report on the pipe, never return into pytest
            try:
                lines = []
                for call in (lambda: ch.get_event(0), lambda: CmId(ch), lambda: ch.create_id(),
                             lambda: cm.resolve_addr(world.local), lambda: cm.query_addr(), lambda: cm.destroy()):
                    try:
                        call()
                        lines.append("no error")
                    except Exception as e:
                        lines.append("%s: %s" % (type(e).__name__, e))
                os.write(w, "\n".join(lines).encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            lines = f.read().splitlines()
        os.waitpid(pid, 0)
        assert len(lines) == 6
        for line in lines:
            assert line.startswith("StateError: ") and "forked child" in line, line
            assert "open a new EventChannel in the child" in line
        # the child sent nothing: the parent's id is still fresh and resolves
        cm.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        assert ev.id is cm and ev.event is E.ADDR_RESOLVED
        ev.ack()
        assert cm.destroy() == 1


def test_signal_during_a_blocking_wait_is_absorbed(world: World):
    import signal

    hits = []
    old = signal.signal(signal.SIGALRM, lambda *a: hits.append(1))
    try:
        with world.channel() as ch:
            cm = CmId(ch)
            signal.setitimer(signal.ITIMER_REAL, 0.03, 0.03)
            cm.resolve_addr(world.silent, timeout_ms=400)
            ev = ch.get_event(None)  # blocks across a dozen signals
            assert ev is not None and ev.event is E.ADDR_ERROR and ev.id is cm
            n = len(hits)
            assert n >= 5
            t0 = time.monotonic()
            assert ch.get_event(0.3) is None  # a timed wait keeps its deadline across signals
            took = time.monotonic() - t0
            # restarting the whole wait at each signal (every 30 ms) would never end
            assert 0.29 <= took < 10 and len(hits) > n
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("looked_first", [False, True], ids=["first-look", "after-an-empty-look"])
def test_signal_handler_that_raises_ends_the_wait_and_the_channel_survives(world: World, looked_first):
    import signal

    class Interrupted(Exception):
        pass

    def handler(*args):
        raise Interrupted()

    old = signal.signal(signal.SIGALRM, handler)
    try:
        with world.channel() as ch:
            cm = CmId(ch)
            if looked_first:
                assert ch.get_event(0) is None
            signal.setitimer(signal.ITIMER_REAL, 0.1)
            t0 = time.monotonic()
            with pytest.raises(Interrupted):
                ch.get_event(10.0)
            assert time.monotonic() - t0 < 5
            signal.setitimer(signal.ITIMER_REAL, 0)
            # no reader left registered, and events still flow
            cm.resolve_addr(world.local, timeout_ms=2000)
            ev = wait(ch)
            assert ev.id is cm and ev.event is E.ADDR_RESOLVED
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("set_before", [False, True], ids=["no-wakeup-fd", "a-wakeup-fd-set-before"])
def test_a_signal_just_before_poll_begins_ends_the_wait_at_once(world: World, set_before):
    """A signal that comes after the interpreter last looked for one and before ``poll()`` has
    begun (made to here: the C-level note of a SIGINT and the poll() run back to back, with no
    bytecode between, through C callables) ends the wait at once through its handler, instead
    of when the wait's timeout or the next event comes (found in the lab: ``listen`` ignored
    one SIGTERM in a few dozen).  A wakeup fd the program set before gets the signal's number
    and is set again after the wait."""
    import _thread
    import functools
    import operator
    import os
    import signal

    class Interrupted(Exception):
        pass

    def handler(*args):
        raise Interrupted()

    def racing(ms: int) -> Any:  # the note, then poll(): C calls only, no check between
        return list(map(operator.methodcaller("__call__"), (_thread.interrupt_main, functools.partial(real, ms))))[-1]

    mine = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC) if set_before else None
    old_handler = signal.signal(signal.SIGINT, handler)
    old_fd = signal.set_wakeup_fd(mine[1] if mine else -1)
    try:
        with world.channel() as ch:
            cm = CmId(ch)
            assert ch.get_event(0.01) is None  # the main thread's poller made
            poller = ch._main_poller
            real = poller._poll
            poller._poll = racing
            t0 = time.monotonic()
            with pytest.raises(Interrupted):
                ch.get_event(20.0)
            took = time.monotonic() - t0
            poller._poll = real
            assert took < 10, "the handler ran %.1f s after its signal, at the wait's end" % took
            assert signal.set_wakeup_fd(-1) == (mine[1] if mine else -1)  # set again after the wait
            signal.set_wakeup_fd(mine[1] if mine else -1)
            if mine:
                assert os.read(mine[0], 16) == bytes([signal.SIGINT])
            cm.resolve_addr(world.local, timeout_ms=2000)  # the channel goes on
            ev = wait(ch)
            assert ev.id is cm and ev.event is E.ADDR_RESOLVED
    finally:
        signal.set_wakeup_fd(old_fd)
        signal.signal(signal.SIGINT, old_handler)
        for fd in mine or ():
            os.close(fd)


@pytest.mark.parametrize("looked_first", [False, True], ids=["first-look", "after-an-empty-look"])
@pytest.mark.parametrize("timeout", [None, 30.0])
def test_close_wakes_a_thread_waiting_for_events(world: World, timeout, looked_first):
    """Both waits: the first look's EAGAIN then poll(), and the poll() first that follows a
    look which found the queue empty."""
    ch = world.channel()
    other = world.channel()
    CmId(ch).resolve_addr(world.silent, timeout_ms=20000)  # an id with a pending resolution
    if looked_first:
        assert ch.get_event(0) is None
    got: list = []

    def waiter():
        try:
            got.append(ch.get_event(timeout))
        except BaseException as e:
            got.append(e)

    t = threading.Thread(target=waiter, daemon=True)
    t.start()
    time.sleep(0.2)  # let it block in poll()
    t0 = time.monotonic()
    ch.close()
    t.join(10)  # the wait's own end is 30 s away, or never
    assert not t.is_alive(), "the waiting thread hangs after close() (%.1f s)" % (time.monotonic() - t0)
    (e,) = got
    assert isinstance(e, StateError) and "closed" in str(e) and "while waiting" in str(e), repr(e)
    with pytest.raises(StateError, match="closed"):
        ch.get_event(0)
    with other:  # other channels are untouched
        cm = CmId(other)
        cm.resolve_addr(world.local, timeout_ms=2000)
        assert wait(other).id is cm


def test_fd_closed_behind_the_channels_back(world: World):
    import os

    ch = world.channel()
    cm = CmId(ch)
    os.close(ch.fileno())
    try:
        with pytest.raises(StateError, match="closed behind its back"):
            ch.get_event(1.0)
        if isinstance(ch._t, KernelDevice):  # the fake's commands do not go through the fd
            with pytest.raises(StateError, match="closed behind its back"):
                cm.resolve_addr(world.local)
    finally:
        # closing it is still fine, and must happen now: left to the garbage collector, the
        # close would hit whatever a later test opened under the same fd number
        ch.close()


def test_use_after_destroy_is_refused_before_the_syscall(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        other = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=2000)
        ev = wait(ch)
        assert cm.device is not None  # cached from here on
        with pytest.warns(UnackedEventsWarning):
            assert cm.destroy() == 1
        ev.ack()  # acking the event of a destroyed id is allowed (and a no-op for the kernel)
        with pytest.raises(StateError, match="already acked"):
            ev.ack()
        calls = (cm.query_addr, cm.query_gid, cm.query_path, lambda: cm.device, lambda: cm.sgid,
                 cm.get_local_addr, lambda: cm.resolve_route(1000), lambda: cm.bind_addr(world.local),
                 cm.listen, cm.destroy)
        for call in calls:
            with pytest.raises(StateError, match="destroyed"):
                call()
        # a new id may get the destroyed one's kernel handle; the old object never reaches it
        new = CmId(ch)
        new.resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).id is new
        other.resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).id is other


# --------------------------------------------------------------------------- faults of the old core

def test_a_thread_reading_events_while_another_resolves(world: World):
    """The reader thread may read an id's event while the writer is still inside write():
    the id must move all the same (its state is set before the write)."""
    n = 200
    with world.channel() as ch:
        ids = ch.create_ids(n)
        got: list = []
        stop = threading.Event()

        def reader():
            while not stop.is_set():
                ev = ch.get_event(0.05)
                if ev is not None:
                    ev.ack()
                    got.append(ev)

        def until(count):
            deadline = time.monotonic() + 30
            while len(got) < count and time.monotonic() < deadline:
                time.sleep(0.005)
            assert len(got) == count, "%d of %d events" % (len(got), count)

        t = threading.Thread(target=reader)
        t.start()
        try:
            for i in ids:
                i.resolve_addr(world.local, timeout_ms=5000)
            until(n)
            assert [i.state for i in ids] == [State.ADDR_RESOLVED] * n
            for i in ids:
                i.resolve_route(5000)  # would raise StateError for an id stuck in ADDR_QUERY
            until(2 * n)
            assert [i.state for i in ids] == [State.ROUTE_RESOLVED] * n
        finally:
            stop.set()
            t.join()
        assert ch.destroy_ids(ids) == [2] * n


def test_a_forked_child_closing_the_parents_channel_leaves_the_parent_alone(world: World, monkeypatch):
    """The child's close() (or the end of its ``with`` block) must not wake the parent's waits
    for ever (the eventfd is shared after fork), nor destroy the parent's ids."""
    import os

    from pyrdmacm import _wait

    polls = []
    real = _wait.Poller.wait
    monkeypatch.setattr(_wait.Poller, "wait", lambda self, ms: polls.append(ms) or real(self, ms))
    with world.channel() as ch:
        cm = CmId(ch)
        pid = os.fork()
        if pid == 0:  # the child: leave the parent's channel the two ways a child would
            code = 1
            try:
                with ch:
                    pass
                ch.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        assert ch.get_event(0.3) is None
        assert len(polls) <= 3, "the parent's wait spun: %d polls in 0.3 s" % len(polls)
        cm.resolve_addr(world.local, timeout_ms=2000)  # the parent's channel and id still work
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED and ev.id is cm
        ev.ack()
        assert cm.destroy() == 1


def _fill_fd_holes():
    """Open /dev/null until the next fd is above every open one: the limit then decides alone."""
    import os

    held = []
    top = max(int(n) for n in os.listdir("/proc/self/fd"))
    while True:
        fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        held.append(fd)
        if fd >= top:
            return held


def test_at_the_fd_limit_opening_a_channel_says_so_and_leaks_nothing(world: World, monkeypatch):
    import os
    import resource

    from pyrdmacm.errors import DeviceNodeError

    world.open_node(monkeypatch)
    EventChannel().close()  # what a first channel opens once per process is open now
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = _fill_fd_holes()
    try:
        before = sorted(os.listdir("/proc/self/fd"))
        nxt = held[-1] + 1
        for spare in (0, 1):  # no fd left; one (the channel's waker gets it, the device not)
            resource.setrlimit(resource.RLIMIT_NOFILE, (nxt + spare, hard))
            try:
                with pytest.raises(DeviceNodeError) as e:
                    EventChannel()
            finally:
                resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
            assert e.value.errno == errno.EMFILE and "ulimit -n" in str(e.value), e.value
            assert sorted(os.listdir("/proc/self/fd")) == before, "an fd leaked (spare %d)" % spare
    finally:
        for fd in held:
            os.close(fd)
    with world.channel() as ch:  # and all is well again
        cm = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).event is E.ADDR_RESOLVED


def test_get_event_timeouts(world: World):
    """Infinity waits for ever, a timeout beyond poll()'s range too; NaN, negatives and
    non-numbers are refused by name; the channel stays usable after each."""
    from fractions import Fraction

    with world.channel() as ch:
        for bad in (float("nan"), -1, -0.5, "1", b"1", [1], True, 1j):
            with pytest.raises(UsageError, match="timeout"):
                ch.get_event(bad)
            with pytest.raises(UsageError, match="timeout"):
                ch.get_events(4, bad)
        assert ch.get_event(0.0) is None and ch.get_event(Fraction(1, 50)) is None
        for forever in (float("inf"), 1e12, 2 ** 40, None):
            cm = CmId(ch)
            cm.resolve_addr(world.local, timeout_ms=2000)
            ev = ch.get_event(forever)
            assert ev is not None and ev.event is E.ADDR_RESOLVED and ev.id is cm
            ev.ack()
            cm.destroy()


def test_bad_arguments_name_the_argument_and_lose_nothing(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        for kwargs, name in (
            ({"qkey": -1}, "qkey"), ({"qkey": 2 ** 32}, "qkey"), ({"qkey": "1"}, "qkey"),
            ({"srq": 2}, "srq"), ({"flow_control": 2}, "flow_control"), ({"flow_control": None}, "flow_control"),
            ({"ece": (1,)}, "ece"), ({"ece": ("a", 0)}, "ece vendor_id"), ({"ece": (0, 2 ** 32)}, "ece attr_mod"),
            ({"ece": [0, 0]}, "ece"), ({"qp_num": 2 ** 24}, "qp_num"), ({"qp_num": True}, "qp_num"),
            ({"private_data": "abc"}, "private_data"), ({"private_data": b"x" * 257}, "private_data"),
            ({"retry_count": 8}, "retry_count"), ({"responder_resources": 1.0}, "responder_resources"),
        ):
            with pytest.raises(UsageError, match=name):
                cm.connect(**kwargs)
        for bad in ("rc", 99, 2.0, True):
            with pytest.raises(UsageError, match="qp_type"):
                CmId(ch, PortSpace.IB, qp_type=bad)
        for bad in ("tcp", 1.5, None, True):
            with pytest.raises(UsageError, match="port space"):
                CmId(ch, bad)
        for bad in (-1, 2 ** 31, "8", 1.0):
            with pytest.raises(UsageError, match="backlog"):
                cm.listen(bad)
        for bad in (0, -1, 2 ** 32, "5", None):
            with pytest.raises(UsageError, match="timeout_ms"):
                cm.resolve_route(bad)
        for bad in (-1, 2 ** 32, "5", None, 1.5):
            with pytest.raises(UsageError, match="timeout_ms"):
                cm.resolve_addr(world.local, timeout_ms=bad)
        assert cm.state is State.IDLE and ch.ids == [cm]
        cm.resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).event is E.ADDR_RESOLVED


def test_src_is_keyword_only(world: World):
    """C's order is (src, dst): a positional source must not be taken for anything."""
    with world.channel() as ch:
        cm = CmId(ch)
        with pytest.raises(TypeError):
            cm.resolve_addr(world.local, world.local)  # type: ignore[misc]
        assert cm.state is State.IDLE


def test_uids_are_unique_across_channels_and_a_request_has_none(world: World):
    with world.channel() as a, world.channel() as b:
        ids = [a.create_id(), b.create_id(), CmId(a), CmId(b)] + a.create_ids(3) + b.create_ids(3)
        assert len({i.uid for i in ids}) == len(ids) and 0 not in {i.uid for i in ids}


def test_a_write_racing_with_close_never_reaches_a_file_that_reused_the_number(world: World, monkeypatch):
    """A write is in flight (inside the device's write, the fd read) when another thread
    closes the channel: close() returns, the fd stays the rdma_cm file until that write
    returns, a file opened meanwhile gets another number, and the last write out closes it."""
    import os
    import threading

    from pyrdmacm import _device, wire

    world.open_node(monkeypatch)
    ch = EventChannel()
    fd = ch.fileno()
    inside, go = threading.Event(), threading.Event()
    real_write = os.write

    def held_write(f: int, data: bytes) -> int:
        if f == fd:  # the device's (not the waker's, which close() signals)
            inside.set()
            assert go.wait(10)
        return real_write(f, data)

    monkeypatch.setattr(_device, "_os_write", held_write)
    outcome: list = []
    # DESTROY_ID of a handle no id has: the kernel refuses it, but it must reach the kernel
    data = wire.COMMAND["DESTROY_ID"].encode(0, 0x7FFFFFF0, 0)
    t = threading.Thread(target=lambda: outcome.append(_attempt(ch._write, data)))
    t.start()
    r = w = -1
    try:
        assert inside.wait(10)
        ch.close()
        os.fstat(fd)  # still open: a write is in flight
        r, w = os.pipe()
        assert fd not in (r, w), "the device's number was given to a new file while a write was in flight"
        go.set()
        t.join(10)
        assert not t.is_alive() and outcome, "the write in flight did not return"
        os.set_blocking(r, False)
        with pytest.raises(BlockingIOError):
            os.read(r, 64)  # nothing reached the pipe
    finally:
        go.set()
        t.join(10)
        for f in (r, w):
            if f >= 0:
                os.close(f)
    monkeypatch.undo()
    with pytest.raises(OSError) as e:
        os.fstat(fd)  # the last write out closed it
    assert e.value.errno == errno.EBADF
    with pytest.raises(StateError, match="closed"):
        ch.get_event(0)


def _attempt(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except OSError as e:
        return e


def test_close_releases_the_fd(world: World, monkeypatch):
    """A closed channel holds no fd, though the object lives on: 200 channels opened and
    closed leave the process's open fds as they were."""
    import os

    world.open_node(monkeypatch)
    EventChannel().close()  # what a first channel opens once per process is open now
    before = sorted(os.listdir("/proc/self/fd"))
    kept = []
    for _ in range(200):
        ch = EventChannel()
        fd = ch.fileno()
        ch.close()
        kept.append(ch)
        with pytest.raises(OSError):
            os.fstat(fd)  # released at close, not when the object dies
    assert sorted(os.listdir("/proc/self/fd")) == before
    assert all(c.closed for c in kept)


def test_close_while_a_thread_reads_releases_the_fds_as_the_reader_leaves(world: World, monkeypatch):
    """close() from another thread while a reader waits in get_event (or loops on short
    waits): the reader ends with StateError, and once it is out the channel holds no fd --
    the device's and the waker's are released by whichever of the two lets the reader guard
    go last.  Repeated, so that close() lands in every part of the reader's loop."""
    import os
    import threading
    import time

    world.open_node(monkeypatch)
    EventChannel().close()
    before = sorted(os.listdir("/proc/self/fd"))
    for i in range(60):
        ch = EventChannel()
        fds = (ch.fileno(), ch._waker.fd)
        held = [os.readlink("/proc/self/fd/%d" % fd) for fd in fds]  # pipe:[ino], /dev/..., anon_inode:...
        errors: List[BaseException] = []
        started = threading.Event()

        def read() -> None:
            started.set()
            try:
                while True:
                    ch.get_event(None if i % 3 == 0 else 0.001 * (i % 3))
            except BaseException as e:  # noqa: B036 - what ended the reader is the check
                errors.append(e)

        t = threading.Thread(target=read)
        t.start()
        started.wait()
        time.sleep(0.0005 * (i % 7))
        ch.close()
        t.join(10)
        assert not t.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], StateError) and "closed" in str(errors[0]), errors
        for fd, what in zip(fds, held):
            # closed: the number is free, or another thread of the process (a test before this
            # one left some) opened something else under it meanwhile
            try:
                now = os.readlink("/proc/self/fd/%d" % fd)
            except OSError:
                continue
            assert now != what, \
                "fd %d still holds %s after close()" % (fd, what)
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_close_at_the_fd_limit_does_not_raise(world: World, monkeypatch):
    """With the process at its fd limit (no number free, the channels' own above the limit),
    close() still closes each channel, quietly."""
    import os
    import resource

    world.open_node(monkeypatch)
    channels = [EventChannel() for _ in range(3)]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    held = _fill_fd_holes()
    fds = [c.fileno() for c in channels]
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(fds), hard))
        try:
            for c in channels:
                c.close()  # no exception
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        for fd in fds:
            with pytest.raises(OSError):
                os.fstat(fd)
    finally:
        for fd in held:
            os.close(fd)
    with world.channel() as ch:  # and all is well
        cm = CmId(ch)
        cm.resolve_addr(world.local, timeout_ms=2000)
        assert wait(ch).event is E.ADDR_RESOLVED


def test_a_node_that_is_not_rdma_cm_is_refused_at_open(world: World, monkeypatch):
    """PYRDMACM_DEVICE naming another character device (/dev/null takes every write and
    answers nothing) is refused when the channel opens, naming the node; nothing is left open."""
    import os

    from pyrdmacm.errors import DeviceNodeError

    EventChannel(world.transport()).close()
    before = sorted(os.listdir("/proc/self/fd"))
    monkeypatch.setenv("PYRDMACM_DEVICE", os.devnull)
    with pytest.raises(DeviceNodeError) as e:
        EventChannel()
    assert e.value.errno == errno.ENODEV and os.devnull in str(e.value) and "rdma_cm" in str(e.value)
    assert sorted(os.listdir("/proc/self/fd")) == before


# --------------------------------------------------------------------------- the one way to wait


def test_a_wait_takes_its_outcome_and_keeps_the_other_events_for_get_event(world: World):
    """EventChannel.expect + wait on a shared channel: the event that answers the wait is
    taken (acknowledged), another id's event read meanwhile is kept, in order, for get_event."""
    with world.channel() as ch:
        first, waited = CmId(ch), CmId(ch)
        first.resolve_addr(world.local, timeout_ms=2000)
        time.sleep(0.2)  # its ADDR_RESOLVED is queued before the waited id's
        waited.resolve_addr(world.local, timeout_ms=2000)
        w = ch.expect(waited.uid, Waiter.for_call(waited.kind, Call.RESOLVE_ADDR))
        assert ch.wait(w, 5) and w.done and w.ok and w.error is None
        assert w.event.id is waited and w.event.event is E.ADDR_RESOLVED and waited.unacked == 0
        assert ch.waiting == 0
        kept = ch.get_event(0)
        assert kept is not None and kept.id is first and kept.event is E.ADDR_RESOLVED and first.unacked == 1
        kept.ack()
        assert ch.get_event(0) is None


def test_a_wait_that_times_out_is_forgotten_and_its_event_goes_to_get_event(world: World):
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.silent, timeout_ms=2000)
        w = ch.expect(cm.uid, Waiter.for_events(E.ROUTE_RESOLVED))  # never comes: ADDR_ERROR does
        assert ch.wait(w, 0.05) is False and not w.done
        assert ch.get_event(0) is None  # it ended at its own deadline, before the resolution's
        ch.forget(cm.uid, w)
        assert ch.waiting == 0
        ev = ch.get_event(10)
        assert ev is not None and ev.id is cm and ev.event is E.ADDR_ERROR and not w.done


def test_destroy_from_another_thread_ends_a_blocked_wait_at_once(world: World):
    """A thread blocked in wait() for an id's outcome is woken when another thread destroys
    the id: the wait ends with StateError, not at its timeout."""
    with world.channel() as ch:
        cm = CmId(ch)
        cm.resolve_addr(world.silent, timeout_ms=30000)
        w = ch.expect(cm.uid, Waiter.for_call(cm.kind, Call.RESOLVE_ADDR))
        got: list = []
        reader = threading.Thread(target=lambda: got.append((ch.wait(w, 20), time.monotonic())))
        reader.start()
        time.sleep(0.2)
        t0 = time.monotonic()
        cm.destroy()
        reader.join(10)
        assert not reader.is_alive() and got and got[0][0] is True
        assert got[0][1] - t0 < 2.0
        assert isinstance(w.error, StateError) and "destroyed before the outcome" in str(w.error)
        assert ch.waiting == 0
        other = CmId(ch)  # the channel reads on
        other.resolve_addr(world.local, timeout_ms=2000)
        ev = ch.get_event(5)
        assert ev is not None and ev.id is other and ev.event is E.ADDR_RESOLVED


def test_close_ends_every_wait(world: World):
    ch = world.channel()
    cm = CmId(ch)
    cm.resolve_addr(world.silent, timeout_ms=30000)
    w = ch.expect(cm.uid, Waiter.for_call(cm.kind, Call.RESOLVE_ADDR))
    ch.close()
    assert isinstance(w.error, StateError) and "closed" in str(w.error) and ch.waiting == 0
    with pytest.raises(StateError, match="closed"):
        ch.wait(w, 0)


def test_waiter_misuse_is_named(world: World):
    with pytest.raises(UsageError, match="bind_addr on a connected id has no outcome event"):
        Waiter.for_call(CmId(world.channel()).kind, Call.BIND_ADDR)
    with pytest.raises(UsageError, match="CmEventType"):
        Waiter.for_events(9)  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="the events to wait for"):
        Waiter.for_events()
