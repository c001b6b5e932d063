"""CM events: what GET_EVENT returns, as frozen objects.

Theory of operation
-------------------
``rdma_ucm_event_resp`` carries the id's ``uid`` (ours), the kernel's handle,
the event type, a status and a 304-byte parameter union.  :func:`decode_event_head`
reads its head, from which the channel makes an :class:`Event` (a named tuple: immutable, cheap to
make); the union is kept as bytes and decoded on first use by
:attr:`Event.param`, because which arm is meaningful depends on the id: UD
ids (port spaces UDP and IPOIB, or PS_IB with a UD QP) get ``ud``, others
``conn``, USER/INTERNAL events (6.17+) ``arg32``.

``status`` is ``__u32`` on the wire but holds a negative errno for failures
the kernel made (``ADDR_ERROR`` -110 = ETIMEDOUT) or, for ``REJECTED``, the
IB CM reject reason: it is decoded as a signed 32-bit number.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Tuple, Union

from . import abi
from ._codec import CODECS
from .errors import errno_name
from .state import FAILURE_EVENTS

if TYPE_CHECKING:  # pragma: no cover
    from .cmid import CmId

__all__ = ["Event", "ConnParam", "UdParam", "decode_event_head", "EVENT_RESP_SIZE"]

_EVENT = CODECS["rdma_ucm_event_resp"]
EVENT_RESP_SIZE = _EVENT.size
_CONN = CODECS["rdma_ucm_conn_param"]
_UD = CODECS["rdma_ucm_ud_param"]
_ARG32 = struct.Struct("<II")

_FAILURES = FAILURE_EVENTS


@dataclass(frozen=True)
class ConnParam:
    """The ``conn`` arm: connection parameters and private data of the peer."""

    qp_num: int
    qkey: int
    private_data: bytes
    srq: int
    responder_resources: int
    initiator_depth: int
    flow_control: int
    retry_count: int
    rnr_retry_count: int
    valid: int


@dataclass(frozen=True)
class UdParam:
    """The ``ud`` arm: the remote QP and the address handle to reach it."""

    qp_num: int
    qkey: int
    dgid: ipaddress.IPv6Address
    dlid: int
    sl: int
    port_num: int
    is_global: int
    private_data: bytes


class Event(NamedTuple):
    """One CM event (immutable).  ``id`` is the :class:`~pyrdmacm.CmId` it belongs to.

    For ``CONNECT_REQUEST``, ``id`` is the *new* id the kernel made for the
    incoming connection and ``listen_id`` the listener.
    """

    event: Union[abi.CmEventType, int]
    status: int
    id: "CmId"
    handle: int
    raw_param: bytes
    ece: Tuple[int, int]
    listen_id: "Optional[CmId]" = None

    @property
    def ok(self) -> bool:
        """False for the failure events (ADDR_ERROR, ROUTE_ERROR, REJECTED, ...)."""
        return self.event not in _FAILURES

    @property
    def status_name(self) -> str:
        """``'ETIMEDOUT'`` for -110; ``''`` for 0; the reject reason's name for REJECTED."""
        if not self.status:
            return ""
        if self.event == abi.CmEventType.REJECTED and self.status > 0:
            return abi.RejectReason.name_of(self.status)
        return errno_name(self.status)

    @property
    def param(self) -> Union[ConnParam, UdParam, Tuple[int, int], None]:
        """The parameter arm that applies to this id and event (decoded now)."""
        ev = self.event
        if ev in (abi.CmEventType.USER, abi.CmEventType.INTERNAL):
            return _ARG32.unpack_from(self.raw_param)
        qp_type = getattr(self.id, "qp_type", abi.QpType.RC)
        if qp_type == abi.QpType.UD:
            return decode_ud(self.raw_param)
        return decode_conn(self.raw_param)

    @property
    def private_data(self) -> bytes:
        p = self.param
        return p.private_data if isinstance(p, (ConnParam, UdParam)) else b""

    def ack(self) -> None:
        """Acknowledge the event (optional: pyrdmacm never blocks on unacked events)."""
        cm_id = self[2]
        try:
            left = cm_id._unacked  # CmId._ack, inlined: a call less per event
        except AttributeError:  # no CmId (an event made by hand): another kind of id may still count
            ack = getattr(cm_id, "_ack", None)
            if ack is not None:
                ack(self)
            return
        if left <= 0:
            cm_id._ack(self)  # raises, saying why
        cm_id._unacked = left - 1

    def __enter__(self) -> "Event":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.ack()

    def __repr__(self) -> str:
        s = "Event(%s" % (self.event,)
        if self.status:
            s += ", status=%d %s" % (self.status, self.status_name)
        return s + ", id=%r)" % (self.id,)


def decode_conn(raw: bytes) -> ConnParam:
    v = _CONN.unpack_from(raw)
    # names: qp_num qkey private_data private_data_len srq responder_resources ...
    n = min(v[3], abi.RDMA_MAX_PRIVATE_DATA)
    return ConnParam(v[0], v[1], v[2][:n], v[4], v[5], v[6], v[7], v[8], v[9], v[10])


_UD_IDX = {name: i for i, name in enumerate(_UD.names)}


def decode_ud(raw: bytes) -> UdParam:
    v = _UD.unpack_from(raw)
    i = _UD_IDX
    n = min(v[i["private_data_len"]], abi.RDMA_MAX_PRIVATE_DATA)
    return UdParam(
        v[i["qp_num"]],
        v[i["qkey"]],
        ipaddress.IPv6Address(v[i["ah_attr.grh.dgid"]]),
        v[i["ah_attr.dlid"]],
        v[i["ah_attr.sl"]],
        v[i["ah_attr.port_num"]],
        v[i["ah_attr.is_global"]],
        v[i["private_data"]][:n],
    )


_TYPES = {int(t): t for t in abi.CmEventType}


def _fast_event_struct() -> struct.Struct:
    """The reply as the channel's fast path reads it: the codec's layout with ``status``
    signed (so no Python arithmetic per event) and ``reserved`` skipped.  Unpacks to
    ``(uid, handle, event, status, param, ece.vendor_id, ece.attr_mod)``."""
    tokens = re.findall(r"\d*[A-Za-z]", _EVENT.format[1:])
    names = _EVENT.names
    assert len(tokens) == len(names) and not _EVENT._be
    status, reserved = names.index("status"), names.index("reserved")
    assert tokens[status] == tokens[reserved] == "L"
    tokens[status], tokens[reserved] = "l", "4x"
    return struct.Struct(_EVENT.format[0] + "".join(tokens))


_UNPACK_EVENT = _fast_event_struct().unpack_from


def decode_event_head(buf: Any) -> Tuple[int, int, Union[abi.CmEventType, int], int, bytes, Tuple[int, int]]:
    """``(uid, handle, event, status, raw_param, ece)`` from an event reply buffer."""
    uid, handle, ev, status, raw, _reserved, vid, mod = _EVENT.unpack_from(buf)
    if status & 0x80000000:
        status -= 0x100000000
    return uid, handle, _TYPES.get(ev, ev), status, raw, (vid, mod)
