"""Side-by-side runs of a scenario through librdmacm and through pyrdmacm.

Theory of operation
-------------------
A scenario is a list of steps (tools/parity/librdmacm_case.c documents the language).
Each implementation runs it in its own process under ``strace -f -X raw -xx -y -e
trace=write``; the process prints what it observed as JSON (return values, errnos,
events, addresses, device, GIDs) and strace records every ``write()`` it made.

:func:`command_stream` keeps the writes to ``/dev/infiniband/rdma_cm`` made after the
scenario's marker (a write of ``parity-start`` to fd -1), which leaves librdmacm's
start-up probe out, and decodes each with :mod:`pyrdmacm.decode`.  :func:`normalise`
replaces what legitimately differs between two processes by its structure: reply
pointers and SET_OPTION's value pointer become ``"ptr"`` (or 0), the ``uid`` each
library chose and the kernel's id handles become ordinals in order of appearance (the
handles of multicast groups, LEAVE_MCAST's ``id``, counted apart: the kernel numbers
them in a table of their own).

:func:`compare` then says how the two runs differ: the non-QUERY commands must be the
same sequence (command, sizes, every field, return value and errno); every QUERY
pyrdmacm made must be one librdmacm made too (pyrdmacm defers them until asked, so
it may make fewer, later); and the JSON of both must agree step by step.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pyrdmacm import decode

RDMA_CM = "/dev/infiniband/rdma_cm"
MARKER = b"parity-start"
EPHEMERAL = ("src_port",)

_LINE = re.compile(
    r'^(?:\[pid\s+)?(?:(?P<pid>\d+)\]?\s+)?write\((?P<fd>-?\d+)(?:<(?P<path>[^>]*)>)?,\s*'
    r'"(?P<data>(?:[^"\\]|\\.)*)"(?P<more>\.\.\.)?,\s*(?P<len>\d+)\)\s*=\s*'
    r'(?P<ret>-?\d+)(?:\s+(?P<err>E[A-Z0-9]+))?'
)


def _unescape(text: str) -> bytes:
    return text.encode("latin-1").decode("unicode_escape").encode("latin-1")


@dataclass(frozen=True)
class Write:
    fd: int
    path: str
    data: bytes
    ret: int
    err: Optional[str]


def parse_strace(text: str) -> List[Write]:
    """Every complete ``write()`` of an ``strace -X raw -xx -y`` log."""
    out = []
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if not m:
            continue
        if m.group("more"):
            raise ValueError("strace truncated a write (raise -s): %s" % line[:120])
        path = _unescape(m.group("path")).decode() if m.group("path") else ""
        out.append(Write(int(m.group("fd")), path, _unescape(m.group("data")), int(m.group("ret")), m.group("err")))
    return out


def command_stream(writes: Sequence[Write]) -> List[Dict[str, Any]]:
    """The decoded rdma_cm commands written after the marker, each with its outcome."""
    started = False
    stream = []
    for w in writes:
        if w.fd == -1 and w.data == MARKER:
            started = True
            continue
        if not started or w.path != RDMA_CM:
            continue
        cmd = decode.decode_command(w.data)
        cmd["written"] = len(w.data)
        cmd["result"] = w.err or w.ret
        stream.append(cmd)
    if not started:
        raise ValueError("the scenario's marker write is missing from the strace log")
    return stream


def normalise(stream: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Pointers, uids and kernel handles replaced by their structure (see module doc)."""
    uids: Dict[int, int] = {}
    handles: Dict[int, int] = {}
    groups: Dict[int, int] = {}
    out = []
    for cmd in stream:
        cmd = json.loads(json.dumps(cmd))
        body = cmd.get("body")
        if isinstance(body, dict):
            for pointer in ("response", "optval"):
                if pointer in body:
                    body[pointer] = "ptr" if body[pointer] else 0
            if "uid" in body:
                body["uid"] = "uid%d" % uids.setdefault(body["uid"], len(uids))
            if "id" in body:
                if cmd.get("cmd") == "LEAVE_MCAST":
                    body["id"] = "mc%d" % groups.setdefault(body["id"], len(groups))
                else:
                    body["id"] = "id%d" % handles.setdefault(body["id"], len(handles))
        out.append(cmd)
    return out


