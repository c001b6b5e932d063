"""Where the library fuzzer (:mod:`lib_model`) runs -- its tier: the fake fabric or this host's
rdma_cm -- and how a sequence becomes a runnable script: each rule the program calls is a
line, with what it picked (:class:`Pick`), made by :func:`recorded`."""

from __future__ import annotations

import errno
import functools
import os
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

from lib_sides import Broken


class _Pinned:
    """The data object of a rule called by another rule: the one value it picks."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Pick:
    """The data object of a replayed rule (:class:`Replay`): the indices it picked, in order."""

    def __init__(self, *indices: int) -> None:
        self.indices = list(indices)

    def take(self, options: Sequence[Any], label: str) -> int:
        if not self.indices:
            raise Broken("the replay asks for one more %s than the run picked: it went another way" % label)
        i = self.indices.pop(0)
        if i >= len(options):
            raise Broken("the replay has %d %s(s) where the run picked number %d: it went another way"
                         % (len(options), label, i))
        return i


_F = TypeVar("_F", bound=Callable[..., Any])


def recorded(fn: _F) -> _F:
    """A rule whose call, when the program makes it (not another rule), becomes a line of the
    sequence's script: its name, its arguments, and what it picked (:class:`Pick`)."""

    @functools.wraps(fn)
    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        top = self._depth == 0
        if top:
            self._picks = []
        self._depth += 1
        try:
            return fn(self, *args, **kwargs)
        except Broken as e:
            if not top or getattr(e, "scripted", False):
                raise
            broken = e
        finally:
            self._depth -= 1
            if top:
                words = ["%s=%r" % (k, v) for k, v in kwargs.items() if k != "data"]
                if "data" in kwargs:
                    words.append("data=Pick(%s)" % ", ".join(str(i) for i in self._picks))
                self.code.append("m.%s(%s)" % (fn.__name__, ", ".join(words)))
        raise self._scripted(broken) from None  # the line of the rule that broke it is written

    return call  # type: ignore[return-value]


class Tier:
    """Where the machine runs: its links (``make_link`` gives a new :class:`conn_behaviour.Link`),
    the cm_id states RDMA netlink lists for this process (``kernel_ids``; None on the fake),
    the expression that makes the same tier in a script (``text``), and a destination it
    refuses (``refused``)."""

    def __init__(self, make_link: Callable[[], Any], kernel_ids: Optional[Callable[[], List[str]]], text: str,
                 refused: Tuple[Any, int, Any]) -> None:
        self.make_link, self.kernel_ids, self.text = make_link, kernel_ids, text
        #: a destination whose RESOLVE_ADDR the tier refuses after binding the id, the errno,
        #: and a destination of its family that the id so bound resolves then
        self.refused = refused


#: the fake tier's destination with no route
_NO_ROUTE = "192.0.2.1"
#: the fake fabrics the fake tier made (each sequence its own): closed by :func:`close_fabrics`
_FABRICS: List[Any] = []


def fake_tier() -> Tier:
    """Both ends on the fake fabric's two hosts, a fabric a sequence."""
    from conn_behaviour import Link
    from pyrdmacm.testing import FakeFabric

    def make() -> Any:
        fab = FakeFabric(timewait_ms=50, dreq_latency_ms=5)
        _FABRICS.append(fab)
        hosts = fab.host("10.9.0.1"), fab.host("10.9.0.2")
        for h in hosts:
            h.net.no_route.add(_NO_ROUTE)
        return Link(hosts[0], hosts[1], "10.9.0.1", "10.9.0.2", 1.0)

    return Tier(make, None, "fake_tier()", (_NO_ROUTE, errno.ENETUNREACH, "10.9.0.1"))


def close_fabrics() -> None:
    while _FABRICS:
        _FABRICS.pop().close()


def kernel_tier(address: str = "10.0.2.15") -> Tier:
    """Both ends on this host's rdma_cm and ``address`` (the lab guest's own), RDMA netlink
    asked for what is left."""
    from conn_behaviour import Link
    from pyrdmacm.core.device import KernelDevice
    from ucma_view import netlink_states

    from pyrdmacm.addr import Address

    # on the lab's RoCE port: no port has a GID of this prefix (the kernel binds the id to the
    # wildcard GID first), and the address's own GID resolves; the lab keeps its default
    # route, so no IP destination lacks one
    return Tier(lambda: Link(KernelDevice, KernelDevice, address, address, 10.0),
                lambda: netlink_states(os.getpid()), "kernel_tier(%r)" % address,
                (Address.ib("2001:db8::1", port=7999), errno.ENODEV, Address.ib("::ffff:" + address, port=7999)))
