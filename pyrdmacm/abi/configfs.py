"""rdma_cm's per-port defaults in configfs, as the kernel writes them: no import but os.

An administrator who changes them first makes the device's group
(``mkdir <configfs>/rdma_cm/<dev>``); its ``ports/<n>/default_roce_mode`` then reads
``RoCE v2`` or ``IB/RoCE v1`` (the GID type new ids on the port take) and
``default_roce_tos`` a number (the traffic class of routes whose id set no TOS).  Without the
group, the kernel's own defaults hold: RoCE v2 where the port has it, TOS 0.
"""

from __future__ import annotations

import os
from typing import Optional, Tuple

__all__ = ["CONFIGFS", "ROCE_MODES", "port_defaults"]

CONFIGFS = "/sys/kernel/config"
#: default_roce_mode's text -> the GID type's name (pyrdmacm.devices.GidType's value)
ROCE_MODES = {"IB/RoCE v1": "RoCE v1", "RoCE v2": "RoCE v2"}


def port_defaults(device: str, port: int, root: str = CONFIGFS) -> Tuple[Optional[str], Optional[int]]:
    """(default_roce_mode as a GID type's name, default_roce_tos) of ``device``'s ``port``;
    each None where the group or the file is absent or says something else."""
    base = os.path.join(root, "rdma_cm", device, "ports", str(port))
    out = []
    for name in ("default_roce_mode", "default_roce_tos"):
        try:
            with open(os.path.join(base, name), encoding="ascii", errors="replace") as f:
                out.append(f.read().strip())
        except OSError:
            out.append("")
    mode, tos = out
    return ROCE_MODES.get(mode), int(tos) if tos.isdigit() and tos.isascii() and int(tos) < 256 else None
