"""The CLI on the host: decode, usage errors, and a clear exit when rdma_cm is absent."""

import json
import os
import re
import subprocess
import sys

import pytest

from pyrdmacm import cli
from pyrdmacm.addr import parse_address
from pyrdmacm.cli import output
from pyrdmacm.wire import COMMAND


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_decode_command_hex(capsys):
    d = parse_address("10.0.2.2:7471")
    raw = COMMAND["RESOLVE_ADDR"].encode(7, 500, 0, d.size, 0, b"", d.pack_storage())
    code, out, _ = run(capsys, "decode", raw.hex())
    assert code == 0
    j = json.loads(out)
    assert j["cmd"] == "RESOLVE_ADDR" and j["in"] == 272
    assert j["body"]["id"] == 7 and j["body"]["timeout_ms"] == 500
    assert j["body"]["dst_addr"] == "10.0.2.2:7471" and j["body"]["src_addr"] is None


def test_decode_strace_line(capsys):
    raw = COMMAND["CREATE_ID"].encode(0x55D1, 0x7FFD0000, 0x0106, 2, b"")
    line = 'write(3, "%s", %d) = %d' % ("".join("\\x%02x" % b for b in raw), len(raw), len(raw))
    code, out, _ = run(capsys, "decode", line)
    j = json.loads(out)
    assert code == 0 and j["cmd"] == "CREATE_ID" and j["out"] == 4
    assert j["body"] == {"uid": "0x55d1", "response": "0x7ffd0000", "ps": "TCP", "qp_type": "RC",
                         "reserved": "0000000000"}  # pointers in hex
    code, out, _ = run(capsys, "decode", "--brief", line)
    assert code == 0 and out == "CREATE_ID uid=0x55d1 response=0x7ffd0000 ps=TCP qp_type=RC\n"


def _quoted(raw: bytes, octal: bool = False) -> str:
    return "".join(("\\%o" if octal else "\\x%02x") % b for b in raw)


_CREATE = COMMAND["CREATE_ID"].encode(0x55D1, 0x7FFD0000, 0x0106, 2, b"")
_DESTROY = COMMAND["DESTROY_ID"].encode(0x7FFD0000, 7, 0)
_ROUTE = COMMAND["RESOLVE_ROUTE"].encode(7, 2000)

#: a whole trace as `strace -f -y -xx` of a librdmacm program prints it: the device opened,
#: a thread cloned (it shares the fds), writes to rdma_cm, to libibverbs' uverbs0, to stdout
#: and to a socket (skipped, counted), a write split by another thread's line, a refused
#: RESOLVE_ROUTE (-1 ENODEV), an octal buffer (no -x), the fd dup'ed and the first closed,
#: and a write too short to be a command
TRACE = "\n".join([
    'execve("/usr/bin/rping", ["rping", "-c", "-a", "10.0.2.2"], 0x7ffd /* 9 vars */) = 0',
    'openat(AT_FDCWD, "/dev/infiniband/rdma_cm", O_RDWR|O_CLOEXEC) = 3',
    'write(3, "%s", 32) = 32' % _quoted(_CREATE),
    'openat(AT_FDCWD, "/dev/infiniband/uverbs0", O_RDWR|O_CLOEXEC) = 4',
    'write(4, "\\x00\\x01\\x02", 3) = 3',
    'clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD, child_tid=0x7f}, 88) = 4243',
    '[pid  4243] write(3</dev/infiniband/rdma_cm>, "%s", 16 <unfinished ...>' % _quoted(_ROUTE),
    '[pid  4242] write(1</dev/pts/0>, "created cm_id\\x0a", 14) = 14',
    '[pid  4243] <... write resumed>) = -1 ENODEV (No such device)',
    '[pid  4242] write(5<socket:[9876]>, "\\x15\\x00\\x00\\x00", 4) = 4',
    '[pid  4242] dup(3) = 7',
    '[pid  4242] close(3) = 0',
    '[pid  4242] write(7, "%s", 24) = 24' % _quoted(_DESTROY, octal=True),
    '[pid  4242] write(7, "\\x01\\x00", 2) = 2',
])


