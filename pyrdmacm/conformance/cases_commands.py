"""Cases: the command table, the header, ids, and reply buffers too short.

What ``ucma_write`` checks before any handler runs (a write shorter than the header, a
command beyond the table, an ``in`` beyond the write), what the handlers check first (the
reply size ``out``, the id: unknown, destroyed), GET_OPTION's ENOSYS, and a process whose
credentials differ from the opener's.  Each runs on the shared fd.

A reply one byte short of what the kernel takes is computed from the reply's layout: the
``sizeof`` of the reply, or, where the kernel takes less (the fields it added later), the
``offsetof`` the first of them -- the smallest sizes of ``abi.MIN_REPLY``.
"""

from __future__ import annotations

import errno
import os
import struct
from typing import Tuple

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..wire import COMMAND, HEADER
from .registry import CaseList, Context
from .steps import NO_SUCH_ID, with_id

__all__ = ["CASES"]

C = abi.UserCmCmd
CASES = CaseList()

#: a command number beyond every kernel's table
BEYOND_TABLE = 0xFFFF
#: a well-formed body of some command, for the writes that the kernel refuses before its
#: handler reads one
SOME_BODY = bytes(COMMAND["DESTROY_ID"].body.size)
#: CREATE_ID's ``out`` in the 2021 syzbot leak reproducer
SYZBOT_OUT = 0xFA00
#: the smallest event reply the kernel takes (ucma_get_event: ``sizeof(resp)`` less
#: ``reserved`` (for old 32-bit user space) and, from 5.8, less ``ece``)
EVENT_MIN_OUT = CODECS["rdma_ucm_event_resp"].offset("reserved")
#: the smallest QUERY ADDR and QUERY_ROUTE replies the kernel takes (ucma_query_addr,
#: ucma_query_route: ``offsetof(resp, ibdev_index)``; ``sizeof(resp)`` before ibdev_index
#: existed, the same number)
QUERY_ADDR_MIN_OUT = CODECS["rdma_ucm_query_addr_resp"].offset("ibdev_index")
QUERY_ROUTE_MIN_OUT = CODECS["rdma_ucm_query_route_resp"].offset("ibdev_index")
#: GET_OPTION's body: the ABI layer does not declare ``rdma_ucm_get_option`` (the kernel never
#: implemented the command), whose layout is SET_OPTION's
GET_OPTION_BODY = bytes(CODECS["rdma_ucm_set_option"].size)
#: the uid and gid of ``nobody``, which the credentials case drops to
NOBODY = 65534
_CHILD_ANSWER = struct.Struct("<i")


