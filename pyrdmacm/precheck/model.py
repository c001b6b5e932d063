"""What a prediction says: :class:`Prediction`, its :class:`Candidate` devices, the
:class:`IpoibStatus` of an InfiniBand egress, what the host is :class:`Missing`; and
:class:`Checks`, which collects each decision (and the reasoning, warnings and lacks) as
:func:`~pyrdmacm.precheck.predict` makes it, so that a refusal at any step carries the
prediction made up to there."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from ..devices import GidType, PortState
from ..errors import errno_name

if TYPE_CHECKING:  # pragma: no cover - netlink imports pyroute2: only when asked
    from ..netlink import NudState, RouteType

__all__ = ["IPAddress", "IPNetwork", "Candidate", "IpoibStatus", "Missing", "Prediction", "Checks"]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


@dataclass(frozen=True)
class Candidate:
    """An RDMA device/port/GID the id can bind to, in the kernel's order of preference."""

    device: str
    device_index: Optional[int]
    port: int
    gid_index: Optional[int]  #: None when the GID table is not visible (no sysfs)
    gid: Optional[ipaddress.IPv6Address]
    gid_type: Optional[GidType]
    port_state: Optional[PortState]
    default: bool  #: the GID type rdma_cm uses for this port; the first default candidate is the kernel's pick


@dataclass(frozen=True)
class IpoibStatus:
    """State of the IPoIB netdev an InfiniBand resolution goes through."""

    netdev: str
    up: bool
    operstate: str
    carrier: Optional[bool]
    gid: Optional[ipaddress.IPv6Address]  #: the port GID in its hardware address
    device: Optional[str]
    port: Optional[int]
    port_state: Optional[PortState]
    addresses: Tuple[str, ...]


@dataclass(frozen=True)
class Missing:
    """Something this host lacks for the resolution, and what to do about it."""

    what: str  #: "rdma_cm" (the device node), "device" (no RDMA device), "gid" (none for the source)
    errno: int  #: what the kernel (or opening the node) answers for it
    message: str
    hint: str
    netdev: Optional[str] = None

    def __str__(self) -> str:
        return "%s: %s -- %s" % (self.message, errno_name(self.errno), self.hint)


@dataclass(frozen=True)
class Prediction:
    """Where ``resolve_addr(dst, src)`` will land, and why."""

    dst: IPAddress
    src_given: Optional[IPAddress]
    src: Optional[IPAddress]  #: the source address the id will have
    netdev: Optional[str]  #: the netdev the id binds to (``dev_addr.bound_dev_if``)
    ifindex: Optional[int]
    route_netdev: Optional[str]  #: the route's own egress ("lo" for a local destination)
    route_ifindex: Optional[int]
    gateway: Optional[IPAddress]
    route_type: Optional["RouteType"]
    table: Optional[int]
    prefix: Optional[IPNetwork]  #: the FIB entry used; None if the kernel assumed on-link
    bound_ifindex: int  #: the oif given to the route lookup (0: none)
    device_chosen_at: str  #: "bind" (specific source) or "resolve"
    network: str  #: "IB" (same subnet / InfiniBand) or "IPv4"/"IPv6" (routed RoCE: needs RoCE v2)
    next_hop: Optional[IPAddress]  #: whose link-layer address is needed; None: none needed
    neighbour: Optional["NudState"]
    needs_neighbour_resolution: bool  #: ARP/ND (or ibacm) must answer before ADDR_RESOLVED
    candidates: Tuple[Candidate, ...]
    ipoib: Optional[IpoibStatus]
    warnings: Tuple[str, ...]
    reasoning: Tuple[str, ...]
    missing: Tuple[Missing, ...] = ()  #: what the host lacks (the prediction stops short there)

    @property
    def complete(self) -> bool:
        """True when nothing is missing: the prediction goes all the way to ADDR_RESOLVED."""
        return not self.missing

    @property
    def chosen(self) -> Optional[Candidate]:
        """The kernel's pick: the first candidate (None for a loopback destination without devices)."""
        return self.candidates[0] if self.candidates else None

    @property
    def device(self) -> Optional[str]:
        return self.chosen.device if self.chosen else None

    @property
    def port(self) -> Optional[int]:
        return self.chosen.port if self.chosen else None

    @property
    def sgid(self) -> Optional[ipaddress.IPv6Address]:
        return self.chosen.gid if self.chosen else None

    def __str__(self) -> str:
        return "\n".join(self.reasoning + tuple("warning: " + w for w in self.warnings))


#: a Prediction's fields before predict() has decided them
_UNDECIDED: Dict[str, Any] = dict(
    src_given=None, src=None, netdev=None, ifindex=None, route_netdev=None, route_ifindex=None, gateway=None,
    route_type=None, table=None, prefix=None, bound_ifindex=0, device_chosen_at="resolve", network="IB",
    next_hop=None, neighbour=None, needs_neighbour_resolution=False, candidates=(), ipoib=None,
)


class Checks:
    """Collects reasoning, warnings (each keeps the errno strict mode raises), what is
    missing, and each decision as it is made (``known``), so that a refusal at any step
    carries the prediction made up to there."""

    def __init__(self) -> None:
        self.reasoning: List[str] = []
        self.warnings: List[Tuple[str, int]] = []
        self.missing: List[Missing] = []
        self.known: Dict[str, Any] = {}

    def say(self, text: str) -> None:
        self.reasoning.append(text)

    def warn(self, text: str, err: int) -> None:
        self.warnings.append((text, err))

    def lack(self, what: str, err: int, message: str, hint: str, netdev: Optional[str] = None) -> None:
        self.missing.append(Missing(what, err, message, hint, netdev))

    def prediction(self, dst: IPAddress) -> Prediction:
        fields = dict(_UNDECIDED, **self.known)
        return Prediction(dst=dst, warnings=tuple(w for w, _ in self.warnings), reasoning=tuple(self.reasoning),
                          missing=tuple(self.missing), **fields)

    def refusal(self) -> Optional[Missing]:
        """The first lack the kernel's resolution itself refuses (a device, a GID; not the node)."""
        return next((m for m in self.missing if m.what != "rdma_cm"), None)
