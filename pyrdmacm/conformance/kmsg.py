"""The kernel log, read for the problems a case may have made the kernel report.

:class:`KernelLog` opens ``/dev/kmsg`` positioned at the end of the log, when this process
may read it (root, or ``kernel.dmesg_restrict = 0``), and :meth:`KernelLog.new_problems`
returns the problem lines logged since the last look.  Where the log is not readable the
check is absent, and says nothing: a case's errno and the fd's health are checked still.
"""

from __future__ import annotations

import errno
import os
import re
from typing import List, Optional

__all__ = ["KernelLog", "KMSG"]

KMSG = "/dev/kmsg"
#: the longest record /dev/kmsg hands out (the kernel's CONSOLE_EXT_LOG_MAX): a read must
#: have room for a whole record, or it fails with EINVAL
RECORD_MAX = 8192


class KernelLog:
    """New problem lines in the kernel log since the last look: ``BUG:``, ``WARNING:`` (lockdep's
    reports among them), KASAN and UBSAN reports, refcount_t complaints, list corruption,
    oopses, tasks blocked in the kernel (the hung-task watchdog).

    ``fd`` is the log's fd, or None when the log is not readable or has been closed.
    """

    BAD = re.compile(r"BUG:|kernel BUG|WARNING:|KASAN|UBSAN|general protection|Oops|refcount_t|"
                     r"list_(add|del) corruption|blocked for more than")

    def __init__(self, path: str = KMSG) -> None:
        self.fd: Optional[int] = None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except OSError:
            return
        try:
            os.lseek(fd, 0, os.SEEK_END)
        except OSError:
            os.close(fd)
            return
        self.fd = fd

    def new_problems(self) -> List[str]:
        """The problem lines logged since the last call (or since the log was opened)."""
        found = []
        while self.fd is not None:
            try:
                record = os.read(self.fd, RECORD_MAX).decode("utf-8", "replace")
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EPIPE:  # records overwritten before we read them: read on
                    continue
                break
            msg = record.split(";", 1)[-1].strip()
            if self.BAD.search(msg):
                found.append(msg)
        return found

    def close(self) -> None:
        fd, self.fd = self.fd, None
        if fd is not None:
            os.close(fd)
