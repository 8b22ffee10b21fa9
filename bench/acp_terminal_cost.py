"""What a terminal's supervisor costs (issue 42 items 6 and 7).

    .venv/bin/python bench/acp_terminal_cost.py [--runs 30]

Each ACP terminal now runs under `crew/acp/reaper.py` (a child subreaper, a Python started with
`-I -S`). Measured in the same run:

1. `terminal`: `terminal/create` of `true` to its `wait_for_exit` answer, through `Terminals`.
2. `floor`: the same command started directly by trio (`/bin/sh -c true`, what a terminal was before),
   to its exit.
3. the supervisor's resident memory (VmRSS) while a terminal runs `sleep`, beside a plain `sleep`'s.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collie.crew.acp.terminals import Terminals  # noqa: E402


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


async def main(runs: int) -> None:
    folder = tempfile.mkdtemp(prefix="acpbench")
    t = Terminals(folder)
    term_ms, floor_ms = [], []
    async with trio.open_nursery() as nursery:
        await nursery.start(t.serve)
        for _ in range(runs):
            start = time.perf_counter()
            tid = (await t.handle("terminal/create", {"sessionId": "s", "command": "true"}))["terminalId"]
            await t.handle("terminal/wait_for_exit", {"sessionId": "s", "terminalId": tid})
            term_ms.append((time.perf_counter() - start) * 1000)
            await t.handle("terminal/release", {"sessionId": "s", "terminalId": tid})

            start = time.perf_counter()
            proc = await trio.lowlevel.open_process(["/bin/sh", "-c", "true"], stdin=subprocess.DEVNULL,
                                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                    start_new_session=True)
            await proc.wait()
            await proc.stdout.aclose()
            floor_ms.append((time.perf_counter() - start) * 1000)
        tid = (await t.handle("terminal/create", {"sessionId": "s", "command": "sleep", "args": ["30"]}))["terminalId"]
        supervisor = t.by_id[tid].proc.pid
        plain = await trio.lowlevel.open_process(["sleep", "30"])
        await trio.sleep(0.2)
        sup_kib, sleep_kib = rss_kib(supervisor), rss_kib(plain.pid)
        plain.kill()
        await plain.wait()
        nursery.cancel_scope.cancel()
    med_t, med_f = statistics.median(term_ms), statistics.median(floor_ms)
    print(f"terminal create→exit, median of {runs}: {med_t:.1f} ms   (floor, the command alone: {med_f:.1f} ms; "
          f"the supervisor adds {med_t - med_f:.1f} ms)")
    print(f"supervisor memory (VmRSS): {sup_kib} KiB   (floor, a plain sleep: {sleep_kib} KiB); "
          f"16 terminals: {16 * sup_kib / 1024:.0f} MiB at most")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=30)
    trio.run(main, ap.parse_args().runs)
