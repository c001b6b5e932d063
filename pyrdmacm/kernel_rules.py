"""The kernel's rules for the ucma commands, as data: in which ``rdma_cm_state`` each one is
taken, and the errno it answers elsewhere.

Theory of operation
-------------------
One table, :data:`RULES`, says for each command (and, where the kernel rules on its form, for
each form: SET_OPTION REUSEADDR setting or clearing, say) the states of the kernel's
``enum rdma_cm_state`` (:class:`~pyrdmacm.abi.RdmaCmState`) in which the rdma_cm layer takes
it, whether the id must first be bound to an RDMA device (``ucma_get_ctx_dev``), which QP
types it is for, and the errno the kernel answers otherwise.  Each :class:`Rule` names the
kernel function that enforces it (ucma.c, cma.c) and the kernel versions it holds for; the
lab's kernels (:data:`LAB_KERNELS`) answered every rule the way the table says
(``tests/kernel/test_kernel_rules_lab.py``), and a rule that changed between kernels is two
rules with version bounds.

What the table does not decide: within the states it lets through, a connection's IB CM
decides further (REJECT after the peer's REP, NOTIFY before the RTU ...: cm.c, modelled by
:mod:`pyrdmacm.testing`'s fabric), and so do a command's own checks of its fields (sizes,
families, private data), which the kernel mostly makes before it looks the id up.  Commands
absent from the table (CREATE_ID, DESTROY_ID, QUERY, QUERY_ROUTE, MIGRATE_ID, GET_EVENT,
LEAVE_MCAST, WRITE_CM_EVENT) are taken in every state.

Who reads it: the fake kernels of :mod:`pyrdmacm.testing` (their command handlers ask
:func:`refusal`), the fuzzer's model of the kernel (``tests/ucma_model.py``), and the
conformance cases' expectations (:func:`expect`).  The library's own table of calls
(:mod:`pyrdmacm.state`) is a stricter view for users; tests compare the two.
"""

from __future__ import annotations

import errno
from typing import Dict, FrozenSet, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union

from .abi import CmEventType, QpType, RdmaCmState, UserCmCmd

__all__ = ["Version", "LAB_KERNELS", "NEWEST", "Rule", "RULES", "UNKNOWN_ID", "ANOTHER_FDS_ID", "rule_for",
           "rules_of", "refusal", "expect", "option_form", "NetChange", "NET_CHANGES", "net_change"]

S = RdmaCmState
C = UserCmCmd

#: a kernel's ``(major, minor)``
Version = Tuple[int, int]

#: The kernels of the lab (tools/lab), by Debian suite: the versions the rules are checked on.
LAB_KERNELS: Mapping[str, Version] = {"bullseye": (5, 10), "bookworm": (6, 1), "trixie": (6, 12), "sid": (7, 2)}
#: The newest of them: what a rule is asked about when no version is given.
NEWEST: Version = max(LAB_KERNELS.values())

#: ``_ucma_find_context``: a handle no id has
UNKNOWN_ID = errno.ENOENT
#: ``_ucma_find_context``: the id of another fd (a handle is machine-wide, an id is its fd's)
ANOTHER_FDS_ID = errno.EINVAL

ANY: FrozenSet[RdmaCmState] = frozenset(S)


class Rule(NamedTuple):
    """One rule: ``command`` (in its ``form``, "" for every form) is taken in ``states``;
    it needs the id bound to an RDMA device first if ``device`` (else ``errno`` before the
    state is looked at) and an id of one of ``qp_types`` if given; elsewhere the kernel
    answers ``errno``.  ``where``: the kernel function that says so; the rule holds from
    kernel ``since`` up to, not including, ``before``."""

    command: UserCmCmd
    form: str
    states: FrozenSet[RdmaCmState]
    errno: int
    where: str
    device: bool = False
    qp_types: Optional[FrozenSet[int]] = None
    since: Version = (0, 0)
    before: Optional[Version] = None

    def holds_on(self, version: Version) -> bool:
        """Whether the rule is the kernel's at ``version``."""
        return self.since <= version and (self.before is None or version < self.before)

    def answer(self, state: RdmaCmState, *, device: bool = True, qp_type: Optional[int] = None) -> int:
        """0 if the rdma_cm layer takes the command from an id in ``state`` (bound to a device
        or not, of ``qp_type`` if known), else the errno: the device first, then the state,
        then the QP type (each EINVAL where the kernel's order could tell them apart)."""
        if self.device and not device:
            return errno.EINVAL
        if state not in self.states:
            return self.errno
        if self.qp_types is not None and qp_type is not None and qp_type not in self.qp_types:
            return errno.EINVAL
        return 0


