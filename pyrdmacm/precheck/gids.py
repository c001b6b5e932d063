"""Which RDMA device, port and GID the kernel takes for an IP address
(``cma_acquire_dev_by_src_ip``, at bind or at resolve time), in the kernel's device order;
the port behind an IPoIB netdev; GIDs as text."""

from __future__ import annotations

import errno as _errno
import ipaddress
from typing import TYPE_CHECKING, Any, List, Optional, Sequence, Tuple

from ..devices import Device, GidType, LinkLayer, NodeType, PortState, ipoib_gid, rdma_netdevs
from .missing import no_device, no_device_hint
from .model import Candidate, Checks, IPAddress, IpoibStatus
from .network import ARPHRD_ETHER, ARPHRD_INFINIBAND, Net

if TYPE_CHECKING:  # pragma: no cover
    from ..netlink import Link

__all__ = ["ip2gid", "gid_text", "default_type", "device_order", "candidates", "kernel_pick", "first_active_port",
           "index_text", "ipoib_status", "choose_device"]


def ip2gid(ip: IPAddress) -> ipaddress.IPv6Address:
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


def default_type(gids: Sequence[Any], mode: Optional[GidType] = None) -> GidType:
    """The GID type rdma_cm uses on a RoCE port: the port's configfs ``default_roce_mode``
    (``mode``) where an administrator set it, else v2 when the port has it."""
    if mode is not None:
        return mode
    return GidType.ROCE_V2 if any(g.type is GidType.ROCE_V2 for g in gids) else GidType.ROCE_V1


def device_order(devices: Sequence[Device]) -> List[Device]:
    """The kernel's device order: by index (netlink's), devices without one (sysfs only) after."""
    return sorted(devices, key=lambda d: (d.index is None, d.index if d.index is not None else 0))


def candidates(devices: Sequence[Device], link: "Link", src: Optional[IPAddress]) -> List[Candidate]:
    """``cma_acquire_dev_by_src_ip`` over our view of the devices: kernel's pick first."""
    picks: List[Candidate] = []
    others: List[Candidate] = []
    iboe_gid = ip2gid(src) if src is not None else None
    hw_gid = ipoib_gid(link.address) if link.type == ARPHRD_INFINIBAND and link.address else None
    for d in device_order(devices):
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
            if (link.type == ARPHRD_INFINIBAND) != is_ib:
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
            elif link.type == ARPHRD_ETHER:  # the source IP as a GID, default type, on this netdev
                want_gid, want_type, want_ndev = iboe_gid, default_type(p.gids, p.roce_mode), link.name
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


def kernel_pick(cands: Sequence[Candidate]) -> Optional[Candidate]:
    """The candidate the kernel takes: the first, when it has the port's default GID type."""
    return cands[0] if cands and cands[0].default else None


def first_active_port(devs: Sequence[Device]) -> Optional[Tuple[Device, Any]]:
    """The first device x port that is ACTIVE, else the first device's first port."""
    for d in device_order(devs):
        for p in d.ports:
            if p.state is PortState.ACTIVE:
                return d, p
    if devs:
        d0 = device_order(devs)[0]
        if d0.ports:
            return d0, d0.ports[0]
    return None


def index_text(index: Optional[int]) -> str:
    """What follows a device's name: ``" (index 3)"`` when its index is known, else nothing."""
    return "" if index is None else " (index %d)" % index


def ipoib_status(link: "Link", net: Net, devices: Sequence[Device]) -> IpoibStatus:
    """The IPoIB netdev ``link`` and the InfiniBand port behind it (its GID in the hardware address)."""
    gid = ipoib_gid(link.address) if link.address else None
    dev_name = port_no = None
    state = None
    for d in device_order(devices):
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


def choose_device(ck: Checks, devs: List[Device], net: Net, eff: "Link", chosen_src: Optional[IPAddress],
                  src_specific: bool, src_link: Optional["Link"], bind_cands: List[Candidate], dst_p: IPAddress,
                  v: int) -> List[Candidate]:
    """``cma_acquire_dev_by_src_ip`` at resolve time (or the bind's pick); a lack is recorded, not raised."""
    if src_specific:
        if src_link is not None and eff.index != src_link.index and kernel_pick(bind_cands) is not None:
            ck.warn("the device was chosen at bind time for %s, but the route leaves through %s"
                    % (src_link.name, eff.name), _errno.ENODEV)
        return bind_cands
    if not devs:
        no_device(ck, eff.name)
        return []
    gid_tables_known = any(p.gids or p.netdev for d in devs for p in d.ports)
    cands = candidates(devs, eff, chosen_src)
    if kernel_pick(cands) is not None:
        pick = cands[0]
        ck.say("device: %s%s port %d GID %s [%s] %s: the first device x port with a %s "
               "GID for %s on %s" % (pick.device, index_text(pick.device_index), pick.port, pick.gid_index,
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
                hint=no_device_hint(eff.name, devs, net, v)
                + "; the kernel reports this as RDMA_CM_EVENT_ADDR_ERROR with status -19 (ENODEV)")
    else:
        ck.warn("cannot see any RDMA GID table (no sysfs?): the device could not be predicted", _errno.ENODEV)
    return cands
