"""Decode what a program wrote to rdma_cm (or what the kernel wrote back) into named fields.

Theory of operation
-------------------
Input is bytes: a whole command write (``rdma_ucm_cmd_hdr`` + body), or a
reply buffer together with the command it answers.  :func:`parse_input`
accepts hex (spaces, ``0x`` and ``\\x`` allowed) or a line of ``strace -xx -s 4096
-e trace=write -P /dev/infiniband/rdma_cm`` output (``-X raw`` and ``-y`` lines too)
such as ``write(3, "\\x15\\x00...", 280) = 280``.  Decoding uses
the construct declarations of :mod:`pyrdmacm.abi` -- speed does not matter
here, fidelity does -- and renders the result as plain JSON-able data:
enums by name, socket addresses as text, byte arrays as hex.

Bad input raises :class:`~pyrdmacm.errors.DecodeError` naming the struct and
the offset where the bytes ran out or went wrong.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, NamedTuple, Optional, Tuple

from construct import Container, ListContainer, StreamError

from .abi import structs as _structs
from . import abi
from .addr import unpack_sockaddr
from .errors import DecodeError

__all__ = ["parse_input", "parse_writes", "read_trace", "TraceWrite", "decode_command", "decode_reply", "REPLY_KINDS"]

_STRACE = re.compile(r'write\(\s*\d+(?:<[^>]*>)?\s*,\s*"((?:[^"\\]|\\.)*)"')  # -y adds <path>
_HEXCHARS = re.compile(r"^[0-9a-fA-F]*$")

#: ``--reply`` names: command (and QUERY option) -> the reply struct
REPLY_KINDS = {
    "CREATE_ID": "rdma_ucm_create_id_resp",
    "DESTROY_ID": "rdma_ucm_destroy_id_resp",
    "GET_EVENT": "rdma_ucm_event_resp",
    "QUERY_ROUTE": "rdma_ucm_query_route_resp",
    "QUERY:ADDR": "rdma_ucm_query_addr_resp",
    "QUERY:GID": "rdma_ucm_query_addr_resp",
    "QUERY:PATH": "rdma_ucm_query_path_resp",
    "QUERY:IB_SERVICE": "rdma_ucm_query_ib_service_resp",
    "INIT_QP_ATTR": "ib_uverbs_qp_attr",
    "MIGRATE_ID": "rdma_ucm_migrate_resp",
    "JOIN_MCAST": "rdma_ucm_create_id_resp",
    "JOIN_IP_MCAST": "rdma_ucm_create_id_resp",
    "LEAVE_MCAST": "rdma_ucm_destroy_id_resp",
}

_VARIABLE = {
    "rdma_ucm_query_path_resp": ("num_paths", "path_data", _structs.ib_path_rec_data),
    "rdma_ucm_query_ib_service_resp": ("num_service_recs", "recs", _structs.ib_user_service_rec),
}

_ENUM_FIELDS = {
    ("rdma_ucm_cmd_hdr", "cmd"): abi.UserCmCmd,
    ("rdma_ucm_create_id", "ps"): abi.PortSpace,
    ("rdma_ucm_create_id", "qp_type"): abi.QpType,
    ("rdma_ucm_query", "option"): abi.QueryOption,
    ("rdma_ucm_event_resp", "event"): abi.CmEventType,
    ("rdma_ucm_write_cm_event", "event"): abi.CmEventType,
    ("rdma_ucm_join_mcast", "join_flags"): abi.McJoinFlag,
    ("rdma_ucm_set_option", "level"): abi.OptionLevel,
    ("rdma_ucm_init_qp_attr", "qp_state"): abi.QpState,
    ("rdma_ucm_notify", "event"): abi.NotifyEvent,
    ("rdma_ucm_reject", "reason"): abi.RejectReason,
}
#: SET_OPTION's ``optname`` is named by its ``level``
_OPTION_NAMES = {int(abi.OptionLevel.ID): abi.OptionId, int(abi.OptionLevel.IB): abi.OptionIb}

_SOCKADDR_FIELDS = {"addr", "src_addr", "dst_addr"}


def _unquote(body: str) -> bytes:
    """The bytes of strace's quoted buffer (``\\xNN`` with -x/-xx, octal ``\\NNN`` without,
    ``\\t`` ``\\n`` ... and printable ASCII as is)."""
    odd = next((c for c in body if not " " <= c <= "~"), None)
    if odd is not None:  # strace escapes every byte that is not printable ASCII
        raise DecodeError("strace line", "the quoted buffer holds %r, which strace never prints (it writes "
                          "bytes that are not printable ASCII as \\xNN): paste the line as strace printed it, "
                          "or give hex bytes" % odd)
    try:
        return body.encode("latin-1").decode("unicode_escape").encode("latin-1")
    except UnicodeError as e:
        raise DecodeError("strace line", "bad escape in the quoted buffer (%s)" % e) from None


def parse_writes(text: str) -> List[Tuple[int, str]]:
    """Every ``write(...)`` of an strace trace (``-f``'s ``[pid N]`` prefixes, ``-y``'s
    ``<path>``, ``<unfinished ...>`` lines too): ``(line number, quoted buffer)``, in order;
    :func:`parse_input` makes each one's bytes."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        m = _STRACE.search(line)
        if m:
            out.append((n, line))
    return out


