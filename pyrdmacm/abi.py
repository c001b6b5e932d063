"""The ucma ABI: every struct and constant of ``<rdma/rdma_user_cm.h>``, declared once.

Theory of operation
-------------------
The kernel's rdma_cm character device takes one ``write()`` per command: an
8-byte ``rdma_ucm_cmd_hdr`` (``cmd``, ``in``, ``out``) followed by the
command's struct.  ``in`` is the size of that struct; ``out`` is the size of
the reply buffer, whose *address* travels inside the struct as a ``__u64
response`` field -- the kernel ``copy_to_user()``\\ s the reply there.

Each layout below is a construct ``Struct`` under the kernel's own names, on
x86_64 (little-endian host order for kernel integers, network order where the
header says ``__be*``).  construct never aligns, so every hole the C compiler
would leave is an explicit ``Padding``; the sizes of the kernel's structs are
checked against a compiled probe of the real uapi headers (``tools/abi_probe.py``
and ``abi/layout/*.json``).  Lengths are computed with ``sizeof()``, never
written as literals elsewhere.

These declarations are the single source of truth.  The hot path does not
run construct (it costs 10-60 us a struct): :mod:`pyrdmacm._codec` derives a
``struct.Struct`` from each declaration at import, and the tests prove the two
agree byte for byte.

Nothing outside the ABI layer (this module, :mod:`pyrdmacm._codec`,
:mod:`pyrdmacm.decode`) sees a construct container.

Fields that arrive in network byte order despite a plain integer type:
``node_guid`` in ``rdma_ucm_query_addr_resp`` and ``rdma_ucm_query_route_resp``
(the kernel copies the device's ``node_guid``, which it keeps as ``__be64``,
into a field declared ``__aligned_u64``), and ``pkey`` in
``rdma_ucm_query_addr_resp`` (``cpu_to_be16`` into a ``__u16``).  They are declared ``Int64ub`` here,
so they decode to the GUID as humans write it.  See :data:`NETWORK_ORDER_DESPITE_TYPE`.
"""

from __future__ import annotations

import enum
from typing import Any

from construct import (
    Array,
    Bytes,
    Int8ul,
    Int16ub,
    Int16ul,
    Int32ub,
    Int32ul,
    Int64ub,
    Int64ul,
    Padded,
    Struct,
    Union,
)

from ._enum import NamedIntEnum

# --------------------------------------------------------------------------- constants

RDMA_USER_CM_ABI_VERSION = 4
#: Oldest ABI version librdmacm accepts (and so do we).
RDMA_USER_CM_MIN_ABI_VERSION = 3
RDMA_MAX_PRIVATE_DATA = 256
RDMA_USER_CM_IB_SERVICE_NAME_SIZE = 64

AF_INET = 2
AF_INET6 = 10
AF_IB = 27

#: IB service id layout for IP port spaces (librdmacm's rdma_cma.h, IBTA Annex A11)
RDMA_IB_IP_PS_MASK = 0xFFFFFFFFFFFF0000
RDMA_IB_IP_PORT_MASK = 0x000000000000FFFF
RDMA_IB_IP_PS_TCP = 0x0000000001060000
RDMA_IB_IP_PS_UDP = 0x0000000001110000
RDMA_IB_PS_IB = 0x00000000013F0000

# --------------------------------------------------------------------------- private-data limits
#
# The one statement of how much private data each IB CM message carries.  These are sizes of
# IBTA wire messages, not of any struct of the uapi headers, so they are written here as
# numbers (and only here).  The IB CM's own sizes (``enum ib_cm_data_size``) are given for
# the five messages whose data the ucma ABI carries; RTU, DREQ, DREP and MRA have data on
# the wire too, but no ucma command or event exposes it.  The rdma_cm puts its own header
# (``struct cma_hdr``: version, IP version, port, source and destination address) at the
# front of the REQ and SIDR REQ of AF_INET / AF_INET6 ids (``cma_user_data_offset``; AF_IB
# ids have none), so those ids may give 36 bytes less.  A receiver always gets the message's
# whole data area (the sender's length is not on the wire).

#: The private data of each IB CM message, in bytes, as the IB CM carries it.
CM_PRIVATE_DATA = {"REQ": 92, "REP": 196, "REJ": 148, "SIDR_REQ": 216, "SIDR_REP": 136}
#: The rdma_cm header that the REQ and SIDR REQ of an IP-addressed id carry first.
CMA_HDR_SIZE = 36


