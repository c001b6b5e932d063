"""The fuzzer's model (tests/ucma_world.py) without a kernel: worlds, matching netlink's
states, port conflicts and the documented answers it allows."""

import errno

import ucma_id_steps as steps
import ucma_world as um
from ucma_view import match_states
from ucma_world import S, World


def _id(ps=um.PS.TCP, qp=um.QP.RC, worlds=None, uid=1):
    return um.IdModel("h", 1, 0, uid, ps, qp, worlds or {World()})


def test_work_in_flight_may_or_may_not_have_completed():
    m = _id()
    (err, w), = um.resolve_outcomes(m, World(), steps.DSTS["local"], None, [])
    assert err == 0 and w.state is S.ADDR_QUERY
    m.worlds = {w}
    states = {(x.state, x.q[0][0] if x.q else None) for x in m.possible()}
    assert states == {(S.ADDR_QUERY, None), (S.ADDR_RESOLVED, "ADDR_RESOLVED")}


def test_an_id_of_uid_0_gets_no_event():
    m = _id(uid=0)
    (_, w), = um.resolve_outcomes(m, World(), steps.DSTS["local"], None, [])
    m.worlds = {w}
    assert all(not x.q for x in m.possible())


def test_resolve_refused_outside_idle_and_addr_bound():
    for st in (S.ADDR_QUERY, S.ADDR_RESOLVED, S.ROUTE_RESOLVED, S.LISTEN, S.CONNECT):
        assert um.resolve_outcomes(_id(), World(state=st, dev=True, fam=2), steps.DSTS["local"], None, []) == \
            [(errno.EINVAL, World(state=st, dev=True, fam=2))]


def test_family_mismatch_leaves_the_id_bound():
    (err, w), = um.resolve_outcomes(_id(), World(), steps.DSTS["local6"], steps.ADDRS["local"], [])
    assert err == errno.EINVAL and w.state is S.ADDR_BOUND and w.dev


def test_port_conflicts_follow_cma_check_port():
    holder = _id(worlds={World(state=S.ADDR_BOUND, fam=2, addr="local", port=um.FIXED_PORT, dev=True)})
    me = _id()
    assert um.port_conflicts(me, World(), 2, "local", [holder]) == {errno.EADDRINUSE}
    assert um.port_conflicts(me, World(), 2, "any", [holder]) == {errno.EADDRNOTAVAIL}
    assert um.port_conflicts(_id(ps=um.PS.UDP), World(), 2, "local", [holder]) == {0}  # its own port space
    both = World(reuse=True)
    holder.worlds = {w.but(reuse=True) for w in holder.worlds}
    assert um.port_conflicts(me, both, 2, "local", [holder]) == {0}
    assert um.port_conflicts(me, both, 2, "local", [holder], for_listen=True) == {errno.EADDRINUSE}


def test_reuseaddr_rules():
    m = _id()
    assert um.option_outcomes(m, World(), 0, 1, 4, 0)[0][0] == 0  # clearing in IDLE
    assert um.option_outcomes(m, World(state=S.ADDR_BOUND), 0, 1, 4, 0)[0][0] == errno.EINVAL
    assert um.option_outcomes(m, World(state=S.ADDR_BOUND), 0, 1, 4, 1)[0][0] == 0
    assert um.option_outcomes(m, World(state=S.LISTEN), 0, 1, 4, 1)[0][0] == errno.EINVAL
    assert um.option_outcomes(_id(qp=um.QP.UD), World(), 0, 3, 1, 1)[0][0] == errno.EINVAL  # ACK_TIMEOUT: RC only


def test_matching_netlink():
    assert match_states([[("ADDR_BOUND",), ()], [("LISTEN",)]], ["ADDR_BOUND", "LISTEN"])
    assert match_states([[("ADDR_BOUND",), ()], [("LISTEN",)]], ["LISTEN"])
    assert not match_states([[("ADDR_BOUND",)]], [])
    assert not match_states([[()]], ["CONNECT"])


def test_connect_refused_ends_in_failed_with_rej_8():
    m = _id()
    w = World(state=S.ROUTE_RESOLVED, dev=True, fam=2, addr="any")
    (err, w2), = um.connect_outcomes(m, w, 0)
    assert err == 0 and w2.state is S.CONNECT
    m.worlds = {w2}
    ends = {x for x in m.possible() if x.q}
    assert {(x.state, x.q[0][0], tuple(x.q[0][1])) for x in ends} == {(S.FAILED, "REJECTED", (8,))}
    assert um.connect_outcomes(m, w, 57) == [(errno.EINVAL, w)]  # 36 + 57 > 92


def test_ipoib_resolves_only_through_the_loopback_path():
    m = _id(ps=um.PS.IPOIB, qp=um.QP.UD)
    for dst, event in (("local", "ADDR_ERROR"), ("any", "ADDR_RESOLVED")):
        (_, w), = um.resolve_outcomes(m, World(), steps.DSTS[dst], None, [])
        m.worlds = {w}
        assert {x.q[0][0] for x in m.possible() if x.q} == {event}


