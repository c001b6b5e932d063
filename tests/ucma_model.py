"""A model of the kernel's ucma command set, and a hypothesis state machine that fuzzes
the real kernel with it (issue #14).

Theory of operation
-------------------
The model keeps, for every id this process created, the set of *worlds* the kernel may
be in for it: a :class:`World` is the id's ``rdma_cm_state`` (as :class:`pyrdmacm.state.State`),
whether it is attached to an RDMA device (netlink lists it then), the IB CM's side of it,
how it is bound (family, wildcard or local, port), its options, the asynchronous work in
flight (an address or route query, a connection request, a multicast join: each a set of
possible outcomes, any of which may happen at any time, or never), and the events the
kernel generated for it that nobody has read yet.  A command is answered, per world, by
:func:`outcomes`: the errnos the kernel may answer there and the world after each,
written after the handlers of ucma.c and cma.c (each check names the function that makes
it, in the kernel's order: e.g. RESOLVE_ADDR's size checks come before the id look-up, so
a malformed one on an unknown id is EINVAL, not ENOENT).  The errno the kernel answered
keeps the worlds that allow it; none left is a *disagreement*.  An event read with
GET_EVENT must be the head of some world's queue (or the outcome of work in flight); an
EAGAIN says no world of that fd's ids has an event queued.

:class:`UcmaMachine` (a hypothesis ``RuleBasedStateMachine``) draws the commands, valid
and malformed, with field values from the ABI declarations' edges (0, the field's
maximum, sizes of the struct ±1), on up to two channels (fds), and after every step checks:
the errno is one the model allows; every id's netlink state (``RDMA_NLDEV_CMD_RES_CM_ID_GET``,
this pid) is one of its worlds' kernel states (:func:`kernel_state`); the fd still creates
and destroys an id; the kernel log has no new BUG/WARNING/refcount/KASAN/Oops line.  At
the end every channel is closed and no cm_id of this process may be left.

The state rules -- which command the kernel takes in which ``rdma_cm_state``, the errno
otherwise -- are not written here: :func:`refused` asks :mod:`pyrdmacm.kernel_rules`, the
table the fakes and the conformance cases share, with a world's kernel state
(:func:`kernel_state`: the library's :class:`~pyrdmacm.state.State` of the world, which tells
the steps of a connection apart, as the kernel's :class:`~pyrdmacm.abi.RdmaCmState`).  What is
left here is what the table leaves to others: the IB CM's answers, the addresses, the ports.

Where the kernels differ, the difference is data with the kernel version
(:data:`DIFFERENCES`, and the table's rules' versions).  A failure carries a runnable reproducer: a Python script of
:class:`pyrdmacm.conformance.Raw` calls, built from the steps as they ran
(:attr:`UcmaMachine.script`).
"""

from __future__ import annotations

import collections
import dataclasses
import errno
import os
import select
import struct
import time
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Sequence, Set, Tuple

from pyrdmacm import abi, kernel_rules
from pyrdmacm._codec import CODECS
from pyrdmacm.addr import Address, parse_address
from pyrdmacm.state import KERNEL_STATE, State

S = State
C = abi.UserCmCmd
PS = abi.PortSpace
QP = abi.QpType
K = abi.RdmaCmState

E_OK = 0
EINVAL, ENOENT, ENOSPC, EFAULT, ENOSYS = errno.EINVAL, errno.ENOENT, errno.ENOSPC, errno.EFAULT, errno.ENOSYS
EAGAIN, EADDRINUSE, EADDRNOTAVAIL, EISCONN = errno.EAGAIN, errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EISCONN

AF_INET, AF_INET6, AF_UNIX = 2, 10, 1

# -- what the lab offers (tools/lab's "single" topology) -----------------------------------

LOCAL = "10.0.2.15"
LOCAL6 = "fec0::15"
GATEWAY = "10.0.2.2"
#: a port nothing listens on: CONNECT there is refused (REJ 8 / SIDR status 1)
CLOSED_PORT = 7999
#: the one fixed port binds use (ports 0 pick an ephemeral one, 32768 and up: never these)
FIXED_PORT = 7471
NOT_LOCAL = "192.0.2.123"

#: kernel differences, as data: name -> ((since version, value), ...), the value from that
#: version on (conformance.expected_errno's shape)
DIFFERENCES: Dict[str, Tuple[Tuple[Tuple[int, int], Any], ...]] = {
    # RESOLVE_IB_SERVICE (cmd 23) exists from 6.17: before, ucma_write's table bound says EINVAL
    "cmd23_exists": (((0, 0), False), ((6, 17), True)),
    # QUERY option 3 (IB_SERVICE) from 6.17; ucma_query's default: ENOSYS before
    "query_ib_service": (((0, 0), False), ((6, 17), True)),
}


def since(name: str, version: Tuple[int, int]) -> Any:
    value = None
    for v, x in DIFFERENCES[name]:
        if version >= v:
            value = x
    return value


# -- worlds ---------------------------------------------------------------------------------

#: an event as the model expects it: (event name, allowed statuses or None for any, mc uid or 0)
Ev = Tuple[str, Optional[FrozenSet[int]], int]
#: one possible end of work in flight: (event or None when no event is queued, the world's
#: changes as a tuple of (field, value))
Outcome = Tuple[Optional[Ev], Tuple[Tuple[str, Any], ...]]


@dataclasses.dataclass(frozen=True)
class World:
    state: State = S.IDLE
    dev: bool = False  #: attached to an RDMA device (RDMA netlink lists it)
    cm: str = ""  #: "" no IB CM id; "req" REQ sent; "sidr" SIDR REQ sent; "done" answered / cancelled
    fam: int = 0  #: bound family (0: unbound)
    addr: str = ""  #: "any" or "local" (what it is bound to)
    port: int = 0  #: FIXED_PORT or 0 (ephemeral)
    reuse: bool = False
    afonly: Optional[bool] = None  #: set by the option (None: the family's default)
    wild_listen: bool = False  #: listening on a wildcard: one internal listener per device
    loop: bool = False  #: resolved to the any address (cma_resolve_loopback): no netdev bound
    pend: Tuple[Tuple[Outcome, ...], ...] = ()  #: work in flight: each its possible outcomes
    q: Tuple[Ev, ...] = ()  #: events generated, not read yet

    def but(self, **kw: Any) -> "World":
        return dataclasses.replace(self, **kw)


def closure(w: World, queued: bool) -> Set[World]:
    """``w`` and every world reachable from it by work in flight completing (any order)."""
    seen = {w}
    todo = [w]
    while todo:
        x = todo.pop()
        for i, op in enumerate(x.pend):
            rest = x.pend[:i] + x.pend[i + 1:]
            for ev, changes in op:
                y = x.but(pend=rest, **dict(changes))
                if ev is not None and queued:
                    y = y.but(q=y.q + (ev,))
                if y not in seen:
                    seen.add(y)
                    todo.append(y)
    return seen


@dataclasses.dataclass
class IdModel:
    name: str  #: the reproducer's variable
    handle: int
    ch: int
    uid: int
    ps: int
    qp: int
    worlds: Set[World]
    events_read: int = 0
    mcs: Dict[int, Tuple[str, int]] = dataclasses.field(default_factory=dict)  #: mc handle -> (var, uid)
    mc_read: Dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def ud(self) -> bool:
        return self.qp == QP.UD

    def possible(self) -> Set[World]:
        out: Set[World] = set()
        for w in self.worlds:
            out |= closure(w, self.uid != 0)
        return out


class Disagreement(AssertionError):
    pass


# -- the kernel's rules, per command and world -------------------------------------------

Result = List[Tuple[int, World]]

#: the kernel's ``rdma_cm_state`` of each of the library's states
_KERNEL: Dict[State, "abi.RdmaCmState"] = {st: K[name] for st, name in KERNEL_STATE.items()}


def kernel_state(w: World) -> "abi.RdmaCmState":
    """The kernel's state of world ``w`` (what RDMA netlink shows, what the table rules on)."""
    return _KERNEL[w.state]


def refused(me: "IdModel", w: World, command: "abi.UserCmCmd", form: str = "") -> int:
    """The errno :mod:`pyrdmacm.kernel_rules` says the kernel answers ``command`` (``form``)
    from world ``w`` of id ``me``, on the kernel the machine runs on (0: the rdma_cm takes it)."""
    return kernel_rules.refusal(command, kernel_state(w), form, device=w.dev, qp_type=me.qp,
                                version=UcmaMachine.version if UcmaMachine.version != (0, 0) else kernel_rules.NEWEST)


def _afonly(w: World) -> bool:
    if w.afonly is not None:
        return w.afonly
    return w.fam == AF_INET  # cma_bind_addr: AF_INET ids are afonly, AF_INET6 per bindv6only (0)


