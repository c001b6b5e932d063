"""The connection fuzzer's rules that make two messages cross (tests/ucma_conn_model.py's
machine settles every event owed before its other steps): two commands written one right
after the other, and what the model allows for each order the wire may take; and MIGRATE_ID
with events on their way or unread."""

from __future__ import annotations

from typing import Any, List

from hypothesis import strategies as st
from hypothesis.stateful import rule

from pyrdmacm import abi
from ucma_conn_ends import Cid, disconnected, show

K = abi.RdmaCmState


class Crossings:
    """Rules of :class:`ucma_conn_model.ConnMachine` (a mixin: hypothesis collects the rules
    of every class of the machine)."""

    ids: List[Cid]
    chans: List[Any]

    @rule(data=st.data())
    def disconnect_both(self, data: st.DataObject) -> None:
        """Both ends of an established connection write DISCONNECT, one right after the other."""
        self._settle()
        pairs = [c for c in self._live("active") if c.cm == "est" and c.peer in self.ids and c.peer.cm == "est"]
        if not pairs:
            return
        a = data.draw(st.sampled_from(pairs), label="connection")
        first, second = (a, a.peer) if data.draw(st.booleans(), label="active first") else (a.peer, a)
        self._write_disconnect(first)
        self._write_disconnect(second)
        # the second DISCONNECT is a DREQ crossing the first one's, or the DREP answering it
        # (the first DREQ came in between): either way each end gets one DISCONNECTED, and
        # either may go through timewait
        for end in (first, second):
            end.cm = "ending"
            disconnected(end)

    @rule(data=st.data())
    def destroy_both(self, data: st.DataObject) -> None:
        """Both ends of a connection destroyed, one right after the other: the first one's
        REJ or DREQ may reach the second before it goes, or not; nothing is left."""
        self._settle()
        pairs = [c for c in self._live("active") if c.peer in self.ids]
        if pairs:
            a = data.draw(st.sampled_from(pairs), label="connection")
            p = a.peer
            self._destroy(a)
            p.owed, p.may = [], {}  # whatever the first end's going sent, the second goes before reading it
            self._destroy(p)

    @rule(data=st.data())
    def connect_then_destroy_listener(self, data: st.DataObject) -> None:
        """A CONNECT to a listener, and the listener destroyed right after (the REQ in flight)."""
        self._settle()
        listening = {(c.at, c.port): c for c in self._live("listener")}
        actives = [c for c in self._live("active") if c.state is K.ROUTE_RESOLVED and (c.to, c.port) in listening]
        if not actives:
            return
        a = data.draw(st.sampled_from(actives), label="active id")
        lst = listening[a.to, a.port]
        self._connect(a)
        lst.owed = []  # the CONNECT_REQUEST, if it came, goes with the listener unread
        self._destroy(lst)

    @rule(data=st.data())
    def establish_then_destroy_passive(self, data: st.DataObject) -> None:
        """The RTU, and the passive end destroyed right after: it goes in REP_SENT (a REJ, which
        the established active end may take or ignore) or in ESTABLISHED (a DREQ)."""
        self._settle()
        ids = [c for c in self._live("active") if c.cm == "rep_rcvd" and c.peer in self.ids]
        if not ids:
            return
        a = data.draw(st.sampled_from(ids), label="active id")
        p = a.peer
        self._accept(a, 0)
        p.owed, p.peer, a.peer = [], None, None  # p goes before it reads its ESTABLISHED
        self._destroy(p)
        a.cm = "ending"
        a.may["REJECTED"] = frozenset({28})
        a.may["DISCONNECTED"] = frozenset({0})

    @rule(data=st.data())
    def migrate(self, data: st.DataObject) -> None:
        """MIGRATE_ID to the other channel of its host (0 and 1, 2 and 3), events on their way
        or queued unread: they follow it."""
        ids = [c for c in self._live() if not c.coming]
        if not ids:
            return
        c = data.draw(st.sampled_from(ids), label="id")
        new = c.ch ^ 1
        raw = self.chans[new]
        raw.reply.clear()
        err = self._send(new, "MIGRATE_ID", {"id": c.handle, "fd": self.chans[c.ch].dev.fileno()},
                         {"fd": "ch[%d].dev.fileno()" % c.ch})
        self._expect("MIGRATE_ID of %s" % show(c), err, 0)
        reported = int(raw.reply_of("MIGRATE_ID")["events_reported"])
        if reported != c.read:
            self._fail("MIGRATE_ID of %s: events_reported %d, %d were read" % (show(c), reported, c.read))
        c.ch = new
