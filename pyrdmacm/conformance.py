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
from typing import Callable, Dict, List, Optional, Sequence, Tuple, TypeVar, Union

from . import abi
from ._codec import CODECS
from ._device import KernelDevice, ReplyBuffer
from .addr import AF_IB, Address, parse_address
from .devices import list_devices, rdma_netdevs
from .errors import errno_name

__all__ = ["Result", "CASES", "run", "kernel_version", "find_local_ipv4"]

C = abi.UserCmCmd
_HDR = CODECS["rdma_ucm_cmd_hdr"]
Expect = Union[int, Sequence[Tuple[Tuple[int, int], int]]]


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


def expected_errno(expect: Expect, version: Tuple[int, int]) -> int:
    if isinstance(expect, int):
        return expect
    value = 0
    for since, err in expect:
        if version >= since:
            value = err
    return value


def _name(err: int) -> str:
    return "ok" if err == 0 else errno_name(err)


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
    """New ``BUG:``/``WARNING:``/KASAN lines in /dev/kmsg since the last look, when readable."""

    BAD = re.compile(r"BUG:|WARNING:|KASAN|general protection|Oops")

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
    run: Callable[["Context"], Tuple[int, str]]
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


CaseFn = TypeVar("CaseFn", bound=Callable[..., Union[int, Tuple[int, str]]])


def case(name: str, what: str, expect: Expect, needs_local: bool = False) -> Callable[[CaseFn], CaseFn]:
    def register(fn: CaseFn) -> CaseFn:
        def runner(ctx: Context) -> Tuple[int, str]:
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
                results.append(Result(c.name, c.what, _name(want), "not run", False,
                                      "needs an IPv4 address on a netdev with an RDMA device (pass local=)"))
                continue
            try:
                got, detail = c.run(ctx)
            except OSError as e:
                got, detail = -1, "set-up failed: %s" % e
            problems = log.new_problems()
            dead = ctx.raw.alive()
            observed = _name(got) if got >= 0 else "error"
            passed = got == want and not dead and not problems
            notes = [d for d in (detail, dead, "; ".join(problems[:3])) if d]
            results.append(Result(c.name, c.what, _name(want), observed, passed, "; ".join(notes)))
    finally:
        log.close()
        ctx.raw.close()
    return results
