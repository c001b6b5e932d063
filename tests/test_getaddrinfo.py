"""pyrdmacm.getaddrinfo on the host: librdmacm's rdma_getaddrinfo semantics, row by row.

Two kinds of test.  With a recording stand-in for the C library's getaddrinfo (``resolver``):
which hints librdmacm's conversion gives the C library for each of ours, and what the
record makes of its first answer.  With the real C library (numeric addresses, the
any-address, ``localhost`` compared with the C library's own first answer, services from the
services database): the records themselves.  tests/kernel/test_getaddrinfo_lab.py holds the
same semantics to librdmacm's own answers in the lab.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import pickle
import socket
import threading
from typing import Any, List

import pytest

import pyrdmacm
from pyrdmacm import (Address, NameServiceError, PortSpace, QpType, RaiFlag, RdmaAddrInfo, UsageError, aio, getaddrinfo,
                      getaddrinfo_all)
from pyrdmacm.addr import AF_IB, AF_INET, AF_INET6


def _services() -> None:
    try:
        socket.getservbyname("ssh", "tcp")
    except OSError:
        pytest.skip("this host has no services database entry for ssh (/etc/services: the netbase package)")


class Recorder:
    """A stand-in for socket.getaddrinfo: records what it is asked, answers one sockaddr."""

    def __init__(self, *answers: Any) -> None:
        self.asked: List[Any] = []
        self.answers = list(answers) or [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "",
                                          ("10.0.0.2", 7471))]

    def __call__(self, node: Any, service: Any, family: int, socktype: int, proto: int, flags: int) -> Any:
        self.asked.append((node, service, family, socktype, proto, flags))
        return self.answers


# --------------------------------------------------------------------------- the hints librdmacm passes


@pytest.mark.parametrize("kw,want", [
    # no hints at all: librdmacm passes NULL, and the C library's defaults apply
    ({}, (0, 0, 0, socket.AI_V4MAPPED | socket.AI_ADDRCONFIG)),
    ({"no_route": True}, (0, 0, 0, 0)),
    ({"passive": True}, (0, 0, 0, socket.AI_PASSIVE)),
    ({"numeric_host": True}, (0, 0, 0, socket.AI_NUMERICHOST)),
    ({"family": AF_INET6}, (socket.AF_INET6, 0, 0, 0)),
    ({"family": AF_IB, "numeric_host": True}, (0, 0, 0, socket.AI_NUMERICHOST)),  # AF_IB is not the C library's
    ({"qp_type": QpType.RC}, (0, socket.SOCK_STREAM, 0, 0)),
    ({"qp_type": QpType.UC}, (0, socket.SOCK_STREAM, 0, 0)),
    ({"qp_type": QpType.UD}, (0, socket.SOCK_DGRAM, 0, 0)),
    ({"qp_type": QpType.RAW_PACKET}, (0, 0, 0, 0)),
    ({"port_space": PortSpace.TCP}, (0, 0, socket.IPPROTO_TCP, 0)),
    ({"port_space": PortSpace.UDP}, (0, 0, socket.IPPROTO_UDP, 0)),
    ({"port_space": PortSpace.IPOIB}, (0, 0, socket.IPPROTO_UDP, 0)),
    ({"port_space": PortSpace.IB}, (0, 0, 0, 0)),
    ({"port_space": PortSpace.IB, "qp_type": QpType.UD}, (0, socket.SOCK_DGRAM, socket.IPPROTO_UDP, 0)),
    ({"port_space": PortSpace.IB, "qp_type": QpType.RC}, (0, socket.SOCK_STREAM, socket.IPPROTO_TCP, 0)),
])
def test_hints_become_the_c_librarys_as_librdmacm_converts_them(kw: Any, want: Any) -> None:
    r = Recorder((socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("fe80::1", 7471, 0, 0)))
    getaddrinfo("fe80::1", "7471", resolver=r, **kw)
    assert r.asked == [("fe80::1", "7471") + want]


def test_the_record_takes_the_first_answer_and_types_from_its_socket() -> None:
    r = Recorder((socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_UDP, "", ("10.0.0.2", 53)),
                 (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("10.0.0.3", 53)))
    info = getaddrinfo("dns", "domain", no_route=True, resolver=r)
    assert (info.qp_type, info.port_space, info.dst, info.src) == (QpType.UD, PortSpace.UDP, Address(
        ipaddress.IPv4Address("10.0.0.2"), 53), None)
    assert info.flags == RaiFlag(0) and info.family == AF_INET and not info.is_passive
    # a hint wins over the answer's socket; an unknown socket type leaves None (librdmacm's 0)
    r = Recorder((socket.AF_INET, socket.SOCK_RAW, 0, "", ("10.0.0.2", 0)))
    info = getaddrinfo("x", "1", no_route=True, port_space=PortSpace.IB, resolver=r)
    assert (info.qp_type, info.port_space) == (None, PortSpace.IB)


# --------------------------------------------------------------------------- the C library's own answers


def test_numeric_v4() -> None:
    info = getaddrinfo("10.0.0.2", "7471", numeric_host=True, no_route=True)
    assert info == RdmaAddrInfo(RaiFlag(0), AF_INET, QpType.RC, PortSpace.TCP, None, pyrdmacm.parse_address(
        "10.0.0.2:7471"))
    assert getaddrinfo("10.0.0.2", 7471, no_route=True).dst == info.dst  # a port as an int


def test_localhost_is_the_c_librarys_first_answer() -> None:
    first = socket.getaddrinfo("localhost", "7471", 0, 0, 0, socket.AI_V4MAPPED | socket.AI_ADDRCONFIG)[0]
    info = getaddrinfo("localhost", "7471", no_route=False)
    assert info.dst is not None and str(info.dst.ip) == first[4][0].split("%")[0] and info.dst.port == 7471
    assert getaddrinfo("localhost", "7471", family=AF_INET, no_route=True).dst == pyrdmacm.parse_address(
        "127.0.0.1:7471")


def test_passive_without_a_node_is_the_any_address() -> None:
    info = getaddrinfo(None, "7471", passive=True)
    assert info.is_passive and info.flags == RaiFlag.PASSIVE and info.dst is None and info.prediction is None
    assert info.src is not None and info.src.is_any and info.src.port == 7471
    v6 = getaddrinfo(None, "7471", passive=True, family=AF_INET6)
    assert v6.src == pyrdmacm.parse_address("[::]:7471") and v6.family == AF_INET6
    node = getaddrinfo("10.0.0.2", "7471", passive=True, numeric_host=True)
    assert (node.src, node.dst) == (pyrdmacm.parse_address("10.0.0.2:7471"), None)


def test_numeric_host_refuses_a_name_naming_it() -> None:
    with pytest.raises(NameServiceError, match="node 'localhost' is not a numeric address.*EAI_NONAME") as e:
        getaddrinfo("localhost", "7471", numeric_host=True)
    assert isinstance(e.value, socket.gaierror) and e.value.errno == socket.EAI_NONAME


def test_v6_with_a_zone_keeps_its_scope_id() -> None:
    lo = socket.if_nametoindex("lo")
    for node in ("fe80::1%lo", "fe80::1%%%d" % lo):
        info = getaddrinfo(node, "7471", numeric_host=True, family=AF_INET6, no_route=True)
        assert info.dst == Address(ipaddress.IPv6Address("fe80::1"), 7471, lo) and info.family == AF_INET6
    # no zone: librdmacm answers it as it is (scope 0); resolve_addr is where it is refused
    assert getaddrinfo("fe80::1", "1", no_route=True).dst == Address(ipaddress.IPv6Address("fe80::1"), 1)


def test_af_ib_service_id_from_port_space_and_port() -> None:
    info = getaddrinfo("fe80::2:c903:0:1", "7471", numeric_host=True, family=AF_IB, no_route=True)
    assert info.family == AF_IB and info.dst is not None
    assert (info.dst.sid, info.dst.sid_mask, info.dst.pkey, info.dst.port) == (
        0x01061D2F, 0xFFFFFFFFFFFFFFFF, 0xFFFF, 7471)
    assert info.dst.pack_sockaddr()[:2] == AF_IB.to_bytes(2, "little")
    ud = getaddrinfo("fe80::2:c903:0:1", "7174", numeric_host=True, family=AF_IB, qp_type=QpType.UD,
                     no_route=True)
    assert (ud.port_space, ud.dst.sid if ud.dst else None) == (PortSpace.UDP, 0x01111C06)
    no_port = getaddrinfo("fe80::2:c903:0:1", "0", numeric_host=True, family=AF_IB, passive=True)
    assert no_port.src is not None and (no_port.src.sid, no_port.src.sid_mask) == (0x01060000, 0xFFFFFFFFFFFF0000)
    # without numeric_host librdmacm leaves the IPv6 answer as it is
    assert getaddrinfo("fe80::1%lo", "1", family=AF_IB, no_route=True).family == AF_INET6


def test_a_passive_af_ib_hint_with_no_node_is_the_af_ib_wildcard() -> None:
    """RAI_PASSIVE | RAI_NUMERICHOST | RAI_FAMILY with AF_IB and no node: an AF_IB address to
    listen on, the zero GID (the kernel's wildcard for AF_IB), pkey 0xffff, the service id
    of the port space and port. librdmacm reads the C library's first answer (0.0.0.0, a
    sockaddr_in) as a sockaddr_in6, so the GID's last 8 bytes and the scope id of its answer
    come from past that answer's end; everything else it answers is this."""
    for answer in ([(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("0.0.0.0", 7471))],
                   [(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("::", 7471, 0, 0))]):
        info = getaddrinfo(None, "7471", passive=True, numeric_host=True, family=AF_IB,
                           resolver=lambda *a, answer=answer: answer)
        assert info.family == AF_IB and info.dst is None and info.src is not None
        src = info.src
        assert (src.ip, src.pkey, src.sid, src.sid_mask, src.port) == (
            ipaddress.IPv6Address(0), 0xFFFF, 0x01061D2F, 0xFFFFFFFFFFFFFFFF, 7471)
        assert src.is_any
    real = getaddrinfo(None, "0", passive=True, numeric_host=True, family=AF_IB)  # this host's C library
    assert real.src is not None and real.src.ip == ipaddress.IPv6Address(0)
    assert (real.src.sid, real.src.sid_mask) == (0x01060000, 0xFFFFFFFFFFFF0000)


