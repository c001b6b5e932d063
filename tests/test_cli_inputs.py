"""The CLI's inputs and exit codes on the host: every documented address form reaches the
pre-check, bad input of every kind ends in one message and exit 3 (never a traceback, JSON
mode included), `route` gives the partial prediction and what is missing, host names are
looked up as rping does, and the exit-code table is the one --help and docs/cli.md show.

The routing view and the devices are fakes (tests/test_precheck_netns.py's); no test here
asks DNS: ``socket.getaddrinfo`` answers from a table.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
from pathlib import Path
from typing import Any, List

import pytest

from pyrdmacm import cli
from pyrdmacm import devices as D
from pyrdmacm.cli import conn, resolve, route
from pyrdmacm.precheck import predict
from test_devices import IB_GID
from precheck_fakes import _net, devs  # noqa: F401  (devs: a fixture)

ROOT = Path(__file__).resolve().parent.parent

#: what the fake getaddrinfo knows, in its order of answers
NAMES = {"peer": ["10.0.2.2", "2001:db8::2"], "peer6": ["2001:db8::2"]}


@pytest.fixture(autouse=True)
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> List[Any]:
    asked: List[Any] = []

    def getaddrinfo(host: str, port: Any, family: int = 0, type: int = 0, *rest: Any) -> List[Any]:
        asked.append((host, family))
        out = []
        for a in NAMES.get(host, []):
            fam = socket.AF_INET if ipaddress.ip_address(a).version == 4 else socket.AF_INET6
            if family in (0, fam):
                sa = (a, 0) if fam == socket.AF_INET else (a, 0, 0, 0)
                out.append((fam, socket.SOCK_STREAM, 6, "", sa))
        if not out:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return out

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


@pytest.fixture
def nothing_sent(monkeypatch: pytest.MonkeyPatch) -> List[str]:
    """Fails the test if the CLI opens an rdma_cm channel (bad input must be refused before)."""
    opened: List[str] = []
    import pyrdmacm.core.event_channel

    def refuse(*a: Any, **kw: Any) -> Any:
        opened.append("channel")
        raise AssertionError("a channel was opened for bad input")

    monkeypatch.setattr(pyrdmacm.core.event_channel, "EventChannel", refuse)
    monkeypatch.setattr(conn, "_open_channel", refuse)
    return opened


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    try:
        code = cli.main(list(argv))
    except SystemExit as e:  # argparse's refusals and --help/--version exit this way
        code = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


def _net6() -> Any:
    """The fake routing view, with 2001:db8::2 on eth0's subnet too."""
    from pyrdmacm import netlink as N

    on_link = N.Route(dst=ipaddress.ip_address("2001:db8::2"), src=None, oif=None, errno=0,
                      type=N.RouteType.UNICAST, ifindex=2, ifname="eth0", gateway=None,
                      prefsrc=ipaddress.ip_address("2001:db8::15"), table=254,
                      prefix=ipaddress.ip_network("2001:db8::/64"))
    return _net({"2001:db8::2": on_link})


def fake_predict(devices: Any, check_node: bool = False, seen: Any = None) -> Any:
    def _predict(dst: Any, src: Any, strict: bool = False) -> Any:
        if seen is not None:
            seen.append(dst)
        return predict(dst, src, strict=strict, devices=devices, network=_net6(), check_node=check_node)
    return _predict


# --------------------------------------------------------------------------- bad input: 3, one message

