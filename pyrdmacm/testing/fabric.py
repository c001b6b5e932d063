"""Several fake hosts joined by a fabric: connection management without a kernel.

Theory of operation
-------------------
:class:`FakeFabric` makes hosts (:meth:`FakeFabric.host`); a :class:`FakeHost` is a
factory of :class:`FabricKernel` transports (``EventChannel(host())``), all sharing
that host's :class:`~pyrdmacm.testing.FakeNet` (its addresses on one
:class:`~pyrdmacm.testing.FakeDevice` with a node GUID of its own; every other
host's addresses as peers that answer ARP), its port table and its IB CM, as the ucma
files of one machine share its rdma_cm.

The modules, by job:

* this one -- the fabric: its hosts, its settings, its log of messages;
* :mod:`.fabric_host` -- one host: :class:`FabricKernel`, a
  :class:`~pyrdmacm.testing.FakeKernel` (every command it had behaves as before) with
  another id part, and :class:`FakeHost`, the machine's tables;
* :mod:`.fabric_ids` -- that id part, :class:`~.fabric_ids.FabricIdCommands`: what the
  kernel's rdma_cm does past ``resolve_route`` for ids without a QP (CONNECT, ACCEPT,
  REJECT, NOTIFY, DISCONNECT, DESTROY_ID, LISTEN, their events), the host's port table;
* :mod:`.fabric_cm` -- the IB CM: each id that has sent or received a REQ or SIDR REQ has
  an IB CM id (REQ_SENT, REQ_RCVD, REP_SENT, REP_RCVD, ESTABLISHED, DREQ_SENT,
  DREQ_RCVD, TIMEWAIT, SIDR_REQ_SENT, SIDR_REQ_RCVD, IDLE) that moves only through
  :mod:`._ibcm`'s table; messages (REQ, REP, RTU, REJ, DREQ, DREP, SIDR REQ/REP) go from
  end to end at once, in the writer's thread, and are logged (:attr:`FakeFabric.messages`).

What is not modelled: MRA and the REP / RTU time-outs (an unanswered request or an
unsent RTU waits for ever, as the kernel's delayed MRA makes it wait in practice);
lost messages.  A REQ (or SIDR REQ, or DREQ) that nobody can receive (no host owns
the destination; the listener's backlog is full) is sent again every
:attr:`~FakeFabric.cm_retry_ms` until :attr:`~FakeFabric.cm_timeout_ms`, then fails
as the kernel's REQ_ERROR / SIDR_REQ_ERROR / DREQ_ERROR do (UNREACHABLE or
DISCONNECTED, status -ETIMEDOUT).  AF_IB ids and iWARP are not part of the fabric;
multicast joins are each host's own (RoCE joins need no SA).  INIT_QP_ATTR reads the
connection (peer QPN, both PSNs, atomics, retry counts, the path's traffic class), the
ACK_TIMEOUT and TOS options reach it, AFONLY keeps an IPv6 wildcard listener from IPv4
requests, and MIGRATE_ID moves an id with its IB CM id between the fds of one host.

Everything of one fabric runs under one lock (:attr:`FakeFabric.lock`, the kernels'
too), so a command and the events it causes on another host are one step.
"""

from __future__ import annotations

import ipaddress
from typing import Any, Dict, List, Optional

from .fabric_cm import CmMessage, IbCmWire, wire_size
from .fabric_host import FabricKernel, FakeHost
from .fake_net import FakeDevice, FakeNet

__all__ = ["FakeFabric", "FakeHost", "FabricKernel", "CmMessage", "wire_size"]


class FakeFabric(IbCmWire):
    """Hosts joined by a fabric: ``a = fabric.host("10.9.0.1")`` and ``b = fabric.host("10.9.0.2")``
    resolve each other and connect through :class:`FabricKernel` transports
    (``EventChannel(a())``).

    ``timewait_ms``: the time from DREQ/DREP to TIMEWAIT_EXIT (the kernel's is about 2 s
    on rxe); ``cm_timeout_ms``: how long a REQ, SIDR REQ or DREQ that nobody answers is
    sent again before it fails with -ETIMEDOUT (the kernel's: about a minute);
    ``cm_retry_ms``: how often it is sent again meanwhile; ``dreq_latency_ms``: how long a
    DREQ takes to reach the peer (0: at once), so that two DREQs sent at about the same
    moment cross on the wire, as they do between real hosts.
    """

    def __init__(self, *, timewait_ms: float = 50, cm_timeout_ms: float = 1000, cm_retry_ms: float = 20,
                 dreq_latency_ms: float = 0) -> None:
        super().__init__(timewait_ms=timewait_ms, cm_timeout_ms=cm_timeout_ms, cm_retry_ms=cm_retry_ms,
                         dreq_latency_ms=dreq_latency_ms)
        self._hosts: List[FakeHost] = []
        self._by_ip: Dict[str, FakeHost] = {}

    # -- hosts
    def host(self, address: str, *more: str, device: Optional[FakeDevice] = None) -> FakeHost:
        """A new host with these addresses (IPv4 or IPv6, all on one device: ``device``, or a
        :class:`FakeDevice` with a node GUID of its own).  Every host resolves every other
        host's addresses; the first address of each family is the host's default source."""
        addrs = tuple(str(ipaddress.ip_address(a)) for a in (address,) + more)
        with self.lock:
            for a in addrs:
                if a in self._by_ip:
                    raise ValueError("address %s is already %s's" % (a, self._by_ip[a].name))
            n = len(self._hosts) + 1
            dev = device or FakeDevice(name="fake0", index=1, node_guid=0x0002C90300000000 + (n << 8))
            default: Dict[int, str] = {}
            for a in addrs:
                default.setdefault(ipaddress.ip_address(a).version, a)
            net = FakeNet(local={a: dev for a in addrs}, peers=set(self._by_ip), no_route=set(), default_src=default)
            h = FakeHost(self, addrs, dev, net)
            for other in self._hosts:
                other.net.peers.update(addrs)
            self._hosts.append(h)
            for a in addrs:
                self._by_ip[a] = h
        return h

    @property
    def hosts(self) -> List[FakeHost]:
        return list(self._hosts)

    def host_of(self, address: Any) -> Optional[FakeHost]:
        """The host that owns ``address``, or None."""
        try:
            return self._by_ip.get(str(ipaddress.ip_address(address)))
        except ValueError:
            return None

    def close(self) -> None:
        """Close every transport of every host and stop the timers."""
        with self.lock:
            self.closed = True
            self._stop_timers()
            for h in self._hosts:
                h.close()

    def __enter__(self) -> "FakeFabric":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
