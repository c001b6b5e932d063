"""Predict where an RDMA address resolution will land, before asking the kernel.

Theory of operation
-------------------
``rdma_resolve_addr()`` hides three decisions the kernel makes
(drivers/infiniband/core/cma.c and addr.c); :func:`predict` repeats them with
the same inputs, in the caller's network namespace:

1. **Binding the source** (``cma_bind_addr`` / ``rdma_bind_addr_dst``).  No
   source: a wildcard of the destination's family, and for a link-local IPv6
   destination ``bound_dev_if`` = its zone.  A specific source must be local
   (``rdma_translate_ip``: else EADDRNOTAVAIL), sets ``bound_dev_if`` to the
   netdev owning it (a link-local one needs a zone: else EINVAL) and picks the
   RDMA device right there (``cma_acquire_dev_by_src_ip``: else ENODEV, from
   ``write()``).
   A destination that is the wildcard or a loopback address (``cma_any_addr()``:
   0.0.0.0, ::, 127.0.0.0/8, ::1) skips routing: ``cma_resolve_loopback`` keeps the
   device bound with the source, else takes the first device with an ACTIVE
   port, GID 0, and the source becomes 127.0.0.1 / ::1.
2. **Routing** (``addr4_resolve``/``addr6_resolve``): one lookup with daddr,
   saddr (the specific source or none) and oif = ``bound_dev_if``.  It is
   asked of the kernel itself (``RTM_GETROUTE`` via :func:`netlink.route_get`),
   so policy rules, tables, and the kernel's "an oif with no matching route
   means on-link" fallback come out exactly as the kernel will decide.  Its
   errors (ENETUNREACH, EHOSTUNREACH for ``unreachable``, EACCES for
   ``prohibit``, EINVAL for ``blackhole``) fail ``write()`` at once.  The
   route's source becomes the id's source.  A route through ``lo`` (the
   destination is local) is replaced by the netdev owning the destination
   (``rdma_set_src_addr_rcu``: none -> ENODEV), or by ``bound_dev_if``.
3. **The RDMA device** (``cma_acquire_dev_by_src_ip``, when no device was
   picked at bind): the first device in device order, port in port order,
   whose GID table has the source IP (``::ffff:a.b.c.d`` for IPv4) with the
   port's default GID type (RoCE v2 when the port has it) on that netdev
   (Ethernet netdevs); an IPoIB netdev's own GID (InfiniBand); GID 0 on the
   netdev (iWARP).  No match -> ``ADDR_ERROR`` with status -ENODEV.  Then the
   next hop (gateway or destination) must be in the neighbour table: if it is
   not, ARP/ND runs and an unanswered one ends in ``ADDR_ERROR`` -ETIMEDOUT.

:class:`Prediction` carries each decision with a sentence of reasoning;
:class:`~pyrdmacm.errors.PrecheckError` (with the errno the kernel will give)
is raised only where the kernel will certainly refuse, with the prediction
made so far attached (``prediction``): a host without an RDMA device still
learns the lookup, the route, its table, the source, the egress netdev, the
next hop and its neighbour state.  What the host lacks for the resolution
(an RDMA device, a GID for the source, with ``check_node`` the rdma_cm device
node) is listed in ``Prediction.missing``, each with what to do.

An InfiniBand destination (AF_IB, ``gid:...``) is not routed: the kernel
picks the port itself (``cma_resolve_ib_dev``), the first InfiniBand port
whose GID table holds the destination's GID, else the first ACTIVE one with a
GID of its subnet prefix; none -> ENODEV from ``write()``.  Things the kernel
accepts but that look wrong (several RDMA netdevs on the destination's
subnet, a port that is not ACTIVE, a link-local destination with a wildcard
source) are ``warnings``; ``strict=True`` turns them into errors.  A
link-local IPv6 address without a zone raises the very
:class:`~pyrdmacm.errors.UsageError` that ``resolve_addr`` raises for it.

Assumptions: the port's default RoCE GID type is the kernel's default (v2 when
supported; configfs ``rdma_cm/<dev>/ports/<p>/default_roce_mode`` can change
it); device order is the kernel's index order when netlink tells it, names
otherwise.  pyroute2 is imported only when :func:`predict` runs.
"""

from __future__ import annotations

import errno as _errno
import ipaddress
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union


from .devices import Device, GidType, LinkLayer, NodeType, PortState, ipoib_gid, rdma_netdevs
from .addr import AF_IB, missing_zone, parse_address
from .addr import Address as SockAddr
from .errors import PrecheckError, UsageError, errno_name

if TYPE_CHECKING:  # pragma: no cover
    from .netlink import Address, Link, NudState, Route, RouteType

__all__ = ["Candidate", "IpoibStatus", "Missing", "Prediction", "predict", "explain", "gid_text", "rdma_cm_node"]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

_ARPHRD_INFINIBAND = 32
_ARPHRD_ETHER = 1


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


# --------------------------------------------------------------------------------------


def _as_address(value: Any, what: str) -> SockAddr:
    """``value`` in any form :func:`~pyrdmacm.addr.parse_address` takes (ports are ignored:
    they do not change the route); a missing zone is refused later, in predict's words."""
    if isinstance(value, SockAddr):
        return value
    try:
        return parse_address(value, require_zone=False)
    except UsageError as e:
        raise UsageError("%s: %s" % (what, e)) from None


