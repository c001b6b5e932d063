"""Fast codecs for every layout of the ABI layer, made from the generated codec data.

Theory of operation
-------------------
construct is the single declaration of every layout (:mod:`pyrdmacm.abi.structs`), but
parsing or building with it costs 10-60 us per struct, more than a whole kernel round
trip, and importing it costs more than the rest of the library's import.  So
``tools/gen_layouts`` flattens each declaration (``tools/derive_layouts.py``: the rules
are there) into one ``struct.Struct`` format, a list of dotted field names and its
big-endian fields, written to :mod:`pyrdmacm.abi.layouts`; this module makes a
:class:`Codec` of each at import, without construct.

Big-endian integers (``__be16`` ports, pkeys, service ids, the ``node_guid`` that
arrives in network order) cannot share a ``struct`` format with little-endian ones:
they are carried as ``ns`` and converted with ``int.from_bytes(..., "big")`` after
unpacking (before packing).  A :class:`Codec` whose struct has no big-endian field
exposes the bound ``struct.Struct`` methods themselves, so the hot path costs exactly
what a hand-written ``struct.Struct`` costs.  The tests check the generated data
against a fresh derivation, and every codec against construct, byte for byte, with
hypothesis.
"""

from __future__ import annotations

import struct
from typing import Any, Callable, Dict, Iterable, List, Sequence, Tuple

from .layouts import LAYOUTS

__all__ = ["Codec", "CODECS", "codec"]


class Codec:
    """A flat ``struct.Struct`` view of one construct declaration.

    ``unpack_from(buf, offset=0)`` returns a tuple of field values in
    declaration order (``names``); ``pack(*values)`` builds bytes.  Use
    :meth:`index` once to find a field's position.
    """

    __slots__ = ("name", "names", "offsets", "size", "format", "_s", "_be", "unpack_from", "unpack", "pack",
                 "pack_into", "_zeros")
    unpack_from: Callable[..., Tuple[Any, ...]]

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
            # compiled on first use: compiling the eight big-endian readers at import cost
            # about a millisecond, and most programs use two or three of them
            self.unpack_from = self._first_unpack_from
            self.unpack = self._unpack_be
            self.pack = self._pack_be
            self.pack_into = self._pack_into_be

    # -- big-endian fields: raw bytes on the struct side, ints on ours
    def _first_unpack_from(self, buf: Any, offset: int = 0) -> Tuple[Any, ...]:
        """Compile the reader, put it in place of this method, and read with it."""
        if self.unpack_from == self._first_unpack_from:  # not yet compiled (a caller may hold this method)
            self.unpack_from = self._compile_unpack_from()
        result: Tuple[Any, ...] = self.unpack_from(buf, offset)
        return result

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


#: A codec for every layout of the ABI layer (kernel structs and wire formats), by name.
CODECS: Dict[str, Codec] = {name: Codec(name, *data) for name, data in LAYOUTS.items()}


def codec(name: str) -> Codec:
    return CODECS[name]


def iter_codecs() -> Iterable[Codec]:
    return CODECS.values()
