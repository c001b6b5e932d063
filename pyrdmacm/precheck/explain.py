"""A prediction against what the kernel chose: one sentence for each difference."""

from __future__ import annotations

import ipaddress
from typing import Any, List, Optional

from ..devices import GidType
from .gids import gid_text, ip2gid
from .model import IPAddress, Prediction
from .network import plain

__all__ = ["explain"]


def _norm_ip(value: Any) -> Optional[IPAddress]:
    if value is None:
        return None
    if isinstance(value, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return plain(value)
    if isinstance(value, tuple) and value:
        return _norm_ip(value[0])  # (address, port) pairs
    ip = getattr(value, "ip", None) or getattr(value, "address", None)
    if ip is not None and ip is not value:
        return _norm_ip(ip)
    try:
        return plain(ipaddress.ip_address(str(value).split("%")[0]))
    except ValueError:
        return None


def _norm_gid(value: Any) -> Optional[ipaddress.IPv6Address]:
    if value is None:
        return None
    if isinstance(value, ipaddress.IPv6Address):
        return plain(value)  # type: ignore[return-value]
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
    if k_src is not None and prediction.src is not None and k_src != plain(prediction.src):
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
        expected_gids.add(ip2gid(plain(prediction.src)))
    if k_gid is not None and pick is not None and pick.gid is not None and k_gid not in expected_gids:
        out.append("source GID: predicted %s (index %s, %s), the kernel chose %s"
                   % (gid_text(pick.gid), pick.gid_index, pick.gid_type, gid_text(k_gid)))
    if pick is None and (k_name is not None or k_gid is not None):
        out.append("device: predicted none, the kernel chose %s" % (k_name or k_gid))
    return out
