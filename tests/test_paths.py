"""The one path of each call and each read, on the fake kernel: a batch call writes what the
calls per id write, a refused command moves the id back, connection events move the ids and
answer the peer's DREQ, and a read after an empty look waits before its GET_EVENT."""

from __future__ import annotations

import struct

import pytest

from pyrdmacm import CmId, EventChannel, State
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import UserCmCmd as C
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.testing import FakeKernel, FakeNet

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


def run(scenario, batch: bool, kernel_class=FakeKernel):
    kernel = kernel_class(FakeNet())
    trace = []
    with EventChannel(kernel) as ch:
        scenario(ch, batch, trace)
    return normalise(kernel.log), trace


def snapshot(ids, events=()):
    return ([i.state for i in ids], [(e.event, e.status, ids.index(e.id) if e.id in ids else None) for e in events])


def get(ch, n):
    out = []
    while len(out) < n:
        ev = ch.get_event(5)
        assert ev is not None
        out.append(ev)
    return out


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


def test_a_refused_command_puts_the_state_back():
    class Refusing(FakeKernel):
        def write(self, data):
            if struct.unpack_from("<I", data)[0] in (C.RESOLVE_ADDR, C.RESOLVE_ROUTE):
                raise OSError(12, "ENOMEM")
            return super().write(data)

    with EventChannel(Refusing(FakeNet())) as ch:
        cm = ch.create_id()
        # the first destination (parsed and packed), then the same one again (packed already)
        for dst in ("10.0.0.2", "10.0.0.2", "10.0.0.3"):
            with pytest.raises(OSError):
                cm.resolve_addr(dst, timeout_ms=100)
            assert cm.state is State.IDLE
        cm.bind_addr("10.0.0.1")
        with pytest.raises(OSError):
            cm.resolve_addr("10.0.0.2", timeout_ms=100)
        assert cm.state is State.ADDR_BOUND
        assert cm.destroy() == 0


def _connections() -> list:
    """Connections on the two-host fake: each event the client reads as (type, status, param
    bytes, ece, listener, membership) and the id's state after it.  Three connections: the client disconnects (its DISCONNECTED
    only moves it), the server disconnects (the client's DISCONNECTED is the peer's DREQ,
    answered by the channel), and a datagram one (SIDR: the datagram rules)."""
    import threading

    from pyrdmacm import PortSpace
    from pyrdmacm.testing import FakeFabric

    trace = []
    # a DREQ nobody answers times out after 10 s here: the answer must come from the channel
    with FakeFabric(timewait_ms=20, cm_timeout_ms=10000) as fab:
        server, client = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        with EventChannel(server()) as sc, EventChannel(client()) as cc:
            listeners = []
            for port, ps in ((7471, PortSpace.TCP), (7472, PortSpace.UDP)):
                lst = CmId(sc, ps)
                lst.bind_addr("10.9.0.1:%d" % port)
                lst.listen()
                listeners.append(lst)
            stop = threading.Event()
            leaving = set()  # the ids whose REQ said "bye": the server ends those
            answered = threading.Event()  # the server's disconnect of one completed (the DREP came)

            def serve():
                while not stop.is_set():
                    ev = sc.get_event(0.05)
                    if ev is None:
                        continue
                    ev.ack()
                    if ev.event is E.CONNECT_REQUEST:
                        ev.id.accept(qp_num=0x1234, private_data=b"rep", responder_resources=1)
                        if ev.param.private_data.startswith(b"bye"):
                            leaving.add(ev.id)
                        if ev.id.kind.value == "datagram":
                            ev.id.destroy()
                    elif ev.event is E.ESTABLISHED and ev.id in leaving:
                        ev.id.disconnect()  # the server ends this one
                    elif ev.event is E.DISCONNECTED:
                        if ev.id in leaving:
                            answered.set()
                        ev.id.destroy()

            t = threading.Thread(target=serve)
            t.start()
            try:
                for port, ps, data in ((7471, PortSpace.TCP, b"stay"), (7471, PortSpace.TCP, b"bye"),
                                       (7472, PortSpace.UDP, b"sidr")):
                    cm = CmId(cc, ps)
                    cm.resolve_addr("10.9.0.1:%d" % port, timeout_ms=2000)
                    while True:
                        ev = cc.get_event(5)  # nothing queued yet, mostly: the wait, then the read
                        assert ev is not None
                        trace.append((ev.event, ev.status, bytes(ev.raw_param), ev.ece, ev.listen_id, ev.membership,
                                      cm.state, cm.unacked))
                        ev.ack()
                        if ev.event is E.ADDR_RESOLVED:
                            cm.resolve_route(2000)
                        elif ev.event is E.ROUTE_RESOLVED:
                            cm.connect(qp_num=0x4321, private_data=data)
                        elif ev.event is E.CONNECT_RESPONSE:
                            cm.establish()
                            if data == b"stay":
                                cm.disconnect()
                        elif ev.event in (E.DISCONNECTED, E.ESTABLISHED) and (ps is PortSpace.UDP or
                                                                             ev.event is E.DISCONNECTED):
                            break
                    if data == b"bye":  # answered by the client's channel, not by its destroy()
                        trace.append(("answered before destroy", answered.wait(1)))
                    trace.append(cm.destroy())
            finally:
                stop.set()
                t.join()
            trace.append([m.kind for m in fab.messages])
    return trace


