"""What the subcommands' JSON has in common: one error object, and the exit status."""

import contextlib
import io
import json

from pyrdmacm import cli


def test_every_json_error_is_one_object(monkeypatch):
    """resolve, ping and route say what went wrong with the same object: errno, its name, the
    message (a device node that does not exist here: ENOENT, exit 4)."""
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    for argv in (["resolve", "127.0.0.1", "--no-precheck", "--json", "-n"], ["ping", "127.0.0.1", "--json", "-n"]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        j = json.loads(out.getvalue())
        assert code == 4 == j["exit"], (argv, err.getvalue())
        assert set(j["error"]) == {"errno", "name", "message"} and j["error"]["name"] == "ENOENT", j
        assert "/nonexistent/rdma_cm" in j["error"]["message"]
