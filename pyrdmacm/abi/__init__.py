"""The ucma ABI: every struct and constant of ``<rdma/rdma_user_cm.h>``, declared once.

Theory of operation
-------------------
The kernel's rdma_cm character device takes one ``write()`` per command: an
8-byte ``rdma_ucm_cmd_hdr`` (``cmd``, ``in``, ``out``) followed by the
command's struct.  ``in`` is the size of that struct; ``out`` is the size of
the reply buffer, whose *address* travels inside the struct as a ``__u64
response`` field -- the kernel ``copy_to_user()``\\ s the reply there.

This module holds the constants and enums (seven of them, which nothing needs at
import, load from :mod:`pyrdmacm.abi.ib` on first use).  The layouts are construct
``Struct`` declarations under the kernel's own names in :mod:`pyrdmacm.abi.structs` -- the
single source of truth -- which stands above this module (it takes these constants), so
that importing the constants and enums does not import construct.

The hot path does not run construct (it costs 10-60 us a struct):
``tools/gen_layouts`` derives a flat ``struct`` format from each declaration into
:mod:`pyrdmacm.abi.layouts`, :mod:`pyrdmacm.abi.codec` makes its codecs from that, and the
tests prove the generated data current and the codecs and construct in agreement,
byte for byte.

Nothing outside the ABI layer (this module, :mod:`pyrdmacm.abi.structs`,
``tools/derive_layouts.py``, :mod:`pyrdmacm.abi.codec`, :mod:`pyrdmacm.decode`) sees a
construct container.

Fields that arrive in network byte order despite a plain integer type:
``node_guid`` in ``rdma_ucm_query_addr_resp`` and ``rdma_ucm_query_route_resp``
(the kernel copies the device's ``node_guid``, which it keeps as ``__be64``,
into a field declared ``__aligned_u64``), and ``pkey`` in
``rdma_ucm_query_addr_resp`` (``cpu_to_be16`` into a ``__u16``).  They are declared ``Int64ub`` there,
so they decode to the GUID as humans write it.  See ``_structs.NETWORK_ORDER_DESPITE_TYPE``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .named import NamedIntEnum

# --------------------------------------------------------------------------- constants

RDMA_USER_CM_ABI_VERSION = 4
#: Oldest ABI version librdmacm accepts (and so do we).
RDMA_USER_CM_MIN_ABI_VERSION = 3
RDMA_MAX_PRIVATE_DATA = 256
RDMA_USER_CM_IB_SERVICE_NAME_SIZE = 64

AF_INET = 2
AF_INET6 = 10
AF_IB = 27

#: IB service id layout for IP port spaces (librdmacm's rdma_cma.h, IBTA Annex A11)
RDMA_IB_IP_PS_MASK = 0xFFFFFFFFFFFF0000
RDMA_IB_IP_PORT_MASK = 0x000000000000FFFF
RDMA_IB_IP_PS_TCP = 0x0000000001060000
RDMA_IB_IP_PS_UDP = 0x0000000001110000
RDMA_IB_PS_IB = 0x00000000013F0000

# --------------------------------------------------------------------------- private-data limits
#
# The one statement of how much private data each IB CM message carries.  These are sizes of
# IBTA wire messages, not of any struct of the uapi headers, so they are written here as
# numbers (and only here).  The IB CM's own sizes (``enum ib_cm_data_size``) are given for
# the five messages whose data the ucma ABI carries; RTU, DREQ, DREP and MRA have data on
# the wire too, but no ucma command or event exposes it.  The rdma_cm puts its own header
# (``struct cma_hdr``: version, IP version, port, source and destination address) at the
# front of the REQ and SIDR REQ of AF_INET / AF_INET6 ids (``cma_user_data_offset``; AF_IB
# ids have none), so those ids may give 36 bytes less.  A receiver always gets the message's
# whole data area (the sender's length is not on the wire).

#: The private data of each IB CM message, in bytes, as the IB CM carries it.
CM_PRIVATE_DATA = {"REQ": 92, "REP": 196, "REJ": 148, "SIDR_REQ": 216, "SIDR_REP": 136}
#: The rdma_cm header that the REQ and SIDR REQ of an IP-addressed id carry first.
CMA_HDR_SIZE = 36


def cm_private_data_limit(message: str, family: int = AF_INET) -> int:
    """The most private data a user may give with ``message`` ("REQ", "REP", "REJ",
    "SIDR_REQ", "SIDR_REP") for an id of address ``family`` (``AF_INET`` by default) -- and
    how many bytes the receiving side's event carries: REQ 56 / SIDR REQ 180 for IP ids,
    92 / 216 for AF_IB ids; REP 196, REJ 148, SIDR REP 136 for all."""
    size = CM_PRIVATE_DATA[message]
    if message in ("REQ", "SIDR_REQ") and family != AF_IB:
        size -= CMA_HDR_SIZE
    return size


class UserCmCmd(NamedIntEnum):
    """``RDMA_USER_CM_CMD_*``: the command numbers of ``rdma_ucm_cmd_hdr.cmd``."""

    CREATE_ID = 0
    DESTROY_ID = 1
    BIND_IP = 2
    RESOLVE_IP = 3
    RESOLVE_ROUTE = 4
    QUERY_ROUTE = 5
    CONNECT = 6
    LISTEN = 7
    ACCEPT = 8
    REJECT = 9
    DISCONNECT = 10
    INIT_QP_ATTR = 11
    GET_EVENT = 12
    GET_OPTION = 13
    SET_OPTION = 14
    NOTIFY = 15
    JOIN_IP_MCAST = 16
    LEAVE_MCAST = 17
    MIGRATE_ID = 18
    QUERY = 19
    BIND = 20
    RESOLVE_ADDR = 21
    JOIN_MCAST = 22
    RESOLVE_IB_SERVICE = 23
    WRITE_CM_EVENT = 24


class PortSpace(NamedIntEnum):
    """``enum rdma_ucm_port_space`` (``RDMA_PS_*``)."""

    IPOIB = 0x0002
    IB = 0x013F
    TCP = 0x0106
    UDP = 0x0111


class QpType(NamedIntEnum):
    """``enum ib_uverbs_qp_type`` (``IB_UVERBS_QPT_*``), the ``qp_type`` of CREATE_ID."""

    RC = 2
    UC = 3
    UD = 4
    RAW_PACKET = 8
    XRC_INI = 9
    XRC_TGT = 10
    DRIVER = 0xFF


class QueryOption(NamedIntEnum):
    """``RDMA_USER_CM_QUERY_*``: the ``option`` of the QUERY command."""

    ADDR = 0
    PATH = 1
    GID = 2
    IB_SERVICE = 3


class CmEventType(NamedIntEnum):
    """``enum rdma_cm_event_type`` (kernel ``include/rdma/rdma_cm.h``, same numbers in librdmacm)."""

    ADDR_RESOLVED = 0
    ADDR_ERROR = 1
    ROUTE_RESOLVED = 2
    ROUTE_ERROR = 3
    CONNECT_REQUEST = 4
    CONNECT_RESPONSE = 5
    CONNECT_ERROR = 6
    UNREACHABLE = 7
    REJECTED = 8
    ESTABLISHED = 9
    DISCONNECTED = 10
    DEVICE_REMOVAL = 11
    MULTICAST_JOIN = 12
    MULTICAST_ERROR = 13
    ADDR_CHANGE = 14
    TIMEWAIT_EXIT = 15
    ADDRINFO_RESOLVED = 16
    ADDRINFO_ERROR = 17
    USER = 18
    INTERNAL = 19

    @classmethod
    def _missing_(cls, value: object) -> "CmEventType | None":
        """A number the kernel may send that this table does not know (a newer kernel's
        event): a pseudo-member named ``EVENT_<n>``, so that every event's ``event`` is a
        CmEventType (``.name`` and ``.value`` hold), as IntFlag makes its combinations.  It
        is not listed by iteration; the same number gives the same object."""
        if value.__class__ is not int or not 0 <= value <= 0xFFFFFFFF:
            return None
        member = int.__new__(cls, value)
        member._name_ = "EVENT_%d" % value
        member._value_ = value
        return cls._value2member_map_.setdefault(value, member)  # type: ignore[return-value]


class RdmaCmState(NamedIntEnum):
    """``enum rdma_cm_state`` (kernel ``include/rdma/rdma_cm.h``; ``drivers/infiniband/core/cma_priv.h``
    in older trees): the state the kernel keeps for each id, as RDMA netlink reports it
    (``RDMA_NLDEV_ATTR_RES_STATE`` of ``rdma resource show cm_id``).  The two ADDRINFO states
    came with RESOLVE_IB_SERVICE (6.17).  What each command takes in which state:
    :mod:`pyrdmacm.kernel_rules`."""

    IDLE = 0
    ADDR_QUERY = 1
    ADDR_RESOLVED = 2
    ROUTE_QUERY = 3
    ROUTE_RESOLVED = 4
    CONNECT = 5
    DISCONNECT = 6
    ADDR_BOUND = 7
    LISTEN = 8
    DEVICE_REMOVAL = 9
    DESTROYING = 10
    ADDRINFO_QUERY = 11
    ADDRINFO_RESOLVED = 12


class OptionLevel(NamedIntEnum):
    """``RDMA_OPTION_ID`` / ``RDMA_OPTION_IB``: the ``level`` of SET_OPTION."""

    ID = 0
    IB = 1


class OptionId(NamedIntEnum):
    """``RDMA_OPTION_ID_*``: option names at level ``RDMA_OPTION_ID``."""

    TOS = 0
    REUSEADDR = 1
    AFONLY = 2
    ACK_TIMEOUT = 3


class OptionIb(NamedIntEnum):
    """``RDMA_OPTION_IB_*``: option names at level ``RDMA_OPTION_IB``."""

    PATH = 1


class NotifyEvent(NamedIntEnum):
    """The ``event`` of NOTIFY (``enum ib_event_type`` members ``rdma_notify`` takes)."""

    COMM_EST = 4
    PATH_MIG = 6


#: the enums (and REJECT_REASONS) of :mod:`pyrdmacm.abi.ib`: loaded on first use
_LATER = frozenset(("McJoinFlag", "IbServiceFlag", "IbPathFlag", "RejectReason", "REJECT_REASONS", "SidrStatus",
                    "QpState", "QpAttrMask"))

if TYPE_CHECKING:  # the names as this module's own (explicit re-exports)
    from .ib import REJECT_REASONS as REJECT_REASONS
    from .ib import IbPathFlag as IbPathFlag
    from .ib import IbServiceFlag as IbServiceFlag
    from .ib import McJoinFlag as McJoinFlag
    from .ib import QpAttrMask as QpAttrMask
    from .ib import QpState as QpState
    from .ib import RejectReason as RejectReason
    from .ib import SidrStatus as SidrStatus


# --------------------------------------------------------------------------- the enums loaded later


def __getattr__(name: str) -> Any:
    """The enums nothing needs at import (:data:`_LATER`), from :mod:`pyrdmacm.abi.ib`
    on first use.  The layouts are :mod:`pyrdmacm.abi.structs`' (it imports this module)."""
    if name in _LATER:
        from . import ib as _abi_later

        value = globals()[name] = getattr(_abi_later, name)  # once: the next use is a plain attribute
        return value
    raise AttributeError("module %r has no attribute %r" % (__name__, name))
