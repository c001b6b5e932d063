"""`pyrdmacm ping` and `pyrdmacm listen` on the fake fabric (pyrdmacm.testing.FakeFabric): the CLI
runs on host B (10.9.0.2), its channel made by ``pyrdmacm.cli.conn._open_channel``, which the
tests point at B; the other side is a thread on host A (10.9.0.1) using the library.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from typing import Any, List, Optional

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, cli
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.cli import conn, output, ping
from pyrdmacm.testing import FakeFabric

from fabric_helpers import fake0_device

A, B = "10.9.0.1", "10.9.0.2"


@pytest.fixture
def fabric():
    fab = FakeFabric(timewait_ms=50, cm_timeout_ms=300, cm_retry_ms=20)
    yield fab
    fab.close()


@pytest.fixture
def hosts(fabric):
    return fabric.host(A), fabric.host(B)


@pytest.fixture
def cli_on_b(hosts, monkeypatch):
    """The CLI's channel is on host B; the kernels it opened, to look at afterwards."""
    kernels: List[Any] = []

    def open_channel():
        kernels.append(hosts[1]())
        return EventChannel(kernels[-1])

    monkeypatch.setattr(conn, "_open_channel", open_channel)
    monkeypatch.setattr(ping, "list_devices", lambda use_netlink=True: [fake0_device(B)])
    return kernels



def run(capsys, *argv):
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


class Server(threading.Thread):
    """A listener on host A that answers each request: ``accept`` (with ``data``), ``reject``
    (with ``data``) or ``ignore``; it records the requests (their ConnParam or UdParam)."""

    def __init__(self, host, answer="accept", data=b"", ps=PortSpace.TCP, port=7471):
        super().__init__(daemon=True)
        self.ch = EventChannel(host())
        self.listener = CmId(self.ch, ps)
        self.listener.bind_addr("0.0.0.0:%d" % port)
        self.listener.listen()
        self.answer, self.data = answer, data
        self.requests: List[Any] = []
        self.qp_nums: List[int] = []
        self.events: List[Any] = []
        self.stop = threading.Event()
        self.start()

    def run(self):
        while not self.stop.is_set():
            ev = self.ch.get_event(0.05)
            if ev is None:
                continue
            ev.ack()
            self.events.append(ev.event)
            if ev.event is E.CONNECT_REQUEST:
                self.requests.append(ev.param)
                if self.answer == "accept":
                    ev.id.accept(private_data=self.data, responder_resources=1, initiator_depth=1)
                    self.qp_nums.append(ev.id.qp_num)
                elif self.answer == "reject":
                    ev.id.reject(self.data)

    def close(self):
        self.stop.set()
        self.join(2)
        self.ch.close()


@pytest.fixture
def server(hosts):
    made: List[Server] = []

    def make(**kw):
        made.append(Server(hosts[0], **kw))
        return made[-1]

    yield make
    for s in made:
        s.close()


# --------------------------------------------------------------------------- ping

