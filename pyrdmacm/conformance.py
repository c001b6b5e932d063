"""The kernel's own rdma_cm contract, checked against the running kernel.

Theory of operation
-------------------
Each case writes raw commands (built with the ABI layer's codecs, never through
:class:`~pyrdmacm.cm.CmId`, whose checks would refuse most of them first) to
``/dev/infiniband/rdma_cm`` and compares the errno the kernel answers with the
documented one: malformed writes, invalid commands, short reply buffers, unknown
ids and ids of another fd, wrong-state commands, reserved fields set, GET_OPTION's
ENOSYS, credentials; and regressions of the ucma bugs that syzbot found (resolve
twice then destroy, close with events pending, MIGRATE_ID racing DESTROY_ID,
CREATE_ID with a null reply pointer), where the contract is "no crash, and the fd
keeps working".

Every case runs on one shared fd, and after every case that fd must still create
and destroy an id: a kernel that wedges the fd fails the case that wedged it.
Where kernels legitimately differ, the expectation is data: ``(version, errno)``
steps, the errno from that kernel version on.  When the kernel log is readable, a
case that makes the kernel print ``BUG:``, ``WARNING:`` or a KASAN report fails.

:func:`run` returns :class:`Result` rows; ``pyrdmacm conformance`` prints them.
Cases that need a local address on an RDMA netdev find one through sysfs and an
``SIOCGIFADDR`` ioctl (or take ``local=``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import platform
import re
import socket
import struct
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import abi
from ._codec import CODECS
from ._device import KernelDevice, Poller, ReplyBuffer
from .addr import AF_IB, Address, parse_address
from .devices import list_devices, rdma_netdevs
from .errors import errno_name
from .events import decode_event_head

__all__ = ["Result", "CASES", "run", "kernel_version", "find_local_ipv4", "KernelBug", "KNOWN_BUGS", "known_bug"]

C = abi.UserCmCmd
_HDR = CODECS["rdma_ucm_cmd_hdr"]
#: an errno, errno steps by kernel version, or a text (what a case saw beyond an errno)
Expect = Union[int, str, Sequence[Tuple[Tuple[int, int], int]]]
Outcome = Union[int, str]


@dataclass(frozen=True)
class Result:
    case: str
    what: str
    expected: str
    observed: str
    passed: bool
    detail: str = ""

    def to_dict(self) -> Dict[str, object]:
        return asdict(self)


def kernel_version(release: Optional[str] = None) -> Tuple[int, int]:
    m = re.match(r"(\d+)\.(\d+)", release or platform.release())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def expected_errno(expect: Expect, version: Tuple[int, int]) -> Outcome:
    if isinstance(expect, (int, str)):
        return expect
    value = 0
    for since, err in expect:
        if version >= since:
            value = err
    return value


@dataclass(frozen=True)
class KernelBug:
    """A kernel bug the suite found, as data: what triggers it, the kernels it was seen on and
    the first one seen without it.  A case or test that would trigger it on an affected kernel
    (it may crash or wedge the kernel) leaves the trigger out there and says so."""

    name: str
    what: str
    seen_on: Tuple[int, int]
    not_seen_from: Tuple[int, int]
    evidence: str

    def affects(self, version: Tuple[int, int]) -> bool:
        return version < self.not_seen_from


KNOWN_BUGS: Dict[str, KernelBug] = {b.name: b for b in (
    KernelBug(
        "path_mig_without_alternate",
        "NOTIFY(PATH_MIG) on an established connection that has no alternate path: cm_migrate copies "
        "the unset alternate address vector over the primary one, and the next CM message the id sends "
        "(the DREP when it is destroyed after the peer's DREQ) dereferences its NULL port: "
        "'BUG: kernel NULL pointer dereference' in cm_alloc_msg from cm_send_drep_locked, and the "
        "process closing the fd hangs",
        (5, 10), (6, 1),
        "Debian bullseye's 5.10.223 in the lab, every time (connect, accept, NOTIFY COMM_EST, NOTIFY "
        "PATH_MIG, the client closes, the server closes); 6.1, 6.12 and 7.2 survive the same sequence "
        "(5.11 to 6.0 not tried)"),
)}


def known_bug(name: str, version: Tuple[int, int]) -> Optional[KernelBug]:
    """The recorded bug ``name`` if it affects kernel ``version``, else None."""
    bug = KNOWN_BUGS[name]
    return bug if bug.affects(version) else None


def _name(err: int) -> str:
    return "ok" if err == 0 else errno_name(err)


def _shown(want: Outcome) -> str:
    return want if isinstance(want, str) else _name(want)


# -- raw access --------------------------------------------------------------------------

class Raw:
    """Raw commands on one rdma_cm fd; every call returns 0 or the errno."""

    def __init__(self, path: Optional[str] = None) -> None:
        self.dev = KernelDevice(path)
        self.reply = ReplyBuffer(1024)
        self.path = path

    def close(self) -> None:
        self.dev.close()

    def write(self, data: bytes) -> int:
        try:
            self.dev.write(data)
        except OSError as e:
            return e.errno or errno.EIO
        return 0

    def cmd(self, cmd: int, struct_name: Optional[str], fields: Dict[str, object], out: int = 0,
            size_in: Optional[int] = None, body: Optional[bytes] = None) -> int:
        if body is None:
            body = CODECS[struct_name].pack_dict(fields) if struct_name else b""
        n = len(body) if size_in is None else size_in
        return self.write(_HDR.pack(cmd, n, out) + body)

    def create(self, ps: int = abi.PortSpace.TCP, qp_type: int = abi.QpType.RC) -> int:
        self.reply.clear()
        err = self.cmd(C.CREATE_ID, "rdma_ucm_create_id",
                       {"uid": 1, "response": self.reply.address, "ps": ps, "qp_type": qp_type}, out=4)
        if err:
            raise OSError(err, "CREATE_ID failed: %s" % _name(err))
        return int(struct.unpack_from("<I", self.reply.view)[0])

    def destroy(self, handle: int) -> int:
        return self.cmd(C.DESTROY_ID, "rdma_ucm_destroy_id", {"response": self.reply.address, "id": handle}, out=4)

    def resolve(self, handle: int, dst: Address, src: Optional[Address] = None, timeout_ms: int = 2000,
                **override: object) -> int:
        fields: Dict[str, object] = {
            "id": handle, "timeout_ms": timeout_ms, "dst_size": dst.size, "dst_addr": dst.pack_storage(),
            "src_size": src.size if src else 0, "src_addr": src.pack_storage() if src else b"",
        }
        fields.update(override)
        return self.cmd(C.RESOLVE_ADDR, "rdma_ucm_resolve_addr", fields)

    def bind(self, handle: int, addr: Address, **override: object) -> int:
        fields: Dict[str, object] = {"id": handle, "addr_size": addr.size, "addr": addr.pack_storage()}
        fields.update(override)
        return self.cmd(C.BIND, "rdma_ucm_bind", fields)

    def get_event(self, out: int = 336) -> int:
        return self.cmd(C.GET_EVENT, "rdma_ucm_get_event", {"response": self.reply.address}, out=out)

    def query(self, handle: int, option: int, out: int = 280) -> int:
        return self.cmd(C.QUERY, "rdma_ucm_query", {"response": self.reply.address, "id": handle, "option": option},
                        out=out)

    def alive(self) -> str:
        """'' when the fd still creates and destroys an id, else what failed."""
        try:
            h = self.create()
        except OSError as e:
            return "the fd no longer creates ids (%s)" % _name(e.errno or 0)
        err = self.destroy(h)
        return "" if err == 0 else "the fd no longer destroys ids (%s)" % _name(err)


class KernelLog:
    """New problem lines in /dev/kmsg since the last look, when readable: ``BUG:``,
    ``WARNING:``, KASAN and UBSAN reports, refcount_t complaints, list corruption, oopses."""

    BAD = re.compile(r"BUG:|kernel BUG|WARNING:|KASAN|UBSAN|general protection|Oops|refcount_t|"
                     r"list_(add|del) corruption")

    def __init__(self) -> None:
        try:
            self.fd: Optional[int] = os.open("/dev/kmsg", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.lseek(self.fd, 0, os.SEEK_END)
        except OSError:
            self.fd = None

    def new_problems(self) -> List[str]:
        found = []
        while self.fd is not None:
            try:
                line = os.read(self.fd, 8192).decode("utf-8", "replace")
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # records overwritten: keep reading
                    continue
                break
            msg = line.split(";", 1)[-1].strip()
            if self.BAD.search(msg):
                found.append(msg)
        return found

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def find_local_ipv4() -> Optional[str]:
    """An IPv4 address of a netdev that has an RDMA device (sysfs, then SIOCGIFADDR)."""
    netdevs = sorted(rdma_netdevs(devices=list_devices(use_netlink=False)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in netdevs:
            try:
                res = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("16s16x", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            return socket.inet_ntoa(res[20:24])
    return None


# -- the cases ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    name: str
    what: str
    expect: Expect
    run: Callable[["Context"], Tuple[Outcome, str]]
    needs_local: bool = False


@dataclass
class Context:
    raw: Raw
    local_addr: Optional[Address]

    @property
    def local(self) -> Address:
        """The local address of the cases marked ``needs_local`` (run() checks it exists)."""
        assert self.local_addr is not None
        return self.local_addr


CASES: List[Case] = []


CaseFn = TypeVar("CaseFn", bound=Callable[..., Union[Outcome, Tuple[Outcome, str]]])


def case(name: str, what: str, expect: Expect, needs_local: bool = False) -> Callable[[CaseFn], CaseFn]:
    def register(fn: CaseFn) -> CaseFn:
        def runner(ctx: Context) -> Tuple[Outcome, str]:
            out = fn(ctx)
            return out if isinstance(out, tuple) else (out, "")

        CASES.append(Case(name, what, expect, runner, needs_local))
        return fn

    return register


OTHER_NET = parse_address("192.0.2.123")  # TEST-NET-1: local on no sane host
V6 = parse_address("2001:db8::1")


def _with_id(ctx: Context, fn: Callable[[int], int], ps: int = abi.PortSpace.TCP) -> int:
    h = ctx.raw.create(ps)
    try:
        return fn(h)
    finally:
        ctx.raw.destroy(h)


@case("short_write", "a write shorter than rdma_ucm_cmd_hdr (4 bytes)", errno.EINVAL)
def _short_write(ctx: Context) -> int:
    return ctx.raw.write(b"\0\0\0\0")


@case("unknown_command", "command 0xffff, beyond the kernel's table", errno.EINVAL)
def _unknown(ctx: Context) -> int:
    return ctx.raw.cmd(0xFFFF, None, {}, body=bytes(16))


@case("newest_command_on_older_kernels", "RESOLVE_IB_SERVICE (23) on an unknown id: EINVAL where the "
      "command does not exist yet (before 6.17), ENOENT (unknown id) where it does",
      [((0, 0), errno.EINVAL), ((6, 17), errno.ENOENT)])
def _newest(ctx: Context) -> int:
    return ctx.raw.cmd(C.RESOLVE_IB_SERVICE, "rdma_ucm_resolve_ib_service", {"id": 0xFFFFFF})


@case("get_option", "GET_OPTION (13): in the table, never implemented", errno.ENOSYS)
def _get_option(ctx: Context) -> int:
    return ctx.raw.cmd(C.GET_OPTION, None, {}, body=bytes(24))


@case("in_beyond_write", "hdr.in says 64 bytes, 16 follow", errno.EINVAL)
def _in_beyond(ctx: Context) -> int:
    return ctx.raw.cmd(C.DESTROY_ID, None, {}, size_in=64, body=bytes(16), out=4)


@case("trailing_bytes_ignored", "a DESTROY_ID of an unknown id with 32 extra bytes: the extra bytes are "
      "ignored, the id is looked up", errno.ENOENT)
def _trailing(ctx: Context) -> int:
    body = CODECS["rdma_ucm_destroy_id"].pack_dict({"response": ctx.raw.reply.address, "id": 0xFFFFFF})
    return ctx.raw.cmd(C.DESTROY_ID, None, {}, size_in=len(body), body=body + bytes(32), out=4)


@case("create_id_out_short", "CREATE_ID with out = 3", errno.ENOSPC)
def _create_short(ctx: Context) -> int:
    return ctx.raw.cmd(C.CREATE_ID, "rdma_ucm_create_id",
                       {"uid": 1, "response": ctx.raw.reply.address, "ps": abi.PortSpace.TCP}, out=3)


@case("create_id_bad_ps", "CREATE_ID with port space 0x9999", errno.EINVAL)
def _create_bad_ps(ctx: Context) -> int:
    return ctx.raw.cmd(C.CREATE_ID, "rdma_ucm_create_id",
                       {"uid": 1, "response": ctx.raw.reply.address, "ps": 0x9999}, out=4)


@case("create_id_null_response", "CREATE_ID with a null reply pointer and out = 0xfa00 (the 2021 syzbot "
      "leak reproducer): EFAULT, and the id is destroyed again", errno.EFAULT)
def _create_null(ctx: Context) -> int:
    return ctx.raw.cmd(C.CREATE_ID, "rdma_ucm_create_id", {"uid": 1, "response": 0, "ps": abi.PortSpace.TCP},
                       out=0xFA00)


@case("unknown_id", "DESTROY_ID of an id that does not exist", errno.ENOENT)
def _unknown_id(ctx: Context) -> int:
    return ctx.raw.destroy(0xFFFFFF)


@case("id_of_another_fd", "RESOLVE_ROUTE naming an id created on another fd", errno.EINVAL)
def _other_fd(ctx: Context) -> int:
    other = Raw(ctx.raw.path)
    try:
        h = other.create()
        try:
            return ctx.raw.cmd(C.RESOLVE_ROUTE, "rdma_ucm_resolve_route", {"id": h, "timeout_ms": 1000})
        finally:
            other.destroy(h)
    finally:
        other.close()


@case("destroy_twice", "DESTROY_ID twice: the second finds no id", errno.ENOENT)
def _destroy_twice(ctx: Context) -> int:
    h = ctx.raw.create()
    first = ctx.raw.destroy(h)
    if first:
        return first
    return ctx.raw.destroy(h)


# Commands with one field set wrong: (case, what, Raw method, the field's bad value)
_ONE_FIELD_WRONG: List[Tuple[str, str, str, Dict[str, object]]] = [
    ("resolve_addr_reserved", "RESOLVE_ADDR with reserved = 1", "resolve", {"reserved": 1}),
    ("resolve_addr_dst_size_zero", "RESOLVE_ADDR with dst_size = 0", "resolve", {"dst_size": 0}),
    ("resolve_addr_size_family_mismatch", "RESOLVE_ADDR of an AF_INET address with dst_size 28", "resolve",
     {"dst_size": 28}),
    ("bind_reserved", "BIND with reserved = 1", "bind", {"reserved": 1}),
    ("bind_size_zero", "BIND with addr_size = 0", "bind", {"addr_size": 0}),
]


def _one_field_wrong(method: str, override: Dict[str, object]) -> Callable[[Context], int]:
    def run_it(ctx: Context) -> int:
        return _with_id(ctx, lambda h: int(getattr(ctx.raw, method)(h, ctx.local, **override)))

    return run_it


for _case, _what, _method, _override in _ONE_FIELD_WRONG:
    case(_case, _what, errno.EINVAL, needs_local=True)(_one_field_wrong(_method, _override))


@case("resolve_addr_af_unix", "RESOLVE_ADDR of an AF_UNIX address", errno.EINVAL)
def _resolve_unix(ctx: Context) -> int:
    storage = struct.pack("<H", socket.AF_UNIX) + b"/x".ljust(126, b"\0")
    return _with_id(ctx, lambda h: ctx.raw.cmd(C.RESOLVE_ADDR, "rdma_ucm_resolve_addr",
                                               {"id": h, "timeout_ms": 1000, "dst_size": 16, "dst_addr": storage}))


@case("resolve_ip_af_ib", "RESOLVE_IP (the pre-3.11 command) of an AF_IB destination", errno.EINVAL)
def _resolve_ip_ib(ctx: Context) -> int:
    sin6 = struct.pack("<H", AF_IB).ljust(28, b"\0")
    return _with_id(ctx, lambda h: ctx.raw.cmd(C.RESOLVE_IP, "rdma_ucm_resolve_ip",
                                               {"id": h, "timeout_ms": 1000, "dst_addr": sin6}))


@case("resolve_families_differ", "RESOLVE_ADDR from an AF_INET source to an AF_INET6 destination",
      errno.EINVAL, needs_local=True)
def _resolve_families(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.resolve(h, V6, src=ctx.local))


@case("resolve_source_not_local", "RESOLVE_ADDR with a source no netdev has (192.0.2.123)",
      errno.EADDRNOTAVAIL, needs_local=True)
def _resolve_not_local(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.resolve(h, ctx.local, src=OTHER_NET))


@case("resolve_twice", "RESOLVE_ADDR twice on one id: the second is refused", errno.EINVAL, needs_local=True)
def _resolve_twice(ctx: Context) -> Tuple[int, str]:
    def twice(h: int) -> int:
        first = ctx.raw.resolve(h, ctx.local)
        if first:
            return -first
        return ctx.raw.resolve(h, ctx.local)

    err = _with_id(ctx, twice)
    return (err, "") if err >= 0 else (-err, "the first RESOLVE_ADDR failed")


@case("resolve_after_listen", "RESOLVE_ADDR on a listening id", errno.EINVAL, needs_local=True)
def _resolve_listen(ctx: Context) -> Tuple[int, str]:
    def listen_then_resolve(h: int) -> int:
        if ctx.raw.bind(h, ctx.local) or ctx.raw.cmd(C.LISTEN, "rdma_ucm_listen", {"id": h, "backlog": 1}):
            return -1
        return ctx.raw.resolve(h, ctx.local)

    err = _with_id(ctx, listen_then_resolve)
    return (err, "") if err >= 0 else (errno.EIO, "BIND or LISTEN failed first")


@case("resolve_route_unbound", "RESOLVE_ROUTE before the address is resolved (no device yet)", errno.EINVAL)
def _route_unbound(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.cmd(C.RESOLVE_ROUTE, "rdma_ucm_resolve_route",
                                               {"id": h, "timeout_ms": 1000}))


@case("get_event_out_short", "GET_EVENT with out = 323, below the event's size", errno.ENOSPC)
def _event_short(ctx: Context) -> int:
    return ctx.raw.get_event(out=323)


@case("get_event_empty_nonblocking", "GET_EVENT on an O_NONBLOCK fd with no event queued", errno.EAGAIN)
def _event_empty(ctx: Context) -> int:
    return ctx.raw.get_event()


@case("query_addr_out_short", "QUERY ADDR with out = 271", errno.ENOSPC)
def _query_short(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.query(h, abi.QueryOption.ADDR, out=271))


@case("query_route_out_short", "QUERY_ROUTE with out = 199", errno.ENOSPC)
def _query_route_short(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.cmd(C.QUERY_ROUTE, "rdma_ucm_query",
                                               {"response": ctx.raw.reply.address, "id": h}, out=199))


@case("query_unknown_option", "QUERY with option 99", errno.ENOSYS)
def _query_option(ctx: Context) -> int:
    return _with_id(ctx, lambda h: ctx.raw.query(h, 99))


def _set_option(ctx: Context, h: int, level: int, name: int, optlen: int) -> int:
    value = ReplyBuffer(8)  # the pinned input buffer SET_OPTION points at (held across the write)
    return ctx.raw.cmd(C.SET_OPTION, "rdma_ucm_set_option",
                       {"optval": value.address, "id": h, "level": level, "optname": name, "optlen": optlen})


@case("set_option_huge", "SET_OPTION with optlen 2^31", errno.EINVAL)
def _opt_huge(ctx: Context) -> int:
    return _with_id(ctx, lambda h: _set_option(ctx, h, abi.OptionLevel.ID, abi.OptionId.TOS, 1 << 31))


@case("set_option_unknown_level", "SET_OPTION at level 99", errno.ENOSYS)
def _opt_level(ctx: Context) -> int:
    return _with_id(ctx, lambda h: _set_option(ctx, h, 99, 0, 1))


@case("set_option_tos_wrong_size", "SET_OPTION TOS with optlen 4 (it takes 1 byte)", errno.EINVAL)
def _opt_tos(ctx: Context) -> int:
    return _with_id(ctx, lambda h: _set_option(ctx, h, abi.OptionLevel.ID, abi.OptionId.TOS, 4))


@case("other_credentials", "a command written by a process whose credentials differ from the opener's "
      "(a child that dropped to uid 65534)", errno.EACCES)
def _creds(ctx: Context) -> Tuple[int, str]:
    if os.geteuid() != 0:
        return -1, "needs root (to change credentials)"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        code = 255
        try:
            os.close(r)
            os.setgid(65534)
            os.setuid(65534)
            code = ctx.raw.destroy(0xFFFFFF)
            os.write(w, struct.pack("<i", code))
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, 4)
    os.close(r)
    os.waitpid(pid, 0)
    if len(data) != 4:
        return -1, "the child reported nothing"
    return struct.unpack("<i", data)[0], ""


# regressions of known ucma bugs: the kernel survives, the fd keeps working

@case("regression_resolve_ip_twice_destroy", "RESOLVE_IP twice, then DESTROY_ID at once (syzbot 2021, "
      "use-after-free in addr_handler): the second RESOLVE_IP refused, no crash", errno.EINVAL, needs_local=True)
def _reg_resolve_ip(ctx: Context) -> Tuple[int, str]:
    errs = []
    for _ in range(20):
        h = ctx.raw.create()
        fields = {"id": h, "timeout_ms": 1000, "dst_addr": ctx.local.pack_in6()}
        a = ctx.raw.cmd(C.RESOLVE_IP, "rdma_ucm_resolve_ip", fields)
        b = ctx.raw.cmd(C.RESOLVE_IP, "rdma_ucm_resolve_ip", fields)
        ctx.raw.destroy(h)
        if a:
            return a, "the first RESOLVE_IP failed"
        errs.append(b)
    return (errs[0] if len(set(errs)) == 1 else -1), "second RESOLVE_IP: %s" % sorted({_name(e) for e in errs})


@case("regression_close_with_events", "close an fd whose ids have events queued and unread", 0, needs_local=True)
def _reg_close(ctx: Context) -> Tuple[int, str]:
    other = Raw(ctx.raw.path)
    try:
        for _ in range(10):
            h = other.create()
            err = other.resolve(h, ctx.local)
            if err:
                return err, "RESOLVE_ADDR failed"
        time.sleep(0.2)  # let the ADDR_RESOLVED events queue up
    finally:
        other.close()
    return 0, ""


@case("regression_migrate_vs_destroy", "MIGRATE_ID between two fds racing DESTROY_ID from another thread "
      "(CVE-2020-36385): every call answers, no crash", 0)
def _reg_migrate(ctx: Context) -> Tuple[int, str]:
    a, b = Raw(ctx.raw.path), Raw(ctx.raw.path)
    seen: Dict[str, int] = {}
    try:
        for _ in range(50):
            h = a.create()
            resp = ReplyBuffer(4)
            start = threading.Event()

            def destroyer() -> None:
                start.wait()
                seen["destroy:" + _name(a.destroy(h))] = 1

            t = threading.Thread(target=destroyer)
            t.start()
            start.set()
            err = b.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id",
                        {"response": resp.address, "id": h, "fd": a.dev.fileno()}, out=4)
            t.join()
            seen["migrate:" + _name(err)] = 1
            if err == 0:  # migrated before the destroy: the id now lives on b
                handle = h
                b.destroy(handle)
    finally:
        a.close()
        b.close()
    return 0, ", ".join(sorted(seen))


# -- the connection manager's contract ----------------------------------------------------
#
# Each case below runs on an fd of its own (closing it destroys the case's ids and whatever
# connections they hold), with a listener and a client on the local address where it needs a
# connection.  The expectations are ucma.c's and cma.c's answers (cm-notes, section 5); where
# a case checks what follows on the wire rather than an errno, it expects a text: the errno
# and the peer's event, "REJECTED 28" ...

_E = abi.CmEventType
_ports = iter(range(30000 + os.getpid() % 500 * 40, 65000))
#: QP numbers for the connections (no two alike while one is alive or in timewait: the IB CM
#: rejects a second connection with the same QP number and CA GUID as stale, reason 10)
_qpns = iter(range(0x100000 + int.from_bytes(os.urandom(3), "little") % 0xE00000, 0xFFFFFF))


class _Fd(Raw):
    """A case's own fd, closed (its ids with it) when the case ends."""

    def __enter__(self) -> "_Fd":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def events(self, timeout: float = 3.0, until: Optional[int] = None) -> List[Dict[str, Any]]:
        """The events queued within ``timeout`` seconds (or until one of type ``until``), decoded:
        event, status (signed), id (the handle), uid."""
        out: List[Dict[str, Any]] = []
        deadline = time.monotonic() + timeout
        poller = Poller(self.dev.fileno(), -1)
        while True:
            err = self.get_event()
            if err == 0:
                uid, handle, kind, status, _param, _ece = decode_event_head(self.reply.view)
                ev = {"uid": uid, "id": handle, "event": int(kind), "status": status}
                out.append(ev)
                if until is not None and ev["event"] == until:
                    return out
                continue
            if err != errno.EAGAIN:
                raise OSError(err, "GET_EVENT failed: %s" % _name(err))
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            poller.wait(int(left * 1000) + 1)

    def wait(self, event: int, timeout: float = 3.0) -> Dict[str, Any]:
        """The next event of type ``event`` (others before it are dropped), or OSError."""
        for ev in self.events(timeout, until=event):
            if ev["event"] == event:
                if ev["status"]:
                    raise OSError(errno.EIO, "%s with status %d" % (_E(event).name, ev["status"]))
                return ev
        raise OSError(errno.ETIMEDOUT, "no %s within %.0f s" % (_E(event).name, timeout))


