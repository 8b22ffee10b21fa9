"""The inbox under load, measured where people see it (issues 16.1, 16.2; features I1, I2).

    .venv/bin/python bench/inbox.py queued [--sends 100] [--turn-ms 20] [--lead PATH]
    .venv/bin/python bench/inbox.py burst [--agents 10] [--conversations 10] [--lead PATH]
    .venv/bin/python bench/inbox.py both --quick [--json out.json]     # `run(quick=True)` for the bench runner

A real lead (`python -m collie.lead`) and real `many` fixture agents (each send's turn echoes and ends).
- `queued`: `--sends` requests at once to one conversation of one agent whose turns last
  `--turn-ms`, through the inbox route (as a relay queuing jobs would; no turn quoted): all but the
  first wait and run one at a time. Counted at the agent: the rate comes from the agent's own
  timestamps of the sends it received (its `user` items). The physical limit is 1000/turn-ms a second.
- `burst`: one phone send (`POST /api/send`, quoting the turn) to each of agents x conversations at
  once, each sender with its own httpx client: receipts p50/p99 beside the floor (an httpx round
  trip to a trivial HTTP/1.1 server on TCP loopback, measured in the same run) and their ratio;
  `/healthz` asked back to back during the burst beside `/healthz` idle; the lead's event-loop steps
  during the burst (bench/loopwatch: the longest by CPU and by wall time, how many over 20 ms).
`--lead PATH` runs the lead from another checkout (before/after). Every run prints the load average.
"""

from __future__ import annotations

import argparse
import json
import os
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

from measure import cpu_seconds, pct  # noqa: E402

from collie.crew import control  # noqa: E402
from collie.crew.errors import NotRunningError  # noqa: E402

FLOOR_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else the body waits for a delayed ACK: 40 ms
    def do_GET(self):
        body = b'{"ok": true}'
        self.send_response(200); self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body))); self.end_headers(); self.wfile.write(body)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer.request_queue_size = 1024  # like the lead's backlog (the default 5 drops SYNs)
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


async def round_trips(c: httpx.AsyncClient, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await c.get(url)
        out.append(time.perf_counter() - t0)
    return out


def start_lead(base: Path, agents: dict[str, list[str]], lead_repo: Path, *,
               loopwatch: Path | None = None) -> tuple[subprocess.Popen, list, str, str, Path]:
    """A lead with `many` agents (name -> extra fixture args); returns (lead, agent procs, address, token, run dir).
    `loopwatch`: the lead records its event-loop steps over 2 ms there (bench/loopwatch)."""
    cfg, state, run_dir = base / "cfg", base / "state", base / "run"
    cfg.mkdir(mode=0o700)
    run_dir.mkdir(mode=0o700)
    (cfg / "sources.json").write_text(json.dumps([{"name": n, "kind": "durable", "socket": str(run_dir / f"{n}.sock")}
                                                  for n in agents]))
    os.chmod(cfg / "sources.json", 0o600)
    env = {**os.environ, "COLLIE_CONFIG_DIR": str(cfg), "COLLIE_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    procs = []
    for name, extra in agents.items():
        proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "many", "--socket", str(run_dir / f"{name}.sock"),
                                 *extra], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().startswith("listening")
        procs.append(proc)
    profile = ["-m", "cProfile", "-o", os.environ["PROFILE"]] if os.environ.get("PROFILE") else []
    lead_env = {**env, "PYTHONPATH": str(lead_repo)}
    if loopwatch is not None:
        lead_env.update(PYTHONPATH=f"{Path(__file__).resolve().parent / 'loopwatch'}:{lead_repo}",
                        COLLIE_BENCH_LOOPWATCH=str(loopwatch))
    lead = subprocess.Popen([sys.executable, *profile, "-m", "collie.lead", "--port", "0"], env=lead_env,
                            cwd=lead_repo,
                            stdout=subprocess.DEVNULL, stderr=open(base / "lead.stderr", "w"))
    while True:
        try:
            pong = control.call(state / "bridge.sock", "ping", timeout=2)
            if all(a["status"] == "ready" for a in control.call(state / "bridge.sock", "agents")["agents"]):
                break
        except NotRunningError:
            pass
        time.sleep(0.1)
    time.sleep(1)
    return lead, procs, pong["address"], (state / "api-token").read_text().strip(), run_dir


def stop(lead: subprocess.Popen, procs: list) -> None:
    lead.terminate()
    lead.wait(timeout=20)
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=20)


