#!/usr/bin/env python3
"""Record the rdma_cm ("ucma") uAPI layout as data, straight from the compiler.

Theory of operation
-------------------
pyrdmacm declares the kernel's command and response structs by hand (with
construct).  This tool is the mechanical ground truth those declarations are
tested against; it never copies a header into the project, it only measures:

1. **Parse.**  The uapi headers are run through ``gcc -E -dD`` (so conditionals
   resolve exactly as they do for the compiler) and a small parser of C
   struct/union/enum declarations (``parse_text``) picks out, per header, the
   aggregates, enum constants and ``#define`` integers.  Nested anonymous
   unions, inline struct/union members, arrays, flexible arrays, pointers and
   ``__attribute__`` are understood; function bodies and typedefs are skipped.
2. **Measure.**  From the parse a C program is generated that prints, as one
   JSON object, ``sizeof``/``_Alignof`` of every recorded aggregate,
   ``offsetof``/``sizeof`` of every member (flattened into dotted paths such as
   ``param.conn.private_data``, union arms included), every enum constant and
   every plain-integer ``#define``.  It is compiled with the headers' own
   directory first on the include path (plus its multiarch ``asm/`` directory),
   run, and its output becomes the layout.
3. **Record.**  ``write`` stores one layout per Debian suite in
   ``abi/layout/<suite>.json`` (bookworm = Linux 6.1, trixie = 6.12, sid = the
   newest); ``abi/since.json`` says from which kernel each command, struct,
   field, enum constant and define exists: what the suites' headers prove,
   refined by the facts in ``KNOWN_SINCE`` (with their sources).  ``check-since``
   verifies the two agree; ``diff`` shows what changed between suites.

Headers of other suites are fetched (``fetch``) with a private apt state under
``build/abi/`` (the checkout's ignored build folder); the machine's own apt
configuration is only read, to learn the Debian mirror.

Layout schema (``abi/layout/<suite>.json``)::

    {"schema": 1, "suite": "sid", "arch": "x86_64-linux-gnu",
     "linux_version": "7.2.13", "linux_version_code": 459277,
     "packages": {"linux-libc-dev": "...", "librdmacm-dev": "..."}, "headers": [...],
     "structs": {TAG: {"kind": "struct"|"union", "header": ..., "size": N, "align": N,
                       "fields": {DOTTED_PATH: {"offset", "size", "type",
                                                ["count", "elem_size"]  arrays,
                                                ["flexible": true]      size 0,
                                                ["be": true]            declared __be*,
                                                ["declared_in": TAG]    member of a nested named type}}}},
     "enums": {NAME: {"value", "enum": TAG or null, "header"}},
     "defines": {NAME: {"value", "header"}}}

``fields`` lists every designator in declaration order (offset order); an
inline union/struct member has type ``"union"``/``"struct"``.

Use from tests::

    sys.path.insert(0, str(REPO / "tools")); import abi_probe
    abi_probe.load_layout("sid")["structs"]["rdma_ucm_event_resp"]["size"]
    abi_probe.installed_layout()      # probes the installed header, cached

Stdlib only; Python >= 3.9.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

REPO = Path(__file__).resolve().parent.parent
LAYOUT_DIR = REPO / "abi" / "layout"
SINCE_PATH = REPO / "abi" / "since.json"
BUILD_DIR = REPO / "build" / "abi"
HEADERS_DIR = BUILD_DIR / "headers"
SOURCE_FILE = "abi_probe-source.json"  # written by `fetch` next to usr/
SCHEMA = 1

# Suites recorded in abi/layout, oldest first, with the kernel series each is
# expected to carry (None: rolling, whatever it ships today).
SUITES: Dict[str, Optional[str]] = {"bullseye": "5.10", "bookworm": "6.1", "trixie": "6.12", "sid": None}
FETCH_PACKAGES = ("linux-libc-dev", "librdmacm-dev")

ALL = "*"


@dataclass(frozen=True)
class HeaderSpec:
    """One header to parse and what to record from it."""

    path: str  # relative to the include directory
    structs: Union[str, Tuple[str, ...]] = ALL  # ALL, or the tags to record
    enums: bool = False
    defines: Union[bool, Tuple[str, ...]] = False  # True: every plain integer; or the names to record
    optional: bool = False  # not part of linux-libc-dev


HEADERS: Tuple[HeaderSpec, ...] = (
    HeaderSpec("linux/socket.h", structs=("__kernel_sockaddr_storage",)),
    HeaderSpec("linux/in.h", structs=("sockaddr_in",)),
    HeaderSpec("linux/in6.h", structs=("sockaddr_in6",)),
    HeaderSpec(
        "rdma/ib_user_verbs.h",
        structs=("ib_uverbs_global_route", "ib_uverbs_ah_attr", "ib_uverbs_qp_attr", "ib_uverbs_qp_dest"),
    ),
    HeaderSpec("rdma/ib_user_sa.h", enums=True, defines=True),
    HeaderSpec("rdma/rdma_user_cm.h", enums=True, defines=True),
    # sockaddr_ib is not kernel uAPI (the kernel's copy is include/rdma/ib.h,
    # not exported); userspace gets it from rdma-core's <infiniband/ib.h>.
    HeaderSpec("infiniband/ib.h", structs=("sockaddr_ib",), defines=("AF_IB", "PF_IB"), optional=True),
)

BE_TYPES = {"__be16", "__be32", "__be64", "__aligned_be64"}


class ParseError(ValueError):
    """The declaration parser met C it does not understand."""


class ProbeUnavailable(RuntimeError):
    """gcc, a header, apt or dpkg is missing: the probe cannot run here."""


# --------------------------------------------------------------------------------------------
# Parsing


@dataclass
class Member:
    name: Optional[str]  # None: anonymous struct/union member
    type: str  # "__u32", "struct sockaddr_in6", "void *", or "struct"/"union" for inline bodies
    dims: Tuple[str, ...] = ()  # array dimensions as C text; "" = flexible array
    body: Optional["Aggregate"] = None  # inline struct/union definition
    bits: Optional[str] = None  # bit-field width


@dataclass
class Aggregate:
    kind: str  # "struct" | "union"
    tag: Optional[str]
    members: List[Member]
    header: str


@dataclass
class EnumConst:
    name: str
    expr: Optional[str]  # C text of the initialiser, None when implicit
    enum: Optional[str]  # enum tag, None when anonymous
    header: str


@dataclass
class Define:
    name: str
    value: str
    header: str


@dataclass
class Parse:
    aggregates: Dict[str, Aggregate] = field(default_factory=dict)  # by tag
    enums: List[EnumConst] = field(default_factory=list)
    defines: Dict[str, Define] = field(default_factory=dict)
    files: Dict[str, str] = field(default_factory=dict)  # header -> resolved path


_TOKEN_RE = re.compile(
    r"""
    (?P<space>\s+)
  | (?P<number>0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*)
  | (?P<name>[A-Za-z_]\w*)
  | (?P<string>"(?:\\.|[^"\\])*"|'(?:\\.|[^'\\])*')
  | (?P<op><<=|>>=|<<|>>|->|\.\.\.|&&|\|\||[<>=!+\-*/%&|^]=|[{}()\[\];,:*=+\-/%&|^~!<>.?])
    """,
    re.VERBOSE,
)
_COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.DOTALL)
_LINEMARKER_RE = re.compile(r'#\s*(?:line\s+)?\d+\s+"((?:\\.|[^"\\])*)"')
_DEFINE_RE = re.compile(r"#\s*define\s+([A-Za-z_]\w*)(\()?\s*(.*)$")
_UNDEF_RE = re.compile(r"#\s*undef\s+([A-Za-z_]\w*)")
_INT_EXPR_TOKEN_RE = re.compile(r"0[xX][0-9a-fA-F]+[uUlL]*|\d+[uUlL]*|<<|>>|[()+\-*/%&|^~]|[A-Za-z_]\w*")


def tokenize(text: str) -> List[str]:
    tokens = []
    pos = 0
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m:
            raise ParseError(f"cannot tokenize {text[pos:pos + 20]!r}")
        pos = m.end()
        if m.lastgroup != "space":
            tokens.append(m.group())
    return tokens


def _strip_attributes(tokens: List[str]) -> List[str]:
    """Drop __attribute__((...)) and other layout-neutral decorations."""
    out: List[str] = []
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t in ("__attribute__", "__attribute") and i + 1 < len(tokens) and tokens[i + 1] == "(":
            depth = 0
            i += 1
            while i < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[i], 0)
                i += 1
                if depth == 0:
                    break
            continue
        if t not in ("__extension__", "const", "volatile", "__restrict", "__restrict__"):
            out.append(t)
        i += 1
    return out


def _split_by_file(text: str, default: str) -> Iterator[Tuple[str, str]]:
    """Yield (file, logical line) for every line, following gcc's line markers."""
    text = _COMMENT_RE.sub(" ", text.replace("\\\n", ""))
    current = default
    for line in text.splitlines():
        stripped = line.strip()
        marker = _LINEMARKER_RE.match(stripped)
        if marker:
            current = marker.group(1)
            continue
        yield current, line


