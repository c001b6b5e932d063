"""The raw command writer: any command, well-formed or not, on one rdma_cm fd.

Theory of operation
-------------------
:class:`Raw` writes what :class:`~pyrdmacm.core.cmid.CmId` never would (its checks refuse them
first): a write shorter than the header, an ``in`` beyond the write, a reply size one byte
short, a reserved field set, an id of another fd.  It builds each body with the ABI layer's
codecs -- :meth:`Raw.send` takes a command of :data:`pyrdmacm.wire.COMMAND` by name, with
its number, body layout and reply size -- and answers every write with 0 or the errno the
kernel gave, never raising for it.

The fd is not its own.  :class:`~pyrdmacm.core.device.KernelDevice` opens the node (checking
that it is the rdma_cm device and that the kernel speaks a known ABI), writes each command
and closes it; nothing here calls ``os.open`` or ``os.write``.  A :class:`Raw` may be given
another device that speaks the same bytes instead (:class:`pyrdmacm.testing.FakeKernel`,
for tests on a host without the kernel's).  A case that needs a second fd (an id of
another fd, MIGRATE_ID's source) opens it on the same device with :meth:`Raw.beside`, and
names an fd in a command by ``dev.fileno()``.  The replies go to one
:class:`~pyrdmacm.core.device.ReplyBuffer` of :data:`REPLY_SIZE`, the largest reply buffer
any command has: a reply size made up by a caller (the fuzzer's ``out`` of 1024) stays
inside it, since the kernel copies at most its reply's own size.
"""

from __future__ import annotations

import errno
from typing import Any, Dict, Optional, Protocol, Type, TypeVar

from .. import abi
from ..abi.codec import CODECS
from ..core.device import KernelDevice, ReplyBuffer
from ..addr import Address
from ..errors import errno_name
from ..wire import COMMAND, header

__all__ = ["Raw", "RawDevice", "REPLY_SIZE"]

#: The reply buffer's size: the largest reply of any command (QUERY IB_SERVICE's, as
#: librdmacm sizes its first buffer).
REPLY_SIZE = max(command.out for command in COMMAND.values())


class RawDevice(Protocol):
    """What :class:`Raw` writes through: :class:`~pyrdmacm.core.device.KernelDevice`, or a fake
    that speaks the same bytes."""

    def write(self, data: bytes) -> int:
        """Write one command; an ``OSError`` with the errno when it is refused."""

    def fileno(self) -> int:
        """The fd, as a command names it (MIGRATE_ID) and ``poll()`` waits on it."""

    def close(self) -> None:
        """Close the fd: the kernel destroys every id on it."""

    def reopen(self) -> "RawDevice":
        """Another fd on the same device."""


R = TypeVar("R", bound="Raw")


