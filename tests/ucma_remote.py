"""rdma_cm channels of another host, for the connection fuzzer across the lab's two guests.

The connection fuzzer (tests/ucma_conn_model.py) writes raw commands on four channels.  In
the lab's pair topology two of them live on the peer, lab-a: ``python tests/ucma_remote.py
serve`` runs there (started by ``tools/fuzz --topology pair`` as the lab's peer command, or
by the kernel tests through the peer agent, tests/lab_peer.py) and keeps those channels
(:class:`pyrdmacm.conformance.Raw`) for the fuzzer on lab-b, which reaches them through
:class:`RemoteKernel` and :class:`RemoteRaw`: the same ``send`` / ``get_event`` /
``reply_of`` / ``close`` / ``alive`` as a local ``Raw``, so that the machine's rules do not
know where a channel is.  Each command is one request on one TCP connection kept open: a
JSON object per line, answered by one line (``{"ok": true, ...}`` or ``{"ok": false,
"error": ...}``).  Bytes travel as hex; a reply buffer comes back whole (the kernel's reply,
the machine decodes it with the ABI layer's codec, as it does a local one).

The peer also answers for its own side of the checks: its cm_ids' states in RDMA netlink
(by its own pid), its kernel log's problem lines, nothing left at the end of a sequence, and
the addresses of its eth0 (the fuzzer's listeners there bind them, its active ids resolve
them).  Standard library and pyrdmacm only; the server takes one client at a time.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import sys
import time
from typing import Any, Dict, List, Optional

PORT = 7008
#: the client's socket waits this much longer than a request's own wait
MARGIN = 30.0


def _encode(fields: Dict[str, Any]) -> Dict[str, Any]:
    return {k: {"hex": v.hex()} if isinstance(v, (bytes, bytearray)) else v for k, v in fields.items()}


def _decode(fields: Dict[str, Any]) -> Dict[str, Any]:
    return {k: bytes.fromhex(v["hex"]) if isinstance(v, dict) else v for k, v in fields.items()}


def ipv4_of(netdev: str) -> Optional[str]:
    """``netdev``'s IPv4 address (SIOCGIFADDR), None when it has none."""
    import fcntl

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            got = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", netdev.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(got[20:24])


def ipv6_of(netdev: str, link: bool) -> Optional[str]:
    """``netdev``'s first IPv6 address of link scope (``link``) or of a wider one (global;
    site-local: the single topology's fec0::15), as /proc/net/if_inet6 lists it; None when
    it has none."""
    import ipaddress

    try:
        with open("/proc/net/if_inet6") as f:
            for line in f:
                words = line.split()
                if len(words) == 6 and words[5] == netdev and (words[3] == "20") == link and words[3] != "10":
                    return str(ipaddress.IPv6Address(bytes.fromhex(words[0])))
    except OSError:
        pass
    return None


def addresses(netdev: str = "eth0") -> Dict[str, Any]:
    """This host's addresses of ``netdev`` by family (link-local without its zone), and its
    interface index (a zone names it)."""
    try:
        index = socket.if_nametoindex(netdev)
    except OSError:
        index = 0
    return {"IPv4": ipv4_of(netdev), "IPv6": ipv6_of(netdev, False), "IPv6 link-local": ipv6_of(netdev, True),
            "ifindex": index}


# -- the server (on the peer) ----------------------------------------------------------------