class _Tokens:
    def __init__(self, tokens: Sequence[str], header: str):
        self.t = list(tokens)
        self.i = 0
        self.header = header

    def peek(self, k: int = 0) -> Optional[str]:
        j = self.i + k
        return self.t[j] if j < len(self.t) else None

    def next(self) -> str:
        if self.i >= len(self.t):
            raise ParseError(f"{self.header}: unexpected end of input")
        tok = self.t[self.i]
        self.i += 1
        return tok

    def expect(self, tok: str) -> None:
        got = self.next()
        if got != tok:
            raise ParseError(f"{self.header}: expected {tok!r}, got {got!r} near {self.context()}")

    def context(self) -> str:
        return " ".join(self.t[max(0, self.i - 6): self.i + 6])

    def until_semicolon(self) -> List[str]:
        """Tokens up to the next ';' at bracket depth 0 (the ';' is consumed)."""
        out: List[str] = []
        depth = 0
        while True:
            tok = self.next()
            if tok in "([{":
                depth += 1
            elif tok in ")]}":
                depth -= 1
            elif tok == ";" and depth == 0:
                return out
            out.append(tok)

    def skip_balanced(self) -> None:
        """Skip a bracketed group starting at the current token."""
        depth = 0
        while True:
            tok = self.next()
            if tok in "([{":
                depth += 1
            elif tok in ")]}":
                depth -= 1
                if depth == 0:
                    return


def _is_ident(tok: Optional[str]) -> bool:
    return tok is not None and re.fullmatch(r"[A-Za-z_]\w*", tok) is not None


def _split_top(tokens: Sequence[str], sep: str) -> List[List[str]]:
    parts: List[List[str]] = [[]]
    depth = 0
    for tok in tokens:
        if tok in "([{":
            depth += 1
        elif tok in ")]}":
            depth -= 1
        if tok == sep and depth == 0:
            parts.append([])
        else:
            parts[-1].append(tok)
    return parts


def _declarator(tokens: Sequence[str], base: str, header: str) -> Member:
    """`* name [N][M] : bits` -> Member (base type already known)."""
    toks = list(tokens)
    bits = None
    if ":" in toks:
        k = toks.index(":")
        bits = " ".join(toks[k + 1:])
        toks = toks[:k]
    stars = 0
    while toks and toks[0] == "*":
        stars += 1
        toks.pop(0)
    if toks and toks[0] == "(":
        raise ParseError(f"{header}: function-pointer or parenthesised declarator not supported: "
                         f"{' '.join(tokens)}")
    if not toks or not _is_ident(toks[0]):
        raise ParseError(f"{header}: cannot find a member name in {' '.join(tokens)!r} (type {base})")
    name = toks.pop(0)
    dims = []
    while toks:
        if toks[0] != "[":
            raise ParseError(f"{header}: unexpected {toks[0]!r} after member {name}")
        depth, end = 0, 0
        for end, tok in enumerate(toks):
            depth += {"[": 1, "]": -1}.get(tok, 0)
            if depth == 0:
                break
        dims.append(" ".join(toks[1:end]))
        toks = toks[end + 1:]
    type_ = base + (" " + "*" * stars if stars else "")
    return Member(name=name, type=type_, dims=tuple(dims), bits=bits)


class _Parser:
    def __init__(self, parse: Parse):
        self.parse = parse

    def parse_tokens(self, tokens: Sequence[str], header: str) -> None:
        ts = _Tokens(_strip_attributes(list(tokens)), header)
        while ts.peek() is not None:
            self._top_level(ts)

    # top level ---------------------------------------------------------------------------
    def _top_level(self, ts: _Tokens) -> None:
        tok = ts.peek()
        if tok == ";":
            ts.next()
            return
        if tok == "typedef":
            ts.next()
            if self._at_aggregate_body(ts):
                self._aggregate(ts)
            elif ts.peek() == "enum" and self._at_enum_body(ts):
                self._enum(ts)
            self._skip_declaration(ts)
            return
        if tok in ("struct", "union") and self._at_aggregate_body(ts):
            self._aggregate(ts)
            self._skip_declaration(ts)  # `} name;` or just `;`
            return
        if tok == "enum" and self._at_enum_body(ts):
            self._enum(ts)
            self._skip_declaration(ts)
            return
        self._skip_declaration(ts)

    @staticmethod
    def _at_aggregate_body(ts: _Tokens) -> bool:
        if ts.peek() not in ("struct", "union"):
            return False
        return ts.peek(1) == "{" or (_is_ident(ts.peek(1)) and ts.peek(2) == "{")

    @staticmethod
    def _at_enum_body(ts: _Tokens) -> bool:
        return ts.peek() == "enum" and (ts.peek(1) == "{" or (_is_ident(ts.peek(1)) and ts.peek(2) == "{"))

    @staticmethod
    def _skip_declaration(ts: _Tokens) -> None:
        """Skip to the end of a declaration: `;`, or the `}` closing a function body."""
        depth = 0
        while True:
            tok = ts.peek()
            if tok is None:
                return
            if tok == "{" and depth == 0:
                ts.skip_balanced()
                if ts.peek() == ";":
                    ts.next()
                return
            ts.next()
            if tok in "([":
                depth += 1
            elif tok in ")]":
                depth -= 1
            elif tok == ";" and depth == 0:
                return

    # aggregates --------------------------------------------------------------------------
    def _aggregate(self, ts: _Tokens) -> Aggregate:
        kind = ts.next()
        tag = ts.next() if _is_ident(ts.peek()) else None
        ts.expect("{")
        members: List[Member] = []
        while ts.peek() != "}":
            if ts.peek() is None:
                raise ParseError(f"{ts.header}: unterminated {kind} {tag or ''}")
            members.extend(self._member_declaration(ts))
        ts.expect("}")
        agg = Aggregate(kind=kind, tag=tag, members=members, header=ts.header)
        if tag is not None and tag not in self.parse.aggregates:
            self.parse.aggregates[tag] = agg
        return agg

    def _member_declaration(self, ts: _Tokens) -> List[Member]:
        if ts.peek() == ";":
            ts.next()
            return []
        if self._at_aggregate_body(ts):
            body = self._aggregate(ts)
            base = body.kind if body.tag is None else f"{body.kind} {body.tag}"
            rest = ts.until_semicolon()
            if not rest:
                if body.tag is not None:
                    return []  # a nested tagged declaration, not a member
                return [Member(name=None, type=base, body=body)]
            out = []
            for piece in _split_top(rest, ","):
                m = _declarator(piece, base, ts.header)
                if not m.dims and "*" not in m.type:
                    m.body = body
                out.append(m)
            return out
        if self._at_enum_body(ts):
            tag = self._enum(ts)
            base = f"enum {tag}" if tag else "enum"
            return [_declarator(p, base, ts.header) for p in _split_top(ts.until_semicolon(), ",")]
        decl = ts.until_semicolon()
        pieces = _split_top(decl, ",")
        first = pieces[0]
        # Base type = leading words up to the declarator of the first piece.
        stop = len(first)
        for k, tok in enumerate(first):
            if tok in ("[", ":"):
                stop = k
                break
        name_at = max((k for k in range(stop) if _is_ident(first[k])), default=None)
        if name_at is None or name_at == 0:
            raise ParseError(f"{ts.header}: cannot parse member declaration {' '.join(decl)!r}")
        type_end = name_at
        while type_end > 0 and first[type_end - 1] == "*":
            type_end -= 1
        base_tokens = first[:type_end]
        tagged = base_tokens[:1] in (["struct"], ["union"], ["enum"])
        if not base_tokens or not all(_is_ident(t) for t in base_tokens) or (tagged and len(base_tokens) != 2):
            raise ParseError(f"{ts.header}: cannot parse member declaration {' '.join(decl)!r}")
        base = " ".join(base_tokens)
        out = [_declarator(first[type_end:], base, ts.header)]
        out.extend(_declarator(p, base, ts.header) for p in pieces[1:])
        return out

    # enums -------------------------------------------------------------------------------
    def _enum(self, ts: _Tokens) -> Optional[str]:
        ts.expect("enum")
        tag = ts.next() if _is_ident(ts.peek()) else None
        ts.expect("{")
        body = []
        depth = 0
        while True:
            tok = ts.next()
            if tok in "([{":
                depth += 1
            elif tok in ")]":
                depth -= 1
            elif tok == "}":
                if depth == 0:
                    break
                depth -= 1
            body.append(tok)
        for item in _split_top(body, ","):
            if not item:
                continue
            if not _is_ident(item[0]) or (len(item) > 1 and item[1] != "="):
                raise ParseError(f"{ts.header}: bad enumerator {' '.join(item)!r}")
            expr = " ".join(item[2:]) if len(item) > 1 else None
            self.parse.enums.append(EnumConst(name=item[0], expr=expr, enum=tag, header=ts.header))
        return tag


