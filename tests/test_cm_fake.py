"""The core's behavioural suite (tests/behaviour.py's core(): cm_behaviour.py and its kin) against
the fake kernel."""

import errno
import os
import struct

import pytest

from behaviour import core, suite, suite_tests
from cm_behaviour import World
from pyrdmacm.testing import FakeDevice, FakeKernel, FakeNet


class LegacyFakeKernel(FakeKernel):
    legacy = True  # the channel then speaks BIND_IP / RESOLVE_IP / QUERY_ROUTE


@pytest.fixture(params=["current", "legacy"])
def world(request):
    net = FakeNet()
    kernel = LegacyFakeKernel if request.param == "legacy" else FakeKernel
    return World(
        transport=lambda: kernel(net),
        local="10.0.0.1",
        peer="10.0.0.2",
        silent="10.0.0.99",
        no_route="192.0.2.1",
        no_route_errno=errno.ENETUNREACH,
        not_local="10.0.0.77",
        device=FakeDevice().name,
        device_path=os.devnull,
    )


def _resolved(kernel):
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel

    ch = EventChannel(kernel)
    cm = CmId(ch)
    cm.resolve_addr("10.0.0.1", timeout_ms=1000)
    ev = ch.get_event(5)
    assert ev is not None and ev.event is E.ADDR_RESOLVED
    return ch, cm


@pytest.mark.parametrize("kernel_class", [FakeKernel, LegacyFakeKernel])
def test_node_guid_zero_device_is_named_by_its_index(kernel_class):
    net = FakeNet(local={"10.0.0.1": FakeDevice(name="rxe7", index=7, node_guid=0)})
    ch, cm = _resolved(kernel_class(net))
    with ch:
        d = cm.device
        assert d is not None and (d.name, d.index, d.node_guid) == ("rxe7", 7, 0)
        assert str(d) == "rxe7" and cm.port_num == 1


@pytest.mark.parametrize("kernel_class", [FakeKernel, LegacyFakeKernel])
def test_pre_5_8_kernel_without_device_index(kernel_class):
    class Old(kernel_class):
        ibdev_index = False  # replies end before ibdev_index, as on kernels before 5.8

    # a non-zero node GUID still names the device (and so its index)
    ch, cm = _resolved(Old(FakeNet()))
    with ch:
        d = cm.device
        assert d is not None and (d.name, d.index, d.node_guid) == ("fake0", 1, FakeDevice().node_guid)
    # GUID 0 and no index: nothing names the device; the id says so instead of guessing
    net = FakeNet(local={"10.0.0.1": FakeDevice(name="rxe7", index=7, node_guid=0)})
    ch, cm = _resolved(Old(net))
    with ch:
        assert cm.device is None
        assert cm.port_num == 1 and str(cm.local_addr.ip) == "10.0.0.1"


