"""A fake rdma_cm kernel that speaks the real bytes, for tests without a kernel.

Theory of operation
-------------------
:class:`FakeKernel` is a :class:`~pyrdmacm.core.device.Transport` as
:class:`~pyrdmacm.core.device.KernelDevice` is -- ``write``, ``fileno``, ``close``
and the rest -- so an :class:`~pyrdmacm.EventChannel` cannot tell it from the device.
``write`` decodes the real ``rdma_ucm_cmd_hdr``, validates it the way ``ucma_write`` does
(same order, same errno) and hands the command's body to its handler, found in one table
(command number -> handler).  A handler decodes the command struct (with the codecs of
:mod:`pyrdmacm.abi`) and answers by writing the real reply struct to the address in the
command's ``response`` field, as ``copy_to_user`` would, or raises the kernel's errno.

The kernel is made of parts, each a class of its own module with its own job:

* :class:`~.fake_file.UcmaFile` (:mod:`.fake_file`) -- the file: its fd and event queue (a
  pipe carries one byte per queued event, so ``fileno()`` polls readable exactly when the
  kernel's fd would), its ids with their IB CM ids and memberships, GET_EVENT and
  WRITE_CM_EVENT; and the machine's table of ids and files;
* :class:`~.fake_commands.IdCommands` (:mod:`.fake_commands`) -- an id's life: CREATE_ID to
  DESTROY_ID, BIND, address and route resolution, QUERY, LISTEN, CONNECT, ACCEPT, REJECT,
  DISCONNECT, NOTIFY, RESOLVE_IB_SERVICE, and MIGRATE_ID (between any two fakes of one
  machine, named by their fd);
* :class:`~.fake_options.OptionCommands` (:mod:`.fake_options`) -- SET_OPTION (TOS,
  REUSEADDR, AFONLY, ACK_TIMEOUT, IB_PATH with its ROUTE_RESOLVED) and INIT_QP_ATTR;
* :class:`~.fake_multicast.MulticastCommands` (:mod:`.fake_multicast`) -- JOIN_MCAST /
  JOIN_IP_MCAST / LEAVE_MCAST (memberships with their own handles, MULTICAST_JOIN at once as
  on RoCE);
* :mod:`.fake_ids`, :mod:`.fake_net` -- what it holds for each id, and who is where.

Each part is given what it needs when it is made (the file, the network, the rules of the
kernel version); none holds the kernel.  A kernel that answers an id's commands otherwise
(a fabric's: :class:`pyrdmacm.testing.FabricKernel`) makes another id part.

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

import errno
import threading
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Tuple

from .. import abi, kernel_rules
from ..abi.codec import CODECS
from ._ibcm import IbCmId, IbCmState
from .fake_commands import IdCommands
from .fake_file import LONE, Machine, UcmaFile
from .fake_ids import FakeId, Membership, kernel_error
from .fake_multicast import MulticastCommands
from .fake_net import FakeDevice, FakeNet
from .fake_options import OptionCommands

__all__ = ["Command", "FakeKernel", "FakeNet", "FakeDevice", "FakeId"]

C = abi.UserCmCmd
E = abi.CmEventType
S = abi.RdmaCmState

_HDR = CODECS["rdma_ucm_cmd_hdr"]
_EVENT = CODECS["rdma_ucm_event_resp"]
#: The newest kernel without RESOLVE_IB_SERVICE among the lab's: the rules a fake whose
#: command table stops before it follows.
_BEFORE_IB_SERVICE = max(v for v in kernel_rules.LAB_KERNELS.values() if v < (6, 17))

#: a command's handler: ``handler(body, size_out)``
Handler = Callable[[bytes, int], None]
#: the command numbers as members, made once (a command's record names its own)
_COMMANDS = {int(c): c for c in C}


class Command(NamedTuple):
    """One command the fake read (:attr:`FakeKernel.commands`), as the kernel reads it: the
    header's command, ``in`` and ``out`` sizes, and the body's bytes; :attr:`fields`
    decodes the body by its struct (``rdma_ucm_resolve_ip`` ...)."""

    #: the command (its member of :class:`~pyrdmacm.abi.UserCmCmd`)
    cmd: abi.UserCmCmd
    #: the header's ``in``: the body's size
    in_size: int
    #: the header's ``out``: the reply's size (0: no reply)
    out_size: int
    #: the body's bytes
    body: bytes

    @property
    def fields(self) -> Dict[str, Any]:
        """The body decoded, its fields by their names in the kernel's struct
        (:func:`pyrdmacm.decode.decode_command`'s ``body``)."""
        from ..decode import decode_command

        decoded = decode_command(_HDR.pack_dict({"cmd": int(self.cmd), "in": self.in_size, "out": self.out_size})
                                 + self.body)
        body: Dict[str, Any] = decoded["body"]
        return body


class FakeKernel:
    """An in-process stand-in for ``/dev/infiniband/rdma_cm``: ``FakeKernel(net=None, *,
    max_cmd=WRITE_CM_EVENT, version=None)``.

    It holds its settings (:attr:`net`, :attr:`max_cmd`, :attr:`version`, :attr:`machine`),
    the log of the commands written (:attr:`commands`), and its parts: the file (its fd, ids,
    events: a :class:`~.fake_file.UcmaFile`), the commands of an id's life
    (:class:`~.fake_commands.IdCommands`), the options (:class:`~.fake_options.OptionCommands`)
    and the multicast memberships (:class:`~.fake_multicast.MulticastCommands`), with the
    table that sends each command to its part's handler.  ``machine``: the machine whose
    tables of ids and files it shares (by default, every lone fake's); ``lock``: the lock its
    commands run under (by default its own)."""

    legacy = False
    #: False: answer QUERY / QUERY_ROUTE as kernels before 5.8 did, without ``ibdev_index``
    #: (only the old, shorter reply is written; the rest of the buffer stays as it was)
    ibdev_index = True
    #: False: IPv6 (and AF_IB) groups on a RoCE device fail as the kernel read does (-ENOTSUPP,
    #: ``cma_iboe_join_multicast`` on RoCEv2); True: they join as IPv4 groups do
    roce_ipv6_multicast = False

    def __init__(self, net: Optional[FakeNet] = None, *, max_cmd: int = C.WRITE_CM_EVENT,
                 version: Optional[kernel_rules.Version] = None, machine: Optional[Machine] = None,
                 lock: Optional[threading.RLock] = None) -> None:
        self.net = net or FakeNet()
        self.max_cmd = max_cmd
        #: the kernel version whose rules (pyrdmacm.kernel_rules) the fake follows: by default
        #: the newest of the lab's that has the commands up to ``max_cmd``
        self.version = version or (kernel_rules.NEWEST if max_cmd >= C.RESOLVE_IB_SERVICE else _BEFORE_IB_SERVICE)
        self.machine = machine or LONE
        self._file = UcmaFile(self.machine, lock)
        self._ids = self._id_commands(self._file)
        self._options = OptionCommands(self._file, self.net, version=self.version)
        self._multicast = MulticastCommands(self._file, self.net, version=self.version,
                                            roce_ipv6_multicast=self.roce_ipv6_multicast)
        self._handlers = self._table()
        #: every command written: (cmd, in, out, body bytes) -- for tests
        self.log: List[Command] = []
        self.abi_version = 4

    def _id_commands(self, file: UcmaFile) -> IdCommands:
        """The part that answers the commands of an id's life for ``file`` (a fabric's kernel
        makes its own)."""
        return IdCommands(file, self.net, version=self.version, max_cmd=self.max_cmd, ibdev_index=self.ibdev_index)

    def _table(self) -> Dict[int, Handler]:
        """Each command's handler, by number: a bound method of the part whose job it is
        (GET_OPTION has none: the kernel's table has it, and answers ENOSYS)."""
        f, i, o, m = self._file, self._ids, self._options, self._multicast
        return {
            C.CREATE_ID: i.create_id, C.DESTROY_ID: i.destroy_id, C.BIND_IP: i.bind_ip,
            C.RESOLVE_IP: i.resolve_ip, C.RESOLVE_ROUTE: i.resolve_route, C.QUERY_ROUTE: i.query_route,
            C.CONNECT: i.connect, C.LISTEN: i.listen, C.ACCEPT: i.accept, C.REJECT: i.reject,
            C.DISCONNECT: i.disconnect, C.INIT_QP_ATTR: o.init_qp_attr, C.GET_EVENT: f.get_event,
            C.SET_OPTION: o.set_option, C.NOTIFY: i.notify, C.JOIN_IP_MCAST: m.join_ip_mcast,
            C.LEAVE_MCAST: m.leave_mcast, C.MIGRATE_ID: i.migrate_id, C.QUERY: i.query, C.BIND: i.bind,
            C.RESOLVE_ADDR: i.resolve_addr, C.JOIN_MCAST: m.join_mcast, C.RESOLVE_IB_SERVICE: i.resolve_ib_service,
            C.WRITE_CM_EVENT: f.write_cm_event,
        }

    # -- what tests may do and ask
    @property
    def commands(self) -> List[Command]:
        """Every command written, in order: a :class:`Command` each (``(cmd, in_size,
        out_size, body)``, and its decoded ``fields``)."""
        return self.log

    @property
    def closed(self) -> bool:
        """Whether the fake is closed (its fd is gone, and its ids)."""
        return self._file.closed

    @property
    def ids(self) -> Dict[int, FakeId]:
        """The ids the fake holds, by handle."""
        with self._file.lock:
            return {h: c.snapshot() for h, c in self._file.contexts.items()}

    @property
    def memberships(self) -> Dict[int, Membership]:
        """The multicast memberships of this fd's ids, by membership id (``uid``: the one its
        events carry; ``handle``: the id that joined)."""
        with self._file.lock:
            return dict(self._file.mcs)

    def inject_event(self, handle: int, event: int, status: int = 0, *, uid: Optional[int] = None,
                     param: bytes = b"", owner: Optional[int] = None) -> None:
        """Queue an event for the id ``handle`` as the kernel would (``uid``: the id's, unless
        given -- an id the fake does not hold needs one); any type number, any status.  ``owner``:
        the id whose event it is for the kernel (a CONNECT_REQUEST's listener), ``handle`` if not given."""
        if uid is None:
            uid = self._file.get(handle).uid
        raw = _EVENT.pack_dict({"uid": uid, "id": handle, "event": int(event), "status": status & 0xFFFFFFFF,
                                "param": param})
        with self._file.lock:
            self._file.push(handle, raw, owner)

    def incoming_request(self, listener: int) -> int:
        """A connection request arrives at the listening id ``listener``: the fake makes the
        request's id (uid 0, state CONNECT, as the kernel does) and queues CONNECT_REQUEST
        with the listener's uid.  Returns the new id's handle."""
        file = self._file
        with file.lock:
            lst = file.get(listener)
            if lst.state is not S.LISTEN:
                raise ValueError("handle %d is not listening" % listener)
            ctx = file.new_ctx(0, lst.ps, lst.qp_type)
            ctx.move(S.CONNECT)
            ctx.dev = lst.dev
            ud = lst.qp_type == abi.QpType.UD
            file.cms[ctx.handle] = IbCmId(IbCmState.SIDR_REQ_RCVD if ud else IbCmState.REQ_RCVD)
            self.inject_event(ctx.handle, E.CONNECT_REQUEST, uid=lst.uid, owner=lst.handle)
        return ctx.handle

    def find_device(self, index: Optional[int] = None, node_guid: Optional[int] = None) -> Optional[FakeDevice]:
        """The device lookup the core uses to name a QUERY reply's device (sysfs/netlink on a real host)."""
        for dev in self.net.local.values():
            if index is not None and dev.index == index:
                return dev
            if index is None and node_guid and dev.node_guid == node_guid:
                return dev
        return None

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        """The Transport's device naming: by this fake network's devices."""
        dev = self.find_device(index=index, node_guid=node_guid or None)
        if dev is None:
            return None, index
        return dev.name, (index if index is not None else dev.index)

    # -- the device's operations
    def reopen(self) -> "FakeKernel":
        """Another fd on the same (fake) device: a sync id's private channel, MIGRATE_ID's target."""
        return type(self)(self.net, max_cmd=self.max_cmd, version=self.version, machine=self.machine)

    def fileno(self) -> int:
        """The fd the channel polls: readable while an event is queued, as rdma_cm's is."""
        return self._file.fileno()

    def close(self) -> None:
        """``ucma_close``: every id of the file is destroyed, and the fd goes."""
        if self._file.closed:
            return
        self._ids.close()
        self._file.close()

    def write(self, data: bytes) -> int:
        """``ucma_write``: one command (``rdma_ucm_cmd_hdr`` and its body), answered as the
        kernel's rules say; its reply written where the command points; the bytes taken, or
        the errno raised (an OSError), as the kernel's write returns them."""
        if self._file.closed:
            raise kernel_error(errno.EBADF)
        data = bytes(data)
        # ucma_write: the header, the command's place in the table, in within the write, a handler
        if len(data) < _HDR.size:
            raise kernel_error(errno.EINVAL)
        cmd, size_in, size_out = _HDR.unpack_from(data)
        if cmd > self.max_cmd:
            raise kernel_error(errno.EINVAL)
        if size_in + _HDR.size > len(data):
            raise kernel_error(errno.EINVAL)
        if cmd == C.GET_OPTION:  # in the table, never implemented
            raise kernel_error(errno.ENOSYS)
        body = data[_HDR.size: _HDR.size + size_in]
        self.log.append(Command(_COMMANDS[cmd], size_in, size_out, body))
        handler = self._handlers[cmd]
        file = self._file
        queued = len(file.events)
        with file.lock:
            handler(body, size_out)
        if len(file.events) > queued and cmd != C.GET_EVENT:
            # As on the kernel, an event the command queued may be read by another thread
            # before write() returns to its caller: let the other threads run here.
            time.sleep(0)
        return len(data)