def _as_ip(addr: SockAddr) -> IPAddress:
    """The IP of an AF_INET / AF_INET6 address, an IPv6 zone kept as its scope id."""
    if addr.family == AF_IB or addr.ip.version == 4 or not addr.scope_id:
        return addr.ip
    return ipaddress.IPv6Address("%s%%%d" % (addr.ip, addr.scope_id))


def _plain(addr: IPAddress) -> IPAddress:
    return type(addr)(addr.packed)


def _ip2gid(ip: IPAddress) -> ipaddress.IPv6Address:
    """``rdma_ip2gid``: IPv4 -> ``::ffff:a.b.c.d``; IPv6 as is."""
    if ip.version == 4:
        return ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed)
    return ipaddress.IPv6Address(ip.packed)


def gid_text(gid: Optional[ipaddress.IPv6Address]) -> str:
    """A GID as text; IPv4-mapped ones as ``::ffff:a.b.c.d`` on every Python version."""
    if gid is None:
        return "?"
    v4 = gid.ipv4_mapped
    return "::ffff:%s" % v4 if v4 is not None else str(gid)


def _any_or_loopback(ip: IPAddress) -> bool:
    """cma.c's ``cma_any_addr()``: the wildcard or a loopback address (127.0.0.0/8, ::1)."""
    if ip.is_unspecified:
        return True
    if ip.version == 4:
        return ip.packed[0] == 127
    return ip == ipaddress.IPv6Address("::1")


def _is_link_local6(ip: IPAddress) -> bool:
    return ip.version == 6 and ip.is_link_local


class _Net:
    """The network facts predict() needs, fetched once from a netlink-like provider."""

    def __init__(self, provider: Any) -> None:
        self.provider = provider
        self.links: List["Link"] = list(provider.links())
        self.by_index: Dict[int, "Link"] = {link.index: link for link in self.links}
        self.by_name: Dict[str, "Link"] = {link.name: link for link in self.links}
        self.addrs: Dict[int, Tuple["Address", ...]] = dict(provider.addresses())

    def name(self, ifindex: Optional[int]) -> str:
        if ifindex is None:
            return "?"
        link = self.by_index.get(ifindex)
        return link.name if link else "if%d" % ifindex

    def owners(self, ip: IPAddress) -> List["Link"]:
        """Netdevs with ``ip`` as a usable local address, in ifindex order."""
        out = []
        for link in self.links:
            for a in self.addrs.get(link.index, ()):
                if _plain(a.ip) == ip and a.usable:
                    out.append(link)
                    break
        return out

    def addr_text(self, ifindex: int, version: int) -> str:
        return ", ".join(str(a.interface) for a in self.addrs.get(ifindex, ()) if a.ip.version == version)


def _zone(z: Any, net: _Net, what: str) -> Optional[int]:
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


def _default_type(gids: Sequence[Any]) -> GidType:
    """The GID type rdma_cm uses on a RoCE port: v2 when the port has it."""
    return GidType.ROCE_V2 if any(g.type is GidType.ROCE_V2 for g in gids) else GidType.ROCE_V1


def _device_order(devices: Sequence[Device]) -> List[Device]:
    return sorted(devices, key=lambda d: (d.index is None, d.index if d.index is not None else 0))


def _match(devices: Sequence[Device], link: "Link", src: Optional[IPAddress]) -> List[Candidate]:
    """``cma_acquire_dev_by_src_ip`` over our view of the devices: kernel's pick first."""
    picks: List[Candidate] = []
    others: List[Candidate] = []
    iboe_gid = _ip2gid(src) if src is not None else None
    hw_gid = ipoib_gid(link.address) if link.type == _ARPHRD_INFINIBAND and link.address else None
    for d in _device_order(devices):
        iwarp = d.node_type is NodeType.RNIC or d.protocol == "iw"
        for p in d.ports:

            def mk(gid: Any, default: bool) -> Candidate:
                return Candidate(
                    device=d.name, device_index=d.index, port=p.number,
                    gid_index=gid.index if gid is not None else None,
                    gid=gid.gid if gid is not None else None,
                    gid_type=gid.type if gid is not None else None,
                    port_state=p.state, default=default,
                )

            is_ib = p.link_layer is LinkLayer.INFINIBAND
            if (link.type == _ARPHRD_INFINIBAND) != is_ib:
                continue  # cma_validate_port: IB netdevs need IB ports and vice versa
            if not p.gids:
                # GID table not visible (netlink without sysfs): fall back to the port's netdev
                if p.netdev == link.name:
                    picks.append(mk(None, True))
                continue
            if iwarp:  # iWARP: GID 0, whose netdev must be the bound one
                g0 = p.gids[0]
                if g0.index == 0 and g0.netdev == link.name:
                    picks.append(mk(g0, True))
                continue
            if is_ib:  # the GID inside the IPoIB hardware address, type IB, any netdev
                want_gid, want_type, want_ndev = hw_gid, GidType.IB, None
            elif link.type == _ARPHRD_ETHER:  # the source IP as a GID, default type, on this netdev
                want_gid, want_type, want_ndev = iboe_gid, _default_type(p.gids), link.name
            else:  # RoCE port, non-Ethernet netdev (lo, tun): type "IB/RoCE v1", any netdev
                want_gid, want_type, want_ndev = iboe_gid, GidType.ROCE_V1, None
            if want_gid is None:
                continue
            found = False
            for g in p.gids:
                if g.gid != want_gid or (want_ndev is not None and g.netdev != want_ndev):
                    continue
                if g.type is want_type and not found:
                    found = True
                    picks.append(mk(g, True))
                else:
                    others.append(mk(g, False))
    return picks + others