def test_event_for_an_id_the_channel_does_not_know_is_dropped():
    """An event whose uid names no live id of this channel (its id was destroyed) is skipped."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        kernel.inject_event(77, E.ADDR_RESOLVED, uid=999)  # no id of this channel has uid 999
        assert ch.get_event(0.2) is None  # dropped, not raised, not handed out
        cm = CmId(ch)
        cm.resolve_addr("10.0.0.1", timeout_ms=1000)
        ev = ch.get_event(5)
        assert ev is not None and ev.id is cm


def test_an_event_of_a_number_the_table_does_not_know_is_still_a_cm_event_type():
    """A newer kernel's event (a number past INTERNAL): its ``event`` is the pseudo-member
    EVENT_<n> of CmEventType (``.name`` and ``.value`` as any member's), not a bare int;
    it moves nothing and is the caller's, acknowledged as any."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        cm = CmId(ch)
        kernel.inject_event(cm.handle, 23, -5)
        ev = ch.get_event(5)
        assert ev is not None and ev.id is cm and ev.status == -5
        assert isinstance(ev.event, E) and ev.event.name == "EVENT_23" and ev.event.value == 23 == ev.event
        assert ev.event is E(23) and str(ev.event) == "EVENT_23" and E(23) not in list(E)
        assert cm.unacked == 1
        ev.ack()
        assert cm.unacked == 0 and cm.state.name == "IDLE"


def test_an_event_is_a_named_tuple_of_its_eight_fields():
    """What the channel hands out is an Event that is a named tuple: it unpacks, indexes and
    compares as the tuple of its eight fields (an Event made by its constructor from the same
    fields equals it), its fields are read-only, and its param is decoded once."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, Event, EventChannel

    with EventChannel(FakeKernel(FakeNet())) as ch:
        cm = CmId(ch)
        cm.resolve_addr("10.0.0.1", timeout_ms=1000)
        ev = ch.get_event(5)
        assert isinstance(ev, tuple) and Event._fields == (
            "event", "status", "id", "handle", "raw_param", "ece", "listen_id", "membership")
        event, status, id_, handle, raw, ece, listen_id, membership = ev
        assert (event, status, id_, handle, ece, listen_id, membership) == (
            E.ADDR_RESOLVED, 0, cm, cm.handle, (0, 0), None, None) and len(raw) == 304
        assert ev[0] is ev.event and ev == Event(*ev) and hash(ev) == hash(Event(*ev))
        with pytest.raises(AttributeError):
            ev.status = 1  # type: ignore[misc]
        assert ev.param is ev.param  # decoded on first use, kept
        ev.ack()


@pytest.mark.parametrize("read", ["get_event", "get_events"])
def test_events_outside_the_transition_table_are_delivered_as_they_come(read):
    """get_event's fast path handles the events of TRANSITIONS; an event with no transition
    from the id's state, or of a type pyrdmacm does not know, still reaches the caller
    (state unchanged, counted as unacked) and the next ordinary event takes the fast path."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel, State

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        cm = CmId(ch)
        for ev_type, status in ((int(E.ADDR_CHANGE), 0), (99, -110), (int(E.ADDR_RESOLVED), 0)):
            kernel.inject_event(cm.handle, ev_type, status)
        if read == "get_event":
            got = [ch.get_event(1) for _ in range(3)]
        else:
            got = ch.get_events(8, timeout=1)
        assert [(e.event, e.status, e.id) for e in got] == [(E.ADDR_CHANGE, 0, cm), (99, -110, cm), (E.ADDR_RESOLVED, 0, cm)]
        assert got[0].event is E.ADDR_CHANGE and got[1].status_name == "ETIMEDOUT"
        # neither odd event moved the id (IDLE has no row for them, nor for ADDR_RESOLVED)
        assert cm.state is State.IDLE and cm.unacked == 3
        for e in got:
            e.ack()
        cm.resolve_addr("10.0.0.1", timeout_ms=1000)
        ev = ch.get_event(5)
        assert ev.event is E.ADDR_RESOLVED and cm.state is State.ADDR_RESOLVED and cm.unacked == 1


def test_a_connection_request_adopts_a_new_id_and_destroying_it_keeps_the_listener():
    """The kernel reports a connection request with the listener's uid and the handle of a
    new id it made; the channel makes an id for it (without a uid until accepted).
    Destroying that id must not unregister the listener, whose next requests still reach it."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel, State

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        listener = CmId(ch)
        listener.bind_addr("10.0.0.1:7471")
        listener.listen(8)

        def request():  # what rdma_cm does: a new kernel id, reported under the listener's uid
            return kernel.incoming_request(listener.handle)

        handle = request()
        ev = ch.get_event(1)
        assert ev.event is E.CONNECT_REQUEST and ev.listen_id is listener
        new = ev.id
        assert isinstance(new, CmId) and new is not listener and new.handle == handle
        # a request's id has no uid until it is accepted (the kernel queues nothing for uid 0),
        # and is not in the channel's registry: the listener's uid stays the listener's
        assert (new.uid, new.state, new.ps) == (0, State.REQUEST, listener.ps)
        assert ch.ids == [listener]
        ev.ack()
        # the request counts on the listener (ucma_get_event: uevent->ctx), not on its new id
        assert new.destroy() == 0 and handle not in kernel.ids
        assert ch.ids == [listener] and listener.state is State.LISTEN
        request()
        ev = ch.get_event(1)
        assert ev.listen_id is listener and ev.id is not new
        ev.ack()
        ev.id.destroy()
        assert listener.destroy() == 2 and ch.ids == []


def test_a_request_id_registered_under_a_fresh_uid_gets_its_events():
    """What ACCEPT will do: the request's id takes a uid of its own, then its events (which
    the kernel queues under that uid) reach it, and the listener's still reach the listener."""
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm import CmId, EventChannel, State, StateError, UsageError

    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch, EventChannel(FakeKernel(FakeNet())) as other:
        listener = CmId(ch)
        listener.listen()
        kernel.incoming_request(listener.handle)
        req = ch.get_event(1)
        new = req.id
        uid = ch.registry.register(new, ch)
        assert new.uid == uid and uid not in (0, listener.uid) and set(ch.ids) == {listener, new}
        with pytest.raises(StateError):
            ch.registry.register(new, ch)
        kernel.inject_event(new.handle, E.ESTABLISHED, uid=uid)
        ev = ch.get_event(1)
        # delivered; the state stays: only an accept (REQUEST -> CONNECT) lets ESTABLISHED move it
        assert ev.id is new and ev.event is E.ESTABLISHED and new.state is State.REQUEST

        stranger = listener._spawn(ch, 999)  # a request's id of the other channel
        with pytest.raises(UsageError):
            other.registry.register(stranger, other)
        req.ack()
        ev.ack()
        new.destroy()
        assert ch.ids == [listener]