def test_ping_established_human(capsys, server, cli_on_b):
    srv = server(data=b"welcome")
    code, out, err = run(capsys, "ping", A, "--count", "2", "--private-data", "68656c6c6f")
    assert code == cli.EXIT_OK, err
    lines = out.splitlines()
    assert lines[0] == ("PING 10.9.0.1 port 7471 (rdma_cm PS_TCP, RC): 2 attempts, 5 bytes of private data "
                        "in the REQ")
    seq = [line for line in lines if line.startswith("seq=")]
    assert len(seq) == 2
    for n, line in enumerate(seq, 1):
        assert line.startswith("seq=%d ESTABLISHED peer qp %#x connect=" % (n, srv.qp_nums[n - 1]))
        for step in ("addr", "route", "connect", "establish", "disconnect"):
            assert re.search(r"[( ]%s \d+\.\d\d[, ]" % step, line)
    assert ("      peer: responder_resources 1 initiator_depth 1 flow_control 0 rnr_retry_count 7 srq 0 "
            "(a REP carries no retry_count)") in lines
    assert lines.count('      peer private data: 77656c636f6d65 "welcome" (REP: 196 bytes, the sender\'s data '
                       'padded with zeros; the CM does not send its length)') == 2
    # our QP numbers, as the server saw them in the REQs, with our private data padded to 56 bytes
    ours = [int(line.split("our qp ")[1].split()[0], 16) for line in lines if "our qp" in line]
    assert ours == [r.qp_num for r in srv.requests] and len(set(ours)) == 2
    assert all(r.private_data == b"hello".ljust(56, b"\0") for r in srv.requests)
    assert all("from 10.9.0.2:" in line and "on fake0 port 1" in line for line in lines if "our qp" in line)
    # each end's view of the data path: where the route landed (RoCE v2 over v1 for the same
    # GID, as rdma_cm's default), the path record, and what the QP's RTR and RTS would be given
    assert lines.count("      path: RoCE v2 GID 1 ::ffff:10.9.0.2, MTU 1024 (port 1024, netdev 1500), tclass 0, "
                       "SL 0, hop limit 64, flow label 0x0, pkey 0xffff") == 2
    assert lines.count("      QP: path MTU 1024, sgid index 1, tclass 0, hop limit 64, SL 0, timeout 19, retry 7, "
                       "RNR retry 7, responder resources 1, initiator depth 1") == 2
    assert lines[-3] == "--- 10.9.0.1 port 7471 rdma_cm ping statistics ---"
    assert lines[-2].startswith("2 attempts, 2 established, 0 failed, time ")
    assert lines[-1].startswith("connect min/avg/max = ")
    assert cli_on_b[0].closed and cli_on_b[0].ids == {}


def test_ping_established_json(capsys, server, cli_on_b):
    srv = server(data=b"ok")
    code, out, err = run(capsys, "ping", "%s:7471" % A, "--json", "--timewait")
    assert code == cli.EXIT_OK, err
    j = json.loads(out)
    assert (j["dst"], j["port"], j["ps"], j["count"], j["exit"]) == (A, 7471, "TCP", 1, 0)
    [a] = j["attempts"]
    assert a["established"] is True and a["reason"] is None
    assert set(a["steps"]) == {"addr", "route", "connect", "establish", "disconnect", "timewait"}
    assert all(isinstance(v, float) and v >= 0 for v in a["steps"].values())
    assert a["steps"]["timewait"] >= 40  # the fabric's timewait is 50 ms
    assert a["qp_num"] == srv.requests[0].qp_num
    assert a["src"].startswith(B + ":") and a["device"] == "fake0" and a["port_num"] == 1
    assert (a["gid_index"], a["gid_type"], a["sgid"], a["dgid"]) == (1, "RoCE v2", "::ffff:" + B, "::ffff:" + A)
    assert a["path"] == {"mtu": 1024, "port_mtu": 1024, "netdev_mtu": 1500, "link_local": False, "tclass": 0,
                         "sl": 0, "hop_limit": 64, "flow_label": 0, "pkey": 0xFFFF}
    assert a["qp"] == {"path_mtu": 1024, "sgid_index": 1, "tclass": 0, "hop_limit": 64, "sl": 0, "flow_label": 0,
                       "timeout": 19, "retry_cnt": 7, "rnr_retry": 7, "min_rnr_timer": 0, "max_dest_rd_atomic": 1,
                       "max_rd_atomic": 1}
    peer = a["peer"]
    assert peer["qp_num"] == srv.qp_nums[0]
    assert (peer["responder_resources"], peer["initiator_depth"], peer["retry_count"], peer["rnr_retry_count"],
            peer["srq"]) == (1, 1, None, 7, 0)
    pd = peer["private_data"]
    assert (pd["message"], pd["size"], pd["data_hex"], pd["text"]) == ("REP", 196, "6f6b", "ok")
    assert pd["hex"] == "6f6b" + "00" * 194
    s = j["summary"]
    assert (s["sent"], s["established"], s["failed"], s["interrupted"]) == (1, 1, 0, False)
    assert s["connect_ms"]["min"] == s["connect_ms"]["max"] == a["steps"]["connect"]


