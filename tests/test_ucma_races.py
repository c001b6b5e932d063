"""The races machine's parts without a kernel (tests/ucma_races.py): the writes really meet,
a write that never returns is reported, and the oracle accepts exactly the answers of some
serial order the model allows."""

import errno
import threading

import ucma_world as um
from ucma_races import Op, after, race, serial_orders
from ucma_world import S, World


def test_the_writes_of_a_race_run_at_once():
    # each write waits for the other to have started: they finish only if they overlap
    started = [threading.Event(), threading.Event()]

    def write(i):
        started[i].set()
        return 0 if started[1 - i].wait(5) else errno.ETIMEDOUT

    assert race(lambda: write(0), lambda: write(1), timeout=10) == [0, 0]


def test_a_write_that_never_returns_is_reported_not_waited_for():
    never = threading.Event()
    answers = race(lambda: 0, lambda: 1 if never.wait(30) else 2, timeout=0.2)
    never.set()
    assert answers == [0, None]


def _resolved_id():
    w = World(state=S.ADDR_RESOLVED, dev=True, fam=2, addr="local", dst="local")
    return um.IdModel("h", 1, 0, 1, um.PS.TCP, um.QP.RC, {w}), w


def _ops(m, entry=bytes(64)):
    set_path = Op("SET_IB_PATH", 0, lambda: 0, "", lambda w: um.ib_path_outcomes(m, w, entry))
    migrate = Op("MIGRATE_ID", 1, lambda: 0, "")
    return set_path, migrate


def test_set_ib_path_racing_migrate_is_judged_by_both_orders():
    m, w = _resolved_id()
    ops = list(_ops(m))
    start = (frozenset({w}), 0, True)
    # set first: the route is set and its event moves with the id to ch 1
    (worlds, ch, alive), = [k for ks in serial_orders(ops, [0, 0], start, 0).values() for k in ks]
    assert ch == 1 and alive and {x.state for x in worlds} == {S.ROUTE_RESOLVED}
    assert all(x.q[-1][0] == "ROUTE_RESOLVED" for x in worlds)
    # migrate first: the id is no longer on ch 0, which the SET_OPTION was written on
    orders = serial_orders(ops, [errno.EINVAL, 0], start, 0)
    assert orders["SET_IB_PATH then MIGRATE_ID"] == [] and orders["MIGRATE_ID then SET_IB_PATH"] == [
        (frozenset({w}), 1, True)]
    # no serial order lets the migration fail while the id lives on its fd
    assert not any(serial_orders(ops, [0, errno.EINVAL], start, 0).values())


def test_destroy_racing_a_command_leaves_no_id_either_way():
    m, w = _resolved_id()
    set_path, _ = _ops(m)
    destroy = Op("DESTROY_ID", 0, lambda: 0, "")
    start = (frozenset({w}), 0, True)
    for errs in ([0, 0], [errno.ENOENT, 0]):
        ends = [k for ks in serial_orders([set_path, destroy], errs, start, 0).values() for k in ks]
        assert ends and all(not alive for _, _, alive in ends)
    assert not any(serial_orders([set_path, destroy], [0, errno.ENOENT], start, 0).values())


def test_a_check_before_the_id_answers_whatever_the_order():
    m, w = _resolved_id()
    write = Op("WRITE_CM_EVENT", 0, lambda: 0, "", lambda x: um.write_event_outcomes(m, x, 18, 0), errno.EINVAL)
    assert after(write, errno.EINVAL, (frozenset({w}), 0, True), 0) == [(frozenset({w}), 0, True)]
    assert after(write, 0, (frozenset({w}), 0, True), 0) == []
