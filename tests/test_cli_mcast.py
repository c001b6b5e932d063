"""`pyrdmacm mcast` on the fake fabric (pyrdmacm.testing.FakeFabric): the CLI runs on host B
(10.9.0.2), its channel made by ``pyrdmacm.cli.conn._open_channel``, which the tests point at
B.  The fake joins as RoCE does (no SA: MULTICAST_JOIN at once); the group's later events
(MULTICAST_ERROR, ADDR_CHANGE, DEVICE_REMOVAL) are injected by a thread once the membership
exists.  What the kernel does is asserted in the lab (tests/kernel/test_cli_mcast_lab.py).
"""

from __future__ import annotations

import errno
import json
import os
import signal
import threading
import time
from typing import Any, List

import pytest

from pyrdmacm import EventChannel, cli
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.abi import McJoinFlag
from pyrdmacm.abi import UserCmCmd as C
from pyrdmacm.cli import conn
from pyrdmacm.testing import FakeFabric

B = "10.9.0.2"


@pytest.fixture
def kernels(monkeypatch):
    """The CLI's channels are on host B; the fake kernels it opened, to look at afterwards."""
    fab = FakeFabric()
    host = fab.host(B)
    opened: List[Any] = []

    def open_channel():
        opened.append(host())
        return EventChannel(opened[-1])

    monkeypatch.setattr(conn, "_open_channel", open_channel)
    yield opened
    fab.close()


def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def commands(kernel) -> List[C]:
    return [C(cmd) for cmd, *_ in kernel.commands if cmd != C.GET_EVENT]


def after_join(kernels, action, delay=0.05):
    """Run ``action(kernel, membership)`` in a thread once the CLI's membership exists."""

    def go():
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not (kernels and kernels[-1].memberships):
            time.sleep(0.005)
        time.sleep(delay)
        k = kernels[-1]
        [mc] = k.memberships.values()
        action(k, mc)

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_count_0_joins_shows_the_address_handle_and_leaves_at_once(capsys, kernels):
    code, out, err = run(capsys, "mcast", "239.1.1.1", "--count", "0")
    assert code == cli.EXIT_OK and err == ""
    lines = out.splitlines()
    assert lines[0] == "mcast 239.1.1.1 from the source the routing tables choose (rdma_cm PS_UDP, full member)"
    assert lines[1].startswith("ADDR_RESOLVED in ") and lines[1].endswith(": source 10.9.0.2 on fake0 port 1")
    assert lines[2].startswith("MULTICAST_JOIN in ")
    assert lines[3] == "joined dgid: ::ffff:239.1.1.1 mlid 0x0 sl 0"  # mckey's line, without "mckey: "
    assert lines[4] == "group: qp 0xffffff qkey 0x01234567"
    assert lines[5] == ("address handle: dgid ::ffff:239.1.1.1 dlid 0x0 sl 0 sgid_index 1 hop_limit 64 "
                        "traffic_class 0 flow_label 0 port 1 is_global 1 static_rate 0 src_path_bits 0")
    assert lines[6] == "left 239.1.1.1 (LEAVE_MCAST): the kernel reported 1 event of the membership"
    assert lines[7] == "--- stopped (count reached): 0 events, exit 0 ---"
    assert len(lines) == 8
    [k] = kernels
    # mckey's order, without a bind when no source is given
    assert commands(k) == [C.CREATE_ID, C.RESOLVE_ADDR, C.QUERY, C.JOIN_MCAST, C.LEAVE_MCAST, C.DESTROY_ID]
    assert k.closed and k.memberships == {} and k.ids == {}


def test_src_binds_first_and_send_only_joins_with_its_flag(capsys, kernels):
    code, out, _ = run(capsys, "mcast", "239.1.1.2", "--src", B, "--send-only", "--count", "0")
    assert code == cli.EXIT_OK
    assert out.splitlines()[0] == "mcast 239.1.1.2 from 10.9.0.2 (rdma_cm PS_UDP, send-only full member)"
    [k] = kernels
    assert commands(k)[:3] == [C.CREATE_ID, C.BIND, C.RESOLVE_ADDR]
    [join] = [body for cmd, _i, _o, body in k.commands if cmd == C.JOIN_MCAST]
    assert CODECS["rdma_ucm_join_mcast"].unpack_dict(join)["join_flags"] == McJoinFlag.SENDONLY_FULLMEMBER


