"""pyrdmacm: RDMA CM address resolution over the kernel's ucma ABI, in pure Python.

The public API: :class:`EventChannel`, :class:`CmId`, the enums of
:mod:`pyrdmacm.abi` (:class:`CmEventType`, :class:`PortSpace`, :class:`QpType`),
:func:`parse_address` / :class:`Address`, and the exceptions of
:mod:`pyrdmacm.errors`.  ``pyrdmacm.aio`` adds asyncio; ``pyrdmacm.precheck``
(which loads pyroute2) predicts where a resolution lands.
"""

from .abi import CmEventType, PortSpace, QpType
from .addr import Address, parse_address
from .channel import EventChannel, UnackedEventsWarning
from .cmid import CmId, SourceIgnoredWarning
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
from .records import AddrInfo, DeviceRef, PathRecord
from .state import Call, Kind, State

__version__ = "0.1.0"

__all__ = [
    "Address",
    "AddrInfo",
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
