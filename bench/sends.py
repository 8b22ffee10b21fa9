"""Sends through the bridge to 100 conversations at once, journal on (issue 4).

    .venv/bin/python bench/sends.py [--conversations 100] [--rounds 10]

A real `collie serve` and a real `many` fixture agent (echoes every send and ends its turn). Each
round sends one message to every conversation at once through POST /api/send (each quoting the
turn of its conversation's last receipt). Prints throughput and the p50/p99 of phone → receipt.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from crew import control  # noqa: E402
from crew.errors import NotRunningError  # noqa: E402


errors: list[tuple] = []




async def run(address: str, token: str, n: int, rounds: int) -> tuple[list[float], float, dict]:
    latencies: list[float] = []
    outcomes: dict[str, int] = {}
    errors.clear()
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=60,
                                 limits=limits) as c:
        turns = {}
        for i in range(n):
            while (pane := await c.get(f"/api/agents/local/many/conversations/c{i:03d}")).status_code != 200:
                await trio.sleep(0.1)  # the bridge has not read this conversation yet
            turns[i] = pane.json()["turn"]

        async def one(i: int, r: int) -> None:
            t0 = time.perf_counter()
            try:
                resp = await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": "many",
                                                       "conversation": f"c{i:03d}", "text": f"round {r}",
                                                       "turn": turns[i]})
                if resp.status_code != 200:
                    errors.append((r, i, resp.status_code, resp.text[:120]))
                    return
                got = resp.json()
            except httpx.HTTPError as exc:
                errors.append((r, i, round(time.perf_counter() - t0, 3), type(exc).__name__, str(exc)[:80]))
                return
            latencies.append(time.perf_counter() - t0)
            outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
            if got.get("turn") is not None and got["outcome"] == "sent":
                turns[i] = got["turn"]

        start = time.perf_counter()
        for r in range(rounds):
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i, r)
            await trio.sleep(0.3)  # let the echo turns end before the next round
        wall = time.perf_counter() - start - 0.3 * rounds
    return latencies, wall, outcomes


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))
    os.chmod(base, 0o700)
    cfg, state, run_dir = base / "cfg", base / "state", base / "run"
    cfg.mkdir(mode=0o700)
    run_dir.mkdir(mode=0o700)
    sock = run_dir / "many.sock"
    (cfg / "sources.json").write_text(json.dumps([{"name": "many", "kind": "durable", "socket": str(sock)}]))
    os.chmod(cfg / "sources.json", 0o600)
    env = {**os.environ, "COLLIE_CONFIG_DIR": str(cfg), "COLLIE_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    agent = subprocess.Popen([sys.executable, "-m", "fixtures", "many", "--socket", str(sock), "--conversations",
                              str(args.conversations)], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().startswith("listening")
    bridge_err = open(base / "bridge.stderr", "w")
    bridge = subprocess.Popen([sys.executable, "-m", "lead", "--port", "0"], env=env, cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=bridge_err)
    try:
        while True:
            try:
                pong = control.call(state / "bridge.sock", "ping", timeout=2)
                if control.call(state / "bridge.sock", "agents")["agents"][0]["status"] == "ready":
                    break
            except NotRunningError:
                pass
            time.sleep(0.1)
        time.sleep(1)
        token = (state / "api-token").read_text().strip()
        latencies, wall, outcomes = trio.run(run, pong["address"], token, args.conversations, args.rounds)
        total = len(latencies)
        print(f"{total} sends to {args.conversations} conversations at once ({args.rounds} rounds), journal on "
              f"(SQLite WAL, synchronous=FULL)")
        print(f"outcomes: {outcomes}; transport errors: {len(errors)} {errors[:5]}")
        print(f"throughput: {total / wall:.0f} sends/s")
        print(f"phone -> receipt latency: p50 {pct(latencies, 50) * 1000:.1f} ms  p99 {pct(latencies, 99) * 1000:.1f} ms"
              f"  mean {statistics.mean(latencies) * 1000:.1f} ms")
    except BaseException:
        bridge_err.flush()
        print("bridge alive:", bridge.poll() is None)
        print(Path(base / "bridge.stderr").read_text()[-3000:])
        raise
    finally:
        bridge.terminate()
        bridge.wait(timeout=20)
        agent.terminate()
        agent.wait(timeout=20)
        if not errors:
            subprocess.run(["rm", "-rf", str(base)])
        else:
            print("kept", base)


if __name__ == "__main__":
    main()
