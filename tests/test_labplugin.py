"""The kernel tier's plan (tests/labplugin.py): the division of a long boot into two
(``shards``), what each boot is expected to take, the order boots start in."""

import json

import labplugin


def _ids(module, n):
    return ["tests/kernel/%s.py::test_%d" % (module, k) for k in range(n)]


def test_a_short_boot_stays_one(monkeypatch, tmp_path):
    monkeypatch.setattr(labplugin, "BOOT_TIMES", tmp_path / "none.json")
    monkeypatch.setattr(labplugin, "MODULE_SECONDS", tmp_path / "none.json")
    ids = _ids("a", 10) + _ids("b", 10)  # 2.5 s a test: 50 s
    assert labplugin.shards("sid", ids) == [ids]
    assert labplugin.shards("sid", _ids("a", 200)) == [_ids("a", 200)]  # one module: never split


def test_a_long_boot_is_two_of_whole_modules_balanced_by_what_ci_measured(monkeypatch, tmp_path):
    seconds = tmp_path / "lab-seconds.json"
    seconds.write_text(json.dumps({"bullseye": {"single": {
        "tests/kernel/big.py": 400, "tests/kernel/mid.py": 250, "tests/kernel/small.py": 150}}}))
    monkeypatch.setattr(labplugin, "BOOT_TIMES", tmp_path / "none.json")
    monkeypatch.setattr(labplugin, "MODULE_SECONDS", seconds)
    ids = _ids("small", 30) + _ids("big", 3) + _ids("mid", 5) + _ids("few", 2)
    a, b = labplugin.shards("bullseye", ids)
    assert sorted(a + b) == sorted(ids)
    # longest first, each to the boot that ends first: big (400 s), then mid (250) and small
    # (150) together, then few (5 s) to the first of two tied at 400
    assert a == _ids("big", 3) + _ids("few", 2)  # in the order given
    assert b == _ids("small", 30) + _ids("mid", 5)
    # another suite: nothing measured, 2.5 s a test: one boot
    assert labplugin.shards("sid", ids) == [ids]


def test_each_tests_own_time_of_last_time_comes_first(monkeypatch, tmp_path):
    times = tmp_path / "test-times.json"
    ids = _ids("a", 2) + _ids("b", 2) + _ids("c", 2)
    times.write_text(json.dumps({"sid": {ids[0]: 200, ids[1]: 10, ids[2]: 100, ids[3]: 100, ids[4]: 1, ids[5]: 1}}))
    monkeypatch.setattr(labplugin, "BOOT_TIMES", times)
    monkeypatch.setattr(labplugin, "MODULE_SECONDS", tmp_path / "none.json")
    assert labplugin.shards("sid", ids) == [ids[0:2], ids[2:4] + ids[4:6]]
    assert labplugin.shards("sid", ids, split=1000) == [ids]


class _Boot:
    def __init__(self, label, topology, seconds):
        self.label, self.suite, self.topology = label, "sid", topology
        self.nodeids = ["tests/kernel/%s.py::test_0" % label]
        self.qemus = labplugin.QEMUS.get(topology, 1)
        self.seconds = seconds


def test_pairs_start_first_the_fabric_last_otherwise_the_longest(monkeypatch, tmp_path):
    times = tmp_path / "test-times.json"
    boots = [_Boot("short", "single", 50), _Boot("fabric", "fabric", 900), _Boot("long", "single", 600),
             _Boot("pair", "pair", 100), _Boot("multihomed", "multihomed", 200),
             _Boot("longpair", "pair", 300)]
    times.write_text(json.dumps({"sid": {b.nodeids[0]: b.seconds for b in boots}}))
    monkeypatch.setattr(labplugin, "BOOT_TIMES", times)
    order = [b.label for b in labplugin.Scheduler(boots, 3).pending]
    assert order == ["longpair", "pair", "long", "multihomed", "short", "fabric"]
    # one qemu at a time: every boot takes every slot, so only the longest first counts
    order = [b.label for b in labplugin.Scheduler(boots, 1).pending]
    assert order == ["fabric", "long", "longpair", "multihomed", "pair", "short"]


def test_a_fresh_clone_expects_what_ci_measured_per_topology(monkeypatch, tmp_path):
    seconds = tmp_path / "lab-seconds.json"
    seconds.write_text(json.dumps({"sid": {"pair": {"tests/kernel/a.py": 200},
                                           "single": {"tests/kernel/a.py": 20}}}))
    monkeypatch.setattr(labplugin, "BOOT_TIMES", tmp_path / "none.json")
    monkeypatch.setattr(labplugin, "MODULE_SECONDS", seconds)
    ids = _ids("a", 3) + _ids("b", 2)
    assert labplugin.module_seconds("sid", "pair", ids) == {"tests/kernel/a.py": 200.0,
                                                            "tests/kernel/b.py": 14.0}  # 7 s a test
    assert labplugin.module_seconds("sid", "single", ids) == {"tests/kernel/a.py": 20.0,
                                                              "tests/kernel/b.py": 5.0}
    assert labplugin.module_seconds("bullseye", "single", ids) == {"tests/kernel/a.py": 7.5,
                                                                   "tests/kernel/b.py": 5.0}


def test_the_hosts_own_tests_run_before_the_lab_items():
    """With --lab the host's tests come first, while the boots run in the background: in the
    files' order ("kernel/" before "test_*.py") they ran after the last boot, in series."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(labplugin.__file__).resolve().parent.parent
    r = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                        "--lab=sid", "tests/kernel/test_cli_ids_lab.py", "tests/test_labplugin.py"],
                       cwd=root, capture_output=True, text=True, timeout=120)
    ids = [line for line in r.stdout.splitlines() if "::" in line]
    lab = [i for i, nodeid in enumerate(ids) if nodeid.endswith("[lab-sid]")]
    assert r.returncode == 0 and lab and ids[:lab[0]] and all("[lab-sid]" not in n for n in ids[:lab[0]]), r.stdout
    assert lab == list(range(lab[0], len(ids)))  # the lab's items, all at the end


def test_a_boot_starts_whatever_the_main_thread_does_to_the_environment(tmp_path):
    """Boots start in threads while the host's tests run in the main thread, some of them
    setting variables: the boot's child must not exec through the C environ they reallocate
    (one CI run lost its fabric boot to EFAULT so)."""
    import os
    import sys
    import threading
    from types import SimpleNamespace

    config = SimpleNamespace(rootpath=labplugin.ROOT, getoption=lambda name: None)
    stop = threading.Event()

    def churn():
        k = 0
        while not stop.is_set():
            os.environ["PYRDMACM_TEST_CHURN_%d" % (k % 300)] = "x" * 40
            if k % 300 == 299:
                for name in [n for n in os.environ if n.startswith("PYRDMACM_TEST_CHURN_")]:
                    del os.environ[name]
            k += 1

    boots = [labplugin.Boot("sid", "single", [], config, tmp_path, 60, k) for k in range(1, 41)]
    thread = threading.Thread(target=churn)
    thread.start()
    try:
        for boot in boots:
            boot.command = [sys.executable, "-S", "-c", "pass"]
            boot.run()
    finally:
        stop.set()
        thread.join()
        for name in [n for n in os.environ if n.startswith("PYRDMACM_TEST_CHURN_")]:
            del os.environ[name]
    for boot in boots:
        assert boot.exit == 0, boot.failure
        assert not any(n.startswith("PYRDMACM_TEST_CHURN_") for n in boot.env)
