"""The fake kernel's SET_OPTION (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH with its
ROUTE_RESOLVED) and INIT_QP_ATTR, with the kernel's errnos (../shared/cm-notes.md sections 1
and 5): ucma.c's checks of the option's level, name and length, then the state rule of each
option (:mod:`pyrdmacm.kernel_rules`), then what cma.c and the IB CM say.
"""

from __future__ import annotations

import ctypes
import errno
import struct
from typing import Any, Dict

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ._ibcm import QP_ATTR_STATES, IbCmId
from .fake_ids import IdContext, command_fields, kernel_error
from .fake_file import UcmaFile
from .fake_net import (ACCESS_REMOTE_ATOMIC, ACCESS_REMOTE_READ, ACCESS_REMOTE_WRITE, DEFAULT_TIMEOUT, HOP_LIMIT,
                       PATH_MTU_1024, SGID_INDEX, UDP_QKEY, FakeNet)

__all__ = ["OptionCommands", "KMALLOC_MAX_SIZE"]

C = abi.UserCmCmd
E = abi.CmEventType
S = abi.RdmaCmState
QpState = abi.QpState
QpAttrMask = abi.QpAttrMask

_QP_ATTR = CODECS["ib_uverbs_qp_attr"]
_PATH_DATA = CODECS["ib_path_rec_data"]
_SA_PATH = CODECS["ib_sa_path_rec"]
_INT = struct.Struct("=i")
#: ``KMALLOC_MAX_SIZE`` on x86_64 (4 MiB): a larger SET_OPTION ``optlen`` is EINVAL before anything
#: else is looked at (``ucma_set_option``)
KMALLOC_MAX_SIZE = 1 << 22
#: the size of each ID-level option's value (``ucma_set_option_id``): a byte or an int
_OPTION_SIZE = {abi.OptionId.TOS: 1, abi.OptionId.ACK_TIMEOUT: 1, abi.OptionId.REUSEADDR: _INT.size,
                abi.OptionId.AFONLY: _INT.size}


