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
operations: ``write(bytes)``, ``fileno()``, ``direct_fd()``, ``close()`` and
``identify_device()``.  Closing points the fd number at a read-only ``/dev/null``
until the object dies, so a write racing with ``close()`` from another thread
fails with EBADF and can never reach another file that reused the number.
:class:`pyrdmacm.testing.FakeKernel` offers the same operations over a pipe,
speaking the same bytes.  :class:`Waker` is the channel's second fd (what
``close()`` signals to wake a waiting reader) and :func:`wait` the one poll
loop step.  Running out of file descriptors is a
:class:`~pyrdmacm.errors.DeviceNodeError` that says so, with nothing left open.

The ABI version comes from RDMA netlink first (``RDMA_NLDEV_CMD_GET_CHARDEV``,
5.3+), then from sysfs (``/sys/class/misc/rdma_cm/abi_version``), else ABI 4 is
assumed, as librdmacm does.  Netlink first because asking it makes the kernel
load rdma_ucm when it is missing, and because its answer also names the
char device, so a stale or foreign node at the path is caught (major:minor
compared with ``fstat``).  The request is one datagram on a raw
``AF_NETLINK`` socket (:mod:`pyrdmacm._chardev` builds it) -- cheaper than reading
the sysfs file (measured on 6.1, 6.12 and 7.2 under qemu: 110-117 us against
134-174 us) -- rather than through :mod:`pyrdmacm.netlink`, whose pyroute2
import costs ~150 ms, which the plain resolve path must not pay.

