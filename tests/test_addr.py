"""Addresses as users write them (pure: no kernel)."""

import ipaddress
import socket

import pytest

from pyrdmacm.addr import AF_IB, AF_INET, AF_INET6, Address, parse_address
from pyrdmacm.errors import UsageError

LO = socket.if_nameindex()[0]  # (index, name) of an interface that exists here


@pytest.mark.parametrize(
    "text,ip,port,scope",
    [
        ("10.0.0.2", "10.0.0.2", 0, 0),
        ("10.0.0.2:7471", "10.0.0.2", 7471, 0),
        ("2001:db8::1", "2001:db8::1", 0, 0),
        ("[2001:db8::1]:7471", "2001:db8::1", 7471, 0),
        ("fe80::1%%%s" % LO[1], "fe80::1", 0, LO[0]),
        ("[fe80::1%%%s]:7471" % LO[1], "fe80::1", 7471, LO[0]),
        ("fe80::1%%%d" % LO[0], "fe80::1", 0, LO[0]),
        (" 10.0.0.2 ", "10.0.0.2", 0, 0),
    ],
)
def test_strings(text, ip, port, scope):
    a = parse_address(text)
    assert (str(a.ip), a.port, a.scope_id) == (ip, port, scope)
    assert a.family == (AF_INET if "." in ip else AF_INET6)


def test_objects_and_tuples():
    assert parse_address(ipaddress.ip_address("10.1.2.3")).ip == ipaddress.ip_address("10.1.2.3")
    assert parse_address(("10.1.2.3", 80)).port == 80
    a = parse_address(("fe80::1", 80, 5, LO[0]))
    assert (a.port, a.flowinfo, a.scope_id) == (80, 5, LO[0])
    assert parse_address(ipaddress.IPv6Address("fe80::1%" + LO[1])).scope_id == LO[0]
    assert parse_address("10.0.0.1", port=99).port == 99
    assert parse_address("10.0.0.1:5", port=99).port == 5
    same = Address(ipaddress.ip_address("10.0.0.1"))
    assert parse_address(same) is same


def test_gid():
    a = parse_address("gid:fe80::2:c903:0:1 pkey=0x8001 sid=0x0000000001060000")
    assert a.family == AF_IB and a.pkey == 0x8001 and a.sid == 0x01060000
    assert a.size == 48 and "pkey=0x8001" in str(a)
    b = Address.ib("fe80::1", sid=0x1060000 + 7471)
    assert b.port == 7471 and b.sid_mask == 2**64 - 1


def test_printing():
    assert str(parse_address("10.0.0.2:7471")) == "10.0.0.2:7471"
    assert str(parse_address("[2001:db8::1]:7")) == "[2001:db8::1]:7"
    assert str(parse_address("fe80::1%" + LO[1])) == "fe80::1%" + LO[1]


@pytest.mark.parametrize(
    "value,match",
    [
        ("fe80::1", "needs a zone"),
        ("fe80::1%no-such-if", "unknown zone"),
        ("10.0.0.1%eth0", "cannot have a zone"),
        ("10.0.0.1:99999", "out of range"),
        ("10.0.0.1:http", "bad port"),
        ("example.com", "not an IP address"),
        ("[::1", "unbalanced"),
        ("[::1]x", "expected ':PORT'"),
        (("10.0.0.1",), "tuple"),
        (("10.0.0.1", "80"), "port must be an int"),
        (3.5, "cannot use"),
        ("gid:nonsense", "not a GID"),
        ("gid:fe80::1 foo=1", "unknown GID option"),
        ("gid:fe80::1 pkey=x", "bad number"),
    ],
)
def test_bad_input_says_what_is_wrong(value, match):
    with pytest.raises(UsageError, match=match):
        parse_address(value)


def test_link_local_allowed_without_zone_when_asked():
    assert parse_address("fe80::1", require_zone=False).scope_id == 0
