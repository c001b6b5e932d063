"""The kernel's rules as data (pyrdmacm.kernel_rules, the IB CM's in pyrdmacm.testing._ibcm):
the tables hold together, and the fakes answer as they say -- the same matrix of commands and
states that tests/kernel/test_kernel_rules_lab.py checks the tables with on the lab's kernels
(tests/rules_matrix.py), here on a fake fabric's host that has the lab's address."""

from __future__ import annotations

import errno
from typing import Iterator

import pytest

import rules_matrix as rm
from pyrdmacm import abi, kernel_rules, netlink
from pyrdmacm.testing import FakeFabric, FakeKernel
from pyrdmacm.testing import _ibcm
from pyrdmacm.testing._ibcm import CmInput, IbCmId, IbCmState

K = abi.RdmaCmState
C = abi.UserCmCmd


def test_rdma_cm_state_is_the_kernels_one_enum():
    """``enum rdma_cm_state`` in the kernel's order (include/rdma/rdma_cm.h; cma_priv.h before),
    the names RDMA netlink reports; netlink's name for it is the same enum."""
    assert [s.name for s in K] == ["IDLE", "ADDR_QUERY", "ADDR_RESOLVED", "ROUTE_QUERY", "ROUTE_RESOLVED", "CONNECT",
                                   "DISCONNECT", "ADDR_BOUND", "LISTEN", "DEVICE_REMOVAL", "DESTROYING",
                                   "ADDRINFO_QUERY", "ADDRINFO_RESOLVED"]
    assert [int(s) for s in K] == list(range(13))
    assert netlink.CmIdState is K


def test_every_rule_names_where_the_kernel_enforces_it_and_holds_on_a_lab_kernel():
    for r in kernel_rules.RULES:
        assert r.where.startswith(("cma.c:", "ucma.c:")), r
        assert r.errno and (r.states or r.form), r  # a form may be refused in every state
        assert any(r.holds_on(v) for v in kernel_rules.LAB_KERNELS.values()), r
    # a command's rules by version never overlap
    for r in kernel_rules.RULES:
        for v in kernel_rules.LAB_KERNELS.values():
            assert sum(o.holds_on(v) for o in kernel_rules.rules_of(r.command, r.form)) <= 1


def test_the_disputed_rules_say_what_the_lab_kernels_said():
    """The rules the copies disagreed on, as the lab's 6.1 and 7.2 answered them."""
    refusal = kernel_rules.refusal
    # REUSEADDR: set anywhere but LISTEN, cleared in IDLE only (not "IDLE only", not "any time")
    assert [s for s in K if refusal(C.SET_OPTION, s, "REUSEADDR set")] == [K.LISTEN]
    assert [s for s in K if not refusal(C.SET_OPTION, s, "REUSEADDR clear")] == [K.IDLE]
    # ACCEPT, REJECT, DISCONNECT on a fresh id: EINVAL (no device), not ENOSYS
    for command in (C.ACCEPT, C.REJECT, C.DISCONNECT):
        assert refusal(command, K.IDLE, device=False) == errno.EINVAL
    # a listener on a device disconnects (its IB CM id), one on a wildcard has no device
    assert refusal(C.DISCONNECT, K.LISTEN) == 0 and refusal(C.DISCONNECT, K.LISTEN, device=False) == errno.EINVAL
    # ACK_TIMEOUT: RC and XRC_INI ids
    assert [q for q in abi.QpType if not refusal(C.SET_OPTION, K.IDLE, "ACK_TIMEOUT", qp_type=q)] == [
        abi.QpType.RC, abi.QpType.XRC_INI]
    assert kernel_rules.ANOTHER_FDS_ID == errno.EINVAL and kernel_rules.UNKNOWN_ID == errno.ENOENT


def test_rules_by_version():
    assert kernel_rules.refusal(C.RESOLVE_ROUTE, K.ADDRINFO_RESOLVED, version=(6, 12)) == errno.EINVAL
    assert kernel_rules.refusal(C.RESOLVE_ROUTE, K.ADDRINFO_RESOLVED, version=(6, 17)) == 0
    assert kernel_rules.rule_for(C.RESOLVE_IB_SERVICE, version=(6, 1)) is None
    assert kernel_rules.expect(C.RESOLVE_ROUTE, K.ADDRINFO_RESOLVED) == [((0, 0), errno.EINVAL), ((6, 17), 0)]
    assert kernel_rules.expect(C.LISTEN, K.CONNECT) == errno.EINVAL
    assert kernel_rules.option_form(0, 1, 0) == "REUSEADDR clear" and kernel_rules.option_form(1, 1) == "IB_PATH"
    assert kernel_rules.option_form(0, 9) == ""


# --------------------------------------------------------------------------- the IB CM's table

def test_the_ib_cm_table_names_cm_c_for_every_row():
    assert all(t.where.startswith("cm.c:") for t in _ibcm.TRANSITIONS.values())
    assert set(_ibcm.ON_DESTROY) == set(IbCmState)