def cm_private_data_limit(message: str, family: int = AF_INET) -> int:
    """The most private data a user may give with ``message`` ("REQ", "REP", "REJ",
    "SIDR_REQ", "SIDR_REP") for an id of address ``family`` (``AF_INET`` by default) -- and
    how many bytes the receiving side's event carries: REQ 56 / SIDR REQ 180 for IP ids,
    92 / 216 for AF_IB ids; REP 196, REJ 148, SIDR REP 136 for all."""
    size = CM_PRIVATE_DATA[message]
    if message in ("REQ", "SIDR_REQ") and family != AF_IB:
        size -= CMA_HDR_SIZE
    return size


class UserCmCmd(NamedIntEnum):
    """``RDMA_USER_CM_CMD_*``: the command numbers of ``rdma_ucm_cmd_hdr.cmd``."""

    CREATE_ID = 0
    DESTROY_ID = 1
    BIND_IP = 2
    RESOLVE_IP = 3
    RESOLVE_ROUTE = 4
    QUERY_ROUTE = 5
    CONNECT = 6
    LISTEN = 7
    ACCEPT = 8
    REJECT = 9
    DISCONNECT = 10
    INIT_QP_ATTR = 11
    GET_EVENT = 12
    GET_OPTION = 13
    SET_OPTION = 14
    NOTIFY = 15
    JOIN_IP_MCAST = 16
    LEAVE_MCAST = 17
    MIGRATE_ID = 18
    QUERY = 19
    BIND = 20
    RESOLVE_ADDR = 21
    JOIN_MCAST = 22
    RESOLVE_IB_SERVICE = 23
    WRITE_CM_EVENT = 24


class PortSpace(NamedIntEnum):
    """``enum rdma_ucm_port_space`` (``RDMA_PS_*``)."""

    IPOIB = 0x0002
    IB = 0x013F
    TCP = 0x0106
    UDP = 0x0111


class QpType(NamedIntEnum):
    """``enum ib_uverbs_qp_type`` (``IB_UVERBS_QPT_*``), the ``qp_type`` of CREATE_ID."""

    RC = 2
    UC = 3
    UD = 4
    RAW_PACKET = 8
    XRC_INI = 9
    XRC_TGT = 10
    DRIVER = 0xFF


class QueryOption(NamedIntEnum):
    """``RDMA_USER_CM_QUERY_*``: the ``option`` of the QUERY command."""

    ADDR = 0
    PATH = 1
    GID = 2
    IB_SERVICE = 3


class CmEventType(NamedIntEnum):
    """``enum rdma_cm_event_type`` (kernel ``include/rdma/rdma_cm.h``, same numbers in librdmacm)."""

    ADDR_RESOLVED = 0
    ADDR_ERROR = 1
    ROUTE_RESOLVED = 2
    ROUTE_ERROR = 3
    CONNECT_REQUEST = 4
    CONNECT_RESPONSE = 5
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    DEVICE_REMOVAL = 11
    MULTICAST_JOIN = 12
    MULTICAST_ERROR = 13
    ADDR_CHANGE = 14
    TIMEWAIT_EXIT = 15
    ADDRINFO_RESOLVED = 16
    ADDRINFO_ERROR = 17
    USER = 18
    INTERNAL = 19


class OptionLevel(NamedIntEnum):
    """``RDMA_OPTION_ID`` / ``RDMA_OPTION_IB``: the ``level`` of SET_OPTION."""

    ID = 0
    IB = 1


class OptionId(NamedIntEnum):
    """``RDMA_OPTION_ID_*``: option names at level ``RDMA_OPTION_ID``."""

    TOS = 0
    REUSEADDR = 1
    AFONLY = 2
    ACK_TIMEOUT = 3


class OptionIb(NamedIntEnum):
    """``RDMA_OPTION_IB_*``: option names at level ``RDMA_OPTION_IB``."""

    PATH = 1


class McJoinFlag(NamedIntEnum):
    """``RDMA_MC_JOIN_FLAG_*``: ``join_flags`` of JOIN_MCAST."""

    FULLMEMBER = 0
    SENDONLY_FULLMEMBER = 1
    RESERVED = 2


class IbServiceFlag(enum.IntFlag):
    """``RDMA_USER_CM_IB_SERVICE_FLAG_*`` (6.17+)."""

    ID = 1 << 0
    NAME = 1 << 1


