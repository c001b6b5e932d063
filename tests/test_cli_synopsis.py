"""The synopses the documents give are the parser's: docs/cli.md's headings and the README's
command-line block name every option each subcommand has, and no option it lacks.

Which document is complete: both.  docs/cli.md has one heading per subcommand, every
option in it; the README's ``## The command line`` block has a synopsis for every
subcommand except ``conformance`` (which has its own section, "For kernel and distribution
engineers", with examples), every option in it, and the top-level ``--netns`` and
``--version``.  An option with a short and a long form (``-n``/``--numeric``) counts as
named when either form is.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Dict, List, Set

import pytest

from pyrdmacm import cli

ROOT = Path(__file__).resolve().parent.parent

#: subcommands the README's command-line block leaves to a section of their own
README_ELSEWHERE = {"conformance"}

_OPTION = re.compile(r"(?<![\w-])(--?[A-Za-z][\w-]*)")


def options_named(synopsis: str) -> Set[str]:
    """The options a synopsis names (``--ps tcp|udp`` -> ``--ps``; ``STRACE-LINE`` is none)."""
    return set(_OPTION.findall(synopsis))


def parser_options() -> Dict[str, List[List[str]]]:
    """Each subcommand's options, each as its option strings; --help left out."""
    subs = getattr(cli.build_parser(), "_subcommands")
    return {name: [a.option_strings for a in sp._actions if a.option_strings and "--help" not in a.option_strings]
            for name, sp in subs.items()}


def top_options() -> List[List[str]]:
    p = cli.build_parser()
    return [a.option_strings for a in p._actions if a.option_strings and "--help" not in a.option_strings]


def cli_md_headings() -> Dict[str, str]:
    """docs/cli.md's ``## `COMMAND ...` `` headings, by subcommand."""
    text = (ROOT / "docs" / "cli.md").read_text()
    heads: Dict[str, str] = {}
    for line in text.splitlines():
        m = re.fullmatch(r"## `([a-z]+)( [^`]*)?`", line)
        if m:
            assert m.group(1) not in heads, "two headings for %s" % m.group(1)
            heads[m.group(1)] = m.group(2) or ""
    return heads


def readme_synopses() -> Dict[str, str]:
    """The README's command-line block: each ``pyrdmacm COMMAND ...`` line with its
    continuation lines, comments left out, by subcommand (``--netns``/``--version`` lines
    under ``""``)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## The command line\n", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    found: Dict[str, str] = {}
    current = None
    for line in block.splitlines():
        code = line.split("#", 1)[0].rstrip()
        if not code.strip():
            continue
        if code.startswith("pyrdmacm "):
            word = code.split()[1]
            current = "" if word.startswith("-") else word
            found[current] = found.get(current, "") + " " + code[len("pyrdmacm "):]
        else:
            assert current is not None and line[0].isspace(), "a line of the block that is no synopsis: %r" % line
            found[current] += " " + code.strip()
    return found


def missing_and_unknown(named: Set[str], options: List[List[str]]) -> tuple:
    missing = ["/".join(o) for o in options if not named & set(o)]
    known = {s for o in options for s in o}
    return missing, sorted(named - known)


def test_every_subcommand_has_a_cli_md_heading():
    assert set(cli_md_headings()) == set(parser_options())


@pytest.mark.parametrize("command", sorted(parser_options()))
def test_cli_md_heading_names_each_option_of_the_parser_and_no_other(command):
    heading = cli_md_headings()[command]
    missing, unknown = missing_and_unknown(options_named(heading), parser_options()[command])
    assert (missing, unknown) == ([], []), "docs/cli.md's `%s` heading: missing %s, not options %s" % (
        command, missing, unknown)


def test_the_readme_has_a_synopsis_for_every_subcommand_but_those_documented_apart():
    assert set(readme_synopses()) - {""} == set(parser_options()) - README_ELSEWHERE


@pytest.mark.parametrize("command", sorted(set(parser_options()) - README_ELSEWHERE))
def test_readme_synopsis_names_each_option_of_the_parser_and_no_other(command):
    synopsis = readme_synopses()[command]
    missing, unknown = missing_and_unknown(options_named(synopsis), parser_options()[command])
    assert (missing, unknown) == ([], []), "the README's `%s` synopsis: missing %s, not options %s" % (
        command, missing, unknown)


def test_readme_names_the_top_level_options():
    missing, unknown = missing_and_unknown(options_named(readme_synopses()[""]), top_options())
    assert (missing, unknown) == ([], [])


def test_the_check_sees_a_drift():
    """What the tests above would say of a synopsis that lost an option or gained one."""
    options = parser_options()["resolve"]
    named = options_named(cli_md_headings()["resolve"]) - {"--neighbour-first"} | {"--bogus"}
    assert missing_and_unknown(named, options) == (["--neighbour-first"], ["--bogus"])
    assert options_named("decode HEX|STRACE-LINE|TRACE [--reply KIND] [-n]") == {"--reply", "-n"}
