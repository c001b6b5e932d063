"""The cm_id state machine: states, the one transition table, and what answers each call.

Theory of operation
-------------------
Pure code (h11's shape), no I/O: the channel and the ids ask this module what a call or
an event does, and :class:`pyrdmacm.core.life.Life` -- what every id is -- applies the answer:
its methods (and :func:`pyrdmacm.core.life.ack`) are the only code that assigns an id's state,
its count of events not acknowledged and its cached query answers.

An id's :class:`State` is the kernel's ``enum rdma_cm_state`` as seen from
userspace, with the three steps of a connection the kernel keeps under one
``RDMA_CM_CONNECT`` told apart (``REQUEST``, ``CONNECT``, ``RESPONSE``), because
what a user may do next differs (:data:`KERNEL_STATE` maps them back).  What
differs between ids is their :class:`Kind`: a connected id (an RC or UC QP: port
space TCP, or IB with such a QP type) connects through REQ/REP/RTU, a datagram
id (a UD QP: UDP, IPOIB, IB with UD) through SIDR and can join multicast groups.

:data:`TRANSITIONS` is the single table: ``(kind, state, call or event) -> new
state``.  A call (a :class:`Call`) absent from it is illegal in that state: the
caller raises :class:`~pyrdmacm.errors.StateError` before any syscall, with
:func:`refusal`'s reason.  An event absent from it leaves the state alone.
Every other table here is derived from it.

:data:`OUTCOMES` says which events answer a call (``ADDR_RESOLVED`` or
``ADDR_ERROR`` for ``resolve_addr`` ...): sync mode waits for them, the asyncio
adapter resolves a future with them, the CLI reports them.  A call with no
outcome is complete when its write returns.
"""

from __future__ import annotations

import enum
from typing import Dict, FrozenSet, Iterable, Mapping, NamedTuple, Optional, Tuple, Union

from .abi import CmEventType as E
from .abi import PortSpace, QpType

__all__ = [
    "State",
    "Kind",
    "Call",
    "TRANSITIONS",
    "OUTCOMES",
    "Outcome",
    "KERNEL_STATE",
    "FAILURE_EVENTS",
    "kind_of",
    "next_state",
    "after_event",
    "refusal",
    "calls_after",
    "events_after",
    "Rules",
    "rules_for",
    "AFTER_REFUSAL",
]


class State(enum.Enum):
    """The id's state as the kernel keeps it (``enum rdma_cm_state``), seen from userspace."""

    IDLE = "idle"
    ADDR_BOUND = "addr_bound"
    ADDR_QUERY = "addr_query"
    ADDR_RESOLVED = "addr_resolved"
    ADDRINFO_QUERY = "addrinfo_query"
    ADDRINFO_RESOLVED = "addrinfo_resolved"
    ROUTE_QUERY = "route_query"
    ROUTE_RESOLVED = "route_resolved"
    #: a connection request's id, made by the kernel, not yet accepted or rejected
    REQUEST = "request"
    #: a request sent (active) or accepted (passive), waiting for the peer
    CONNECT = "connect"
    #: active side without a QP: the peer's REP arrived; ``establish()`` sends the RTU
    RESPONSE = "response"
    CONNECTED = "connected"
    DISCONNECTED = "disconnected"
    #: the connection attempt ended (rejected, unreachable, connect error): destroy the id
    FAILED = "failed"
    LISTEN = "listen"
    #: the RDMA device went away: only destroy() is left
    DEVICE_REMOVED = "device_removed"
    DESTROYED = "destroyed"

    def __str__(self) -> str:
        return self.name

    # members are singletons: an identity hash keeps table lookups off Enum's Python-level __hash__
    __hash__ = object.__hash__


