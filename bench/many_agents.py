"""One bridge, 50 agents x 100 open conversations, idle: the bridge process's CPU and memory (issue 3).

    .venv/bin/python bench/many_agents.py [--agents 50] [--conversations 100] [--seconds 60] [--no-watch] [--repo PATH]

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

from crew import control  # noqa: E402
from crew.errors import NotRunningError  # noqa: E402

HOST = """
import sys, trio
from bench.measure import run_agents
from fixtures.agents import ALL_CAPS
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--no-watch", action="store_true")
    p.add_argument("--repo", default=str(REPO), help="run the bridge from this checkout")
    args = p.parse_args()
    lead_repo = Path(args.repo).resolve()
    base = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    _cfg, state, run, env = lead_folder(base, {f"a{a:02d}": base / "run" / f"a{a:02d}.sock" for a in range(args.agents)})
    host = subprocess.Popen([sys.executable, "-c", HOST, str(run), str(args.agents), str(args.conversations),
                             "0" if args.no_watch else "1"], env=env, stdout=subprocess.PIPE, text=True)
    assert host.stdout.readline().strip() == "ready"
    t0 = time.monotonic()
    bridge, _pong = start_lead(env, state, lead_repo)
    floor = Floor(f"unix:{base / 'floor.sock'}")
    try:
        while True:
            try:
                agents = control.call(state / "bridge.sock", "agents", timeout=2)["agents"]
                if agents and all(a["status"] == "ready" for a in agents):
                    break
            except NotRunningError:
                pass
            time.sleep(0.1)
        ready_s = time.monotonic() - t0
        opened = sum(a["open_count"] for a in agents)
        names = [f"a{a:02d}" for a in range(args.agents)]
        while not all(cached(state, n) >= args.conversations for n in names):
            time.sleep(0.2)  # warm-up: every conversation's items read and written to the cache
        warm_s = time.monotonic() - t0
        time.sleep(1)
        f = trio.run(floor.measure, 500)
        r0 = control.call(state / "bridge.sock", "program", timeout=5)["reads"]
        c0, w0 = cpu_seconds(bridge.pid), time.monotonic()
        time.sleep(args.seconds)
        c1, w1 = cpu_seconds(bridge.pid), time.monotonic()
        r1 = control.call(state / "bridge.sock", "program", timeout=5)["reads"]
        polls = max(r1 - r0, 1)
        mode = "polling every 10 s" if args.no_watch else "watch long-poll"
        print(f"{args.agents} agents x {args.conversations} open conversations ({opened} in all), {mode}")
        print(f"every agent ready after {ready_s:.2f} s (bridge start, hello and first state read)")
        print(f"idle bridge CPU: {100 * (c1 - c0) / (w1 - w0):.2f} % of one core over {w1 - w0:.0f} s "
              f"({c1 - c0:.2f} CPU-s)")
        print(f"every cache written after {warm_s:.2f} s; the idle window starts after that")
        per_poll = (c1 - c0) / polls
        print(f"idle polls: {r1 - r0} in {w1 - w0:.0f} s; CPU per idle poll {per_poll * 1000:.2f} ms "
              f"({per_poll / f['cpu']:.2f}x floor); floor: httpx client CPU per round trip over a Unix socket "
              f"{f['cpu'] * 1000:.2f} ms (round trip p50 {f['p50'] * 1000:.2f} ms)")
        print(f"bridge RSS: {rss_mib(bridge.pid):.1f} MiB; bridge from {lead_repo}")
        print(loadavg())
    finally:
        floor.close()
        bridge.terminate()
        bridge.wait(timeout=20)
        host.terminate()
        host.wait(timeout=20)
        subprocess.run(["rm", "-rf", str(base)])


if __name__ == "__main__":
    main()