def test_decode_a_whole_trace_follows_the_rdma_cm_fd(capsys, monkeypatch, tmp_path):
    """A whole `strace -f -y` trace: the writes to rdma_cm are decoded, each with its pid, fd
    and result (a refused command keeps its errno); the writes to other files are skipped
    and counted, not failures; a write that does not decode is named and exits 3."""
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO(TRACE))
    code, out, err = run(capsys, "decode")
    records = [json.loads(line) for line in out.splitlines()]
    assert all(r["schema"] == 1 for r in records)
    assert records.pop() == {"schema": 1, "writes": 4, "decoded": 3, "failed": 1, "skipped": 3, "exit": 3}
    assert [(r["line"], r.get("pid"), r["fd"], r["ret"], r.get("errno")) for r in records] == [
        (3, None, 3, 32, None), (7, 4243, 3, -1, "ENODEV"), (13, 4242, 7, 24, None), (14, 4242, 7, 2, None)]
    assert records[0]["cmd"] == "CREATE_ID" and records[0]["body"]["response"] == "0x7ffd0000"
    assert records[1]["cmd"] == "RESOLVE_ROUTE" and records[1]["body"] == {"id": 7, "timeout_ms": 2000}
    assert records[2]["cmd"] == "DESTROY_ID" and records[2]["body"]["id"] == 7
    assert records[3]["error"]["struct"] == "rdma_ucm_cmd_hdr" and "needs 8 bytes, 2 left" in records[3]["error"]["message"]
    assert code == output.EXIT_USAGE and err == "pyrdmacm: 1 of 4 writes to rdma_cm did not decode\n"
    trace = tmp_path / "rping.trace"  # the same trace as a file named on the command line, --brief
    trace.write_text(TRACE)
    code, out, err = run(capsys, "decode", "--brief", str(trace))
    assert out.splitlines() == [
        "line 3 fd 3: CREATE_ID uid=0x55d1 response=0x7ffd0000 ps=TCP qp_type=RC = 32",
        "line 7 pid 4243 fd 3: RESOLVE_ROUTE id=7 timeout_ms=2000 = -1 ENODEV",
        "line 13 pid 4242 fd 7: DESTROY_ID response=0x7ffd0000 id=7 = 24",
        "line 14 pid 4242 fd 7: cannot decode rdma_ucm_cmd_hdr at offset 2: needs 8 bytes, 2 left = 2",
        "3 writes to other files skipped: fd 1 (/dev/pts/0), fd 4 (/dev/infiniband/uverbs0), fd 5 (socket:[9876])"]
    good = "\n".join(TRACE.splitlines()[:-1])  # without the short write: every rdma_cm write decodes
    trace.write_text(good)
    code, out, _ = run(capsys, "decode", "--json", str(trace))
    assert code == 0 and json.loads(out.splitlines()[-1])["exit"] == 0
    code, out, err = run(capsys, "decode", "--json", "--brief", str(trace))
    assert code == 3 and "choose one" in err
    trace.write_text("\n".join(line for line in TRACE.splitlines() if "rdma_cm" not in line and "(3" not in line
                               and "(7" not in line))
    code, out, err = run(capsys, "decode", str(trace))
    assert code == 3 and "no write to the rdma_cm device in the trace" in err


def test_a_write_is_the_files_its_fd_was_when_it_started():
    """A thread's GET_EVENT blocked in the kernel when the process exits is never resumed,
    and another thread closed the fd meanwhile (as rping's teardown traces, -f -o, no -y):
    still the device's write, with no result."""
    from pyrdmacm.decode import read_trace

    trace = "\n".join([
        '146 openat(AT_FDCWD, "/dev/infiniband/rdma_cm", O_RDWR|O_CLOEXEC) = 3',
        '146 clone(child_stack=0x7f, flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD) = 147',
        '147 write(3, "%s", 16 <unfinished ...>' % _quoted(COMMAND["GET_EVENT"].encode(0x1000)),
        '146 write(3, "%s", 24 <unfinished ...>' % _quoted(_DESTROY),
        '146 <... write resumed>) = 24',
        '146 close(3) = 0',
        '146 +++ exited with 0 +++',
    ])
    get, destroy = sorted(read_trace(trace), key=lambda w: w.pid, reverse=True)
    assert (get.pid, get.fd, get.rdma_cm, get.ret) == (147, 3, True, None)
    assert (destroy.pid, destroy.rdma_cm, destroy.ret, destroy.line) == (146, True, 24, 4)


