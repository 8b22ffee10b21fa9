"""A hostile agent against a real lead: memory, event-loop stalls and answer sizes (issue 9.6).

    .venv/bin/python bench/hostile.py [--seconds 60] [--conversations 1] [--rate 2000] [--size 1000]
    .venv/bin/python bench/hostile.py --conversations 30000 --rate 3000 --size 20

The agent (`python -m collie.fixtures endless`) appends items forever and never drops one. The lead is a real
`collie serve` process. While it runs, a client asks `GET /healthz` back to back (how long the server's
event loop is held shows as its round trip) and the lead's RSS is sampled every second. At the end, one
`GET …/items?since=0` of the flooded conversation: its size and time. The floor is an httpx round trip
to a trivial server (same stack) over TCP loopback, measured in the same run; the load average is the
machine's at the end. `--repo PATH` runs the lead from another checkout (to measure before a change).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import Floor, lead_folder, loadavg, ms, pct, rss_mib, start_lead  # noqa: E402



async def observe(address: str, token: str, pid: int, seconds: float, conv: str) -> dict:
    rtts: list[float] = []
    rss: list[float] = []
    async with httpx.AsyncClient(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=120) as c:
        async def health() -> None:
            while True:
                t0 = time.perf_counter()
                await c.get("/healthz")
                rtts.append(time.perf_counter() - t0)
                await trio.sleep(0.01)

        async with trio.open_nursery() as n:
            n.start_soon(health)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                rss.append(rss_mib(pid))
                await trio.sleep(1)
            n.cancel_scope.cancel()
        t0 = time.perf_counter()
        resp = await c.get(f"/api/agents/local/flood/conversations/{conv}/items?since=0")
        took = time.perf_counter() - t0
        body = resp.content
        got = resp.json() if resp.status_code == 200 else {}
    return {"rtts": rtts, "rss": rss, "items_bytes": len(body), "items_time": took,
            "items_count": len(got.get("items", [])), "items_status": resp.status_code}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--conversations", type=int, default=1)
    p.add_argument("--rate", type=float, default=2000)
    p.add_argument("--size", type=int, default=1000)
    p.add_argument("--repo", default=str(REPO), help="run the lead from this checkout")
    args = p.parse_args()
    lead_repo = Path(args.repo).resolve()
    base = Path(tempfile.mkdtemp(prefix="ch", dir="/tmp"))
    sock = base / "run" / "flood.sock"
    _cfg, state, _run, env = lead_folder(base, {"flood": sock})
    floor = Floor()
    lead = agent = None
    try:
        f = trio.run(floor.measure)
        lead, pong = start_lead(env, state, lead_repo)
        time.sleep(1)
        rss0 = rss_mib(lead.pid)
        agent = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "endless", "--socket", str(sock), "--conversations",
                                  str(args.conversations), "--rate", str(args.rate), "--size", str(args.size)],
                                 env={**env, "PYTHONPATH": str(REPO)}, cwd=REPO, stdout=subprocess.PIPE, text=True)
        assert agent.stdout.readline().startswith("listening")
        token = (state / "api-token").read_text().strip()
        got = trio.run(observe, pong["address"], token, lead.pid, args.seconds, "f00000")
        r = got["rtts"]
        print(f"hostile agent: {args.conversations} conversation(s), {args.rate:g} items/s of {args.size} characters, "
              f"never dropped; {args.seconds:g} s; lead from {lead_repo}")
        print(f"floor (httpx round trip to a trivial server, TCP loopback): p50 {ms(f['p50'])}  p99 {ms(f['p99'])}")
        print(f"lead RSS: {rss0:.0f} MiB before the agent, max {max(got['rss']):.0f} MiB, "
              f"at the end {got['rss'][-1]:.0f} MiB")
        print(f"GET /healthz during the flood (n={len(r)}): p50 {ms(pct(r, 50), f['p50'])}  "
              f"p99 {ms(pct(r, 99), f['p50'])}  max {ms(max(r), f['p50'])}")
        print(f"GET items?since=0 of the flooded conversation: {got['items_status']}, {got['items_count']} items, "
              f"{got['items_bytes'] / 1e6:.2f} MB in {ms(got['items_time'], f['p50'])}")
        print(loadavg())
    finally:
        for proc in (lead, agent):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
        shutil.rmtree(base, ignore_errors=True)
        floor.close()
        subprocess.run(["rm", "-rf", str(base)])


if __name__ == "__main__":
    main()
