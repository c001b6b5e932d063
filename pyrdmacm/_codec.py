"""Fast codecs derived from the construct declarations of :mod:`pyrdmacm.abi`.

Theory of operation
-------------------
construct is the single declaration of every layout, but parsing or building
with it costs 10-60 us per struct, more than a whole kernel round trip.  At
import, :func:`derive` walks a construct ``Struct`` and flattens it into one
``struct.Struct`` format plus a list of dotted field names:

* little-endian integers become their ``struct`` format character;
* ``Bytes(n)`` becomes ``ns``; explicit ``Padding(n)`` becomes ``nx``;
* nested structs and fixed arrays of structs or integers are flattened with
  dotted names (``ib_route[1].dgid``);
* a socket address inside a command or reply (``__kernel_sockaddr_storage``,
  ``sockaddr_in6`` ...) stays one blob, encoded and decoded by
  :mod:`pyrdmacm.addr`;
* a union (``Padded(n, Union(...))``) stays one ``ns`` blob: which arm to
  read depends on who asks (the id's QP type), so the caller decodes it;
* big-endian integers (``__be16`` ports, pkeys, service ids, and the
  ``node_guid`` that arrives in network order) cannot share a ``struct`` format
  with little-endian ones: they are carried as ``ns`` and converted with
  ``int.from_bytes(..., "big")`` after unpacking (before packing).

A :class:`Codec` whose struct has no big-endian field exposes the bound
``struct.Struct`` methods themselves, so the hot path costs exactly what a
hand-written ``struct.Struct`` costs.  The tests check every codec against
construct, byte for byte, with hypothesis.
"""

from __future__ import annotations

import struct
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from construct import Array, Bytes, FormatField, Padded, Pass, Renamed, Struct

from . import abi

__all__ = ["Codec", "derive", "CODECS", "codec"]


class Codec:
    """A flat ``struct.Struct`` view of one construct declaration.

    ``unpack_from(buf, offset=0)`` returns a tuple of field values in
    declaration order (``names``); ``pack(*values)`` builds bytes.  Use
    :meth:`index` once to find a field's position.
    """

    __slots__ = ("name", "names", "offsets", "size", "format", "_s", "_be", "unpack_from", "unpack", "pack",
                 "pack_into", "_zeros")

    def __init__(self, name: str, fmt: str, names: Sequence[str], be: Sequence[Tuple[int, int]]) -> None:
        self.name = name
        self.format = fmt
        self.names = tuple(names)
        #: each field's offset in bytes, in declaration order (as ``offsetof``)
        self.offsets = _offsets(fmt)
        self._s = s = struct.Struct(fmt)
        self.size = s.size
        self._be = tuple(be)
        #: each field's zero (b"" for a byte string, 0 otherwise): pack_dict's defaults
        bes = {i for i, _ in self._be}
        items = _format_items(fmt)
        self._zeros = tuple(b"" if i not in bes and items[i].endswith("s") else 0 for i in range(len(self.names)))
        if not be:
            self.unpack_from = s.unpack_from
            self.unpack = s.unpack
            self.pack = s.pack
            self.pack_into = s.pack_into
        else:
            self.unpack_from = self._compile_unpack_from()
            self.unpack = self._unpack_be
            self.pack = self._pack_be
            self.pack_into = self._pack_into_be

    # -- big-endian fields: raw bytes on the struct side, ints on ours
    def _compile_unpack_from(self) -> Any:
        """One tuple display with the conversions inline: no list, no loop (2x faster)."""
        be = dict(self._be)
        items = ", ".join(
            "_fb(v[%d], 'big')" % i if i in be else "v[%d]" % i for i in range(len(self.names))
        )
        src = "def unpack_from(buf, offset=0):\n    v = _u(buf, offset)\n    return (%s,)\n" % items
        ns: Dict[str, Any] = {"_u": self._s.unpack_from, "_fb": int.from_bytes}
        exec(compile(src, "<codec %s>" % self.name, "exec"), ns)
        return ns["unpack_from"]

    def _unpack_be(self, buf: Any) -> Tuple[Any, ...]:
        v = list(self._s.unpack(buf))
        for i, _n in self._be:
            v[i] = int.from_bytes(v[i], "big")
        return tuple(v)

    def _to_raw(self, values: Sequence[Any]) -> List[Any]:
        v = list(values)
        for i, n in self._be:
            v[i] = v[i].to_bytes(n, "big")
        return v

    def _pack_be(self, *values: Any) -> bytes:
        return self._s.pack(*self._to_raw(values))

    def _pack_into_be(self, buf: Any, offset: int, *values: Any) -> None:
        self._s.pack_into(buf, offset, *self._to_raw(values))

    def index(self, name: str) -> int:
        return self.names.index(name)

    def offset(self, name: str) -> int:
        """``offsetof(struct, name)`` for a (dotted) field name."""
        return self.offsets[self.names.index(name)]

    def unpack_dict(self, buf: Any, offset: int = 0) -> Dict[str, Any]:
        return dict(zip(self.names, self.unpack_from(buf, offset)))

    def pack_dict(self, values: Dict[str, Any]) -> bytes:
        """Build from a flat ``{dotted name: value}`` dict; missing fields are zero."""
        get = values.get
        return self.pack(*[z if v is None else v for v, z in zip(map(get, self.names), self._zeros)])

    def __repr__(self) -> str:
        return "<Codec %s %r %d bytes>" % (self.name, self.format, self.size)