def test_a_trace_of_the_device_alone_decodes_every_write(capsys, monkeypatch):
    """`strace -P /dev/infiniband/rdma_cm` (the README's recipe) shows the device's writes
    alone, maybe without its open (attached later): every write is the device's."""
    import io

    lines = ['write(5, "%s", 32) = 32' % _quoted(_CREATE), 'write(5, "%s", 24) = 24' % _quoted(_DESTROY)]
    monkeypatch.setattr(sys, "stdin", io.StringIO("\n".join(lines)))
    code, out, _ = run(capsys, "decode", "--brief")
    assert code == 0 and [line.split(": ")[1].split()[0] for line in out.splitlines()] == ["CREATE_ID", "DESTROY_ID"]


def test_decode_names_every_enum_of_a_command():
    """INIT_QP_ATTR's qp_state, NOTIFY's event, REJECT's reason and SET_OPTION's optname (by
    its level) are named, as the port space and QP type of CREATE_ID are."""
    from pyrdmacm import decode

    qp = decode.decode_command(COMMAND["INIT_QP_ATTR"].encode(0x1000, 7, 2))["body"]
    assert qp["qp_state"] == "RTR"
    note = decode.decode_command(COMMAND["NOTIFY"].encode(7, 4))["body"]
    assert note["event"] == "COMM_EST"
    opt = decode.decode_command(COMMAND["SET_OPTION"].encode(0x2000, 7, 0, 3, 1))["body"]
    assert (opt["level"], opt["optname"]) == ("ID", "ACK_TIMEOUT")
    ib = decode.decode_command(COMMAND["SET_OPTION"].encode(0x2000, 7, 1, 1, 64))["body"]
    assert (ib["level"], ib["optname"]) == ("IB", "PATH")


def test_decode_of_a_quoted_buffer_strace_never_prints_is_a_usage_error(capsys):
    """strace escapes every byte that is not printable ASCII: a line holding one (pasted
    through an editor, typed by hand) is named, not a traceback."""
    code, out, err = run(capsys, "decode", 'write(3, "\u20ac", 5)')
    assert code == output.EXIT_USAGE and not out
    assert "strace never prints" in err and "Traceback" not in err


def test_decode_reply_event(capsys):
    raw = (1).to_bytes(8, "little") + (0).to_bytes(4, "little") + (1).to_bytes(4, "little")
    raw += (2**32 - 110).to_bytes(4, "little") + bytes(336 - 20)
    code, out, _ = run(capsys, "decode", "--reply", "GET_EVENT", raw.hex())
    j = json.loads(out)["reply"]
    assert code == 0 and j["event"] == "ADDR_ERROR" and j["status"] == -110 and j["status_name"] == "ETIMEDOUT"


def test_decode_reply_event_names_a_reject_reason(capsys):
    raw = (1).to_bytes(8, "little") + (5).to_bytes(4, "little") + (8).to_bytes(4, "little")  # uid, id, REJECTED
    raw += (8).to_bytes(4, "little") + bytes(336 - 20)  # status 8: the IB CM's reject reason, no errno
    code, out, _ = run(capsys, "decode", "--reply", "GET_EVENT", raw.hex())
    j = json.loads(out)["reply"]
    assert code == 0 and j["event"] == "REJECTED" and j["status"] == 8
    assert j["status_name"] == "reject reason INVALID_SERVICE_ID"


