"""The resolutions that skip IP routing: an InfiniBand destination (AF_IB:
``cma_resolve_ib_dev`` picks the port) and the wildcard or a loopback destination
(``cma_resolve_loopback``)."""

from __future__ import annotations

import errno as _errno
import ipaddress
from typing import Any, List, Optional, Sequence

from ..addr import Address as SockAddr
from ..devices import Device, LinkLayer, PortState
from .gids import device_order, first_active_port, gid_text, index_text
from .missing import check_device_node, no_device
from .model import Candidate, Checks, IPAddress, Prediction
from .network import plain

__all__ = ["predict_ib", "predict_loopback"]


def predict_ib(dst: SockAddr, src: Optional[SockAddr], devs: List[Device], ck: Checks,
               check_node: bool) -> Prediction:
    """AF_IB: ``cma_resolve_ib_dev`` (no source) or the port holding the source GID (bind)."""
    gid = ipaddress.IPv6Address(dst.ip.packed)
    prefix = ipaddress.IPv6Network((int(gid) >> 64 << 64, 64))
    ck.known.update(src_given=src.ip if src is not None else None, network="IB")
    ck.say("destination gid:%s (pkey %#06x) is an InfiniBand address (AF_IB): no IP routing, ARP or netdev; "
           "the kernel picks the port itself" % (gid, dst.pkey))
    ib_ports = [(d, p) for d in device_order(devs) for p in d.ports if p.link_layer is LinkLayer.INFINIBAND]

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
        no_device(ck, None)
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
        ck.say("device: %s%s port %d GID %s %s" % (c.device, index_text(c.device_index), c.port, c.gid_index,
                                                   gid_text(c.gid)))
        ck.say("assumed: pkey %#06x is in the port's pkey table (not checked here)" % dst.pkey)
    ck.known["candidates"] = tuple(cands)
    if check_node:
        check_device_node(ck)
    return ck.prediction(gid)


def predict_loopback(dst_ip: IPAddress, src_p: Optional[IPAddress], devs: Sequence[Device],
                     bind_cands: List[Candidate], ck: Checks, check_node: bool) -> Prediction:
    """Destination 0.0.0.0, ::, 127.0.0.0/8 or ::1 -> ``cma_resolve_loopback``: no routing at all.

    The id keeps the device bound with its source, or takes the first device
    with an ACTIVE port (else the first device, port 1), GID index 0; without a
    specific source its source becomes 127.0.0.1 / ::1.
    """
    ck.say("destination %s is %s: the kernel resolves it as loopback (cma_resolve_loopback), "
           "without routing or ARP" % (plain(dst_ip), "the wildcard" if dst_ip.is_unspecified
                                       else "a loopback address"))
    src = src_p if src_p is not None else (
        ipaddress.IPv4Address("127.0.0.1") if dst_ip.version == 4 else ipaddress.IPv6Address("::1"))
    ck.known["src"] = src
    cands: List[Candidate] = []
    if bind_cands:
        cands = bind_cands[:1]
        ck.say("device: %s port %d, chosen at bind time" % (cands[0].device, cands[0].port))
    elif src_p is None:
        first = first_active_port(devs)
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
        check_device_node(ck)
    return ck.prediction(dst_ip)
