"""The conformance suite's pure parts (version-dependent expectations, the CLI's refusals,
KTAP), and the cases that the fake kernel models, run against it."""

import errno

import pytest

from pyrdmacm.abi import structs as _structs
from pyrdmacm import abi, cli, conformance
from pyrdmacm.conformance import cases_commands, raw
from pyrdmacm.testing import FakeFabric, FakeKernel
from pyrdmacm.wire import COMMAND


def test_expectations_by_kernel_version():
    steps = [((0, 0), errno.EINVAL), ((6, 17), errno.ENOENT)]
    assert conformance.expected_errno(steps, (6, 1)) == errno.EINVAL
    assert conformance.expected_errno(steps, (6, 16)) == errno.EINVAL
    assert conformance.expected_errno(steps, (6, 17)) == errno.ENOENT
    assert conformance.expected_errno(steps, (7, 2)) == errno.ENOENT
    assert conformance.expected_errno(errno.EFAULT, (7, 2)) == errno.EFAULT


def test_kernel_version_parsing():
    assert conformance.kernel_version("6.12.117+deb13-amd64") == (6, 12)
    assert conformance.kernel_version("7.2.13+deb14-amd64") == (7, 2)
    assert conformance.kernel_version("weird") == (0, 0)


def test_case_names_are_unique():
    names = [c.name for c in conformance.CASES]
    assert len(names) == len(set(names)) >= 30


def test_unknown_case_is_a_usage_error(capsys):
    assert cli.main(["conformance", "--case", "no_such_case"]) == cli.EXIT_USAGE
    assert "unknown case no_such_case" in capsys.readouterr().err


def test_no_device_node_exit_4(monkeypatch, capsys):
    monkeypatch.setenv("PYRDMACM_DEVICE", "/nonexistent/rdma_cm")
    assert cli.main(["conformance"]) == cli.EXIT_NODEV
    assert "rdma_cm" in capsys.readouterr().err


def test_ktap_output_has_a_plan_a_line_per_case_and_directives():
    rows = [conformance.Result("a", "what", "EINVAL", "EINVAL", True),
            conformance.Result("b", "what", "ENOENT", "EINVAL", False, "the fd still works"),
            conformance.Result("c", "what", "ok", "not run", False, "needs an IPv4 address")]
    out = conformance.ktap(rows, release="6.1.0-test").splitlines()
    assert out[0] == "KTAP version 1" and out[2] == "1..3"
    assert "ok 1 a" in out and "not ok 2 b" in out
    assert "# b: expected ENOENT, observed EINVAL; the fd still works" in out
    assert "ok 3 c # SKIP needs an IPv4 address" in out
    assert out[-1] == "# totals: pass:1 fail:1 skip:1"


def test_known_kernel_bugs_are_data_with_the_versions_seen():
    bug = conformance.KNOWN_BUGS["path_mig_without_alternate"]
    assert conformance.known_bug(bug.name, (5, 10)) is bug
    assert conformance.known_bug(bug.name, (6, 1)) is None and conformance.known_bug(bug.name, (7, 2)) is None
    assert bug.seen_on < bug.not_seen_from
    for name in ("rej_in_req_sent_keeps_the_req", "rej_in_rep_sent_keeps_the_rep"):  # no kernel tried is without them
        every = conformance.KNOWN_BUGS[name]
        assert every.not_seen_from is None and all(conformance.known_bug(every.name, v) is every
                                                   for v in ((5, 10), (6, 1), (6, 12), (7, 2)))


def test_every_case_has_a_unique_name_and_an_expectation():
    names = [c.name for c in conformance.CASES]
    assert len(names) == len(set(names))
    for c in conformance.CASES:
        assert c.what and (isinstance(c.expect, (int, str)) or all(len(step) == 2 for step in c.expect))