def _but(*states: RdmaCmState) -> FrozenSet[RdmaCmState]:
    return ANY - frozenset(states)


def _of(*states: RdmaCmState) -> FrozenSet[RdmaCmState]:
    return frozenset(states)


EINVAL = errno.EINVAL
_RC = frozenset((int(QpType.RC),))
_RC_XRC_INI = frozenset((int(QpType.RC), int(QpType.XRC_INI)))
_UD = frozenset((int(QpType.UD),))
#: where an id that connected, or is a request, or listens on a device, holds an IB CM id
_CM_ID = _of(S.LISTEN, S.CONNECT, S.DISCONNECT)

#: Every rule, command by command.  Checked against the lab's 6.1 and 7.2 (bookworm, sid) by
#: tests/kernel/test_kernel_rules_lab.py; the versions before them are the kernel source's
#: (the rules below hold since the 5.10 rework of the ucma/cma locking, which is the oldest
#: kernel of the lab).
RULES: Tuple[Rule, ...] = (
    # addresses
    Rule(C.BIND_IP, "", _of(S.IDLE), EINVAL, "cma.c:rdma_bind_addr (cma_comp_exch IDLE -> ADDR_BOUND; "
         "rdma_bind_addr_dst from 6.3)"),
    Rule(C.BIND, "", _of(S.IDLE), EINVAL, "cma.c:rdma_bind_addr (cma_comp_exch IDLE -> ADDR_BOUND; "
         "rdma_bind_addr_dst from 6.3)"),
    Rule(C.RESOLVE_IP, "", _of(S.IDLE, S.ADDR_BOUND), EINVAL,
         "cma.c:rdma_resolve_addr (cma_bind_addr from IDLE, then cma_comp_exch ADDR_BOUND -> ADDR_QUERY; "
         "resolve_prepare_src from 6.3)"),
    Rule(C.RESOLVE_ADDR, "", _of(S.IDLE, S.ADDR_BOUND), EINVAL,
         "cma.c:rdma_resolve_addr (cma_bind_addr from IDLE, then cma_comp_exch ADDR_BOUND -> ADDR_QUERY; "
         "resolve_prepare_src from 6.3)"),
    Rule(C.RESOLVE_IB_SERVICE, "", _of(S.ADDR_BOUND), EINVAL,
         "cma.c:rdma_resolve_ib_service (cma_comp_exch ADDR_BOUND -> ADDRINFO_QUERY, before the SA check's "
         "EOPNOTSUPP)", device=True, since=(6, 17)),
    # routes
    Rule(C.RESOLVE_ROUTE, "", _of(S.ADDR_RESOLVED), EINVAL,
         "cma.c:rdma_resolve_route (cma_comp_exch ADDR_RESOLVED -> ROUTE_QUERY)", device=True, before=(6, 17)),
    Rule(C.RESOLVE_ROUTE, "", _of(S.ADDR_RESOLVED, S.ADDRINFO_RESOLVED), EINVAL,
         "cma.c:rdma_resolve_route (ADDR_RESOLVED or ADDRINFO_RESOLVED -> ROUTE_QUERY)", device=True,
         since=(6, 17)),
    # timeout_ms 0: 5.10 takes it on a resolved id (a RoCE route needs no query to time);
    # 6.1, 6.12 and 7.2 refuse it in every state (the lab has no kernel in between)
    Rule(C.RESOLVE_ROUTE, "timeout 0", _of(S.ADDR_RESOLVED), EINVAL,
         "cma.c:rdma_resolve_route (no check of timeout_ms)", device=True, before=(6, 1)),
    Rule(C.RESOLVE_ROUTE, "timeout 0", frozenset(), EINVAL,
         "cma.c:rdma_resolve_route (timeout_ms 0 refused)", device=True, since=(6, 1)),
    Rule(C.SET_OPTION, "IB_PATH", _of(S.ADDR_RESOLVED), EINVAL,
         "cma.c:rdma_set_ib_path (cma_comp_exch ADDR_RESOLVED -> ROUTE_RESOLVED)", device=True),
    # connections
    Rule(C.CONNECT, "", _of(S.ROUTE_RESOLVED), EINVAL,
         "cma.c:rdma_connect_locked (cma_comp_exch ROUTE_RESOLVED -> CONNECT; rdma_connect on 5.10)", device=True),
    Rule(C.LISTEN, "", _of(S.IDLE, S.ADDR_BOUND), EINVAL,
         "cma.c:rdma_listen (binds an IDLE id, then cma_comp_exch ADDR_BOUND -> LISTEN)"),
    Rule(C.ACCEPT, "", _of(S.CONNECT), EINVAL, "cma.c:rdma_accept (state CONNECT; then the IB CM: "
         "ib_send_cm_rep in REQ_RCVD, ib_send_cm_rtu in REP_RCVD)", device=True),
    Rule(C.REJECT, "", _of(S.CONNECT), EINVAL, "cma.c:rdma_reject (an IB CM id), cm.c:cm_send_rej_locked "
         "(REQ and REP states only: a listener's or a disconnecting id's IB CM id refuses)", device=True),
    Rule(C.NOTIFY, "", _of(S.CONNECT), EINVAL, "cma.c:rdma_notify (an IB CM id), cm.c:cm_establish / cm_migrate "
         "(REP_SENT or ESTABLISHED)", device=True),
    Rule(C.DISCONNECT, "", _CM_ID, EINVAL, "cma.c:rdma_disconnect (any IB CM id, a device-bound listener's "
         "included: it sends a DREQ, else the DREP, else nothing, and answers 0)", device=True),
    Rule(C.INIT_QP_ATTR, "", ANY, EINVAL, "ucma.c:ucma_init_qp_attr (ucma_get_ctx_dev); then "
         "cma.c:rdma_init_qp_attr (no state: a connection's IB CM id rules, cm.c:ib_cm_init_qp_attr)",
         device=True),
    # multicast
    Rule(C.JOIN_IP_MCAST, "", _of(S.ADDR_BOUND, S.ADDR_RESOLVED), EINVAL,
         "cma.c:rdma_join_multicast (ADDR_BOUND or ADDR_RESOLVED, UD ids)", device=True, qp_types=_UD),
    Rule(C.JOIN_MCAST, "", _of(S.ADDR_BOUND, S.ADDR_RESOLVED), EINVAL,
         "cma.c:rdma_join_multicast (ADDR_BOUND or ADDR_RESOLVED, UD ids)", device=True, qp_types=_UD),
    # options (ucma_set_option_id)
    Rule(C.SET_OPTION, "TOS", ANY, EINVAL, "cma.c:rdma_set_service_type (any state; the route takes it)"),
    Rule(C.SET_OPTION, "REUSEADDR set", _but(S.LISTEN), EINVAL,
         "cma.c:rdma_set_reuseaddr (a non-zero value anywhere but LISTEN)"),
    Rule(C.SET_OPTION, "REUSEADDR clear", _of(S.IDLE), EINVAL, "cma.c:rdma_set_reuseaddr (zero in IDLE only)"),
    Rule(C.SET_OPTION, "AFONLY", _of(S.IDLE, S.ADDR_BOUND), EINVAL, "cma.c:rdma_set_afonly (IDLE or ADDR_BOUND)"),
    Rule(C.SET_OPTION, "ACK_TIMEOUT", ANY, EINVAL, "cma.c:rdma_set_ack_timeout (RC and XRC_INI ids, any state)",
         qp_types=_RC_XRC_INI),
)

