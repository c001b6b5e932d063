"""Every ucma command as bytes, every reply as values: the wire layer, with no I/O.

Theory of operation
-------------------
A command is one ``write()`` of ``rdma_ucm_cmd_hdr`` (``cmd``, ``in`` = the
body's size, ``out`` = the reply buffer's size) followed by the body.  For each
command of :data:`pyrdmacm.abi.structs.COMMANDS` (as :mod:`pyrdmacm.abi.layouts` names its
layouts) this module has a :class:`Command`:
its header bytes, made once, and one ``struct.Struct`` that packs header and
body together (one call, no concatenation), derived from the body's
declaration -- so no size or offset is written here that the ABI layer does not
declare.  Replies are decoded by the functions below into the objects of
:mod:`pyrdmacm.records` and :mod:`pyrdmacm.addr`.

The commands whose reply has a variable length (QUERY PATH) or that librdmacm
sends with a reply buffer of its own size say so in their constructor.

RDMA netlink's GET_CHARDEV request, which the device layer sends without
pyroute2, is built and read by :mod:`pyrdmacm.abi.chardev` (re-exported here:
:func:`chardev_request`, :func:`parse_chardev_reply`), which needs nothing of this
module: opening the device (and the route prediction, which checks the node) does
not import the reply decoders and their records.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import operator
import struct
from functools import partial
from typing import TYPE_CHECKING, Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from . import abi
from .abi.codec import CODECS, Codec, _format_items
from .abi.layouts import COMMANDS as LAYOUT_OF_COMMAND
from .abi.chardev import chardev_request, decode_huge_dev, parse_chardev_reply  # re-exported (see __all__)
from .addr import Address, unpack_sockaddr
from . import records
from .records import ConnParam

if TYPE_CHECKING:  # pragma: no cover
    from .records import AhAttr, PathRecord, QpAttr, ServiceRecord, UdParam

__all__ = [
    "Command",
    "COMMAND",
    "HEADER",
    "header",
    "QUERY_PATH_MAX",
    "QUERY_PATH_REPLY_SIZE",
    "AddrReply",
    "addr_reply",
    "route_reply",
    "path_records",
    "decode_path_record",
    "decode_conn",
    "decode_ud",
    "decode_qp_attr",
    "conn_fields",
    "encode_path_record",
    "service_records",
    "QUERY_IB_SERVICE_REPLY_SIZE",
    "addr_reply_prefill",
    "route_reply_prefill",
    "NO_INDEX",
    "chardev_request",
    "parse_chardev_reply",
    "decode_huge_dev",
]

C = abi.UserCmCmd
HEADER: Codec = CODECS["rdma_ucm_cmd_hdr"]

#: librdmacm's QUERY PATH buffer holds 6 path records (its ``ucma_query_path``).
QUERY_PATH_MAX = 6
_PATH_HEAD = CODECS["rdma_ucm_query_path_resp"]
_PATH_DATA = CODECS["ib_path_rec_data"]
QUERY_PATH_REPLY_SIZE = _PATH_HEAD.size + QUERY_PATH_MAX * _PATH_DATA.size
_SERVICE_HEAD = CODECS["rdma_ucm_query_ib_service_resp"]
_SERVICE_REC = CODECS["ib_user_service_rec"]
#: librdmacm's first QUERY IB_SERVICE buffer holds 6 records (then it asks again for more)
QUERY_IB_SERVICE_MAX = 6
QUERY_IB_SERVICE_REPLY_SIZE = _SERVICE_HEAD.size + QUERY_IB_SERVICE_MAX * _SERVICE_REC.size
#: ``ibdev_index`` when the kernel did not write one (kernels before 5.8): librdmacm's -1
NO_INDEX = 0xFFFFFFFF


def header(cmd: int, size_in: int, size_out: int = 0) -> bytes:
    """``rdma_ucm_cmd_hdr`` for a command of ``size_in`` body bytes and a reply buffer of ``size_out``."""
    return HEADER.pack(cmd, size_in, size_out)


class Command:
    """One command: its number, body and reply layouts, header bytes, and a packer.

    ``encode(*fields)`` gives header + body for the body's fields in declaration
    order (:attr:`fields`); ``pack(header, *fields)`` is the same with the header
    passed in, the cheapest form (a bare ``struct.Struct.pack``) for the hot paths.
    """

    __slots__ = ("cmd", "name", "body", "reply", "out", "header", "size", "fields", "pack", "_be")

    def __init__(self, cmd: abi.UserCmCmd, out: Optional[int] = None, reply: Optional[str] = None) -> None:
        body_name, reply_name = LAYOUT_OF_COMMAND[cmd.name]
        assert body_name is not None, "GET_OPTION has no body: the kernel answers ENOSYS"
        self.cmd = cmd
        self.name = cmd.name
        self.body = CODECS[body_name]
        reply = reply or reply_name
        self.reply = CODECS[reply] if reply else None
        self.out = out if out is not None else (self.reply.size if self.reply is not None else 0)
        self.header = header(cmd, self.body.size, self.out)
        self.size = len(self.header) + self.body.size
        self.fields = self.body.names
        self._be = bool(self.body._be)
        if not self._be:
            self.pack = struct.Struct("<%ds%s" % (len(self.header), self.body.format[1:])).pack
        else:
            self.pack = self._pack_be

    def _pack_be(self, hdr: bytes, *fields: Any) -> bytes:
        return hdr + self.body.pack(*fields)

    def encode(self, *fields: Any) -> bytes:
        """Header + body, the body's fields given in declaration order."""
        return self.pack(self.header, *fields)

    def head(self, n: int) -> "Tuple[Callable[..., bytes], int]":
        """A packer of the header and the body's first ``n`` fields (``pack(header, *fields)``),
        and how many body bytes those fields take: for a command whose other fields repeat
        (many ids resolving one destination), packed as head + a tail made once."""
        assert not self._be and 0 < n < len(self.fields)
        items = _format_items(self.body.format)[:n]
        head = struct.Struct("<%ds%s" % (len(self.header), "".join(items)))
        taken = head.size - len(self.header)
        assert taken == self.body.offsets[n], "padding inside the head of %s" % self.name
        return head.pack, taken

    def packer(self, values: Dict[str, Any], varying: Tuple[str, ...]) -> "Callable[..., bytes]":
        """A packer of header + body for commands that differ only in the ``varying`` fields
        (one or two scalar fields, given to the packer in that order): every other field is
        ``values`` (zero if not named), packed once; each call is one ``struct.pack`` of the
        constant bytes around the varying fields.  ``encode_dict`` gives the same bytes
        (tests/test_conn_fake.py checks it for the packers the library keeps)."""
        assert not self._be and 1 <= len(varying) <= 2
        template = self.encode_dict({**values, **dict.fromkeys(varying, 0)})
        items = _format_items(self.body.format)
        at = sorted((len(self.header) + self.body.offset(f), items[self.fields.index(f)], f) for f in varying)
        pieces, items, end = [], [], 0
        for start, item, _ in at:
            assert item[-1] in "BHILQbhilq" and not item[:-1], "%s: %s is not a scalar" % (self.name, item)
            pieces.append(template[end:start])
            items.append(item)
            end = start + struct.calcsize("<" + item)
        pieces.append(template[end:])
        in_order = [f for _, _, f in at] == list(varying)
        if not any(b"".join(pieces[1:])) and (len(at) == 1 or in_order):
            # nothing but zeros after the header's piece: padding the format writes, and the
            # packer a partial of struct.pack (a call in C, not a Python function's)
            fmt = "<%ds" % len(pieces[0]) + "".join(
                item + ("%dx" % len(piece) if piece else "") for item, piece in zip(items, pieces[1:]))
            return partial(struct.Struct(fmt).pack, pieces[0])
        fmt = "<" + "".join("%ds%s" % (len(piece), item) for piece, item in zip(pieces, items)) + "%ds" % len(pieces[-1])
        pack = struct.Struct(fmt).pack
        p0, p1 = pieces[0], pieces[1]
        if len(at) == 1:
            return lambda a: pack(p0, a, p1)
        p2 = pieces[2]
        if in_order:
            return lambda a, b: pack(p0, a, p1, b, p2)
        return lambda a, b: pack(p0, b, p1, a, p2)

    def encode_dict(self, values: Dict[str, Any]) -> bytes:
        """Header + body from ``{field: value}``; fields not given are zero."""
        return self.header + self.body.pack_dict(values)

    def __repr__(self) -> str:
        return "<Command %s in %d out %d>" % (self.name, self.body.size, self.out)