class Kind(enum.Enum):
    """What decides which calls an id takes: how it connects."""

    CONNECTED = "connected"  # RC/UC QP: REQ, REP, RTU, DREQ; PS_TCP, or PS_IB with RC/UC
    DATAGRAM = "datagram"  # UD QP: SIDR and multicast; PS_UDP, PS_IPOIB, or PS_IB with UD

    def __str__(self) -> str:
        return self.name

    __hash__ = object.__hash__


class Call(str, enum.Enum):
    """The calls of an id that the state machine rules on (librdmacm's verbs, no ``rdma_``)."""

    BIND_ADDR = "bind_addr"
    RESOLVE_ADDR = "resolve_addr"
    RESOLVE_IB_SERVICE = "resolve_ib_service"
    RESOLVE_ROUTE = "resolve_route"
    CONNECT = "connect"
    ESTABLISH = "establish"
    LISTEN = "listen"
    ACCEPT = "accept"
    REJECT = "reject"
    NOTIFY = "notify"
    DISCONNECT = "disconnect"
    JOIN_MULTICAST = "join_multicast"
    SET_TOS = "set_tos"
    SET_REUSEADDR = "set_reuseaddr"
    #: set_reuseaddr(False): the kernel clears it in IDLE only
    CLEAR_REUSEADDR = "clear_reuseaddr"
    SET_AFONLY = "set_afonly"
    SET_ACK_TIMEOUT = "set_ack_timeout"
    SET_IB_PATH = "set_ib_path"
    INIT_QP_ATTR = "init_qp_attr"
    MIGRATE = "migrate"
    QUERY = "query"
    GET_REQUEST = "get_request"
    DESTROY = "destroy"

    def __str__(self) -> str:
        return self.value

    __hash__ = object.__hash__


S = State
K = Kind
C = Call
BOTH: Tuple[Kind, ...] = (K.CONNECTED, K.DATAGRAM)
CONN: Tuple[Kind, ...] = (K.CONNECTED,)
DGRAM: Tuple[Kind, ...] = (K.DATAGRAM,)
#: "the state does not change"
SAME = None

#: every state but DESTROYED
LIVE = tuple(s for s in State if s is not S.DESTROYED)
#: the states in which the id is bound to an RDMA device (or may be: ADDR_BOUND to a device's address)
_DEVICE = (S.ADDR_BOUND, S.ADDR_RESOLVED, S.ADDRINFO_RESOLVED, S.ROUTE_QUERY, S.ROUTE_RESOLVED, S.REQUEST,
           S.CONNECT, S.RESPONSE, S.CONNECTED, S.DISCONNECTED, S.FAILED, S.LISTEN)
_CONNECTING = (S.CONNECT, S.RESPONSE)

Key = Tuple[Kind, State, Union[Call, E]]

