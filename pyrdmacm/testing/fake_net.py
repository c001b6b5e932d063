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
    """An RDMA device of the fake host, and the port a local address is on."""

    #: the device's name (``rxe0``, ``mlx5_0``): what ``CmId.device`` names
    name: str = "fake0"
    #: its index (the kernel's ``ib_device`` index, QUERY's ``node_guid`` answers beside it)
    index: int = 1
    #: its node GUID (QUERY's ``node_guid``; an InfiniBand port's GIDs are made of it)
    node_guid: int = 0x0002C9030000ABCD
    #: the port the address is on (``CmId.port_num``)
    port_num: int = 1
    #: the port's partition key
    pkey: int = 0xFFFF
    #: "Ethernet" (RoCE: a GID is the address itself) or "InfiniBand" (a GID is the subnet
    #: prefix and the port GUID)
    link_layer: str = "Ethernet"
    #: the netdev the address is on
    netdev: str = "eth0"


@dataclass
class FakeNet:
    """Who is where, as one host's kernel sees it.  Addresses are strings for brevity.

    ``FakeNet(local={"10.0.2.15": FakeDevice("rxe0")}, peers={"10.0.2.2"})`` is a host
    with one RDMA address and one neighbour that answers; the routing tables' source for a
    destination not on the host (``default_src``) is, unless given, the first local address
    of its IP version."""

    #: the host's addresses, each on the RDMA device (and port) it belongs to
    local: Dict[str, FakeDevice] = field(
        default_factory=lambda: {"10.0.0.1": FakeDevice(), "fd00::1": FakeDevice()}
    )
    #: the neighbours that answer ARP / neighbour discovery (and whose CM answers: a REQ to
    #: anyone else goes unanswered, as to a host that is down)
    peers: Set[str] = field(default_factory=lambda: {"10.0.0.2", "fd00::2"})
    #: destinations with no route (RESOLVE_ADDR: ENETUNREACH)
    no_route: Set[str] = field(default_factory=lambda: {"192.0.2.1"})
    #: IP version (4, 6) -> the source the routing tables pick for a destination off the
    #: host; not given (empty): the first local address of each version
    default_src: Dict[int, str] = field(default_factory=dict)
    #: whether IPoIB runs on the peers (an InfiniBand resolution needs it on both nodes)
    ipoib_peers: bool = True

    def __post_init__(self) -> None:
        if not self.default_src:
            for a in self.local:
                self.default_src.setdefault(ipaddress.ip_address(a.split("%")[0]).version, a)
        for version, a in self.default_src.items():
            if a not in self.local:
                raise ValueError("FakeNet default_src[%d] %r is no local address (local: %s): the routing tables "
                                 "pick a source of the host's own" % (version, a, ", ".join(self.local) or "none"))

    def gid_of(self, ip: Any, dev: FakeDevice) -> ipaddress.IPv6Address:
        """The GID of address ``ip`` on ``dev``: RoCE's is the address (an IPv4 one mapped),
        InfiniBand's the subnet prefix and the port GUID."""
        ip = ipaddress.ip_address(ip)
        if dev.link_layer == "InfiniBand":
            # an IB port GID: subnet prefix + port GUID
            return ipaddress.IPv6Address((0xFE80 << 112) | (dev.node_guid + (int(ip) & 0xFF)))
        if ip.version == 4:
            return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
        return ipaddress.IPv6Address(ip.packed)
