"""The connection manager's behavioural suite (tests/behaviour.py's connections():
conn_behaviour.py and its kin) against the real rdma_cm.

Both ends on the lab guest's own address (10.0.2.15, rxe0): the passive and the active
side are two channels of one host, and the IB CM on rxe0 runs both halves of every
exchange (REQ, REP, RTU, REJ, DREQ, DREP, SIDR) as it does between two hosts.
"""

import os

import pytest

from behaviour import connections, suite, suite_tests
from conn_behaviour import Link
from pyrdmacm.core.device import KernelDevice

pytestmark = pytest.mark.kernel


def _kernel_version():
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


@pytest.fixture
def link():
    return Link(server_transport=KernelDevice, client_transport=KernelDevice, server_ip="10.0.2.15",
                client_ip="10.0.2.15", timewait=10.0, kernel=_kernel_version())


class TestRealKernel(suite(*connections())):
    pass


def test_every_connection_test_runs_in_this_tier():
    assert suite_tests(*connections()) <= {n for n in dir(TestRealKernel) if n.startswith("test_")}
