"""The inbox under load, measured where people see it (issues 16.1, 16.2; features I1, I2).

    .venv/bin/python bench/inbox.py queued [--sends 100] [--turn-ms 20] [--lead PATH]
    .venv/bin/python bench/inbox.py burst [--agents 10] [--conversations 10] [--lead PATH]

A real lead (`python -m lead`) and real `many` fixture agents (each send's turn echoes and ends).
- `queued`: `--sends` requests at once to one conversation of one agent whose turns last
  `--turn-ms`, through the inbox route (as a relay queuing jobs would; no turn quoted): all but the
  first wait and run one at a time. Counted at the agent: the rate comes from the agent's own
  timestamps of the sends it received (its `user` items). The physical limit is 1000/turn-ms a second.
- `burst`: one phone send (`POST /api/send`, quoting the turn) to each of agents x conversations at
  once: receipts p50/p99 beside the floor (an httpx round trip to a trivial HTTP/1.1 server on TCP
  loopback, measured in the same run) and their ratio; a `/healthz` asked during the burst beside
  `/healthz` idle.
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
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from crew import control  # noqa: E402
from crew.errors import NotRunningError  # noqa: E402

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


def start_lead(base: Path, agents: dict[str, list[str]], lead_repo: Path) -> tuple[subprocess.Popen, list, str, str, Path]:
    """A lead with `many` agents (name -> extra fixture args); returns (lead, agent procs, address, token, run dir)."""
    cfg, state, run_dir = base / "cfg", base / "state", base / "run"
    cfg.mkdir(mode=0o700)
    run_dir.mkdir(mode=0o700)
    (cfg / "sources.json").write_text(json.dumps([{"name": n, "kind": "durable", "socket": str(run_dir / f"{n}.sock")}
                                                  for n in agents]))
    os.chmod(cfg / "sources.json", 0o600)
    env = {**os.environ, "COLLIE_CONFIG_DIR": str(cfg), "COLLIE_STATE_DIR": str(state), "PYTHONPATH": str(REPO)}
    procs = []
    for name, extra in agents.items():
        proc = subprocess.Popen([sys.executable, "-m", "fixtures", "many", "--socket", str(run_dir / f"{name}.sock"),
                                 *extra], env=env, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert proc.stdout.readline().startswith("listening")
        procs.append(proc)
    profile = ["-m", "cProfile", "-o", os.environ["PROFILE"]] if os.environ.get("PROFILE") else []
    lead = subprocess.Popen([sys.executable, *profile, "-m", "lead", "--port", "0"], env={**env, "PYTHONPATH": str(lead_repo)},
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


async def burst(address: str, token: str, floor_url: str, agents: int, convs: int) -> dict:
    n = agents * convs
    limits = httpx.Limits(max_connections=n + 2, max_keepalive_connections=n + 2)
    async with httpx.AsyncClient(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=60,
                                 limits=limits) as c, httpx.AsyncClient(timeout=10) as side:
        turns = {}
        for a in range(agents):
            for i in range(convs):
                turns[(a, i)] = (await c.get(f"/api/agents/local/a{a}/conversations/c{i:03d}")).json()["turn"]
        floor = await round_trips(side, floor_url, 200)
        health_idle = await round_trips(side, f"{address}/healthz", 100)

        async def concurrent(url: str) -> list[float]:
            """n GETs at once from this client: what the client and an HTTP stack cost for a burst."""
            out: list[float] = []

            async def get() -> None:
                t0 = time.perf_counter()
                await c.get(url)
                out.append(time.perf_counter() - t0)
            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(get)
            return out
        await concurrent(floor_url)  # open the connections first: a phone keeps its connection
        floor_burst = await concurrent(floor_url)
        await concurrent(f"{address}/healthz")
        health_burst = await concurrent(f"{address}/healthz")
        latencies: list[float] = []
        outcomes: dict[str, int] = {}
        health_busy: list[float] = []

        async def one(a: int, i: int) -> None:
            t0 = time.perf_counter()
            got = (await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": f"a{a}",
                                                    "conversation": f"c{i:03d}", "text": "burst", "turn": turns[(a, i)]})).json()
            latencies.append(time.perf_counter() - t0)
            outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1

        async def health() -> None:
            await trio.sleep(0.005)  # inside the burst
            health_busy.extend(await round_trips(side, f"{address}/healthz", 1))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(health)
            for key in turns:
                nursery.start_soon(one, *key)
    return {"n": n, "outcomes": outcomes, "latencies": latencies, "floor": floor, "health_idle": health_idle,
            "health_busy": health_busy, "floor_burst": floor_burst, "health_burst": health_burst}


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["queued", "burst"])
    p.add_argument("--sends", type=int, default=100, help="queued: how many")
    p.add_argument("--turn-ms", type=float, default=20.0, help="queued: how long each turn lasts")
    p.add_argument("--agents", type=int, default=10, help="burst: how many agents")
    p.add_argument("--conversations", type=int, default=10, help="burst: conversations per agent")
    p.add_argument("--lead", default=str(REPO), help="run the lead from this checkout")
    args = p.parse_args()
    lead_repo = Path(args.lead).resolve()
    base = Path(tempfile.mkdtemp(prefix="cs", dir="/tmp"))
    os.chmod(base, 0o700)
    if args.mode == "queued":
        lead, procs, address, token, run_dir = start_lead(
            base, {"many": ["--conversations", "1", "--turn-ms", str(args.turn_ms)]}, lead_repo)
        try:
            r = trio.run(queued, address, token, run_dir / "many.sock", args.sends)
        finally:
            stop(lead, procs)
        print(f"{args.sends} requests at once to one conversation, turns of {args.turn_ms:g} ms, lead from {lead_repo}")
        print(f"receipts: {r['outcomes']}; delivered at the agent: {r['delivered']} in {r['span']:.2f} s "
              f"= {r['rate']:.1f} sends/s (agent's own timestamps; the physical limit is "
              f"{1000 / args.turn_ms:.0f}/s)")
    else:
        convs = args.conversations
        floor_proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER], stdout=subprocess.PIPE, text=True)
        floor_url = f"http://127.0.0.1:{floor_proc.stdout.readline().strip()}/"
        lead, procs, address, token, run_dir = start_lead(
            base, {f"a{a}": ["--conversations", str(convs)] for a in range(args.agents)}, lead_repo)
        try:
            r = trio.run(burst, address, token, floor_url, args.agents, convs)
        finally:
            stop(lead, procs)
            floor_proc.terminate()
            floor_proc.wait()
        f50 = pct(r["floor"], 50)
        h_idle = pct(r["health_idle"], 50)
        print(f"{r['n']} sends at once to {convs} conversations of each of {args.agents} agents, lead from {lead_repo}")
        print(f"floor (httpx round trip to a trivial HTTP/1.1 server, TCP loopback): p50 {ms(f50)}")
        print(f"receipts {r['outcomes']}: p50 {ms(pct(r['latencies'], 50))} ({pct(r['latencies'], 50) / f50:.0f}x floor)"
              f"  p99 {ms(pct(r['latencies'], 99))} ({pct(r['latencies'], 99) / f50:.0f}x floor)")
        for what, key in (("the trivial server", "floor_burst"), ("the lead's /healthz", "health_burst")):
            print(f"{r['n']} GETs at once to {what}: p50 {ms(pct(r[key], 50))} ({pct(r[key], 50) / f50:.0f}x floor)"
                  f"  p99 {ms(pct(r[key], 99))} ({pct(r[key], 99) / f50:.0f}x floor)")
        print(f"/healthz idle p50 {ms(h_idle)} ({h_idle / f50:.1f}x floor); during the burst "
              f"{ms(r['health_busy'][0])} ({r['health_busy'][0] / h_idle:.1f}x idle)")
    print(f"load average (1 min) at the end: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    subprocess.run(["rm", "-rf", str(base)])


if __name__ == "__main__":
    main()
