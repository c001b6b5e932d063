"""Cases: SET_OPTION -- its length, its level, and options an id cannot take in its state.

``optval`` points at a pinned buffer the kernel reads ``optlen`` bytes of
(:func:`set_option`); the kernel refuses a length beyond what it would allocate, an
unknown level (ENOSYS), a value of the wrong size, and options the id's state or port space
rules out.
"""

from __future__ import annotations

import errno
import struct
from typing import Optional

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import ReplyBuffer
from .raw import Raw
from .registry import CaseList, Context
from .steps import CaseFd, at_new_port, on_own_fd, with_id

__all__ = ["CASES", "set_option"]

C = abi.UserCmCmd
S = abi.RdmaCmState

CASES = CaseList()

_U8 = struct.Struct("<B")  # TOS, ACK_TIMEOUT
_INT = struct.Struct("<i")  # REUSEADDR, AFONLY
IB_PATH = bytes(CODECS["ib_path_rec_data"].size)  # one path record, all zero


def set_option(fd: Raw, h: int, level: int, name: int, value: bytes, optlen: Optional[int] = None) -> int:
    """SET_OPTION of ``value`` on id ``h`` (``optlen``: the value's length unless given)."""
    buf = ReplyBuffer(len(value))  # the pinned input optval points at, held across the write
    buf.fill(value)
    return fd.send("SET_OPTION", {"optval": buf.address, "id": h, "level": level, "optname": name,
                                  "optlen": len(value) if optlen is None else optlen})


@CASES.case("set_option_huge", "SET_OPTION with optlen 2^31", errno.EINVAL)
def _opt_huge(ctx: Context) -> int:
    return with_id(ctx, lambda h: set_option(ctx.raw, h, abi.OptionLevel.ID, abi.OptionId.TOS, _U8.pack(0),
                                             optlen=1 << 31))


@CASES.case("set_option_unknown_level", "SET_OPTION at level 99", errno.ENOSYS)
def _opt_level(ctx: Context) -> int:
    return with_id(ctx, lambda h: set_option(ctx.raw, h, 99, 0, _U8.pack(0)))


@CASES.case("set_option_tos_wrong_size", "SET_OPTION TOS with optlen %d (it takes %d byte)" % (_INT.size, _U8.size),
            errno.EINVAL)
def _opt_tos(ctx: Context) -> int:
    return with_id(ctx, lambda h: set_option(ctx.raw, h, abi.OptionLevel.ID, abi.OptionId.TOS, _INT.pack(0)))


@CASES.case("set_option_reuseaddr_bound", "SET_OPTION REUSEADDR 0 after BIND (rdma_set_reuseaddr: IDLE only, "
            "unless it sets reuse)", kernel_rules.expect(C.SET_OPTION, S.ADDR_BOUND, "REUSEADDR clear"),
            needs_local=True)
@on_own_fd
def _opt_reuse_bound(fd: CaseFd, ctx: Context) -> int:
    h = fd.create()
    if fd.bind(h, at_new_port(ctx)):
        return -1
    return set_option(fd, h, abi.OptionLevel.ID, abi.OptionId.REUSEADDR, _INT.pack(0))


@CASES.case("set_option_ack_timeout_ud", "SET_OPTION ACK_TIMEOUT on a UDP id (an RC QP's option)",
            kernel_rules.expect(C.SET_OPTION, S.IDLE, "ACK_TIMEOUT", qp_type=abi.QpType.UD))
@on_own_fd
def _opt_ack_ud(fd: CaseFd, ctx: Context) -> int:
    return set_option(fd, fd.create(abi.PortSpace.UDP), abi.OptionLevel.ID, abi.OptionId.ACK_TIMEOUT, _U8.pack(14))


@CASES.case("set_option_ib_path_unbound", "SET_OPTION IB_PATH on a fresh id (no device)",
            kernel_rules.expect(C.SET_OPTION, S.IDLE, "IB_PATH", device=False))
@on_own_fd
def _opt_path_unbound(fd: CaseFd, ctx: Context) -> int:
    return set_option(fd, fd.create(), abi.OptionLevel.IB, abi.OptionIb.PATH, IB_PATH)
