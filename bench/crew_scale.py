"""The lead at crew scale: 100 members x 10 agents x 100 open conversations (crew.md §6; issues 5, 15.1).

    .venv/bin/python bench/crew_scale.py [--quick] [--members 100] [--agents 10] [--conversations 100]
                                         [--seconds 30] [--rate 10] [--dashboards 200] [--writes 200]

A real `collie serve` lead; members-1 simulated members in this process (real WebSocket links, real
hello/snapshot/beat frames: the testing kit's collie.fixtures.member.FakeMember, docs/testing.md) and one real member
process with a real `many` fixture agent of `--conversations` conversations. One phone keeps a live
channel (`GET /api/events`) open throughout. Measured, with the lead's CPU time and RSS from /proc:

- load: the time from the first snapshot sent until every agent is on the dashboard;
- idle: `--seconds` with nothing but beats; lead CPU (share of one core) and RSS;
- busy: `--seconds` with `--rate` changes a second (an ask raised or closed on a simulated member's
  agent, spread over the members), the live channel carrying them; lead CPU and RSS, and the
  dashboard asked back to back meanwhile;
- `GET /api/dashboard`: size, p50/p99 idle (`--dashboards` requests) and while busy;
- a write round trip phone -> lead -> member -> agent -> receipt (`--writes`, one at a time);
- the lead's peak RSS (VmHWM) over the whole run.

Every latency stands beside the floor: an httpx round trip over TCP loopback to a trivial server on
the same stack (hypercorn + quart-trio, bench/measure.py), measured in the same run, before and after
(the ratio is to the floor's p50). `run(quick=...)` returns the figures as a dict (python -m bench).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
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

from measure import Floor, cpu_seconds, ms, pct, rss_mib  # noqa: E402

from tests.crewlab import Crew, invite_sims, start_fake_members, toggle_fake_ask, wait_for  # noqa: E402

FINISHED = ("done", "expired", "cancelled", "failed")  # inbox items that no longer wait (lead/inbox/service.py)
FULL = {"members": 100, "agents": 10, "conversations": 100, "seconds": 30.0, "rate": 10.0, "dashboards": 200,
        "writes": 200}
QUICK = {"members": 10, "agents": 10, "conversations": 20, "seconds": 4.0, "rate": 10.0, "dashboards": 40,
         "writes": 20}


def peak_rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def live_channel(c: httpx.AsyncClient, counts: dict, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
    """One phone's live channel: counts the events it receives by kind."""
    async with c.stream("GET", "/api/events", timeout=None) as resp:
        task_status.started()
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
                counts[kind] = counts.get(kind, 0) + 1


async def dashboards(c: httpx.AsyncClient, n: int | None = None, until: float | None = None) -> tuple[list, int]:
    """`GET /api/dashboard` back to back, n times or until `until` (monotonic): (latencies, last size)."""
    out, size = [], 0
    while (n is not None and len(out) < n) or (until is not None and time.monotonic() < until):
        t0 = time.perf_counter()
        r = await c.get("/api/dashboard")
        out.append(time.perf_counter() - t0)
        size = len(r.content)
    return out, size


def loopwatch_summary(path: Path, since: float, until: float) -> dict:
    """The lead's event-loop steps over 20 ms and garbage collections over 5 ms between two wall times
    (bench/loopwatch writes them)."""
    lines = [x.split(" ", 3) for x in path.read_text().splitlines()] if path.exists() else []
    lines = [x for x in lines if since <= float(x[0]) <= until]
    steps = sorted(((float(w), float(c), n.strip().rsplit(".", 1)[-1]) for _, w, c, n in lines if w != "gc"), reverse=True)
    gcs = sorted(((float(x[2]), x[3].strip()) for x in lines if x[1] == "gc"), reverse=True)
    return {"steps_over_20ms": sum(1 for w, _c, _n in steps if w > 0.020), "longest_steps": steps[:5],
            "gc_over_5ms": len(gcs), "longest_gc": gcs[:5]}


