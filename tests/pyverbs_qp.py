"""A QP made by pyverbs carrying data over a connection pyrdmacm set up: both ends of the
kernel test tests/kernel/test_pyverbs_qp_lab.py.

pyrdmacm has no QP; a user with one elsewhere gives its number to connect() or accept() and
programs it with what ``init_qp_attr()`` answers (docs/pyverbs.md).  pyverbs is that
"elsewhere" here: rdma-core's binding, Debian's ``python3-pyverbs``, importable by the system
python3 only.  The QP number must be known before connect() and accept(), so pyrdmacm and
pyverbs share one process: this script, run by the system python3 on both hosts of the lab's
pair topology.

pyrdmacm itself comes from this checkout (the script puts it first on ``sys.path``); its
dependencies, construct and pyroute2, from the directories ``PYRDMACM_DEPS`` names
(``os.pathsep``-separated; the test passes its own interpreter's site-packages), appended
after the system's own, so pyverbs and the standard library stay the system's.

    python3 tests/pyverbs_qp.py rc-server PORT TOKEN    # on the peer: listen, accept
    python3 tests/pyverbs_qp.py rc-client ADDR PORT TOKEN
    python3 tests/pyverbs_qp.py ud-server PORT TOKEN
    python3 tests/pyverbs_qp.py ud-client ADDR PORT TOKEN

Each prints ``listening`` (servers) when its listener is up, then one JSON object on its last
line: what it saw (the QP numbers, the masks of the attributes it was given, the payloads it
received, what the peer wrote into its memory) -- the test compares the two ends.  A step
the device or the kernel refuses ends the run with ``{"refused": STEP, "errno": N, ...}``
and exit status 3; any other failure is a traceback and status 1.
"""

from __future__ import annotations

import errno
import json
import os
import struct
import sys
import time
from typing import Any, Dict, List, Optional, Tuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.extend(p for p in os.environ.get("PYRDMACM_DEPS", "").split(os.pathsep) if p)

import pyverbs.enums as e  # noqa: E402  (after the path is set)
from pyverbs.addr import AH  # noqa: E402
from pyverbs.cq import CQ  # noqa: E402
from pyverbs.device import Context  # noqa: E402
from pyverbs.mr import MR  # noqa: E402
from pyverbs.pd import PD  # noqa: E402
from pyverbs.pyverbs_error import PyverbsRDMAError  # noqa: E402
from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr  # noqa: E402
from pyverbs.wr import SGE, RecvWR, SendWR  # noqa: E402

from pyrdmacm import CmId, ConnParam, EventChannel, PortSpace, QpState, UdParam  # noqa: E402
from pyrdmacm.abi import CmEventType as E  # noqa: E402

TIMEOUT = 60.0  # seconds for any one event or completion (the lab's guests are emulated)
REQUEST_TIMEOUT = 180.0  # for the server's first request: the client starts a Python meanwhile
BUF = 4096
WRITE_AT = 2048  # where the peer's RDMA write lands in our buffer
GRH = 40  # a UD receive starts with the packet's global route header
#: the remote buffer a side offers in its private data: address, rkey, length
OFFER = struct.Struct("!QII")
#: bounded retries: at 7 Soft-RoCE retries for ever, and a broken data path would hang
PARAMS = dict(retry_count=5, rnr_retry_count=5)


class Refused(Exception):
    """The device or the kernel refused ``step`` with ``errno``."""

    def __init__(self, step: str, err: int, message: str) -> None:
        super().__init__(step, err, message)
        self.step, self.errno, self.message = step, err, message