def port_conflicts(me: IdModel, w: World, fam: int, addr: str, others: Iterable[IdModel],
                   for_listen: bool = False) -> Set[int]:
    """cma_check_port over the ids holding FIXED_PORT in the same port space: the errnos it
    may answer (0: no conflict)."""
    possible: Set[int] = set()
    must_fail: Set[int] = set()
    for o in others:
        if o is me or o.ps != me.ps:
            continue
        res = set()
        for ow in o.possible():
            if ow.port != FIXED_PORT or not ow.fam:
                res.add(0)
                continue
            if not for_listen and w.reuse and ow.reuse:
                res.add(0)
                continue
            if _afonly(w.but(fam=fam)) and _afonly(ow) and fam != ow.fam:
                res.add(0)
                continue
            # a wildcard on either side overlaps: EADDRNOTAVAIL; the same address: EADDRINUSE;
            # an any-bound id that resolved may hold its source address by now
            if addr == "any" or ow.addr == "any":
                res.add(EADDRNOTAVAIL)
                if ow.addr == "any" and ow.state not in (S.IDLE, S.ADDR_BOUND, S.LISTEN) and addr == "local":
                    res.add(EADDRINUSE)
            elif fam == ow.fam:
                res.add(EADDRINUSE)
            else:
                res.add(0)
        if 0 not in res:
            must_fail |= res
        possible |= res
    if must_fail:
        return must_fail | (possible - {0})
    return possible or {0}


def _bind_local(me: IdModel, w: World, a: "AddrChoice", others: Iterable[IdModel]) -> Result:
    """rdma_bind_addr_dst from IDLE: (errno, world) pairs."""
    if a.kind == "notlocal":
        return [(EADDRNOTAVAIL, w)]  # cma_translate_addr: rdma_translate_ip finds no netdev
    if a.kind == "local" and me.ps == PS.IPOIB:
        return [(EINVAL, w)]  # cma_acquire_dev_by_src_ip: PS_IPOIB needs an IB netdev
    fam = a.family
    port = FIXED_PORT if a.port == FIXED_PORT else 0
    out: Result = []
    errs = port_conflicts(me, w, fam, a.kind, others) if port else {0}
    for e in errs:
        if e:
            out.append((e, w))  # back to IDLE (rdma_bind_addr_dst's error path)
        else:
            out.append((0, w.but(state=S.ADDR_BOUND, fam=fam, addr=a.kind, port=port,
                                 dev=(a.kind == "local"))))
    return out


@dataclasses.dataclass(frozen=True)
class AddrChoice:
    """An address the rules draw: what it is, and how the kernel sees it."""

    kind: str  #: "any", "local", "notlocal", "gateway", "far", "loopback", "mcast"
    text: str
    port: int = 0
    family: int = AF_INET

    @property
    def address(self) -> Address:
        return parse_address(self.text, self.port)


def resolve_outcomes(me: IdModel, w: World, dst: AddrChoice, src: Optional[AddrChoice],
                     others: Iterable[IdModel]) -> Result:
    """rdma_resolve_addr (cma.c resolve_prepare_src, then the query) after ucma's checks."""
    err = refused(me, w, C.RESOLVE_ADDR)
    if err:
        return [(err, w)]  # cma_comp_exch(ADDR_BOUND -> ADDR_QUERY) fails; IDLE->ADDR_BOUND too
    out: Result = []
    starts: List[World] = []
    if w.state is S.IDLE:
        # cma_bind_addr: the source given, or a wildcard of dst's family
        if src is not None:
            for e, w2 in _bind_local(me, w, src, others):
                if e:
                    out.append((e, w2))
                else:
                    starts.append(w2)
        else:
            starts.append(w.but(state=S.ADDR_BOUND, fam=dst.family, addr="any", port=0))
    else:
        starts.append(w)  # ADDR_BOUND: the source is ignored
    for b in starts:
        if b.fam != dst.family:
            out.append((EINVAL, b))  # cma_family(id) != dst family: the id stays bound
            continue
        if me.ps == PS.IPOIB and dst.kind != "any":
            # found by the fuzzer (5.10): only addr_handler's cma_acquire_dev_by_src_ip refuses
            # PS_IPOIB on a RoCE netdev; cma_resolve_loopback (dst 0.0.0.0) binds the first
            # device whatever the port space, and the id resolves
            ev: Ev = ("ADDR_ERROR", frozenset({-EINVAL & 0xFFFFFFFF}), 0)  # no IB netdev: -EINVAL
            op: Tuple[Outcome, ...] = ((ev, (("state", S.ADDR_BOUND),)),)
        else:
            op = ((("ADDR_RESOLVED", frozenset({0}), 0),
                   (("state", S.ADDR_RESOLVED), ("dev", True), ("loop", dst.kind == "any"))),)
        out.append((0, b.but(state=S.ADDR_QUERY, pend=b.pend + (op,))))
    return out


def route_outcomes(me: IdModel, w: World, timeout: int) -> Result:
    err = refused(me, w, C.RESOLVE_ROUTE)  # a device (ucma_get_ctx_dev), ADDR_RESOLVED
    if err:
        return [(err, w)]
    if timeout == 0:
        return [(EINVAL, w)]  # rdma_resolve_route: timeout_ms 0
    if w.loop:
        # found by the fuzzer (6.1): an id resolved to the any address has no bound_dev_if, and
        # RoCE's cma_resolve_iboe_route finds no netdev: ENODEV, back to ADDR_RESOLVED
        return [(errno.ENODEV, w)]
    op = ((("ROUTE_RESOLVED", frozenset({0}), 0), (("state", S.ROUTE_RESOLVED),)),)
    return [(0, w.but(state=S.ROUTE_QUERY, pend=w.pend + (op,)))]


def listen_outcomes(me: IdModel, w: World, others: Iterable[IdModel]) -> Result:
    err = refused(me, w, C.LISTEN)
    if err:
        return [(err, w)]
    if w.state is S.IDLE:
        starts = [(0, w.but(state=S.ADDR_BOUND, fam=AF_INET, addr="any", port=0))]  # rdma_listen binds
    else:
        starts = [(0, w)]
    out: Result = []
    for _, b in starts:
        if b.reuse and b.port == FIXED_PORT:
            errs = port_conflicts(me, b, b.fam, b.addr, others, for_listen=True)
        else:
            errs = {0}
        for e in errs:
            if e:
                out.append((e, b))  # rdma_listen's error path: back to ADDR_BOUND
            else:
                out.append((0, b.but(state=S.LISTEN, reuse=False, wild_listen=not b.dev)))
    return out


def connect_outcomes(me: IdModel, w: World, pd_len: int) -> Result:
    err = refused(me, w, C.CONNECT)  # rdma_connect_locked: cma_comp_exch(ROUTE_RESOLVED -> CONNECT)
    if err:
        return [(err, w)]
    limit = 180 if me.ud else 56  # SIDR REQ 216 / REQ 92, less the 36-byte cma header
    if pd_len > limit:
        return [(EINVAL, w)]  # cm_validate_req_param / ib_send_cm_sidr_req; the state goes back
    if not me.ud and me.qp not in (QP.RC, QP.UC):
        return [(EINVAL, w)]
    if me.ud:
        ev: Ev = ("UNREACHABLE", frozenset({1}), 0)  # SIDR REP status 1: nobody listens
        op: Tuple[Outcome, ...] = ((ev, (("state", S.FAILED), ("cm", "done"))),)
        return [(0, w.but(state=S.CONNECT, cm="sidr", pend=w.pend + (op,)))]
    ev = ("REJECTED", frozenset({8}), 0)  # REJ 8, invalid service id: nobody listens there
    op = ((ev, (("state", S.FAILED), ("cm", "done"))),)
    return [(0, w.but(state=S.CONNECT, cm="req", pend=w.pend + (op,)))]


def _cancel_req(w: World) -> World:
    """The REQ is answered with our own REJ (cm_send_rej_locked): the peer's REJ may still
    come, or not; the id stays in CONNECT."""
    op = tuple((ev, (("state", S.FAILED),)) for o in w.pend for ev, _ in o if ev and ev[0] == "REJECTED")
    pend = tuple(o for o in w.pend if not any(ev and ev[0] == "REJECTED" for ev, _ in o))
    return w.but(cm="done", state=S.FAILED, pend=pend + ((op + ((None, ()),),) if op else ()))


def accept_outcomes(me: IdModel, w: World) -> Result:
    err = refused(me, w, C.ACCEPT)  # a device; rdma_accept: state CONNECT
    if err:
        return [(err, w)]
    # no id of ours is a passive side: cma_accept_ib / cma_rep_recv / cma_send_sidr_rep fail
    # in REQ_SENT (EINVAL), and rdma_accept's error path rejects: the REQ is cancelled
    if w.cm == "req":
        return [(EINVAL, _cancel_req(w))]
    return [(EINVAL, w)]


