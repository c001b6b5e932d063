"""The core's behavioural suite (tests/cm_behaviour.py) against the fake kernel."""

import errno

import pytest

from cm_behaviour import *  # noqa: F401,F403
from cm_behaviour import World
from pyrdmacm.fake import FakeDevice, FakeKernel, FakeNet


class LegacyFakeKernel(FakeKernel):
    legacy = True  # the channel then speaks BIND_IP / RESOLVE_IP / QUERY_ROUTE


@pytest.fixture(params=["current", "legacy"])
def world(request):
    net = FakeNet()
    kernel = LegacyFakeKernel if request.param == "legacy" else FakeKernel
    return World(
        transport=lambda: kernel(net),
        local="10.0.0.1",
        peer="10.0.0.2",
        silent="10.0.0.99",
        no_route="192.0.2.1",
        no_route_errno=errno.ENETUNREACH,
        not_local="10.0.0.77",
        device=FakeDevice().name,
        slack=0.5,
    )
