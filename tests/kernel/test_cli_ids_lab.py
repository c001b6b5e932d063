"""`pyrdmacm ids` against the real kernel (single topology: rxe0 on eth0 10.0.2.15/24), next
to iproute2's `rdma resource show cm_id`, which reads the same RDMA netlink dump: a listening
rping shows in both, with the same number, state, port space, pid, command and address; and
`--watch` sees it come and go."""

import json
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.kernel(suites=("bullseye", "sid"))

ADDR = "10.0.2.15"
PYRDMACM = [sys.executable, "-m", "pyrdmacm"]


def _rping_server(port: int) -> subprocess.Popen:
    return subprocess.Popen(["rping", "-s", "-a", ADDR, "-p", str(port), "-C", "1"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _ids(*args: str) -> tuple:
    r = subprocess.run([*PYRDMACM, "ids", *args], capture_output=True, text=True, timeout=120)
    print("--- pyrdmacm ids %s: exit %s\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r.returncode, r.stdout, r.stderr


def _until(check, timeout: float = 30.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = check()
        if got:
            return got
        time.sleep(0.2)
    raise AssertionError("not seen within %ss" % timeout)


def _rdma_listening(pid: int):
    r = subprocess.run(["rdma", "-j", "resource", "show", "cm_id"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return [e for e in json.loads(r.stdout or "[]") if e.get("pid") == pid and e.get("state") == "LISTEN"]


def test_ids_shows_what_rdma_res_shows():
    server = _rping_server(7177)
    try:
        (theirs,) = _until(lambda: _rdma_listening(server.pid))
        code, out, err = _ids("--json", "--pid", str(server.pid))
        assert code == 0, err
        (ours,) = json.loads(out)["ids"]
        assert ours["state"] == "LISTEN" and ours["ps"] == "TCP" and ours["pid"] == server.pid
        assert ours["comm"] == "rping" == theirs["comm"]
        assert ours["cm_idn"] == theirs["cm-idn"] and ours["dev"] == theirs["ifname"] and ours["port"] == theirs["port"]
        print("--- rdma -j resource show cm_id (rping's listener):", json.dumps(theirs))
        assert ours["src"] == theirs["src-addr"] == "%s:7177" % ADDR  # rdma writes the port in it too
        # the human form speaks rdma's words
        code, out, err = _ids("--pid", str(server.pid))
        assert code == 0 and out.startswith("link rxe0/1 cm-idn %d " % ours["cm_idn"]), out
        assert "state LISTEN ps TCP pid %d comm rping src-addr %s:7177" % (server.pid, ADDR) in out
        # the filters
        code, out, _ = _ids("--json", "--pid", str(server.pid), "--state", "connect")
        assert code == 0 and json.loads(out)["ids"] == []
    finally:
        server.kill()
        server.wait()


def test_ids_watch_sees_an_id_come_and_go():
    watch = subprocess.Popen([*PYRDMACM, "ids", "--watch", "0.2", "--json", "--ps", "tcp"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    server = None
    try:
        time.sleep(12)  # the watcher's start (seconds under emulation) and its first look
        server = _rping_server(7178)
        _until(lambda: _rdma_listening(server.pid))
        time.sleep(1)
        server.kill()
        server.wait()
        time.sleep(2)
    finally:
        if server is not None and server.poll() is None:
            server.kill()
        watch.send_signal(signal.SIGTERM)
        out, err = watch.communicate(timeout=60)
    print("--- pyrdmacm ids --watch 0.2 --json: exit %s\n%s%s" % (watch.returncode, out, err))
    assert watch.returncode == 0, err
    changes = [json.loads(line) for line in out.splitlines()]
    assert changes.pop()["change"] == "stopped"  # the stream's last line (SIGTERM: stopped as asked)
    mine = [(c["change"], c["id"]["state"]) for c in changes if c["id"]["pid"] == server.pid]
    assert mine[0] == ("new", "LISTEN") and mine[-1][0] == "gone", mine
