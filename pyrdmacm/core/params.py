"""What an id's calls take, checked before any syscall: ints in range, the port space and
QP type of a new id, connection parameters and their private data (against what each IB
CM message carries), the QP-number policy, and the options' values.

Pure code, no I/O: each check raises :class:`~pyrdmacm.errors.UsageError` naming what was
wrong and what to give instead.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import struct
from typing import Any, Callable, Dict, Optional, Tuple

from .. import abi, wire
from ..abi.codec import CODECS
from ..errors import UsageError
from ..records import ConnParam
from ..state import Call

__all__ = ["check_int", "port_space", "qp_num_given", "private_data_for", "conn_param", "allocate_qp_num",
           "option", "qp_state", "reject_reason", "ib_service", "user_event"]

_PortSpace = abi.PortSpace


def check_int(name: str, value: Any, hi: int, lo: int = 0) -> int:
    """An int argument in lo..hi, or UsageError naming it."""
    if value.__class__ is not int and (not isinstance(value, int) or isinstance(value, bool)):
        raise UsageError("%s must be an int in %d..%d, got %r" % (name, lo, hi, value))
    if not lo <= value <= hi:
        raise UsageError("%s must be an int in %d..%d, got %r" % (name, lo, hi, value))
    return int(value)


def _qp_type_for(ps: abi.PortSpace, qp_type: Optional[int]) -> abi.QpType:
    if ps is abi.PortSpace.IB:
        if qp_type is None:
            return abi.QpType.RC
        if isinstance(qp_type, bool) or not isinstance(qp_type, int):
            raise UsageError("qp_type must be a QpType (RC, UC or UD), got %r" % (qp_type,))
        try:
            return abi.QpType(qp_type)
        except ValueError:
            raise UsageError("qp_type %r is no QP type: use QpType.RC, UC or UD" % (qp_type,)) from None
    if qp_type is not None:
        raise UsageError("qp_type is derived from the port space except for PortSpace.IB "
                         "(TCP: RC; UDP and IPOIB: UD): leave it out, or use PortSpace.IB")
    return abi.QpType.RC if ps is abi.PortSpace.TCP else abi.QpType.UD


def port_space(ps: Any, qp_type: Optional[int]) -> Tuple[abi.PortSpace, abi.QpType]:
    """The port space and QP type of a new id, checked (UsageError before any syscall)."""
    if ps.__class__ is not _PortSpace:
        try:
            if isinstance(ps, bool) or not isinstance(ps, int):
                raise ValueError
            ps = _PortSpace(ps)
        except ValueError:
            raise UsageError("unknown port space %r: use PortSpace.TCP, UDP, IPOIB or IB" % (ps,)) from None
    return ps, _qp_type_for(ps, qp_type)


def qp_num_given(value: Any) -> int:
    """A QP number the caller gave, checked: 24 bits, none of the reserved ones."""
    qp_num = check_int("qp_num", value, 0xFFFFFF)
    if qp_num in _RESERVED_QPN:
        raise UsageError("qp_num 0x%x is reserved (0 and 1 are the SMI and GSI QPs, 0xffffff is "
                         "multicast): give your QP's number, or None to have one allocated" % qp_num)
    return qp_num


#: connect()/accept() with no parameters but (perhaps) a QP number: these, checked once
_DEFAULT_PARAM = wire.DEFAULT_CONN_PARAM
_NOT_ONLY_QPN = object()


def private_data_for(value: Any, message: str, family: int) -> bytes:
    """Private data for ``message`` of an id of ``family``, checked against what the message
    carries (:func:`pyrdmacm.abi.cm_private_data_limit`)."""
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise UsageError("private_data must be bytes, got %s" % type(value).__name__)
    data = bytes(value)
    limit = abi.cm_private_data_limit(message, family)
    if len(data) > limit:
        raise UsageError("private_data is %d bytes; a %s of this id carries at most %d" % (len(data), message, limit))
    return data


def conn_param(param: Any, private_data: Any, fields: Dict[str, Any], message: str, family: int,
               ece_carried: bool) -> Tuple[ConnParam, int]:
    """The connection parameters of connect/accept, checked (UsageError before any syscall),
    and the QP number to send; ``message``: the IB CM message that carries them (its
    private-data limit for an id of ``family``); ``ece_carried``: the kernel carries ECE."""
    if private_data is None and param.__class__ is not ConnParam:
        # the defaults (valid for every message) with at most a QP number: none to check
        qpn = param if not fields else fields["qp_num"] if (param is None and len(fields) == 1
                                                            and "qp_num" in fields) else _NOT_ONLY_QPN
        if qpn is None:
            return _DEFAULT_PARAM, allocate_qp_num()
        if qpn.__class__ is int:
            return _DEFAULT_PARAM, qp_num_given(qpn)
    if isinstance(param, ConnParam):
        if private_data is not None or fields:
            raise UsageError("give a ConnParam or its fields as keyword arguments, not both")
        p = param
    else:
        if param is not None:
            if "qp_num" in fields:
                raise UsageError("qp_num given twice (positionally and by keyword)")
            fields["qp_num"] = param
        if private_data is not None:
            fields["private_data"] = private_data
        try:
            p = ConnParam(**fields)
        except TypeError:
            unknown = sorted(set(fields) - set(_CONN_FIELDS))
            raise UsageError("unknown connection parameter%s %s: the fields are %s" % (
                "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(_CONN_FIELDS))) from None
    data = private_data_for(p.private_data, message, family)
    qp_num = allocate_qp_num() if p.qp_num is None else qp_num_given(p.qp_num)
    check_int("responder_resources", p.responder_resources, 0xFF)
    check_int("initiator_depth", p.initiator_depth, 0xFF)
    check_int("retry_count", p.retry_count, 7)
    check_int("rnr_retry_count", p.rnr_retry_count, 7)
    check_int("flow_control", p.flow_control, 1)
    check_int("srq", p.srq, 1)
    check_int("qkey", p.qkey, 0xFFFFFFFF)
    ece = p.ece
    if not isinstance(ece, tuple) or len(ece) != 2:
        raise UsageError("ece must be a (vendor_id, attr_mod) pair of ints, got %r" % (ece,))
    check_int("ece vendor_id", ece[0], 0xFFFFFFFF)
    check_int("ece attr_mod", ece[1], 0xFFFFFFFF)
    if ece != (0, 0) and not ece_carried:
        raise UsageError("this kernel carries no ECE (Linux 5.8 and later do): it would drop the "
                         "(vendor_id, attr_mod) given; leave ece out")
    if data is not p.private_data:
        p = dataclasses.replace(p, private_data=data)
    return p, qp_num



#: QP numbers never sent: the SMI and GSI QPs, and the multicast QPN.
_RESERVED_QPN = frozenset((0, 1, 0xFFFFFF))
_QPN_LO, _QPN_SPAN = 0x100000, 0xFFFFFF - 0x100000
#: the counter's random start, from os.urandom (the random module costs a millisecond of
#: import for this one number; the modulo bias of 64 random bits is below 2**-40)
_qpn_counter = itertools.count(int.from_bytes(os.urandom(8), "little") % _QPN_SPAN).__next__


def allocate_qp_num() -> int:
    """A QP number for a connection whose caller gave none (``ConnParam.qp_num=None``).

    The number is on the wire: the peer's CM keys its connections by (remote QP number,
    remote CA GUID), live ones and those in timewait, and answers a second REQ with the
    same pair with REJECTED 10 (stale connection); the peer's QP sends its data there.  So
    the numbers come from a counter, unique in the process, starting at a random point of
    0x100000..0xfffffe (above the QP indexes Soft-RoCE hands out; on hardware a number may
    still equal a real QP's of this host, which then gets the peer's packets -- give your
    own QP's number there).  Never 0, 1 or 0xffffff.  Two processes of one host draw from
    different random points, so they rarely meet; a reused number is refused with 10."""
    return _QPN_LO + _qpn_counter() % _QPN_SPAN


def _opt_u8(name: str, hi: int) -> Callable[[Any], bytes]:
    return lambda v: struct.pack("B", check_int(name, v, hi))


def _opt_bool(name: str) -> Callable[[Any], bytes]:
    def encode(v: Any) -> bytes:
        if not isinstance(v, (bool, int)) or v not in (0, 1):
            raise UsageError("%s must be a bool, got %r" % (name, v))
        return struct.pack("<i", int(v))
    return encode


def _opt_paths(v: Any) -> bytes:
    from ..records import PathRecord  # loaded on first use (pyrdmacm.records.replies)

    if isinstance(v, (bytes, bytearray, memoryview)):
        data = bytes(v)
        size = CODECS["ib_path_rec_data"].size
        if not data or len(data) % size:
            raise UsageError("IB_PATH takes whole ib_path_rec_data entries (%d bytes each), got %d bytes"
                             % (size, len(data)))
        return data
    if isinstance(v, PathRecord):
        v = [v]
    try:
        records = list(v)
    except TypeError:
        raise UsageError("IB_PATH takes PathRecords (query_path() gives them) or ib_path_rec_data bytes, "
                         "got %r" % (v,)) from None
    if not records or not all(isinstance(r, PathRecord) for r in records):
        raise UsageError("IB_PATH takes one or more PathRecords, got %r" % (v,))
    return b"".join(wire.encode_path_record(r) for r in records)


#: option -> (the state machine's call, the level, the value's encoder)
#: (keyed by the enum and the member: OptionIb.PATH and OptionId.REUSEADDR are both 1)
_OPTIONS: Dict[Tuple[type, Any], Tuple[Call, abi.OptionLevel, Callable[[Any], bytes]]] = {
    (abi.OptionId, abi.OptionId.TOS): (Call.SET_TOS, abi.OptionLevel.ID, _opt_u8("TOS", 0xFF)),
    (abi.OptionId, abi.OptionId.REUSEADDR): (Call.SET_REUSEADDR, abi.OptionLevel.ID, _opt_bool("REUSEADDR")),
    (abi.OptionId, abi.OptionId.AFONLY): (Call.SET_AFONLY, abi.OptionLevel.ID, _opt_bool("AFONLY")),
    (abi.OptionId, abi.OptionId.ACK_TIMEOUT): (Call.SET_ACK_TIMEOUT, abi.OptionLevel.ID, _opt_u8("ACK_TIMEOUT", 31)),
    (abi.OptionIb, abi.OptionIb.PATH): (Call.SET_IB_PATH, abi.OptionLevel.IB, _opt_paths),
}

_CONN_FIELDS = tuple(f.name for f in dataclasses.fields(ConnParam))


def option(opt: Any, value: Any) -> Tuple[Call, abi.OptionLevel, bytes]:
    """set_option's arguments: the state machine's call (REUSEADDR off is its own), the
    option's level, and the value encoded."""
    spec = _OPTIONS.get((type(opt), opt)) if isinstance(opt, (abi.OptionId, abi.OptionIb)) else None
    if spec is None:
        raise UsageError("unknown option %r: use OptionId.TOS, REUSEADDR, AFONLY, ACK_TIMEOUT or OptionIb.PATH"
                         % (opt,))
    call, level, encode = spec
    payload = encode(value)
    if call is Call.SET_REUSEADDR and not value:
        call = Call.CLEAR_REUSEADDR
    return call, level, payload


def qp_state(value: Any) -> abi.QpState:
    """init_qp_attr's QP state."""
    try:
        return abi.QpState(check_int("qp_state", value, 0xFFFFFFFF))
    except ValueError:
        raise UsageError("qp_state %r: use a QpState (RESET 0 .. ERR 6)" % (value,)) from None


def reject_reason(reason: Optional[int]) -> int:
    """reject's reason: 0 (the kernel makes it 28) for None, else 28 or 35, the two it takes."""
    if reason is None:
        return 0
    code = check_int("reason", reason, 0xFF)
    if code not in abi.REJECT_REASONS:
        raise UsageError("reason %r: the kernel takes only 28 (CONSUMER_DEFINED) and 35 "
                         "(VENDOR_OPTION_NOT_SUPPORTED); leave it out for 28" % (reason,))
    return code


def ib_service(service_id: Optional[int], name: Optional[str]) -> Tuple[int, bytes, int]:
    """resolve_ib_service's arguments: the service id, the name's bytes and the flags saying
    which of the two were given (one at least)."""
    flags = 0
    sid = 0
    raw_name = b""
    if service_id is not None:
        sid = check_int("service_id", service_id, 0xFFFFFFFFFFFFFFFF)
        flags |= abi.IbServiceFlag.ID
    if name is not None:
        if not isinstance(name, str):
            raise UsageError("name must be a str, got %r" % (name,))
        raw_name = name.encode()
        if len(raw_name) >= abi.RDMA_USER_CM_IB_SERVICE_NAME_SIZE:
            raise UsageError("a service name has at most %d bytes" % (abi.RDMA_USER_CM_IB_SERVICE_NAME_SIZE - 1))
        flags |= abi.IbServiceFlag.NAME
    if not flags:
        raise UsageError("resolve_ib_service needs a service_id, a name, or both")
    return sid, raw_name, int(flags)


_USER_PARAM = CODECS["rdma_ucm_write_cm_event"].size - CODECS["rdma_ucm_write_cm_event"].offset("param")


def user_event(arg: Any, status: Any) -> Tuple[int, bytes]:
    """write_event's arguments: the status as the kernel's u32, and the event's parameter
    (``arg`` in its first 8 bytes)."""
    arg = check_int("arg", arg, 0xFFFFFFFFFFFFFFFF)
    status = check_int("status", status, 0x7FFFFFFF, -0x80000000)
    return status & 0xFFFFFFFF, struct.pack("<Q", arg).ljust(_USER_PARAM, b"\0")
