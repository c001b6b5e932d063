"""The one module that owns the rdma_cm file descriptor and the reply buffers.

Theory of operation
-------------------
The kernel answers a command by ``copy_to_user()`` into a buffer whose address
the command carries in its ``response`` field.  :class:`ReplyBuffer` is such a
buffer: fixed, allocated once, its address taken once (an ``array``'s ``buffer_info``), reused for
every reply of its kind -- a fresh buffer per reply costs more than the
syscall.  Whoever writes a command that names a buffer must hold that buffer
until it has read the reply (the channel does, under its locks or by taking
the buffer out of a pool).

:class:`KernelDevice` opens ``/dev/infiniband/rdma_cm`` (``O_RDWR |
O_CLOEXEC | O_NONBLOCK``), checks that it is the rdma_cm character device and
that the kernel speaks ABI 3 or 4, and offers the :class:`Transport`
operations: ``write(bytes)``, ``fileno()``, ``close()`` and
``identify_device()``.  ``write`` is the one way a command reaches the kernel:
``os.write`` bound to the fd (a C call, no frame of ours per command).  The fd
is closed when the last holder of that bound write lets go of it: ``close()``
drops the device's own reference (and the channel its copy), and a call in
flight holds one until it returns -- the interpreter's reference count is the
count of calls in flight.  So ``close()`` releases the fd at once when no write
is in flight, and otherwise the last one does as it returns: nothing stays open
on the number, and a write racing with ``close()`` from another thread can
never reach another file that reused it.  (Whoever holds the write must not
keep it in a variable that outlives the call, such as a frame that may end in
an exception: a traceback keeps its frame's variables.)
:class:`pyrdmacm.testing.FakeKernel` offers the same operations over a pipe,
speaking the same bytes.  The channel's waits (its second fd, the poller) are
:mod:`pyrdmacm.core.poll`'s.  Running out of file descriptors is a
:class:`~pyrdmacm.errors.DeviceNodeError` that says so, with nothing left open.

The ABI version comes from RDMA netlink first (``RDMA_NLDEV_CMD_GET_CHARDEV``,
5.3+), then from sysfs (``/sys/class/misc/rdma_cm/abi_version``), else ABI 4 is
assumed, as librdmacm does.  Netlink first because asking it makes the kernel
load rdma_ucm when it is missing, and because its answer also names the
char device, so a stale or foreign node at the path is caught (major:minor
compared with ``fstat``).  The request is one datagram on a raw
``AF_NETLINK`` socket (:mod:`pyrdmacm.abi.chardev` builds it) -- cheaper than reading
the sysfs file (measured on 6.1, 6.12 and 7.2 under qemu: 110-117 us against
134-174 us) -- rather than through :mod:`pyrdmacm.netlink`, whose pyroute2
import costs ~150 ms, which the plain resolve path must not pay.

Nothing else in pyrdmacm calls ``os.open`` or ``os.write`` on the device.
"""

from __future__ import annotations

import errno
import os
import stat
import weakref
from array import array
from functools import partial
from typing import Any, Callable, Optional, Protocol, Tuple

from ..abi import chardev as _chardev
from ..errors import DeviceNodeError, StateError, UsageError

DEFAULT_PATH = "/dev/infiniband/rdma_cm"
SYSFS_ABI = ("/sys/class/misc/rdma_cm/abi_version", "/sys/class/infiniband_ucma/abi_version")
MIN_ABI, MAX_ABI = 3, 4


class ReplyBuffer:
    """A pinned buffer the kernel writes one kind of reply into."""

    __slots__ = ("size", "_buf", "address", "view", "u32")

    def __init__(self, size: int) -> None:
        self.size = size
        # an array's memory, not ctypes' (whose import costs ~2 ms at start-up): its address
        # holds while a memoryview of it exists (an exported array cannot resize), i.e. always
        self._buf = buf = array("B", bytes(size or 1))  # one byte at least: a real address
        self.address = buf.buffer_info()[0]
        self.view = memoryview(buf)[:size]
        #: the buffer as host-order ``__u32`` words (the kernel writes host order): a reply's
        #: first field is ``u32[0]``, read without a struct call
        self.u32 = self.view[: size - size % 4].cast("I")

    def clear(self) -> None:
        self.view[:] = bytes(self.size)

    def fill(self, data: bytes) -> None:
        """Pre-fill (librdmacm pre-sets ``ibdev_index = -1`` to detect old kernels)."""
        self.view[: len(data)] = data

    def bytes(self, n: Optional[int] = None) -> bytes:
        return self.view[: self.size if n is None else n].tobytes()


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
        import ctypes
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
        import ctypes

        off = self._page - 8
        self._map[off : off + 8] = cmd.to_bytes(4, "little") + size_in.to_bytes(2, "little") + size_out.to_bytes(2, "little")
        base = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        # write() only passes the pointer and length; the kernel itself reads the body (and faults)
        n = self._libc.write(device.fileno(), ctypes.c_void_p(base + off), ctypes.c_size_t(8 + size_in))
        return 0 if n >= 0 else ctypes.get_errno()


