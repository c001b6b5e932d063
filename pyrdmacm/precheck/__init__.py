"""Predict where an RDMA address resolution will land, before asking the kernel.

Theory of operation
-------------------
``rdma_resolve_addr()`` hides three decisions the kernel makes
(drivers/infiniband/core/cma.c and addr.c); :func:`predict` repeats them with
the same inputs, in the caller's network namespace:

1. **Binding the source** (``cma_bind_addr`` / ``rdma_bind_addr_dst``).  No
   source: a wildcard of the destination's family, and for a link-local IPv6
   destination ``bound_dev_if`` = its zone.  A specific source must be local
   (``rdma_translate_ip``: else EADDRNOTAVAIL), sets ``bound_dev_if`` to the
   netdev owning it (a link-local one needs a zone: else EINVAL) and picks the
   RDMA device right there (``cma_acquire_dev_by_src_ip``: else ENODEV, from
   ``write()``).
   A destination that is the wildcard or a loopback address (``cma_any_addr()``:
   0.0.0.0, ::, 127.0.0.0/8, ::1) skips routing: ``cma_resolve_loopback`` keeps the
   device bound with the source, else takes the first device with an ACTIVE
   port, GID 0, and the source becomes 127.0.0.1 / ::1.
2. **Routing** (``addr4_resolve``/``addr6_resolve``): one lookup with daddr,
   saddr (the specific source or none) and oif = ``bound_dev_if``.  It is
   asked of the kernel itself (``RTM_GETROUTE`` via :func:`netlink.route_get`),
   so policy rules, tables, and the kernel's "an oif with no matching route
   means on-link" fallback come out exactly as the kernel will decide.  Its
   errors (ENETUNREACH, EHOSTUNREACH for ``unreachable``, EACCES for
   ``prohibit``, EINVAL for ``blackhole``) fail ``write()`` at once.  The
   route's source becomes the id's source.  A route through ``lo`` (the
   destination is local) is replaced by the netdev owning the destination
   (``rdma_set_src_addr_rcu``: none -> ENODEV), or by ``bound_dev_if``.
3. **The RDMA device** (``cma_acquire_dev_by_src_ip``, when no device was
   picked at bind): the first device in device order, port in port order,
   whose GID table has the source IP (``::ffff:a.b.c.d`` for IPv4) with the
   port's default GID type (RoCE v2 when the port has it) on that netdev
   (Ethernet netdevs); an IPoIB netdev's own GID (InfiniBand); GID 0 on the
   netdev (iWARP).  No match -> ``ADDR_ERROR`` with status -ENODEV.  Then the
   next hop (gateway or destination) must be in the neighbour table: if it is
   not, ARP/ND runs and an unanswered one ends in ``ADDR_ERROR`` -ETIMEDOUT.

:class:`Prediction` carries each decision with a sentence of reasoning;
:class:`~pyrdmacm.errors.PrecheckError` (with the errno the kernel will give)
is raised only where the kernel will certainly refuse, with the prediction
made so far attached (``prediction``): a host without an RDMA device still
learns the lookup, the route, its table, the source, the egress netdev, the
next hop and its neighbour state.  What the host lacks for the resolution
(an RDMA device, a GID for the source, with ``check_node`` the rdma_cm device
node) is listed in ``Prediction.missing``, each with what to do.

An InfiniBand destination (AF_IB, ``gid:...``) is not routed: the kernel
picks the port itself (``cma_resolve_ib_dev``), the first InfiniBand port
whose GID table holds the destination's GID, else the first ACTIVE one with a
GID of its subnet prefix; none -> ENODEV from ``write()``.  Things the kernel
accepts but that look wrong (several RDMA netdevs on the destination's
subnet, a port that is not ACTIVE, a link-local destination with a wildcard
source) are ``warnings``; ``strict=True`` turns them into errors.  A
link-local IPv6 address without a zone raises the very
:class:`~pyrdmacm.errors.UsageError` that ``resolve_addr`` raises for it.

Assumptions: the port's default RoCE GID type is the kernel's default (v2 when
supported; configfs ``rdma_cm/<dev>/ports/<p>/default_roce_mode`` can change
it); device order is the kernel's index order when netlink tells it, names
otherwise.  pyroute2 is imported only when :func:`predict` runs.

Where things are
----------------
* :mod:`.resolution` -- :func:`predict`, and the IP path: the source's binding, the
  route lookup, the netdev the id binds to, then the checks below, in the kernel's order;
* :mod:`.unrouted` -- the destinations that skip routing: AF_IB and the wildcard or loopback;
* :mod:`.gids` -- which device, port and GID the kernel takes (step 3), the IPoIB port;
* :mod:`.neighbour` -- the next hop and its neighbour entry, and :func:`solicit_neighbour`;
* :mod:`.missing` -- what the host lacks (device, GID, rdma_cm node) and what to do;
* :mod:`.network` -- the netdevs and addresses read once per prediction, zones, addresses;
* :mod:`.model` -- the records a prediction is made of, and the collector that builds one;
* :mod:`.explain` -- a prediction against what the kernel chose.
"""

from __future__ import annotations

from .explain import explain
from .gids import gid_text
from .missing import rdma_cm_node
from .model import Candidate, IpoibStatus, Missing, Prediction
from .neighbour import solicit_neighbour
from .resolution import predict

__all__ = ["Candidate", "IpoibStatus", "Missing", "Prediction", "predict", "explain", "gid_text", "rdma_cm_node",
           "solicit_neighbour"]