def parse_input(text: str) -> bytes:
    """Bytes from hex text or from an strace ``write(...)`` line."""
    text = text.strip()
    m = _STRACE.search(text)
    if m:
        return _unquote(m.group(1))
    cleaned = re.sub(r"(0x|\\x|[\s:,])", "", text)
    if not cleaned:  # e.g. a grep that matched no line of the trace
        raise DecodeError("input", "nothing to decode: give hex bytes or an strace write(...) line of the device")
    if not _HEXCHARS.match(cleaned) or len(cleaned) % 2:
        raise DecodeError(
            "input",
            "neither hex bytes nor an strace write(...) line (use `strace -xx -s 4096 -e trace=write "
            "-P /dev/infiniband/rdma_cm`)",
        )
    return bytes.fromhex(cleaned)


def _render(struct_name: str, value: Any, key: str = "") -> Any:
    if isinstance(value, Container):
        out: Dict[str, Any] = {}
        for k, v in value.items():
            if k.startswith("_"):
                continue
            enum = _ENUM_FIELDS.get((struct_name, k))
            if enum is not None and isinstance(v, int):
                out[k] = enum.name_of(v)
            elif k in _SOCKADDR_FIELDS and isinstance(v, (Container, bytes)):
                out[k] = _sockaddr(v)
            else:
                out[k] = _render(struct_name, v, k)
        return out
    if isinstance(value, ListContainer):
        return [_render(struct_name, v, key) for v in value]
    if isinstance(value, bytes):
        return value.hex()
    return value


def _sockaddr(v: Any) -> Optional[str]:
    raw = v if isinstance(v, bytes) else _rebuild_sockaddr(v)
    try:
        a = unpack_sockaddr(raw)
    except DecodeError as e:
        return "<%s>" % e
    return None if a is None else str(a)


def _rebuild_sockaddr(c: Container) -> bytes:
    if "ss_family" in c:
        return bytes(_structs.kernel_sockaddr_storage.build(c))
    return bytes(_structs.sockaddr_in6.build(c))


def _parse(name: str, data: bytes, offset: int = 0) -> Tuple[Container, int]:
    con = _structs.STRUCTS[name]
    size = con.sizeof()
    if len(data) - offset < size:
        raise DecodeError(name, "needs %d bytes, %d left" % (size, len(data) - offset), offset + len(data) - offset)
    try:
        return con.parse(data[offset : offset + size]), size
    except StreamError as e:  # pragma: no cover - the length check above comes first
        raise DecodeError(name, str(e), offset) from None


def _status_name(event: int, status: int) -> str:
    """What an event's status means, as Event.status_name says it (a reply carries no id: an
    UNREACHABLE's positive status is named as the SIDR status it is on a datagram id)."""
    from .errors import errno_name

    if status < 0:
        return errno_name(status)
    if event == abi.CmEventType.REJECTED:
        return "reject reason %s" % abi.RejectReason.name_of(status)
    if event == abi.CmEventType.UNREACHABLE:
        return "SIDR status %s (a datagram id's)" % abi.SidrStatus.name_of(status)
    return str(status)


def decode_struct(name: str, data: bytes, offset: int = 0) -> Dict[str, Any]:
    parsed, size = _parse(name, data, offset)
    out: Dict[str, Any] = _render(name, parsed)
    if name == "rdma_ucm_set_option" and parsed.level in _OPTION_NAMES:
        out["optname"] = _OPTION_NAMES[parsed.level].name_of(parsed.optname)
    if name in ("rdma_ucm_event_resp", "rdma_ucm_write_cm_event"):
        status = parsed.status
        status = out["status"] = status - 0x100000000 if status & 0x80000000 else status
        if status:
            out["status_name"] = _status_name(int(parsed.event), status)
    if name in _VARIABLE:
        count_field, list_field, elem = _VARIABLE[name]
        n = parsed[count_field]
        items = []
        pos = offset + size
        for i in range(n):
            if pos + elem.sizeof() > len(data):
                raise DecodeError(name, "%s says %d records, bytes end in record %d" % (count_field, n, i), pos)
            items.append(_render(name, elem.parse(data[pos : pos + elem.sizeof()])))
            pos += elem.sizeof()
        out[list_field] = items
    return out


