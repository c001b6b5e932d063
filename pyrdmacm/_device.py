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

Nothing else in pyrdmacm calls ``os.open``/``os.write`` on the device or takes
an address.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import threading
from typing import Optional, Tuple

from .errors import DeviceNodeError, UsageError

DEFAULT_PATH = "/dev/infiniband/rdma_cm"
SYSFS_ABI = ("/sys/class/misc/rdma_cm/abi_version", "/sys/class/infiniband_ucma/abi_version")
MIN_ABI, MAX_ABI = 3, 4


class ReplyBuffer:
    """A pinned buffer the kernel writes one kind of reply into."""

    __slots__ = ("size", "_buf", "address", "view")

    def __init__(self, size: int) -> None:
        self.size = size
        self._buf = ctypes.create_string_buffer(size)
        self.address = ctypes.addressof(self._buf)
        self.view = memoryview(self._buf).cast("B")

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


def _chardev_from_netlink() -> Optional[Tuple[Tuple[int, int], str, int]]:
    """Ask RDMA netlink for the rdma_cm char device (and so have the kernel load rdma_ucm)."""
    try:
        from . import netlink  # pyroute2: only on this slow path
    except Exception:  # pragma: no cover - netlink module unavailable
        return None
    try:
        info = netlink.get_chardev("rdma_cm")
    except Exception:
        return None
    if info is None:
        return None
    return info.dev, info.name, info.abi


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
        abi = read_abi_version_sysfs()
        source = "sysfs"
        nl = None
        if abi is None or not os.path.exists(self.path):
            # sysfs is silent or the node is missing: netlink knows more, and on
            # 5.3+ asking it loads rdma_ucm.
            nl = _chardev_from_netlink()
            if nl is not None:
                abi, source = nl[2], "netlink"
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

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)