def step(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, a pyverbs call: an errno it raises becomes Refused(name)."""
    try:
        return fn(*args, **kwargs)
    except PyverbsRDMAError as err:
        raise Refused(name, err.error_code, str(err)) from None


def wait(ch: EventChannel, want: E, timeout: float = TIMEOUT) -> Any:
    ev = ch.get_event(timeout)
    if ev is None:
        raise AssertionError("no %s within %g s" % (want.name, timeout))
    ev.ack()
    if ev.event is not want:
        raise AssertionError("got %r, wanted %s" % (ev, want.name))
    return ev


def listening(ch: EventChannel, port: int, ps: PortSpace = PortSpace.TCP) -> CmId:
    """A listener on ``port`` of every address; ``listening`` printed once it is up."""
    lst = CmId(ch, ps)
    lst.bind_addr("0.0.0.0:%d" % port)
    lst.listen()
    print("listening", flush=True)
    return lst


def routed(ch: EventChannel, addr: str, port: int, ps: PortSpace = PortSpace.TCP) -> CmId:
    """An id whose address and route to ``addr:port`` are resolved."""
    cm = CmId(ch, ps)
    cm.resolve_addr("%s:%d" % (addr, port), timeout_ms=5000)
    wait(ch, E.ADDR_RESOLVED)
    cm.resolve_route(5000)
    wait(ch, E.ROUTE_RESOLVED)
    return cm


class Verbs:
    """The pyverbs side: the device and port the id landed on, a PD, one CQ, a QP, a
    registered buffer."""

    def __init__(self, cm: CmId, qp_type: int) -> None:
        if cm.device is None or cm.device.name is None:
            raise AssertionError("the id has no named device: %r" % (cm.device,))
        self.device, self.port = cm.device.name, cm.port_num
        self.ctx = Context(name=self.device)
        self.pd = PD(self.ctx)
        self.cq = CQ(self.ctx, 16)
        cap = QPCap(max_send_wr=4, max_recv_wr=4, max_send_sge=1, max_recv_sge=1)
        self.qp = step("create_qp", QP, self.pd, QPInitAttr(qp_type=qp_type, scq=self.cq, rcq=self.cq, cap=cap))
        access = e.IBV_ACCESS_LOCAL_WRITE | e.IBV_ACCESS_REMOTE_WRITE
        self.mr = MR(self.pd, BUF, access)
        self.masks: Dict[str, int] = {}
        self.done: Dict[int, Any] = {}  # completions polled, not yet asked for
        self.access = -1  # the access flags of the INIT attributes the QP was given

    def offer(self) -> bytes:
        return OFFER.pack(self.mr.buf, self.mr.rkey, BUF)

    def move(self, cm: CmId, state: QpState) -> Any:
        """Give the QP what ``init_qp_attr(state)`` answers: the recipe of docs/pyverbs.md."""
        qp_attr = cm.init_qp_attr(state)
        attr, mask = qp_attr.to_pyverbs()
        self.masks[state.name] = mask
        if state is QpState.INIT:
            self.access = qp_attr.qp_access_flags
        step("modify_qp %s" % state.name, self.qp.modify, attr, mask)
        return qp_attr

    def move_ud(self, state: QpState) -> None:
        """RTR with the state alone, RTS with the state and sq_psn: librdmacm's UD steps."""
        attr = QPAttr(qp_state=int(state))
        mask = e.IBV_QP_STATE | (e.IBV_QP_SQ_PSN if state is QpState.RTS else 0)
        step("modify_qp %s (librdmacm's UD mask)" % state.name, self.qp.modify, attr, mask)

    def post_recv(self, wr_id: int, offset: int, length: int) -> None:
        sge = SGE(self.mr.buf + offset, length, self.mr.lkey)
        step("post_recv", self.qp.post_recv, RecvWR(wr_id=wr_id, num_sge=1, sg=[sge]))

    def post_send(self, wr_id: int, data: bytes, offset: int, *, write: Optional[Tuple[int, int]] = None,
                  ud: Optional[Tuple[Any, int, int]] = None) -> None:
        self.mr.write(data, len(data), offset)
        sge = SGE(self.mr.buf + offset, len(data), self.mr.lkey)
        opcode = e.IBV_WR_RDMA_WRITE if write else e.IBV_WR_SEND
        wr = SendWR(wr_id=wr_id, opcode=opcode, num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED)
        if write:
            wr.set_wr_rdma(write[1], write[0])
        if ud:
            wr.set_wr_ud(*ud)
        step("post_send", self.qp.post_send, wr)

    def poll_for(self, wr_id: int, timeout: float, strict: bool = False) -> Any:
        """The work completion of ``wr_id``, or None when none came in ``timeout`` s (others
        that come first are kept for their own call: sends and receives share the CQ);
        ``strict``: AssertionError at once for any completion in error."""
        deadline = time.monotonic() + timeout
        while wr_id not in self.done:
            if time.monotonic() > deadline:
                return None
            n, wcs = self.cq.poll(1)
            if not n:
                time.sleep(0.001)
                continue
            wc = wcs[0]
            if strict and wc.status != e.IBV_WC_SUCCESS:
                raise AssertionError("work completion %d in error: status %d (%s)"
                                     % (wc.wr_id, wc.status, _wc_status(wc.status)))
            self.done[wc.wr_id] = wc
        return self.done.pop(wr_id)

    def completion(self, wr_id: int) -> Any:
        """The work completion of ``wr_id``; AssertionError for one in error or none in time."""
        wc = self.poll_for(wr_id, TIMEOUT, strict=True)
        if wc is None:
            raise AssertionError("no work completion for %d within %g s (kept: %s)"
                                 % (wr_id, TIMEOUT, sorted(self.done)))
        return wc

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self.mr.read(length, offset))

    def state(self) -> int:
        attr, _ = self.qp.query(e.IBV_QP_STATE)
        return int(attr.qp_state)

    def close(self) -> None:
        for obj in (self.qp, self.mr, self.cq, self.pd, self.ctx):
            obj.close()


