"""The channel's waits: its waker, its poller, and the signal pipe of the main thread's waits.

A reader that finds no event queued waits in ``poll()`` on the channel's fd and on its
:class:`Waker` (what ``close()`` or ``destroy()`` from another thread signals: closing an fd
does not wake a ``poll()`` on it).

Signals.  Python runs a signal's handler in the main thread, between two bytecodes: the C
handler only notes the signal.  A signal that comes while the thread is blocked in
``poll()`` interrupts it (EINTR), and the handler runs; one that comes after the interpreter
last looked and before ``poll()`` has begun interrupts nothing, and its handler would wait
for the next event, for ever if none comes (a ``listen`` that ignores one SIGTERM in a few
dozen).  So a wait in the main thread gives the process's signal pipe to
``signal.set_wakeup_fd`` while it waits and polls that pipe too: such a signal makes the pipe
readable, the wait wakes, and the handler runs as the wait goes back to Python code.  The fd
that was set before (asyncio's, or the program's own) gets back what the signals wrote, so its
owner still learns of them.
"""

from __future__ import annotations

import math
import numbers
import os
import select
import threading
import time
from typing import Any, Optional

from . import process as _process
from .device import _FD_LIMIT, _too_many_files, fd_closed_behind
from ..errors import StateError, UsageError

__all__ = ["Waker", "Poller", "ReadWait", "SignalPipe", "READY", "TIMEOUT", "WOKEN", "GONE", "SIGNALLED",
           "POLL_MAX_MS", "timeout_seconds", "signal_pipe"]

_get_ident = threading.get_ident
_main_thread = threading.main_thread


class Waker:
    """What :meth:`EventChannel.close` signals so that a thread blocked waiting for events
    wakes up: an eventfd, or a pipe before Python 3.10.  Created before the device, so that
    running out of fds loses nothing."""

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

#: what :meth:`Poller.wait` says
READY, TIMEOUT, WOKEN, GONE, SIGNALLED = "ready", "timeout", "woken", "gone", "signalled"
#: the longest wait one poll() takes; a longer timeout waits in several
POLL_MAX_MS = 0x7FFFFFFF


class Poller:
    """``poll()`` on ``fd``, the waker's fd ``wake`` (-1: none) and the signal pipe ``signals``
    (a main-thread wait's), registered once: a channel keeps its pollers for all its waits (a
    new ``select.poll`` per wait is three calls more)."""

    __slots__ = ("_fd", "_wake", "_poll", "_readable", "signals")

    def __init__(self, fd: int, wake: int, signals: "Optional[SignalPipe]" = None) -> None:
        p = select.poll()
        p.register(fd, select.POLLIN)
        for other in (wake, signals.r if signals is not None else -1):
            if other >= 0:
                p.register(other, select.POLLIN)
        self._fd, self._wake, self._poll = fd, wake, p.poll
        #: the signal pipe it polls: its waiter arms it around each wait
        self.signals = signals
        self._readable = [(fd, select.POLLIN)]  # poll()'s answer when only the fd is readable

    def wait(self, timeout_ms: int) -> str:
        """Wait until the fd is readable (READY), the waker is (WOKEN), the signal pipe is
        (SIGNALLED), ``timeout_ms`` passed (TIMEOUT; -1 waits for ever) or the fd is no open
        file (GONE: POLLNVAL).  The fd comes first, then the waker."""
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
            elif state is TIMEOUT or state is SIGNALLED:
                state = WOKEN if rfd == self._wake else SIGNALLED
        return state


