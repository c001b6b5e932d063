"""The package builds as distributions build it: from the tracked files, without build
isolation, with the system interpreter's own setuptools (Debian 12: 66, older than PEP
639's 77) and no deprecation warning; the wheel and the sdist hold what a user needs."""

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setuptools_version(python: str):
    proc = subprocess.run([python, "-c", "import setuptools; print(setuptools.__version__)"],
                          capture_output=True, text=True)
    return proc.stdout.strip() if proc.returncode == 0 else None


def _system_python():
    """The distribution's interpreter with its own setuptools, as its packaging builds with."""
    system = shutil.which("python3", path="/usr/bin")
    if not system or not _setuptools_version(system):
        pytest.skip("no system python3 with setuptools here (a distribution's build tools)")
    return system


def _copy(tmp_path: Path) -> Path:
    """The tracked files only (what a distribution's source package holds), as git has them."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, src / name)
    return src


def test_a_wheel_builds_without_isolation(tmp_path):
    python = _system_python()
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode:
        pytest.skip("%s has no pip" % python)
    src = _copy(tmp_path)
    proc = subprocess.run([python, "-m", "pip", "wheel", "--no-build-isolation",
                           "--no-deps", "-v", ".", "-w", str(tmp_path / "dist")],
                          cwd=src, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "SetuptoolsDeprecationWarning" not in proc.stdout + proc.stderr, "setuptools %s warns" % (
        _setuptools_version(python))
    (wheel,) = (tmp_path / "dist").glob("pyrdmacm-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
        entry = z.read(next(n for n in names if n.endswith(".dist-info/entry_points.txt"))).decode()
    assert "pyrdmacm/__init__.py" in names and "pyrdmacm/py.typed" in names and "pyrdmacm/cli/__init__.py" in names
    assert any(n.endswith("LICENSE") for n in names)
    assert "\nLicense: MIT\n" in meta and "Requires-Dist: construct" in meta and "Requires-Dist: pyroute2" in meta
    assert "pyrdmacm = pyrdmacm.cli:main" in entry


def test_the_sdist_holds_the_docs(tmp_path):
    python = _system_python()
    src = _copy(tmp_path)
    proc = subprocess.run([python, "-c", "from setuptools import build_meta as b; print(b.build_sdist(%r))"
                           % str(tmp_path / "dist")], cwd=src, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("pyrdmacm-*.tar.gz")
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for doc in ("docs/api.md", "docs/cli.md", "README.md", "LICENSE", "CHANGELOG.md", "setup.cfg"):
        assert doc in names, doc
    assert not any(n.startswith("tests/") for n in names)
