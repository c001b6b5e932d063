"""What the kernel's replies and events say, and what a connection sends, as frozen objects.

Device, address, route and path (:meth:`~pyrdmacm.CmId.query_addr`,
:meth:`~pyrdmacm.CmId.query_route`, :meth:`~pyrdmacm.CmId.query_path`); the connection
parameters (:class:`ConnParam`: what CONNECT and ACCEPT send, and what CONNECT_REQUEST,
CONNECT_RESPONSE and ESTABLISHED carry of the peer's); the datagram parameters of an
ESTABLISHED or MULTICAST_JOIN event of a UD id (:class:`UdParam`, with its :class:`AhAttr`); the QP
attributes INIT_QP_ATTR answers (:class:`QpAttr`).  :mod:`pyrdmacm.wire` makes them
from the bytes and encodes :class:`ConnParam`; nothing here does I/O.

All are frozen dataclasses.  :class:`ConnParam` is defined here, with its methods written
out (:mod:`pyrdmacm._record`), because the library's import makes one (the default
parameters); the others, which only QUERY, INIT_QP_ATTR and datagram ids make, are
``dataclass(frozen=True)`` in :mod:`pyrdmacm._records_later`, loaded on their first use (a
module ``__getattr__``) and still this module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Tuple

from ._record import Record, set_field

__all__ = ["DeviceRef", "AddrInfo", "RouteInfo", "PathRecord", "ServiceRecord", "ConnParam", "AhAttr", "UdParam",
           "QpAttr", "MTU_BYTES", "mtu_bytes"]


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class ConnParam(Record):
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

    def __init__(self, qp_num: Optional[int] = None, private_data: bytes = b"", responder_resources: int = 0,
                 initiator_depth: int = 0, flow_control: int = 0, retry_count: int = 7, rnr_retry_count: int = 7,
                 srq: int = 0, qkey: int = 0, ece: Tuple[int, int] = (0, 0)) -> None:
        set_field(self, "qp_num", qp_num)
        set_field(self, "private_data", private_data)
        set_field(self, "responder_resources", responder_resources)
        set_field(self, "initiator_depth", initiator_depth)
        set_field(self, "flow_control", flow_control)
        set_field(self, "retry_count", retry_count)
        set_field(self, "rnr_retry_count", rnr_retry_count)
        set_field(self, "srq", srq)
        set_field(self, "qkey", qkey)
        set_field(self, "ece", ece)

    def _values(self) -> Tuple[Any, ...]:
        return (self.qp_num, self.private_data, self.responder_resources, self.initiator_depth, self.flow_control,
                self.retry_count, self.rnr_retry_count, self.srq, self.qkey, self.ece)

    def __repr__(self) -> str:
        return ("%s(qp_num=%r, private_data=%r, responder_resources=%r, initiator_depth=%r, flow_control=%r, "
                "retry_count=%r, rnr_retry_count=%r, srq=%r, qkey=%r, ece=%r)"
                % ((self.__class__.__qualname__,) + self._values()))


#: the names of :mod:`pyrdmacm._records_later`: loaded on first use
_LATER = frozenset(("DeviceRef", "AddrInfo", "RouteInfo", "PathRecord", "ServiceRecord", "AhAttr", "UdParam", "QpAttr",
                    "MTU_BYTES", "mtu_bytes", "_mask_fields"))

if TYPE_CHECKING:  # the names as this module's own (explicit re-exports)
    from ._records_later import MTU_BYTES as MTU_BYTES
    from ._records_later import AddrInfo as AddrInfo
    from ._records_later import AhAttr as AhAttr
    from ._records_later import DeviceRef as DeviceRef
    from ._records_later import PathRecord as PathRecord
    from ._records_later import QpAttr as QpAttr
    from ._records_later import RouteInfo as RouteInfo
    from ._records_later import ServiceRecord as ServiceRecord
    from ._records_later import UdParam as UdParam
    from ._records_later import _mask_fields as _mask_fields
    from ._records_later import mtu_bytes as mtu_bytes


def __getattr__(name: str) -> Any:
    """A record of :mod:`pyrdmacm._records_later`, on its first use."""
    if name not in _LATER:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    from . import _records_later

    value = globals()[name] = getattr(_records_later, name)  # once: the next use is a plain attribute
    return value
