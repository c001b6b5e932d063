"""The kernel-contract cases of pyrdmacm.conformance, on every kernel of the lab.

Each case is one test item, so a kernel that departs from the contract shows up by
name; the expectations that differ between kernel versions are data in the cases.
The CLI's ``pyrdmacm conformance --json`` must report the same and exit 0.
"""

import json
import subprocess
import sys

import pytest

from pyrdmacm import conformance

pytestmark = pytest.mark.kernel


@pytest.fixture(scope="module")
def results():
    return {r.case: r for r in conformance.run(local="10.0.2.15")}


@pytest.mark.parametrize("name", [c.name for c in conformance.CASES])
def test_case(results, name):
    r = results[name]
    assert r.passed, "%s: expected %s, observed %s (%s)" % (name, r.expected, r.observed, r.detail)


#: a few cases of each kind (an errno, errno steps by version, a text): the CLI runs what run()
#: runs, so the whole suite once (the fixture) is enough
CLI_CASES = ("short_write", "newest_command_on_older_kernels", "connect_private_data_57", "reject_consumer")


def test_cli_json_agrees(results):
    argv = [sys.executable, "-m", "pyrdmacm", "conformance", "--json"]
    for name in CLI_CASES:
        argv += ["--case", name]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, out
    assert out["failed"] == 0 and out["passed"] == len(CLI_CASES)
    assert {r["case"]: (r["expected"], r["observed"]) for r in out["results"]} == {
        name: (results[name].expected, results[name].observed) for name in CLI_CASES}


def test_cli_reports_a_departure_with_exit_1(tmp_path, monkeypatch):
    """A case whose expectation the kernel does not meet is a FAIL row and exit status 1."""
    from pyrdmacm import cli

    wrong = conformance.Case("short_write_expected_wrongly", "as short_write, expecting ENOSYS",
                             38, conformance.CASES[0].run)
    monkeypatch.setattr(conformance, "CASES", [wrong])  # the names the CLI knows
    monkeypatch.setattr(conformance.runner, "CASES", [wrong])  # the cases run() runs
    assert cli.main(["conformance", "--case", "short_write_expected_wrongly"]) == 1


def test_cli_ktap_output(results):
    proc = subprocess.run([sys.executable, "-m", "pyrdmacm", "conformance", "--ktap", "--case", "short_write",
                           "--case", "reject_consumer"], capture_output=True, text=True, timeout=300)
    lines = proc.stdout.splitlines()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert lines[:1] == ["KTAP version 1"] and "1..2" in lines
    assert "ok 1 short_write" in lines and "ok 2 reject_consumer" in lines
    assert lines[-1] == "# totals: pass:2 fail:0 skip:0"
