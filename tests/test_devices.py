"""RDMA devices without libibverbs: a fake sysfs tree, golden NLDEV bytes, refused netlink."""

from __future__ import annotations

import errno
import ipaddress
import os
import shutil
import socket
import struct
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import pytest

from pyrdmacm import devices as D
from pyrdmacm.errors import KernelError

# --------------------------------------------------------------------------------------
# A fake /sys: class/infiniband/<dev>/... and class/net/<if>/{type,address}


def _gid_text(gid: str) -> str:
    """'::ffff:10.0.2.15' -> sysfs' %pI6 form '0000:0000:...:0a00:020f'."""
    h = ipaddress.IPv6Address(gid).packed.hex()
    return ":".join(h[i : i + 4] for i in range(0, 32, 4))


class FakeSysfs:
    """Builds a sysfs tree under ``root``; the GID table is written the way the kernel shows it."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        (self.root / "class" / "infiniband").mkdir(parents=True, exist_ok=True)
        (self.root / "class" / "net").mkdir(parents=True, exist_ok=True)

    def device(self, name: str, node_guid: str = "0000:0000:0000:0000", node_type: str = "1: CA") -> Path:
        d = self.root / "class" / "infiniband" / name
        (d / "ports").mkdir(parents=True, exist_ok=True)
        (d / "node_guid").write_text(node_guid + "\n")
        if node_type:
            (d / "node_type").write_text(node_type + "\n")
        return d

    def port(
        self,
        dev: str,
        num: int,
        link_layer: str = "Ethernet",
        state: Optional[str] = "4: ACTIVE",
        phys_state: Optional[str] = "5: LinkUp",
        lid: Optional[str] = "0x0",
        gids: Sequence[Tuple[str, Optional[str], Optional[str]]] = (),
        table_size: int = 8,
    ) -> Path:
        """``gids``: (gid, type text or None, ndev or None) for indexes 0.. ; the rest read as zeros."""
        p = self.root / "class" / "infiniband" / dev / "ports" / str(num)
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (p / sub).mkdir(parents=True, exist_ok=True)
        (p / "link_layer").write_text(link_layer + "\n")
        for fname, value in (("state", state), ("phys_state", phys_state), ("lid", lid)):
            if value is not None:
                (p / fname).write_text(value + "\n")
        for i in range(max(table_size, len(gids))):
            gid, type_, ndev = gids[i] if i < len(gids) else ("::", None, None)
            (p / "gids" / str(i)).write_text(_gid_text(gid) + "\n")
            # invalid entries: the kernel fails the read (EINVAL); here the files are absent
            if type_ is not None:
                (p / "gid_attrs" / "types" / str(i)).write_text(type_ + "\n")
            if ndev is not None:
                (p / "gid_attrs" / "ndevs" / str(i)).write_text(ndev + "\n")
        return p

    def netdev(self, name: str, arphrd: int, address: str) -> None:
        n = self.root / "class" / "net" / name
        n.mkdir(parents=True, exist_ok=True)
        (n / "type").write_text("%d\n" % arphrd)
        (n / "address").write_text(address + "\n")


def roce_gids(ndev: str, mac_ll: str, ips: Iterable[str]) -> List[Tuple[str, Optional[str], Optional[str]]]:
    """A RoCE table: default GID (v1, v2) then each IP as v1 and v2, all on ``ndev``."""
    out: List[Tuple[str, Optional[str], Optional[str]]] = [
        (mac_ll, "IB/RoCE v1", ndev), (mac_ll, "RoCE v2", ndev)]
    for ip in ips:
        a = ipaddress.ip_address(ip)
        gid = "::ffff:%s" % a if a.version == 4 else str(a)
        out += [(gid, "IB/RoCE v1", ndev), (gid, "RoCE v2", ndev)]
    return out


IB_GID = "fe80::2:c903:30:9e21"
IB_HWADDR = "80:00:00:48:" + ":".join(
    "%02x" % b for b in ipaddress.IPv6Address(IB_GID).packed)


def build_two_devices(root: Path) -> FakeSysfs:
    """rxe0: RoCE, node GUID 0, GIDs over eth0 and the VLAN eth0.100 (IPv4-mapped and IPv6);
    mlx5_0: InfiniBand, port DOWN, no lid file, its IPoIB netdev ib0."""
    fs = FakeSysfs(root)
    fs.device("rxe0", node_guid="0000:0000:0000:0000")
    gids = roce_gids("eth0", "fe80::5054:ff:fe12:3456", ["10.0.2.15", "2001:db8::15"])
    gids += [("::ffff:10.100.0.15", "IB/RoCE v1", "eth0.100"), ("::ffff:10.100.0.15", "RoCE v2", "eth0.100")]
    fs.port("rxe0", 1, gids=gids, table_size=12)
    fs.device("mlx5_0", node_guid="0002:c903:0030:9e20")
    fs.port("mlx5_0", 1, link_layer="InfiniBand", state="1: DOWN", phys_state="2: Polling", lid=None,
            gids=[(IB_GID, "IB/RoCE v1", None)], table_size=4)
    fs.netdev("eth0", 1, "52:54:00:12:34:56")
    fs.netdev("ib0", 32, IB_HWADDR)
    fs.netdev("ib0.8001", 32, IB_HWADDR)
    return fs


@pytest.fixture
def fake_sysfs(tmp_path: Path) -> Path:
    build_two_devices(tmp_path)
    return tmp_path


# --------------------------------------------------------------------------------------
# sysfs


def test_sysfs_devices_ports_and_gids(fake_sysfs: Path) -> None:
    devs = D.list_devices(sysfs_root=str(fake_sysfs), use_netlink=False)
    assert [d.name for d in devs] == ["mlx5_0", "rxe0"]  # by name: sysfs has no index
    ib, rxe = devs
    assert all(d.index is None and d.source == "sysfs" for d in devs)

    assert rxe.node_guid == 0 and rxe.node_guid_text == "0000:0000:0000:0000"
    assert ib.node_guid == 0x0002C90300309E20 and ib.node_guid_text == "0002:c903:0030:9e20"
    assert rxe.node_type is D.NodeType.CA and str(rxe.node_type) == "CA"

    (p,) = rxe.ports
    assert p.number == 1 and p.state is D.PortState.ACTIVE and p.phys_state is D.PhysState.LINK_UP
    assert p.link_layer is D.LinkLayer.ETHERNET and p.lid == 0
    assert p.active_mtu is None  # not in sysfs
    assert p.netdev == "eth0"
    assert [g.index for g in p.gids] == list(range(8))  # unused (zero) entries skipped
    by_index = {g.index: g for g in p.gids}
    assert by_index[0].type is D.GidType.ROCE_V1 and by_index[1].type is D.GidType.ROCE_V2
    assert by_index[1].type == "RoCE v2" and str(by_index[1].type) == "RoCE v2"
    assert by_index[0].ip == ipaddress.IPv6Address("fe80::5054:ff:fe12:3456")
    mapped = by_index[3]
    assert mapped.gid == ipaddress.IPv6Address("::ffff:10.0.2.15")
    assert mapped.ip == ipaddress.IPv4Address("10.0.2.15") and mapped.type is D.GidType.ROCE_V2
    assert by_index[5].ip == ipaddress.IPv6Address("2001:db8::15")
    assert (by_index[6].netdev, by_index[7].netdev) == ("eth0.100", "eth0.100")

    (q,) = ib.ports
    assert q.link_layer is D.LinkLayer.INFINIBAND
    assert q.state is D.PortState.DOWN and q.phys_state is D.PhysState.POLLING
    assert q.lid is None  # the optional file is missing
    assert q.netdev == "ib0"  # the IPoIB netdev whose hardware address holds the port GID
    (g,) = q.gids
    assert g.type is D.GidType.IB and g.netdev is None and g.ip is None


def test_sysfs_missing_tree_and_odd_files(tmp_path: Path) -> None:
    assert D.list_devices(sysfs_root=str(tmp_path), use_netlink=False) == []
    fs = FakeSysfs(tmp_path)
    fs.device("weird0", node_guid="not-a-guid", node_type="")
    fs.port("weird0", 1, link_layer="Martian", state="9: ???", phys_state=None, lid="garbage",
            gids=[("fe80::1", None, "eth7")], table_size=1)
    (d,) = D.list_devices(sysfs_root=str(tmp_path), use_netlink=False)
    assert d.node_guid == 0 and d.node_type is None
    (p,) = d.ports
    assert p.link_layer is D.LinkLayer.UNKNOWN and p.state is None and p.phys_state is None and p.lid is None
    assert p.gids[0].type is D.GidType.ROCE_V1  # no types file: IB/RoCE v1 (pre-4.5 kernels)


def test_active_mtu_file_if_a_driver_has_one(tmp_path: Path) -> None:
    fs = build_two_devices(tmp_path)
    (fs.root / "class/infiniband/rxe0/ports/1/active_mtu").write_text("3: 1024\n")
    rxe = [d for d in D.list_devices(sysfs_root=str(tmp_path), use_netlink=False) if d.name == "rxe0"][0]
    assert rxe.ports[0].active_mtu == 1024


def _indexed(devs: List[D.Device]) -> List[D.Device]:
    order = {"rxe0": 0, "mlx5_0": 1}
    return sorted((replace(d, index=order[d.name]) for d in devs), key=lambda d: d.index or 0)


def test_find_device(fake_sysfs: Path) -> None:
    devs = D.list_devices(sysfs_root=str(fake_sysfs), use_netlink=False)
    assert D.find_device(node_guid=0x0002C90300309E20, devices=devs).name == "mlx5_0"  # type: ignore[union-attr]
    assert D.find_device(node_guid=0, devices=devs) is None  # GUID 0 names nothing
    assert D.find_device(devices=devs) is None
    idx = _indexed(devs)
    # node_guid 0 (rxe0): match by index
    assert D.find_device(index=0, node_guid=0, devices=idx).name == "rxe0"  # type: ignore[union-attr]
    assert D.find_device(index=1, node_guid=0x0002C90300309E20, devices=idx).name == "mlx5_0"  # type: ignore[union-attr]
    assert D.find_device(index=1, node_guid=0x1234, devices=idx) is None  # both known, disagree
    assert D.find_device(index=-1, node_guid=0x0002C90300309E20, devices=idx).name == "mlx5_0"  # type: ignore[union-attr]
    assert D.find_device(index=7, devices=idx) is None


def test_ports_for_netdev_and_rdma_netdevs(fake_sysfs: Path) -> None:
    devs = D.list_devices(sysfs_root=str(fake_sysfs), use_netlink=False)
    ((dev, port, gids),) = D.ports_for_netdev("eth0.100", devices=devs)
    assert (dev.name, port.number, [g.index for g in gids]) == ("rxe0", 1, [6, 7])
    ((dev, port, gids),) = D.ports_for_netdev("eth0", devices=devs)
    assert [g.index for g in gids] == [0, 1, 2, 3, 4, 5]
    ((dev, port, gids),) = D.ports_for_netdev("ib0", devices=devs)
    assert dev.name == "mlx5_0" and [str(g.gid) for g in gids] == [IB_GID]
    assert D.ports_for_netdev("eth5", devices=devs) == []
    assert D.rdma_netdevs(devices=devs) == {"eth0", "eth0.100", "ib0"}


# --------------------------------------------------------------------------------------
# RDMA netlink: golden bytes, built here by hand the way the kernel lays them out


def nla(typ: int, payload: bytes, nested: bool = False) -> bytes:
    length = 4 + len(payload)
    return struct.pack("=HH", length, typ | (0x8000 if nested else 0)) + payload + b"\0" * (-length % 4)


def u8(typ: int, v: int) -> bytes:
    return nla(typ, struct.pack("=B", v))


def u32(typ: int, v: int) -> bytes:
    return nla(typ, struct.pack("=I", v))


def u64(typ: int, v: int) -> bytes:
    # the kernel puts a PAD attribute first when the u64 would be misaligned; mimic once
    return nla(0, b"") + nla(typ, struct.pack("=Q", v))


def string(typ: int, s: str) -> bytes:
    return nla(typ, s.encode() + b"\0")


def nlmsg(mtype: int, seq: int, body: bytes, flags: int = 0) -> bytes:
    return struct.pack("=IHHII", 16 + len(body), mtype, flags, seq, 0) + body


def nl_error(seq: int, err: int) -> bytes:
    return nlmsg(2, seq, struct.pack("=i", err) + b"\0" * 16)


def nl_done(seq: int) -> bytes:
    return nlmsg(3, seq, struct.pack("=i", 0), flags=2)


T = lambda op: (5 << 10) + op  # noqa: E731  RDMA_NL_GET_TYPE(RDMA_NL_NLDEV, op)


class FakeNetlinkSocket:
    """Answers each request with ``handler(type, flags, seq, attrs) -> [datagram, ...]``."""

    def __init__(self, handler: Callable[[int, int, int, Dict[int, bytes]], List[bytes]]) -> None:
        self.handler = handler
        self.sent: List[bytes] = []
        self.queue: List[bytes] = []
        self.closed = False

    def send(self, data: bytes) -> int:
        self.sent.append(data)
        length, mtype, flags, seq, _ = struct.unpack_from("=IHHII", data)
        attrs: Dict[int, bytes] = {}
        off = 16
        while off + 4 <= length:
            alen, atype = struct.unpack_from("=HH", data, off)
            attrs[atype & 0x3FFF] = data[off + 4 : off + alen]
            off += (alen + 3) & ~3
        self.queue.extend(self.handler(mtype, flags, seq, attrs))
        return len(data)

    def recv(self, n: int) -> bytes:
        if not self.queue:
            raise socket.timeout()
        return self.queue.pop(0)

    def close(self) -> None:
        self.closed = True


def fake_kernel(mtype: int, flags: int, seq: int, attrs: Dict[int, bytes]) -> List[bytes]:
    """A small NLDEV kernel: rxe0 (index 1, RoCE) and mlx5_0 (index 3, IB)."""
    if mtype == T(15):  # GET_CHARDEV
        if attrs.get(69) != b"rdma_cm\0":
            return [nl_error(seq, -errno.EOPNOTSUPP)]
        body = u64(72, 0xA3A) + u64(71, 4) + string(70, "rdma_cm")
        return [nlmsg(mtype, seq, body)]
    if mtype == T(6):  # SYS_GET
        return [nlmsg(mtype, seq, u8(66, 1) + u8(93, 0))]
    if mtype == T(1):  # GET dump
        d1 = u32(1, 1) + string(2, "rxe0") + u32(3, 1) + u64(6, 0) + u8(14, 1) + string(67, "roce")
        d3 = u32(1, 3) + string(2, "mlx5_0") + u32(3, 1) + u64(6, 0x0002C90300309E20) + u8(14, 1) + string(67, "ib")
        # two messages in one datagram, DONE in the next
        return [nlmsg(mtype, seq, d3, 2) + nlmsg(mtype, seq, d1, 2), nl_done(seq)]
    if mtype == T(5):  # PORT_GET dump: needs DEV_INDEX
        if 1 not in attrs:
            return [nl_error(seq, -errno.EINVAL)]
        idx = struct.unpack("=I", attrs[1])[0]
        if idx == 1:
            body = u32(1, 1) + string(2, "rxe0") + u32(3, 1) + u8(12, 4) + u8(13, 5) + u32(50, 2) + string(51, "eth0")
        else:
            body = u32(1, 3) + string(2, "mlx5_0") + u32(3, 1) + u32(9, 7) + u8(12, 2) + u8(13, 5)
        return [nlmsg(mtype, seq, body, 2), nl_done(seq)]
    if mtype == T(11):  # RES_CM_ID_GET dump
        idx = struct.unpack("=I", attrs[1])[0]
        if idx != 1:
            return [nl_done(seq)]
        sin = struct.pack("=H", socket.AF_INET) + struct.pack("!H", 40000) + bytes([10, 0, 2, 15]) + b"\0" * 120
        sin6 = (struct.pack("=H", socket.AF_INET6) + struct.pack("!H", 7471) + b"\0" * 4
                + ipaddress.IPv6Address("2001:db8::2").packed + b"\0" * 104)
        e1 = u32(3, 1) + u32(32, 0x106) + u8(27, 2) + nla(33, sin) + nla(34, sin6) + u32(63, 5) + u32(28, 4242)
        e2 = u32(32, 0x111) + u8(27, 8) + u32(63, 6) + string(29, "nvme-rdma")
        table = nla(30, nla(31, e1, nested=True) + nla(31, e2, nested=True), nested=True)
        return [nlmsg(mtype, seq, u32(1, 1) + string(2, "rxe0") + table, 2), nl_done(seq)]
    return [nl_error(seq, -errno.EOPNOTSUPP)]


@pytest.fixture
def nl() -> Iterable[object]:
    from pyrdmacm import netlink

    ch = netlink.RdmaNetlink(sock=FakeNetlinkSocket(fake_kernel))
    yield ch
    ch.close()


def test_request_bytes_golden() -> None:
    from pyrdmacm.netlink import nldev
    from pyrdmacm import netlink

    data = netlink.RdmaNetlink.encode(nldev.RDMA_NLDEV_CMD_GET_CHARDEV, [("ATTR_CHARDEV_TYPE", "rdma_cm")], seq=7)
    assert data.hex() == (
        "1c000000" "0f14" "0100" "07000000" "00000000"  # len 28, type (5<<10)+15, NLM_F_REQUEST, seq 7
        "0c00" "4500" "72646d615f636d00"  # CHARDEV_TYPE (69) "rdma_cm\0"
    )
    dump = netlink.RdmaNetlink.encode(nldev.RDMA_NLDEV_CMD_PORT_GET, [("ATTR_DEV_INDEX", 3)], dump=True, seq=1)
    assert dump.hex() == "18000000" "0514" "0103" "01000000" "00000000" "0800" "0100" "03000000"


def test_get_chardev_decodes_huge_dev(nl: object) -> None:
    from pyrdmacm import netlink

    info = netlink.get_chardev(channel=nl)  # type: ignore[arg-type]
    assert info == netlink.ChardevInfo(dev=(10, 58), name="rdma_cm", abi=4)
    assert info.dev_t == os.makedev(10, 58)
    assert netlink.decode_huge_dev(0x12345678) == (0x456, 0x12378)
    with pytest.raises(KernelError) as ei:
        netlink.get_chardev("nosuch", channel=nl)  # type: ignore[arg-type]
    assert ei.value.errno == errno.EOPNOTSUPP and "load the module" in str(ei.value)


def test_devices_ports_sys_cm_ids(nl: object) -> None:
    from pyrdmacm import netlink

    devs = netlink.devices(channel=nl)  # type: ignore[arg-type]
    assert [(d.index, d.name, d.node_guid, d.protocol, d.node_type) for d in devs] == [
        (1, "rxe0", 0, "roce", 1), (3, "mlx5_0", 0x0002C90300309E20, "ib", 1)]
    ports = netlink.ports(channel=nl)  # type: ignore[arg-type]
    assert [(p.dev_name, p.port, p.state, p.phys_state, p.netdev_index, p.netdev, p.lid) for p in ports] == [
        ("rxe0", 1, 4, 5, 2, "eth0", None), ("mlx5_0", 1, 2, 5, None, None, 7)]
    assert netlink.sys_netns_mode(channel=nl) == "shared"  # type: ignore[arg-type]
    ids = netlink.cm_ids(channel=nl)  # type: ignore[arg-type]
    assert len(ids) == 2
    a, b = ids
    assert (a.dev_name, a.port, a.ps_name, a.state, a.pid, a.cm_idn) == ("rxe0", 1, "TCP", netlink.CmIdState.ADDR_RESOLVED, 4242, 5)
    assert a.src == (ipaddress.IPv4Address("10.0.2.15"), 40000)
    assert a.dst == (ipaddress.IPv6Address("2001:db8::2"), 7471)
    assert (b.ps_name, str(b.state), b.src, b.pid, b.kern_name) == ("UDP", "LISTEN", None, None, "nvme-rdma")


def test_kernel_error_reply_keeps_errno() -> None:
    from pyrdmacm import netlink

    ch = netlink.RdmaNetlink(sock=FakeNetlinkSocket(lambda t, f, s, a: [nl_error(s, -errno.EPERM)]))
    with pytest.raises(KernelError) as ei:
        netlink.sys_netns_mode(channel=ch)
    assert ei.value.errno == errno.EPERM and "CAP_NET_ADMIN" in str(ei.value)
    silent = netlink.RdmaNetlink(sock=FakeNetlinkSocket(lambda t, f, s, a: []))
    with pytest.raises(KernelError) as ei:
        netlink.devices(channel=silent)
    assert ei.value.errno == errno.ETIMEDOUT


def test_list_devices_merges_netlink_and_sysfs(fake_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyrdmacm import netlink

    real = netlink.RdmaNetlink

    def factory() -> netlink.RdmaNetlink:
        return real(sock=FakeNetlinkSocket(fake_kernel))

    monkeypatch.setattr(netlink, "RdmaNetlink", factory)
    devs = D.list_devices(sysfs_root=str(fake_sysfs))
    assert [(d.index, d.name, d.source) for d in devs] == [(1, "rxe0", "netlink+sysfs"), (3, "mlx5_0", "netlink+sysfs")]
    rxe, ib = devs
    assert rxe.protocol == "roce" and rxe.ports[0].netdev_index == 2 and len(rxe.ports[0].gids) == 8
    assert ib.ports[0].state is D.PortState.INIT  # netlink's answer wins over sysfs' DOWN
    assert ib.ports[0].lid == 7 and ib.ports[0].netdev == "ib0"
    assert D.find_device(index=1, node_guid=0, devices=devs) is rxe


def test_list_devices_netlink_refused(fake_sysfs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pyrdmacm import netlink

    def refused() -> None:
        raise KernelError(errno.EPROTONOSUPPORT, "socket(AF_NETLINK, NETLINK_RDMA)")

    monkeypatch.setattr(netlink, "RdmaNetlink", refused)
    devs = D.list_devices(sysfs_root=str(fake_sysfs))
    assert [(d.name, d.index, d.source) for d in devs] == [("mlx5_0", None, "sysfs"), ("rxe0", None, "sysfs")]


def _host_has_rdma_netlink() -> bool:
    try:
        socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 20).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(_host_has_rdma_netlink(), reason="this kernel has RDMA netlink; the refusal path needs one without")
def test_real_kernel_without_rdma_netlink(fake_sysfs: Path) -> None:
    from pyrdmacm import netlink

    with pytest.raises(KernelError) as ei:
        netlink.get_chardev()
    assert ei.value.errno == errno.EPROTONOSUPPORT
    assert "no RDMA netlink" in str(ei.value)
    # list_devices() falls back to sysfs on its own
    assert [d.source for d in D.list_devices(sysfs_root=str(fake_sysfs))] == ["sysfs", "sysfs"]


HEADER = "/usr/include/rdma/rdma_netlink.h"


@pytest.mark.skipif(not (os.path.exists(HEADER) and shutil.which("cc")), reason="needs a C compiler and " + HEADER)
def test_nldev_numbers_match_the_uapi_header(tmp_path: Path) -> None:
    """Every NLDEV number of pyrdmacm's NLDEV messages, checked against the installed header."""
    from pyrdmacm.netlink import nldev

    names = {"RDMA_NLDEV_" + k: v for k, v in nldev.NLDEV_ATTR.items()}
    names.update({
        "RDMA_NL_NLDEV": nldev.RDMA_NL_NLDEV,
        "RDMA_NLDEV_CMD_GET": nldev.RDMA_NLDEV_CMD_GET,
        "RDMA_NLDEV_CMD_PORT_GET": nldev.RDMA_NLDEV_CMD_PORT_GET,
        "RDMA_NLDEV_CMD_SYS_GET": nldev.RDMA_NLDEV_CMD_SYS_GET,
        "RDMA_NLDEV_CMD_RES_CM_ID_GET": nldev.RDMA_NLDEV_CMD_RES_CM_ID_GET,
        "RDMA_NLDEV_CMD_GET_CHARDEV": nldev.RDMA_NLDEV_CMD_GET_CHARDEV,
    })
    src = tmp_path / "probe.c"
    src.write_text("#include <stdio.h>\n#include <rdma/rdma_netlink.h>\nint main(void){\n"
                   + "".join('printf("%%s %%d\\n", "%s", (int)(%s));\n' % (n, n) for n in sorted(names))
                   + "return 0;}\n")
    exe = tmp_path / "probe"
    subprocess.run(["cc", "-o", str(exe), str(src)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    got = {line.split()[0]: int(line.split()[1]) for line in out.splitlines()}
    assert got == names


def test_rdma_cm_configfs_defaults_of_a_port(tmp_path: Path) -> None:
    """An administrator's configfs group for rxe0 (RoCE v1, TOS 106) is each port's
    roce_mode and roce_tos; without a group (mlx5_0), or with text the kernel never writes,
    None: the kernel's own defaults. The GID rdma_cm takes for an address then follows the
    port's mode, in the prediction and in the fabric check's view."""
    from pyrdmacm.abi.configfs import port_defaults
    from pyrdmacm.mesh.path import gid_entries
    from pyrdmacm.precheck.gids import default_type

    build_two_devices(tmp_path / "sys")
    cfg = tmp_path / "cfg"
    port = cfg / "rdma_cm" / "rxe0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "default_roce_mode").write_text("IB/RoCE v1\n")
    (port / "default_roce_tos").write_text("106\n")
    devs = {d.name: d for d in D.list_devices(sysfs_root=str(tmp_path / "sys"), use_netlink=False,
                                              configfs_root=str(cfg))}
    rxe, ib = devs["rxe0"].ports[0], devs["mlx5_0"].ports[0]
    assert (rxe.roce_mode, rxe.roce_tos) == (D.GidType.ROCE_V1, 106) and (ib.roce_mode, ib.roce_tos) == (None, None)
    mapped = ipaddress.IPv6Address("::ffff:10.0.2.15")
    assert gid_entries(devs.values())[("rxe0", 1, mapped)] == (2, "RoCE v1")
    assert default_type(rxe.gids, rxe.roce_mode) is D.GidType.ROCE_V1 and default_type(rxe.gids) is D.GidType.ROCE_V2
    no_group = D.list_devices(sysfs_root=str(tmp_path / "sys"), use_netlink=False, configfs_root=str(tmp_path / "none"))
    assert gid_entries(no_group)[("rxe0", 1, mapped)] == (3, "RoCE v2")  # the kernel's default: v2
    (port / "default_roce_mode").write_text("RoCE v3\n")
    (port / "default_roce_tos").write_text("999\n")
    assert port_defaults("rxe0", 1, str(cfg)) == (None, None)


def _pyroute2_view():
    """The netdevs and addresses as pyroute2's IPRoute reads them: the oracle for
    pyrdmacm.netlink.route's own reading of the same dumps."""
    import ipaddress

    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        links = sorted((m["index"], m.get_attr("IFLA_IFNAME"), m["ifi_type"], m["flags"],
                        m.get_attr("IFLA_OPERSTATE") or "UNKNOWN", m.get_attr("IFLA_MTU"),
                        bytes.fromhex((m.get_attr("IFLA_ADDRESS") or "").replace(":", "")) or None,
                        None if m.get_attr("IFLA_CARRIER") is None else bool(m.get_attr("IFLA_CARRIER")))
                       for m in ipr.get_links())
        addrs = sorted((m["index"], str(ipaddress.ip_interface("%s/%d" % (m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS"),
                                                                           m["prefixlen"]))),
                        m["scope"], m.get_attr("IFA_FLAGS") if m.get_attr("IFA_FLAGS") is not None else m["flags"])
                       for m in ipr.get_addr() if m.get_attr("IFA_LOCAL") or m.get_attr("IFA_ADDRESS"))
    return links, addrs


def netlink_reads_as_pyroute2_does():
    """Assert that pyrdmacm's links() and addresses() (the wire format, no pyroute2) read
    what pyroute2 reads from the same kernel; return how many of each."""
    from pyrdmacm.netlink import route

    links = [(l.index, l.name, l.type, l.flags, l.operstate, l.mtu, l.address, l.carrier) for l in route.links()]
    addrs = sorted((a.ifindex, str(a.interface), a.scope, a.flags) for v in route.addresses().values() for a in v)
    want_links, want_addrs = _pyroute2_view()
    assert links == want_links
    assert addrs == want_addrs
    return len(links), len(addrs)


def test_links_and_addresses_read_what_pyroute2_reads() -> None:
    n_links, n_addrs = netlink_reads_as_pyroute2_does()
    assert n_links >= 1 and n_addrs >= 1  # lo and its 127.0.0.1 at least


def test_the_rails_and_devices_are_read_without_pyroute2() -> None:
    """The reads a mesh or a listener makes before its first command (the RDMA devices,
    the netdevs, their addresses) import no pyroute2: its import is 2 s in an emulated
    guest, for routing decisions only."""
    import subprocess
    import sys

    code = ("import sys\n"
            "from pyrdmacm.devices import list_devices\n"
            "from pyrdmacm.mesh import engine\n"
            "from pyrdmacm.netlink import addresses, links\n"
            "rails = engine.rails(None, devices=list_devices())\n"
            "print(len(links()), sum(map(len, addresses().values())), 'pyroute2' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    n_links, n_addrs, loaded = out.stdout.split()
    assert int(n_links) >= 1 and int(n_addrs) >= 1 and loaded == "False", out.stdout + out.stderr