def test_connection_events_move_the_ids_and_the_peers_dreq_is_answered():
    """CONNECT_RESPONSE, ESTABLISHED and both DISCONNECTEDs: the states after each, and the
    wire's messages (the DREQ of the server answered by the client's channel)."""
    hot = _connections()
    states = [row[6] for row in hot if isinstance(row, tuple) and len(row) == 8]
    assert states == [State.ADDR_RESOLVED, State.ROUTE_RESOLVED, State.RESPONSE, State.DISCONNECTED] * 2 + [
        State.ADDR_RESOLVED, State.ROUTE_RESOLVED, State.CONNECTED]
    kinds = [row[0] for row in hot if isinstance(row, tuple)]
    assert kinds.count(E.CONNECT_RESPONSE) == 2 and kinds.count(E.DISCONNECTED) == 2
    assert kinds.count(E.ESTABLISHED) == 1  # the SIDR REP
    assert hot[-1].count("DREP") == 2  # the client's own, and the one its channel answered
    assert ("answered before destroy", True) in hot


def test_default_connect_parameters_are_those_of_an_empty_conn_param():
    """connect()/accept() without parameters take a ConnParam checked once: the bytes are
    those of connect(ConnParam(qp_num=N))."""
    from pyrdmacm import wire
    from pyrdmacm.records import ConnParam

    assert wire.DEFAULT_CONN_PARAM == ConnParam()
    for qpn in (2, 0x4321, 0xFFFFFE):
        fast = wire.conn_fields(wire.DEFAULT_CONN_PARAM, qpn)
        assert fast == wire.conn_fields(ConnParam(qp_num=qpn), qpn)


@pytest.mark.parametrize("read", ["get_event", "get_events"])
def test_after_an_empty_look_the_next_read_waits_first(read):
    """A look that found the queue empty (EAGAIN) makes the next read wait before its
    GET_EVENT: a timed read that finds nothing writes no GET_EVENT at all, one that gets an
    event writes exactly one (get_events one more, to EAGAIN), and the read after goes back to
    looking first."""
    kernel = FakeKernel(FakeNet())
    with EventChannel(kernel) as ch:
        cm = ch.create_id()
        reads = lambda: sum(1 for c, *_ in kernel.log if c == C.GET_EVENT)  # noqa: E731
        call = (lambda t: ch.get_event(t)) if read == "get_event" else (lambda t: (ch.get_events(8, t) or [None])[0])
        assert call(0) is None and reads() == 1  # EAGAIN: the queue is empty
        assert call(0.05) is None and reads() == 1  # waited first, timed out: no GET_EVENT
        assert ch._drained
        cm.resolve_addr("10.0.0.2", timeout_ms=100)
        before = reads()
        ev = call(5)
        assert ev is not None and ev.event is E.ADDR_RESOLVED
        assert reads() - before == (1 if read == "get_event" else 2)  # get_events reads on to EAGAIN
        assert not ch._drained  # after the wait, the next read looks first again (a batch's EAGAIN
        # at its end is no empty look)
        cm.resolve_route(100)
        ev = call(5)
        assert ev is not None and ev.event is E.ROUTE_RESOLVED