def _offsets(fmt: str) -> Tuple[int, ...]:
    """The byte offset of each field of a flat ``<`` format (pad bytes take room, no field)."""
    out: List[int] = []
    pos, num = 0, ""
    for ch in fmt[1:]:
        if ch.isdigit():
            num += ch
            continue
        n = int(num or 1)
        num = ""
        if ch == "x":
            pos += n
        elif ch == "s":
            out.append(pos)
            pos += n
        else:
            for _ in range(n):
                out.append(pos)
                pos += struct.calcsize("<" + ch)
    return tuple(out)


def _format_items(fmt: str) -> List[str]:
    """'<I16sHxx' -> ['I', '16s', 'H'] (pad bytes dropped): one item per field."""
    items = []
    num = ""
    for ch in fmt[1:]:
        if ch.isdigit():
            num += ch
            continue
        if ch == "x":
            num = ""
            continue
        if ch == "s":
            items.append(num + "s")
        else:
            items.extend([ch] * int(num or 1))
        num = ""
    return items


_SOCKADDRS = (abi.sockaddr_in, abi.sockaddr_in6, abi.sockaddr_ib)


def _flatten(con: Any, prefix: str, fmt: List[str], names: List[str], be: List[Tuple[int, int]]) -> None:
    if isinstance(con, Renamed):
        _flatten(con.subcon, prefix, fmt, names, be)
        return
    if con is abi.kernel_sockaddr_storage or (prefix and con in _SOCKADDRS):
        # one blob: pyrdmacm.addr encodes and decodes socket addresses
        fmt.append("%ds" % con.sizeof())
        names.append(prefix)
        return
    if isinstance(con, Struct):
        for sub in con.subcons:
            if isinstance(sub, Renamed) and sub.name is not None:
                _flatten(sub.subcon, prefix + sub.name if not prefix else prefix + "." + sub.name, fmt, names, be)
            else:
                _flatten(sub, prefix, fmt, names, be)
        return
    if isinstance(con, FormatField):
        order, ch = con.fmtstr[0], con.fmtstr[1:]
        if order == ">" and struct.calcsize("<" + ch) > 1:
            be.append((len(names), struct.calcsize("<" + ch)))
            fmt.append("%ds" % struct.calcsize("<" + ch))
        else:
            fmt.append(ch)
        names.append(prefix)
        return
    # Padding(n) is Padded(n, Pass); a union is Padded(n, Union(...)).
    if isinstance(con, Padded):
        n = con.sizeof()
        if con.subcon is Pass:
            fmt.append("%dx" % n)
        else:
            fmt.append("%ds" % n)
            names.append(prefix)
        return
    if isinstance(con, Bytes):
        fmt.append("%ds" % con.sizeof())
        names.append(prefix)
        return
    if isinstance(con, Array):
        count = con.count
        for i in range(count):
            _flatten(con.subcon, "%s[%d]" % (prefix, i), fmt, names, be)
        return
    raise TypeError("cannot derive a struct format for %r at %s" % (con, prefix))


def derive(name: str, con: Struct) -> Codec:
    fmt: List[str] = ["<"]
    names: List[str] = []
    be: List[Tuple[int, int]] = []
    _flatten(con, "", fmt, names, be)
    c = Codec(name, "".join(fmt), names, be)
    if c.size != con.sizeof():
        raise AssertionError("derived %s is %d bytes (%s), construct says %d" % (name, c.size, c.format, con.sizeof()))
    return c


#: A codec for every layout of the ABI layer (kernel structs and wire formats), by name.
CODECS: Dict[str, Codec] = {name: derive(name, con) for name, con in abi.LAYOUTS.items()}


def codec(name: str) -> Codec:
    return CODECS[name]


def iter_codecs() -> Iterable[Codec]:
    return CODECS.values()
