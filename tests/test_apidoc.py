"""docs/api.md is the public calls' docstrings, current; and every public call has one."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_reference_is_current():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "apidoc"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_every_public_call_has_a_docstring():
    import runpy

    apidoc = runpy.run_path(str(ROOT / "tools" / "apidoc"), run_name="apidoc")
    assert "(no docstring)" not in apidoc["render"]()


def test_the_connection_calls_say_what_they_send():
    """The calls that write a command name it: what a user tracing the fd will see."""
    from pyrdmacm import CmId

    for name, command in (("connect", "CONNECT"), ("accept", "ACCEPT"), ("reject", "REJECT"),
                          ("disconnect", "DISCONNECT"), ("listen", "LISTEN"), ("notify", "rdma_notify"),
                          ("establish", "ACCEPT"), ("join_multicast", "JOIN_MCAST"), ("bind_addr", "BIND"),
                          ("resolve_addr", "RESOLVE_ADDR"), ("resolve_route", "RESOLVE_ROUTE")):
        doc = getattr(CmId, name).__doc__ or ""
        assert command in doc, (name, command)
