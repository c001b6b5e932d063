"""The kernel tier: tests marked ``kernel`` need a real /dev/infiniband/rdma_cm.

``@pytest.mark.kernel`` (or ``kernel(topology="pair")``; the default is "single") runs
a test; ``kernel(suites=("bookworm",))`` limits it to those kernels of the lab (for a test of
our own tools, whose outcome does not depend on the kernel: it runs once, not per kernel)

- inside the kernel lab (``PYRDMACM_LAB=suite:topology`` is set by tools/lab): as usual,
  when the guest has the test's topology;
- on the host with ``--lab=SUITES`` (comma list of bullseye, bookworm, trixie, sid, or ``all``): each
  kernel test becomes one item per suite, ``test_x[lab-SUITE]``. Each (suite, topology)
  needed is one boot of the lab, running pytest in the guest on all the kernel tests of
  that topology. The boots start with the session and run side by side in the background
  (``Scheduler``: at most ``--lab-jobs`` qemu processes at once, the pairs first, the fabric
  last, otherwise the longest boots first),
  while the host's own tests run (they come first; the lab's items last); an item waits for
  its boot, then reports its own outcome
  from the guest's junit XML (a boot that failed fails each of its items);
- on a host that has rdma_cm itself: directly (topology "single" only);
- elsewhere: skipped, with the reason and the option that runs it.

``--require-lab`` turns every skipped kernel test into a failure, and fails the session
when no kernel test ran on one of the ``--lab`` suites. CI runs ``--lab=all --require-lab``.

A boot of the pair topology runs the peer agent on the peer (tools/lab's ``--peer-command``:
``python tests/lab_peer.py serve``, TCP port 7007), through which the ``peer`` fixture
(tests/kernel/conftest.py) runs programs over there.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LAB = ROOT / "tools" / "lab"
PEER_AGENT = ROOT / "tests" / "lab_peer.py"
SUITES = ("bullseye", "bookworm", "trixie", "sid")
TOPOLOGIES = ("single", "pair", "multihomed", "fabric")
QEMUS = {"pair": 2, "fabric": 4}  # qemu processes a boot of the topology runs (default 1)
RDMA_CM = "/dev/infiniband/rdma_cm"
BOOT_TIMEOUT = 900.0  # seconds, for a boot that has a core to itself
# How long each kernel test took last time on each suite, to start the longest boots first.
BOOT_TIMES = ROOT / "build" / "lab" / "test-times.json"
#: seconds each kernel test module took in a CI run, per suite and topology (summed from the
#: boots' junit XML): what a fresh clone, with no test-times.json yet, orders its boots
#: (``Scheduler``) and divides its long boots (``shards``) by
MODULE_SECONDS = ROOT / "tests" / "kernel" / "lab-seconds.json"
#: a single-topology boot expected to take longer than this is split into two boots of whole
#: modules: its tests wait on the kernel's timers, so two guests side by side share the cores
#: better than one guest that waits alone
SPLIT_SECONDS = 300.0
# Markers evaluated where the test runs (in the guest), not on the host.
GUEST_MARKERS = {"skip", "skipif", "xfail", "parametrize", "usefixtures", "filterwarnings"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernel lab")
    group.addoption("--lab", metavar="SUITES",
                    help="run the kernel tests in the kernel lab (tools/lab) on these Debian "
                         "kernels: comma list of bullseye, bookworm, trixie, sid, or all")
    group.addoption("--require-lab", action="store_true",
                    help="a skipped kernel test fails, and so does the session if no kernel "
                         "test ran on one of the --lab suites")
    group.addoption("--lab-timeout", type=float, metavar="SECONDS",
                    help=f"time-out of one lab boot (default {BOOT_TIMEOUT:g}, times the "
                         "qemu processes per core of --lab-jobs when more than one)")
    group.addoption("--lab-jobs", type=int, metavar="N",
                    help="lab boots side by side: at most N qemu processes at once (a pair "
                         "topology counts two); default from this machine's cores and "
                         f"memory ({default_jobs()} here)")
    group.addoption("--lab-split", type=float, default=SPLIT_SECONDS, metavar="SECONDS",
                    help="a single-topology boot expected to take longer is split into two "
                         f"boots of whole test modules (default {SPLIT_SECONDS:g})")
    group.addoption("--lab-mirror", metavar="URL",
                    help="the Debian mirror to download a lab kernel that is not cached yet "
                         "(default $PYRDMACM_LAB_MIRROR, else the one this machine's apt "
                         "sources use)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kernel(topology='single'): needs a real kernel with rdma_cm; "
                   "runs inside the kernel lab (tools/lab)")
    config.pluginmanager.register(KernelTier(config), "kernel-tier")


def suites_of(item: pytest.Item) -> tuple[str, ...]:
    """The lab kernels a kernel test runs on (``kernel(suites=...)``; default every one)."""
    marker = item.get_closest_marker("kernel")
    assert marker is not None
    suites = tuple(marker.kwargs.get("suites", SUITES))
    unknown = [s for s in suites if s not in SUITES]
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown lab suite {unknown}; choose from {', '.join(SUITES)}")
    return suites


def topology_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("kernel")
    assert marker is not None
    topology = marker.kwargs.get("topology", marker.args[0] if marker.args else "single")
    if topology not in TOPOLOGIES:
        raise pytest.UsageError(f"{item.nodeid}: unknown lab topology {topology!r}; "
                                f"choose one of {', '.join(TOPOLOGIES)}")
    return topology


def junit_key(nodeid: str) -> tuple[str, str]:
    """(classname, name) of a test in pytest's junit XML, as pytest derives them."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    names[-1] += bracket + params
    return ".".join(names[:-1]), names[-1]