def write_to_address(address: int, data: bytes) -> None:
    """What ``copy_to_user`` does; used by the fake kernel only."""
    import ctypes

    ctypes.memmove(address, data, len(data))


def read_abi_version_sysfs(root: str = "/") -> Optional[int]:
    for rel in SYSFS_ABI:
        try:
            with open(os.path.join(root, rel.lstrip("/"))) as f:
                return int(f.read().strip())
        except (OSError, ValueError):
            continue
    return None


def chardev_via_netlink(kind: str = "rdma_cm", timeout: float = 1.0) -> Optional[Tuple[Tuple[int, int], str, int]]:
    """``RDMA_NLDEV_CMD_GET_CHARDEV``: ``((major, minor), node name, ABI version)`` or None.

    On 5.3+ the question itself makes the kernel load rdma_ucm when it is not
    loaded yet.  None when RDMA netlink cannot answer (no NETLINK_RDMA, a kernel
    before 5.3, no such client, no reply within ``timeout``).  One datagram on a
    raw socket (:mod:`pyrdmacm.abi.chardev` builds and reads it): pyroute2 costs ~150 ms
    to import, which opening a channel must not pay.
    """
    import socket  # here, not at import: socket (and selectors) cost ~3 ms

    try:
        sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, _chardev.NETLINK_RDMA)
    except OSError:
        return None
    try:
        sock.settimeout(timeout)
        sock.send(_chardev.chardev_request(kind))
        data = sock.recv(8192)
    except OSError:
        return None
    finally:
        sock.close()
    return _chardev.parse_chardev_reply(data)


def kernel_at_least(major: int, minor: int) -> bool:
    """Whether the running kernel is ``major.minor`` or newer (True when it cannot tell)."""
    try:
        parts = os.uname().release.split(".")
        return (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)) >= (major, minor)
    except (ValueError, IndexError):
        return True


class Transport(Protocol):
    """What an :class:`~pyrdmacm.EventChannel` needs of its device: the kernel's
    (:class:`KernelDevice`) or a fake that speaks the same bytes
    (:class:`pyrdmacm.testing.FakeKernel`)."""

    #: speak the pre-3.11 commands (BIND_IP, RESOLVE_IP, QUERY_ROUTE)
    legacy: bool

    def fileno(self) -> int:
        """The fd to poll for events (readable when one is queued)."""

    def write(self, data: bytes) -> int:
        """Write one command; an ``OSError`` with the kernel's errno when it refuses it."""

    def close(self) -> None:
        """Close the device: the kernel destroys every id on it."""

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        """``(name, index)`` of the RDMA device the kernel gave by index (None: not given) or
        node GUID (0: none): :func:`pyrdmacm.devices.identify_device`'s answer."""


def _too_many_files(e: OSError, what: str) -> DeviceNodeError:
    return DeviceNodeError(
        e.errno or errno.EMFILE,
        "cannot open %s: %s" % (what, os.strerror(e.errno or errno.EMFILE)),
        "the process has run out of file descriptors (each EventChannel takes two): close channels "
        "you no longer need, or raise the limit (ulimit -n, RLIMIT_NOFILE)",
    )


_FD_LIMIT = (errno.EMFILE, errno.ENFILE)
_os_write = os.write


def _release(fd: int, ident: Tuple[int, int, int]) -> None:
    """Close the device's fd: the finalizer of its bound write, which runs once, when the
    last holder lets go (``close()`` and every call in flight; or the device dropped
    without close()).  An fd that is no longer the file opened (closed behind our back,
    its number maybe reused) is not ours to touch.  Never raises: ``os.close`` needs no
    new fd."""
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino, st.st_rdev) == ident:
            os.close(fd)
    except OSError:  # EBADF: someone os.close()d it already; it is closed either way
        pass


def closed_write(data: bytes) -> int:
    """The write of a closed device (and channel): EBADF, what a write to a closed fd says."""
    raise OSError(errno.EBADF, "the rdma_cm channel is closed")


def _check_node(path: str, st: os.stat_result, nl: Optional[Tuple[Tuple[int, int], str, int]]) -> None:
    """Refuse an opened file that is not the kernel's rdma_cm character device: a node that
    is no character device, or whose device number RDMA netlink or sysfs (``/sys/dev/char``)
    names as another device (a stale node, or ``PYRDMACM_DEVICE`` pointing elsewhere)."""
    if not stat.S_ISCHR(st.st_mode):
        raise DeviceNodeError(errno.ENODEV, "%s is not a character device" % path,
                              "point it (or PYRDMACM_DEVICE) at the rdma_cm device node, /dev/infiniband/rdma_cm")
    number = (os.major(st.st_rdev), os.minor(st.st_rdev))
    if nl is not None:
        if nl[0] != number:
            raise DeviceNodeError(
                errno.ENODEV,
                "%s is device %d:%d but the kernel's rdma_cm is %d:%d" % (path, number[0], number[1], nl[0][0], nl[0][1]),
                "the device node is stale (recreate it, or let udev do so)",
            )
        return
    try:  # no netlink answer: sysfs names the driver of every char device number
        name = os.path.basename(os.readlink("/sys/dev/char/%d:%d" % number))
    except OSError:
        return  # no sysfs here (some containers): nothing more to check
    if name != "rdma_cm":
        raise DeviceNodeError(
            errno.ENODEV,
            "%s is device %d:%d, which is %r, not rdma_cm" % (path, number[0], number[1], name),
            "point it (or PYRDMACM_DEVICE) at the rdma_cm device node, /dev/infiniband/rdma_cm, and "
            "load rdma_ucm if it is missing",
        )


