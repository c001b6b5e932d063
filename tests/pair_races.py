"""The two hosts' side of tests/kernel/test_conn_pair_lab.py's races: the helpers both hosts
run (shipped to the peer as source), the snippet's prelude and its control connection
(:class:`PeerScript`), and :class:`Pauser`, which stops a reader thread at a chosen point of
its turn while the test's main thread acts."""

from __future__ import annotations

import contextlib
import glob
import inspect
import json
import re
import socket
import sys
import threading
import time

from pyrdmacm import CmId
from pyrdmacm.abi import CmEventType as E

# ----------------------------------------------------------------------------------------
# Helpers shared by both hosts: defined here, shipped to the peer as source (inspect)
# ----------------------------------------------------------------------------------------

def cm_counters() -> dict:
    """The IB CM's message counters of this host's RDMA ports, summed: {"rx_dreq": n, ...}
    (sysfs: under each port of the device, or under the infiniband_cm class on older
    kernels)."""
    out = {}
    for group, short in (("cm_rx_msgs", "rx"), ("cm_rx_duplicates", "rxdup"),
                         ("cm_tx_msgs", "tx"), ("cm_tx_retries", "txretry")):
        for msg in ("dreq", "drep", "req", "rej"):
            paths = (glob.glob("/sys/class/infiniband/*/ports/*/%s/%s" % (group, msg))
                     or glob.glob("/sys/class/infiniband_cm/*/*/%s/%s" % (group, msg)))
            total = 0
            for path in paths:
                with open(path) as f:
                    total += int(f.read())
            out["%s_%s" % (short, msg)] = total
    return out


def counters_since(before: dict) -> dict:
    now = cm_counters()
    return {k: now[k] - before[k] for k in now}


def routed_all(ch, dst: str, indices, timeout: float = 60.0) -> dict:
    """A client id per index on ``ch``, its address and route resolved to ``dst``."""
    ids = {}
    for i in indices:
        cm = CmId(ch)
        cm.context = i
        cm.resolve_addr(dst, timeout_ms=5000)
        ids[i] = cm
    pending, deadline = set(ids), time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, "%d ids not routed to %s" % (len(pending), dst)
        for ev in ch.get_events(64, 0.5, ack=True):
            if ev.event is E.ADDR_RESOLVED:
                ev.id.resolve_route(5000)
            elif ev.event is E.ROUTE_RESOLVED:
                pending.discard(ev.id.context)
            else:
                raise AssertionError("routing %s: %r" % (dst, ev))
    return ids


def pdata(i: int) -> bytes:
    return i.to_bytes(2, "big")


def connect_all(ch, dst: str, indices, timeout: float = 60.0) -> dict:
    """Clients connected to ``dst`` (CONNECT_RESPONSE, then establish()), one per index; the
    index travels in the REQ's private data: {index: CmId}."""
    ids = routed_all(ch, dst, indices, timeout)
    for i, cm in ids.items():
        cm.connect(private_data=pdata(i), responder_resources=1, initiator_depth=1)
    pending, deadline = set(ids), time.monotonic() + timeout
    while pending:
        assert time.monotonic() < deadline, "%d ids not connected to %s" % (len(pending), dst)
        for ev in ch.get_events(64, 0.5, ack=True):
            assert ev.event is E.CONNECT_RESPONSE, "connecting to %s: %r" % (dst, ev)
            ev.id.establish()
            pending.discard(ev.id.context)
    return ids


def accept_all(ch, n: int, timeout: float = 60.0) -> dict:
    """Accept ``n`` connection requests on ``ch``'s listener: {index: CmId} once each is
    ESTABLISHED (the index is the REQ's private data, see connect_all)."""
    ids, established, deadline = {}, set(), time.monotonic() + timeout
    while len(established) < n:
        assert time.monotonic() < deadline, "%d of %d connections established" % (
            len(established), n)
        for ev in ch.get_events(64, 0.5, ack=True):
            if ev.event is E.CONNECT_REQUEST:
                i = int.from_bytes(ev.private_data[:2], "big")
                ev.id.context = i
                ids[i] = ev.id
                ev.id.accept(responder_resources=1, initiator_depth=1)
            elif ev.event is E.ESTABLISHED:
                established.add(ev.id.context)
            else:
                raise AssertionError("accepting: %r" % (ev,))
    return ids


def until_timewait(channels, ids: dict, seconds: float) -> dict:
    """Read (and ack) the channels' events until every id in ``ids`` has its TIMEWAIT_EXIT, or
    ``seconds`` passed: {index: [[event name, status], ...]} in the order read."""
    seen = {i: [] for i in ids}
    left, deadline = set(ids), time.monotonic() + seconds
    while left and time.monotonic() < deadline:
        for ch in channels:
            for ev in ch.get_events(64, 0.02, ack=True):
                i = ev.id.context
                seen.setdefault(i, []).append([ev.event.name, ev.status])
                if ev.event is E.TIMEWAIT_EXIT:
                    left.discard(i)
    return seen


def paced(calls, gap: float) -> float:
    """Call each of ``calls`` in turn, the k-th ``k * gap`` seconds after the first (sleeping
    in between; 0: back to back); the seconds the whole took."""
    t0 = time.monotonic()
    for k, call in enumerate(calls):
        wait = t0 + k * gap - time.monotonic()
        if wait > 0:
            time.sleep(wait)
        call()
    return time.monotonic() - t0