async def agent_sends(sock: Path, conv: str) -> list[dict]:
    """The agent's own record: its `user` items (one per send it received), read from its socket."""
    async with httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=str(sock)), base_url="http://agent") as a:
        got = (await a.get(f"/v1/conversations/{conv}/items?since=0&limit=1000")).json()["items"]
    return [i for i in got if i["kind"] == "user"]


def iso(at: str) -> float:
    import datetime as dt
    return dt.datetime.fromisoformat(at.replace("Z", "+00:00")).timestamp()


async def queued(address: str, token: str, sock: Path, n: int) -> dict:
    async with httpx.AsyncClient(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=60,
                                 limits=httpx.Limits(max_connections=n, max_keepalive_connections=n)) as c:
        before = len(await agent_sends(sock, "c000"))
        outcomes: dict[str, int] = {}

        async def one(i: int) -> None:
            # through the inbox route, as a relay queuing jobs would: no turn quoted (a burst of phone
            # sends all quoting one turn is refused turn_moved once the first has started, B4)
            got = (await c.post("/api/agents/local/many/inbox", json={
                "request_id": str(uuid.uuid4()), "conversation": "c000", "text": f"q {i}"})).json()
            outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
        t0 = time.time()
        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(one, i)
        accepted = outcomes.get("sent", 0) + outcomes.get("queued", 0)
        while len(users := await agent_sends(sock, "c000")) < before + accepted:
            if time.time() - t0 > 300:
                break
            await trio.sleep(0.2)
        mine = users[before:]
        times = [iso(u["at"]) for u in mine]
    span = times[-1] - times[0] if len(times) > 1 else float("nan")
    return {"outcomes": outcomes, "delivered": len(mine), "rate": (len(times) - 1) / span if span else float("nan"),
            "first_after": times[0] - t0 if times else float("nan"), "span": span}


@asynccontextmanager
async def clients(address: str, n: int, headers: dict | None = None):
    """One httpx client per sender, each with its own connection, as `n` phones would be. (One client
    with `n` connections spends 5-6 ms of CPU per request at n = 100 in httpcore's pool against
    1.5 ms at n = 10: before, the benchmark's own client set these figures.)"""
    async with AsyncExitStack() as stack:
        yield [await stack.enter_async_context(httpx.AsyncClient(base_url=address, headers=headers, timeout=60))
               for _ in range(n)]


async def burst(address: str, token: str, floor_url: str, agents: int, convs: int, pid: int | None = None) -> dict:
    n = agents * convs
    auth = {"authorization": f"Bearer {token}"}
    async with clients(address, n, auth) as phones, httpx.AsyncClient(timeout=10) as side:
        c = phones[0]
        turns = {}
        for a in range(agents):
            for i in range(convs):
                turns[(a, i)] = (await c.get(f"/api/agents/local/a{a}/conversations/c{i:03d}")).json()["turn"]
        floor = await round_trips(side, floor_url, 200)
        health_idle = await round_trips(side, f"{address}/healthz", 100)

        async def concurrent(url: str) -> list[float]:
            """n GETs at once, one per client: what the clients and an HTTP stack cost for a burst."""
            out: list[float] = []

            async def get(client) -> None:
                t0 = time.perf_counter()
                await client.get(url)
                out.append(time.perf_counter() - t0)
            async with trio.open_nursery() as nursery:
                for client in phones:
                    nursery.start_soon(get, client)
            return out
        await concurrent(floor_url)  # open the connections first: a phone keeps its connection
        floor_burst = await concurrent(floor_url)
        await concurrent(f"{address}/healthz")
        health_burst = await concurrent(f"{address}/healthz")
        latencies: list[float] = []
        outcomes: dict[str, int] = {}
        health_busy: list[float] = []
        sending = [n]

        async def one(client, a: int, i: int) -> None:
            t0 = time.perf_counter()
            got = (await client.post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": f"a{a}",
                                                         "conversation": f"c{i:03d}", "text": "burst",
                                                         "turn": turns[(a, i)]})).json()
            latencies.append(time.perf_counter() - t0)
            outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
            sending[0] -= 1

        async def health() -> None:
            await trio.sleep(0.005)  # inside the burst, then again until its last receipt
            while sending[0]:
                health_busy.extend(await round_trips(side, f"{address}/healthz", 1))
        window = [time.time()]
        cpu0 = cpu_seconds(pid) if pid else 0.0
        async with trio.open_nursery() as nursery:
            nursery.start_soon(health)
            for client, key in zip(phones, turns):
                nursery.start_soon(one, client, *key)
        window.append(time.time())
        lead_cpu = cpu_seconds(pid) - cpu0 if pid else 0.0
    return {"n": n, "outcomes": outcomes, "latencies": latencies, "floor": floor, "health_idle": health_idle,
            "health_busy": health_busy, "floor_burst": floor_burst, "health_burst": health_burst, "window": window,
            "lead_cpu": lead_cpu}


