"""The documentation: one generator (Sphinx) makes the site of the guides (the Markdown of
docs/), every command's --help from the parser, and the reference of every name the package
exports (and the asyncio adapter's and pyrdmacm.testing's), warnings as errors; every public
call has a docstring that says what it writes; the README reads on a package index (no
relative link)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

import pyrdmacm

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    pytest.importorskip("sphinx", reason="Sphinx is in the test extra: pip install -e '.[test]'")
    pytest.importorskip("myst_parser", reason="myst-parser is in the test extra: pip install -e '.[test]'")
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs" / "sphinx"), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return out


def test_the_sphinx_reference_builds_and_covers_every_public_name(site):
    html = "".join(p.read_text() for p in site.glob("*.html"))
    missing = [name for module, names in pyrdmacm._EXPORTS.items() for name in names
               if 'id="pyrdmacm.%s"' % name not in html and 'id="pyrdmacm.%s.%s"' % (module, name) not in html]
    assert not missing, missing
    for name in ("AsyncChannel", "AsyncChannel.channel", "AsyncChannel.outcome_of", "AsyncChannel.requests",
                 "getaddrinfo", "getaddrinfo_all"):
        assert 'id="pyrdmacm.aio.%s"' % name in html, name
    for name in ("FakeKernel", "FakeNet", "FakeDevice", "Command", "FakeFabric"):
        assert 'id="pyrdmacm.testing.%s"' % name in html, name


def test_the_site_holds_the_guides_and_every_commands_help(site):
    from pyrdmacm.cli import build_parser

    for page, says in (("quickstart", "Is this host ready?"), ("cli", "exit status"), ("pyverbs", "pyverbs"),
                       ("mesh", "DaemonSet")):
        assert says in (site / ("%s.html" % page)).read_text(), page
    help_page = (site / "help.html").read_text()
    parser = build_parser()
    for name, sub in parser._subcommands.items():
        assert 'id="help-pyrdmacm-%s"' % name in help_page, name
        first = sub.format_usage().split("\n")[0].split("[")[0].strip()  # "usage: pyrdmacm NAME"
        assert first.replace("usage: ", "") in help_page, name
    assert "exit status (every subcommand)" in help_page  # the table, once, in pyrdmacm --help


def test_every_public_call_has_a_docstring():
    import inspect

    from pyrdmacm import aio, testing

    missing = []
    for where, names in (("pyrdmacm", pyrdmacm.__all__), ("pyrdmacm.aio", aio.__all__),
                         ("pyrdmacm.testing", testing.__all__)):
        mod = sys.modules[where]
        for name in names:
            obj = getattr(mod, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not inspect.getdoc(obj):
                missing.append("%s.%s" % (where, name))
            if inspect.isclass(obj):
                for k, v in vars(obj).items():
                    if not k.startswith("_") and inspect.isfunction(v) and not inspect.getdoc(v):
                        missing.append("%s.%s.%s" % (where, name, k))
    assert not missing, missing


def test_the_connection_calls_say_what_they_send():
    """The calls that write a command name it: what a user tracing the fd will see."""
    from pyrdmacm import CmId

    for name, command in (("connect", "CONNECT"), ("accept", "ACCEPT"), ("reject", "REJECT"),
                          ("disconnect", "DISCONNECT"), ("listen", "LISTEN"), ("notify", "rdma_notify"),
                          ("establish", "ACCEPT"), ("join_multicast", "JOIN_MCAST"), ("bind_addr", "BIND"),
                          ("resolve_addr", "RESOLVE_ADDR"), ("resolve_route", "RESOLVE_ROUTE")):
        doc = getattr(CmId, name).__doc__ or ""
        assert command in doc, (name, command)


def test_the_readme_reads_on_a_package_index():
    """A package index shows the README alone: a relative link or image there is broken, so
    the README names the documents as text; users' material first, the contributors' in
    CONTRIBUTING.md."""
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    assert [link for link in links if not re.match(r"https?://|#", link)] == []
    headings = re.findall(r"^## (.+)$", readme, re.M)
    assert headings[:2] == ["Install", "The two commands"] and headings[-1] == "Contributing"
    for moved in ("The kernel lab", "Layout", "Speed"):
        assert moved not in headings and ("## " + moved) in (ROOT / "CONTRIBUTING.md").read_text()
    for doc in ("docs/quickstart.md", "docs/cli.md", "docs/pyverbs.md", "docs/mesh.md", "CONTRIBUTING.md"):
        assert doc in readme and (ROOT / doc).exists(), doc
