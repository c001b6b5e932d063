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
        print("--- rdma -j resource show cm_id (rping's listener):", json.dumps(theirs))
        for key in ("ifindex", "ifname", "port", "cm-idn", "state", "pid", "comm", "src-addr"):  # rdma's keys
            assert ours[key] == theirs[key], (key, ours, theirs)
        assert ours["src-addr"] == "%s:7177" % ADDR  # rdma writes the port in it too
        assert ours["ps"].upper() == theirs["ps"].upper()
        # the human form speaks rdma's words
        code, out, err = _ids("--pid", str(server.pid))
        assert code == 0 and out.startswith("link rxe0/1 cm-idn %d " % ours["cm-idn"]), out
        assert "state LISTEN ps TCP pid %d comm rping src-addr %s:7177" % (server.pid, ADDR) in out
        # the filters
        code, out, _ = _ids("--json", "--pid", str(server.pid), "--state", "connect")
        assert code == 0 and json.loads(out)["ids"] == []
        code, out, _ = _ids("--json", "--src-addr", ADDR, "--src-port", "7177")
        assert code == 0 and [i["pid"] for i in json.loads(out)["ids"]] == [server.pid]
        code, out, _ = _ids("--json", "--pid", str(server.pid), "--src-port", "7178")
        assert code == 0 and json.loads(out)["ids"] == []
    finally:
        server.kill()
        server.wait()


def test_ids_watch_sees_an_id_come_and_go():
    """A listener present at the start is shown first (so the watcher has taken its first look
    and handles SIGTERM: no fixed sleep, which a loaded host outruns); one started later
    is new, then gone when killed; SIGTERM stops the watch with exit 0 and a last line."""
    import queue
    import threading

    first = _rping_server(7179)
    _until(lambda: _rdma_listening(first.pid))
    watch = subprocess.Popen([*PYRDMACM, "ids", "--watch", "0.2", "--json", "--ps", "tcp"], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    lines: "queue.Queue[str]" = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in watch.stdout], daemon=True).start()
    seen = []

    def wait_for(pid: int, change: str) -> None:
        end = time.monotonic() + 120
        while time.monotonic() < end:
            try:
                c = json.loads(lines.get(timeout=1))
            except queue.Empty:
                continue
            seen.append(c)
            if c.get("id", {}).get("pid") == pid and c["change"] == change:
                return
        raise AssertionError("no %s for pid %d within 120 s; seen %s" % (change, pid, seen))

    server = None
    try:
        wait_for(first.pid, "present")
        server = _rping_server(7178)
        wait_for(server.pid, "new")
        if seen[-1]["id"]["state"] != "LISTEN":  # seen between its bind and its listen: the change follows
            wait_for(server.pid, "changed")
        server.kill()
        server.wait()
        wait_for(server.pid, "gone")
    finally:
        for p in (first, server):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait()
        watch.send_signal(signal.SIGTERM)
        watch.wait(timeout=60)
        err = watch.stderr.read()
    time.sleep(0.5)  # the reader thread's last line
    while not lines.empty():
        seen.append(json.loads(lines.get()))
    print("--- pyrdmacm ids --watch 0.2 --json: exit %s\n%s\n%s" % (watch.returncode, "\n".join(map(json.dumps, seen)),
                                                                     err))
    assert watch.returncode == 0, err
    assert seen[-1]["change"] == "stopped" and seen[-1]["exit"] == 0  # the stream's last line
    mine = [(c["change"], c["id"]["state"]) for c in seen if c.get("id", {}).get("pid") == server.pid]
    assert mine[0][0] == "new" and "LISTEN" in {state for _, state in mine[:2]} and mine[-1][0] == "gone", mine
