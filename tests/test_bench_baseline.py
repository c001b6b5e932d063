"""tools/bench --baseline on the host (no lab): another revision's package is extracted
without touching the checkout, the worker refuses a package from the wrong folder, and the
comparison and its verdicts say what made-up numbers mean."""

import importlib.machinery
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOOL = ROOT / "tools" / "bench"
PHASES = ("create", "resolve_addr", "resolve_route", "destroy")


@pytest.fixture(scope="module")
def bench():
    loader = importlib.machinery.SourceFileLoader("bench_tool", str(TOOL))
    spec = importlib.util.spec_from_loader("bench_tool", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def git(repo, *argv):
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.invalid",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.invalid",
               GIT_OPTIONAL_LOCKS="0")  # git status must not refresh the index it is compared by
    return subprocess.run(["git", *argv], cwd=str(repo), env=env, check=True, capture_output=True,
                          text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A checkout with two revisions of a pyrdmacm package, and uncommitted work on top."""
    if not shutil.which("git"):
        pytest.skip("no git")
    r = tmp_path / "repo"
    (r / "pyrdmacm").mkdir(parents=True)
    git(r, "init", "-q")
    (r / "pyrdmacm" / "__init__.py").write_text("REV = 1\n")
    (r / "pyrdmacm" / "cm.py").write_text("X = 1\n")
    (r / "README").write_text("not the package\n")
    git(r, "add", ".")
    git(r, "commit", "-q", "-m", "one")
    first = git(r, "rev-parse", "HEAD")
    (r / "pyrdmacm" / "__init__.py").write_text("REV = 2\n")
    git(r, "commit", "-q", "-am", "two")
    # uncommitted work: one change staged, one not, one new file
    (r / "pyrdmacm" / "cm.py").write_text("X = 'staged'\n")
    git(r, "add", "pyrdmacm/cm.py")
    (r / "pyrdmacm" / "__init__.py").write_text("REV = 'working tree'\n")
    (r / "pyrdmacm" / "new.py").write_text("")
    return r, first


def snapshot(r):
    return (git(r, "status", "--porcelain", "--untracked-files=all"), git(r, "diff", "--cached"), git(r, "diff"),
            (r / ".git" / "index").read_bytes())


def test_extracts_the_revisions_package_and_leaves_the_checkout_alone(bench, repo, tmp_path):
    r, first = repo
    before = snapshot(r)
    into = tmp_path / "baseline"
    sha, folder = bench.baseline_tree(first[:7], root=r, into=into)
    assert sha == first and folder == into / first
    assert (folder / "pyrdmacm" / "__init__.py").read_text() == "REV = 1\n"
    assert (folder / "pyrdmacm" / "cm.py").read_text() == "X = 1\n"
    assert not (folder / "pyrdmacm" / "new.py").exists() and not (folder / "README").exists()
    assert (folder / "REVISION").read_text().strip() == first
    assert [p.name for p in into.iterdir()] == [first]  # no half-done folder left behind
    assert snapshot(r) == before  # neither the index nor the working tree moved
    # what the tree differs in: the working-tree edits, the new file
    assert bench.package_differences(folder / "pyrdmacm", r / "pyrdmacm") == ["__init__.py", "cm.py", "new.py"]

    # reused when present: by a name of the revision, and by its full sha without git at all
    (folder / "pyrdmacm" / "marker").write_text("")
    assert bench.baseline_tree("HEAD~1", root=r, into=into) == (first, folder)
    assert bench.baseline_tree(first, root=tmp_path / "no-such-repo", into=into) == (first, folder)
    assert (folder / "pyrdmacm" / "marker").exists()
    # HEAD is the second revision, not the working tree
    sha2, folder2 = bench.baseline_tree("HEAD", root=r, into=into)
    assert sha2 != first and (folder2 / "pyrdmacm" / "__init__.py").read_text() == "REV = 2\n"
    assert snapshot(r) == before


def test_extraction_refuses_what_is_not_a_revision_with_the_package(bench, repo, tmp_path):
    r, _ = repo
    with pytest.raises(SystemExit, match="not a revision"):
        bench.baseline_tree("no-such-rev", root=r, into=tmp_path / "b")
    (r / "other").write_text("")
    git(r, "rm", "-q", "-r", "--cached", "pyrdmacm")
    git(r, "add", "other")
    git(r, "commit", "-q", "-m", "no package")
    with pytest.raises(SystemExit, match="pyrdmacm"):
        bench.baseline_tree("HEAD", root=r, into=tmp_path / "b")
    assert not (tmp_path / "b").exists() or not any((tmp_path / "b").iterdir())


def test_extraction_falls_back_to_scratch_when_build_is_read_only(bench, repo, tmp_path, monkeypatch):
    r, first = repo
    into, scratch = tmp_path / "ro", tmp_path / "scratch"
    scratch.mkdir()
    real = bench._writable
    monkeypatch.setattr(bench, "_writable", lambda d: Path(d) != into and real(d))
    sha, folder = bench.baseline_tree(first, root=r, into=into, scratch=scratch)
    assert folder == scratch / first and (folder / "pyrdmacm" / "__init__.py").read_text() == "REV = 1\n"
    assert bench.baseline_tree(first, root=tmp_path / "no-such-repo", into=into, scratch=scratch) == (sha, folder)


def test_this_checkouts_head_extracts(bench, tmp_path):
    if not (ROOT / ".git").exists() or not shutil.which("git"):
        pytest.skip("not a git checkout")
    sha, folder = bench.baseline_tree("HEAD", into=tmp_path)
    tracked = subprocess.run(["git", "ls-tree", "-r", "--name-only", sha, "pyrdmacm"], cwd=str(ROOT),
                             capture_output=True, text=True, check=True).stdout.split()
    assert "pyrdmacm/__init__.py" in tracked
    assert all((folder / name).is_file() for name in tracked), "the extracted package lacks files of HEAD's"


def run_python(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT))


LOAD = ("import importlib.machinery, importlib.util, sys\n"
        "loader = importlib.machinery.SourceFileLoader('b', %r)\n"
        "spec = importlib.util.spec_from_loader('b', loader)\n"
        "b = importlib.util.module_from_spec(spec); loader.exec_module(b)\n" % str(TOOL))


def test_worker_imports_the_package_it_was_given(tmp_path):
    pkg = tmp_path / "rev" / "pyrdmacm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("WHERE = 'baseline'\n")
    proc = run_python(LOAD + "b.use_package(b.Path(%r)); import pyrdmacm; print(pyrdmacm.WHERE)" % str(pkg.parent))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "baseline"
    proc = run_python(LOAD + "print(b.use_package(b.ROOT))")
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == (ROOT / "pyrdmacm" / "__init__.py").resolve()


def test_worker_refuses_a_folder_without_the_package(tmp_path):
    """A wrong --baseline-dir would otherwise import the tree's pyrdmacm and compare it with
    itself: the worker stops before timing anything."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT))  # the tree's pyrdmacm importable whatever is installed
    proc = subprocess.run([sys.executable, str(TOOL), "--worker", "baseline", "--baseline-dir", str(empty),
                           "--dst", "10.0.2.2", "--n", "1"], capture_output=True, text=True, cwd=str(ROOT), env=env)
    assert proc.returncode != 0
    assert "imported pyrdmacm from" in proc.stderr and str(empty) in proc.stderr


def test_baseline_runs_beside_pyrdmacm(bench):
    assert bench.with_baseline(["c", "pyrdmacm", "floor"]) == ["c", "pyrdmacm", "baseline", "floor"]
    assert bench.with_baseline(["c", "baseline"]) == ["c", "pyrdmacm", "baseline"]
    assert bench.with_baseline(["pyrdmacm", "baseline"]) == ["pyrdmacm", "baseline"]


def test_the_lab_gets_the_sha_not_the_users_options(bench):
    argv = ["--kernel", "bookworm", "--baseline", "main~1", "--n", "1000", "--json=x.json", "--runs", "2",
            "--baseline-name=old"]
    assert bench.without_options(argv, ("--kernel", "--json", "--baseline", "--baseline-name")) == [
        "--n", "1000", "--runs", "2"]


# -- the comparison, on made-up numbers --------------------------------------------------

def test_verdicts(bench):
    v = bench.verdict
    assert v(1.00, [0.97, 1.03])["verdict"] == "within spread"
    # every round slower, and by more than the rounds disagree
    r = v(1.10, [1.08, 1.12])
    assert r["slower"] and not r["faster"] and r["verdict"] == "slower by 10.0% (beyond spread)"
    # every round slower, but by less than the rounds' own spread
    assert v(1.03, [1.01, 1.09])["verdict"] == "within spread"
    # the per-round ratios agree, yet each implementation varies more than that between runs
    assert v(1.05, [1.04, 1.06], (0.02, 0.08))["verdict"] == "within spread"
    assert v(1.05, [1.04, 1.06], (0.02, 0.03))["slower"]
    # one round says faster: not slower beyond the spread, whatever the medians say
    assert v(1.20, [0.99, 1.40])["verdict"] == "within spread"
    r = v(0.80, [0.78, 0.82])
    assert r["faster"] and not r["slower"] and r["verdict"] == "faster by 20.0% (beyond spread)"
    # one round: nothing to judge by
    r = v(1.5, [1.5])
    assert r["verdict"] == "no spread (1 round)" and not r["slower"] and not r["faster"]


def rows(impl, n, per_id_us, failures=0):
    """Raw rows as the workers report them: seconds per phase, one row per round."""
    return [dict({p: us[i] * n / 1e6 for i, p in enumerate(PHASES)}, n=n, impl=impl, round=k, failures=failures)
            for k, us in enumerate(per_id_us)]


def test_compare_phase_by_phase(bench):
    n = 1000
    cur = [(10.0, 30.0, 20.0, 8.0), (10.4, 33.0, 20.2, 8.1), (9.8, 31.5, 20.1, 8.0)]
    base = [(10.1, 30.0, 20.1, 8.8), (10.2, 30.2, 20.0, 9.0), (9.9, 30.1, 20.2, 8.9)]
    raw = rows("pyrdmacm", n, cur) + rows("baseline", n, base) + rows("c", n, base)
    res = bench.compare(raw)["1000"]
    assert set(res) == set(PHASES) | {"total"}
    create = res["create"]
    assert create["current"] == pytest.approx(10.0) and create["baseline"] == pytest.approx(10.1)
    assert create["ratio"] == pytest.approx(10.0 / 10.1)
    assert create["round_ratios"] == pytest.approx([10.0 / 10.1, 10.4 / 10.2, 9.8 / 9.9])
    assert create["spread"] == pytest.approx([min(create["round_ratios"]), max(create["round_ratios"])])
    assert create["run_spread"]["current"] == pytest.approx(10.4 / 9.8 - 1)
    assert create["verdict"] == "within spread"
    # resolve_addr: 31.5 against 30.1, each round 1.00-1.10: the rounds disagree more than 4.7 %
    assert res["resolve_addr"]["verdict"] == "within spread"
    # destroy: 8.0 against 8.9 in every round, far beyond any spread
    assert res["destroy"]["faster"] and res["destroy"]["verdict"].startswith("faster by 10.1%")
    total = res["total"]
    assert total["current"] == pytest.approx(statistics.median([sum(c) for c in cur]))
    assert bench.slower_phases(bench.compare(raw)) == []

    slow = [tuple(x * 1.2 if i == 1 else x for i, x in enumerate(b)) for b in base]  # resolve_addr +20 %
    comparison = bench.compare(rows("pyrdmacm", n, slow) + rows("baseline", n, base))
    assert comparison["1000"]["resolve_addr"]["verdict"] == "slower by 20.0% (beyond spread)"
    assert comparison["1000"]["create"]["verdict"] == "within spread"
    assert bench.slower_phases(comparison) == ["N=1000 resolve_addr", "N=1000 total"]


def test_compare_leaves_out_failed_runs_and_missing_implementations(bench):
    n = 100
    raw = rows("pyrdmacm", n, [(1, 1, 1, 1)] * 2) + rows("baseline", n, [(1, 1, 1, 1)] * 2, failures=3)
    assert bench.compare(raw) == {}
    raw = rows("pyrdmacm", n, [(1, 1, 1, 1)] * 2) + rows("baseline", n, [(1, 1, 1, 1)])
    assert bench.compare(raw)["100"]["create"]["verdict"] == "no spread (1 round)"


def test_table_and_saved_json_carry_the_comparison(bench, tmp_path, capsys):
    n = 1000
    base = [(10.0, 30.0, 20.0, 9.0), (10.2, 30.4, 20.2, 9.1)]
    slow = [(c, a * 1.3, r, d) for c, a, r, d in base]
    raw = rows("pyrdmacm", n, slow) + rows("baseline", n, base) + rows("c", n, base)
    for row in raw:
        row.setdefault("failures", 0)
    impls = ["c", "pyrdmacm", "baseline"]
    result = {"kernel": "6.1", "lab": "bookworm:single", "topology": "single", "dst": "10.0.2.2", "runs": 2,
              "ns": [n], "impls": impls, "raw": raw, "results": bench.summarise(raw, impls),
              "baseline": {"rev": "1511c9a", "sha": "1511c9a" + "0" * 33, "dir": "build/bench-baseline/x",
                           "identical_to_tree": False, "differing_files": ["cm.py"], "compare": {}}}
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps(result))
    out = tmp_path / "again.json"
    assert bench.main(["--from", str(saved), "--json", str(out)]) == 0  # recomputed from the raw runs
    text = capsys.readouterr().out
    again = json.loads(out.read_text())
    assert again["baseline"]["compare"]["1000"]["resolve_addr"]["verdict"] == "slower by 30.0% (beyond spread)"
    assert again["baseline"]["slower"] == ["N=1000 resolve_addr", "N=1000 total"]
    assert "pyrdmacm (this tree) against 1511c9a (1511c9a00000, 1 package files differ), us per id" in text
    line = next(ln for ln in text.splitlines() if "resolve_addr" in ln and "beyond" in ln)
    assert line.split()[:5] == ["resolve_addr", "39.3", "30.2", "1.30", "1.30-1.30"]
    assert "slower than 1511c9a beyond the spread: N=1000 resolve_addr, N=1000 total" in text
    assert "baseline" in text.splitlines()[2]  # the column in the main table


