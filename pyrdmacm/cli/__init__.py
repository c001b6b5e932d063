"""``pyrdmacm``: the RDMA connection manager from the command line: resolve, connect, listen, check a fabric.

Subcommands (``pyrdmacm COMMAND --help`` for each)::

    pyrdmacm resolve DST [--src SRC] [--timeout MS] [--route] [--ps tcp|udp|ipoib|ib] [--json]
    pyrdmacm route DST [--src SRC] [--json]          prediction only; needs no RDMA at all
    pyrdmacm devices [--json]                        devices, ports, GID tables, netdevs
    pyrdmacm probe [--json]                          device node, ABI, commands, netns mode
    pyrdmacm decode HEX|STRACE-LINE|TRACE-FILE [--reply KIND] [--brief] [--json]
                                                     name the fields of writes (a trace's to rdma_cm) or a reply
    pyrdmacm conformance [--json] [--local ADDR] [--case NAME]...
                                                     check the running kernel's rdma_cm contract
    pyrdmacm ping DST[:PORT] [--src SRC] [--ps tcp|udp] [--count N] [--private-data HEX]
                  [--timeout MS] [--timewait] [--json]
                                                     connect N times, time each step, show the peer
    pyrdmacm listen [ADDR:]PORT [--ps tcp|udp] [--count N] [--reject] [--private-data HEX]
                    [--disconnect-after MS] [--json]
                                                     show each request and its events; accept or reject
    pyrdmacm mcast GROUP [--src SRC] [--send-only] [--count N] [--timeout MS] [--ps udp|ipoib] [--json]
                                                     join as mckey does, show the group's address handle,
                                                     follow its events, leave

``pyrdmacm --netns NAME COMMAND ...`` runs any of them in that network namespace
(``ip netns exec NAME``: its routes, netdevs and sysfs).

The exit status is the same for every subcommand (``EXIT_CODES``, shown by
``--help`` and docs/cli.md): 0 success, 1 a failure event, 2 the kernel
refused (or would refuse, or ``--strict`` refused), 3 bad input, 4 no usable
RDMA here, 5 the output could not be written, 130 interrupted.

Addresses are written as the library takes them (``10.0.0.2``,
``10.0.0.2:7471``, ``fe80::1%eth0``, ``[fe80::1%eth0]:7471``, ``gid:...``) or as
host names, looked up as rping does (getaddrinfo, its first answer; the one
taken is shown), ``listen``'s included; a port may be a service name of the services
database (``127.0.0.1:ssh``, for the port space's protocol); ``-n``/``--numeric`` looks
up no names.  The address parsed here is the one the pre-check and the library get.

``ping`` makes the connection a client would, without a QP: RESOLVE_ADDR, RESOLVE_ROUTE,
CONNECT (a QP number allocated unique in the process; the peer's data would go there),
on CONNECT_RESPONSE the RTU (ESTABLISH), then DISCONNECT and, on DISCONNECTED, DESTROY
(``--timewait``: after TIMEWAIT_EXIT); with ``--ps udp`` a SIDR exchange, ESTABLISHED
with the peer's QP number, qkey and address handle, and no disconnect (UD has none).
Its port defaults to 7471, the port of librdmacm's examples (ucmatose, cmtime); rping
and udaddy use 7174.  ``listen`` binds (address 0.0.0.0 by default), listens, and for
each CONNECT_REQUEST prints who asked, then accepts (``--reject``: rejects) it and
prints what follows (ESTABLISHED, DISCONNECTED, TIMEWAIT_EXIT); its ``--json`` is one
object per line, flushed at once, for scripts that follow it.  ``mcast`` does mckey's
steps without a QP (bind, resolve the group, join, MULTICAST_JOIN's address handle),
then shows the group's events until ``--count`` of them or a signal, and leaves.
Received private data is shown whole: the kernel gives the message's field (REQ 56,
REP 196, REJ 148, SIDR REQ 180, SIDR REP 136 bytes), the sender's data padded with
zeros.

``resolve`` shows a progress line on stderr while it waits longer than a
second for an event, when stderr is a terminal (or always with ``--progress``).

The package, by job: ``output`` (exit codes, JSON and text, the error line), ``inputs``
(command-line values, checked), ``route`` (the prediction), ``resolve``, ``diag``
(devices, probe, decode, conformance), ``conn`` (what ping, listen and mcast share),
``ping``, ``listen``, ``mcast``; here, the parser and the dispatch, which imports a
subcommand's module only when it runs.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from typing import Any, Callable, List, Optional, Sequence

from .inputs import DEFAULT_PORT
from .output import (EXIT_CODES, EXIT_EVENT, EXIT_INTERRUPTED, EXIT_KERNEL, EXIT_NODEV, EXIT_OK, EXIT_OUTPUT,
                     EXIT_USAGE, _err, _refused_exit, _text, exit_codes_text)

__all__ = ["EXAMPLES", "EXIT_CODES", "EXIT_EVENT", "EXIT_INTERRUPTED", "EXIT_KERNEL", "EXIT_NODEV", "EXIT_OK",
           "EXIT_OUTPUT", "EXIT_USAGE", "build_parser", "exit_codes_text", "main"]


def _command(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The subcommand ``name`` of this package's ``module``, imported when it runs: each
    subcommand loads its own module (and, inside its functions, what it needs) and no other."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        func: Callable[[argparse.Namespace], int] = getattr(importlib.import_module("." + module, __name__), name)
        return func(args)

    return run


class _Parser(argparse.ArgumentParser):
    """argparse with its refusals (an unknown option, a missing argument, a bad choice) exiting
    with EXIT_USAGE, as every other refusal of bad input does (argparse's own 2 would say "the
    kernel refused").  ``pyrdmacm --help`` ends with the exit-code table, each subcommand's
    --help with where to find it (the table once); a subcommand's --help starts with what it
    does (its one-line help)."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("epilog", _SUB_EPILOG if " " in kw.get("prog", "")
                      else _examples_text() + "\n\n" + exit_codes_text())
        kw.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        kw.setdefault("allow_abbrev", False)  # --js must not mean --json: new options would make it ambiguous
        super().__init__(*a, **kw)

    def error(self, message: str) -> Any:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, "%s: error: %s\n" % (self.prog, message))


