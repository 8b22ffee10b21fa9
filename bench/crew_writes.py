"""Writes phone -> lead -> member -> agent across many agents, journals fsync'd (issue 15.1, 16).

    .venv/bin/python bench/crew_writes.py [--agents 50] [--conversations 2] [--rounds 10] [--quick]
    .venv/bin/python bench/crew_writes.py --profile DIR      # py-spy or cProfile of the lead and the member

Three kinds of process, as in a crew: a real lead (`collie serve`), one real member (`collie serve`
with crew.json) and one process hosting `--agents` SDK agents (each its own socket, `many`-like:
every send is echoed and its turn ends). The phone (this script, one httpx client) sends, in each
round, one `POST /api/send` to every conversation at once (agents x conversations concurrent
writes), each quoting its conversation's turn. A round ends when every receipt arrived and every
acknowledged send was applied, by the agents' own count (turns started by sends, `GET /v1/state`
on each agent's socket); then the next round starts.

Printed: the floor's throughput (the same number of GETs at once to the trivial server: what the
client and the HTTP stack manage with no work behind them), receipts per second (receipts / time from the first send of a round to its last receipt,
summed over rounds), phone -> receipt p50/p99 with the floor (an httpx round trip to a trivial
hypercorn + quart-trio server over TCP loopback, same run) and the ratio, sends applied per second
at the agents (applied / time from a round's first send until the agents counted all of it), the
outcomes, and the load average. Both journals (the lead's inbox, the member's request journal)
stay SQLite WAL with synchronous=FULL.

`run(**options) -> dict` is the same as a function; `suite(quick)` is what `python -m bench` runs (the
rounds, then an offered 300 sends/s on the same crew: the throughput target is judged on the rounds, the
p99 target at the offered rate, where a latency at a throughput is defined). `--quick` is a 10 x 2 x 3 run.
The CPU of every process is printed per receipt, this script's too: the phones' httpx clients run on
the same cores as the crew (2.2-3 ms of CPU per send on the 2-core CI machine kind).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from measure import Floor, cpu_seconds, pct  # noqa: E402

from tests.crewlab import Crew, wait_for  # noqa: E402

AGENT_HOST = """
import sys, trio
from functools import partial
from bench.measure import run_agents
ALL_CAPS = ["asks", "send", "steer", "abort", "starters", "rename", "close", "reopen", "actions", "history", "watch"]
async def echo(pane, text):
    pane.reply(f"You said: {text}")
trio.run(partial(run_agents, sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), "listening", item="item of {i}",
                 name_hosts=True, caps=ALL_CAPS, on_send=echo, runtime="many"))
"""


class Agents:
    """The agents' own count, read on their sockets (one kept-alive client each, so that counting
    costs the machine little while the run goes on)."""

    def __init__(self, socks: list[Path]) -> None:
        self.clients = [httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(s)), base_url="http://agent")
                        for s in socks]

    async def applied(self) -> int:
        """Turns started by sends, over every conversation of every agent."""
        total = 0
        for a in self.clients:
            total += sum(c["turn"] for c in (await a.get("/v1/state")).json()["conversations"])
        return total

    async def aclose(self) -> None:
        for a in self.clients:
            await a.aclose()


@asynccontextmanager
async def clients(address: str, n: int, headers: dict | None = None):
    """One httpx client per sender, each with its own connection, as `n` phones would be. (One client
    with `n` connections spends 5-6 ms of CPU per request at n = 100 in httpcore's pool, against
    1.5 ms at n = 10: the benchmark's own client, not the server, set the figures.)"""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=address, headers=headers, timeout=60))
               for _ in range(n)]


async def floor_burst(floor: Floor, n: int, rounds: int) -> dict:
    """What the same client and stack do with no work behind them: rounds of `n` GETs at once to the
    trivial server (connections opened first, as the phone's are): requests per second and p99."""
    lat: list[float] = []
    took = 0.0
    async with clients(floor.address, n) as cs:
        async def get(c, out: list | None) -> None:
            t0 = time.perf_counter()
            await c.get("/")
            if out is not None:
                out.append(time.perf_counter() - t0)
        for r in range(rounds + 1):
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for c in cs:
                    nursery.start_soon(get, c, lat if r else None)
            if r:
                took += time.perf_counter() - t0
    return {"per_s": n * rounds / took, "p50": pct(lat, 50), "p99": pct(lat, 99)}


