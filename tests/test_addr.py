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
        (("10.0.0.1", "80"), r"port \(member 2\) must be an int"),
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


# ---------------------------------------------------------------- what may be refused, and how

A4 = ipaddress.ip_address("10.0.0.1")
A6 = ipaddress.ip_address("2001:db8::1")
GID = ipaddress.IPv6Address("fe80::2:c903:0:1")


def refused(value, *needles, **kw):
    """parse_address(value) raises UsageError whose message holds every needle."""
    with pytest.raises(UsageError) as info:
        parse_address(value, **kw)
    msg = str(info.value)
    for n in needles:
        assert n in msg, (n, msg)
    assert len(msg) < 600, msg
    return msg


@pytest.mark.parametrize(
    "text,zone",
    [
        ("fe80::1%\u0661", "\u0661"),  # ARABIC-INDIC DIGIT ONE
        ("fe80::1%\uff11", "\uff11"),  # FULLWIDTH DIGIT ONE
        ("fe80::1%\u0661\u0662", "\u0661\u0662"),
        ("fe80::1%\u00b2", "\u00b2"),  # SUPERSCRIPT TWO: int() refuses it (was a bare ValueError)
        ("[fe80::1%\u0661]:7471", "\u0661"),
        ("2001:db8::1%\u0967", "\u0967"),  # DEVANAGARI DIGIT ONE
    ],
)
def test_zone_in_non_ascii_digits_is_refused(text, zone):
    msg = refused(text, "neither an interface name nor an ASCII decimal index", "fe80::1%eth0")
    assert msg.startswith("zone %r of " % zone), msg


def test_zone_of_an_ipaddress_object_in_non_ascii_digits_is_refused():
    refused(ipaddress.IPv6Address("fe80::1%\u0661"), repr("\u0661"), "ASCII decimal index")
    refused((ipaddress.IPv6Address("fe80::1%\uff11"), 1), repr("\uff11"), "ASCII decimal index")
    refused(("fe80::1%\u0661", 1), repr("\u0661"), "ASCII decimal index")


@pytest.mark.parametrize(
    "text,needles",
    [
        ("fe80::1%" + "1" * 200, ["zone", "too long"]),
        ("fe80::1%99999999999", ["zone index 99999999999", "1..4294967295"]),
        ("fe80::1%4294967296", ["zone index 4294967296", "out of range"]),
        ("2001:db8::1%", ["empty zone"]),  # was accepted, the '%' silently dropped
        ("fe80::1%", ["empty zone"]),
        ("fe80::1%eth\x00", ["not a valid interface name"]),  # was ValueError: embedded null byte
        ("fe80::1%\ud800", ["not a valid interface name"]),  # was UnicodeEncodeError
        ("fe80::1%a/b", ["not a valid interface name"]),
        ("fe80::1%" + "e" * 16, ["not a valid interface name", "15 bytes"]),
        ("fe80::1%no-such-if", ["unknown zone 'no-such-if'", "ip link"]),
    ],
)
def test_bad_zones(text, needles):
    refused(text, *needles)


def test_zone_of_5000_digits_is_refused():
    # int() refuses more than 4300 digits with a bare ValueError
    refused(ipaddress.IPv6Address("fe80::1%" + "1" * 5000), "zone", "too long")


def test_zone_ascii_index_and_name_still_work():
    assert parse_address("fe80::1%%0%d" % LO[0]).scope_id == LO[0]  # leading zero
    assert parse_address("2001:db8::1%%%s" % LO[1]).scope_id == LO[0]
    assert parse_address("fe80::1%4294967295").scope_id == 4294967295


@pytest.mark.parametrize(
    "text,ascii_port",
    [
        ("10.0.0.1:\u0667\u0664\u0667\u0661", "7471"),
        ("[2001:db8::1]:\uff18\uff10", "80"),
        ("[fe80::1%1]:\u0661", "1"),
    ],
)
def test_port_in_non_ascii_digits_is_refused(text, ascii_port):
    refused(text, "ASCII digits", ascii_port)


@pytest.mark.parametrize("port", ["+80", " 80", "8_0", "0o17", "0b1", "-0", "80 0", "", "0x", "1" * 200])
def test_odd_port_spellings_are_refused(port):
    refused("10.0.0.1:" + port, "port")


