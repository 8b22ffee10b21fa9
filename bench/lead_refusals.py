"""What the lead's memory of its refusals (lead/members/refusals.py) adds to a write to a member's agent.

    .venv/bin/python bench/lead_refusals.py [--n 200] [--burst 100] [--dir /path/on/the/state/disk]

A session-bound write to a member's agent now costs the lead one more SQLite commit (WAL,
synchronous=FULL: one fsync) before its frame goes out: the mark that it was forwarded. A refusal the
lead decides costs one commit too, and every write one lookup. Printed, each beside the floor (an
httpx round trip to a trivial hypercorn + quart-trio server over TCP loopback, same run) and the ratio:
the p50/p99 of a lookup and of one mark made alone (each waiting for its own fsync), and `--burst` marks
made at once (group commit: the calls queued while a batch is on disk share the next transaction) —
the time until the last is on disk and how many transactions they took. Then the load average (the
machine may be shared).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.measure import Floor, loadavg, ms, pct  # noqa: E402
from collie.lead.members.refusals import Refusals  # noqa: E402


class Counting(Refusals):
    batches = 0

    def _run_batch(self, batch):
        Counting.batches += 1
        return Refusals._run_batch(self, batch)


async def measure(folder: Path, n: int, burst: int) -> dict:
    floor = Floor()
    try:
        base = await floor.measure()
    finally:
        floor.close()
    store = Counting(folder / "refusals.sqlite")
    marks, gets = [], []
    for k in range(n):
        t0 = time.perf_counter()
        await store.run(store.forwarded, f"seq-{k}", "fp")
        marks.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await store.run(store.get, f"seq-{k}")
        gets.append(time.perf_counter() - t0)
    Counting.batches = 0
    t0 = time.perf_counter()
    async with trio.open_nursery() as nursery:
        for k in range(burst):
            nursery.start_soon(store.run, store.forwarded, f"burst-{k}", "fp")
    burst_s = time.perf_counter() - t0
    store.close()
    return {"floor_p50": base["p50"], "floor_p99": base["p99"], "get_p50": pct(gets, 50), "get_p99": pct(gets, 99),
            "mark_p50": pct(marks, 50), "mark_p99": pct(marks, 99), "burst": burst, "burst_s": burst_s,
            "burst_batches": Counting.batches, "load": loadavg()}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=200)
    p.add_argument("--burst", type=int, default=100)
    p.add_argument("--dir", type=Path, default=None, help="a folder on the disk the lead's state would be on")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        got = trio.run(measure, Path(d), args.n, args.burst)
    f = got["floor_p50"]
    print(f"floor (loopback HTTP round trip): p50 {ms(f)}, p99 {ms(got['floor_p99'], f)}")
    print(f"lookup of a request id:           p50 {ms(got['get_p50'], f)}, p99 {ms(got['get_p99'], f)}")
    print(f"one forwarded mark (one fsync):   p50 {ms(got['mark_p50'], f)}, p99 {ms(got['mark_p99'], f)}")
    print(f"{got['burst']} marks at once:               last on disk after {ms(got['burst_s'], f)}, "
          f"in {got['burst_batches']} transactions")
    print(got["load"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