def _conn(handle: int, private_data: bytes = b"", valid: int = 1, qp_num: Optional[int] = None,
          uid: Optional[int] = None) -> Dict[str, object]:
    """CONNECT's (or, with ``uid``, ACCEPT's) fields: librdmacm's defaults, a made-up QP number
    (a fresh one unless given)."""
    fields: Dict[str, object] = {
        "id": handle, "conn_param.qp_num": next(_qpns) if qp_num is None else qp_num, "conn_param.private_data": private_data,
        "conn_param.private_data_len": len(private_data), "conn_param.responder_resources": 1,
        "conn_param.initiator_depth": 1, "conn_param.retry_count": 7, "conn_param.rnr_retry_count": 7,
        "conn_param.valid": valid}
    if uid is not None:
        fields["uid"] = uid
    return fields


def _at_port(ctx: Context) -> Address:
    return parse_address("%s:%d" % (ctx.local.ip, next(_ports)))


def _routed(fd: _Fd, dst: Address, ps: int = abi.PortSpace.TCP) -> int:
    """An id resolved to ``dst``, address and route (ROUTE_RESOLVED)."""
    h = fd.create(ps)
    err = fd.resolve(h, dst)
    if err:
        raise OSError(err, "RESOLVE_ADDR failed: %s" % _name(err))
    fd.wait(_E.ADDR_RESOLVED)
    err = fd.cmd(C.RESOLVE_ROUTE, "rdma_ucm_resolve_route", {"id": h, "timeout_ms": 2000})
    if err:
        raise OSError(err, "RESOLVE_ROUTE failed: %s" % _name(err))
    fd.wait(_E.ROUTE_RESOLVED)
    return h