def _wc_status(status: int) -> str:
    """A work completion status by name (``IBV_WC_RETRY_EXC_ERR``): the statuses are
    SUCCESS and the ``*_ERR`` names; the opcodes (``IBV_WC_BIND_MW`` ...) share numbers."""
    for name in dir(e):
        if (name == "IBV_WC_SUCCESS" or (name.startswith("IBV_WC_") and name.endswith("_ERR"))) \
                and getattr(e, name) == status:
            return name
    return "status %d" % status


def text(raw: bytes) -> str:
    return raw.rstrip(b"\0").decode(errors="replace")


# -- RC: send/receive both ways and an RDMA write each way

def rc_server(port: int, token: str) -> Dict[str, Any]:
    with EventChannel() as ch:
        lst = listening(ch, port)
        ev = wait(ch, E.CONNECT_REQUEST, REQUEST_TIMEOUT)
        req = ev.id
        their_qp = ev.param.qp_num
        raddr, rkey, _ = OFFER.unpack_from(ev.param.private_data)
        v = Verbs(req, e.IBV_QPT_RC)
        out: Dict[str, Any] = {"device": v.device, "port": v.port, "qp_num": v.qp.qp_num, "peer_qp_num": their_qp}
        for st in (QpState.INIT, QpState.RTR, QpState.RTS):  # passive: all three before the REP, as librdmacm
            a = v.move(req, st)
            if st is QpState.RTR:
                out["rtr_dest_qp_num"] = a.dest_qp_num
        out["masks"], out["access"] = v.masks, v.access
        v.post_recv(1, 0, 256)
        v.post_recv(2, 256, 256)
        req.accept(ConnParam(qp_num=v.qp.qp_num, private_data=v.offer(), **PARAMS))
        wait(ch, E.ESTABLISHED)
        out["qp_state"] = v.state()
        got: List[str] = []
        wc = v.completion(1)  # the client's first send
        got.append(text(v.read(0, wc.byte_len)))
        v.post_send(10, ("written by the server " + token).encode(), 1024, write=(raddr + WRITE_AT, rkey))
        v.post_send(11, ("pong from the server " + token).encode(), 512)
        v.completion(10)
        v.completion(11)
        wc = v.completion(2)  # "wrote": the client's write came before it (RC order)
        got.append(text(v.read(256, wc.byte_len)))
        out["received"] = got
        out["found"] = text(v.read(WRITE_AT, 64))
        wait(ch, E.DISCONNECTED)  # the client disconnects; the channel answers the DREQ
        req.destroy()
        lst.destroy()
        v.close()
    return out