def _kernel_pick(cands: Sequence[Candidate]) -> Optional[Candidate]:
    return cands[0] if cands and cands[0].default else None


def _ipoib_status(link: "Link", net: _Net, devices: Sequence[Device]) -> IpoibStatus:
    gid = ipoib_gid(link.address) if link.address else None
    dev_name = port_no = None
    state = None
    for d in _device_order(devices):
        for p in d.ports:
            if p.link_layer is LinkLayer.INFINIBAND and (
                (gid is not None and any(g.gid == gid for g in p.gids)) or p.netdev == link.name
            ):
                dev_name, port_no, state = d.name, p.number, p.state
                break
        if dev_name:
            break
    return IpoibStatus(
        netdev=link.name, up=link.is_up, operstate=link.operstate, carrier=link.carrier, gid=gid,
        device=dev_name, port=port_no, port_state=state,
        addresses=tuple(str(a.interface) for a in net.addrs.get(link.index, ())),
    )


#: a Prediction's fields before predict() has decided them
_UNDECIDED: Dict[str, Any] = dict(
    src_given=None, src=None, netdev=None, ifindex=None, route_netdev=None, route_ifindex=None, gateway=None,
    route_type=None, table=None, prefix=None, bound_ifindex=0, device_chosen_at="resolve", network="IB",
    next_hop=None, neighbour=None, needs_neighbour_resolution=False, candidates=(), ipoib=None,
)


class _Checks:
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


def predict(
    dst: Any,
    src: Any = None,
    *,
    scope_id: Any = None,
    strict: bool = False,
    devices: Optional[Iterable[Device]] = None,
    network: Any = None,
    check_node: bool = False,
) -> Prediction:
    """Predict what ``resolve_addr(dst, src)`` will do in this network namespace.

    ``dst``/``src``: anything :func:`~pyrdmacm.addr.parse_address` takes (an
    :class:`~pyrdmacm.addr.Address`, ``"10.0.2.2:7471"``, ``"[fe80::1%eth1]:7471"``,
    ``"gid:fe80::2:c903:0:1"``, :mod:`ipaddress` objects; a port changes nothing).
    ``scope_id``: the zone (ifindex or netdev name) for a link-local IPv6 ``dst``
    or ``src`` given without one.  ``devices``: the RDMA devices to match against
    (default: :func:`pyrdmacm.devices.list_devices`); ``network``: an object with
    ``route_get``, ``links``, ``addresses`` and ``neighbour`` like
    :mod:`pyrdmacm.netlink` (default), for tests.  ``check_node``: also try the
    rdma_cm device node (as opening an EventChannel does) and list it in
    ``missing`` when it cannot be used.

    Raises :class:`~pyrdmacm.errors.PrecheckError` with the kernel's errno
    where the kernel will certainly refuse, the prediction made so far attached:
    EINVAL (family mismatch),
    EADDRNOTAVAIL (source not local), ENETUNREACH /
    EHOSTUNREACH / EACCES / EINVAL (the route lookup fails), ENODEV (no RDMA
    device for the egress netdev or the source: also in ``missing``).  With ``strict=True`` the
    warnings raise too, each with the errno closest to what it foretells:
    ENOTUNIQ (several RDMA netdevs on the destination's subnet), ENETDOWN
    (port not ACTIVE, netdev down), EINVAL (link-local destination with a
    wildcard source), ETIMEDOUT (the last ARP/ND failed), EADDRNOTAVAIL (InfiniBand
    gateway: needs ibacm), EHOSTUNREACH (routed RoCE v1), ENODEV (device
    bound for another netdev, GID tables not visible).  A link-local IPv6
    ``dst`` or ``src`` without a zone (in the address or ``scope_id``) raises
    the :class:`~pyrdmacm.errors.UsageError` that ``resolve_addr`` raises.
    """
    dst_a = _as_address(dst, "dst")
    src_a = _as_address(src, "src") if src is not None else None
    devs = list(devices) if devices is not None else _list_devices()
    ck = _Checks()
    if src_a is not None and (src_a.family == AF_IB) != (dst_a.family == AF_IB) or (
            src_a is not None and src_a.ip.version != dst_a.ip.version):
        raise PrecheckError(
            _errno.EINVAL, "source and destination are of different address families",
            src=src_a.ip if src_a else None, dst=dst_a.ip, hint="give a source of the destination's family, or none",
        )
    if dst_a.family == AF_IB:
        pred = _predict_ib(dst_a, src_a, devs, ck, check_node)
    else:
        if network is None:
            from . import netlink as network  # lazily: pyroute2 is slow to import
        session = getattr(network, "session", None)  # netlink's: one routing socket for the prediction
        with session() if session is not None else _no_session():
            pred = _predict_ip(_as_ip(dst_a), _as_ip(src_a) if src_a is not None else None, scope_id, devs,
                               network, ck, check_node)
    refused = ck.refusal()
    if refused is not None:
        raise PrecheckError(refused.errno, refused.message, prediction=pred, src=pred.src_given, dst=pred.dst,
                            netdev=refused.netdev, hint=refused.hint)
    return _strict(pred, ck, strict)


class _no_session:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