#: The forms of SET_OPTION the table rules on, by (level, optname).
_OPTION_FORMS: Mapping[Tuple[int, int], str] = {(0, 0): "TOS", (0, 1): "REUSEADDR", (0, 2): "AFONLY",
                                                (0, 3): "ACK_TIMEOUT", (1, 1): "IB_PATH"}


def option_form(level: int, optname: int, value: int = 1) -> str:
    """The form of a SET_OPTION of ``level`` and ``optname`` (with the int ``value``, where it
    matters: REUSEADDR's setting and clearing are two rules), "" for an option the table has
    no rule of (the kernel answers ENOSYS for those, whatever the state)."""
    form = _OPTION_FORMS.get((level, optname), "")
    if form == "REUSEADDR":
        return "REUSEADDR set" if value else "REUSEADDR clear"
    return form


def _index() -> Dict[Tuple[UserCmCmd, str], List[Rule]]:
    out: Dict[Tuple[UserCmCmd, str], List[Rule]] = {}
    for r in RULES:
        out.setdefault((r.command, r.form), []).append(r)
    return out


_BY_KEY = _index()


def rules_of(command: UserCmCmd, form: str = "") -> Sequence[Rule]:
    """Every rule of ``command`` in ``form``, all kernel versions (empty: taken in every state)."""
    return _BY_KEY.get((command, form), [])