Nothing else in pyrdmacm calls ``os.open`` on the device or takes an address;
the channel's hot paths write through :data:`device_write` on the fd that
:meth:`KernelDevice.direct_fd` hands out.
"""

from __future__ import annotations

import errno
import os
import select
import stat
import threading
import weakref
from array import array
from typing import Optional, Protocol, Tuple

from . import _chardev
from .errors import DeviceNodeError, UsageError

DEFAULT_PATH = "/dev/infiniband/rdma_cm"
SYSFS_ABI = ("/sys/class/misc/rdma_cm/abi_version", "/sys/class/infiniband_ucma/abi_version")
MIN_ABI, MAX_ABI = 3, 4


#: How a command reaches the device: ``os.write(fd, command)``, named here because this
#: module owns the fd.  The channel's hot paths (:mod:`pyrdmacm._hot`) call it on the fd
#: that :meth:`KernelDevice.direct_fd` gave it (a Python call per command is measurable).
device_write = os.write


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
    raw socket (:mod:`pyrdmacm._chardev` builds and reads it): pyroute2 costs ~150 ms
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

    def direct_fd(self) -> int:
        """The fd that :data:`device_write` may write commands to directly, or -1 (use ``write``)."""

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

#: One /dev/null opened read-only, shared by the process: what a closed device's fd number
#: is pointed at (dup2) until the device object dies, so that a write that had read the
#: number before close() fails (EBADF) instead of reaching a file opened later under it.
_placeholder = -1
_placeholder_lock = threading.Lock()


def _placeholder_fd() -> int:
    global _placeholder
    with _placeholder_lock:
        if _placeholder < 0:
            _placeholder = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
        return _placeholder


def _release(fd: int) -> None:
    """The finalizer of a closed device: free its fd number (pointed at the placeholder)."""
    try:
        os.close(fd)
    except OSError:
        pass


class KernelDevice:
    """The rdma_cm character device, opened non-blocking: the one owner of its fd.

    ``write(data)`` writes one command; :meth:`direct_fd` hands the fd to a channel's
    hot paths, which write with :data:`device_write` (no call of ours in between).
    The number stays valid for the object's life: :meth:`close` points it at a
    read-only ``/dev/null`` (``dup2``), so a write racing with close() fails with
    EBADF instead of reaching another file; the number is freed when the object dies.
    """

    legacy: bool

    def __init__(self, path: Optional[str] = None, *, legacy: Optional[bool] = None) -> None:
        self._fd = -1
        self._number = -1  #: the fd number, kept after close (see class doc)
        self._ident: Tuple[int, int, int] = (0, 0, 0)
        self.path = path or os.environ.get("PYRDMACM_DEVICE") or DEFAULT_PATH
        self.abi_version = 0
        self.abi_source = ""
        self._lock = threading.Lock()
        if legacy is None:
            legacy = getattr(type(self), "legacy", None)  # a subclass may fix it
        self.legacy = (not kernel_at_least(3, 11)) if legacy is None else bool(legacy)
        #: CONNECT and ACCEPT carry ECE (5.8+); older kernels read the command's first 280
        #: bytes and ignore the rest, so a non-zero ECE would be dropped unsaid
        self.ece = kernel_at_least(5, 8)
        self._open()
        self._release = weakref.finalize(self, _release, self._number)

    def _open(self) -> None:
        nl = chardev_via_netlink()
        if nl is not None:
            abi: Optional[int] = nl[2]
            source = "netlink"
        else:
            abi, source = read_abi_version_sysfs(), "sysfs"
        try:
            _placeholder_fd()
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
            if not stat.S_ISCHR(st.st_mode):
                raise DeviceNodeError(errno.ENODEV, "%s is not a character device" % self.path, "is it really rdma_cm?")
            if nl is not None and nl[0] != (os.major(st.st_rdev), os.minor(st.st_rdev)):
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
                raise DeviceNodeError(
                    errno.EPROTONOSUPPORT,
                    "the kernel's rdma_cm speaks ABI version %d" % abi,
                    "pyrdmacm speaks versions %d..%d; use a kernel from this decade" % (MIN_ABI, MAX_ABI),
                )
        except BaseException:
            os.close(fd)
            raise
        self._fd = self._number = fd
        self._ident = (st.st_dev, st.st_ino, st.st_rdev)
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

    def direct_fd(self) -> int:
        """The fd, for an owner that writes commands with :data:`device_write` itself (the
        cheapest way: no call of ours in between), or -1 when a subclass overrides ``write``.
        A write racing with :meth:`close` fails with EBADF (see the class doc)."""
        if type(self).write is not KernelDevice.write:
            return -1
        return self.fileno()

    def identify_device(self, index: Optional[int], node_guid: int) -> Tuple[Optional[str], Optional[int]]:
        from .devices import identify_device

        return identify_device(index, node_guid)

    def reopen(self) -> "KernelDevice":
        """Another fd on the same device (a sync id's private channel; MIGRATE_ID's target)."""
        return type(self)(self.path, legacy=self.legacy)

    def close(self) -> None:
        with self._lock:
            fd, self._fd = self._fd, -1
        if fd < 0:
            return
        try:
            st = os.fstat(fd)
            ours = (st.st_dev, st.st_ino, st.st_rdev) == self._ident
        except OSError:  # EBADF: someone os.close()d it already; it is closed either way
            ours = False
        if not ours:  # closed behind our back (and maybe reused): not ours to touch, ever
            self._release.detach()
            return
        # Point the number at the placeholder: that drops our reference to the rdma_cm file
        # (the kernel destroys its ids when the last reference goes) and keeps the number
        # taken until this object dies (weakref.finalize in __init__).
        os.dup2(_placeholder_fd(), fd)


class Waker:
    """What :meth:`EventChannel.close` signals so that a thread blocked waiting for events
    wakes up (closing an fd does not wake a ``poll()`` on it): an eventfd, or a pipe before
    Python 3.10.  Created before the device, so that running out of fds loses nothing."""

    __slots__ = ("fd", "_w", "_pid")

    def __init__(self) -> None:
        try:
            if hasattr(os, "eventfd"):
                self.fd = self._w = os.eventfd(0, os.EFD_CLOEXEC | os.EFD_NONBLOCK)
            else:  # pragma: no cover - Python < 3.10
                self.fd, self._w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError as e:
            if e.errno in _FD_LIMIT:
                raise _too_many_files(e, "an eventfd for the channel") from None
            raise
        self._pid = os.getpid()

    def signal(self) -> None:
        """Wake the waiter; only the process that made the waker may (a forked child's
        signal would wake its parent's waits, which share the eventfd, for ever)."""
        if self._w >= 0 and os.getpid() == self._pid:
            try:
                os.write(self._w, _ONE)
            except OSError:  # full (a pipe): it is readable already
                pass

    def drain(self) -> None:
        """Read the signal: a waker readable with no close() behind it does not spin a wait."""
        if self.fd >= 0:
            try:
                os.read(self.fd, 8)
            except OSError:
                pass

    def close(self) -> None:
        fds = {self.fd, self._w}
        self.fd = self._w = -1
        for fd in fds:
            if fd >= 0:
                os.close(fd)


_ONE = (1).to_bytes(8, "little")  # an eventfd takes a u64 (host order; any non-zero will do)

#: what :func:`wait` says
READY, TIMEOUT, WOKEN, GONE = "ready", "timeout", "woken", "gone"
#: the longest wait one poll() takes; a longer timeout waits in several
POLL_MAX_MS = 0x7FFFFFFF


class Poller:
    """``poll()`` on ``fd`` and the waker's fd ``wake`` (-1: none), registered once: a channel
    keeps one for all its waits (a new ``select.poll`` per wait is three calls more)."""

    __slots__ = ("_fd", "_poll", "_readable")

    def __init__(self, fd: int, wake: int) -> None:
        p = select.poll()
        p.register(fd, select.POLLIN)
        if wake >= 0:
            p.register(wake, select.POLLIN)
        self._fd, self._poll = fd, p.poll
        self._readable = [(fd, select.POLLIN)]  # poll()'s answer when only the fd is readable

    def wait(self, timeout_ms: int) -> str:
        """Wait until the fd is readable (READY), the waker is (WOKEN), ``timeout_ms`` passed
        (TIMEOUT; -1 waits for ever) or the fd is no open file (GONE: POLLNVAL)."""
        ready = self._poll(timeout_ms if timeout_ms < POLL_MAX_MS else POLL_MAX_MS)
        if ready == self._readable:  # the common answer, in one comparison
            return READY
        state = TIMEOUT
        fd = self._fd
        for rfd, revents in ready:
            if rfd == fd:
                if revents & select.POLLNVAL:
                    return GONE
                state = READY
            elif state is TIMEOUT:  # the waker
                state = WOKEN
        return state


def wait(fd: int, wake: int, timeout_ms: int) -> str:
    """One wait of a :class:`Poller` on ``fd`` and ``wake``."""
    return Poller(fd, wake).wait(timeout_ms)
