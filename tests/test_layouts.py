"""The generated codec data is what the construct declarations give, and the library's
runtime imports neither construct nor more of itself than it needs."""

from __future__ import annotations

import ast
import os
import importlib
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pyrdmacm
from pyrdmacm import abi

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "tools") not in sys.path:
    sys.path.insert(0, str(ROOT / "tools"))
import derive_layouts as _derive  # noqa: E402 (the generator's module, in tools/)
from pyrdmacm.abi import layouts as _layouts

STALE = "pyrdmacm/abi/layouts.py is stale: run %s (it derives the data from pyrdmacm/abi/structs.py)" % _derive.GENERATOR


def test_generated_layouts_equal_the_derivation():
    derived = _derive.layouts()
    assert list(_layouts.LAYOUTS) == list(derived), STALE
    for name, data in derived.items():
        assert _layouts.LAYOUTS[name] == data, "%s: %s" % (name, STALE)
    assert _layouts.COMMANDS == _derive.commands(), STALE


def test_generated_module_is_what_the_generator_writes():
    """No hand edit survives: the file is exactly the generator's output."""
    assert (ROOT / _derive.MODULE).read_text() == _derive.render(), STALE


def test_generator_runs_on_its_own_and_finds_the_file_current():
    tool = ROOT / "tools" / "gen_layouts"
    ok = subprocess.run([sys.executable, str(tool), "--check"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr


def test_every_command_names_declared_layouts():
    for cmd in abi.UserCmCmd:
        body, reply = _layouts.COMMANDS[cmd.name]
        for name in (body, reply):
            assert name is None or name in _layouts.LAYOUTS, (cmd, name)


# ---------------------------------------------------------------- what the runtime imports

def _modules_after(code: str) -> set:
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys, json; print(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=str(ROOT), check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_the_runtime_does_not_import_construct():
    mods = _modules_after("from pyrdmacm import EventChannel, CmId\n"
                          "import pyrdmacm.aio, pyrdmacm.core.event_channel, pyrdmacm.core.cmid, pyrdmacm.core.process, pyrdmacm.wire, "
                          "pyrdmacm.core.events, pyrdmacm.records, pyrdmacm.state, pyrdmacm.errors, pyrdmacm.core.device\n"
                          "from pyrdmacm import *")
    assert "construct" not in mods
    assert "pyrdmacm.abi.structs" not in mods
    assert "random" not in mods  # the QP-number counter starts from os.urandom


def test_the_enums_import_alone():
    mods = _modules_after("from pyrdmacm.abi import PortSpace, CmEventType, cm_private_data_limit")
    assert "construct" not in mods
    assert "pyrdmacm.core.event_channel" not in mods and "pyrdmacm.abi.codec" not in mods


def test_opening_the_device_needs_no_reply_decoders():
    """The route prediction checks the device node: that must not import the wire layer's records
    nor construct (the char device check is the ABI layer's: its package's constants load with it)."""
    mods = _modules_after("import pyrdmacm.core.device")
    assert not {"pyrdmacm.wire", "pyrdmacm.records", "pyrdmacm.abi.structs", "construct"} & mods


def test_the_layouts_are_the_structs_module_s_and_abi_does_not_serve_them():
    from pyrdmacm.abi import structs as _structs

    assert _structs.STRUCTS["rdma_ucm_cmd_hdr"].sizeof() == _structs.HDR_SIZE == 8
    assert _structs.COMMANDS[abi.UserCmCmd.CREATE_ID][0] is _structs.rdma_ucm_create_id
    with pytest.raises(AttributeError):
        abi.STRUCTS
    with pytest.raises(AttributeError):
        abi.no_such_layout
    with pytest.raises(AttributeError):
        abi.__wrapped__


# ---------------------------------------------------------------- the package's public names

def _type_checking_imports() -> dict:
    """What ``if TYPE_CHECKING:`` of pyrdmacm/__init__.py imports, by module."""
    tree = ast.parse((ROOT / "pyrdmacm" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    return {imp.module: tuple(a.name for a in imp.names) for imp in block.body if isinstance(imp, ast.ImportFrom)}


def test_type_checkers_see_the_names_the_package_exports():
    assert _type_checking_imports() == pyrdmacm._EXPORTS
    tree = ast.parse((ROOT / "pyrdmacm" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    plain = [a.name for imp in block.body if isinstance(imp, ast.ImportFrom) for a in imp.names if a.asname != a.name]
    assert not plain, "re-export these as 'X as X' (mypy --strict sees no export otherwise): %s" % plain


def test_the_readme_import_type_checks_strictly(tmp_path):
    """A program that imports the public names from the package and uses them passes
    mypy --strict: the re-exports are explicit, an event's id is a CmId, and its ``event``
    a CmEventType (``ev.event.name``: #37)."""
    prog = tmp_path / "prog.py"
    prog.write_text(
        "from typing import List, Optional\n"
        "from pyrdmacm import Call, CmEventType, CmId, Event, EventChannel, Waiter\n"
        "def main(ch: EventChannel) -> int:\n"
        "    cm: CmId = ch.create_id()\n"
        "    cm.resolve_addr('10.0.0.2', timeout_ms=2000)\n"
        "    w = ch.expect(cm.uid, Waiter.for_call(cm.kind, Call.RESOLVE_ADDR))\n"
        "    ch.wait(w, 5)\n"
        "    ev = ch.get_event(0)\n"
        "    evs: List[Event] = ch.get_events()\n"
        "    if ev is not None and ev.event.name.startswith('ADDR_') and ev.event.value < 2:\n"
        "        print(ev.event.name, ev.event.value + 1)  # event is a CmEventType, never a bare int\n"
        "    if ev is not None and ev.event is CmEventType.ADDR_RESOLVED:\n"
        "        req: Optional[CmId] = ev.listen_id\n"
        "        return ev.id.uid + len(evs) + (req.uid if req else 0)\n"
        "    return 0\n")
    env = dict(os.environ, MYPYPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                           "--ignore-missing-imports", str(prog)], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_public_name_is_its_modules():
    for module, names in pyrdmacm._EXPORTS.items():
        mod = importlib.import_module("pyrdmacm." + module)
        for name in names:
            assert getattr(pyrdmacm, name) is getattr(mod, name), name
    assert sorted(pyrdmacm.__all__) == sorted(n for names in pyrdmacm._EXPORTS.values() for n in names)
    assert set(pyrdmacm.__all__) <= set(dir(pyrdmacm))


def test_submodules_are_attributes_and_unknown_names_are_not():
    assert pyrdmacm.state is importlib.import_module("pyrdmacm.state")
    # in a fresh process, where nothing imported the submodule first
    assert "pyrdmacm.state" in _modules_after("import pyrdmacm\nassert pyrdmacm.state.OUTCOMES")
    with pytest.raises(AttributeError):
        pyrdmacm.no_such_thing
    with pytest.raises(AttributeError):
        pyrdmacm.__wrapped__



def _doc_examples():
    """Every ```python block of the README and docs/, with where it stands."""
    out = []
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = path.read_text().splitlines()
        start = None
        for no, line in enumerate(lines, 1):
            if line.strip() == "```python":
                start = no
            elif line.strip() == "```" and start is not None:
                # a block in a list item is indented with it
                out.append(("%s:%d" % (path.relative_to(ROOT), start),
                            textwrap.dedent("\n".join(lines[start:no - 1]) + "\n")))
                start = None
    return out


def test_the_docs_examples_type_check_strictly(tmp_path):
    """Each Python example of the README and docs/ is a program that passes mypy --strict,
    as a user's would (one module per example, the package as installed)."""
    examples = _doc_examples()
    assert len(examples) >= 2
    files = []
    for i, (where, code) in enumerate(examples):
        f = tmp_path / ("example_%d.py" % i)
        f.write_text("# %s\n%s" % (where, code))
        files.append(str(f))
    env = dict(os.environ, MYPYPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                           "--ignore-missing-imports", *files], capture_output=True, text=True, cwd=str(tmp_path),
                          env=env)
    where = {"example_%d.py" % i: w for i, (w, _) in enumerate(examples)}
    report = "\n".join(" ".join(where.get(word.split(":")[0], word) if word.startswith("example_") else word
                                for word in line.split(" ")) for line in proc.stdout.splitlines())
    assert proc.returncode == 0, report + proc.stderr


def test_no_public_signature_shows_a_private_parameter():
    """help() on a public call shows what a user passes, nothing the library passes itself
    (get_event had three private flags on its public signature, passed positionally)."""
    import inspect

    from pyrdmacm import aio

    objs = [(n, getattr(pyrdmacm, n)) for n in pyrdmacm.__all__] + [("aio." + n, getattr(aio, n))
                                                                   for n in aio.__all__]
    seen, bad = 0, []
    for name, obj in objs:
        members = [(name, obj)]
        if inspect.isclass(obj):
            members += [(name + "." + k, v) for k, v in vars(obj).items() if not k.startswith("_") and callable(v)]
        for where, member in members:
            try:
                sig = inspect.signature(member)
            except (TypeError, ValueError):
                continue
            seen += 1
            bad += ["%s%s" % (where, sig) for p in sig.parameters if p.startswith("_")]
    assert seen > 100 and not bad, bad
    assert list(inspect.signature(pyrdmacm.EventChannel.get_event).parameters) == ["self", "timeout"]
