"""The matrix of commands and states that checks the kernel's rules as pyrdmacm.kernel_rules
states them (and the IB CM's, as pyrdmacm.testing._ibcm does): how the lab brings an id
into each state the single topology can reach, what is written there, and what the two
tables say the kernel answers.  tests/kernel/test_kernel_rules_lab.py runs it on the lab's
kernels, tests/test_kernel_rules.py on the fakes (a fabric's host with the lab's address).
"""

from __future__ import annotations

import struct
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from pyrdmacm import abi, kernel_rules
from pyrdmacm.abi.codec import CODECS
from pyrdmacm.addr import parse_address
from pyrdmacm.conformance import Raw
from pyrdmacm.conformance.cases_options import set_option
from pyrdmacm.conformance.expect import outcome_text
from pyrdmacm.conformance.raw import RawDevice
from pyrdmacm.conformance.registry import Context
from pyrdmacm.conformance.steps import CaseFd, E, at_new_port, conn_fields, listener, request, routed
from pyrdmacm.testing._ibcm import QP_ATTR_STATES, CmInput, IbCmId, IbCmState

C = abi.UserCmCmd
K = abi.RdmaCmState
PS = abi.PortSpace
QP = abi.QpType
LOCAL = "10.0.2.15"
#: on the single topology's link, nobody: its ARP goes unanswered, the id stays in ADDR_QUERY
SILENT = "10.0.2.200"
CLOSED_PORT = 7999
_INT = struct.Struct("<i")
#: the start of an AF_UNIX address, and of an AF_IB one (a family, nothing else)
AF_UNIX_ADDR = struct.pack("<H", 1) + b"/x"
AF_IB_FAMILY = struct.pack("<H", abi.AF_IB)


def _ctx(fd: Raw) -> Context:
    return Context(fd, parse_address(LOCAL))


# -- the states the lab reaches: how, and what the kernel holds there ------------------------

class LabState(NamedTuple):
    """A state an id is brought into: the kernel's state, whether the id is bound to a device,
    the state of its IB CM id (None: it has none), and how."""

    kernel: "abi.RdmaCmState"
    device: bool
    cm: Optional[IbCmState]
    make: Callable[[CaseFd, int, int], int]


def _idle(fd: CaseFd, ps: int, qp: int) -> int:
    return fd.create(ps, qp)


def _bound(fd: CaseFd, ps: int, qp: int) -> int:
    h = fd.create(ps, qp)
    assert fd.bind(h, at_new_port(_ctx(fd))) == 0
    return h


def _bound_any(fd: CaseFd, ps: int, qp: int) -> int:
    h = fd.create(ps, qp)
    assert fd.bind(h, parse_address("0.0.0.0", port=at_new_port(_ctx(fd)).port)) == 0
    return h


def _querying(fd: CaseFd, ps: int, qp: int) -> int:
    h = fd.create(ps, qp)
    assert fd.resolve(h, parse_address(SILENT, port=CLOSED_PORT), timeout_ms=60000) == 0
    return h


def _resolved(fd: CaseFd, ps: int, qp: int) -> int:
    h = fd.create(ps, qp)
    assert fd.resolve(h, at_new_port(_ctx(fd))) == 0
    fd.wait(E.ADDR_RESOLVED)
    return h


def _routed(fd: CaseFd, ps: int, qp: int) -> int:
    return routed(fd, at_new_port(_ctx(fd)), ps)


def _listening(fd: CaseFd, ps: int, qp: int) -> int:
    return listener(fd, at_new_port(_ctx(fd)), ps=ps)


def _listening_any(fd: CaseFd, ps: int, qp: int) -> int:
    return listener(fd, parse_address("0.0.0.0", port=at_new_port(_ctx(fd)).port), ps=ps)


def _refused(fd: CaseFd, ps: int, qp: int) -> int:
    """CONNECT to a port nobody listens on: REJECTED 8 (UNREACHABLE 1 for SIDR); the id stays
    in CONNECT, its IB CM id idle."""
    h = routed(fd, parse_address(LOCAL, port=CLOSED_PORT), ps)
    assert fd.send("CONNECT", conn_fields(h)) == 0
    fd.events(3.0, until=E.UNREACHABLE if qp == QP.UD else E.REJECTED)
    return h


def _established(fd: CaseFd) -> Tuple[int, int]:
    client, child = request(fd, _ctx(fd))
    assert fd.send("ACCEPT", conn_fields(child, uid=0x77)) == 0
    fd.wait(E.CONNECT_RESPONSE)
    assert fd.send("ACCEPT", {"id": client, "conn_param.valid": 0}) == 0  # the RTU
    fd.wait(E.ESTABLISHED)
    return client, child


def _disconnected(fd: CaseFd, ps: int, qp: int) -> int:
    """The passive end of a connection whose peer sent a DREQ: DISCONNECT, IB CM DREQ_RCVD."""
    client, child = _established(fd)
    assert fd.send("DISCONNECT", {"id": client}) == 0
    fd.wait(E.DISCONNECTED)
    return child


