"""The model of the kernel's ucma command set that the fuzzer (:mod:`ucma_model`) checks the
real kernel against: for every id, the set of *worlds* the kernel may be in for it.

A :class:`World` is the id's ``rdma_cm_state`` (as :class:`pyrdmacm.state.State`), whether it
is attached to an RDMA device (netlink lists it then), the IB CM's side of it, how it is bound
(family, wildcard or local, port), its options, the asynchronous work in flight (an address or
route query, a connection request, a multicast join: each a set of possible outcomes, any of
which may happen at any time, or never), and the events the kernel generated for it that
nobody has read yet.  A command is answered, per world, by its ``*_outcomes`` function: the
errnos the kernel may answer there and the world after each, written after the handlers of
ucma.c and cma.c (each check names the function that makes it, in the kernel's order: e.g.
RESOLVE_ADDR's size checks come before the id look-up, so a malformed one on an unknown id is
EINVAL, not ENOENT).  The errno the kernel answered keeps the worlds that allow it; none left
is a *disagreement*.

The state rules -- which command the kernel takes in which ``rdma_cm_state``, the errno
otherwise -- are not written here: :func:`refused` asks :mod:`pyrdmacm.kernel_rules`, the
table the fakes and the conformance cases share, with a world's kernel state
(:func:`kernel_state`).  What is left here is what the table leaves to others: the IB CM's
answers, the addresses, the ports.  Where the kernels differ, the difference is data with the
kernel version (:data:`DIFFERENCES`, and the table's rules' versions).

Also here: the words a report names ids and errnos with (the executor's view of the kernel is
:mod:`ucma_view`).
"""


from __future__ import annotations

import dataclasses
import errno
import ipaddress
from typing import Any, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from pyrdmacm import abi, kernel_rules
from pyrdmacm.addr import Address, parse_address
from pyrdmacm.state import KERNEL_STATE, State
from pyrdmacm.wire import decode_path_record

S = State
C = abi.UserCmCmd
PS = abi.PortSpace
QP = abi.QpType
K = abi.RdmaCmState

E_OK = 0
EINVAL, ENOENT, ENOSPC, EFAULT, ENOSYS = errno.EINVAL, errno.ENOENT, errno.ENOSPC, errno.EFAULT, errno.ENOSYS
EAGAIN, EADDRINUSE, EADDRNOTAVAIL, EISCONN = errno.EAGAIN, errno.EADDRINUSE, errno.EADDRNOTAVAIL, errno.EISCONN
ENODEV, EPROTONOSUPPORT = errno.ENODEV, errno.EPROTONOSUPPORT

AF_INET, AF_INET6, AF_UNIX, AF_IB = 2, 10, 1, 27

# -- what the lab offers (tools/lab's "single" topology) -----------------------------------

LOCAL = "10.0.2.15"
LOCAL6 = "fec0::15"
#: rxe0's RoCE v2 GID of LOCAL: the lab's one port has no InfiniBand link layer, so an AF_IB
#: address binds no device and routes over no netdev (probed on 5.10 and 7.2 alike)
LOCAL_GID = "::ffff:" + LOCAL
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
    # WRITE_CM_EVENT (cmd 24): the lab has it on 7.2, not on 6.12 (upstream 6.17..6.19)
    "cmd24_exists": (((0, 0), False), ((6, 17), True)),
}
#: the events WRITE_CM_EVENT takes (ucma_write_cm_event: any other is EINVAL, before the id)
WRITABLE = {18: "USER", 19: "INTERNAL"}


