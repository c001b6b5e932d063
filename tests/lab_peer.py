"""The peer agent of the kernel lab's pair topology, and its client.

In the lab's "pair" topology (tools/lab) the tests run on lab-b (10.9.0.2); lab-a (10.9.0.1)
is the peer. To check pyrdmacm against another host's librdmacm (ucmatose, udaddy, rping...),
a test must run programs over there, while it waits, reads and signals them here.

Theory of operation
-------------------
``python tests/lab_peer.py serve`` runs on lab-a: tests/labplugin.py passes it to tools/lab
as the pair's ``--peer-command``, so it starts once the peer is set up, with the checkout as
cwd and the lab's environment (same Python, same virtualenv). Its own log is the peer's
second serial port: ``$LAB_OUT/peer/output.log`` (on the host too).

It listens on TCP port ``PORT`` (7007) of every address of the peer and speaks line-delimited
JSON: each request is one JSON object on one line, ``{"op": NAME, ...}``; each answer is one
line, ``{"ok": true, ...}`` or ``{"ok": false, "error": TEXT}``. A connection may carry any
number of requests, answered in order; the client below opens one per request, so a request
that timed out can never leave a stale answer for the next one. The operations:

``ping``       -> ``host`` (hostname), ``pid``, ``python`` (sys.executable), ``cwd``, ``running``
``start``      ``argv`` (list), optional ``env`` (merged over the agent's own environment; a
               null value removes a variable), ``cwd`` (default: the checkout), ``stdin``
               (text written to the program, then closed; default: /dev/null)
               -> ``id``, ``pid``. The program runs in its own session (process group);
               stdout and stderr are collected separately (at most ``MAX_OUTPUT`` bytes each).
``output``     ``id`` -> ``stdout``, ``stderr``, ``returncode`` (null while it runs)
``wait``       ``id``, ``timeout`` -> the same, plus ``timed_out`` (the program still runs)
``wait_for``   ``id``, ``pattern`` (a Python regex, searched with re.MULTILINE), ``stream``
               ("stdout", "stderr" or "any"), ``timeout`` -> the same, plus ``match`` (the
               line that matched, or null: the program exited first, or the time ran out)
``signal``     ``id``, ``signal`` (a number) -> sent to the program's whole process group
``kill_all``   ``grace`` -> ``killed``: each program still running gets SIGTERM, after
               ``grace`` seconds SIGKILL, and is listed with its argv, returncode and output;
               every program (running or not) is then forgotten. The ``peer`` fixture
               (tests/kernel/conftest.py) sends it after each test.

Every wait is bounded on the agent's side (``timeout`` is capped at ``MAX_TIMEOUT``) and the
client adds ``REPLY_MARGIN`` seconds to its socket time-out: a dead agent, a lost link or a
hung program becomes a ``PeerError`` naming the request, never a hung test session.
Programs and outputs are text (UTF-8, undecodable bytes replaced). Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
from typing import Any, Optional, Sequence

PORT = 7007
MAX_OUTPUT = 8 << 20  # bytes kept per stream of a program
MAX_TIMEOUT = 900.0  # no agent-side wait is longer
MAX_REQUEST = 1 << 20  # bytes of one request line
REPLY_MARGIN = 15.0  # the client's socket waits this much longer than the request's timeout
CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def log(message: str) -> None:
    print(f"lab-peer: {time.strftime('%H:%M:%S')} {message}", flush=True)


# ----------------------------------------------------------------------------------------
# The agent (on the peer)
# ----------------------------------------------------------------------------------------

class Program:
    """One program the agent started: its process group and what it printed so far."""

    def __init__(self, ident: int, argv: list[str], env: dict, cwd: str,
                 stdin: Optional[str]) -> None:
        self.id, self.argv = ident, argv
        self.cond = threading.Condition()
        self.data = {"stdout": bytearray(), "stderr": bytearray()}
        self.truncated = {"stdout": False, "stderr": False}
        self.done = False  # exited, and its pipes drained (or given up on)
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, start_new_session=True,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.pid = self.proc.pid
        readers = [threading.Thread(target=self._read, args=(name, pipe), daemon=True)
                   for name, pipe in (("stdout", self.proc.stdout), ("stderr", self.proc.stderr))]
        for reader in readers:
            reader.start()
        if stdin is not None:
            threading.Thread(target=self._feed, args=(stdin,), daemon=True).start()
        threading.Thread(target=self._reap, args=(readers,), daemon=True).start()

    def _feed(self, text: str) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(text.encode())
            self.proc.stdin.close()
        except OSError:
            pass

    def _read(self, name: str, pipe) -> None:
        while True:
            try:
                chunk = os.read(pipe.fileno(), 65536)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.cond.notify_all()
                    return
                room = MAX_OUTPUT - len(self.data[name])
                self.data[name] += chunk[:max(room, 0)]
                self.truncated[name] |= len(chunk) > room
                self.cond.notify_all()

    def _reap(self, readers: list[threading.Thread]) -> None:
        self.proc.wait()
        for reader in readers:  # a child that outlived it may hold the pipes: not forever
            reader.join(timeout=1.0)
        with self.cond:
            self.done = True
            self.cond.notify_all()
        log(f"#{self.id} pid {self.pid} exited {self.proc.returncode}: {shlex.join(self.argv)}")

    def text(self, name: str) -> str:
        text = self.data[name].decode(errors="replace")
        return text + (f"\n[lab-peer: output cut at {MAX_OUTPUT} bytes]\n"
                       if self.truncated[name] else "")

    def state(self) -> dict:
        """Call with self.cond held."""
        return {"id": self.id, "pid": self.pid, "argv": self.argv,
                "returncode": self.proc.returncode if self.done else None,
                "stdout": self.text("stdout"), "stderr": self.text("stderr")}

    def wait(self, timeout: float) -> dict:
        with self.cond:
            self.cond.wait_for(lambda: self.done, timeout)
            return dict(self.state(), timed_out=not self.done)

    def wait_for(self, pattern: str, stream: str, timeout: float) -> dict:
        regex = re.compile(pattern, re.MULTILINE)
        streams = ("stdout", "stderr") if stream == "any" else (stream,)
        if not set(streams) <= {"stdout", "stderr"}:
            raise ValueError(f"stream {stream!r}: stdout, stderr or any")
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for name in streams:
                    text = self.text(name)
                    found = regex.search(text)
                    if found:
                        start = text.rfind("\n", 0, found.start()) + 1
                        end = text.find("\n", found.end())
                        line = text[start:end if end >= 0 else len(text)]
                        return dict(self.state(), match=line, timed_out=False)
                left = deadline - time.monotonic()
                if self.done or left <= 0:
                    return dict(self.state(), match=None, timed_out=not self.done)
                self.cond.wait(left)

    def signal(self, signum: int) -> None:
        try:
            os.killpg(self.pid, signum)
        except ProcessLookupError:  # the group is gone; the leader may still be a zombie
            pass


class Agent:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.programs: dict[int, Program] = {}
        self.next_id = 1

    def program(self, request: dict) -> Program:
        with self.lock:
            program = self.programs.get(request.get("id"))  # type: ignore[arg-type]
        if program is None:
            raise KeyError(f"no program #{request.get('id')} (forgotten after kill_all?)")
        return program

    def handle(self, request: dict) -> dict:
        op = request.get("op")
        timeout = min(float(request.get("timeout", 10.0)), MAX_TIMEOUT)
        if op == "ping":
            with self.lock:
                running = [p.id for p in self.programs.values() if not p.done]
            return {"host": socket.gethostname(), "pid": os.getpid(),
                    "python": sys.executable, "cwd": os.getcwd(), "running": running}
        if op == "start":
            argv = request["argv"]
            if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
                raise ValueError("argv must be a non-empty list of strings")
            env = dict(os.environ)
            for key, value in (request.get("env") or {}).items():
                if value is None:
                    env.pop(key, None)
                else:
                    env[key] = str(value)
            with self.lock:
                ident, self.next_id = self.next_id, self.next_id + 1
                program = Program(ident, argv, env, request.get("cwd") or CHECKOUT,
                                  request.get("stdin"))
                self.programs[ident] = program
            log(f"#{ident} pid {program.pid} started: {shlex.join(argv)}")
            return {"id": ident, "pid": program.pid}
        if op == "output":
            program = self.program(request)
            with program.cond:
                return program.state()
        if op == "wait":
            return self.program(request).wait(timeout)
        if op == "wait_for":
            return self.program(request).wait_for(
                request["pattern"], request.get("stream", "stdout"), timeout)
        if op == "signal":
            program = self.program(request)
            program.signal(int(request["signal"]))
            log(f"#{program.id} pid {program.pid}: signal {request['signal']}")
            return {}
        if op == "kill_all":
            return {"killed": self.kill_all(float(request.get("grace", 2.0)))}
        raise ValueError(f"unknown op {op!r}")

    def kill_all(self, grace: float) -> list[dict]:
        with self.lock:
            programs, self.programs = list(self.programs.values()), {}
        running = [p for p in programs if not p.done]
        for signum, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
            pending = [p for p in running if not p.done]
            for program in pending:
                program.signal(signum)
            deadline = time.monotonic() + wait
            for program in pending:
                with program.cond:
                    program.cond.wait_for(lambda p=program: p.done,
                                          max(deadline - time.monotonic(), 0))
        killed = []
        for program in running:
            with program.cond:
                killed.append(program.state())
        if killed:
            log("kill_all: " + ", ".join(f"#{k['id']} ({k['argv'][0]}) -> {k['returncode']}"
                                         for k in killed))
        return killed


class Handler(socketserver.StreamRequestHandler):
    timeout = 600  # an idle connection is dropped
    agent: Agent

    def handle(self) -> None:
        while True:
            try:
                line = self.rfile.readline(MAX_REQUEST + 1)
            except OSError:
                return
            if not line:
                return
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("a request is a JSON object")
                reply = {"ok": True, **self.agent.handle(request)}
            except Exception as e:  # noqa: BLE001 - every failure is an answer
                reply = {"ok": False, "error": f"{type(e).__name__}: {e}"}
            try:
                self.wfile.write(json.dumps(reply).encode() + b"\n")
                self.wfile.flush()
            except OSError:
                return


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def serve(port: int) -> None:
    agent = Agent()
    Handler.agent = agent

    def stop(signum, _frame):
        agent.kill_all(0.5)
        sys.exit(128 + signum)
    signal.signal(signal.SIGTERM, stop)
    with Server(("", port), Handler) as server:
        log(f"{socket.gethostname()} listening on TCP port {port} (pid {os.getpid()})")
        server.serve_forever()


# ----------------------------------------------------------------------------------------
# The client (in the tests, on lab-b)
# ----------------------------------------------------------------------------------------

class PeerError(Exception):
    """The peer agent failed, did not answer in time, or a program did not do what was
    awaited. The message says which request, and what the program printed so far."""


class PeerTimeout(PeerError):
    """A program on the peer did not exit, or did not print what was awaited, in time."""


def _shown(stdout: str, stderr: str) -> str:
    def block(name: str, text: str) -> str:
        text = text.rstrip("\n")
        if len(text) > 4000:
            text = "...\n" + text[-4000:]
        return f"--- {name} ---\n{text}" if text else f"--- {name}: (empty)"
    return block("stdout", stdout) + "\n" + block("stderr", stderr)


class PeerAgent:
    """Talks to the agent: one TCP connection, one request, one answer."""

    def __init__(self, host: str, port: int = PORT, *, connect_timeout: float = 10.0,
                 hint: str = "") -> None:
        self.host, self.port, self.connect_timeout, self.hint = host, port, connect_timeout, hint

    def request(self, op: str, *, timeout: float = 10.0, **fields: Any) -> dict:
        where = f"the peer agent at {self.host}:{self.port}"
        try:
            sock = socket.create_connection((self.host, self.port), timeout=self.connect_timeout)
        except OSError as e:
            raise PeerError(f"{where} is unreachable for {op!r}: {e}{self.hint}") from None
        with sock:
            sock.settimeout(timeout + REPLY_MARGIN)
            data = bytearray()
            try:
                sock.sendall(json.dumps({"op": op, "timeout": timeout, **fields}).encode()
                             + b"\n")
                while not data.endswith(b"\n"):
                    chunk = sock.recv(1 << 16)
                    if not chunk:
                        raise PeerError(f"{where} closed the connection without answering "
                                        f"{op!r} (agent dead?){self.hint}")
                    data += chunk
            except socket.timeout:
                raise PeerError(f"{where} did not answer {op!r} within "
                                f"{timeout + REPLY_MARGIN:g} s (agent hung?){self.hint}") from None
            except OSError as e:
                raise PeerError(f"{where} failed during {op!r}: {e}{self.hint}") from None
        reply = json.loads(data)
        if not reply.pop("ok", False):
            raise PeerError(f"{where} refused {op!r}: {reply.get('error')}")
        return reply

    def wait_until_up(self, timeout: float = 60.0) -> dict:
        """Ping until the agent answers: it starts a moment after the peer is ready."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.request("ping", timeout=5.0)
            except PeerError as e:
                if time.monotonic() > deadline:
                    raise PeerError(f"no peer agent after {timeout:g} s: {e}") from None
                time.sleep(0.25)