def test_af_ib_of_an_ipv4_answer_is_refused() -> None:
    with pytest.raises(UsageError, match="IPv4 address 10.0.0.2, but an AF_IB address takes a GID"):
        getaddrinfo("10.0.0.2", "7471", numeric_host=True, family=AF_IB)


def test_services_from_the_services_database() -> None:
    _services()
    assert getaddrinfo("10.0.0.2", "ssh", no_route=True).dst == pyrdmacm.parse_address("10.0.0.2:22")
    with pytest.raises(NameServiceError, match="unknown service 'no-such-service'.*EAI_SERVICE"):
        getaddrinfo("10.0.0.2", "no-such-service")
    with pytest.raises(NameServiceError, match="unknown service 'ssh' for UD.*EAI_SERVICE"):
        getaddrinfo("10.0.0.2", "ssh", qp_type=QpType.UD)  # ssh is a TCP service
    with pytest.raises(NameServiceError, match="do not go together for UD over TCP"):
        getaddrinfo("10.0.0.2", "7471", qp_type=QpType.UD, port_space=PortSpace.TCP)


def test_a_name_service_outage_is_an_os_error_with_its_eai_code() -> None:
    """EAI_AGAIN (the DNS did not answer) is socket.gaierror's contract: an OSError whose
    errno is the code, so that retry logic written for the standard library sees it."""
    def outage(*args: Any) -> Any:
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    for call in (getaddrinfo, getaddrinfo_all):
        with pytest.raises(OSError) as e:
            call("peer.example", "7471", resolver=outage)
        err = e.value
        assert isinstance(err, NameServiceError) and isinstance(err, socket.gaierror)
        assert not isinstance(err, ValueError) and err.errno == socket.EAI_AGAIN and err.code_name == "EAI_AGAIN"
        assert (err.node, err.service) == ("peer.example", "7471")
        assert str(err) == ("cannot look up node 'peer.example' service '7471' now: Temporary failure in name "
                            "resolution (EAI_AGAIN); the name service did not answer (a DNS outage?): try again "
                            "later, or write an IP address")
        assert pickle.loads(pickle.dumps(err)).errno == socket.EAI_AGAIN