def reject_outcomes(me: IdModel, w: World) -> Result:
    err = refused(me, w, C.REJECT)  # ucma_get_ctx_dev; rdma_reject: an IB CM id in a connection
    if err:
        return [(err, w)]
    if me.ud or w.cm != "req":
        return [(EINVAL, w)]  # cma_send_sidr_rep outside SIDR_REQ_RCVD; REJ after the answer
    return [(0, _cancel_req(w))]  # ib_send_cm_rej is legal in REQ_SENT


def disconnect_outcomes(me: IdModel, w: World) -> Result:
    # rdma_disconnect: any IB CM id -- a connection's, or a device-bound listener's -- and then
    # DREQ and DREP attempted, their failures ignored
    return [(refused(me, w, C.DISCONNECT), w)]


def notify_outcomes(me: IdModel, w: World, event: int) -> Result:
    err = refused(me, w, C.NOTIFY)  # rdma_notify: an IB CM id in a connection
    # ib_cm_notify: COMM_EST and PATH_MIG need an accepted or established connection: none of ours
    return [(err or EINVAL, w)]


def init_qp_outcomes(me: IdModel, w: World, qp_state: int) -> Result:
    err = refused(me, w, C.INIT_QP_ATTR)  # ucma_get_ctx_dev
    if err:
        return [(err, w)]
    if me.ud and me.ps == PS.IPOIB:
        # found by the fuzzer (7.2, a model bug): cma_ib_init_qp_attr sets a UD id's qkey, which
        # for PS_IPOIB is the IPoIB broadcast group's (cma_set_qkey -> ib_sa_get_mcmember_rec);
        # on RoCE the SA's multicast client holds no data for the device: ENODEV
        return [(errno.ENODEV, w)]
    if w.cm and not me.ud:
        # ib_cm_init_qp_attr rules by the IB CM's state: INIT while the REQ is out, else EINVAL
        if w.cm == "req" and qp_state == 1:
            return [(0, w)]
        return [(EINVAL, w)]
    if w.state is S.LISTEN and not me.ud:
        # a connected listener on a device holds an IB CM listen id: ib_cm_init_qp_attr refuses
        # every state there (seen on 5.10 and 6.1; a datagram listener answers as a bound id)
        return [(EINVAL, w)]
    return [(0, w)]  # cma_ib_init_qp_attr ignores qp_state


def option_outcomes(me: IdModel, w: World, level: int, name: int, optlen: int, value: int) -> Result:
    """ucma_set_option_level after the look-up and memdup."""
    if level == abi.OptionLevel.ID:
        size = {abi.OptionId.TOS: 1, abi.OptionId.REUSEADDR: 4, abi.OptionId.AFONLY: 4,
                abi.OptionId.ACK_TIMEOUT: 1}.get(name)
        if size is None:
            return [(ENOSYS, w)]
        if optlen != size:
            return [(EINVAL, w)]
        # the state (and QP type) rules: rdma_set_reuseaddr, rdma_set_afonly, rdma_set_ack_timeout
        err = refused(me, w, C.SET_OPTION, kernel_rules.option_form(level, name, value))
        if err:
            return [(err, w)]
        if name == abi.OptionId.REUSEADDR:
            return [(0, w.but(reuse=bool(value)))]
        if name == abi.OptionId.AFONLY:
            return [(0, w.but(afonly=bool(value)))]
        return [(0, w)]
    if level == abi.OptionLevel.IB:
        if name == abi.OptionIb.PATH:
            return [(EINVAL, w)]  # ucma_set_ib_path: no record with GMP|PRIMARY|BIDIRECTIONAL (all zero)
        return [(ENOSYS, w)]
    return [(ENOSYS, w)]


def join_outcomes(me: IdModel, w: World, mc_uid: int) -> Result:
    err = refused(me, w, C.JOIN_MCAST)  # rdma_join_multicast: a device, bound or resolved, UD ids only
    if err:
        return [(err, w)]
    if w.loop:
        # found by the fuzzer (5.10): resolved to the any address, the id has no bound_dev_if,
        # and cma_iboe_join_multicast finds no netdev: ENODEV
        return [(errno.ENODEV, w)]
    op = (((("MULTICAST_JOIN", frozenset({0}), mc_uid)), ()),)
    return [(0, w.but(pend=w.pend + (op,)))]


# -- the executor's view of the kernel -------------------------------------------------------

def netlink_states(pid: int) -> List[str]:
    """The rdma_cm_state names of this pid's cm_ids, as RDMA netlink lists them."""
    from pyrdmacm import netlink

    out = []
    for i in netlink.cm_ids():
        if i.pid == pid:
            st = i.state
            out.append(st.name if hasattr(st, "name") else str(st))
    return sorted(out)


def rdma_device_count() -> int:
    try:
        return len(os.listdir("/sys/class/infiniband"))
    except OSError:
        return 0


def match_states(options: Sequence[Sequence[Tuple[str, ...]]], seen: Sequence[str]) -> bool:
    """Can each id pick one of its options (the states it adds to netlink's list) so that
    together they make ``seen`` exactly?"""
    need = collections.Counter(seen)

    def go(i: int, left: collections.Counter) -> bool:
        if i == len(options):
            return not +left
        for opt in options[i]:
            c = collections.Counter(opt)
            if all(left[k] >= v for k, v in c.items()):
                if go(i + 1, left - c):
                    return True
        return False

    return go(0, need)


# -- the state machine ------------------------------------------------------------------------

from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule  # noqa: E402

ADDRS = {
    "local": AddrChoice("local", LOCAL),
    "local:fixed": AddrChoice("local", LOCAL, FIXED_PORT),
    "any": AddrChoice("any", "0.0.0.0"),
    "any:fixed": AddrChoice("any", "0.0.0.0", FIXED_PORT),
    "any6": AddrChoice("any", "::", 0, AF_INET6),
    "any6:fixed": AddrChoice("any", "::", FIXED_PORT, AF_INET6),
    "notlocal": AddrChoice("notlocal", NOT_LOCAL),
}
DSTS = {
    "local": AddrChoice("local", LOCAL, CLOSED_PORT),
    "gateway": AddrChoice("gateway", GATEWAY, CLOSED_PORT),
    "far": AddrChoice("far", "192.0.2.1", CLOSED_PORT),  # routed through the gateway
    "any": AddrChoice("any", "0.0.0.0", CLOSED_PORT),  # cma_resolve_loopback
    "local6": AddrChoice("local", LOCAL6, CLOSED_PORT, AF_INET6),
}
#: malformed address fields: (name, overrides of the struct's fields)
BAD_ADDR = ["reserved=1", "size=0", "size+1", "size=28 for AF_INET", "AF_UNIX", "family 0"]

MAX_IDS = 6
U32 = 0xFFFFFFFF


def _storage(family: int, size: int = 128) -> bytes:
    return struct.pack("<H", family).ljust(size, b"\0")


