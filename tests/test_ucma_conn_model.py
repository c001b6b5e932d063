"""The connection half of the fuzzer's model (tests/ucma_conn_model.py) without a kernel: what
each end's going, rejecting or disconnecting makes the other end owe, and how events read
are judged.  The machine runs against the real kernel in tests/kernel/test_fuzz_conn_lab.py."""

import pytest

import ucma_conn_model as cm
from ucma_conn_model import Cid, ConnMachine, K
from ucma_world import Disagreement


class _Chan:
    """Stands in for a Raw channel: ACCEPT and REJECT answer ``answer``, the others 0; replies
    read zero."""

    def __init__(self, answer=0):
        self.answer = answer

    def send(self, name, fields, out=None):
        return self.answer if name in ("ACCEPT", "REJECT") else 0

    def reply_of(self, name):
        return {"events_reported": 0, "id": 0}

    @property
    def reply(self):
        return self

    def clear(self):
        pass


def _machine(answer=0):
    m = object.__new__(ConnMachine)
    m.chans, m.ids, m.counter, m.script, m.version = [_Chan(answer), _Chan(answer)], [], 0, [], (6, 1)
    m.host_of = [0, 0]
    return m


def _pair(m, a_cm, p_cm, p_uid=0x2001):
    a = Cid("h1", 1, 0, 0x1001, "active", K.CONNECT, a_cm, port=cm.PORTS[0])
    p = Cid("p2", 2, 1, p_uid, "passive", K.CONNECT, p_cm, peer=a)
    a.peer = p
    m.ids += [a, p]
    return a, p


@pytest.mark.parametrize("gone,a_cm,p_cm,owes", [
    ("a", "est", "est", ("p", "DISCONNECTED", {0})),  # a DREQ
    ("p", "est", "est", ("a", "DISCONNECTED", {0})),
    ("a", "rep_rcvd", "rep_sent", ("p", "REJECTED", {28})),  # no RTU yet: REJ 28
    ("p", "rep_rcvd", "rep_sent", ("a", "REJECTED", {28})),
    ("p", "req_sent", "req_rcvd", ("a", "REJECTED", {28})),  # an unanswered request
    ("a", "req_sent", "req_rcvd", None),  # REJ 4 to a request's id of uid 0: nothing is queued
    ("a", "dreq_rcvd", "dreq_sent", ("p", "DISCONNECTED", {0})),  # the DREP
    ("a", "dreq_sent", "dreq_rcvd", None),  # the peer has its DREQ already
])
def test_an_end_going_away_is_what_its_peer_sees(gone, a_cm, p_cm, owes):
    m = _machine()
    a, p = _pair(m, a_cm, p_cm, p_uid=0 if p_cm == "req_rcvd" else 0x2001)
    if a_cm == "dreq_sent":
        p.disc = True  # its DISCONNECTED was owed when the DREQ came
    m._destroy(a if gone == "a" else p)
    other = p if gone == "a" else a
    got = [(o[0], set(o[1])) for o in other.owed]
    assert got == ([] if owes is None else [(owes[1], owes[2])])
    assert other.peer is None
    if a_cm == "req_sent" and gone == "a":  # its REJ 4 reaches the request's id, in its own time
        assert p.cm == "rej_coming"


def test_a_rej_before_any_answer_leaves_the_request_an_orphan_that_may_still_answer():
    """Found by the first campaigns on 5.10 and 7.2 (a model bug): REJECT by the active end in
    REQ_SENT, then REJECT (or ACCEPT) of its request's id: the kernel takes it."""
    m = _machine()
    a, p = _pair(m, "req_sent", "req_rcvd", p_uid=0)
    assert cm.rejected_by(m.ids, a, 28)
    assert a.cm == "idle" and p.cm == "req_rcvd" and p.peer is None and a.peer is None
    m._reject(p, 35)
    assert p.cm == "idle" and not a.owed


@pytest.mark.parametrize("a_cm,p_cm,end", [("req_sent", "req_rcvd", "a"), ("rep_rcvd", "rep_sent", "p")])
def test_the_calls_that_trigger_a_recorded_kernel_bug_are_left_out_and_counted(monkeypatch, a_cm, p_cm, end):
    """REJECT or ACCEPT on an active id in REQ_SENT, or on a request's id in REP_SENT, makes its
    destroy wait 68-102 s on every kernel tried (conformance.bugs: rej_in_req_sent_keeps_the_req,
    rej_in_rep_sent_keeps_the_rep): the machine does not send them."""
    m = _machine(answer=99)  # a command sent would answer an errno nothing expects
    monkeypatch.setattr(ConnMachine, "stats", {"sequences": 0, "commands": 0, "errnos": cm.collections.Counter(),
                                               "events": cm.collections.Counter()})
    a, p = _pair(m, a_cm, p_cm, p_uid=0 if p_cm == "req_rcvd" else 0x2001)
    c = a if end == "a" else p
    m._reject(c, 0)
    m._accept(c, 1)
    m._accept(c, 0)
    assert (a.cm, p.cm) == (a_cm, p_cm) and len(m.script) == 3
    assert all("left out: kernel bug %s" % cm.LEFT_OUT[c.cm] in line for line in m.script)
    assert sum(n for (_, what), n in ConnMachine.stats["errnos"].items() if what.startswith("left out")) == 3


