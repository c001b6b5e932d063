"""pyrdmacm: the RDMA connection manager over the kernel's ucma ABI, in pure Python.

The public API: :class:`EventChannel`, :class:`CmId` (address and route resolution,
connect / establish / listen / accept / reject / notify / disconnect, UD, multicast
(:class:`Membership`), options, INIT_QP_ATTR, migrate), the records of
:mod:`pyrdmacm.records` (:class:`ConnParam`, :class:`UdParam`, :class:`QpAttr` ...), the
enums of :mod:`pyrdmacm.abi` (:class:`CmEventType`, :class:`PortSpace`, :class:`QpType`,
:class:`RejectReason`, :class:`SidrStatus`, :class:`QpState`, :class:`OptionId` ...),
:class:`Waiter` (a wait for the event that answers a call: ``EventChannel.expect``),
:func:`parse_address` / :class:`Address`, and the exceptions of :mod:`pyrdmacm.errors`.
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
    "addr": ("Address", "parse_address"),
    "channel": ("EventChannel", "UnackedEventsWarning"),
    "cmid": ("CmId", "SourceIgnoredWarning"),
    "membership": ("Membership",),
    "_params": ("allocate_qp_num",),
    "_router": ("Waiter",),
    "errors": ("DecodeError", "DeviceNodeError", "EventError", "KernelError", "PrecheckError", "RdmaCmError",
               "StateError", "UsageError"),
    "events": ("Event",),
    "records": ("AddrInfo", "AhAttr", "ConnParam", "DeviceRef", "PathRecord", "QpAttr", "ServiceRecord", "UdParam"),
    "state": ("Call", "Kind", "State"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

__all__ = sorted(_MODULE_OF)

if TYPE_CHECKING:  # what type checkers see; tests/test_layouts.py checks it is _EXPORTS
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
    from ._params import allocate_qp_num
    from ._router import Waiter
    from .cmid import CmId, SourceIgnoredWarning
    from .membership import Membership
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