def run(quick: bool = False, loopwatch: bool = False, **sizes) -> dict:
    """Measure the lead at crew scale; `sizes` override QUICK or FULL. Returns the figures (times in s).
    `loopwatch`: also record the lead's long event-loop steps and collections (bench/loopwatch)."""
    o = {**(QUICK if quick else FULL), **{k: v for k, v in sizes.items() if v is not None}}
    crew = Crew(Path(tempfile.mkdtemp(prefix="cb", dir="/tmp")))
    floor = Floor()
    r: dict = {"sizes": o}
    watch = crew.base / "loopwatch.txt"
    if loopwatch:
        crew.lead.env["PYTHONPATH"] = f"{Path(__file__).resolve().parent / 'loopwatch'}:{crew.lead.env['PYTHONPATH']}"
        crew.lead.env["COLLIE_BENCH_LOOPWATCH"] = str(watch)
    try:
        crew.start_lead()
        real = crew.add_member("real")
        real.agent("many", "many", "--conversations", str(o["conversations"]))
        real.serve()
        sims = invite_sims(crew, o["members"] - 1)
        wait_for(lambda: crew.online("real"), what="real member")
        lead_pid = crew.lead.bridge.pid  # `collie serve` execs `python -m collie.lead`: same pid
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        want_agents = (o["members"] - 1) * o["agents"] + 1

        async def scenario():
            r["floor_before"] = await floor.measure(200)
            async with httpx.AsyncClient(base_url=crew.address, headers={"authorization": f"Bearer {token}"},
                                         timeout=60) as c, trio.open_nursery() as n:
                counts: dict = {}
                await n.start(live_channel, c, counts)
                t0 = time.monotonic()
                fakes = await start_fake_members(n, crew, sims, agents=o["agents"], conversations=o["conversations"])
                while True:  # every view fed (the lead parses snapshots in a worker thread, one at a time)
                    sections = (await c.get("/api/dashboard")).json()["sections"]
                    if sum(len(s["agents"]) for s in sections) >= want_agents:
                        break
                    await trio.sleep(0.2)
                r["load_s"] = time.monotonic() - t0
                r["sections"] = len(sections)
                r["agents"] = sum(len(s["agents"]) for s in sections)
                r["conversations"] = sum(a["open"] or 0 for s in sections for a in s["agents"])
                await trio.sleep(3)
                # idle: beats only
                c0, w0 = cpu_seconds(lead_pid), time.monotonic()
                await trio.sleep(o["seconds"])
                r["idle_cpu"] = (cpu_seconds(lead_pid) - c0) / (time.monotonic() - w0)
                r["idle_rss_mib"] = rss_mib(lead_pid)
                r["dash_idle"], r["dash_bytes"] = await dashboards(c, n=o["dashboards"])
                # busy: `rate` changes a second spread over the simulated members, the dashboard asked meanwhile
                events0 = dict(counts)

                async def changes():
                    k = 0
                    end = time.monotonic() + o["seconds"]
                    while time.monotonic() < end:
                        toggle_fake_ask(fakes[k % len(fakes)], f"k{k}")
                        k += 1
                        await trio.sleep(1 / o["rate"])
                    r["changes"] = k

                c0, w0, wall0 = cpu_seconds(lead_pid), time.monotonic(), time.time()
                async with trio.open_nursery() as busy:
                    if fakes:
                        busy.start_soon(changes)
                    r["dash_busy"], _ = await dashboards(c, until=time.monotonic() + o["seconds"])
                r["busy_cpu"] = (cpu_seconds(lead_pid) - c0) / (time.monotonic() - w0)
                r["busy_rss_mib"] = rss_mib(lead_pid)
                if loopwatch:
                    r["loopwatch_busy"] = loopwatch_summary(watch, wall0, time.time())
                r["events"] = {k: v - events0.get(k, 0) for k, v in counts.items() if v - events0.get(k, 0)}
                r["write_rt"], r["outcomes"] = await writes(c, o["writes"], o["conversations"])
                r["peak_rss_mib"] = peak_rss_mib(lead_pid)
                n.cancel_scope.cancel()
            r["floor_after"] = await floor.measure(200)

        trio.run(scenario)
    finally:
        floor.close()
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)
    r["floor"] = {"p50": min(r["floor_before"]["p50"], r["floor_after"]["p50"]),
                  "p99": min(r["floor_before"]["p99"], r["floor_after"]["p99"])}
    r["load"] = os.getloadavg()
    return summary(r)