def test_ping_rejected_28_with_data(capsys, server, cli_on_b):
    server(answer="reject", data=b"server-full")
    code, out, _ = run(capsys, "ping", A)
    assert code == cli.EXIT_EVENT
    lines = out.splitlines()
    assert lines[1].startswith("seq=1 REJECTED reason 28 CONSUMER_DEFINED in step connect after ")
    assert lines[2].startswith("      path: RoCE v2 GID 1 ::ffff:10.9.0.2, MTU 1024 ")  # the route resolved
    assert lines[3].startswith("      the peer rejected: its application did")
    assert lines[4] == ('      peer private data: 7365727665722d66756c6c "server-full" (REJ: 148 bytes, the '
                        "sender's data padded with zeros; the CM does not send its length)")
    assert "1 attempt, 0 established, 1 failed" in out
    code, out, _ = run(capsys, "ping", A, "--json")
    assert code == cli.EXIT_EVENT
    a = json.loads(out)["attempts"][0]
    assert a["established"] is False and a["peer"] is None and a["qp"] is None and a["path"]["mtu"] == 1024
    r = a["reason"]
    assert (r["step"], r["event"], r["status"], r["name"]) == ("connect", "REJECTED", 28, "CONSUMER_DEFINED")
    assert r["hint"].startswith("the peer rejected")
    assert r["private_data"]["text"] == "server-full" and r["private_data"]["size"] == 148
    assert json.loads(out)["summary"]["connect_ms"] is None


def test_ping_no_listener_is_rejected_8(capsys, hosts, cli_on_b):
    code, out, _ = run(capsys, "ping", A + ":7472")
    assert code == cli.EXIT_EVENT
    assert out.splitlines()[0].startswith("PING 10.9.0.1 port 7472 ")
    assert "seq=1 REJECTED reason 8 INVALID_SERVICE_ID in step connect after " in out
    assert "nothing listens on that port in this port space on the peer" in out
    code, out, _ = run(capsys, "ping", A + ":7472", "--json")
    r = json.loads(out)["attempts"][0]["reason"]
    assert (r["event"], r["status"], r["name"]) == ("REJECTED", 8, "INVALID_SERVICE_ID")


def test_ping_ud_established(capsys, hosts, server, cli_on_b):
    srv = server(ps=PortSpace.UDP, data=b"ud-hi")
    code, out, err = run(capsys, "ping", A, "--ps", "udp", "--private-data", "6869")
    assert code == cli.EXIT_OK, err
    lines = out.splitlines()
    assert lines[0].endswith("(rdma_cm PS_UDP, UD: SIDR): 1 attempt, 2 bytes of private data in the SIDR REQ")
    assert lines[1].startswith("seq=1 ESTABLISHED peer qp %#x connect=" % srv.qp_nums[0])
    assert "disconnect" not in lines[1]  # UD has no disconnect
    assert lines[2].startswith("      from 10.9.0.2:")  # a SIDR REQ carries no QP number of ours
    assert lines[3].startswith("      path: RoCE v2 GID 1 ::ffff:10.9.0.2, MTU 1024 ")  # no QP line: UD
    assert lines[4] == ("      peer: qkey 0x01234567, address handle dgid ::ffff:10.9.0.1 sgid_index 0 "
                        "hop_limit 64 traffic_class 0 flow_label 0 port 1 sl 0")
    assert lines[5].startswith('      peer private data: 75642d6869 "ud-hi" (SIDR REP: 136 bytes')
    assert srv.requests[0].private_data == b"hi".ljust(180, b"\0")
    code, out, _ = run(capsys, "ping", A, "--ps", "udp", "--json")
    a = json.loads(out)["attempts"][0]
    assert a["established"] is True and a["qp_num"] is None
    assert set(a["steps"]) == {"addr", "route", "connect"}
    assert a["peer"]["qkey"] == 0x01234567
    assert a["peer"]["ah"]["dgid"] == "::ffff:10.9.0.1" == output._ip_text(hosts[0].gid())