def _listener(fd: _Fd, addr: Address, backlog: int = 8, ps: int = abi.PortSpace.TCP) -> int:
    h = fd.create(ps)
    err = fd.bind(h, addr) or fd.cmd(C.LISTEN, "rdma_ucm_listen", {"id": h, "backlog": backlog})
    if err:
        raise OSError(err, "BIND or LISTEN failed: %s" % _name(err))
    return h


def _request(fd: _Fd, ctx: Context, private_data: bytes = b"") -> Tuple[int, int]:
    """(the client's handle, the handle of the listener's CONNECT_REQUEST) for a connection on
    the local address, the client's REQ carrying ``private_data``."""
    addr = _at_port(ctx)
    _listener(fd, addr)
    client = _routed(fd, addr)
    err = fd.cmd(C.CONNECT, "rdma_ucm_connect", _conn(client, private_data))
    if err:
        raise OSError(err, "CONNECT failed: %s" % _name(err))
    req = fd.wait(_E.CONNECT_REQUEST)
    return client, int(req["id"])


_CaseResult = Union[Outcome, Tuple[Outcome, str]]


def _on_fd(fn: Callable[[_Fd, Context], _CaseResult]) -> Callable[[Context], _CaseResult]:
    def run_it(ctx: Context) -> _CaseResult:
        with _Fd(ctx.raw.path) as fd:
            return fn(fd, ctx)

    run_it.__name__ = fn.__name__
    return run_it


