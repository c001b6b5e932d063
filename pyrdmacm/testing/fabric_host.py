"""One host of a fake fabric: its ucma files (:class:`FabricKernel`) and its machine-wide
tables (:class:`FakeHost`: the port table, the IB CM's live connections, the listeners a
request reaches).

A :class:`FabricKernel` is a :class:`~pyrdmacm.testing.FakeKernel` (every command it had
behaves as before) whose id part is a :class:`~pyrdmacm.testing.fabric_ids.FabricIdCommands`:
it also does what the kernel's rdma_cm layer does past ``resolve_route`` for user-space ids
(CONNECT, ACCEPT, REJECT, NOTIFY, DISCONNECT, DESTROY_ID, LISTEN over the fabric's IB CM,
:mod:`pyrdmacm.testing.fabric_cm`).  All the kernels of a fabric run their commands under
the fabric's one lock.
"""

from __future__ import annotations

import errno
import ipaddress
from typing import TYPE_CHECKING, Dict, List, Optional, Tuple

from .. import abi
from ..addr import AF_INET6, Address
from ._ibcm import IbCmState
from .fabric_cm import CmEnd, CmKernel, CmRequest, IbCmWire
from .fabric_ids import MAX_BACKLOG, FabricIdCommands
from .fake import FakeKernel
from .fake_file import Machine, UcmaFile
from .fake_ids import kernel_error
from .fake_net import FakeDevice, FakeNet

if TYPE_CHECKING:  # pragma: no cover
    from ..core.event_channel import EventChannel

__all__ = ["FabricKernel", "FakeHost", "MAX_BACKLOG"]


class FabricKernel(FakeKernel):
    """A :class:`FakeKernel` on one host of a :class:`~pyrdmacm.testing.FakeFabric`: the
    single-host commands as before, and the connection-management commands routed over the
    fabric.  It holds, besides a :class:`FakeKernel`'s, its :attr:`host` and that host's
    :attr:`fabric`; its id part is a :class:`~pyrdmacm.testing.fabric_ids.FabricIdCommands`,
    which the host knows it by."""

    def __init__(self, host: "FakeHost") -> None:
        self.host = host
        self.fabric = host.fabric
        # one lock for the whole fabric: a command and its effects are one step
        super().__init__(host.net, machine=host.machine, lock=host.fabric.lock)

    def _id_commands(self, file: UcmaFile) -> FabricIdCommands:
        ids = FabricIdCommands(file, self.host, version=self.version, max_cmd=self.max_cmd,
                               ibdev_index=self.ibdev_index)
        self.host.opened(self, ids)
        return ids

    def reopen(self) -> "FabricKernel":
        """Another fd on the same host."""
        return self.host()

    # -- what tests may ask
    @property
    def cm_states(self) -> Dict[int, IbCmState]:
        """The IB CM state of each id that has an IB CM id, by handle (REQ_SENT, ESTABLISHED ...)."""
        with self.fabric.lock:
            return {h: e.state for h, e in self._file.cms.items()}

    def __repr__(self) -> str:
        return "<FabricKernel on %s%s>" % (self.host.name, " closed" if self.closed else "")

    def close(self) -> None:
        with self.fabric.lock:
            super().close()
            self.host.forget(self)