def test_ping_ud_no_listener_is_unreachable_1(capsys, hosts, cli_on_b):
    code, out, _ = run(capsys, "ping", A, "--ps", "udp", "--json")
    assert code == cli.EXIT_EVENT
    r = json.loads(out)["attempts"][0]["reason"]
    assert (r["event"], r["status"], r["name"]) == ("UNREACHABLE", 1, "UNSUPPORTED")


def test_ping_says_which_step_timed_out(capsys, server, cli_on_b):
    server(answer="ignore")
    code, out, _ = run(capsys, "ping", A, "--timeout", "150")
    assert code == cli.EXIT_EVENT
    assert "seq=1 timed out in step connect: no CONNECT_RESPONSE (REP) within 150 ms" in out
    assert "the peer's CM sent neither a REP nor a REJ" in out
    code, out, _ = run(capsys, "ping", A, "--timeout", "150", "--json")
    r = json.loads(out)["attempts"][0]["reason"]
    assert (r["step"], r["event"], r["timed_out"], r["timeout_ms"]) == ("connect", None, True, 150)


def test_ping_unreachable_destination_fails_in_step_addr(capsys, hosts, cli_on_b):
    code, out, _ = run(capsys, "ping", "10.9.0.99", "--timeout", "200", "--json")
    assert code == cli.EXIT_EVENT
    r = json.loads(out)["attempts"][0]["reason"]
    assert (r["step"], r["event"], r["status"], r["name"]) == ("addr", "ADDR_ERROR", -110, "ETIMEDOUT")


def test_ping_sigint_prints_the_summary_and_exits_130(capsys, server, cli_on_b, sigint_raises):
    server(answer="ignore")
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()
    started = time.monotonic()
    code, out, err = run(capsys, "ping", A, "--count", "3", "--timeout", "5000")
    assert code == 130 and time.monotonic() - started < 3
    assert err == ""
    lines = out.splitlines()
    assert lines[-2] == "--- 10.9.0.1 port 7471 rdma_cm ping statistics ---"
    assert lines[-1].startswith("0 attempts, 0 established, 0 failed, time ") and lines[-1].endswith("(interrupted)")
    # the id was destroyed (DESTROY_ID written) before the channel closed
    assert 1 in [cmd for cmd, *_ in cli_on_b[0].commands]
    assert cli_on_b[0].closed


# --------------------------------------------------------------------------- listen

class Client(threading.Thread):
    """A client on host A: connects to B:port (again while B answers REJ 8 / SIDR status 1, not
    listening yet), establishes, holds, disconnects; records what it got."""

    def __init__(self, host, data=b"", ps=PortSpace.TCP, port=7471, hold=0.05, disconnect=True):
        super().__init__(daemon=True)
        self.host, self.data, self.ps, self.port, self.hold, self.disconnect = host, data, ps, port, hold, disconnect
        self.answer: Optional[Any] = None
        self.qp_num: Optional[int] = None
        self.events: List[Any] = []
        self.done = threading.Event()
        self.start()

    def run(self):
        ch = EventChannel(self.host())
        try:
            for _ in range(200):
                cm = CmId(ch, self.ps)
                cm.resolve_addr("%s:%d" % (B, self.port), timeout_ms=500)
                ch.get_event(1).ack()
                cm.resolve_route(500)
                ch.get_event(1).ack()
                cm.connect(private_data=self.data, responder_resources=1, initiator_depth=1)
                ev = ch.get_event(1)
                ev.ack()
                if ev.status in (8, 1):  # no listener yet
                    cm.destroy()
                    time.sleep(0.01)
                    continue
                break
            self.answer, self.qp_num = ev, cm.qp_num
            if ev.event is E.CONNECT_RESPONSE:
                cm.establish()
                time.sleep(self.hold)
                if self.disconnect:
                    cm.disconnect()
                ev = ch.get_event(2)
                if ev is not None:
                    ev.ack()
                    self.events.append(ev.event)
            cm.destroy()
        finally:
            ch.close()
            self.done.set()