class Proc:
    """A program running on the peer (``Peer.start``)."""

    def __init__(self, agent: PeerAgent, argv: Sequence[str], reply: dict) -> None:
        self.agent, self.argv = agent, list(argv)
        self.id, self.pid = reply["id"], reply["pid"]
        self.returncode: Optional[int] = None

    def __repr__(self) -> str:
        return f"<peer #{self.id} pid {self.pid}: {' '.join(self.argv)}>"

    def _update(self, reply: dict) -> dict:
        self.returncode = reply["returncode"]
        return reply

    def output(self) -> tuple[str, str]:
        """(stdout, stderr) so far."""
        reply = self._update(self.agent.request("output", id=self.id))
        return reply["stdout"], reply["stderr"]

    def poll(self) -> Optional[int]:
        return self._update(self.agent.request("output", id=self.id))["returncode"]

    def wait(self, timeout: float = 30.0) -> tuple[int, str, str]:
        """(returncode, stdout, stderr) once it exits; PeerTimeout if it runs past timeout
        (it keeps running: kill() it, or leave it to the fixture's clean-up)."""
        reply = self._update(self.agent.request("wait", id=self.id, timeout=timeout))
        if reply["timed_out"]:
            raise PeerTimeout(f"{self!r} still runs after {timeout:g} s\n"
                              + _shown(reply["stdout"], reply["stderr"]))
        return reply["returncode"], reply["stdout"], reply["stderr"]

    def wait_for_line(self, pattern: str, timeout: float = 20.0, stream: str = "stdout") -> str:
        """The first line of ``stream`` (stdout, stderr, any) where ``pattern`` (a regex)
        matches; PeerError if the program exits without printing it, PeerTimeout after
        ``timeout``. A C program writes its stdout to a pipe in blocks: start it with
        ``line_buffered=True`` to see its lines as they come."""
        reply = self._update(self.agent.request("wait_for", id=self.id, pattern=pattern,
                                                stream=stream, timeout=timeout))
        if reply["match"] is not None:
            return reply["match"]
        if reply["timed_out"]:
            raise PeerTimeout(f"{self!r} printed no line matching {pattern!r} on {stream} "
                              f"within {timeout:g} s\n"
                              + _shown(reply["stdout"], reply["stderr"]))
        raise PeerError(f"{self!r} exited with {reply['returncode']} without printing a line "
                        f"matching {pattern!r} on {stream}\n"
                        + _shown(reply["stdout"], reply["stderr"]))

    def signal(self, signum: int) -> None:
        """Send ``signum`` to its process group."""
        self.agent.request("signal", id=self.id, signal=int(signum))

    def kill(self, timeout: float = 10.0) -> tuple[Optional[int], str, str]:
        """SIGKILL its process group; (returncode, stdout, stderr) once it is gone."""
        self.signal(signal.SIGKILL)
        return self.wait(timeout)