class UcmaMachine(RuleBasedStateMachine):
    """Random ucma command sequences against the kernel, checked against the model."""

    #: set by the runner: the kernel's (major, minor)
    version: Tuple[int, int] = (0, 0)
    #: figures of the campaign (class-level: summed over every sequence run)
    stats: Dict[str, Any] = {"sequences": 0, "commands": 0, "errnos": collections.Counter()}
    #: shrinking stops this many seconds after the first failure (each step costs a syscall
    #: round, netlink and the kernel log: hypothesis' own five minutes is too long)
    shrink_budget = 60.0
    first_failure: Optional[float] = None
    #: the shortest failing sequence's report: (script lines, report)
    smallest: Optional[Tuple[int, str]] = None

    def __init__(self) -> None:
        from hypothesis import assume

        cls = UcmaMachine
        # past the shrink budget every further candidate is filtered out: the shrinker gives up
        assume(cls.first_failure is None or time.monotonic() - cls.first_failure < cls.shrink_budget)
        super().__init__()
        from pyrdmacm._device import ReplyBuffer
        from pyrdmacm.conformance import Raw

        self._Raw = Raw
        self.chans: List[Optional[Any]] = [Raw(), None]
        self.ids: List[IdModel] = []
        self.stale: Set[int] = set()
        self.counter = 0
        from pyrdmacm.conformance import KernelLog

        self.log = KernelLog()  # the suite's own check of /dev/kmsg: BUG, WARNING, refcount_t ...
        self.optval = ReplyBuffer(4096)
        self.pid = os.getpid()
        self._forced: Optional[Tuple[int, int, IdModel]] = None
        self.devices = rdma_device_count()
        self.baseline = netlink_states(self.pid)
        self.script: List[str] = ["from pyrdmacm.conformance import Raw",
                                  "from pyrdmacm._device import ReplyBuffer",
                                  "ch = [Raw(), None]", "optval = ReplyBuffer(4096)"]
        UcmaMachine.stats["sequences"] += 1

    # -- helpers ------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        report = "%s\n\nreproducer (kernel %d.%d):\n%s" % (what, self.version[0], self.version[1], "\n".join(self.script))
        cls = UcmaMachine
        if cls.first_failure is None:
            cls.first_failure = time.monotonic()
        if cls.smallest is None or len(self.script) < cls.smallest[0]:
            cls.smallest = (len(self.script), report, list(self.script))
        raise Disagreement("%s\n\nreproducer (kernel %d.%d):\n%s" % (what, self.version[0], self.version[1],
                                                                      "\n".join(self.script)))

    def _uid(self) -> int:
        self.counter += 1
        return 0x1000 + self.counter

    def _var(self, prefix: str) -> str:
        self.counter += 1
        return "%s%d" % (prefix, self.counter)

    def _raw(self, ch: int, cmd: int, struct_name: Optional[str], fields: Dict[str, Any], out: int = 0,
             size_in: Optional[int] = None, body: Optional[bytes] = None, code: str = "") -> int:
        raw = self.chans[ch]
        assert raw is not None
        err = raw.cmd(cmd, struct_name, fields, out=out, size_in=size_in, body=body)
        UcmaMachine.stats["commands"] += 1
        name = C(cmd).name if cmd in C._value2member_map_ else "cmd%d" % cmd
        UcmaMachine.stats["errnos"][(name, errno.errorcode.get(err, "ok") if err else "ok")] += 1
        shown = code or "ch[%d].cmd(%d, %r, %s, out=%d%s)" % (
            ch, cmd, struct_name, self._fields_src(ch, fields), out, "" if size_in is None else ", size_in=%d" % size_in)
        self.script.append("err = %s  # %s -> %s" % (shown, name, errno.errorcode.get(err, "ok") if err else "ok"))
        return err

    def _judge(self, what: str, m: Optional[IdModel], err: int, per_world: Callable[[World], Result],
               pre: Optional[int] = None) -> None:
        """Apply a command's answer: ``pre`` is an errno the kernel answers before looking at
        the id (its own checks), ``per_world`` the rest."""
        if pre is not None:
            if err != pre:
                self._fail("%s: the kernel answered %s, the model expects %s (checked before the id)"
                           % (what, _en(err), _en(pre)))
            return
        assert m is not None
        results: Dict[int, Set[World]] = collections.defaultdict(set)
        for w in m.possible():
            for e, w2 in per_world(w):
                results[e].add(w2)
        if err not in results:
            self._fail("%s on %s (%s) in %s: the kernel answered %s, the model allows %s"
                       % (what, m.name, _kind(m), _states(m), _en(err), sorted(_en(e) for e in results)))
        m.worlds = results[err]

    def _lookup(self, ch: int, handle: int) -> Optional[int]:
        """ucma_get_ctx's answer before the handler: None (found on ch), ENOENT or EINVAL."""
        for m in self.ids:
            if m.handle == handle:
                return None if m.ch == ch else EINVAL
        return ENOENT

    def _open(self) -> List[int]:
        return [i for i, c in enumerate(self.chans) if c is not None]

    def _target(self, data: st.DataObject) -> Tuple[int, int, Optional[IdModel]]:
        """(channel, handle, id model or None): mostly a live id of that channel; sometimes
        another channel's, a destroyed one's, or one nobody has."""
        if self._forced is not None:
            forced, self._forced = self._forced, None
            return forced
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        mine = [m for m in self.ids if m.ch == ch]
        pick = data.draw(st.integers(0, 11), label="which id")
        kind = "mine" if pick < 9 else ("foreign", "stale", "unknown")[pick - 9]
        if kind == "mine" and mine:
            m = data.draw(st.sampled_from(mine), label="id")
            return ch, m.handle, m
        if kind == "foreign":
            theirs = [m for m in self.ids if m.ch != ch]
            if theirs:
                m = data.draw(st.sampled_from(theirs), label="foreign id")
                return ch, m.handle, None
        if kind == "stale" and self.stale:
            h = data.draw(st.sampled_from(sorted(self.stale)), label="stale handle")
            if self._lookup(ch, h) == ENOENT:
                return ch, h, None
        return ch, data.draw(st.sampled_from([U32, 0x7FFFFFFF, 0xFFFFFF]), label="unknown handle"), None

    def _fields_src(self, ch: int, fields: Dict[str, Any]) -> str:
        raw = self.chans[ch]
        shown = []
        for k, v in fields.items():
            if k == "id" and isinstance(v, int):
                text = self._hv(v)
            elif k in ("response", "optval") and raw is not None and v == raw.reply.address:
                text = "ch[%d].reply.address" % ch
            elif k == "optval" and v == self.optval.address:
                text = "optval.address"
            else:
                text = repr(v)
            shown.append("%r: %s" % (k, text))
        return "{%s}" % ", ".join(shown)

    def _hv(self, handle: int) -> str:
        for m in self.ids:
            if m.handle == handle:
                return m.name
        return str(handle)

    # -- rules: channels --------------------------------------------------------------------

    @precondition(lambda self: None in self.chans)
    @rule()
    def open_channel(self) -> None:
        i = self.chans.index(None)
        self.chans[i] = self._Raw()
        self.script.append("ch[%d] = Raw()" % i)

    @precondition(lambda self: len([c for c in self.chans if c is not None]) > 1)
    @rule(data=st.data())
    def close_channel(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[i]
        raw.close()
        self.chans[i] = None
        self.script.append("ch[%d].close(); ch[%d] = None" % (i, i))
        for m in [m for m in self.ids if m.ch == i]:
            self.ids.remove(m)
            self.stale.add(m.handle)

    # -- rules: ids ---------------------------------------------------------------------------

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(data=st.data(), ps=st.sampled_from([PS.TCP, PS.UDP, PS.TCP, PS.UDP, PS.IPOIB, PS.IB]),
          qp=st.sampled_from([QP.RC, QP.UD, QP.UC]))
    def create_id(self, data: st.DataObject, ps: int, qp: int) -> None:
        self.create(data, ps, qp, 4, False, False)

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(data=st.data(), ps=st.sampled_from([PS.TCP, 0, 0xFFFF, 0x0107, PS.UDP]),
          qp=st.sampled_from([QP.RC, QP.UD]), out=st.sampled_from([3, 0, 4, 0xFFFF]),
          uid0=st.booleans(), null=st.booleans())
    def create_odd(self, data: st.DataObject, ps: int, qp: int, out: int, uid0: bool, null: bool) -> None:
        self.create(data, ps, qp, out, uid0, null)

    def create(self, data: st.DataObject, ps: int, qp: int, out: int, uid0: bool, null: bool) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        uid = 0 if uid0 else self._uid()
        raw.reply.clear()
        err = self._raw(ch, C.CREATE_ID, "rdma_ucm_create_id",
                        {"uid": uid, "response": 0 if null else raw.reply.address, "ps": ps, "qp_type": qp},
                        out=out, code="ch[%d].cmd(0, 'rdma_ucm_create_id', {'uid': %d, 'response': %s, 'ps': %d, "
                        "'qp_type': %d}, out=%d)" % (ch, uid, "0" if null else "ch[%d].reply.address" % ch, ps, qp,
                                                     out))
        if out < 4:
            want = ENOSPC  # ucma_create_id: out_len < sizeof(resp)
        elif ps not in (PS.TCP, PS.UDP, PS.IPOIB, PS.IB):
            want = EINVAL  # ucma_get_qp_type
        elif null:
            want = EFAULT  # the reply cannot be written: the id is destroyed again
        else:
            want = 0
        if err != want:
            self._fail("CREATE_ID ps=%#x qp_type=%d out=%d response=%s: the kernel answered %s, the model "
                       "expects %s" % (ps, qp, out, "NULL" if null else "ok", _en(err), _en(want)))
        if err:
            return
        handle = int(struct.unpack_from("<I", raw.reply.view)[0])
        qp_type = {PS.TCP: QP.RC, PS.UDP: QP.UD, PS.IPOIB: QP.UD}.get(ps, qp)
        name = self._var("h")
        self.script.append("%s = int.from_bytes(ch[%d].reply.bytes(4), 'little')" % (name, ch))
        self.stale.discard(handle)
        self.ids.append(IdModel(name, handle, ch, uid, ps, qp_type, {World()}))

    @rule(data=st.data(), out=st.sampled_from([4, 4, 4, 3]))
    def destroy(self, data: st.DataObject, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        raw.reply.fill(b"\xff\xff\xff\xff")
        err = self._raw(ch, C.DESTROY_ID, "rdma_ucm_destroy_id", {"response": raw.reply.address, "id": h}, out=4 if out == 4 else out,
                        code="ch[%d].cmd(1, 'rdma_ucm_destroy_id', {'response': ch[%d].reply.address, 'id': %s}, "
                        "out=%d)" % (ch, ch, self._hv(h), out))
        want = ENOSPC if out < 4 else (0 if m else self._lookup(ch, h))
        if err != want:
            self._fail("DESTROY_ID of %s (out=%d): the kernel answered %s, the model expects %s"
                       % (m.name if m else hex(h), out, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.events_read:
                self._fail("DESTROY_ID of %s: events_reported %d, but %d of its events were read"
                           % (m.name, reported, m.events_read))
            self.ids.remove(m)
            self.stale.add(h)

    @rule(data=st.data(), addr=st.sampled_from(sorted(ADDRS)), bad=st.sampled_from([None] * 8 + BAD_ADDR),
          legacy=st.sampled_from([False, False, False, True]))
    def bind(self, data: st.DataObject, addr: str, bad: Optional[str], legacy: bool) -> None:
        ch, h, m = self._target(data)
        a = ADDRS[addr]
        sa = a.address
        if legacy:  # BIND_IP: the address in a sockaddr_in6 slot
            slot = sa.pack_in6()
            if bad in ("AF_UNIX", "family 0"):
                slot = _storage(AF_UNIX if bad == "AF_UNIX" else 0, 28)
            fields = {"response": 0, "addr": slot, "id": h}
            err = self._raw(ch, C.BIND_IP, "rdma_ucm_bind_ip", fields)
            pre = EINVAL if bad in ("AF_UNIX", "family 0") else None  # ucma_bind_ip: !rdma_addr_size_in6
        else:
            fields = {"id": h, "addr_size": sa.size, "reserved": 0, "addr": sa.pack_storage()}
            if bad == "reserved=1":
                fields["reserved"] = 1
            elif bad == "size=0":
                fields["addr_size"] = 0
            elif bad == "size+1":
                fields["addr_size"] = sa.size + 1
            elif bad == "size=28 for AF_INET":
                fields["addr_size"] = 28 if sa.size == 16 else 16
            elif bad in ("AF_UNIX", "family 0"):
                fields["addr"] = _storage(AF_UNIX if bad == "AF_UNIX" else 0)
            err = self._raw(ch, C.BIND, "rdma_ucm_bind", fields)
            pre = EINVAL if bad else None  # ucma_bind: reserved, addr_size 0 or not the family's
        if pre is None:
            pre = self._lookup(ch, h) if m is None else None
        others = list(self.ids)

        def per_world(w: World) -> Result:
            err = refused(m, w, C.BIND)  # rdma_bind_addr_dst: cma_comp_exch(IDLE -> ADDR_BOUND)
            if err:
                return [(err, w)]
            return _bind_local(m, w, a, others)

        self._judge("BIND %s%s" % (addr, " (BIND_IP)" if legacy else ""), m, err, per_world, pre)

    @rule(data=st.data(), dst=st.sampled_from(sorted(DSTS)),
          src=st.sampled_from([None] * 4 + ["local", "notlocal", "any"]),
          bad=st.sampled_from([None] * 8 + ["reserved=1", "dst_size=0", "dst_size+1", "AF_UNIX", "src_size=1"]),
          timeout=st.sampled_from([2000, 2000, 0, U32]), legacy=st.sampled_from([False, False, False, True]))
    def resolve_addr(self, data: st.DataObject, dst: str, src: Optional[str], bad: Optional[str], timeout: int,
                     legacy: bool) -> None:
        ch, h, m = self._target(data)
        d = DSTS[dst]
        s = ADDRS[src] if src else None
        if legacy:  # RESOLVE_IP: sockaddr_in6 slots, family 0 = no source
            fields = {"src_addr": s.address.pack_in6() if s else bytes(28), "dst_addr": d.address.pack_in6(),
                      "id": h, "timeout_ms": timeout}
            if bad == "AF_UNIX":
                fields["dst_addr"] = _storage(AF_UNIX, 28)
            err = self._raw(ch, C.RESOLVE_IP, "rdma_ucm_resolve_ip", fields)
            pre = EINVAL if bad == "AF_UNIX" else None  # ucma_resolve_ip: !rdma_addr_size_in6(dst)
        else:
            fields = {"id": h, "timeout_ms": timeout, "src_size": s.address.size if s else 0,
                      "dst_size": d.address.size, "reserved": 0,
                      "src_addr": s.address.pack_storage() if s else b"", "dst_addr": d.address.pack_storage()}
            if bad == "reserved=1":
                fields["reserved"] = 1
            elif bad == "dst_size=0":
                fields["dst_size"] = 0
            elif bad == "dst_size+1":
                fields["dst_size"] += 1
            elif bad == "AF_UNIX":
                fields["dst_addr"] = _storage(AF_UNIX)
            elif bad == "src_size=1":
                fields["src_size"] = 1
            err = self._raw(ch, C.RESOLVE_ADDR, "rdma_ucm_resolve_addr", fields)
            pre = EINVAL if bad else None  # ucma_resolve_addr: reserved, sizes not the families'
        if pre is None and m is None:
            pre = self._lookup(ch, h)
        others = list(self.ids)
        self._judge("RESOLVE_%s to %s from %s" % ("IP" if legacy else "ADDR", dst, src), m, err,
                    lambda w: resolve_outcomes(m, w, d, s, others), pre)

    @rule(data=st.data(), timeout=st.sampled_from([1000, 1000, 0, U32]))
    def resolve_route(self, data: st.DataObject, timeout: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.RESOLVE_ROUTE, "rdma_ucm_resolve_route", {"id": h, "timeout_ms": timeout})
        self._judge("RESOLVE_ROUTE timeout %d" % timeout, m, err, lambda w: route_outcomes(m, w, timeout),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data(), backlog=st.sampled_from([1, 0, 1024, 1025, 0x7FFFFFFF, U32]))
    def listen(self, data: st.DataObject, backlog: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.LISTEN, "rdma_ucm_listen", {"id": h, "backlog": backlog})
        others = list(self.ids)
        self._judge("LISTEN backlog %d" % backlog, m, err, lambda w: listen_outcomes(m, w, others),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data(), valid=st.sampled_from([1, 1, 1, 0]), pd_len=st.sampled_from([0, 0, 56, 57, 180, 181, 255]),
          size=st.sampled_from([0, 0, 0, -1, -8, -9, +1]))
    def connect(self, data: st.DataObject, valid: int, pd_len: int, size: int) -> None:
        ch, h, m = self._target(data)
        n = CODECS["rdma_ucm_connect"].size
        self.counter += 1
        fields = {"id": h, "conn_param.qp_num": 0x100000 + self.counter, "conn_param.valid": valid,
                  "conn_param.private_data_len": pd_len, "conn_param.retry_count": 5,
                  "conn_param.rnr_retry_count": 5, "conn_param.responder_resources": 1,
                  "conn_param.initiator_depth": 1}
        err = self._raw(ch, C.CONNECT, "rdma_ucm_connect", fields, size_in=n + size)
        if size > 0:
            pre: Optional[int] = EINVAL  # ucma_write: hdr.in beyond the write
        elif n + size < n - 8:
            pre = EINVAL  # ucma_connect: in_len < offsetofend(reserved)
        elif not valid:
            pre = EINVAL  # ucma_connect: conn_param.valid 0
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("CONNECT pd_len %d" % pd_len, m, err, lambda w: connect_outcomes(m, w, pd_len), pre)

    @rule(data=st.data(), valid=st.sampled_from([1, 0]), size=st.sampled_from([0, 0, -9, +1]))
    def accept(self, data: st.DataObject, valid: int, size: int) -> None:
        ch, h, m = self._target(data)
        n = CODECS["rdma_ucm_accept"].size
        fields = {"uid": self._uid(), "id": h, "conn_param.qp_num": 0x200000 + self.counter,
                  "conn_param.valid": valid, "conn_param.retry_count": 5, "conn_param.rnr_retry_count": 5}
        err = self._raw(ch, C.ACCEPT, "rdma_ucm_accept", fields, size_in=n + size)
        if size > 0 or n + size < n - 8:
            pre: Optional[int] = EINVAL  # ucma_write's in check; ucma_accept: in_len < offsetofend(reserved)
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("ACCEPT valid=%d" % valid, m, err, lambda w: accept_outcomes(m, w), pre)

    @rule(data=st.data(), reason=st.sampled_from([0, 28, 35, 5, 0xFF]), pd_len=st.sampled_from([0, 148, 149]))
    def reject(self, data: st.DataObject, reason: int, pd_len: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.REJECT, "rdma_ucm_reject", {"id": h, "reason": reason, "private_data_len": pd_len})
        pre = EINVAL if reason not in (0, 28, 35) else (None if m else self._lookup(ch, h))  # ucma_reject

        def per_world(w: World) -> Result:
            res = reject_outcomes(m, w)
            if pd_len > 148:  # cm_send_rej_locked: REJ private data ≤ 148
                return [(EINVAL if e == 0 else e, w2 if e else w) for e, w2 in res]
            return res

        self._judge("REJECT reason %d pd %d" % (reason, pd_len), m, err, per_world, pre)

    @rule(data=st.data())
    def disconnect(self, data: st.DataObject) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.DISCONNECT, "rdma_ucm_disconnect", {"id": h})
        self._judge("DISCONNECT", m, err, lambda w: disconnect_outcomes(m, w), None if m else self._lookup(ch, h))

    @rule(data=st.data(), event=st.sampled_from([4, 6, 0, U32]))
    def notify(self, data: st.DataObject, event: int) -> None:
        ch, h, m = self._target(data)
        err = self._raw(ch, C.NOTIFY, "rdma_ucm_notify", {"id": h, "event": event})
        self._judge("NOTIFY %d" % event, m, err, lambda w: notify_outcomes(m, w, event),
                    None if m else self._lookup(ch, h))

    @rule(data=st.data(), qp_state=st.sampled_from([0, 1, 2, 3, 6, 7, U32]), out=st.sampled_from([144, 144, 143]))
    def init_qp_attr(self, data: st.DataObject, qp_state: int, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        err = self._raw(ch, C.INIT_QP_ATTR, "rdma_ucm_init_qp_attr",
                        {"response": raw.reply.address, "id": h, "qp_state": qp_state}, out=out,
                        code="ch[%d].cmd(11, 'rdma_ucm_init_qp_attr', {'response': ch[%d].reply.address, 'id': %s, "
                        "'qp_state': %d}, out=%d)" % (ch, ch, self._hv(h), qp_state, out))
        if out < 144:
            pre: Optional[int] = ENOSPC  # ucma_init_qp_attr: out_len < sizeof(ib_uverbs_qp_attr)
        elif qp_state > 6:
            pre = EINVAL  # qp_state > IB_QPS_ERR
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("INIT_QP_ATTR state %d" % qp_state, m, err, lambda w: init_qp_outcomes(m, w, qp_state), pre)

    @rule(data=st.data(), level=st.sampled_from([0, 0, 0, 1, 99]), name=st.sampled_from([0, 1, 2, 3, 4, 99]),
          optlen=st.sampled_from([1, 4, 1, 4, 0, 2, 72, 0x80000000, U32]), value=st.sampled_from([1, 0]))
    def set_option(self, data: st.DataObject, level: int, name: int, optlen: int, value: int) -> None:
        ch, h, m = self._target(data)
        self.optval.fill(struct.pack("<I", value))
        self.script.append("optval.fill(%r)" % struct.pack("<I", value))
        err = self._raw(ch, C.SET_OPTION, "rdma_ucm_set_option",
                        {"optval": self.optval.address, "id": h, "level": level, "optname": name, "optlen": optlen},
                        code="ch[%d].cmd(14, 'rdma_ucm_set_option', {'optval': optval.address, 'id': %s, 'level': %d, "
                        "'optname': %d, 'optlen': %d})" % (ch, self._hv(h), level, name, optlen))
        # KMALLOC_MAX_SIZE is 4 MiB on x86_64 (2^(MAX_ORDER + PAGE_SHIFT - 1)) on every lab kernel
        pre = EINVAL if optlen > (1 << 22) else (None if m else self._lookup(ch, h))
        self._judge("SET_OPTION level %d name %d optlen %d value %d" % (level, name, optlen, value), m, err,
                    lambda w: option_outcomes(m, w, level, name, optlen, value), pre)

    @rule(data=st.data(), option=st.sampled_from([0, 1, 2, 3, 99]), out=st.sampled_from([1024, 280, 272, 271, 8, 7, 0]),
          route=st.sampled_from([False, False, False, True]))
    def query(self, data: st.DataObject, option: int, out: int, route: bool) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        if route:
            err = self._raw(ch, C.QUERY_ROUTE, "rdma_ucm_query", {"response": raw.reply.address, "id": h}, out=out,
                            code="ch[%d].cmd(5, 'rdma_ucm_query', {'response': ch[%d].reply.address, 'id': %s}, "
                            "out=%d)" % (ch, ch, self._hv(h), out))
            # ucma_query_route: the reply's size (up to ibdev_index) before the look-up
            pre = ENOSPC if out < 200 else (None if m else self._lookup(ch, h))
            self._judge("QUERY_ROUTE out %d" % out, m, err, lambda w: [(0, w)], pre)
            return
        err = self._raw(ch, C.QUERY, "rdma_ucm_query", {"response": raw.reply.address, "id": h, "option": option},
                        out=out, code="ch[%d].cmd(19, 'rdma_ucm_query', {'response': ch[%d].reply.address, 'id': %s, "
                        "'option': %d}, out=%d)" % (ch, ch, self._hv(h), option, out))
        if m is None:
            self._judge("QUERY", m, err, lambda w: [], self._lookup(ch, h))
            return
        if option in (0, 2):
            want = ENOSPC if out < 272 else 0  # ucma_query_addr / _gid: up to ibdev_index
        elif option == 1:
            want = ENOSPC if out < 8 else 0  # ucma_query_path
        elif option == 3 and since("query_ib_service", self.version):
            # found by the fuzzer (7.2): an id without IB service records (every id here: RoCE
            # has no SA, RESOLVE_IB_SERVICE never succeeds) answers ENODATA, not an empty list
            want = ENOSPC if out < 8 else errno.ENODATA
        else:
            want = ENOSYS  # ucma_query: default
        self._judge("QUERY option %d out %d" % (option, out), m, err, lambda w: [(want, w)])

    @rule(data=st.data(), flags=st.sampled_from([0, 0, 1, 2]), group=st.sampled_from(["239.1.1.1", "239.1.1.2"]),
          legacy=st.sampled_from([False, False, True]), out=st.sampled_from([4, 4, 3]))
    def join(self, data: st.DataObject, flags: int, group: str, legacy: bool, out: int) -> None:
        ch, h, m = self._target(data)
        raw = self.chans[ch]
        g = parse_address(group)
        mc_uid = self._uid()
        raw.reply.clear()
        if legacy:
            err = self._raw(ch, C.JOIN_IP_MCAST, "rdma_ucm_join_ip_mcast",
                            {"response": raw.reply.address, "uid": mc_uid, "addr": g.pack_in6(), "id": h}, out=out,
                            code="ch[%d].cmd(16, 'rdma_ucm_join_ip_mcast', {'response': ch[%d].reply.address, "
                            "'uid': %d, 'addr': %r, 'id': %s}, out=%d)" % (ch, ch, mc_uid, g.pack_in6(), self._hv(h), out))
            flags = 0
        else:
            err = self._raw(ch, C.JOIN_MCAST, "rdma_ucm_join_mcast",
                            {"response": raw.reply.address, "uid": mc_uid, "id": h, "addr_size": g.size,
                             "join_flags": flags, "addr": g.pack_storage()}, out=out,
                            code="ch[%d].cmd(22, 'rdma_ucm_join_mcast', {'response': ch[%d].reply.address, 'uid': %d, "
                            "'id': %s, 'addr_size': %d, 'join_flags': %d, 'addr': %r}, out=%d)"
                            % (ch, ch, mc_uid, self._hv(h), g.size, flags, g.pack_storage(), out))
        if out < 4:
            pre: Optional[int] = ENOSPC  # ucma_process_join: out_len < sizeof(resp)
        elif flags not in (0, 1):
            pre = EINVAL  # join_flags neither FULLMEMBER nor SENDONLY_FULLMEMBER
        else:
            pre = None if m else self._lookup(ch, h)
        self._judge("JOIN %s flags %d%s" % (group, flags, " (JOIN_IP_MCAST)" if legacy else ""), m, err,
                    lambda w: join_outcomes(m, w, mc_uid), pre)
        if err == 0 and m:
            mc = int(struct.unpack_from("<I", raw.reply.view)[0])
            var = self._var("mc")
            self.script.append("%s = int.from_bytes(ch[%d].reply.bytes(4), 'little')" % (var, ch))
            m.mcs[mc] = (var, mc_uid)

    @rule(data=st.data(), which=st.sampled_from(["mine", "mine", "unknown"]))
    def leave(self, data: st.DataObject, which: str) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        mcs = [(m, mc) for m in self.ids for mc in m.mcs]
        if which == "mine" and mcs:
            m, mc = data.draw(st.sampled_from(mcs), label="membership")
            var = m.mcs[mc][0]
        else:
            m, mc, var = None, 0x7FFFFFF0, str(0x7FFFFFF0)
        err = self._raw(ch, C.LEAVE_MCAST, "rdma_ucm_destroy_id", {"response": raw.reply.address, "id": mc}, out=4,
                        code="ch[%d].cmd(17, 'rdma_ucm_destroy_id', {'response': ch[%d].reply.address, 'id': %s}, "
                        "out=4)" % (ch, ch, var))
        want = ENOENT if m is None else (EINVAL if m.ch != ch else 0)  # ucma_leave_multicast
        if err != want:
            self._fail("LEAVE_MCAST of %s: the kernel answered %s, the model expects %s" % (var, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.mc_read.get(mc, 0):
                self._fail("LEAVE_MCAST of %s: events_reported %d, %d were read" % (var, reported, m.mc_read.get(mc, 0)))
            uid = m.mcs.pop(mc)[1]
            # the membership's queued events go with it (ucma_leave_multicast), and its join
            m.worlds = {w.but(q=tuple(e for e in w.q if e[2] != uid),
                              pend=tuple(o for o in w.pend if not any(ev and ev[2] == uid for ev, _ in o)))
                        for w in m.worlds}

    @rule(data=st.data(), fd=st.sampled_from(["owner", "owner", "self", "bad", "not rdma_cm"]))
    def migrate(self, data: st.DataObject, fd: str) -> None:
        ch, h, m = self._target(data)
        opened = self._open()
        new = data.draw(st.sampled_from(opened), label="new channel")
        raw = self.chans[new]
        if fd == "bad":
            fdn, fdsrc = U32, str(U32)
        elif fd == "not rdma_cm":
            fdn, fdsrc = self.log.fd if self.log.fd is not None else 0, "0"
            fdn = 0 if self.log.fd is None else fdn
        elif fd == "self":
            fdn, fdsrc = raw.dev.fileno(), "ch[%d].dev.fileno()" % new
            ch = new
        else:
            fdn, fdsrc = self.chans[ch].dev.fileno(), "ch[%d].dev.fileno()" % ch
        err = self._raw(new, C.MIGRATE_ID, "rdma_ucm_migrate_id", {"response": raw.reply.address, "id": h, "fd": fdn},
                        out=4, code="ch[%d].cmd(18, 'rdma_ucm_migrate_id', {'response': ch[%d].reply.address, 'id': %s, "
                        "'fd': %s}, out=4)" % (new, new, self._hv(h), fdsrc))
        if fd == "bad":
            want = ENOENT  # fdget fails
        elif fd == "not rdma_cm":
            want = EINVAL  # f_op is not ucma_fops
        else:
            # the id is looked up on the fd named (its owner, or the writer's own fd)
            want = 0 if (m and m.ch == ch) else self._lookup(ch, h) if m is None else EINVAL
            if m is not None and m.ch != ch:
                want = EINVAL
        if err != want:
            self._fail("MIGRATE_ID of %s to ch[%d] (fd: %s): the kernel answered %s, the model expects %s"
                       % (m.name if m else hex(h), new, fd, _en(err), _en(want)))
        if err == 0 and m:
            reported = int(struct.unpack_from("<I", raw.reply.view)[0])
            if reported != m.events_read:
                self._fail("MIGRATE_ID of %s: events_reported %d, %d were read" % (m.name, reported, m.events_read))
            m.ch = new  # its unread events go with it

    @rule(data=st.data(), out=st.sampled_from([336, 336, 336, 324, 323, 0]), wait=st.sampled_from([0.0, 0.3, 0.3, 1.0]))
    def get_event(self, data: st.DataObject, out: int, wait: float, ch: Optional[int] = None) -> None:
        if ch is None:
            ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        if wait:
            select.select([raw.dev.fileno()], [], [], wait)
            self.script.append("import select; select.select([ch[%d].dev.fileno()], [], [], %s)" % (ch, wait))
        raw.reply.clear()
        err = self._raw(ch, C.GET_EVENT, "rdma_ucm_get_event", {"response": raw.reply.address}, out=out,
                        code="ch[%d].get_event(out=%d)" % (ch, out))
        if out < 324:
            if err != ENOSPC:  # ucma_get_event: below the event less reserved and ece
                self._fail("GET_EVENT out %d: the kernel answered %s, the model expects ENOSPC" % (out, _en(err)))
            return
        mine = [m for m in self.ids if m.ch == ch]
        if err == EAGAIN:
            for m in mine:
                keep = {w for w in m.possible() if not w.q}
                if not keep:
                    self._fail("GET_EVENT on ch[%d]: EAGAIN, but %s (%s) has an event queued in every world: %s"
                               % (ch, m.name, _kind(m), sorted({w.q[0][0] for w in m.possible()})))
                m.worlds = keep
            return
        if err:
            self._fail("GET_EVENT on ch[%d]: the kernel answered %s, the model allows an event or EAGAIN" % (ch, _en(err)))
        uid, handle, ev, status = struct.unpack_from("<QIII", raw.reply.view)
        evname = abi.CmEventType(ev).name if ev in abi.CmEventType._value2member_map_ else str(ev)
        self.script[-1] += "  # %s uid %#x id %d status %d" % (evname, uid, handle, status)
        for m in mine:
            is_mc = any(u == uid for _, u in m.mcs.values())
            if not (m.uid == uid and m.uid and m.handle == handle) and not is_mc:
                continue
            keep = set()
            for w in m.possible():
                if w.q and w.q[0][0] == evname and (w.q[0][1] is None or status in w.q[0][1]) and \
                        (w.q[0][2] == (uid if is_mc else 0)):
                    keep.add(w.but(q=w.q[1:]))
            if not keep:
                self._fail("GET_EVENT on ch[%d]: %s status %d for %s (%s), which the model does not expect in %s"
                           % (ch, evname, status, m.name, _kind(m), _states(m)))
            m.worlds = keep
            m.events_read += 1
            if is_mc:
                mc = [k for k, (_, u) in m.mcs.items() if u == uid][0]
                m.mc_read[mc] = m.mc_read.get(mc, 0) + 1
            return
        self._fail("GET_EVENT on ch[%d]: %s (uid %#x, id %d, status %d) for no id of this channel the model knows"
                   % (ch, evname, uid, handle, status))

    @rule(data=st.data(), what=st.sampled_from(["short", "cmd beyond the table", "GET_OPTION", "in beyond the write",
                                                "cmd 23 on an unknown id", "hdr.cmd max"]))
    def malformed(self, data: st.DataObject, what: str) -> None:
        ch = data.draw(st.sampled_from(self._open()), label="channel")
        raw = self.chans[ch]
        n = data.draw(st.integers(0, 7), label="short length")
        if what == "short":
            err, code, want = raw.write(bytes(n)), "ch[%d].write(bytes(%d))" % (ch, n), EINVAL
        elif what == "cmd beyond the table":
            err, code, want = raw.cmd(25, None, {}, body=bytes(16)), "ch[%d].cmd(25, None, {}, body=bytes(16))" % ch, EINVAL
        elif what == "hdr.cmd max":
            err, code, want = raw.cmd(U32, None, {}, body=bytes(16)), "ch[%d].cmd(%d, None, {}, body=bytes(16))" % (ch, U32), EINVAL
        elif what == "GET_OPTION":
            err, code, want = raw.cmd(13, None, {}, body=bytes(24)), "ch[%d].cmd(13, None, {}, body=bytes(24))" % ch, ENOSYS
        elif what == "in beyond the write":
            err = raw.cmd(C.DESTROY_ID, None, {}, size_in=17, body=bytes(16), out=4)
            code, want = "ch[%d].cmd(1, None, {}, size_in=17, body=bytes(16), out=4)" % ch, EINVAL
        else:
            err = raw.cmd(23, "rdma_ucm_resolve_ib_service", {"id": U32})
            code = "ch[%d].cmd(23, 'rdma_ucm_resolve_ib_service', {'id': %d})" % (ch, U32)
            want = ENOENT if since("cmd23_exists", self.version) else EINVAL
        UcmaMachine.stats["commands"] += 1
        UcmaMachine.stats["errnos"][("malformed: " + what, errno.errorcode.get(err, "ok") if err else "ok")] += 1
        self.script.append("err = %s  # -> %s" % (code, _en(err)))
        if err != want:
            self._fail("%s: the kernel answered %s, the model expects %s" % (what, _en(err), _en(want)))

    @rule(data=st.data(), choice=st.integers(0, 3))
    def progress(self, data: st.DataObject, choice: int) -> None:
        """The next valid step of one id, whatever its state: deep states come sooner."""
        ids = [m for m in self.ids if self.chans[m.ch] is not None]
        if not ids:
            return self.create_id(data, [PS.TCP, PS.UDP][choice % 2], QP.RC)
        m = data.draw(st.sampled_from(ids), label="id to advance")
        states = {w.state for w in m.worlds}
        pending = any(w.pend or w.q for w in m.possible())
        target = (m.ch, m.handle, m)
        if pending and choice < 2:
            return self.get_event(data, 336, 1.0, ch=m.ch)
        self._forced = target
        if states == {S.IDLE}:
            if choice == 0:
                return self.bind(data, "local", None, False)
            if choice == 1:
                return self.listen(data, 1)
            return self.resolve_addr(data, "local", None, None, 2000, False)
        if states == {S.ADDR_BOUND}:
            if m.ud and choice < 2:
                return self.join(data, 0, "239.1.1.1", False, 4)
            if choice == 2:
                return self.listen(data, 1)
            return self.resolve_addr(data, "local", None, None, 2000, False)
        if states == {S.ADDR_RESOLVED}:
            return self.resolve_route(data, 1000)
        if states == {S.ROUTE_RESOLVED}:
            return self.connect(data, 1, 0, 0)
        self._forced = None
        return self.get_event(data, 336, 0.3, ch=m.ch)

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def kernel_agrees(self) -> None:
        problems = self.log.new_problems()
        if problems:
            self._fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))
        for i in self._open():
            dead = self.chans[i].alive()
            if dead:
                self._fail("ch[%d]: %s" % (i, dead))
        seen = netlink_states(self.pid)
        left = list((collections.Counter(seen) - collections.Counter(self.baseline)).elements())
        options = [self._netlink_options(m) for m in self.ids]
        if not match_states(options, left):
            self._fail("RDMA netlink lists this process's cm_ids in %s; the model has %s"
                       % (left or "no state", "; ".join("%s (%s) in %s" % (m.name, _kind(m), _states(m))
                                                         for m in self.ids) or "no id"))

    def _netlink_options(self, m: IdModel) -> List[Tuple[str, ...]]:
        opts: Set[Tuple[str, ...]] = set()
        for w in m.possible():
            if w.state is S.LISTEN and w.wild_listen:
                opts.add((K.LISTEN.name,) * self.devices)  # an internal listener per device, named after us
            elif w.dev:
                opts.add((kernel_state(w).name,))
            else:
                opts.add(())
        return sorted(opts)

    def teardown(self) -> None:
        try:
            for i, raw in enumerate(self.chans):
                if raw is not None:
                    raw.close()
                    self.chans[i] = None
            self.script.append("for c in ch: c and c.close()")
            nothing_left(self.pid, self.baseline, self.log, self._fail)
        finally:
            self.log.close()


def nothing_left(pid: int, baseline: Sequence[str], log: Any, fail: Callable[[str], None], wait_s: float = 0.0) -> None:
    """The end of a sequence, every channel closed: no cm_id of ``pid`` beyond ``baseline`` in
    RDMA netlink (waiting up to ``wait_s`` for ids that go when a timewait ends), no new
    problem line in the kernel ``log``; ``fail`` otherwise."""
    deadline = time.monotonic() + wait_s
    while True:
        left = list((collections.Counter(netlink_states(pid)) - collections.Counter(baseline)).elements())
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.1)
    if left:
        fail("every channel is closed, yet RDMA netlink still lists cm_ids of this process: %s" % left)
    problems = log.new_problems()
    if problems:
        fail("the kernel log has new problem lines:\n  " + "\n  ".join(problems[:10]))


def _en(err: int) -> str:
    return "ok" if err == 0 else errno.errorcode.get(err, str(err))


def _kind(m: IdModel) -> str:
    names = {PS.TCP: "TCP", PS.UDP: "UDP", PS.IPOIB: "IPOIB", PS.IB: "IB"}
    return "%s/%s uid %s" % (names.get(m.ps, hex(m.ps)), QP(m.qp).name if m.qp in QP._value2member_map_ else m.qp,
                             m.uid or "0")


def _states(m: IdModel) -> str:
    return "{%s}" % ", ".join(sorted({"%s%s%s" % (w.state.name, "+dev" if w.dev else "",
                                                  " q=%s" % [e[0] for e in w.q] if w.q else "")
                                      for w in m.possible()}))



# -- campaigns -------------------------------------------------------------------------------

def run_round(seed: int, examples: int, steps: int, shrink_budget: float = 60.0) -> Optional[str]:
    """One hypothesis run of :class:`UcmaMachine` (``examples`` sequences of up to ``steps``
    commands, derandomized by ``seed``): None, or the shrunk failure's report."""
    import hypothesis
    from hypothesis import HealthCheck, Phase, settings
    from hypothesis.stateful import get_state_machine_test

    test = get_state_machine_test(UcmaMachine, settings=settings(
        max_examples=examples, stateful_step_count=steps, deadline=None, database=None,
        suppress_health_check=list(HealthCheck), phases=[Phase.generate, Phase.shrink], print_blob=False))
    test = hypothesis.seed(seed)(test)
    UcmaMachine.first_failure = None
    UcmaMachine.smallest = None
    UcmaMachine.shrink_budget = shrink_budget
    try:
        test()
    except Exception:  # a Disagreement, or hypothesis' complaint after the shrink budget
        UcmaMachine.first_failure = None  # machines made after this round (replays) start afresh
        if UcmaMachine.smallest is not None:
            _n, report, script = UcmaMachine.smallest
            reduced = reduce_script(script, shrink_budget)
            if reduced is not None and len(reduced) < len(script):
                report += ("\n\nreduced (replayed on this kernel: the %d steps without which the last command "
                           "still answers as above):\n%s" % (len(reduced) - _HEADER, "\n".join(reduced)))
            return report
        raise
    return None


#: the reproducer's first lines: imports, the channels' list, the option buffer
_HEADER = 4


def _replay(lines: List[str]) -> Optional[int]:
    """Run a reproducer here; the errno its last command answered, or None if a step fails."""
    env: Dict[str, Any] = {}
    try:
        exec(compile("\n".join(lines), "<reproducer>", "exec"), env)  # noqa: S102 - our own script
        return int(env["err"])
    except Exception:  # a step needs one that was left out
        return None
    finally:
        for c in env.get("ch") or ():
            try:
                if c is not None:
                    c.close()  # closing destroys the replay's ids
            except Exception:
                pass


def reduce_script(script: List[str], budget: float) -> Optional[List[str]]:
    """The shortest subsequence of ``script``'s steps found within ``budget`` seconds, removing
    one step at a time, after which the last command still answers what it answered: what a
    kernel developer runs.  None when the script does not replay as it ran."""
    if len(script) <= _HEADER + 1 or not script[-1].startswith("err = "):
        return None
    want = _replay(script)
    if want is None:
        return None
    deadline = time.monotonic() + budget
    lines = list(script)
    changed = True
    while changed and time.monotonic() < deadline:
        changed = False
        for i in range(len(lines) - 2, _HEADER - 1, -1):  # the last command stays; later steps first
            if time.monotonic() >= deadline:
                break
            candidate = lines[:i] + lines[i + 1:]
            if _replay(candidate) == want:
                lines, changed = candidate, True
    return lines


def campaign(seconds: float, seed: int, examples: int = 20, steps: int = 30,
             out: Callable[[str], None] = print, shrink_seconds: float = 60.0) -> Dict[str, Any]:
    """Rounds of :func:`run_round` with seeds seed, seed+1, ... until ``seconds`` have passed;
    the figures, and each disagreement's reproducer."""
    import fuzz_runner
    from pyrdmacm.conformance import kernel_version

    UcmaMachine.version = kernel_version()
    UcmaMachine.stats = {"sequences": 0, "commands": 0, "errnos": collections.Counter()}
    n, found, took = fuzz_runner.rounds(
        seconds, seed, lambda s: run_round(s, examples, steps, shrink_budget=shrink_seconds), "", out)
    return {"kernel": os.uname().release, "seed": seed, "rounds": n, "seconds": took,
            "sequences": UcmaMachine.stats["sequences"], "commands": UcmaMachine.stats["commands"],
            "errnos": UcmaMachine.stats["errnos"], "disagreements": found}


def main(argv: Optional[Sequence[str]] = None) -> int:
    import fuzz_runner

    p = fuzz_runner.parser("fuzz the running kernel's ucma with the model (see tools/fuzz)", 20, 30)
    p.add_argument("--shrink-seconds", type=float, default=60.0,
                   help="how long a failure may be shrunk (default 60; each step is a syscall on the real kernel: "
                        "give more for a minimal reproducer)")
    a = p.parse_args(argv)
    fig = campaign(a.minutes * 60, fuzz_runner.seed_of(a), a.examples, a.steps, shrink_seconds=a.shrink_seconds)
    return fuzz_runner.finish(fig, a.json)


if __name__ == "__main__":
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    raise SystemExit(main())