class Channels:
    """The peer's channels and checks, one request at a time (``new``: a new channel; the
    kernel's rdma_cm fd, a :class:`~pyrdmacm.conformance.Raw`, unless a test gives a fake's)."""

    def __init__(self, new: Optional[Any] = None) -> None:
        from pyrdmacm.conformance import KernelLog, Raw

        self.Raw, self.KernelLog = new or Raw, KernelLog
        self.chans: Dict[int, Any] = {}
        self.log: Any = None
        self.baseline: List[str] = []

    def handle(self, req: Dict[str, Any]) -> Dict[str, Any]:
        from ucma_view import netlink_states, nothing_left

        op, pid = req.get("op"), os.getpid()
        if op == "hello":
            from pyrdmacm.conformance import kernel_version

            return {"pid": pid, "version": list(kernel_version()), "release": os.uname().release,
                    "host": socket.gethostname(), "addresses": addresses()}
        if op == "begin":  # a sequence: its channels opened, its baseline taken
            self.end_channels()
            if self.log is not None:
                self.log.close()
            self.log = self.KernelLog()
            self.baseline = netlink_states(pid)
            return {"fds": {str(ch): self.open(ch) for ch in req["chs"]}}
        if op == "open":
            return {"fd": self.open(req["ch"])}
        if op == "end":  # every channel closed, then nothing may be left (fail: the first failure)
            self.end_channels()
            failures: List[str] = []

            def fail(what: str) -> None:
                failures.append(what)
                raise RuntimeError(what)
            try:
                nothing_left(pid, self.baseline, self.log, fail, wait_s=float(req.get("wait_s", 2.0)))
            except RuntimeError:
                pass
            self.log.close()
            self.log = None
            return {"failure": failures[0] if failures else ""}
        if op == "states":
            return {"states": netlink_states(pid), "baseline": self.baseline}
        if op == "problems":
            return {"lines": self.log.new_problems() if self.log is not None else []}
        if op == "poll":
            fds = {self.chans[ch].dev.fileno(): ch for ch in req["chs"]}
            ready = select.select(list(fds), [], [], float(req["timeout"]))[0]
            return {"ready": [fds[fd] for fd in ready]}
        if op not in ("send", "close", "alive"):
            raise ValueError("unknown op %r" % op)
        raw = self.chans.get(req["ch"])
        if raw is None:
            raise KeyError("no channel %s here (closed, or never opened)" % req["ch"])
        if op == "send":
            from pyrdmacm.wire import COMMAND

            raw.reply.clear()
            out = req.get("out")
            err = raw.send(req["name"], _decode(req["fields"]), out=out)
            size = min(COMMAND[req["name"]].out if out is None else out, raw.reply.size)
            return {"err": err, "reply": raw.reply.bytes(size).hex()}
        if op == "close":
            raw.close()
            del self.chans[req["ch"]]
            return {}
        return {"dead": raw.alive()}

    def open(self, ch: int) -> int:
        if ch in self.chans:
            self.chans.pop(ch).close()
        self.chans[ch] = self.Raw()
        return int(self.chans[ch].dev.fileno())

    def end_channels(self) -> None:
        for raw in self.chans.values():
            raw.close()
        self.chans = {}


def serve(port: int = PORT, channels: Optional[Channels] = None, server: Optional[socket.socket] = None) -> None:
    """Serve ``channels`` (the kernel's by default) on TCP ``port`` of every address (or on
    the listening socket ``server``), one client after the other, for ever."""
    channels = channels or Channels()
    server = server or socket.create_server(("", port), family=socket.AF_INET6, dualstack_ipv6=True)
    with server:
        print("ucma_remote: %s serving rdma_cm channels on TCP port %d (pid %d)" % (
            socket.gethostname(), server.getsockname()[1], os.getpid()), flush=True)
        while True:
            conn, _ = server.accept()
            with conn, conn.makefile("rwb") as f:
                for line in f:
                    started = time.monotonic()
                    req: Dict[str, Any] = {}
                    try:
                        req = json.loads(line)
                        reply = {"ok": True, **channels.handle(req)}
                    except Exception as e:  # noqa: BLE001 - every failure is an answer
                        reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
                    took = time.monotonic() - started
                    if took > 1.0 and req.get("op") != "poll":  # a slow command is news: said where it ran
                        print("ucma_remote: %s took %.1f s: %s" % (req.get("op"), took, json.dumps(req)[:300]),
                              flush=True)
                    f.write(json.dumps(reply).encode() + b"\n")
                    f.flush()
            channels.end_channels()  # the client went: its channels with it


# -- the client (in the fuzzer, on lab-b) ----------------------------------------------------

class RemoteError(Exception):
    """The peer's channel server failed or did not answer."""