async def writes(c: httpx.AsyncClient, n: int, conversations: int) -> tuple[list, dict]:
    """`n` sends to the real member's agent, one at a time (I2: one request at a time per agent, so the
    route is timed, not the queue): phone -> lead -> member -> agent -> receipt."""
    rt, outcomes, turns = [], {}, {}
    for i in range(n):
        conv = f"c{i % conversations:03d}"
        while any(i["state"] not in FINISHED for i in (await c.get("/api/agents/real/many/inbox")).json()["items"]):
            await trio.sleep(0.01)
        if conv not in turns:
            turns[conv] = (await c.get(f"/api/agents/real/many/conversations/{conv}")).json()["turn"]
        t0 = time.perf_counter()
        got = (await c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "real", "agent": "many",
                                               "conversation": conv, "text": f"w{i}", "turn": turns[conv]})).json()
        rt.append(time.perf_counter() - t0)
        if got.get("outcome") == "sent":
            turns[conv] = got["turn"]
        else:
            turns.pop(conv, None)
        outcomes[got.get("outcome")] = outcomes.get(got.get("outcome"), 0) + 1
    return rt, outcomes


def summary(r: dict) -> dict:
    """The raw samples reduced to figures (what python -m bench prints and writes)."""
    f50 = r["floor"]["p50"]
    out = {k: r[k] for k in ("sizes", "load_s", "sections", "agents", "conversations", "idle_cpu", "idle_rss_mib",
                             "busy_cpu", "busy_rss_mib", "peak_rss_mib", "dash_bytes", "changes", "events", "outcomes",
                             "floor", "load", "loopwatch_busy") if k in r}
    for name in ("dash_idle", "dash_busy", "write_rt"):
        xs = r[name]
        out[name] = {"n": len(xs), "p50": pct(xs, 50), "p99": pct(xs, 99), "ratio_p50": pct(xs, 50) / f50,
                     "ratio_p99": pct(xs, 99) / f50}
    return out


def report(r: dict) -> str:
    o, f = r["sizes"], r["floor"]["p50"]
    lines = [
        f"lead with {o['members']} members ({o['members'] - 1} simulated, 1 real): {r['sections']} sections, "
        f"{r['agents']} agents, {r['conversations']} open conversations; all shown {r['load_s']:.1f} s after the first snapshot",
        f"floor (httpx round trip to a trivial server, TCP loopback): p50 {ms(f)}  p99 {ms(r['floor']['p99'])}",
        f"lead idle ({o['seconds']:g} s): CPU {100 * r['idle_cpu']:.2f} % of one core, RSS {r['idle_rss_mib']:.0f} MiB",
        f"lead busy ({r.get('changes', 0)} changes in {o['seconds']:g} s, live channel events {r['events']}): "
        f"CPU {100 * r['busy_cpu']:.1f} % of one core, RSS {r['busy_rss_mib']:.0f} MiB; peak RSS {r['peak_rss_mib']:.0f} MiB",
    ]
    for name, what in (("dash_idle", f"GET /api/dashboard ({r['dash_bytes'] / 1024:.0f} KiB), idle"),
                       ("dash_busy", "GET /api/dashboard while busy"),
                       ("write_rt", f"write phone -> lead -> member -> agent, one at a time {r['outcomes']}")):
        x = r[name]
        lines.append(f"{what} (n={x['n']}): p50 {ms(x['p50'], f)}  p99 {ms(x['p99'], f)}")
    if "loopwatch_busy" in r:
        x = r["loopwatch_busy"]
        lines.append(f"lead loop while busy: {x['steps_over_20ms']} steps over 20 ms, longest "
                     + ", ".join(f"{w * 1000:.0f} ms (CPU {c * 1000:.0f} ms, {n})" for w, c, n in x["longest_steps"][:3])
                     + f"; {x['gc_over_5ms']} collections over 5 ms, longest "
                     + ", ".join(f"{t * 1000:.0f} ms ({g})" for t, g in x["longest_gc"][:3]))
    one, five, fifteen = r["load"]
    lines.append(f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help=f"the small size: {QUICK}")
    for k, v in FULL.items():
        p.add_argument(f"--{k}", type=type(v), default=None, help=f"default {v} ({QUICK[k]} with --quick)")
    p.add_argument("--loopwatch", action="store_true", help="record the lead's long loop steps and collections")
    p.add_argument("--json", help="also write the figures to this file")
    args = p.parse_args()
    r = run(args.quick, args.loopwatch, **{k: getattr(args, k) for k in FULL})
    print(report(r))
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
