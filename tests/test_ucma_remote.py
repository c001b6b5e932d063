"""The connection fuzzer's remote channels (tests/ucma_remote.py) without a kernel: the
server's channels on the fake kernel, reached over loopback TCP as the fuzzer reaches the
pair topology's peer -- commands and their replies, events and their wait, another channel's
fd named in MIGRATE_ID, a closed channel, a refused request."""

import socket
import threading

import pytest

from pyrdmacm import abi
from pyrdmacm.conformance import Raw
from pyrdmacm.testing import FakeKernel, FakeNet

import ucma_remote


@pytest.fixture
def far():
    net = FakeNet()
    channels = ucma_remote.Channels(new=lambda: Raw(device=FakeKernel(net)))
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    threading.Thread(target=ucma_remote.serve, kwargs={"channels": channels, "server": server},
                     daemon=True).start()
    kernel = ucma_remote.RemoteKernel("127.0.0.1", port, wait_up=10.0)
    yield kernel
    kernel.close()


def _create(raw, uid=7):
    raw.reply.clear()
    assert raw.send("CREATE_ID", {"uid": uid, "ps": int(abi.PortSpace.TCP), "qp_type": int(abi.QpType.RC)}) == 0
    return int(raw.reply_of("CREATE_ID")["id"])


def test_commands_and_their_replies_travel_both_ways(far):
    ch = far.channel(2)
    handle = _create(ch)
    # bytes (a packed address) go as they are; the reply comes back whole
    from pyrdmacm.addr import parse_address

    addr = parse_address("10.0.0.1", 7471)  # the fake's own address
    assert ch.send("BIND", {"id": handle, "addr_size": addr.size, "addr": addr.pack_storage()}) == 0
    ch.reply.clear()
    assert ch.send("QUERY_ADDR", {"id": handle, "option": int(abi.QueryOption.ADDR)}) == 0
    assert ch.reply_of("QUERY_ADDR")["src_size"] == addr.size
    other = _create(ch, uid=8)
    elsewhere = parse_address("192.0.2.9", 7471)  # no device has it: the kernel's EADDRNOTAVAIL, as an errno
    assert ch.send("BIND", {"id": other, "addr_size": elsewhere.size, "addr": elsewhere.pack_storage()}) == 99
    ch.reply.clear()
    assert ch.send("DESTROY_ID", {"id": handle}) == 0
    assert ch.reply_of("DESTROY_ID")["events_reported"] == 0
    assert ch.send("DESTROY_ID", {"id": handle}) != 0  # the kernel's errno, not an exception
    assert ch.alive() == ""


def test_an_event_is_waited_for_and_read_over_there(far):
    ch = far.channel(3)
    assert not ch.wait(0.05)
    assert ch.get_event() != 0  # nothing queued: the fake's EAGAIN (non-blocking fd)


def test_migrate_names_the_other_channels_fd_as_the_peer_numbers_it(far):
    a, b = far.channel(2), far.channel(3)
    assert a.dev.fileno() != b.dev.fileno()
    handle = _create(a)
    b.reply.clear()
    assert b.send("MIGRATE_ID", {"id": handle, "fd": a.dev.fileno()}) == 0
    assert b.reply_of("MIGRATE_ID")["events_reported"] == 0
    b.reply.clear()
    assert b.send("DESTROY_ID", {"id": handle}) == 0


def test_a_closed_channel_is_refused_by_name_and_the_link_stays_usable(far):
    ch = far.channel(2)
    ch.close()
    with pytest.raises(ucma_remote.RemoteError, match="refused 'send': KeyError: 'no channel 2 here"):
        ch.send("DESTROY_ID", {"id": 1})
    with pytest.raises(ucma_remote.RemoteError, match="unknown op"):
        far.request("nonsense")
    again = far.channel(2)
    assert again.alive() == ""


def test_fields_encode_bytes_as_hex_and_back():
    fields = {"id": 3, "addr": b"\x0a\x00\x01"}
    assert ucma_remote._decode(ucma_remote._encode(fields)) == fields