#: what the command line is for, shown by ``pyrdmacm --help`` and the man page's EXAMPLES
#: (tests/test_manpages.py parses each): the command, and what it does
EXAMPLES = (
    ("pyrdmacm route 10.0.0.2", "where a resolution of 10.0.0.2 would land, and why (no RDMA device needed)"),
    ("pyrdmacm resolve 10.0.0.2 --route", "resolve the address and the route: the device, port, GIDs, path record"),
    ("pyrdmacm ping 10.0.0.2:7471 --count 3", "connect three times as a client would, timing each step"),
    ("pyrdmacm listen 7471", "listen as rping -s does; show each request and what follows"),
    ("pyrdmacm mesh --hosts nodes.txt --json > mesh-$(hostname).json",
     "the fabric check: every local rail to every host of nodes.txt, saved"),
    ("pyrdmacm mesh --merge mesh-*.json --svg fabric.svg", "every node's run as one matrix, and its picture"),
    ("pyrdmacm ids --watch", "the kernel's rdma_cm ids on this host as they come and go"),
    ("strace -f -xx -s 4096 -e trace=write rping -c -a 10.0.0.2 2>&1 | pyrdmacm decode --brief",
     "name the fields of every command librdmacm writes"),
)


def _examples_text() -> str:
    return "examples:\n" + "\n".join("  %s\n      %s" % (cmd, what) for cmd, what in EXAMPLES)


#: the end of each subcommand's --help: the exit table is the same for all, shown once
_SUB_EPILOG = ("exit status: the same for every subcommand (0 success, 1 a failure event, 3 bad input\n"
               "...): `pyrdmacm --help` shows the table, docs/cli.md too")