def test_ps_ipoib_creates_an_ipoib_id(capsys, kernels):
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--ps", "ipoib", "--count", "0")
    assert code == cli.EXIT_OK and "(rdma_cm PS_IPOIB, full member)" in out
    [k] = kernels
    [create] = [body for cmd, _i, _o, body in k.commands if cmd == C.CREATE_ID]
    assert CODECS["rdma_ucm_create_id"].unpack_dict(create)["ps"] == 0x0002  # RDMA_PS_IPOIB


def test_json_lines(capsys, kernels):
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--count", "0", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [r["event"] for r in records] == ["MCAST", "ADDR_RESOLVED", "MULTICAST_JOIN", "LEFT",
                                                            "STOPPED"]
    assert all(isinstance(r["time"], float) for r in records)
    start, resolved, join, left, stopped = records
    assert (start["group"], start["src"], start["ps"], start["send_only"], start["count"]) == (
        "239.1.1.1", None, "UDP", False, 0)
    assert (resolved["src"], resolved["device"], resolved["port_num"]) == (B, "fake0", 1)
    assert (join["dgid"], join["mlid"], join["sl"], join["qp_num"], join["qkey"]) == (
        "::ffff:239.1.1.1", 0, 0, 0xFFFFFF, 0x01234567)
    assert join["ah"]["hop_limit"] == 64 and join["ah"]["is_global"] == 1 and join["ah"]["port_num"] == 1
    assert left["events_reported"] == 1
    assert stopped == dict(stopped, why="count", events=0, exit=0) and "error" not in stopped


def test_count_waits_for_the_groups_events_a_multicast_error_exits_1(capsys, kernels):
    def inject(k, mc):
        k.inject_event(mc.handle, E.ADDR_CHANGE)
        k.inject_event(mc.handle, E.MULTICAST_ERROR, status=-errno.ENETRESET, uid=mc.uid)

    t = after_join(kernels, inject)
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--count", "2", "--json")
    t.join(5)
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["event"] for r in records] == ["MCAST", "ADDR_RESOLVED", "MULTICAST_JOIN", "WAITING", "ADDR_CHANGE",
                                             "MULTICAST_ERROR", "LEFT", "STOPPED"]
    error = records[5]
    assert (error["status"], error["name"]) == (-errno.ENETRESET, "ENETRESET")
    stopped = records[-1]
    assert code == cli.EXIT_EVENT and (stopped["why"], stopped["events"], stopped["exit"]) == ("count", 2, 1)
    assert stopped["error"]["name"] == "ENETRESET" and "join again" in stopped["error"]["message"]


def test_an_addr_change_is_shown_and_exits_0(capsys, kernels):
    t = after_join(kernels, lambda k, mc: k.inject_event(mc.handle, E.ADDR_CHANGE))
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--count", "1")
    t.join(5)
    lines = out.splitlines()
    assert code == cli.EXIT_OK
    assert lines[6] == "waiting for the group's events (MULTICAST_ERROR, ADDR_CHANGE ...): until 1 came"
    assert lines[7].endswith(" ADDR_CHANGE") and lines[7][2] == ":"  # HH:MM:SS.mmm ADDR_CHANGE
    assert lines[-1] == "--- stopped (count reached): 1 event, exit 0 ---"


def test_device_removal_ends_the_run_without_leaving(capsys, kernels):
    t = after_join(kernels, lambda k, mc: k.inject_event(mc.handle, E.DEVICE_REMOVAL))
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--json")  # no --count: the event ends it
    t.join(5)
    records = [json.loads(line) for line in out.splitlines()]
    assert code == cli.EXIT_EVENT
    assert [r["event"] for r in records][-2:] == ["DEVICE_REMOVAL", "STOPPED"]
    assert records[-1]["why"] == "DEVICE_REMOVAL" and records[-1]["exit"] == 1
    [k] = kernels
    assert C.LEAVE_MCAST not in commands(k) and commands(k)[-1] == C.DESTROY_ID