class IbPathFlag(enum.IntFlag):
    """``IB_PATH_*``: ``flags`` of ``ib_path_rec_data`` (``<rdma/ib_user_sa.h>``)."""

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

    SUCCESS = 0
    UNSUPPORTED = 1
    REJECT = 2
    NO_QP = 3
    REDIRECT = 4
    UNSUPPORTED_VERSION = 5


class NotifyEvent(NamedIntEnum):
    """The ``event`` of NOTIFY (``enum ib_event_type`` members ``rdma_notify`` takes)."""

    COMM_EST = 4
    PATH_MIG = 6


class QpState(NamedIntEnum):
    """``enum ib_uverbs_qp_state``: the ``qp_state`` of INIT_QP_ATTR."""

    RESET = 0
    INIT = 1
    RTR = 2
    RTS = 3
    SQD = 4
    SQE = 5
    ERR = 6


class QpAttrMask(enum.IntFlag):
    """``enum ib_uverbs_qp_attr_mask`` (``IB_QP_*``): which fields INIT_QP_ATTR's answer sets."""

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


# --------------------------------------------------------------------------- socket addresses

#: ``struct sockaddr_in`` (16 bytes)
sockaddr_in = Struct(
    "sin_family" / Int16ul,
    "sin_port" / Int16ub,
    "sin_addr" / Bytes(4),
    "sin_zero" / Bytes(8),
)

#: ``struct sockaddr_in6`` (28 bytes)
sockaddr_in6 = Struct(
    "sin6_family" / Int16ul,
    "sin6_port" / Int16ub,
    "sin6_flowinfo" / Int32ub,
    "sin6_addr" / Bytes(16),
    "sin6_scope_id" / Int32ul,
)

#: ``struct sockaddr_ib`` (48 bytes; rdma-core ``<infiniband/ib.h>``, kernel ``include/rdma/ib.h``)
sockaddr_ib = Struct(
    "sib_family" / Int16ul,
    "sib_pkey" / Int16ub,
    "sib_flowinfo" / Int32ub,
    "sib_addr" / Bytes(16),
    "sib_sid" / Int64ub,
    "sib_sid_mask" / Int64ub,
    "sib_scope_id" / Int64ul,
)

#: ``struct __kernel_sockaddr_storage`` (128 bytes, 8-aligned)
__kernel_sockaddr_storage = Struct(
    "ss_family" / Int16ul,
    "__data" / Bytes(126),
)
kernel_sockaddr_storage = __kernel_sockaddr_storage

# --------------------------------------------------------------------------- ib_user_verbs / ib_user_sa

ib_uverbs_global_route = Struct(
    "dgid" / Bytes(16),
    "flow_label" / Int32ul,
    "sgid_index" / Int8ul,
    "hop_limit" / Int8ul,
    "traffic_class" / Int8ul,
    "reserved" / Int8ul,
)

ib_uverbs_ah_attr = Struct(
    "grh" / ib_uverbs_global_route,
    "dlid" / Int16ul,
    "sl" / Int8ul,
    "src_path_bits" / Int8ul,
    "static_rate" / Int8ul,
    "is_global" / Int8ul,
    "port_num" / Int8ul,
    "reserved" / Int8ul,
)

ib_uverbs_qp_attr = Struct(
    "qp_attr_mask" / Int32ul,
    "qp_state" / Int32ul,
    "cur_qp_state" / Int32ul,
    "path_mtu" / Int32ul,
    "path_mig_state" / Int32ul,
    "qkey" / Int32ul,
    "rq_psn" / Int32ul,
    "sq_psn" / Int32ul,
    "dest_qp_num" / Int32ul,
    "qp_access_flags" / Int32ul,
    "ah_attr" / ib_uverbs_ah_attr,
    "alt_ah_attr" / ib_uverbs_ah_attr,
    "max_send_wr" / Int32ul,
    "max_recv_wr" / Int32ul,
    "max_send_sge" / Int32ul,
    "max_recv_sge" / Int32ul,
    "max_inline_data" / Int32ul,
    "pkey_index" / Int16ul,
    "alt_pkey_index" / Int16ul,
    "en_sqd_async_notify" / Int8ul,
    "sq_draining" / Int8ul,
    "max_rd_atomic" / Int8ul,
    "max_dest_rd_atomic" / Int8ul,
    "min_rnr_timer" / Int8ul,
    "port_num" / Int8ul,
    "timeout" / Int8ul,
    "retry_cnt" / Int8ul,
    "rnr_retry" / Int8ul,
    "alt_port_num" / Int8ul,
    "alt_timeout" / Int8ul,
    "reserved" / Bytes(5),
)

