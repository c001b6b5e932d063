"""tools/manpages: the man page and the bash and zsh completions, made from the parser, name
every subcommand and option, render without roff warnings, load in bash, and come out the
same twice for one SOURCE_DATE_EPOCH (a reproducible build)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pyrdmacm.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent


def _make(out: Path) -> None:
    pytest.importorskip("build_manpages", reason="argparse-manpage is in the test extra")
    pytest.importorskip("shtab", reason="shtab is in the test extra")
    env = dict(os.environ, SOURCE_DATE_EPOCH="1767225600")
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "manpages"), str(out)], capture_output=True, text=True,
                       env=env)
    assert r.returncode == 0, r.stderr


def _subcommands():
    parser = build_parser()
    return {name: sub for name, sub in parser._subcommands.items()}


def test_the_man_page_and_completions_cover_the_parser(tmp_path):
    _make(tmp_path / "a")
    page = (tmp_path / "a" / "man" / "man1" / "pyrdmacm.1").read_text()
    plain = page.replace("\\-", "-")
    for name, sub in _subcommands().items():
        assert "'pyrdmacm %s'" % name in plain, name
        for action in sub._actions:
            if action.dest == "help":
                continue
            for opt in action.option_strings:
                assert opt in plain, (name, opt)
    assert '.SH "EXIT STATUS"' in page and '"2026-01-01"' in plain.replace("\\", "")  # SOURCE_DATE_EPOCH's day
    bash = (tmp_path / "a" / "bash-completion" / "completions" / "pyrdmacm").read_text()
    zsh = (tmp_path / "a" / "zsh" / "site-functions" / "_pyrdmacm").read_text()
    for name in _subcommands():
        assert name in bash and name in zsh, name
    r = subprocess.run(["bash", "-c", "source %s && complete -p pyrdmacm" % (tmp_path / "a" / "bash-completion"
                                                                              / "completions" / "pyrdmacm")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and "pyrdmacm" in r.stdout, r.stderr
    _make(tmp_path / "b")
    for rel in ("man/man1/pyrdmacm.1", "bash-completion/completions/pyrdmacm", "zsh/site-functions/_pyrdmacm"):
        assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel


def test_the_man_page_renders_without_roff_warnings(tmp_path):
    if shutil.which("groff") is None:
        pytest.skip("no groff here to render the page")
    _make(tmp_path)
    r = subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z", str(tmp_path / "man" / "man1" / "pyrdmacm.1")],
                       capture_output=True, text=True)
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr
