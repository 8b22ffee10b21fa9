"""How soon Ctrl-C ends everything `collie demo` started, beside the floor (features 10.1; issue 41).

    .venv/bin/python bench/demo_stop.py [--runs 3]

The demo promises that Ctrl-C ends every process it started within 5 s (SIGTERM, then SIGKILL after
3 s). Each run starts `collie demo --awake 2 --asleep 5` with a throw-away HOME, waits for its ready
line, sends SIGINT and times until the demo and every process below it ended. The floor, measured in
the same run: an idle Python process ending on SIGINT (what the machine's load alone costs an exit).
The load average is printed beside each run. This was an assertion of tests/system/test_demo.py and
tests/system/test_demo_phone.py; on a loaded machine a slow exit failed them (issue 41).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.measure import runs_from  # noqa: E402
from tests.procs import LIMIT, alive, descendants, readline, stop  # noqa: E402

READY = "[demo] ready: "


def floor() -> float:
    """Seconds from SIGINT to the exit of an idle Python that has started (it printed its line)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(600)"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        readline(proc, "the idle Python")
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=LIMIT)
        return time.monotonic() - t0
    finally:
        stop(proc)


def demo_stop() -> tuple[float, int]:
    """(seconds from SIGINT until the demo and all it started ended, how many processes that was)."""
    home = Path(tempfile.mkdtemp(prefix="demo-stop-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "XDG_"))}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / "xdg-config"), XDG_STATE_HOME=str(home / "xdg-state"),
               PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "demo", "--awake", "2", "--asleep", "5"], cwd=REPO,
                            env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + LIMIT
        while not (line := readline(proc, "the demo", max(0.1, deadline - time.monotonic()))).startswith(READY):
            if not line:
                raise SystemExit(f"the demo exited {proc.wait()} before it was ready")
        started = descendants(proc.pid)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        while proc.poll() is None or any(alive(p) for p in started):
            if time.monotonic() - t0 > LIMIT:
                raise SystemExit(f"the demo's processes did not end within {LIMIT:g} s")
            time.sleep(0.01)
        return time.monotonic() - t0, len(started)
    finally:
        stop(proc)
        shutil.rmtree(home, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    for run in range(1, runs_from(__doc__, argv, "demo runs") + 1):
        load = " ".join(f"{x:.2f}" for x in os.getloadavg())
        base = floor()
        took, count = demo_stop()
        print(f"run {run}: Ctrl-C -> every process the demo started ended: {took:.2f} s ({count} processes); "
              f"floor (an idle Python ending on SIGINT) {base:.3f} s; target <= 5 s: "
              f"{'met' if took <= 5.0 else 'NOT met'}; load average {load} ({os.cpu_count()} cores)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