def _predict_ip(dst_ip: IPAddress, src_ip: Optional[IPAddress], scope_id: Any, devs: List[Device], network: Any,
                ck: _Checks, check_node: bool) -> Prediction:
    net = _Net(network)
    v = dst_ip.version
    ck.known["src_given"] = src_ip

    # zones only matter for link-local addresses (the kernel ignores them elsewhere)
    dst_zone = None
    if _is_link_local6(dst_ip):
        dst_zone = _zone(getattr(dst_ip, "scope_id", None) or scope_id, net, "dst")
    src_zone = None
    if src_ip is not None and _is_link_local6(src_ip):
        src_zone = _zone(getattr(src_ip, "scope_id", None) or scope_id, net, "src")
    # resolve_addr refuses a link-local address without a zone before any syscall
    # (the kernel would refuse a source with EINVAL, and route a destination over
    # whichever netdev its table lists first): the same refusal, in the same words
    for ip, zone in ((dst_ip, dst_zone), (src_ip, src_zone)):
        if ip is not None and _is_link_local6(ip) and zone is None:
            raise missing_zone(_plain(ip))
    dst_p = _plain(dst_ip)
    src_p = _plain(src_ip) if src_ip is not None else None
    src_specific = src_p is not None and not src_p.is_unspecified

    def fail(err: int, what: str, **kw: Any) -> PrecheckError:
        """The kernel's refusal at this step (or the earlier one at bind), with the prediction so far."""
        if check_node:
            _check_node(ck)
        earlier = ck.refusal()
        if earlier is not None:  # the kernel refused at bind already: it never gets here
            err, what, kw = earlier.errno, earlier.message, {"netdev": earlier.netdev, "hint": earlier.hint}
        kw.setdefault("src", src_ip)
        kw.setdefault("dst", dst_ip)
        return PrecheckError(err, what, prediction=ck.prediction(dst_ip), **kw)

    # ---- 1. binding the source --------------------------------------------------------
    bound = 0
    bind_cands: List[Candidate] = []
    src_link: Optional["Link"] = None
    if src_specific:
        assert src_p is not None
        if _is_link_local6(src_p):
            assert src_zone is not None
            bound = src_zone
            src_link = net.by_index[bound]
            ck.say("source %s is link-local: bound to its zone %s (ifindex %d)" % (src_p, src_link.name, bound))
        else:
            owners = net.owners(src_p)
            if not owners:
                raise fail(_errno.EADDRNOTAVAIL, "source address is not a local address of this network namespace",
                           hint="use an address shown by `ip addr` in this namespace, or no source")
            src_link = owners[0]
            bound = src_link.index
            ck.say("source %s belongs to %s: the id is bound to it (bound_dev_if %d), and the route "
                   "lookup is restricted to it (oif)" % (src_p, src_link.name, bound))
        ck.known.update(bound_ifindex=bound, device_chosen_at="bind")
        bind_cands = _match(devs, src_link, src_p)
        if not devs:
            _no_device(ck, src_link.name)
        elif _kernel_pick(bind_cands) is None:
            ck.say("device: none has a GID for %s on %s: the kernel refuses the bind (ENODEV from write())"
                   % (src_p, src_link.name))
            ck.lack("gid", _errno.ENODEV, "no RDMA device has a GID for the source address on %s" % src_link.name,
                    _no_device_hint(src_link.name, devs, net, v), netdev=src_link.name)
        else:
            pick = bind_cands[0]
            ck.say("device: %s port %d GID %s [%s] %s, chosen at bind time" % (
                pick.device, pick.port, pick.gid_index, pick.gid_type, gid_text(pick.gid)))
    elif _is_link_local6(dst_p):
        if src_p is not None:
            ck.say("a wildcard source was given: the destination's zone is not applied (bound_dev_if 0)")
        elif dst_zone is not None:
            bound = dst_zone
            ck.say("destination %s is link-local: the route lookup uses its zone %s (ifindex %d)"
                   % (dst_p, net.name(dst_zone), dst_zone))
        if bound == 0:
            ck.warn("link-local destination %s with a wildcard source: the kernel routes it over "
                    "whichever netdev its table lists first; give no source, or a source on the "
                    "zone's netdev" % dst_p, _errno.EINVAL)
        ck.known["bound_ifindex"] = bound

    # ---- destination 0.0.0.0 / :: / 127.x / ::1 : cma_resolve_loopback ----------------
    if _any_or_loopback(dst_p):
        return _loopback_any(dst_ip, src_p if src_specific else None, devs, bind_cands, ck, check_node)

    # ---- 2. routing -------------------------------------------------------------------
    lookup = "ip route get %s" % dst_p
    if src_specific:
        lookup += " from %s" % src_p
    if bound:
        lookup += " oif %s" % net.name(bound)
    route: "Route" = network.route_get(dst_p, src_p if src_specific else None, bound or None)
    if not route.ok:
        ck.say("lookup: %s -> %s %s" % (lookup, errno_name(route.errno), route.type))
        raise fail(route.errno, "the kernel's route lookup fails (%s)" % lookup,
                   netdev=net.name(bound) if bound else None, hint=_route_hint(route.errno, bound))
    ck.say("lookup: %s (what %s passes to the kernel's route lookup)" % (
        lookup, "addr4_resolve()" if v == 4 else "addr6_resolve()"))
    if route.prefix is None and bound:
        ck.say("route: no FIB entry matches within %s, so the kernel assumes %s is on-link there: dev %s"
               % (net.name(bound), dst_p, route.ifname))
    else:
        ck.say("route: " + route.describe())
    ck.known.update(route_netdev=route.ifname, route_ifindex=route.ifindex, gateway=route.gateway,
                    route_type=route.type, table=route.table, prefix=route.prefix)

    chosen_src: Optional[IPAddress] = src_p if src_specific else route.prefsrc
    if chosen_src is None and v == 6:
        raise fail(_errno.EADDRNOTAVAIL, "no IPv6 source address can reach the destination",
                   hint="add an IPv6 address of the right scope to the egress netdev")
    if not src_specific:
        ck.say("source: %s (the route's preferred source)" % chosen_src)
    ck.known["src"] = chosen_src

    route_link = net.by_index.get(route.ifindex) if route.ifindex is not None else None
    if route_link is None:
        raise fail(_errno.ENODEV, "the route's egress netdev (ifindex %s) is not visible" % route.ifindex)
    ck.known.update(route_netdev=route_link.name, route_ifindex=route_link.index)

    # ---- the netdev the id binds to ---------------------------------------------------
    owner_link: Optional["Link"] = None
    if route_link.is_loopback:
        owners = net.owners(dst_p)
        if not owners:
            raise fail(_errno.ENODEV, "the route to %s goes through %s but no netdev owns that address"
                       % (dst_p, route_link.name), netdev=route_link.name)
        owner_link = owners[0]
        eff = net.by_index[bound] if bound else owner_link
        ck.say("%s is a local address: the route leaves through %s, so the kernel binds to %s, the netdev %s"
               % (dst_p, route_link.name, eff.name, "the id is bound to" if bound else "owning it"))
    else:
        eff = route_link
    type_link = owner_link if owner_link is not None else route_link
    routed = route.gateway is not None and type_link.type != _ARPHRD_INFINIBAND
    network_type = ("IPv4" if v == 4 else "IPv6") if routed else "IB"
    if routed:
        ck.say("the route has a gateway: RoCE v2 (routable) is required")
    ck.known.update(netdev=eff.name, ifindex=eff.index, network=network_type)

    # ---- 3. the RDMA device -----------------------------------------------------------
    cands = _choose_device(ck, devs, net, eff, chosen_src, src_specific, src_link, bind_cands, dst_p, v)
    ck.known["candidates"] = tuple(cands)
    pick_c = _kernel_pick(cands)
    if pick_c is not None:
        if pick_c.port_state is not None and pick_c.port_state is not PortState.ACTIVE:
            ck.warn("port %s/%d is %s, not ACTIVE" % (pick_c.device, pick_c.port, pick_c.port_state),
                    _errno.ENETDOWN)
        if routed and pick_c.gid_type is GidType.ROCE_V1:
            ck.warn("the route goes through gateway %s but %s/%d only has RoCE v1 GIDs, which do not "
                    "route" % (route.gateway, pick_c.device, pick_c.port), _errno.EHOSTUNREACH)

    # ---- neighbour ---------------------------------------------------------------------
    _neighbour(ck, network, route, route_link, eff, dst_p, routed)

    # ---- IPoIB ---------------------------------------------------------------------------
    if eff.type == _ARPHRD_INFINIBAND:
        ipoib = _ipoib_status(eff, net, devs)
        ck.known["ipoib"] = ipoib
        ck.say("IPoIB %s: %s, carrier %s, GID %s, port %s/%s %s" % (
            ipoib.netdev, ipoib.operstate, ipoib.carrier, ipoib.gid, ipoib.device, ipoib.port, ipoib.port_state))
        if not ipoib.up:
            ck.warn("IPoIB netdev %s is down: InfiniBand address resolution needs IPoIB up on both ends"
                    % eff.name, _errno.ENETDOWN)

    # ---- several RDMA netdevs on the destination's subnet ------------------------------
    # (only when the routing table decides alone: no source, no zone)
    if not (src_specific or bound or _is_link_local6(dst_p)):
        _same_subnet(ck, net, devs, dst_p, eff.name)

    if devs and all(d.index is None for d in devs):
        ck.say("RDMA devices from sysfs only (RDMA netlink unavailable): device order by name")
    if check_node:
        _check_node(ck)
    return ck.prediction(dst_ip)