def parse_text(text: str, header: str = "<input>", wanted: Optional[Dict[str, str]] = None) -> Parse:
    """Parse C declarations.

    ``text`` may be a plain header or ``gcc -E -dD`` output.  With ``wanted``
    (resolved file path -> header name), only lines coming from those files are
    parsed and each declaration is labelled with its header name; otherwise
    everything is parsed and labelled ``header``.
    """
    parse = Parse()
    runs: Dict[str, List[str]] = {}
    order: List[str] = []
    for path, line in _split_by_file(text, header):
        name = header if wanted is None else wanted.get(path)
        if name is None:
            continue
        if path != header:
            parse.files.setdefault(name, path)
        stripped = line.strip()
        if stripped.startswith("#"):
            d = _DEFINE_RE.match(stripped)
            if d and not d.group(2):
                parse.defines[d.group(1)] = Define(d.group(1), d.group(3).strip(), name)
            u = _UNDEF_RE.match(stripped)
            if u:
                parse.defines.pop(u.group(1), None)
            continue
        if name not in runs:
            runs[name] = []
            order.append(name)
        runs[name].append(line)
    parser = _Parser(parse)
    for name in order:
        parser.parse_tokens(tokenize("\n".join(runs[name])), name)
    return parse


def integer_defines(defines: Dict[str, Define], names: Iterable[str]) -> List[str]:
    """The subset of ``names`` whose value is an integer expression (possibly of other such defines)."""
    ok: Dict[str, bool] = {}

    def plain(name: str, seen: Tuple[str, ...] = ()) -> bool:
        if name in ok:
            return ok[name]
        d = defines.get(name)
        result = False
        if d is not None and d.value and name not in seen:
            toks = _INT_EXPR_TOKEN_RE.findall(d.value)
            if "".join(toks) == re.sub(r"\s+", "", d.value):
                idents = [t for t in toks if _is_ident(t)]
                result = any(t[0].isdigit() for t in toks) or bool(idents)
                result = result and all(plain(t, seen + (name,)) for t in idents)
        ok[name] = result
        return result

    return [n for n in names if plain(n)]


# --------------------------------------------------------------------------------------------
# Flattening and the C probe


@dataclass
class FieldSpec:
    path: str
    type: str
    dims: Tuple[str, ...]
    be: bool
    declared_in: Optional[str]  # None: declared in this aggregate; else the named type declaring it
    bits: Optional[str] = None


def flatten(agg: Aggregate, aggregates: Dict[str, Aggregate]) -> List[FieldSpec]:
    """Every member reachable by a C member designator, as dotted paths, in declaration order."""
    out: List[FieldSpec] = []

    def walk(a: Aggregate, prefix: str, owner: Optional[str], stack: Tuple[str, ...]) -> None:
        for m in a.members:
            if m.name is None:
                assert m.body is not None
                walk(m.body, prefix, owner, stack)
                continue
            path = prefix + m.name
            base = m.type.split(" *")[0]
            out.append(FieldSpec(path, m.type, m.dims, base in BE_TYPES, owner, m.bits))
            if m.dims or m.bits or "*" in m.type:
                continue
            if m.body is not None:
                walk(m.body, path + ".", owner if m.body.tag is None else m.body.tag, stack)
            elif m.type.split(" ")[0] in ("struct", "union"):
                tag = m.type.split(" ", 1)[1]
                if tag in aggregates and tag not in stack:
                    walk(aggregates[tag], path + ".", tag, stack + (tag,))

    walk(agg, "", None, (agg.tag or "",))
    return out


def _referenced_tags(agg: Aggregate) -> Iterator[str]:
    for m in agg.members:
        if m.body is not None:
            yield from _referenced_tags(m.body)
        parts = m.type.split(" *")[0].split(" ")
        if parts[0] in ("struct", "union") and len(parts) == 2:
            yield parts[1]


def select(parse: Parse, headers: Sequence[HeaderSpec]) -> Tuple[List[str], List[EnumConst], List[str]]:
    """Choose what to record: aggregate tags (with the tags they use), enum constants, defines."""
    tags: List[str] = []
    present = {h.path for h in headers}
    for spec in headers:
        if isinstance(spec.structs, str):
            tags += [t for t, a in parse.aggregates.items() if a.header == spec.path]
        else:
            for t in spec.structs:
                if t not in parse.aggregates:
                    raise ParseError(f"struct {t} not found in {spec.path}")
                tags.append(t)
    todo = list(tags)
    while todo:
        for t in _referenced_tags(parse.aggregates[todo.pop()]):
            if t in parse.aggregates and t not in tags and parse.aggregates[t].header in present:
                tags.append(t)
                todo.append(t)
    enum_headers = {h.path for h in headers if h.enums}
    enums = [e for e in parse.enums if e.header in enum_headers]
    define_names: List[str] = []
    for spec in headers:
        if spec.defines is True:
            names = [d.name for d in parse.defines.values() if d.header == spec.path]
        elif isinstance(spec.defines, tuple):
            names = [n for n in spec.defines if n in parse.defines]
        else:
            continue
        define_names += integer_defines(parse.defines, names)
    return sorted(set(tags)), enums, sorted(set(define_names))


