"""The parity harness (tests/parity.py) on synthetic strace logs: what it keeps, what it flags."""

import re
import sys
from pathlib import Path

import pytest

import parity
from pyrdmacm.wire import COMMAND
from pyrdmacm.abi.codec import CODECS

RDMA_CM = "".join("\\x%02x" % b for b in parity.RDMA_CM.encode())


def line(fd, data, path=RDMA_CM, ret=None, err=None):
    esc = "".join("\\x%02x" % b for b in data)
    target = "%d<%s>" % (fd, path) if path else str(fd)
    result = "-1 %s (x)" % err if err else str(len(data) if ret is None else ret)
    return '123   write(%s, "%s", %d) = %s' % (target, esc, len(data), result)


def create(uid, response):
    return COMMAND["CREATE_ID"].header + CODECS["rdma_ucm_create_id"].pack(uid, response, 2, 2, b"")


def query(response, handle, option):
    return COMMAND["QUERY_ADDR"].header + CODECS["rdma_ucm_query"].pack(response, handle, option)


def destroy(response, handle):
    return COMMAND["DESTROY_ID"].header + CODECS["rdma_ucm_destroy_id"].pack(response, handle, 0)


def log(*lines):
    return "\n".join(lines) + "\n"


def test_stream_starts_at_the_marker_and_keeps_rdma_cm_only():
    text = log(
        line(3, create(7, 0x1000)),                      # start-up probe: before the marker
        line(-1, parity.MARKER, path=None, err="EBADF"),
        line(1, b"hello", path="".join("\\x%02x" % b for b in b"pipe:[1]")),
        line(5, create(9, 0x2000)),
        line(5, destroy(0x3000, 77), err="ENOENT"),
    )
    stream = parity.command_stream(parity.parse_strace(text))
    assert [c["cmd"] for c in stream] == ["CREATE_ID", "DESTROY_ID"]
    assert stream[1]["result"] == "ENOENT" and stream[0]["result"] == 32


def test_missing_marker_is_an_error():
    with pytest.raises(ValueError, match="marker"):
        parity.command_stream(parity.parse_strace(log(line(5, create(1, 2)))))


def test_truncated_strace_buffer_is_an_error():
    with pytest.raises(ValueError, match="truncated"):
        parity.parse_strace('write(5, "\\x00\\x00"..., 32) = 32\n')


def norm(*datas):
    return parity.normalise([dict(parity.decode.decode_command(d), result=len(d)) for d in datas])


def test_pointers_uids_and_handles_compare_by_structure():
    a = norm(create(0x55AA00, 0x7FFF0), query(0x7FFF8, 4, 0), destroy(0x7FFF0, 4))
    b = norm(create(1, 0x10), query(0x20, 9, 0), destroy(0x30, 9))
    assert parity.compare(a, b) == []


def test_a_different_field_or_an_extra_query_is_reported():
    lib = norm(create(1, 0x10), destroy(0x30, 9))
    other_ps = norm(COMMAND["CREATE_ID"].header + CODECS["rdma_ucm_create_id"].pack(1, 0x10, 0x111, 2, b""), destroy(0x30, 9))
    assert any("command 0" in p for p in parity.compare(lib, other_ps))
    extra = norm(create(1, 0x10), query(0x20, 9, 1), destroy(0x30, 9))
    assert any("query librdmacm did not" in p for p in parity.compare(lib, extra))
    fewer_queries = norm(create(1, 0x10), destroy(0x30, 9))
    assert parity.compare(norm(create(1, 0x10), query(0x20, 9, 0), destroy(0x30, 9)), fewer_queries) == []


def set_option(optval, handle):
    return COMMAND["SET_OPTION"].header + CODECS["rdma_ucm_set_option"].pack(optval, handle, 0, 0, 1)


def leave(response, group):
    return COMMAND["LEAVE_MCAST"].header + CODECS["rdma_ucm_destroy_id"].pack(response, group, 0)


def test_option_pointers_compare_by_structure_and_values_stay():
    a = norm(create(1, 0x10), set_option(0x7FFF1234, 4))
    b = norm(create(9, 0x20), set_option(0x55AA, 77))
    assert parity.compare(a, b) == []
    assert a[1]["body"]["optval"] == "ptr" and a[1]["body"]["optname"] == "TOS"  # named by its level


def test_multicast_handles_are_counted_apart_from_id_handles():
    # one run's group handle happens to equal an id handle, the other's does not: same structure
    a = norm(create(1, 0x10), set_option(0x1, 5), leave(0x30, 5), destroy(0x40, 5))
    b = norm(create(2, 0x10), set_option(0x1, 8), leave(0x30, 0), destroy(0x40, 8))
    assert parity.compare(a, b) == []
    assert a[2]["body"]["id"] == "mc0" and a[3]["body"]["id"] == "id0"


def test_reports_compare_step_by_step_with_ephemeral_ports():
    lib = {"steps": [{"call": "info", "src_port": 40001, "device": "rxe0"}]}
    assert parity.compare_reports(lib, {"steps": [{"call": "info", "src_port": 51234, "device": "rxe0"}]}) == []
    bad = parity.compare_reports(lib, {"steps": [{"call": "info", "src_port": 0, "device": "rxe1"}]})
    assert len(bad) == 2 and any("device" in p for p in bad)


def test_hung_program_report_is_kept(tmp_path):
    script = tmp_path / "hang.py"
    script.write_text(
        "import os, sys, time\n"
        "try:\n    os.write(-1, b'parity-start')\nexcept OSError:\n    pass\n"
        "sys.stdout.write('{\"impl\": \"x\", \"steps\": [{\"call\": \"a\"}, ')\n"
        "sys.stdout.flush()\ntime.sleep(30)\n"
    )
    report, stream = parity.run_traced([sys.executable, str(script)], str(tmp_path / "log"), timeout=2)
    assert report == {"impl": "x", "steps": [{"call": "a"}], "hung": True}
    assert stream == []


def test_both_case_programs_speak_the_same_steps():
    tools = Path(parity.__file__).resolve().parent.parent / "tools" / "parity"
    c_words = set(re.findall(r'strcmp\(step, "([a-z-]+)"\)', (tools / "librdmacm_case.c").read_text()))
    py_text = (tools / "pyrdmacm_case.py").read_text()
    py_words = set(re.findall(r'step == "([a-z-]+)"', py_text))
    for group in re.findall(r"step in \(([^)]*)\)", py_text):
        py_words |= set(re.findall(r'"([a-z-]+)"', group))
    assert "wait-event" in c_words and c_words == py_words