def _no_device(ck: _Checks, netdev: Optional[str]) -> None:
    ck.say("device: none: no RDMA device is visible in this network namespace")
    load = "`rdma link add rxe0 type rxe netdev %s`" % netdev if netdev else "an InfiniBand HCA's driver"
    ck.lack("device", _errno.ENODEV, "no RDMA device is visible", netdev=netdev,
            hint="no /sys/class/infiniband and no RDMA netlink: load the RDMA driver "
            "(e.g. %s), or pass the device into this container/namespace" % load)


def _choose_device(ck: _Checks, devs: List[Device], net: _Net, eff: "Link", chosen_src: Optional[IPAddress],
                   src_specific: bool, src_link: Optional["Link"], bind_cands: List[Candidate], dst_p: IPAddress,
                   v: int) -> List[Candidate]:
    """``cma_acquire_dev_by_src_ip`` at resolve time (or the bind's pick); a lack is recorded, not raised."""
    if src_specific:
        if src_link is not None and eff.index != src_link.index and _kernel_pick(bind_cands) is not None:
            ck.warn("the device was chosen at bind time for %s, but the route leaves through %s"
                    % (src_link.name, eff.name), _errno.ENODEV)
        return bind_cands
    if not devs:
        _no_device(ck, eff.name)
        return []
    gid_tables_known = any(p.gids or p.netdev for d in devs for p in d.ports)
    cands = _match(devs, eff, chosen_src)
    if _kernel_pick(cands) is not None:
        pick = cands[0]
        ck.say("device: %s%s port %d GID %s [%s] %s: the first device x port with a %s "
               "GID for %s on %s" % (pick.device, _index_text(pick.device_index), pick.port, pick.gid_index,
                                     pick.gid_type, gid_text(pick.gid), pick.gid_type, chosen_src, eff.name))
    elif gid_tables_known and eff.is_loopback:
        ck.say("device: none: RDMA does not run on %s" % eff.name)
        ck.lack("device", _errno.ENODEV, "%s belongs to %s: RDMA does not run on the loopback netdev"
                % (dst_p, eff.name), netdev=eff.name,
                hint="use an address of an RDMA netdev instead (%s); the kernel reports this as "
                "RDMA_CM_EVENT_ADDR_ERROR with status -19 (ENODEV)" % ", ".join(sorted(rdma_netdevs(devices=devs))))
    elif gid_tables_known:
        ck.say("device: none has a GID for %s on %s" % (chosen_src, eff.name))
        ck.lack("gid", _errno.ENODEV, "the egress netdev %s has no RDMA device with a GID for %s"
                % (eff.name, chosen_src), netdev=eff.name,
                hint=_no_device_hint(eff.name, devs, net, v)
                + "; the kernel reports this as RDMA_CM_EVENT_ADDR_ERROR with status -19 (ENODEV)")
    else:
        ck.warn("cannot see any RDMA GID table (no sysfs?): the device could not be predicted", _errno.ENODEV)
    return cands


