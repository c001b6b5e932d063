"""What the subcommands' JSON has in common: one error object, and the exit status."""

import contextlib
import io
import json
import os

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


def _run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


#: one document each (a device node that does not exist here: the device's subcommands fail
#: with 4, the others succeed); a list is under its own key
DOCUMENTS = (
    (["route", "127.0.0.1", "--json", "-n"], None),
    (["resolve", "127.0.0.1", "--no-precheck", "--json", "-n"], None),
    (["ping", "127.0.0.1", "--json", "-n"], None),
    (["devices", "--json"], "devices"),
    (["probe", "--json"], None),
    (["ids", "--json"], "ids"),
    (["conformance", "--json"], None),
    (["conformance", "--list", "--json"], "cases"),
    (["decode", "01000000100004000000fd7f000000000700000000000000"], None),  # DESTROY_ID of id 7
)


def test_every_document_says_its_schema_first_and_its_exit_status_last(monkeypatch):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    for argv, key in DOCUMENTS:
        code, out, err = _run(argv)
        doc = json.loads(out)
        assert isinstance(doc, dict), argv
        keys = list(doc)
        assert keys[0] == "schema" and doc["schema"] == 1, (argv, keys)
        assert keys[-1] == "exit" and doc["exit"] == code, (argv, code, doc["exit"], err)
        if key:
            assert isinstance(doc[key], list), (argv, key)
        if "error" in doc:  # the one error object
            assert {"errno", "name", "message"} <= set(doc["error"]), (argv, doc["error"])


def test_probe_puts_values_in_value_fields_and_the_reasons_beside_them(monkeypatch):
    """A value probe cannot know is null, and why is in ``errors`` under its field, as the one
    error object: no sentence where a value belongs."""
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    code, out, _ = _run(["probe", "--json"])
    doc = json.loads(out)
    assert code == 4 == doc["exit"] and doc["open"] is False
    assert doc["errors"]["open"]["name"] == "ENOENT" and "/nonexistent/rdma_cm" in doc["errors"]["open"]["message"]
    for field, value in doc.items():
        if field in ("errors", "kernel", "device_node"):
            continue
        assert value is None or not isinstance(value, str) or " " not in value, (field, value)
        if value is None and field != "abi_version_sysfs":
            assert field in doc["errors"], field


def test_global_j_is_one_line_and_p_indents_as_iproute2(monkeypatch):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    try:
        code, out, _ = _run(["-j", "route", "127.0.0.1", "-n"])
        assert out.count("\n") == 1 and json.loads(out)["exit"] == code  # one line, as `ip -j`
        for argv in (["-p", "route", "127.0.0.1", "-n"], ["-j", "-p", "route", "127.0.0.1", "-n"],
                     ["route", "127.0.0.1", "-n", "--json"]):
            code, out, _ = _run(argv)
            assert out.startswith('{\n  "schema": 1,\n') and json.loads(out)["exit"] == code, argv
        code, out, _ = _run(["-j", "devices"])  # a subcommand's text becomes JSON
        assert json.loads(out) == {"schema": 1, "devices": [], "exit": 4} or json.loads(out)["devices"]
        code, out, err = _run(["-j", "conformance", "--ktap"])
        assert code == 3 and "choose one" in err and out == ""
    finally:
        from pyrdmacm.cli import output

        output.json_layout(compact=False)  # the process's layout, as a new process has it


def test_every_line_of_a_stream_says_its_schema_and_the_last_its_exit(monkeypatch):
    """listen and mcast are streams (JSON Lines): every line has the schema; the last one,
    STOPPED, the exit status and the error object (a device node that does not exist)."""
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    for argv in (["listen", "7471", "--json"], ["mcast", "239.1.1.1", "--count", "0", "--json", "-n"]):
        code, out, _ = _run(argv)
        lines = [json.loads(line) for line in out.splitlines()]
        assert lines and all(r["schema"] == 1 for r in lines), (argv, out)
        last = lines[-1]
        assert last["event"] == "STOPPED" and last["exit"] == code == 4, (argv, last)
        assert last["error"]["name"] == "ENOENT", (argv, last)


def test_probe_text_never_prints_pythons_none(monkeypatch):
    """Text says what an unknown value means (the JSON says null), never Python's None."""
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    code, out, _ = _run(["probe"])
    assert code == 4 and "None" not in out.split(), out
    lines = dict(line.split(None, 1) for line in out.splitlines() if line and not line.startswith(" "))
    if not os.path.exists("/sys/class/misc/rdma_cm/abi_version") and not os.path.exists(
            "/sys/class/infiniband_ucma/abi_version"):
        assert lines["abi_version_sysfs"].startswith("absent (neither /sys/class/misc/rdma_cm/abi_version nor ")
