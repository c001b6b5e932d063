"""The generated codec data is what the construct declarations give, and the library's
runtime does not import construct."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pyrdmacm import _derive, _layouts, abi

ROOT = Path(__file__).resolve().parent.parent
STALE = "pyrdmacm/_layouts.py is stale: run %s (it derives the data from pyrdmacm/_structs.py)" % _derive.GENERATOR


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
                          "import pyrdmacm.aio, pyrdmacm.channel, pyrdmacm.cmid, pyrdmacm._hot, pyrdmacm.wire, "
                          "pyrdmacm.events, pyrdmacm.records, pyrdmacm.state, pyrdmacm.errors, pyrdmacm._device\n"
                          "from pyrdmacm import *")
    assert "construct" not in mods
    assert "pyrdmacm._structs" not in mods


def test_the_enums_import_alone():
    mods = _modules_after("from pyrdmacm.abi import PortSpace, CmEventType, cm_private_data_limit")
    assert "construct" not in mods


def test_abi_layouts_load_on_first_use():
    assert abi.STRUCTS["rdma_ucm_cmd_hdr"].sizeof() == abi.HDR_SIZE == 8
    assert abi.COMMANDS[abi.UserCmCmd.CREATE_ID][0] is abi.rdma_ucm_create_id
    from pyrdmacm.abi import MIN_REPLY  # a from-import finds them too

    assert MIN_REPLY is abi.MIN_REPLY
    with pytest.raises(AttributeError):
        abi.no_such_layout
    with pytest.raises(AttributeError):
        abi.__wrapped__
