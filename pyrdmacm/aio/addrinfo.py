"""The asyncio form of :func:`pyrdmacm.getaddrinfo`, exported as :func:`pyrdmacm.aio.getaddrinfo`.

The lookup blocks (the C library's name service: files, DNS) and so does the prediction
(rtnetlink, sysfs): the whole call runs in the loop's default executor, as
``loop.getaddrinfo`` runs the C library's, so the loop goes on meanwhile.  The arguments are
checked first, in the caller's thread, so that a bad one raises at once.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, Optional

from ..addrinfo import RdmaAddrInfo, check_arguments, getaddrinfo as _getaddrinfo

__all__ = ["getaddrinfo"]


async def getaddrinfo(node: Optional[str] = None, service: Any = None, **hints: Any) -> RdmaAddrInfo:
    """:func:`pyrdmacm.getaddrinfo` without blocking the running loop: the same arguments
    (``passive``, ``numeric_host``, ``no_route``, ``family``, ``qp_type``, ``port_space``,
    ``src``, ``dst``), the same record, the same :class:`~pyrdmacm.errors.UsageError`
    (bad arguments raise before anything is looked up)."""
    check_arguments(node, service, **hints)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(_getaddrinfo, node, service, **hints))
