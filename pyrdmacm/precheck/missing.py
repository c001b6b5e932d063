"""What the host lacks for a resolution -- an RDMA device, a GID for the source, an rdma_cm
node that opens -- recorded in the prediction with what to do about it; and what a failed
route lookup means."""

from __future__ import annotations

import errno as _errno
from typing import Optional, Sequence

from ..devices import Device, rdma_netdevs
from ..errors import errno_name
from .model import Checks, Missing
from .network import Net

__all__ = ["no_device", "no_device_hint", "route_hint", "check_device_node", "rdma_cm_node"]


def no_device(ck: Checks, netdev: Optional[str]) -> None:
    """No RDMA device is visible at all: the lack, and which driver to load."""
    ck.say("device: none: no RDMA device is visible in this network namespace")
    load = "`rdma link add rxe0 type rxe netdev %s`" % netdev if netdev else "an InfiniBand HCA's driver"
    ck.lack("device", _errno.ENODEV, "no RDMA device is visible", netdev=netdev,
            hint="no /sys/class/infiniband and no RDMA netlink: load the RDMA driver "
            "(e.g. %s), or pass the device into this container/namespace" % load)


def no_device_hint(netdev: str, devs: Sequence[Device], net: Net, version: int) -> str:
    """What to do when ``netdev`` has no RDMA device: the netdevs that have one, with their addresses."""
    names = sorted(rdma_netdevs(devices=devs))
    if not names:
        return "no netdev of this namespace has an RDMA device: add one (`rdma link add ...`) or move " \
               "the RDMA device into this namespace"
    described = []
    for n in names:
        link = net.by_name.get(n)
        addrs = net.addr_text(link.index, version) if link else ""
        described.append("%s (%s)" % (n, addrs) if addrs else n)
    return "%s has no RDMA device; the netdevs with one are: %s -- give a source address (one of theirs) " \
           "or route the destination through one of them" % (netdev, ", ".join(described))


def route_hint(err: int, bound: int) -> str:
    """What a failed route lookup's errno means (``bound``: the lookup was restricted to a netdev)."""
    base = {
        _errno.ENETUNREACH: "no route matches in this network namespace (see `ip route get` and `ip rule`)",
        _errno.EHOSTUNREACH: "an `unreachable` route matches the destination",
        _errno.EACCES: "a `prohibit` route matches the destination",
        _errno.EINVAL: "a `blackhole` route matches the destination",
    }.get(err, "the routing tables refuse this destination")
    if bound:
        base += " (the lookup is restricted to the bound netdev)"
    return base


def check_device_node(ck: Checks) -> None:
    """The rdma_cm device node, tried once per prediction: listed as missing when it does not open."""
    if not any(m.what == "rdma_cm" for m in ck.missing):
        lack = rdma_cm_node()
        if lack is not None:
            ck.missing.append(lack)


def rdma_cm_node(path: Optional[str] = None) -> Optional[Missing]:
    """None when the rdma_cm device node opens as an EventChannel would open it; else what is wrong."""
    from ..core.device import KernelDevice
    from ..errors import DeviceNodeError

    try:
        KernelDevice(path).close()
    except DeviceNodeError as e:
        text = str(e.args[1]) if len(e.args) > 1 else str(e)
        message = text.split(": %s " % errno_name(e.errno or 0))[0]
        return Missing("rdma_cm", e.errno or _errno.ENODEV, message, e.hint or "")
    return None
