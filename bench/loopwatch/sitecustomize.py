"""Benchmark-only: record how long each step of a trio event loop takes, in the process under test.

A process started with this folder first on PYTHONPATH and COLLIE_BENCH_LOOPWATCH=<file> appends
one line `wall_time wall_s cpu_s task_name` to <file> for every task step longer than 2 ms (wall):
the step's wall time (the loop could answer nothing else; on a busy machine it includes time the
process was not scheduled and waits for the GIL) and the CPU time the loop's thread spent in it
(the work the step did). bench/crew_snapshot.py reads it. Nothing in Collie
imports this; it only wraps `trio.run` in the process it is loaded into.
"""

import os

_path = os.environ.get("COLLIE_BENCH_LOOPWATCH")
if _path:
    import time

    import trio

    class _LoopWatch(trio.abc.Instrument):
        def __init__(self) -> None:
            self.began = self.cpu = 0.0
            self.out = open(_path, "a", buffering=1)  # noqa: SIM115 - open for the process's life

        def before_task_step(self, task) -> None:
            self.began, self.cpu = time.perf_counter(), time.thread_time()

        def after_task_step(self, task) -> None:
            took = time.perf_counter() - self.began
            if took > 0.002:
                self.out.write(f"{time.time():.6f} {took:.6f} {time.thread_time() - self.cpu:.6f} {task.name}\n")

    import gc
    import threading

    _gc_began = {}

    def _gc_watch(phase, info):  # collections of 5 ms or more, by generation and thread
        me = threading.get_ident()
        if phase == "start":
            _gc_began[me] = time.perf_counter()
        elif me in _gc_began:
            took = time.perf_counter() - _gc_began.pop(me)
            if took > 0.005:
                main = "loop" if me == threading.main_thread().ident else "worker"
                with open(_path, "a") as out:
                    out.write(f"{time.time():.6f} gc {took:.6f} gen{info['generation']}-{main}\n")

    gc.callbacks.append(_gc_watch)
    _run = trio.run

    def run(*args, **kwargs):
        kwargs["instruments"] = [*kwargs.get("instruments", ()), _LoopWatch()]
        return _run(*args, **kwargs)

    trio.run = run