# The rows: (kinds, states before, call or event, state after or SAME).  The [code] notes
# name the kernel function that enforces the rule (cma.c, ucma.c).
_ROWS: Tuple[Tuple[Tuple[Kind, ...], Tuple[State, ...], Union[Call, E], Optional[State]], ...] = (
    # addresses: rdma_bind_addr (IDLE -> ADDR_BOUND), rdma_resolve_addr (cma_comp_exch ADDR_BOUND -> ADDR_QUERY)
    (BOTH, (S.IDLE,), C.BIND_ADDR, S.ADDR_BOUND),
    (BOTH, (S.IDLE, S.ADDR_BOUND), C.RESOLVE_ADDR, S.ADDR_QUERY),
    (BOTH, (S.ADDR_QUERY,), E.ADDR_RESOLVED, S.ADDR_RESOLVED),
    (BOTH, (S.ADDR_QUERY,), E.ADDR_ERROR, S.ADDR_BOUND),
    # IB service records (6.17+, rdma_resolve_ib_service: ADDR_BOUND -> ADDRINFO_QUERY)
    (BOTH, (S.ADDR_BOUND,), C.RESOLVE_IB_SERVICE, S.ADDRINFO_QUERY),
    (BOTH, (S.ADDRINFO_QUERY,), E.ADDRINFO_RESOLVED, S.ADDRINFO_RESOLVED),
    (BOTH, (S.ADDRINFO_QUERY,), E.ADDRINFO_ERROR, S.ADDR_BOUND),
    # routes: rdma_resolve_route (ADDR_RESOLVED or ADDRINFO_RESOLVED -> ROUTE_QUERY); rdma_set_ib_path
    # moves ADDR_RESOLVED -> ROUTE_RESOLVED itself and queues a ROUTE_RESOLVED event
    (BOTH, (S.ADDR_RESOLVED, S.ADDRINFO_RESOLVED), C.RESOLVE_ROUTE, S.ROUTE_QUERY),
    (BOTH, (S.ROUTE_QUERY,), E.ROUTE_RESOLVED, S.ROUTE_RESOLVED),
    (BOTH, (S.ROUTE_QUERY,), E.ROUTE_ERROR, S.ADDR_RESOLVED),
    (BOTH, (S.ADDR_RESOLVED,), C.SET_IB_PATH, S.ROUTE_RESOLVED),
    # active side: rdma_connect (ROUTE_RESOLVED -> CONNECT); a QP-less id gets CONNECT_RESPONSE
    # and sends the RTU with ACCEPT(valid=0) (establish); a UD id gets ESTABLISHED from the SIDR REP
    (BOTH, (S.ROUTE_RESOLVED,), C.CONNECT, S.CONNECT),
    (CONN, (S.CONNECT,), E.CONNECT_RESPONSE, S.RESPONSE),
    (CONN, (S.RESPONSE,), C.ESTABLISH, S.CONNECTED),
    (BOTH, (S.CONNECT,), E.ESTABLISHED, S.CONNECTED),
    # a failed attempt leaves the kernel's id in CONNECT, where no call but destroy helps
    (BOTH, _CONNECTING, E.REJECTED, S.FAILED),
    (BOTH, _CONNECTING, E.UNREACHABLE, S.FAILED),
    (BOTH, _CONNECTING, E.CONNECT_ERROR, S.FAILED),
    (DGRAM, (S.CONNECT,), E.ADDR_ERROR, S.FAILED),  # the SIDR REP's qkey differs from the id's
    # passive side: rdma_listen auto-binds an IDLE id; CONNECT_REQUEST makes a new id in REQUEST
    (BOTH, (S.IDLE, S.ADDR_BOUND), C.LISTEN, S.LISTEN),
    (CONN, (S.REQUEST,), C.ACCEPT, S.CONNECT),
    (DGRAM, (S.REQUEST,), C.ACCEPT, S.CONNECTED),  # the SIDR REP is sent; no event follows
    (BOTH, (S.REQUEST,), C.REJECT, S.FAILED),
    (CONN, (S.RESPONSE,), C.REJECT, S.FAILED),  # the active side may refuse the REP
    # NOTIFY(COMM_EST) forces ESTABLISHED on an accepted id (EISCONN once established)
    (CONN, (S.CONNECT, S.CONNECTED), C.NOTIFY, SAME),
    # teardown: DISCONNECT sends a DREQ, or the DREP once the peer's DREQ came
    (CONN, (S.CONNECT, S.RESPONSE, S.CONNECTED, S.DISCONNECTED), C.DISCONNECT, S.DISCONNECTED),
    (CONN, (S.CONNECT, S.RESPONSE, S.CONNECTED), E.DISCONNECTED, S.DISCONNECTED),
    (CONN, (S.DISCONNECTED,), E.TIMEWAIT_EXIT, SAME),
    # multicast: rdma_join_multicast needs ADDR_BOUND or ADDR_RESOLVED (a membership has its own uid)
    (DGRAM, (S.ADDR_BOUND, S.ADDR_RESOLVED), C.JOIN_MULTICAST, SAME),
    # options (ucma_set_option_id): TOS any time (effective before resolve_route); REUSEADDR set
    # anywhere but LISTEN, cleared in IDLE only (cma.c:rdma_set_reuseaddr; kernel_rules, checked
    # on 6.1 and 7.2); AFONLY in IDLE or ADDR_BOUND; ACK_TIMEOUT on RC ids only (Rules drops it
    # for UC: cma.c:rdma_set_ack_timeout)
    (BOTH, LIVE, C.SET_TOS, SAME),
    (BOTH, tuple(s for s in LIVE if s is not S.LISTEN), C.SET_REUSEADDR, SAME),
    (BOTH, (S.IDLE,), C.CLEAR_REUSEADDR, SAME),
    (BOTH, (S.IDLE, S.ADDR_BOUND), C.SET_AFONLY, SAME),
    (CONN, LIVE, C.SET_ACK_TIMEOUT, SAME),
    # INIT_QP_ATTR needs a device (ucma_get_ctx_dev): the kernel rules on ADDR_BOUND
    (BOTH, _DEVICE, C.INIT_QP_ATTR, SAME),
    (BOTH, LIVE, C.MIGRATE, SAME),
    (BOTH, LIVE, C.QUERY, SAME),
    # rdma_get_request: a sync listener's next request (no command: it reads the listener's channel)
    (BOTH, (S.LISTEN,), C.GET_REQUEST, SAME),
    (BOTH, LIVE, C.DESTROY, S.DESTROYED),
    # the device went away (cma_process_remove): only destroy is left
    (BOTH, LIVE, E.DEVICE_REMOVAL, S.DEVICE_REMOVED),
)