def probe_source(parse: Parse, headers: Sequence[HeaderSpec]) -> str:
    """The C program that prints the layout of ``parse``'s selection as one flat JSON object."""
    tags, enums, defines = select(parse, headers)
    lines = [
        "#include <stddef.h>",
        "#include <stdio.h>",
        "#include <linux/version.h>",
        *[f"#include <{h.path}>" for h in headers],
        'static const char *sep = "";',
        "static void pr(const char *key, int neg, long long s, unsigned long long u)",
        "{",
        '\tprintf("%s\\n\\"%s\\": ", sep, key);',
        '\tsep = ",";',
        '\tif (neg) printf("%lld", s); else printf("%llu", u);',
        "}",
        "#define P(key, x) pr(key, (x) < 0, (long long)(x), (unsigned long long)(x))",
        "int main(void)",
        "{",
        '\tprintf("{");',
        '\tP("version:code", LINUX_VERSION_CODE);',
        "#ifdef LINUX_VERSION_SUBLEVEL",
        '\tP("version:sublevel", LINUX_VERSION_SUBLEVEL);',
        "#endif",
    ]
    for tag in tags:
        agg = parse.aggregates[tag]
        ctype = f"{agg.kind} {tag}"
        lines.append(f'\tP("sizeof:{tag}", sizeof({ctype}));')
        lines.append(f'\tP("alignof:{tag}", _Alignof({ctype}));')
        for f in flatten(agg, parse.aggregates):
            if f.bits is not None:
                raise ParseError(f"{tag}.{f.path}: bit-fields have no offset; not supported")
            key = f"{tag}:{f.path}"
            lines.append(f'\tP("offsetof:{key}", offsetof({ctype}, {f.path}));')
            if f.dims and f.dims[0] != "":
                lines.append(f'\tP("size:{key}", sizeof((({ctype} *)0)->{f.path}));')
            if f.dims:
                lines.append(f'\tP("elem:{key}", sizeof((({ctype} *)0)->{f.path}{"[0]" * len(f.dims)}));')
            else:
                lines.append(f'\tP("size:{key}", sizeof((({ctype} *)0)->{f.path}));')
    for e in enums:
        lines.append(f'\tP("enum:{e.name}", {e.name});')
    for d in defines:
        lines.append(f'\tP("define:{d}", {d});')
    lines += ['\tprintf("\\n}\\n");', "\treturn 0;", "}", ""]
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Running gcc


def _run(cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(cmd), check=True, capture_output=True, text=True, **kw)
    except FileNotFoundError as exc:
        raise ProbeUnavailable(f"{cmd[0]} not found: install it (e.g. apt-get install gcc)") from exc
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"{' '.join(cmd)} failed ({exc.returncode}):\n{exc.stderr.strip()}") from exc


@functools.lru_cache(maxsize=None)
def multiarch() -> str:
    """The compiler's multiarch triplet (the name of the arch-specific include directory)."""
    out = _run(["gcc", "-print-multiarch"]).stdout.strip()
    return out or _run(["gcc", "-dumpmachine"]).stdout.strip()


def include_flags(include_dir: Path) -> List[str]:
    flags = ["-I", str(include_dir)]
    arch_dir = include_dir / multiarch()
    if arch_dir.is_dir():
        flags += ["-I", str(arch_dir)]
    return flags


def installed_include_dir() -> Path:
    """Where the compiler finds <linux/version.h> by default (the installed uapi headers)."""
    try:
        out = _run(["gcc", "-E", "-x", "c", "-"], input="#include <linux/version.h>\n").stdout
    except ProbeUnavailable:
        raise
    except RuntimeError as exc:
        raise ProbeUnavailable(f"no installed kernel uapi headers (linux-libc-dev): {exc}") from exc
    for m in _LINEMARKER_RE.finditer(out):
        p = Path(m.group(1))
        if p.name == "version.h" and p.parent.name == "linux":
            return p.parent.parent
    raise ProbeUnavailable("cannot locate <linux/version.h>")


def _headers_present(include_dir: Path) -> List[HeaderSpec]:
    specs = []
    for h in HEADERS:
        if (include_dir / h.path).is_file():
            specs.append(h)
        elif not h.optional:
            raise ProbeUnavailable(f"{h.path} missing under {include_dir} (package linux-libc-dev)")
    for rel in ("linux/version.h", "linux/types.h"):
        if not (include_dir / rel).is_file():
            raise ProbeUnavailable(f"{rel} missing under {include_dir} (package linux-libc-dev)")
    return specs


def _same_file(a: str, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def probe(include_dir, keep_dir: Optional[Path] = None) -> dict:
    """Measure the rdma_cm uAPI in ``include_dir`` (a ``usr/include`` tree). Returns the layout dict."""
    include_dir = Path(include_dir).resolve()
    headers = _headers_present(include_dir)
    flags = include_flags(include_dir)
    # linux/types.h spells __aligned_u64 & co. as macros (a type plus an alignment
    # attribute).  Undefine them for the parse so members keep their declared type
    # names; the compiled probe sees the real definitions.
    types_h = (include_dir / "linux/types.h").read_text()
    keep = re.findall(r"^\s*#\s*define\s+(\w+)\s+\w+\s+__attribute__", types_h, re.M)
    prelude = "#include <linux/types.h>\n" + "".join(f"#undef {name}\n" for name in keep)
    prelude += "".join(f"#include <{h.path}>\n" for h in headers)
    pre = _run(["gcc", "-E", "-dD", *flags, "-x", "c", "-"], input=prelude).stdout

    # Map the files gcc actually used to header names, and insist they are ours.
    wanted: Dict[str, str] = {}
    for m in _LINEMARKER_RE.finditer(pre):
        path = m.group(1)
        for h in headers:
            if path.endswith("/" + h.path) and _same_file(path, include_dir / h.path):
                wanted[path] = h.path
        if "/asm/" in path and include_dir not in Path(os.path.normpath(path)).parents:
            raise RuntimeError(f"{path} does not come from {include_dir}: asm headers of another tree")
    missing = {h.path for h in headers} - set(wanted.values())
    if missing:
        raise RuntimeError(f"gcc did not read {sorted(missing)} from {include_dir}")
    parse = parse_text(pre, wanted=wanted)
    source = probe_source(parse, headers)

    tmp = Path(tempfile.mkdtemp(prefix="abi_probe.")) if keep_dir is None else Path(keep_dir)
    try:
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / "probe.c").write_text(source)
        _run(["gcc", "-std=gnu11", "-w", *flags, "-o", str(tmp / "probe"), str(tmp / "probe.c")])
        raw = json.loads(_run([str(tmp / "probe")]).stdout)
    finally:
        if keep_dir is None:
            shutil.rmtree(tmp, ignore_errors=True)
    layout = _assemble(parse, headers, raw)
    layout["arch"] = multiarch()
    layout["packages"] = packages(include_dir)
    return layout


def _assemble(parse: Parse, headers: Sequence[HeaderSpec], raw: Dict[str, int]) -> dict:
    tags, enums, defines = select(parse, headers)
    code = raw["version:code"]
    sub = raw.get("version:sublevel", code & 0xFF)
    structs = {}
    for tag in tags:
        agg = parse.aggregates[tag]
        fields = {}
        for f in flatten(agg, parse.aggregates):
            key = f"{tag}:{f.path}"
            entry: Dict[str, object] = {"offset": raw[f"offsetof:{key}"], "type": f.type}
            if f.dims:
                entry["elem_size"] = raw[f"elem:{key}"]
                if f.dims[0] in ("", "0"):  # [] or the older headers' [0]: the same flexible array
                    entry["count"] = 0
                    entry["flexible"] = True
                    entry["size"] = 0
                else:
                    size, elem = raw[f"size:{key}"], raw[f"elem:{key}"]
                    entry["size"] = size
                    entry["count"] = size // elem if elem else 0
            else:
                entry["size"] = raw[f"size:{key}"]
            if f.be:
                entry["be"] = True
            if f.declared_in:
                entry["declared_in"] = f.declared_in
            fields[f.path] = entry
        structs[tag] = {
            "kind": agg.kind,
            "header": agg.header,
            "size": raw[f"sizeof:{tag}"],
            "align": raw[f"alignof:{tag}"],
            "fields": fields,
        }
    return {
        "schema": SCHEMA,
        "linux_version": f"{code >> 16}.{(code >> 8) & 0xFF}.{sub}",
        "linux_version_code": code,
        "headers": sorted(h.path for h in headers),
        "structs": structs,
        "enums": {e.name: {"value": raw[f"enum:{e.name}"], "enum": e.enum, "header": e.header} for e in enums},
        "defines": {d: {"value": raw[f"define:{d}"], "header": parse.defines[d].header} for d in defines},
    }


