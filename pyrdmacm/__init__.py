"""pyrdmacm: the RDMA connection manager over the kernel's ucma ABI, in pure Python.

The public API: :class:`EventChannel`, :class:`CmId` (address and route resolution,
connect / establish / listen / accept / reject / notify / disconnect, UD, multicast
(:class:`Membership`), options, INIT_QP_ATTR, migrate), the records of
:mod:`pyrdmacm.records` (:class:`ConnParam`, :class:`UdParam`, :class:`QpAttr` ...), the
enums of :mod:`pyrdmacm.abi` (:class:`CmEventType`, :class:`PortSpace`, :class:`QpType`,
:class:`RejectReason`, :class:`SidrStatus`, :class:`QpState`, :class:`OptionId` ...),
:class:`Waiter` (a wait for the event that answers a call: ``EventChannel.expect``),
:func:`parse_address` / :class:`Address`, :func:`getaddrinfo` (librdmacm's
``rdma_getaddrinfo``: names and services to an :class:`RdmaAddrInfo`), and the exceptions of :mod:`pyrdmacm.errors`.
``pyrdmacm.aio`` adds asyncio; ``pyrdmacm.precheck`` (which loads pyroute2) predicts
where a resolution lands.

Each public name is imported from its module on first use (a module ``__getattr__``), so
that importing one part of the package -- the command line's ``route``, which needs no
channel, or the enums -- does not import all of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, List, Tuple

__version__ = "0.1.0"

#: Every public name, by the module that defines it.
_EXPORTS: Dict[str, Tuple[str, ...]] = {
    "abi": ("CmEventType", "NotifyEvent", "OptionIb", "OptionId", "PortSpace", "QpAttrMask", "QpState", "QpType",
            "RejectReason", "SidrStatus"),
    "addr": ("AF_IB", "Address", "parse_address"),
    "addrinfo": ("NameServiceError", "RaiFlag", "RdmaAddrInfo", "getaddrinfo", "getaddrinfo_all"),
    "core.event_channel": ("EventChannel", "UnackedEventsWarning"),
    "core.cmid": ("CmId", "SourceIgnoredWarning"),
    "core.membership": ("Membership",),
    "core.params": ("allocate_qp_num",),
    "core.router": ("Waiter",),
    "errors": ("DecodeError", "DeviceNodeError", "EventError", "KernelError", "PrecheckError", "RdmaCmError",
               "StateError", "UsageError"),
    "core.events": ("Event", "EventBatch"),
    "devices": ("Device", "list_devices"),
    "records": ("AddrInfo", "AhAttr", "ConnParam", "DeviceRef", "PathRecord", "QpAttr", "ServiceRecord", "UdParam"),
    "state": ("Call", "Kind", "State"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:  # what type checkers see ("X as X": an explicit re-export, which mypy --strict
    # needs); tests/test_layouts.py checks it is _EXPORTS
    from .abi import (
        CmEventType as CmEventType,
        NotifyEvent as NotifyEvent,
        OptionIb as OptionIb,
        OptionId as OptionId,
        PortSpace as PortSpace,
        QpAttrMask as QpAttrMask,
        QpState as QpState,
        QpType as QpType,
        RejectReason as RejectReason,
        SidrStatus as SidrStatus,
    )
    from .addr import AF_IB as AF_IB, Address as Address, parse_address as parse_address
    from .addrinfo import (
        NameServiceError as NameServiceError,
        RaiFlag as RaiFlag,
        RdmaAddrInfo as RdmaAddrInfo,
        getaddrinfo as getaddrinfo,
        getaddrinfo_all as getaddrinfo_all,
    )
    from .core.event_channel import EventChannel as EventChannel, UnackedEventsWarning as UnackedEventsWarning
    from .core.params import allocate_qp_num as allocate_qp_num
    from .core.router import Waiter as Waiter
    from .core.cmid import CmId as CmId, SourceIgnoredWarning as SourceIgnoredWarning
    from .core.membership import Membership as Membership
    from .errors import (
        DecodeError as DecodeError,
        DeviceNodeError as DeviceNodeError,
        EventError as EventError,
        KernelError as KernelError,
        PrecheckError as PrecheckError,
        RdmaCmError as RdmaCmError,
        StateError as StateError,
        UsageError as UsageError,
    )
    from .core.events import Event as Event, EventBatch as EventBatch
    from .devices import Device as Device, list_devices as list_devices
    from .records import (
        AddrInfo as AddrInfo,
        AhAttr as AhAttr,
        ConnParam as ConnParam,
        DeviceRef as DeviceRef,
        PathRecord as PathRecord,
        QpAttr as QpAttr,
        ServiceRecord as ServiceRecord,
        UdParam as UdParam,
    )
    from .state import Call as Call, Kind as Kind, State as State


def __getattr__(name: str) -> Any:
    """A public name from its module, or a submodule (``pyrdmacm.state``), on first use."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    module = _MODULE_OF.get(name)
    if module is not None:
        value = getattr(importlib.import_module("." + module, __name__), name)
        globals()[name] = value  # once: the next use is a plain attribute
        return value
    try:
        return importlib.import_module("." + name, __name__)
    except ModuleNotFoundError as e:
        if e.name != "%s.%s" % (__name__, name):
            raise  # the submodule exists and needs something missing
        raise AttributeError("module %r has no attribute %r" % (__name__, name)) from None


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(_MODULE_OF))
