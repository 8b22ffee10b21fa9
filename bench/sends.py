"""Sends through the lead to a real agent, journal on (issues 4, 16.4).

    .venv/bin/python bench/sends.py [--conversations 100] [--rounds 10] [--turn-ms 0] [--repo PATH]
    .venv/bin/python bench/sends.py --queued 100 --turn-ms 20
    .venv/bin/python bench/sends.py --quick [--json out.json]     # `run(quick=True)` for the bench runner

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
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import Floor, loadavg, ms, pct  # noqa: E402

from collie.crew import control  # noqa: E402
from collie.crew.errors import NotRunningError  # noqa: E402


errors: list[tuple] = []




@asynccontextmanager
async def clients(address: str, n: int, headers: dict):
    """One httpx client per sender (one client with n connections spends 5-6 ms of CPU per request in
    httpcore's pool at n = 100: the benchmark's client, not the lead, set the figures before)."""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=address, headers=headers, timeout=60))
               for _ in range(n)]


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
    async with clients(address, n, {"authorization": f"Bearer {token}"}) as phones:
        c = phones[0]
        while (pane := await c.get("/api/agents/local/many/conversations/c000")).status_code != 200:
            await trio.sleep(0.1)
        turn = pane.json()["turn"]
        start_count = await agent_count(sock)

        async def one(k: int) -> None:
            t = time.perf_counter()
            resp = await phones[k].post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": "many",
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


async def run_rounds(address: str, token: str, n: int, rounds: int) -> tuple[list[float], float, dict]:
    latencies: list[float] = []
    outcomes: dict[str, int] = {}
    errors.clear()
    async with clients(address, n, {"authorization": f"Bearer {token}"}) as phones:
        c = phones[0]
        turns = {}
        for i in range(n):
            while (pane := await c.get(f"/api/agents/local/many/conversations/c{i:03d}")).status_code != 200:
                await trio.sleep(0.1)  # the bridge has not read this conversation yet
            turns[i] = pane.json()["turn"]

        async def one(i: int, r: int) -> None:
            t0 = time.perf_counter()
            try:
                resp = await phones[i].post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": "many",
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
            elif got["outcome"] == "queued":
                turns[i] = None  # its turn is not known yet (it waits in the inbox): the next send quotes none

        start = time.perf_counter()
        for r in range(rounds):
            async with trio.open_nursery() as nursery:
                for i in range(n):
                    nursery.start_soon(one, i, r)
            await trio.sleep(0.3)  # let the echo turns end before the next round
        wall = time.perf_counter() - start - 0.3 * rounds
    return latencies, wall, outcomes


def run(conversations: int = 100, rounds: int = 10, queued: int = 0, turn_ms: float = 0, repo: str | Path = REPO,
        quick: bool = False) -> dict:
    """One run as a function (bench runner): the figures as a dict, seconds for times. `quick`: 20
    conversations x 3 rounds (or 20 queued)."""
    if quick:
        conversations, rounds, queued = min(conversations, 20), min(rounds, 3), min(queued, 20)
    lead_repo = Path(repo).resolve()
    base = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))
    os.chmod(base, 0o700)
    cfg, state, run_dir = base / "cfg", base / "state", base / "run"
    cfg.mkdir(mode=0o700)
    run_dir.mkdir(mode=0o700)
    sock = run_dir / "many.sock"
    (cfg / "sources.json").write_text(json.dumps([{"name": "many", "kind": "durable", "socket": str(sock)}]))
    os.chmod(cfg / "sources.json", 0o600)
    env = {**os.environ, "COLLIE_CONFIG_DIR": str(cfg), "COLLIE_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    agent = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "many", "--socket", str(sock), "--conversations",
                              str(conversations), "--turn-ms", str(turn_ms)], env=env, cwd=REPO,
                             stdout=subprocess.PIPE, text=True)
    assert agent.stdout.readline().startswith("listening")
    bridge_err = open(base / "bridge.stderr", "w")
    bridge = subprocess.Popen([sys.executable, "-m", "collie.lead", "--port", "0"], env={**env, "PYTHONPATH": str(lead_repo)},
                              cwd=lead_repo, stdout=subprocess.DEVNULL, stderr=bridge_err)
    floor = Floor()
    out: dict = {"lead": str(lead_repo), "turn_ms": turn_ms}
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
        out.update(floor_p50=f["p50"], floor_p99=f["p99"])
        if queued:
            got = trio.run(run_queued, pong["address"], token, sock, queued)
            lat = got["latencies"]
            out.update(mode="queued", sends=queued, outcomes=got["outcomes"], receipt_p50=pct(lat, 50),
                       receipt_p99=pct(lat, 99), delivered=got["delivered"], took=got["took"],
                       delivered_per_s=got["delivered"] / got["took"])
        else:
            start_count = trio.run(agent_count, sock)
            t_start = time.perf_counter()
            latencies, wall, outcomes = trio.run(run_rounds, pong["address"], token, conversations, rounds)
            accepted = outcomes.get("sent", 0) + outcomes.get("queued", 0)
            count, took = trio.run(delivered, sock, start_count, accepted, t_start)
            out.update(mode="rounds", conversations=conversations, rounds=rounds, receipts=len(latencies),
                       outcomes=outcomes, transport_errors=len(errors), first_errors=errors[:5],
                       receipts_per_s=len(latencies) / wall, receipt_p50=pct(latencies, 50),
                       receipt_p99=pct(latencies, 99), receipt_mean=statistics.mean(latencies),
                       accepted=accepted, delivered=count, took=took)
        out["load"] = os.getloadavg()[0]
        return out
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


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--queued", type=int, default=0, help="send this many at once to one conversation instead")
    p.add_argument("--turn-ms", type=float, default=0, help="the agent's own time per turn")
    p.add_argument("--repo", default=str(REPO), help="run the lead from this checkout")
    p.add_argument("--quick", action="store_true", help="20 conversations x 3 rounds (or 20 queued)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    r = run(args.conversations, args.rounds, args.queued, args.turn_ms, args.repo, quick=args.quick)
    f50 = r["floor_p50"]
    floor_line = f"floor (httpx round trip to a trivial server, TCP loopback): p50 {ms(f50)}  p99 {ms(r['floor_p99'])}"
    if r["mode"] == "queued":
        print(f"{r['sends']} sends at once to one conversation; the agent's turns take {r['turn_ms']:g} ms; "
              f"lead from {r['lead']}")
        print(floor_line)
        print(f"receipts: {r['outcomes']}; phone -> receipt p50 {ms(r['receipt_p50'], f50)}  p99 {ms(r['receipt_p99'], f50)}")
        print(f"reached the agent (its own count): {r['delivered']} in {r['took']:.2f} s = {r['delivered_per_s']:.1f} "
              f"sends/s (its limit: {1000 / r['turn_ms'] if r['turn_ms'] else 0:.0f}/s)")
    else:
        print(f"{r['receipts']} sends to {r['conversations']} conversations at once ({r['rounds']} rounds, one client "
              f"per sender), journal on (SQLite WAL, synchronous=FULL); the agent's turns take {r['turn_ms']:g} ms; "
              f"lead from {r['lead']}")
        print(floor_line)
        print(f"outcomes: {r['outcomes']}; transport errors: {r['transport_errors']} {r['first_errors']}")
        print(f"receipts: {r['receipts_per_s']:.0f}/s; phone -> receipt p50 {ms(r['receipt_p50'], f50)}  "
              f"p99 {ms(r['receipt_p99'], f50)}  mean {ms(r['receipt_mean'])}")
        print(f"reached the agent (its own count): {r['delivered']} of {r['accepted']} accepted, all within "
              f"{r['took']:.2f} s (including the rounds' 0.3 s pauses)")
    print(loadavg())
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