class Raw:
    """Raw commands on one rdma_cm fd; every command returns 0 or the kernel's errno.

    The fd is a :class:`~pyrdmacm.core.device.KernelDevice` on ``path`` (the default node when
    None), or ``device`` when given.  ``dev`` is that device, ``reply`` the buffer each reply
    goes to unless the fields name another.
    """

    def __init__(self, path: Optional[str] = None, *, device: Optional[RawDevice] = None) -> None:
        self.path = path
        self.dev: RawDevice = KernelDevice(path) if device is None else device
        self.reply = ReplyBuffer(REPLY_SIZE)

    @classmethod
    def beside(cls: Type[R], other: "Raw") -> R:
        """A :class:`Raw` of this class on another fd of ``other``'s device."""
        return cls(other.path, device=other.dev.reopen())

    def close(self) -> None:
        """Close the fd: the kernel destroys every id still on it."""
        self.dev.close()

    def write(self, data: bytes) -> int:
        """Write ``data`` as one command: 0, or the errno the kernel answered."""
        try:
            self.dev.write(data)
        except OSError as e:
            return e.errno or errno.EIO
        return 0

    def cmd(self, cmd: int, struct_name: Optional[str], fields: Dict[str, object], out: int = 0,
            size_in: Optional[int] = None, body: Optional[bytes] = None) -> int:
        """Command number ``cmd``: the body is ``body`` as given, or the layout ``struct_name``
        packed from ``fields`` (the others zero), or empty; ``hdr.in`` is the body's size
        unless ``size_in`` says otherwise, ``hdr.out`` is ``out``."""
        if body is None:
            body = CODECS[struct_name].pack_dict(fields) if struct_name else b""
        return self.write(header(cmd, len(body) if size_in is None else size_in, out) + body)

    def send(self, name: str, fields: Dict[str, object], out: Optional[int] = None) -> int:
        """The command ``name`` of :data:`~pyrdmacm.wire.COMMAND` (``"DESTROY_ID"``,
        ``"QUERY_ADDR"`` ...) with ``fields`` packed into its body; its ``response`` is
        :attr:`reply` unless ``fields`` name one, ``hdr.out`` its reply's size unless
        ``out`` is given."""
        command = COMMAND[name]
        if "response" in command.fields and "response" not in fields:
            fields = dict(fields, response=self.reply.address)
        return self.cmd(command.cmd, command.body.name, fields, command.out if out is None else out)

    def reply_of(self, name: str, buf: Optional[ReplyBuffer] = None) -> Dict[str, Any]:
        """The reply of command ``name``, decoded from ``buf`` (:attr:`reply` by default)."""
        codec = COMMAND[name].reply
        assert codec is not None, "%s has no reply" % name
        return codec.unpack_dict((buf or self.reply).view)

    def create(self, ps: int = abi.PortSpace.TCP, qp_type: int = abi.QpType.RC) -> int:
        """CREATE_ID: the new id's handle; OSError when the kernel refuses.  Its uid is 1,
        not 0: the kernel queues no event for an id of uid 0."""
        self.reply.clear()
        err = self.send("CREATE_ID", {"uid": 1, "ps": ps, "qp_type": qp_type})
        if err:
            raise OSError(err, "CREATE_ID failed: %s" % errno_name(err))
        return int(self.reply_of("CREATE_ID")["id"])

    def destroy(self, handle: int) -> int:
        return self.send("DESTROY_ID", {"id": handle})

    def resolve(self, handle: int, dst: Address, src: Optional[Address] = None, timeout_ms: int = 2000,
                **override: object) -> int:
        """RESOLVE_ADDR of ``dst`` (from ``src``), any field replaced by ``override``."""
        fields: Dict[str, object] = {
            "id": handle, "timeout_ms": timeout_ms, "dst_size": dst.size, "dst_addr": dst.pack_storage(),
            "src_size": src.size if src else 0, "src_addr": src.pack_storage() if src else b"",
        }
        fields.update(override)
        return self.send("RESOLVE_ADDR", fields)

    def bind(self, handle: int, addr: Address, **override: object) -> int:
        """BIND to ``addr``, any field replaced by ``override``."""
        fields: Dict[str, object] = {"id": handle, "addr_size": addr.size, "addr": addr.pack_storage()}
        fields.update(override)
        return self.send("BIND", fields)

    def get_event(self, out: Optional[int] = None) -> int:
        """GET_EVENT into :attr:`reply` (``out``: the event's size unless given)."""
        return self.send("GET_EVENT", {}, out=out)

    def query(self, handle: int, option: int, out: Optional[int] = None) -> int:
        """QUERY ``option`` into :attr:`reply` (``out``: QUERY ADDR's reply size unless given)."""
        return self.send("QUERY_ADDR", {"id": handle, "option": option}, out=out)

    def alive(self) -> str:
        """'' when the fd still creates and destroys an id, else what failed."""
        try:
            h = self.create()
        except OSError as e:
            return "the fd no longer creates ids (%s)" % errno_name(e.errno or errno.EIO)
        err = self.destroy(h)
        return "" if err == 0 else "the fd no longer destroys ids (%s)" % errno_name(err)