class Phones:
    """The senders: one httpx client per conversation (as many phones would be), each send quoting its
    conversation's turn as the last receipt left it; records every receipt's latency and outcome."""

    def __init__(self, cs: list, member: str, turns: dict[tuple[int, int], int | None]) -> None:
        self.member, self.turns = member, turns
        self.phones = dict(zip(turns, cs))
        self.latencies: list[float] = []
        self.outcomes: dict[str, int] = {}
        self.errors: list = []
        self.acknowledged = 0

    @classmethod
    async def ready(cls, cs: list, member: str, agents: int, convs: int) -> Phones:
        """Once every conversation's pane is there, with the turn it shows."""
        turns: dict[tuple[int, int], int | None] = {}
        for a in range(agents):
            for i in range(convs):
                url = f"/api/agents/{member}/a{a:02d}/conversations/c{i:03d}"
                while (pane := await cs[0].get(url)).status_code != 200:
                    await trio.sleep(0.1)
                turns[(a, i)] = pane.json()["turn"]
        return cls(cs, member, turns)

    async def send(self, a: int, i: int, text: str) -> None:
        t0 = time.perf_counter()
        try:
            resp = await self.phones[(a, i)].post("/api/send", json={
                "request_id": str(uuid.uuid4()), "machine": self.member, "agent": f"a{a:02d}",
                "conversation": f"c{i:03d}", "text": text, "turn": self.turns[(a, i)]})
            got = resp.json()
        except (httpx.HTTPError, ValueError) as exc:
            self.errors.append((text, a, i, type(exc).__name__, str(exc)[:80]))
            return
        self.latencies.append(time.perf_counter() - t0)
        outcome = got.get("outcome", f"HTTP {resp.status_code}")
        shown = f"refused {got.get('reason')}" if outcome == "refused" else outcome
        self.outcomes[shown] = self.outcomes.get(shown, 0) + 1
        if outcome in ("sent", "queued"):
            self.acknowledged += 1
        if outcome == "sent" and got.get("turn") is not None:
            self.turns[(a, i)] = got["turn"]
        elif outcome == "queued":
            self.turns[(a, i)] = None  # its turn is not known yet: the next send quotes none

    def figures(self) -> dict:
        return {"latencies": self.latencies, "outcomes": self.outcomes, "errors": self.errors,
                "acknowledged": self.acknowledged}


async def phone(address: str, token: str, member: str, agents: int, convs: int, rounds: int, socks: list[Path]) -> dict:
    receipt_time = 0.0
    applied_time = 0.0
    async with clients(address, agents * convs, {"authorization": f"Bearer {token}"}) as cs:
        phones = await Phones.ready(cs, member, agents, convs)
        agents_ = Agents(socks)
        base = await agents_.applied()
        per_round = []
        for r in range(rounds):
            t0 = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for key in phones.turns:
                    nursery.start_soon(phones.send, *key, f"round {r}")
            t1 = time.perf_counter()
            receipt_time += t1 - t0
            while (await agents_.applied()) - base < phones.acknowledged and time.perf_counter() - t0 < 120:
                await trio.sleep(0.02)
            t2 = time.perf_counter()
            applied_time += t2 - t0
            per_round.append((t1 - t0, t2 - t0))
        count = await agents_.applied() - base
        await agents_.aclose()
    return {**phones.figures(), "receipt_time": receipt_time, "applied_time": applied_time, "applied": count,
            "per_round": per_round}


async def open_loop(address: str, token: str, member: str, agents: int, convs: int, rate: float, seconds: float,
                    socks: list[Path]) -> dict:
    """Offered load instead of bursts: one send every 1/`rate` s for `seconds`, to the conversations in
    turn (each conversation's sender its own client, as in `phone`), whatever the receipts of earlier
    sends. The latency at a given throughput is only defined this way: with 100 sends kept in flight,
    a receipt waits 100 / throughput on average by Little's law (333 ms at 300/s), so a p99 of 50 ms
    at 300/s means an offered 300/s answered with at most 15 in flight."""
    n = agents * convs
    lag: list[float] = []
    async with clients(address, n, {"authorization": f"Bearer {token}"}) as cs:
        phones = await Phones.ready(cs, member, agents, convs)
        for cl in cs:  # open every sender's connection first, as a phone's is
            await cl.get("/healthz")
        agents_ = Agents(socks)
        base = await agents_.applied()
        keys = list(phones.turns)
        total = int(rate * seconds)
        t_start = trio.current_time()
        w0 = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for k in range(total):
                due = t_start + k / rate
                await trio.sleep_until(due)
                lag.append(trio.current_time() - due)
                nursery.start_soon(phones.send, *keys[k % n], f"send {k}")
        w1 = time.perf_counter()
        while (await agents_.applied()) - base < phones.acknowledged and time.perf_counter() - w0 < 120:
            await trio.sleep(0.02)
        w2 = time.perf_counter()
        count = await agents_.applied() - base
        await agents_.aclose()
    return {**phones.figures(), "receipt_time": w1 - w0, "applied_time": w2 - w0, "applied": count,
            "offered": total, "lag_p99": pct(lag, 99) if lag else 0.0}


