"""What the two model-based fuzzers (tests/ucma_model.py: commands on ids that never meet;
tests/ucma_conn_model.py: connections among them) share to run a campaign: the rounds until
the time is up, the figures printed, the command line, the JSON written."""

from __future__ import annotations

import argparse
import collections
import json
import os
import time
from typing import Any, Callable, Dict, List, Optional, Tuple


def finding(e: BaseException, cls: type) -> Optional[BaseException]:
    """``e`` if it is a ``cls``, else the first ``cls`` inside it: hypothesis wraps a failure
    whose replay went another way (a timing-dependent one) in a group (FlakyFailure)."""
    if isinstance(e, cls):
        return e
    for inner in getattr(e, "exceptions", ()):
        found = finding(inner, cls)
        if found is not None:
            return found
    return None


def rounds(seconds: float, seed: int, one_round: Callable[[int], Optional[str]], label: str,
           out: Callable[[str], None] = print,
           stop: Callable[[], bool] = lambda: False) -> Tuple[int, List[Tuple[int, str]], float]:
    """``one_round(seed)`` with seeds seed, seed+1, ... until ``seconds`` have passed (a round
    started is finished) or ``stop()`` says so: (rounds run, each disagreement's (seed,
    report), seconds taken)."""
    start = time.monotonic()
    found: List[Tuple[int, str]] = []
    n = 0
    while time.monotonic() - start < seconds and not stop():
        s = seed + n
        n += 1
        report = one_round(s)
        if report:
            found.append((s, report))
            out("== disagreement (%sseed %d) ==\n%s\n" % (label, s, report))
    return n, found, round(time.monotonic() - start, 1)


def in_child(run: Callable[[], int]) -> int:
    """``run()`` in a forked child process; its exit status.  For a campaign that may leave a
    thread blocked in the kernel for good: that child can then never exit (nor close its fds),
    but it tells its status first, and this process returns it and exits."""
    import sys

    sys.stdout.flush()
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(r)
            status = run()
        except BaseException:  # noqa: B036 - the child's last word, then out
            import traceback

            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.write(w, bytes([status & 0xFF]))
            os._exit(status)
    os.close(w)
    got = os.read(r, 1)
    os.close(r)
    status = got[0] if got else 1
    for _ in range(50):  # a child that cannot exit (a writer blocked in the kernel) is left so
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        time.sleep(0.1)
    else:
        print("(the campaign's process is left blocked in the kernel: pid %d)" % pid, flush=True)
    return status


def print_figures(fig: Dict[str, Any], out: Callable[[str], None] = print) -> None:
    """The campaign's figures: sequences, commands, events read by kind (when counted),
    errnos per command, and each disagreement's first line."""
    out("kernel %s%s: %d sequences, %d commands in %.0f s (%d rounds from seed %d); %d disagreements"
        % (fig["kernel"], ", %s" % fig["machine"] if fig.get("machine") else "", fig["sequences"], fig["commands"],
           fig["seconds"], fig["rounds"], fig["seed"], len(fig["disagreements"])))
    if "events" in fig:
        out("  events read: %s" % (", ".join("%s %d" % (e, n) for e, n in sorted(fig["events"].items())) or "none"))
    if "addresses" in fig:
        out("  sequences over: %s" % ", ".join("%s %d" % (a, n) for a, n in sorted(fig["addresses"].items())))
    if fig.get("rounds cut by timing"):
        out("  rounds cut short by timing (a sequence begun before went another way): %d"
            % fig["rounds cut by timing"])
    if fig.get("concurrent steps") is not None:
        out("  concurrent steps (two commands on one id at once): %d" % fig["concurrent steps"])
    if fig.get("across"):
        out("  connection requests across the two hosts: %d" % fig["across"])
    if "readers" in fig:
        out("  channels read by: %s" % ", ".join("%s %d" % (how, n) for how, n in fig["readers"].items()))
    by_cmd: Dict[str, List[str]] = collections.defaultdict(list)
    for (cmd, err), n in sorted(fig["errnos"].items()):
        by_cmd[cmd].append("%s %d" % (err, n))
    for cmd in sorted(by_cmd):
        out("  %-34s %s" % (cmd, ", ".join(by_cmd[cmd])))
    for s, report in fig["disagreements"]:
        out("disagreement, seed %d: %s" % (s, report.splitlines()[0]))


def parser(description: str, examples: int, steps: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--minutes", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--examples", type=int, default=examples, help="sequences per round (default %d)" % examples)
    p.add_argument("--steps", type=int, default=steps, help="steps per sequence at most (default %d)" % steps)
    p.add_argument("--json", metavar="FILE", help="write the figures there too (relative: in $LAB_OUT, the lab's "
                   "output directory)")
    return p


def seed_of(args: argparse.Namespace) -> int:
    return args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little")


def finish(fig: Dict[str, Any], json_path: Optional[str]) -> int:
    """Print the figures, write them as JSON if asked: the exit status (1: disagreements)."""
    print_figures(fig)
    if json_path:
        path = json_path if os.path.isabs(json_path) else os.path.join(os.environ.get("LAB_OUT", "."), json_path)
        with open(path, "w") as f:
            json.dump({**fig, "errnos": [[c, e, n] for (c, e), n in sorted(fig["errnos"].items())]}, f, indent=1)
    return 1 if fig["disagreements"] else 0
