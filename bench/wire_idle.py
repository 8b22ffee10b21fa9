"""Durable wire: idle cost and change latency (issue 3).

    .venv/bin/python bench/wire_idle.py [--quick] [--pane-only] [--samples 200] [--conversations 100] [--repo PATH]

1. Requests per agent per day, idle and viewed, polling vs `watch` — one virtual hour on trio's
   MockClock (the cadence is what is measured; virtual time makes it exact) × 24.
2. Bytes on the socket per idle poll (request + 304 answer), counted by a proxy between bridge and agent.
3. Change latency where the phone sees it (issue 16.4): an agent (its own process) with 100 open
   conversations raises an ask; a client asks the phone's pane route (`GET /api/agents/local/<agent>/conversations/<id>`) of a
   real `collie serve` back to back until the ask is there. Real time, `watch`, beside the floor (an
   httpx round trip to a trivial server on the same stack over TCP loopback, measured in the same run).
   Polling without `watch` is set by the 10 s cadence, not by CPU: measured in virtual time at the
   bridge's view.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import httpx

import trio
import trio.testing

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import Floor, lead_folder, loadavg, ms, pct, start_lead  # noqa: E402

from collie.crew.config import AgentConfig  # noqa: E402
from tests.livelab import ALL_CAPS, agent, bridge_for, cleanup, short_dir  # noqa: E402

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


ASKER = """
import sys, time, trio
from collie.crew.sdk import open_collie
from collie.fixtures.agents import ALL_CAPS
async def main():
    path, n = sys.argv[1], int(sys.argv[2])
    async with open_collie(socket=path, caps=ALL_CAPS, runtime="bench", caller_check="off") as c:
        panes = [c.conversation(f"c{i:03d}", title=f"Conversation {i}") for i in range(n)]
        for p in panes:
            p.reply("hello")
        c.ready()
        print("ready", flush=True)
        target = panes[n // 2]
        stdin = trio.lowlevel.FdStream(0)
        scope = trio.CancelScope()

        async def ask():
            nonlocal scope
            with trio.CancelScope() as scope:
                print(time.perf_counter(), flush=True)  # the ask is raised in this same step
                await target.ask(kind="text", title="?")

        async with trio.open_nursery() as nursery:
            while data := await stdin.receive_some(64):
                for word in data.decode().split():
                    if word == "ask":
                        nursery.start_soon(ask)
                    else:
                        scope.cancel()
            nursery.cancel_scope.cancel()
trio.run(main)
"""


async def pane_latency(samples: int, pause: tuple[float, float], conversations: int, seed: int,
                       floor: Floor, repo: Path = REPO) -> tuple[list[float], list[float]]:
    """An agent (its own process) with `conversations` open raises an ask in one of them; time from the
    raise (its time, CLOCK_MONOTONIC like ours) until the lead's pane route shows it. After each sample,
    three round trips to the floor server: the floor is measured across the same minutes (the load of a
    shared machine moves). Returns (latencies, floor round trips)."""
    d = short_dir()
    lead = asker = None
    out: list[float] = []
    floors: list[float] = []
    try:
        _cfg, state, _run, env = lead_folder(d, {"desk": d / "a.sock"})
        asker = subprocess.Popen([sys.executable, "-c", ASKER, str(d / "a.sock"), str(conversations)],
                                 env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert asker.stdout.readline().strip() == "ready"
        lead, pong = start_lead(env, state, repo)
        token = (d / "state" / "api-token").read_text().strip()
        route = f"/api/agents/local/desk/conversations/c{conversations // 2:03d}"

        def say(word: str) -> None:
            asker.stdin.write(word + "\n")
            asker.stdin.flush()

        async with httpx.AsyncClient(base_url=pong["address"], headers={"authorization": f"Bearer {token}"},
                                     timeout=30) as c, floor.client() as fc:
            for _ in range(10):
                await fc.get("/")
            while (await c.get(route)).status_code != 200:
                await trio.sleep(0.1)
            await trio.sleep(2)  # every conversation's items read and cached
            rng = random.Random(seed)
            for _ in range(samples):
                await trio.sleep(rng.uniform(*pause))
                say("ask")
                while (await c.get(route)).json()["ask"] is None:
                    pass
                seen = time.perf_counter()
                out.append(seen - float(asker.stdout.readline()))
                say("end")
                while (await c.get(route)).json()["ask"] is not None:
                    await trio.sleep(0.005)
                for _ in range(3):
                    t0 = time.perf_counter()
                    await fc.get("/")
                    floors.append(time.perf_counter() - t0)
    finally:
        for proc in (lead, asker):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=20)
        cleanup(d)
    return out, floors


PARSE = """
import sys, time
from collie.bridge.reader import AgentReader
n, reps = int(sys.argv[1]), int(sys.argv[2])
def conv(i, turn):
    return {"id": f"c{i:03d}", "title": f"Conversation {i}", "subtitle": "sub", "workspace": {"id": "w", "title": "Work"},
            "tab": {"id": "t"}, "harness": "h", "state": "idle", "turn": turn, "activity": "2026-11-30T10:00:00Z",
            "asks": [], "actions": [{"id": "go", "label": "Go"}], "items_rev": 1}
r = AgentReader("desk", transport="socket", address="/s", local=True)
r.on_hello({"wire": {"min": 1, "max": 1}, "instance": "i", "caps": ["watch"]}, 0)
convs = [conv(i, 1) for i in range(n)]
r.on_state({"rev": 1, "instance": "i", "conversations": convs}, None, 0)
t0 = time.process_time()
for k in range(reps):
    convs = [dict(c) for c in convs]  # a fresh decode, as from the wire
    convs[n // 2] = conv(n // 2, 2 + k)
    r.on_state({"rev": 2 + k, "instance": "i", "conversations": convs}, None, 0)
print((time.process_time() - t0) / reps)
"""


def parse_cost(conversations: int, repo: Path, reps: int = 300) -> float:
    """CPU seconds the bridge spends applying one state answer in which one conversation changed."""
    out = subprocess.run([sys.executable, "-c", PARSE, str(conversations), str(reps)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(repo)}, cwd=repo, check=True)
    return float(out.stdout)


FULL = {"hours": 1.0, "poll_samples": 200, "samples": 200, "conversations": 100, "parse": (1, 100, 1000)}
QUICK = {"hours": 300 / 3600, "poll_samples": 30, "samples": 20, "conversations": 100, "parse": (100,)}
MODES = (("polling, idle", NO_WATCH, False), ("polling, viewed", NO_WATCH, True),
         ("watch, idle", ALL_CAPS, False), ("watch, viewed", ALL_CAPS, True))
PAUSES = (("isolated", (0.3, 0.6)), ("back-to-back", (0.0, 0.02)))


def run(quick: bool = False, repo: Path = REPO, pane_only: bool = False, samples: int | None = None,
        conversations: int | None = None) -> dict:
    """Every figure of this benchmark as a dict (times in s); `quick` is the small size (python -m bench).
    idle: per mode, state requests per agent per day, bytes per idle poll, 304 answers (virtual time);
    polling_latency: ask -> bridge view, no `watch` (virtual time); parse_us: CPU per state answer by open
    conversations; pane: per pause kind, ask -> pane route p50/p99 with the interleaved floor."""
    o = {**(QUICK if quick else FULL), **({"samples": samples} if samples else {}),
         **({"conversations": conversations} if conversations else {})}
    out: dict = {"sizes": dict(o)}
    repo = Path(repo).resolve()
    if not pane_only:
        seconds = o["hours"] * 3600
        out["idle"] = {}
        for label, caps, viewed in MODES:
            per_day, per_poll, n304 = trio.run(idle_cost, caps, viewed, seconds,
                                               clock=trio.testing.MockClock(autojump_threshold=0))
            out["idle"][label] = {"requests_per_day": per_day, "bytes_per_poll": per_poll, "not_modified": n304}
        poll = trio.run(latency, NO_WATCH, o["poll_samples"], (0, 10), trio.current_time, 7,
                        clock=trio.testing.MockClock(autojump_threshold=0))
        out["polling_latency"] = {"n": len(poll), "p50": pct(poll, 50), "p99": pct(poll, 99)}
    out["parse_us"] = {str(n): parse_cost(n, repo) * 1e6 for n in o["parse"]}
    floor = Floor()
    out["pane"] = {}
    try:
        for label, pause in PAUSES[:1] if quick else PAUSES:
            watch, fl = trio.run(pane_latency, o["samples"], pause, o["conversations"], 3, floor, repo)
            f50 = pct(fl, 50)
            out["pane"][label] = {"n": len(watch), "p50": pct(watch, 50), "p99": pct(watch, 99),
                                  "floor": {"n": len(fl), "p50": f50, "p99": pct(fl, 99)},
                                  "ratio_p50": pct(watch, 50) / f50, "ratio_p99": pct(watch, 99) / f50}
    finally:
        floor.close()
    out["load"] = os.getloadavg()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pane-only", action="store_true", help="only the change latency at the pane route")
    p.add_argument("--quick", action="store_true", help="the small size (python -m bench --quick)")
    p.add_argument("--samples", type=int, default=None, help="asks timed at the pane route (200; 20 with --quick)")
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--repo", default=str(REPO), help="run the lead from this checkout (to measure before a change)")
    args = p.parse_args()
    r = run(args.quick, Path(args.repo), args.pane_only, args.samples, args.conversations)
    if "idle" in r:
        hours = r["sizes"]["hours"]
        print(f"== idle cost per agent (virtual time: {hours * 60:g} min, x {24 / hours:g}) ==")
        for label, x in r["idle"].items():
            print(f"{label:18} {x['requests_per_day']:8.0f} state requests/day   {x['bytes_per_poll']:6.0f} bytes per "
                  f"idle poll (request + 304 answer)   304s: {x['not_modified']}")
        x = r["polling_latency"]
        print("== change latency: agent raises an ask -> bridge view shows it ==")
        print(f"polling (10 s, virtual time, n={x['n']}): p50 {x['p50']:.2f} s  p99 {x['p99']:.2f} s")
    print("== CPU to apply one state answer in which one conversation changed (the bridge's reader) ==")
    for n, us in r["parse_us"].items():
        print(f"{n:>5} open conversations: {us:8.0f} us")
    print("== change latency where the phone sees it: agent raises an ask -> the pane route shows it ==")
    for label, x in r["pane"].items():
        f = x["floor"]
        print(f"watch, {args.conversations} open conversations, {label} changes (real time, n={x['n']}): "
              f"p50 {ms(x['p50'], f['p50'])}  p99 {ms(x['p99'], f['p50'])}; "
              f"floor (n={f['n']}, interleaved) p50 {ms(f['p50'])} p99 {ms(f['p99'])}")
    print(loadavg())


if __name__ == "__main__":
    main()