def suite(quick: bool = False) -> dict:
    """What `python -m bench` runs: rounds of sends at once (the most the pipeline answers), then, on the
    same crew, an offered rate (the target's own terms: 300 sends a second for 10 s; 60/s for 3 s quick)."""
    return run(quick=quick, then_rate=60.0 if quick else 300.0, seconds=3.0 if quick else 10.0)


def figures(got: dict, cpu: dict) -> dict:
    lat = got["latencies"]
    return {
        "receipts": len(lat), "outcomes": got["outcomes"], "errors": len(got["errors"]),
        "receipts_per_s": len(lat) / got["receipt_time"] if got["receipt_time"] else 0.0,
        "receipt_p50": pct(lat, 50) if lat else None, "receipt_p99": pct(lat, 99) if lat else None,
        "receipt_mean": statistics.mean(lat) if lat else None,
        "acknowledged": got["acknowledged"], "applied": got["applied"],
        "applied_per_s": got["applied"] / got["applied_time"] if got["applied_time"] else 0.0,
        "cpu_s": cpu,
    }


def measured(pids: dict, fn, *args) -> tuple[dict, dict]:
    """Run the phones' `fn` and return what they got and the CPU each process spent meanwhile."""
    cpu0 = {k: cpu_seconds(p) for k, p in pids.items()}
    phone0 = time.process_time()  # this script: the phones' httpx clients share the machine's cores
    got = trio.run(fn, *args)
    cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    cpu["phones (this script)"] = time.process_time() - phone0
    return got, cpu


def run(agents: int = 50, conversations: int = 2, rounds: int = 10, quick: bool = False,
        profile: str | None = None, rate: float | None = None, seconds: float = 10.0,
        then_rate: float | None = None) -> dict:
    """One run; returns its figures (seconds for times). `rate`: an offered rate instead of rounds;
    `then_rate`: rounds, then that offered rate on the same crew (its figures under "offered")."""
    if quick:
        agents, conversations, rounds = 10, 2, 3
    base = Path(tempfile.mkdtemp(prefix="cw", dir="/tmp"))
    crew = Crew(base)
    host = None
    spies = []
    floor = Floor()
    try:
        crew.start_lead()
        member = crew.add_member("m1")
        folder = member.run
        host = subprocess.Popen([sys.executable, "-c", AGENT_HOST, str(folder), str(agents), str(conversations)],
                                cwd=REPO, env=member.env, stdout=subprocess.PIPE, text=True)
        assert host.stdout.readline().startswith("listening")
        socks = [folder / f"a{a:02d}.sock" for a in range(agents)]
        member.paths.sources.write_text(json.dumps([{"name": f"a{a:02d}", "kind": "durable", "socket": str(s)}
                                                    for a, s in enumerate(socks)]))
        os.chmod(member.paths.sources, 0o600)
        member.serve()
        client = crew.client()
        wait_for(lambda: crew.online("m1"), what="member online")

        def all_ready():
            rows = [client.get(f"/api/agents/m1/a{a:02d}/conversations/c000") for a in range(agents)]
            return all(r.status_code == 200 for r in rows)
        wait_for(all_ready, timeout=120, what="every agent of the member seen by the lead")
        client.close()
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        f = trio.run(floor.measure)
        fb = trio.run(floor_burst, floor, agents * conversations, min(rounds, 5))
        pids = {"lead": crew.lead.bridge.pid, "member": member.bridge.pid, "agents": host.pid}
        if profile:
            spies = start_profiles(profile, pids)
        if rate:
            got, cpu = measured(pids, open_loop, crew.address, token, "m1", agents, conversations, rate, seconds, socks)
        else:
            got, cpu = measured(pids, phone, crew.address, token, "m1", agents, conversations, rounds, socks)
        if then_rate:
            later, later_cpu = measured(pids, open_loop, crew.address, token, "m1", agents, conversations, then_rate,
                                        seconds, socks)
        for spy in spies:
            spy.send_signal(2)
            spy.wait(timeout=60)
    finally:
        floor.close()
        crew.stop()
        if host is not None:
            host.kill()
            host.wait()
    out = {
        "agents": agents, "conversations": conversations, "rounds": rounds, "concurrent": agents * conversations,
        "floor_p50": f["p50"], "floor_p99": f["p99"],
        "floor_burst_per_s": fb["per_s"], "floor_burst_p50": fb["p50"], "floor_burst_p99": fb["p99"],
        **figures(got, cpu), "load": os.getloadavg()[0], "per_round": got.get("per_round"),
    }
    if rate:
        out.update(rate=rate, seconds=seconds, offered=got["offered"], lag_p99=got["lag_p99"])
    if then_rate:
        out["at_rate"] = {**figures(later, later_cpu), "rate": then_rate, "seconds": seconds,
                          "offered": later["offered"], "lag_p99": later["lag_p99"]}
        got["errors"] += later["errors"]
    if not got["errors"]:
        shutil.rmtree(base, ignore_errors=True)
    else:
        out["kept"] = str(base)
        out["first_errors"] = got["errors"][:5]
    return out


