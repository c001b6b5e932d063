"""The fabric check's engine: the rails of this host, the targets, and the run: every cell
driven through one event channel by the asyncio adapter (:mod:`pyrdmacm.mesh.driver`), a
bounded number in flight, and the failed ones explained."""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from .cells import Cell, Rail, Target
from .path import gid_entries


def rails(names: Optional[Iterable[str]] = None, *, devices: Any = None) -> List[Rail]:
    """This network namespace's rails: each netdev with an RDMA port or GID behind it, with its
    addresses (IPv4, and IPv6 of global scope), in ifindex order; ``names``: just these, in
    this order, whether RDMA is behind them or not (a rail with no device or no address is
    still a rail: its cells say what it lacks).  ValueError for a name that is no netdev."""
    from .. import devices as dev
    from ..netlink.route import addresses, links

    devs = dev.list_devices() if devices is None else list(devices)
    behind: Dict[str, Tuple[str, int]] = {}
    for d in devs:
        for p in d.ports:
            for nd in [p.netdev] + [g.netdev for g in p.gids]:
                if nd and nd not in behind:
                    behind[nd] = (d.name, p.number)
    by_name = {link.name: link for link in links() if not link.is_loopback}
    addrs = addresses()
    if names is None:
        chosen = [n for n in by_name if n in behind]
    else:
        chosen = list(dict.fromkeys(names))
        unknown = [n for n in chosen if n not in by_name]
        if unknown:
            raise ValueError("no netdev %s in this network namespace (`ip link` lists them)" % ", ".join(unknown))
    out = []
    for name in chosen:
        ifaddrs = addrs.get(by_name[name].index, ())
        used = [a for a in ifaddrs if a.scope == 0 and a.usable]  # universe: no link-local
        device, port = behind.get(name, (None, None))
        out.append(Rail(name, tuple(str(a.ip) for a in used), device, port,
                        tuple(dict.fromkeys(str(a.interface.network) for a in used))))
    return out


def pairs(rails: Sequence[Rail], targets: Sequence[Target], same_subnet: bool = False, *,
          sample: Optional[int] = None, seed: Any = None) -> List[Tuple[Rail, Target]]:
    """The cells a run checks, rows in ``rails``' order and columns in ``targets``': every
    rail against every target, or with ``same_subnet`` each rail against the targets on its
    own subnets (a rail-optimized fabric, where rail k of a node reaches rail k of the
    others; a target that cannot be used stays, so that its cell says why).  ``sample``:
    at most that many targets per rail, drawn at random (``seed``: the same draw again), in
    their order: for fleets where all-to-all is too many REQs at once, each round another
    part of the matrix."""
    out = [(r, t) for r in rails for t in targets if not same_subnet or t.ip is None or r.on_subnet(t.ip)]
    if sample is None:
        return out
    import random

    rng = random.Random(seed)
    kept = []
    for r in rails:
        mine = [k for k, (q, _) in enumerate(out) if q is r]
        kept += sorted(rng.sample(mine, min(sample, len(mine))))
    return [out[k] for k in sorted(kept)]


def expand(words: Sequence[str]) -> List[str]:
    """Target words with host lists expanded, as Slurm and ClusterShell write them
    (``node[001-064]``, ``10.20.0.[1-64]``), by ClusterShell's NodeSet (the ``hostlist``
    extra); other words as they are.  ValueError for a list that does not parse, or when
    ClusterShell is not installed."""
    out: List[str] = []
    for w in words:
        if "[" not in w or w.startswith("["):  # no list, or a bracketed IPv6 address
            out.append(w)
            continue
        try:
            from ClusterShell.NodeSet import NodeSet  # type: ignore[import-not-found, import-untyped, unused-ignore]
        except ImportError:
            raise ValueError("%r is a host list: install ClusterShell to expand it (pip install "
                             "'pyrdmacm[hostlist]'), or write the names out" % w) from None
        try:
            out.extend(str(n) for n in NodeSet(w))
        except Exception as e:  # noqa: BLE001 - NodeSetParseError, RangeSetParseError and their kin
            raise ValueError("bad host list %r: %s" % (w, e)) from None
    return out


def targets(words: Sequence[str], *, all_addresses: bool = False, numeric: bool = False) -> List[Target]:
    """Targets as an operator writes them: addresses, or host names looked up as
    getaddrinfo does (its first answer; every address with ``all_addresses``).  A name that
    does not resolve is a target with an ``error`` (its cells say so: the rest are still
    checked).  Host lists (``node[001-064]``) are expanded (:func:`expand`).  Duplicates (the
    same address twice) are checked once: ValueError names them."""
    from ..addr.lookup import NameServiceError, lookup_host
    from ..errors import UsageError

    out: List[Target] = []
    for w in expand(words):
        try:
            if numeric:
                ip = ipaddress.ip_address(w.split("%")[0])
                out.append(Target(w, w if "%" in w else str(ip)))
                continue
            addr, named = lookup_host(w)
        except (UsageError, ValueError, NameServiceError) as e:
            out.append(Target(w, None, str(e)))
            continue
        if named is not None and all_addresses and len(named.addresses) > 1:
            out.extend(Target("%s (%s)" % (w, a), str(a)) for a in named.addresses)
        else:
            out.append(Target(w, str(addr.ip) if not addr.zone else "%s%%%s" % (addr.ip, addr.zone)))
    seen: Dict[str, str] = {}
    dups = []
    for t in out:
        if t.address is None:
            continue
        if t.address in seen:
            dups.append("%s (%s and %s)" % (t.address, seen[t.address], t.name))
        seen[t.address] = t.name
    if dups:
        raise ValueError("targets given twice: %s: give each once" % "; ".join(dups))
    return out