def _connect_on(fd: _Fd, h: int, **kw: Any) -> int:
    return fd.cmd(C.CONNECT, "rdma_ucm_connect", _conn(h, **kw))


@case("connect_unbound", "CONNECT on a fresh id (no device: ucma_get_ctx_dev)", errno.EINVAL)
@_on_fd
def _connect_unbound(fd: _Fd, ctx: Context) -> int:
    return _connect_on(fd, fd.create())


@case("connect_valid_zero", "CONNECT with conn_param.valid = 0 (ucma_connect: no parameters)", errno.EINVAL,
      needs_local=True)
@_on_fd
def _connect_valid0(fd: _Fd, ctx: Context) -> int:
    return _connect_on(fd, _routed(fd, _at_port(ctx)), valid=0)


@case("connect_in_279", "CONNECT with hdr.in = 279, short of the 280-byte form (offsetofend reserved)",
      errno.EINVAL, needs_local=True)
@_on_fd
def _connect_279(fd: _Fd, ctx: Context) -> int:
    h = _routed(fd, _at_port(ctx))
    body = CODECS["rdma_ucm_connect"].pack_dict(_conn(h))
    return fd.cmd(C.CONNECT, None, {}, size_in=279, body=body[:279])


@case("connect_in_280", "CONNECT in the 280-byte form (no ECE: kernels before 5.8, librdmacm before 31)", 0,
      needs_local=True)