def _subcommand(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A subcommand's parser: its one-line ``help`` in pyrdmacm's list and, as a sentence, at
    the top of its own --help."""
    import textwrap

    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=textwrap.fill(help[:1].upper() + help[1:] + ".", 78))
    return parser


#: what shtab completes a file argument with (its FILE), set on the argument so that the
#: completions offer files there; shtab itself is not needed to build the parser
_FILE_COMPLETION = {"bash": "_shtab_compgen_files", "zsh": "_files"}


def _files(action: argparse.Action) -> argparse.Action:
    """Mark ``action`` as taking file names (the completions offer files)."""
    setattr(action, "complete", _FILE_COMPLETION)
    return action


class _PrintCompletion(argparse.Action):
    """``--print-completion bash|zsh``: the shell's completion script, made from this parser
    by shtab (shtab's own convention, for pip users; a distribution's package ships the
    scripts tools/manpages makes)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: Optional[str] = None) -> None:
        try:
            import shtab
        except ImportError:
            parser.exit(EXIT_USAGE, "pyrdmacm: --print-completion makes the script with shtab, which is not "
                                    "installed here: pip install shtab (or 'pyrdmacm[completion]')\n")
        sys.stdout.write(shtab.complete(parser, shell=values))
        parser.exit(EXIT_OK)