@pytest.mark.parametrize(
    "argv,message",
    [
        (["decode", "zz"], "neither hex bytes nor an strace"),
        (["decode", "0c000000"], "rdma_ucm_cmd_hdr at offset"),
        (["decode", "63000000" + "0000" + "0000"], "unknown command 99"),
        (["decode", "--reply", "NOPE", "00"], "unknown reply kind"),
        (["resolve", "10.0.0.256"], "not an IP address"),
        (["resolve", "-n", "not-an-ip"], "'not-an-ip' is a host name, and -n/--numeric looks up none"),
        (["resolve", "10.0.0.1", "--src", "fe80::1"], "needs a zone"),
    ],
)
def test_bad_input_exits_3_with_a_message(capsys, argv, message):
    code, _out, err = run(capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert message in err


def test_resolve_without_rdma_cm_exits_4(capsys, monkeypatch):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    code, out, err = run(capsys, "resolve", "10.0.0.1", "--no-precheck", "--json")
    assert code == cli.EXIT_NODEV
    assert "rdma_ucm" in err
    assert json.loads(out)["error"]["errno"] == 2


def test_python_dash_m_and_help():
    r = subprocess.run([sys.executable, "-m", "pyrdmacm", "--help"], capture_output=True, text=True)
    assert r.returncode == 0
    for sub in ("resolve", "route", "devices", "probe", "decode"):
        assert sub in r.stdout


@pytest.fixture
def fake_rdma_cm(monkeypatch):
    """`pyrdmacm resolve` against the fake kernel: 10.0.0.1 local, 10.0.0.2 answers, 10.0.0.99 silent."""
    import pyrdmacm.core.event_channel
    from pyrdmacm.testing import FakeKernel, FakeNet

    made = []

    class FakeChannel(pyrdmacm.core.event_channel.EventChannel):
        def __init__(self, transport=None, **kw):
            made.append(transport or FakeKernel(FakeNet()))
            super().__init__(made[-1], **kw)

    monkeypatch.setattr(pyrdmacm.core.event_channel, "EventChannel", FakeChannel)
    return made


def test_progress_line_on_a_long_wait_when_asked(capsys, fake_rdma_cm):
    code, out, err = run(capsys, "resolve", "10.0.0.99", "--timeout", "1700", "--no-precheck", "--progress")
    assert code == cli.EXIT_EVENT and "ADDR_ERROR" in out and "ETIMEDOUT" in out
    lines = err.splitlines()  # not a terminal: one line per update, no carriage returns
    # an update each half second from the first second on (1.0, 1.5 on an idle machine; a
    # loaded one prints each a little late, and may have no time for the second)
    elapsed = []
    for line in lines:
        m = re.fullmatch(r"waiting for ADDR_RESOLVED from 10\.0\.0\.99 \.\.\. (\d\.\d) s / timeout 1\.7 s", line)
        assert m, line
        elapsed.append(float(m.group(1)))
    assert 1 <= len(elapsed) <= 2 and "\r" not in err
    assert 1.0 <= elapsed[0] < 1.5 and all(b - a > 0.45 for a, b in zip(elapsed, elapsed[1:])), elapsed


def test_no_progress_line_unless_asked_or_on_a_terminal(capsys, fake_rdma_cm):
    code, out, err = run(capsys, "resolve", "10.0.0.99", "--timeout", "1200", "--no-precheck")
    assert code == cli.EXIT_EVENT and "ADDR_ERROR" in out
    assert "waiting" not in err
    code, out, err = run(capsys, "resolve", "10.0.0.2", "--no-precheck", "--progress")
    assert code == cli.EXIT_OK and "ADDR_RESOLVED" in out
    assert err == ""  # answered within the first second: no line


def test_progress_line_on_a_terminal_is_rewritten_and_erased(monkeypatch, fake_rdma_cm):
    import io
    import os

    master, slave = os.openpty()
    tty = io.TextIOWrapper(io.FileIO(slave, "w", closefd=False), write_through=True)
    monkeypatch.setattr(sys, "stderr", tty)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    try:
        code = cli.main(["resolve", "10.0.0.99", "--timeout", "1200", "--no-precheck"])
        seen = b""
        os.set_blocking(master, False)
        try:
            while True:
                seen += os.read(master, 4096)
        except (BlockingIOError, OSError):
            pass
    finally:
        os.close(slave)
        os.close(master)
    assert code == cli.EXIT_EVENT
    text = seen.decode()
    assert text.startswith("\rwaiting for ADDR_RESOLVED from 10.0.0.99 ... 1.0 s / timeout 1.2 s")
    assert text.endswith("\r\x1b[K") and "\n" not in text.replace("\r\n", "")


def test_strict_needs_the_precheck(capsys):
    code, _out, err = run(capsys, "resolve", "10.0.0.1", "--strict", "--no-precheck")
    assert code == cli.EXIT_USAGE and "--strict needs the pre-check" in err


def test_link_local_without_zone_same_refusal_in_route_and_resolve(capsys):
    code_r, _o, err_route = run(capsys, "route", "fe80::1")
    code_s, _o, err_resolve = run(capsys, "resolve", "fe80::1")
    assert code_r == code_s == cli.EXIT_USAGE
    assert err_route == err_resolve and "needs a zone naming the interface" in err_route


def test_gids_of_ipv4_addresses_print_in_dotted_form():
    import ipaddress

    assert output._ip_text(ipaddress.IPv6Address("::ffff:a00:20f")) == "::ffff:10.0.2.15"
    assert output._ip_text(ipaddress.IPv6Address("fe80::5054:ff:fe12:3456")) == "fe80::5054:ff:fe12:3456"
    assert output._jsonable({"sgid": ipaddress.IPv6Address("::ffff:a00:202")}) == {"sgid": "::ffff:10.0.2.2"}


@pytest.mark.parametrize("zone", ["\u00b2", "\u0661", "\uff11"])
def test_route_refuses_a_zone_in_non_ascii_digits_without_a_traceback(capsys, zone):
    code, out, err = run(capsys, "route", "fe80::1%" + zone)
    assert code == cli.EXIT_USAGE and "zone" in err and "Traceback" not in err + out


#: (argv, exit status, the CLI's modules it loads): each subcommand imports its own module
#: and the shared ones, none of the others'
SUBCOMMAND_MODULES = [
    (["--version"], 0, {"output", "inputs"}),
    (["route", "-n", "nosuch"], 3, {"output", "inputs", "route"}),
    (["resolve", "--no-precheck", "10.0.0.1"], 4, {"output", "inputs", "route", "resolve"}),
    (["decode", "00"], 3, {"output", "inputs", "diag"}),
    (["conformance", "--list"], 0, {"output", "inputs", "diag"}),
    (["ping", "10.0.0.1", "--count", "0"], 3, {"output", "inputs", "conn", "ping"}),
    (["listen", "0"], 3, {"output", "inputs", "conn", "listen"}),
]


@pytest.mark.parametrize("argv,code,own", SUBCOMMAND_MODULES, ids=[" ".join(a) for a, _c, _o in SUBCOMMAND_MODULES])
def test_a_subcommand_imports_what_it_needs(argv, code, own):
    """Start-up: the parser loads no subcommand's module; ``route`` loads no channel,
    ``resolve --no-precheck`` no pre-check (and so no pyroute2)."""
    program = ("import json, sys\nfrom pyrdmacm.cli import main\ntry:\n    code = main(%r)\n"
               "except SystemExit as e:\n    code = e.code\nprint(json.dumps([code, sorted(sys.modules)]))" % argv)
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, check=True,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          env=dict(os.environ, PYRDMACM_DEVICE="/nonexistent/rdma_cm"))
    got, mods = json.loads(proc.stdout.splitlines()[-1])
    assert got == code, proc.stderr
    assert {m.split(".")[2] for m in mods if m.startswith("pyrdmacm.cli.")} == own
    if argv[0] in ("route", "decode", "conformance", "--version"):
        assert "pyrdmacm.core.event_channel" not in mods
    if argv[0] == "resolve":
        assert "pyrdmacm.precheck" not in mods and not any(m.startswith("pyroute2") for m in mods)