@_on_fd
def _connect_280(fd: _Fd, ctx: Context) -> int:
    h = _routed(fd, _at_port(ctx))
    body = CODECS["rdma_ucm_connect"].pack_dict(_conn(h))
    return fd.cmd(C.CONNECT, None, {}, size_in=280, body=body[:280])


@case("connect_twice", "CONNECT twice on one id: the second finds it connecting (cma_comp_exch)", errno.EINVAL,
      needs_local=True)
@_on_fd
def _connect_twice(fd: _Fd, ctx: Context) -> Tuple[int, str]:
    h = _routed(fd, _at_port(ctx))
    first = _connect_on(fd, h)
    return (_connect_on(fd, h), "") if not first else (-1, "the first CONNECT failed: %s" % _name(first))


@case("connect_private_data_57", "CONNECT with 57 bytes of private data on an IP id (56 fit in a REQ "
      "after the 36-byte rdma_cm header)", errno.EINVAL, needs_local=True)
@_on_fd
def _connect_pd57(fd: _Fd, ctx: Context) -> int:
    return _connect_on(fd, _routed(fd, _at_port(ctx)), private_data=bytes(57))


@case("connect_private_data_56", "CONNECT with 56 bytes of private data on an IP id: the most a REQ carries",
      0, needs_local=True)
@_on_fd
def _connect_pd56(fd: _Fd, ctx: Context) -> int:
    return _connect_on(fd, _routed(fd, _at_port(ctx)), private_data=bytes(56))


@case("accept_fresh_id", "ACCEPT on a fresh id, no connection request's (no device)", errno.EINVAL)
@_on_fd
def _accept_fresh(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.ACCEPT, "rdma_ucm_accept", _conn(fd.create(), uid=7))


@case("accept_private_data_197", "ACCEPT with 197 bytes of private data (a REP carries 196): refused, and "
      "the kernel rejects the request itself (the peer gets REJECTED 28)", "EINVAL, peer REJECTED 28",
      needs_local=True)
