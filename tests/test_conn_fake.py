"""The connection manager's behavioural suite (tests/behaviour.py's connections():
conn_behaviour.py and its kin) on the two-host fake fabric."""

import pytest

from behaviour import connections, suite
from conn_behaviour import Link
from pyrdmacm.testing import FakeFabric

TIMEWAIT_MS = 50


@pytest.fixture
def link():
    # DREQs take a few ms to arrive, so that two disconnects sent back to back cross, as between hosts
    with FakeFabric(timewait_ms=TIMEWAIT_MS, dreq_latency_ms=5) as fab:
        server, client = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        yield Link(server_transport=server, client_transport=client, server_ip="10.9.0.1",
                   client_ip="10.9.0.2", timewait=1.0)


class TestFakeFabric(suite(*connections())):
    pass


def test_establish_writes_what_encode_dict_makes():
    """establish()'s ACCEPT is packed from a template: the same bytes as the reference encoder."""
    from pyrdmacm import wire

    for handle in (0, 1, 0x12345678, 0xFFFFFFFF):
        assert wire.ESTABLISH(handle) == wire.COMMAND["ACCEPT"].encode_dict({"id": handle})


def test_connect_with_default_parameters_writes_what_the_encoder_makes():
    """connect() / connect(qp_num=N) pack CONNECT from a template of the default parameters:
    the same bytes as the general encoder of those parameters."""
    from pyrdmacm import wire

    c = wire.COMMAND["CONNECT"]
    p = wire.DEFAULT_CONN_PARAM
    for qpn, handle in ((0x100000, 0), (0xFFFFFE, 1), (0x123456, 0xFFFFFFFF)):
        assert wire.CONNECT_DEFAULT(qpn, handle) == c.encode(*wire.conn_fields(p, qpn), handle, 0, *p.ece)


def test_packer_puts_the_varying_fields_in_the_order_given():
    """Command.packer with two fields named against their order in the struct still takes them
    in the order named; every other field is the value given, or zero."""
    from pyrdmacm import wire

    c = wire.COMMAND["CONNECT"]
    pack = c.packer({"conn_param.retry_count": 3}, ("id", "conn_param.qp_num"))
    assert pack(7, 0x4242) == c.encode_dict({"conn_param.retry_count": 3, "id": 7, "conn_param.qp_num": 0x4242})
    one = wire.COMMAND["DISCONNECT"].packer({}, ("id",))
    assert one(9) == wire.COMMAND["DISCONNECT"].encode(9)


def test_packer_of_fields_followed_by_zeros_is_a_partial_and_packs_the_same_bytes():
    """Where only zeros follow the varying fields (in the struct's order), the packer is a
    partial of struct.pack (no Python frame per command: ESTABLISH and DISCONNECT are such);
    every shape packs what encode_dict packs."""
    from functools import partial

    from pyrdmacm import wire

    c = wire.COMMAND["CONNECT"]
    cases = [({}, ("conn_param.qp_num", "id"), True), ({}, ("id", "conn_param.qp_num"), False),
             ({"ece.vendor_id": 5}, ("id",), False), ({"ece.vendor_id": 5}, ("conn_param.qp_num", "id"), False),
             ({"conn_param.retry_count": 7}, ("conn_param.qp_num",), False), ({}, ("id",), True)]
    for values, varying, is_partial in cases:
        pack = c.packer(values, varying)
        assert isinstance(pack, partial) is is_partial, (values, varying)
        for a, b in ((0, 0), (1, 0xFFFFFF), (0xFFFFFFFF, 2)):
            args = (a, b)[:len(varying)]
            assert pack(*args) == c.encode_dict({**values, **dict(zip(varying, args))}), (values, varying, args)
    assert isinstance(wire.ESTABLISH, partial) and isinstance(wire.DISCONNECT, partial)
    assert wire.ESTABLISH(5) == wire.COMMAND["ACCEPT"].encode_dict({"id": 5})