def test_every_answer_is_a_record_and_the_first_is_getaddrinfos(monkeypatch: pytest.MonkeyPatch) -> None:
    """getaddrinfo_all gives what socket.getaddrinfo gives, each answer a record in its
    order; element 0 is getaddrinfo's; each destination predicted once."""
    def answers(node: Any, service: Any, family: int, socktype: int, proto: int, flags: int) -> Any:
        tcp, udp = (socket.SOCK_STREAM, socket.IPPROTO_TCP), (socket.SOCK_DGRAM, socket.IPPROTO_UDP)
        return [(socket.AF_INET6, st, pr, "", ("fd00::2", 7471, 0, 0)) for st, pr in (tcp, udp)] + [
            (socket.AF_INET, st, pr, "", ("10.0.0.2", 7471)) for st, pr in (tcp, udp)] + [
            (socket.AF_INET, socket.SOCK_RAW, 0, "", ("10.0.0.2", 7471))]

    every = getaddrinfo_all("peer", "7471", resolver=answers, no_route=True)
    assert [(str(r.dst), r.qp_type, r.port_space) for r in every] == [
        ("[fd00::2]:7471", QpType.RC, PortSpace.TCP), ("[fd00::2]:7471", QpType.UD, PortSpace.UDP),
        ("10.0.0.2:7471", QpType.RC, PortSpace.TCP), ("10.0.0.2:7471", QpType.UD, PortSpace.UDP),
        ("10.0.0.2:7471", None, None)]
    assert every[0] == getaddrinfo("peer", "7471", resolver=answers, no_route=True)
    predicted: List[str] = []
    import pyrdmacm.addrinfo as ai

    monkeypatch.setattr(ai, "_predict", lambda dst, src: (predicted.append(str(dst)), (None, 0, "predicted %s" % dst))[1])
    every = getaddrinfo_all("peer", "7471", resolver=answers)
    assert predicted == ["[fd00::2]:7471", "10.0.0.2:7471"]  # one prediction per destination
    assert [r.prediction_note for r in every] == ["predicted [fd00::2]:7471"] * 2 + ["predicted 10.0.0.2:7471"] * 3
    assert asyncio.run(aio.getaddrinfo_all("peer", "7471", resolver=answers)) == every
    passive = getaddrinfo_all(None, "7471", passive=True)
    assert passive and all(r.src is not None and r.src.is_any and r.dst is None for r in passive)
    with pytest.raises(UsageError, match="needs a node, a service, or hints"):
        getaddrinfo_all()


