"""Cases: addresses -- RESOLVE_ADDR, RESOLVE_IP, BIND, and RESOLVE_ROUTE before there is an address
or with no time to take.

The address a command carries is checked against its size and family
(``rdma_addr_size_kss``) before the id is looked up; the id's state and the families of
source and destination after.  Each runs on a fresh id of the shared fd.
"""

from __future__ import annotations

import errno
import socket
import struct
from typing import Callable, Dict, List, Tuple

from .. import kernel_rules
from ..abi.codec import CODECS
from ..abi import CmEventType as E
from ..abi import RdmaCmState as S
from ..abi import UserCmCmd as C
from ..addr import AF_IB, parse_address
from .registry import CaseList, Context
from .expect import outcome_text
from .steps import CaseFd, at_new_port, on_own_fd, with_id

__all__ = ["CASES"]

CASES = CaseList()

OTHER_NET = parse_address("192.0.2.123")  # TEST-NET-1: local on no sane host
V6 = parse_address("2001:db8::1")
SOCKADDR_IN = CODECS["sockaddr_in"].size
SOCKADDR_IN6 = CODECS["sockaddr_in6"].size
STORAGE = CODECS["__kernel_sockaddr_storage"].size
_FAMILY = struct.Struct("<H")  # sa_family, host order

# Commands with one field set wrong: (case, what, Raw method, the field's bad value)
_ONE_FIELD_WRONG: List[Tuple[str, str, str, Dict[str, object]]] = [
    ("resolve_addr_reserved", "RESOLVE_ADDR with reserved = 1", "resolve", {"reserved": 1}),
    ("resolve_addr_dst_size_zero", "RESOLVE_ADDR with dst_size = 0", "resolve", {"dst_size": 0}),
    ("resolve_addr_size_family_mismatch", "RESOLVE_ADDR of an AF_INET address with dst_size %d (sockaddr_in6's)"
     % SOCKADDR_IN6, "resolve", {"dst_size": SOCKADDR_IN6}),
    ("bind_reserved", "BIND with reserved = 1", "bind", {"reserved": 1}),
    ("bind_size_zero", "BIND with addr_size = 0", "bind", {"addr_size": 0}),
]


def _one_field_wrong(method: str, override: Dict[str, object]) -> Callable[[Context], int]:
    def run_it(ctx: Context) -> int:
        return with_id(ctx, lambda h: int(getattr(ctx.raw, method)(h, ctx.local, **override)))

    return run_it


for _case, _what, _method, _override in _ONE_FIELD_WRONG:
    CASES.case(_case, _what, errno.EINVAL, needs_local=True)(_one_field_wrong(_method, _override))


@CASES.case("resolve_addr_af_unix", "RESOLVE_ADDR of an AF_UNIX address", errno.EINVAL)
def _resolve_unix(ctx: Context) -> int:
    storage = (_FAMILY.pack(socket.AF_UNIX) + b"/x").ljust(STORAGE, b"\0")
    return with_id(ctx, lambda h: ctx.raw.send("RESOLVE_ADDR", {"id": h, "timeout_ms": 1000, "dst_size": SOCKADDR_IN,
                                                                "dst_addr": storage}))


@CASES.case("resolve_ip_af_ib", "RESOLVE_IP (the pre-3.11 command) of an AF_IB destination", errno.EINVAL)
def _resolve_ip_ib(ctx: Context) -> int:
    sin6 = _FAMILY.pack(AF_IB).ljust(SOCKADDR_IN6, b"\0")
    return with_id(ctx, lambda h: ctx.raw.send("RESOLVE_IP", {"id": h, "timeout_ms": 1000, "dst_addr": sin6}))


@CASES.case("resolve_families_differ", "RESOLVE_ADDR from an AF_INET source to an AF_INET6 destination",
            errno.EINVAL, needs_local=True)
def _resolve_families(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.resolve(h, V6, src=ctx.local))


@CASES.case("resolve_source_not_local", "RESOLVE_ADDR with a source no netdev has (%s)" % OTHER_NET,
            errno.EADDRNOTAVAIL, needs_local=True)
def _resolve_not_local(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.resolve(h, ctx.local, src=OTHER_NET))


@CASES.case("resolve_twice", "RESOLVE_ADDR twice on one id: the second is refused",
            kernel_rules.expect(C.RESOLVE_ADDR, S.ADDR_QUERY), needs_local=True)
def _resolve_twice(ctx: Context) -> Tuple[int, str]:
    def twice(h: int) -> int:
        first = ctx.raw.resolve(h, ctx.local)
        if first:
            return -first
        return ctx.raw.resolve(h, ctx.local)

    err = with_id(ctx, twice)
    return (err, "") if err >= 0 else (-err, "the first RESOLVE_ADDR failed")


@CASES.case("resolve_after_listen", "RESOLVE_ADDR on a listening id", kernel_rules.expect(C.RESOLVE_ADDR, S.LISTEN),
            needs_local=True)
def _resolve_listen(ctx: Context) -> Tuple[int, str]:
    def listen_then_resolve(h: int) -> int:
        if ctx.raw.bind(h, ctx.local) or ctx.raw.send("LISTEN", {"id": h, "backlog": 1}):
            return -1
        return ctx.raw.resolve(h, ctx.local)

    err = with_id(ctx, listen_then_resolve)
    return (err, "") if err >= 0 else (errno.EIO, "BIND or LISTEN failed first")


@CASES.case("resolve_route_unbound", "RESOLVE_ROUTE before the address is resolved (no device yet)",
            kernel_rules.expect(C.RESOLVE_ROUTE, S.IDLE, device=False))
def _route_unbound(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 1000}))


@CASES.case("resolve_route_timeout_zero", "RESOLVE_ROUTE with timeout_ms = 0 on a resolved id",
            kernel_rules.expect(C.RESOLVE_ROUTE, S.ADDR_RESOLVED, "timeout 0"), needs_local=True)
@on_own_fd
def _route_timeout_zero(fd: CaseFd, ctx: Context) -> int:
    h = fd.create()
    err = fd.resolve(h, at_new_port(ctx))
    if err:
        raise OSError(err, "RESOLVE_ADDR failed: %s" % outcome_text(err))
    fd.wait(E.ADDR_RESOLVED)
    return fd.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 0})