def rc_client(addr: str, port: int, token: str) -> Dict[str, Any]:
    with EventChannel() as ch:
        cm = routed(ch, addr, port)
        v = Verbs(cm, e.IBV_QPT_RC)  # in RESET: its number is all connect() needs
        out: Dict[str, Any] = {"device": v.device, "port": v.port, "qp_num": v.qp.qp_num}
        out["access_before_connect"] = cm.init_qp_attr(QpState.INIT).qp_access_flags
        cm.connect(ConnParam(qp_num=v.qp.qp_num, private_data=v.offer(), **PARAMS))
        ev = wait(ch, E.CONNECT_RESPONSE)
        out["peer_qp_num"] = ev.param.qp_num
        raddr, rkey, _ = OFFER.unpack_from(ev.param.private_data)
        for st in (QpState.INIT, QpState.RTR, QpState.RTS):
            a = v.move(cm, st)
            if st is QpState.RTR:
                out["rtr_dest_qp_num"] = a.dest_qp_num
        out["masks"], out["access"] = v.masks, v.access
        v.post_recv(1, 0, 256)
        cm.establish()  # the RTU: the server's ESTABLISHED
        out["qp_state"] = v.state()
        v.post_send(10, ("ping from the client " + token).encode(), 512)
        v.completion(10)
        wc = v.completion(1)  # the server's pong, after its write
        out["received"] = [text(v.read(0, wc.byte_len))]
        out["found"] = text(v.read(WRITE_AT, 64))
        v.post_send(11, ("written by the client " + token).encode(), 1024, write=(raddr + WRITE_AT, rkey))
        v.post_send(12, ("wrote " + token).encode(), 768)
        v.completion(11)
        v.completion(12)
        cm.disconnect()
        wait(ch, E.DISCONNECTED)
        cm.destroy()
        v.close()
    return out


# -- RC with full-size messages: does the path MTU each end was given carry them?

BIG = 4000  # one packet at a 4096 path MTU; four at 1024
#: a message's wait: past the sender's last retry (retry_count 5 at a timeout of 17-19:
#: about 13 s), short of the lab's patience
BIG_TIMEOUT = 20.0


def _outcome(v: "Verbs", wr_id: int, timeout: float) -> str:
    """The work completion status of ``wr_id`` by name, or "none" when none came in
    ``timeout`` s: a data path that does not carry the message says so here, not by raising."""
    wc = v.poll_for(wr_id, timeout)
    return "none" if wc is None else _wc_status(wc.status)


def rc_big_server(port: int, token: str) -> Dict[str, Any]:
    """Accept one connection, each end's QP given what its own init_qp_attr() answers (as a
    transport does); receive a full-size SEND, send one back; report both outcomes."""
    with EventChannel() as ch:
        lst = listening(ch, port)
        ev = wait(ch, E.CONNECT_REQUEST, REQUEST_TIMEOUT)
        req = ev.id
        v = Verbs(req, e.IBV_QPT_RC)
        out: Dict[str, Any] = {}
        for st in (QpState.INIT, QpState.RTR, QpState.RTS):
            a = v.move(req, st)
            if st is QpState.RTR:
                out["path_mtu"] = 128 << a.path_mtu
        v.post_recv(1, 0, BUF)
        req.accept(ConnParam(qp_num=v.qp.qp_num, private_data=v.offer(), **PARAMS))
        wait(ch, E.ESTABLISHED)
        out["received"] = _outcome(v, 1, BIG_TIMEOUT)
        v.post_send(10, (token.encode() * BIG)[:BIG], 0)
        out["sent"] = _outcome(v, 10, BIG_TIMEOUT)
        wait(ch, E.DISCONNECTED)
        req.destroy()
        lst.destroy()
        v.close()
    return out


def rc_big_client(addr: str, port: int, token: str) -> Dict[str, Any]:
    with EventChannel() as ch:
        cm = routed(ch, addr, port)
        v = Verbs(cm, e.IBV_QPT_RC)
        cm.connect(ConnParam(qp_num=v.qp.qp_num, private_data=v.offer(), **PARAMS))
        wait(ch, E.CONNECT_RESPONSE)
        out: Dict[str, Any] = {}
        for st in (QpState.INIT, QpState.RTR, QpState.RTS):
            a = v.move(cm, st)
            if st is QpState.RTR:
                out["path_mtu"] = 128 << a.path_mtu
        v.post_recv(1, 0, BUF)
        cm.establish()
        v.post_send(10, (token.encode() * BIG)[:BIG], 0)
        out["sent"] = _outcome(v, 10, BIG_TIMEOUT)
        out["received"] = _outcome(v, 1, 2 * BIG_TIMEOUT)  # the server's comes after it received ours
        cm.disconnect()
        wait(ch, E.DISCONNECTED)
        cm.destroy()
        v.close()
    return out


