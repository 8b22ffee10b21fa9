"""Fault figures for issue 4: trials x crash points, duplicates (must be 0), lost acknowledged writes (must be 0).

    .venv/bin/python bench/faults.py [--random 20] [--burst 40]

Every journal write point (after_begin, after_send, after_finish) at several positions in the burst,
with and without an agent restart, plus random kill -9 moments. See tests/faultlab.py.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.faultlab import trial  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--random", type=int, default=20, help="trials killed at a random moment")
    p.add_argument("--burst", type=int, default=40)
    args = p.parse_args()
    cases = [(f"{point}:{n}", None, restart) for point in ("after_begin", "after_send", "after_finish")
             for n in (1, 3, 7, 15) for restart in (False, True)]
    rng = random.Random(11)
    cases += [(None, rng.uniform(0.05, 0.6), rng.random() < 0.5) for _ in range(args.random)]
    totals = {"trials": 0, "crashed": 0, "requests": 0, "acked": 0, "duplicates": 0, "losses": 0}
    t0 = time.monotonic()
    for i, (crash_at, delay, restart) in enumerate(cases):
        base = Path(tempfile.mkdtemp(prefix="cf", dir="/tmp"))
        os.chmod(base, 0o700)
        r = trial(base, crash_at=crash_at, random_kill=delay, restart_agent=restart, seed=i, burst=args.burst)
        for key in ("requests", "acked", "duplicates", "losses"):
            totals[key] += r[key]
        totals["trials"] += 1
        totals["crashed"] += bool(r["crashed"])
        where = crash_at or f"random kill at {delay:.2f} s"
        print(f"[{i + 1}/{len(cases)}] {where:28} agent restarted: {'yes' if restart else 'no ':3}  requests {r['requests']:3}"
              f"  acked {r['acked']:3}  duplicates {r['duplicates']}  losses {r['losses']}", flush=True)
    print(f"== {totals['trials']} trials ({totals['crashed']} with the bridge killed mid-burst), "
          f"{totals['requests']} requests, {totals['acked']} acknowledged: "
          f"duplicates {totals['duplicates']}, lost acknowledged writes {totals['losses']} "
          f"({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