def packages(include_dir: Path) -> Dict[str, str]:
    """Package name -> version of the headers in ``include_dir`` (from `fetch`'s record or dpkg)."""
    record = include_dir.parent.parent / SOURCE_FILE
    if record.is_file():
        return dict(json.loads(record.read_text())["packages"])
    paths = [str(include_dir / rel) for rel in ("linux/version.h", "rdma/rdma_user_cm.h", "infiniband/ib.h")]
    try:
        owners = _run(["dpkg-query", "-S", *[p for p in paths if os.path.isfile(p)]]).stdout
        names = sorted({line.split(":")[0].strip() for line in owners.splitlines() if ":" in line})
        listing = _run(["dpkg-query", "-W", "-f=${Package} ${Version}\\n", *names]).stdout
    except (ProbeUnavailable, RuntimeError):
        return {}
    return dict(line.split(" ", 1) for line in listing.splitlines() if " " in line)


@functools.lru_cache(maxsize=None)
def _installed_layout_cached() -> str:
    return json.dumps(probe(installed_include_dir()))


def installed_layout() -> dict:
    """The layout of the installed uapi headers (probed once per process; a fresh copy each call)."""
    return json.loads(_installed_layout_cached())


def load_layout(suite: str) -> dict:
    """The committed layout abi/layout/<suite>.json."""
    return json.loads((LAYOUT_DIR / f"{suite}.json").read_text())


def series(layout: dict) -> str:
    """"6.1" for a layout of Linux 6.1.x."""
    return ".".join(layout["linux_version"].split(".")[:2])


def matching_suite(layout: dict) -> Optional[str]:
    """The committed suite whose kernel series equals ``layout``'s, if any."""
    for suite in SUITES:
        path = LAYOUT_DIR / f"{suite}.json"
        if path.is_file() and series(load_layout(suite)) == series(layout):
            return suite
    return None


# --------------------------------------------------------------------------------------------
# JSON output: sorted, one leaf object per line


def dumps(obj, indent: int = 0) -> str:
    """Stable JSON: keys sorted (except struct "fields", kept in declaration order), leaves on one line."""

    def leaf(v) -> bool:
        values = v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
        return all(not isinstance(x, (dict, list)) for x in values)

    def one_line(v) -> str:
        return json.dumps(v, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)

    pad = " " * (indent + 1)
    if leaf(obj):
        return one_line(obj)
    if isinstance(obj, list):
        return "[\n" + ",\n".join(pad + dumps(v, indent + 1) for v in obj) + "\n" + " " * indent + "]"
    keys = list(obj) if obj.get("__ordered__") else sorted(obj)
    items = []
    for k in keys:
        if k == "__ordered__":
            continue
        v = obj[k]
        if k == "fields" and isinstance(v, dict):
            v = dict(v, __ordered__=True)
        items.append(f"{pad}{json.dumps(k)}: {dumps(v, indent + 1)}")
    return "{\n" + ",\n".join(items) + "\n" + " " * indent + "}"