def decode_command(data: bytes) -> Dict[str, Any]:
    """A whole write: header and body; trailing bytes beyond ``in`` are reported, not decoded."""
    hdr, hsize = _parse("rdma_ucm_cmd_hdr", data)
    try:
        cmd = abi.UserCmCmd(hdr.cmd)
    except ValueError:
        raise DecodeError("rdma_ucm_cmd_hdr", "unknown command %d (0..24 exist)" % hdr.cmd, 0) from None
    out: Dict[str, Any] = {"cmd": cmd.name, "in": hdr["in"], "out": hdr.out}
    body_struct, reply = _structs.COMMANDS[cmd]
    if body_struct is None:
        out["body"] = data[hsize:].hex()
        return out
    name = next(n for n, c in _structs.STRUCTS.items() if c is body_struct)
    if hdr["in"] + hsize > len(data):
        raise DecodeError(name, "header says in=%d but only %d body bytes follow" % (hdr["in"], len(data) - hsize), hsize)
    out["struct"] = name
    out["body"] = decode_struct(name, data[: hsize + hdr["in"]], hsize)
    extra = len(data) - hsize - hdr["in"]
    if extra:
        out["trailing_bytes"] = extra
    return out


def decode_reply(kind: str, data: bytes) -> Dict[str, Any]:
    """A reply buffer, named by what produced it (see :data:`REPLY_KINDS`)."""
    key = kind.upper()
    name = REPLY_KINDS.get(key) or (key.lower() if key.lower() in _structs.STRUCTS else None)
    if name is None:
        raise DecodeError(kind, "unknown reply kind; use one of %s or a struct name" % ", ".join(REPLY_KINDS))
    return {"struct": name, "reply": decode_struct(name, data)}


# -- a whole trace: which fd each write went to, and what it returned

#: one strace line: ``[pid N] `` or ``N `` (-f, -ff -o), a time stamp (-t, -tt, -ttt, -r),
#: then a call ``name(args`` or the end of one ``<... name resumed>rest``
_LINE = re.compile(r"^\s*(?:\[pid\s+(\d+)\]\s*|(\d+)\s+)?(?:\d[\d:.]*\s+)?"
                   r"(?:<\.\.\.\s+(\w+)\s+resumed>(.*)|(\w+)\((.*))$")
#: the end of a finished call: ``) = RET`` and, for a failure, the errno's name (-T's time after)
_RESULT = re.compile(r"\)\s+=\s+(-?\d+|0x[0-9a-fA-F]+|\?)(?:\s+(E[A-Z0-9]+))?[^=]*$")
_UNFINISHED = re.compile(r"<unfinished\s*\.\.\.>\s*$")
#: a write's first two arguments: the fd, with -y's ``<path>`` (-yy's ``<path<char M:N>>``), and
#: the quoted buffer (``...`` after it: cut by -s)
_WRITE_ARGS = re.compile(r'\s*(\d+)(<(?:[^<>]|<[^>]*>)*>)?\s*,\s*"((?:[^"\\]|\\.)*)"(\.\.\.)?')
#: calls that give a new fd (its path, when they name one) or end one
_OPENS = {"open": 0, "openat": 1, "creat": 0, "openat2": 1}
_DUPS = {"dup", "dup2", "dup3", "fcntl", "fcntl64"}
_CLONES = {"clone", "clone3", "fork", "vfork"}
_STD = {0: "<stdin>", 1: "<stdout>", 2: "<stderr>"}


class TraceWrite(NamedTuple):
    """One ``write(2)`` of an strace trace, as :func:`read_trace` follows it."""

    #: the line of the trace it starts on (1-based)
    line: int
    #: strace -f's pid (a thread's id), None in a trace of one process
    pid: Optional[int]
    fd: int
    #: what the fd is: -y's path, else what the trace's open/dup/close said, else None
    path: Optional[str]
    #: whether the fd is the rdma_cm device (its path; for an fd the trace never opened,
    #: whether the trace opened rdma_cm at all: a trace of ``-P /dev/infiniband/rdma_cm``
    #: holds only its writes)
    rdma_cm: bool
    #: strace's quoted buffer (``parse_input`` makes its bytes), and whether -s cut it
    buffer: str
    truncated: bool
    #: what the write returned (None: unfinished when the trace ended, or ``?``), and the
    #: errno's name of a failure (``ENODEV``)
    ret: Optional[int]
    errno: Optional[str]