# -- UD: SIDR gives the client the server's QP, qkey and address handle

def ud_server(port: int, token: str) -> Dict[str, Any]:
    with EventChannel() as ch:
        lst = listening(ch, port, PortSpace.UDP)
        ev = wait(ch, E.CONNECT_REQUEST, REQUEST_TIMEOUT)
        req = ev.id
        v = Verbs(req, e.IBV_QPT_UD)
        out: Dict[str, Any] = {"device": v.device, "port": v.port, "qp_num": v.qp.qp_num}
        init = v.move(req, QpState.INIT)
        out["qkey"] = init.qkey
        v.move_ud(QpState.RTR)
        v.move_ud(QpState.RTS)
        out["masks"] = v.masks
        v.post_recv(1, 0, GRH + 256)
        req.accept(ConnParam(qp_num=v.qp.qp_num))  # the SIDR REP: our QP number and qkey
        wc = v.completion(1)
        out["received"] = [text(v.read(GRH, wc.byte_len - GRH))]
        out["src_qp"] = wc.src_qp
        # the answer goes where the datagram came from: an AH from its completion and GRH
        ah = step("create_ah_from_wc", AH, v.pd, wc=wc, grh=v.mr.buf, port_num=v.port)
        v.post_send(10, ("pong from the server " + token).encode(), 1024, ud=(ah, wc.src_qp, init.qkey))
        v.completion(10)
        req.destroy()
        lst.destroy()
        ah.close()
        v.close()
    return out


def ud_client(addr: str, port: int, token: str) -> Dict[str, Any]:
    with EventChannel() as ch:
        cm = routed(ch, addr, port, PortSpace.UDP)
        v = Verbs(cm, e.IBV_QPT_UD)
        out: Dict[str, Any] = {"device": v.device, "port": v.port, "qp_num": v.qp.qp_num}
        init = v.move(cm, QpState.INIT)
        out["qkey"] = init.qkey
        # the kernel's own RTR answer, as it is: what does the device say to it?
        rtr = cm.init_qp_attr(QpState.RTR)
        out["rtr_mask"] = int(rtr.mask)
        try:
            attr, mask = rtr.to_pyverbs()
            v.qp.modify(attr, mask)
            out["rtr_as_answered"] = 0
        except PyverbsRDMAError as err:
            out["rtr_as_answered"] = err.error_code
        if v.state() != int(QpState.RTR):
            v.move_ud(QpState.RTR)
        v.move_ud(QpState.RTS)
        out["masks"] = v.masks
        v.post_recv(1, 0, GRH + 256)
        cm.connect(ConnParam(qp_num=v.qp.qp_num))
        ev = wait(ch, E.ESTABLISHED)  # the SIDR answer
        p = ev.param
        assert isinstance(p, UdParam)
        out["peer_qp_num"], out["peer_qkey"] = p.qp_num, p.qkey
        ah = step("create_ah", AH, v.pd, attr=p.ah.to_pyverbs())
        v.post_send(10, ("ping from the client " + token).encode(), 1024, ud=(ah, p.qp_num, p.qkey))
        v.completion(10)
        wc = v.completion(1)
        out["received"] = [text(v.read(GRH, wc.byte_len - GRH))]
        out["src_qp"] = wc.src_qp
        cm.destroy()
        ah.close()
        v.close()
    return out


def main(argv: List[str]) -> int:
    role, args = argv[0], argv[1:]
    runs = {"rc-server": (rc_server, 2), "rc-client": (rc_client, 3), "rc-big-server": (rc_big_server, 2),
            "rc-big-client": (rc_big_client, 3),
            "ud-server": (ud_server, 2), "ud-client": (ud_client, 3)}
    if role not in runs or len(args) != runs[role][1]:
        print("usage: pyverbs_qp.py rc-server|rc-big-server|ud-server PORT TOKEN | "
              "rc-client|rc-big-client|ud-client ADDR PORT TOKEN",
              file=sys.stderr)
        return 2
    fn, _ = runs[role]
    *head, port, token = args
    try:
        out = fn(*head, int(port), token)
    except Refused as r:
        print(json.dumps({"refused": r.step, "errno": r.errno,
                          "errno_name": errno.errorcode.get(r.errno, "?"), "message": r.message}), flush=True)
        return 3
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
