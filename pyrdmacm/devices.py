"""RDMA devices, ports and GID tables without libibverbs.

Theory of operation
-------------------
The kernel describes its RDMA devices in two places, and neither needs libibverbs or a
``/dev/infiniband/uverbs*`` node:

* RDMA netlink (``rdma dev`` / ``rdma link``, see :mod:`pyrdmacm.netlink`): the stable
  **device index** (the identity the kernel's ``QUERY`` answers carry since 5.8 as
  ``ibdev_index``), node GUID, node type, protocol, port state, LID and the port's netdev.
  Preferred whenever it answers.
* sysfs ``/sys/class/infiniband/<dev>/``: ``node_guid``, ``node_type`` and per port
  ``state``, ``phys_state``, ``link_layer``, ``lid``, the GID table ``gids/<i>`` with
  ``gid_attrs/types/<i>`` and ``gid_attrs/ndevs/<i>``; no device index, and no
  ``active_mtu`` (read if a driver ever provides one). sysfs is the fallback for everything,
  and the only source of **GIDs**: NLDEV has no GID table dump.

:func:`list_devices` reads both and merges them by device name; devices come in index order
(the order the kernel's rdma_cm walks them in), sysfs-only devices after, by name.
``sysfs_root`` is a parameter so that tests can use a fake tree.

Byte orders and formats:

* ``node_guid`` in sysfs is text, four big-endian 16-bit groups ``"xxxx:xxxx:xxxx:xxxx"``;
  NLDEV sends it as a host-order u64 holding the same number (the kernel converts the __be64
  with ``be64_to_cpu``). Both give the same :class:`int` here. (The rdma_cm
  ``QUERY``/``QUERY_ROUTE`` responses carry it raw as __be64: decode those 8 bytes
  big-endian to compare.)
* GIDs in sysfs are eight big-endian 16-bit groups (``%pI6``); unused entries read as all
  zeros, and their ``types``/``ndevs`` files fail to read.
* A RoCE GID *is* an IP address: IPv4 ``a.b.c.d`` appears as the IPv4-mapped
  ``::ffff:a.b.c.d``; IPv6 addresses (the default GID is the netdev's fe80:: EUI-64 address)
  appear as themselves. An IPoIB netdev's 20-byte hardware address is 4 bytes of flags/QPN
  followed by its port's 16-byte GID.
"""

from __future__ import annotations

import enum
import ipaddress
import os
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Type, TypeVar, Union

from .abi.configfs import CONFIGFS, port_defaults
from .abi.named import NamedIntEnum
from .errors import KernelError

if TYPE_CHECKING:  # pragma: no cover - netlink imports pyroute2: only when asked
    from .netlink import NlDevice, NlPort

__all__ = [
    "GidType",
    "LinkLayer",
    "NodeType",
    "PortState",
    "PhysState",
    "Gid",
    "Port",
    "Device",
    "list_devices",
    "find_device",
    "ports_for_netdev",
    "rdma_netdevs",
    "ipoib_gid",
    "guid_text",
    "roce_path_mtu",
]

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]


class GidType(str, enum.Enum):
    """The kind of a GID table entry; the value is the spelling used here and by rdma-core."""

    IB = "IB"
    ROCE_V1 = "RoCE v1"
    ROCE_V2 = "RoCE v2"

    def __str__(self) -> str:
        return str(self.value)


class LinkLayer(str, enum.Enum):
    """``ports/<p>/link_layer``: what the port speaks on the wire."""

    INFINIBAND = "InfiniBand"
    ETHERNET = "Ethernet"
    UNKNOWN = "Unknown"

    def __str__(self) -> str:
        return str(self.value)


class NodeType(NamedIntEnum):
    """``RDMA_NODE_*`` (rdma_netlink.h); sysfs prints ``"1: CA"``."""

    CA = 1
    SWITCH = 2
    ROUTER = 3
    RNIC = 4  # iWARP
    USNIC = 5
    USNIC_UDP = 6
    UNSPECIFIED = 7


