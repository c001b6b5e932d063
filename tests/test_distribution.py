"""The package builds as distributions build it: from the tracked files, without build
isolation, with the system interpreter's own setuptools (Debian 12: 66, older than PEP
639's 77) and no deprecation warning; the wheel and the sdist hold what a user needs."""

import os
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
    """The tracked files only (what a distribution's source package holds), as git has them;
    in an unpacked sdist (no git), the files it holds, without what builds and tests left."""
    src = tmp_path / "src"
    if not (ROOT / ".git").exists():
        shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns("build", "dist", "*.egg-info", "__pycache__",
                                                                 ".pytest_cache", ".mypy_cache", ".hypothesis"))
        return src
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
    assert "pyrdmacm/py.typed" in names
    modules = {str(p.relative_to(ROOT)) for p in (ROOT / "pyrdmacm").rglob("*.py")}
    assert modules - names == set(), "modules the wheel leaves out"
    assert any(n.endswith("LICENSE") for n in names)
    assert "\nLicense: MIT\n" in meta and "Requires-Dist: construct" in meta and "Requires-Dist: pyroute2" in meta
    assert "pyrdmacm = pyrdmacm.cli:main" in entry


def _sdist(tmp_path: Path) -> Path:
    python = _system_python()
    src = _copy(tmp_path)
    proc = subprocess.run([python, "-c", "from setuptools import build_meta as b; print(b.build_sdist(%r))"
                           % str(tmp_path / "dist")], cwd=src, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sdist,) = (tmp_path / "dist").glob("pyrdmacm-*.tar.gz")
    return sdist


def test_the_sdist_holds_the_docs_and_the_host_tests_with_their_data(tmp_path):
    with tarfile.open(_sdist(tmp_path)) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    for doc in ("docs/quickstart.md", "docs/cli.md", "docs/mesh.md", "docs/sphinx/conf.py", "README.md", "LICENSE",
                "CHANGELOG.md", "CONTRIBUTING.md", "setup.cfg"):
        assert doc in names, doc
    # the tests and the data they read: the ABI's layouts and golden bytes, the tools they run
    for name in ("tests/conftest.py", "tests/test_golden.py", "abi/since.json", "tools/bench_codec.py",
                 "tools/manpages"):
        assert name in names, name
    assert any(n.startswith("abi/golden/") for n in names) and any(n.startswith("abi/layout/") for n in names)
    assert not any("__pycache__" in n or n.startswith("build/") for n in names)


def test_the_host_tests_run_from_the_unpacked_sdist(tmp_path):
    """As a distribution's package build runs them (Debian's pybuild, Fedora's %check): from
    the unpacked sdist, no git, no lab.  All of them collect; those that read the ABI's data
    and run the tools pass (the whole host tier passes there too: README)."""
    with tarfile.open(_sdist(tmp_path)) as t:
        # the "data" filter where tarfile has it (3.12, and 3.9.17+ backports): what 3.14 will do
        t.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
    (top,) = (tmp_path / "unpacked").iterdir()
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPATH", None)
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(run + ["--collect-only", "tests"], cwd=top, capture_output=True, text=True, env=env)
    assert proc.returncode == 0 and " error" not in proc.stdout.splitlines()[-1], proc.stdout[-3000:]
    proc = subprocess.run(run + ["tests/test_golden.py", "tests/test_abi_layout.py", "tests/test_bench_codec.py",
                                 "tests/test_import_graph.py", "tests/test_layouts.py"],
                          cwd=top, capture_output=True, text=True, env=env)
    last = proc.stdout.strip().splitlines()[-1]
    assert proc.returncode == 0 and " passed" in last and "skipped" not in last, proc.stdout[-3000:]


def test_an_sdist_built_from_the_unpacked_sdist_holds_the_same_files(tmp_path):
    """A distribution's tools may build the source package again from the unpacked sdist:
    it must hold the tests and docs as the first did (it lost them while MANIFEST.in left
    itself out), and a wheel built from it must not warn."""
    first = _sdist(tmp_path / "one")
    with tarfile.open(first) as t:
        t.extractall(tmp_path / "unpacked", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    (top,) = (tmp_path / "unpacked").iterdir()
    python = _system_python()
    proc = subprocess.run([python, "-c", "from setuptools import build_meta as b; print(b.build_sdist(%r))"
                           % str(tmp_path / "again")], cwd=top, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (second,) = (tmp_path / "again").glob("pyrdmacm-*.tar.gz")
    with tarfile.open(second) as t:
        again = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert "MANIFEST.in" in names and "tests/conftest.py" in names
    assert again == names, (sorted(names - again)[:10], sorted(again - names)[:10])
    if subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode == 0:
        proc = subprocess.run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v", ".",
                               "-w", str(tmp_path / "wheel")], cwd=top, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert "Warning" not in proc.stderr and "SetuptoolsDeprecationWarning" not in proc.stdout, (
            proc.stdout[-3000:] + proc.stderr[-3000:])