class OptionCommands:
    """SET_OPTION and INIT_QP_ATTR for the ids of one file.

    It holds the file (:class:`~pyrdmacm.testing.fake_file.UcmaFile`: the ids, their IB CM
    ids, the event queue that IB_PATH's ROUTE_RESOLVED goes to), the network whose GIDs the
    QP attributes carry (:class:`~pyrdmacm.testing.FakeNet`), and ``version``, the kernel
    whose state rules (:mod:`pyrdmacm.kernel_rules`) each option follows."""

    def __init__(self, file: UcmaFile, net: FakeNet, *, version: kernel_rules.Version) -> None:
        self._file = file
        self._net = net
        self._version = version

    # -- SET_OPTION (ucma_set_option, ucma_set_option_id, ucma_set_ib_path)
    def set_option(self, body: bytes, size_out: int) -> None:
        f = command_fields("rdma_ucm_set_option", body)
        n = f["optlen"]
        if n > KMALLOC_MAX_SIZE:  # before the id is looked up
            raise kernel_error(errno.EINVAL)
        ctx = self._file.get(f["id"])
        if n and not f["optval"]:  # memdup_user of the user's buffer
            raise kernel_error(errno.EFAULT)
        value = ctypes.string_at(f["optval"], n) if n else b""
        level, name = f["level"], f["optname"]
        if level == abi.OptionLevel.ID and name in _OPTION_SIZE:
            self._set_option_id(ctx, abi.OptionId(name), value)
        elif level == abi.OptionLevel.IB and name == abi.OptionIb.PATH:
            self._set_ib_path(ctx, value)
        else:  # an unknown level, or an unknown name at either level
            raise kernel_error(errno.ENOSYS)

    def _set_option_id(self, ctx: IdContext, name: "abi.OptionId", value: bytes) -> None:
        O = abi.OptionId
        if len(value) != _OPTION_SIZE[name]:
            raise kernel_error(errno.EINVAL)
        number = value[0] if len(value) == 1 else _INT.unpack(value)[0]
        ctx.check(C.SET_OPTION, kernel_rules.option_form(abi.OptionLevel.ID, name, number), self._version)
        if name == O.TOS:  # the route takes it when it is resolved
            ctx.tos = number
        elif name == O.ACK_TIMEOUT:
            ctx.ack_timeout = number
        elif name == O.REUSEADDR:
            ctx.reuseaddr = number != 0
        else:
            ctx.afonly = number != 0

    def _set_ib_path(self, ctx: IdContext, value: bytes) -> None:
        """An array of ``ib_path_rec_data``; the one flagged GMP|PRIMARY|BIDIRECTIONAL (0x2b)
        becomes the route, and the kernel itself reports ROUTE_RESOLVED."""
        size = _PATH_DATA.size
        if len(value) % size:
            raise kernel_error(errno.EINVAL)
        want = int(abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL)
        entry = None
        for off in range(0, len(value), size):
            if _PATH_DATA.unpack_dict(value[off: off + size])["flags"] == want:
                entry = value[off: off + size]
                break
        if entry is None:
            raise kernel_error(errno.EINVAL)
        ctx.check(C.SET_OPTION, "IB_PATH", self._version)  # a device, ADDR_RESOLVED
        if ctx.loopback:  # RoCE: the path needs the id's netdev (cma_iboe_set_path_rec_l2_fields)
            raise kernel_error(errno.ENODEV)
        rec = _SA_PATH.unpack_dict(_PATH_DATA.unpack_dict(entry)["path_rec"])
        ctx.path = entry
        ctx.route_tc = rec["tclass"]
        ctx.route_plt = rec["packet_life_time"] & 0x3F
        # rdma_set_ib_path: ADDR_RESOLVED -> ROUTE_RESOLVED at once; ucma_set_ib_path then calls
        # ucma_event_handler itself with ROUTE_RESOLVED
        self._file.queue(ctx, E.ROUTE_RESOLVED)

    # -- INIT_QP_ATTR (ucma_init_qp_attr, rdma_init_qp_attr, cma_ib_init_qp_attr, ib_cm_init_qp_attr)
    def init_qp_attr(self, body: bytes, size_out: int) -> None:
        if size_out < _QP_ATTR.size:
            raise kernel_error(errno.ENOSPC)
        f = command_fields("rdma_ucm_init_qp_attr", body)
        state = f["qp_state"]
        if state > QpState.ERR:
            raise kernel_error(errno.EINVAL)
        ctx = self._file.get(f["id"])
        ctx.check(C.INIT_QP_ATTR, version=self._version)  # a device
        attr = self._qp_attr(ctx, QpState(state))
        attr["qp_state"] = state
        if not f["response"]:
            raise kernel_error(errno.EFAULT)
        write_to_address(f["response"], _QP_ATTR.pack_dict(attr))

    def _qp_attr(self, ctx: IdContext, state: "abi.QpState") -> Dict[str, Any]:
        """What ``rdma_init_qp_attr`` fills in.  A UD id, or an id without an IB CM id (no
        CONNECT, no request), gets ``cma_ib_init_qp_attr``'s attributes whatever the state:
        pkey index and port, and the qkey (UD, mask 0x71) or no access rights (RC, mask
        0x39).  A connection's attributes are the IB CM's (:meth:`_connection_qp_attr`)."""
        dev = ctx.dev
        assert dev is not None
        M = QpAttrMask
        out: Dict[str, Any] = {"pkey_index": 0, "port_num": dev.port_num}
        if ctx.qp_type == abi.QpType.UD:
            out.update(qp_attr_mask=int(M.STATE | M.PKEY_INDEX | M.PORT | M.QKEY), qkey=UDP_QKEY)
            return out
        cm = self._file.cms.get(ctx.handle)
        if cm is not None:
            return self._connection_qp_attr(ctx, state, cm)
        out.update(qp_attr_mask=int(M.STATE | M.PKEY_INDEX | M.PORT | M.ACCESS_FLAGS), qp_access_flags=0)
        return out

    def _connection_qp_attr(self, ctx: IdContext, state: "abi.QpState", cm: IbCmId) -> Dict[str, Any]:
        """``ib_cm_init_qp_attr`` for a connection whose IB CM id is ``cm`` (in the states
        :data:`~pyrdmacm.testing._ibcm.QP_ATTR_STATES` allows, else EINVAL), with the overrides
        of ``rdma_init_qp_attr`` (RTR ``rq_psn`` = the id's own PSN; RTS ``timeout`` = the
        ACK_TIMEOUT option when set).  The numbers are the lab's (cm-notes.md section 1): RTR
        mask 0x129181, MTU 3, the AH to the peer's GID (index 1, hop limit 64, global); RTS
        mask 0x12e01, timeout 19."""
        dev, dst = ctx.dev, ctx.dst
        assert dev is not None
        if cm.state not in QP_ATTR_STATES.get(int(state), ()):
            raise kernel_error(errno.EINVAL)  # another QP state, or a cm_id not (or no longer) connecting
        M = QpAttrMask
        out: Dict[str, Any] = {}
        if state == QpState.INIT:
            # cm_init_qp_init_attr: remote write always; read and atomics if the id takes reads
            access = ACCESS_REMOTE_WRITE
            if cm.rr:
                access |= ACCESS_REMOTE_READ | ACCESS_REMOTE_ATOMIC
            out.update(qp_attr_mask=int(M.STATE | M.ACCESS_FLAGS | M.PKEY_INDEX | M.PORT), qp_access_flags=access,
                       pkey_index=0, port_num=dev.port_num)
        elif state == QpState.RTR:
            out.update(qp_attr_mask=int(M.STATE | M.AV | M.PATH_MTU | M.DEST_QPN | M.RQ_PSN | M.MAX_DEST_RD_ATOMIC
                                        | M.MIN_RNR_TIMER),
                       path_mtu=PATH_MTU_1024, dest_qp_num=cm.remote_qpn, rq_psn=ctx.psn,
                       max_dest_rd_atomic=cm.rr, min_rnr_timer=0)
            dgid = self._net.gid_of(dst.ip, dev).packed if dst is not None else bytes(16)
            out.update({"ah_attr.grh.dgid": dgid, "ah_attr.grh.sgid_index": SGID_INDEX,
                        "ah_attr.grh.hop_limit": HOP_LIMIT, "ah_attr.grh.traffic_class": cm.tc,
                        "ah_attr.is_global": 1, "ah_attr.port_num": dev.port_num})
        else:
            out.update(qp_attr_mask=int(M.STATE | M.SQ_PSN | M.TIMEOUT | M.RETRY_CNT | M.RNR_RETRY
                                        | M.MAX_QP_RD_ATOMIC),
                       sq_psn=cm.remote_psn, retry_cnt=cm.retry, rnr_retry=cm.rnr, max_rd_atomic=cm.idepth,
                       timeout=ctx.ack_timeout if ctx.ack_timeout is not None else DEFAULT_TIMEOUT)
        return out
