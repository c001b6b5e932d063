"""The conversation on a ``NETLINK_RDMA`` socket: one NLDEV request out, its replies in,
and the kernel's refusals as :class:`~pyrdmacm.errors.KernelError` with a hint.

Theory of operation
-------------------
:class:`RdmaNetlink` is a plain ``socket(AF_NETLINK, SOCK_RAW, NETLINK_RDMA)`` with a
small request/reply loop: blocking, no threads, no event loop, and replaceable by any
object with ``send``/``recv`` for tests.  Each request gets the next sequence number;
replies to older ones are skipped.  A ``doit`` request ends at its one reply, a dump at
``NLMSG_DONE``; an ``NLMSG_ERROR`` with a non-zero code is the kernel's errno.

A kernel without RDMA support refuses the *socket* with EPROTONOSUPPORT (no kernel-side
netlink socket for protocol 20: ib_core is not loaded); that, EPERM and the other
answers a request can get become :class:`~pyrdmacm.errors.KernelError` with a hint
(:func:`rdma_error`).  The bytes are :mod:`pyrdmacm.netlink.nldev`'s.
"""

from __future__ import annotations

import errno as _errno
import random
from typing import Any, List, Sequence, Tuple

from .nldev import CMD_NAMES, Table, decode_nldev, encode
from .wire import exchange, open_socket
from ..errors import KernelError, UsageError

NETLINK_RDMA = 20

_RDMA_HINTS = {
    _errno.EPROTONOSUPPORT: "this kernel has no RDMA netlink (module ib_core is not loaded, or the "
    "kernel has no InfiniBand/RDMA support); pyrdmacm falls back to sysfs where it can",
    _errno.EPERM: "RDMA netlink refused this request: it needs CAP_NET_ADMIN, or a container/seccomp "
    "policy blocks it",
    _errno.EACCES: "RDMA netlink refused this request: it needs CAP_NET_ADMIN, or a container/seccomp "
    "policy blocks it",
    _errno.EOPNOTSUPP: "no kernel client answers for this character device: load the module "
    "(rdma_ucm for rdma_cm) or check that the kernel was built with it",
    _errno.ENOENT: "the kernel does not know this RDMA device (removed, or in another network "
    "namespace in exclusive mode)",
    _errno.ENODEV: "the kernel does not know this RDMA device (removed, or in another network "
    "namespace in exclusive mode)",
    _errno.EINVAL: "the kernel rejected the request's attributes (an older kernel without this "
    "command or attribute?)",
    _errno.ETIMEDOUT: "no answer from the kernel on the RDMA netlink socket",
}


def rdma_error(err: int, command: str) -> KernelError:
    """The :class:`~pyrdmacm.errors.KernelError` of errno ``err`` (either sign) for ``command``."""
    return KernelError(abs(err), command, hint=_RDMA_HINTS.get(abs(err), ""))


class RdmaNetlink:
    """A blocking NETLINK_RDMA request/reply channel.

    ``sock`` may be any object with ``send(bytes)``, ``recv(int) -> bytes`` and
    ``close()`` (tests pass a fake that replays captured replies); by default a
    real netlink socket is opened in the caller's network namespace.
    """

    def __init__(self, sock: Any = None, timeout: float = 5.0) -> None:
        if sock is None:
            try:
                sock = open_socket(NETLINK_RDMA, "NETLINK_RDMA", timeout)
            except OSError as e:
                raise rdma_error(e.errno or _errno.EIO, e.filename) from e
        self._sock: Any = sock
        self._seq = random.randint(1, 0x7FFFFFFF)

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()

    def __enter__(self) -> "RdmaNetlink":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @staticmethod
    def encode(op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False, seq: int = 1) -> bytes:
        """The bytes of one NLDEV request (``attrs``: ``("ATTR_DEV_INDEX", 1)`` ...)."""
        return encode(op, attrs, dump, seq)

    def request(
        self, op: int, attrs: Sequence[Tuple[str, Any]] = (), dump: bool = False
    ) -> List[Table]:
        """Send one request; return the decoded replies (:class:`~pyrdmacm.netlink.nldev.Table`).

        A ``doit`` request returns its single reply; a dump returns every
        message up to ``NLMSG_DONE``.  A kernel error raises
        :class:`~pyrdmacm.errors.KernelError` with the kernel's errno.
        """
        if self._sock is None:
            raise UsageError("RDMA netlink channel is closed")
        command = CMD_NAMES.get(op, "RDMA_NLDEV op %d" % op)
        self._seq = (self._seq % 0x7FFFFFFF) + 1
        seq = self._seq
        try:
            return [decode_nldev(m) for m in exchange(self._sock, self.encode(op, attrs, dump, seq), seq, dump)]
        except OSError as e:
            raise rdma_error(e.errno or _errno.EIO, command) from e