BAD = [
    (["resolve", "10.0.2.2", "--timeout", "-1"], "bad --timeout '-1'"),
    (["resolve", "10.0.2.2", "--timeout", "0"], "bad --timeout '0'"),
    (["resolve", "10.0.2.2", "--timeout", "4294967296"], "from 1 to 4294967295"),
    (["resolve", "10.0.2.2", "--timeout", "\u0661\u0660"], "bad --timeout"),
    (["resolve", "10.0.2.2", "--timeout", "2s"], "give milliseconds"),
    (["resolve", "10.0.2.2", "--src", "::1"], "--src ::1 is IPv6 but DST 10.0.2.2 is IPv4"),
    (["resolve", "gid:fe80::1", "--src", "10.0.2.15"], "is IPv4 but DST gid:fe80::1 is an InfiniBand GID"),
    (["resolve", "fe80::1%\u0661"], "ASCII digits (fe80::1%1)"),
    (["resolve", "fe80::1%\u00b2"], "zone"),
    (["resolve", "fe80::1%\uff11", "--json"], "zone"),
    (["resolve", "fe80::1"], "needs a zone naming the interface"),
    (["resolve", "10.0.0.256"], "'10.0.0.256' is not an IP address"),
    (["resolve", "gid:zz"], "is not a GID"),
    (["resolve", "gid:fe80::1 pkey=0x10000"], "out of range"),
    (["resolve", "10.0.2.2:99999", "--json"], "out of range"),
    (["resolve", "nosuchhost"], "cannot look up host name 'nosuchhost'"),
    (["resolve", "peer", "-n"], "'peer' is a host name, and -n/--numeric looks up none"),
    (["resolve", "x" * 300], "too long"),
    (["resolve", " "], "empty"),
    (["route", "10.0.2.2", "--src", "2001:db8::15"], "--src 2001:db8::15 is IPv6"),
    (["route", "10.0.2.2:7471:1"], "not an IP address"),
    (["route", "[fe80::1%eth0"], "unbalanced '['"),
    (["route", "peer6", "--src", "10.0.2.15"], "cannot look up host name 'peer6' as IPv4"),
    (["ping", "10.0.2.2", "--src", "fe80::1"], "needs a zone"),
    (["ping", "10.0.2.2", "--timeout", "4294967296"], "bad --timeout"),
    (["ping", "nosuchhost:7471"], "cannot look up host name 'nosuchhost'"),
    (["listen", "--", "-5"], "bad port '-5': give a port 1..65535"),  # a negative port, not "not an IP address"
    (["route", "h\udcffx"], "DST: 'h\\xffx' is not an IP address"),  # the byte 0xff of argv, as a byte
    (["route", "127.0.0.1:no-such-service"], "DST: unknown service 'no-such-service' in '127.0.0.1:no-such-service'"),
    (["route", "-n", "127.0.0.1:ssh"], "DST '127.0.0.1:ssh' names its port by a service, and -n/--numeric"),
    (["ping", "--src", "nosuchhost", "10.0.2.2"], "--src: cannot look up host name 'nosuchhost'"),
    (["listen", "nosuchhost:7471"], "cannot look up host name 'nosuchhost'"),
    (["listen", "-n", "peer:7471"], "'peer:7471' is a host name, and -n/--numeric looks up none"),
    (["listen", "10.0.2.15:no-such-service"], "unknown service 'no-such-service'"),
    (["listen", "peer"], "no port in 'peer'"),
    (["conformance", "--case", "nope"], "unknown case nope"),
]


@pytest.mark.parametrize("argv,message", BAD)
def test_bad_input_exits_3_with_one_message(capsys: Any, nothing_sent: List[str], argv: List[str],
                                            message: str) -> None:
    code, out, err = run(capsys, *argv)
    assert code == cli.EXIT_USAGE, err
    assert out == "" and err.startswith("pyrdmacm: ") and err.count("\n") == 1, err
    assert message in err
    assert not any(name in err for name in ("parse_address", "lookup_host", "\\udc")), err  # no internal names
    assert nothing_sent == []


ARGPARSE = [
    [], ["frobnicate"], ["resolve"], ["resolve", "10.0.2.2", "--bogus"], ["resolve", "10.0.2.2", "--ps", "sdp"],
    ["route"], ["route", "10.0.2.2", "extra"], ["devices", "--all"], ["ping"], ["listen"], ["decode", "--reply"],
    ["resolve", "10.0.2.2", "--timeout"], ["--no-such-flag"],
    ["resolve", "10.0.2.2", "--js"], ["conformance", "--li"],  # no abbreviations: --js is not --json
    ["listen", "7471", "--ps", "ib"],
]


