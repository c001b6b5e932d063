"""The layouts of the ucma ABI as construct declarations: the single source of truth.

Theory of operation
-------------------
Each layout below is a construct ``Struct`` under the kernel's own names, on x86_64
(little-endian host order for kernel integers, network order where the header says
``__be*``).  construct never aligns, so every hole the C compiler would leave is an
explicit ``Padding``; the sizes of the kernel's structs are checked against a compiled
probe of the real uapi headers (``tools/abi_probe.py`` and ``abi/layout/*.json``).
Lengths are computed with ``sizeof()``, never written as literals elsewhere.

The library's runtime does not import this module (construct and what it pulls in
cost more than the rest of the import): ``tools/gen_layouts`` derives from these
declarations, with ``tools/derive_layouts.py``, the codec data of every layout --
struct formats, field names, big-endian fields -- into :mod:`pyrdmacm.abi.layouts`,
which :mod:`pyrdmacm.abi.codec` reads.  A test derives the data again and fails when the
generated module is stale.  The decoder (:mod:`pyrdmacm.decode`), the fakes' reply sizes
(``MIN_REPLY``), the tools and the tests import this module for its layouts.

The constants and enums these declarations use are :mod:`pyrdmacm.abi`'s; the fields
that arrive in network order despite a plain integer type are described there too.
"""

from __future__ import annotations

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

from . import RDMA_MAX_PRIVATE_DATA, RDMA_USER_CM_IB_SERVICE_NAME_SIZE, QueryOption, UserCmCmd

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
