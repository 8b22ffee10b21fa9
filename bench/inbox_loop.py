"""The lead's event-loop steps while the inbox takes load, beside the floor (issues 16.2, 41).

    .venv/bin/python bench/inbox_loop.py [--runs 3]

Runs the two load scenarios of tests/live/test_inbox_live.py in one process — 100 sends at once to 10
agents x 10 conversations, and 300 requests waiting for one busy agent — with tests/loopwatch.py's
LoopWatch armed once the lab is ready, and prints per scenario: task steps, the longest step (its
run-queue wait on a busy machine subtracted) and how many blocked the loop over 20 ms (issue 16.2's
target: none). The floor, measured in the same run: the longest step of 2,000 tasks that do nothing
but checkpoint, in a trio run of their own — what the machine's load and the collector alone cost a
step. The load average is printed beside each run. The scenarios' own assertions (every send answered
once, in order) still hold here; these figures used to be a test's assertion, and failed 1 run in 4 on
a loaded machine (issue 41).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.measure import runs_from  # noqa: E402
from tests.livelab import test_inbox_live as scenarios  # noqa: E402
from tests.livelab import cleanup  # noqa: E402
from tests.loopwatch import LIMIT, LoopWatch  # noqa: E402

SCENARIOS = {
    "100 sends at once (10 agents x 10 conversations)":
        scenarios.test_a_hundred_sends_at_once_are_each_answered_and_reach_their_agent_once,
    "300 requests waiting for one busy agent":
        scenarios.test_three_hundred_requests_waiting_for_one_agent_are_each_queued_and_listed_in_order,
}


async def floor(tasks: int = 2000, steps: int = 20) -> LoopWatch:
    """Tasks that only checkpoint: the longest such step is the machine's share, not the code's."""
    with LoopWatch() as watch:
        watch.arm()
        async with trio.open_nursery() as n:
            for _ in range(tasks):
                n.start_soon(_idle, steps)
    return watch


async def _idle(steps: int) -> None:
    for _ in range(steps):
        await trio.lowlevel.checkpoint()


async def scenario(fn) -> LoopWatch:
    tmp = Path(tempfile.mkdtemp(prefix="il", dir="/tmp"))
    try:
        with LoopWatch() as watch:
            await fn(tmp, watch)
        return watch
    finally:
        cleanup(tmp)


def line(name: str, watch: LoopWatch) -> str:
    return (f"{name}: {watch.steps:,} steps, longest {watch.longest * 1000:.1f} ms, "
            f"{len(watch.slow)} over {LIMIT * 1000:.0f} ms")


def main(argv: list[str] | None = None) -> int:
    for run in range(1, runs_from(__doc__, argv, "times to run each scenario") + 1):
        print(f"run {run}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} cores)")
        print("  " + line("floor (2,000 tasks that only checkpoint)", trio.run(floor)))
        for name, fn in SCENARIOS.items():
            watch = trio.run(scenario, fn)
            print("  " + line(name, watch))
            for task, blocked, gc_s in sorted(watch.slow, key=lambda s: -s[1])[:3]:
                print(f"      {blocked * 1000:.1f} ms {task}" + (f" (collector {gc_s * 1000:.1f} ms)" if gc_s else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
