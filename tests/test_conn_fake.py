"""The connection manager's behavioural suite (tests/conn_behaviour.py) on the two-host fake fabric."""

import pytest

import conn_behaviour
from behaviour import suite
from conn_behaviour import Link
from pyrdmacm.testing import FakeFabric

TIMEWAIT_MS = 50


@pytest.fixture
def link():
    with FakeFabric(timewait_ms=TIMEWAIT_MS) as fab:
        server, client = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        yield Link(server_transport=server, client_transport=client, server_ip="10.9.0.1",
                   client_ip="10.9.0.2", timewait=1.0)


class TestFakeFabric(suite(conn_behaviour)):
    pass


def test_establish_writes_what_encode_dict_makes():
    """establish()'s ACCEPT is packed from a template: the same bytes as the reference encoder."""
    from pyrdmacm import cmid, wire

    for handle in (0, 1, 0x12345678, 0xFFFFFFFF):
        assert cmid._ESTABLISH(handle) == wire.COMMAND["ACCEPT"].encode_dict({"id": handle})