ib_user_path_rec = Struct(
    "dgid" / Bytes(16),
    "sgid" / Bytes(16),
    "dlid" / Int16ub,
    "slid" / Int16ub,
    "raw_traffic" / Int32ul,
    "flow_label" / Int32ub,
    "reversible" / Int32ul,
    "mtu" / Int32ul,
    "pkey" / Int16ub,
    "hop_limit" / Int8ul,
    "traffic_class" / Int8ul,
    "numb_path" / Int8ul,
    "sl" / Int8ul,
    "mtu_selector" / Int8ul,
    "rate_selector" / Int8ul,
    "rate" / Int8ul,
    "packet_life_time_selector" / Int8ul,
    "packet_life_time" / Int8ul,
    "preference" / Int8ul,
)

#: ``struct ib_path_rec_data``: a path record in IBTA wire format (64 bytes, big-endian inside)
ib_path_rec_data = Struct(
    "flags" / Int32ul,
    "reserved" / Int32ul,
    "path_rec" / Bytes(64),
)

#: ``struct ib_user_service_rec`` (6.17+)
ib_user_service_rec = Struct(
    "id" / Int64ub,
    "gid" / Bytes(16),
    "pkey" / Int16ub,
    "reserved" / Bytes(2),
    "lease" / Int32ub,
    "key" / Bytes(16),
    "name" / Bytes(64),
    "data_8" / Bytes(16),
    "data_16" / Array(8, Int16ub),
    "data_32" / Array(4, Int32ub),
    "data_64" / Array(2, Int64ub),
)

# --------------------------------------------------------------------------- rdma_user_cm.h

rdma_ucm_cmd_hdr = Struct(
    "cmd" / Int32ul,
    "in" / Int16ul,
    "out" / Int16ul,
)

rdma_ucm_create_id = Struct(
    "uid" / Int64ul,
    "response" / Int64ul,
    "ps" / Int16ul,
    "qp_type" / Int8ul,
    "reserved" / Bytes(5),
)

rdma_ucm_create_id_resp = Struct(
    "id" / Int32ul,
)

rdma_ucm_destroy_id = Struct(
    "response" / Int64ul,
    "id" / Int32ul,
    "reserved" / Int32ul,
)

rdma_ucm_destroy_id_resp = Struct(
    "events_reported" / Int32ul,
)

rdma_ucm_bind_ip = Struct(
    "response" / Int64ul,
    "addr" / sockaddr_in6,
    "id" / Int32ul,
)

rdma_ucm_bind = Struct(
    "id" / Int32ul,
    "addr_size" / Int16ul,
    "reserved" / Int16ul,
    "addr" / __kernel_sockaddr_storage,
)

rdma_ucm_resolve_ip = Struct(
    "src_addr" / sockaddr_in6,
    "dst_addr" / sockaddr_in6,
    "id" / Int32ul,
    "timeout_ms" / Int32ul,
)

rdma_ucm_resolve_addr = Struct(
    "id" / Int32ul,
    "timeout_ms" / Int32ul,
    "src_size" / Int16ul,
    "dst_size" / Int16ul,
    "reserved" / Int32ul,
    "src_addr" / __kernel_sockaddr_storage,
    "dst_addr" / __kernel_sockaddr_storage,
)

rdma_ucm_resolve_route = Struct(
    "id" / Int32ul,
    "timeout_ms" / Int32ul,
)

rdma_ucm_query = Struct(
    "response" / Int64ul,
    "id" / Int32ul,
    "option" / Int32ul,
)

rdma_ucm_query_route_resp = Struct(
    "node_guid" / Int64ub,  # network order despite __aligned_u64: see module docstring
    "ib_route" / Array(2, ib_user_path_rec),
    "src_addr" / sockaddr_in6,
    "dst_addr" / sockaddr_in6,
    "num_paths" / Int32ul,
    "port_num" / Int8ul,
    "reserved" / Bytes(3),
    "ibdev_index" / Int32ul,  # 5.8+
    "reserved1" / Int32ul,  # 5.8+
)

