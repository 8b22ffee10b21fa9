"""One bridge, 50 agents x 100 open conversations, idle: the bridge process's CPU and memory (issue 3).

    .venv/bin/python bench/many_agents.py [--agents 50] [--conversations 100] [--seconds 60] [--no-watch] [--repo PATH]
    .venv/bin/python -m bench --only idle      (`run()`: 120 s idle; `--quick`: 20 x 10 polling, 25 s)

The agents run in one separate process (50 SDK agents on 50 sockets); the bridge is a real
`collie serve` process reading them through sources.json. The idle window starts only once every agent
is ready *and* every agent's cache holds all its conversations (start-up reads and cache writes are
over: issue 16.4); then the bridge's CPU time (utime+stime from /proc), its reads of the agents (the
control socket's `program` op) and its RSS are read over the window. CPU per idle poll stands beside
the floor: the CPU an httpx client spends on one round trip to a trivial server over a Unix socket,
measured in the same run. `--repo PATH` runs the bridge from another checkout (to measure before a change).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sqlite3  # noqa: E402

import trio  # noqa: E402
from measure import Floor, cpu_seconds, lead_folder, loadavg, rss_mib, start_lead  # noqa: E402

from collie.crew import control  # noqa: E402
from collie.crew.errors import NotRunningError  # noqa: E402

HOST = """
import sys, trio
from bench.measure import run_agents
from collie.fixtures.agents import ALL_CAPS
async def main():
    folder, agents, n, watch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    caps = ALL_CAPS if watch else [c for c in ALL_CAPS if c != "watch"]
    await run_agents(folder, agents, n, "ready", caps=caps, runtime="bench", caller_check="off")
trio.run(main)
"""


def cached(state: Path, name: str) -> int:
    """How many conversations the agent's cache holds (0 while it does not exist yet)."""
    path = state / "durable" / name / "cache.sqlite"
    if not path.exists():
        return 0
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
        try:
            return db.execute("SELECT COUNT(*) FROM logs").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def run(quick: bool = False, *, agents: int | None = None, conversations: int | None = None,
        seconds: float | None = None, watch: bool | None = None, repo: str | Path = REPO) -> dict:
    """The figures as a dict (CPU in seconds). Full: 50 agents x 100 conversations, `watch`, 120 s idle;
    `quick`: 20 x 10 polling every 10 s, 25 s (a smoke run for CI: about 50 polls, and the CPU clock
    counts in 10 ms steps, so its ratio is rough)."""
    agents = agents or (20 if quick else 50)
    conversations = conversations or (10 if quick else 100)
    seconds = seconds or (25.0 if quick else 120.0)
    watch = (not quick) if watch is None else watch
    lead_repo = Path(repo).resolve()
    base = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    _cfg, state, run_dir, env = lead_folder(base, {f"a{a:02d}": base / "run" / f"a{a:02d}.sock" for a in range(agents)})
    host = subprocess.Popen([sys.executable, "-c", HOST, str(run_dir), str(agents), str(conversations),
                             "1" if watch else "0"], env=env, stdout=subprocess.PIPE, text=True)
    bridge = floor = None
    try:
        assert host.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        bridge, _pong = start_lead(env, state, lead_repo)
        floor = Floor(f"unix:{base / 'floor.sock'}")
        while True:
            try:
                listed = control.call(state / "bridge.sock", "agents", timeout=2)["agents"]
                if listed and all(a["status"] == "ready" for a in listed):
                    break
            except NotRunningError:
                pass
            time.sleep(0.1)
        ready_s = time.monotonic() - t0
        opened = sum(a["open_count"] for a in listed)
        names = [f"a{a:02d}" for a in range(agents)]
        while not all(cached(state, n) >= conversations for n in names):
            time.sleep(0.2)  # warm-up: every conversation's items read and written to the cache
        warm_s = time.monotonic() - t0
        time.sleep(1)
        f = trio.run(floor.measure, 500)
        r0 = control.call(state / "bridge.sock", "program", timeout=5)["reads"]
        c0, w0 = cpu_seconds(bridge.pid), time.monotonic()
        time.sleep(seconds)
        c1, w1 = cpu_seconds(bridge.pid), time.monotonic()
        r1 = control.call(state / "bridge.sock", "program", timeout=5)["reads"]
        polls = max(r1 - r0, 1)
        return {"agents": agents, "conversations": conversations, "open": opened, "watch": watch,
                "quick": quick, "ready_s": ready_s, "warm_s": warm_s, "window_s": w1 - w0, "cpu_s": c1 - c0,
                "cpu_share": (c1 - c0) / (w1 - w0), "polls": r1 - r0, "cpu_per_poll": (c1 - c0) / polls,
                "floor": f, "rss_mib": rss_mib(bridge.pid), "repo": str(lead_repo), "load": loadavg()}
    finally:
        if floor is not None:
            floor.close()
        for proc in (bridge, host):
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=20)
        subprocess.run(["rm", "-rf", str(base)])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--no-watch", action="store_true")
    p.add_argument("--repo", default=str(REPO), help="run the bridge from this checkout")
    args = p.parse_args()
    r = run(agents=args.agents, conversations=args.conversations, seconds=args.seconds, watch=not args.no_watch,
            repo=args.repo)
    f = r["floor"]
    mode = "watch long-poll" if r["watch"] else "polling every 10 s"
    print(f"{r['agents']} agents x {r['conversations']} open conversations ({r['open']} in all), {mode}")
    print(f"every agent ready after {r['ready_s']:.2f} s (bridge start, hello and first state read)")
    print(f"idle bridge CPU: {100 * r['cpu_share']:.2f} % of one core over {r['window_s']:.0f} s "
          f"({r['cpu_s']:.2f} CPU-s)")
    print(f"every cache written after {r['warm_s']:.2f} s; the idle window starts after that")
    print(f"idle polls: {r['polls']} in {r['window_s']:.0f} s; CPU per idle poll {r['cpu_per_poll'] * 1000:.2f} ms "
          f"({r['cpu_per_poll'] / f['cpu']:.2f}x floor); floor: httpx client CPU per round trip over a Unix socket "
          f"{f['cpu'] * 1000:.2f} ms (round trip p50 {f['p50'] * 1000:.2f} ms)")
    print(f"bridge RSS: {r['rss_mib']:.1f} MiB; bridge from {r['repo']}")
    print(r["load"])


if __name__ == "__main__":
    main()