def loop_steps(path: Path, window: list[float]) -> dict:
    """The lead's event-loop steps over 2 ms inside `window` (bench/loopwatch): the longest by CPU (what
    the step itself did) and by wall time (including waits for a CPU the machine gave elsewhere)."""
    steps, gcs = [], []
    if path.exists():
        for line in path.read_text().splitlines():
            parts = line.split(" ", 3)
            if len(parts) != 4 or not window[0] <= float(parts[0]) <= window[1] + 0.5:
                continue
            if parts[1] == "gc":
                gcs.append((float(parts[2]), parts[3]))
            else:
                steps.append((float(parts[1]), float(parts[2]), parts[3]))
    cpu = max(steps, key=lambda s: s[1], default=(0.0, 0.0, "-"))
    wall = max(steps, key=lambda s: s[0], default=(0.0, 0.0, "-"))
    return {"steps_over_2ms": len(steps), "longest_cpu": cpu[1], "longest_cpu_task": cpu[2],
            "longest_wall": wall[0], "longest_wall_task": wall[2],
            "over_20ms_cpu": sum(1 for s in steps if s[1] > 0.020),
            "gc_over_5ms": len(gcs), "gc_longest": max((g[0] for g in gcs), default=0.0),
            "gc_longest_kind": max(gcs, default=(0.0, "-"))[1]}


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def run_queued(sends: int = 100, turn_ms: float = 20.0, lead: str | Path = REPO) -> dict:
    """`queued` as a function: the figures as a dict."""
    base = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))
    os.chmod(base, 0o700)
    lead_proc, procs, address, token, run_dir = start_lead(
        base, {"many": ["--conversations", "1", "--turn-ms", str(turn_ms)]}, Path(lead).resolve())
    try:
        r = trio.run(queued, address, token, run_dir / "many.sock", sends)
    finally:
        stop(lead_proc, procs)
        subprocess.run(["rm", "-rf", str(base)])
    return {"sends": sends, "turn_ms": turn_ms, **r, "limit_per_s": 1000 / turn_ms, "load": os.getloadavg()[0]}


def run_burst(agents: int = 10, conversations: int = 10, lead: str | Path = REPO) -> dict:
    """`burst` as a function: the figures as a dict (seconds)."""
    base = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))
    os.chmod(base, 0o700)
    watch = base / "loopwatch.txt"
    floor_proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER], stdout=subprocess.PIPE, text=True)
    floor_url = f"http://127.0.0.1:{floor_proc.stdout.readline().strip()}/"
    lead_proc, procs, address, token, run_dir = start_lead(
        base, {f"a{a}": ["--conversations", str(conversations)] for a in range(agents)}, Path(lead).resolve(),
        loopwatch=watch)
    try:
        r = trio.run(burst, address, token, floor_url, agents, conversations, lead_proc.pid)
    finally:
        stop(lead_proc, procs)
        floor_proc.terminate()
        floor_proc.wait()
    steps = loop_steps(watch, r["window"])
    subprocess.run(["rm", "-rf", str(base)])
    f50 = pct(r["floor"], 50)
    lat = r["latencies"]
    return {"sends": r["n"], "agents": agents, "conversations": conversations, "outcomes": r["outcomes"],
            "floor_p50": f50, "receipt_p50": pct(lat, 50), "receipt_p99": pct(lat, 99),
            "receipt_p99_x_floor": pct(lat, 99) / f50,
            "floor_burst_p50": pct(r["floor_burst"], 50), "floor_burst_p99": pct(r["floor_burst"], 99),
            "health_burst_p50": pct(r["health_burst"], 50), "health_burst_p99": pct(r["health_burst"], 99),
            "health_idle_p50": pct(r["health_idle"], 50), "health_busy_max": max(r["health_busy"]),
            "health_busy_n": len(r["health_busy"]),
            "health_busy_x_idle": max(r["health_busy"]) / pct(r["health_idle"], 50), **steps,
            "lead_cpu_per_send": r["lead_cpu"] / r["n"],
            "load": os.getloadavg()[0]}