#: What a call whose command the kernel refused leaves the id in, where it is not the state
#: before the call: a refused ACCEPT makes the kernel reject the request itself (the peer
#: gets REJECTED 28; ucma_accept -> rdma_accept fails -> rdma_reject), so the id is FAILED.
AFTER_REFUSAL: Mapping[Union[Call, E], State] = {C.ACCEPT: S.FAILED}


def _table() -> Dict[Key, State]:
    table: Dict[Key, State] = {}
    for kinds, states, what, new in _ROWS:
        for kind in kinds:
            for st in states:
                key = (kind, st, what)
                if key in table:
                    raise AssertionError("two rows for %s %s %s" % key)
                table[key] = st if new is SAME else new
    return table


#: ``(kind, state, call or event) -> new state``: the one table of what is legal where.
TRANSITIONS: Mapping[Key, State] = _table()


def kind_of(ps: Union[PortSpace, int], qp_type: Union[QpType, int]) -> Kind:
    """An id's kind from its port space and QP type (CREATE_ID's two arguments)."""
    return K.DATAGRAM if qp_type == QpType.UD else K.CONNECTED


def next_state(kind: Kind, state: State, call: Call) -> Optional[State]:
    """Where ``call`` leads from ``state``, or None if it is illegal there."""
    return TRANSITIONS.get((kind, state, call))


def after_event(kind: Kind, state: State, event: Union[E, int]) -> State:
    """The state after ``event`` arrives in ``state`` (unchanged where the table has no row)."""
    return TRANSITIONS.get((kind, state, event), state)  # type: ignore[arg-type]


def calls_after(call: Call) -> Dict[State, State]:
    """The rows of ``call`` that hold for every kind, by state: the hot calls' lookup
    (one dict subscript, no key to build).  A state missing here may still be legal for
    one kind: ask :func:`next_state`."""
    out: Dict[State, State] = {}
    for st in State:
        new = {TRANSITIONS.get((k, st, call)) for k in Kind}
        if len(new) == 1:
            after = new.pop()
            if after is not None:
                out[st] = after
    return out


