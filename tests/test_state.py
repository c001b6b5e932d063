"""The state machine, walked: every (kind, state, call) legal or not, every event in every state.

The legal cells are written out below as the specification (from the kernel's own checks,
``shared`` notes of cma.c / ucma.c), independently of pyrdmacm.state's rows; the table must
equal it cell for cell.  Then the fake kernel checks that every illegal call a CmId offers
raises StateError before any syscall, in every state the fake can put an id in.
"""

from __future__ import annotations

import pytest

from pyrdmacm import abi
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.state import (
    FAILURE_EVENTS,
    KERNEL_STATE,
    OUTCOMES,
    TRANSITIONS,
    Call,
    Kind,
    State,
    after_event,
    calls_after,
    events_after,
    kind_of,
    next_state,
    refusal,
)

S, C, K = State, Call, Kind
LIVE = [s for s in State if s is not S.DESTROYED]
CONNECTING = {S.CONNECT, S.RESPONSE}
WITH_DEVICE = {S.ADDR_BOUND, S.ADDR_RESOLVED, S.ADDRINFO_RESOLVED, S.ROUTE_QUERY, S.ROUTE_RESOLVED, S.REQUEST,
               S.CONNECT, S.RESPONSE, S.CONNECTED, S.DISCONNECTED, S.FAILED, S.LISTEN}

#: call -> {kind: {legal state: state after}}; "same" keeps the state
SAME = "same"
BOTH = (K.CONNECTED, K.DATAGRAM)
SPEC = {
    C.BIND_ADDR: {k: {S.IDLE: S.ADDR_BOUND} for k in BOTH},
    C.RESOLVE_ADDR: {k: {S.IDLE: S.ADDR_QUERY, S.ADDR_BOUND: S.ADDR_QUERY} for k in BOTH},
    C.RESOLVE_IB_SERVICE: {k: {S.ADDR_BOUND: S.ADDRINFO_QUERY} for k in BOTH},
    C.RESOLVE_ROUTE: {k: {S.ADDR_RESOLVED: S.ROUTE_QUERY, S.ADDRINFO_RESOLVED: S.ROUTE_QUERY} for k in BOTH},
    C.SET_IB_PATH: {k: {S.ADDR_RESOLVED: S.ROUTE_RESOLVED} for k in BOTH},
    C.CONNECT: {k: {S.ROUTE_RESOLVED: S.CONNECT} for k in BOTH},
    C.ESTABLISH: {K.CONNECTED: {S.RESPONSE: S.CONNECTED}, K.DATAGRAM: {}},
    C.LISTEN: {k: {S.IDLE: S.LISTEN, S.ADDR_BOUND: S.LISTEN} for k in BOTH},
    C.ACCEPT: {K.CONNECTED: {S.REQUEST: S.CONNECT}, K.DATAGRAM: {S.REQUEST: S.CONNECTED}},
    C.REJECT: {K.CONNECTED: {S.REQUEST: S.FAILED, S.RESPONSE: S.FAILED}, K.DATAGRAM: {S.REQUEST: S.FAILED}},
    C.NOTIFY: {K.CONNECTED: {S.CONNECT: SAME, S.CONNECTED: SAME}, K.DATAGRAM: {}},
    C.DISCONNECT: {K.CONNECTED: {s: S.DISCONNECTED for s in (S.CONNECT, S.RESPONSE, S.CONNECTED, S.DISCONNECTED)},
                   K.DATAGRAM: {}},
    C.JOIN_MULTICAST: {K.CONNECTED: {}, K.DATAGRAM: {S.ADDR_BOUND: SAME, S.ADDR_RESOLVED: SAME}},
    C.SET_TOS: {k: {s: SAME for s in LIVE} for k in BOTH},
    C.SET_REUSEADDR: {k: {s: SAME for s in LIVE if s is not S.LISTEN} for k in BOTH},
    C.CLEAR_REUSEADDR: {k: {S.IDLE: SAME} for k in BOTH},
    C.SET_AFONLY: {k: {S.IDLE: SAME, S.ADDR_BOUND: SAME} for k in BOTH},
    C.SET_ACK_TIMEOUT: {K.CONNECTED: {s: SAME for s in LIVE}, K.DATAGRAM: {}},
    C.INIT_QP_ATTR: {k: {s: SAME for s in WITH_DEVICE} for k in BOTH},
    C.MIGRATE: {k: {s: SAME for s in LIVE} for k in BOTH},
    C.QUERY: {k: {s: SAME for s in LIVE} for k in BOTH},
    C.GET_REQUEST: {k: {S.LISTEN: SAME} for k in BOTH},
    C.DESTROY: {k: {s: S.DESTROYED for s in LIVE} for k in BOTH},
}


