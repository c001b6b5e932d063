"""What a fake kernel holds for each id and membership, the errors it answers with, and how
its handlers read a command's struct and write a reply's.

:class:`IdContext` is the fake's ``ucma_context`` and ``rdma_id_private`` in one: the id's
handle and uid, its port space and QP type, its ``rdma_cm_state`` (the kernel's enum,
:class:`~pyrdmacm.abi.RdmaCmState`), its addresses and device, its options.  Its state is
moved only by :meth:`IdContext.move`, which asks :mod:`pyrdmacm.kernel_rules` whether the
kernel takes the command there; :class:`FakeId` is what a test may read of it.
"""

from __future__ import annotations

import errno
import os
import random
from dataclasses import dataclass
from typing import Any, Dict, NamedTuple, Optional

from .. import kernel_rules
from ..abi import RdmaCmState, UserCmCmd
from ..abi.codec import CODECS
from ..core.device import write_to_address
from ..addr import Address, unpack_sockaddr
from ..errors import DecodeError
from .fake_net import PACKET_LIFETIME, FakeDevice

__all__ = ["IdContext", "Membership", "Queued", "FakeId", "kernel_error", "sockaddr_or_none", "command_fields",
           "write_reply"]

S = RdmaCmState


def kernel_error(code: int) -> OSError:
    """The OSError a write the kernel refuses raises."""
    return OSError(code, os.strerror(code))


def command_fields(name: str, body: bytes) -> Dict[str, Any]:
    """The fields of the command struct ``name`` at the start of ``body``; EFAULT when the
    body is shorter (the real kernel would read past the buffer)."""
    c = CODECS[name]
    if len(body) < c.size:
        raise kernel_error(errno.EFAULT)
    out: Dict[str, Any] = c.unpack_dict(body)
    return out


def write_reply(address: int, name: str, size_out: int, values: Dict[str, Any]) -> None:
    """The reply struct ``name`` with ``values``, written at ``address`` as ``copy_to_user``
    would: ENOSPC when ``size_out`` is short of it, EFAULT for no address."""
    c = CODECS[name]
    if size_out < c.size:
        raise kernel_error(errno.ENOSPC)
    if not address:
        raise kernel_error(errno.EFAULT)
    write_to_address(address, c.pack_dict(values))


def sockaddr_or_none(blob: bytes) -> Optional[Address]:
    """The sockaddr at the start of ``blob``; None for family 0, a family the kernel does not
    know, or one that does not fit (``rdma_addr_size`` 0: the caller answers EINVAL)."""
    try:
        return unpack_sockaddr(blob)
    except DecodeError:
        return None


class Queued(NamedTuple):
    """One queued event: the id it reports (``handle``: the new id of a CONNECT_REQUEST, the
    owning id of a membership's event), its bytes, the id whose event it is for the kernel
    (``owner``: the listener for a CONNECT_REQUEST) and the membership it belongs to (or 0)."""

    handle: int
    raw: bytes
    owner: int
    mc: int = 0


class Membership:
    """One multicast membership (``struct ucma_multicast``)."""

    __slots__ = ("id", "handle", "uid", "addr", "flags", "reported")

    def __init__(self, mc_id: int, handle: int, uid: int, addr: Address, flags: int) -> None:
        self.id = mc_id
        self.handle = handle  #: the id that joined
        self.uid = uid
        self.addr = addr
        self.flags = flags
        self.reported = 0


@dataclass(frozen=True)
class FakeId:
    """What the fake kernel holds for one id (a snapshot: :attr:`FakeKernel.ids`)."""

    handle: int
    uid: int
    ps: int
    qp_type: int
    state: RdmaCmState  #: the kernel's ``rdma_cm_state``
    src: Optional[Address]
    dst: Optional[Address]
    device: Optional[str]
    events_reported: int


class IdContext:
    """One id of a fake kernel: ``ucma_context`` (handle, uid, events reported) and
    ``rdma_id_private`` (state, addresses, device, options).  Which file holds it is the
    machine's table's (:class:`~pyrdmacm.testing.fake_file.Machine`)."""

    __slots__ = ("uid", "ps", "qp_type", "state", "src", "dst", "dev", "reported", "handle", "loopback", "psn",
                 "tos", "ack_timeout", "reuseaddr", "afonly", "route_tc", "route_plt", "paths", "path", "resolving_dev")

    def __init__(self, handle: int, uid: int, ps: int, qp_type: int) -> None:
        self.handle = handle
        self.uid = uid
        self.ps = ps
        self.qp_type = qp_type
        self.state = S.IDLE
        self.src: Optional[Address] = None
        self.dst: Optional[Address] = None
        self.dev: Optional[FakeDevice] = None
        self.reported = 0
        #: resolved to the any address (cma_resolve_loopback): bound to a device, no netdev
        self.loopback = False
        #: ``id_priv->seq_num``: the id's starting PSN, random, 24 bits
        self.psn = random.getrandbits(24)
        #: SET_OPTION: TOS (``tos``), ACK_TIMEOUT (None: not set), REUSEADDR, AFONLY
        self.tos = 0
        self.ack_timeout: Optional[int] = None
        self.reuseaddr = False
        self.afonly = False
        #: the route's traffic class and packet life time (fixed when the route is resolved)
        self.route_tc = 0
        self.route_plt = PACKET_LIFETIME
        #: the path records the id's route holds (``route.num_pri_alt_paths``): 1 from a
        #: resolved route, or from the REQ for a connection's passive id, until the id goes
        self.paths = 0
        #: the ``ib_path_rec_data`` SET_OPTION IB_PATH gave, if it did
        self.path: Optional[bytes] = None
        #: the device an address query in flight binds the id to when it succeeds
        self.resolving_dev: Optional[FakeDevice] = None

    def check(self, command: UserCmCmd, form: str = "", version: kernel_rules.Version = kernel_rules.NEWEST) -> None:
        """Raise the errno the kernel answers ``command`` (``form``) with in the id's state, as
        :mod:`pyrdmacm.kernel_rules` says (its device and QP type rules included)."""
        err = kernel_rules.refusal(command, self.state, form, device=self.dev is not None, qp_type=self.qp_type,
                                   version=version)
        if err:
            raise kernel_error(err)

    def move(self, state: RdmaCmState) -> None:
        """The id's state is now ``state`` (the one place a fake assigns it)."""
        self.state = state

    def snapshot(self) -> FakeId:
        return FakeId(self.handle, self.uid, self.ps, self.qp_type, self.state, self.src, self.dst,
                      self.dev.name if self.dev else None, self.reported)
