"""pyrdmacm's connection manager against librdmacm's programs on the other host, both ways.

The lab's pair topology: the peer lab-a (10.9.0.1) runs rdmacm-utils' programs through the
peer agent (tests/lab_peer.py); pyrdmacm runs here on lab-b (10.9.0.2).  Neither side has a
QP on pyrdmacm's end: the kernel carries the QP number pyrdmacm gives and never looks for a
QP (cm-notes §0).  What each partner prints is asserted, and what pyrdmacm saw.

Partners: ``ucmatose -C 0`` (the CM handshake alone), ``udaddy -C 0`` (SIDR), ``rping``
(a real application: it waits for data, so it stays up until pyrdmacm disconnects),
``mckey -C 0`` (the join's address handle), and pyrdmacm itself on the peer (private data
byte for byte, rejects with data).
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import pytest

from pyrdmacm import CmId, EventChannel, PortSpace, State
from pyrdmacm.abi import CmEventType as E
from pyrdmacm.records import ConnParam, UdParam

pytestmark = pytest.mark.kernel(topology="pair")

HERE = "10.9.0.2"


def wait(ch: EventChannel, event: E, timeout: float = 15.0, status: int = 0):
    ev = ch.get_event(timeout)
    assert ev is not None, "no %s within %s s" % (event, timeout)
    assert ev.event is event and ev.status == status, "got %r, wanted %s status %d" % (ev, event, status)
    ev.ack()
    return ev


def routed(ch: EventChannel, dst: str, ps: PortSpace = PortSpace.TCP) -> CmId:
    cm = CmId(ch, ps)
    cm.resolve_addr(dst, timeout_ms=3000)
    wait(ch, E.ADDR_RESOLVED)
    cm.resolve_route(3000)
    wait(ch, E.ROUTE_RESOLVED)
    return cm


def listening(ch: EventChannel, port: int, ps: PortSpace = PortSpace.TCP) -> CmId:
    lst = CmId(ch, ps)
    lst.bind_addr("%s:%d" % (HERE, port))
    lst.listen()
    return lst


def lines(out: str) -> list:
    return out.splitlines()


def test_client_to_ucmatose_server_two_connections(peer):
    """ucmatose -c 2 accepts two connections, then disconnects both: pyrdmacm establishes
    both (distinct QP numbers), answers the DREQs, and ucmatose exits 0."""
    server = peer.start(["ucmatose", "-b", peer.address, "-C", "0", "-c", "2"], line_buffered=True)
    server.wait_for_line("starting server")
    peer.wait_listening(7471, "TCP")
    with EventChannel() as ch:
        ids = [routed(ch, "%s:7471" % peer.address) for _ in range(2)]
        for cm in ids:
            cm.connect(responder_resources=1, initiator_depth=1)
        responses = [wait(ch, E.CONNECT_RESPONSE) for _ in ids]
        for ev in responses:
            assert isinstance(ev.param, ConnParam) and ev.param.qp_num not in (0, 1, 0xFFFFFF)
            ev.id.establish()
        assert ids[0].qp_num != ids[1].qp_num
        seen = {wait(ch, E.DISCONNECTED).id for _ in ids}  # ucmatose disconnects; we answer
        assert seen == set(ids)
        code, out, err = server.wait(30)
        assert code == 0, (out, err)
        assert lines(out) == ["cmatose: starting server", "cmatose: disconnecting", "disconnected",
                              "test complete", "return status 0"]
        for cm in ids:
            assert cm.state is State.DISCONNECTED
            cm.destroy()


def test_ucmatose_client_to_pyrdmacm_listener(peer):
    with EventChannel() as ch:
        lst = listening(ch, 7471)
        client = peer.start(["ucmatose", "-s", HERE, "-C", "0"], line_buffered=True)
        ev = wait(ch, E.CONNECT_REQUEST)
        req = ev.id
        assert ev.listen_id is lst and str(req.query_addr().dst.ip) == peer.address
        p = ev.param
        assert p.qp_num not in (0, 1) and p.retry_count == 5  # ucmatose's REQ
        req.accept(responder_resources=1, initiator_depth=1)
        wait(ch, E.ESTABLISHED)
        client.wait_for_line("cmatose: connecting")
        req.disconnect()
        wait(ch, E.DISCONNECTED)  # its DREP
        code, out, err = client.wait(30)
        assert code == 0, (out, err)
        assert lines(out) == ["cmatose: starting client", "cmatose: connecting", "test complete",
                              "return status 0"]
        wait(ch, E.TIMEWAIT_EXIT, 10)
        req.destroy()
        lst.destroy()


def test_sidr_client_to_udaddy_server(peer):
    server = peer.start(["udaddy", "-b", peer.address, "-C", "0"], line_buffered=True)
    server.wait_for_line("starting server")
    peer.wait_listening(7174, "UDP")
    with EventChannel() as ch:
        c = routed(ch, "%s:7174" % peer.address, PortSpace.UDP)
        c.connect()
        ev = wait(ch, E.ESTABLISHED)
        p = ev.param
        assert isinstance(p, UdParam) and p.qp_num not in (0, 1) and p.qkey == 0x01234567
        assert p.ah.dgid == ipaddress.IPv6Address("::ffff:" + peer.address) and p.ah.hop_limit == 64
        code, out, err = server.wait(30)
        assert (code, lines(out)) == (0, ["udaddy: starting server", "test complete", "return status 0"]), err
        c.destroy()


def test_udaddy_client_to_pyrdmacm_sidr_listener(peer):
    with EventChannel() as ch:
        lst = listening(ch, 7174, PortSpace.UDP)
        client = peer.start(["udaddy", "-s", HERE, "-C", "0"], line_buffered=True)
        ev = wait(ch, E.CONNECT_REQUEST)
        assert isinstance(ev.param, UdParam) and len(ev.param.private_data) == 180
        ev.id.accept(qp_num=0x123457)
        assert ev.id.state is State.CONNECTED
        code, out, err = client.wait(30)
        assert (code, lines(out)) == (0, ["udaddy: starting client", "udaddy: connecting", "test complete",
                                          "return status 0"]), err
        ev.id.destroy()
        lst.destroy()


def test_client_to_rping_server_then_disconnect(peer):
    """rping accepts and waits for our first SEND, which never comes; our disconnect ends it
    cleanly."""
    server = peer.start(["rping", "-s", "-a", peer.address, "-C", "1", "-v"], line_buffered=True)
    peer.wait_listening(7174, "TCP")
    with EventChannel() as ch:
        c = routed(ch, "%s:7174" % peer.address)
        c.connect(responder_resources=1, initiator_depth=1)
        wait(ch, E.CONNECT_RESPONSE)
        c.establish()
        time.sleep(0.5)
        c.disconnect()
        wait(ch, E.DISCONNECTED)
        code, out, err = server.wait(30)
        assert code == 0, (out, err)
        assert "server DISCONNECT EVENT..." in out + err
        c.destroy()


def test_rping_server_sees_reject_28_when_we_never_send_the_rtu(peer):
    """No RTU: rping waits in accept; destroying our id rejects it (REJ 28)."""
    server = peer.start(["rping", "-s", "-a", peer.address, "-C", "1", "-v"], line_buffered=True)
    peer.wait_listening(7174, "TCP")
    with EventChannel() as ch:
        c = routed(ch, "%s:7174" % peer.address)
        c.connect(responder_resources=1, initiator_depth=1)
        wait(ch, E.CONNECT_RESPONSE)
        time.sleep(1.0)
        assert server.poll() is None  # still waiting for the RTU
        c.destroy()
        code, out, err = server.wait(30)
        assert "RDMA_CM_EVENT_REJECTED, error 28" in out + err, (out, err)


def test_rping_client_to_pyrdmacm_listener_accept_and_reject(peer):
    with EventChannel() as ch:
        lst = listening(ch, 7174)
        client = peer.start(["rping", "-c", "-a", HERE, "-C", "1", "-v"], line_buffered=True)
        req = wait(ch, E.CONNECT_REQUEST).id
        req.accept(responder_resources=1, initiator_depth=1)
        wait(ch, E.ESTABLISHED)
        time.sleep(0.5)
        req.disconnect()
        wait(ch, E.DISCONNECTED)
        code, out, err = client.wait(30)
        assert code == 0 and "client DISCONNECT EVENT..." in out + err, (out, err)
        req.destroy()
        client = peer.start(["rping", "-c", "-a", HERE, "-C", "1", "-v"], line_buffered=True)
        req = wait(ch, E.CONNECT_REQUEST).id
        req.reject(b"not today")
        code, out, err = client.wait(30)
        assert code != 0 and "RDMA_CM_EVENT_REJECTED, error 28" in out + err, (out, err)
        req.destroy()
        lst.destroy()


def test_join_gives_the_address_handle_mckey_prints():
    mckey = subprocess.run(["mckey", "-m", "239.1.1.1", "-b", HERE, "-C", "0"], capture_output=True,
                           text=True, timeout=30)
    assert mckey.returncode == 0, mckey.stderr
    [joined] = [ln for ln in lines(mckey.stdout) if ln.startswith("mckey: joined dgid:")]
    with EventChannel() as ch:
        u = CmId(ch, PortSpace.UDP)
        u.bind_addr(HERE)
        m = u.join_multicast("239.1.1.1")
        p = wait(ch, E.MULTICAST_JOIN).param
        mapped = p.ah.dgid.ipv4_mapped  # inet_ntop writes a v4-mapped GID as ::ffff:a.b.c.d
        dgid = "::ffff:%s" % mapped if mapped else str(p.ah.dgid)
        ours = "mckey: joined dgid: %s mlid 0x%x sl %d" % (dgid, p.ah.dlid, p.ah.sl)
        assert ours == joined
        assert p.qp_num == 0xFFFFFF
        assert m.leave() == 1
        u.destroy()


PEER_LISTENER = r"""
import json, sys
from pyrdmacm import CmId, EventChannel
from pyrdmacm.abi import CmEventType as E
mode, port = sys.argv[1], int(sys.argv[2])
with EventChannel() as ch:
    lst = CmId(ch)
    lst.bind_addr("0.0.0.0:%d" % port)
    lst.listen()
    print("listening", flush=True)
    ev = ch.get_event(30)
    assert ev.event is E.CONNECT_REQUEST, ev
    req, p = ev.id, ev.param
    print(json.dumps({"qp_num": p.qp_num, "pd": p.private_data.hex(), "peer": str(req.query_addr().dst)}),
          flush=True)
    if mode == "reject":
        req.reject(bytes(range(148)))
    else:
        req.accept(private_data=bytes(range(196)))
        ev = ch.get_event(30)
        print(ev.event.name, flush=True)
        ev = ch.get_event(30)
        print(ev.event.name, flush=True)
    req.destroy()