@CASES.case("short_write", "a write shorter than rdma_ucm_cmd_hdr (%d of its %d bytes)"
            % (HEADER.size // 2, HEADER.size), errno.EINVAL)
def _short_write(ctx: Context) -> int:
    return ctx.raw.write(bytes(HEADER.size // 2))


@CASES.case("unknown_command", "command %#x, beyond the kernel's table" % BEYOND_TABLE, errno.EINVAL)
def _unknown(ctx: Context) -> int:
    return ctx.raw.cmd(BEYOND_TABLE, None, {}, body=SOME_BODY)


@CASES.case("newest_command_on_older_kernels", "RESOLVE_IB_SERVICE (%d) on an unknown id: EINVAL where the "
            "command does not exist yet (before 6.17), ENOENT (unknown id) where it does" % C.RESOLVE_IB_SERVICE,
            [((0, 0), errno.EINVAL), ((6, 17), errno.ENOENT)])
def _newest(ctx: Context) -> int:
    return ctx.raw.send("RESOLVE_IB_SERVICE", {"id": NO_SUCH_ID})


@CASES.case("get_option", "GET_OPTION (%d): in the table, never implemented" % C.GET_OPTION, errno.ENOSYS)
def _get_option(ctx: Context) -> int:
    return ctx.raw.cmd(C.GET_OPTION, None, {}, body=GET_OPTION_BODY)


@CASES.case("in_beyond_write", "hdr.in says %d bytes, %d follow" % (4 * len(SOME_BODY), len(SOME_BODY)),
            errno.EINVAL)
def _in_beyond(ctx: Context) -> int:
    return ctx.raw.cmd(C.DESTROY_ID, None, {}, size_in=4 * len(SOME_BODY), body=SOME_BODY,
                       out=COMMAND["DESTROY_ID"].out)


@CASES.case("trailing_bytes_ignored", "a DESTROY_ID of an unknown id with %d extra bytes: the extra bytes are "
            "ignored, the id is looked up" % (2 * len(SOME_BODY)), errno.ENOENT)
def _trailing(ctx: Context) -> int:
    destroy = COMMAND["DESTROY_ID"]
    body = destroy.body.pack_dict({"response": ctx.raw.reply.address, "id": NO_SUCH_ID})
    return ctx.raw.cmd(destroy.cmd, None, {}, size_in=len(body), body=body + bytes(2 * len(SOME_BODY)),
                       out=destroy.out)


@CASES.case("create_id_out_short", "CREATE_ID with out = %d, short of its reply" % (COMMAND["CREATE_ID"].out - 1),
            errno.ENOSPC)
def _create_short(ctx: Context) -> int:
    return ctx.raw.send("CREATE_ID", {"uid": 1, "ps": abi.PortSpace.TCP}, out=COMMAND["CREATE_ID"].out - 1)


@CASES.case("create_id_bad_ps", "CREATE_ID with port space 0x9999", errno.EINVAL)
def _create_bad_ps(ctx: Context) -> int:
    return ctx.raw.send("CREATE_ID", {"uid": 1, "ps": 0x9999})


@CASES.case("create_id_null_response", "CREATE_ID with a null reply pointer and out = %#x (the 2021 syzbot "
            "leak reproducer): EFAULT, and the id is destroyed again" % SYZBOT_OUT, errno.EFAULT)
def _create_null(ctx: Context) -> int:
    return ctx.raw.send("CREATE_ID", {"uid": 1, "response": 0, "ps": abi.PortSpace.TCP}, out=SYZBOT_OUT)


@CASES.case("unknown_id", "DESTROY_ID of an id that does not exist", kernel_rules.UNKNOWN_ID)
def _unknown_id(ctx: Context) -> int:
    return ctx.raw.destroy(NO_SUCH_ID)


@CASES.case("destroy_twice", "DESTROY_ID twice: the second finds no id", kernel_rules.UNKNOWN_ID)
def _destroy_twice(ctx: Context) -> int:
    h = ctx.raw.create()
    first = ctx.raw.destroy(h)
    if first:
        return first
    return ctx.raw.destroy(h)


@CASES.case("get_event_out_short", "GET_EVENT with out = %d, below the event's size" % (EVENT_MIN_OUT - 1),
            errno.ENOSPC)
def _event_short(ctx: Context) -> int:
    return ctx.raw.get_event(out=EVENT_MIN_OUT - 1)


@CASES.case("get_event_empty_nonblocking", "GET_EVENT on an O_NONBLOCK fd with no event queued", errno.EAGAIN)
def _event_empty(ctx: Context) -> int:
    return ctx.raw.get_event()


@CASES.case("query_addr_out_short", "QUERY ADDR with out = %d" % (QUERY_ADDR_MIN_OUT - 1), errno.ENOSPC)
def _query_short(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.query(h, abi.QueryOption.ADDR, out=QUERY_ADDR_MIN_OUT - 1))


@CASES.case("query_route_out_short", "QUERY_ROUTE with out = %d" % (QUERY_ROUTE_MIN_OUT - 1), errno.ENOSPC)
def _query_route_short(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.send("QUERY_ROUTE", {"id": h}, out=QUERY_ROUTE_MIN_OUT - 1))


@CASES.case("query_unknown_option", "QUERY with option 99", errno.ENOSYS)
def _query_option(ctx: Context) -> int:
    return with_id(ctx, lambda h: ctx.raw.query(h, 99))


@CASES.case("other_credentials", "a command written by a process whose credentials differ from the opener's "
            "(a child that dropped to uid %d)" % NOBODY, errno.EACCES)
def _creds(ctx: Context) -> Tuple[int, str]:
    if os.geteuid() != 0:
        return -1, "needs root (to change credentials)"
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - child
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.write(w, _CHILD_ANSWER.pack(ctx.raw.destroy(NO_SUCH_ID)))
        finally:
            os._exit(0)
    os.close(w)
    data = os.read(r, _CHILD_ANSWER.size)
    os.close(r)
    os.waitpid(pid, 0)
    if len(data) != _CHILD_ANSWER.size:
        return -1, "the child reported nothing"
    return int(_CHILD_ANSWER.unpack(data)[0]), ""
