"""The codec data of every layout, derived from its construct declaration.

Theory of operation
-------------------
:func:`layout` walks a construct ``Struct`` of :mod:`pyrdmacm.abi.structs` and flattens
it into one ``struct`` format, a list of dotted field names and the big-endian
fields:

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
  with little-endian ones: they are carried as ``ns`` and listed as
  ``(field index, size)``, for :class:`pyrdmacm.abi.codec.Codec` to convert.

This runs construct, so the library's runtime does not import it: ``tools/gen_layouts``
writes what :func:`render` gives into :mod:`pyrdmacm.abi.layouts`, which the codecs are
made from, and a test checks that file against a fresh derivation.
"""

from __future__ import annotations

import json
import struct
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from construct import Array, Bytes, FormatField, Padded, Pass, Renamed, Struct

from pyrdmacm.abi import structs as _structs

if TYPE_CHECKING:
    from pyrdmacm.abi.codec import Codec

__all__ = ["Layout", "layout", "derive", "layouts", "commands", "render", "GENERATOR", "MODULE"]

#: One layout's codec data: (``struct`` format, dotted field names, big-endian fields as
#: ``(field index, size)``).
Layout = Tuple[str, Tuple[str, ...], Tuple[Tuple[int, int], ...]]

#: The command that writes :data:`MODULE` (named in its header and in the test's message).
GENERATOR = "tools/gen_layouts"
MODULE = "pyrdmacm/abi/layouts.py"

_SOCKADDRS = (_structs.sockaddr_in, _structs.sockaddr_in6, _structs.sockaddr_ib)


def _flatten(con: Any, prefix: str, fmt: List[str], names: List[str], be: List[Tuple[int, int]]) -> None:
    if isinstance(con, Renamed):
        _flatten(con.subcon, prefix, fmt, names, be)
        return
    if con is _structs.kernel_sockaddr_storage or (prefix and con in _SOCKADDRS):
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


def layout(name: str, con: Struct) -> Layout:
    """The codec data of one declaration; its size is checked against construct's."""
    fmt: List[str] = ["<"]
    names: List[str] = []
    be: List[Tuple[int, int]] = []
    _flatten(con, "", fmt, names, be)
    data = ("".join(fmt), tuple(names), tuple(be))
    if struct.calcsize(data[0]) != con.sizeof():
        raise AssertionError("derived %s is %d bytes (%s), construct says %d"
                             % (name, struct.calcsize(data[0]), data[0], con.sizeof()))
    return data


def derive(name: str, con: Struct) -> Codec:
    """A codec made straight from a declaration (the generated data's codec is the same)."""
    from pyrdmacm.abi.codec import Codec  # here: the generator runs without the module it writes

    return Codec(name, *layout(name, con))


def layouts() -> Dict[str, Layout]:
    """Every layout of the ABI layer (:data:`pyrdmacm.abi.structs.LAYOUTS`), by name, in order."""
    return {name: layout(name, con) for name, con in _structs.LAYOUTS.items()}


def commands() -> Dict[str, Tuple[Optional[str], Optional[str]]]:
    """:data:`pyrdmacm.abi.structs.COMMANDS` by layout name: command name -> (body, reply)."""
    by_con = {id(con): name for name, con in _structs.STRUCTS.items()}

    def name_of(con: Any) -> Optional[str]:
        return None if con is None else by_con[id(con)]

    return {cmd.name: (name_of(body), name_of(reply)) for cmd, (body, reply) in _structs.COMMANDS.items()}


def _src(value: Any) -> str:
    """Python source of a value of the generated data (strings in double quotes, as the project writes them)."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, tuple):
        return "(%s)" % (_src(value[0]) + "," if len(value) == 1 else ", ".join(_src(v) for v in value))
    return repr(value)


def _wrapped(items: Tuple[Any, ...], indent: str, width: int = 100) -> List[str]:
    """A tuple's items as source lines of at most ``width`` characters (one item may be longer)."""
    lines: List[str] = []
    line = ""
    for item in items:
        text = _src(item) + ","
        if line and len(indent) + len(line) + 1 + len(text) > width:
            lines.append(indent + line)
            line = text
        else:
            line = line + " " + text if line else text
    if line:
        lines.append(indent + line)
    return lines


def render() -> str:
    """The source of :data:`MODULE`, as :data:`GENERATOR` writes it."""
    out = [
        '"""Codec data of every layout of the ABI layer: GENERATED by %s, do not edit.' % GENERATOR,
        "",
        "Derived (tools/derive_layouts.py) from the construct declarations of pyrdmacm.abi.structs, the",
        "single source of truth; tests/test_layouts.py fails when this file is not what the",
        "declarations give: run %s after changing them." % GENERATOR,
        '"""',
        "",
        "from __future__ import annotations  # the annotations below cost nothing at import",
        "",
        "from typing import Dict, Optional, Tuple",
        "",
        "#: name -> (struct format, dotted field names, big-endian fields as (field index, size))",
        "LAYOUTS: Dict[str, Tuple[str, Tuple[str, ...], Tuple[Tuple[int, int], ...]]] = {",
    ]
    for name, (fmt, names, be) in layouts().items():
        out.append("    # %d bytes" % struct.calcsize(fmt))
        out.append("    %s: (" % _src(name))
        out.append("        %s," % _src(fmt))
        out.append("        (")
        out.extend(_wrapped(names, " " * 12))
        out.append("        ),")
        out.append("        %s," % _src(be))
        out.append("    ),")
    out.append("}")
    out.append("")
    out.append("#: command name -> (body layout, reply layout): pyrdmacm.abi.structs.COMMANDS by layout name")
    out.append("COMMANDS: Dict[str, Tuple[Optional[str], Optional[str]]] = {")
    for cmd, pair in commands().items():
        out.append("    %s: %s," % (_src(cmd), _src(pair)))
    out.append("}")
    return "\n".join(out) + "\n"