def events_after() -> Dict[int, Dict[State, Tuple[E, State]]]:
    """The event rows that hold for every kind: the event's number as the kernel writes it
    -> {state before: (the event type, state after)}, so that one lookup both names the
    event and moves the id.  What is missing (rows of one kind, no row at all) takes the
    general path, :func:`after_event`."""
    rows: Dict[int, Dict[State, Tuple[E, State]]] = {}
    for ev in E:
        for st in State:
            new = {TRANSITIONS.get((k, st, ev)) for k in Kind}
            if len(new) == 1:
                after = new.pop()
                if after is not None:
                    rows.setdefault(int(ev), {})[st] = (ev, after)
    return rows


#: Events that do more than move the id: CONNECT_REQUEST makes a new id (the listener stays
#: where it is), and DISCONNECTED may be the peer's DREQ, which the channel answers with a
#: DREP -- in every state, DISCONNECTED included: when both ends disconnect at once the two
#: DREQs cross, each IB CM waits in DREQ_RCVD for a DREP, and the event cannot say whether
#: a DREQ or a DREP caused it (cma.c: cma_ib_handler makes DISCONNECTED of both), while a
#: DISCONNECT with nothing to answer does nothing (rdma_disconnect).  :attr:`Rules.events`
#: leaves out the one whose effect is the event (:data:`NO_ROW`); DISCONNECTED has its row,
#: and the channel's reader answers it once the id has moved.
EVENTS_WITH_EFFECTS: Mapping[E, FrozenSet[State]] = {
    E.CONNECT_REQUEST: frozenset(State),
    E.DISCONNECTED: frozenset(State),
}
#: The events :attr:`Rules.events` has no row for, in these states: CONNECT_REQUEST makes a
#: new id, whose event it is (the channel makes it)
NO_ROW: Mapping[E, FrozenSet[State]] = {E.CONNECT_REQUEST: EVENTS_WITH_EFFECTS[E.CONNECT_REQUEST]}


class Rules:
    """The table as one kind of id reads it (an id holds the ``Rules`` of its port space and
    QP type, shared by every id of that pair: :func:`rules_for`).

    ``calls[call][state]`` is where ``call`` leads (a state missing: illegal there);
    ``events[number][state]`` is ``(event type, state after)`` for the event the kernel
    numbers so, every state included (an event with no row leaves the state alone), or
    None for :data:`NO_ROW`: those, and numbers unknown here (no row), are for
    :func:`after_event` and the channel.  Both are
    :data:`TRANSITIONS`, re-keyed: one lookup per call or event, no key to build."""

    __slots__ = ("ps", "qp_type", "kind", "calls", "events")

    def __init__(self, ps: PortSpace, qp_type: QpType) -> None:
        self.ps, self.qp_type = ps, qp_type
        kind = self.kind = kind_of(ps, qp_type)
        self.calls: Dict[Call, Dict[State, State]] = {
            call: {st: new for st in State if (new := TRANSITIONS.get((kind, st, call))) is not None}
            for call in Call
        }
        if qp_type == QpType.UC:  # the ACK timeout is an RC QP's: the kernel refuses it for UC (EINVAL)
            self.calls[Call.SET_ACK_TIMEOUT] = {}
        self.events: Dict[int, Dict[State, Optional[Tuple[E, State]]]] = {
            int(ev): {st: None if st in NO_ROW.get(ev, ()) else (ev, after_event(kind, st, ev))
                      for st in State}
            for ev in E
        }

    def __repr__(self) -> str:
        return "<Rules %s %s: %s>" % (self.ps.name, self.qp_type.name, self.kind.value)


_RULES: Dict[Tuple[PortSpace, QpType], Rules] = {}


def rules_for(ps: PortSpace, qp_type: QpType) -> Rules:
    """The :class:`Rules` of ids of ``ps`` and ``qp_type`` (made once per pair)."""
    try:
        return _RULES[(ps, qp_type)]
    except KeyError:
        return _RULES.setdefault((ps, qp_type), Rules(ps, qp_type))


