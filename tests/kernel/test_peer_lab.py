"""The pair topology's peer agent (tests/lab_peer.py) and the ``peer`` fixture, checked with
librdmacm's own example programs on both guests: lab-a (the peer, through the agent) and lab-b
(here, with subprocess). No pyrdmacm involved: these tests check the lab, so that a test of
pyrdmacm against a librdmacm program on the other host can trust it.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from lab_peer import PeerError, PeerTimeout

# These check the lab's own peer agent and librdmacm's programs, not the kernel: one kernel
pytestmark = pytest.mark.kernel(topology="pair", suites=("bookworm",))

HUNG_MARKER = "lab-peer-hung-program"


def local_address() -> str:
    with open(os.environ["PYRDMACM_LAB_TOPOLOGY"]) as f:
        return json.load(f)["netdevs"]["eth0"]["ipv4"].split("/")[0]


def wait_listening_here(port: int, ps: str, timeout: float = 20.0) -> dict:
    """This guest's rdma_cm id listening on ``port`` (what Peer.wait_listening does there)."""
    deadline = time.monotonic() + timeout
    while True:
        out = subprocess.run(["rdma", "-j", "resource", "show", "cm_id"], check=True,
                             capture_output=True, text=True, timeout=20).stdout
        for cm_id in json.loads(out or "[]"):
            if cm_id.get("state") == "LISTEN" and cm_id.get("ps") == ps \
                    and cm_id.get("src-addr", "").rpartition(":")[2] == str(port):
                return cm_id
        assert time.monotonic() < deadline, f"nothing listens on {ps} port {port} here: {out}"
        time.sleep(0.2)


def test_the_agent_runs_programs_on_lab_a(peer):
    assert peer.address == "10.9.0.1"
    assert socket.gethostname() == "lab-b"
    assert peer.host == "lab-a"
    assert peer.run(["uname", "-n"]) == (0, "lab-a\n", "")
    assert peer.run(["sh", "-c", "echo out; echo err >&2; exit 7"]) == (7, "out\n", "err\n")
    code, out, err = peer.run(["sh", "-c", "echo $LAB_PEER_TEST; pwd"],
                              env={"LAB_PEER_TEST": "passed"})
    assert (code, out.splitlines(), err) == (0, ["passed", os.getcwd()], "")
    # a Python snippet, with the very interpreter and virtualenv of this test
    proc = peer.python("import socket, sys; print(socket.gethostname(), sys.prefix)")
    assert proc.wait(60) == (0, f"lab-a {sys.prefix}\n", "")
    # a program that is not there: the agent says so, the test does not hang
    with pytest.raises(PeerError, match="FileNotFoundError"):
        peer.start(["no-such-program-on-the-peer"])


# program: (its RDMA port, port space, the name it prints, what it prints as server, client)
PARTNERS = {
    "ucmatose": (7471, "TCP", [
        "cmatose: starting server", "cmatose: disconnecting", "disconnected",
        "test complete", "return status 0",
    ], [
        "cmatose: starting client", "cmatose: connecting", "test complete", "return status 0",
    ]),
    "udaddy": (7174, "UDP", [
        "udaddy: starting server", "test complete", "return status 0",
    ], [
        "udaddy: starting client", "udaddy: connecting", "test complete", "return status 0",
    ]),
}


@pytest.mark.parametrize("program", PARTNERS)
def test_server_on_the_peer_client_here(peer, program):
    port, ps, server_prints, client_prints = PARTNERS[program]
    server = peer.start([program, "-b", peer.address, "-C", "0"], line_buffered=True)
    assert server.wait_for_line(r"starting server$") == server_prints[0]
    listener = peer.wait_listening(port, ps)
    assert (listener["comm"], listener["src-addr"]) == (program, f"{peer.address}:{port}")
    client = subprocess.run([program, "-s", peer.address, "-C", "0"], capture_output=True,
                            text=True, timeout=60)
    assert (client.returncode, client.stdout.splitlines()) == (0, client_prints), client.stderr
    code, out, err = server.wait(30)
    assert (code, out.splitlines()) == (0, server_prints), err


@pytest.mark.parametrize("program", PARTNERS)
def test_server_here_client_on_the_peer(peer, program):
    port, ps, server_prints, client_prints = PARTNERS[program]
    here = local_address()
    server = subprocess.Popen(["stdbuf", "-oL", program, "-b", here, "-C", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_listening_here(port, ps)
        code, out, err = peer.run([program, "-s", here, "-C", "0"], timeout=60)
        assert (code, out.splitlines()) == (0, client_prints), err
        out, err = server.communicate(timeout=30)
        assert (server.returncode, out.splitlines()) == (0, server_prints), err
    finally:
        server.kill()
        server.wait()


def test_a_hung_program_fails_its_wait_and_is_left_to_the_cleanup(peer):
    # ignores SIGTERM: the clean-up must escalate to SIGKILL
    hung = peer.python("import signal, sys, time\n"
                       "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                       "print('hung', flush=True)\n"
                       "time.sleep(3600)\n", HUNG_MARKER)
    assert hung.wait_for_line("^hung$", timeout=60) == "hung"
    # a listener nobody connects to: waits for ever, dies of SIGTERM
    listener = peer.start(["ucmatose", "-b", peer.address, "-C", "0"], line_buffered=True)
    listener.wait_for_line("cmatose: starting server")
    peer.wait_listening(7471, "TCP")
    started = time.monotonic()
    with pytest.raises(PeerTimeout, match=r"(?s)still runs after 2 s.*--- stdout ---\nhung"):
        hung.wait(2)
    with pytest.raises(PeerTimeout, match="printed no line matching 'never'"):
        listener.wait_for_line("never", timeout=1)
    assert time.monotonic() - started < 20
    assert hung.poll() is None and listener.poll() is None  # both still run


def test_the_hung_programs_are_gone_and_the_peer_still_works(peer):
    killed = {k["argv"][-1]: k for k in peer.killed_before}
    if HUNG_MARKER not in killed:
        pytest.skip("checks the clean-up after test_a_hung_program_fails_its_wait_and_is_left_"
                    "to_the_cleanup, which did not run just before")
    assert killed[HUNG_MARKER]["returncode"] == -signal.SIGKILL
    assert killed[HUNG_MARKER]["stdout"] == "hung\n"
    [ucmatose] = [k for k in peer.killed_before if "ucmatose" in k["argv"]]
    assert ucmatose["returncode"] == -signal.SIGTERM
    assert ucmatose["stdout"] == "cmatose: starting server\n"
    assert peer.run(["pgrep", "-f", HUNG_MARKER]) == (1, "", "")
    assert [c for c in peer.cm_ids() if c.get("comm") == "ucmatose"] == []
    assert peer.run(["echo", "still", "here"]) == (0, "still here\n", "")
    proc = peer.start(["sh", "-c", "echo first; sleep 30"], line_buffered=True)
    assert re.fullmatch("first", proc.wait_for_line("first"))
    assert proc.kill() == (-signal.SIGKILL, "first\n", "")
