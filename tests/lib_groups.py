"""The library fuzzer's multicast memberships (tests/lib_model.py's machine): the client's
datagram ids join the groups, send-only or not, and leave them; ``leave()``'s
``events_reported`` must equal the events handed for the membership."""

from __future__ import annotations

from typing import Any, Dict, List

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from pyrdmacm import CmId
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import PortSpace

from lib_script import recorded

#: the multicast groups members join (a member joins each once)
GROUPS = ("239.1.1.7", "239.1.1.8")
#: the ids of a sequence, at most (the machine's rules that make ids count them too)
MAX_IDS = 8


class Groups:
    """Rules of :class:`lib_model.LibMachine` (a mixin: hypothesis collects the rules of every
    class of the machine)."""

    ids: List[CmId]
    members: List[Any]
    handed_mc: Dict[int, int]

    @precondition(lambda self: len(self.ids) < MAX_IDS)
    @rule(data=st.data(), group=st.sampled_from(GROUPS), send_only=st.booleans())
    @recorded
    def join(self, data: st.DataObject, group: str, send_only: bool) -> None:
        """A member of ``group``: a UDP id of the client's (bound to its address), new or one
        that is a member already of the other group; MULTICAST_JOIN comes for the membership."""
        members = [c for c in self._live("member") if group not in [str(m.addr.ip) for m in c.memberships]]
        cm = self._pick(data, members + [None], "member") if members else None
        if cm is None:
            cm = CmId(self.sides["client"].ch, PortSpace.UDP)
            cm.bind_addr(self.link.client_ip)
            self.ids.append(cm)
            self.roles[id(cm)], self.handed[id(cm)] = "member", 0
            self._step("member%d = CmId(client, UDP); bind_addr()" % self.ids.index(cm))
        m = cm.join_multicast(group, send_only=send_only)
        self.members.append(m)
        self.handed_mc[id(m)] = 0
        self._step("%s.join_multicast(%s%s)" % (self._name(cm), group, ", send_only" if send_only else ""))
        ev = self._await(cm, {E.MULTICAST_JOIN, E.MULTICAST_ERROR})
        if ev.membership is not m:
            self._fail("%s for %s's join of %s names membership %r" % (ev.event.name, self._name(cm), group,
                                                                       ev.membership))

    @rule(data=st.data())
    @recorded
    def leave(self, data: st.DataObject) -> None:
        """Leave a membership: ``leave()``'s events_reported equals the events handed for it."""
        left = [m for m in self.members if m.joined and m.id in self.ids]
        if not left:
            return
        m = self._pick(data, left, "membership")
        self._drain(0.2)
        self._step("%s: leave %s" % (self._name(m.id), m.addr.ip))
        reported = m.leave()
        self._all_handed(self.handed_mc, m, reported, "leave() of %s's %s" % (self._name(m.id), m.addr.ip),
                         self._side_of(m.id))
