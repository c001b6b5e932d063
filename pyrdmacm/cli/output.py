"""What every subcommand prints and returns: the exit codes and their table, JSON and text
for addresses and values, the one-line error on stderr.

The bottom of the package: it imports none of its siblings.
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

EXIT_OK, EXIT_EVENT, EXIT_KERNEL, EXIT_USAGE, EXIT_NODEV, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

#: every subcommand's exit status, and what it means: the code returns these, --help and
#: docs/cli.md show this table (a test holds the document to it)
EXIT_CODES: Tuple[Tuple[int, str], ...] = (
    (EXIT_OK, "success: resolved, connected, stopped as asked, every conformance case as expected; "
              "route: the prediction is complete, the kernel would resolve"),
    (EXIT_EVENT, "a failure event (ADDR_ERROR, ROUTE_ERROR, REJECTED, UNREACHABLE ...: its status says why), "
                 "or no answer in time; conformance: a case was not as expected"),
    (EXIT_KERNEL, "the kernel refused a command (the errno of write()); route: the kernel would refuse; "
                  "--strict: the pre-check refused or warned, and nothing was sent"),
    (EXIT_USAGE, "bad input: an argument or flag that cannot be used (argparse's refusals too); nothing was sent"),
    (EXIT_NODEV, "no usable RDMA here: no rdma_cm device node (rdma_ucm not loaded, node not passed into the "
                 "container), no RDMA device, or none with a GID for the source (ADDR_ERROR status -19 ENODEV too)"),
    (EXIT_INTERRUPTED, "interrupted (SIGINT) before the end: ping prints its summary so far; ids are destroyed "
                       "(listen, ids --watch and a joined mcast, which run until stopped, exit 0)"),
)


_EXIT_CODES_TEXT: Dict[int, str] = {}


def exit_codes_text(width: int = 78) -> str:
    """The exit-code table as --help and docs/cli.md show it (wrapped once: every subcommand's
    parser carries it)."""
    text = _EXIT_CODES_TEXT.get(width)
    if text is None:
        import textwrap

        lines = ["exit status (every subcommand):"]
        for code, meaning in EXIT_CODES:
            lines += textwrap.wrap(meaning, width, initial_indent="  %-4d" % code, subsequent_indent=" " * 6)
        text = _EXIT_CODES_TEXT[width] = "\n".join(lines)
    return text


def _ip_text(v: Any) -> str:
    """An address as ``ip`` and librdmacm users read it: RoCE v2 GIDs of IPv4 in dotted form."""
    import ipaddress
    import socket

    if isinstance(v, ipaddress.IPv6Address) and not v.scope_id:
        return socket.inet_ntop(socket.AF_INET6, v.packed)  # ::ffff:10.0.2.15, not ::ffff:a00:20f
    return str(v)


def _jsonable(v: Any) -> Any:
    import dataclasses
    import enum
    import ipaddress

    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return {f.name: _jsonable(getattr(v, f.name)) for f in dataclasses.fields(v)}
    if isinstance(v, enum.Enum):
        return v.name
    if isinstance(v, (ipaddress.IPv4Address, ipaddress.IPv6Address)):
        return _ip_text(v)
    if isinstance(v, (ipaddress.IPv4Network, ipaddress.IPv6Network)):
        return str(v)
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, bytes):
        return v.hex()
    return v


def _print_json(obj: Any) -> None:
    json.dump(_jsonable(obj), sys.stdout, indent=2, sort_keys=False)
    sys.stdout.write("\n")


def error_json(e: BaseException, message: Optional[str] = None, **extra: Any) -> Dict[str, Any]:
    """The one error object of every subcommand's JSON: ``{errno, name, message}`` (``name``
    null when there is no errno), with ``extra`` first (``step``, ``refused`` ...)."""
    err = getattr(e, "errno", None)
    out: Dict[str, Any] = dict(extra)
    out.update(errno=err, name=_errno_name(err) if err else None, message=_text(e) if message is None else message)
    return out


def _errno_name(err: int) -> str:
    from ..errors import errno_name

    return errno_name(err)


def _err(msg: str) -> None:
    sys.stderr.write("pyrdmacm: %s\n" % msg)


def _clock() -> str:
    """The time of day as the lines of ``listen`` and ``mcast`` start: ``HH:MM:SS.mmm``."""
    import time

    now = time.time()
    return time.strftime("%H:%M:%S", time.localtime(now)) + ".%03d" % (int(now * 1000) % 1000)


def _text(e: BaseException) -> str:
    """An exception's message; an OSError's without Python's "[Errno N]" (ours name the errno)."""
    if isinstance(e, OSError) and isinstance(e.strerror, str) and e.strerror:
        return e.strerror
    return str(e)


def _name_lines(names: List[Any]) -> List[str]:
    return ["host name: %s" % n for n in names]


def _refused_exit(err: Optional[int]) -> int:
    """A command the kernel refused: 4 for ENODEV (no RDMA device for the address), else 2."""
    return EXIT_NODEV if err == errno.ENODEV else EXIT_KERNEL


def _event_exit(event: str, status: int) -> int:
    """A failure event's exit status: 4 when it says this host has no RDMA device for it, else 1."""
    return EXIT_NODEV if event == "ADDR_ERROR" and status == -errno.ENODEV else EXIT_EVENT
