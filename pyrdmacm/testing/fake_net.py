"""Who is where, for the fake kernels: RDMA devices, local addresses, peers, routes -- and the
figures the lab's Soft-RoCE gave, which the fakes answer with.

A :class:`FakeNet` is the network as one host's kernel sees it: its local addresses, each on
a :class:`FakeDevice`; the peers that answer ARP; the destinations without a route; the
source the routing tables pick for each family.  Addresses are strings, for brevity.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any, Dict, Set

__all__ = ["FakeDevice", "FakeNet", "UDP_QKEY", "PATH_MTU_1024", "SGID_INDEX", "HOP_LIMIT", "DEFAULT_TIMEOUT",
           "PACKET_LIFETIME", "ACCESS_REMOTE_WRITE", "ACCESS_REMOTE_READ", "ACCESS_REMOTE_ATOMIC"]

#: ``RDMA_UDP_QKEY``: the qkey of PS_UDP ids (``cma_set_default_qkey``) and of every SIDR REP of an IP id
UDP_QKEY = 0x01234567
#: ``IB_ACCESS_REMOTE_WRITE``, ``_READ``, ``_ATOMIC``
ACCESS_REMOTE_WRITE, ACCESS_REMOTE_READ, ACCESS_REMOTE_ATOMIC = 2, 4, 8
#: What the lab's rxe gave INIT_QP_ATTR (cm-notes.md section 1): IB MTU 1024 (3) on a 1500-byte
#: netdev, the RoCEv2 GID of an IPv4 address at index 1, hop limit 64, RTS timeout 19
PATH_MTU_1024, SGID_INDEX, HOP_LIMIT, DEFAULT_TIMEOUT = 3, 1, 64, 19
#: the packet life time of the fake's RoCE path records (``CMA_IBOE_PACKET_LIFETIME``)
PACKET_LIFETIME = 16


@dataclass
class FakeDevice:
    name: str = "fake0"
    index: int = 1
    node_guid: int = 0x0002C9030000ABCD
    port_num: int = 1
    pkey: int = 0xFFFF
    link_layer: str = "Ethernet"  # or "InfiniBand"
    netdev: str = "eth0"


@dataclass
class FakeNet:
    """Who is where.  Addresses are strings for brevity."""

    local: Dict[str, FakeDevice] = field(
        default_factory=lambda: {"10.0.0.1": FakeDevice(), "fd00::1": FakeDevice()}
    )
    peers: Set[str] = field(default_factory=lambda: {"10.0.0.2", "fd00::2"})
    no_route: Set[str] = field(default_factory=lambda: {"192.0.2.1"})
    #: destination -> the source the routing tables pick for it
    default_src: Dict[int, str] = field(default_factory=lambda: {4: "10.0.0.1", 6: "fd00::1"})
    ipoib_peers: bool = True

    def gid_of(self, ip: Any, dev: FakeDevice) -> ipaddress.IPv6Address:
        ip = ipaddress.ip_address(ip)
        if dev.link_layer == "InfiniBand":
            # an IB port GID: subnet prefix + port GUID
            return ipaddress.IPv6Address((0xFE80 << 112) | (dev.node_guid + (int(ip) & 0xFF)))
        if ip.version == 4:
            return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
        return ipaddress.IPv6Address(ip.packed)