#: ``rdma_cm_state`` (the kernel's, as RDMA netlink reports it) of each of our states.
KERNEL_STATE: Mapping[State, str] = {
    S.IDLE: "IDLE",
    S.ADDR_BOUND: "ADDR_BOUND",
    S.ADDR_QUERY: "ADDR_QUERY",
    S.ADDR_RESOLVED: "ADDR_RESOLVED",
    S.ADDRINFO_QUERY: "ADDRINFO_QUERY",
    S.ADDRINFO_RESOLVED: "ADDRINFO_RESOLVED",
    S.ROUTE_QUERY: "ROUTE_QUERY",
    S.ROUTE_RESOLVED: "ROUTE_RESOLVED",
    S.REQUEST: "CONNECT",
    S.CONNECT: "CONNECT",
    S.RESPONSE: "CONNECT",
    S.CONNECTED: "CONNECT",
    S.DISCONNECTED: "DISCONNECT",
    S.FAILED: "CONNECT",
    S.LISTEN: "LISTEN",
    S.DEVICE_REMOVED: "DEVICE_REMOVAL",
    S.DESTROYED: "DESTROYING",
}


class Outcome(NamedTuple):
    """The events that answer a call: it succeeded (``ok``) or failed (``failed``)."""

    ok: FrozenSet[E]
    failed: FrozenSet[E]

    @property
    def events(self) -> FrozenSet[E]:
        return self.ok | self.failed


def _o(ok: Iterable[E], failed: Iterable[E] = ()) -> Outcome:
    return Outcome(frozenset(ok), frozenset(failed))


_CONNECT_FAILED = (E.REJECTED, E.UNREACHABLE, E.CONNECT_ERROR, E.DEVICE_REMOVAL)

#: ``(kind, call) -> Outcome``: the events that answer a call.  Calls absent here have none
#: (bind_addr, listen, reject, establish, options, migrate, query, destroy): they are
#: complete when their write returns.  Multicast outcomes arrive on the membership.  A
#: disconnect is answered by this side's DISCONNECTED (the peer's DREP came; with status
#: -110 when it never did); if the peer disconnected first, that DISCONNECTED came before.
OUTCOMES: Mapping[Tuple[Kind, Call], Outcome] = {
    **{(k, C.RESOLVE_ADDR): _o([E.ADDR_RESOLVED], [E.ADDR_ERROR, E.DEVICE_REMOVAL]) for k in Kind},
    **{(k, C.RESOLVE_IB_SERVICE): _o([E.ADDRINFO_RESOLVED], [E.ADDRINFO_ERROR, E.DEVICE_REMOVAL]) for k in Kind},
    **{(k, C.RESOLVE_ROUTE): _o([E.ROUTE_RESOLVED], [E.ROUTE_ERROR, E.DEVICE_REMOVAL]) for k in Kind},
    **{(k, C.SET_IB_PATH): _o([E.ROUTE_RESOLVED], [E.DEVICE_REMOVAL]) for k in Kind},
    # a QP-less active id: CONNECT_RESPONSE (then establish()); with a QP the kernel says ESTABLISHED
    (K.CONNECTED, C.CONNECT): _o([E.CONNECT_RESPONSE, E.ESTABLISHED], _CONNECT_FAILED),
    (K.DATAGRAM, C.CONNECT): _o([E.ESTABLISHED], _CONNECT_FAILED + (E.ADDR_ERROR,)),  # ADDR_ERROR: qkey mismatch
    (K.CONNECTED, C.ACCEPT): _o([E.ESTABLISHED], _CONNECT_FAILED),
    (K.CONNECTED, C.NOTIFY): _o([E.ESTABLISHED], [E.DEVICE_REMOVAL]),
    (K.CONNECTED, C.DISCONNECT): _o([E.DISCONNECTED], [E.DEVICE_REMOVAL]),
    # a listener's next connection request (rdma_get_request); its device going away ends it
    **{(k, C.GET_REQUEST): _o([E.CONNECT_REQUEST], [E.DEVICE_REMOVAL]) for k in Kind},
    (K.DATAGRAM, C.JOIN_MULTICAST): _o([E.MULTICAST_JOIN], [E.MULTICAST_ERROR, E.DEVICE_REMOVAL]),
}

