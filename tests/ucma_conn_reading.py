"""How the connection fuzzer (tests/ucma_conn_model.py's machine) reads and judges events:
one GET_EVENT on a channel, the event matched to its id (a CONNECT_REQUEST to its listener,
whose request becomes a new id), taken if the id owes it next or may get it, else a
disagreement; and the reads before each step until no id owes an event, an owed one past its
due time a disagreement too."""

from __future__ import annotations

import errno
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional

from pyrdmacm import abi
from pyrdmacm.abi.codec import CODECS
from ucma_conn_ends import DUE, Cid, show
from ucma_world import _en

K = abi.RdmaCmState
EV = abi.CmEventType
_CONN = CODECS["rdma_ucm_conn_param"]


class Reading:
    """The event reads of :class:`ucma_conn_model.ConnMachine` (a mixin, as
    :class:`ucma_conn_crossing.Crossings`)."""

    stats: Dict[str, Any]
    ids: List[Cid]
    chans: List[Any]
    script: List[str]
    host_of: List[int]

    if TYPE_CHECKING:  # pragma: no cover - the machine's, and Hosts' (_ready, _on_peer)
        def _fail(self, what: str) -> None: ...

        def _next(self, prefix: str) -> str: ...

        def _ready(self, chans: List[int], wait: float) -> List[int]: ...

        def _on_peer(self, what: str, call: Any, *args: Any) -> Any: ...

    def _read(self, ch: int, wait: float) -> bool:
        """Read one event of channel ``ch`` (waiting up to ``wait`` s) and check it: whether
        one was read."""
        raw = self.chans[ch]
        if wait:
            self._ready([ch], wait)
        raw.reply.clear()
        err = raw.get_event() if self.host_of[ch] == 0 else self._on_peer("GET_EVENT", raw.get_event)
        self.stats["commands"] += 1
        if err == errno.EAGAIN:
            return False
        if err:
            self.script.append("err = ch[%d].get_event()  # -> %s" % (ch, _en(err)))
            self._fail("GET_EVENT on ch[%d]: the kernel answered %s" % (ch, _en(err)))
        r = raw.reply_of("GET_EVENT")
        uid, handle, ev, status = r["uid"], r["id"], r["event"], r["status"]
        qpn = _CONN.unpack_dict(r["param"][:_CONN.size])["qp_num"]  # the peer's QP number, in the conn param
        status = status - (1 << 32) if status & 0x80000000 else status  # a negative errno or a reason
        name = EV(ev).name if ev in EV._value2member_map_ else str(ev)
        if name == "CONNECT_REQUEST":  # the listener's event (uid); the request's id is new
            owner = next((c for c in self.ids if c.role in ("listener", "ud-listener") and c.ch == ch
                          and c.uid == uid), None)
        else:
            owner = next((c for c in self.ids if c.ch == ch and c.handle == handle and c.uid == uid and c.uid), None)
        self.stats["events"][name + (" (UD)" if owner is not None and owner.ud else "")] += 1
        self.script.append("%s; err = ch[%d].get_event()  # %s id %d status %d qp_num %#x" % (
            self._wait_line(ch, wait or 1.0), ch, name, handle, status, qpn))
        if name == "CONNECT_REQUEST":
            return self._request(owner, ch, uid, handle, status, qpn)
        if owner is None:
            self._fail("GET_EVENT on ch[%d]: %s (uid %#x, id %d, status %d) for no id of this channel the model "
                       "knows" % (ch, name, uid, handle, status))
        self._take(owner, name, status, qpn)
        return True

    def _take(self, c: Cid, name: str, status: int, qpn: int) -> None:
        if c.owed and c.owed[0][0] == name and status in c.owed[0][1]:
            want_qpn = c.owed[0][3]
            if want_qpn is not None and qpn != want_qpn:
                self._fail("%s for %s carries qp_num %#x; the peer sent %#x" % (name, c.name, qpn, want_qpn))
            c.owed.pop(0)
        elif name in c.may and status in c.may[name]:
            del c.may[name]
        else:
            self._fail("%s status %d for %s, which the model does not expect (owed: %s; may: %s)" % (
                name, status, show(c), [o[0] for o in c.owed] or "nothing", sorted(c.may) or "nothing"))
        c.read += 1
        if name == "DISCONNECTED":
            c.state = K.DISCONNECT
            c.may["TIMEWAIT_EXIT"] = frozenset({0})  # the IB CM's timewait ends with it, if the id lives
        if name == "REJECTED" and c.cm in ("req_sent", "rep_rcvd", "rep_sent"):
            c.cm = "idle"

    def _request(self, lst: Optional[Cid], ch: int, uid: int, handle: int, status: int, qpn: int) -> bool:
        """A CONNECT_REQUEST for listener ``lst`` (None: no listener of the channel has its uid)."""
        if lst is None:
            self._fail("CONNECT_REQUEST (uid %#x, id %d) on ch[%d] for no listener of this channel" % (uid, handle, ch))
        active = lst.coming.pop(qpn, None)
        owed = next((o for o in lst.owed if o[0] == "CONNECT_REQUEST"), None)
        if active is None or owed is None or status != 0:
            self._fail("CONNECT_REQUEST status %d qp_num %#x on %s: no request with that QP number is on its way "
                       "(coming: %s)" % (status, qpn, lst.name, sorted(hex(q) for q in lst.coming)))
        lst.owed.remove(owed)
        lst.read += 1
        if active.at != lst.at:
            self.stats["across"] = self.stats.get("across", 0) + 1
        ud = lst.ud
        p = Cid(self._next("p"), handle, ch, 0, "ud-passive" if ud else "passive", K.CONNECT,
                "sidr_rcvd" if ud else "req_rcvd", peer=active, at=lst.at)
        self.script.append("%s = %d  # the request's id" % (p.name, handle))
        if active.peer is None and active.cm == ("sidr_sent" if ud else "req_sent"):
            active.peer = p
        else:  # the active id went away meanwhile (destroyed, or rejected its own REQ)
            p.cm = "idle"
        self.ids.append(p)
        return True

    def _settle(self, ids: Optional[List[Cid]] = None) -> None:
        """Read events until no id owes one; an owed event past its due time is a disagreement."""
        while True:
            owing = [c for c in (ids if ids is not None else self.ids) if c.owed and c in self.ids]
            if not owing:
                return
            due = min(c.owed[0][2] for c in owing)
            chans = sorted({c.ch for c in owing})
            left = due - time.monotonic()
            if left <= 0:
                late = [(c, c.owed[0][0]) for c in owing if c.owed[0][2] <= time.monotonic()]
                # one last look: what is queued now
                if not any(self._read(ch, 0) for ch in chans):
                    self._fail("owed events did not come within %.0f s: %s" % (
                        DUE, "; ".join("%s for %s" % (e, c.name) for c, e in late)))
                continue
            for ch in self._ready(chans, left):
                self._read(ch, 0)