class RemoteKernel:
    """The peer's channel server (``serve``), over one TCP connection."""

    def __init__(self, host: str, port: int = PORT, wait_up: float = 60.0) -> None:
        self.where, self.address = "%s:%d" % (host, port), (host, port)
        self._connect(wait_up, 0.0)

    def _connect(self, wait_up: float, busy: float) -> None:
        """Connect (the server up within ``wait_up`` s) and say hello (the server, busy with
        a client that went, answering within ``busy`` s more)."""
        deadline = time.monotonic() + wait_up
        while True:
            try:
                self.sock = socket.create_connection(self.address, timeout=5.0)
                break
            except OSError as e:
                if time.monotonic() > deadline:
                    raise RemoteError("no channel server at %s after %.0f s: %s" % (self.where, wait_up, e)) from None
                time.sleep(0.25)
        self.file = self.sock.makefile("rwb")
        self.broken = ""
        hello = self.request("hello", wait=busy)
        self.pid, self.version = hello["pid"], tuple(hello["version"])
        self.release, self.host, self.addresses = hello["release"], hello["host"], hello["addresses"]

    def request(self, op: str, wait: float = 0.0, **fields: Any) -> Dict[str, Any]:
        """One request and its answer; RemoteError if the server refused it, or did not
        answer within ``wait`` s and :data:`MARGIN` (then the connection is unusable: every
        later request says which one broke it)."""
        if self.broken:
            raise RemoteError("the connection to the channel server at %s broke earlier: %s" % (self.where, self.broken))
        what = op + (" %s" % fields["name"] if "name" in fields else "") + (" on ch[%s]" % fields["ch"] if "ch" in fields else "")
        self.sock.settimeout(wait + MARGIN)
        try:
            self.file.write(json.dumps({"op": op, **fields}).encode() + b"\n")
            self.file.flush()
            line = self.file.readline()
        except OSError as e:
            self.broken = "%r: %s after %.0f s" % (what, e or type(e).__name__, wait + MARGIN)
            raise RemoteError("the channel server at %s failed during %s" % (self.where, self.broken)) from None
        if not line:
            self.broken = "%r: the server closed the connection" % what
            raise RemoteError("the channel server at %s closed the connection during %r" % (self.where, what))
        reply = json.loads(line)
        if not reply.pop("ok"):
            raise RemoteError("the channel server at %s refused %r: %s" % (self.where, op, reply["error"]))
        return reply

    def reconnect(self) -> None:
        """A new connection after one broke (the server serves one client at a time: it
        answers once the command it was stuck in returns, the kernel's slowest within about
        100 s)."""
        self.close()
        self._connect(60.0, 150.0)

    def channel(self, ch: int, fd: Optional[int] = None) -> "RemoteRaw":
        """The peer's channel ``ch`` (opened anew unless its ``fd`` is given)."""
        return RemoteRaw(self, ch, self.request("open", ch=ch)["fd"] if fd is None else fd)

    def poll(self, chs: List[int], timeout: float) -> List[int]:
        """Which of the peer's channels ``chs`` have an event, waiting up to ``timeout`` s."""
        return list(self.request("poll", wait=timeout, chs=chs, timeout=timeout)["ready"])

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class _RemoteFd:
    """A remote channel's fd as a command names it (MIGRATE_ID's ``fd``): its number there."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


class RemoteRaw:
    """One of the peer's channels, with :class:`pyrdmacm.conformance.Raw`'s calls."""

    def __init__(self, kernel: RemoteKernel, ch: int, fd: int) -> None:
        from pyrdmacm.core.device import ReplyBuffer
        from pyrdmacm.conformance.raw import REPLY_SIZE

        self.kernel, self.ch, self.dev = kernel, ch, _RemoteFd(fd)
        self.reply = ReplyBuffer(REPLY_SIZE)  # the last reply, as the peer's buffer held it

    def send(self, name: str, fields: Dict[str, Any], out: Optional[int] = None) -> int:
        r = self.kernel.request("send", ch=self.ch, name=name, fields=_encode(fields), out=out)
        self.reply.clear()
        self.reply.fill(bytes.fromhex(r["reply"]))
        return int(r["err"])

    def get_event(self, out: Optional[int] = None) -> int:
        return self.send("GET_EVENT", {}, out=out)

    def reply_of(self, name: str) -> Dict[str, Any]:
        from pyrdmacm.wire import COMMAND

        codec = COMMAND[name].reply
        assert codec is not None, "%s has no reply" % name
        return codec.unpack_dict(self.reply.view)

    def wait(self, timeout: float) -> bool:
        """Whether an event is queued, waiting up to ``timeout`` s."""
        return bool(self.kernel.poll([self.ch], timeout))

    def close(self) -> None:
        self.kernel.request("close", ch=self.ch)

    def alive(self) -> str:
        return str(self.kernel.request("alive", ch=self.ch)["dead"])


def main(argv: List[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="tests/ucma_remote.py", description=__doc__.split("\n\n")[0])
    p.add_argument("action", choices=["serve"])
    p.add_argument("--port", type=int, default=PORT)
    serve(p.parse_args(argv).port)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    sys.exit(main(sys.argv[1:]))
