"""What the kernel's replies and events say, and what a connection sends, as frozen objects.

Device, address and path (:meth:`~pyrdmacm.CmId.query_addr`,
:meth:`~pyrdmacm.CmId.query_path`); the connection parameters (:class:`ConnParam`:
what CONNECT and ACCEPT send, and what CONNECT_REQUEST, CONNECT_RESPONSE and
ESTABLISHED carry of the peer's); the datagram parameters of an ESTABLISHED or
MULTICAST_JOIN event of a UD id (:class:`UdParam`, with its :class:`AhAttr`); the QP
attributes INIT_QP_ATTR answers (:class:`QpAttr`).  :mod:`pyrdmacm.wire` makes them
from the bytes and encodes :class:`ConnParam`; nothing here does I/O.

All are ``dataclass(frozen=True)``.  :class:`ConnParam` is defined here, because the
library's import makes one (the default parameters); the others, which only QUERY,
INIT_QP_ATTR and datagram ids make, load on their first use from
:mod:`pyrdmacm._records_later` (a module ``__getattr__``), still this module's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Tuple

__all__ = ["DeviceRef", "AddrInfo", "PathRecord", "ServiceRecord", "ConnParam", "AhAttr", "UdParam", "QpAttr", "MTU_BYTES",
           "mtu_bytes"]


#: how ConnParam's own ``__init__`` sets its fields (``dataclass(frozen=True)`` does the same).
#: ConnParam is a frozen dataclass whose ``__init__``, ``__eq__``, ``__hash__`` and ``__repr__`` are
#: written out here, as ``dataclass(frozen=True)`` would make them: it compiles each one (~0.1 ms
#: apiece on Python 3.11), and every import of the library makes this class (and one ConnParam).
#: tests/test_records.py holds it to what ``dataclass(frozen=True)`` makes.
_SET = object.__setattr__


@dataclass(frozen=True, init=False, repr=False, eq=False)  # see _SET
class ConnParam:
    """Connection parameters (``struct rdma_conn_param``).

    Given to :meth:`~pyrdmacm.CmId.connect` and :meth:`~pyrdmacm.CmId.accept` (a
    ``ConnParam``, or its fields as keyword arguments), and decoded from the peer's REQ
    or REP on CONNECT_REQUEST, CONNECT_RESPONSE and ESTABLISHED (``event.param``).

    ``qp_num`` is the QP the connection is for.  pyrdmacm has no QP: the kernel carries
    the number to the peer as given (24 bits), and the peer's data goes there.  ``None``
    (the default) takes a number from :func:`pyrdmacm.allocate_qp_num`, unique in the
    process; give your own QP's number when you have one.  ``retry_count`` is the one the
    peer's QP uses for its sends to us (Soft-RoCE retries for ever at 7).  ``ece`` is the
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
        _SET(self, "qp_num", qp_num)
        _SET(self, "private_data", private_data)
        _SET(self, "responder_resources", responder_resources)
        _SET(self, "initiator_depth", initiator_depth)
        _SET(self, "flow_control", flow_control)
        _SET(self, "retry_count", retry_count)
        _SET(self, "rnr_retry_count", rnr_retry_count)
        _SET(self, "srq", srq)
        _SET(self, "qkey", qkey)
        _SET(self, "ece", ece)

    def _values(self) -> Tuple[Any, ...]:
        return (self.qp_num, self.private_data, self.responder_resources, self.initiator_depth, self.flow_control,
                self.retry_count, self.rnr_retry_count, self.srq, self.qkey, self.ece)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return ("%s(qp_num=%r, private_data=%r, responder_resources=%r, initiator_depth=%r, flow_control=%r, "
                "retry_count=%r, rnr_retry_count=%r, srq=%r, qkey=%r, ece=%r)"
                % ((self.__class__.__qualname__,) + self._values()))


#: the names of :mod:`pyrdmacm._records_later`: loaded on first use
_LATER = frozenset(("DeviceRef", "AddrInfo", "PathRecord", "ServiceRecord", "AhAttr", "UdParam", "QpAttr", "MTU_BYTES",
                    "mtu_bytes", "_mask_fields"))

if TYPE_CHECKING:  # the names as this module's own (explicit re-exports)
    from ._records_later import MTU_BYTES as MTU_BYTES
    from ._records_later import AddrInfo as AddrInfo
    from ._records_later import AhAttr as AhAttr
    from ._records_later import DeviceRef as DeviceRef
    from ._records_later import PathRecord as PathRecord
    from ._records_later import QpAttr as QpAttr
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
