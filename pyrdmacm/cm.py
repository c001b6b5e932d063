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