def report_burst(r: dict, lead: str) -> str:
    f50 = r["floor_p50"]

    def x(v: float) -> str:
        return f"{v * 1000:.1f} ms ({v / f50:.0f}x floor)"
    return "\n".join([
        f"{r['sends']} sends at once to {r['conversations']} conversations of each of {r['agents']} agents, "
        f"one client per sender, lead from {lead}",
        f"floor (httpx round trip to a trivial HTTP/1.1 server, TCP loopback): p50 {ms(f50)}",
        f"receipts {r['outcomes']}: p50 {x(r['receipt_p50'])}  p99 {x(r['receipt_p99'])}",
        f"{r['sends']} GETs at once to the trivial server: p50 {x(r['floor_burst_p50'])}  p99 {x(r['floor_burst_p99'])}",
        f"{r['sends']} GETs at once to the lead's /healthz: p50 {x(r['health_burst_p50'])}  p99 {x(r['health_burst_p99'])}",
        f"/healthz idle p50 {ms(r['health_idle_p50'])}; asked {r['health_busy_n']} times during the burst: slowest "
        f"{ms(r['health_busy_max'])} ({r['health_busy_x_idle']:.1f}x idle)",
        f"lead's event loop during the burst: {r['steps_over_2ms']} steps over 2 ms; longest by CPU "
        f"{ms(r['longest_cpu'])} ({r['longest_cpu_task']}), by wall {ms(r['longest_wall'])} "
        f"({r['longest_wall_task']}); {r['over_20ms_cpu']} over 20 ms of CPU; garbage collections of 5 ms or "
        f"more: {r['gc_over_5ms']}, the longest {ms(r['gc_longest'])} ({r['gc_longest_kind']})",
        f"lead CPU during the burst: {ms(r['lead_cpu_per_send'])} per send (with its /healthz probes)",
        f"load average (1 min) at the end: {r['load']:.2f} on {os.cpu_count()} cores"])


def run(quick: bool = False, lead: str | Path = REPO) -> dict:
    """Both parts (bench runner): `--quick` is 30 queued sends and a 5 x 5 burst."""
    if quick:
        return {"queued": run_queued(30, 20.0, lead), "burst": run_burst(5, 5, lead)}
    return {"queued": run_queued(100, 20.0, lead), "burst": run_burst(10, 10, lead)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["queued", "burst", "both"])
    p.add_argument("--sends", type=int, default=100, help="queued: how many")
    p.add_argument("--turn-ms", type=float, default=20.0, help="queued: how long each turn lasts")
    p.add_argument("--agents", type=int, default=10, help="burst: how many agents")
    p.add_argument("--conversations", type=int, default=10, help="burst: conversations per agent")
    p.add_argument("--lead", default=str(REPO), help="run the lead from this checkout")
    p.add_argument("--quick", action="store_true", help="30 queued sends, a 5 x 5 burst")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    lead = str(Path(args.lead).resolve())
    out: dict = {}
    if args.mode in ("queued", "both"):
        q = out["queued"] = run_queued(30 if args.quick else args.sends, args.turn_ms, lead)
        print(f"{q['sends']} requests at once to one conversation, turns of {q['turn_ms']:g} ms, lead from {lead}")
        print(f"receipts: {q['outcomes']}; delivered at the agent: {q['delivered']} in {q['span']:.2f} s "
              f"= {q['rate']:.1f} sends/s (agent's own timestamps; the physical limit is {q['limit_per_s']:.0f}/s)")
        print(f"load average (1 min) at the end: {q['load']:.2f} on {os.cpu_count()} cores")
    if args.mode in ("burst", "both"):
        b = out["burst"] = run_burst(5 if args.quick else args.agents, 5 if args.quick else args.conversations, lead)
        print(report_burst(b, lead))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