def _neighbour(ck: _Checks, network: Any, route: "Route", route_link: "Link", eff: "Link", dst_p: IPAddress,
               routed: bool) -> None:
    """Whose link-layer address the resolution needs, and whether the neighbour table has it."""
    next_hop: Optional[IPAddress] = None
    nud = None
    needs = False
    if route_link.is_loopback:
        ck.say("no ARP/ND: loopback")
    elif route_link.noarp:
        ck.say("no ARP/ND: %s is NOARP" % route_link.name)
    else:
        next_hop = route.gateway if route.gateway is not None else dst_p
        if route.gateway is not None and not routed:
            ck.say("InfiniBand with a gateway: the kernel asks ibacm (RDMA netlink, LS group) for the "
                   "gateway's path")
            ck.warn("InfiniBand route through gateway %s: without an ibacm daemon listening the kernel "
                    "answers EADDRNOTAVAIL" % route.gateway, _errno.EADDRNOTAVAIL)
            needs = True
        else:
            nud = network.neighbour(route_link.index, next_hop)
            needs = not nud.valid
            ck.say("next hop %s on %s: neighbour %s%s" % (
                next_hop, route_link.name, nud,
                "" if not needs else " -> the kernel sends ARP/ND and waits up to the resolution's timeout "
                "(no answer: ADDR_ERROR -110 ETIMEDOUT)"))
            if nud.name == "FAILED":
                ck.warn("the last ARP/ND for %s on %s failed: expect ETIMEDOUT" % (next_hop, route_link.name),
                        _errno.ETIMEDOUT)
        if not eff.is_up or eff.operstate == "DOWN":
            ck.warn("%s is down (%s)" % (eff.name, eff.operstate), _errno.ENETDOWN)
    ck.known.update(next_hop=next_hop, neighbour=nud, needs_neighbour_resolution=needs)


def _same_subnet(ck: _Checks, net: _Net, devs: List[Device], dst_p: IPAddress, picked: str) -> None:
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


def _check_node(ck: _Checks) -> None:
    if not any(m.what == "rdma_cm" for m in ck.missing):
        lack = rdma_cm_node()
        if lack is not None:
            ck.missing.append(lack)


def rdma_cm_node(path: Optional[str] = None) -> Optional[Missing]:
    """None when the rdma_cm device node opens as an EventChannel would open it; else what is wrong."""
    from ._device import KernelDevice
    from .errors import DeviceNodeError

    try:
        KernelDevice(path).close()
    except DeviceNodeError as e:
        text = str(e.args[1]) if len(e.args) > 1 else str(e)
        message = text.split(": %s " % errno_name(e.errno or 0))[0]
        return Missing("rdma_cm", e.errno or _errno.ENODEV, message, e.hint or "")
    return None