def test_families_are_the_socket_modules_where_it_has_them() -> None:
    v4 = getaddrinfo("10.0.0.2", "7471", no_route=True)
    v6 = getaddrinfo("fd00::2", "7471", no_route=True)
    ib = getaddrinfo("fe80::2:c903:0:1", "7471", numeric_host=True, family=AF_IB, no_route=True)
    assert v4.family is socket.AF_INET and v6.family is socket.AF_INET6  # as socket.getaddrinfo's
    assert ib.family == AF_IB == pyrdmacm.AF_IB == 27 and repr(v4.family) == repr(socket.AF_INET)


def test_neither_node_nor_service_echoes_the_hints() -> None:
    info = getaddrinfo(passive=True, no_route=True, family=AF_INET, qp_type=QpType.UD, port_space=PortSpace.UDP,
                       src="10.0.0.1:7", dst="10.0.0.2:8")
    assert info == RdmaAddrInfo(RaiFlag.PASSIVE | RaiFlag.NOROUTE | RaiFlag.FAMILY, AF_INET, QpType.UD,
                                PortSpace.UDP, pyrdmacm.parse_address("10.0.0.1:7"),
                                pyrdmacm.parse_address("10.0.0.2:8"))
    with pytest.raises(UsageError, match="needs a node, a service, or hints"):
        getaddrinfo()