"""


@pytest.mark.parametrize("mode", ["accept", "reject"])
def test_pyrdmacm_to_pyrdmacm_private_data_byte_for_byte(peer, mode):
    srv = peer.start([sys.executable, "-c", PEER_LISTENER, mode, "7999"], line_buffered=True)
    srv.wait_for_line("^listening$")
    with EventChannel() as ch:
        c = routed(ch, "%s:7999" % peer.address)
        c.connect(private_data=bytes(range(56)))
        seen = json.loads(srv.wait_for_line(r"^\{"))
        assert seen["qp_num"] == c.qp_num
        assert bytes.fromhex(seen["pd"]) == bytes(range(56))
        assert seen["peer"].startswith(HERE + ":")
        if mode == "reject":
            ev = wait(ch, E.REJECTED, status=28)
            assert ev.private_data == bytes(range(148))
        else:
            ev = wait(ch, E.CONNECT_RESPONSE)
            assert ev.private_data == bytes(range(196))
            c.establish()
            assert srv.wait_for_line("^ESTABLISHED$")
            c.disconnect()
            assert srv.wait_for_line("^DISCONNECTED$")
            wait(ch, E.DISCONNECTED)
        code, out, err = srv.wait(30)
        assert code == 0, err
        c.destroy()


def test_send_only_join_matches_mckey_o():
    mckey = subprocess.run(["mckey", "-m", "239.1.1.2", "-b", HERE, "-C", "0", "-o"], capture_output=True,
                           text=True, timeout=30)
    assert mckey.returncode == 0, mckey.stderr
    [joined] = [ln for ln in lines(mckey.stdout) if ln.startswith("mckey: joined dgid:")]
    with EventChannel() as ch:
        u = CmId(ch, PortSpace.UDP)
        u.bind_addr(HERE)
        m = u.join_multicast("239.1.1.2", send_only=True)
        p = wait(ch, E.MULTICAST_JOIN).param
        assert m.send_only and joined == "mckey: joined dgid: ::ffff:%s mlid 0x%x sl %d" % (
            p.ah.dgid.ipv4_mapped, p.ah.dlid, p.ah.sl)
        u.destroy()


def test_ucmatose_tos_reaches_our_request_ids_qp_attributes(peer):
    """ucmatose -t sets the TOS on its side before resolving the route: the REQ's path
    carries the traffic class, and the passive side's RTR address handle has it."""
    with EventChannel() as ch:
        lst = listening(ch, 7471)
        client = peer.start(["ucmatose", "-s", HERE, "-C", "0", "-t", "104"], line_buffered=True)
        req = wait(ch, E.CONNECT_REQUEST).id
        req.accept(responder_resources=1, initiator_depth=1)
        wait(ch, E.ESTABLISHED)
        from pyrdmacm.abi import QpState

        assert req.init_qp_attr(QpState.RTR).ah_attr.traffic_class == 104
        assert req.query_path()[0].traffic_class == 104
        req.disconnect()
        wait(ch, E.DISCONNECTED)
        code, out, err = client.wait(30)
        assert code == 0, (out, err)
        req.destroy()
        lst.destroy()