@pytest.mark.parametrize("argv", ARGPARSE)
def test_argparse_refusals_exit_3(capsys: Any, nothing_sent: List[str], argv: List[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == cli.EXIT_USAGE, (code, err)
    assert out == "" and ("error: " in err or "exit status" in err)


def test_version_and_help_exit_0(capsys: Any) -> None:
    from pyrdmacm import __version__

    assert run(capsys, "--version")[:2] == (0, "pyrdmacm %s\n" % __version__)
    code, out, _ = run(capsys, "--help")
    assert code == 0 and cli.exit_codes_text() in out  # the table once, at the top
    parser = cli.build_parser()
    helps = {a.dest: a.help for a in parser._subparsers._group_actions[0]._choices_actions}  # type: ignore
    for sub in ("resolve", "route", "ping", "listen", "devices", "probe", "decode", "conformance", "mesh", "mcast",
                "ids"):
        code, out, _ = run(capsys, sub, "--help")
        said = " ".join(out.split("\n\n")[1].split())  # the paragraph after the usage
        assert code == 0 and said.lower() == helps[sub].lower() + ".", (sub, said)  # what it does
        assert cli.exit_codes_text() not in out and "`pyrdmacm --help` shows the table" in out, sub


# --------------------------------------------------------------------------- one table of exit codes


def _doc_table(text: str) -> dict:
    return {int(m.group(1)): m.group(2).strip() for m in re.finditer(r"^\| (\d+) \| (.+?) \|$", text, re.M)}


def test_docs_show_the_exit_code_table_the_code_uses() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    assert _doc_table(doc) == dict(cli.EXIT_CODES)
    assert [c for c, _ in cli.EXIT_CODES] == [cli.EXIT_OK, cli.EXIT_EVENT, cli.EXIT_KERNEL, cli.EXIT_USAGE,
                                              cli.EXIT_NODEV, cli.EXIT_OUTPUT, cli.EXIT_INTERRUPTED] == [0, 1, 2, 3, 4, 5,
                                                                                                   130]
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## The command line", 1)[1].split("\n## ", 1)[0]
    assert "docs/cli.md" in section and _doc_table(section) == dict(cli.EXIT_CODES)


# --------------------------------------------------------------------------- route: partial prediction


def test_route_without_rdma_devices_gives_the_partial_prediction(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(route, "_predict", fake_predict([]))
    code, out, err = run(capsys, "route", "192.0.2.1", "--json")
    j = json.loads(out)
    assert code == cli.EXIT_NODEV == j["exit"]
    p = j["prediction"]
    assert (p["src"], p["netdev"], p["route_netdev"], p["gateway"], p["table"]) == (
        "10.0.2.15", "eth0", "eth0", "10.0.2.2", 254)
    assert (p["next_hop"], p["neighbour"], p["needs_neighbour_resolution"]) == ("10.0.2.2", "REACHABLE", False)
    assert p["complete"] is False and [m["what"] for m in p["missing"]] == ["device"]
    assert p["missing"][0]["name"] == "ENODEV" and "rdma link add" in p["missing"][0]["hint"]
    assert j["error"]["name"] == "ENODEV" and not j["error"]["message"].startswith("[Errno")
    code, out, err = run(capsys, "route", "192.0.2.1")
    assert code == cli.EXIT_NODEV
    assert out.startswith("prediction (partial: what this host lacks is under missing):\n")
    assert "  route: 0.0.0.0/0 via 10.0.2.2 dev eth0 src 10.0.2.15 (table main)" in out
    assert "  next hop 10.0.2.2 on eth0: neighbour REACHABLE" in out
    assert "\nmissing:\n  no RDMA device is visible (ENODEV No such device)\n" in out
    assert err == "pyrdmacm: the prediction stops short: no RDMA device is visible (see missing)\n"


def test_route_says_the_rdma_cm_node_is_missing(capsys: Any, monkeypatch: Any, devs: Any) -> None:
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    monkeypatch.setattr(route, "_predict", fake_predict(devs, check_node=True))
    code, out, _ = run(capsys, "route", "10.0.2.2:7471", "--json")
    p = json.loads(out)["prediction"]
    assert code == cli.EXIT_NODEV and p["candidates"][0]["device"] == "rxe0"
    assert [(m["what"], m["name"]) for m in p["missing"]] == [("rdma_cm", "ENOENT")]
    assert "modprobe rdma_ucm" in p["missing"][0]["hint"]
    assert json.loads(out)["error"] is None


@pytest.mark.parametrize("dst", ["10.0.2.2", "10.0.2.2:7471", "[2001:db8::2]:7471", "peer", "peer:7471"])
def test_every_documented_form_reaches_the_precheck(capsys: Any, monkeypatch: Any, devs: Any, dst: str) -> None:
    seen: List[Any] = []
    monkeypatch.setattr(route, "_predict", fake_predict(devs, seen=seen))
    code, out, err = run(capsys, "route", dst)
    assert code == cli.EXIT_OK, err
    assert seen and seen[0].__class__.__name__ == "Address"  # the one parsed address, not the text
    assert "device: rxe0" in out


def test_host_names_are_looked_up_and_the_choice_shown(capsys: Any, monkeypatch: Any, devs: Any,
                                                       fake_dns: List[Any]) -> None:
    monkeypatch.setattr(route, "_predict", fake_predict(devs))
    code, out, _ = run(capsys, "route", "peer")
    assert code == cli.EXIT_OK
    assert out.splitlines()[0] == "host name: peer is 10.0.2.2 (getaddrinfo's first answer; also 2001:db8::2)"
    code, out, _ = run(capsys, "route", "peer", "--json")
    j = json.loads(out)
    assert j["dst"] == "10.0.2.2" and j["names"] == ["peer is 10.0.2.2 (getaddrinfo's first answer; also 2001:db8::2)"]
    fake_dns.clear()
    run(capsys, "route", "peer", "--src", "2001:db8::15")  # a source's family restricts the lookup
    assert fake_dns == [("peer", socket.AF_INET6)]


def _has_services() -> None:
    try:
        socket.getservbyname("ssh", "tcp")
        socket.getservbyname("domain", "udp")
    except OSError:
        pytest.skip("this host's services database lacks ssh/tcp or domain/udp (/etc/services: netbase)")


def test_names_and_service_names_everywhere_an_address_is_taken() -> None:
    """DST, --src and listen's ADDR:PORT take host names, and ports by service name, looked up in
    the services database for the port space's protocol."""
    import argparse

    from pyrdmacm.addr import parse_address
    from pyrdmacm.cli.inputs import _dst_src, _listen_addr

    _has_services()
    ssh, domain = socket.getservbyname("ssh", "tcp"), socket.getservbyname("domain", "udp")
    args = argparse.Namespace(dst="127.0.0.1:ssh", src=None, numeric=False, ps="tcp")
    assert _dst_src(args)[0] == parse_address("127.0.0.1:%d" % ssh)
    args = argparse.Namespace(dst="peer:domain", src="peer", numeric=False, ps="udp")
    dst, src, names = _dst_src(args)
    assert (dst, src) == (parse_address("10.0.2.2:%d" % domain), parse_address("10.0.2.2"))
    assert [n.name for n in names] == ["peer", "peer"]
    args = argparse.Namespace(dst="[2001:db8::2]:ssh", src=None, numeric=False, ps="tcp")
    assert _dst_src(args)[0] == parse_address("[2001:db8::2]:%d" % ssh)
    addr, name = _listen_addr("peer:7471")
    assert addr == parse_address("10.0.2.2:7471") and name is not None and name.name == "peer"
    assert _listen_addr("[::]:ssh") == (parse_address("[::]:%d" % ssh), None)
    assert _listen_addr("7471") == (parse_address("0.0.0.0:7471"), None)
    assert _listen_addr("127.0.0.1:7471", numeric=True) == (parse_address("127.0.0.1:7471"), None)


def test_a_service_of_the_other_protocol_is_named_so() -> None:
    from pyrdmacm.cli.inputs import _BadInput, _listen_addr

    try:
        socket.getservbyname("ssh", "tcp")
        socket.getservbyname("ssh", "udp")
        pytest.skip("this host's services database has ssh for udp too")
    except OSError:
        pass
    _has_services()
    with pytest.raises(_BadInput, match="unknown service 'ssh' in '10.0.2.15:ssh': no udp service of that name "
                                        r"in the services database \(/etc/services\) \(it is a tcp service\)"):
        _listen_addr("10.0.2.15:ssh", protocol="udp")


def test_gid_destinations_are_predicted(capsys: Any, monkeypatch: Any, devs: Any) -> None:
    monkeypatch.setattr(route, "_predict", fake_predict(devs))
    code, out, _ = run(capsys, "route", "gid:%s" % IB_GID, "--json")
    p = json.loads(out)["prediction"]
    assert code == cli.EXIT_OK and p["candidates"][0]["device"] == "mlx5_0" and p["src"] == IB_GID
    code, out, err = run(capsys, "route", "gid:fec0::1")
    assert code == cli.EXIT_NODEV
    assert "no InfiniBand port has a GID of fec0::1's subnet prefix fec0::/64" in out
    assert not any(d.ports[0].link_layer is D.LinkLayer.INFINIBAND for d in devs[:1])  # rxe0 is RoCE


def test_strict_precheck_exit_names_the_cause(capsys: Any, monkeypatch: Any, devs: Any) -> None:
    monkeypatch.setattr(route, "_predict", fake_predict(devs))
    # mlx5_0's port is DOWN: a warning; --strict refuses it with exit 2 and says why
    code, out, err = run(capsys, "route", "10.10.0.2", "--strict")
    assert code == cli.EXIT_KERNEL and "not ACTIVE" in err and "strict" in err
    assert "src=" not in err + out and "strict=" not in err + out  # flags, not library arguments
    code, out, err = run(capsys, "resolve", "10.10.0.2", "--strict", "--json")
    j = json.loads(out)
    assert code == cli.EXIT_KERNEL == j["exit"] and "kernel" not in j and j["prediction"]["device"] == "mlx5_0"
    # no device for the egress netdev: the same 4 in route and in resolve --strict
    monkeypatch.setattr(route, "_predict", fake_predict([]))
    assert run(capsys, "route", "10.0.2.2")[0] == cli.EXIT_NODEV
    assert run(capsys, "resolve", "10.0.2.2", "--strict")[0] == cli.EXIT_NODEV


# --------------------------------------------------------------------------- resolve against the fake kernel


@pytest.fixture
def slow_arp(monkeypatch: Any) -> None:
    """The fake kernel answers ADDR_RESOLVED only after 300 ms, as the real one does when its
    retry at the deadline finds the neighbour."""
    import pyrdmacm.core.event_channel
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm.testing import FakeKernel, FakeNet
    from pyrdmacm.testing.fake_file import UcmaFile

    queue = UcmaFile.queue

    def slow_queue(self: UcmaFile, ctx: Any, event: Any, status: int = 0, delay_ms: int = 0) -> None:
        queue(self, ctx, event, status, 300 if event == E.ADDR_RESOLVED else delay_ms)

    class Channel(pyrdmacm.core.event_channel.EventChannel):
        def __init__(self, transport: Any = None, **kw: Any) -> None:
            super().__init__(transport or FakeKernel(FakeNet()), **kw)

    monkeypatch.setattr(UcmaFile, "queue", slow_queue)
    monkeypatch.setattr(pyrdmacm.core.event_channel, "EventChannel", Channel)


def test_addr_resolved_at_the_timeout_is_explained(capsys: Any, slow_arp: None) -> None:
    code, out, _ = run(capsys, "resolve", "10.0.0.2", "--timeout", "320", "--no-precheck", "--json")
    k = json.loads(out)["kernel"]
    assert code == cli.EXIT_OK and k["event"] == "ADDR_RESOLVED" and k["at_timeout"] is True
    assert "retries a pending resolution at its deadline" in k["note"]
    code, out, _ = run(capsys, "resolve", "10.0.0.2", "--timeout", "320", "--no-precheck")
    assert "  note: ADDR_RESOLVED came at the timeout (" in out
    code, out, _ = run(capsys, "resolve", "10.0.0.2", "--timeout", "5000", "--no-precheck", "--json")
    k = json.loads(out)["kernel"]
    assert k["at_timeout"] is False and "note" not in k


def test_resolve_output_names_guid_pkey_and_path_fields(capsys: Any, monkeypatch: Any) -> None:
    import pyrdmacm.core.event_channel
    from pyrdmacm.testing import FakeKernel, FakeNet

    class Channel(pyrdmacm.core.event_channel.EventChannel):
        def __init__(self, transport: Any = None, **kw: Any) -> None:
            super().__init__(transport or FakeKernel(FakeNet()), **kw)

    monkeypatch.setattr(pyrdmacm.core.event_channel, "EventChannel", Channel)
    code, out, err = run(capsys, "resolve", "10.0.0.2", "--route", "--no-precheck", "--json")
    j = json.loads(out)
    assert code == cli.EXIT_OK, err
    assert re.fullmatch(r"[0-9a-f]{4}(:[0-9a-f]{4}){3}", j["kernel"]["node_guid"])
    path = j["route"]["paths"][0]
    assert path["mtu"] in (256, 512, 1024, 2048, 4096) and path["mtu"] == 128 << path["mtu_code"]
    assert re.fullmatch(r"0x[0-9a-f]{4}", path["pkey"])
    code, out, _ = run(capsys, "resolve", "10.0.0.2", "--route", "--no-precheck")
    assert re.search(r"^  node_guid    [0-9a-f]{4}(:[0-9a-f]{4}){3}$", out, re.M)
    assert re.search(r"^    pkey 0x[0-9a-f]{4} \(.+\) mtu %d rate " % path["mtu"], out, re.M)
    life = path["packet_life_time_us"]
    assert life == round(4.096 * 2 ** path["packet_life_time_code"], 3)
    assert re.search(r" packet_life_time %s$" % re.escape(resolve._us_text(life)), out, re.M)
    assert resolve._us_text(4.096) == "4.096 us" and resolve._us_text(268435.456) == "268 ms"


def test_pkeys_are_named() -> None:
    assert resolve._pkey_text(0xFFFF) == "0xffff (the default partition, full member)"
    assert resolve._pkey_text(0x7FFF) == "0x7fff (the default partition, limited member)"
    assert resolve._pkey_text(0x8001) == "0x8001 (partition 0x0001, full member)"
    assert resolve._pkey_text(0) == "0x0000 (none: RoCE and iWARP have no partitions)"


# --------------------------------------------------------------------------- devices


def test_devices_mtu_in_bytes_and_one_guid_spelling(capsys: Any, monkeypatch: Any, tmp_path: Path) -> None:
    from test_devices import build_two_devices

    fs = build_two_devices(tmp_path)
    (tmp_path / "class/net/eth0").mkdir(parents=True, exist_ok=True)
    (tmp_path / "class/net/eth0/mtu").write_text("1500\n")
    listed = D.list_devices(sysfs_root=str(tmp_path), use_netlink=False)
    assert fs and listed
    monkeypatch.setattr(D, "list_devices", lambda: listed)
    code, out, _ = run(capsys, "devices")
    assert code == 0 and "mtu ?" not in out and " ? " not in out
    assert "mtu 1024 (rdma_cm's path MTU for eth0's 1500)" in out
    assert "node_guid 0002:c903:0030:9e20" in out
    code, out, _ = run(capsys, "devices", "--json")
    j = {d["name"]: d for d in json.loads(out)["devices"]}
    assert j["mlx5_0"]["node_guid"] == "0002:c903:0030:9e20"
    roce = j["rxe0"]["ports"][0]
    assert (roce["netdev_mtu"], roce["path_mtu"], roce["active_mtu"]) == (1500, 1024, None)


@pytest.mark.parametrize("netdev_mtu,path_mtu", [(1500, 1024), (1120, 1024), (1119, 512), (9000, 4096),
                                                 (4192, 4096), (4191, 2048), (351, None), (352, 256)])
def test_roce_path_mtu_is_the_kernels_iboe_get_mtu(netdev_mtu: int, path_mtu: Any) -> None:
    assert D.roce_path_mtu(netdev_mtu) == path_mtu


def test_devices_with_nothing_found_exits_4_as_ibv_devinfo_fails(capsys: Any, monkeypatch: Any) -> None:
    monkeypatch.setattr(D, "list_devices", lambda: [])
    code, out, err = run(capsys, "devices")
    assert code == 4 and not out and "no RDMA devices" in err
    code, out, err = run(capsys, "devices", "--json")
    assert code == 4 and json.loads(out) == {"schema": 1, "devices": [], "exit": 4}


def test_ping_to_a_gid_without_a_service_id_takes_librdmacm_s_of_its_port(capsys: Any, monkeypatch: Any) -> None:
    """``ping gid:...`` with no sid= or port=: the service id of port 7471 in the port space
    (0x1061d2f for tcp), where it was 0 (which no listener has); the JSON's port is its low 16
    bits.  The device node is missing here: exit 4 after the inputs are read."""
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    seen: List[Any] = []
    real = conn._open_channel

    def record(*a: Any, **kw: Any) -> Any:
        import inspect

        seen.append(inspect.currentframe().f_back.f_locals["dst"])  # type: ignore[union-attr]
        return real(*a, **kw)

    monkeypatch.setattr(conn, "_open_channel", record)
    code, out, _ = run(capsys, "ping", "gid:%s" % IB_GID, "--json")
    assert code == cli.EXIT_NODEV and json.loads(out)["port"] == 7471
    assert (seen[0].sid, seen[0].sid_mask) == (0x01061D2F, 0xFFFFFFFFFFFFFFFF)
    run(capsys, "ping", "gid:%s" % IB_GID, "--ps", "udp", "--json")
    assert seen[1].sid == 0x01111D2F
    run(capsys, "ping", "gid:%s sid=0x99" % IB_GID, "--json")
    assert (seen[2].sid, seen[2].sid_mask) == (0x99, 0xFFFFFFFFFFFFFFFF)  # a given sid as it is