@_on_fd
def _accept_pd197(fd: _Fd, ctx: Context) -> str:
    client, req = _request(fd, ctx)
    err = fd.cmd(C.ACCEPT, "rdma_ucm_accept", _conn(req, bytes(197), uid=7))
    peer = [e for e in fd.events(3.0, until=_E.REJECTED) if e["id"] == client]
    return "%s, peer %s" % (_name(err), " ".join("%s %d" % (_E(e["event"]).name, e["status"]) for e in peer)
                            or "nothing")


@case("accept_uid_zero", "ACCEPT with uid 0: accepted, the connection completes for the peer, and none of the "
      "accepted id's events is queued (the kernel queues no event for uid 0)",
      "ok, peer CONNECT_RESPONSE, no event", needs_local=True)
@_on_fd
def _accept_uid0(fd: _Fd, ctx: Context) -> str:
    client, req = _request(fd, ctx)
    err = fd.cmd(C.ACCEPT, "rdma_ucm_accept", _conn(req, uid=0))
    got = fd.events(2.0, until=_E.CONNECT_RESPONSE)
    peer = [_E(e["event"]).name for e in got if e["id"] == client]
    if peer == ["CONNECT_RESPONSE"]:  # the RTU: the accepted id would get ESTABLISHED now
        fd.cmd(C.ACCEPT, "rdma_ucm_accept", {"id": client})
    mine = [e for e in got + fd.events(1.5) if e["id"] == req]
    return "%s, peer %s, %s" % (_name(err), " ".join(peer) or "nothing",
                                "no event" if not mine else " ".join(_E(e["event"]).name for e in mine))


@case("reject_reason_5", "REJECT with reason 5 (the kernel takes 0 -> 28 and 35 only)", errno.EINVAL,
      needs_local=True)
@_on_fd
def _reject_5(fd: _Fd, ctx: Context) -> int:
    _client, req = _request(fd, ctx)
    return fd.cmd(C.REJECT, "rdma_ucm_reject", {"id": req, "reason": 5})


@case("reject_unbound", "REJECT on a fresh id (no device)", errno.EINVAL)
@_on_fd
def _reject_unbound(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.REJECT, "rdma_ucm_reject", {"id": fd.create()})


@case("reject_data_149", "REJECT with 149 bytes of private data (a REJ carries 148)", errno.EINVAL,
      needs_local=True)
@_on_fd
def _reject_149(fd: _Fd, ctx: Context) -> int:
    _client, req = _request(fd, ctx)
    return fd.cmd(C.REJECT, "rdma_ucm_reject", {"id": req, "private_data_len": 149, "private_data": bytes(149)})


@case("reject_consumer", "REJECT of a request with 148 bytes: the peer gets REJECTED 28 (consumer defined)",
      "ok, peer REJECTED 28", needs_local=True)
@_on_fd
def _reject_148(fd: _Fd, ctx: Context) -> str:
    client, req = _request(fd, ctx)
    err = fd.cmd(C.REJECT, "rdma_ucm_reject", {"id": req, "private_data_len": 148, "private_data": bytes(148)})
    peer = [e for e in fd.events(3.0, until=_E.REJECTED) if e["id"] == client]
    return "%s, peer %s" % (_name(err), " ".join("%s %d" % (_E(e["event"]).name, e["status"]) for e in peer)
                            or "nothing")


@case("disconnect_unbound", "DISCONNECT on a fresh id (no device)", errno.EINVAL)
@_on_fd
def _disc_unbound(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.DISCONNECT, "rdma_ucm_disconnect", {"id": fd.create()})


@case("disconnect_never_connected", "DISCONNECT on a resolved id that never connected (no IB CM id)",
      errno.EINVAL, needs_local=True)
@_on_fd
def _disc_never(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.DISCONNECT, "rdma_ucm_disconnect", {"id": _routed(fd, _at_port(ctx))})


@case("notify_unbound", "NOTIFY COMM_EST on a fresh id (no device)", errno.EINVAL)
@_on_fd
def _notify_unbound(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.NOTIFY, "rdma_ucm_notify", {"id": fd.create(), "event": abi.NotifyEvent.COMM_EST})


@case("notify_no_connection", "NOTIFY COMM_EST on a resolved id with no connection (no IB CM id)",
      errno.EINVAL, needs_local=True)
@_on_fd
def _notify_nocm(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.NOTIFY, "rdma_ucm_notify", {"id": _routed(fd, _at_port(ctx)), "event": abi.NotifyEvent.COMM_EST})


@case("init_qp_attr_unbound", "INIT_QP_ATTR on a fresh id (no device)", errno.EINVAL)
@_on_fd
def _qpattr_unbound(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.INIT_QP_ATTR, "rdma_ucm_init_qp_attr",
                  {"response": fd.reply.address, "id": fd.create(), "qp_state": abi.QpState.INIT}, out=144)


@case("init_qp_attr_state_7", "INIT_QP_ATTR for qp_state 7, beyond IB_QPS_ERR", errno.EINVAL, needs_local=True)
@_on_fd
def _qpattr_7(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.INIT_QP_ATTR, "rdma_ucm_init_qp_attr",
                  {"response": fd.reply.address, "id": _routed(fd, _at_port(ctx)), "qp_state": 7}, out=144)


@case("init_qp_attr_out_short", "INIT_QP_ATTR with out = 143, below ib_uverbs_qp_attr", errno.ENOSPC,
      needs_local=True)
@_on_fd
def _qpattr_short(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.INIT_QP_ATTR, "rdma_ucm_init_qp_attr",
                  {"response": fd.reply.address, "id": _routed(fd, _at_port(ctx)), "qp_state": abi.QpState.INIT},
                  out=143)


@case("listen_twice", "LISTEN on a listening id (only IDLE and ADDR_BOUND listen)", errno.EINVAL, needs_local=True)
@_on_fd
def _listen_twice(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.LISTEN, "rdma_ucm_listen", {"id": _listener(fd, _at_port(ctx)), "backlog": 4})


@case("listen_backlog_one", "a listener with backlog 1 and two requests unread: the second is dropped, not "
      "rejected (ucma_connect_event_handler -ENOMEM; the IB CM sends no REJ so the client may retry), and "
      "comes on the client's REQ retry once the first is read",
      "one request, none rejected, the other on retry", needs_local=True)
