"""What the kernel's query replies say, as frozen objects: device, address, path.

These are the public results of :meth:`~pyrdmacm.CmId.query_addr` and
:meth:`~pyrdmacm.CmId.query_path`; :mod:`pyrdmacm.wire` makes them from the
reply bytes, and nothing here does I/O.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional, Union

from .addr import Address

__all__ = ["DeviceRef", "AddrInfo", "PathRecord", "MTU_BYTES", "mtu_bytes"]

#: IBTA's MTU code (``enum ib_mtu``) -> bytes
MTU_BYTES = {1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}


def mtu_bytes(code: int) -> Optional[int]:
    """The MTU in bytes of an IBTA MTU code (3 -> 1024); None for a code IBTA does not define."""
    return MTU_BYTES.get(code)


@dataclass(frozen=True)
class DeviceRef:
    """The RDMA device an id is bound to, as the kernel named it in QUERY replies.

    ``name`` is None when no device of this host has the index or node GUID the
    kernel gave (a device removed meanwhile, or a sysfs the process cannot read).
    """

    name: Optional[str]
    index: Optional[int]
    node_guid: int

    def __str__(self) -> str:
        return self.name or ("ibdev#%d" % self.index if self.index is not None else "guid %016x" % self.node_guid)


@dataclass(frozen=True)
class AddrInfo:
    """QUERY ADDR's answer: where the id is bound and to what."""

    src: Optional[Address]
    dst: Optional[Address]
    device: Optional[DeviceRef]
    port_num: int
    pkey: int


@dataclass(frozen=True)
class PathRecord:
    """One IB path record (IBTA SA PathRecord, as QUERY PATH returns it).

    ``mtu``, ``rate`` and ``packet_life_time`` are IBTA codes (``mtu`` 3 is 1024
    bytes: :attr:`mtu_bytes`); ``flags`` are ``IB_PATH_*`` (:class:`pyrdmacm.abi.IbPathFlag`).
    """

    flags: int
    service_id: int
    dgid: ipaddress.IPv6Address
    sgid: ipaddress.IPv6Address
    dlid: int
    slid: int
    raw_traffic: int
    flow_label: int
    hop_limit: int
    traffic_class: int
    reversible: int
    numb_path: int
    pkey: int
    sl: int
    mtu_selector: int
    mtu: int
    rate_selector: int
    rate: int
    packet_life_time_selector: int
    packet_life_time: int
    preference: int

    @property
    def mtu_bytes(self) -> Union[int, None]:
        """The path MTU in bytes (1024 for code 3); None for a code IBTA does not define."""
        return mtu_bytes(self.mtu)
