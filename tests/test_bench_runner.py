"""`python -m bench` (issue 15.1): one command runs every benchmark, prints one table and writes JSON.

Invariants: `--quick` produces a JSON file holding every figure the table promises (bench/__main__.KEYS),
each a number, with no benchmark failed; every latency has its floor and ratio beside it. A benchmark
that fails is reported by name in the table, the JSON and the exit status, never dropped silently.
Nothing here asserts a time: the figures are for people to read (bench/README.md).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from bench import faults
from bench.__main__ import KEYS, main, present, row, table

REPO = Path(__file__).resolve().parent.parent


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


@pytest.mark.slow
def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "results.json"
    # the benchmarks' temporary folders go to a folder of this run's own (short: sockets live there), so
    # what another program on the machine leaves in /tmp meanwhile is not counted
    own = Path(tempfile.mkdtemp(prefix="bq", dir="/tmp"))
    try:
        proc = subprocess.run([sys.executable, "-m", "bench", "--quick", "--json", str(out)], cwd=REPO,
                              capture_output=True, text=True, timeout=900, env={**os.environ, "TMPDIR": str(own)})
        # no benchmark leaves a state folder behind: each held a lead's api-token (live_channel's did)
        left = [d for d in own.iterdir() if d.is_dir() and any(d.rglob("api-token"))]
    finally:
        shutil.rmtree(own, ignore_errors=True)
    assert left == []
    doc = json.loads(out.read_text())
    assert doc["errors"] == [], json.dumps(doc["benchmarks"], indent=1)[-4000:]
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = {f["key"]: f for f in doc["figures"]}
    assert doc["skipped"] == [n for n in KEYS if not present(n)]
    for name, keys in KEYS.items():
        if not present(name):  # a benchmark whose module is not in this checkout is listed as skipped
            continue
        assert "result" in doc["benchmarks"][name], name
        for key in keys:
            assert isinstance(figures[key]["value"], (int, float)), key
            if figures[key]["unit"] == "ms":  # every latency beside its floor, measured in the same run
                assert figures[key]["floor"] > 0 and figures[key]["ratio"] > 0, key
            assert figures[key]["figure"] in proc.stdout, key


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