@_on_fd
def _backlog_one(fd: _Fd, ctx: Context) -> str:
    addr = _at_port(ctx)
    _listener(fd, addr, backlog=1)
    a, b = _routed(fd, addr), _routed(fd, addr)
    for h in (a, b):
        err = _connect_on(fd, h)
        if err:
            return "CONNECT failed: %s" % _name(err)
    time.sleep(1.0)  # both REQs have arrived; the listener has read nothing
    got = fd.events(0.5)  # reading the first request gives its backlog slot back
    requests = [e for e in got if e["event"] == _E.CONNECT_REQUEST]
    rejected = [e for e in got if e["event"] == _E.REJECTED]
    if len(requests) != 1 or rejected:
        return "%d requests, %s" % (len(requests), " ".join("REJECTED %d" % e["status"] for e in rejected) or
                                    "none rejected")
    later = fd.events(12.0, until=_E.CONNECT_REQUEST)  # the REQ timeout is about 4.3 s (response timeout 20)
    again = [e for e in later if e["event"] == _E.CONNECT_REQUEST]
    rejected = [e for e in later if e["event"] == _E.REJECTED]
    return "one request, %s, %s" % (
        " ".join("REJECTED %d" % e["status"] for e in rejected) or "none rejected",
        "the other on retry" if again else "the other never came")


@case("accept_in_short", "ACCEPT with hdr.in = 287, short of offsetofend(reserved)", errno.EINVAL, needs_local=True)
@_on_fd
def _accept_short(fd: _Fd, ctx: Context) -> int:
    _client, req = _request(fd, ctx)
    body = CODECS["rdma_ucm_accept"].pack_dict(_conn(req, uid=7))
    return fd.cmd(C.ACCEPT, None, {}, size_in=287, body=body[:287])


@case("listen_backlog_huge", "LISTEN with backlog 2^31-1: taken, as the kernel's max_backlog", 0, needs_local=True)
@_on_fd
def _listen_huge(fd: _Fd, ctx: Context) -> int:
    h = fd.create()
    if fd.bind(h, _at_port(ctx)):
        return -1
    return fd.cmd(C.LISTEN, "rdma_ucm_listen", {"id": h, "backlog": 0x7FFFFFFF})


@case("join_ip_mcast_unbound", "JOIN_IP_MCAST (the pre-3.11 join) on a fresh UDP id (no device)", errno.EINVAL)
@_on_fd
def _join_ip_unbound(fd: _Fd, ctx: Context) -> int:
    group = parse_address("239.1.2.3")
    return fd.cmd(C.JOIN_IP_MCAST, "rdma_ucm_join_ip_mcast",
                  {"response": fd.reply.address, "uid": 9, "id": fd.create(abi.PortSpace.UDP),
                   "addr": group.pack_in6()}, out=4)


@case("join_reserved_flag", "JOIN_MCAST with join_flags 2 (RESERVED)", errno.EINVAL, needs_local=True)
@_on_fd
def _join_flag2(fd: _Fd, ctx: Context) -> int:
    h = fd.create(abi.PortSpace.UDP)
    if fd.bind(h, ctx.local):
        return -1
    group = parse_address("239.1.2.3")
    return fd.cmd(C.JOIN_MCAST, "rdma_ucm_join_mcast",
                  {"response": fd.reply.address, "uid": 9, "id": h, "addr_size": group.size, "join_flags": 2,
                   "addr": group.pack_storage()}, out=4)


@case("join_unbound", "JOIN_MCAST on a fresh UDP id (no device)", errno.EINVAL)
@_on_fd
def _join_unbound(fd: _Fd, ctx: Context) -> int:
    group = parse_address("239.1.2.3")
    return fd.cmd(C.JOIN_MCAST, "rdma_ucm_join_mcast",
                  {"response": fd.reply.address, "uid": 9, "id": fd.create(abi.PortSpace.UDP), "addr_size": group.size,
                   "join_flags": 0, "addr": group.pack_storage()}, out=4)


@case("leave_unknown", "LEAVE_MCAST of a membership that does not exist", errno.ENOENT)
@_on_fd
def _leave_unknown(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.LEAVE_MCAST, "rdma_ucm_destroy_id", {"response": fd.reply.address, "id": 0xFFFFFF}, out=4)


@case("migrate_not_rdma_cm", "MIGRATE_ID naming a pipe as the old fd (not an rdma_cm fd)", errno.EINVAL)
@_on_fd
def _migrate_pipe(fd: _Fd, ctx: Context) -> int:
    r, w = os.pipe()
    try:
        return fd.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id", {"response": fd.reply.address, "id": 0, "fd": r}, out=4)
    finally:
        os.close(r)
        os.close(w)


@case("migrate_bad_fd", "MIGRATE_ID naming fd -1 (fdget fails)", errno.ENOENT)
@_on_fd
def _migrate_badfd(fd: _Fd, ctx: Context) -> int:
    return fd.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id",
                  {"response": fd.reply.address, "id": 0, "fd": 0xFFFFFFFF}, out=4)


@case("migrate_unknown_id", "MIGRATE_ID of an id the old fd does not have", errno.ENOENT)
@_on_fd
def _migrate_unknown(fd: _Fd, ctx: Context) -> int:
    with _Fd(ctx.raw.path) as old:
        return fd.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id",
                      {"response": fd.reply.address, "id": 0xFFFFFF, "fd": old.dev.fileno()}, out=4)


@case("migrate_moves_unread_events", "MIGRATE_ID of an id with an unread ADDR_RESOLVED: the event is read "
      "on the new fd, none on the old", "new fd ADDR_RESOLVED, old fd nothing", needs_local=True)
@_on_fd
def _migrate_events(fd: _Fd, ctx: Context) -> str:
    with _Fd(ctx.raw.path) as old:
        h = old.create()
        err = old.resolve(h, ctx.local)
        if err:
            return "RESOLVE_ADDR failed: %s" % _name(err)
        time.sleep(0.5)  # ADDR_RESOLVED queued on the old fd, unread
        err = fd.cmd(C.MIGRATE_ID, "rdma_ucm_migrate_id", {"response": fd.reply.address, "id": h,
                                                           "fd": old.dev.fileno()}, out=4)
        if err:
            return "MIGRATE_ID failed: %s" % _name(err)
        new = [_E(e["event"]).name for e in fd.events(1.0)]
        was = [_E(e["event"]).name for e in old.events(0.2)]
        return "new fd %s, old fd %s" % (" ".join(new) or "nothing", " ".join(was) or "nothing")


def _set_opt(fd: _Fd, h: int, level: int, name: int, value: bytes) -> int:
    buf = ReplyBuffer(max(8, len(value)))
    buf.view[:len(value)] = value
    return fd.cmd(C.SET_OPTION, "rdma_ucm_set_option",
                  {"optval": buf.address, "id": h, "level": level, "optname": name, "optlen": len(value)})


@case("set_option_reuseaddr_bound", "SET_OPTION REUSEADDR 0 after BIND (rdma_set_reuseaddr: IDLE only, unless "
      "it sets reuse)", errno.EINVAL, needs_local=True)