def _predict_ib(dst: SockAddr, src: Optional[SockAddr], devs: List[Device], ck: _Checks,
                check_node: bool) -> Prediction:
    """AF_IB: ``cma_resolve_ib_dev`` (no source) or the port holding the source GID (bind)."""
    gid = ipaddress.IPv6Address(dst.ip.packed)
    prefix = ipaddress.IPv6Network((int(gid) >> 64 << 64, 64))
    ck.known.update(src_given=src.ip if src is not None else None, network="IB")
    ck.say("destination gid:%s (pkey %#06x) is an InfiniBand address (AF_IB): no IP routing, ARP or netdev; "
           "the kernel picks the port itself" % (gid, dst.pkey))
    ib_ports = [(d, p) for d in _device_order(devs) for p in d.ports if p.link_layer is LinkLayer.INFINIBAND]

    def cand(d: Device, p: Any, g: Any) -> Candidate:
        return Candidate(device=d.name, device_index=d.index, port=p.number, gid_index=g.index, gid=g.gid,
                         gid_type=g.type, port_state=p.state, default=True)

    cands: List[Candidate] = []
    if src is not None and not src.ip.is_unspecified:
        want = ipaddress.IPv6Address(src.ip.packed)
        cands = [cand(d, p, g) for d, p in ib_ports for g in p.gids if g.gid == want][:1]
        ck.known["device_chosen_at"] = "bind"
        ck.say("source gid:%s: the id binds to the port whose GID table holds it" % want)
        what = "no InfiniBand port has the source GID %s" % want
    else:
        ck.say("cma_resolve_ib_dev: the first InfiniBand port, in device order, whose GID table holds %s; "
               "else the first ACTIVE one with a GID of its subnet prefix %s" % (gid, prefix))
        exact = [cand(d, p, g) for d, p in ib_ports for g in p.gids if g.gid == gid]
        near = [cand(d, p, g) for d, p in ib_ports for g in p.gids
                if g.gid in prefix and p.state is PortState.ACTIVE]
        cands = (exact or near)[:1]
        what = "no InfiniBand port has a GID of %s's subnet prefix %s" % (gid, prefix)
    if not devs:
        _no_device(ck, None)
    elif not ib_ports:
        ck.lack("device", _errno.ENODEV, "no InfiniBand port is visible: an AF_IB (gid:) address needs one",
                "RoCE and iWARP ports take no AF_IB addresses (rdma_cap_af_ib): use the destination's IP "
                "address instead; the kernel refuses RESOLVE_ADDR with ENODEV")
    elif not cands:
        ck.lack("gid", _errno.ENODEV, what, "see the GID tables (`pyrdmacm devices`); the kernel refuses "
                "RESOLVE_ADDR with ENODEV")
    else:
        c = cands[0]
        ck.known["src"] = c.gid
        ck.say("device: %s%s port %d GID %s %s" % (c.device, _index_text(c.device_index), c.port, c.gid_index,
                                                  gid_text(c.gid)))
        ck.say("assumed: pkey %#06x is in the port's pkey table (not checked here)" % dst.pkey)
    ck.known["candidates"] = tuple(cands)
    if check_node:
        _check_node(ck)
    return ck.prediction(gid)


def _strict(pred: Prediction, ck: _Checks, strict: bool) -> Prediction:
    if strict and ck.warnings:
        raise PrecheckError(
            ck.warnings[0][1], "strict pre-check: " + "; ".join(w for w, _ in ck.warnings),
            prediction=pred, src=pred.src_given, dst=pred.dst, netdev=pred.netdev, device=pred.device,
            hint="the kernel would accept this: only the strict pre-check refuses it",
        )
    return pred


def _loopback_any(dst_ip: IPAddress, src_p: Optional[IPAddress], devs: Sequence[Device],
                  bind_cands: List[Candidate], ck: _Checks, check_node: bool) -> Prediction:
    """Destination 0.0.0.0, ::, 127.0.0.0/8 or ::1 -> ``cma_resolve_loopback``: no routing at all.

    The id keeps the device bound with its source, or takes the first device
    with an ACTIVE port (else the first device, port 1), GID index 0; without a
    specific source its source becomes 127.0.0.1 / ::1.
    """
    ck.say("destination %s is %s: the kernel resolves it as loopback (cma_resolve_loopback), "
           "without routing or ARP" % (_plain(dst_ip), "the wildcard" if dst_ip.is_unspecified
                                       else "a loopback address"))
    src = src_p if src_p is not None else (
        ipaddress.IPv4Address("127.0.0.1") if dst_ip.version == 4 else ipaddress.IPv6Address("::1"))
    ck.known["src"] = src
    cands: List[Candidate] = []
    if bind_cands:
        cands = bind_cands[:1]
        ck.say("device: %s port %d, chosen at bind time" % (cands[0].device, cands[0].port))
    elif src_p is None:
        first = _first_active_port(devs)
        if first is None:
            ck.say("device: none: the kernel binds a loopback id to the first RDMA device")
            ck.lack("device", _errno.ENODEV, "no RDMA %s is visible for a loopback resolution"
                    % ("device" if not devs else "port"),
                    hint="the kernel binds a loopback id to the first RDMA device: load one "
                    "(e.g. `rdma link add rxe0 type rxe netdev eth0`)")
        else:
            d, p = first
            g0 = next((g for g in p.gids if g.index == 0), None)
            cands = [Candidate(device=d.name, device_index=d.index, port=p.number, gid_index=0,
                               gid=g0.gid if g0 else None, gid_type=g0.type if g0 else None,
                               port_state=p.state, default=True)]
            ck.say("device: %s port %d GID 0: the first device with an ACTIVE port" % (d.name, p.number))
    ck.known.update(candidates=tuple(cands), device_chosen_at="bind" if bind_cands else "resolve")
    if check_node:
        _check_node(ck)
    return ck.prediction(dst_ip)


def _first_active_port(devs: Sequence[Device]) -> Optional[Tuple[Device, Any]]:
    """The first device x port that is ACTIVE, else the first device's first port."""
    for d in _device_order(devs):
        for p in d.ports:
            if p.state is PortState.ACTIVE:
                return d, p
    if devs:
        d0 = _device_order(devs)[0]
        if d0.ports:
            return d0, d0.ports[0]
    return None


def _index_text(index: Optional[int]) -> str:
    return "" if index is None else " (index %d)" % index


def _list_devices() -> List[Device]:
    from .devices import list_devices

    return list_devices()


def _no_device_hint(netdev: str, devs: Sequence[Device], net: _Net, version: int) -> str:
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