def test_create_ids_is_all_or_nothing():
    """A refusal part-way (here the third CREATE_ID: ENOMEM) destroys the ids already made
    and raises the kernel's errno; the channel goes on."""
    from pyrdmacm import EventChannel
    from pyrdmacm.errors import KernelError

    from pyrdmacm.abi import UserCmCmd

    class Tight(FakeKernel):
        left = 2

        def write(self, data):
            if struct.unpack_from("<I", data)[0] == UserCmCmd.CREATE_ID:
                if self.left == 0:
                    raise OSError(errno.ENOMEM, "no memory")
                self.left -= 1
            return super().write(data)

    kernel = Tight(FakeNet())
    with EventChannel(kernel) as ch:
        with pytest.raises(KernelError) as exc:
            ch.create_ids(5)
        assert exc.value.errno == errno.ENOMEM and "CREATE_ID" in str(exc.value)
        assert ch.ids == [] and kernel.ids == {}
        kernel.left = 3
        ids = ch.create_ids(3)
        assert len(ids) == 3 and len(kernel.ids) == 3 and ch.ids == ids


class TestFakeKernel(suite(*core())):
    """Every test of the behavioural suites, against the fake kernel."""


def test_every_behavioural_test_runs_in_this_tier():
    assert all(suite_tests(m) for m in core()) and suite_tests(*core()) <= set(dir(TestFakeKernel))


class _AnswersAnything:
    """A transport that takes every write and never writes a reply (as /dev/null would): every
    GET_EVENT 'succeeds' with the reply buffer as it was, an event of uid 0, which no id has."""

    legacy = False

    def __init__(self):
        self._r, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        os.write(self._w, b"x")  # always readable

    def fileno(self):
        return self._r

    def write(self, data):
        return len(data)

    def identify_device(self, index, node_guid):
        return None, index

    def close(self):
        os.close(self._r)
        os.close(self._w)


@pytest.mark.parametrize("timeout", [0, 0.2])
def test_a_wait_ends_at_its_deadline_though_only_dropped_events_come(timeout):
    """Events for no id (dropped) keep coming: get_event and get_events still return at their
    deadline (they used to spin at full CPU for ever)."""
    import time

    from pyrdmacm import EventChannel

    with EventChannel(_AnswersAnything()) as ch:
        for read in (lambda: ch.get_event(timeout), lambda: ch.get_events(4, timeout)):
            t0 = time.monotonic()
            assert read() in (None, [])
            assert time.monotonic() - t0 < timeout + 2.0