def test_a_source_hint_is_kept_for_an_active_record() -> None:
    info = getaddrinfo("10.0.0.2", "7471", src="10.0.0.1", no_route=True)
    assert (info.src, info.dst) == (pyrdmacm.parse_address("10.0.0.1"), pyrdmacm.parse_address("10.0.0.2:7471"))


@pytest.mark.parametrize("kw,message", [
    ({"node": 10}, "node must be a str or None, got int 10"),
    ({"node": ""}, "node '' is not a host name or address"),
    ({"node": "a\0b"}, "is not a host name"),
    ({"service": 70000}, "service 70000 is out of range"),
    ({"service": b"22"}, "service must be a str or a port number or None, got bytes"),
    ({"passive": 1}, "passive must be True or False, got int 1"),
    ({"family": 99}, "family must be 0, AF_INET (2), AF_INET6 (10) or AF_IB (27), got int 99"),
    ({"family": True}, "family must be"),
    ({"qp_type": 99}, "qp_type must be a QpType"),
    ({"port_space": "tcp"}, "port_space must be a PortSpace"),
    ({"src": "10.0.0.300"}, "getaddrinfo src: '10.0.0.300' is not an IP address"),
])
def test_bad_arguments_name_what_was_wrong(kw: Any, message: str) -> None:
    kw = dict({"node": "10.0.0.2", "service": "1"}, **kw)
    with pytest.raises(UsageError) as e:
        getaddrinfo(**kw)
    assert message in str(e.value)


# --------------------------------------------------------------------------- the prediction