def _commands() -> Dict[str, Command]:
    out: Dict[str, Command] = {}
    for name in LAYOUT_OF_COMMAND:
        cmd = abi.UserCmCmd[name]
        if cmd is C.GET_OPTION:
            continue
        if cmd is C.QUERY:
            out["QUERY_ADDR"] = Command(cmd, reply="rdma_ucm_query_addr_resp")  # ADDR and GID
            out["QUERY_PATH"] = Command(cmd, out=QUERY_PATH_REPLY_SIZE)
            out["QUERY_IB_SERVICE"] = Command(cmd, out=QUERY_IB_SERVICE_REPLY_SIZE)
            continue
        out[cmd.name] = Command(cmd)
    return out


#: Every command, by its name (``"CREATE_ID"``, ...; QUERY as ``QUERY_ADDR`` for the ADDR
#: and GID options, ``QUERY_PATH`` for PATH and ``QUERY_IB_SERVICE``, whose reply sizes differ).
COMMAND: Dict[str, Command] = _commands()
#: The commands whose reply goes into a channel's query buffer (it is as large as the largest).
QUERY_REPLIES = ("QUERY_ADDR", "QUERY_PATH", "QUERY_IB_SERVICE", "QUERY_ROUTE")


# --------------------------------------------------------------------------- replies