def test_listen_accepts_and_shows_the_events(capsys, hosts, cli_on_b):
    client = Client(hosts[0], data=b"hello")
    code, out, err = run(capsys, "listen", "7471", "--count", "1", "--private-data", "6f6b")
    client.join(3)
    assert code == cli.EXIT_OK, err
    lines = [line.split(" ", 1)[1] for line in out.splitlines()]  # without the clock
    assert lines[0] == ("LISTEN 0.0.0.0:7471 (rdma_cm PS_TCP, RC): accepting with 2 bytes of private data in the "
                        "REP; stops after 1 connection")
    assert lines[1].startswith("#1 CONNECT_REQUEST from 10.9.0.1:")
    assert lines[1].endswith(" to 10.9.0.2:7471 peer qp %#x responder_resources 1 initiator_depth 1 retry_count 7 "
                             "rnr_retry_count 7 flow_control 0 srq 0" % client.qp_num)
    assert lines[2] == ('#1   peer private data: 68656c6c6f "hello" (REQ: 56 bytes, the sender\'s data padded with '
                        "zeros; the CM does not send its length)")
    assert lines[3].startswith("#1 accepted: our qp 0x") and lines[3].endswith(", 2 bytes of private data in the REP")
    assert [line.split(" +")[0] for line in lines[4:7]] == ["#1 ESTABLISHED", "#1 DISCONNECTED", "#1 TIMEWAIT_EXIT"]
    assert lines[7] == "--- stopped (count reached): 1 request, 1 accepted, 0 rejected, 1 ended ---"
    assert client.answer.event is E.CONNECT_RESPONSE
    assert client.answer.private_data == b"ok".ljust(196, b"\0")
    assert int(lines[3].split("our qp ")[1].split(",")[0], 16) == client.answer.param.qp_num
    assert client.events == [E.DISCONNECTED]
    clock = out.splitlines()[0].split(" ")[0]
    assert len(clock) == 12 and clock[2] == clock[5] == ":" and clock[8] == "."


def test_listen_disconnect_after_ends_the_connection_itself(capsys, hosts, cli_on_b):
    """--disconnect-after 0: after ESTABLISHED this side sends the DREQ, as cmatose's server
    does; a client that waits for the server (ucmatose's) gets DISCONNECTED, and both end."""
    client = Client(hosts[0], disconnect=False)
    code, out, err = run(capsys, "listen", "7471", "--count", "1", "--disconnect-after", "0")
    client.join(3)
    assert code == cli.EXIT_OK, err
    lines = [line.split(" ", 1)[1] for line in out.splitlines()]
    assert [line.split(" +")[0] for line in lines[4:8]] == [
        "#1 ESTABLISHED", "#1 disconnecting (--disconnect-after 0 ms)", "#1 DISCONNECTED", "#1 TIMEWAIT_EXIT"]
    assert client.events == [E.DISCONNECTED]
    code, out, err = run(capsys, "listen", "7471", "--disconnect-after", "-1")
    assert code == cli.EXIT_USAGE and "bad --disconnect-after '-1'" in err


