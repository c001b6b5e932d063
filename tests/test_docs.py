"""The reference builds with Sphinx's autodoc, warnings as errors, and documents every name
the package exports (and the asyncio adapter's)."""

import subprocess
import sys
from pathlib import Path

import pytest

import pyrdmacm

ROOT = Path(__file__).resolve().parent.parent


def test_the_sphinx_reference_builds_and_covers_every_public_name(tmp_path):
    pytest.importorskip("sphinx", reason="Sphinx is in the test extra: pip install -e '.[test]'")
    out = tmp_path / "html"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           str(ROOT / "docs" / "sphinx"), str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    html = "".join(p.read_text() for p in out.glob("*.html"))
    missing = [name for module, names in pyrdmacm._EXPORTS.items() for name in names
               if 'id="pyrdmacm.%s"' % name not in html and 'id="pyrdmacm.%s.%s"' % (module, name) not in html]
    assert not missing, missing
    for name in ("AsyncChannel", "AsyncChannel.channel", "AsyncChannel.outcome_of", "AsyncChannel.requests",
                 "getaddrinfo"):
        assert 'id="pyrdmacm.aio.%s"' % name in html, name