def test_af_ib_as_the_lab_answers_it():
    """AF_IB on the lab's RoCE port, as probed on 5.10 and 7.2: a GID binds nothing (ENODEV,
    before the port space), PS_IPOIB has no AF_IB ports, a destination resolves by its GID's
    prefix (none: ENODEV in the write, the id left bound) and has no netdev to route over."""
    tcp, ipoib = _id(), _id(ps=um.PS.IPOIB, qp=um.QP.UD)
    assert um._bind_local(ipoib, World(), steps.ADDRS["ib-gid"], []) == [(errno.ENODEV, World())]
    assert um._bind_local(ipoib, World(), steps.ADDRS["ib-any"], []) == [(errno.EPROTONOSUPPORT, World())]
    (err, w), = um._bind_local(tcp, World(), steps.ADDRS["ib-any:fixed"], [])
    assert err == 0 and (w.state, w.fam, w.addr, w.port, w.dev) == (S.ADDR_BOUND, um.AF_IB, "any", um.FIXED_PORT, False)
    (err, w), = um.resolve_outcomes(tcp, World(), steps.DSTS["ib-nowhere"], None, [])
    assert err == errno.ENODEV and (w.state, w.fam, w.addr) == (S.ADDR_BOUND, um.AF_IB, "any")
    (err, w), = um.resolve_outcomes(tcp, World(), steps.DSTS["ib-gid"], None, [])
    assert err == 0 and w.state is S.ADDR_QUERY and w.dev  # the device attached in the write
    tcp.worlds = {w}
    done = {x for x in tcp.possible() if x.q}
    assert {(x.state, x.dev, x.loop) for x in done} == {(S.ADDR_RESOLVED, True, True)}
    assert um.route_outcomes(tcp, done.pop(), 1000)[0][0] == errno.ENODEV
    holder = _id(worlds={World(state=S.ADDR_BOUND, fam=um.AF_IB, addr="any", port=um.FIXED_PORT)})
    assert um.port_conflicts(_id(), World(), 2, "local", [holder]) == {errno.EADDRNOTAVAIL}
    sid = steps.ADDRS["ib-any:fixed"].for_space(um.PS.UDP).sid
    assert sid == (int(um.PS.UDP) << 16) + um.FIXED_PORT


def test_a_reproducer_is_reduced_to_the_steps_its_last_answer_needs(monkeypatch):
    """reduce_script drops every step whose absence leaves the last command's answer as it was
    (here: LISTEN twice answers EINVAL only after a create and a first LISTEN)."""
    import ucma_model

    header = ["import", "import", "ch = ...", "optval = ..."]
    steps = ["ch[1] = Raw()", "create h2", "ch[0].close()", "ch[0] = Raw()", "listen h2", "ch[0].close()"]
    last = "err = listen h2  # LISTEN -> EINVAL"

    def replay(lines):
        body = lines[len(header):]
        if "create h2" not in body:
            return None  # h2 undefined: the step fails
        return 22 if body.count("listen h2") + body.count(last) == 2 else 0

    monkeypatch.setattr(ucma_model, "_replay", replay)
    reduced = ucma_model.reduce_script(header + steps + [last], budget=5)
    assert reduced == header + ["create h2", "listen h2", last]
    monkeypatch.setattr(ucma_model, "_replay", lambda lines: None)  # does not replay: nothing to offer
    assert ucma_model.reduce_script(header + steps + [last], budget=5) is None


def test_the_models_state_rules_are_the_kernel_rules_table():
    """The model asks pyrdmacm.kernel_rules with a world's kernel state: a failed connection
    is the kernel's CONNECT, and a listener on a device (an IB CM listen id) takes DISCONNECT
    (0, as the lab's kernels answered), a wildcard one has no device (EINVAL)."""
    from pyrdmacm.abi import RdmaCmState as K

    assert um.kernel_state(World(state=S.FAILED)) is K.CONNECT
    assert um.kernel_state(World(state=S.DISCONNECTED)) is K.DISCONNECT
    listening = World(state=S.LISTEN, dev=True, fam=2, addr="local")
    assert um.disconnect_outcomes(_id(), listening) == [(0, listening)]
    assert um.disconnect_outcomes(_id(), listening.but(dev=False, addr="any"))[0][0] == errno.EINVAL
    assert um.disconnect_outcomes(_id(), World(state=S.ROUTE_RESOLVED, dev=True))[0][0] == errno.EINVAL
    # REUSEADDR set in ADDR_RESOLVED, AFONLY refused there (rdma_set_reuseaddr, rdma_set_afonly)
    resolved = World(state=S.ADDR_RESOLVED, dev=True, fam=2)
    assert um.option_outcomes(_id(), resolved, 0, 1, 4, 1) == [(0, resolved.but(reuse=True))]
    assert um.option_outcomes(_id(), resolved, 0, 2, 4, 1)[0][0] == errno.EINVAL
    # ACK_TIMEOUT: RC ids only of the model's QP types
    assert um.option_outcomes(_id(ps=um.PS.IB, qp=um.QP.UC), World(), 0, 3, 1, 1)[0][0] == errno.EINVAL
