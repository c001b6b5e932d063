"""What ``resolve_addr`` will do: :func:`predict`, and its IP path -- binding the source, the
kernel's own route lookup, the netdev the id binds to, then the device, the next hop and the
IPoIB netdev (the package's docstring tells the kernel's steps)."""

from __future__ import annotations

import errno as _errno
from typing import TYPE_CHECKING, Any, Iterable, List, Optional

from ..addr import AF_IB, missing_zone
from ..devices import Device, GidType, PortState
from ..errors import PrecheckError, errno_name
from .gids import candidates, choose_device, gid_text, ipoib_status, kernel_pick
from .missing import check_device_node, no_device, no_device_hint, route_hint
from .model import Candidate, Checks, IPAddress, Prediction
from .neighbour import check_neighbour
from .network import (ARPHRD_INFINIBAND, Net, any_or_loopback, as_address, as_ip, is_link_local6, plain, same_subnet,
                      zone_index)
from .unrouted import predict_ib, predict_loopback

if TYPE_CHECKING:  # pragma: no cover
    from ..netlink import Link, Route

__all__ = ["predict"]


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
    dst_a = as_address(dst, "dst")
    src_a = as_address(src, "src") if src is not None else None
    devs = list(devices) if devices is not None else _list_devices()
    ck = Checks()
    if src_a is not None and (src_a.family == AF_IB) != (dst_a.family == AF_IB) or (
            src_a is not None and src_a.ip.version != dst_a.ip.version):
        raise PrecheckError(
            _errno.EINVAL, "source and destination are of different address families",
            src=src_a.ip if src_a else None, dst=dst_a.ip, hint="give a source of the destination's family, or none",
        )
    if dst_a.family == AF_IB:
        pred = predict_ib(dst_a, src_a, devs, ck, check_node)
    else:
        if network is None:
            from .. import netlink as network  # lazily: pyroute2 is slow to import
        session = getattr(network, "session", None)  # netlink's: one routing socket for the prediction
        with session() if session is not None else _no_session():
            pred = _predict_ip(as_ip(dst_a), as_ip(src_a) if src_a is not None else None, scope_id, devs,
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
                ck: Checks, check_node: bool) -> Prediction:
    net = Net(network)
    v = dst_ip.version
    ck.known["src_given"] = src_ip

    # zones only matter for link-local addresses (the kernel ignores them elsewhere)
    dst_zone = None
    if is_link_local6(dst_ip):
        dst_zone = zone_index(getattr(dst_ip, "scope_id", None) or scope_id, net, "dst")
    src_zone = None
    if src_ip is not None and is_link_local6(src_ip):
        src_zone = zone_index(getattr(src_ip, "scope_id", None) or scope_id, net, "src")
    # resolve_addr refuses a link-local address without a zone before any syscall
    # (the kernel would refuse a source with EINVAL, and route a destination over
    # whichever netdev its table lists first): the same refusal, in the same words
    for ip, zone in ((dst_ip, dst_zone), (src_ip, src_zone)):
        if ip is not None and is_link_local6(ip) and zone is None:
            raise missing_zone(plain(ip))
    dst_p = plain(dst_ip)
    src_p = plain(src_ip) if src_ip is not None else None
    src_specific = src_p is not None and not src_p.is_unspecified

    def fail(err: int, what: str, **kw: Any) -> PrecheckError:
        """The kernel's refusal at this step (or the earlier one at bind), with the prediction so far."""
        if check_node:
            check_device_node(ck)
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
        if is_link_local6(src_p):
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
        bind_cands = candidates(devs, src_link, src_p)
        if not devs:
            no_device(ck, src_link.name)
        elif kernel_pick(bind_cands) is None:
            ck.say("device: none has a GID for %s on %s: the kernel refuses the bind (ENODEV from write())"
                   % (src_p, src_link.name))
            ck.lack("gid", _errno.ENODEV, "no RDMA device has a GID for the source address on %s" % src_link.name,
                    no_device_hint(src_link.name, devs, net, v), netdev=src_link.name)
        else:
            pick = bind_cands[0]
            ck.say("device: %s port %d GID %s [%s] %s, chosen at bind time" % (
                pick.device, pick.port, pick.gid_index, pick.gid_type, gid_text(pick.gid)))
    elif is_link_local6(dst_p):
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
    if any_or_loopback(dst_p):
        return predict_loopback(dst_ip, src_p if src_specific else None, devs, bind_cands, ck, check_node)

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
                   netdev=net.name(bound) if bound else None, hint=route_hint(route.errno, bound))
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
    routed = route.gateway is not None and type_link.type != ARPHRD_INFINIBAND
    network_type = ("IPv4" if v == 4 else "IPv6") if routed else "IB"
    if routed:
        ck.say("the route has a gateway: RoCE v2 (routable) is required")
    ck.known.update(netdev=eff.name, ifindex=eff.index, network=network_type)

    # ---- 3. the RDMA device -----------------------------------------------------------
    cands = choose_device(ck, devs, net, eff, chosen_src, src_specific, src_link, bind_cands, dst_p, v)
    ck.known["candidates"] = tuple(cands)
    pick_c = kernel_pick(cands)
    if pick_c is not None:
        if pick_c.port_state is not None and pick_c.port_state is not PortState.ACTIVE:
            ck.warn("port %s/%d is %s, not ACTIVE" % (pick_c.device, pick_c.port, pick_c.port_state),
                    _errno.ENETDOWN)
        if routed and pick_c.gid_type is GidType.ROCE_V1:
            ck.warn("the route goes through gateway %s but %s/%d only has RoCE v1 GIDs, which do not "
                    "route" % (route.gateway, pick_c.device, pick_c.port), _errno.EHOSTUNREACH)

    # ---- neighbour ---------------------------------------------------------------------
    check_neighbour(ck, network, route, route_link, eff, dst_p, routed)

    # ---- IPoIB ---------------------------------------------------------------------------
    if eff.type == ARPHRD_INFINIBAND:
        ipoib = ipoib_status(eff, net, devs)
        ck.known["ipoib"] = ipoib
        ck.say("IPoIB %s: %s, carrier %s, GID %s, port %s/%s %s" % (
            ipoib.netdev, ipoib.operstate, ipoib.carrier, ipoib.gid, ipoib.device, ipoib.port, ipoib.port_state))
        if not ipoib.up:
            ck.warn("IPoIB netdev %s is down: InfiniBand address resolution needs IPoIB up on both ends"
                    % eff.name, _errno.ENETDOWN)

    # ---- several RDMA netdevs on the destination's subnet ------------------------------
    # (only when the routing table decides alone: no source, no zone)
    if not (src_specific or bound or is_link_local6(dst_p)):
        same_subnet(ck, net, devs, dst_p, eff.name)

    if devs and all(d.index is None for d in devs):
        ck.say("RDMA devices from sysfs only (RDMA netlink unavailable): device order by name")
    if check_node:
        check_device_node(ck)
    return ck.prediction(dst_ip)


def _strict(pred: Prediction, ck: Checks, strict: bool) -> Prediction:
    if strict and ck.warnings:
        raise PrecheckError(
            ck.warnings[0][1], "strict pre-check: " + "; ".join(w for w, _ in ck.warnings),
            prediction=pred, src=pred.src_given, dst=pred.dst, netdev=pred.netdev, device=pred.device,
            hint="the kernel would accept this: only the strict pre-check refuses it",
        )
    return pred


def _list_devices() -> List[Device]:
    from ..devices import list_devices

    return list_devices()