class PortState(NamedIntEnum):
    """``enum ib_port_state``; sysfs prints ``"4: ACTIVE"``."""

    NOP = 0
    DOWN = 1
    INIT = 2
    ARMED = 3
    ACTIVE = 4
    ACTIVE_DEFER = 5


class PhysState(NamedIntEnum):
    """``enum ib_port_phys_state``; sysfs prints ``"5: LinkUp"``."""

    SLEEP = 1
    POLLING = 2
    DISABLED = 3
    PORT_CONFIGURATION_TRAINING = 4
    LINK_UP = 5
    LINK_ERROR_RECOVERY = 6
    PHY_TEST = 7


@dataclass(frozen=True)
class Gid:
    """One valid entry of a port's GID table."""

    index: int
    gid: ipaddress.IPv6Address
    type: GidType
    netdev: Optional[str]  #: the netdev this RoCE GID belongs to (None for IB GIDs)
    ip: Optional[IPAddress]  #: the IP address a RoCE GID stands for; None for IB

    @classmethod
    def make(cls, index: int, gid: ipaddress.IPv6Address, type_: GidType, netdev: Optional[str]) -> "Gid":
        ip: Optional[IPAddress] = None
        if type_ is not GidType.IB:
            ip = gid.ipv4_mapped or gid
        return cls(index, gid, type_, netdev, ip)


@dataclass(frozen=True)
class Port:
    number: int
    state: Optional[PortState]
    phys_state: Optional[PhysState]
    link_layer: LinkLayer
    active_mtu: Optional[int]  #: bytes; None when neither netlink nor sysfs tells
    netdev: Optional[str]  #: RoCE: the port's netdev; IB: its IPoIB netdev, if found
    gids: Tuple[Gid, ...]
    lid: Optional[int] = None
    netdev_index: Optional[int] = None  #: from netlink, only for a netdev in this netns
    netdev_mtu: Optional[int] = None  #: the netdev's MTU (sysfs class/net), when it is in this netns
    #: rdma_cm's defaults an administrator set in configfs (:mod:`pyrdmacm.abi.configfs`):
    #: the GID type new ids take and the TOS of routes with none; None: the kernel's own
    roce_mode: Optional[GidType] = None
    roce_tos: Optional[int] = None

    @property
    def active(self) -> bool:
        return self.state is PortState.ACTIVE

    @property
    def path_mtu(self) -> Optional[int]:
        """The path MTU in bytes rdma_cm gives a RoCE route over this port's netdev (its
        :func:`roce_path_mtu`); None for other link layers or an MTU not known here."""
        if self.link_layer is not LinkLayer.ETHERNET or self.netdev_mtu is None:
            return None
        return roce_path_mtu(self.netdev_mtu)


#: the headers a RoCE packet carries inside the Ethernet MTU (include/rdma/ib_addr.h,
#: iboe_get_mtu(): GRH 40, UDP 8, BTH 12, XRC ext. 4, AtomicETH 28, ICRC 4)
_IBOE_HEADERS = 40 + 8 + 12 + 4 + 28 + 4


def roce_path_mtu(netdev_mtu: int) -> Optional[int]:
    """The IB MTU in bytes that fits a netdev MTU once RoCE's headers are taken off, as the
    kernel's ``iboe_get_mtu()`` computes a RoCE path record's MTU (1500 -> 1024); None
    below 256."""
    room = netdev_mtu - _IBOE_HEADERS
    fitting = [m for m in (4096, 2048, 1024, 512, 256) if m <= room]
    return fitting[0] if fitting else None