_ADDR = CODECS["rdma_ucm_query_addr_resp"]
_ROUTE = CODECS["rdma_ucm_query_route_resp"]


class AddrReply(NamedTuple):
    """QUERY ADDR / GID, or QUERY_ROUTE, decoded: the device is named by the caller."""

    node_guid: int
    port_num: int
    pkey: int
    src: Optional[Address]
    dst: Optional[Address]
    ibdev_index: Optional[int]  #: None when the kernel wrote none (before 5.8)


def _prefill(codec: Codec) -> bytes:
    """The reply buffer's contents before the command: ``ibdev_index`` -1, the rest zero, so
    that a kernel that does not write the field (before 5.8) leaves -1 there (librdmacm's
    test for old kernels)."""
    off = codec.offset("ibdev_index")
    return bytes(off) + NO_INDEX.to_bytes(4, "little") + bytes(codec.size - off - 4)


def addr_reply_prefill() -> bytes:
    return _ADDR_PREFILL


def route_reply_prefill() -> bytes:
    return _ROUTE_PREFILL


_ADDR_PREFILL = _prefill(_ADDR)
_ROUTE_PREFILL = _prefill(_ROUTE)
_ADDR_I = {n: i for i, n in enumerate(_ADDR.names)}
_ROUTE_I = {n: i for i, n in enumerate(_ROUTE.names)}


def addr_reply(buf: Any) -> AddrReply:
    """``rdma_ucm_query_addr_resp`` (QUERY ADDR and GID)."""
    v = _ADDR.unpack_from(buf)
    i = _ADDR_I
    index = v[i["ibdev_index"]]
    return AddrReply(
        v[i["node_guid"]],
        v[i["port_num"]],
        v[i["pkey"]],
        unpack_sockaddr(v[i["src_addr"]]) if v[i["src_size"]] else None,
        unpack_sockaddr(v[i["dst_addr"]]) if v[i["dst_size"]] else None,
        None if index == NO_INDEX else index,
    )


