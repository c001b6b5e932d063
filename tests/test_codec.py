"""The fast codecs agree with the construct declarations, byte for byte."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import pytest
from construct import Container, ListContainer
from hypothesis import given, settings
from hypothesis import strategies as st

from pyrdmacm.abi import structs as _structs
from pyrdmacm import abi
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.addr import Address, unpack_sockaddr
from pyrdmacm.errors import DecodeError

TOOLS = str(Path(__file__).resolve().parent.parent / "tools")
if TOOLS not in sys.path:
    sys.path.insert(0, TOOLS)
from derive_layouts import derive  # noqa: E402 (the layouts' generator, in tools/)

NAMES = sorted(CODECS)
HAS_UNION = {n for n in NAMES if "param" in CODECS[n].names}


def _lookup(parsed, dotted):
    node = parsed
    for part in dotted.split("."):
        if "[" in part:
            base, idx = part[:-1].split("[")
            node = node[base][int(idx)]
        else:
            node = node[part]
    return node


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_codec_agrees_with_construct(name, data):
    codec = CODECS[name]
    con = _structs.LAYOUTS[name]
    raw = data.draw(st.binary(min_size=codec.size, max_size=codec.size))
    values = codec.unpack(raw)
    # the codec round-trips every byte
    assert codec.pack(*values) == raw
    buf = bytearray(codec.size + 3)
    codec.pack_into(buf, 3, *values)
    assert bytes(buf[3:]) == raw and codec.unpack_from(buf, 3) == values
    # and reads what construct reads
    parsed = con.parse(raw)
    for fname, v in zip(codec.names, values):
        if fname == "":  # a sockaddr storage on its own is one blob
            assert v == raw
            continue
        cv = _lookup(parsed, fname)
        if isinstance(cv, Container):  # a union or a sockaddr storage: we keep the bytes
            continue
        if isinstance(cv, ListContainer):
            continue
        assert cv == v, fname
    if name not in HAS_UNION:
        assert con.build(parsed) == raw


@pytest.mark.parametrize("name", sorted(HAS_UNION))
def test_union_blob_is_the_right_bytes(name):
    codec = CODECS[name]
    con = _structs.LAYOUTS[name]
    raw = bytes(range(256)) * 2
    raw = raw[: codec.size]
    v = codec.unpack_dict(raw)
    off = [s for s in con.subcons if s.name == "param"]
    start = 0
    for s in con.subcons:
        if s.name == "param":
            break
        start += s.sizeof()
    assert v["param"] == raw[start : start + off[0].sizeof()]


def test_big_endian_fields_are_converted():
    c = CODECS["rdma_ucm_query_addr_resp"]
    raw = bytearray(c.size)
    raw[0:8] = bytes.fromhex("0002c90300001234")
    raw[10:12] = b"\xff\xff"
    d = c.unpack_dict(bytes(raw))
    assert d["node_guid"] == 0x0002C90300001234
    assert d["pkey"] == 0xFFFF
    assert c.pack_dict(d) == bytes(raw)


def test_big_endian_readers_compile_on_first_use_for_every_holder():
    """A codec's reader held before its first use keeps reading right after the compile."""
    from pyrdmacm.abi.codec import Codec

    shared = CODECS["rdma_ucm_query_addr_resp"]
    c = Codec(shared.name, shared.format, shared.names, shared._be)  # a fresh one: not yet compiled
    held = c.unpack_from
    raw = bytes(range(256)) * 2
    first = held(raw, 5)
    assert c.unpack_from is not held  # compiled and put in place
    assert c.unpack_from(raw, 5) == first == held(raw, 5) == shared.unpack_from(raw, 5)
    assert first[0] == int.from_bytes(raw[5:13], "big")


def test_hot_codecs_are_bare_struct_methods():
    """No wrapper on the hot path when no big-endian field needs converting."""
    import struct

    for name in ("rdma_ucm_create_id", "rdma_ucm_resolve_addr", "rdma_ucm_resolve_route",
                 "rdma_ucm_query", "rdma_ucm_destroy_id", "rdma_ucm_get_event",
                 "rdma_ucm_event_resp", "rdma_ucm_create_id_resp"):
        c = CODECS[name]
        assert isinstance(c.pack.__self__, struct.Struct), name


def test_derive_rejects_unknown_constructs():
    from construct import GreedyBytes, Struct

    with pytest.raises(TypeError):
        derive("bad", Struct("x" / GreedyBytes))


# ---------------------------------------------------------------- socket addresses vs construct

ip4 = st.builds(ipaddress.IPv4Address, st.integers(0, 2**32 - 1))
ip6 = st.builds(ipaddress.IPv6Address, st.integers(0, 2**128 - 1))
port = st.integers(0, 65535)


@settings(max_examples=200, deadline=None)
@given(ip=ip4, port=port)
def test_sockaddr_in_matches_construct(ip, port):
    a = Address(ip, port)
    raw = a.pack_sockaddr()
    p = _structs.sockaddr_in.parse(raw)
    assert (p.sin_family, p.sin_port, p.sin_addr) == (abi.AF_INET, port, ip.packed)
    assert raw == _structs.sockaddr_in.build(p)
    assert unpack_sockaddr(a.pack_storage()) == a
    assert len(a.pack_storage()) == _structs.kernel_sockaddr_storage.sizeof()


@settings(max_examples=200, deadline=None)
@given(ip=ip6, port=port, flow=st.integers(0, 2**32 - 1), scope=st.integers(0, 2**32 - 1))
def test_sockaddr_in6_matches_construct(ip, port, flow, scope):
    a = Address(ip, port, scope, flow)
    raw = a.pack_sockaddr()
    p = _structs.sockaddr_in6.parse(raw)
    assert (p.sin6_family, p.sin6_port, p.sin6_flowinfo, p.sin6_addr, p.sin6_scope_id) == (
        abi.AF_INET6, port, flow, ip.packed, scope)
    assert unpack_sockaddr(a.pack_storage()) == a
    assert a.pack_in6() == raw


@settings(max_examples=200, deadline=None)
@given(gid=ip6, pkey=st.integers(0, 0xFFFF), sid=st.integers(0, 2**64 - 1))
def test_sockaddr_ib_matches_construct(gid, pkey, sid):
    a = Address.ib(gid, pkey=pkey, sid=sid)
    raw = a.pack_sockaddr()
    p = _structs.sockaddr_ib.parse(raw)
    assert (p.sib_family, p.sib_pkey, p.sib_addr, p.sib_sid) == (abi.AF_IB, pkey, gid.packed, sid)
    assert unpack_sockaddr(a.pack_storage()) == a


def test_sockaddr_decode_errors():
    with pytest.raises(DecodeError, match="unknown address family 99"):
        unpack_sockaddr(b"\x63\x00" + bytes(30))
    with pytest.raises(DecodeError, match="at least 2"):
        unpack_sockaddr(b"\x02")
    assert unpack_sockaddr(bytes(128)) is None


@pytest.mark.parametrize("name", sorted(n for n, c in CODECS.items() if c._be))
def test_the_compiled_big_endian_reader_equals_the_plain_form(name):
    """The generated reader (one tuple display, compiled on first use: it pays on the
    QUERY replies) reads what the plain loop over struct.unpack reads, at any offset."""
    import random

    c = CODECS[name]
    rng = random.Random(name)
    for offset in (0, 3, 8):
        raw = bytes(rng.randrange(256) for _ in range(c.size + offset))
        assert c.unpack_from(raw, offset) == c._unpack_be(raw[offset:offset + c.size])