@pytest.mark.parametrize("argv, status", [
    (["resolve", "127.0.0.1", "--json"], output.EXIT_NODEV),  # the device node is missing: 4
    (["conformance", "--list", "--json"], output.EXIT_OK),    # pages of output
])
def test_a_reader_that_has_gone_leaves_the_real_exit_status_and_no_traceback(argv, status, tmp_path):
    """``pyrdmacm ... | head -1``: the pipe's reader is gone before the output is written.
    The exit status is the subcommand's own (it used to be 0, or 120 with Python's
    "Exception ignored ... BrokenPipeError"), and stderr holds no traceback."""
    r, w = os.pipe()
    os.close(r)  # the reader is gone before the first write
    env = dict(os.environ, PYRDMACM_DEVICE=str(tmp_path / "no-such-node"))
    try:
        proc = subprocess.run([sys.executable, "-m", "pyrdmacm", *argv], stdout=w, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    finally:
        os.close(w)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (every write: ENOSPC)")
@pytest.mark.parametrize("argv, say", [
    (["resolve", "127.0.0.1", "--json"], None),     # one document, then the exit status 4 is replaced
    (["conformance", "--list", "--json"], None),    # pages of output
    (["conformance", "--list"], None),
    (["--help"], None),                             # argparse's own print
    (["mesh", "--merge", "RUN"], "the merged matrix"),
])
def test_an_output_that_cannot_be_written_exits_5_with_one_line(argv, say, tmp_path):
    """``> /dev/full`` (a full disk, an I/O error): one line on stderr naming the errno, exit
    status 5 (EXIT_OUTPUT: never 1, which means a failure event), no traceback, nothing
    left for Python's flush at exit."""
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": 1, "cell": {"host": "h", "rail": "eth0", "target": "10.0.0.9",
                                                     "outcome": "no-listener"}}) + "\n")
    argv = [str(run) if a == "RUN" else a for a in argv]
    env = dict(os.environ, PYRDMACM_DEVICE=str(tmp_path / "no-such-node"))
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "pyrdmacm", *argv], stdout=full, stderr=subprocess.PIPE,
                              text=True, env=env, timeout=120)
    assert proc.returncode == output.EXIT_OUTPUT == 5, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("pyrdmacm: cannot write")]
    assert lines == ["pyrdmacm: cannot write the output: No space left on device (ENOSPC)"], proc.stderr
    assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr


def test_an_output_encoding_that_cannot_hold_a_name_exits_5_naming_the_character(tmp_path):
    run = tmp_path / "run.json"
    run.write_text("".join(json.dumps({"schema": 1, "cell": {"host": host, "rail": "eth0", "target": "10.0.0.9",
                                                             "outcome": "no-listener"}}) + "\n"
                           for host in ("n\u0153ud-7", "node-8")))  # two hosts: rows are named host/rail
    env = dict(os.environ, PYTHONIOENCODING="ascii")
    proc = subprocess.run([sys.executable, "-m", "pyrdmacm", "mesh", "--merge", str(run)], capture_output=True,
                          text=True, env=env, timeout=120)
    assert proc.returncode == 5, proc.stderr
    assert proc.stderr.splitlines() == ["pyrdmacm: cannot write the output: its encoding, ascii, cannot hold "
                                        "'\\u0153': set PYTHONIOENCODING=utf-8 (or use a UTF-8 locale)"]


def test_an_svg_or_prometheus_file_that_cannot_be_written_names_it_and_leaves_no_temporary(tmp_path, capsys):
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"schema": 1, "cell": {"host": "h", "rail": "eth0", "target": "10.0.0.9",
                                                     "outcome": "no-listener"}}) + "\n")
    where = tmp_path / "no-such-dir" / "mesh.prom"
    code = cli.main(["mesh", "--merge", str(run), "--prometheus", str(where)])
    err = capsys.readouterr().err
    assert code == 5 and err == "pyrdmacm: cannot write %s: No such file or directory\n" % where
    if os.path.exists("/dev/full"):  # the file beside it is written, fails, and is removed
        os.symlink("/dev/full", tmp_path / ("full.svg.%d.tmp" % os.getpid()))
        code = cli.main(["mesh", "--merge", str(run), "--svg", str(tmp_path / "full.svg")])
        err = capsys.readouterr().err
        assert code == 5 and err == "pyrdmacm: cannot write %s: No space left on device\n" % (tmp_path / "full.svg")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]