rdma_ucm_query_addr_resp = Struct(
    "node_guid" / Int64ub,  # network order despite __aligned_u64
    "port_num" / Int8ul,
    "reserved" / Int8ul,
    "pkey" / Int16ub,  # network order despite __u16
    "src_size" / Int16ul,
    "dst_size" / Int16ul,
    "src_addr" / __kernel_sockaddr_storage,
    "dst_addr" / __kernel_sockaddr_storage,
    "ibdev_index" / Int32ul,  # 5.8+
    "reserved1" / Int32ul,  # 5.8+
)

#: The fixed head of ``rdma_ucm_query_path_resp``; ``num_paths`` ``ib_path_rec_data`` follow.
rdma_ucm_query_path_resp = Struct(
    "num_paths" / Int32ul,
    "reserved" / Int32ul,
)

#: The fixed head of ``rdma_ucm_query_ib_service_resp`` (6.17+); ``ib_user_service_rec`` follow.
rdma_ucm_query_ib_service_resp = Struct(
    "num_service_recs" / Int32ul,
    "reserved" / Int32ul,
)

rdma_ucm_conn_param = Struct(
    "qp_num" / Int32ul,
    "qkey" / Int32ul,
    "private_data" / Bytes(RDMA_MAX_PRIVATE_DATA),
    "private_data_len" / Int8ul,
    "srq" / Int8ul,
    "responder_resources" / Int8ul,
    "initiator_depth" / Int8ul,
    "flow_control" / Int8ul,
    "retry_count" / Int8ul,
    "rnr_retry_count" / Int8ul,
    "valid" / Int8ul,
)

rdma_ucm_ud_param = Struct(
    "qp_num" / Int32ul,
    "qkey" / Int32ul,
    "ah_attr" / ib_uverbs_ah_attr,
    "private_data" / Bytes(RDMA_MAX_PRIVATE_DATA),
    "private_data_len" / Int8ul,
    "reserved" / Bytes(7),
)

rdma_ucm_ece = Struct(
    "vendor_id" / Int32ul,
    "attr_mod" / Int32ul,
)

rdma_ucm_connect = Struct(
    "conn_param" / rdma_ucm_conn_param,
    "id" / Int32ul,
    "reserved" / Int32ul,
    "ece" / rdma_ucm_ece,  # 5.8+; older kernels take the 280 bytes before it
)

rdma_ucm_listen = Struct(
    "id" / Int32ul,
    "backlog" / Int32ul,
)

rdma_ucm_accept = Struct(
    "uid" / Int64ul,
    "conn_param" / rdma_ucm_conn_param,
    "id" / Int32ul,
    "reserved" / Int32ul,
    "ece" / rdma_ucm_ece,  # 5.8+
)

rdma_ucm_reject = Struct(
    "id" / Int32ul,
    "private_data_len" / Int8ul,
    "reason" / Int8ul,
    "reserved" / Bytes(2),
    "private_data" / Bytes(RDMA_MAX_PRIVATE_DATA),
)

rdma_ucm_disconnect = Struct(
    "id" / Int32ul,
)

rdma_ucm_init_qp_attr = Struct(
    "response" / Int64ul,
    "id" / Int32ul,
    "qp_state" / Int32ul,
)

rdma_ucm_notify = Struct(
    "id" / Int32ul,
    "event" / Int32ul,
)

rdma_ucm_join_ip_mcast = Struct(
    "response" / Int64ul,
    "uid" / Int64ul,
    "addr" / sockaddr_in6,
    "id" / Int32ul,
)

rdma_ucm_join_mcast = Struct(
    "response" / Int64ul,
    "uid" / Int64ul,
    "id" / Int32ul,
    "addr_size" / Int16ul,
    "join_flags" / Int16ul,
    "addr" / __kernel_sockaddr_storage,
)

#: LEAVE_MCAST's body has DESTROY_ID's layout (the ``id`` is the multicast handle).
rdma_ucm_leave_mcast = rdma_ucm_destroy_id

rdma_ucm_get_event = Struct(
    "response" / Int64ul,
)

_PARAM_SIZE = rdma_ucm_ud_param.sizeof()  # the largest arm


def _param_union(arg: Any) -> Padded:
    """The event parameter union: ``conn``, ``ud`` and one event-specific argument arm."""
    return Padded(_PARAM_SIZE, Union(None, "conn" / rdma_ucm_conn_param, "ud" / rdma_ucm_ud_param, arg))