S = IbCmState
STATES: Dict[str, LabState] = {
    "IDLE": LabState(K.IDLE, False, None, _idle),
    "ADDR_BOUND": LabState(K.ADDR_BOUND, True, None, _bound),
    "ADDR_BOUND any": LabState(K.ADDR_BOUND, False, None, _bound_any),
    "ADDR_QUERY": LabState(K.ADDR_QUERY, False, None, _querying),
    "ADDR_RESOLVED": LabState(K.ADDR_RESOLVED, True, None, _resolved),
    "ROUTE_RESOLVED": LabState(K.ROUTE_RESOLVED, True, None, _routed),
    "LISTEN": LabState(K.LISTEN, True, S.LISTEN, _listening),
    "LISTEN any": LabState(K.LISTEN, False, None, _listening_any),
    "CONNECT rejected": LabState(K.CONNECT, True, S.IDLE, _refused),
    "CONNECT REQ_SENT": LabState(K.CONNECT, True, S.REQ_SENT, lambda fd, ps, qp: request(fd, _ctx(fd))[0]),
    "CONNECT REQ_RCVD": LabState(K.CONNECT, True, S.REQ_RCVD, lambda fd, ps, qp: request(fd, _ctx(fd))[1]),
    "CONNECT ESTABLISHED": LabState(K.CONNECT, True, S.ESTABLISHED, lambda fd, ps, qp: _established(fd)[0]),
    "DISCONNECT": LabState(K.DISCONNECT, True, S.DREQ_RCVD, _disconnected),
}
#: the states of an id without a connection (cheap to reach), and every state
PLAIN = [n for n, s in STATES.items() if s.cm in (None, S.LISTEN, S.IDLE)]
EVERY = list(STATES)
#: where a connection's IB CM id decides (and a fresh id and a listener, where the rdma_cm does)
CONNECTING = ["IDLE", "LISTEN", "CONNECT rejected", "CONNECT REQ_SENT", "CONNECT REQ_RCVD", "CONNECT ESTABLISHED",
              "DISCONNECT"]
#: the states a datagram (UDP) id reaches here
DATAGRAM = PLAIN

# -- what is written ---------------------------------------------------------------------------

class Probe(NamedTuple):
    """A command, its form in the table, and what the IB CM does with it where it decides."""

    command: "abi.UserCmCmd"
    form: str
    write: Callable[[CaseFd, int], int]
    cm: Optional[CmInput] = None


def _path_record() -> bytes:
    flags = int(abi.IbPathFlag.GMP | abi.IbPathFlag.PRIMARY | abi.IbPathFlag.BIDIRECTIONAL)
    return CODECS["ib_path_rec_data"].pack_dict({"flags": flags})


def _option(level: int, name: int, value: bytes) -> Callable[[CaseFd, int], int]:
    return lambda fd, h: set_option(fd, h, level, name, value)


O = abi.OptionId
PROBES: Dict[str, Probe] = {
    "REUSEADDR 1": Probe(C.SET_OPTION, "REUSEADDR set", _option(0, O.REUSEADDR, _INT.pack(1))),
    "REUSEADDR 0": Probe(C.SET_OPTION, "REUSEADDR clear", _option(0, O.REUSEADDR, _INT.pack(0))),
    "AFONLY 1": Probe(C.SET_OPTION, "AFONLY", _option(0, O.AFONLY, _INT.pack(1))),
    "TOS": Probe(C.SET_OPTION, "TOS", _option(0, O.TOS, b"\x10")),
    "ACK_TIMEOUT": Probe(C.SET_OPTION, "ACK_TIMEOUT", _option(0, O.ACK_TIMEOUT, b"\x0e")),
    "IB_PATH": Probe(C.SET_OPTION, "IB_PATH", _option(1, abi.OptionIb.PATH, _path_record())),
    "BIND": Probe(C.BIND, "", lambda fd, h: fd.bind(h, at_new_port(_ctx(fd)))),
    "RESOLVE_ADDR": Probe(C.RESOLVE_ADDR, "", lambda fd, h: fd.resolve(h, at_new_port(_ctx(fd)))),
    "RESOLVE_ROUTE": Probe(C.RESOLVE_ROUTE, "", lambda fd, h: fd.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 1000})),
    "RESOLVE_ROUTE 0": Probe(C.RESOLVE_ROUTE, "timeout 0",
                             lambda fd, h: fd.send("RESOLVE_ROUTE", {"id": h, "timeout_ms": 0})),
    "LISTEN": Probe(C.LISTEN, "", lambda fd, h: fd.send("LISTEN", {"id": h, "backlog": 8})),
    "CONNECT": Probe(C.CONNECT, "", lambda fd, h: fd.send("CONNECT", conn_fields(h))),
    "ACCEPT": Probe(C.ACCEPT, "", lambda fd, h: fd.send("ACCEPT", conn_fields(h, uid=0x99)), CmInput.SEND_REP),
    "ACCEPT valid=0": Probe(C.ACCEPT, "", lambda fd, h: fd.send("ACCEPT", {"id": h, "conn_param.valid": 0}),
                            CmInput.SEND_RTU),
    "REJECT": Probe(C.REJECT, "", lambda fd, h: fd.send("REJECT", {"id": h, "reason": 0}), CmInput.SEND_REJ),
    "DISCONNECT": Probe(C.DISCONNECT, "", lambda fd, h: fd.send("DISCONNECT", {"id": h})),
    "NOTIFY COMM_EST": Probe(C.NOTIFY, "", lambda fd, h: fd.send("NOTIFY", {"id": h, "event": 4}), CmInput.ESTABLISH),
    "INIT_QP_ATTR INIT": Probe(C.INIT_QP_ATTR, "", lambda fd, h: fd.send("INIT_QP_ATTR", {"id": h, "qp_state": 1})),
    "JOIN_MCAST": Probe(C.JOIN_MCAST, "", lambda fd, h: fd.send("JOIN_MCAST", {
        "uid": 5, "id": h, "addr_size": 16, "join_flags": 0, "addr": parse_address("239.1.1.1").pack_storage()})),
    "RESOLVE_IB_SERVICE": Probe(C.RESOLVE_IB_SERVICE, "", lambda fd, h: fd.send(
        "RESOLVE_IB_SERVICE", {"id": h, "ibs.flags": 1, "ibs.service_id": 1})),
}

