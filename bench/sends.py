"""Sends through the lead to a real agent, journal on (issues 4, 16.4).

    .venv/bin/python bench/sends.py [--conversations 100] [--rounds 10] [--turn-ms 0] [--repo PATH]
    .venv/bin/python bench/sends.py --queued 100 --turn-ms 20

A real `collie serve` and a real `many` fixture agent (echoes every send and ends its turn, after
`--turn-ms`). Each round sends one message to every conversation at once through POST /api/send (each
quoting the turn of its conversation's last receipt). `--queued N` instead sends N messages at once to
one conversation. Prints the p50/p99 of phone → receipt beside the floor (an httpx round trip to a
trivial server on the same stack over TCP loopback, measured in the same run), and — measured where
the work is done, the agent's own count of turns its sends started (`GET /v1/state` on its socket) —
how many sends reached the agent and how fast. The load average is the machine's at the end.
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

from measure import Floor, loadavg, ms, pct  # noqa: E402

from crew import control  # noqa: E402
from crew.errors import NotRunningError  # noqa: E402


errors: list[tuple] = []




async def agent_count(sock: Path) -> int:
    """The agent's own count: turns started by sends, over all its conversations."""
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), base_url="http://agent") as a:
        state = (await a.get("/v1/state")).json()
    return sum(c["turn"] for c in state["conversations"])


async def delivered(sock: Path, start_count: int, expected: int, t0: float, limit: float = 300) -> tuple[int, float]:
    """Wait until the agent counts `expected` more turns (or `limit` s): (count, seconds since t0)."""
    got = await agent_count(sock) - start_count
    while got < expected and time.perf_counter() - t0 < limit:
        await trio.sleep(0.005)
        got = await agent_count(sock) - start_count
    return got, time.perf_counter() - t0


async def run_queued(address: str, token: str, sock: Path, n: int) -> dict:
    """N sends at once to one conversation: receipts, then how fast they reach the agent."""
    latencies: list[float] = []
    outcomes: dict[str, int] = {}
    limits = httpx.Limits(max_connections=n, max_keepalive_connections=n)
    async with httpx.AsyncClient(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=60,
                                 limits=limits) as c:
        while (pane := await c.get("/api/agents/local/many/conversations/c000")).status_code != 200:
            await trio.sleep(0.1)
        turn = pane.json()["turn"]
        start_count = await agent_count(sock)

        async def one(k: int) -> None:
            t = time.perf_counter()
            resp = await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": "many",
                                                   "conversation": "c000", "text": f"q{k}", "turn": turn})
            latencies.append(time.perf_counter() - t)
            got = resp.json()
            outcomes[got.get("outcome", resp.status_code)] = outcomes.get(got.get("outcome", resp.status_code), 0) + 1

        t0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(n):
                nursery.start_soon(one, k)
        accepted = outcomes.get("sent", 0) + outcomes.get("queued", 0)
        count, took = await delivered(sock, start_count, accepted, t0)
    return {"latencies": latencies, "outcomes": outcomes, "delivered": count, "took": took}


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
    p.add_argument("--queued", type=int, default=0, help="send this many at once to one conversation instead")
    p.add_argument("--turn-ms", type=float, default=0, help="the agent's own time per turn")
    p.add_argument("--repo", default=str(REPO), help="run the lead from this checkout")
    args = p.parse_args()
    lead_repo = Path(args.repo).resolve()
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
                              str(args.conversations), "--turn-ms", str(args.turn_ms)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().startswith("listening")
    bridge_err = open(base / "bridge.stderr", "w")
    bridge = subprocess.Popen([sys.executable, "-m", "lead", "--port", "0"], env={**env, "PYTHONPATH": str(lead_repo)},
                              cwd=lead_repo, stdout=subprocess.DEVNULL, stderr=bridge_err)
    floor = Floor()
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
        f = trio.run(floor.measure)
        floor_line = f"floor (httpx round trip to a trivial server, TCP loopback): p50 {ms(f['p50'])}  p99 {ms(f['p99'])}"
        if args.queued:
            got = trio.run(run_queued, pong["address"], token, sock, args.queued)
            lat = got["latencies"]
            print(f"{args.queued} sends at once to one conversation; the agent's turns take {args.turn_ms:g} ms; "
                  f"lead from {lead_repo}")
            print(floor_line)
            print(f"receipts: {got['outcomes']}; phone -> receipt p50 {ms(pct(lat, 50), f['p50'])}  "
                  f"p99 {ms(pct(lat, 99), f['p50'])}")
            print(f"reached the agent (its own count): {got['delivered']} in {got['took']:.2f} s = "
                  f"{got['delivered'] / got['took']:.1f} sends/s (its limit: {1000 / args.turn_ms if args.turn_ms else 0:.0f}/s)")
            print(loadavg())
            return
        start_count = trio.run(agent_count, sock)
        t_start = time.perf_counter()
        latencies, wall, outcomes = trio.run(run, pong["address"], token, args.conversations, args.rounds)
        accepted = outcomes.get("sent", 0) + outcomes.get("queued", 0)
        count, took = trio.run(delivered, sock, start_count, accepted, t_start)
        total = len(latencies)
        print(f"{total} sends to {args.conversations} conversations at once ({args.rounds} rounds), journal on "
              f"(SQLite WAL, synchronous=FULL); the agent's turns take {args.turn_ms:g} ms; lead from {lead_repo}")
        print(floor_line)
        print(f"outcomes: {outcomes}; transport errors: {len(errors)} {errors[:5]}")
        print(f"receipts: {total / wall:.0f}/s; phone -> receipt p50 {ms(pct(latencies, 50), f['p50'])}  "
              f"p99 {ms(pct(latencies, 99), f['p50'])}  mean {ms(statistics.mean(latencies))}")
        print(f"reached the agent (its own count): {count} of {accepted} accepted, all within {took:.2f} s "
              f"(including the rounds' 0.3 s pauses)")
        print(loadavg())
    except BaseException:
        bridge_err.flush()
        print("bridge alive:", bridge.poll() is None)
        print(Path(base / "bridge.stderr").read_text()[-3000:])
        raise
    finally:
        floor.close()
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