def test_the_spec_names_every_call():
    assert set(SPEC) == set(Call)


@pytest.mark.parametrize("call", list(Call), ids=str)
@pytest.mark.parametrize("kind", list(Kind), ids=str)
def test_every_state_and_call(kind, call):
    legal = SPEC[call][kind]
    for st in State:
        got = next_state(kind, st, call)
        if st in legal:
            want = st if legal[st] == SAME else legal[st]
            assert got is want, (kind, st, call)
        else:
            assert got is None, (kind, st, call)
            why = refusal(kind, st, call)
            assert str(call) in why and len(why) > 30, why
            # it says what to do: what the call needs, or to destroy / create a new id
            assert any(w in why for w in ("needs", "destroy", "create a new id", "is not for")), why


def test_refusals_name_the_other_kind_when_only_it_takes_the_call():
    why = refusal(K.DATAGRAM, S.ROUTE_RESOLVED, C.SET_ACK_TIMEOUT)
    assert "not for a datagram id" in why
    assert "not for a connected id" in refusal(K.CONNECTED, S.ADDR_BOUND, C.JOIN_MULTICAST)
    assert "destroy the id" in refusal(K.CONNECTED, S.FAILED, C.CONNECT)
    assert "DEVICE_REMOVAL" in refusal(K.CONNECTED, S.DEVICE_REMOVED, C.RESOLVE_ROUTE)
    assert "destroyed id" in refusal(K.DATAGRAM, S.DESTROYED, C.QUERY)


#: event -> {kind: {state before: state after}} where it moves the id; everything else keeps it
EVENT_SPEC = {
    E.ADDR_RESOLVED: {k: {S.ADDR_QUERY: S.ADDR_RESOLVED} for k in BOTH},
    E.ADDR_ERROR: {K.CONNECTED: {S.ADDR_QUERY: S.ADDR_BOUND},
                   K.DATAGRAM: {S.ADDR_QUERY: S.ADDR_BOUND, S.CONNECT: S.FAILED}},
    E.ADDRINFO_RESOLVED: {k: {S.ADDRINFO_QUERY: S.ADDRINFO_RESOLVED} for k in BOTH},
    E.ADDRINFO_ERROR: {k: {S.ADDRINFO_QUERY: S.ADDR_BOUND} for k in BOTH},
    E.ROUTE_RESOLVED: {k: {S.ROUTE_QUERY: S.ROUTE_RESOLVED} for k in BOTH},
    E.ROUTE_ERROR: {k: {S.ROUTE_QUERY: S.ADDR_RESOLVED} for k in BOTH},
    E.CONNECT_RESPONSE: {K.CONNECTED: {S.CONNECT: S.RESPONSE}, K.DATAGRAM: {}},
    E.ESTABLISHED: {k: {S.CONNECT: S.CONNECTED} for k in BOTH},
    E.REJECTED: {k: {s: S.FAILED for s in CONNECTING} for k in BOTH},
    E.UNREACHABLE: {k: {s: S.FAILED for s in CONNECTING} for k in BOTH},
    E.CONNECT_ERROR: {k: {s: S.FAILED for s in CONNECTING} for k in BOTH},
    E.DISCONNECTED: {K.CONNECTED: {s: S.DISCONNECTED for s in (S.CONNECT, S.RESPONSE, S.CONNECTED)},
                     K.DATAGRAM: {}},
    E.DEVICE_REMOVAL: {k: {s: S.DEVICE_REMOVED for s in LIVE} for k in BOTH},
}