def test_port_spellings_that_work():
    assert parse_address("10.0.0.1:07471").port == 7471  # int(s, 0) refused the leading zero
    assert parse_address("10.0.0.1:0x1d2f").port == 7471
    assert parse_address("10.0.0.1:65535").port == 65535


# -- tuples


@pytest.mark.parametrize(
    "value,needles",
    [
        (("10.0.0.1",), ["('10.0.0.1',)", "1 member", "(host, port)"]),
        (("10.0.0.1", 7471, 0, 0, 0), ["5 members", "(host, port)"]),
        (("10.0.0.1", "7471"), ["port (member 2)", "int in 0..65535", "str '7471'"]),
        (("10.0.0.1", 7471.0), ["port (member 2)", "float 7471.0"]),
        (("10.0.0.1", True), ["port (member 2)", "bool True"]),  # was accepted as port 1
        (("10.0.0.1", -1), ["port (member 2)", "-1", "out of range"]),
        (("10.0.0.1", 65536), ["port (member 2)", "65536", "out of range"]),
        ((None, 1), ["host (member 1)", "(None, 1)", "NoneType"]),
        ((b"10.0.0.1", 1), ["host (member 1)", "bytes", "decode"]),
        ((A4, None), ["port (member 2)", "got None", "0 for any port"]),
        (("10.0.0.1", 1, 0, 0), ["IPv4", "(host, port)"]),  # was accepted; flowinfo and scope lost
        (("10.0.0.1", 1, 0), ["IPv4", "(host, port)"]),
        (("fe80::1", 1, "a", 3), ["flowinfo (member 3)", "str 'a'"]),  # was TypeError
        (("fe80::1", 1, -1, 3), ["flowinfo (member 3)", "out of range"]),
        (("fe80::1", 1, 0, 2**40), ["scope_id (member 4)", "out of range"]),
        (("fe80::1", 1, 0, "eth0"), ["scope_id (member 4)", "str 'eth0'"]),
        (("fe80::1", 1, 0, False), ["scope_id (member 4)", "bool"]),
        ((("10.0.0.1", 1), 2), ["host (member 1)", "tuple"]),  # nested tuples were accepted
        ((Address(A4), 2), ["host (member 1)", "Address"]),
        (("10.0.0.1:80", 2), ["host (member 1)", "not an IP address"]),
        (("gid:fe80::1", 2), ["host (member 1)", "GID"]),
        (("fe80::1%%%d" % LO[0], 1, 0, LO[0] + 1000), ["scope_id (member 4)", "zone"]),
        (("fe80::1", 1), ["needs a zone"]),
        (("x" * 100_000, 1), ["host (member 1)", "too long"]),
    ],
)
def test_bad_tuples_name_the_tuple_and_the_member(value, needles):
    msg = refused(value, *needles)
    assert msg.startswith("address tuple "), msg


def test_good_tuples():
    assert parse_address(("10.0.0.1", 0)).port == 0
    assert parse_address((A4, 7471)) == Address(A4, 7471)
    assert parse_address((" 10.0.0.1 ", 7471)) == Address(A4, 7471)
    assert parse_address(("2001:db8::1", 7, 3)) == Address(A6, 7, 0, 3)  # socket accepts 3 members too
    assert parse_address((A6, 7, 3, 9)) == Address(A6, 7, 9, 3)
    z = "fe80::1%" + LO[1]
    assert parse_address((z, 1)).scope_id == LO[0]
    assert parse_address((z, 1, 0, 0)).scope_id == LO[0]  # scope_id 0: the host's zone
    assert parse_address((z, 1, 0, LO[0])).scope_id == LO[0]
    assert parse_address((ipaddress.IPv6Address(z), 1)).scope_id == LO[0]
    assert parse_address(("10.0.0.1", 0), port=9).port == 9


# -- what parse_address takes at all