rdma_ucm_event_resp = Struct(
    "uid" / Int64ul,
    "id" / Int32ul,
    "event" / Int32ul,
    "status" / Int32ul,  # a negative errno for kernel-made failures: decode as signed
    # 4-byte aligned union: conn for connected ids, ud for UD ids, arg32 for USER/INTERNAL (6.17+)
    "param" / _param_union("arg32" / Array(2, Int32ul)),
    "reserved" / Int32ul,  # 4.17+
    "ece" / rdma_ucm_ece,  # 5.8+
)

rdma_ucm_set_option = Struct(
    "optval" / Int64ul,
    "id" / Int32ul,
    "level" / Int32ul,
    "optname" / Int32ul,
    "optlen" / Int32ul,
)

rdma_ucm_migrate_id = Struct(
    "response" / Int64ul,
    "id" / Int32ul,
    "fd" / Int32ul,
)

rdma_ucm_migrate_resp = Struct(
    "events_reported" / Int32ul,
)

rdma_ucm_ib_service = Struct(
    "service_id" / Int64ul,
    "service_name" / Bytes(RDMA_USER_CM_IB_SERVICE_NAME_SIZE),
    "flags" / Int32ul,
    "reserved" / Int32ul,
)

rdma_ucm_resolve_ib_service = Struct(
    "id" / Int32ul,
    "reserved" / Int32ul,  # explicit since the 2025-12 fix; implicit padding on x86_64 before it
    "ibs" / rdma_ucm_ib_service,
)

rdma_ucm_write_cm_event = Struct(
    "id" / Int32ul,
    "reserved" / Int32ul,
    "event" / Int32ul,
    "status" / Int32ul,
    "param" / _param_union("arg" / Int64ul),
)

# --------------------------------------------------------------------------- tables

#: Every declared layout by its kernel name (the ABI probe's names).
STRUCTS = {
    name: obj
    for name, obj in list(globals().items())
    if isinstance(obj, Struct) and not name.startswith("_") and name != "kernel_sockaddr_storage"
}
STRUCTS["__kernel_sockaddr_storage"] = __kernel_sockaddr_storage
del STRUCTS["rdma_ucm_leave_mcast"]  # an alias, not a kernel struct

#: Wire formats that are no struct of a kernel header, declared here all the same so that
#: nothing outside the ABI layer spells a size or an offset.
#:
#: ``ib_sa_path_rec``: the IBTA SA PathRecord as ``ib_path_rec_data.path_rec`` carries it
#: (64 bytes, big-endian; IBTA 15.2.5.16).  Sub-byte fields share a word and are split by
#: :mod:`pyrdmacm.wire`: ``raw_flow_hop`` is RawTraffic(1) Reserved(3) FlowLabel(20)
#: HopLimit(8); ``reversible_numb_path`` Reversible(1) NumbPath(7); ``qos_sl`` QosClass(12)
#: SL(4); ``mtu``, ``rate``, ``packet_life_time``: Selector(2) Value(6).
ib_sa_path_rec = Struct(
    "service_id" / Int64ub,
    "dgid" / Bytes(16),
    "sgid" / Bytes(16),
    "dlid" / Int16ub,
    "slid" / Int16ub,
    "raw_flow_hop" / Int32ub,
    "tclass" / Int8ul,
    "reversible_numb_path" / Int8ul,
    "pkey" / Int16ub,
    "qos_sl" / Int16ub,
    "mtu" / Int8ul,
    "rate" / Int8ul,
    "packet_life_time" / Int8ul,
    "preference" / Int8ul,
    "reserved" / Bytes(6),
)

#: ``struct nlmsghdr`` and ``struct nlattr`` (``<linux/netlink.h>``), host order: the one
#: RDMA netlink request the device layer makes without pyroute2 (GET_CHARDEV).
nlmsghdr = Struct(
    "nlmsg_len" / Int32ul,
    "nlmsg_type" / Int16ul,
    "nlmsg_flags" / Int16ul,
    "nlmsg_seq" / Int32ul,
    "nlmsg_pid" / Int32ul,
)
nlattr = Struct(
    "nla_len" / Int16ul,
    "nla_type" / Int16ul,
)

WIRE_FORMATS = {"ib_sa_path_rec": ib_sa_path_rec, "nlmsghdr": nlmsghdr, "nlattr": nlattr}
#: Every layout the codecs are derived from: the kernel's structs and the wire formats.
LAYOUTS = {**STRUCTS, **WIRE_FORMATS}

