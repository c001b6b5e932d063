"""The behavioural suite of the core, run twice: against the fake kernel on the
host (tests/test_cm_fake.py) and against the real rdma_cm in the kernel lab
(tests/kernel/test_cm_kernel.py).  Each tier subclasses ``behaviour.suite(*behaviour.core())``
and provides a ``world`` fixture (see :class:`World`): every ``test_*`` here and in the
suite's other modules (fault_behaviour.py, fd_behaviour.py, aio_behaviour.py) runs in both,
and the expectations hold for both, which is what keeps the fake honest.  Here: ids,
addresses, resolution, port spaces, sync mode, many ids and threads.
"""

from __future__ import annotations

import errno
import select
import threading
import time
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Optional

import pytest

from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import PortSpace, QpType
from pyrdmacm import CmId, EventChannel, SourceIgnoredWarning, State, UnackedEventsWarning
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
            from pyrdmacm.core import device as _device

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


def test_an_ib_path_sets_the_route_and_connects_only_with_a_gid_of_the_port(world: World):
    """SET_OPTION IB_PATH from ADDR_RESOLVED: the id is ROUTE_RESOLVED at once and the kernel
    queues ROUTE_RESOLVED itself.  CONNECT then sends its REQ with the record QUERY PATH gave
    a routed id (the peer answers as after resolve_route), and answers ENOENT, leaving the id
    as it was, with an all-zero record: no GID of the port is its source (measured on 5.10 and
    7.2).  An id resolved to the any address has no netdev for the path: ENODEV."""
    from pyrdmacm.abi import IbPathFlag, OptionIb

    flags = int(IbPathFlag.GMP | IbPathFlag.PRIMARY | IbPathFlag.BIDIRECTIONAL)
    with world.channel() as ch:
        routed = CmId(ch)
        routed.resolve_addr(world.peer, timeout_ms=3000)
        assert wait(ch).event is E.ADDR_RESOLVED
        routed.resolve_route(3000)
        assert wait(ch).event is E.ROUTE_RESOLVED
        own = routed.query_path()[0]
        for record in (flags.to_bytes(4, "little") + bytes(68), [own]):
            cm = CmId(ch)
            cm.resolve_addr(world.peer, timeout_ms=3000)
            assert wait(ch).event is E.ADDR_RESOLVED
            cm.set_option(OptionIb.PATH, record)
            ev = wait(ch)
            assert (ev.id, ev.event, ev.status) == (cm, E.ROUTE_RESOLVED, 0), ev
            assert cm.state is State.ROUTE_RESOLVED
            if isinstance(record, bytes):
                with pytest.raises(KernelError, match="source GID this port") as err:
                    cm.connect()
                assert err.value.errno == errno.ENOENT and cm.state is State.ROUTE_RESOLVED
            else:
                cm.connect()  # its answer (a REJ, or none from a gateway) goes with the id
                assert cm.state is State.CONNECT
                cm.destroy()
        anywhere = CmId(ch)
        anywhere.resolve_addr("0.0.0.0", timeout_ms=3000)
        ev = wait(ch)
        assert ev.event is E.ADDR_RESOLVED, ev
        with pytest.raises(KernelError, match="netdev") as err:
            anywhere.set_option(OptionIb.PATH, [own])
        assert err.value.errno == errno.ENODEV and anywhere.state is State.ADDR_RESOLVED


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
    import pyrdmacm.core.channel

    made = []

    def device():
        t = world.transport()
        made.append(t)
        return t

    monkeypatch.setattr(pyrdmacm.core.channel, "KernelDevice", device)
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