def _path_text(raw: str) -> str:
    """-y's ``<path>`` as text: strace escapes it as it escapes buffers (-xx: every byte)."""
    inner = raw[1:-1].split("<", 1)[0]  # -yy adds <char M:N>
    try:
        return _unquote(inner).decode("utf-8", "surrogateescape")
    except DecodeError:
        return inner


def _is_rdma_cm(path: str) -> bool:
    return path.rsplit("/", 1)[-1] == "rdma_cm"


def read_trace(text: str) -> List[TraceWrite]:
    """Every ``write(...)`` of an strace trace, each with the fd it went to and what that fd
    is, and what the write returned.  It follows each process's fds (``-f``: a thread shares
    its parent's, as ``clone(CLONE_FILES)`` says; a forked child has a copy): open, openat,
    dup, dup2, dup3, fcntl(F_DUPFD), close; 0, 1 and 2 are the standard streams.  A write
    split by another thread (``<unfinished ...>`` then ``<... write resumed>``) is one, with
    the resumed line's result."""
    tables: Dict[Optional[int], Dict[int, str]] = {}
    #: an unfinished call per pid: its line, name, text, and for a write what its fd was then
    pending: Dict[Optional[int], Tuple[int, str, List[str], Optional[str]]] = {}
    writes: List[TraceWrite] = []
    opened_rdma_cm = False

    def table(pid: Optional[int]) -> Dict[int, str]:
        t = tables.get(pid)
        if t is None:  # a pid first seen: a thread of the traced process, or the process itself
            t = tables[pid] = next(iter(tables.values())) if tables else dict(_STD)
        return t

    def fd_path(pid: Optional[int], args: str) -> Optional[str]:
        """What a write's fd is as the write starts (a thread may close it before it ends)."""
        w = _WRITE_ARGS.match(args)
        if w is None:
            return None
        return _path_text(w.group(2)) if w.group(2) else table(pid).get(int(w.group(1)))

    def finish(pid: Optional[int], n: int, name: str, args: str, end: str, started: Optional[str] = None) -> None:
        nonlocal opened_rdma_cm
        m = _RESULT.search(end)
        ret = None if m is None or m.group(1) == "?" else int(m.group(1), 0)
        err = m.group(2) if m is not None else None
        fds = table(pid)
        if name == "write":
            w = _WRITE_ARGS.match(args)
            if w is None:
                return
            fd = int(w.group(1))
            path = started if started is not None else fd_path(pid, args)
            is_cm = _is_rdma_cm(path) if path is not None else not opened_rdma_cm
            writes.append(TraceWrite(n, pid, fd, path, is_cm, w.group(3), bool(w.group(4)),
                                     ret if m is not None else None, err))
            return
        if ret is None or ret < 0:
            return
        if name in _OPENS:
            quoted = re.findall(r'"((?:[^"\\]|\\.)*)"', args)
            path = _path_text('<%s>' % quoted[0]) if quoted else "?"
            fds[ret] = path
            opened_rdma_cm = opened_rdma_cm or _is_rdma_cm(path)
        elif name in _DUPS:
            first = re.match(r"\s*(\d+)", args)
            if first and (name != "fcntl" and name != "fcntl64" or "F_DUPFD" in args):
                fds[ret] = fds.get(int(first.group(1)), "?")
        elif name == "close":
            first = re.match(r"\s*(\d+)", args)
            if first:
                fds.pop(int(first.group(1)), None)
        elif name in ("socket", "socketpair", "pipe", "pipe2", "eventfd2", "epoll_create1", "memfd_create"):
            fds[ret] = "<%s>" % name
        elif name in _CLONES and ret > 0:
            tables[ret] = fds if "CLONE_FILES" in args else dict(fds)

    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if m is None:
            continue
        pid_text = m.group(1) or m.group(2)
        pid = int(pid_text) if pid_text else None
        if m.group(3):  # <... name resumed>rest
            started = pending.pop(pid, None)
            if started is not None and started[1] == m.group(3):
                start_line, name, parts, path = started
                finish(pid, start_line, name, "".join(parts) + m.group(4), m.group(4), path)
            continue
        name, rest = m.group(5), m.group(6)
        if _UNFINISHED.search(rest):
            head = _UNFINISHED.sub("", rest)
            pending[pid] = (n, name, [head], fd_path(pid, head) if name == "write" else None)
            continue
        finish(pid, n, name, rest, rest)
    for pid, (start_line, name, parts, path) in pending.items():  # never resumed: no result
        if name == "write":
            finish(pid, start_line, name, "".join(parts), "", path)
    writes.sort(key=lambda w: w.line)
    return writes
