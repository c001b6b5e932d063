"""Parity with librdmacm: every scenario through both libraries, on the same kernel.

One row per case.  Each row runs tools/parity/librdmacm_case (C, built here against
the installed librdmacm-dev) and tools/parity/pyrdmacm_case.py under strace, then
compares (tests/parity.py): the commands written to rdma_cm (sizes and every field,
pointers and ids by structure, librdmacm's start-up probe excluded, queries pyrdmacm
defers compared as a set), and the programs' reports (return values, errnos, events
and statuses, addresses, ports, device, port, pkey, GIDs, number of path records).

The rows run on the lab's oldest kernel (bullseye's 5.10, ``PARITY_SUITES``): what is
compared is two userlands' bytes and what the kernel answered each, and what every kernel
answers is the behavioural tiers' matter, which run on all of them (CI's time allows the
rows once).

``expect`` pins the row's main outcome on the real kernel as well, so two libraries
that failed the same way would still fail the row.  Where librdmacm is wrong or
pyrdmacm deliberately refuses earlier, ``known`` records both behaviours and why.

Topology "single": eth0 10.0.2.15/24 + fec0::15/64 with rxe0; the gateway 10.0.2.2 /
fec0::2 answers ARP and ND; nobody answers at 10.0.2.200.  "pair": the peer 10.9.0.1.
"multihomed": see tools/lab.

The connection rows run both ends in one process, over rxe0's loopback: a listener
``@s`` on 10.0.2.15, a client ``@c`` connecting to it, and ``@r``, the id of the
request (``get-request``), all on one event channel; so one command stream holds both
sides' commands, in the order the scenario makes them.  Neither end has a QP: the QP
numbers are given (distinct for the two ends and from row to row; the kernel's IB CM
refuses a second live connection with the same remote QP number and CA GUID), the
client's RTU is ``establish``, and nothing waits for a timewait.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import pytest

#: the kernels the rows run on: the oldest of the lab
PARITY_SUITES = ("bullseye",)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import parity  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
PY_CASE = ROOT / "tools" / "parity" / "pyrdmacm_case.py"

OK = {"ret": 0, "errno": 0}


@dataclass(frozen=True)
class Known:
    """A deliberate or librdmacm-side difference: what each library does, and why."""

    why: str
    step: int  # the step where the two part ways
    librdmacm: Dict[str, Any]
    pyrdmacm: Dict[str, Any]
    unsent: Optional[str] = None  # a command librdmacm writes and pyrdmacm refuses to


@dataclass(frozen=True)
class Case:
    name: str
    steps: Tuple[str, ...]
    expect: Dict[int, Dict[str, Any]]  # step index -> fields its report must have
    topology: str = "single"
    no_default_route: bool = False
    known: Optional[Known] = None
    hide_device: Optional[str] = None  # run both like a container given every uverbs node but this device's
    timeout: float = 60


def steps(text: str) -> Tuple[str, ...]:
    return tuple(text.split())


RESOLVED = {"event": "RDMA_CM_EVENT_ADDR_RESOLVED", "status": 0}
ROUTED = {"event": "RDMA_CM_EVENT_ROUTE_RESOLVED", "status": 0}
TIMED_OUT = {"event": "RDMA_CM_EVENT_ADDR_ERROR", "status": -110}
ON_RXE0 = {"device": "rxe0", "port_num": 1}


def event(name: str, status: int = 0, **fields: Any) -> Dict[str, Any]:
    """What a ``wait-event`` step must have reported."""
    return dict(call="wait_event", event="RDMA_CM_EVENT_" + name, status=status, **fields)


def called(call: str, **fields: Any) -> Dict[str, Any]:
    return dict(call=call, ret=0, errno=0, **fields)


# The connection rows' common start (steps 0-7): a listener on 10.0.2.15:7471, a client
# resolved to it.
LISTENER = "@s create tcp bind 10.0.2.15:7471 listen 8 "
CLIENT = ("@c create tcp resolve 10.0.2.15:7471 - 2000 wait-event ADDR_RESOLVED "
          "route 2000 wait-event ROUTE_RESOLVED ")
CONNECTION_TIMEOUT = 20
RDMA_UDP_QKEY = 0x01234567

CASES: List[Case] = [
    Case("own_address", steps("create tcp resolve 10.0.2.15 - 2000 wait info route 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="10.0.2.15", peer="10.0.2.15"), 5: ROUTED, 6: {"num_paths": 1}}),
    Case("loopback", steps("create tcp resolve 127.0.0.1 - 2000 wait info destroy"),
         {2: RESOLVED, 3: {"peer": "127.0.0.1"}}),
    Case("gateway", steps("create tcp resolve 10.0.2.2 - 2000 wait info route 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="10.0.2.15", peer="10.0.2.2"), 5: ROUTED}),
    Case("off_link_via_gateway", steps("create tcp resolve 198.51.100.7 - 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="10.0.2.15", peer="198.51.100.7")}),
    Case("nobody_answers_500ms", steps("create tcp resolve 10.0.2.200 - 500 wait destroy"), {2: TIMED_OUT}),
    Case("nobody_answers_1000ms", steps("create tcp resolve 10.0.2.200 - 1000 wait destroy"), {2: TIMED_OUT}),
    Case("no_route", steps("create tcp resolve 198.51.100.1 - 2000 destroy"),
         {1: {"ret": -1, "errno": 101}}, no_default_route=True),
    Case("local_source", steps("create tcp resolve 10.0.2.2 10.0.2.15 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="10.0.2.15")}),
    Case("non_local_source", steps("create tcp resolve 10.0.2.2 10.0.2.77 2000 destroy"),
         {1: {"ret": -1, "errno": 99}}),
    Case("source_of_other_family", steps("create tcp resolve 10.0.2.2 fec0::15 2000 destroy"), {},
         known=Known("pyrdmacm refuses a source and destination of different families before any "
                     "syscall (UsageError naming both); librdmacm lets the kernel refuse it",
                     1, {"ret": -1, "errno": 22}, {"ret": -1, "refused": "UsageError"}, unsent="RESOLVE_ADDR")),
    Case("bind_then_resolve", steps("create tcp bind 10.0.2.15 resolve 10.0.2.2 - 2000 wait info destroy"),
         {1: OK, 3: RESOLVED, 4: dict(ON_RXE0, local="10.0.2.15")}),
    Case("bound_source_ignored", steps("create tcp bind 10.0.2.15 resolve 10.0.2.2 10.0.2.77 2000 wait info destroy"),
         {2: OK, 3: RESOLVED, 4: {"local": "10.0.2.15"}}),
    Case("bind_port", steps("create tcp bind 10.0.2.15:7471 info destroy"),
         {2: {"local": "10.0.2.15", "src_port": 7471}}),
    Case("ipv6_own", steps("create tcp resolve fec0::15 - 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="fec0::15", peer="fec0::15")}),
    Case("ipv6_gateway", steps("create tcp resolve fec0::2 - 2000 wait info route 2000 wait destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="fec0::15"), 5: ROUTED}),
    Case("ipv6_link_local_zone", steps("create tcp resolve fe80::2%eth0 - 2000 wait info destroy"),
         {2: RESOLVED, 3: ON_RXE0}),
    Case("ipv6_link_local_no_zone", steps("create tcp resolve fe80::2 - 2000 destroy"), {},
         known=Known("a link-local destination without a zone is ambiguous on a multi-homed host; "
                     "pyrdmacm refuses it before the syscall and asks for fe80::...%netdev",
                     1, {}, {"ret": -1, "refused": "UsageError"}, unsent="RESOLVE_ADDR")),
    Case("resolve_twice", steps("create tcp resolve 10.0.2.2 - 2000 resolve 10.0.2.2 - 2000 wait destroy"),
         {1: OK, 3: RESOLVED},
         known=Known("the second resolve while the first is pending: the kernel says EINVAL; pyrdmacm's "
                     "state table says the same before the syscall (StateError, errno EINVAL)",
                     2, {"ret": -1, "errno": 22}, {"ret": -1, "errno": 22, "refused": "StateError"},
                     unsent="RESOLVE_ADDR")),
    Case("resolve_again_after_resolved", steps("create tcp resolve 10.0.2.2 - 2000 wait resolve 10.0.2.2 - 2000 destroy"),
         {2: RESOLVED},
         known=Known("resolve_addr on an id already resolved: EINVAL from the kernel, "
                     "from pyrdmacm's state table before the syscall",
                     3, {"ret": -1, "errno": 22}, {"ret": -1, "errno": 22, "refused": "StateError"},
                     unsent="RESOLVE_ADDR")),
    Case("destroy_before_event", steps("create tcp resolve 10.0.2.200 - 2000 destroy"), {1: OK, 2: OK}),
    Case("port_space_udp", steps("create udp resolve 10.0.2.15 - 2000 wait info destroy"), {2: RESOLVED, 3: ON_RXE0}),
    Case("port_space_ipoib", steps("create ipoib resolve 10.0.2.15 - 2000 wait destroy"),
         {2: {"event": "RDMA_CM_EVENT_ADDR_ERROR", "status": -22}}),  # PS_IPOIB needs InfiniBand
    Case("port_space_ib", steps("create ib resolve 10.0.2.15 - 2000 wait info destroy"), {2: RESOLVED, 3: ON_RXE0}),
    Case("sync_gateway", steps("sync create tcp resolve 10.0.2.2 - 2000 info route 2000 info destroy"),
         {1: OK, 2: dict(ON_RXE0, local="10.0.2.15", peer="10.0.2.2"), 3: OK}),
    Case("sync_nobody_answers", steps("sync create tcp resolve 10.0.2.200 - 500 destroy"),
         {1: {"ret": -1, "errno": 110}}),  # librdmacm's ERR(-status): the event's own errno, like ours
    Case("af_ib_gid", steps("create ib resolve gid:fe80::5054:ff:fe12:3456 - 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="fe80::5054:ff:fe12:3456")}),  # rxe0's GID 0
    Case("destroy_with_event_unacked", steps("create tcp resolve 10.0.2.15 - 2000 wait-noack destroy"),
         {2: RESOLVED}, timeout=8,
         known=Known("librdmacm's rdma_destroy_id waits until every event it reported is acked: here for "
                     "ever (the run is killed); pyrdmacm destroys at once and says so with an "
                     "UnackedEventsWarning", 3, {"hung": True}, {"ret": 0, "warning": "UnackedEventsWarning"})),
    # -- connections (loopback on rxe0, both ends in one process: see the module's docstring)
    Case("connect_establish_disconnect",
         steps(LISTENER + CLIENT + "connect 0x100001 wait-event CONNECT_REQUEST @r get-request accept 0x100002 "
               "wait-event CONNECT_RESPONSE @c establish wait-event ESTABLISHED @c disconnect "
               "wait-event DISCONNECTED @r disconnect wait-event DISCONNECTED @r destroy @c destroy @s destroy"),
         {2: called("listen"), 8: called("connect"), 9: event("CONNECT_REQUEST", on="@s", qp_num=0x100001, pd_len=56),
          10: called("accept"), 11: event("CONNECT_RESPONSE", on="@c", qp_num=0x100002, pd_len=196),
          12: called("establish"), 13: event("ESTABLISHED", on="@r"), 14: called("disconnect"),
          15: event("DISCONNECTED", on="@r"), 16: called("disconnect"), 17: event("DISCONNECTED", on="@c"),
          18: called("destroy_id"), 19: called("destroy_id"), 20: called("destroy_id")},
         timeout=CONNECTION_TIMEOUT),
    Case("accept_private_data_notify",
         steps(LISTENER + CLIENT + "connect 0x100011 68656c6c6f wait-event CONNECT_REQUEST @r get-request "
               "accept 0x100012 7372762d70726976617465 wait-event CONNECT_RESPONSE notify wait-event ESTABLISHED "
               "notify @c establish @c destroy @r destroy @s destroy"),
         {9: event("CONNECT_REQUEST", on="@s", qp_num=0x100011, pd_len=56, pd="68656c6c6f"),
          10: called("accept"),
          11: event("CONNECT_RESPONSE", on="@c", qp_num=0x100012, pd_len=196, pd="7372762d70726976617465"),
          12: called("notify"), 13: event("ESTABLISHED", on="@r"),
          14: {"call": "notify", "ret": -1, "errno": 106},  # EISCONN: established already
          15: called("establish")},
         timeout=CONNECTION_TIMEOUT),
    Case("reject_private_data",
         steps(LISTENER + CLIENT + "connect 0x100021 wait-event CONNECT_REQUEST @r get-request "
               "reject 7365727665722d66756c6c wait-event REJECTED @r destroy @c destroy @s destroy"),
         {10: called("reject"), 11: event("REJECTED", 28, on="@c", pd_len=148, pd="7365727665722d66756c6c")},
         timeout=CONNECTION_TIMEOUT),
    Case("ud_connect_accept",
         steps("@s create udp bind 10.0.2.15:7472 listen 8 @c create udp resolve 10.0.2.15:7472 - 2000 "
               "wait-event ADDR_RESOLVED route 2000 wait-event ROUTE_RESOLVED connect 0x100041 68656c6c6f "
               "wait-event CONNECT_REQUEST @r get-request accept 0x100042 6f6b wait-event ESTABLISHED "
               "@r destroy @c destroy @s destroy"),
         {9: event("CONNECT_REQUEST", on="@s", pd_len=180, pd="68656c6c6f"), 10: called("accept"),
          11: event("ESTABLISHED", on="@c", qp_num=0x100042, qkey=RDMA_UDP_QKEY, pd_len=136, pd="6f6b")},
         timeout=CONNECTION_TIMEOUT),
    Case("multicast_join_sendonly_leave",
         steps("create udp bind 10.0.2.15 join 239.1.1.1 wait-event MULTICAST_JOIN join 239.1.1.2 sendonly "
               "wait-event MULTICAST_JOIN leave 239.1.1.1 leave 239.1.1.2 destroy"),
         {2: called("join_multicast"), 3: event("MULTICAST_JOIN", on="", qp_num=0xFFFFFF, qkey=RDMA_UDP_QKEY),
          4: called("join_multicast"), 5: event("MULTICAST_JOIN", on="", qp_num=0xFFFFFF, qkey=RDMA_UDP_QKEY),
          6: called("leave_multicast"), 7: called("leave_multicast")},
         timeout=CONNECTION_TIMEOUT),
    Case("set_options",
         steps("@t create tcp set-reuseaddr set-afonly set-tos 104 set-ack-timeout 14 bind 10.0.2.15:7473 destroy "
               "@u create udp set-ack-timeout 14 destroy"),
         {1: called("set_option"), 2: called("set_option"), 3: called("set_option"), 4: called("set_option"),
          5: called("bind_addr")},
         known=Known("ACK_TIMEOUT on a datagram id: the kernel refuses it (EINVAL: an RC QP's timeout); "
                     "pyrdmacm's state table refuses it before the syscall (StateError, errno EINVAL)",
                     8, {"ret": -1, "errno": 22}, {"ret": -1, "errno": 22, "refused": "StateError"},
                     unsent="SET_OPTION")),
    # what TOS and ACK_TIMEOUT do shows in the QP attributes: the RTR address handle's traffic
    # class (both ends: the REQ carries the path) and the RTS timeout
    Case("init_qp_attr_after_connect",
         steps(LISTENER + "@c create tcp set-tos 104 set-ack-timeout 14 resolve 10.0.2.15:7471 - 2000 "
               "wait-event ADDR_RESOLVED route 2000 wait-event ROUTE_RESOLVED connect 0x100051 "
               "wait-event CONNECT_REQUEST @r get-request init-qp-attr RTR accept 0x100052 "
               "wait-event CONNECT_RESPONSE @c init-qp-attr INIT init-qp-attr RTR init-qp-attr RTS establish "
               "wait-event ESTABLISHED @r init-qp-attr RTS @c destroy @r destroy @s destroy"),
         {12: called("init_qp_attr", mask=0x129181, qp_state=2, dest_qp_num=0x100051, ah_traffic_class=104),
          15: called("init_qp_attr", qp_state=1),
          16: called("init_qp_attr", mask=0x129181, qp_state=2, dest_qp_num=0x100052,
                     ah_dgid="::ffff:10.0.2.15", ah_traffic_class=104),
          17: called("init_qp_attr", mask=0x12E01, qp_state=3, timeout=14, retry_cnt=5, rnr_retry=7),
          19: event("ESTABLISHED", on="@r"), 20: called("init_qp_attr", qp_state=3)},
         timeout=CONNECTION_TIMEOUT),
    Case("remote_host", steps("create tcp resolve 10.9.0.1 - 2000 wait info route 2000 wait info destroy"),
         {2: RESOLVED, 3: dict(ON_RXE0, local="10.9.0.2", peer="10.9.0.1"), 5: ROUTED}, topology="pair"),
    Case("second_nic", steps("create tcp resolve 10.1.0.2 - 2000 wait info destroy"),
         {2: RESOLVED, 3: {"device": "rxe1", "local": "10.1.0.15"}}, topology="multihomed"),
    Case("two_rdma_nics_one_subnet", steps("create tcp resolve 10.3.0.2 - 2000 wait info destroy"),
         {2: RESOLVED}, topology="multihomed"),
    Case("device_hidden_from_libibverbs", steps("create tcp resolve 10.1.0.2 - 2000 wait destroy"), {},
         topology="multihomed", hide_device="rxe1",
         known=Known("the kernel binds rxe1, whose uverbs node this 'container' lacks: librdmacm cannot "
                     "map the device and rewrites ADDR_RESOLVED into ADDR_ERROR with status -1 (EPERM); "
                     "pyrdmacm needs no uverbs node, names rxe1 from sysfs and reports the kernel's event",
                     2, {"event": "RDMA_CM_EVENT_ADDR_ERROR", "status": -1}, RESOLVED)),
    Case("device_hidden_from_libibverbs_sync", steps("sync create tcp resolve 10.1.0.2 - 2000 destroy"),
         {}, topology="multihomed", hide_device="rxe1",
         known=Known("in sync mode librdmacm's status -1 surfaces as errno 1, EPERM, for a failure that is "
                     "its own; pyrdmacm resolves and reports the device", 1, {"ret": -1, "errno": 1}, OK)),
    Case("nic_without_rdma", steps("create tcp resolve 10.5.0.2 - 2000 wait destroy"),
         {}, topology="multihomed"),
]


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    return parity.build_driver(tmp_path_factory.mktemp("parity") / "librdmacm_case")


def _ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def record(case: Case, lib: Dict[str, Any], py: Dict[str, Any], problems: List[str]) -> None:
    """Append the row's outcome to $LAB_OUT/parity.jsonl (the table of the closing note)."""
    out = os.environ.get("LAB_OUT")
    if not out:
        return
    row = {"case": case.name, "kernel": os.uname().release, "steps": " ".join(case.steps),
           "librdmacm": lib["steps"], "librdmacm_hung": bool(lib.get("hung")), "pyrdmacm": py["steps"], "known": case.known.why if case.known else None,
           "problems": problems}
    with open(os.path.join(out, "parity.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\n")


# A mount namespace whose /dev/infiniband holds rdma_cm and every uverbs node but $HIDE's,
# as in a container given only some devices.
CONTAINER = """
set -e
mount -t tmpfs none /dev/infiniband
for d in /sys/class/misc/rdma_cm /sys/class/infiniband_verbs/uverbs*; do
    [ "$(cat "$d/ibdev" 2>/dev/null)" = "$HIDE" ] && continue
    IFS=: read -r major minor < "$d/dev"
    mknod "/dev/infiniband/$(basename "$d")" c "$major" "$minor"
done
exec "$@"
"""


def run_case(case: Case, driver: Path, tmp: Path):
    def wrap(argv):
        if not case.hide_device:
            return argv
        return ["unshare", "-m", "sh", "-c", CONTAINER, "sh", *argv]

    env = dict(os.environ, HIDE=case.hide_device or "")
    removed = ""
    if case.no_default_route:
        removed = _ip("-4", "route", "show", "default").strip()
        if removed:
            _ip("route", "del", "default")
    try:
        lib, lib_cmds = parity.run_traced(wrap([str(driver), *case.steps]), str(tmp / "lib.strace"),
                                          case.timeout, env)
        py, py_cmds = parity.run_traced(wrap([sys.executable, str(PY_CASE), *case.steps]), str(tmp / "py.strace"),
                                        case.timeout, env)
    finally:
        if removed:
            _ip("route", "add", *removed.split())
    return lib, parity.normalise(lib_cmds), py, parity.normalise(py_cmds)


def _check_expect(report: Dict[str, Any], expect: Dict[int, Dict[str, Any]], who: str) -> List[str]:
    problems = []
    for index, fields in expect.items():
        got = report["steps"][index] if index < len(report["steps"]) else {}
        for key, value in fields.items():
            if got.get(key) != value:
                problems.append("%s step %d %s: expected %r, got %r" % (who, index, key, value, got.get(key)))
    return problems


def check_case(case: Case, lib, lib_cmds, py, py_cmds) -> List[str]:
    problems = _check_expect(lib, case.expect, "librdmacm") + _check_expect(py, case.expect, "pyrdmacm")
    known = case.known
    if known is None:
        problems += ["%s hung" % r["impl"] for r in (lib, py) if r.get("hung")]
        return problems + parity.compare_reports(lib, py) + parity.compare(lib_cmds, py_cmds)
    lib_expect = dict(known.librdmacm)
    if lib_expect.pop("hung", False) and not lib.get("hung"):
        problems.append("librdmacm was expected to hang at step %d, and did not" % known.step)
    if py.get("hung"):
        problems.append("pyrdmacm hung")
    problems += _check_expect(lib, {known.step: lib_expect}, "librdmacm (known difference)")
    problems += _check_expect(py, {known.step: known.pyrdmacm}, "pyrdmacm (known difference)")
    # Apart from the step where they part, the two agree, and pyrdmacm writes nothing librdmacm does not.
    others = [i for i in range(max(len(lib["steps"]), len(py["steps"]))) if i != known.step]
    problems += parity.compare_reports({"steps": [lib["steps"][i] for i in others if i < len(lib["steps"])]},
                                       {"steps": [py["steps"][i] for i in others if i < len(py["steps"])]})
    if known.unsent:
        sent = [c for c in lib_cmds if c["cmd"] == known.unsent]
        lib_cmds = [c for c in lib_cmds if c is not sent[-1]] if sent else lib_cmds
    problems += parity.compare(lib_cmds, py_cmds)
    return problems


def check(case: Case, driver: Path, tmp_path: Path) -> None:
    lib, lib_cmds, py, py_cmds = run_case(case, driver, tmp_path)
    problems = check_case(case, lib, lib_cmds, py, py_cmds)
    record(case, lib, py, problems)
    assert not problems, "\n".join(problems + ["librdmacm: %s" % lib, "pyrdmacm: %s" % py])


def rows(topology: str):
    return pytest.mark.parametrize("case", [c for c in CASES if c.topology == topology], ids=lambda c: c.name)


@rows("single")
@pytest.mark.kernel(suites=PARITY_SUITES)
def test_parity_single(case, driver, tmp_path):
    check(case, driver, tmp_path)


@rows("pair")
@pytest.mark.kernel(topology="pair", suites=PARITY_SUITES)
def test_parity_pair(case, driver, tmp_path):
    check(case, driver, tmp_path)


@rows("multihomed")
@pytest.mark.kernel(topology="multihomed", suites=PARITY_SUITES)
def test_parity_multihomed(case, driver, tmp_path):
    check(case, driver, tmp_path)
