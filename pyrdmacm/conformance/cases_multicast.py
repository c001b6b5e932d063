"""Cases: multicast -- JOIN_MCAST, JOIN_IP_MCAST and LEAVE_MCAST refused.

A join needs an id bound to a device (a fresh id has none) and takes only the join flags the
kernel defines; a leave names a membership the fd has.  Each runs on an fd of its own.
"""

from __future__ import annotations

import errno

from .. import abi, kernel_rules
from ..addr import parse_address
from .registry import CaseList, Context
from .steps import NO_SUCH_ID, CaseFd, on_own_fd

__all__ = ["CASES"]

C = abi.UserCmCmd
S = abi.RdmaCmState

CASES = CaseList()

GROUP = parse_address("239.1.2.3")  # an administratively scoped IPv4 group
#: ``join_flags`` 2: RDMA_MC_JOIN_FLAG_RESERVED, the first value the kernel does not define
RESERVED_JOIN_FLAG = 2


@CASES.case("join_ip_mcast_unbound", "JOIN_IP_MCAST (the pre-3.11 join) on a fresh UDP id (no device)",
            kernel_rules.expect(C.JOIN_IP_MCAST, S.IDLE, device=False, qp_type=abi.QpType.UD))
@on_own_fd
def _join_ip_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("JOIN_IP_MCAST", {"uid": 9, "id": fd.create(abi.PortSpace.UDP), "addr": GROUP.pack_in6()})


@CASES.case("join_reserved_flag", "JOIN_MCAST with join_flags %d (RESERVED)" % RESERVED_JOIN_FLAG, errno.EINVAL,
            needs_local=True)
@on_own_fd
def _join_flag2(fd: CaseFd, ctx: Context) -> int:
    h = fd.create(abi.PortSpace.UDP)
    if fd.bind(h, ctx.local):
        return -1
    return fd.send("JOIN_MCAST", {"uid": 9, "id": h, "addr_size": GROUP.size, "join_flags": RESERVED_JOIN_FLAG,
                                  "addr": GROUP.pack_storage()})


@CASES.case("join_unbound", "JOIN_MCAST on a fresh UDP id (no device)",
            kernel_rules.expect(C.JOIN_MCAST, S.IDLE, device=False, qp_type=abi.QpType.UD))
@on_own_fd
def _join_unbound(fd: CaseFd, ctx: Context) -> int:
    return fd.send("JOIN_MCAST", {"uid": 9, "id": fd.create(abi.PortSpace.UDP), "addr_size": GROUP.size,
                                  "join_flags": 0, "addr": GROUP.pack_storage()})


@CASES.case("leave_unknown", "LEAVE_MCAST of a membership that does not exist", errno.ENOENT)
@on_own_fd
def _leave_unknown(fd: CaseFd, ctx: Context) -> int:
    return fd.send("LEAVE_MCAST", {"id": NO_SUCH_ID})
