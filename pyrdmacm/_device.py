"""The one module that owns the rdma_cm file descriptor and the reply buffers.

Theory of operation
-------------------
The kernel answers a command by ``copy_to_user()`` into a buffer whose address
the command carries in its ``response`` field.  :class:`ReplyBuffer` is such a
buffer: fixed, allocated once, its address taken once (ctypes), reused for
every reply of its kind -- a fresh buffer per reply costs more than the
syscall.  Whoever writes a command that names a buffer must hold that buffer
until it has read the reply; :class:`pyrdmacm.cm.EventChannel` does so under
its locks.

:class:`KernelDevice` opens ``/dev/infiniband/rdma_cm`` (``O_RDWR |
O_CLOEXEC | O_NONBLOCK``), checks that it is the rdma_cm character device and
that the kernel speaks ABI 3 or 4, and offers exactly three operations:
``write(bytes)``, ``fileno()`` and ``close()``.  The fd is set to -1 the
moment it is closed; writing to a closed device raises, never reaches another
file that reused the number.  :class:`pyrdmacm.fake.FakeKernel` offers the same
three operations over a pipe, speaking the same bytes.

The ABI version comes from RDMA netlink first (``RDMA_NLDEV_CMD_GET_CHARDEV``,
5.3+), then from sysfs (``/sys/class/misc/rdma_cm/abi_version``), else ABI 4 is
assumed, as librdmacm does.  Netlink first because asking it makes the kernel
load rdma_ucm when it is missing, and because its answer also names the
char device, so a stale or foreign node at the path is caught (major:minor
compared with ``fstat``).  The request is one datagram on a raw
``AF_NETLINK`` socket written here -- cheaper than reading the sysfs file
(measured on 6.1, 6.12 and 7.2 under qemu: 110-117 us against 134-174 us) --
rather than through :mod:`pyrdmacm.netlink`, whose pyroute2 import costs
~150 ms, which the plain resolve path must not pay.

Nothing else in pyrdmacm calls ``os.open`` on the device or takes an address;
the channel's hot paths write through :data:`device_write` on the fd that
:meth:`KernelDevice.direct_fd` hands out.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import socket
import stat
import struct
import threading
from typing import Callable, Dict, Optional, Tuple

from .errors import DeviceNodeError, UsageError

DEFAULT_PATH = "/dev/infiniband/rdma_cm"
SYSFS_ABI = ("/sys/class/misc/rdma_cm/abi_version", "/sys/class/infiniband_ucma/abi_version")
MIN_ABI, MAX_ABI = 3, 4


#: How a command reaches the device: ``os.write(fd, command)``, named here because this
#: module owns the fd.  :class:`pyrdmacm.cm.EventChannel` calls it directly on the fd
#: that :meth:`KernelDevice.direct_fd` gave it (a Python call per command is measurable).
device_write = os.write


class ReplyBuffer:
    """A pinned buffer the kernel writes one kind of reply into."""

    __slots__ = ("size", "_buf", "address", "view", "u32")

    def __init__(self, size: int) -> None:
        self.size = size
        self._buf = ctypes.create_string_buffer(size)
        self.address = ctypes.addressof(self._buf)
        self.view = memoryview(self._buf).cast("B")
        #: the buffer as host-order ``__u32`` words (the kernel writes host order): a reply's
        #: first field is ``u32[0]``, read without a struct call
        self.u32 = self.view[: size - size % 4].cast("I")

    def clear(self) -> None:
        ctypes.memset(self.address, 0, self.size)

    def fill(self, data: bytes) -> None:
        """Pre-fill (librdmacm pre-sets ``ibdev_index = -1`` to detect old kernels)."""
        self.view[: len(data)] = data

    def bytes(self, n: Optional[int] = None) -> bytes:
        return self._buf.raw[: self.size if n is None else n]


class GuardedHeader:
    """A command header placed just before an inaccessible page.

    ``ucma_write`` checks the command number (EINVAL if this kernel has no such
    command) before the handler reads the body with ``copy_from_user``.
    Written from here with a full ``in`` (the body would lie on the guard page),
    a command the kernel knows faults there (EFAULT, or ENOSPC from a reply-size
    check) without doing anything; GET_OPTION answers ENOSYS.
    So the answer tells which commands exist, and nothing changes.
    """

    def __init__(self) -> None:
        import mmap

        page = mmap.PAGESIZE
        self._map = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        self._libc = libc = ctypes.CDLL(None, use_errno=True)
        libc.write.restype = ctypes.c_ssize_t
        if libc.mprotect(ctypes.c_void_p(base + page), ctypes.c_size_t(page), 0) != 0:
            raise OSError(ctypes.get_errno(), "mprotect")
        self._page = page

    def probe(self, device: "KernelDevice", cmd: int, size_in: int, size_out: int) -> int:
        """The errno the kernel answers for ``cmd`` whose ``size_in`` body bytes are unreadable."""
        off = self._page - 8
        self._map[off : off + 8] = cmd.to_bytes(4, "little") + size_in.to_bytes(2, "little") + size_out.to_bytes(2, "little")
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        # write() only passes the pointer and length; the kernel itself reads the body (and faults)
        n = self._libc.write(device.fileno(), ctypes.c_void_p(base + off), ctypes.c_size_t(8 + size_in))
        return 0 if n >= 0 else ctypes.get_errno()


def write_to_address(address: int, data: bytes) -> None:
    """What ``copy_to_user`` does; used by the fake kernel only."""
    ctypes.memmove(address, data, len(data))


def read_abi_version_sysfs(root: str = "/") -> Optional[int]:
    for rel in SYSFS_ABI:
        try:
            with open(os.path.join(root, rel.lstrip("/"))) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


# RDMA netlink, just enough for one request: NETLINK_RDMA, client RDMA_NL_NLDEV (5),
# RDMA_NLDEV_CMD_GET_CHARDEV (15); the message is an nlmsghdr followed by attributes
# (no family header).  pyrdmacm.netlink (pyroute2) speaks the whole family; this path
# must not import pyroute2 (about 150 ms).
_NETLINK_RDMA = 20
_NLDEV_GET_CHARDEV = (5 << 10) + 15
_NLMSG_ERROR = 2
_NLM_F_REQUEST = 1
_ATTR_CHARDEV_TYPE, _ATTR_CHARDEV_NAME, _ATTR_CHARDEV_ABI, _ATTR_CHARDEV = 69, 70, 71, 72
_NLMSGHDR = struct.Struct("=IHHII")
_NLATTR = struct.Struct("=HH")


def chardev_via_netlink(kind: str = "rdma_cm", timeout: float = 1.0) -> Optional[Tuple[Tuple[int, int], str, int]]:
    """``RDMA_NLDEV_CMD_GET_CHARDEV``: ``((major, minor), node name, ABI version)`` or None.

    On 5.3+ the question itself makes the kernel load rdma_ucm when it is not
    loaded yet.  None when RDMA netlink cannot answer (no NETLINK_RDMA, a kernel
    before 5.3, no such client, no reply within ``timeout``).
    """
    value = kind.encode() + b"\0"
    attr = _NLATTR.pack(4 + len(value), _ATTR_CHARDEV_TYPE) + value
    attr += b"\0" * (-len(attr) % 4)
    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _NETLINK_RDMA)
    except OSError:
        return None
    try:
        sock.settimeout(timeout)
        sock.send(_NLMSGHDR.pack(_NLMSGHDR.size + len(attr), _NLDEV_GET_CHARDEV, _NLM_F_REQUEST, 1, 0) + attr)
        data = sock.recv(8192)
    except OSError:
        return None
    finally:
        sock.close()
    if len(data) < _NLMSGHDR.size:
        return None
    length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(data)
    if mtype == _NLMSG_ERROR or mtype != _NLDEV_GET_CHARDEV:
        return None
    attrs: Dict[int, bytes] = {}
    off, end = _NLMSGHDR.size, min(length, len(data))
    while off + 4 <= end:
        alen, atype = _NLATTR.unpack_from(data, off)
        if alen < 4:
            break
        attrs[atype & 0x3FFF] = data[off + 4 : off + alen]
        off += (alen + 3) & ~3
    try:
        dev = struct.unpack("=Q", attrs[_ATTR_CHARDEV])[0]
        abi = struct.unpack("=Q", attrs[_ATTR_CHARDEV_ABI])[0] & 0xFFFFFFFF
        name = attrs.get(_ATTR_CHARDEV_NAME, b"").split(b"\0")[0].decode()
    except (KeyError, struct.error, UnicodeDecodeError):
        return None
    # huge_encode_dev(): minor bits 0-7 and 20-31, major bits 8-19
    return ((dev & 0xFFF00) >> 8, (dev & 0xFF) | ((dev >> 12) & 0xFFF00)), name, abi


class KernelDevice:
    """The rdma_cm character device, opened non-blocking."""

    def __init__(self, path: Optional[str] = None) -> None:
        self._fd = -1
        self.path = path or os.environ.get("PYRDMACM_DEVICE") or DEFAULT_PATH
        self.abi_version = 0
        self.abi_source = ""
        self._lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        nl = chardev_via_netlink()
        if nl is not None:
            abi: Optional[int] = nl[2]
            source = "netlink"
        else:
            abi, source = read_abi_version_sysfs(), "sysfs"
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK)
        except FileNotFoundError:
            raise DeviceNodeError(
                errno.ENOENT,
                "%s does not exist" % self.path,
                "load the rdma_ucm kernel module (`modprobe rdma_ucm`), or, in a container, pass the "
                "device node in (e.g. `--device %s`)" % self.path,
            ) from None
        except PermissionError:
            raise DeviceNodeError(
                errno.EACCES,
                "cannot open %s" % self.path,
                "the node should be mode 0666 (udev rule of rdma-core); check its permissions",
            ) from None
        st = os.fstat(fd)
        if not stat.S_ISCHR(st.st_mode):
            os.close(fd)
            raise DeviceNodeError(errno.ENODEV, "%s is not a character device" % self.path, "is it really rdma_cm?")
        if nl is not None and nl[0] != (os.major(st.st_rdev), os.minor(st.st_rdev)):
            os.close(fd)
            raise DeviceNodeError(
                errno.ENODEV,
                "%s is device %d:%d but the kernel's rdma_cm is %d:%d"
                % (self.path, os.major(st.st_rdev), os.minor(st.st_rdev), nl[0][0], nl[0][1]),
                "the device node is stale (recreate it, or let udev do so)",
            )
        if abi is None:
            # librdmacm assumes the newest ABI when nothing says otherwise; so do we.
            abi, source = MAX_ABI, "assumed"
        if not MIN_ABI <= abi <= MAX_ABI:
            os.close(fd)
            raise DeviceNodeError(
                errno.EPROTONOSUPPORT,
                "the kernel's rdma_cm speaks ABI version %d" % abi,
                "pyrdmacm speaks versions %d..%d; use a kernel from this decade" % (MIN_ABI, MAX_ABI),
            )
        self._fd = fd
        self.abi_version = abi
        self.abi_source = source

    def fileno(self) -> int:
        if self._fd < 0:
            raise UsageError("the rdma_cm channel is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def write(self, data: bytes) -> int:
        fd = self._fd
        if fd < 0:
            raise UsageError("the rdma_cm channel is closed")
        return os.write(fd, data)

    def writer(self) -> Callable[[bytes], int]:
        """``os.write`` bound to the fd: ``write`` without its Python call, for an owner that
        checks it is open before each write and drops the writer before ``close()`` (as
        :class:`~pyrdmacm.cm.EventChannel` does).  A subclass that overrides ``write`` gets it."""
        if type(self).write is not KernelDevice.write:
            return self.write
        return functools.partial(os.write, self.fileno())

    def direct_fd(self) -> int:
        """The fd, for an owner that writes commands with :func:`device_write` itself (the
        cheapest way: no call of ours in between), or -1 when a subclass overrides ``write``.
        Same contract as :meth:`writer`: check the channel is open before each write, and
        forget the fd before ``close()``."""
        if type(self).write is not KernelDevice.write:
            return -1
        return self.fileno()

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            try:
                os.close(fd)
            except OSError as e:  # EBADF: someone os.close()d it already; it is closed either way
                if e.errno != errno.EBADF:
                    raise
