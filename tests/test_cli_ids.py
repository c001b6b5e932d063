"""`pyrdmacm ids` on the host: what it prints for the netlink dump it is given (the lab test
reads the real one beside `rdma resource show cm_id`), its filters, and its exit codes."""

import contextlib
import io
import ipaddress
import json

from pyrdmacm import cli, netlink
from pyrdmacm.kernel_rules import RdmaCmState


def _run(*args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(["ids", *args])
    return code, out.getvalue(), err.getvalue()


def _dump(monkeypatch, ids):
    monkeypatch.setattr(netlink, "cm_ids", lambda: list(ids))


LISTENER = netlink.CmIdInfo(dev_index=1, dev_name="rxe0", port=1, ps=0x106, state=RdmaCmState.LISTEN,
                            src=(ipaddress.ip_address("10.0.2.15"), 7471), dst=None, pid=4194305, kern_name=None,
                            cm_idn=7)
KERNEL = netlink.CmIdInfo(dev_index=1, dev_name="rxe0", port=1, ps=0x002, state=RdmaCmState.ADDR_BOUND,
                          src=(ipaddress.ip_address("fe80::1"), 0), dst=None, pid=None, kern_name="ib_ipoib",
                          cm_idn=3)


def test_ids_prints_rdma_res_words(monkeypatch):
    _dump(monkeypatch, [LISTENER, KERNEL])
    code, out, err = _run()
    assert code == 0, err
    assert out.splitlines() == [
        "link rxe0/1 cm-idn 3 state ADDR_BOUND ps IPOIB comm [ib_ipoib] src-addr [fe80::1]:0",
        "link rxe0/1 cm-idn 7 state LISTEN ps TCP pid 4194305 src-addr 10.0.2.15:7471",  # above pid_max: no such process, no comm
    ]


def test_ids_json_and_filters(monkeypatch):
    _dump(monkeypatch, [LISTENER, KERNEL])
    code, out, _ = _run("--json")
    doc = json.loads(out)
    rows = doc["ids"]
    assert code == 0 and [r["cm-idn"] for r in rows] == [3, 7]
    assert (doc["schema"], doc["exit"]) == (1, 0)
    # rdma -j resource show cm_id's keys where the fact is the same (src-addr holds the port, as rdma's)
    assert rows[1] == {"ifindex": 1, "ifname": "rxe0", "port": 1, "cm-idn": 7, "lqpn": None, "state": "LISTEN",
                       "ps": "TCP", "pid": 4194305, "comm": None, "kernel": False, "src-addr": "10.0.2.15:7471",
                       "dst-addr": None}
    assert rows[0]["kernel"] and rows[0]["comm"] == "ib_ipoib"
    for args, want in ((("--pid", "4194305"), [7]), (("--state", "listen"), [7]), (("--ps", "ipoib"), [3]),
                       (("--dev", "mlx5_0"), []), (("--pid", "1", "--ps", "tcp"), []),
                       (("--src-addr", "10.0.2.15"), [7]), (("--src-addr", "fe80::1"), [3]),
                       (("--src-port", "7471"), [7]), (("--src-port", "0"), [3]), (("--dst-port", "7471"), []),
                       (("--dst-addr", "10.0.2.2"), []), (("--src-addr", "10.0.2.15", "--src-port", "1"), [])):
        code, out, _ = _run("--json", *args)
        assert code == 0 and [r["cm-idn"] for r in json.loads(out)["ids"]] == want, args


def test_ids_refuses_a_filter_it_cannot_match(monkeypatch):
    """A state no id can be in, an address or a port that is none: exit 3 naming it (it was
    accepted, and matched nothing, silently)."""
    _dump(monkeypatch, [LISTENER, KERNEL])
    for args, says in ((("--state", "FOO"), "--state 'FOO' is no state of an id: give one of IDLE, ADDR_QUERY"),
                       (("--src-addr", "10.0.2.300"), "--src-addr '10.0.2.300' is not an IP address"),
                       (("--dst-port", "-1"), "--dst-port '-1' is not a port: give 0..65535"),
                       (("--src-port", "http"), "--src-port 'http' is not a port")):
        code, out, err = _run("--json", *args)
        assert code == 3 and out == "" and err.startswith("pyrdmacm: " + says), (args, err)


def test_ids_without_rdma_netlink_exits_4(monkeypatch):
    from pyrdmacm.errors import KernelError

    def refused():
        raise KernelError(93, "socket(AF_NETLINK, NETLINK_RDMA)")

    monkeypatch.setattr(netlink, "cm_ids", refused)
    code, out, err = _run()
    assert code == 4 and out == "" and "NETLINK_RDMA" in err
    code, out, err = _run("--json")  # the error object too, and the exit status
    doc = json.loads(out)
    assert code == 4 and "NETLINK_RDMA" in err and doc["exit"] == 4 and doc["ids"] == []
    assert doc["error"]["errno"] == 93 and doc["error"]["name"] == "EPROTONOSUPPORT"


def test_ids_watch_rejects_a_bad_interval(monkeypatch):
    _dump(monkeypatch, [])
    for bad in ("0", "x", "-1", "4000"):
        code, _, err = _run("--watch", bad)
        assert code == 3 and "--watch" in err, bad


def test_ids_watch_shows_changes_until_interrupted(monkeypatch):
    import dataclasses
    import time

    moved = dataclasses.replace(LISTENER, state=RdmaCmState.CONNECT, dst=(ipaddress.ip_address("10.0.2.2"), 40000))
    dumps = iter([[KERNEL], [KERNEL, LISTENER], [KERNEL, moved], [moved]])
    monkeypatch.setattr(netlink, "cm_ids", lambda: next(dumps))
    looks = []

    def sleep(seconds):
        looks.append(seconds)
        if len(looks) == 4:
            raise KeyboardInterrupt  # Ctrl-C: stopped as asked

    monkeypatch.setattr(time, "sleep", sleep)
    code, out, err = _run("--watch", "0.5", "--json")
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    assert all(c["schema"] == 1 for c in lines)
    last = lines.pop()  # the stream's last line: stopped, with the exit status
    assert (last["change"], last["exit"]) == ("stopped", 0)
    seen = [(c["change"], c["id"]["cm-idn"], c["id"]["state"]) for c in lines]
    assert seen == [("present", 3, "ADDR_BOUND"), ("new", 7, "LISTEN"), ("changed", 7, "CONNECT"),
                    ("gone", 3, "ADDR_BOUND")]
    assert looks == [0.5] * 4

