"""The package's shape, held by a walk of its own source: which modules import which (every
import counted: at the top, inside functions, under TYPE_CHECKING) and how long each is.

Two ratchets: an import circle or a module over 600 lines that is not listed below fails,
and so does a listed one that is gone (the lists must shrink with the code).  And the floor
plan: the root holds only what a user imports by module name (no private module there), each
job has its room (a folder, or one of those root modules), and the rooms stand on floors: an
import goes to its own room or to a room on a floor below, never up or sideways."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, List, Set

PACKAGE = Path(__file__).resolve().parent.parent / "pyrdmacm"

#: the circles left (each a set of modules), and why each is still there: none
KNOWN_CIRCLES: List[Set[str]] = []
#: modules over the limit, each no longer than it is now, and why
LIMIT = 600
KNOWN_LONG: Dict[str, int] = {
    # CmId is one class: librdmacm's verbs on one id, each with its librdmacm name and the
    # kernel's rules in its docstring (about 200 of these lines).  The jobs it is made of are
    # parts in their own modules (the life record and its moves: life.py; the kernel's
    # answers: queries.py; arguments read: params.py; groups: membership.py); a verb split
    # off to another file is what the floor plan undid.
    "pyrdmacm/core/cmid.py": 715,
}


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
_AIO = ("aio/__init__", "aio/futures", "aio/requests", "aio/addrinfo")
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


#: the package's root: only modules a user imports by name (at most 14, none private)
ROOT_MODULES = {"__init__", "__main__", "errors", "state", "kernel_rules", "wire", "decode", "devices", "addrinfo"}
#: the rooms, bottom floor first: a room imports its own modules and rooms of lower floors only
FLOORS = [
    {"errors"},
    {"abi"},                                 # the kernel's structs, layouts, codecs, enums, char device
    {"state", "kernel_rules", "netlink"},    # the state table, the kernel's rules, netlink (RDMA, routes)
    {"addr"},                                # addresses: the grammar, the lookups
    {"records"},                             # what replies, events and connections carry
    {"wire", "decode", "devices"},           # commands encoded and decoded, the RDMA devices
    {"core"},                                # the engine: fd, polls, router, channel, ids, events
    {"precheck"},                            # where a resolution lands (routing, devices)
    {"addrinfo", "conformance"},             # rdma_getaddrinfo; the ABI conformance suite
    {"aio", "testing"},                      # asyncio; the fake kernel and fabric
    {"mesh"},                                # the fabric check
    {"pyrdmacm"},                            # the public names (the package's __init__)
    {"cli"},
    {"__main__"},
]


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pyrdmacm"


def test_the_root_holds_only_what_users_import_by_name():
    root = {p.stem for p in PACKAGE.glob("*.py")}
    assert root == ROOT_MODULES, "the package's root changed: %s (a private module belongs in its room's folder)" % (
        sorted(root ^ ROOT_MODULES))
    assert len(root) <= 14 and not [m for m in root if m.startswith("_") and not m.startswith("__")]


def test_every_room_is_on_a_floor():
    rooms = {_room(m) for m in _modules()}
    on_floors = set().union(*FLOORS)
    assert rooms == on_floors, "rooms not on FLOORS, or gone: %s" % sorted(rooms ^ on_floors)


def _arrows_up(edges: Dict[str, Set[str]], floors: List[Set[str]]) -> List[str]:
    """Every import from one room to a room on its own floor or above."""
    floor = {room: i for i, rooms in enumerate(floors) for room in rooms}
    return sorted("%s -> %s" % (a, b) for a, targets in edges.items() for b in targets
                  if _room(a) != _room(b) and floor[_room(b)] >= floor[_room(a)])


def test_no_import_runs_up_or_sideways():
    wrong = _arrows_up(_graph(_modules()), FLOORS)
    assert not wrong, "imports that run up or sideways (move the code, or the room): %s" % wrong


def test_the_floor_check_sees_arrows_up_and_sideways():
    edges = {"pkg.core.a": {"pkg.abi.b", "pkg.aio.c", "pkg.core.d"}, "pkg.aio.c": {"pkg.testing.e"},
             "pkg.abi.b": set(), "pkg.core.d": set(), "pkg.testing.e": set()}
    assert _arrows_up(edges, FLOORS) == ["pkg.aio.c -> pkg.testing.e", "pkg.core.a -> pkg.aio.c"]