#: command -> (body struct, reply struct or None).  Variable-length replies
#: (QUERY PATH / IB_SERVICE) name their fixed head; GET_OPTION has no body.
COMMANDS = {
    UserCmCmd.CREATE_ID: (rdma_ucm_create_id, rdma_ucm_create_id_resp),
    UserCmCmd.DESTROY_ID: (rdma_ucm_destroy_id, rdma_ucm_destroy_id_resp),
    UserCmCmd.BIND_IP: (rdma_ucm_bind_ip, None),
    UserCmCmd.RESOLVE_IP: (rdma_ucm_resolve_ip, None),
    UserCmCmd.RESOLVE_ROUTE: (rdma_ucm_resolve_route, None),
    UserCmCmd.QUERY_ROUTE: (rdma_ucm_query, rdma_ucm_query_route_resp),
    UserCmCmd.CONNECT: (rdma_ucm_connect, None),
    UserCmCmd.LISTEN: (rdma_ucm_listen, None),
    UserCmCmd.ACCEPT: (rdma_ucm_accept, None),
    UserCmCmd.REJECT: (rdma_ucm_reject, None),
    UserCmCmd.DISCONNECT: (rdma_ucm_disconnect, None),
    UserCmCmd.INIT_QP_ATTR: (rdma_ucm_init_qp_attr, ib_uverbs_qp_attr),
    UserCmCmd.GET_EVENT: (rdma_ucm_get_event, rdma_ucm_event_resp),
    UserCmCmd.GET_OPTION: (None, None),
    UserCmCmd.SET_OPTION: (rdma_ucm_set_option, None),
    UserCmCmd.NOTIFY: (rdma_ucm_notify, None),
    UserCmCmd.JOIN_IP_MCAST: (rdma_ucm_join_ip_mcast, rdma_ucm_create_id_resp),
    UserCmCmd.LEAVE_MCAST: (rdma_ucm_leave_mcast, rdma_ucm_destroy_id_resp),
    UserCmCmd.MIGRATE_ID: (rdma_ucm_migrate_id, rdma_ucm_migrate_resp),
    UserCmCmd.QUERY: (rdma_ucm_query, None),  # reply depends on option: QUERY_REPLIES
    UserCmCmd.BIND: (rdma_ucm_bind, None),
    UserCmCmd.RESOLVE_ADDR: (rdma_ucm_resolve_addr, None),
    UserCmCmd.JOIN_MCAST: (rdma_ucm_join_mcast, rdma_ucm_create_id_resp),
    UserCmCmd.RESOLVE_IB_SERVICE: (rdma_ucm_resolve_ib_service, None),
    UserCmCmd.WRITE_CM_EVENT: (rdma_ucm_write_cm_event, None),
}

#: QUERY option -> (reply head, element struct of the variable part or None)
QUERY_REPLIES = {
    QueryOption.ADDR: (rdma_ucm_query_addr_resp, None),
    QueryOption.GID: (rdma_ucm_query_addr_resp, None),
    QueryOption.PATH: (rdma_ucm_query_path_resp, ib_path_rec_data),
    QueryOption.IB_SERVICE: (rdma_ucm_query_ib_service_resp, ib_user_service_rec),
}

#: The command body fields that carry a user address the kernel writes a reply to.
RESPONSE_FIELDS = {"response"}

#: ``(struct, field)`` pairs known to arrive in network byte order although
#: the header types them as host-order integers.
NETWORK_ORDER_DESPITE_TYPE = (
    ("rdma_ucm_query_addr_resp", "node_guid"),
    ("rdma_ucm_query_addr_resp", "pkey"),
    ("rdma_ucm_query_route_resp", "node_guid"),
)

#: The smallest reply sizes the kernel accepts, where it accepts less than ``sizeof``
#: (offsetof the fields it added later): older kernels keep working with them.
MIN_REPLY = {
    "rdma_ucm_event_resp": rdma_ucm_event_resp.sizeof() - 4 - rdma_ucm_ece.sizeof(),
    "rdma_ucm_query_addr_resp": rdma_ucm_query_addr_resp.sizeof() - 8,
    "rdma_ucm_query_route_resp": rdma_ucm_query_route_resp.sizeof() - 8,
}

HDR_SIZE = rdma_ucm_cmd_hdr.sizeof()
