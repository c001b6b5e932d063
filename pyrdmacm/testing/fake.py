"""A fake rdma_cm kernel that speaks the real bytes, for tests without a kernel.

Theory of operation
-------------------
:class:`FakeKernel` is a :class:`~pyrdmacm.core.device.Transport` as
:class:`~pyrdmacm.core.device.KernelDevice` is -- ``write``, ``fileno``, ``close``
and the rest -- so an :class:`~pyrdmacm.EventChannel` cannot tell it from the device.
``write`` decodes the real ``rdma_ucm_cmd_hdr`` and command struct (with the
codecs of :mod:`pyrdmacm.abi`), validates them the way ``ucma_write`` does
(same order, same errno), and answers by writing the real reply struct to the
address in the command's ``response`` field, as ``copy_to_user`` would.

The fake is put together from modules by job:

* :mod:`.fake_file` -- the fd, ``ucma_write``'s checks, the event queue (a pipe
  carries one byte per queued event, so ``fileno()`` polls readable exactly when the
  kernel's fd would), the machine's table of ids and fds, GET_EVENT, WRITE_CM_EVENT and
  MIGRATE_ID (between any two fakes of one machine, named by their fd);
* :mod:`.fake_commands` -- an id's life: CREATE_ID to DESTROY_ID, BIND, address and route
  resolution, QUERY, LISTEN, CONNECT, ACCEPT, REJECT, DISCONNECT, NOTIFY, RESOLVE_IB_SERVICE;
* :mod:`.fake_options` -- SET_OPTION (TOS, REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH with its
  ROUTE_RESOLVED) and INIT_QP_ATTR;
* :mod:`.fake_multicast` -- JOIN_MCAST / JOIN_IP_MCAST / LEAVE_MCAST (memberships with their
  own handles, MULTICAST_JOIN at once as on RoCE);
* :mod:`.fake_ids`, :mod:`.fake_net` -- what it holds for each id, and who is where.

Each command's state rule is :mod:`pyrdmacm.kernel_rules`'s (the kernel's ``enum
rdma_cm_state``, checked against the lab's kernels); an id's IB CM id moves through
:mod:`._ibcm`'s table.  Commands above ``max_cmd`` are EINVAL, as a kernel without them
says; ``version`` picks the rules of that kernel.

The network is a small :class:`FakeNet`: local addresses with their RDMA device, peers
that answer, destinations without a route.  It models what the lab's real kernels answered
(see ``tests/kernel``), and the InfiniBand paths (GIDs, pkeys, IPoIB) that Soft-RoCE cannot
show.

What a test may do to it or ask of it, without reaching into its fields:
:meth:`FakeKernel.inject_event` (queue any event, as the kernel would),
:meth:`FakeKernel.incoming_request` (a connection request arrives at a listener),
:attr:`FakeKernel.ids` (every id the fake holds, with its state as the kernel
would keep it) and :attr:`FakeKernel.commands` (every command written).

Alone, the fake is one host whose CONNECT is always rejected (28).  Several hosts that
connect to each other, listen, accept, reject and disconnect as the kernel does for ids
without a QP are :class:`pyrdmacm.testing.FakeFabric`'s (:mod:`pyrdmacm.testing.fabric`).
"""

from __future__ import annotations

from .fake_commands import IdCommands
from .fake_ids import FakeId
from .fake_multicast import MulticastCommands
from .fake_net import FakeDevice, FakeNet
from .fake_options import OptionCommands

__all__ = ["FakeKernel", "FakeNet", "FakeDevice", "FakeId"]


class FakeKernel(IdCommands, OptionCommands, MulticastCommands):
    """An in-process stand-in for ``/dev/infiniband/rdma_cm``: ``FakeKernel(net=None, *,
    max_cmd=WRITE_CM_EVENT, version=None)``."""