def tail(text: str, lines: int) -> str:
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])


class GuestFailure(Exception):
    """A kernel test failed in the guest, or its lab boot failed."""


class LabItem(pytest.Item):
    """A kernel test run in the lab on one suite; its outcome comes from the guest."""

    def __init__(self, *, original: pytest.Item, suite: str, topology: str,
                 tier: "KernelTier", **kwargs) -> None:
        super().__init__(**kwargs)
        self.original, self.suite, self.topology, self.tier = original, suite, topology, tier
        self.own_markers = [m for m in original.own_markers if m.name not in GUEST_MARKERS]
        self.keywords.update({k: v for k, v in original.keywords.items()
                              if k not in GUEST_MARKERS})

    def runtest(self) -> None:
        boot = self.tier.boot(self)
        outcome, detail = boot.outcome_of(self.original.nodeid)
        if outcome == "skipped":  # reported at the test's own location, not this line
            raise pytest.skip.Exception(f"skipped in the lab ({self.suite}): {detail}",
                                        _use_item_location=True)
        if outcome == "xfailed":
            pytest.xfail(f"in the lab ({self.suite}): {detail}")
        if outcome == "failed":
            raise GuestFailure(detail)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, GuestFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        path, lineno, _ = self.original.reportinfo()
        return path, lineno, self.name