def _numeric_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--numeric", action="store_true",
                   help="look up no host or service names: addresses and port numbers only (as `ping -n` and "
                        "`ss -n`; ip's -n is another thing: a netns)")


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    p = _Parser(prog="pyrdmacm", description=__doc__.split("\n\n")[0].replace("``", ""))
    p.add_argument("--version", action="version", version="pyrdmacm %s" % __version__)
    p.add_argument("--print-completion", action=_PrintCompletion, choices=["bash", "zsh"], metavar="{bash,zsh}",
                   help="print the shell's completion script (needs shtab: pip install shtab) and exit")
    p.add_argument("-j", "--json", dest="json_compact", action="store_true",
                   help="JSON output for any subcommand, one line a document (as `ip -j`)")
    p.add_argument("-p", "--pretty", dest="json_pretty", action="store_true",
                   help="JSON output for any subcommand, indented (as `ip -j -p`; a subcommand's own --json "
                        "is indented too); streams stay one object a line")
    p.add_argument("--netns", metavar="NAME", help="run the subcommand in the network namespace NAME, as `ip netns "
                                                   "exec NAME` does (its routes, netdevs and sysfs; needs root)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    dst_help = ("10.0.0.2, 10.0.0.2:7471, fe80::1%%eth0, [fec0::2]:7471, gid:fe80::2:c903:0:1, or a host name "
                "(looked up as rping does: getaddrinfo's first answer)")

    r = _subcommand(sub, "resolve", "resolve DST as rdma_resolve_addr does; show prediction and result")
    r.add_argument("dst", metavar="DST", help=dst_help)
    r.add_argument("--src", help="source address to bind (default: the routing tables choose)")
    r.add_argument("--timeout", default="2000", metavar="MS",
                   help="the resolutions' timeout in ms, 1..4294967295 (default 2000)")
    r.add_argument("--route", action="store_true", help="also resolve the route and show the path record")
    r.add_argument("--ps", default="tcp", choices=["tcp", "udp", "ipoib", "ib"], help="port space (default tcp)")
    r.add_argument("--json", action="store_true", help="JSON output for scripts")
    r.add_argument("--strict", action="store_true", help="pre-check warnings become errors (nothing is sent)")
    r.add_argument("--no-precheck", action="store_true", help="ask the kernel only")
    r.add_argument("--neighbour-first", action="store_true",
                   help="resolve the next hop (ARP/ND) before asking the kernel, when the pre-check says it "
                        "needs it: a cold resolve then need not wait for its timeout")
    r.add_argument("--progress", action="store_true",
                   help="show a progress line on stderr during long waits even when it is not a terminal")
    _numeric_flag(r)
    r.set_defaults(func=_command("resolve", "cmd_resolve"))

    rt = _subcommand(sub, "route", "predict where DST will land (routing tables, RDMA devices); "
                                      "needs no RDMA device: says what is missing")
    rt.add_argument("dst", metavar="DST", help=dst_help)
    rt.add_argument("--src", help="the source address resolve would bind")
    rt.add_argument("--json", action="store_true", help="JSON output for scripts")
    rt.add_argument("--strict", action="store_true", help="warnings become errors (exit 2)")
    _numeric_flag(rt)
    rt.set_defaults(func=_command("route", "cmd_route"))

    d = _subcommand(sub, "devices", "RDMA devices, ports, GID tables and netdevs (no libibverbs)")
    d.add_argument("--json", action="store_true", help="JSON output for scripts")
    d.set_defaults(func=_command("diag", "cmd_devices"))

    pr = _subcommand(sub, "probe", "the device node, ABI version, netns mode and kernel version")
    pr.add_argument("--json", action="store_true", help="JSON output for scripts")
    pr.set_defaults(func=_command("diag", "cmd_probe"))

    ids = _subcommand(sub, "ids", "the kernel's rdma_cm ids on this host (RDMA netlink), as `rdma resource show "
                                     "cm_id` shows them; --watch shows what changes")
    ids.add_argument("--json", action="store_true", help="JSON output for scripts (with --watch: one object a line)")
    ids.add_argument("--watch", nargs="?", const="1", metavar="SEC",
                     help="look again every SEC seconds (default 1) and show each id that appears (+), goes (-) or "
                          "changes (~), until Ctrl-C")
    ids.add_argument("--pid", type=int, metavar="PID", help="only the ids of this process")
    ids.add_argument("--dev", metavar="DEV", help="only the ids on this RDMA device (rxe0, mlx5_0 ...)")
    ids.add_argument("--state", metavar="STATE", help="only the ids in this state (LISTEN, CONNECT, ADDR_RESOLVED ...)")
    ids.add_argument("--ps", choices=["tcp", "udp", "ipoib", "ib"], help="only the ids of this port space")
    for side, what in (("src", "source"), ("dst", "destination")):
        ids.add_argument("--%s-addr" % side, metavar="ADDR", help="only the ids with this %s address (as rdma's "
                                                                 "%s-addr filter)" % (what, side))
        ids.add_argument("--%s-port" % side, metavar="PORT", help="only the ids with this %s port (as rdma's "
                                                                 "%s-port filter)" % (what, side))
    ids.set_defaults(func=_command("ids", "cmd_ids"))

    dc = _subcommand(sub, "decode", "decode what a program wrote to rdma_cm: a command write, a reply buffer, "
                     "or every write of an strace trace")
    dc.add_argument("data", nargs="*", metavar="HEX|STRACE-LINE|TRACE-FILE",
                    help="hex bytes, an strace write(...) line, or a trace: a file named here, or stdin (default). "
                         "A trace's writes to rdma_cm are decoded, each with its pid, fd and result (follow the fds: "
                         "strace -f -y -xx -s 4096 -e trace=openat,write,close,dup,clone); other files' are skipped")
    dc.add_argument("--brief", action="store_true", help="one line per command: its name and fields, pointers in hex")
    dc.add_argument("--json", action="store_true", help="JSON output (the default: one document, or for a trace one "
                                                        "object a line)")
    dc.add_argument("--reply", metavar="KIND", help="decode a reply: CREATE_ID, GET_EVENT, QUERY:ADDR, QUERY:PATH, ...")
    dc.set_defaults(func=_command("diag", "cmd_decode"))

    cf = _subcommand(sub, "conformance", "check the running kernel's rdma_cm contract (bad input answered "
                                            "with the documented errno, known bugs fixed)")
    cf.add_argument("--json", action="store_true", help="JSON output for scripts")
    cf.add_argument("--local", metavar="ADDR",
                    help="an IPv4 address of an RDMA netdev, for the cases that resolve (default: found in sysfs)")
    cf.add_argument("--case", action="append", default=[], metavar="NAME", help="run only this case (repeatable)")
    cf.add_argument("--list", action="store_true", help="list the cases (name and what each checks) and exit")
    cf.add_argument("--ktap", action="store_true", help="KTAP version 1 output, as kselftest harnesses read it")
    cf.set_defaults(func=_command("diag", "cmd_conformance"))

    pg = _subcommand(sub, "ping", "connect to DST as a client would (resolve, connect, RTU, disconnect), "
                                     "N times; time each step, show what the peer answered")
    pg.add_argument("dst", metavar="DST[:PORT]", help="10.0.0.2, 10.0.0.2:7471, [fe80::1%%eth0]:7471, peer:7471 "
                                                      "(port default " + str(DEFAULT_PORT)
                                                      + ", librdmacm's examples'; rping and udaddy use 7174)")
    pg.add_argument("--src", help="source address to bind (default: the routing tables choose)")
    pg.add_argument("--ps", default="tcp", choices=["tcp", "udp"],
                    help="port space: tcp (RC, the default) or udp (UD: SIDR)")
    pg.add_argument("--count", metavar="N", help="connections to make, one after the other (default 1)")
    pg.add_argument("--private-data", metavar="HEX", help="private data for the REQ (at most 56 bytes; "
                                                          "SIDR REQ: 180)")
    pg.add_argument("--timeout", default="2000", metavar="MS",
                    help="the resolutions' timeout in ms, and how long each later step waits (default 2000)")
    pg.add_argument("--timewait", action="store_true",
                    help="also wait for TIMEWAIT_EXIT after DISCONNECTED (about 2 s on Soft-RoCE) and time it")
    pg.add_argument("--json", action="store_true", help="one JSON object: the attempts and a summary")
    _numeric_flag(pg)
    pg.set_defaults(func=_command("ping", "cmd_ping"))

    ls = _subcommand(sub, "listen", "listen on [ADDR:]PORT; show each request and what follows, "
                                       "accept (or --reject) it")
    ls.add_argument("addr", metavar="[ADDR:]PORT", help="7471, 10.0.0.1:7471, [::]:7471, localhost:7471 (default "
                                                      "address 0.0.0.0; names and service names looked up)")
    ls.add_argument("--ps", default="tcp", choices=["tcp", "udp"],
                    help="port space: tcp (RC, the default) or udp (UD: SIDR)")
    ls.add_argument("--count", metavar="N", help="stop after N connections have ended (default: run until "
                                                 "SIGINT or SIGTERM)")
    ls.add_argument("--reject", action="store_true", help="reject each request (REJ reason 28) instead of "
                                                          "accepting it")
    ls.add_argument("--private-data", metavar="HEX", help="private data for the REP (at most 196 bytes; "
                                                          "SIDR REP: 136) or, with --reject, the REJ (148)")
    ls.add_argument("--disconnect-after", metavar="MS", help="disconnect each connection MS milliseconds after "
                                                             "ESTABLISHED (0: at once), as cmatose's server does; "
                                                             "by default the peer disconnects")
    ls.add_argument("--identify", action="store_true", help="answer each request with private data naming this "
                                                           "host, the rail (netdev) and the address it came to, "
                                                           "as `pyrdmacm mesh` reads it")
    ls.add_argument("--json", action="store_true", help="one JSON object per event, one per line, as they come")
    _numeric_flag(ls)
    ls.set_defaults(func=_command("listen", "cmd_listen"))

    ms = _subcommand(sub, "mesh", "the fabric check: from every local rail (RDMA netdev), does the CM reach "
                                     "each target? a matrix, with the reason of every failure")
    ms.add_argument("targets", nargs="*", metavar="TARGET", help="addresses or host names to check (a name: its "
                                                                 "first address, or all with --all-addresses)")
    _files(ms.add_argument("--hosts", metavar="FILE", help="more targets, from FILE: whitespace-separated, # comments"))
    ms.add_argument("--rails", metavar="NETDEVS", help="the rails to check from: netdev names separated by commas, "
                                                       "or all (default: every netdev with an RDMA device)")
    ms.add_argument("--port", metavar="P", help="the port to connect to (default %d: a listener there, e.g. "
                                                "`pyrdmacm listen --identify`, accepts; nobody: REJ reason 8, "
                                                "which proves the CM path too)" % DEFAULT_PORT)
    ms.add_argument("--timeout", default="2000", metavar="MS", help="each step's timeout in ms (default 2000)")
    ms.add_argument("--concurrency", default="64", metavar="N", help="cells in flight at most (default 64)")
    ms.add_argument("--same-subnet", action="store_true", help="check each rail against the targets on its own "
                                                              "subnets only (a rail-optimized fabric: rail k "
                                                              "reaches rail k of the other nodes)")
    ms.add_argument("--all-addresses", action="store_true", help="check every address a host name has")
    ms.add_argument("-n", "--numeric", action="store_true", help="look up no host names: targets are addresses")
    ms.add_argument("--json", action="store_true", help="JSON Lines: a line per cell as it ends, then the summary "
                                                       "(what --merge reads)")
    _files(ms.add_argument("--svg", metavar="FILE", help="also draw the matrix as an SVG picture in FILE"))
    _files(ms.add_argument("--prometheus", metavar="FILE", help="also write the matrix as a Prometheus text file "
                                                         "(node_exporter's textfile collector)"))
    _files(ms.add_argument("--merge", nargs="+", metavar="FILE", help="join saved --json runs (one per host) into one "
                                                               "matrix instead of checking"))
    ms.add_argument("--brief", action="store_true", help="the table alone, without each failure's explanation")
    ms.add_argument("--verdicts", action="store_true", help="a line per host instead of the table: healthy, or what "
                                                           "is wrong and the likely culprit (exit 1 when a host is "
                                                           "not healthy)")
    ms.add_argument("--settings", action="store_true", help="a line per host instead of the table: NCCL's and "
                                                           "UCX's settings (NCCL_IB_HCA, NCCL_IB_GID_INDEX, "
                                                           "NCCL_SOCKET_IFNAME, UCX_NET_DEVICES) for the rails "
                                                           "that work")
    ms.add_argument("--inventory", action="store_true", help="print this node's rails as a line of targets (each "
                                                            "rail's first address), to gather into a fleet's "
                                                            "--hosts file; check nothing")
    ms.add_argument("--sample", metavar="K", help="check at most K targets per rail, drawn at random each round "
                                                  "(fleets where all-to-all is too many REQs at once)")
    ms.add_argument("--jitter", metavar="MS", help="wait a random 0..MS ms before each round, so that nodes started "
                                                   "together do not send their REQs together")
    ms.add_argument("--every", metavar="SECONDS", help="check again every SECONDS until stopped, each round's "
                                                       "outputs written again (--prometheus: by rename)")
    ms.set_defaults(func=_command("mesh", "cmd_mesh"))

    mc = _subcommand(sub, "mcast", "join a multicast group as mckey does, without a QP: show the group's address "
                                      "handle, follow its events, leave")
    mc.add_argument("group", metavar="GROUP", help="an IP multicast group: 239.1.1.1, ff0e::1 (RoCE v2: IPv4 only), "
                                                  "or a host name that is one")
    mc.add_argument("--src", help="the source address to bind first, as mckey -b (default: the routing tables "
                                  "choose)")
    mc.add_argument("--send-only", action="store_true", help="join as a send-only full member (mckey -o): no "
                                                             "IGMP join on RoCE")
    mc.add_argument("--count", metavar="N", help="after the join, wait for N events (MULTICAST_ERROR, ADDR_CHANGE "
                                                 "...), then leave; 0: leave at once (default: until SIGINT or "
                                                 "SIGTERM)")
    mc.add_argument("--timeout", default="2000", metavar="MS",
                    help="the address resolution's timeout in ms (mckey's 2000, the default), and how long the "
                         "join waits for its event")
    mc.add_argument("--ps", default="udp", choices=["udp", "ipoib"],
                    help="port space, as mckey -p: udp (RDMA_PS_UDP, the default) or ipoib")
    mc.add_argument("--json", action="store_true", help="one JSON object per step and event, one per line, as "
                                                        "they come")
    _numeric_flag(mc)
    mc.set_defaults(func=_command("mcast", "cmd_mcast"))
    setattr(p, "_subcommands", {name: sp for name, sp in sub.choices.items()})
    return p