def test_a_connection_through_the_ib_cm_table():
    """Both ends of a connection, REQ to TIMEWAIT_EXIT, as the table moves them."""
    active, passive = IbCmId(), IbCmId()
    steps = [(active, CmInput.SEND_REQ, IbCmState.REQ_SENT), (passive, CmInput.RECV_REQ, IbCmState.REQ_RCVD),
             (passive, CmInput.SEND_REP, IbCmState.REP_SENT), (active, CmInput.RECV_REP, IbCmState.REP_RCVD),
             (active, CmInput.SEND_RTU, IbCmState.ESTABLISHED), (passive, CmInput.RECV_RTU, IbCmState.ESTABLISHED),
             (active, CmInput.SEND_DREQ, IbCmState.DREQ_SENT), (passive, CmInput.RECV_DREQ, IbCmState.DREQ_RCVD),
             (passive, CmInput.SEND_DREP, IbCmState.TIMEWAIT), (active, CmInput.RECV_DREP, IbCmState.TIMEWAIT),
             (active, CmInput.TIMEWAIT_EXIT, IbCmState.IDLE)]
    for end, what, new in steps:
        assert end.move(what) is new, (what, end.state)
    assert passive.refusal(CmInput.SEND_REJ) == errno.EINVAL  # a REJ after the handshake
    est = IbCmId(IbCmState.ESTABLISHED)
    assert est.refusal(CmInput.ESTABLISH) == errno.EISCONN and est.move(CmInput.RECV_REJ) is None


# --------------------------------------------------------------------------- the fakes against the matrix

@pytest.fixture(scope="module")
def lab_host() -> Iterator[object]:
    """A fabric's host with the lab's address (the matrix's states are the lab's)."""
    with FakeFabric() as fabric:
        yield fabric.host(rm.LOCAL)


@pytest.mark.parametrize("probe,ps", sorted(rm.PLAN), ids=["%s %s" % (p, rm.PS(ps).name) for p, ps in sorted(rm.PLAN)])
def test_the_fabric_answers_as_the_tables_say(lab_host, probe, ps):
    wrong = []
    for state in rm.PLAN[(probe, ps)]:
        want = rm.outcome_text(rm.expected(probe, state, ps, kernel_rules.NEWEST))
        seen = rm.observe(state, probe, ps, device=lab_host())
        if seen != want:
            wrong.append("%s in %s: the fake %s, the tables %s" % (probe, state, seen, want))
    assert not wrong, "\n".join(wrong)


LONE_STATES = [s for s in rm.PLAIN if "CONNECT" not in s]


@pytest.mark.parametrize("probe,ps", sorted(rm.PLAN), ids=["%s %s" % (p, rm.PS(ps).name) for p, ps in sorted(rm.PLAN)])
def test_the_lone_fake_answers_as_the_tables_say(probe, ps):
    """The lone fake, in the states it reaches without a peer (its CONNECT is always rejected)."""
    from pyrdmacm.testing import FakeNet
    from pyrdmacm.testing.fake_net import FakeDevice

    net = FakeNet(local={rm.LOCAL: FakeDevice()}, peers=set(), no_route=set(), default_src={4: rm.LOCAL})
    wrong = []
    for state in [s for s in rm.PLAN[(probe, ps)] if s in LONE_STATES]:
        want = rm.outcome_text(rm.expected(probe, state, ps, kernel_rules.NEWEST))
        seen = rm.observe(state, probe, ps, device=FakeKernel(net))
        if seen != want:
            wrong.append("%s in %s: the fake %s, the tables %s" % (probe, state, seen, want))
    assert not wrong, "\n".join(wrong)


# --------------------------------------------------------------------------- the library's table

#: the library's calls whose legality the rdma_cm's table decides alone, by command (and form):
#: no IB CM state and no device or QP type the library's states leave open
RDMA_CM_DECIDES = {"bind_addr": (C.BIND, ""), "resolve_addr": (C.RESOLVE_ADDR, ""),
                   "resolve_ib_service": (C.RESOLVE_IB_SERVICE, ""), "resolve_route": (C.RESOLVE_ROUTE, ""),
                   "connect": (C.CONNECT, ""), "listen": (C.LISTEN, ""), "set_tos": (C.SET_OPTION, "TOS"),
                   "set_afonly": (C.SET_OPTION, "AFONLY"), "set_ib_path": (C.SET_OPTION, "IB_PATH"),
                   "join_multicast": (C.JOIN_MCAST, "")}


@pytest.mark.parametrize("call", sorted(RDMA_CM_DECIDES))
def test_the_librarys_table_takes_these_calls_where_the_kernel_does(call):
    """pyrdmacm.state's table (the library's finer states, mapped by KERNEL_STATE) takes each of
    these calls exactly where the kernel's rules do, for every kind of id (its QP type: RC for
    connected ids, UD for datagram ones), on the newest of the lab's kernels."""
    from pyrdmacm import state

    command, form = RDMA_CM_DECIDES[call]
    qp = {state.Kind.CONNECTED: abi.QpType.RC, state.Kind.DATAGRAM: abi.QpType.UD}
    differ = []
    for kind in state.Kind:
        for st in state.State:
            if st is state.State.DESTROYED:
                continue
            library = state.next_state(kind, st, state.Call(call)) is not None
            kernel = kernel_rules.refusal(command, K[state.KERNEL_STATE[st]], form, qp_type=qp[kind]) == 0
            if library != kernel:
                differ.append("%s %s: library %s, kernel %s" % (kind.name, st.name, library, kernel))
    assert not differ, differ