def test_cli_lists_the_cases_without_a_device(capsys):
    from pyrdmacm import cli

    assert cli.main(["conformance", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == [c.name for c in conformance.CASES]
    assert cli.main(["conformance", "--list", "--case", "nonesuch"]) == 3  # bad input
    capsys.readouterr()
    for flag in (["--ktap"], ["--local", "10.0.2.15"]):  # for a run: not ignored silently with --list
        assert cli.main(["conformance", "--list", *flag]) == 3
        out, err = capsys.readouterr()
        assert out == "" and err == ("pyrdmacm: --list prints the cases (with --json, as JSON); %s is for a run of "
                                     "them: give one or the other\n" % flag[0])


def test_the_kernel_log_lines_that_fail_a_case():
    bad = conformance.KernelLog.BAD
    for line in ("BUG: kernel NULL pointer dereference, address: 0000000000000008", "kernel BUG at mm/slub.c:1!",
                 "WARNING: CPU: 0 PID: 1 at drivers/infiniband/core/cma.c:1 x", "refcount_t: underflow; use-after-free.",
                 "list_del corruption. prev->next should be ...", "UBSAN: shift-out-of-bounds in x.c:1"):
        assert bad.search(line), line
    for line in ("rdma_rxe: loaded", "ucma_write: process 181 (python) changed security contexts after opening"):
        assert not bad.search(line), line


def test_the_short_replies_are_one_byte_below_the_abi_layers_smallest():
    assert cases_commands.EVENT_MIN_OUT == _structs.MIN_REPLY["rdma_ucm_event_resp"]
    assert cases_commands.QUERY_ADDR_MIN_OUT == _structs.MIN_REPLY["rdma_ucm_query_addr_resp"]
    assert cases_commands.QUERY_ROUTE_MIN_OUT == _structs.MIN_REPLY["rdma_ucm_query_route_resp"]
    assert raw.REPLY_SIZE == max(c.out for c in COMMAND.values())


#: the cases neither fake runs: a second process's credentials (one process here), and 5
#: rounds of 6 s of watching for the clients' ends (the kernel's time, not the fakes')
NEITHER = {"other_credentials": "the writer's credentials: a fake is one process's",
           "regression_listener_destroyed_with_requests": "30 s of watching (a kernel regression's pace)"}
#: what the lone fake cannot answer: a connection request needs a peer (alone, every CONNECT
#: is rejected at once), and the backlog case its REQ's retry
NEEDS_A_PEER = ("accept_private_data_197", "accept_uid_zero", "accept_in_short", "reject_reason_5",
                "reject_data_149", "reject_consumer", "listen_backlog_one")


def test_the_cases_the_lone_fake_models_pass_on_it():
    """The raw writer writes through the device it is given: here a fake of a 6.1 kernel
    (no RESOLVE_IB_SERVICE yet), which the run closes.  Every case passes but those that need
    a peer's REQ or another process."""
    fake = FakeKernel(max_cmd=abi.UserCmCmd.JOIN_MCAST)
    cases = [c.name for c in conformance.CASES if c.name not in NEITHER and c.name not in NEEDS_A_PEER]
    results = conformance.run(local="10.0.0.1", only=cases, release="6.1", device=fake)
    assert [r.case for r in results] == cases
    assert [(r.case, r.expected, r.observed) for r in results if not r.passed] == []
    C = abi.UserCmCmd
    assert fake.closed and {C.CREATE_ID, C.DESTROY_ID, C.GET_EVENT, C.SET_OPTION} <= {cmd for cmd, *_ in fake.commands}


def test_the_cases_pass_on_one_host_of_the_fabric():
    """On a fabric's host (a 7.2 kernel's table) the connection cases run too: the host's
    listener takes the REQs of its own clients.  Not the backlog case: the fabric sends a REQ
    again after 20 ms, the kernel after seconds, and the case reads within half a second."""
    with FakeFabric() as fabric:
        host = fabric.host("10.0.0.1")
        cases = [c.name for c in conformance.CASES if c.name not in NEITHER and c.name != "listen_backlog_one"]
        results = conformance.run(local="10.0.0.1", only=cases, release="7.2", device=host())
    assert [r.case for r in results] == cases
    assert [(r.case, r.expected, r.observed) for r in results if not r.passed] == []


def test_the_state_rules_of_the_cases_are_the_kernel_rules_table():
    """The cases that check a state rule expect what pyrdmacm.kernel_rules says."""
    from pyrdmacm import kernel_rules
    from pyrdmacm.abi import RdmaCmState as S

    by_name = {c.name: c.expect for c in conformance.CASES}
    C = abi.UserCmCmd
    assert by_name["set_option_reuseaddr_bound"] == kernel_rules.refusal(C.SET_OPTION, S.ADDR_BOUND, "REUSEADDR clear")
    assert by_name["listen_twice"] == kernel_rules.rule_for(C.LISTEN).errno == errno.EINVAL
    assert by_name["disconnect_never_connected"] == errno.EINVAL
    assert by_name["id_of_another_fd"] == kernel_rules.ANOTHER_FDS_ID == errno.EINVAL


def test_a_case_that_raises_is_an_error_row_and_the_fd_is_checked_after_it(monkeypatch):
    def broken(ctx):
        raise OSError(errno.ETIMEDOUT, "no ROUTE_RESOLVED within 3 s")

    case = conformance.Case("broken", "a case whose set-up fails", errno.EINVAL, broken)
    monkeypatch.setattr(conformance.runner, "CASES", [case])
    (row,) = conformance.run(local="10.0.0.1", device=FakeKernel())
    assert (row.observed, row.passed) == ("error", False)
    assert "set-up failed" in row.detail


@pytest.mark.parametrize("name", [c.name for c in conformance.CASES if c.needs_local])
def test_a_case_that_needs_an_address_does_not_run_without_one(monkeypatch, name):
    monkeypatch.setattr(conformance.runner, "find_local_ipv4", lambda: None)
    (row,) = conformance.run(only=[name], device=FakeKernel())
    assert (row.observed, row.passed) == ("not run", False)