class _PipeSafe:
    """stdout for a subcommand: when the reader of a pipe has gone (``| head -1``), the rest
    of the output goes to /dev/null and the subcommand still ends with its own exit status
    (not 0, not a BrokenPipeError traceback, not Python's "Exception ignored" at exit).
    When the output cannot be written (ENOSPC, EIO, an encoding that cannot hold the text),
    one line on stderr says so at once, the rest goes to /dev/null, the subcommand does the
    rest of its work, and ``failed`` makes its exit status EXIT_OUTPUT."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.failed = False

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))
        except BrokenPipeError:
            self._gone()
        except UnicodeEncodeError as e:
            self._fail("its encoding, %s, cannot hold %s: set PYTHONIOENCODING=utf-8 (or use a UTF-8 locale)"
                       % (e.encoding, ascii(e.object[e.start:e.end])))
        except OSError as e:
            self._fail(_oserror_text(e))
        return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._gone()
        except OSError as e:
            self._fail(_oserror_text(e))

    def _fail(self, why: str) -> None:
        if not self.failed:
            self.failed = True
            _err("cannot write the output: %s" % why)
        self._gone()

    def _gone(self) -> None:
        null = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(null, self._stream.fileno())
        finally:
            os.close(null)
        try:  # what is still buffered goes there too (its flush then succeeds)
            self._stream.flush()
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _oserror_text(e: OSError) -> str:
    """"No space left on device (ENOSPC)": the message and the errno's name."""
    name = errno.errorcode.get(e.errno or 0)
    return _text(e) + (" (%s)" % name if name else "")


