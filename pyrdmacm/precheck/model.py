"""What a prediction says: :class:`Prediction`, its :class:`Candidate` devices, the
:class:`IpoibStatus` of an InfiniBand egress, what the host is :class:`Missing`; and
:class:`Checks`, which collects each decision (and the reasoning, warnings and lacks) as
:func:`~pyrdmacm.precheck.predict` makes it, so that a refusal at any step carries the
prediction made up to there."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple, Union

from .._record import Record, set_field
from ..devices import GidType, PortState
from ..errors import errno_name

if TYPE_CHECKING:  # pragma: no cover - netlink imports pyroute2: only when asked
    from ..netlink import NudState, RouteType

__all__ = ["IPAddress", "IPNetwork", "Candidate", "IpoibStatus", "Missing", "Prediction", "Checks"]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class Candidate(Record):
    """An RDMA device/port/GID the id can bind to, in the kernel's order of preference."""

    device: str
    device_index: Optional[int]
    port: int
    gid_index: Optional[int]  #: None when the GID table is not visible (no sysfs)
    gid: Optional[ipaddress.IPv6Address]
    gid_type: Optional[GidType]
    port_state: Optional[PortState]
    default: bool  #: the GID type rdma_cm uses for this port; the first default candidate is the kernel's pick

    def __init__(self, device: str, device_index: Optional[int], port: int, gid_index: Optional[int],
                 gid: Optional[ipaddress.IPv6Address], gid_type: Optional[GidType], port_state: Optional[PortState],
                 default: bool) -> None:
        set_field(self, "device", device)
        set_field(self, "device_index", device_index)
        set_field(self, "port", port)
        set_field(self, "gid_index", gid_index)
        set_field(self, "gid", gid)
        set_field(self, "gid_type", gid_type)
        set_field(self, "port_state", port_state)
        set_field(self, "default", default)

    def _values(self) -> Tuple[Any, ...]:
        return (self.device, self.device_index, self.port, self.gid_index, self.gid, self.gid_type, self.port_state,
                self.default)

    def __repr__(self) -> str:
        return ("%s(device=%r, device_index=%r, port=%r, gid_index=%r, gid=%r, gid_type=%r, port_state=%r, "
                "default=%r)"
                % ((self.__class__.__qualname__,) + self._values()))


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class IpoibStatus(Record):
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

    def __init__(self, netdev: str, up: bool, operstate: str, carrier: Optional[bool],
                 gid: Optional[ipaddress.IPv6Address], device: Optional[str], port: Optional[int],
                 port_state: Optional[PortState], addresses: Tuple[str, ...]) -> None:
        set_field(self, "netdev", netdev)
        set_field(self, "up", up)
        set_field(self, "operstate", operstate)
        set_field(self, "carrier", carrier)
        set_field(self, "gid", gid)
        set_field(self, "device", device)
        set_field(self, "port", port)
        set_field(self, "port_state", port_state)
        set_field(self, "addresses", addresses)

    def _values(self) -> Tuple[Any, ...]:
        return (self.netdev, self.up, self.operstate, self.carrier, self.gid, self.device, self.port, self.port_state,
                self.addresses)

    def __repr__(self) -> str:
        return ("%s(netdev=%r, up=%r, operstate=%r, carrier=%r, gid=%r, device=%r, port=%r, port_state=%r, "
                "addresses=%r)"
                % ((self.__class__.__qualname__,) + self._values()))


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class Missing(Record):
    """Something this host lacks for the resolution, and what to do about it."""

    what: str  #: "rdma_cm" (the device node), "device" (no RDMA device), "gid" (none for the source)
    errno: int  #: what the kernel (or opening the node) answers for it
    message: str
    hint: str
    netdev: Optional[str] = None

    def __init__(self, what: str, errno: int, message: str, hint: str, netdev: Optional[str] = None) -> None:
        set_field(self, "what", what)
        set_field(self, "errno", errno)
        set_field(self, "message", message)
        set_field(self, "hint", hint)
        set_field(self, "netdev", netdev)

    def _values(self) -> Tuple[Any, ...]:
        return (self.what, self.errno, self.message, self.hint, self.netdev)

    def __repr__(self) -> str:
        return ("%s(what=%r, errno=%r, message=%r, hint=%r, netdev=%r)"
                % ((self.__class__.__qualname__,) + self._values()))

    def __str__(self) -> str:
        return "%s: %s -- %s" % (self.message, errno_name(self.errno), self.hint)


@dataclass(init=False, repr=False, eq=False)  # written out: see pyrdmacm._record
class Prediction(Record):
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

    def __init__(self, dst: IPAddress, src_given: Optional[IPAddress], src: Optional[IPAddress], netdev: Optional[str],
                 ifindex: Optional[int], route_netdev: Optional[str], route_ifindex: Optional[int],
                 gateway: Optional[IPAddress], route_type: Optional["RouteType"], table: Optional[int],
                 prefix: Optional[IPNetwork], bound_ifindex: int, device_chosen_at: str, network: str,
                 next_hop: Optional[IPAddress], neighbour: Optional["NudState"], needs_neighbour_resolution: bool,
                 candidates: Tuple[Candidate, ...], ipoib: Optional[IpoibStatus], warnings: Tuple[str, ...],
                 reasoning: Tuple[str, ...], missing: Tuple[Missing, ...] = ()) -> None:
        set_field(self, "dst", dst)
        set_field(self, "src_given", src_given)
        set_field(self, "src", src)
        set_field(self, "netdev", netdev)
        set_field(self, "ifindex", ifindex)
        set_field(self, "route_netdev", route_netdev)
        set_field(self, "route_ifindex", route_ifindex)
        set_field(self, "gateway", gateway)
        set_field(self, "route_type", route_type)
        set_field(self, "table", table)
        set_field(self, "prefix", prefix)
        set_field(self, "bound_ifindex", bound_ifindex)
        set_field(self, "device_chosen_at", device_chosen_at)
        set_field(self, "network", network)
        set_field(self, "next_hop", next_hop)
        set_field(self, "neighbour", neighbour)
        set_field(self, "needs_neighbour_resolution", needs_neighbour_resolution)
        set_field(self, "candidates", candidates)
        set_field(self, "ipoib", ipoib)
        set_field(self, "warnings", warnings)
        set_field(self, "reasoning", reasoning)
        set_field(self, "missing", missing)

    def _values(self) -> Tuple[Any, ...]:
        return (self.dst, self.src_given, self.src, self.netdev, self.ifindex, self.route_netdev, self.route_ifindex,
                self.gateway, self.route_type, self.table, self.prefix, self.bound_ifindex, self.device_chosen_at,
                self.network, self.next_hop, self.neighbour, self.needs_neighbour_resolution, self.candidates,
                self.ipoib, self.warnings, self.reasoning, self.missing)

    def __repr__(self) -> str:
        return ("%s(dst=%r, src_given=%r, src=%r, netdev=%r, ifindex=%r, route_netdev=%r, route_ifindex=%r, "
                "gateway=%r, route_type=%r, table=%r, prefix=%r, bound_ifindex=%r, device_chosen_at=%r, "
                "network=%r, next_hop=%r, neighbour=%r, needs_neighbour_resolution=%r, candidates=%r, ipoib=%r, "
                "warnings=%r, reasoning=%r, missing=%r)"
                % ((self.__class__.__qualname__,) + self._values()))

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