@dataclass(frozen=True)
class Device:
    index: Optional[int]  #: the kernel's ibdev index (netlink only; None from sysfs alone)
    name: str
    node_guid: int  #: 0 for devices without one (seen on some RoCE devices)
    node_type: Optional[NodeType]
    ports: Tuple[Port, ...]
    protocol: Optional[str] = None  #: "roce", "ib", "iw", ... (netlink, kernel >= 5.6)
    source: str = "sysfs"  #: where the facts came from: "netlink", "sysfs", "netlink+sysfs"

    def port(self, number: int) -> Optional[Port]:
        """The port numbered ``number`` (1-based, as the kernel numbers them), or None."""
        for p in self.ports:
            if p.number == number:
                return p
        return None

    @property
    def node_guid_text(self) -> str:
        """``xxxx:xxxx:xxxx:xxxx`` as sysfs, ``rdma dev`` and ``ibv_devinfo`` print it."""
        return guid_text(self.node_guid)


# --------------------------------------------------------------------------------------
# sysfs


def _read(path: str) -> Optional[str]:
    try:
        with open(path, "rb", buffering=0) as f:  # unbuffered bytes: a GID table is 1,024 such files a port
            return f.read().decode().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _numbered(text: Optional[str]) -> Optional[int]:
    """``"4: ACTIVE"`` -> 4."""
    if not text:
        return None
    m = re.match(r"\s*(\d+)", text)
    return int(m.group(1)) if m else None


_E = TypeVar("_E", bound=enum.IntEnum)


def _enum(cls: Type[_E], value: Optional[int]) -> Optional[_E]:
    if value is None:
        return None
    try:
        return cls(value)
    except ValueError:
        return None


