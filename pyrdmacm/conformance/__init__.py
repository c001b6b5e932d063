"""The kernel's own rdma_cm contract, checked against the running kernel.

Theory of operation
-------------------
Each case writes raw commands -- built with the ABI layer's codecs, never through
:class:`~pyrdmacm.core.cmid.CmId`, whose checks would refuse most of them first -- to
``/dev/infiniband/rdma_cm`` and compares the errno the kernel answers with the documented
one: malformed writes, invalid commands, short reply buffers, unknown ids and ids of
another fd, wrong-state commands, reserved fields set, GET_OPTION's ENOSYS, credentials,
the connection manager's answers; and regressions of the ucma bugs that syzbot found, where
the contract is "no crash, and the fd keeps working".  Where kernels legitimately differ,
the expectation is data: errno steps by kernel version.

The modules, each by what it holds:

* :mod:`.raw` -- :class:`Raw`, the raw command writer (the fd is
  :class:`~pyrdmacm.core.device.KernelDevice`'s);
* :mod:`.kmsg` -- :class:`KernelLog`, the kernel log's problem lines;
* :mod:`.expect` -- what a case expects by kernel version, how an outcome is named;
* :mod:`.registry` -- :class:`Case`, its :class:`Context`, the cases' declaration;
* :mod:`.steps` -- what the cases do to get ids where they need them;
* ``cases_*`` -- the cases, by topic: commands, addresses, options, fds, connection,
  multicast, regressions;
* :mod:`.bugs` -- :data:`KNOWN_BUGS`, the kernel bugs the suite found, as data;
* :mod:`.runner` -- :data:`CASES` in order, and :func:`run`;
* :mod:`.report` -- :class:`Result` rows and :func:`ktap`.

``pyrdmacm conformance`` prints :func:`run`'s rows; :func:`pyrdmacm.testing.run_conformance`
returns them.
"""

from __future__ import annotations

from .bugs import KNOWN_BUGS, KernelBug, known_bug
from .expect import expected_errno, kernel_version
from .kmsg import KernelLog
from .raw import Raw
from .registry import Case
from .report import Result, ktap
from .runner import CASES, find_local_ipv4, run

__all__ = ["Result", "Case", "CASES", "run", "ktap", "kernel_version", "expected_errno", "find_local_ipv4",
           "KernelBug", "KNOWN_BUGS", "known_bug", "Raw", "KernelLog"]
