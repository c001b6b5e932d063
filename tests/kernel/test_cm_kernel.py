"""The core's behavioural suite (tests/behaviour.py's core(): cm_behaviour.py and its kin) against
the real rdma_cm.

Runs in the kernel lab's single topology: rxe0 on eth0 10.0.2.15/24, the user
network's gateway 10.0.2.2 answering ARP, nobody at 10.0.2.200.  For the
no-route case the module deletes the IPv4 default route (and puts it back):
then 198.51.100.1 has no route at all and the kernel answers ENETUNREACH
from write(), as the lab recipe recorded.
"""

import errno
import subprocess

import pytest

from behaviour import core, suite, suite_tests
from cm_behaviour import World
from pyrdmacm.core.device import KernelDevice

pytestmark = pytest.mark.kernel


def _ip(*args):
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


class LegacyDevice(KernelDevice):
    """The real device, spoken to with the pre-3.11 commands (BIND_IP, RESOLVE_IP, QUERY_ROUTE),
    which current kernels still accept: the fallback path is tested on a real kernel."""

    legacy = True


@pytest.fixture(scope="module", params=["current", "legacy"])
def world(request):
    default = _ip("-4", "route", "show", "default").strip()
    if default:
        _ip("route", "del", "default")
    try:
        yield World(
            transport=LegacyDevice if request.param == "legacy" else KernelDevice,
            local="10.0.2.15",
            peer="10.0.2.2",
            silent="10.0.2.200",
            no_route="198.51.100.1",
            no_route_errno=errno.ENETUNREACH,
            not_local="10.0.2.77",
            device="rxe0",
        )
    finally:
        if default:
            _ip("route", "add", *default.split())


def test_abi_version_comes_from_netlink_and_names_the_node(tmp_path):
    import os
    import stat

    from pyrdmacm.core import device as _device
    from pyrdmacm import netlink
    from pyrdmacm.errors import DeviceNodeError

    nl = _device.chardev_via_netlink()
    assert nl is not None, "RDMA netlink did not answer GET_CHARDEV"
    st = os.stat(_device.DEFAULT_PATH)
    assert nl == ((os.major(st.st_rdev), os.minor(st.st_rdev)), "rdma_cm", 4)
    assert _device.read_abi_version_sysfs() == 4
    info = netlink.get_chardev("rdma_cm")  # pyroute2's decoding of the same reply agrees
    assert (info.dev, info.name, info.abi) == nl
    assert _device.chardev_via_netlink("no_such_kind") is None
    dev = _device.KernelDevice()
    assert (dev.abi_version, dev.abi_source) == (4, "netlink")
    dev.close()
    # a node at the path that is not the kernel's rdma_cm (here: /dev/null's numbers)
    node = tmp_path / "rdma_cm"
    os.mknod(str(node), stat.S_IFCHR | 0o666, os.makedev(1, 3))
    with pytest.raises(DeviceNodeError, match="stale"):
        _device.KernelDevice(str(node))


class TestRealKernel(suite(*core())):
    """Every test of the behavioural suites, against the real rdma_cm."""


def test_every_behavioural_test_runs_in_this_tier():
    assert all(suite_tests(m) for m in core()) and suite_tests(*core()) <= set(dir(TestRealKernel))


def test_af_ib_on_roce_binds_the_wildcard_resolves_and_has_no_route():
    """AF_IB on a RoCE port (the lab's Soft-RoCE; 5.10 and 7.2 alike): a source GID binds no
    port (ENODEV), the wildcard GID binds, an AF_IB destination resolves to the device, and
    its route has no netdev to go over (ENODEV): AF_IB connections need an InfiniBand port.
    A destination no port has a GID of its prefix for is refused (ENODEV) with the id left
    bound.  The refusals say so."""
    from pyrdmacm import CmId, EventChannel
    from pyrdmacm.abi import CmEventType as E
    from pyrdmacm.abi import PortSpace
    from pyrdmacm.addr import Address
    from pyrdmacm.errors import KernelError, StateError
    from pyrdmacm.state import State

    gid = "::ffff:10.0.2.15"  # rxe0's RoCE v2 GID of 10.0.2.15
    with EventChannel() as ch:
        for ps in (PortSpace.IB, PortSpace.TCP):
            with pytest.raises(KernelError) as e:
                CmId(ch, ps).bind_addr(Address.ib(gid, port=7471, port_space=ps))
            assert e.value.errno == errno.ENODEV and "InfiniBand port" in str(e.value)
            any_ = CmId(ch, ps)
            any_.bind_addr(Address.ib("::", port=7471, port_space=ps))
            any_.listen()
            cm = CmId(ch, ps)
            cm.resolve_addr(Address.ib(gid, port=7471, port_space=ps), timeout_ms=2000)
            ev = ch.get_event(5)
            assert ev is not None and ev.event is E.ADDR_RESOLVED and ev.status == 0, ev
            ev.ack()
            assert cm.device is not None and cm.device.name == "rxe0"
            with pytest.raises(KernelError) as e:
                cm.resolve_route(2000)
            assert e.value.errno == errno.ENODEV and "InfiniBand only" in str(e.value)
            any_.destroy()
            cm.destroy()
            # a destination of a prefix no port has a GID of: ENODEV in the write, after the
            # kernel bound the id to the wildcard GID, which it keeps
            far = CmId(ch, ps)
            with pytest.raises(KernelError) as e:
                far.resolve_addr(Address.ib("2001:db8::1", port=7471, port_space=ps), timeout_ms=2000)
            assert e.value.errno == errno.ENODEV and "subnet prefix" in str(e.value)
            assert far.state is State.ADDR_BOUND and far.query_addr().src.port != 0
            with pytest.raises(StateError):
                far.bind_addr(Address.ib("::", port_space=ps))
            far.destroy()