#: Events that say something failed (an event's ``ok`` is False for them).
FAILURE_EVENTS: FrozenSet[E] = frozenset(e for o in OUTCOMES.values() for e in o.failed)


# What to tell the user when a call is illegal: what it needs.
_NEEDS: Mapping[Call, str] = {
    C.BIND_ADDR: "a fresh id (IDLE): an id binds once",
    C.RESOLVE_ADDR: "a fresh or merely bound id (IDLE or ADDR_BOUND); an id resolves once: create a new id "
    "to resolve again",
    C.RESOLVE_IB_SERVICE: "a bound id (ADDR_BOUND): bind_addr first",
    C.RESOLVE_ROUTE: "ADDR_RESOLVED: call resolve_addr and wait for its event first",
    C.CONNECT: "ROUTE_RESOLVED: resolve_addr, then resolve_route, each with its event",
    C.ESTABLISH: "a CONNECT_RESPONSE (state RESPONSE) on a connected id: connect and wait for it",
    C.LISTEN: "a fresh or bound id (IDLE or ADDR_BOUND)",
    C.ACCEPT: "a connection request's id (the id of a CONNECT_REQUEST event, state REQUEST)",
    C.REJECT: "a connection request's id (state REQUEST), or a CONNECT_RESPONSE on the active side",
    C.NOTIFY: "a connection being accepted or established, on a connected id",
    C.DISCONNECT: "a connection (CONNECT, RESPONSE, CONNECTED or DISCONNECTED) on a connected id",
    C.JOIN_MULTICAST: "a datagram id (PortSpace.UDP or IPOIB) that is bound or resolved (ADDR_BOUND or "
    "ADDR_RESOLVED)",
    C.SET_TOS: "a live id",
    C.SET_REUSEADDR: "an id that is not listening: set it before listen",
    C.CLEAR_REUSEADDR: "a fresh id (IDLE): the kernel clears REUSEADDR only before bind_addr, resolve_addr "
    "or listen",
    C.SET_AFONLY: "a fresh or bound id (IDLE or ADDR_BOUND): set it before resolve_addr or listen",
    C.SET_ACK_TIMEOUT: "a connected (RC) id: the ACK timeout is an RC QP's",
    C.SET_IB_PATH: "ADDR_RESOLVED: set a path after resolve_addr's event, instead of resolve_route",
    C.INIT_QP_ATTR: "an id bound to an RDMA device: resolve_addr (or bind to a device's address) first",
    C.MIGRATE: "a live id",
    C.QUERY: "a live id",
    C.GET_REQUEST: "a listening id (state LISTEN): listen first",
    C.DESTROY: "a live id (each id is destroyed once)",
}


def refusal(kind: Kind, state: State, call: Call) -> str:
    """Why ``call`` is illegal in ``state`` for an id of ``kind``: what it needs, and what to do."""
    if state is S.DESTROYED:
        if call is C.DESTROY:
            return "destroy: the id is already destroyed (each id is destroyed once)"
        return "%s on a destroyed id: create a new id" % call
    if state is S.DEVICE_REMOVED:
        return "%s after DEVICE_REMOVAL: the id's RDMA device is gone; destroy the id" % call
    if state is S.FAILED and call is not C.DESTROY:
        return ("%s after the connection attempt failed (REJECTED, UNREACHABLE or CONNECT_ERROR): destroy "
                "the id and create a new one" % call)
    for other in Kind:
        if other is not kind and (other, state, call) in TRANSITIONS:
            return "%s is not for a %s id (%s ids take it in state %s)" % (call, kind.value, other.value, state)
    return "%s is not allowed in state %s: it needs %s" % (call, state, _NEEDS[call])
