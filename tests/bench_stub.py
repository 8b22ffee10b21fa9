"""A benchmark for tests/system/test_bench_runner.py, in milliseconds instead of minutes: the runner's own work
(a child per benchmark, its figures in the table and the JSON, a failure named, a stop that ends what
the benchmark started) without a real benchmark's sizes. `BENCH_STUB=hang` starts a program, writes
both pids to `BENCH_STUB_PIDS` and waits forever, as a benchmark that is stopped midway."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def run(quick: bool = False) -> dict:
    if os.environ.get("BENCH_STUB") == "hang":
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        Path(os.environ["BENCH_STUB_PIDS"]).write_text(f"{os.getpid()} {helper.pid}\n")
        while True:
            time.sleep(3600)
    return {"p50": 0.003, "floor": 0.001, "quick": quick}