#: (probe, port space) -> the states it is written in: every state for the rules the copies
#: disagreed on, the plain states where only the rdma_cm's table decides
PLAN: Dict[Tuple[str, int], List[str]] = {
    ("REUSEADDR 1", PS.TCP): EVERY, ("REUSEADDR 0", PS.TCP): EVERY, ("DISCONNECT", PS.TCP): EVERY,
    ("AFONLY 1", PS.TCP): PLAIN + ["CONNECT ESTABLISHED"],
    ("ACCEPT", PS.TCP): CONNECTING, ("ACCEPT valid=0", PS.TCP): CONNECTING, ("REJECT", PS.TCP): CONNECTING,
    ("NOTIFY COMM_EST", PS.TCP): CONNECTING, ("INIT_QP_ATTR INIT", PS.TCP): PLAIN + CONNECTING[3:],
    ("TOS", PS.TCP): ["IDLE", "LISTEN", "CONNECT ESTABLISHED"], ("ACK_TIMEOUT", PS.TCP): ["IDLE", "LISTEN"],
    ("IB_PATH", PS.TCP): PLAIN, ("BIND", PS.TCP): PLAIN, ("RESOLVE_ADDR", PS.TCP): PLAIN,
    ("RESOLVE_ROUTE", PS.TCP): PLAIN, ("RESOLVE_ROUTE 0", PS.TCP): PLAIN, ("LISTEN", PS.TCP): PLAIN, ("CONNECT", PS.TCP): PLAIN,
    ("RESOLVE_IB_SERVICE", PS.TCP): PLAIN,
    ("JOIN_MCAST", PS.UDP): DATAGRAM, ("JOIN_MCAST", PS.TCP): ["ADDR_BOUND", "ADDR_RESOLVED"],
    ("DISCONNECT", PS.UDP): DATAGRAM, ("REUSEADDR 1", PS.UDP): ["LISTEN", "CONNECT rejected"],
    ("ACK_TIMEOUT", PS.UDP): ["IDLE"], ("INIT_QP_ATTR INIT", PS.UDP): DATAGRAM,
}
#: what the kernel answers beyond both tables: RoCE has no SA for a service record query
#: (rdma_resolve_ib_service's rdma_cap_ib_sa, after the state)
BEYOND = {("RESOLVE_IB_SERVICE", "ADDR_BOUND"): 95}  # EOPNOTSUPP


def expected(probe: str, state: str, ps: int, version: kernel_rules.Version) -> int:
    """The tables' answer: the rdma_cm's (kernel_rules), then the IB CM's (_ibcm) where the id
    has an IB CM id and the command goes to it."""
    p, s = PROBES[probe], STATES[state]
    qp = QP.UD if ps == PS.UDP else QP.RC
    err = kernel_rules.refusal(p.command, s.kernel, p.form, device=s.device, qp_type=qp, version=version)
    if err or s.cm is None:
        return err or BEYOND.get((probe, state), 0)
    if p.command is C.INIT_QP_ATTR and qp != QP.UD:
        return 0 if s.cm in QP_ATTR_STATES[1] else 22  # ib_cm_init_qp_attr by the IB CM's state
    if p.cm is not None:
        return IbCmId(s.cm).refusal(p.cm)
    return 0


def observe(state: str, probe: str, ps: int, device: Optional[RawDevice] = None,
            close: Optional[Callable[[CaseFd], None]] = None) -> str:
    """What ``probe`` answers on a fresh id of port space ``ps`` brought into ``state``, on a
    new fd (of ``device``'s, or the kernel's), closed after by ``close`` (CaseFd.close: at once)."""
    qp = QP.UD if ps == PS.UDP else QP.RC
    fd = CaseFd(device=device)
    try:
        h = STATES[state].make(fd, ps, qp)
        return outcome_text(PROBES[probe].write(fd, h))
    finally:
        (close or CaseFd.close)(fd)
