"""A trio Instrument that catches a task step blocking the event loop (issue 16.2).

Every task step (from a checkpoint to the next) runs on the one trio thread; while it runs, no other
request, read or timer can. `LoopWatch` times each step and remembers the ones longer than `limit`.

Time spent waiting for a CPU that another process holds (the machine is shared) is not the code's
doing, so it is subtracted: Linux reports each thread's run-queue wait in
`/proc/self/task/<tid>/schedstat` (second field, ns). What is left is time the step kept the loop
busy or blocked it (CPU work, a synchronous fsync, a lock) — the defect this watch exists to find.

    with LoopWatch() as watch:        # or the `loopwatch` fixture (tests/conftest.py)
        ...                           # inside trio.run
    assert not watch.slow, watch.report()
"""

from __future__ import annotations

import gc
import os
import threading
import time

import trio

LIMIT = 0.020  # 20 ms


class LoopWatch(trio.abc.Instrument):
    def __init__(self, limit: float = LIMIT) -> None:
        self.limit = limit
        self.slow: list[tuple[str, float, float]] = []  # (task name, blocked seconds, of which GC)
        self.steps = 0
        self.longest = 0.0
        self._fd: int | None = None
        self._t0: float | None = None  # None: the step in which the watch was added (not timed)
        self._wait0 = 0
        self._gc_t0 = 0.0
        self._gc_in_step = 0.0  # seconds the collector ran inside the current step (reported beside it)

    def _runqueue_wait(self) -> int:
        if self._fd is None:
            return 0
        try:
            return int(os.pread(self._fd, 64, 0).split()[1])
        except (OSError, IndexError, ValueError):
            return 0

    def before_run(self) -> None:
        self.open()

    def open(self) -> None:
        if self._fd is None:
            try:
                self._fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
            except OSError:
                self._fd = None  # no schedstat: wall time only

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_t0 = time.perf_counter()
        else:
            self._gc_in_step += time.perf_counter() - self._gc_t0

    def before_task_step(self, task) -> None:
        self._wait0 = self._runqueue_wait()
        self._gc_in_step = 0.0
        self._t0 = time.perf_counter()

    def after_task_step(self, task) -> None:
        if self._t0 is None:
            return
        wall = time.perf_counter() - self._t0
        self.steps += 1
        if wall <= self.limit:
            self.longest = max(self.longest, wall)
            return
        blocked = wall - (self._runqueue_wait() - self._wait0) / 1e9
        self.longest = max(self.longest, blocked)
        if blocked > self.limit:
            self.slow.append((task.name, blocked, self._gc_in_step))

    def arm(self) -> None:
        """Start judging from here: start-up (opening databases, making clients) is not service."""
        self.slow.clear()
        self.steps = 0
        self.longest = 0.0

    def report(self) -> str:
        worst = sorted(self.slow, key=lambda s: -s[1])[:10]
        lines = [f"{len(self.slow)} of {self.steps} task steps blocked the loop over {self.limit * 1000:.0f} ms:"]
        lines += [f"  {ms * 1000:7.1f} ms  {name}" + (f"  (of which the garbage collector {gc_s * 1000:.1f} ms)"
                                                    if gc_s else "") for name, ms, gc_s in worst]
        return "\n".join(lines)

    # used inside a running trio.run (the fixture): add and remove itself
    def __enter__(self) -> "LoopWatch":
        self.open()
        gc.callbacks.append(self._gc)
        trio.lowlevel.add_instrument(self)
        return self

    def __exit__(self, *exc) -> None:
        trio.lowlevel.remove_instrument(self)
        gc.callbacks.remove(self._gc)
        self.close()
