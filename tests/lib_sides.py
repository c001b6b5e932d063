"""The library fuzzer's program side (:mod:`lib_model`): a channel and how it is read -- by the
caller, by a reader thread, or by an asyncio task on a loop of its own -- and what a broken
promise of the docs is."""

from __future__ import annotations

import os
import queue
import threading
import time
from typing import Any, List, Optional

from pyrdmacm.errors import StateError


class Broken(AssertionError):
    """The library broke a promise of its docs."""


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


#: how a channel is read: by the caller (get_event), by a reader thread (get_event in a loop), or
#: by an asyncio task (AsyncChannel.get_event) on a loop in a thread of its own
READERS = ("caller", "thread", "asyncio")
_READ_BY = {"caller": "read by the caller", "thread": "read by a thread", "asyncio": "read by an asyncio task"}


class Side:
    """One channel and how it is read (:data:`READERS`); a reader's events go into a queue."""

    def __init__(self, machine: Any, name: str, reader: str) -> None:
        self.m, self.name, self.how = machine, name, reader
        self.ch = machine.link.server() if name == "server" else machine.link.client()
        self.q: "queue.Queue[Any]" = queue.Queue()
        self.reader: Optional[threading.Thread] = None
        self.reader_error: List[BaseException] = []
        #: not the caller: the events come through the queue (the caller checks no state after
        #: them: the reader's id moves as the reader reads)
        self.threaded = reader != "caller"
        self._ready = threading.Event()
        if self.threaded:
            loop = self._read_loop if reader == "thread" else self._aio_loop
            self.reader = threading.Thread(target=loop, name="lib-model-%s" % name, daemon=True)
            self.reader.start()
            if not self._ready.wait(5.0):  # the loop's own fds are open before the machine counts fds
                raise Broken("the %s reader (%s) did not start within 5 s" % (name, reader))

    def _read_loop(self) -> None:
        ch = self.ch
        self._ready.set()
        while not ch.closed:
            try:
                ev = ch.get_event(0.5)
            except StateError:  # closed under us: the wait ends, as documented
                return
            except BaseException as e:  # noqa: BLE001 - reported by the machine
                self.reader_error.append(e)
                return
            if ev is not None:
                self.q.put(ev)

    def _aio_loop(self) -> None:
        """asyncio.run of a task that hands on what AsyncChannel.get_event gives, until the
        channel's close() (from the caller's thread) ends its wait with StateError."""
        import asyncio

        from pyrdmacm.aio import AsyncChannel

        async def read() -> None:
            ach = AsyncChannel(self.ch)
            self._ready.set()
            while True:
                try:
                    ev = await ach.get_event()
                except StateError:
                    return
                self.q.put(ev)

        try:
            asyncio.run(read())
        except BaseException as e:  # noqa: BLE001 - reported by the machine
            self.reader_error.append(e)

    def next_event(self, timeout: float) -> Any:
        """The next event handed to the program on this side (None: none within ``timeout``)."""
        if self.threaded:
            try:
                return self.q.get(timeout=timeout)
            except queue.Empty:
                return None
        return self.ch.get_event(timeout)

    def close(self) -> float:
        """Close the channel: seconds until its reader (if any) has returned."""
        started = time.monotonic()
        self.ch.close()
        if self.reader is not None:
            self.reader.join(5.0)
            if self.reader.is_alive():
                raise Broken("%s channel closed: its reader (%s) still waits after 5 s" % (self.name, self.how))
        return time.monotonic() - started