def start_profiles(folder: str, pids: dict) -> list:
    """py-spy (when on PATH) recording each process until the run ends."""
    spy = shutil.which("py-spy") or "/tmp/pyspy-venv/bin/py-spy"
    Path(folder).mkdir(parents=True, exist_ok=True)
    procs = []
    for name, pid in pids.items():
        procs.append(subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", "200", "--format", "raw", "--gil",
                                       "--output", f"{folder}/{name}.txt", "--nonblocking"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(1.0)
    return procs


def report(r: dict) -> str:
    f = r["floor_p50"]

    def lat(x):
        return f"{x * 1000:.1f} ms ({x / f:.0f}x floor)"
    if r.get("rate"):
        head = (f"writes phone -> lead -> member -> agent: {r['agents']} agents x {r['conversations']} conversations, "
                f"offered {r['rate']:.0f} sends/s for {r['seconds']:.0f} s ({r['offered']} sends, the sender late by "
                f"p99 {r['lag_p99'] * 1000:.1f} ms); journals SQLite WAL synchronous=FULL")
    else:
        head = (f"writes phone -> lead -> member -> agent: {r['agents']} agents x {r['conversations']} conversations "
                f"= {r['concurrent']} sends at once, {r['rounds']} rounds; journals SQLite WAL synchronous=FULL")
    lines = [
        head,
        f"floor (httpx round trip to a trivial server, TCP loopback): p50 {f * 1000:.2f} ms  p99 {r['floor_p99'] * 1000:.2f} ms",
        f"the same client and stack with no work behind them ({r['concurrent']} GETs at once to the trivial server): "
        f"{r['floor_burst_per_s']:.0f}/s, p50 {lat(r['floor_burst_p50'])}  p99 {lat(r['floor_burst_p99'])}",
        f"receipts: {r['receipts']} {r['outcomes']} (transport errors {r['errors']}): {r['receipts_per_s']:.0f}/s; "
        f"phone -> receipt p50 {lat(r['receipt_p50'])}  p99 {lat(r['receipt_p99'])}",
        f"applied at the agents (their own count): {r['applied']} of {r['acknowledged']} acknowledged, "
        f"{r['applied_per_s']:.0f}/s",
        "CPU during the sends: " + ", ".join(f"{k} {v:.1f} s" for k, v in r["cpu_s"].items())
        + f"; per receipt: " + ", ".join(f"{k} {1000 * v / max(1, r['receipts']):.1f} ms" for k, v in r["cpu_s"].items()),
        f"load average (1 min) at the end: {r['load']:.2f} on {os.cpu_count()} cores",
    ]
    if "at_rate" in r:
        o = r["at_rate"]
        lines += [
            f"then offered {o['rate']:.0f} sends/s for {o['seconds']:.0f} s ({o['offered']} sends, the sender late by "
            f"p99 {o['lag_p99'] * 1000:.1f} ms): receipts {o['receipts']} {o['outcomes']} (transport errors "
            f"{o['errors']}): {o['receipts_per_s']:.0f}/s; p50 {lat(o['receipt_p50'])}  p99 {lat(o['receipt_p99'])}",
            f"applied at the agents: {o['applied']} of {o['acknowledged']} acknowledged, {o['applied_per_s']:.0f}/s; "
            "CPU per receipt: " + ", ".join(f"{k} {1000 * v / max(1, o['receipts']):.1f} ms"
                                             for k, v in o["cpu_s"].items()),
        ]
    if "kept" in r:
        lines.append(f"kept {r['kept']}: {r['first_errors']}")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--conversations", type=int, default=2)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--quick", action="store_true", help="10 agents x 2 conversations x 3 rounds")
    p.add_argument("--profile", help="record py-spy profiles of the lead, the member and the agents into this folder")
    p.add_argument("--rate", type=float, help="offered load: this many sends per second, whatever the receipts "
                                              "(instead of rounds of sends at once)")
    p.add_argument("--then-rate", type=float, help="after the rounds, on the same crew: this offered rate "
                                                   "(python -m bench: 300)")
    p.add_argument("--seconds", type=float, default=10.0, help="with --rate or --then-rate: for this long (default 10)")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    r = run(args.agents, args.conversations, args.rounds, quick=args.quick, profile=args.profile,
            rate=args.rate, seconds=args.seconds, then_rate=args.then_rate)
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