def _route_hint(err: int, bound: int) -> str:
    base = {
        _errno.ENETUNREACH: "no route matches in this network namespace (see `ip route get` and `ip rule`)",
        _errno.EHOSTUNREACH: "an `unreachable` route matches the destination",
        _errno.EACCES: "a `prohibit` route matches the destination",
        _errno.EINVAL: "a `blackhole` route matches the destination",
    }.get(err, "the routing tables refuse this destination")
    if bound:
        base += " (the lookup is restricted to the bound netdev)"
    return base


# --------------------------------------------------------------------------------------


def _norm_ip(value: Any) -> Optional[IPAddress]:
    if value is None:
        return None
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return _plain(value)
    if isinstance(value, tuple) and value:
        return _norm_ip(value[0])  # (address, port) pairs
    ip = getattr(value, "ip", None) or getattr(value, "address", None)
    if ip is not None and ip is not value:
        return _norm_ip(ip)
    try:
        return _plain(ipaddress.ip_address(str(value).split("%")[0]))
    except ValueError:
        return None


def _norm_gid(value: Any) -> Optional[ipaddress.IPv6Address]:
    if value is None:
        return None
    if isinstance(value, ipaddress.IPv6Address):
        return _plain(value)  # type: ignore[return-value]
    if isinstance(value, (bytes, bytearray)) and len(value) == 16:
        return ipaddress.IPv6Address(bytes(value))
    try:
        return ipaddress.IPv6Address(str(value))
    except ValueError:
        return None


def explain(prediction: Prediction, kernel_result: Any) -> List[str]:
    """Compare a prediction with what the kernel chose; ``[]`` when they agree.

    ``kernel_result`` is anything with ``src_addr``, ``device_name``,
    ``device_index``, ``port_num`` and ``sgid`` attributes (None where
    unknown; missing attributes count as unknown).  Each mismatch is one
    sentence naming both sides.
    """
    out: List[str] = []
    pick = prediction.chosen

    def get(name: str) -> Any:
        return getattr(kernel_result, name, None)

    k_src = _norm_ip(get("src_addr"))
    if k_src is not None and prediction.src is not None and k_src != _plain(prediction.src):
        out.append("source address: predicted %s, the kernel chose %s" % (prediction.src, k_src))
    k_name = get("device_name")
    if k_name is not None and pick is not None and k_name != pick.device:
        out.append("device: predicted %s, the kernel chose %s" % (pick.device, k_name))
    k_index = get("device_index")
    if (k_index is not None and k_index >= 0 and pick is not None and pick.device_index is not None
            and k_index != pick.device_index):
        out.append("device index: predicted %d, the kernel chose %d" % (pick.device_index, k_index))
    k_port = get("port_num")
    if k_port is not None and pick is not None and k_port != pick.port:
        out.append("port: predicted %d, the kernel chose %d" % (pick.port, k_port))
    k_gid = _norm_gid(get("sgid"))
    expected_gids = set()
    if pick is not None and pick.gid is not None:
        expected_gids.add(pick.gid)
    if pick is not None and pick.gid_type in (GidType.ROCE_V1, GidType.ROCE_V2) and prediction.src is not None:
        # on RoCE, QUERY GID reports the source IP as the GID (rdma_read_gids -> rdma_ip2gid),
        # which differs from the table's GID 0 for a loopback resolution
        expected_gids.add(_ip2gid(_plain(prediction.src)))
    if k_gid is not None and pick is not None and pick.gid is not None and k_gid not in expected_gids:
        out.append("source GID: predicted %s (index %s, %s), the kernel chose %s"
                   % (gid_text(pick.gid), pick.gid_index, pick.gid_type, gid_text(k_gid)))
    if pick is None and (k_name is not None or k_gid is not None):
        out.append("device: predicted none, the kernel chose %s" % (k_name or k_gid))
    return out


#: how often solicit_neighbour looks at the neighbour's state (seconds)
_NEIGHBOUR_POLL = 0.002


def solicit_neighbour(prediction: Prediction, timeout: float, network: Any = None) -> Tuple[Optional["NudState"], float]:
    """Have the kernel resolve the prediction's next hop (ARP/ND) before RESOLVE_ADDR asks:
    one empty UDP datagram to the destination's discard port (9) makes the kernel solicit
    the next hop; then its state is read until it is valid, FAILED, or ``timeout`` seconds
    have passed.  Returns (the last state seen, milliseconds taken).

    Why: a cold resolve's RESOLVE_ADDR often waits to its timeout, because the neighbour's
    answer can come before the request is queued, and the queued request then retries only at
    its deadline (addr.c).  A neighbour already valid is used at once."""
    import socket
    import time

    if network is None:
        from . import netlink as network
    hop, ifindex = prediction.next_hop, prediction.route_ifindex or prediction.ifindex
    if hop is None or ifindex is None:
        return prediction.neighbour, 0.0
    start = time.monotonic()
    family = socket.AF_INET if prediction.dst.version == 4 else socket.AF_INET6
    with socket.socket(family, socket.SOCK_DGRAM) as s:
        try:
            if prediction.src is not None:
                s.bind((str(prediction.src), 0))
            s.sendto(b"", (str(prediction.dst), 9))
        except OSError:
            pass  # the state read below says what became of the neighbour
    state = network.neighbour(ifindex, hop)
    while not state.valid and state != state.FAILED and time.monotonic() - start < timeout:
        time.sleep(_NEIGHBOUR_POLL)
        state = network.neighbour(ifindex, hop)
    return state, (time.monotonic() - start) * 1000
