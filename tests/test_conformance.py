"""The conformance runner's pure parts: version-dependent expectations, the CLI's refusals."""

import errno

from pyrdmacm import cli, conformance


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
