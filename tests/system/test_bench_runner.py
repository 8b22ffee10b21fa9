"""`python -m bench` (issue 15.1): one command runs every benchmark, prints one table and writes JSON.

Invariants: the runner puts every figure of a benchmark in the table and the JSON, each latency with its
floor and ratio beside it. A benchmark that fails is reported by name in the table, the JSON and the exit
status, never dropped silently; a stopped run leaves nothing running. The runner is checked here with a
stub benchmark (tests/bench_stub.py) in seconds; the benchmarks themselves run by their own command,
`python -m bench --quick` (about 5 minutes), not inside the suite (issue 41).
Nothing here asserts a time: the figures are for people to read (bench/README.md).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from bench import faults
from bench.__main__ import main, row, table
from tests.crewlab import wait_for
from tests.procs import LIMIT, alive, ended, running

REPO = Path(__file__).resolve().parents[2]


def test_a_latency_row_carries_its_floor_and_ratio():
    r = row("x.p99", "something, p99", 0.030, "ms", floor=0.002, target="<= 50 ms", met=True)
    assert r["value"] == pytest.approx(30.0) and r["floor"] == pytest.approx(2.0) and r["ratio"] == pytest.approx(15.0)
    text = table([r, row("x.n", "a count", 8640)])
    assert "30.0 ms" in text and "2.0 ms" in text and "15.0x" in text and "yes" in text and "8,640" in text


def test_an_unknown_benchmark_is_refused(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--only", "nope"])
    assert exc.value.code == 2
    assert "no benchmark 'nope'" in capsys.readouterr().err


@pytest.mark.parametrize("argv, said", [
    (["--only", ""], "no benchmark ''"),  # not "every benchmark, full size" (it ran 10 minutes)
    (["--only", "writes,"], "no benchmark ''"),
    (["--quick", "--timeout", "0"], "--timeout must be a positive"),
    (["--quick", "--only", "writes", "--json", "/nonexistent/figures.json"], "cannot write the figures to"),
])
def test_a_bad_option_is_refused_before_any_benchmark_runs(capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


DRIVER = """
import sys
import bench.__main__ as runner
runner.BENCHES = {"hang": "tests.bench_stub"}
runner.ROWS = {"hang": lambda r: []}
runner.present = lambda name: True
sys.exit(runner.entry(["--only", "hang", "--json", sys.argv[1]]))
"""


@pytest.fixture
def stubs(monkeypatch):
    """The runner with two benchmarks of its own: `stub` (tests/bench_stub.py, a figure beside its floor at
    once) and `broken` (a module that is not there: its child fails)."""
    import bench.__main__ as runner

    monkeypatch.setattr(runner, "BENCHES", {"stub": "tests.bench_stub", "broken": "tests.no_such_bench"})
    monkeypatch.setattr(runner, "ROWS", {"stub": lambda r: [row("stub.p50", "stub thing, p50", r["p50"], "ms",
                                                                floor=r["floor"], target="<= 10x floor", met=True)]})
    monkeypatch.setattr(runner, "KEYS", {"stub": ["stub.p50"], "broken": []})
    monkeypatch.setattr(runner, "present", lambda name: True)
    monkeypatch.setattr(runner, "REPO", REPO)
    return runner


def test_the_runner_prints_and_writes_each_figure_beside_its_floor_and_names_a_failed_benchmark(stubs, tmp_path,
                                                                                               capsys):
    """Issue 15.1, 41: each benchmark runs in a child of its own; its figures reach the table and the JSON
    with floor and ratio; a benchmark that fails is named in the table, the JSON (with its stderr) and the
    exit status, and the others still run. (The benchmarks themselves run by `python -m bench`, not here.)"""
    out = tmp_path / "figures.json"
    code = stubs.main(["--quick", "--only", "broken,stub", "--json", str(out)])
    printed = capsys.readouterr()
    doc = json.loads(out.read_text())
    assert code == 1
    assert doc["errors"] == ["broken: exit 1"] and "tests.no_such_bench" in doc["benchmarks"]["broken"]["stderr"]
    assert doc["benchmarks"]["stub"]["result"] == {"p50": 0.003, "floor": 0.001, "quick": True}
    [figure] = doc["figures"]
    assert (figure["key"], figure["value"], figure["floor"], figure["ratio"]) == ("stub.p50", 3.0, 1.0, 3.0)
    assert "stub thing, p50" in printed.out and "3.0x" in printed.out and "FAILED broken: exit 1" in printed.out


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGINT])
def test_a_stopped_run_ends_what_its_benchmark_started(tmp_path, how):
    """Issue 41: `python -m bench` stopped (a time limit's SIGTERM, Ctrl-C) ends the running benchmark and
    every program it started, and writes no figures."""
    pids = tmp_path / "pids"
    env = {**os.environ, "BENCH_STUB": "hang", "BENCH_STUB_PIDS": str(pids)}
    with running([sys.executable, "-c", DRIVER, str(tmp_path / "figures.json")], cwd=REPO, env=env,
                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        wait_for(lambda: pids.exists() and pids.read_text().endswith("\n"), timeout=LIMIT, what="the benchmark started")
        started = [int(p) for p in pids.read_text().split()]
        assert all(alive(p) for p in started)
        proc.send_signal(how)
        out, err = ended(proc, "the stopped runner")
    assert proc.returncode == 130 and "stopped" in err and "Traceback" not in err, err
    wait_for(lambda: not any(alive(p) for p in started), timeout=LIMIT, what="the benchmark's programs ended")
    assert (tmp_path / "figures.json").read_text() == ""  # no figures of a stopped run


@pytest.mark.parametrize("argv, said", [
    (["--trials", "0"], "0 is not at least 1"),  # ran nothing and said "0 failed", exit 0
    (["--trials", "-1"], "-1 is not at least 1"),
    (["--trials", "1", "--burst", "-2"], "-2 is not at least 1"),  # a trial of 0 requests "passed"
    (["--trials", "1", "--json", "/nonexistent/trials.json"], "cannot write the results to"),  # after a trial
])
def test_the_fault_campaign_refuses_a_bad_option_before_any_trial(capsys, argv, said):
    with pytest.raises(SystemExit) as exc:
        faults.main(argv)
    assert exc.value.code == 2
    assert said in capsys.readouterr().err


def test_an_unknown_fault_reproduction_is_named_not_a_traceback():
    proc = subprocess.run([sys.executable, "-m", "bench.fault_repros", "nonsense"], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and "no reproduction 'nonsense'" in proc.stderr and "Traceback" not in proc.stderr


def test_the_three_stacks_benchmark_prints_each_server_beside_the_floor():
    """bench/stacks.py (issues 15, 16): what requests at once cost with no work behind them."""
    proc = subprocess.run([sys.executable, "bench/stacks.py", "--clients", "5", "--bursts", "1"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("floor: one httpx round trip")
    for name in ("stdlib threaded", "h11 on trio", "hypercorn + quart-trio"):
        line = next(x for x in lines if x.startswith(name))
        assert "5 at once" in line and "x floor" in line and "CPU per request" in line
    assert proc.stderr == ""  # nothing of the servers' own logging