class Boot:
    """One run of tools/lab: the guest's pytest on every kernel test of a topology. Made
    when the session starts; ``run`` (in a thread of the ``Scheduler``) boots the lab, and
    ``done`` is set once its results are read."""

    def __init__(self, suite: str, topology: str, nodeids: list[str],
                 config: pytest.Config, session_dir: Path, timeout: float, shard: int = 0) -> None:
        self.suite, self.topology, self.nodeids = suite, topology, nodeids
        #: which boot of its suite and topology this is (``shards``): 0, or 1 and 2
        self.shard = shard
        self.label = f"{suite}/{topology}" + (f"#{shard}" if shard else "")
        self.out = session_dir / (f"{suite}-{topology}" + (f"-{shard}" if shard else ""))
        self.junit = self.out / "junit.xml"
        rootpath = config.rootpath
        args = [str(rootpath / nodeid) for nodeid in nodeids]  # absolute: cwd-independent
        mirror = config.getoption("--lab-mirror")
        mirror = ["--mirror", mirror] if mirror else []
        peer = []
        if topology in ("pair", "fabric"):  # the peer agent, for the ``peer``/``peers`` fixtures
            peer = ["--peer-command",
                    "exec " + shlex.join([sys.executable, str(PEER_AGENT), "serve"])]
        self.command = [
            sys.executable, str(LAB), "run", "--kernel", suite, "--topology", topology,
            "--timeout", f"{timeout:g}", "--out", str(self.out), *peer,
            *mirror,
            "--",
            # the root is read-only in the guest: no cache; hypothesis's plugin alone costs
            # seconds of start-up under emulation, and kernel tests do not need it
            sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
            "-m", "kernel",
            f"--rootdir={rootpath}", f"--junitxml={self.junit}", "-rA", *args,
        ]
        # the environment as the session started: the host's tests run in the main thread
        # meanwhile, and one that sets a variable reallocates the C environ that a boot
        # thread's child would read between vfork and exec (EFAULT, "Bad address"); given an
        # env, subprocess hands exec an array of its own
        self.env = dict(os.environ)
        self.qemus = QEMUS.get(topology, 1)  # qemu processes: the peers too
        self.done = threading.Event()
        self.lock = threading.Lock()  # run's start against cancel
        self.proc: subprocess.Popen | None = None
        self.log = ""
        self.exit: int | None = None
        self.seconds = self.cpu_seconds = 0.0
        self.results: dict[tuple[str, str], tuple[str, str]] = {}
        self.times: dict[tuple[str, str], float] = {}  # seconds per test, from the junit XML
        self.failure: str | None = None

    def run(self) -> None:
        """Boot the lab and read its results (in a worker thread); never raises."""
        started = time.monotonic()
        try:
            self.out.mkdir(parents=True)
            log_path = self.out / "lab-run.log"
            with open(log_path, "wb") as log:
                with self.lock:
                    if self.failure:  # cancelled before it started
                        return
                    self.proc = subprocess.Popen(self.command, cwd=ROOT, env=self.env,
                                                 stdin=subprocess.DEVNULL, stdout=log,
                                                 stderr=subprocess.STDOUT)
                # wait4: the CPU time of tools/lab and its qemu processes, for the summary
                _, status, usage = os.wait4(self.proc.pid, 0)
                self.proc.returncode = self.exit = os.waitstatus_to_exitcode(status)
            self.cpu_seconds = usage.ru_utime + usage.ru_stime
            self.log = log_path.read_text(errors="replace")
            if self.exit in (124, 125) or not self.junit.exists():
                lab_lines = "\n".join(line for line in self.log.splitlines()
                                      if line.startswith(("lab:", "    ")))
                self.failure = (f"the kernel lab failed on {self.suite} (topology "
                                f"{self.topology}), exit {self.exit}:\n"
                                f"{tail(lab_lines or self.log, 40)}\n"
                                f"full output: {log_path}")
            else:
                self.parse(self.junit)
        except Exception as e:  # reported on each of the boot's tests
            self.failure = (f"the kernel lab could not run on {self.suite} (topology "
                            f"{self.topology}): {type(e).__name__}: {e}")
        finally:
            self.seconds = time.monotonic() - started
            self.done.set()

    def cancel(self, why: str) -> None:
        """Stop the boot if it runs (tools/lab stops its qemu on SIGTERM); if it never
        started, its tests report ``why``."""
        with self.lock:
            proc = self.proc
            if proc is None and not self.done.is_set():
                self.failure = why
        if proc is not None and proc.returncode is None:
            try:
                proc.terminate()
            except ProcessLookupError:
                pass
        elif proc is None:
            self.done.set()

    def parse(self, junit: Path) -> None:
        """Each test's outcome and text. A test reported twice (a failed call and an error
        at teardown, say) keeps the worst outcome and every failure text."""
        for case in ElementTree.parse(junit).getroot().iter("testcase"):
            key = (case.get("classname", ""), case.get("name", ""))
            outcome, detail = self.results.get(key, ("passed", ""))
            try:
                self.times[key] = self.times.get(key, 0.0) + float(case.get("time") or 0)
            except ValueError:
                pass
            for child in case:
                if child.tag in ("failure", "error"):
                    detail = detail if outcome == "failed" else ""
                    outcome = "failed"
                    detail += (child.text or child.get("message") or "") + "\n"
                elif child.tag == "skipped" and outcome != "failed":
                    outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
                    detail = child.get("message") or ""
            self.results[key] = (outcome, detail)

    def release(self) -> str:
        try:
            return json.loads((self.out / "topology.json").read_text())["kernel"]
        except (OSError, ValueError, KeyError):
            return "kernel unknown"

    def guest_context(self) -> str:
        console = self.out / "console.log"
        text = console.read_text(errors="replace") if console.exists() else ""
        return (f"--- guest console, last lines ({console}) ---\n{tail(text, 12)}\n"
                f"--- guest pytest output: {self.out / 'output.log'}")

    def outcome_of(self, nodeid: str) -> tuple[str, str]:
        if self.failure:
            return "failed", self.failure
        result = self.results.get(junit_key(nodeid))
        if result is None:
            return "failed", (f"not reported by the guest's pytest (lab exit {self.exit}); "
                              f"its output ends with:\n{tail(self.log, 30)}\n"
                              + self.guest_context())
        outcome, detail = result
        if outcome == "failed":
            detail = (f"failed in the kernel lab on {self.suite} ({self.release()}, "
                      f"topology {self.topology}):\n{detail.rstrip()}\n{self.guest_context()}")
        return outcome, detail


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def default_jobs() -> int:
    """How many qemu processes run at once by default: two per core, and no more than the
    memory holds (about 1.5 GiB each: qemu itself and the guest's 512 MiB). A TCG guest
    keeps one host core busy while its kernel boots, but over a whole boot of the kernel
    tests it averages a fifth to two thirds of a core: its tests wait for time-outs,
    TIME_WAIT, a wedged destroy, the peer. Measured in CI on 2 cores with three at once:
    the guests' CPU was 3,097 s over 2,272 s of boots, 1.36 of the 2 cores, and the boots
    filled all three slots for as long as the run took (six slot-hours for two and a half
    cores' worth of work); with two per core the slots are no longer what the run waits
    for."""
    cores = usable_cores()
    jobs = 2 * cores
    try:
        with open("/proc/meminfo") as f:
            available = next(int(line.split()[1]) for line in f
                             if line.startswith("MemAvailable:"))  # KiB
        jobs = min(jobs, available // (1536 * 1024))
    except (OSError, StopIteration, ValueError):
        pass
    return max(1, jobs)


def _times(path: Path, *keys: str) -> dict:
    try:
        times = json.loads(path.read_text())
        for key in keys:
            times = times.get(key, {})
        return times if isinstance(times, dict) else {}
    except (OSError, ValueError, AttributeError):
        return {}


def module_seconds(suite: str, topology: str, nodeids: list[str]) -> dict[str, float]:
    """What each module of ``nodeids`` is expected to take on ``suite``: its tests' seconds
    of last time (build/lab/test-times.json) where every one was timed, else what the module
    took in CI (tests/kernel/lab-seconds.json, what a fresh clone has), else a guess per
    test of what such a test took on average in CI: 2.5 s alone, 7 s in a pair (its tests
    wait for TIME_WAIT and the peer), 40 s multihomed (each compares many predictions with
    the kernel), 120 s in the fabric (four guests' runs of the mesh)."""
    known, ci = _times(BOOT_TIMES, suite), _times(MODULE_SECONDS, suite, topology)
    guess = {"pair": 7.0, "multihomed": 40.0, "fabric": 120.0}.get(topology, 2.5)
    modules: dict[str, list[str]] = {}
    for nodeid in nodeids:
        modules.setdefault(nodeid.split("::")[0], []).append(nodeid)
    weight = {}
    for module, ids in modules.items():
        times = [known.get(n) for n in ids]
        if all(isinstance(t, (int, float)) for t in times):
            weight[module] = float(sum(times))
        elif isinstance(ci.get(module), (int, float)):
            weight[module] = float(ci[module])
        else:
            weight[module] = guess * len(ids)
    return weight


def expected_seconds(boots: list[Boot]) -> dict[Boot, float]:
    """Each boot's expected duration: 30 s for the boot and the guest's pytest start, and
    its modules' ``module_seconds``."""
    return {boot: 30.0 + sum(module_seconds(boot.suite, boot.topology, boot.nodeids).values())
            for boot in boots}


def shards(suite: str, nodeids: list[str], split: float = SPLIT_SECONDS) -> list[list[str]]:
    """A single-topology boot's tests as one boot, or two of whole modules (a module's
    fixtures and its end are its own) when they are expected (``module_seconds``) to take
    longer than ``split`` (SPLIT_SECONDS): the modules, longest first, each to the boot
    expected to end first."""
    weight = module_seconds(suite, "single", nodeids)
    if sum(weight.values()) <= split or len(weight) < 2:
        return [nodeids]
    boot_of: dict[str, int] = {}
    load_of = [0.0, 0.0]
    for module in sorted(weight, key=lambda m: -weight[m]):
        k = boot_of[module] = load_of.index(min(load_of))
        load_of[k] += weight[module]
    return [[n for n in nodeids if boot_of[n.split("::")[0]] == k] for k in (0, 1)]  # in their order


def record_seconds(boots: list[Boot]) -> None:
    """Remember how long each test of the boots that completed took (``expected_seconds``)."""
    done = [b for b in boots if b.done.is_set() and b.times and not b.failure]
    if not done:
        return
    try:
        times = json.loads(BOOT_TIMES.read_text())
    except (OSError, ValueError):
        times = {}
    for boot in done:
        suite = times.setdefault(boot.suite, {})
        for nodeid in boot.nodeids:
            seconds = boot.times.get(junit_key(nodeid))
            if seconds is not None:
                suite[nodeid] = round(seconds, 2)
    try:
        BOOT_TIMES.parent.mkdir(parents=True, exist_ok=True)
        tmp = BOOT_TIMES.with_name(f".{BOOT_TIMES.name}.{os.getpid()}")
        tmp.write_text(json.dumps(times, indent=0, sort_keys=True) + "\n")
        os.replace(tmp, BOOT_TIMES)
    except OSError:
        pass


# Seconds between the starts of two boots. A kernel calibrates its TSC in its first seconds;
# measured: two or three kernels booting at once on 2 busy cores can get it wrong, and then
# the guest's clock runs several times too fast (tools/lab boots such a guest again).
BOOT_GAP = 5.0


class Scheduler:
    """Runs the session's boots side by side, at most ``jobs`` qemu processes at once (a
    pair counts two, yet runs even when ``jobs`` is 1), in ``order``, BOOT_GAP seconds
    apart; a boot that does not fit while others run lets a smaller one start. Independent
    of pytest's own loop: the boots proceed while the host's tests and the reports of
    earlier boots run."""

    def __init__(self, boots: list[Boot], jobs: int) -> None:
        self.jobs = jobs
        expected = expected_seconds(boots)
        self.pending = sorted(boots, key=lambda b: self.order(b, expected[b]))
        self.boots = list(boots)
        self.busy = 0
        self.stopped = False
        self.cond = threading.Condition()
        self.thread = threading.Thread(target=self._loop, name="lab-scheduler", daemon=True)
        self.workers: list[threading.Thread] = []

    def order(self, boot: Boot, expected: float) -> tuple:
        """The order boots start in. A boot that takes every slot (the fabric) last: it waits
        for all the others anyway. Before it, the boots of two qemu processes (the pairs)
        first: started among single boots, each would wait for two slots free at once while
        one idles (measured in CI: the four pairs, left to the end, ran one after the other
        beside one idle slot for 900 s). Among equals, the longest first, so that no long
        one is left for the end while slots idle."""
        cost = self._cost(boot)
        return (cost >= self.jobs > 1, -cost, -expected)

    def start(self) -> None:
        self.thread.start()

    def _cost(self, boot: Boot) -> int:
        return min(boot.qemus, self.jobs)

    def _loop(self) -> None:
        try:
            self._schedule()
        except BaseException as e:  # the waiting tests must not wait for ever
            for boot in list(self.pending):
                boot.cancel(f"not run: the lab's scheduler failed: {type(e).__name__}: {e}")
            raise

    def _schedule(self) -> None:
        last_start = -BOOT_GAP
        with self.cond:
            while self.pending and not self.stopped:
                boot = next((b for b in self.pending
                             if self.busy + self._cost(b) <= self.jobs), None)
                if boot is None:
                    self.cond.wait()
                    continue
                gap = last_start + BOOT_GAP - time.monotonic()
                if gap > 0 and self.busy:  # one kernel at a time in its first seconds
                    self.cond.wait(gap)
                    continue
                last_start = time.monotonic()
                self.pending.remove(boot)
                self.busy += self._cost(boot)
                worker = threading.Thread(target=self._run, args=(boot,), daemon=True,
                                          name=f"lab-{boot.label}")
                self.workers.append(worker)
                worker.start()

    def _run(self, boot: Boot) -> None:
        try:
            boot.run()
        finally:
            with self.cond:
                self.busy -= self._cost(boot)
                self.cond.notify_all()

    def stop(self) -> None:
        """At the end of the session: boots not started never will, running ones stop."""
        with self.cond:
            self.stopped = True
            pending, self.pending = self.pending, []
            self.cond.notify_all()
        for boot in pending:
            boot.cancel("not run: the session ended before this lab boot started")
        for boot in self.boots:
            boot.cancel("not run: the session ended")
        for worker in self.workers:
            worker.join(timeout=30)


class KernelTier:
    """Decides where each kernel test runs; boots the lab and reports its results."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.require = config.getoption("--require-lab")
        self.guest = os.environ.get("PYRDMACM_LAB")  # "suite:topology" in the lab
        lab = config.getoption("--lab")
        self.suites: list[str] = []
        if lab and not self.guest:
            self.suites = list(SUITES) if lab == "all" else lab.split(",")
            unknown = [s for s in self.suites if s not in SUITES]
            if unknown:
                raise pytest.UsageError(f"--lab: unknown suite {', '.join(unknown)}; "
                                        f"choose from {', '.join(SUITES)} or all")
        self.lab_items: list[LabItem] = []
        self.boots: dict[tuple[str, str, int], Boot] = {}
        #: the boot that runs each lab item (by the item's node id)
        self.boot_of: dict[str, Boot] = {}
        self.scheduler: Scheduler | None = None
        self.ran = {suite: 0 for suite in self.suites}
        jobs = config.getoption("--lab-jobs")
        if jobs is not None and jobs < 1:
            raise pytest.UsageError(f"--lab-jobs {jobs}: give 1 or more qemu processes")
        self.suite_of: dict[str, str] = {}
        self._session_dir: Path | None = None

    @pytest.hookimpl(trylast=True)  # after -m/-k deselection: boot only what is selected
    def pytest_collection_modifyitems(self, config, items) -> None:
        result = []
        for item in items:
            if item.get_closest_marker("kernel") is None:
                result.append(item)
                continue
            topology = topology_of(item)
            if self.guest:
                here = self.guest.partition(":")[2]
                if topology != here:
                    item.add_marker(pytest.mark.skip(
                        reason=f"needs the lab's {topology} topology; this guest is {here}"))
            elif self.suites:
                wanted = [s for s in self.suites if s in suites_of(item)]
                if not wanted:  # none of its kernels asked for: not run, and not a skip
                    config.hook.pytest_deselected(items=[item])
                    continue
                for suite in wanted:
                    name = (f"{item.name[:-1]}-lab-{suite}]" if item.name.endswith("]")
                            else f"{item.name}[lab-{suite}]")
                    lab_item = LabItem.from_parent(item.parent, name=name, original=item,
                                                   suite=suite, topology=topology, tier=self)
                    self.lab_items.append(lab_item)
                    self.suite_of[lab_item.nodeid] = suite
                    result.append(lab_item)
                continue
            elif not os.path.exists(RDMA_CM):
                item.add_marker(pytest.mark.skip(
                    reason=f"needs a kernel with rdma_cm: {RDMA_CM} absent; run with "
                           "--lab=all to run it in the kernel lab"))
            elif topology != "single":
                item.add_marker(pytest.mark.skip(
                    reason=f"needs the lab's {topology} topology; run with "
                           "--lab=all to run it in the kernel lab"))
            result.append(item)
        if self.suites:
            # the host's own tests first, while the boots run in the background: in the order
            # of the files ("kernel/" before "test_*.py") they ran after the last boot, a
            # serial tail of about 170 s in CI; a lab item only waits for its boot
            result = ([i for i in result if not isinstance(i, LabItem)]
                      + [i for i in result if isinstance(i, LabItem)])
        items[:] = result

    def start_boots(self) -> None:
        """Make every boot the selected kernel tests need and start the scheduler."""
        if self.scheduler is not None or not self.lab_items:
            return
        tests: dict[tuple[str, str], list[str]] = {}
        items: dict[tuple[str, str], list[LabItem]] = {}
        for item in self.lab_items:
            tests.setdefault((item.suite, item.topology), []).append(item.original.nodeid)
            items.setdefault((item.suite, item.topology), []).append(item)
        jobs = self.config.getoption("--lab-jobs") or default_jobs()
        # boots side by side share the cores: each one takes longer
        timeout = (self.config.getoption("--lab-timeout")
                   or BOOT_TIMEOUT * max(1.0, jobs / usable_cores()))
        for (suite, topology), nodeids in tests.items():
            nodeids = list(dict.fromkeys(nodeids))
            parts = (shards(suite, nodeids, self.config.getoption("--lab-split")) if topology == "single"
                     else [nodeids])
            for k, part in enumerate(parts, 1 if len(parts) > 1 else 0):
                boot = Boot(suite, topology, part, self.config, self.session_dir(), timeout, k)
                self.boots[(suite, topology, k)] = boot
                mine = set(part)
                for item in items[(suite, topology)]:
                    if item.original.nodeid in mine:
                        self.boot_of[item.nodeid] = boot
        self.scheduler = Scheduler(list(self.boots.values()), jobs)
        self.scheduler.start()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session) -> None:
        if not session.config.option.collectonly:
            self.start_boots()

    def boot(self, item: "LabItem") -> Boot:
        """The boot of a lab item, once it has finished."""
        self.start_boots()
        boot = self.boot_of[item.nodeid]
        boot.done.wait()
        return boot

    def session_dir(self) -> Path:
        """build/lab/pytest/TIME-PID: this session's lab logs (the newest 10 are kept)."""
        if self._session_dir is None:
            base = ROOT / "build" / "lab" / "pytest"
            base.mkdir(parents=True, exist_ok=True)
            for old in sorted(p for p in base.iterdir() if p.is_dir())[:-9]:
                shutil.rmtree(old, ignore_errors=True)
            self._session_dir = base / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        return self._session_dir

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if (self.require and report.skipped and not hasattr(report, "wasxfail")
                and item.get_closest_marker("kernel") is not None):
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
            reason = str(reason).removeprefix("Skipped: ")
            report.outcome = "failed"
            report.longrepr = (f"kernel test skipped, which --require-lab forbids: {reason}")

    def pytest_runtest_logreport(self, report) -> None:
        suite = self.suite_of.get(report.nodeid)
        ran = report.outcome in ("passed", "failed") or hasattr(report, "wasxfail")
        if suite and report.when == "call" and ran:
            self.ran[suite] += 1

    def missing_suites(self) -> list[str]:
        return [suite for suite, count in self.ran.items() if count == 0] if self.require else []

    def pytest_sessionfinish(self, session) -> None:
        if self.scheduler is not None:  # -x, a ^C: stop what still runs or waits
            self.scheduler.stop()
            record_seconds(self.scheduler.boots)
        if self.missing_suites() and session.exitstatus == 0:
            session.exitstatus = 1

    def pytest_terminal_summary(self, terminalreporter) -> None:
        for suite in self.missing_suites():
            terminalreporter.write_line(
                f"--require-lab: no kernel test ran on {suite}", red=True, bold=True)
        if self.scheduler is not None:
            terminalreporter.write_line(
                f"kernel lab: {len(self.boots)} boots, at most {self.scheduler.jobs} qemu "
                f"processes at once (--lab-jobs)")
        for boot in self.boots.values():
            if boot.exit is None and boot.proc is None:
                terminalreporter.write_line(f"kernel lab {boot.label}: not run")
                continue
            terminalreporter.write_line(
                f"kernel lab {boot.label}: exit {boot.exit}, {boot.seconds:.0f} s "
                f"(CPU {boot.cpu_seconds:.0f} s), logs in {boot.out}")