SHARED = [cm_counters, counters_since, routed_all, pdata, connect_all, accept_all,
          until_timewait, paced]

PRELUDE = r'''
import glob, json, socket, sys, threading, time
from pyrdmacm import CmId, EventChannel
from pyrdmacm import CmId
from pyrdmacm.abi import CmEventType as E

def say(**fields):
    print(json.dumps(fields), flush=True)

_server = socket.socket()
_server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
_server.bind(("0.0.0.0", 0))
_server.listen(1)
say(control=_server.getsockname()[1])
_control, _ = _server.accept()
_control.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
_orders = _control.makefile("rb")

def order():
    """The test's next order (a JSON line on the control connection); closed: exit."""
    line = _orders.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)

def answer(**fields):
    _control.sendall(json.dumps(fields).encode() + b"\n")
''' + "".join("\n" + inspect.getsource(f) for f in SHARED)


class PeerScript:
    """A snippet running on the peer (PRELUDE + ``code``), with its control connection."""

    def __init__(self, peer, code: str, *args: str) -> None:
        self.proc = peer.python(PRELUDE + code, *map(str, args))
        port = json.loads(self.proc.wait_for_line(r'^\{"control": ', timeout=120))["control"]
        self.sock = socket.create_connection((peer.address, port), timeout=60)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.answers = self.sock.makefile("rb")

    def send(self, **fields) -> None:
        self.sock.sendall(json.dumps(fields).encode() + b"\n")

    def answer(self) -> dict:
        line = self.answers.readline()
        if not line:
            out, err = self.proc.output()
            raise AssertionError("the peer's snippet went away:\n%s\n%s" % (out, err[-3000:]))
        return json.loads(line)

    def report(self, kind: str, round_: int, timeout: float) -> dict:
        head = json.dumps({"report": kind, "round": round_})[:-1]
        return json.loads(self.proc.wait_for_line("^" + re.escape(head) + "[,}]", timeout))

    def close(self) -> None:
        """Tell the snippet to finish (it exits when its control connection closes), and wait
        for it to exit."""
        self.answers.close()
        self.sock.close()
        code, _, err = self.proc.wait(60)
        assert code == 0, "the peer's snippet exited with %s:\n%s" % (code, err[-3000:])


def first(stuck, k: int = 4) -> dict:
    """The first ``k`` entries of the first non-empty dict of ``stuck`` (for a message)."""
    for d in stuck:
        if d:
            return dict(list(d.items())[:k])
    return {}


def stuck_ids(seen: dict) -> dict:
    """The ids whose events are not exactly DISCONNECTED (status 0), then TIMEWAIT_EXIT."""
    return {i: evs for i, evs in seen.items()
            if [e for e, _ in evs] != ["DISCONNECTED", "TIMEWAIT_EXIT"] or evs[0][1] != 0}


class Pauser:
    """Stops a reader thread at a chosen point of one turn of its loop, while another thread
    acts: an interleaving chosen by the test, on guests that have one CPU.

    On one CPU a Python thread lets another run only when it blocks, makes a system call
    while the other waits for the GIL, or after the switch interval (5 ms): a reader thread
    goes from its GET_EVENT to the event's dispatch without the main thread getting a look
    in -- which on a machine with several cores happens at any moment.  The reader runs its
    loop under ``running()`` and calls ``turn()`` at the top of each turn; a profile hook
    counts the Python and C calls it makes.  ``stop_next(k)`` (from the main thread) stops
    the next turn to begin at its k-th call (or at its end, if it has fewer), and
    ``wait_stopped()`` / ``release()`` bracket what the main thread does meanwhile.  The
    tests sweep k over a turn's length: wherever the window of a race is, some k fall in it.
    Nothing here names the library's functions."""

    def __init__(self) -> None:
        self.calls = 0  # the reader's calls in the current turn
        self.stop_at: int | None = None  # armed for the next turn to begin
        self.armed: int | None = None  # ... which has begun
        self.stopped = threading.Event()
        self.go = threading.Event()

    def _hook(self, frame, event, arg) -> None:
        self.calls += 1
        if self.calls == self.armed:
            self._stop()

    def _stop(self) -> None:
        self.armed = None
        self.stopped.set()
        self.go.wait(30)
        self.go.clear()

    @contextlib.contextmanager
    def running(self):
        sys.setprofile(self._hook)
        try:
            yield
        finally:
            sys.setprofile(None)

    def turn(self) -> None:
        if self.armed is not None:  # the last turn ended before its stop: stop here
            self._stop()
        self.calls = 0
        self.armed, self.stop_at = self.stop_at, None

    def stop_next(self, k: int) -> None:
        self.stopped.clear()
        self.stop_at = max(k, 1)

    def wait_stopped(self, timeout: float) -> bool:
        return self.stopped.wait(timeout)

    def release(self) -> None:
        """Let the stopped reader go on (if it did not stop, its next stop is let through)."""
        self.go.set()

    def disarm(self) -> None:
        """No more stops; a stopped reader goes on."""
        self.stop_at = self.armed = None
        self.go.set()
