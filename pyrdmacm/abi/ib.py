"""The enums of :mod:`pyrdmacm.abi` that nothing needs at import: defined here, loaded on
their first use through ``abi``'s module ``__getattr__`` (their ``__module__`` is
``pyrdmacm.abi``, where they are documented, pickled and found).  The seven of them cost
about 2 ms to create, a tenth of the library's import."""

from __future__ import annotations

import enum

from .named import NamedIntEnum

__all__ = ["McJoinFlag", "IbServiceFlag", "IbPathFlag", "RejectReason", "REJECT_REASONS", "SidrStatus", "QpState",
           "QpAttrMask"]


class McJoinFlag(NamedIntEnum):
    """``RDMA_MC_JOIN_FLAG_*``: ``join_flags`` of JOIN_MCAST."""

    __module__ = "pyrdmacm.abi"

    FULLMEMBER = 0
    SENDONLY_FULLMEMBER = 1
    RESERVED = 2


class IbServiceFlag(enum.IntFlag):
    """``RDMA_USER_CM_IB_SERVICE_FLAG_*`` (6.17+)."""

    __module__ = "pyrdmacm.abi"

    ID = 1 << 0
    NAME = 1 << 1


class IbPathFlag(enum.IntFlag):
    """``IB_PATH_*``: ``flags`` of ``ib_path_rec_data`` (``<rdma/ib_user_sa.h>``)."""

    __module__ = "pyrdmacm.abi"

    GMP = 1
    PRIMARY = 1 << 1
    ALTERNATE = 1 << 2
    OUTBOUND = 1 << 3
    INBOUND = 1 << 4
    INBOUND_REVERSE = 1 << 5
    BIDIRECTIONAL = (1 << 3) | (1 << 5)


class RejectReason(NamedIntEnum):
    """IB CM reject reasons (``enum ib_cm_rej_reason``; IBTA vol. 1, 12.6.7.2).

    A REJECTED event's ``status`` may carry any of them.  The REJECT command takes only
    CONSUMER_DEFINED and VENDOR_OPTION_NOT_SUPPORTED (0 means CONSUMER_DEFINED).
    """

    __module__ = "pyrdmacm.abi"

    NO_QP = 1
    NO_EEC = 2
    NO_RESOURCES = 3
    TIMEOUT = 4
    UNSUPPORTED = 5
    INVALID_COMM_ID = 6
    INVALID_COMM_INSTANCE = 7
    INVALID_SERVICE_ID = 8
    INVALID_TRANSPORT_TYPE = 9
    STALE_CONN = 10
    RDC_NOT_EXIST = 11
    INVALID_GID = 12
    INVALID_LID = 13
    INVALID_SL = 14
    INVALID_TRAFFIC_CLASS = 15
    INVALID_HOP_LIMIT = 16
    INVALID_PACKET_RATE = 17
    INVALID_ALT_GID = 18
    INVALID_ALT_LID = 19
    INVALID_ALT_SL = 20
    INVALID_ALT_TRAFFIC_CLASS = 21
    INVALID_ALT_HOP_LIMIT = 22
    INVALID_ALT_PACKET_RATE = 23
    PORT_CM_REDIRECT = 24
    PORT_REDIRECT = 25
    INVALID_MTU = 26
    INSUFFICIENT_RESP_RESOURCES = 27
    CONSUMER_DEFINED = 28
    INVALID_RNR_RETRY = 29
    DUPLICATE_LOCAL_COMM_ID = 30
    INVALID_CLASS_VERSION = 31
    INVALID_FLOW_LABEL = 32
    INVALID_ALT_FLOW_LABEL = 33
    VENDOR_OPTION_NOT_SUPPORTED = 35


#: The reasons the REJECT command takes (any other: EINVAL, ``ucma_reject``).
REJECT_REASONS = (RejectReason.CONSUMER_DEFINED, RejectReason.VENDOR_OPTION_NOT_SUPPORTED)


class SidrStatus(NamedIntEnum):
    """``enum ib_cm_sidr_status``: the status of a SIDR REP, which an UNREACHABLE event of a
    datagram id carries (IBTA vol. 1, 12.11.2)."""

    __module__ = "pyrdmacm.abi"

    SUCCESS = 0
    UNSUPPORTED = 1
    REJECT = 2
    NO_QP = 3
    REDIRECT = 4
    UNSUPPORTED_VERSION = 5


class QpState(NamedIntEnum):
    """``enum ib_uverbs_qp_state``: the ``qp_state`` of INIT_QP_ATTR."""

    __module__ = "pyrdmacm.abi"

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class QpAttrMask(enum.IntFlag):
    """``enum ib_uverbs_qp_attr_mask`` (``IB_QP_*``): which fields INIT_QP_ATTR's answer sets."""

    __module__ = "pyrdmacm.abi"

    STATE = 1 << 0
    CUR_STATE = 1 << 1
    EN_SQD_ASYNC_NOTIFY = 1 << 2
    ACCESS_FLAGS = 1 << 3
    PKEY_INDEX = 1 << 4
    PORT = 1 << 5
    QKEY = 1 << 6
    AV = 1 << 7
    PATH_MTU = 1 << 8
    TIMEOUT = 1 << 9
    RETRY_CNT = 1 << 10
    RNR_RETRY = 1 << 11
    RQ_PSN = 1 << 12
    MAX_QP_RD_ATOMIC = 1 << 13
    ALT_PATH = 1 << 14
    MIN_RNR_TIMER = 1 << 15
    SQ_PSN = 1 << 16
    MAX_DEST_RD_ATOMIC = 1 << 17
    PATH_MIG_STATE = 1 << 18
    CAP = 1 << 19
    DEST_QPN = 1 << 20