#: the kernel the model answers for, (major, minor): set from the machine's ``version`` when a
#: sequence starts ((0, 0): the newest rules)
answering_for: Tuple[int, int] = (0, 0)


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
    #: no netdev bound: resolved to the any address (cma_resolve_loopback), or an AF_IB
    #: destination (cma_resolve_ib_dev picks the device by GID; RoCE has no netdev for it)
    loop: bool = False
    #: what the address was resolved to (a destination's kind: "gateway", "local" ...)
    dst: str = ""
    #: routed to the gateway itself: the kernel watches its neighbour entry for the id
    #: (kernel_rules.NET_CHANGES, cma_netevent_callback)
    watched: bool = False
    #: the route came from SET_OPTION IB_PATH (rdma_set_ib_path) with a record whose source GID
    #: the port lacks (an all-zero one)
    bad_path: bool = False
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
                                version=answering_for if answering_for != (0, 0) else kernel_rules.NEWEST)


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
                if ow.fam == AF_IB and ow.state not in (S.IDLE, S.ADDR_BOUND, S.LISTEN) and addr == "local":
                    res.add(0)  # an AF_IB id that resolved holds its GID: another family's address
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
    if a.family == AF_IB:
        if a.kind == "local":
            # cma_acquire_dev_by_src_ip: a GID source needs an InfiniBand port, before the port
            # space is looked at (PS_IPOIB too)
            return [(ENODEV, w)]
        if me.ps == PS.IPOIB:
            return [(EPROTONOSUPPORT, w)]  # cma_get_port: cma_select_ib_ps has no PS_IPOIB
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

    kind: str  #: "any", "local", "notlocal", "gateway", "far", "nowhere", "loopback", "mcast"
    text: str
    port: int = 0
    family: int = AF_INET

    @property
    def address(self) -> Address:
        return self.for_space(PS.TCP)

    def for_space(self, ps: int) -> Address:
        """The sockaddr an id of port space ``ps`` gives: an AF_IB one carries the port space in
        its service id (as rdma_getaddrinfo makes it)."""
        if self.family == AF_IB:
            return Address.ib(self.text, port=self.port or None,
                              port_space=ps if ps in PS._value2member_map_ else PS.TCP)
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
        if src is None:
            src = AddrChoice("any", "::" if dst.family != AF_INET else "0.0.0.0", 0, dst.family)
        for e, w2 in _bind_local(me, w, src, others):
            if e:
                out.append((e, w2))
            else:
                starts.append(w2)
    else:
        starts.append(w)  # ADDR_BOUND: the source is ignored
    for b in starts:
        if b.fam != dst.family:
            out.append((EINVAL, b))  # cma_family(id) != dst family: the id stays bound
            continue
        if dst.family == AF_IB and dst.kind == "nowhere":
            # cma_resolve_ib_dev: no port has a GID of the destination's subnet prefix; the
            # id stays bound (rdma_resolve_addr's error path: ADDR_QUERY -> ADDR_BOUND)
            out.append((ENODEV, b))
            continue
        if dst.family == AF_IB:
            op: Tuple[Outcome, ...] = ((("ADDR_RESOLVED", frozenset({0}), 0),
                                        (("state", S.ADDR_RESOLVED), ("dev", True), ("loop", True))),)
        elif me.ps == PS.IPOIB and dst.kind != "any":
            # found by the fuzzer (5.10): only addr_handler's cma_acquire_dev_by_src_ip refuses
            # PS_IPOIB on a RoCE netdev; cma_resolve_loopback (dst 0.0.0.0) binds the first
            # device whatever the port space, and the id resolves
            ev: Ev = ("ADDR_ERROR", frozenset({-EINVAL & 0xFFFFFFFF}), 0)  # no IB netdev: -EINVAL
            op = ((ev, (("state", S.ADDR_BOUND),)),)
        else:
            # found by the fuzzer (7.2, a model bug): an id bound to a local address keeps that
            # address's netdev when it resolves the any address (cma_resolve_loopback binds a
            # device only to an id without one): its route, joins and IB paths work
            op = ((("ADDR_RESOLVED", frozenset({0}), 0),
                   (("state", S.ADDR_RESOLVED), ("dev", True), ("loop", dst.kind == "any" and not b.dev),
                    ("dst", dst.kind))),)
        # the any address (cma_resolve_loopback: cma_bind_loopback) and an AF_IB destination
        # (cma_resolve_ib_dev) attach the device in the write, before the work that ends the
        # query: netlink lists the id in ADDR_QUERY (found by the fuzzer, 7.2 under load: a
        # model bug; the window is short)
        now = dst.kind == "any" or dst.family == AF_IB
        out.append((0, b.but(state=S.ADDR_QUERY, pend=b.pend + (op,), dev=b.dev or now)))
    return out