@pytest.mark.parametrize(
    "value,typename",
    [
        (1, "int"),
        (167772161, "int"),
        (1.5, "float"),
        (b"abcd", "bytes"),  # was read as packed 97.98.99.100
        (b"2001:db8::dead:1", "bytes"),  # 16 bytes of text: was read as a packed IPv6 address
        (b"10.0.0.1", "bytes"),
        (bytearray(b"abcd"), "bytearray"),
        (None, "NoneType"),
        (["10.0.0.1", 1], "list"),
        ({"host": "10.0.0.1"}, "dict"),
        (True, "bool"),
        (object(), "object"),
    ],
)
def test_unsupported_types_are_named(value, typename):
    refused(value, "cannot use %s " % typename, "as an address")


def test_list_and_bytes_get_a_hint():
    refused(["10.0.0.1", 1], "tuple")
    refused(b"10.0.0.1", "decode")


@pytest.mark.parametrize(
    "text",
    ["1" * 100_000, "10.0.0.1:" + "1" * 100_000, "gid:" + "f" * 100_000, "[" + ":" * 100_000 + "]",
     "fe80::1%" + "e" * 100_000, " " * 100_000 + "10.0.0.1"],
)
def test_absurdly_long_strings_are_refused_quickly(text):
    import time

    t = time.perf_counter()
    refused(text, "too long")
    assert time.perf_counter() - t < 0.5


@pytest.mark.parametrize(
    "text", ["10.0.0.1\x00", "\x00", "\udcff", "10.0.0.\udcff", "fe80::1%\udcff", "gid:fe80::1\x00",
             "gid:fe80::1 sid=\x00", "[::1]:\x00", "", "   ", "gid:fe80::1%eth0",
             "[10.0.0.1%\udcff]:\ud800"]  # an escaped byte beside a surrogate no byte escapes (hypothesis found it)
)
def test_nul_bytes_surrogates_and_empty_strings(text):
    refused(text)


@pytest.mark.parametrize(
    "text,needles",
    [
        ("gid:fe80::1 sid=\u0661", ["sid", "ASCII"]),  # was accepted as sid 1
        ("gid:fe80::1 pkey=\uff11", ["pkey", "ASCII"]),
        ("gid:fe80::1 sid=1 sid=2", ["sid", "twice"]),  # the first was silently dropped
        ("gid:fe80::1 pkey=0x10000", ["pkey", "out of range"]),
        ("gid:fe80::1 sid=0x10000000000000000", ["sid", "out of range"]),
        ("gid:fe80::1 sid=" + "9" * 300, ["too long"]),
        ("gid:fe80::1%eth0", ["zone"]),
    ],
)
def test_bad_gid_options(text, needles):
    refused(text, *needles)


@pytest.mark.parametrize("port,needles", [("80", ["port", "str '80'"]), (True, ["port", "bool"]),
                                          (70000, ["port", "70000", "out of range"]), (-1, ["port", "-1"])])
def test_parse_address_port_argument(port, needles):
    refused("10.0.0.1", *needles, port=port)


# -- the Address constructors