def test_impl_baseline_needs_a_revision(bench, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--impl", "pyrdmacm,baseline", "--from", "x.json"])
    assert "--baseline REV" in capsys.readouterr().err


def test_floor_headers_come_from_the_abi():
    """The hand-written floor builds its command headers from pyrdmacm.abi, so it keeps
    working when the library's internals move; while the library still has its own, they agree."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from bench_direct import floor_kit
    finally:
        sys.path.remove(str(ROOT / "tools"))
    from pyrdmacm import parse_address, wire

    k = floor_kit(parse_address("10.0.0.2"))
    for mine, command in (("h_create", "CREATE_ID"), ("h_destroy", "DESTROY_ID"),
                          ("h_resolve_addr", "RESOLVE_ADDR"), ("h_resolve_route", "RESOLVE_ROUTE")):
        assert getattr(k, mine) == wire.COMMAND[command].header, mine
    assert k.get_event[:4] == (12).to_bytes(4, "little")


def test_connection_summary_compares_the_baseline_and_the_floor(bench):
    """--connections with --baseline and the floor: per mode, pyrdmacm over the baseline and over
    the floor from the medians, the baseline's ratio per round, and the table's line for it."""
    raw = []
    for rnd, (py, base, floor, c) in enumerate(((2.0, 4.0, 1.0, 1.0), (3.0, 4.0, 2.0, 2.0), (2.5, 5.0, 2.0, 2.0))):
        for impl, total in (("pyrdmacm", py), (bench.BASELINE, base), ("floor", floor), ("c", c)):
            raw.append({"n": 10, "mode": "pipelined", "impl": impl, "round": rnd, "total": total, "established": 10,
                        "completed": 10, "failures": 0, "first_failure": "", "user": 0.1, "sys": 0.1})
    impls = ["c", "pyrdmacm", bench.BASELINE, "floor"]
    row = bench.summarise_connections(raw, impls, ["pipelined"])["10"]["pipelined"]
    assert row["baseline_round_ratios"] == [0.5, 0.75, 0.5]
    assert row["baseline_ratio"] == pytest.approx(2.5 / 4.0)
    assert row["floor_ratio"] == pytest.approx(2.5 / 2.0) and row["floor_c_ratio"] == pytest.approx(1.0)
    assert row["floor_round_ratios"] == [2.0, 1.5, 1.25]
    result = {"kernel": "k", "lab": "", "topology": "pair", "dst": "10.9.0.1", "port": 7099, "runs": 3,
              "impls": impls, "modes": ["pipelined"], "loadavg_before": (0, 0, 0), "loadavg_after": (0, 0, 0),
              "connections": {"10": {"pipelined": row}}}
    result["targets"] = bench.conn_targets(result)
    text = bench.conn_table(result)
    assert "pyrdmacm / baseline 0.62 (rounds 0.50-0.75)" in text
    assert {t["target"]: t["met"] for t in result["targets"]}["N=10 pipelined pyrdmacm/floor per connection <= 1.15"] \
        is False
