"""What the kernel's replies and events say, and what a connection sends, as frozen objects.

Device, address, route and path (:meth:`~pyrdmacm.CmId.query_addr`,
:meth:`~pyrdmacm.CmId.query_route`, :meth:`~pyrdmacm.CmId.query_path`); the connection
parameters (:class:`ConnParam`: what CONNECT and ACCEPT send, and what CONNECT_REQUEST,
CONNECT_RESPONSE and ESTABLISHED carry of the peer's); the datagram parameters of an
ESTABLISHED or MULTICAST_JOIN event of a UD id (:class:`UdParam`, with its :class:`AhAttr`); the QP
attributes INIT_QP_ATTR answers (:class:`QpAttr`).  :mod:`pyrdmacm.wire` makes them
from the bytes and encodes :class:`ConnParam`; nothing here does I/O.

All are ``dataclass(frozen=True)``: :class:`ConnParam` here, what the kernel's replies and
events carry in :mod:`pyrdmacm.records.replies`; this module is where users import them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple


__all__ = ["DeviceRef", "AddrInfo", "RouteInfo", "PathRecord", "ServiceRecord", "ConnParam", "AhAttr", "UdParam",
           "QpAttr", "MTU_BYTES", "mtu_bytes"]


@dataclass(frozen=True)
class ConnParam:
    """Connection parameters (``struct rdma_conn_param``).

    Given to :meth:`~pyrdmacm.CmId.connect` and :meth:`~pyrdmacm.CmId.accept` (a
    ``ConnParam``, or its fields as keyword arguments), and decoded from the peer's REQ
    or REP on CONNECT_REQUEST, CONNECT_RESPONSE and ESTABLISHED (``event.param``).

    ``qp_num`` is the QP the connection is for.  pyrdmacm has no QP: the kernel carries
    the number to the peer as given (24 bits), and the peer's data goes there.  ``None``
    (the default) takes a number from :func:`pyrdmacm.allocate_qp_num`, unique in the
    process; give your own QP's number when you have one.  ``retry_count`` is the one the
    peer's QP uses for its sends to us (Soft-RoCE retries for ever at 7).  The defaults
    (responder resources and initiator depth 0, retry and RNR retry 7) are not pyverbs':
    its ``pyverbs.cmid.ConnParam`` has ``resources=1, depth=1, retry=5, rnr_retry=5``; a
    QP doing RDMA reads or atomics needs 1 or more of each (docs/pyverbs.md).  ``ece`` is the
    (vendor_id, attr_mod) pair of Enhanced Connection Establishment (5.8+).

    On a received event, ``private_data`` is what the message carried: the kernel gives
    the whole field of the message (56 bytes in a REQ of an IP id, 196 in a REP ...), the
    sender's data padded with zeros, because the IB CM does not send the length.  The IB
    CM hands each side the other's view: a REQ's responder resources arrive as the
    passive side's initiator depth and the other way round.  A REP carries no retry count:
    on CONNECT_RESPONSE ``retry_count`` reads 0.
    """

    qp_num: Optional[int] = None
    private_data: bytes = b""
    responder_resources: int = 0
    initiator_depth: int = 0
    flow_control: int = 0
    retry_count: int = 7
    rnr_retry_count: int = 7
    srq: int = 0
    qkey: int = 0
    ece: Tuple[int, int] = (0, 0)


from .replies import (  # noqa: E402 (below ConnParam, which nothing of them needs)
    MTU_BYTES as MTU_BYTES, AddrInfo as AddrInfo, AhAttr as AhAttr, DeviceRef as DeviceRef,
    PathRecord as PathRecord, QpAttr as QpAttr, RouteInfo as RouteInfo, ServiceRecord as ServiceRecord,
    UdParam as UdParam, _mask_fields as _mask_fields, mtu_bytes as mtu_bytes,
)
