"""The names ``pyrdmacm.cm`` had before the core was split by what each part owns.

:class:`~pyrdmacm.channel.EventChannel` lives in :mod:`pyrdmacm.channel`,
:class:`~pyrdmacm.cmid.CmId` in :mod:`pyrdmacm.cmid`, the states and the
transition table in :mod:`pyrdmacm.state`, the query results in
:mod:`pyrdmacm.records`.  Import them from :mod:`pyrdmacm` itself.
"""

from .channel import EventChannel, UnackedEventsWarning
from .cmid import CmId, SourceIgnoredWarning
from .records import AddrInfo, DeviceRef, PathRecord
from .state import TRANSITIONS, State

__all__ = [
    "EventChannel",
    "CmId",
    "State",
    "TRANSITIONS",
    "AddrInfo",
    "DeviceRef",
    "PathRecord",
    "SourceIgnoredWarning",
    "UnackedEventsWarning",
]

#: the command headers of the hot paths, for scripts written against 0.1
from ._hot import H_CREATE, H_DESTROY, H_RESOLVE_ADDR, H_RESOLVE_ROUTE  # noqa: E402
from .wire import COMMAND as _COMMAND  # noqa: E402

H_GET_EVENT = _COMMAND["GET_EVENT"].header
