"""The network facts a prediction reads: :class:`Net` (the netdevs of this namespace and
their addresses, from :mod:`pyrdmacm.netlink` or a test's stand-in), zones as netdevs, the
addresses predict() takes, and the netdevs that share the destination's subnet."""

from __future__ import annotations

import errno as _errno
import ipaddress
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from ..addr import AF_IB, parse_address
from ..addr import Address as SockAddr
from ..devices import Device, rdma_netdevs
from ..errors import PrecheckError, UsageError
from .model import Checks, IPAddress

if TYPE_CHECKING:  # pragma: no cover
    from ..netlink import IfAddress, Link

__all__ = ["ARPHRD_INFINIBAND", "ARPHRD_ETHER", "as_address", "as_ip", "plain", "any_or_loopback", "is_link_local6",
           "Net", "zone_index", "same_subnet"]

#: ``ARPHRD_*`` (linux/if_arp.h): a netdev's link type
ARPHRD_INFINIBAND = 32
ARPHRD_ETHER = 1


def as_address(value: Any, what: str) -> SockAddr:
    """``value`` in any form :func:`~pyrdmacm.addr.parse_address` takes (ports are ignored:
    they do not change the route); a missing zone is refused later, in predict's words."""
    if isinstance(value, SockAddr):
        return value
    try:
        return parse_address(value, require_zone=False)
    except UsageError as e:
        raise UsageError("%s: %s" % (what, e)) from None


def as_ip(addr: SockAddr) -> IPAddress:
    """The IP of an AF_INET / AF_INET6 address, an IPv6 zone kept as its scope id."""
    if addr.family == AF_IB or addr.ip.version == 4 or not addr.scope_id:
        return addr.ip
    return ipaddress.IPv6Address("%s%%%d" % (addr.ip, addr.scope_id))


def plain(addr: IPAddress) -> IPAddress:
    """``addr`` without an IPv6 zone."""
    return type(addr)(addr.packed)


def any_or_loopback(ip: IPAddress) -> bool:
    """cma.c's ``cma_any_addr()``: the wildcard or a loopback address (127.0.0.0/8, ::1)."""
    if ip.is_unspecified:
        return True
    if ip.version == 4:
        return ip.packed[0] == 127
    return ip == ipaddress.IPv6Address("::1")


def is_link_local6(ip: IPAddress) -> bool:
    """An IPv6 link-local address (fe80::/10): it needs a zone."""
    return ip.version == 6 and ip.is_link_local


class Net:
    """The network facts predict() needs, fetched once from a netlink-like provider."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.links: List["Link"] = list(provider.links())
        self.by_index: Dict[int, "Link"] = {link.index: link for link in self.links}
        self.by_name: Dict[str, "Link"] = {link.name: link for link in self.links}
        self.addrs: Dict[int, Tuple["IfAddress", ...]] = dict(provider.addresses())

    def name(self, ifindex: Optional[int]) -> str:
        """The netdev's name ("if7" for one not visible, "?" for none)."""
        if ifindex is None:
            return "?"
        link = self.by_index.get(ifindex)
        return link.name if link else "if%d" % ifindex

    def owners(self, ip: IPAddress) -> List["Link"]:
        """Netdevs with ``ip`` as a usable local address, in ifindex order."""
        out = []
        for link in self.links:
            for a in self.addrs.get(link.index, ()):
                if plain(a.ip) == ip and a.usable:
                    out.append(link)
                    break
        return out

    def addr_text(self, ifindex: int, version: int) -> str:
        """The netdev's addresses of IP ``version``, with their prefixes, as text."""
        return ", ".join(str(a.interface) for a in self.addrs.get(ifindex, ()) if a.ip.version == version)


def zone_index(z: Any, net: Net, what: str) -> Optional[int]:
    """The ifindex a zone (an ifindex, its digits, or a netdev name) names; None for no zone."""
    if z is None or z == "" or z == 0:
        return None
    if isinstance(z, int) or (isinstance(z, str) and z.isascii() and z.isdigit()):
        idx = int(z)
        if idx not in net.by_index:
            raise PrecheckError(
                _errno.ENODEV, "%s: zone %d names no netdev of this network namespace" % (what, idx),
                hint="the kernel looks the zone up as an ifindex (see `ip link`)",
            )
        return idx
    link = net.by_name.get(str(z))
    if link is None:
        raise UsageError("%s: zone %r names no netdev of this network namespace (see `ip link`)" % (what, z))
    return link.index


def same_subnet(ck: Checks, net: Net, devs: List[Device], dst_p: IPAddress, picked: str) -> None:
    """A warning when several RDMA netdevs are on the destination's subnet: the routing table
    alone picks ``picked``."""
    rdma_names = rdma_netdevs(devices=devs)
    v = dst_p.version
    same: List[str] = []
    for link in net.links:
        if link.is_loopback or link.name not in rdma_names:
            continue
        for a in net.addrs.get(link.index, ()):
            if a.ip.version == v and dst_p in a.interface.network and a.interface.network.prefixlen < a.ip.max_prefixlen:
                same.append("%s (%s)" % (link.name, a.interface))
                break
    if len(same) > 1:
        ck.warn("%d RDMA netdevs are on %s's subnet: %s; the routing table picks %s -- give a source "
                "address (an address of the netdev you mean) to choose" % (len(same), dst_p, ", ".join(same), picked),
                _errno.ENOTUNIQ)