@pytest.mark.parametrize("sig,why", [(signal.SIGINT, "SIGINT"), (signal.SIGTERM, "SIGTERM")])
def test_a_signal_after_the_join_leaves_and_exits_0(capsys, kernels, sig, why, sigint_raises):
    def change_then_signal(k, mc):
        k.inject_event(mc.handle, E.ADDR_CHANGE)
        time.sleep(0.2)
        os.kill(os.getpid(), sig)

    t = after_join(kernels, change_then_signal)
    started = time.monotonic()
    code, out, err = run(capsys, "mcast", "239.1.1.1")
    t.join(5)
    lines = out.splitlines()
    assert code == cli.EXIT_OK and err == "" and time.monotonic() - started < 5
    assert lines[6] == "waiting for the group's events (MULTICAST_ERROR, ADDR_CHANGE ...): Ctrl-C stops"
    assert lines[7].endswith(" ADDR_CHANGE")
    assert lines[-2].startswith("left 239.1.1.1 (LEAVE_MCAST)")
    assert lines[-1] == "--- stopped (%s): 1 event, exit 0 ---" % why  # counted before the signal
    [k] = kernels
    assert commands(k)[-2:] == [C.LEAVE_MCAST, C.DESTROY_ID] and k.closed
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def no_join_event(monkeypatch):
    """The fake kernel queues no membership's event (an SA join on InfiniBand that is slow)."""
    from pyrdmacm.testing.fake_file import UcmaFile

    real = UcmaFile.push

    def push(self, handle, raw, owner=None, mc=0):
        if not mc:
            real(self, handle, raw, owner, mc)

    monkeypatch.setattr(UcmaFile, "push", push)


def test_a_signal_before_the_join_completed_exits_130(capsys, kernels, monkeypatch, sigint_raises):
    """The join waits for MULTICAST_JOIN, and SIGINT comes during the wait."""
    no_join_event(monkeypatch)
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == cli.EXIT_INTERRUPTED
    assert [r["event"] for r in records] == ["MCAST", "ADDR_RESOLVED", "LEFT", "STOPPED"]
    assert records[-1]["why"] == "SIGINT" and records[-1]["exit"] == 130
    [k] = kernels
    assert commands(k)[-3:] == [C.JOIN_MCAST, C.LEAVE_MCAST, C.DESTROY_ID] and k.closed


def test_no_multicast_join_within_the_timeout_exits_1(capsys, kernels, monkeypatch):
    no_join_event(monkeypatch)
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--timeout", "100")
    lines = out.splitlines()
    assert code == cli.EXIT_EVENT
    assert lines[-3] == "timed out in step join: no MULTICAST_JOIN within 1100 ms"
    assert lines[-2].startswith("left 239.1.1.1 (LEAVE_MCAST)")  # the kernel held the membership: left
    assert lines[-1] == "--- stopped (join): 0 events, exit 1 ---"


