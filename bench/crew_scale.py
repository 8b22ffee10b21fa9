"""One lead, 50 members x 10 agents x 20 open conversations (issue 5).

    .venv/bin/python bench/crew_scale.py [--members 50] [--agents 10] [--conversations 20] [--seconds 30]

A real `collie serve` lead; members-1 simulated members in one process (real WebSocket links, real
hello/snapshot/beat frames, views built like a bridge's) and one real member process with a real
`many` fixture agent. Prints the lead's idle CPU and RSS, the dashboard build time, and the write
round trip phone -> lead -> member -> agent -> receipt.
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import trio
from trio_websocket import open_websocket_url

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import cpu_seconds, rss_mib, pct  # noqa: E402

from crew.crewstore import CrewStore  # noqa: E402
from tests.crewlab import Crew, fake_view, wait_for  # noqa: E402


async def sim_member(url: str, label: str, token: str, agents: int, conversations: int, ready) -> None:
    headers = [(b"authorization", f"Bearer {token}".encode())]
    async with open_websocket_url(url, extra_headers=headers) as ws:
        await ws.send_message(json.dumps({"type": "hello", "label": label, "collie": "0.1.0",
                                          "crew_wire": {"min": 1, "max": 1}, "ops": [], "boot": "x"}))
        await ws.get_message()
        views = [fake_view(f"agent{a}", conversations, secrets.token_hex(4)) for a in range(agents)]
        await ws.send_message(json.dumps({"type": "snapshot", "agents": views}))
        ready()
        while True:
            await trio.sleep(10)
            await ws.send_message(json.dumps({"type": "beat"}))








def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--members", type=int, default=50)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--seconds", type=float, default=30)
    p.add_argument("--writes", type=int, default=200)
    args = p.parse_args()
    crew = Crew(Path(tempfile.mkdtemp(prefix="cb", dir="/tmp")))
    try:
        crew.start_lead()
        ws_url = crew.address.replace("http://", "ws://") + "/crew/v1"
        real = crew.add_member("real")
        real.agent("many", "many", "--conversations", str(args.conversations))
        real.serve()
        store = CrewStore(crew.lead.paths.state_dir / "crew.sqlite")
        sims = []
        for i in range(args.members - 1):
            token = secrets.token_hex(32)
            store.invite(f"sim{i:02d}", token)
            sims.append((f"sim{i:02d}", token))
        store.close()
        wait_for(lambda: crew.online("real"), what="real member")
        lead_pid = crew.lead.bridge.pid
        # the lead runs under `crew.cli.main serve`, which execs `python -m lead`: same pid

        results: dict = {}

        async def scenario():
            left = [len(sims)]
            all_ready = trio.Event()

            def ready():
                left[0] -= 1
                if left[0] == 0:
                    all_ready.set()

            async with trio.open_nursery() as n:
                for label, token in sims:
                    n.start_soon(sim_member, ws_url, label, token, args.agents, args.conversations, ready)
                await all_ready.wait()
                await trio.sleep(3)
                token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
                async with httpx.AsyncClient(base_url=crew.address, headers={"authorization": f"Bearer {token}"},
                                             timeout=60) as c:
                    dash = []
                    for _ in range(20):
                        t0 = time.perf_counter()
                        r = await c.get("/api/dashboard")
                        dash.append(time.perf_counter() - t0)
                    sections = r.json()["sections"]
                    results["sections"] = len(sections)
                    results["agents"] = sum(len(s["agents"]) for s in sections)
                    results["conversations"] = sum(a["open"] or 0 for s in sections for a in s["agents"])
                    results["dash"] = dash
                    results["dash_bytes"] = len(r.content)
                    c0, w0 = cpu_seconds(lead_pid), time.monotonic()
                    await trio.sleep(args.seconds)
                    results["cpu"] = (cpu_seconds(lead_pid) - c0) / (time.monotonic() - w0)
                    results["rss"] = rss_mib(lead_pid)
                    rt = []
                    turns = {}
                    for i in range(args.writes):
                        conv = f"c{i % args.conversations:03d}"
                        while True:  # one request at a time per agent (I2): time the route, not the queue
                            items = (await c.get("/api/agents/real/many/inbox")).json()["items"]
                            if not items:
                                break
                            await trio.sleep(0.01)
                        turns[conv] = (await c.get(f"/api/agents/real/many/conversations/{conv}")).json()["turn"]
                        t0 = time.perf_counter()
                        got = (await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "real",
                                                               "agent": "many", "conversation": conv,
                                                               "text": f"w{i}", "turn": turns[conv]})).json()
                        rt.append(time.perf_counter() - t0)
                        if got["outcome"] == "sent":
                            turns[conv] = got["turn"]
                        results.setdefault("outcomes", {}).setdefault(got["outcome"], 0)
                        results["outcomes"][got["outcome"]] += 1
                    results["rt"] = rt
                n.cancel_scope.cancel()

        trio.run(scenario)
        r = results
        print(f"lead with {args.members} members ({r['sections']} sections, {r['agents']} agents, "
              f"{r['conversations']} open conversations)")
        print(f"lead idle CPU: {100 * r['cpu']:.2f} % of one core over {args.seconds:.0f} s; lead RSS {r['rss']:.0f} MiB")
        print(f"dashboard build (GET /api/dashboard, {r['dash_bytes'] // 1024} KiB): p50 {pct(r['dash'], 50) * 1000:.1f} ms "
              f"p99 {pct(r['dash'], 99) * 1000:.1f} ms")
        print(f"write round trip phone -> lead -> member -> agent (n={len(r['rt'])}, {r['outcomes']}): "
              f"p50 {pct(r['rt'], 50) * 1000:.1f} ms  p99 {pct(r['rt'], 99) * 1000:.1f} ms  "
              f"mean {statistics.mean(r['rt']) * 1000:.1f} ms")
    finally:
        crew.stop()


if __name__ == "__main__":
    main()