@pytest.mark.parametrize(
    "kw,needles",
    [
        (dict(ip=A4, port=70000), ["Address port", "70000", "0..65535"]),
        (dict(ip=A4, port=-1), ["Address port", "-1"]),
        (dict(ip=A4, port="1"), ["Address port", "str '1'"]),  # was TypeError
        (dict(ip=A4, port=None), ["Address port", "NoneType"]),  # was TypeError
        (dict(ip=A4, port=1.0), ["Address port", "float"]),
        (dict(ip=A4, port=True), ["Address port", "bool"]),
        (dict(ip="10.0.0.1"), ["Address ip", "str '10.0.0.1'", "parse_address"]),  # was AttributeError
        (dict(ip=b"\n\0\0\1"), ["Address ip", "bytes"]),
        (dict(ip=None), ["Address ip", "NoneType"]),
        (dict(ip=ipaddress.ip_network("10.0.0.0/8")), ["Address ip", "IPv4Network"]),
        (dict(ip=ipaddress.IPv6Address("fe80::1%eth0")), ["Address ip", "zone", "scope_id"]),  # zone was lost
        (dict(ip=A4, family=5), ["Address family 5", "AF_INET"]),  # was KeyError at pack time
        (dict(ip=A4, family="AF_INET"), ["Address family", "str"]),
        (dict(ip=A4, family=AF_INET6), ["AF_INET6", "128 bits"]),
        (dict(ip=A6, family=AF_INET), ["AF_INET", "IPv4"]),
        (dict(ip=A6, scope_id=2**40), ["Address scope_id", "out of range"]),
        (dict(ip=A6, scope_id=-1), ["Address scope_id", "-1"]),
        (dict(ip=A6, scope_id="eth0"), ["Address scope_id", "str"]),
        (dict(ip=A6, flowinfo=2**32), ["Address flowinfo", "out of range"]),
        (dict(ip=GID, family=AF_IB, pkey=0x10000), ["Address pkey", "0x10000"]),
        (dict(ip=GID, family=AF_IB, sid=2**64), ["Address sid", "out of range"]),  # was struct.error
        (dict(ip=GID, family=AF_IB, sid=-1), ["Address sid", "-1"]),  # was struct.error
        (dict(ip=GID, family=AF_IB, sid_mask=2**64), ["Address sid_mask", "out of range"]),  # was struct.error
        (dict(ip=A4, pkey=0xFFFF), ["pkey", "AF_IB"]),  # was accepted and dropped from the sockaddr
        (dict(ip=A4, sid=1), ["sid", "AF_IB"]),
        (dict(ip=A4, scope_id=2), ["scope_id", "AF_INET"]),  # sockaddr_in has no scope id: was dropped
        (dict(ip=A4, flowinfo=2), ["flowinfo", "AF_INET"]),
    ],
)
def test_address_constructor_validates(kw, needles):
    with pytest.raises(UsageError) as info:
        Address(**kw).pack_storage()
    for n in needles:
        assert n in str(info.value), (n, str(info.value))


@pytest.mark.parametrize(
    "args,kw,needles",
    [
        (("fe80::1",), dict(pkey=0x10000), ["pkey", "0x10000"]),
        (("fe80::1",), dict(sid=2**64), ["Address.ib sid", "out of range"]),
        (("fe80::1",), dict(sid=-1), ["Address.ib sid", "-1"]),
        (("fe80::1",), dict(sid="1"), ["Address.ib sid", "str"]),  # was TypeError
        (("fe80::1",), dict(sid=True), ["Address.ib sid", "bool"]),
        (("fe80::1",), dict(sid_mask=2**64), ["Address.ib sid_mask", "out of range"]),  # was struct.error
        (("fe80::1",), dict(sid_mask="x"), ["Address.ib sid_mask", "str"]),
        (("fe80::1",), dict(pkey="x"), ["pkey", "str"]),  # was TypeError
        ((None,), {}, ["Address.ib gid", "NoneType"]),  # was AddressValueError
        ((A4,), {}, ["Address.ib gid", "IPv4", "::ffff:10.0.0.1"]),
        (("zz",), {}, ["Address.ib gid", "'zz'", "not a GID"]),
        ((2**200,), {}, ["Address.ib gid", "out of range"]),
        ((True,), {}, ["Address.ib gid", "bool"]),
        ((b"short",), {}, ["Address.ib gid", "16 bytes"]),
        (("fe80::1%eth0",), {}, ["Address.ib gid", "zone"]),
        (("f" * 100_000,), {}, ["Address.ib gid", "too long"]),
    ],
)
def test_address_ib_validates(args, kw, needles):
    with pytest.raises(UsageError) as info:
        Address.ib(*args, **kw).pack_storage()
    msg = str(info.value)
    for n in needles:
        assert n in msg, (n, msg)
    assert len(msg) < 600


