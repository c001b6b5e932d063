"""What a case is, and how the cases of a topic are declared.

A :class:`Case` is a name, what it checks, what it expects (:mod:`.expect`) and a function
of a :class:`Context` -- the shared :class:`~.raw.Raw` fd and the local address, if any --
that returns what it saw.  Each ``cases_*`` module holds its topic's cases in a
:class:`CaseList`, declared with its decorator::

    CASES = CaseList()

    @CASES.case("short_write", "a write shorter than rdma_ucm_cmd_hdr", errno.EINVAL)
    def _short_write(ctx: Context) -> int:
        ...

The function returns an :data:`~.expect.Outcome`, or ``(outcome, detail)`` where it has
more to say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Tuple, TypeVar, Union

from ..addr import Address
from .expect import Expect, Outcome
from .raw import Raw

__all__ = ["Case", "Context", "CaseList", "CaseResult"]

#: what a case's function returns: an outcome, or an outcome and a detail
CaseResult = Union[Outcome, Tuple[Outcome, str]]
CaseFn = TypeVar("CaseFn", bound=Callable[..., CaseResult])


@dataclass
class Context:
    """What every case runs with: the shared fd, and an IPv4 address on a netdev with an
    RDMA device (None when there is none)."""

    raw: Raw
    local_addr: Optional[Address]

    @property
    def local(self) -> Address:
        """The local address of the cases marked ``needs_local`` (the runner checks it exists)."""
        assert self.local_addr is not None
        return self.local_addr


@dataclass(frozen=True)
class Case:
    """One case: ``run(ctx)`` returns ``(outcome, detail)``; ``needs_local``: it runs only
    where there is a local address."""

    name: str
    what: str
    expect: Expect
    run: Callable[[Context], Tuple[Outcome, str]]
    needs_local: bool = False


class CaseList(List[Case]):
    """The cases of one topic, in the order they are declared."""

    def case(self, name: str, what: str, expect: Expect, needs_local: bool = False) -> Callable[[CaseFn], CaseFn]:
        """A decorator that adds its function as the case ``name``."""

        def add(fn: CaseFn) -> CaseFn:
            def run(ctx: Context) -> Tuple[Outcome, str]:
                out = fn(ctx)
                return out if isinstance(out, tuple) else (out, "")

            self.append(Case(name, what, expect, run, needs_local))
            return fn

        return add