def test_a_listener_gone_with_a_request_on_its_way_lets_the_request_end_either_way():
    m = _machine()
    lst = Cid("h1", 1, 0, 0x1001, "listener", K.LISTEN, port=cm.PORTS[0])
    a = Cid("h2", 2, 0, 0x1002, "active", K.CONNECT, "req_sent", port=cm.PORTS[0], qpn=0x100002)
    lst.coming[a.qpn] = a
    a.owed = []
    m.ids += [lst, a]
    m._destroy(lst)
    assert a.may == {"REJECTED": frozenset({8, 28})} and not a.owed  # REJ 8 after it went, 28 with it


def test_the_rtu_makes_the_passive_end_owe_established_and_a_second_accept_rejects():
    m = _machine()
    a, p = _pair(m, "rep_rcvd", "rep_sent")
    m._accept(a, 0)
    assert a.cm == p.cm == "est" and [o[0] for o in p.owed] == ["ESTABLISHED"]
    # ACCEPT on a passive end whose REP is out: EINVAL, and a REJ 28 (the model's rule; the
    # machine leaves the call out, conformance.bugs: rej_in_rep_sent_keeps_the_rep)
    m2 = _machine()
    a2, p2 = _pair(m2, "rep_rcvd", "rep_sent")
    assert cm.accepted(m2.ids, p2, 1, 0x200099, 0x2099) == cm.EINVAL
    assert [(o[0], set(o[1])) for o in a2.owed] == [("REJECTED", {28})] and a2.cm == p2.cm == "idle"


def test_crossing_disconnects_give_each_end_one_disconnected():
    m = _machine()
    a, p = _pair(m, "est", "est")

    class _D:
        def draw(self, strategy, label=None):
            return a if label == "connection" else True

    m.disconnect_both(_D())
    assert [o[0] for o in a.owed] == [o[0] for o in p.owed] == ["DISCONNECTED"]


def test_an_event_is_judged_against_what_is_owed_then_what_may_come():
    m = _machine()
    a, p = _pair(m, "rep_rcvd", "rep_sent")
    cm.owe(a, "CONNECT_RESPONSE", frozenset({0}), 0x200005)
    with pytest.raises(Disagreement, match="carries qp_num 0x200006"):
        m._take(a, "CONNECT_RESPONSE", 0, 0x200006)
    m._take(a, "CONNECT_RESPONSE", 0, 0x200005)
    assert not a.owed and a.read == 1
    with pytest.raises(Disagreement, match="does not expect"):
        m._take(a, "DISCONNECTED", 0, 0)
    a.may["TIMEWAIT_EXIT"] = frozenset({0})
    m._take(a, "TIMEWAIT_EXIT", 0, 0)
    assert "TIMEWAIT_EXIT" not in a.may


def test_an_id_of_uid_0_owes_nothing():
    c = Cid("p1", 1, 0, 0, "passive", K.CONNECT, "req_rcvd")
    cm.owe(c, "REJECTED", frozenset({28}))
    assert c.owed == []


def test_the_machine_has_the_crossing_rules_of_its_mixin():
    import inspect

    from hypothesis.stateful import RULE_MARKER

    rules = {name for name, f in inspect.getmembers(ConnMachine) if getattr(f, RULE_MARKER, None) is not None}
    assert {"disconnect_both", "destroy_both", "connect_then_destroy_listener", "establish_then_destroy_passive",
            "migrate", "handshake", "progress", "listen", "prepare", "destroy", "close_channel"} <= rules


@pytest.mark.parametrize("answer", [0, cm.EINVAL])
def test_a_destroy_in_req_sent_sends_a_rej_that_reaches_the_request_in_its_own_time(answer):
    """Found by the 30-minute campaigns on 5.10 and 7.2 (seed 20261331; a model bug): the REJ 4
    of a DESTROY in REQ_SENT, unlike REJECT's, finds the request's id (cm_acquire_rejected_id
    looks a TIMEOUT up by the sender's comm id), which goes idle when it arrives: an answer
    written before that is taken, one after is refused."""
    m = _machine(answer=answer)
    a, p = _pair(m, "req_sent", "req_rcvd", p_uid=0)
    m._destroy(a)
    assert p.cm == "rej_coming" and p.peer is None
    m._reject(p, 28)  # the channel answers `answer`: both are the model's
    assert p.cm == "idle"