def test_a_refused_bind_exits_2_saying_which_step(capsys, kernels):
    code, out, err = run(capsys, "mcast", "239.1.1.1", "--src", "10.9.0.7", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == cli.EXIT_KERNEL and err == ""
    assert records[1]["event"] == "REFUSED" and records[1]["step"] == "bind"
    assert records[-1]["error"] == dict(records[-1]["error"], errno=errno.EADDRNOTAVAIL, name="EADDRNOTAVAIL",
                                        step="bind", refused="BIND")


def test_a_multicast_error_answering_the_join_exits_1(capsys, kernels, monkeypatch):
    from pyrdmacm.testing import fake_multicast

    real = fake_multicast.MulticastCommands.join_event

    def failed(self, ctx, mc):
        raw = bytearray(real(self, ctx, mc))
        fields = CODECS["rdma_ucm_event_resp"].unpack_dict(bytes(raw))
        fields.update(event=int(E.MULTICAST_ERROR), status=(-errno.ENETUNREACH) & 0xFFFFFFFF)
        return CODECS["rdma_ucm_event_resp"].pack_dict(fields)

    monkeypatch.setattr(fake_multicast.MulticastCommands, "join_event", failed)
    code, out, _ = run(capsys, "mcast", "239.1.1.1", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == cli.EXIT_EVENT
    assert [r["event"] for r in records] == ["MCAST", "ADDR_RESOLVED", "MULTICAST_ERROR", "LEFT", "STOPPED"]
    assert records[2]["step"] == "join" and records[2]["name"] == "ENETUNREACH"
    assert records[-1]["why"] == "join" and records[-1]["error"]["errno"] == errno.ENETUNREACH


@pytest.mark.parametrize("argv,message", [
    (["10.9.0.1"], "GROUP 10.9.0.1 is 10.9.0.1, not a multicast group: give an IPv4 group (224.0.0.0/4"),
    (["239.1.1.1:7471"], "GROUP 239.1.1.1:7471 has a port: a multicast group is an address alone (write 239.1.1.1)"),
    (["239.1.1.1", "--src", "fec0::2"], "--src fec0::2 is IPv6 but GROUP 239.1.1.1 is IPv4: give a --src of the "
                                        "group's family"),
    (["ff0e::1", "--src", B], "--src 10.9.0.2 is IPv4 but GROUP ff0e::1 is IPv6"),
    (["239.1.1.1", "--src", "239.1.1.2"], "--src 239.1.1.2 is a multicast address"),
    (["gid:ff12:401b::1"], "is an InfiniBand MGID (mckey -M): mcast joins IP multicast groups"),
    (["239.1.1.1", "--count", "-1"], "bad --count '-1': give a whole number of events to wait for, 0 (leave at "
                                     "once) or more"),
    (["239.1.1.1", "--count", "many"], "bad --count 'many'"),
    (["239.1.1.1", "--timeout", "0"], "bad --timeout '0': give milliseconds"),
    (["-n", "groupname"], "GROUP 'groupname' is a host name, and -n/--numeric looks up none"),
    (["239.1.1.256"], "'239.1.1.256' is not an IP address"),
    (["localhost"], "not a multicast group: give an IPv4 group"),  # a name is looked up, then checked
])
def test_bad_input_exits_3_with_one_line(capsys, kernels, argv, message):
    code, out, err = run(capsys, "mcast", *argv)
    assert code == cli.EXIT_USAGE
    assert out == "" and err.startswith("pyrdmacm: ") and err.count("\n") == 1
    assert message in err
    assert kernels == []  # refused before any channel was opened


@pytest.mark.parametrize("argv", [["mcast"], ["mcast", "239.1.1.1", "--ps", "tcp"], ["mcast", "239.1.1.1", "-x"],
                                  ["mcast", "239.1.1.1", "--count"]])
def test_argparse_refusals_exit_3_too(capsys, argv):
    with pytest.raises(SystemExit) as e:
        cli.main(argv)
    _out, err = capsys.readouterr()
    assert e.value.code == cli.EXIT_USAGE and "error: " in err and "Traceback" not in err


@pytest.mark.parametrize("json_mode", [False, True])
def test_without_rdma_cm_exits_4(capsys, monkeypatch, json_mode):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    code, out, err = run(capsys, "mcast", "239.1.1.1", *(["--json"] if json_mode else []))
    assert code == cli.EXIT_NODEV
    assert "rdma_ucm" in err and err.count("\n") == 1
    if json_mode:
        stopped = json.loads(out.splitlines()[-1])
        assert stopped["exit"] == 4 and stopped["error"]["errno"] == errno.ENOENT


def test_help(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["mcast", "--help"])
    out, _ = capsys.readouterr()
    for option in ("--send-only", "--src SRC", "--count N", "--timeout MS", "--ps {udp,ipoib}", "--json", "-n"):
        assert option in out
    assert e.value.code == 0 and "exit status: the same for every subcommand" in out


def test_no_route_to_the_group_says_give_src(capsys, kernels):
    """The fake has no IPv6 route: RESOLVE_ADDR to an IPv6 group is ENETUNREACH from the
    write, and without --src mcast says what to do."""
    code, out, _ = run(capsys, "mcast", "ff0e::1", "--json")
    recs = [json.loads(line) for line in out.splitlines()]
    assert code == cli.EXIT_KERNEL
    assert (recs[1]["event"], recs[1]["step"], recs[1]["errno"]) == ("REFUSED", "addr", errno.ENETUNREACH)
    assert "no route to the group in this network namespace: give --src" in recs[1]["message"]
    assert recs[-1]["error"] == dict(recs[-1]["error"], name="ENETUNREACH", refused="RESOLVE_ADDR",
                                     message=recs[1]["message"])