def write_json(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(dumps(obj) + "\n")


# --------------------------------------------------------------------------------------------
# Fetching other suites' headers with a private apt state


def _apt_source_files() -> List[Path]:
    out = _run(["apt-config", "shell", "ROOT", "Dir", "ETC", "Dir::Etc", "LIST", "Dir::Etc::sourcelist",
                "PARTS", "Dir::Etc::sourceparts"]).stdout
    conf = dict(re.findall(r"^(\w+)='(.*)'$", out, re.M))
    etc = Path(conf.get("ROOT", "/")) / conf.get("ETC", "etc/apt")
    files = [etc / conf.get("LIST", "sources.list")]
    parts = etc / conf.get("PARTS", "sources.list.d")
    if parts.is_dir():
        files += sorted(parts.glob("*.sources")) + sorted(parts.glob("*.list"))
    return [f for f in files if f.is_file()]


def debian_mirror() -> Tuple[str, Optional[str]]:
    """(mirror URL, signed-by keyring) of the machine's Debian archive source (not -security)."""
    for path in _apt_source_files():
        text = path.read_text()
        if path.suffix == ".sources":
            for stanza in re.split(r"\n\s*\n", text):
                fields = dict(
                    (k.lower(), v.strip())
                    for k, v in re.findall(r"^([A-Za-z-]+):[ \t]*(.*)$", stanza, re.M)
                )
                suites = fields.get("suites", "").split()
                if "deb" not in fields.get("types", "").split() or not fields.get("uris"):
                    continue
                if suites and all("security" in s for s in suites):
                    continue
                uri = fields["uris"].split()[0]
                if "security" in uri:
                    continue
                return uri.rstrip("/"), fields.get("signed-by")
        else:
            for line in text.splitlines():
                m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m and "security" not in m.group(2) + m.group(3):
                    signed = re.search(r"signed-by=(\S+?)[\s\]]", m.group(1) or "")
                    return m.group(2).rstrip("/"), signed.group(1) if signed else None
    raise ProbeUnavailable("no Debian archive found in the apt sources")


def fetch(suite: str) -> Path:
    """Download and unpack the suite's headers into build/abi/headers/<suite>; returns its usr/include."""
    mirror, keyring = debian_mirror()
    state = BUILD_DIR / "apt" / suite
    lists, cache, debs = state / "lists", state / "cache", state / "debs"
    for d in (lists / "partial", cache / "archives" / "partial", debs):
        d.mkdir(parents=True, exist_ok=True)
    options = f"[signed-by={keyring}] " if keyring else ""
    (state / "sources.list").write_text(f"deb {options}{mirror} {suite} main\n")
    (state / "status").write_text("")  # what this machine has installed must not pick the version
    apt = [
        "-q",
        "-o", f"Dir::Etc::SourceList={state / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={lists}",
        "-o", f"Dir::Cache={cache}",
        "-o", f"Dir::State::status={state / 'status'}",
    ]
    _run(["apt-get", *apt, "update"])
    for old in debs.glob("*.deb"):
        old.unlink()
    _run(["apt-get", *apt, "download", *FETCH_PACKAGES], cwd=debs)
    root = HEADERS_DIR / suite
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    versions = {}
    for deb in sorted(debs.glob("*.deb")):
        _run(["dpkg-deb", "-x", str(deb), str(root)])
        versions[_run(["dpkg-deb", "-f", str(deb), "Package"]).stdout.strip()] = _run(
            ["dpkg-deb", "-f", str(deb), "Version"]).stdout.strip()
    (root / SOURCE_FILE).write_text(json.dumps({"suite": suite, "packages": versions}, sort_keys=True) + "\n")
    return root / "usr" / "include"


# --------------------------------------------------------------------------------------------
# since.json


def parse_version(text: str) -> Tuple[int, ...]:
    return tuple(int(p) for p in text.split("."))


def since_bounds(since: str) -> Tuple[Optional[Tuple[int, ...]], Tuple[int, ...]]:
    """"6.17" -> (6.17, 6.17); "<=6.1" -> (None, 6.1); "6.13..7.2" -> (6.13, 7.2)."""
    if since.startswith("<="):
        return None, parse_version(since[2:])
    if ".." in since:
        lo, hi = since.split("..")
        return parse_version(lo), parse_version(hi)
    v = parse_version(since)
    return v, v


def _next_release(v: Tuple[int, ...]) -> str:
    """The release after series v, as far as headers can tell (6.12 -> 6.13)."""
    return f"{v[0]}.{v[1] + 1}"


def items(layout: dict) -> Dict[str, Dict[str, str]]:
    """Everything since.json must date, by section: commands, enums, defines, structs, fields (own only)."""
    out: Dict[str, Dict[str, str]] = {"commands": {}, "enums": {}, "defines": {}, "structs": {}, "fields": {}}
    for name, e in layout["enums"].items():
        out["commands" if name.startswith("RDMA_USER_CM_CMD_") else "enums"][name] = e["header"]
    for name, d in layout["defines"].items():
        out["defines"][name] = d["header"]
    for tag, s in layout["structs"].items():
        out["structs"][tag] = s["header"]
        for path, f in s["fields"].items():
            if not f.get("declared_in"):
                out["fields"][f"{tag}.{path}"] = s["header"]
    return out


# Facts that refine what the headers prove (from abi-notes.md), by source; since.json cites the
# source key.  confidence: "history" = commit/changelog history; "recalled" = not re-verified;
# "unverified" = the release is only bracketed.
SOURCES: Dict[str, str] = {
    "orig": "abi-notes §0 command table: part of the original (2.6.x) ucma ABI",
    "af_ib": "abi-notes §0 command table: QUERY, BIND, RESOLVE_ADDR (AF_IB support) arrived in 3.11",
    "join_mcast": "abi-notes §0 command table: JOIN_MCAST and multicast join flags, commit ab15c95a17b3, 4.9",
    "event_reserved": "abi-notes §0: event_resp.reserved from the 2018 32/64-bit uABI compat series (4.17); "
                      "rdma-core sync 540f9d70b 'Update kernel headers to 366380a0c835'",
    "ece": "abi-notes §0: ECE (event_resp.ece, connect/accept ece) in 5.8; rdma-core sync c80296afa 2020-06-03",
    "ibdev_index": "abi-notes §0: kernel 17793833f81c 'RDMA/ucma: Return stable IB device index as identifier' "
                   "(5.8); rdma-core sync d92ca9331",
    "ib_service": "abi-notes §0: RESOLVE_IB_SERVICE series (QUERY option IB_SERVICE, ib_user_service_rec), "
                  "6.17, inferred from rdma-core header sync 2025-08-18 to 810f874eda8e",
    "write_cm_event": "abi-notes §0: WRITE_CM_EVENT (and event_resp.param.arg32) posted 2025-06-30 as 5/5 of "
                      "the RESOLVE_IB_SERVICE series; rdma-core synced it 2026-01-07 (to aaecff5e13cd); "
                      "upstream somewhere in 6.17-6.19, exact release unverified",
    "ib_service_fix": "abi-notes §2.6: 2026 fix of the IB service ABI (explicit reserved fields, __aligned_u64 "
                      "service_id), rdma-core sync 8a0194ef8 2026-03-08; x86_64 offsets unchanged since 6.17 "
                      "(the padding was implicit); kernel release not pinned down",
    "sockaddr_ib": "sockaddr_ib (rdma-core <infiniband/ib.h>, not kernel uAPI) is the AF_IB address of the "
                   "3.11 commands (abi-notes §0)",
}


CONFIDENCE = ("header", "code", "history", "recalled", "unverified")


def _fact(since: str, confidence: str, source: str, lab: Optional[Dict[str, List[str]]] = None) -> dict:
    assert source in SOURCES
    fact = {"since": since, "confidence": confidence, "source": source}
    if lab:
        fact["lab"] = lab
    return fact


#: what the lab's Debian kernels answered (the kernel tier's tests of the command or option:
#: EINVAL from ucma_write's table bound where the command is absent, ENOSYS for an option):
#: the series, not the Debian release
LAB_IB_SERVICE = {"absent": ["5.10", "6.1", "6.12"], "present": ["7.2"]}


_ORIG = _fact("<=2.6.39", "recalled", "orig")
_AF_IB = _fact("3.11", "recalled", "af_ib")
_JOIN_MCAST = _fact("4.9", "recalled", "join_mcast")
_ECE = _fact("5.8", "history", "ece")
_IBDEV_INDEX = _fact("5.8", "history", "ibdev_index")
_IB_SERVICE = _fact("6.17", "history", "ib_service")
_IB_SERVICE_LAB = _fact("6.17", "history", "ib_service", LAB_IB_SERVICE)
_WRITE_EVENT = _fact("6.17..6.19", "unverified", "write_cm_event")
_WRITE_EVENT_LAB = _fact("6.17..6.19", "unverified", "write_cm_event", LAB_IB_SERVICE)
_IB_SERVICE_FIX = _fact("6.18..7.2", "unverified", "ib_service_fix")

KNOWN_SINCE: Dict[str, Dict[str, dict]] = {
    "commands": {
        **{f"RDMA_USER_CM_CMD_{c}": _ORIG for c in (
            "CREATE_ID", "DESTROY_ID", "BIND_IP", "RESOLVE_IP", "RESOLVE_ROUTE", "QUERY_ROUTE", "CONNECT",
            "LISTEN", "ACCEPT", "REJECT", "DISCONNECT", "INIT_QP_ATTR", "GET_EVENT", "GET_OPTION",
            "SET_OPTION", "NOTIFY", "JOIN_IP_MCAST", "LEAVE_MCAST", "MIGRATE_ID")},
        "RDMA_USER_CM_CMD_QUERY": _AF_IB,
        "RDMA_USER_CM_CMD_BIND": _AF_IB,
        "RDMA_USER_CM_CMD_RESOLVE_ADDR": _AF_IB,
        "RDMA_USER_CM_CMD_JOIN_MCAST": _JOIN_MCAST,
        "RDMA_USER_CM_CMD_RESOLVE_IB_SERVICE": _IB_SERVICE_LAB,
        "RDMA_USER_CM_CMD_WRITE_CM_EVENT": _WRITE_EVENT_LAB,
    },
    "enums": {
        "RDMA_USER_CM_QUERY_ADDR": _AF_IB,
        "RDMA_USER_CM_QUERY_PATH": _AF_IB,
        "RDMA_USER_CM_QUERY_GID": _AF_IB,
        "RDMA_USER_CM_QUERY_IB_SERVICE": _IB_SERVICE_LAB,
        "RDMA_USER_CM_IB_SERVICE_FLAG_ID": _IB_SERVICE,
        "RDMA_USER_CM_IB_SERVICE_FLAG_NAME": _IB_SERVICE,
        "RDMA_MC_JOIN_FLAG_FULLMEMBER": _JOIN_MCAST,
        "RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER": _JOIN_MCAST,
        "RDMA_MC_JOIN_FLAG_RESERVED": _JOIN_MCAST,
    },
    "defines": {
        "RDMA_USER_CM_IB_SERVICE_NAME_SIZE": _IB_SERVICE,
        "AF_IB": _fact("3.11", "recalled", "sockaddr_ib"),
        "PF_IB": _fact("3.11", "recalled", "sockaddr_ib"),
    },
    "structs": {
        "rdma_ucm_query": _AF_IB,
        "rdma_ucm_query_addr_resp": _AF_IB,
        "rdma_ucm_query_path_resp": _AF_IB,
        "rdma_ucm_bind": _AF_IB,
        "rdma_ucm_resolve_addr": _AF_IB,
        "rdma_ucm_join_mcast": _JOIN_MCAST,
        "rdma_ucm_ece": _ECE,
        "rdma_ucm_ib_service": _IB_SERVICE,
        "rdma_ucm_resolve_ib_service": _IB_SERVICE,
        "rdma_ucm_query_ib_service_resp": _IB_SERVICE,
        "ib_user_service_rec": _IB_SERVICE,
        "rdma_ucm_write_cm_event": _WRITE_EVENT,
        "sockaddr_ib": _fact("3.11", "recalled", "sockaddr_ib"),
        "ib_addr": _fact("3.11", "recalled", "sockaddr_ib"),
    },
    "fields": {
        "rdma_ucm_event_resp.reserved": _fact("4.17", "history", "event_reserved"),
        "rdma_ucm_event_resp.ece": _ECE,
        "rdma_ucm_event_resp.param.arg32": _WRITE_EVENT,
        "rdma_ucm_connect.ece": _ECE,
        "rdma_ucm_accept.ece": _ECE,
        "rdma_ucm_query_route_resp.ibdev_index": _IBDEV_INDEX,
        "rdma_ucm_query_route_resp.reserved1": _IBDEV_INDEX,
        "rdma_ucm_query_addr_resp.ibdev_index": _IBDEV_INDEX,
        "rdma_ucm_query_addr_resp.reserved1": _IBDEV_INDEX,
        "rdma_ucm_resolve_ib_service.reserved": _IB_SERVICE_FIX,
        "rdma_ucm_query_ib_service_resp.reserved": _IB_SERVICE_FIX,
    },
}

# Fields that carry network byte order although the header declares a plain integer.
UNDECLARED_BE: Dict[str, str] = {
    "rdma_ucm_query_addr_resp.node_guid": "ucma.c ucma_query_device_addr: (__force __u64) copy of the device's "
                                          "__be64 node_guid",
    "rdma_ucm_query_route_resp.node_guid": "ucma.c ucma_query_route: (__force __u64) copy of the device's "
                                           "__be64 node_guid",
    "rdma_ucm_query_addr_resp.pkey": "ucma.c ucma_query_device_addr: (__force __u16) cpu_to_be16(pkey)",
    "ib_path_rec_data.path_rec": "ucma.c ucma_query_path: ib_sa_pack_path() writes the 64-byte SA PathRecord in "
                                 "wire format; decode it as bytes, not as host-order __u32",
}


SINCE_NOTES = [
    "since: 'X.Y' = first kernel release with it; '<=X.Y' = present in X.Y, earlier unknown; "
    "'A..B' = introduced in some release from A to B inclusive.",
    "confidence: header = proven by the suites' headers only; code/history = read in source or commit "
    "history; recalled = not re-verified; unverified = the release is not pinned down.",
    "lab: the kernel series of the lab's Debian kernels that answered without it (absent) and with it (present); "
    "it must agree with since.",
    "fields: members declared by the struct itself (inline unions included); a field that appeared with "
    "its struct carries the struct's entry.",
    "network_order_fields: big-endian on the wire; source 'header' = declared __be*, otherwise why a plain "
    "integer carries network order.",
    "Generated by tools/abi_probe.py (write / since) from abi/layout/*.json and its KNOWN_SINCE table; "
    "check with tools/abi_probe.py check-since.",
]


def build_since(layouts: Dict[str, dict]) -> dict:
    """since.json from the suites' layouts (oldest first) refined by KNOWN_SINCE."""
    ordered = sorted(layouts.items(), key=lambda kv: parse_version(series(kv[1])))
    newest = ordered[-1][1]
    present = {suite: items(layout) for suite, layout in ordered}

    def first_suite(section: str, name: str) -> int:
        return next(i for i, (s, _) in enumerate(ordered) if name in present[s][section])

    def proven(first: int) -> dict:
        hi = series(ordered[first][1])
        if first == 0:
            return {"since": f"<={hi}", "confidence": "header"}
        lo = _next_release(parse_version(series(ordered[first - 1][1])))
        return {"since": f"{lo}..{hi}", "confidence": "header"}

    out: dict = {
        "schema": SCHEMA,
        "notes": SINCE_NOTES,
        "suites": {s: l["linux_version"] for s, l in ordered},
        "sources": SOURCES,
    }
    for section in ("commands", "enums", "defines", "structs"):
        known = KNOWN_SINCE.get(section, {})
        out[section] = {
            name: dict(known.get(name) or proven(first_suite(section, name))) for name in items(newest)[section]
        }
    fields = {}
    for name in items(newest)["fields"]:
        tag = name.split(".", 1)[0]
        if name in KNOWN_SINCE["fields"]:
            fields[name] = dict(KNOWN_SINCE["fields"][name])
        elif first_suite("fields", name) == first_suite("structs", tag):
            fields[name] = dict(out["structs"][tag])
        else:
            fields[name] = proven(first_suite("fields", name))
    out["fields"] = fields
    declared = []
    for tag, s in newest["structs"].items():
        for path, f in s["fields"].items():
            if f.get("be") and not f.get("declared_in"):
                declared.append({"field": f"{tag}.{path}", "type": f["type"], "source": "header"})
    undeclared = [{"field": k, "type": _field(newest, k)["type"], "source": v} for k, v in UNDECLARED_BE.items()]
    out["network_order_fields"] = sorted(declared + undeclared, key=lambda e: e["field"])
    return out


def _field(layout: dict, dotted: str) -> dict:
    tag, path = dotted.split(".", 1)
    return layout["structs"][tag]["fields"][path]


def check_since(layouts: Dict[str, dict], since: dict) -> List[str]:
    """Problems in since.json against the layouts (empty list = consistent)."""
    problems = []
    ordered = sorted(layouts.items(), key=lambda kv: parse_version(series(kv[1])))
    present = {suite: items(layout) for suite, layout in ordered}
    newest_suite = ordered[-1][0]
    for section in ("commands", "enums", "defines", "structs", "fields"):
        entries = since.get(section, {})
        for name in present[newest_suite][section]:
            if name not in entries:
                problems.append(f"{section}: {name} (in {newest_suite}) has no since entry")
        for name, entry in entries.items():
            try:
                lo, hi = since_bounds(entry["since"])
            except (KeyError, ValueError):
                problems.append(f"{section}: {name}: bad since {entry!r}")
                continue
            if lo is not None and hi < lo:
                problems.append(f"{section}: {name}: empty range {entry['since']}")
            if entry.get("confidence") not in CONFIDENCE:
                problems.append(f"{section}: {name}: confidence {entry.get('confidence')!r} not one of {CONFIDENCE}")
            lab = entry.get("lab") or {}
            for v in lab.get("absent", []):
                if hi is not None and parse_version(v) >= hi:
                    problems.append(f"{section}: {name}: the lab saw it absent in {v}, yet since is {entry['since']}")
            for v in lab.get("present", []):
                if lo is not None and parse_version(v) < lo:
                    problems.append(f"{section}: {name}: the lab saw it in {v}, yet since is {entry['since']}")
            if "source" in entry and entry["source"] not in since.get("sources", {}):
                problems.append(f"{section}: {name}: source {entry['source']!r} not in sources")
            suites_with = [s for s, _ in ordered if name in present[s][section]]
            if not suites_with:
                problems.append(f"{section}: {name} is in no recorded header")
                continue
            for suite, layout in ordered:
                v = parse_version(series(layout))
                if name in present[suite][section]:
                    if lo is not None and lo > v:
                        problems.append(f"{section}: {name} is in {suite} ({series(layout)}) but since says "
                                        f"{entry['since']}")
                else:
                    if suites_with and parse_version(series(layouts[suites_with[0]])) < v:
                        problems.append(f"{section}: {name} present in {suites_with[0]} but gone from {suite}")
                    elif lo is None or lo <= v:
                        problems.append(f"{section}: {name} is absent from {suite} ({series(layout)}) so since "
                                        f"must be > {series(layout)}, not {entry['since']}")
            first = parse_version(series(layouts[suites_with[0]]))
            if hi > first:
                problems.append(f"{section}: {name} is in {suites_with[0]} ({series(layouts[suites_with[0]])}) "
                                f"but since claims as late as {entry['since']}")
    for name, entry in since.get("fields", {}).items():
        struct_entry = since.get("structs", {}).get(name.split(".", 1)[0])
        try:
            f_lo, _ = since_bounds(entry["since"])
            s_lo, _ = since_bounds(struct_entry["since"]) if struct_entry else (None, None)
        except (KeyError, ValueError):
            continue
        if f_lo is not None and s_lo is not None and f_lo < s_lo:
            problems.append(f"fields: {name} ({entry['since']}) predates its struct ({struct_entry['since']})")
    newest = layouts[newest_suite]
    for entry in since.get("network_order_fields", []):
        try:
            f = _field(newest, entry["field"])
        except KeyError:
            problems.append(f"network_order_fields: {entry['field']} not in {newest_suite}")
            continue
        if entry.get("source") == "header" and not f.get("be"):
            problems.append(f"network_order_fields: {entry['field']} is not declared __be*")
    listed = {e["field"] for e in since.get("network_order_fields", [])}
    for tag, s in newest["structs"].items():
        for path, f in s["fields"].items():
            if f.get("be") and not f.get("declared_in") and f"{tag}.{path}" not in listed:
                problems.append(f"network_order_fields: {tag}.{path} is __be* but not listed")
    return problems


# --------------------------------------------------------------------------------------------
# diff


def diff(old: dict, new: dict) -> List[str]:
    """Human-readable changes from layout ``old`` to ``new``."""
    lines = []
    for tag in sorted(set(new["structs"]) - set(old["structs"])):
        s = new["structs"][tag]
        lines.append(f"+ {s['kind']} {tag} ({s['size']} bytes, {s['header']})")
    for tag in sorted(set(old["structs"]) - set(new["structs"])):
        lines.append(f"- {old['structs'][tag]['kind']} {tag}")
    for tag in sorted(set(old["structs"]) & set(new["structs"])):
        a, b = old["structs"][tag], new["structs"][tag]
        if (a["size"], a["align"]) != (b["size"], b["align"]):
            lines.append(f"~ {tag}: size {a['size']} -> {b['size']}, align {a['align']} -> {b['align']}")
        own_a = {p: f for p, f in a["fields"].items() if not f.get("declared_in")}
        own_b = {p: f for p, f in b["fields"].items() if not f.get("declared_in")}
        for p in own_b:
            if p not in own_a:
                f = own_b[p]
                lines.append(f"+ {tag}.{p} ({f['type']}, offset {f['offset']}, size {f['size']})")
        for p in own_a:
            if p not in own_b:
                lines.append(f"- {tag}.{p}")
        for p in own_a.keys() & own_b.keys():
            fa, fb = own_a[p], own_b[p]
            changed = [k for k in ("offset", "size", "type", "count") if fa.get(k) != fb.get(k)]
            if changed:
                lines.append(f"~ {tag}.{p}: " + ", ".join(f"{k} {fa.get(k)} -> {fb.get(k)}" for k in changed))
    for section in ("enums", "defines"):
        a, b = old[section], new[section]
        for n in sorted(set(b) - set(a)):
            lines.append(f"+ {n} = {b[n]['value']}")
        for n in sorted(set(a) - set(b)):
            lines.append(f"- {n}")
        for n in sorted(set(a) & set(b)):
            if a[n]["value"] != b[n]["value"]:
                lines.append(f"~ {n}: {a[n]['value']} -> {b[n]['value']}")
    return lines


# --------------------------------------------------------------------------------------------
# Command line


def _suite_include(suite: str) -> Path:
    return HEADERS_DIR / suite / "usr" / "include"


def _layouts_on_disk() -> Dict[str, dict]:
    return {s: load_layout(s) for s in SUITES if (LAYOUT_DIR / f"{s}.json").is_file()}


def _cmd_fetch(args) -> int:
    for suite in args.suite or list(SUITES):
        inc = fetch(suite)
        print(f"{suite}: {json.loads((inc.parent.parent / SOURCE_FILE).read_text())['packages']}")
    return 0


def _cmd_write(args) -> int:
    t0 = time.monotonic()
    installed = None
    try:
        installed = probe(installed_include_dir())
        print(f"installed: Linux {installed['linux_version']} {installed['packages']} "
              f"({time.monotonic() - t0:.2f} s)")
    except ProbeUnavailable as exc:
        print(f"installed: not probed ({exc})")
    layouts = {}
    for suite, expected in SUITES.items():
        inc = _suite_include(suite)
        if inc.is_dir():
            t0 = time.monotonic()
            layout = probe(inc)
            print(f"{suite}: Linux {layout['linux_version']} {layout['packages']} ({time.monotonic() - t0:.2f} s)")
        elif installed is not None and expected is not None and series(installed) == expected:
            layout = dict(installed)
            print(f"{suite}: using the installed headers (Linux {layout['linux_version']})")
        else:
            print(f"{suite}: no headers; run `{Path(sys.argv[0]).name} fetch --suite {suite}`", file=sys.stderr)
            return 1
        if expected is not None and series(layout) != expected:
            print(f"{suite}: expected Linux {expected}, got {layout['linux_version']}", file=sys.stderr)
            return 1
        layout["suite"] = suite
        layouts[suite] = layout
        write_json(LAYOUT_DIR / f"{suite}.json", layout)
    if installed is not None:
        match = matching_suite(installed)
        if match:
            changes = diff(layouts[match], installed)
            print(f"installed vs {match}: " + ("identical layout" if not changes else "\n  ".join([""] + changes)))
    return _write_since(layouts)


def _write_since(layouts) -> int:
    """Derive abi/since.json from the layouts, write it, and report its inconsistencies."""
    since = build_since(layouts)
    write_json(SINCE_PATH, since)
    problems = check_since(layouts, since)
    for p in problems:
        print("since:", p, file=sys.stderr)
    return 1 if problems else 0


def _cmd_since(args) -> int:
    return _write_since(_layouts_on_disk())


def _cmd_check_since(args) -> int:
    problems = check_since(_layouts_on_disk(), json.loads(SINCE_PATH.read_text()))
    for p in problems:
        print(p)
    print("since.json: " + (f"{len(problems)} problem(s)" if problems else "consistent"))
    return 1 if problems else 0


def _cmd_diff(args) -> int:
    layouts = _layouts_on_disk()
    names = list(layouts)
    for a, b in zip(names, names[1:]):
        la, lb = layouts[a], layouts[b]
        print(f"{a} (Linux {la['linux_version']}) -> {b} (Linux {lb['linux_version']}):")
        for line in diff(la, lb) or ["(no change)"]:
            print("  " + line)
    return 0


def _cmd_probe(args) -> int:
    inc = Path(args.include_dir) if args.include_dir else installed_include_dir()
    t0 = time.monotonic()
    layout = probe(inc, keep_dir=Path(args.keep) if args.keep else None)
    print(dumps(layout))
    print(f"probe took {time.monotonic() - t0:.2f} s", file=sys.stderr)
    return 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fetch", help="download a suite's headers into build/abi/headers/<suite>")
    p.add_argument("--suite", action="append", choices=list(SUITES), help="repeatable; default: all")
    p.set_defaults(func=_cmd_fetch)
    p = sub.add_parser("write", help="probe installed + fetched headers; write abi/layout/*.json and abi/since.json")
    p.set_defaults(func=_cmd_write)
    p = sub.add_parser("since", help="regenerate abi/since.json from the committed layouts")
    p.set_defaults(func=_cmd_since)
    p = sub.add_parser("check-since", help="verify abi/since.json against the committed layouts")
    p.set_defaults(func=_cmd_check_since)
    p = sub.add_parser("diff", help="what changed between the committed suites")
    p.set_defaults(func=_cmd_diff)
    p = sub.add_parser("probe", help="print the layout of one include directory (default: installed)")
    p.add_argument("include_dir", nargs="?")
    p.add_argument("--keep", metavar="DIR", help="keep the generated probe.c and binary in DIR")
    p.set_defaults(func=_cmd_probe)
    args = ap.parse_args(argv)
    try:
        return args.func(args)
    except ProbeUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