class KernelDevice:
    """The rdma_cm character device, opened non-blocking: the one owner of its fd.

    ``write(data)`` writes one command: the one way every command reaches the kernel.
    It is ``os.write`` bound to the fd, whose finalizer closes the fd: :meth:`close`
    drops the device's reference, and a call in flight holds its own until it returns
    (the kernel keeps such a count for its own files; the interpreter keeps this one).
    So the fd number is released by close() -- nothing is left open on it -- or by the
    last call in flight, and a write racing with close() from another thread either
    completes on the rdma_cm file or fails as "closed"; it never reaches a file that
    reused the number.
    """

    legacy: bool
    #: write one command (``os.write`` bound to the fd); after close(), EBADF: the kernel's
    #: refusal is the OSError it raised
    write: Callable[[bytes], int]

    def __init__(self, path: Optional[str] = None, *, legacy: Optional[bool] = None) -> None:
        self._fd = -1
        self._ident: Tuple[int, int, int] = (0, 0, 0)
        self.write = closed_write
        self.path = path or os.environ.get("PYRDMACM_DEVICE") or DEFAULT_PATH
        self.abi_version = 0
        self.abi_source = ""
        if legacy is None:
            legacy = getattr(type(self), "legacy", None)  # a subclass may fix it
        self.legacy = (not kernel_at_least(3, 11)) if legacy is None else bool(legacy)
        #: CONNECT and ACCEPT carry ECE (5.8+); older kernels read the command's first 280
        #: bytes and ignore the rest, so a non-zero ECE would be dropped unsaid
        self.ece = kernel_at_least(5, 8)
        self._open()

    def _own(self, fd: int, st: os.stat_result) -> None:
        """Take ``fd`` (open; ``st`` its fstat): its write, and the finalizer of that write,
        which closes it."""
        self._fd = fd
        self._ident = (st.st_dev, st.st_ino, st.st_rdev)
        write = self.write = partial(_os_write, fd)
        weakref.finalize(write, _release, fd, self._ident)

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
        except OSError as e:
            if e.errno in _FD_LIMIT:
                raise _too_many_files(e, self.path) from None
            raise DeviceNodeError(e.errno or errno.EIO, "cannot open %s: %s" % (self.path, e.strerror),
                                  "check that it is the rdma_cm device node") from None
        try:
            st = os.fstat(fd)
            _check_node(self.path, st, nl)
            if abi is None:
                # librdmacm assumes the newest ABI when nothing says otherwise; so do we.
                abi, source = MAX_ABI, "assumed"
            if not MIN_ABI <= abi <= MAX_ABI:
                raise DeviceNodeError(
                    errno.EPROTONOSUPPORT,
                    "the kernel's rdma_cm speaks ABI version %d" % abi,
                    "pyrdmacm speaks versions %d..%d; use a kernel from this decade" % (MIN_ABI, MAX_ABI),
                )
        except BaseException:
            os.close(fd)
            raise
        self._own(fd, st)
        self.abi_version = abi
        self.abi_source = source

    def fileno(self) -> int:
        if self._fd < 0:
            raise UsageError("the rdma_cm channel is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        from ..devices import identify_device

        return identify_device(index, node_guid)

    def reopen(self) -> "KernelDevice":
        """Another fd on the same device (a sync id's private channel; MIGRATE_ID's target)."""
        return type(self)(self.path, legacy=self.legacy)

    def close(self) -> None:
        """Close the device: the kernel destroys every id on it.  The fd is closed now, or by
        the last call in flight (see the class doc); closing twice does nothing; never raises."""
        self._fd = -1
        self.write = closed_write  # the device's reference to the fd's write goes


_TRANSPORT_CALLS = ("fileno", "write", "close", "identify_device")


def check_transport(t: Any) -> None:
    """UsageError unless ``t`` has what a channel calls of its transport."""
    missing = [name for name in _TRANSPORT_CALLS if not callable(getattr(t, name, None))]
    if not hasattr(t, "legacy"):
        missing.append("legacy")
    if missing:
        raise UsageError("%r is no rdma_cm transport: it lacks %s (see pyrdmacm.core.device.Transport; "
                         "pyrdmacm.testing.FakeKernel is one)" % (t, ", ".join(missing)))


def fd_closed_behind() -> StateError:
    """What EBADF (POLLNVAL) on a channel's fd means."""
    return StateError(
        "the event channel's fd was closed behind its back (EBADF: os.close() on its fileno()?); "
        "close channels with close(), and open a new EventChannel"
    )
