"""The kernel's rules as pyrdmacm.kernel_rules states them (and the IB CM's, as
pyrdmacm.testing._ibcm does), against the real kernel: each command written on ids the lab
brings into each state the single topology can reach (tests/rules_matrix.py), the errno
compared with the tables'.

This is where the copies of the rules that disagreed were settled (the fake kernel, the
fuzzer's model, the library's state table): SET_OPTION REUSEADDR set and cleared in every
state, DISCONNECT on a listener, ACCEPT / REJECT / DISCONNECT on a fresh id, ACK_TIMEOUT by
QP type, an id named on another fd, addresses of families the kernel does not take, and
MIGRATE_ID naming fd 0xFFFFFFFF.  The lab's 6.1 and 7.2 answered alike (6.1 has no
RESOLVE_IB_SERVICE).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from typing import Callable, Iterator, List, Tuple

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from rules_matrix import (AF_IB_FAMILY, AF_UNIX_ADDR, C, CLOSED_PORT, K, LOCAL, PLAN, PROBES, PS, QP,  # noqa: E402
                          expected, observe)
from pyrdmacm import kernel_rules  # noqa: E402
from pyrdmacm.addr import parse_address  # noqa: E402
from pyrdmacm.conformance import kernel_version, known_bug  # noqa: E402
from pyrdmacm.conformance.expect import outcome_text  # noqa: E402
from pyrdmacm.conformance.steps import CaseFd  # noqa: E402

# The lab's oldest and newest kernels: the table's version bounds are checked at both ends,
# and a whole matrix per kernel costs minutes (CI runs every kernel within 40 minutes).
pytestmark = pytest.mark.kernel(suites=("bullseye", "sid"))


#: the probes that wedge the close of their fd in REQ_SENT (conformance.bugs:
#: rej_in_req_sent_keeps_the_req: 77-102 s each, three in a row): their fds are closed in
#: threads while the matrix goes on, and the module's end waits for those closes
WEDGING = {("ACCEPT", PS.TCP), ("ACCEPT valid=0", PS.TCP), ("REJECT", PS.TCP)}
_closes: List[Tuple[str, threading.Thread]] = []


def _close_aside(name: str) -> Callable[[CaseFd], None]:
    def close(fd: CaseFd) -> None:
        t = threading.Thread(target=fd.close, name="close " + name, daemon=True)
        t.start()
        _closes.append((name, t))
    return close


@pytest.fixture(scope="module", autouse=True)
def _wedged_closes_end() -> Iterator[None]:
    """Every fd closed aside has closed by the module's end (the kernel gave up its retries):
    nothing of the matrix is left to the tests after it."""
    yield
    deadline = time.monotonic() + 300
    stuck = []
    for name, t in _closes:
        t.join(max(0.0, deadline - time.monotonic()))
        if t.is_alive():
            stuck.append(name)
    _closes.clear()
    assert not stuck, "these fds did not close within 300 s: %s" % stuck


@pytest.mark.parametrize("probe,ps", sorted(PLAN), ids=["%s %s" % (p, PS(ps).name) for p, ps in sorted(PLAN)])
def test_the_kernel_answers_as_the_tables_say(probe: str, ps: int) -> None:
    version = kernel_version()
    aside = (probe, ps) in WEDGING and known_bug("rej_in_req_sent_keeps_the_req", version) is not None
    # a command newer than this kernel (RESOLVE_IB_SERVICE before 6.17) is one ucma_write does
    # not know: EINVAL in every state, before any id is looked up
    absent = PROBES[probe].command > C.JOIN_MCAST and version < (6, 17)
    wrong = []
    for state in PLAN[(probe, ps)]:
        want = outcome_text(errno.EINVAL if absent else expected(probe, state, ps, version))
        seen = observe(state, probe, ps, close=_close_aside("%s in %s" % (probe, state)) if aside else None)
        if seen != want:
            wrong.append("%s in %s: the kernel %s, the tables %s" % (probe, state, seen, want))
    assert not wrong, "\n".join(wrong)


def test_an_id_named_on_another_fd_is_einval_to_every_command() -> None:
    """``_ucma_find_context``: the handle is the machine's, the id its fd's."""
    with CaseFd() as a, CaseFd() as b:
        h = a.create()
        seen = {name: outcome_text(PROBES[name].write(b, h)) for name in
                ("REUSEADDR 1", "TOS", "BIND", "RESOLVE_ADDR", "RESOLVE_ROUTE", "LISTEN", "CONNECT", "ACCEPT",
                 "REJECT", "DISCONNECT", "NOTIFY COMM_EST", "INIT_QP_ATTR INIT")}
        seen["DESTROY_ID"] = outcome_text(b.destroy(h))
        seen["QUERY"] = outcome_text(b.query(h, 0))
    want = outcome_text(kernel_rules.ANOTHER_FDS_ID)
    assert {k: v for k, v in seen.items() if v != want} == {}


def test_addresses_of_families_the_kernel_does_not_take_are_einval() -> None:
    """AF_UNIX anywhere, AF_IB in the sockaddr_in6 slots (rdma_addr_size_in6 / _kss: 0), the
    size checked before the id is looked up."""
    dst = parse_address(LOCAL, port=CLOSED_PORT)
    with CaseFd() as fd:
        h = fd.create()
        writes = {
            "BIND AF_UNIX": {"id": h, "addr_size": 110, "addr": AF_UNIX_ADDR.ljust(128, b"\0")},
            "BIND_IP AF_UNIX": {"id": h, "addr": AF_UNIX_ADDR.ljust(28, b"\0")},
            "BIND_IP AF_IB": {"id": h, "addr": AF_IB_FAMILY.ljust(28, b"\0")},
            "RESOLVE_IP dst AF_UNIX": {"id": h, "dst_addr": AF_UNIX_ADDR.ljust(28, b"\0"), "timeout_ms": 100},
            "RESOLVE_IP dst AF_IB": {"id": h, "dst_addr": AF_IB_FAMILY.ljust(28, b"\0"), "timeout_ms": 100},
            "RESOLVE_IP src AF_UNIX": {"id": h, "dst_addr": dst.pack_in6(), "src_addr": AF_UNIX_ADDR.ljust(28, b"\0"),
                                       "timeout_ms": 100},
            "RESOLVE_ADDR dst AF_UNIX": {"id": h, "dst_size": 110, "dst_addr": AF_UNIX_ADDR.ljust(128, b"\0"),
                                         "timeout_ms": 100},
            "RESOLVE_ADDR src AF_UNIX": {"id": h, "dst_size": 16, "dst_addr": dst.pack_storage(), "src_size": 110,
                                         "src_addr": AF_UNIX_ADDR.ljust(128, b"\0"), "timeout_ms": 100},
            "JOIN_MCAST AF_UNIX": {"uid": 5, "id": h, "addr_size": 110, "addr": AF_UNIX_ADDR.ljust(128, b"\0")},
            "JOIN_IP_MCAST AF_IB": {"uid": 5, "id": h, "addr": AF_IB_FAMILY.ljust(28, b"\0")},
            "BIND AF_UNIX, an unknown id": {"id": 0xFFFFFF, "addr_size": 110, "addr": AF_UNIX_ADDR.ljust(128, b"\0")},
        }
        seen = {what: outcome_text(fd.send(what.split()[0], fields)) for what, fields in writes.items()}
    assert {k: v for k, v in seen.items() if v != "EINVAL"} == {}


def test_migrate_naming_an_fd_no_process_has_is_enoent() -> None:
    """``fdget`` of MIGRATE_ID's ``__u32 fd``: nothing there, however large."""
    with CaseFd() as fd:
        h = fd.create()
        seen = {fdn: outcome_text(fd.send("MIGRATE_ID", {"id": h, "fd": fdn})) for fdn in
                (0xFFFFFFFF, 0x80000000, 0x7FFFFFFF)}
    assert set(seen.values()) == {"ENOENT"}, seen


@pytest.mark.parametrize("qp", [QP.RC, QP.UC, QP.UD, QP.XRC_INI, QP.XRC_TGT], ids=lambda q: QP(q).name)
def test_ack_timeout_by_the_qp_type_of_a_ps_ib_id(qp: int) -> None:
    """rdma_set_ack_timeout: RC and XRC_INI ids only (PS_IB takes the QP type it is given)."""
    with CaseFd() as fd:
        seen = outcome_text(PROBES["ACK_TIMEOUT"].write(fd, fd.create(PS.IB, qp)))
    assert seen == outcome_text(kernel_rules.refusal(C.SET_OPTION, K.IDLE, "ACK_TIMEOUT", qp_type=qp,
                                                     version=kernel_version()))
