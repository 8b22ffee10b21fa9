"""Durable wire: idle cost and change latency (issue 3).

    .venv/bin/python bench/wire_idle.py

1. Requests per agent per day, idle and viewed, polling vs `watch` — one virtual hour on trio's
   MockClock (the cadence is what is measured; virtual time makes it exact) × 24.
2. Bytes on the socket per idle poll (request + 304 answer), counted by a proxy between bridge and agent.
3. Change latency (agent raises an ask → the bridge's view shows it): `watch` in real time;
   polling in virtual time (it is set by the 10 s cadence, not by CPU).
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import trio
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from crew.config import AgentConfig  # noqa: E402
from tests.live import ALL_CAPS, agent, bridge_for, cleanup, short_dir  # noqa: E402

NO_WATCH = [c for c in ALL_CAPS if c != "watch"]


class Proxy:
    """Unix-socket proxy that counts bytes each way and exchanges (requests)."""

    def __init__(self, front: Path, back: Path) -> None:
        self.front, self.back = front, back
        self.up = self.down = 0

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        sock = trio.socket.socket(trio.socket.AF_UNIX)
        await sock.bind(str(self.front))
        self.front.chmod(0o600)
        sock.listen(16)
        listener = trio.SocketListener(sock)
        task_status.started()
        await trio.serve_listeners(self._handle, [listener])

    async def _handle(self, client) -> None:
        server = await trio.open_unix_socket(str(self.back))

        async def pump(src, dst, up: bool) -> None:
            try:
                while data := await src.receive_some(65536):
                    if up:
                        self.up += len(data)
                    else:
                        self.down += len(data)
                    await dst.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                await dst.aclose()

        async with trio.open_nursery() as n:
            n.start_soon(pump, client, server, True)
            n.start_soon(pump, server, client, False)


async def idle_cost(caps, viewed: bool, seconds: float) -> tuple[float, float, int]:
    d = short_dir()
    try:
        async with agent(d / "a.sock", caps=caps) as collie:
            collie.conversation("c", title="Chat").reply("hello")
            collie.ready()
            proxy = Proxy(d / "p.sock", d / "a.sock")
            async with trio.open_nursery() as n:
                await n.start(proxy.serve)
                async with bridge_for([AgentConfig("desk", socket=str(d / "p.sock"))], d) as b:
                    await trio.sleep(5)  # hello, first read, items
                    b.set_viewing("desk", viewed)
                    await trio.sleep(1)
                    start_calls = len(collie.recorder.times("/v1/state"))
                    up0, down0 = proxy.up, proxy.down
                    await trio.sleep(seconds)
                    polls = len(collie.recorder.times("/v1/state")) - start_calls
                    stats = b.statistics()["desk"]
                n.cancel_scope.cancel()
        per_day = polls * 86400 / seconds
        return per_day, (proxy.up - up0 + proxy.down - down0) / max(polls, 1), stats["not_modified"]
    finally:
        cleanup(d)


async def latency(caps, samples: int, pause: tuple[float, float], clock, seed: int) -> list[float]:
    """Raise an ask after a random pause, time until the bridge's view shows it, let it close; repeat.
    `clock` is trio.current_time on virtual time (polling) or time.perf_counter (real time)."""
    d = short_dir()
    out = []
    try:
        async with agent(d / "a.sock", caps=caps) as collie:
            pane = collie.conversation("c")
            collie.ready()
            async with bridge_for([AgentConfig("desk", socket=str(d / "a.sock"))], d) as b:
                while b.status("desk").status != "ready":
                    await b.wait_changed()
                await trio.sleep(0.3)
                rng = random.Random(seed)
                for _ in range(samples):
                    await trio.sleep(rng.uniform(*pause))
                    async with trio.open_nursery() as n:
                        n.start_soon(lambda: pane.ask(kind="text", title="?"))
                        await trio.sleep(0)  # the ask is raised now
                        t0 = clock()
                        while b.status("desk").waiting_count == 0:
                            await b.wait_changed()
                        out.append(clock() - t0)
                        n.cancel_scope.cancel()
                    while b.status("desk").waiting_count:
                        await b.wait_changed()
    finally:
        cleanup(d)
    return out


def main() -> None:
    hour = 3600.0
    print("== idle cost per agent (one virtual hour x 24) ==")
    for label, caps, viewed in (("polling, idle", NO_WATCH, False), ("polling, viewed", NO_WATCH, True),
                                ("watch, idle", ALL_CAPS, False), ("watch, viewed", ALL_CAPS, True)):
        per_day, per_poll, n304 = trio.run(idle_cost, caps, viewed, hour,
                                           clock=trio.testing.MockClock(autojump_threshold=0))
        print(f"{label:18} {per_day:8.0f} state requests/day   {per_poll:6.0f} bytes per idle poll "
              f"(request + 304 answer)   304s: {n304}")
    print("== change latency: agent raises an ask -> bridge view shows it ==")
    poll = trio.run(latency, NO_WATCH, 200, (0, 10), trio.current_time, 7,
                    clock=trio.testing.MockClock(autojump_threshold=0))
    print(f"polling (10 s, virtual time, n={len(poll)}): p50 {pct(poll, 50):.2f} s  p99 {pct(poll, 99):.2f} s")
    for label, pause in (("isolated changes", (0.3, 0.6)), ("back-to-back (inside the 0.2 s read gap)", (0.0, 0.02))):
        watch = trio.run(latency, ALL_CAPS, 200, pause, time.perf_counter, 3)
        print(f"watch, {label} (real time, n={len(watch)}): p50 {pct(watch, 50) * 1000:.1f} ms  "
              f"p99 {pct(watch, 99) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