@_on_fd
def _opt_reuse_bound(fd: _Fd, ctx: Context) -> int:
    h = fd.create()
    if fd.bind(h, _at_port(ctx)):
        return -1
    return _set_opt(fd, h, abi.OptionLevel.ID, abi.OptionId.REUSEADDR, struct.pack("<i", 0))


@case("set_option_ack_timeout_ud", "SET_OPTION ACK_TIMEOUT on a UDP id (an RC QP's option)", errno.EINVAL)
@_on_fd
def _opt_ack_ud(fd: _Fd, ctx: Context) -> int:
    return _set_opt(fd, fd.create(abi.PortSpace.UDP), abi.OptionLevel.ID, abi.OptionId.ACK_TIMEOUT, b"\x0e")


@case("set_option_ib_path_unbound", "SET_OPTION IB_PATH on a fresh id (no device)", errno.EINVAL)
@_on_fd
def _opt_path_unbound(fd: _Fd, ctx: Context) -> int:
    return _set_opt(fd, fd.create(), abi.OptionLevel.IB, abi.OptionIb.PATH, bytes(72))


@case("regression_leave_vs_destroy", "LEAVE_MCAST racing DESTROY_ID of the id that joined, 30 times "
      "(CVE-2018-14734, use-after-free in ucma_leave_multicast): every call answers, no crash", 0, needs_local=True)
@_on_fd
def _reg_leave(fd: _Fd, ctx: Context) -> Tuple[int, str]:
    seen: Dict[str, int] = {}
    group = parse_address("239.1.2.4")
    for _ in range(30):
        h = fd.create(abi.PortSpace.UDP)
        if fd.bind(h, ctx.local):
            return -1, "BIND failed"
        resp = ReplyBuffer(4)
        err = fd.cmd(C.JOIN_MCAST, "rdma_ucm_join_mcast",
                     {"response": resp.address, "uid": 9, "id": h, "addr_size": group.size, "join_flags": 0,
                      "addr": group.pack_storage()}, out=4)
        if err:
            return err, "JOIN_MCAST failed"
        mc = int(struct.unpack_from("<I", resp.view)[0])
        start = threading.Event()
        dresp = ReplyBuffer(4)

        def destroyer() -> None:
            start.wait()
            seen["destroy:" + _name(fd.cmd(C.DESTROY_ID, "rdma_ucm_destroy_id",
                                           {"response": dresp.address, "id": h}, out=4))] = 1

        t = threading.Thread(target=destroyer)
        t.start()
        start.set()
        lresp = ReplyBuffer(4)
        seen["leave:" + _name(fd.cmd(C.LEAVE_MCAST, "rdma_ucm_destroy_id",
                                     {"response": lresp.address, "id": mc}, out=4))] = 1
        t.join()
    fd.events(0.2)
    return 0, ", ".join(sorted(seen))


@case("regression_listener_destroyed_with_requests", "DESTROY_ID of a listener with connection requests "
      "queued and unread, 5 times over (the use-after-free that made 5.9 rework how ucma hands new "
      "connections over): every client's attempt ends (REJECTED), no crash", "every attempt ended",
      needs_local=True)
@_on_fd
def _reg_listener(fd: _Fd, ctx: Context) -> str:
    ended, attempts = 0, 0
    for _ in range(5):
        addr = _at_port(ctx)
        lst = _listener(fd, addr, backlog=8)
        clients = [_routed(fd, addr) for _ in range(3)]
        for h in clients:
            if _connect_on(fd, h) == 0:
                attempts += 1
        time.sleep(0.5)  # the requests are queued on the listener, unread
        err = fd.destroy(lst)
        if err:
            return "DESTROY_ID of the listener failed: %s" % _name(err)
        done = {e["id"] for e in fd.events(6.0) if e["id"] in clients and e["event"] in (
            _E.REJECTED, _E.UNREACHABLE, _E.CONNECT_ERROR)}
        ended += len(done)
        for h in clients:
            fd.destroy(h)
    return "every attempt ended" if ended == attempts else "%d of %d attempts ended" % (ended, attempts)


def ktap(results: Sequence[Result], release: Optional[str] = None) -> str:
    """The results as KTAP version 1 (what kselftest harnesses read): one ``ok`` / ``not ok``
    line per case, what was expected and observed as a diagnostic, ``# SKIP`` for a case that
    could not run here."""
    lines = ["KTAP version 1", "# pyrdmacm conformance on Linux %s" % (release or platform.release()),
             "1..%d" % len(results)]
    for n, r in enumerate(results, 1):
        if r.observed == "not run":
            lines.append("ok %d %s # SKIP %s" % (n, r.case, r.detail))
            continue
        lines.append("# %s: expected %s, observed %s%s" % (r.case, r.expected, r.observed,
                                                           "; " + r.detail if r.detail else ""))
        lines.append("%s %d %s" % ("ok" if r.passed else "not ok", n, r.case))
    failed = sum(1 for r in results if not r.passed and r.observed != "not run")
    skipped = sum(1 for r in results if r.observed == "not run")
    lines.append("# totals: pass:%d fail:%d skip:%d" % (len(results) - failed - skipped, failed, skipped))
    return "\n".join(lines) + "\n"


def run(path: Optional[str] = None, local: Optional[str] = None, only: Sequence[str] = (),
        release: Optional[str] = None) -> List[Result]:
    """Run the cases (or those named in ``only``) against the kernel; one :class:`Result` each."""
    version = kernel_version(release)
    local_text = local or find_local_ipv4()
    ctx = Context(Raw(path), parse_address(local_text) if local_text else None)
    log = KernelLog()
    results = []
    try:
        for c in CASES:
            if only and c.name not in only:
                continue
            want = expected_errno(c.expect, version)
            if c.needs_local and ctx.local_addr is None:
                results.append(Result(c.name, c.what, _shown(want), "not run", False,
                                      "needs an IPv4 address on a netdev with an RDMA device (pass local=)"))
                continue
            try:
                got, detail = c.run(ctx)
            except OSError as e:
                got, detail = -1, "set-up failed: %s" % e
            problems = log.new_problems()
            dead = ctx.raw.alive()
            observed = got if isinstance(got, str) else _name(got) if got >= 0 else "error"
            passed = got == want and not dead and not problems
            notes = [d for d in (detail, dead, "; ".join(problems[:3])) if d]
            results.append(Result(c.name, c.what, _shown(want), observed, passed, "; ".join(notes)))
    finally:
        log.close()
        ctx.raw.close()
    return results