def route_outcomes(me: IdModel, w: World, timeout: int) -> Result:
    # a device (ucma_get_ctx_dev), ADDR_RESOLVED; timeout_ms 0 refused from 6.1 on (found by the
    # fuzzer: 5.10 takes it)
    err = refused(me, w, C.RESOLVE_ROUTE, "timeout 0" if timeout == 0 else "")
    if err:
        return [(err, w)]
    if w.loop:
        # found by the fuzzer (6.1): an id resolved to the any address has no bound_dev_if, and
        # RoCE's cma_resolve_iboe_route finds no netdev: ENODEV, back to ADDR_RESOLVED
        return [(errno.ENODEV, w)]
    op = ((("ROUTE_RESOLVED", frozenset({0}), 0), (("state", S.ROUTE_RESOLVED),)),)
    # RoCE resolves the route in the write: the id is in the table of routed ids at once
    return [(0, w.but(state=S.ROUTE_QUERY, pend=w.pend + (op,), watched=w.dst == "gateway"))]


def neighbour_outcomes(w: World, updates: int) -> World:
    """The gateway's neighbour entry gets ``updates`` new hardware addresses back to back
    (kernel_rules.NET_CHANGES, measured on 6.1, 6.12 and 7.2): an id routed to the gateway
    gets UNREACHABLE -ETIMEDOUT from a work item per update (a later update may find the
    work still queued: one event then); its state does not move.  5.10: nothing."""
    rule = kernel_rules.net_change("neighbour", answering_for if answering_for != (0, 0) else kernel_rules.NEWEST)
    if rule is None or not w.watched:
        return w
    ev: Ev = (rule.event.name, frozenset({rule.status & 0xFFFFFFFF}), 0)
    ops: Tuple[Tuple[Outcome, ...], ...] = (((ev, ()),),) + (((ev, ()), (None, ())),) * (updates - 1)
    return w.but(pend=w.pend + ops)


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
    if w.bad_path:
        # measured on 5.10 and 7.2: a route IB_PATH set with a source GID the port lacks (an
        # all-zero record) makes no REQ nor SIDR REQ: the IB CM finds no GID (ENOENT) and the
        # id is back in ROUTE_RESOLVED; a record with the port's GID connects as a resolved route
        return [(errno.ENOENT, w)]
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


def ib_path_outcomes(me: IdModel, w: World, entry: Optional[bytes]) -> Result:
    """SET_OPTION IB_PATH whose length is whole records; ``entry``: the path record of the
    first one within optlen flagged GMP|PRIMARY|BIDIRECTIONAL (ucma_set_ib_path looks for it
    before the device), or None.  Measured on 5.10 and 7.2: from ADDR_RESOLVED the id moves to
    ROUTE_RESOLVED and the kernel queues ROUTE_RESOLVED itself, whatever the record holds; an
    id resolved to the any address has no netdev for RoCE's l2 fields: ENODEV."""
    if entry is None or not w.dev:
        return [(EINVAL, w)]
    err = refused(me, w, C.SET_OPTION, "IB_PATH")  # rdma_set_ib_path: ADDR_RESOLVED -> ROUTE_RESOLVED
    if err:
        return [(err, w)]
    if w.loop:
        return [(ENODEV, w)]  # cma_iboe_set_path_rec_l2_fields: no bound_dev_if; the state goes back
    sgid = decode_path_record(0, entry).sgid
    return [(0, w.but(state=S.ROUTE_RESOLVED, bad_path=sgid != ipaddress.IPv6Address(LOCAL_GID),
                      q=w.q + (("ROUTE_RESOLVED", frozenset({0}), 0),)))]


def ib_service_outcomes(me: IdModel, w: World) -> Result:
    """RESOLVE_IB_SERVICE (6.17+) on a live id: the state and device rule, then the SA query
    that RoCE cannot make (measured on 7.2: EOPNOTSUPP from a device-bound id, which stays
    ADDR_BOUND; EINVAL from every other state and from an id bound to the wildcard)."""
    err = refused(me, w, C.RESOLVE_IB_SERVICE)
    return [(err or errno.EOPNOTSUPP, w)]


def write_event_outcomes(me: IdModel, w: World, event: int, status: int) -> Result:
    """WRITE_CM_EVENT (6.17+) on a live id, in any state: the event is queued on the id's
    file at once, with the status written; nothing else changes (measured on 7.2).  Found by
    the fuzzer (7.2, a model bug): an id created with uid 0 is refused, EINVAL."""
    if not me.uid:
        return [(EINVAL, w)]
    return [(0, w.but(q=w.q + ((WRITABLE[event], frozenset({status}), 0),)))]


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


# -- the words a report names ids and errnos with ----------------------------------------------

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