class ReadWait:
    """The one wait of every reader of a channel: until its fd is readable, a deadline has
    passed, or the waker was signalled (a close() or destroy() from another thread).  A part
    of the channel (``Channel._ready``): it holds the channel's :class:`Waker`, the pollers
    of the main thread's waits (with the signal pipe) and of the other threads', made at the
    first wait of each, and the id of the thread waiting (named in the refusal of a second
    reader).  The channel is passed to each wait, not held: a channel is freed by reference
    counting alone."""

    __slots__ = ("waker", "reader", "_main", "_other")

    def __init__(self) -> None:
        self.waker = Waker()
        #: the thread id of the reader waiting now, or None
        self.reader: Optional[int] = None
        self._main: Optional[Poller] = None
        self._other: Optional[Poller] = None

    def until(self, channel: Any, deadline: Optional[float]) -> bool:
        """Wait until ``channel``'s fd is readable (True) or ``deadline`` (``time.monotonic()``;
        None: never) has passed (False).  In the main thread the signal pipe is armed around
        the wait.  StateError when the channel is closed meanwhile, or its fd behind its back."""
        me = _get_ident()
        main = me == _main_thread().ident
        poller = self._main if main else self._other
        if poller is None:
            poller = self._new_poller(channel, main)
        self.reader = me
        pipe = poller.signals
        old = pipe.arm() if pipe is not None else -1
        try:
            while True:
                if deadline is None:
                    wait_ms = -1
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    wait_ms = max(1, int(left * 1000 + 0.999))
                # A signal during poll(): Python runs its handler and polls again with the time
                # left (PEP 475); one just before poll() wrote to the signal pipe, and its
                # handler runs as this loop goes on; a handler that raises ends the wait with
                # its exception, and the channel stays usable (the reader's finally gives the
                # guard back).  The call to poller.wait, a Python function, is where the handler
                # of a signal that came before the arming runs.
                try:
                    got = poller.wait(wait_ms)
                except (ValueError, OSError, UsageError):
                    if channel.closed:
                        raise StateError("the event channel was closed while waiting") from None
                    raise
                if channel.closed:
                    raise StateError("the event channel was closed (by another thread) while waiting for an event")
                if got is READY:
                    return True
                if pipe is not None and got is SIGNALLED:
                    pipe.drain(old)
                    continue
                if got is GONE:
                    raise fd_closed_behind()
                if got is WOKEN:  # a wait ended by destroy(): the caller looks at it
                    self.waker.drain()
                    return True
        finally:
            self.reader = None
            if pipe is not None:
                pipe.disarm(old)

    def _new_poller(self, channel: Any, main: bool) -> Poller:
        """The poller of the main thread's waits (``main``: with the signal pipe, when the
        process has an fd for it) or of the others'."""
        try:
            poller = Poller(channel.fileno(), self.waker.fd, signal_pipe() if main else None)
        except (ValueError, OSError, UsageError):
            if channel.closed:
                raise StateError("the event channel was closed while waiting") from None
            raise
        if main:
            self._main = poller
        else:
            self._other = poller
        return poller


def timeout_seconds(timeout: Any) -> Optional[float]:
    """A wait's timeout checked: seconds >= 0 (any real number), or None / infinity for ever
    (None); UsageError naming what was given otherwise."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise UsageError("timeout must be a number of seconds (>= 0), or None to wait for ever; got %r"
                         % (timeout,))
    t = float(timeout)
    if math.isnan(t) or t < 0:
        raise UsageError("timeout must be a number of seconds >= 0, or None to wait for ever; got %r"
                         % (timeout,))
    if math.isinf(t):
        return None
    return timeout if isinstance(timeout, int) else t


# -- the signal pipe: one per process, made at its first main-thread wait


class SignalPipe:
    """The pipe a main-thread wait gives to ``signal.set_wakeup_fd`` while it waits, and polls."""

    __slots__ = ("r", "w", "pid", "_set")

    def __init__(self) -> None:
        import signal  # here: a program that never waits in its main thread does not pay for it

        self._set = signal.set_wakeup_fd
        self.r, self.w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self.pid = _process.PID

    def arm(self) -> int:
        """Have signals write to the pipe: the fd set before (-1: none), for :meth:`disarm`.
        The caller is the main thread."""
        return self._set(self.w, warn_on_full_buffer=False)

    def drain(self, old: int) -> None:
        """Read what signals wrote (their numbers) and hand it on to ``old``, the fd set before
        the wait (its owner, asyncio say, reads them to learn of the signals)."""
        try:
            data = os.read(self.r, 512)
        except OSError:
            return
        if old >= 0:
            try:
                os.write(old, data)
            except OSError:  # full, or closed by its owner: nothing more to do for it
                pass

    def disarm(self, old: int) -> None:
        """Give ``old`` back to ``signal.set_wakeup_fd`` (without warnings when it fills, as
        asyncio sets its own), and hand it what signals wrote meanwhile: a handler that raised
        ended the wait before the wait read them."""
        self._set(old, warn_on_full_buffer=False)
        self.drain(old)

    def close(self) -> None:
        os.close(self.r)
        os.close(self.w)


_pipe: Optional[SignalPipe] = None


def signal_pipe() -> Optional[SignalPipe]:
    """This process's signal pipe, made on first use (a forked child makes its own); None
    when the process has no fd left for it (its waits then go on without)."""
    global _pipe
    if _pipe is None or _pipe.pid != _process.PID:
        try:
            made = SignalPipe()
        except OSError:
            return None
        if _pipe is not None:
            _pipe.close()  # the parent's, inherited through fork(): the child's copies
        _pipe = made
    return _pipe


def _after_fork_in_child() -> None:
    """A fork() from another thread while the main thread waited: the child keeps no wakeup
    fd that writes into the parent's pipe."""
    if _pipe is not None:
        try:
            current = _pipe._set(-1, warn_on_full_buffer=False)
            if current != _pipe.w:
                _pipe._set(current, warn_on_full_buffer=False)
        except ValueError:  # pragma: no cover - not the main interpreter
            pass


os.register_at_fork(after_in_child=_after_fork_in_child)