@pytest.mark.parametrize("event", list(E), ids=lambda e: e.name)
@pytest.mark.parametrize("kind", list(Kind), ids=str)
def test_every_event_in_every_state(kind, event):
    moves = EVENT_SPEC.get(event, {}).get(kind, {})
    for st in State:
        assert after_event(kind, st, event) is moves.get(st, st), (kind, st, event)
    # an unknown event number (a newer kernel's) moves nothing either
    assert after_event(kind, S.ADDR_QUERY, 999) is S.ADDR_QUERY


def test_a_destroyed_id_stays_destroyed():
    for kind in Kind:
        for what in list(Call) + list(E):
            assert TRANSITIONS.get((kind, S.DESTROYED, what)) is None


def test_every_state_is_reachable_and_every_live_state_can_be_destroyed():
    seen = {S.IDLE, S.REQUEST}  # REQUEST: made by the kernel for a CONNECT_REQUEST
    steps = [(k, s, w, new) for (k, s, w), new in TRANSITIONS.items()]
    grew = True
    while grew:
        grew = False
        for _k, s, _w, new in steps:
            if s in seen and new not in seen:
                seen.add(new)
                grew = True
    assert seen == set(State)
    for kind in Kind:
        for st in LIVE:
            assert next_state(kind, st, C.DESTROY) is S.DESTROYED


def test_every_outcome_event_moves_the_id_on_from_where_its_call_left_it():
    for (kind, call), outcome in OUTCOMES.items():
        assert outcome.ok and outcome.ok.isdisjoint(outcome.failed)
        if call is C.JOIN_MULTICAST:
            continue  # its events are the membership's, not the id's
        for st, after in SPEC[call][kind].items():
            left = st if after == SAME else after
            for ev in outcome.events:
                if ev is E.DEVICE_REMOVAL:
                    continue
                moved = after_event(kind, left, ev)
                if call in (C.SET_IB_PATH, C.DISCONNECT):  # the call itself moved the id; its event confirms it
                    assert moved is left
                elif call is C.GET_REQUEST:  # the request's id is a new one: the listener listens on
                    assert moved is left is S.LISTEN
                else:
                    assert moved is not left or ev is E.ESTABLISHED and left is S.CONNECTED, (kind, call, ev)


def test_failure_events():
    assert FAILURE_EVENTS == {E.ADDR_ERROR, E.ROUTE_ERROR, E.CONNECT_ERROR, E.UNREACHABLE, E.REJECTED,
                              E.MULTICAST_ERROR, E.ADDRINFO_ERROR, E.DEVICE_REMOVAL}


def test_the_derived_fast_tables_agree_with_the_table():
    for number, rows in events_after().items():
        for st, (ev, new) in rows.items():
            assert int(ev) == number
            for kind in Kind:
                assert after_event(kind, st, ev) is new
    for call in Call:
        for st, new in calls_after(call).items():
            assert all(next_state(kind, st, call) is new for kind in Kind)


def test_kinds_of_port_spaces():
    P, Q = abi.PortSpace, abi.QpType
    assert kind_of(P.TCP, Q.RC) is K.CONNECTED and kind_of(P.IB, Q.UC) is K.CONNECTED
    assert {kind_of(P.UDP, Q.UD), kind_of(P.IPOIB, Q.UD), kind_of(P.IB, Q.UD)} == {K.DATAGRAM}


def test_kernel_states_are_the_kernels():
    from pyrdmacm.netlink import CmIdState

    assert set(KERNEL_STATE) == set(State)
    assert {CmIdState[name] for name in KERNEL_STATE.values()} <= set(CmIdState)


# --------------------------------------------------------------------------- on the fake kernel

