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


def test_the_completions_offer_files_and_choices_and_pip_users_print_them(tmp_path):
    """--merge, --hosts, --svg and --prometheus complete file names, ping's --ps its choices;
    ``pyrdmacm --print-completion bash|zsh`` prints the script (shtab's convention), which
    loads in bash and answers as the installed one does."""
    pytest.importorskip("shtab", reason="shtab is in the test extra")
    if shutil.which("bash") is None:
        pytest.skip("no bash here")
    r = subprocess.run([sys.executable, "-m", "pyrdmacm", "--print-completion", "bash"], capture_output=True,
                       text=True)
    assert r.returncode == 0 and "_shtab_pyrdmacm" in r.stdout, r.stderr
    script = tmp_path / "pyrdmacm.bash"
    script.write_text(r.stdout)
    for name in ("run-a.json", "run-b.json"):
        (tmp_path / name).write_text("")

    def complete(*words: str) -> list:
        line = "pyrdmacm " + " ".join(words)
        prog = ("source %s; f=$(complete -p pyrdmacm | sed -E 's/.*-F ([^ ]+).*/\\1/'); COMP_WORDS=(pyrdmacm %s); "
                "COMP_CWORD=%d; COMP_LINE=%r; COMP_POINT=${#COMP_LINE}; $f pyrdmacm %r %r; "
                "printf '%%s\\n' \"${COMPREPLY[@]}\"" % (script, " ".join(repr(w) for w in words), len(words),
                                                          line, words[-1], words[-2]))
        out = subprocess.run(["bash", "-c", prog], capture_output=True, text=True, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return sorted(w for w in out.stdout.splitlines() if w)

    assert complete("ping", "10.0.0.2", "--ps", "") == ["tcp", "udp"]
    for flag in ("--merge", "--hosts", "--svg", "--prometheus"):
        assert complete("mesh", flag, "run") == ["run-a.json", "run-b.json"], flag
    zsh = subprocess.run([sys.executable, "-m", "pyrdmacm", "--print-completion", "zsh"], capture_output=True,
                         text=True)
    assert zsh.returncode == 0 and "--merge[" in zsh.stdout and ":FILE:_files" in zsh.stdout
    bad = subprocess.run([sys.executable, "-m", "pyrdmacm", "--print-completion", "fish"], capture_output=True,
                         text=True)
    assert bad.returncode == 3 and "invalid choice: 'fish'" in bad.stderr


def test_print_completion_without_shtab_says_what_to_install():
    code = ("import sys; sys.modules['shtab'] = None\n"  # as if it were not installed
            "from pyrdmacm.cli import main\nsys.exit(main(['--print-completion', 'bash']))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3 and r.stdout == ""
    assert r.stderr == ("pyrdmacm: --print-completion makes the script with shtab, which is not installed here: "
                        "pip install shtab (or 'pyrdmacm[completion]')\n")


def test_the_page_has_a_whatis_line_and_examples_that_parse(tmp_path):
    """NAME is "pyrdmacm \\- what it is" (what lexgrog reads for apropos and lintian checks),
    and EXAMPLES holds cli.EXAMPLES, each of which the parser takes."""
    import shlex

    from pyrdmacm import cli

    _make(tmp_path)
    page = (tmp_path / "man" / "man1" / "pyrdmacm.1").read_text()
    name = page.split(".SH NAME\n", 1)[1].split("\n", 1)[0]
    assert name.startswith("pyrdmacm \\- the RDMA connection manager"), name
    if shutil.which("lexgrog"):
        r = subprocess.run(["lexgrog", str(tmp_path / "man" / "man1" / "pyrdmacm.1")], capture_output=True,
                           text=True)
        assert r.returncode == 0 and "pyrdmacm - the RDMA connection manager" in r.stdout, r.stdout + r.stderr
    examples = page.split(".SH EXAMPLES\n", 1)[1].split(".SH", 1)[0]
    for command, what in cli.EXAMPLES:
        assert command.replace("-", "\\-") in examples and what.replace("-", "\\-") in examples, command
        words = shlex.split(command.split("| ")[-1].split(" > ")[0])
        assert words[0] == "pyrdmacm"
        args = cli.build_parser().parse_args(words[1:])
        assert args.func is not None, command
    assert len(cli.EXAMPLES) >= 6