def route_reply(buf: Any) -> AddrReply:
    """``rdma_ucm_query_route_resp`` (QUERY_ROUTE, kernels before 3.11): the same facts."""
    v = _ROUTE.unpack_from(buf)
    i = _ROUTE_I
    index = v[i["ibdev_index"]]
    return AddrReply(
        v[i["node_guid"]],
        v[i["port_num"]],
        v[i["ib_route[0].pkey"]],
        unpack_sockaddr(v[i["src_addr"]]),
        unpack_sockaddr(v[i["dst_addr"]]),
        None if index == NO_INDEX else index,
    )


class RouteReply(NamedTuple):
    """QUERY_ROUTE decoded for its route: the device, port and first path's GIDs and pkey (the
    addresses are left undecoded: ``route_reply`` has them)."""

    node_guid: int
    port_num: int
    ibdev_index: Optional[int]
    num_paths: int
    sgid: bytes  #: 16 bytes, all zero when the kernel gave none (an id on no device)
    dgid: bytes
    pkey: int


_ROUTE_WHERE = operator.itemgetter(*(_ROUTE_I[n] for n in ("node_guid", "port_num", "ibdev_index", "num_paths",
                                                            "ib_route[0].sgid", "ib_route[0].dgid", "ib_route[0].pkey")))


def route_where(buf: Any) -> RouteReply:
    """``rdma_ucm_query_route_resp`` for the route's place (QUERY_ROUTE on any kernel)."""
    v = _ROUTE.unpack_from(buf)
    g, p, index, n, sgid, dgid, pkey = _ROUTE_WHERE(v)
    return RouteReply(g, p, None if index == NO_INDEX else index, n, sgid, dgid, pkey)


_SA_PATH = CODECS["ib_sa_path_rec"]


def decode_path_record(flags: int, rec: bytes) -> PathRecord:
    """One ``ib_path_rec_data``'s record (IBTA wire format) with its ``IB_PATH_*`` flags."""
    (sid, dgid, sgid, dlid, slid, raw_flow_hop, tclass, rn, pkey, qos_sl, mtu, rate, plt, pref,
     _reserved) = _SA_PATH.unpack_from(rec)
    return records.PathRecord(
        flags,
        sid,
        ipaddress.IPv6Address(dgid),
        ipaddress.IPv6Address(sgid),
        dlid,
        slid,
        raw_flow_hop >> 31,
        (raw_flow_hop >> 8) & 0xFFFFF,
        raw_flow_hop & 0xFF,
        tclass,
        rn >> 7,
        rn & 0x7F,
        pkey,
        qos_sl & 0xF,
        mtu >> 6,
        mtu & 0x3F,
        rate >> 6,
        rate & 0x3F,
        plt >> 6,
        plt & 0x3F,
        pref,
    )


_PATH_NUM = _PATH_HEAD.index("num_paths")
_PATH_FLAGS = _PATH_DATA.index("flags")
_PATH_REC = _PATH_DATA.index("path_rec")