def test_where_librdmacm_asks_ibacm_the_precheck_predicts(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a host without RDMA devices the prediction says what is missing, and the errno the
    kernel will answer; with no_route or passive there is none."""
    from pyrdmacm import precheck

    real = precheck.predict
    monkeypatch.setattr(precheck, "predict", lambda dst, src=None: real(dst, src, devices=[]))
    info = getaddrinfo("127.0.0.1", "7471")
    assert info.prediction is not None and info.predicted_errno == errno.ENODEV
    assert [m.what for m in info.prediction.missing] == ["device"]
    assert "no RDMA device" in info.prediction_note
    assert getaddrinfo("127.0.0.1", "7471", no_route=True).prediction is None
    # a link-local destination without a zone: librdmacm's answer, and no prediction (resolve_addr refuses it)
    ll = getaddrinfo("fe80::1", "7471")
    assert ll.prediction is None and "needs a zone" in ll.prediction_note


# --------------------------------------------------------------------------- asyncio


def test_the_asyncio_form_answers_the_same_and_does_not_block_the_loop() -> None:
    release = threading.Event()

    def slow(*args: Any) -> Any:  # a C library lookup that waits until the loop has run a task
        assert release.wait(10), "the loop did not run while the lookup was in progress"
        return socket.getaddrinfo(*args)

    async def main() -> Any:
        lookup = asyncio.ensure_future(aio.getaddrinfo("10.0.0.2", "7471", no_route=True, resolver=slow))
        await asyncio.sleep(0)
        release.set()  # this line runs only if the loop is free while the lookup waits
        return await lookup

    assert asyncio.run(main()) == getaddrinfo("10.0.0.2", "7471", no_route=True)

    async def bad() -> None:
        await aio.getaddrinfo("10.0.0.2", "7471", family=99)

    with pytest.raises(UsageError, match="family must be"):
        asyncio.run(bad())


# --------------------------------------------------------------------------- Address.ib


def test_address_ib_makes_the_service_id_as_librdmacm() -> None:
    a = Address.ib("fe80::1", port=7471)
    assert (a.sid, a.sid_mask, a.port) == (0x01061D2F, 0xFFFFFFFFFFFFFFFF, 7471)
    b = Address.ib("fe80::1", port=7174, port_space=PortSpace.UDP)
    assert (b.sid, b.sid_mask) == (0x01111C06, 0xFFFFFFFFFFFFFFFF)
    c = Address.ib("fe80::1", port_space=PortSpace.IB)
    assert (c.sid, c.sid_mask, c.port) == (0x013F0000, 0xFFFFFFFFFFFF0000, 0)
    assert Address.ib("fe80::1", sid=0x1234).sid_mask == 0xFFFFFFFFFFFFFFFF  # an explicit sid as before
    assert Address.ib("fe80::1").sid == 0
    with pytest.raises(UsageError, match="a sid, or a port and port_space"):
        Address.ib("fe80::1", sid=1, port=1)
    with pytest.raises(UsageError, match="port_space must be a PortSpace"):
        Address.ib("fe80::1", port=1, port_space=7)
    with pytest.raises(UsageError, match="port 70000 is out of range"):
        Address.ib("fe80::1", port=70000)


def test_the_gid_text_takes_a_port_and_port_space() -> None:
    assert pyrdmacm.parse_address("gid:fe80::1 port=7471") == Address.ib("fe80::1", port=7471)
    assert pyrdmacm.parse_address("gid:fe80::1 pkey=0x8001 port=7174 ps=udp") == Address.ib(
        "fe80::1", pkey=0x8001, port=7174, port_space=PortSpace.UDP)
    assert pyrdmacm.parse_address("gid:fe80::1 ps=ib").sid == 0x013F0000
    for text, message in (("gid:fe80::1 sid=1 port=2", "gives a sid and a port or ps"),
                          ("gid:fe80::1 ps=sdp", "bad port space 'sdp'"),
                          ("gid:fe80::1 port=70000", "out of range"),
                          ("gid:fe80::1 port=ssh", "bad number 'ssh' for port")):
        with pytest.raises(UsageError, match=message):
            pyrdmacm.parse_address(text)


def test_librdmacm_answers_enodev_without_an_rdma_device(tmp_path: Any) -> None:
    """librdmacm's rdma_getaddrinfo looks nothing up on a host without an RDMA device (its
    ucma_init fails first: -1, ENODEV); getaddrinfo answers (and its prediction says what is
    missing: test_where_librdmacm_asks_ibacm_the_precheck_predicts).  Needs gcc and librdmacm's
    headers, and a host with no RDMA device."""
    import os
    import shutil
    import subprocess
    from pathlib import Path

    source = Path(__file__).resolve().parent.parent / "tools" / "parity" / "getaddrinfo_case.c"
    if shutil.which("gcc") is None or not os.path.exists("/usr/include/rdma/rdma_cma.h"):
        pytest.skip("needs gcc and librdmacm's headers (librdmacm-dev) to build tools/parity/getaddrinfo_case.c")
    if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
        pytest.skip("this host has an RDMA device (the lab's test compares the answers there)")
    exe = tmp_path / "getaddrinfo_case"
    subprocess.run(["gcc", "-O2", "-Wall", "-Werror", "-o", str(exe), str(source), "-lrdmacm"], check=True)
    import json

    out = json.loads(subprocess.run([str(exe), "10.0.0.2", "7471", "2", "0", "0", "0", "-", "-"],
                                    capture_output=True, text=True, check=True, timeout=60).stdout)
    assert out == [{"ret": -1, "errno": errno.ENODEV, "records": []}]
    info = getaddrinfo("10.0.0.2", "7471", numeric_host=True, no_route=True)
    assert info.dst == pyrdmacm.parse_address("10.0.0.2:7471")


def test_a_prediction_that_cannot_read_the_host_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    from pyrdmacm import precheck

    def unreadable(dst: Any, src: Any = None) -> Any:
        raise PermissionError(errno.EPERM, "netlink refused")

    monkeypatch.setattr(precheck, "predict", unreadable)
    info = getaddrinfo("10.0.0.2", "7471")
    assert info.dst == pyrdmacm.parse_address("10.0.0.2:7471") and info.prediction is None
    assert "could not be read" in info.prediction_note and "netlink refused" in info.prediction_note
