"""What a test written with the testing kit costs (issue 40, docs/testing.md): each figure beside its floor.

    .venv/bin/python -m bench.kit [--runs 5]

Copies docs/examples/test_crew_lab.py (a lead, one fake member, an ask answered and a send queued while
the member is offline) into a fresh folder with a second file (a lead and two fake members, nothing
else), runs `pytest --collie` on it `--runs` times, and prints the median setup, call and teardown of
each test as pytest measures them (`--durations`), and the whole run's wall time. The floor is the same
pytest run on a file whose only test does nothing: what pytest and the interpreter cost by themselves.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TWO_MEMBERS = '''
def test_a_lead_and_two_fake_members(collie_lead, fake_member):
    fake_member("laptop")
    fake_member("studio")
    assert sorted(m["label"] for m in collie_lead.members()) == ["laptop", "studio"]
'''
EMPTY = "def test_nothing():\n    pass\n"
PHASE = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+\S+::(\S+)$", re.M)


def pytest_run(folder: Path, *files: str) -> tuple[float, dict]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COLLIE_", "PYTEST_"))}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--collie",
                           "--durations=0", "--durations-min=0", *files], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"pytest failed:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    return wall, {(m[3], m[2]): float(m[1]) for m in PHASE.finditer(done.stdout)}


def main() -> int:
    p = argparse.ArgumentParser(prog="python -m bench.kit", description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=5)
    runs = p.parse_args().runs
    folder = Path(tempfile.mkdtemp(prefix="collie-kit-bench-"))
    try:
        shutil.copy(REPO / "docs" / "examples" / "test_crew_lab.py", folder / "test_crew_lab.py")
        (folder / "test_two.py").write_text(TWO_MEMBERS)
        (folder / "test_empty.py").write_text(EMPTY)
        walls, floors, phases = [], [], {}
        for _ in range(runs):
            floors.append(pytest_run(folder, "test_empty.py")[0])
            wall, seen = pytest_run(folder, "test_crew_lab.py", "test_two.py")
            walls.append(wall)
            for key, value in seen.items():
                phases.setdefault(key, []).append(value)
        print(f"load average {os.getloadavg()[0]:.1f}, {runs} runs, medians")
        for (test, phase), values in sorted(phases.items()):
            if test != "test_nothing":
                print(f"  {test:<60} {phase:<8} {statistics.median(values):6.2f} s")
        print(f"  whole run (2 tests)   {statistics.median(walls):6.2f} s   "
              f"floor (pytest, one empty test) {statistics.median(floors):6.2f} s")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