def test_listen_json_lines(capsys, hosts, cli_on_b):
    client = Client(hosts[0], data=b"hello")
    code, out, err = run(capsys, "listen", "%s:7471" % B, "--count", "1", "--json")
    client.join(3)
    assert code == cli.EXIT_OK, err
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["event"] for r in records] == ["LISTENING", "CONNECT_REQUEST", "ACCEPT", "ESTABLISHED",
                                             "DISCONNECTED", "TIMEWAIT_EXIT", "STOPPED"]
    assert all(isinstance(r["time"], float) for r in records)
    assert records[0]["addr"] == "10.9.0.2:7471" and records[0]["answer"] == "ACCEPT"
    req = records[1]
    assert req["conn"] == 1 and req["peer"]["addr"] == A and req["peer"]["qp_num"] == client.qp_num
    assert req["peer"]["private_data"]["text"] == "hello" and req["peer"]["private_data"]["size"] == 56
    assert records[2]["qp_num"] == client.answer.param.qp_num
    assert records[4]["status"] == 0 and records[5]["ms"] >= records[4]["ms"]
    assert records[6] == dict(records[6], why="count", requests=1, accepted=1, rejected=0, ended=1)


def test_listen_reject_with_private_data(capsys, hosts, cli_on_b):
    client = Client(hosts[0])
    code, out, err = run(capsys, "listen", "7471", "--reject", "--private-data", "676f2d61776179", "--count", "1")
    client.join(3)
    assert code == cli.EXIT_OK, err
    lines = [line.split(" ", 1)[1] for line in out.splitlines()]
    assert lines[0].startswith("LISTEN 0.0.0.0:7471 (rdma_cm PS_TCP, RC): rejecting with 7 bytes of private data "
                               "in the REJ")
    assert lines[3] == "#1 rejected, 7 bytes of private data in the REJ"
    assert lines[4] == "--- stopped (count reached): 1 request, 0 accepted, 1 rejected, 1 ended ---"
    assert (client.answer.event, client.answer.status) == (E.REJECTED, 28)
    assert client.answer.private_data == b"go-away".ljust(148, b"\0")


def test_listen_ud_accepts(capsys, hosts, cli_on_b):
    client = Client(hosts[0], data=b"hi", ps=PortSpace.UDP)
    code, out, err = run(capsys, "listen", "7471", "--ps", "udp", "--count", "1", "--private-data", "6f6b")
    client.join(3)
    assert code == cli.EXIT_OK, err
    assert "(a SIDR REQ carries no QP number)" in out and "(SIDR REQ: 180 bytes" in out
    assert "accepted: our qp 0x" in out and "in the SIDR REP" in out
    assert (client.answer.event, client.answer.param.qkey) == (E.ESTABLISHED, 0x01234567)
    assert client.answer.private_data == b"ok".ljust(136, b"\0")


def test_listen_count_2_ends_after_both(capsys, hosts, cli_on_b):
    def two():
        for _ in range(2):
            c = Client(hosts[0])
            c.join(3)

    t = threading.Thread(target=two, daemon=True)
    t.start()
    code, out, _ = run(capsys, "listen", "7471", "--count", "2", "--json")
    t.join(5)
    events = [json.loads(line)["event"] for line in out.splitlines()]
    assert code == 0 and events.count("TIMEWAIT_EXIT") == 2 and events[-1] == "STOPPED"


def test_listen_sigint_stops_cleanly_and_destroys_the_ids(capsys, hosts, cli_on_b, sigint_raises):
    client = Client(hosts[0], hold=0, disconnect=False)  # waits connected: listen's exit disconnects it

    def interrupt():
        deadline = time.monotonic() + 3
        while client.answer is None and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    code, out, err = run(capsys, "listen", "7471")
    client.join(3)
    assert code == cli.EXIT_OK and err == ""
    lines = out.splitlines()
    assert "Ctrl-C stops" in lines[0]
    assert lines[-1].endswith("--- stopped (SIGINT): 1 request, 1 accepted, 0 rejected, 0 ended ---")
    assert client.events == [E.DISCONNECTED]  # our destroy sent the DREQ
    assert cli_on_b[0].closed


