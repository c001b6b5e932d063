"""pyrdmacm: the RDMA connection manager over the kernel's ucma ABI, in pure Python.

The public API: :class:`EventChannel`, :class:`CmId` (address and route resolution,
connect / establish / listen / accept / reject / notify / disconnect, UD, multicast
(:class:`Membership`), options, INIT_QP_ATTR, migrate), the records of
:mod:`pyrdmacm.records` (:class:`ConnParam`, :class:`UdParam`, :class:`QpAttr` ...), the
enums of :mod:`pyrdmacm.abi` (:class:`CmEventType`, :class:`PortSpace`, :class:`QpType`,
:class:`RejectReason`, :class:`SidrStatus`, :class:`QpState`, :class:`OptionId` ...),
:func:`parse_address` / :class:`Address`, and the exceptions of :mod:`pyrdmacm.errors`.
``pyrdmacm.aio`` adds asyncio; ``pyrdmacm.precheck`` (which loads pyroute2) predicts
where a resolution lands.
"""

from .abi import (
    CmEventType,
    NotifyEvent,
    OptionIb,
    OptionId,
    PortSpace,
    QpAttrMask,
    QpState,
    QpType,
    RejectReason,
    SidrStatus,
)
from .addr import Address, parse_address
from .channel import EventChannel, UnackedEventsWarning
from .cmid import CmId, Membership, SourceIgnoredWarning, allocate_qp_num
from .errors import (
    DecodeError,
    DeviceNodeError,
    EventError,
    KernelError,
    PrecheckError,
    RdmaCmError,
    StateError,
    UsageError,
)
from .events import Event
from .records import AddrInfo, AhAttr, ConnParam, DeviceRef, PathRecord, QpAttr, ServiceRecord, UdParam
from .state import Call, Kind, State

__version__ = "0.1.0"

__all__ = [
    "Address",
    "AddrInfo",
    "AhAttr",
    "ConnParam",
    "Membership",
    "NotifyEvent",
    "OptionIb",
    "OptionId",
    "QpAttr",
    "QpAttrMask",
    "QpState",
    "RejectReason",
    "ServiceRecord",
    "SidrStatus",
    "UdParam",
    "allocate_qp_num",
    "Call",
    "DeviceRef",
    "Kind",
    "CmEventType",
    "CmId",
    "DecodeError",
    "DeviceNodeError",
    "Event",
    "EventChannel",
    "EventError",
    "KernelError",
    "PathRecord",
    "PortSpace",
    "PrecheckError",
    "QpType",
    "RdmaCmError",
    "SourceIgnoredWarning",
    "State",
    "StateError",
    "UnackedEventsWarning",
    "UsageError",
    "parse_address",
]