def rule_for(command: UserCmCmd, form: str = "", version: Version = NEWEST) -> Optional[Rule]:
    """The rule of ``command`` (``form``) on a kernel of ``version``, or None: no state rule."""
    for r in rules_of(command, form):
        if r.holds_on(version):
            return r
    return None


def refusal(command: UserCmCmd, state: RdmaCmState, form: str = "", *, device: bool = True,
            qp_type: Optional[int] = None, version: Version = NEWEST) -> int:
    """The errno the kernel of ``version`` answers ``command`` (``form``) on an id in ``state``
    (bound to a device or not, of ``qp_type``), as far as the table decides; 0: the rdma_cm
    layer takes it (the IB CM and the command's fields may still refuse)."""
    r = rule_for(command, form, version)
    return 0 if r is None else r.answer(state, device=device, qp_type=qp_type)


def expect(command: UserCmCmd, state: RdmaCmState, form: str = "", *, device: bool = True,
           qp_type: Optional[int] = None, versions: Iterable[Version] = LAB_KERNELS.values()
           ) -> Union[int, List[Tuple[Version, int]]]:
    """What :func:`refusal` answers, in the shape of the conformance cases' expectations: the
    errno where every kernel answers alike, else its steps by kernel version,
    ``[((0, 0), errno), ((6, 17), other)]`` (over ``versions`` and the versions where a rule
    starts or ends)."""
    edges = {(0, 0)} | set(versions)
    for r in rules_of(command, form):
        edges.add(r.since)
        if r.before is not None:
            edges.add(r.before)
    steps: List[Tuple[Version, int]] = []
    for v in sorted(edges):
        err = refusal(command, state, form, device=device, qp_type=qp_type, version=v)
        if not steps or steps[-1][1] != err:
            steps.append((v, err))
    return steps[0][1] if len(steps) == 1 else steps


# -- the network changing under live ids -------------------------------------------------------

class NetChange(NamedTuple):
    """What the kernel tells live ids when the network changes under them: after a ``change``
    ("neighbour": a neighbour's hardware address changes; "device": an RDMA device is
    deleted), the ids that are ``told`` (see
    :data:`NET_CHANGES`) get ``event`` with ``status``, on kernels from ``since``; ``where``
    names the kernel's code."""

    change: str
    told: str
    event: CmEventType
    status: int
    since: Version
    where: str


NET_CHANGES: Tuple[NetChange, ...] = (
    # measured on 6.1, 6.12 and 7.2 (5.10: nothing): ids routed to the gateway in ROUTE_RESOLVED
    # and in CONNECT got it, once per change (two changes in quick succession: twice); one
    # resolved only (ADDR_RESOLVED), one routed through the gateway to a further address and
    # one routed to the host's own address did not; no state moved.  An established connection
    # between two hosts: the end whose neighbour entry changed got it, the other nothing
    NetChange("neighbour", "ids whose route was resolved to the neighbour's very address over its netdev, "
              "while the hardware address they hold differs from the new one",
              CmEventType.UNREACHABLE, -errno.ETIMEDOUT, (6, 0),
              "cma.c:cma_netevent_callback (NETEVENT_NEIGH_UPDATE) -> cma_netevent_work_handler"),
    # measured on 5.10, 6.1, 6.12 and 7.2 (rdma link delete of a Soft-RoCE device): bound, listening,
    # resolved, routed and connecting ids on it got it, ids on no device (a wildcard bind or
    # listener) did not; RDMA netlink lists none of them after, and their next command but
    # DESTROY_ID answers ENXIO (ucma_get_ctx: the context is closing)
    NetChange("device", "ids attached to the device", CmEventType.DEVICE_REMOVAL, 0, (0, 0),
              "cma.c:cma_process_remove -> cma_send_device_removal_put; ucma.c:ucma_removal_event_handler"),
)


def net_change(change: str, version: Version = NEWEST) -> Optional[NetChange]:
    """What a kernel of ``version`` tells live ids after ``change``; None: nothing."""
    for c in NET_CHANGES:
        if c.change == change and version >= c.since:
            return c
    return None