def _in_netns(name: str, argv: List[str]) -> int:
    """The same command, run in the network namespace ``name`` by ``ip netns exec``, which
    also mounts that namespace's sysfs (the netdevs and GID tables the pre-check reads):
    this process becomes it, and its exit status is the command's.  Returns only when it
    cannot (exit 3, saying why)."""
    import shutil

    if not name or "/" in name or name in (".", ".."):
        _err("--netns takes the name of a network namespace (as `ip netns list` shows it), got %r" % name)
        return EXIT_USAGE
    if not os.path.exists(os.path.join("/run/netns", name)):
        _err("no network namespace %r here: `ip netns list` shows them (a container's: `ip netns attach NAME PID`)"
             % name)
        return EXIT_USAGE
    if os.geteuid() != 0:
        _err("--netns needs root (entering a network namespace and mounting its sysfs): run it with sudo")
        return EXIT_USAGE
    ip = shutil.which("ip")
    if ip is None:
        _err("--netns needs iproute2's `ip` (it runs `ip netns exec`), which is not on PATH")
        return EXIT_USAGE
    rest: List[str] = []
    words = iter(argv)
    for word in words:  # the command again, without its (first) --netns
        if word == "--netns":
            next(words, None)
            rest.extend(words)
        elif word.startswith("--netns="):
            rest.extend(words)
        else:
            rest.append(word)
    sys.stdout.flush()
    try:
        os.execv(ip, [ip, "netns", "exec", name, sys.executable, "-m", "pyrdmacm", *rest])
    except OSError as e:
        _err("--netns: cannot run %s: %s" % (ip, e.strerror))
    return EXIT_USAGE


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The command line: the subcommand's exit status (``EXIT_CODES``).  Its stdout is a
    :class:`_PipeSafe` (argparse's --help too): an output that cannot be written makes it
    EXIT_OUTPUT."""
    out = _PipeSafe(sys.stdout)
    real, sys.stdout = sys.stdout, out
    try:
        code = _main(argv)
    except SystemExit:  # argparse's --help (0) and refusals (3)
        out.flush()
        if out.failed:
            raise SystemExit(EXIT_OUTPUT) from None
        raise
    finally:
        try:
            out.flush()  # what is still buffered: the reader may be gone, the disk full
        finally:
            sys.stdout = real
    return EXIT_OUTPUT if out.failed else code


def _main(argv: Optional[Sequence[str]]) -> int:
    from ..errors import RdmaCmError

    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # refused by the subcommand's parser, whose usage line fits
        sub = getattr(parser, "_subcommands", {}).get(getattr(args, "command", None), parser)
        sub.error("unrecognized arguments: %s" % " ".join(extra))
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    if args.netns is not None:
        return _in_netns(args.netns, list(sys.argv[1:] if argv is None else argv))
    if args.json_compact or args.json_pretty:  # the global -j / -p: JSON, laid out as asked
        from .output import json_layout

        json_layout(compact=not args.json_pretty)
        if hasattr(args, "json"):
            args.json = True
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except RdmaCmError as e:  # a refusal no subcommand expected: still a message, not a traceback
        _err(_text(e))
        return EXIT_USAGE if isinstance(e, ValueError) else _refused_exit(getattr(e, "errno", None))
