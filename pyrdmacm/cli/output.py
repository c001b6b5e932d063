"""What every subcommand prints and returns: the exit codes and their table, JSON and text
for addresses and values, the one-line error on stderr.

The bottom of the package: it imports none of its siblings.
"""

from __future__ import annotations

import errno
import json
import sys
from typing import Any, Dict, List, Optional, Tuple

from ..addr.text import ip_text
from ..errors import error_object

#: the one error object: every subcommand's JSON says an error so
error_json = error_object

EXIT_OK, EXIT_EVENT, EXIT_KERNEL, EXIT_USAGE, EXIT_NODEV, EXIT_OUTPUT, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 5, 130

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
    (EXIT_OUTPUT, "the output could not be written (a full disk, an I/O error, an output encoding that cannot "
                  "hold a name; mesh: an --svg or --prometheus file): one line on stderr says why, the command "
                  "did the rest of its work"),
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


#: an address as ``ip`` and librdmacm users read it (a RoCE v2 GID of IPv4 in dotted form)
_ip_text = ip_text


#: values JSON takes as they are: the common case, answered before any other check (a
#: 1,000-cell mesh run prints 25,000 of them)
_PLAIN = frozenset({str, int, float, bool, type(None)})


def _jsonable(v: Any) -> Any:
    t = type(v)
    if t in _PLAIN:
        return v
    if t is dict:
        return {str(k): _jsonable(x) for k, x in v.items()}
    if t is list:
        return [_jsonable(x) for x in v]
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


#: the shape of the JSON that subcommands print: every document, and every line of a stream,
#: says which (a program reading it checks it; a change that breaks a reader bumps it)
JSON_SCHEMA = 1
#: how a document is laid out: the subcommands' --json and the global -p pretty-print it
#: (indented), the global -j alone makes it one line, as iproute2's -j and -p do
_LAYOUT: Dict[str, Any] = {"indent": 2}


def json_layout(compact: bool) -> None:
    """The documents' layout for this process: one line (``-j``) or indented."""
    _LAYOUT.clear()
    _LAYOUT.update({"separators": (",", ":")} if compact else {"indent": 2})


def _print_json(doc: Dict[str, Any], code: int) -> int:
    """Print one JSON document: ``schema`` first, the subcommand's fields, then ``exit``
    (the process's exit status, returned).  A list is put under its own key by the caller."""
    out = {"schema": JSON_SCHEMA}
    out.update(_jsonable(doc))
    out["exit"] = code
    json.dump(out, sys.stdout, sort_keys=False, **_LAYOUT)
    sys.stdout.write("\n")
    return code


def json_line(record: Dict[str, Any]) -> None:
    """Print one line of a JSON Lines stream (listen, ids --watch, a decoded trace): always one
    line, ``schema`` first; a stream's last line carries ``exit``."""
    out = {"schema": JSON_SCHEMA}
    out.update(_jsonable(record))
    sys.stdout.write(json.dumps(out, separators=(", ", ": ")) + "\n")


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