def _is_query(cmd: Dict[str, Any]) -> bool:
    return cmd["cmd"] in ("QUERY", "QUERY_ROUTE")


def compare(lib: Sequence[Dict[str, Any]], py: Sequence[Dict[str, Any]]) -> List[str]:
    """Differences between two normalised command streams (empty when they agree)."""
    problems = []
    lib_main = [c for c in lib if not _is_query(c)]
    py_main = [c for c in py if not _is_query(c)]
    for i in range(max(len(lib_main), len(py_main))):
        a = lib_main[i] if i < len(lib_main) else None
        b = py_main[i] if i < len(py_main) else None
        if a != b:
            problems.append("command %d: librdmacm %s, pyrdmacm %s" % (i, _short(a), _short(b)))
    lib_queries = {_query_key(c) for c in lib if _is_query(c)}
    for c in py:
        if _is_query(c) and _query_key(c) not in lib_queries:
            problems.append("pyrdmacm made a query librdmacm did not: %s" % _short(c))
    return problems


def _query_key(cmd: Dict[str, Any]) -> str:
    return json.dumps(cmd, sort_keys=True)


def _short(cmd: Optional[Dict[str, Any]]) -> str:
    return "nothing" if cmd is None else json.dumps(cmd, sort_keys=True)


def compare_reports(lib: Dict[str, Any], py: Dict[str, Any], ignore: Sequence[str] = ()) -> List[str]:
    """Differences between the two programs' JSON reports, step by step."""
    problems = []
    a, b = lib["steps"], py["steps"]
    if len(a) != len(b):
        problems.append("librdmacm reported %d steps, pyrdmacm %d" % (len(a), len(b)))
    for i, (x, y) in enumerate(zip(a, b)):
        for key in sorted(set(x) | set(y)):
            if key in ignore or key == "refused":
                continue
            if key in EPHEMERAL and x.get(key) and y.get(key):
                continue  # the kernel picked a free port for each: any nonzero one agrees
            if x.get(key) != y.get(key):
                problems.append("step %d (%s) %s: librdmacm %r, pyrdmacm %r"
                                % (i, x.get("call"), key, x.get(key), y.get(key)))
    return problems


DRIVER_SOURCE = Path(__file__).resolve().parent.parent / "tools" / "parity" / "librdmacm_case.c"


def build_driver(dest: Path) -> Path:
    """Compile tools/parity/librdmacm_case.c against the installed librdmacm-dev."""
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(dest), str(DRIVER_SOURCE), "-lrdmacm", "-libverbs"],
                   check=True, capture_output=True, text=True)
    return dest


def strace_argv(log: str, argv: Sequence[str]) -> List[str]:
    """``argv`` under strace, every write() logged whole, with fd paths, to ``log``."""
    return ["strace", "-f", "-X", "raw", "-xx", "-y", "-s", "65536", "-e", "trace=write", "-o", log, *argv]


def run_traced(argv: Sequence[str], log: str, timeout: float = 60,
               env: Optional[Dict[str, str]] = None) -> Tuple[Dict[str, Any], List[Dict[str, Any]]]:
    """Run one scenario program under strace: (its JSON report, its rdma_cm commands).

    A program still running after ``timeout`` seconds is killed (with strace: one process
    group) and its report, the steps it printed so far, gets ``"hung": true``.
    """
    proc = subprocess.Popen(
        strace_argv(log, argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
    )
    hung = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        hung = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    if hung:
        report = json.loads(out.rstrip().rstrip(",") + "]}")
        report["hung"] = True
    elif proc.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (argv[0], proc.returncode, err[-2000:]))
    else:
        report = json.loads(out)
    with open(log) as f:
        writes = parse_strace(f.read())
    return report, command_stream(writes)