def _in_state(ch, world_local, world_peer, state):
    """A TCP id on the fake kernel in ``state`` (those the fake can make), with the fake's log length."""
    from pyrdmacm import CmId

    cm = CmId(ch)
    if state is S.IDLE:
        return cm
    if state is S.ADDR_BOUND:
        cm.bind_addr(world_local)
        return cm
    if state is S.LISTEN:
        cm.listen()
        return cm
    if state is S.DESTROYED:
        cm.destroy()
        return cm
    cm.resolve_addr(world_peer, timeout_ms=5000)
    if state is S.ADDR_QUERY:
        return cm
    ev = ch.get_event(5)
    assert ev is not None and ev.event is E.ADDR_RESOLVED
    if state is S.ADDR_RESOLVED:
        return cm
    cm.resolve_route(5000)
    if state is S.ROUTE_QUERY:
        return cm
    ev = ch.get_event(5)
    assert ev is not None and ev.event is E.ROUTE_RESOLVED
    assert state is S.ROUTE_RESOLVED
    return cm


#: the calls a CmId offers today, by the table's name, with arguments that pass their checks
OFFERED = {
    C.BIND_ADDR: lambda cm: cm.bind_addr("10.0.0.1"),
    C.RESOLVE_ADDR: lambda cm: cm.resolve_addr("10.0.0.2", timeout_ms=100),
    C.RESOLVE_ROUTE: lambda cm: cm.resolve_route(100),
    C.CONNECT: lambda cm: cm.connect(0x1234),
    C.LISTEN: lambda cm: cm.listen(),
    C.DISCONNECT: lambda cm: cm.disconnect(),
    C.DESTROY: lambda cm: cm.destroy(),
}


@pytest.mark.parametrize("state", [S.IDLE, S.ADDR_BOUND, S.ADDR_QUERY, S.ADDR_RESOLVED, S.ROUTE_QUERY,
                                   S.ROUTE_RESOLVED, S.LISTEN, S.DESTROYED], ids=str)
def test_every_illegal_call_is_refused_before_any_syscall(state):
    from pyrdmacm import EventChannel, StateError
    from pyrdmacm.testing import FakeKernel

    for call, do in OFFERED.items():
        kernel = FakeKernel()
        with EventChannel(kernel) as ch:
            cm = _in_state(ch, "10.0.0.1", "10.0.0.2", state)
            if next_state(cm.kind, state, call) is not None:
                continue
            before = len(kernel.log)
            with pytest.raises(StateError) as e:
                do(cm)
            assert len(kernel.log) == before, "%s in %s reached the kernel" % (call, state)
            assert cm.state is state and str(call) in str(e.value)


def test_the_ack_timeout_is_an_rc_qps():
    """The kernel refuses ACK_TIMEOUT on a UC id (EINVAL, kernel_rules): its Rules drop the call."""
    from pyrdmacm.state import rules_for

    P, Q = abi.PortSpace, abi.QpType
    assert not rules_for(P.IB, Q.UC).calls[C.SET_ACK_TIMEOUT]
    assert rules_for(P.IB, Q.RC).calls[C.SET_ACK_TIMEOUT] == rules_for(P.TCP, Q.RC).calls[C.SET_ACK_TIMEOUT]
    assert S.IDLE in rules_for(P.TCP, Q.RC).calls[C.SET_ACK_TIMEOUT]


def test_reuseaddr_is_set_anywhere_but_listen_and_cleared_in_idle():
    """What the lab's kernels answered (kernel_rules): setting REUSEADDR works in every state
    but LISTEN, clearing it only in IDLE."""
    for kind in Kind:
        assert next_state(kind, S.LISTEN, C.SET_REUSEADDR) is None
        assert next_state(kind, S.CONNECTED, C.SET_REUSEADDR) is S.CONNECTED
        assert next_state(kind, S.IDLE, C.CLEAR_REUSEADDR) is S.IDLE
        assert next_state(kind, S.ADDR_BOUND, C.CLEAR_REUSEADDR) is None
