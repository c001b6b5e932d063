"""The asyncio forms of :func:`pyrdmacm.getaddrinfo` and :func:`pyrdmacm.getaddrinfo_all`,
exported as :func:`pyrdmacm.aio.getaddrinfo` and :func:`pyrdmacm.aio.getaddrinfo_all`.

The lookup blocks (the C library's name service: files, DNS) and so does the prediction
(rtnetlink, sysfs): the whole call runs in the loop's default executor, as
``loop.getaddrinfo`` runs the C library's, so the loop goes on meanwhile.  The arguments are
checked first, in the caller's thread, so that a bad one raises at once.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any, List, Optional

from ..addrinfo import RdmaAddrInfo, check_arguments, getaddrinfo as _getaddrinfo, getaddrinfo_all as _getaddrinfo_all

__all__ = ["getaddrinfo", "getaddrinfo_all"]


async def getaddrinfo(node: Optional[str] = None, service: Any = None, **hints: Any) -> RdmaAddrInfo:
    """:func:`pyrdmacm.getaddrinfo` without blocking the running loop: the same arguments
    (``passive``, ``numeric_host``, ``no_route``, ``family``, ``qp_type``, ``port_space``,
    ``src``, ``dst``), the same record, the same errors (bad arguments raise
    :class:`~pyrdmacm.errors.UsageError` before anything is looked up)."""
    check_arguments(node, service, **hints)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(_getaddrinfo, node, service, **hints))


async def getaddrinfo_all(node: Optional[str] = None, service: Any = None, **hints: Any) -> List[RdmaAddrInfo]:
    """:func:`pyrdmacm.getaddrinfo_all` without blocking the running loop (as
    :func:`getaddrinfo`): every answer, element 0 what :func:`getaddrinfo` gives."""
    check_arguments(node, service, **hints)
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(None, functools.partial(_getaddrinfo_all, node, service, **hints))
