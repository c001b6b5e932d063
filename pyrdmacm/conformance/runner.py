"""Running the cases against the kernel.

Theory of operation
-------------------
:func:`run` opens one shared fd (a :class:`~.raw.Raw`) and the kernel log, and runs the
cases of :data:`CASES` in order, each against that fd.  After each case the fd must still
create and destroy an id (a kernel that wedges the fd fails the case that wedged it), and
the kernel log must have reported no problem (:class:`~.kmsg.KernelLog`: ``BUG:``,
``WARNING:``, KASAN ...).  A case passes when it saw what it expects on this kernel's
version (:func:`~.expect.expected_errno`) and both hold.  A case that raises OSError
(a set-up step failed) observes ``"error"``.

The cases that need a local address on an RDMA netdev take ``local=``, or the first IPv4
address :func:`find_local_ipv4` finds (sysfs for the netdevs, then ``SIOCGIFADDR``); with
none they do not run.
"""

from __future__ import annotations

import fcntl
import socket
from typing import List, Optional, Sequence

from ..abi.codec import CODECS
from ..addr import parse_address
from ..devices import list_devices, rdma_netdevs
from .cases_addresses import CASES as ADDRESSES
from .cases_commands import CASES as COMMANDS
from .cases_connection import CASES as CONNECTION
from .cases_fds import CASES as FDS
from .cases_multicast import CASES as MULTICAST
from .cases_options import CASES as OPTIONS
from .cases_regressions import CASES as REGRESSIONS
from .expect import expected_errno, kernel_version, outcome_text
from .kmsg import KernelLog
from .raw import Raw, RawDevice
from .registry import Case, Context
from .report import NOT_RUN, Result

__all__ = ["CASES", "run", "find_local_ipv4"]

#: Every case, topic by topic, in the order a run takes them.
CASES: List[Case] = [*COMMANDS, *ADDRESSES, *OPTIONS, *FDS, *CONNECTION, *MULTICAST, *REGRESSIONS]

#: SIOCGIFADDR, and ``struct ifreq`` as it asks: the name (IFNAMSIZ bytes, NUL-terminated)
#: then the address, a ``sockaddr_in``
SIOCGIFADDR = 0x8915
IFNAMSIZ = 16
_SOCKADDR_IN = CODECS["sockaddr_in"]


def find_local_ipv4() -> Optional[str]:
    """An IPv4 address of a netdev that has an RDMA device (sysfs, then SIOCGIFADDR)."""
    netdevs = sorted(rdma_netdevs(devices=list_devices(use_netlink=False)))
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for name in netdevs:
            ifreq = name.encode()[:IFNAMSIZ - 1].ljust(IFNAMSIZ, b"\0") + bytes(_SOCKADDR_IN.size)
            try:
                answer = fcntl.ioctl(s.fileno(), SIOCGIFADDR, ifreq)
            except OSError:
                continue
            return socket.inet_ntoa(_SOCKADDR_IN.unpack_dict(answer, IFNAMSIZ)["sin_addr"])
    return None


def run(path: Optional[str] = None, local: Optional[str] = None, only: Sequence[str] = (),
        release: Optional[str] = None, device: Optional[RawDevice] = None) -> List[Result]:
    """Run the cases (or those named in ``only``) against the kernel; one :class:`Result`
    each.  ``path``: the device node (the default one when None); ``device``: a device that
    speaks the same bytes to run on instead (a fake); ``release``: the kernel release whose
    expectations apply (the running kernel's by default)."""
    version = kernel_version(release)
    local_text = local or find_local_ipv4()
    local_addr = parse_address(local_text) if local_text else None
    ctx = Context(Raw(path, device=device), local_addr)
    log = KernelLog()
    results = []
    try:
        for c in CASES:
            if only and c.name not in only:
                continue
            want = expected_errno(c.expect, version)
            if c.needs_local and ctx.local_addr is None:
                results.append(Result(c.name, c.what, outcome_text(want), NOT_RUN, False,
                                      "needs an IPv4 address on a netdev with an RDMA device (pass local=)"))
                continue
            try:
                got, detail = c.run(ctx)
            except OSError as e:
                got, detail = -1, "set-up failed: %s" % e
            problems = log.new_problems()
            dead = ctx.raw.alive()
            observed = got if isinstance(got, str) else outcome_text(got) if got >= 0 else "error"
            passed = got == want and not dead and not problems
            notes = [d for d in (detail, dead, "; ".join(problems[:3])) if d]
            results.append(Result(c.name, c.what, outcome_text(want), observed, passed, "; ".join(notes)))
    finally:
        log.close()
        ctx.raw.close()
    return results
