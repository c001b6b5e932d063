"""The package's shape, held by a walk of its own source: which modules import which (every
import counted: at the top, inside functions, under TYPE_CHECKING) and how long each is.

Two ratchets: an import circle or a module over 600 lines that is not listed below fails,
and so does a listed one that is gone (the lists must shrink with the code)."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parent.parent / "pyrdmacm"

#: the circles left (each a set of modules), and why each is still there: none
KNOWN_CIRCLES: List[Set[str]] = []
#: modules over the limit, each no longer than it is now: none
LIMIT = 600
KNOWN_LONG: Dict[str, int] = {}


def _modules() -> Dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _graph(mods: Dict[str, Path]) -> Dict[str, Set[str]]:
    edges: Dict[str, Set[str]] = {m: set() for m in mods}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(up + ([node.module] if node.module else []))
                subs = [base + "." + a.name for a in node.names]
                found = [s for s in subs if s in mods]
                if len(found) < len(subs):  # names the module defines, not submodules
                    found.append(base)
            elif isinstance(node, ast.Import):
                found = [a.name for a in node.names]
            else:
                continue
            edges[name].update(t for t in found if t in mods and t != name)
    return edges


def _circles(edges: Dict[str, Set[str]]) -> List[Set[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on: Set[str] = set()
    out: List[Set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(comp)

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_walk_sees_imports_of_every_kind(tmp_path: Path):
    """A function-level import and one under TYPE_CHECKING are edges too, and a circle
    through them is found."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from . import b\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import C\n")
    (pkg / "c.py").write_text("from .a import f\n")
    mods = {"pkg": pkg / "__init__.py", **{"pkg." + m: pkg / (m + ".py") for m in "abc"}}
    edges = _graph(mods)
    assert "pkg.b" in edges["pkg.a"]  # inside a function
    assert "pkg.c" in edges["pkg.b"]  # under TYPE_CHECKING
    assert _circles(edges) == [{"pkg.a", "pkg.b", "pkg.c"}]


def test_no_import_circle_but_the_known_ones():
    circles = _circles(_graph(_modules()))
    new = [c for c in circles if c not in KNOWN_CIRCLES]
    assert not new, "import circles: %s" % [sorted(c) for c in new]
    gone = [c for c in KNOWN_CIRCLES if c not in circles]
    assert not gone, "these circles are gone: take them off KNOWN_CIRCLES: %s" % [sorted(c) for c in gone]


def test_no_module_over_600_lines_but_the_known_ones():
    sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines()) for p in _modules().values()}
    over = {p: n for p, n in sizes.items() if n > LIMIT and n > KNOWN_LONG.get(p, 0)}
    assert not over, "modules over %d lines (split them by job): %s" % (LIMIT, over)
    short = [p for p in KNOWN_LONG if sizes.get(p, 0) <= LIMIT]
    assert not short, "these are within the limit now: take them off KNOWN_LONG: %s" % short


#: the asyncio adapter's modules, and the names under which they hold an adapter (an
#: AsyncChannel: its own members are its business; anybody else's private ones are not)
_AIO = ("aio", "_aio_waiters", "_aio_requests")
_THE_ADAPTER = {"self", "other", "adapter"}


def _private_reads(source: str) -> List[str]:
    """``base.attr`` for every attribute with one leading underscore read from a base that is
    not the adapter itself."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
            base = ast.unparse(node.value)
            if base not in _THE_ADAPTER:
                out.append("%s.%s (line %d)" % (base, node.attr, node.lineno))
    return out


def test_the_walk_finds_private_reads():
    assert _private_reads("def f(self, ch):\n    self._x\n    ch._waits.route(1)\n") == ["ch._waits (line 3)"]


def test_the_asyncio_adapter_reads_nothing_private_of_the_channel_or_the_ids():
    """asyncio is a thin layer over the channel's public waits (expect / forget / get_events):
    it reads no private member of the channel, the ids or the events (#21)."""
    found = {m: _private_reads((PACKAGE / (m + ".py")).read_text()) for m in _AIO}
    assert not any(found.values()), found