class Peer:
    """The pair topology's peer, lab-a, as a test sees it (the ``peer`` fixture)."""

    def __init__(self, address: str, agent: PeerAgent) -> None:
        self.address, self.agent = address, agent
        self.procs: list[Proc] = []
        self.host = ""  # the peer's hostname (lab-a), set by the fixture
        self.killed_before: list[dict] = []  # set by the fixture: see its docstring

    def start(self, argv: Sequence[str], *, env: Optional[dict] = None,
              cwd: Optional[str] = None, stdin: Optional[str] = None,
              line_buffered: bool = False) -> Proc:
        """Start ``argv`` on the peer in the background (cwd: the checkout). With
        ``line_buffered`` it runs under ``stdbuf -oL -eL`` (a C program's stdio then
        flushes each line into the pipe, so wait_for_line sees it at once)."""
        argv = [str(a) for a in argv]
        if line_buffered:
            argv = ["stdbuf", "-oL", "-eL", *argv]
        reply = self.agent.request("start", argv=argv, env=env, cwd=cwd, stdin=stdin)
        proc = Proc(self.agent, argv, reply)
        self.procs.append(proc)
        return proc

    def python(self, code: str, *args: str, **kwargs: Any) -> Proc:
        """Run a Python snippet on the peer with this very interpreter (same virtualenv)."""
        return self.start([sys.executable, "-c", code, *args], **kwargs)

    def run(self, argv: Sequence[str], timeout: float = 30.0, **kwargs: Any
            ) -> tuple[int, str, str]:
        """Start ``argv`` and wait for it: (returncode, stdout, stderr)."""
        return self.start(argv, **kwargs).wait(timeout)

    def cm_ids(self) -> list[dict]:
        """The peer's rdma_cm ids, as ``rdma -j resource show cm_id`` lists them."""
        code, out, err = self.run(["rdma", "-j", "resource", "show", "cm_id"], timeout=20)
        if code != 0:
            raise PeerError(f"rdma resource show cm_id failed on the peer ({code}): {err}")
        return json.loads(out or "[]")

    def wait_listening(self, port: int, ps: str = "TCP", timeout: float = 20.0) -> dict:
        """Wait until an rdma_cm id of the peer listens on ``port`` in port space ``ps``
        (TCP, UDP, IB, IPOIB); its ``rdma resource`` entry. Works whatever the program
        prints or buffers."""
        deadline = time.monotonic() + timeout
        while True:
            ids = self.cm_ids()
            for cm_id in ids:
                port_of = cm_id.get("src-addr", "").rpartition(":")[2]
                if cm_id.get("state") == "LISTEN" and cm_id.get("ps") == ps \
                        and port_of == str(port):
                    return cm_id
            if time.monotonic() > deadline:
                raise PeerTimeout(f"no rdma_cm id listens on {ps} port {port} of the peer "
                                  f"after {timeout:g} s; its cm_ids: {ids}")
            time.sleep(0.2)

    def cleanup(self, grace: float = 2.0) -> list[dict]:
        """Stop every program still running on the peer (SIGTERM, then SIGKILL after
        ``grace`` s) and forget them all; what was killed, with its output."""
        return self.agent.request("kill_all", grace=grace, timeout=grace + 15.0)["killed"]


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="tests/lab_peer.py", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    serve_cmd = sub.add_parser("serve", help="run the agent (on the peer)")
    serve_cmd.add_argument("--port", type=int, default=PORT)
    args = parser.parse_args(argv)
    if args.action == "serve":
        serve(args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