def path_records(raw: Any) -> List[PathRecord]:
    """A QUERY PATH reply: ``rdma_ucm_query_path_resp`` and its ``num_paths`` records (at
    most what the buffer holds)."""
    num = min(_PATH_HEAD.unpack_from(raw)[_PATH_NUM], (len(raw) - _PATH_HEAD.size) // _PATH_DATA.size)
    out = []
    for k in range(num):
        v = _PATH_DATA.unpack_from(raw, _PATH_HEAD.size + k * _PATH_DATA.size)
        out.append(decode_path_record(v[_PATH_FLAGS], v[_PATH_REC]))
    return out


# --------------------------------------------------------------------------- connections

_CONN = CODECS["rdma_ucm_conn_param"]
_UD = CODECS["rdma_ucm_ud_param"]
_QP_ATTR = CODECS["ib_uverbs_qp_attr"]
_AH_FIELDS = ("grh.dgid", "grh.flow_label", "grh.sgid_index", "grh.hop_limit", "grh.traffic_class", "dlid", "sl",
              "src_path_bits", "static_rate", "is_global", "port_num")


def _ah_reader(codec: Codec, prefix: str) -> Callable[[Tuple[Any, ...]], AhAttr]:
    """A reader of the AhAttr at ``prefix`` in ``codec``'s unpacked values."""
    idx = [codec.index(prefix + "." + f) for f in _AH_FIELDS]

    def read(v: Tuple[Any, ...]) -> AhAttr:
        f = [v[i] for i in idx]
        f[0] = ipaddress.IPv6Address(f[0])
        return records.AhAttr(*f)

    return read


_CONN_I = {n: i for i, n in enumerate(_CONN.names)}
_CONN_FIELDS = ("qp_num", "private_data", "responder_resources", "initiator_depth", "flow_control", "retry_count",
                "rnr_retry_count", "srq", "qkey")


def decode_conn(raw: bytes, ece: Tuple[int, int] = (0, 0)) -> ConnParam:
    """The ``conn`` arm of an event (the peer's REQ or REP), with the event's ECE."""
    v = _CONN.unpack_from(raw)
    i = _CONN_I
    n = min(v[i["private_data_len"]], abi.RDMA_MAX_PRIVATE_DATA)
    kw: Dict[str, Any] = {f: v[i[f]] for f in _CONN_FIELDS}
    kw["private_data"] = kw["private_data"][:n]
    return ConnParam(ece=ece, **kw)


_UD_AH = _ah_reader(_UD, "ah_attr")
_UD_QPN, _UD_QKEY = _UD.index("qp_num"), _UD.index("qkey")
_UD_PD, _UD_PD_LEN = _UD.index("private_data"), _UD.index("private_data_len")


def decode_ud(raw: bytes) -> UdParam:
    """The ``ud`` arm of an event: remote QP, qkey, address handle, private data."""
    v = _UD.unpack_from(raw)
    n = min(v[_UD_PD_LEN], abi.RDMA_MAX_PRIVATE_DATA)
    return records.UdParam(v[_UD_QPN], v[_UD_QKEY], _UD_AH(v), v[_UD_PD][:n])


_QP_AH = _ah_reader(_QP_ATTR, "ah_attr")
_QP_ALT_AH = _ah_reader(_QP_ATTR, "alt_ah_attr")
#: QpAttr's plain fields and their places in the reply, made at the first decode (QpAttr loads then)
_QP_PLAIN: List[Tuple[str, int]] = []
_QP_MASK = _QP_ATTR.index("qp_attr_mask")


def decode_qp_attr(buf: Any) -> QpAttr:
    """INIT_QP_ATTR's reply (``ib_uverbs_qp_attr``)."""
    if not _QP_PLAIN:
        _QP_PLAIN.extend((f.name, _QP_ATTR.index(f.name)) for f in dataclasses.fields(records.QpAttr)
                         if f.name not in ("mask", "ah_attr", "alt_ah_attr"))
    v = _QP_ATTR.unpack_from(buf)
    kw: Dict[str, Any] = {name: v[i] for name, i in _QP_PLAIN}
    return records.QpAttr(mask=abi.QpAttrMask(v[_QP_MASK]), ah_attr=_QP_AH(v), alt_ah_attr=_QP_ALT_AH(v), **kw)


def conn_fields(p: ConnParam, qp_num: int, valid: int = 1) -> Tuple[Any, ...]:
    """``rdma_ucm_conn_param``'s fields in declaration order, from a checked ConnParam and the
    QP number to send (CONNECT and ACCEPT carry them the same way)."""
    data = p.private_data
    return (qp_num, p.qkey, data, len(data), p.srq, p.responder_resources, p.initiator_depth, p.flow_control,
            p.retry_count, p.rnr_retry_count, valid)


assert _CONN.names == ("qp_num", "qkey", "private_data", "private_data_len", "srq", "responder_resources",
                       "initiator_depth", "flow_control", "retry_count", "rnr_retry_count", "valid")


def encode_path_record(p: PathRecord) -> bytes:
    """``ib_path_rec_data`` of a PathRecord (its flags and the IBTA record): what SET_OPTION
    IB_PATH takes; :func:`decode_path_record` read back gives the same record (QoS class 0)."""
    rec = _SA_PATH.pack(
        p.service_id, p.dgid.packed, p.sgid.packed, p.dlid, p.slid,
        (p.raw_traffic << 31) | (p.flow_label << 8) | p.hop_limit, p.traffic_class,
        (p.reversible << 7) | p.numb_path, p.pkey, p.sl,
        (p.mtu_selector << 6) | p.mtu, (p.rate_selector << 6) | p.rate,
        (p.packet_life_time_selector << 6) | p.packet_life_time, p.preference, bytes(6))
    return _PATH_DATA.pack(p.flags, 0, rec)


_SR = {n: i for i, n in enumerate(_SERVICE_REC.names)}


def service_records(raw: bytes) -> Tuple[int, List[ServiceRecord]]:
    """QUERY IB_SERVICE's reply: how many records the kernel has, and those that fit."""
    total = _SERVICE_HEAD.unpack_from(raw)[_SERVICE_HEAD.index("num_service_recs")]
    out: List[ServiceRecord] = []
    size = _SERVICE_REC.size
    for k in range(min(total, (len(raw) - _SERVICE_HEAD.size) // size)):
        v = _SERVICE_REC.unpack_from(raw, _SERVICE_HEAD.size + k * size)
        out.append(records.ServiceRecord(v[_SR["id"]], ipaddress.IPv6Address(v[_SR["gid"]]), v[_SR["pkey"]],
                                 v[_SR["lease"]], v[_SR["key"]], v[_SR["name"]].split(b"\0", 1)[0].decode(
                                     "utf-8", "replace")))
    return total, out


# -- commands packed from templates: what varies per call is packed into bytes made once

#: connect()/accept() with no parameters (the QP number aside): a ConnParam of defaults
DEFAULT_CONN_PARAM = ConnParam()
_ACCEPT, _CONNECT, _RESOLVE_ADDR = COMMAND["ACCEPT"], COMMAND["CONNECT"], COMMAND["RESOLVE_ADDR"]
#: establish(): ACCEPT with nothing but the id (uid 0, parameters invalid), as librdmacm sends it
#: (``ESTABLISH(handle)``); every other field is zero, packed once
ESTABLISH = _ACCEPT.packer({}, ("id",))
#: DISCONNECT of an id (``DISCONNECT(handle)``): disconnect(), and the channel's answer to DISCONNECTED
DISCONNECT = COMMAND["DISCONNECT"].packer({}, ("id",))
#: CONNECT with the default parameters (``CONNECT_DEFAULT(qp_num, handle)``): the rest is
#: :data:`DEFAULT_CONN_PARAM`'s, packed once
CONNECT_DEFAULT = _CONNECT.packer(
    dict(zip(_CONNECT.fields, conn_fields(DEFAULT_CONN_PARAM, 0) + (0, 0) + DEFAULT_CONN_PARAM.ece)),
    ("conn_param.qp_num", "id"))
#: RESOLVE_ADDR's header and its first two fields (``RESOLVE_ADDR_HEAD(header, id, timeout_ms)``):
#: the rest depends on the addresses only (:func:`resolve_addr_tail`), packed once per destination
RESOLVE_ADDR_HEAD, _RESOLVE_ADDR_HEAD_SIZE = _RESOLVE_ADDR.head(2)
assert _RESOLVE_ADDR.fields[:2] == ("id", "timeout_ms")


def resolve_addr_tail(src: Optional[Address], dst: Address) -> bytes:
    """RESOLVE_ADDR's bytes after ``id`` and ``timeout_ms`` for these addresses (src may be None)."""
    data = _RESOLVE_ADDR.encode(0, 0, src.size if src is not None else 0, dst.size, 0,
                                src.pack_storage() if src is not None else b"", dst.pack_storage())
    return data[len(_RESOLVE_ADDR.header) + _RESOLVE_ADDR_HEAD_SIZE:]
