"""Where the connection fuzzer's channels are (tests/ucma_conn_model.py's machine): all four
on this host, or two here and two on the pair topology's peer (tests/ucma_remote.py); their
addresses, the wait for an event on any of them, and each host's own checks (its netlink
states, its kernel log, nothing of the fuzzer's left there at the end)."""

from __future__ import annotations

import collections
import os
import select
import time
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from hypothesis.stateful import invariant

from pyrdmacm import abi
from ucma_conn_ends import CHANNELS, Cid, show
from ucma_remote import addresses
from ucma_view import match_states, netlink_states, nothing_left

K = abi.RdmaCmState


class Hosts:
    """The channels' hosts, a mixin of :class:`ucma_conn_model.ConnMachine`."""

    #: the peer's channel server (tests/ucma_remote.py) when channels 2 and 3 are the peer's
    far: Optional[Any] = None
    #: this host's eth0 addresses (tests/ucma_remote.py: addresses), read once
    here: Dict[str, Any] = {}
    ids: List[Cid]
    script: List[str]
    where: str

    if TYPE_CHECKING:  # pragma: no cover - the machine's
        def _fail(self, what: str) -> None: ...

    def _place(self, far: Optional[Any]) -> None:
        """Open the sequence's channels: on this host, or 2 and 3 on ``far``'s."""
        from pyrdmacm.conformance import KernelLog, Raw

        self._Raw = Raw
        #: each channel's host (0: this one, 1: the peer)
        self.host_of = [0, 0, 1, 1] if far is not None else [0] * CHANNELS
        self.chans: List[Any] = [Raw() for h in self.host_of if h == 0]
        self.log = KernelLog()
        self.pid = os.getpid()
        self.baseline = netlink_states(self.pid)
        self.script = ["from pyrdmacm.conformance import Raw", "from pyrdmacm.addr import parse_address", "import select"]
        if far is not None:
            if far.broken:  # a command of an earlier sequence took too long there
                far.reconnect()
            fds = far.request("begin", chs=[2, 3])["fds"]
            self.chans += [far.channel(ch, fds[str(ch)]) for ch in (2, 3)]
            self.script += ["from ucma_remote import RemoteKernel  # tests/ucma_remote.py serve runs on %s" % far.host,
                            "far = RemoteKernel(%r)" % far.where.rpartition(":")[0],
                            "ch = [Raw(), Raw(), far.channel(2), far.channel(3)]"]
        else:
            self.script.append("ch = [%s]" % ", ".join(["Raw()"] * CHANNELS))
        if not Hosts.here:
            Hosts.here = addresses()
        #: each host's eth0 addresses (tests/ucma_remote.py: addresses)
        self.hosts = [Hosts.here] + ([far.addresses] if far is not None else [])
        #: the sequence's address family (ucma_conn_model.WHERE)
        self.where = "IPv4"

    def _addr(self, src: int, dst: int) -> str:
        """Host ``dst``'s address of the sequence's family as host ``src`` names it (a
        link-local one with the zone of ``src``'s eth0)."""
        addr = str(self.hosts[dst][self.where])
        return "%s%%%d" % (addr, self.hosts[src]["ifindex"]) if self.where == "IPv6 link-local" else addr

    def _on_peer(self, what: str, call: Any, *args: Any) -> Any:
        """``call(*args)``, a request to the peer's channel server; its failure (a command
        that did not return there within its time) is the sequence's failure, with the
        reproducer."""
        from ucma_remote import RemoteError

        try:
            return call(*args)
        except RemoteError as e:
            self.script.append("# %s: no answer from the peer" % what)
            self._fail("%s on the peer: %s" % (what, e))

    def _open(self, ch: int) -> Any:
        """A new channel ``ch`` on its host."""
        return self._Raw() if self.host_of[ch] == 0 else self.far.channel(ch)

    def _ready(self, chans: List[int], wait: float) -> List[int]:
        """Which of ``chans`` have an event queued, waiting up to ``wait`` s (with the peer's
        and this host's both asked, in turns of 50 ms)."""
        near = {self.chans[ch].dev.fileno(): ch for ch in chans if self.host_of[ch] == 0}
        far = [ch for ch in chans if self.host_of[ch] == 1]
        deadline = time.monotonic() + wait
        while True:
            left = max(deadline - time.monotonic(), 0.0)
            step = min(left, 0.05) if near and far else left
            ready = [near[fd] for fd in select.select(list(near), [], [], step)[0]] if near else []
            if far:
                ready += self._on_peer("waiting for an event", self.far.poll, far, 0.0 if ready else step)
            if ready or left <= step:
                return ready

    def _wait_line(self, ch: int, wait: float) -> str:
        """The reproducer's wait for an event of channel ``ch``."""
        if self.host_of[ch]:
            return "ch[%d].wait(%s)" % (ch, wait)
        return "select.select([ch[%d].dev.fileno()], [], [], %s)" % (ch, wait)

    @invariant()
    def kernel_agrees(self) -> None:
        for h in range(len(self.hosts)):
            where = "the peer's" if h else "the"
            if h:
                problems = self._on_peer("its kernel log", self.far.request, "problems")["lines"]
                got = self._on_peer("its netlink states", self.far.request, "states")
                seen, baseline = got["states"], got["baseline"]
            else:
                problems, seen, baseline = self.log.new_problems(), netlink_states(self.pid), self.baseline
            if problems:
                self._fail("%s kernel log has new problem lines:\n  %s" % (where, "\n  ".join(problems[:10])))
            left = list((collections.Counter(seen) - collections.Counter(baseline)).elements())
            options: List[List[Tuple[str, ...]]] = []
            for c in self.ids:
                if c.at != h:
                    continue
                opts = {(c.state.name,)}
                if c.disc or "DISCONNECTED" in c.may or any(o[0] == "DISCONNECTED" for o in c.owed):
                    opts |= {(K.CONNECT.name,), (K.DISCONNECT.name,)}
                options.append(sorted(opts))
                for _ in c.coming:  # a request's id exists from the REQ's arrival, before its event is read
                    options.append([(), (K.CONNECT.name,)])
            if not match_states(options, left):
                self._fail("%s RDMA netlink lists the fuzzer's cm_ids in %s; the model has %s" % (
                    where.capitalize(), sorted(left) or "no state",
                    "; ".join(show(c) for c in self.ids if c.at == h) or "no id"))
        for i, raw in enumerate(self.chans):
            dead = raw.alive() if self.host_of[i] == 0 else self._on_peer("ch[%d]'s check" % i, raw.alive)
            if dead:
                self._fail("ch[%d]: %s" % (i, dead))

    def teardown(self) -> None:
        try:
            for ch, raw in enumerate(self.chans):
                if self.host_of[ch] == 0:
                    raw.close()
            self.script.append("for c in ch: c.close()")
            if self.far is not None:  # the peer's channels closed there, and its own check
                failure = self._on_peer("closing its channels at the end", self.far.request, "end", 10.0)["failure"]
                if failure:
                    self._fail("on the peer: " + failure)
            nothing_left(self.pid, self.baseline, self.log, self._fail, wait_s=2.0)  # timewaits end
        finally:
            self.log.close()
