"""What a case expects, kernel version by kernel version, and how an outcome is named.

A case expects an errno (0: the kernel takes the command), a text (what the case saw
beyond one errno: ``"ok, peer REJECTED 28"``), or errno steps by kernel version where
kernels legitimately differ: ``[((0, 0), EINVAL), ((6, 17), ENOENT)]`` reads "EINVAL, and
ENOENT from 6.17 on".  :func:`expected_errno` picks the step of a version.
"""

from __future__ import annotations

import platform
import re
from typing import Optional, Sequence, Tuple, Union

from ..errors import errno_name

__all__ = ["Version", "Expect", "Outcome", "kernel_version", "expected_errno", "outcome_text"]

#: a kernel's ``(major, minor)``
Version = Tuple[int, int]
#: an errno, errno steps by kernel version, or a text
Expect = Union[int, str, Sequence[Tuple[Version, int]]]
#: what a case saw: an errno (0: taken) or a text
Outcome = Union[int, str]


def kernel_version(release: Optional[str] = None) -> Version:
    """``(major, minor)`` of ``release`` (the running kernel's by default); ``(0, 0)`` when
    the text does not start with one."""
    m = re.match(r"(\d+)\.(\d+)", release or platform.release())
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def expected_errno(expect: Expect, version: Version) -> Outcome:
    """What ``expect`` means on a kernel of ``version``: the last step at or below it."""
    if isinstance(expect, (int, str)):
        return expect
    value = 0
    for since, err in expect:
        if version >= since:
            value = err
    return value


def outcome_text(outcome: Outcome) -> str:
    """``"ok"`` for 0, an errno's name (``"EINVAL"``) for another number, a text as it is."""
    if isinstance(outcome, str):
        return outcome
    return "ok" if outcome == 0 else errno_name(outcome)