class FakeHost:
    """One machine of a :class:`~pyrdmacm.testing.FakeFabric` (made by its ``host()``).  Call
    it for a new transport of this host: ``EventChannel(host())`` (as many as wanted; they
    share the host's network, ports and IB CM)."""

    def __init__(self, fabric: IbCmWire, addresses: Tuple[str, ...], device: FakeDevice, net: FakeNet) -> None:
        self.fabric = fabric
        #: the host's addresses, all on :attr:`device`
        self.addresses = addresses
        self.device = device
        #: what its kernels know of the network (a test may change it: ``net.peers``, ``net.no_route``)
        self.net = net
        #: the host's rdma_cm tables (which fd holds each id)
        self.machine = Machine()
        #: each kernel (ucma file) of the host, with the id part that answers for its ids
        self._kernels: Dict[FabricKernel, FabricIdCommands] = {}
        #: (remote QPN, remote CA GUID) -> the end of the live connection (cm.c's remote_qp_table)
        self.remote_qpns: Dict[Tuple[int, int], CmEnd] = {}
        self._next_port: Dict[int, int] = {}

    def __repr__(self) -> str:
        return "<FakeHost %s guid %#x>" % (" ".join(self.addresses), self.guid)

    @property
    def name(self) -> str:
        """The host's first address."""
        return self.addresses[0]

    @property
    def guid(self) -> int:
        """The CA GUID the host's IB CM puts in its messages (its device's node GUID)."""
        return self.device.node_guid

    def gid(self, address: Optional[str] = None) -> ipaddress.IPv6Address:
        """The GID of one of the host's addresses (the first by default) as the fake derives it."""
        return self.net.gid_of(address or self.name, self.device)

    def __call__(self) -> FabricKernel:
        """A new transport (a ucma file) on this host."""
        with self.fabric.lock:
            return FabricKernel(self)  # which tells the host (opened)

    kernel = __call__

    def channel(self) -> "EventChannel":
        """``EventChannel(host())``."""
        from ..core.event_channel import EventChannel

        return EventChannel(self())

    @property
    def kernels(self) -> List[FabricKernel]:
        """The host's open transports."""
        return [k for k in self._kernels if not k.closed]

    def opened(self, kernel: FabricKernel, ids: FabricIdCommands) -> None:
        """``kernel`` is a new fd of this host, whose ids ``ids`` answers for."""
        self._kernels[kernel] = ids

    def forget(self, kernel: FabricKernel) -> None:
        """``kernel`` (an fd of this host) is closed."""
        self._kernels.pop(kernel, None)

    def _open_files(self) -> List[FabricIdCommands]:
        """The id part of each open fd of the host."""
        return [ids for ids in self._kernels.values() if not ids.closed]

    def close(self) -> None:
        """Close every transport of the host."""
        for k in list(self._kernels):
            k.close()

    # -- the listener a request reaches (cm_match_req by service id, then cma's listener match)
    def listener_for(self, req: CmRequest, ud: bool) -> Tuple[Optional[Tuple[CmKernel, int]], bool]:
        """The listener a request reaches, ``(kernel, listener handle)`` or None, and whether
        any listener holds its service id (port space and port) at all -- no: REJ 8, SIDR
        UNSUPPORTED; yes but none matches: the rdma_cm refuses (REJ 28, SIDR REJECT)."""
        any_service = False
        for k in self._open_files():
            for lst in k.listeners(req.ps, req.dst.port):
                any_service = True
                src = lst.src
                assert src is not None
                if src.is_any:
                    # a wildcard listener takes its own family; an IPv6 one IPv4 too, unless AFONLY
                    if src.family != req.dst.family and (src.family != AF_INET6 or lst.afonly):
                        continue
                elif src.ip != req.dst.ip:
                    continue
                if (lst.qp_type == abi.QpType.UD) != ud:  # cma_ib_check_req_qp_type
                    continue
                return (k, lst.handle), True
        return None, any_service

    # -- the host's port table (cma_check_port, cma_alloc_any_port)
    def _bound(self, ps: int) -> List[Address]:
        return [a for k in self._open_files() for a in k.bound_addresses(ps)]

    def check_port(self, ps: int, a: Address) -> None:
        """``cma_check_port``: a wildcard overlapping another binding of the port is
        EADDRNOTAVAIL, the same address EADDRINUSE."""
        for other in self._bound(ps):
            if other.port != a.port:
                continue
            if other.is_any or a.is_any:
                raise kernel_error(errno.EADDRNOTAVAIL)
            if other.ip == a.ip:
                raise kernel_error(errno.EADDRINUSE)

    def ephemeral(self, ps: int) -> int:
        """``cma_alloc_any_port``: the next free port of ``ps`` from 40000 up."""
        used = {a.port for a in self._bound(ps)}
        port = self._next_port.get(ps, 40000)
        while port in used:
            port += 1
        self._next_port[ps] = port + 1
        return port
