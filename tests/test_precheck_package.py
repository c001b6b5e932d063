"""pyrdmacm.precheck as a package: its public names, where each step lives, and pyroute2 kept
to the netlink modules, loaded only when a prediction runs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import pyrdmacm.precheck as precheck

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "pyrdmacm" / "precheck"


def test_the_public_names():
    assert set(precheck.__all__) == {"Candidate", "IpoibStatus", "Missing", "Prediction", "predict", "explain",
                                     "gid_text", "rdma_cm_node", "solicit_neighbour"}
    for name in precheck.__all__:
        assert getattr(precheck, name).__module__.startswith("pyrdmacm.precheck."), name


@pytest.mark.parametrize("path", sorted(PACKAGE.glob("*.py")), ids=lambda p: p.name)
def test_each_module_is_small_and_says_what_it_holds(path):
    text = path.read_text()
    assert len(text.splitlines()) <= 400, path.name
    assert ast.get_docstring(ast.parse(text)), path.name


def _imports(path: Path) -> set:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):  # in functions and under TYPE_CHECKING too
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            out.add(node.module or "")
    return out


def test_pyroute2_is_imported_by_netlink_only():
    """By the routing decisions alone (its IPRoute): netlink's wire format, the devices,
    the netdevs and their addresses are pyrdmacm.netlink.wire's."""
    importers = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "pyrdmacm").rglob("*.py")
                       if any(m == "pyroute2" or m.startswith("pyroute2.") for m in _imports(p)))
    assert importers == ["pyrdmacm/netlink/route.py"]


def test_importing_the_package_loads_no_netlink():
    out = subprocess.run([sys.executable, "-c", "import pyrdmacm.precheck, sys, json; "
                          "print(json.dumps(sorted(sys.modules)))"],
                         cwd=str(ROOT), capture_output=True, text=True, check=True).stdout
    mods = set(json.loads(out.splitlines()[-1]))
    assert not any(m.startswith(("pyrdmacm.netlink", "pyrdmacm._netlink", "pyroute2")) for m in mods)