def test_valid_addresses_pack_as_before():
    # bytes as librdmacm writes them (family little-endian, the rest network order)
    assert Address(A4, 7471).pack_sockaddr().hex() == "02001d2f0a0000010000000000000000"
    assert Address(A6, 7471, 3, 5).pack_sockaddr().hex() == (
        "0a001d2f00000005" "20010db8000000000000000000000001" "03000000")
    ib = Address.ib(GID, pkey=0x8001, sid=0x1060000 + 7471)
    assert ib.pack_sockaddr().hex() == (
        "1b00800100000000" "fe800000000000000002c90300000001" "0000000001061d2f" "ffffffffffffffff" "0000000000000000")
    assert Address.ib(b"\xfe\x80" + bytes(13) + b"\x01") == Address.ib("fe80::1")
    assert Address.ib(int(GID)) == Address.ib(GID)
    assert Address.ib(GID, sid=0).sid_mask == 0
    assert Address(A4, family=socket.AF_INET).family == AF_INET
    assert len(Address(A6).pack_storage()) == 128 and len(Address(A6).pack_in6()) == 28
    # what unpack_sockaddr builds from the kernel's bytes: every field at its limit
    big = Address(A6, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
    assert big.pack_sockaddr()[-4:] == b"\xff" * 4
    full = Address(GID, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, AF_IB, 0xFFFF, 2**64 - 1, 2**64 - 1)
    assert len(full.pack_sockaddr()) == 48


def test_cli_reports_address_errors_in_one_line(capsys):
    from pyrdmacm import cli

    for bad in ("fe80::1%\u0661", "10.0.0.1:\u0667\u0664\u0667\u0661", "x" * 100_000, "fe80::1%eth\x00"):
        code = cli.main(["resolve", bad])
        out, err = capsys.readouterr()
        assert code == 3, (bad, err)
        assert err.startswith("pyrdmacm: ") and err.count("\n") == 1 and "Traceback" not in err, err
        assert len(err) < 600


# -- the property: UsageError or an Address, nothing else

from hypothesis import example, given, settings, strategies as st  # noqa: E402

_HOSTS = ["10.0.0.1", "fe80::1", "2001:db8::1", "::", "::ffff:1.2.3.4", "gid:fe80::1", "0.0.0.0"]
_odd = st.sampled_from(["", "1", "lo", "eth0", str(LO[0]), "\u0661", "\uff11", "\u00b2", "\x00", "\udcff",
                        "\ud800", "99999999999", "0x1d2f", "+1", " 1", "/", "%", ":", "]", "pkey=1", "sid=\u0661"])
_bit = st.one_of(_odd, st.text(max_size=6), st.integers(-5, 70000).map(str))
_host = st.one_of(st.sampled_from(_HOSTS), st.text(max_size=8))
_texts = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(st.sampled_from(_HOSTS + ["[", "]", ":", "%", " ", " pkey=", " sid="]), _bit),
             max_size=8).map("".join),
    st.builds("{}%{}".format, _host, _bit),
    st.builds("[{}%{}]:{}".format, _host, _bit, _bit),
    st.builds("{}:{}".format, _host, _bit),
    st.builds("gid:{} {}={}".format, _host, st.sampled_from(["pkey", "sid", "x"]), _bit),
)


def _outcome_ok(call):
    try:
        r = call()
    except UsageError as e:
        assert str(e) and len(str(e)) < 1000
        return
    assert isinstance(r, Address)
    r.pack_storage()
    str(r)


@settings(max_examples=300, deadline=None)
@given(_texts, st.booleans())
@example("fe80::1%\u00b2", True)
@example("fe80::1%eth\x00", True)
def test_property_any_text_is_an_address_or_a_usage_error(text, require_zone):
    _outcome_ok(lambda: parse_address(text, require_zone=require_zone))


_members = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True), st.text(max_size=12),
    st.binary(max_size=17), _texts, st.sampled_from([A4, A6, GID, ipaddress.IPv6Address("fe80::1%1"), 0, 1, 7471]),
    st.builds(tuple, st.lists(st.integers(0, 9), max_size=3)), st.just([]), st.just({}),
)
_tuple_host = st.one_of(st.sampled_from(_HOSTS + ["fe80::1%1", A4, A6, ipaddress.IPv6Address("fe80::1%lo")]),
                        _members)
_small = st.one_of(st.integers(-2, 70000), st.integers(2**31, 2**65), _members)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.lists(_members, max_size=6).map(tuple),
                 st.builds(lambda h, rest: (h,) + tuple(rest), _tuple_host, st.lists(_small, max_size=4))))
@example(("fe80::1", 1, "a", 3))
@example(("2001:db8::1", 1, None, 0))
def test_property_any_tuple_is_an_address_or_a_usage_error(value):
    _outcome_ok(lambda: parse_address(value))
