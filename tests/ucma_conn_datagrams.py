"""The connection fuzzer's datagram requests (tests/ucma_conn_model.py's machine): UDP's
port space, a datagram id's SIDR REQ to a UDP listener among the machine's own ids, and the
request's id answering it with a SIDR REP that accepts with a QP number or rejects, or not at
all; with no listener on the port, SIDR status 1 at once."""

from __future__ import annotations

import errno
from typing import List

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pyrdmacm import abi
from ucma_conn_ends import CHANNELS, CONN_PARAM as _CONN_PARAM, MAX_IDS, PORTS, Cid, owe, show, sidr_answered
from ucma_world import CLOSED_PORT

C = abi.UserCmCmd
K = abi.RdmaCmState
EINVAL = errno.EINVAL
ETIMEDOUT = errno.ETIMEDOUT


class Datagrams:
    """Rules of :class:`ucma_conn_model.ConnMachine` (a mixin, as
    :class:`ucma_conn_crossing.Crossings`)."""

    ids: List[Cid]
    counter: int

    def _sidr_connect(self, a: Cid) -> None:
        """CONNECT of a datagram id: a SIDR REQ to its port's UDP listener, whose answer (the
        SIDR REP) ends it; with none there, SIDR status 1 (UNSUPPORTED) at once.  Unanswered,
        its retries run out after about a minute (UNREACHABLE, -ETIMEDOUT)."""
        err = self._send(a.ch, "CONNECT", {"id": a.handle, "conn_param.valid": 1, **_CONN_PARAM},
                         note=" (SIDR, to port %d)" % a.port)
        self._expect("CONNECT (SIDR) from %s to port %d" % (show(a), a.port), err, self._table(a, C.CONNECT))
        if err:
            return
        a.state, a.cm = K.CONNECT, "sidr_sent"
        a.may["UNREACHABLE"] = frozenset({-ETIMEDOUT})
        lst = self._listener(a.to, a.port, ud=True)
        if lst is None:
            a.cm = "done"
            owe(a, "UNREACHABLE", frozenset({1}))
        else:
            lst.coming[0] = a  # a SIDR REQ carries no QP number: the event's is 0
            owe(lst, "CONNECT_REQUEST", frozenset({0}))

    def _sidr_answer(self, p: Cid, accept: bool) -> None:
        """ACCEPT (with a QP number) or REJECT (reason 28) of a datagram request's id: the SIDR
        REP, taken once (then the IB CM refuses: EINVAL)."""
        if accept:
            self.counter += 1
            qpn, uid = 0x300000 + self.counter, 0x3000 + self.counter
            err = self._send(p.ch, "ACCEPT", {"id": p.handle, "uid": uid, "conn_param.valid": 1,
                                              "conn_param.qp_num": qpn, **_CONN_PARAM})
        else:
            qpn, uid = 0, 0
            err = self._send(p.ch, "REJECT", {"id": p.handle, "reason": 28})
        want = self._table(p, C.ACCEPT if accept else C.REJECT) or (0 if p.cm == "sidr_rcvd" else EINVAL)
        self._expect("%s on %s" % ("ACCEPT" if accept else "REJECT", show(p)), err, want)
        if not err and p.cm == "sidr_rcvd":
            if accept:
                p.uid = uid
            sidr_answered(self.ids, p, accept, qpn)

    @precondition(lambda self: len(self.ids) < MAX_IDS - 1)
    @rule(ch=st.integers(0, CHANNELS - 1), lch=st.integers(0, CHANNELS - 1),
          port=st.sampled_from(PORTS + (CLOSED_PORT,)), answer=st.sampled_from(["accept", "accept", "reject", "none"]))
    def sidr(self, ch: int, lch: int, port: int, answer: str) -> None:
        """A datagram request (UDP's port space, UD ids): a UDP listener on ``port`` of channel
        ``lch``'s host if none is there (never on CLOSED_PORT), an active datagram id on channel
        ``ch``, its SIDR REQ, and the request's id answered as ``answer`` says (or left for
        ``answer_sidr``)."""
        self._settle()
        if port != CLOSED_PORT:
            self.listen(lch, port, 8, ud=True)
        self.prepare(ch, port, lch, ud=True)
        a = self.ids[-1]
        self._sidr_connect(a)
        self._settle()
        p = a.peer
        if p is not None and p in self.ids and answer != "none":
            self._sidr_answer(p, answer == "accept")
            self._settle()

    @rule(data=st.data(), accept=st.booleans())
    def answer_sidr(self, data: st.DataObject, accept: bool) -> None:
        """Answer a datagram request's id, whatever it is now: not answered yet, answered, its
        active end gone."""
        self._settle()
        ids = self._live("ud-passive")
        if ids:
            self._sidr_answer(data.draw(st.sampled_from(ids), label="request's id"), accept)