def test_listen_sigterm_as_listening_is_written_stops_cleanly(capsys, hosts, cli_on_b, monkeypatch):
    """A SIGTERM that comes while LISTENING is written (a supervisor that stops listen as soon
    as it reads that line) stops it as any other: STOPPED, exit 0 (it escaped as a traceback)."""
    import io
    import sys

    class TermOnListening(io.StringIO):
        def write(self, text):
            n = super().write(text)
            if '"LISTENING"' in text:
                os.kill(os.getpid(), signal.SIGTERM)  # the handler runs here, inside the write
            return n

    out = TermOnListening()
    monkeypatch.setattr(sys, "stdout", out)
    code = cli.main(["listen", "--json", "7471"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_OK and err == "", err
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [r["event"] for r in records] == ["LISTENING", "STOPPED"]
    assert records[-1]["why"] == "SIGTERM" and cli_on_b[0].closed


# --------------------------------------------------------------------------- bad input, no rdma_cm

@pytest.mark.parametrize("argv,message", [
    (["ping", A, "--private-data", "zz"], "bad --private-data 'zz': not hex; give pairs of hex digits"),
    (["ping", A, "--private-data", "00" * 57],
     "--private-data is 57 bytes; a REQ of this id carries at most 56: give at most 56 bytes (112 hex digits)"),
    (["ping", A, "--ps", "udp", "--private-data", "00" * 181], "a SIDR REQ of this id carries at most 180"),
    (["ping", A + ":0"], "bad port 0 in '10.9.0.1:0': give DST:PORT with a port 1..65535 (default 7471)"),
    (["ping", A + ":99999"], "port '99999' out of range"),
    (["ping", A, "--count", "0"], "bad --count '0': give a whole number of connections, 1 or more"),
    (["ping", A, "--count", "many"], "bad --count 'many'"),
    (["ping", A, "--timeout", "-5"], "bad --timeout '-5': give milliseconds"),
    (["ping", "-n", "nohost"], "'nohost' is a host name, and -n/--numeric looks up none"),
    (["ping", "10.9.0.256"], "'10.9.0.256' is not an IP address"),
    (["ping", A, "--src", "fe80::1"], "needs a zone"),
    (["listen", "70000"], "bad port '70000': give a port 1..65535"),
    (["listen", A], "no port in '10.9.0.1': give PORT or ADDR:PORT"),
    (["listen", "-n", "host:7471"], "'host:7471' is a host name, and -n/--numeric looks up none"),
    (["listen", "7471", "--private-data", "00" * 197], "a REP of this id carries at most 196"),
    (["listen", "7471", "--reject", "--private-data", "00" * 149], "a REJ of this id carries at most 148"),
    (["listen", "7471", "--ps", "udp", "--private-data", "00" * 137], "a SIDR REP of this id carries at most 136"),
    (["listen", "7471", "--count", "-1"], "bad --count '-1'"),
])
def test_bad_input_exits_3_with_one_line(capsys, cli_on_b, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == cli.EXIT_USAGE
    assert out == "" and err.startswith("pyrdmacm: ") and err.count("\n") == 1
    assert message in err
    assert cli_on_b == []  # refused before any channel was opened


@pytest.mark.parametrize("argv", [["ping"], ["ping", A, "--bogus"], ["listen"], ["listen", "7471", "--count"],
                                  ["ping", A, "--ps", "ib"], ["listen", "7471", "--ps", "ipoib"]])
def test_argparse_refusals_exit_3_too(capsys, argv):
    code = None
    try:
        cli.main(argv)
    except SystemExit as e:
        code = e.code
    _out, err = capsys.readouterr()
    assert code == cli.EXIT_USAGE and "error: " in err and "Traceback" not in err
    if "--ps" in argv:  # the choices as argparse says them for every subcommand (one way, not two)
        assert "argument --ps: invalid choice: '%s' (choose from 'tcp', 'udp')" % argv[-1] in err


@pytest.mark.parametrize("argv", [["ping", A], ["ping", A, "--json"], ["listen", "7471"]])
def test_without_rdma_cm_exits_4(capsys, monkeypatch, argv):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    code, out, err = run(capsys, *argv)
    assert code == cli.EXIT_NODEV
    assert "rdma_ucm" in err and err.count("\n") == 1
    if "--json" in argv:
        assert json.loads(out)["error"]["errno"] == 2


@pytest.mark.parametrize("command", ["ping", "listen"])
def test_help(capsys, command):
    with pytest.raises(SystemExit) as e:
        cli.main([command, "--help"])
    out, _ = capsys.readouterr()
    assert e.value.code == 0 and "--private-data HEX" in out and "--count N" in out


def test_listen_identify_answers_with_its_own_view_of_the_path(capsys, hosts, cli_on_b, monkeypatch):
    """--identify: the REP says who answered (host, rail, address) and then, in short words,
    this end's view of the request's path (its GID, MTUs, class, SL, pkey, and the QP's RTR
    path MTU and source GID index), as ping and mesh read it."""
    import socket

    from pyrdmacm import devices
    from pyrdmacm.mesh.cells import parse_identity

    monkeypatch.setattr(devices, "list_devices", lambda *a, **k: [fake0_device(B, netdev_mtu=9000)])
    client = Client(hosts[0])
    code, out, err = run(capsys, "listen", "7471", "--count", "1", "--identify")
    client.join(3)
    assert code == cli.EXIT_OK, err
    words = parse_identity(client.answer.private_data)
    assert words == {"host": socket.gethostname(), "rail": "?", "addr": B, "gi": "1", "gt": "v2", "ll": "0",
                     "mtu": "1024", "pm": "4096", "nm": "9000", "tc": "0", "sl": "0", "pk": "ffff", "qm": "1024",
                     "qg": "1"}, words
    assert len(client.answer.private_data) == 196


def test_ping_shows_both_ends_and_names_each_mismatch(capsys, server, cli_on_b):
    """An identifying listener whose view differs (a RoCE v1 GID, a 4096 path and port MTU, a
    link-local source GID): ping prints its view beside ours and names each difference; the
    attempt is established all the same (the CM path works: the data path is what fails)."""
    from pyrdmacm.mesh.cells import identity

    server(data=identity("node-a", "eth0", A, ("gi=0", "gt=v1", "ll=1", "mtu=4096", "pm=4096", "nm=9000", "tc=0",
                                               "sl=3", "pk=ffff", "qm=4096", "qg=0")))
    code, out, err = run(capsys, "ping", A)
    assert code == cli.EXIT_OK, err
    lines = out.splitlines()
    k = lines.index([line for line in lines if line.startswith("      there ")][0])
    assert lines[k:k + 7] == [
        "      there (node-a eth0 10.9.0.1): RoCE v1 GID 0 (link-local), MTU 4096 (port 4096, netdev 9000), tclass 0, "
        "SL 3, pkey 0xffff; its QP: path MTU 4096, sgid index 0",
        "      mismatch: GID type RoCE v2 here, RoCE v1 there",
        "      mismatch: path MTU 1024 here, 4096 there",
        "      mismatch: port MTU 1024 here, 4096 there",
        "      mismatch: the QP's path MTU 1024 here, 4096 there",
        "      mismatch: SL 0 here, 3 there",
        "      mismatch: the source GID is link-local there (index 0): it routes nowhere past the link"]
    code, out, err = run(capsys, "ping", A, "--json")
    a = json.loads(out)["attempts"][0]
    assert a["established"] and a["agent"] == {"host": "node-a", "rail": "eth0", "addr": A}
    assert a["there"] == {"gid_index": 0, "gid_type": "RoCE v1", "link_local": True, "mtu": 4096, "port_mtu": 4096,
                          "netdev_mtu": 9000, "tclass": 0, "sl": 3, "pkey": 0xFFFF, "qp_path_mtu": 4096,
                          "qp_sgid_index": 0}
    assert len(a["mismatches"]) == 6 and code == cli.EXIT_OK