def _why(dst: str, src: Optional[str], devs: Any = None) -> List[str]:
    """The pre-check's explanation for a cell that failed: what is missing, the warnings,
    then its reasoning (the lookup, the route, the source, the device, the neighbour)."""
    from .. import precheck
    from ..addr import parse_address
    from ..errors import PrecheckError, RdmaCmError

    try:
        p = precheck.predict(parse_address(dst), parse_address(src) if src else None, check_node=False, devices=devs)
    except PrecheckError as e:
        made = getattr(e, "prediction", None)  # what was predicted up to the refusal
        return ["pre-check: %s" % e] + (["  " + r for r in made.reasoning] if made is not None else [])
    except (RdmaCmError, OSError, ValueError) as e:
        return ["pre-check could not run: %s" % e]
    lines = ["missing: %s (%s)" % (m.message, m.hint) for m in p.missing]
    lines += ["warning: " + w for w in p.warnings]
    return lines + list(p.reasoning)


async def check_async(rails: Sequence[Rail], targets: Sequence[Target], *, port: int = 7471, timeout_ms: int = 2000,
                      concurrency: int = 64, ps: str = "tcp", host: Optional[str] = None,
                      on_cell: Optional[Callable[[Cell], None]] = None, channel: Any = None,
                      same_subnet: bool = False, devices: Any = None, sample: Optional[int] = None,
                      seed: Any = None) -> List[Cell]:
    """Every rail against every target (rows in ``rails``' order, columns in ``targets``';
    with ``same_subnet`` just the targets on each rail's own subnets, and ``sample`` of them
    drawn with ``seed``, see :func:`pairs`),
    at most ``concurrency`` cells in flight, through one event channel (``channel``, or a
    new one); ``on_cell`` sees each cell as it ends.  Cells that fail get the pre-check's
    explanation.  Cancelled (Ctrl-C), the cells done so far are returned as they are.
    ``devices``: the RDMA devices as :func:`rails` was given them (default: read now)."""
    from .. import devices as dev
    from ..abi import PortSpace
    from ..addr import parse_address
    from ..aio import AsyncChannel

    if concurrency < 1:
        raise ValueError("concurrency must be at least 1, got %d" % concurrency)
    if not 1 <= port <= 65535:
        raise ValueError("port must be 1..65535, got %d" % port)
    pspace = {"tcp": PortSpace.TCP, "ib": PortSpace.IB}[ps]
    host = host or socket.gethostname()
    devs = dev.list_devices() if devices is None else list(devices)
    cells: List[Cell] = []
    work: List[Tuple[Cell, Any, Any]] = []
    parsed: Dict[Tuple[str, int], Any] = {}  # each source and destination parsed once a run

    def addr(text: str, p: int = 0) -> Any:
        a = parsed.get((text, p))
        if a is None:
            a = parsed[text, p] = parse_address(text, p)
        return a

    for r, t in pairs(rails, targets, same_subnet, sample=sample, seed=seed):
        c = Cell(host=host, rail=r.netdev, target=t.name, dst=t.address)
        cells.append(c)
        if t.address is None:
            c.outcome, c.detail = "bad-target", t.error
            continue
        version = t.ip.version
        src = r.source(version)
        c.src = src
        if src is None:
            c.outcome = "no-source"
            c.detail = "rail %s has no IPv%d address%s" % (r.netdev, version, "" if r.addresses else
                                                           " (it has no address at all)")
            continue
        work.append((c, addr(src), addr(t.address, port)))
    for c in cells:
        if c.dst is None or c.src is None:
            if on_cell is not None:
                on_cell(c)
    gids = gid_entries(devs)
    # The failed cells are explained in one thread of their own (pyroute2 runs a loop of its
    # own), through one routing socket and links dump for the whole run (a netlink session
    # open in that thread from its start to the end of the run), with the devices read once;
    # all of it made on the first failure: a run whose cells all work never imports pyroute2
    # for it.
    from .driver import Run

    loop = asyncio.get_running_loop()
    explainer: List[Any] = []  # the thread's executor, once made

    def explain(c: Cell) -> "asyncio.Future[List[str]]":
        if not explainer:
            from concurrent.futures import ThreadPoolExecutor

            from ..netlink.route import session

            explainer.append(ThreadPoolExecutor(1, thread_name_prefix="mesh-why", initializer=session().__enter__))
        return loop.run_in_executor(explainer[0], _why, c.dst or "", c.src, devs)

    try:
        async with AsyncChannel(channel) as ach:
            run = Run(ach, work, pspace, timeout_ms, devs, gids, concurrency, on_cell or _no_cell, explain)
            try:
                await run.finished
            except asyncio.CancelledError:
                run.stop()
                raise
            except BaseException:
                run.stop(report=False)
                raise
    finally:
        if explainer:
            from ..netlink.route import session

            explainer[0].submit(session().__exit__, None, None, None)  # closes the thread's routing socket
            explainer[0].shutdown(wait=True)
    return cells


def _no_cell(cell: Cell) -> None:
    pass


def check(rails: Sequence[Rail], targets: Sequence[Target], **kwargs: Any) -> List[Cell]:
    """:func:`check_async` in a loop of its own (a program with no asyncio loop running)."""
    return asyncio.run(check_async(rails, targets, **kwargs))