def _natural(name: str) -> Tuple[object, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def guid_text(guid: int) -> str:
    """A GUID as ``rdma dev`` and ``ibv_devinfo`` write it: ``0002:c903:0030:9e21``."""
    h = "%016x" % guid
    return ":".join(h[i : i + 4] for i in range(0, 16, 4))


def parse_guid(text: str) -> int:
    """``"0002:c903:0030:9e21"`` (sysfs) -> int."""
    return int(text.replace(":", ""), 16)


def _gid_type(text: Optional[str], link_layer: LinkLayer) -> GidType:
    if text is not None and "v2" in text:
        return GidType.ROCE_V2
    return GidType.IB if link_layer is LinkLayer.INFINIBAND else GidType.ROCE_V1


def _read_gids(port_dir: str, link_layer: LinkLayer) -> Tuple[Gid, ...]:
    gid_dir = os.path.join(port_dir, "gids")
    try:
        names = [n for n in os.listdir(gid_dir) if n.isdigit()]
    except OSError:
        return ()
    out = []
    for n in sorted(names, key=int):
        text = _read(os.path.join(gid_dir, n))
        if not text or not text.strip("0:"):
            continue  # an unused entry (all zeros), known without parsing it
        try:
            gid = ipaddress.IPv6Address(text)
        except ValueError:
            continue
        if gid.packed == bytes(16):
            continue  # an unused entry
        type_text = _read(os.path.join(port_dir, "gid_attrs", "types", n))
        ndev = _read(os.path.join(port_dir, "gid_attrs", "ndevs", n)) if link_layer is not LinkLayer.INFINIBAND else None
        out.append(Gid.make(int(n), gid, _gid_type(type_text, link_layer), ndev or None))
    return tuple(out)


def ipoib_gid(hwaddr: bytes) -> Optional[ipaddress.IPv6Address]:
    """The port GID inside an IPoIB netdev's 20-byte hardware address."""
    if len(hwaddr) != 20:
        return None
    return ipaddress.IPv6Address(hwaddr[4:20])


def _sysfs_ipoib_netdevs(sysfs_root: str) -> Dict[ipaddress.IPv6Address, List[str]]:
    """GID -> names of the IPoIB netdevs (ARPHRD_INFINIBAND) carrying it, from class/net."""
    net_dir = os.path.join(sysfs_root, "class", "net")
    out: Dict[ipaddress.IPv6Address, List[str]] = {}
    try:
        names = sorted(os.listdir(net_dir), key=_natural)
    except OSError:
        return out
    for name in names:
        if _read(os.path.join(net_dir, name, "type")) != "32":
            continue
        text = _read(os.path.join(net_dir, name, "address")) or ""
        try:
            gid = ipoib_gid(bytes.fromhex(text.replace(":", "")))
        except ValueError:
            gid = None
        if gid is not None:
            out.setdefault(gid, []).append(name)
    return out


def _read_sysfs(sysfs_root: str) -> Dict[str, Device]:
    base = os.path.join(sysfs_root, "class", "infiniband")
    try:
        names = sorted(os.listdir(base), key=_natural)
    except OSError:
        return {}
    ipoib: Optional[Dict[ipaddress.IPv6Address, List[str]]] = None
    out: Dict[str, Device] = {}
    for name in names:
        dev_dir = os.path.join(base, name)
        guid_text = _read(os.path.join(dev_dir, "node_guid"))
        try:
            guid = parse_guid(guid_text) if guid_text else 0
        except ValueError:
            guid = 0
        node_type = _enum(NodeType, _numbered(_read(os.path.join(dev_dir, "node_type"))))
        ports: List[Port] = []
        ports_dir = os.path.join(dev_dir, "ports")
        try:
            port_names = sorted((p for p in os.listdir(ports_dir) if p.isdigit()), key=int)
        except OSError:
            port_names = []
        for pn in port_names:
            pdir = os.path.join(ports_dir, pn)
            ll_text = _read(os.path.join(pdir, "link_layer"))
            try:
                link_layer = LinkLayer(ll_text) if ll_text else LinkLayer.UNKNOWN
            except ValueError:
                link_layer = LinkLayer.UNKNOWN
            gids = _read_gids(pdir, link_layer)
            netdev: Optional[str] = None
            if link_layer is LinkLayer.INFINIBAND:
                if ipoib is None:
                    ipoib = _sysfs_ipoib_netdevs(sysfs_root)
                for g in gids:
                    if g.gid in ipoib:
                        netdev = ipoib[g.gid][0]
                        break
            else:
                # the port's own netdev owns its default GID (index 0); upper
                # devices (vlan, bond) own GIDs further down the table
                netdev = next((g.netdev for g in gids if g.netdev), None)
            lid_text = _read(os.path.join(pdir, "lid"))
            mtu_text = _read(os.path.join(pdir, "active_mtu"))
            ports.append(
                Port(
                    number=int(pn),
                    state=_enum(PortState, _numbered(_read(os.path.join(pdir, "state")))),
                    phys_state=_enum(PhysState, _numbered(_read(os.path.join(pdir, "phys_state")))),
                    link_layer=link_layer,
                    active_mtu=_mtu(mtu_text),
                    netdev=netdev,
                    gids=gids,
                    lid=int(lid_text, 16) if lid_text and re.fullmatch(r"0x[0-9a-fA-F]+", lid_text) else None,
                )
            )
        out[name] = Device(
            index=None,
            name=name,
            node_guid=guid,
            node_type=node_type,
            ports=tuple(ports),
            source="sysfs",
        )
    return out


def _mtu(text: Optional[str]) -> Optional[int]:
    """``"1024"`` or ``"3: 1024"`` or an ib_mtu enum (1..5) -> bytes."""
    if not text:
        return None
    nums = re.findall(r"\d+", text)
    if not nums:
        return None
    value = int(nums[-1])
    if 1 <= value <= 5:
        return 128 << value  # IB_MTU_256 = 1 ... IB_MTU_4096 = 5
    return value


# --------------------------------------------------------------------------------------
# merge


_PROTOCOL_LINK_LAYER = {
    "ib": LinkLayer.INFINIBAND,
    "opa": LinkLayer.INFINIBAND,
    "roce": LinkLayer.ETHERNET,
    "iw": LinkLayer.ETHERNET,
    "usnic": LinkLayer.ETHERNET,
}


def _from_netlink(
    nl_devs: Sequence["NlDevice"], nl_ports: Sequence["NlPort"], sys_devs: Dict[str, Device]
) -> List[Device]:
    """Netlink's devices and ports, completed by sysfs (GIDs, link layer) where it has them."""
    out: List[Device] = []
    for d in nl_devs:
        sdev = sys_devs.get(d.name)
        sports = {p.number: p for p in sdev.ports} if sdev else {}
        ports: List[Port] = []
        nports = [p for p in nl_ports if p.dev_index == d.index]
        for p in nports:
            sp = sports.get(p.port)
            state = _enum(PortState, p.state)
            phys = _enum(PhysState, p.phys_state)
            ports.append(
                Port(
                    number=p.port,
                    state=state if state is not None else (sp.state if sp else None),
                    phys_state=phys if phys is not None else (sp.phys_state if sp else None),
                    link_layer=sp.link_layer if sp else _PROTOCOL_LINK_LAYER.get(d.protocol or "", LinkLayer.UNKNOWN),
                    active_mtu=sp.active_mtu if sp else None,
                    netdev=p.netdev or (sp.netdev if sp else None),
                    gids=sp.gids if sp else (),
                    lid=p.lid if p.lid is not None else (sp.lid if sp else None),
                    netdev_index=p.netdev_index,
                )
            )
        if not nports and sdev:
            ports = list(sdev.ports)
        out.append(
            Device(
                index=d.index,
                name=d.name,
                node_guid=d.node_guid or (sdev.node_guid if sdev else 0),
                node_type=_enum(NodeType, d.node_type) or (sdev.node_type if sdev else None),
                ports=tuple(ports),
                protocol=d.protocol,
                source="netlink+sysfs" if sdev else "netlink",
            )
        )
    return out


def list_devices(sysfs_root: str = "/sys", *, use_netlink: bool = True, configfs_root: str = CONFIGFS) -> List[Device]:
    """Every RDMA device this process can see, with ports and GID tables.

    RDMA netlink is asked first (device index, states, netdevs); when it is
    refused (no RDMA netlink in this kernel: EPROTONOSUPPORT; EPERM) or
    ``use_netlink`` is false, sysfs alone answers and ``Device.index`` is None.
    GIDs always come from ``<sysfs_root>/class/infiniband``; each port's netdev
    MTU from ``class/net``, rdma_cm's defaults from ``configfs_root``.  An empty
    list means no RDMA device at all (the kernel's rdma_cm would answer ENODEV).
    """
    return [_with_host_facts(d, sysfs_root, configfs_root) for d in _list(sysfs_root, use_netlink)]


def _with_host_facts(dev: Device, sysfs_root: str, configfs_root: str) -> Device:
    """``dev`` with each port's ``netdev_mtu`` (``class/net/<netdev>/mtu``) and rdma_cm's
    configfs defaults."""
    ports = []
    for p in dev.ports:
        text = _read(os.path.join(sysfs_root, "class", "net", p.netdev, "mtu")) if p.netdev else None
        mode, tos = port_defaults(dev.name, p.number, configfs_root)
        ports.append(replace(p, netdev_mtu=int(text) if text and text.isdigit() and text.isascii() else None,
                             roce_mode=GidType(mode) if mode else None, roce_tos=tos))
    return replace(dev, ports=tuple(ports))


def _list(sysfs_root: str, use_netlink: bool) -> List[Device]:
    sys_devs = _read_sysfs(sysfs_root)
    if use_netlink:
        try:
            from . import netlink

            with netlink.RdmaNetlink() as ch:
                nl_devs = netlink.devices(channel=ch)
                try:
                    nl_ports: Sequence["NlPort"] = netlink.ports(channel=ch)
                except KernelError:
                    nl_ports = []
        except (KernelError, OSError):
            pass
        else:
            merged = _from_netlink(nl_devs, nl_ports, sys_devs)
            seen = {d.name for d in merged}
            # devices sysfs shows but netlink does not: other netns (exclusive
            # mode) or a sysfs of another namespace; keep them, index unknown
            return merged + [d for n, d in sys_devs.items() if n not in seen]
    return list(sys_devs.values())


# --------------------------------------------------------------------------------------
# helpers


def _devices(devices: Optional[Iterable[Device]]) -> List[Device]:
    return list(devices) if devices is not None else list_devices()


def find_device(index: Optional[int] = None, node_guid: Optional[int] = None, *,
                devices: Optional[Iterable[Device]] = None) -> Optional[Device]:
    """The device the kernel named by ``index`` (ibdev_index) and/or ``node_guid``.

    The index wins when known (not None and not -1, which old kernels send):
    GUIDs can be 0 or shared.  If both are known they must agree.  A GUID of 0
    identifies nothing: without an index the answer is None.
    """
    devs = _devices(devices)
    if index is not None and index >= 0:
        for d in devs:
            if d.index == index:
                if node_guid and d.node_guid and d.node_guid != node_guid:
                    return None
                return d
        return None
    if node_guid:
        for d in devs:
            if d.node_guid == node_guid:
                return d
    return None


def identify_device(index: Optional[int], node_guid: int,
                    sysfs_root: str = "/sys") -> Tuple[Optional[str], Optional[int]]:
    """``(name, index)`` of the device a QUERY reply gave by kernel index (None: not given)
    or node GUID (0: none); the name is None when no device of this host matches, the index
    the one given or, when found through RDMA netlink, the device's.

    A GUID that one device has in sysfs names it in a few reads; the device list (RDMA
    netlink through pyroute2, ~150 ms to import) is for the other cases.
    """
    if node_guid:
        root = os.path.join(sysfs_root, "class", "infiniband")
        found = []
        try:
            names = os.listdir(root)
        except OSError:
            names = []
        for name in names:
            text = _read(os.path.join(root, name, "node_guid"))
            try:
                if text is not None and parse_guid(text) == node_guid:
                    found.append(name)
            except ValueError:
                continue
        if len(found) == 1:
            return found[0], index
    if index is None and not node_guid:
        return None, None
    try:
        dev = find_device(index=index, node_guid=node_guid or None, devices=list_devices(sysfs_root))
    except (OSError, KernelError, ImportError):  # no sysfs, no RDMA netlink, no pyroute2
        return None, index
    if dev is None:
        return None, index
    return dev.name, (index if index is not None else dev.index)


def ports_for_netdev(ifname: str, *,
                     devices: Optional[Iterable[Device]] = None) -> List[Tuple[Device, Port, List[Gid]]]:
    """The (device, port, GIDs on ``ifname``) triples that serve netdev ``ifname``.

    RoCE: ports with GIDs whose netdev is ``ifname`` (the port's own netdev or
    an upper device: vlan, bond, macvlan).  IB/iWARP: ports whose netdev is
    ``ifname`` (their GIDs have no netdev; all of them are listed).
    """
    out: List[Tuple[Device, Port, List[Gid]]] = []
    for d in _devices(devices):
        for p in d.ports:
            gids = [g for g in p.gids if g.netdev == ifname]
            if not gids and p.netdev == ifname:
                gids = [g for g in p.gids if g.netdev is None] if p.link_layer is LinkLayer.INFINIBAND else []
            if gids or p.netdev == ifname:
                out.append((d, p, gids))
    return out


def rdma_netdevs(*, devices: Optional[Iterable[Device]] = None) -> Set[str]:
    """Names of the netdevs that have an RDMA port or GID behind them."""
    out: Set[str] = set()
    for d in _devices(devices):
        for p in d.ports:
            if p.netdev:
                out.add(p.netdev)
            out.update(g.netdev for g in p.gids if g.netdev)
    return out

