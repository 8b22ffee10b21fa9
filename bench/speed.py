"""Fast where the phone feels it (issue 29): asks on every screen's data, and a streaming reply.

    .venv/bin/python bench/speed.py [--asks 20] [--seconds 10] [--agents 10] [--rate 20] [--repo PATH]

A real lead (`collie serve`) with its own agents, and a real member (`collie serve` joined to it) with
one. Every agent is run by this process with the SDK (`watch` declared), so the moment it raises an
ask or writes a word is known exactly; everything is read as a phone reads it, through the lead's API
and live channel (`GET /api/events`, read with h11 straight off a socket: bench/live_channel.py).

Part 1 — ask raised -> visible, on the lead's own agent `own` and on the member's agent `far`, three
series each (`--asks` asks per series):
- `lone`: after a quiet 0.3 s;
- `after`: right after other changes of the same agent: a word of a reply, another 30 ms later, the ask
  30 ms after that (what an agent streaming a short reply and then asking does);
- `again`: an ask is open; it closes and another is raised 30 ms later (the agent asks again);
- `swap`: the same in one step: the open ask closes and another is raised at the same moment.
For each ask, the time from raising it to:
- `chat`: the `pane` event carrying it, on a channel that views its conversation (the chat screen);
- `row`: the `row` event of its agent showing it waiting, on a channel that views nothing (the
  dashboard's row and the agent's; in `again` and `swap` the row ends as it was, so it is not timed);
- `needs`: the Needs you list having it, as the page gets it today: on every `row` event a
  `GET /api/needs` (the page waits 50 ms before it: not counted here);
- `needs_event`: a `needs` event carrying it on the dashboard's channel (when the lead sends one).
Floor: a loopback HTTP round trip to the same lead (`GET /healthz` on a kept-alive connection).

Part 2 — streaming: `--agents` of the lead's own agents each stream one reply at `--rate` updates a
second for `--seconds`; a channel views the first agent's conversation, which holds `--history` items
before the reply starts (a long chat). `stream_far`: the same with the member's agent `far` viewed
(and streaming too). For each update of the viewed
agent: the time from the agent making it to the `items` event that shows it. Meanwhile a phone fetches
`GET /api/dashboard` every 100 ms (its time per fetch). The lead's CPU over the streaming, per update
(every agent's updates counted) and this process's (the agents and the phones: same 2 cores). Floor:
as above.

`--repo PATH` runs the lead and the member from another checkout (e.g. an export of the commit before,
`git archive <commit> | tar -x -C PATH`), for before/after runs interleaved on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from live_channel import floor, light_sse  # noqa: E402
from measure import cpu_seconds, pct  # noqa: E402

from collie.crew.sdk import open_collie  # noqa: E402
from tests import crewlab  # noqa: E402
from tests.crewlab import Crew, wait_for  # noqa: E402

QUIET = 0.3
STEP = 0.03  # between the changes of `after` and `again`: "within 50 ms"
OPTIONS = [{"id": "y", "label": "Yes", "role": "allow"}]
SERIES = ("lone", "after", "again", "swap")
WHERE = ("chat", "row", "needs", "needs_event")


def stats(values: list[float]) -> dict | None:
    if not values:
        return None
    return {"n": len(values), "p50": pct(values, 50), "p99": pct(values, 99), "max": max(values)}


class Screens:
    """What the phone's screens have seen, stamped as it arrives: asks by title on each screen."""

    def __init__(self) -> None:
        self.seen: dict[tuple[str, str], float] = {}  # (where, title) -> perf_counter
        self.wake = trio.Event()
        self.items: dict[str, float] = {}  # update token -> perf_counter (part 2)

    def stamp(self, where: str, titles) -> None:
        now = time.perf_counter()
        for t in titles:
            self.seen.setdefault((where, t), now)
        self.wake.set()
        self.wake = trio.Event()


def start(args) -> tuple[Crew, dict]:
    if args.repo:
        crewlab.REPO = Path(args.repo).resolve()  # the processes run from that checkout
    crew = Crew(Path(tempfile.mkdtemp(prefix="sp", dir="/tmp")))
    socks = {"own": crew.lead.run / "own.sock"}
    socks.update({f"s{i}": crew.lead.run / f"s{i}.sock" for i in range(args.agents)})
    for name, sock in socks.items():
        assert crew.lead.collie("durable", "attach", name, "--socket", str(sock)).returncode == 0
    crew.start_lead()
    m = crew.add_member("workshop")
    socks["far"] = m.run / "far.sock"
    assert m.collie("durable", "attach", "far", "--socket", str(socks["far"])).returncode == 0
    m.serve()
    wait_for(lambda: crew.online("workshop"), what="member online")
    return crew, socks


async def _hold(cm, *, task_status=trio.TASK_STATUS_IGNORED):
    async with cm as collie:
        task_status.started(collie)
        await trio.sleep_forever()


async def all_ready(c: httpx.AsyncClient, names: set[str]) -> None:
    while True:
        dash = (await c.get("/api/dashboard")).json()["sections"]
        ready = {a["name"] for s in dash for a in s["agents"] if a["status"] == "ready"}
        if names <= ready:
            return
        await trio.sleep(0.2)


def on_dash(screens: Screens, c: httpx.AsyncClient, nursery, needs_fetch: dict):
    """The dashboard's channel: row events (and the page's GET /api/needs after each), needs events."""
    def on_event(kind, data):
        if kind == "row":
            doc = json.loads(data)
            row = doc.get("row") or {}
            if row.get("waiting"):
                screens.stamp("row", [f"{doc['machine']}/{doc['agent']}"])
            nursery.start_soon(fetch_needs)
        elif kind == "needs":
            doc = json.loads(data)
            screens.stamp("needs_event", [a.get("title") for a in doc.get("asks") or []])

    async def fetch_needs():  # the page's refreshNeeds, without its 50 ms wait; one at a time, then once more
        if needs_fetch["busy"]:
            needs_fetch["again"] = True
            return
        needs_fetch["busy"] = True
        try:
            while True:
                needs_fetch["again"] = False
                got = (await c.get("/api/needs")).json()
                screens.stamp("needs", [a["title"] for a in got["asks"]])
                if not needs_fetch["again"]:
                    return
        finally:
            needs_fetch["busy"] = False
    return on_event


def on_chat(screens: Screens):
    def on_event(kind, data):
        if kind in ("pane", "snapshot"):
            doc = json.loads(data)
            pane = doc.get("pane") or {}
            screens.stamp("chat", [a.get("title") for a in pane.get("asks") or []])
    return on_event


async def part1(args, crew: Crew, c: httpx.AsyncClient, token: str, panes: dict, nursery) -> dict:
    screens = Screens()
    needs_fetch = {"busy": False, "again": False}
    nursery.start_soon(light_sse, crew.address, token, "/api/events", on_dash(screens, c, nursery, needs_fetch))
    for machine, agent in (("local", "own"), ("workshop", "far")):
        nursery.start_soon(light_sse, crew.address, token,
                           f"/api/events?machine={machine}&agent={agent}&conversation=c", on_chat(screens))
    await trio.sleep(1.5)
    out: dict = {"floor": await floor(c)}

    async def raise_ask(pane, title: str, task_status=trio.TASK_STATUS_IGNORED):
        with trio.CancelScope() as cs:
            task_status.started(cs)
            await pane.ask(kind="permission", title=title, tool_call_id=title, options=OPTIONS)

    async def until(where: str, title: str, timeout: float = 15.0) -> bool:
        with trio.move_on_after(timeout):
            while (where, title) not in screens.seen:
                await screens.wake.wait()
            return True
        return False

    async def until_closed(machine: str, agent: str) -> None:
        with trio.fail_after(15):
            while any(a["machine"] == machine and a["agent"] == agent
                      for a in (await c.get("/api/needs")).json()["asks"]):
                await trio.sleep(0.05)

    for machine, agent in (("local", "own"), ("workshop", "far")):
        pane = panes[agent]
        for series in SERIES:
            lat: dict[str, list] = {w: [] for w in WHERE}
            never = {"needs": 0}
            for i in range(args.asks):
                title = f"{agent} {series} {i}?"
                first = None
                if series == "after":
                    reply = pane.reply("", final=False)
                    reply.append(f"{series}{i} ")
                    await trio.sleep(STEP)
                    reply.append("and ")
                    await trio.sleep(STEP)
                elif series in ("again", "swap"):
                    first = await nursery.start(raise_ask, pane, f"{title} (first)")
                    assert await until("chat", f"{title} (first)")
                    await trio.sleep(QUIET)
                    first.cancel()  # the agent decides by itself: that ask closes ...
                    await trio.sleep(STEP if series == "again" else 0)  # ... and it asks again
                screens.seen.pop(("row", f"{machine}/{agent}"), None)
                t0 = time.perf_counter()
                cs = await nursery.start(raise_ask, pane, title)
                assert await until("chat", title)
                if not await until("needs", title, timeout=args.needs_wait):
                    never["needs"] += 1
                if series in ("lone", "after"):
                    assert await until("row", f"{machine}/{agent}")
                await trio.sleep(0.3)  # late screens (needs_event) have had their chance
                for w in WHERE:
                    key = ("row", f"{machine}/{agent}") if w == "row" else (w, title)
                    if key in screens.seen and screens.seen[key] >= t0 and not (w == "row" and series in ("again", "swap")):
                        lat[w].append(screens.seen[key] - t0)
                cs.cancel()
                if series == "after":
                    reply.finish()
                await until_closed(machine, agent)
                await trio.sleep(QUIET)
            out[f"{agent}.{series}"] = {w: stats(v) for w, v in lat.items()}
            out[f"{agent}.{series}"]["needs_never"] = never["needs"]  # not there within --needs-wait
    out["floor_after"] = await floor(c)
    return out


TOKEN = re.compile(r"u(\d+)_")


async def part2(args, crew: Crew, c: httpx.AsyncClient, token: str, collies: dict, nursery,
                viewed: tuple[str, str] = ("local", "s0")) -> dict:
    screens = Screens()
    made: dict[int, float] = {}

    def on_items(kind, data):
        if kind in ("items", "snapshot"):
            now = time.perf_counter()
            doc = json.loads(data)
            for item in doc.get("items") or []:
                for k in TOKEN.findall(str(item.get("text") or "")):
                    screens.items.setdefault(k, now)

    history = collies[viewed[1]].conversation("c", title="Chat")
    for i in range(args.history):  # the viewed conversation is a long one already
        history.reply(f"earlier item {i}")
    await trio.sleep(2.0)
    nursery.start_soon(light_sse, crew.address, token,
                       f"/api/events?machine={viewed[0]}&agent={viewed[1]}&conversation=c", on_items)
    await trio.sleep(1.5)
    out: dict = {"floor": await floor(c)}
    lead_pid = crew.lead.bridge.pid
    dash: list[float] = []
    stop = trio.Event()

    busy_floor: list[float] = []

    async def dashboards():
        while not stop.is_set():
            t0 = time.perf_counter()
            r = await c.get("/api/dashboard")
            assert r.status_code == 200
            dash.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            await c.get("/healthz")  # the floor under the same load, interleaved
            busy_floor.append(time.perf_counter() - t0)
            await trio.sleep(0.1)

    updates = [0]

    async def stream(name: str):
        pane = collies[name].conversation("c", title="Chat")
        reply = pane.reply("", final=False)
        period = 1 / args.rate
        t_next = time.perf_counter()
        k = 0
        while not stop.is_set():
            if name == viewed[1]:
                made[k] = time.perf_counter()
            reply.append(f"u{k}_ ")
            updates[0] += 1
            k += 1
            t_next += period
            await trio.sleep(max(0.0, t_next - time.perf_counter()))
        reply.finish()

    member_pid = crew.members["workshop"].bridge.pid
    c0, m0, b0, w0 = cpu_seconds(lead_pid), cpu_seconds(member_pid), time.process_time(), time.monotonic()
    async with trio.open_nursery() as n:
        n.start_soon(dashboards)
        for name in collies:
            if name.startswith("s") or name == viewed[1]:
                n.start_soon(stream, name)
        await trio.sleep(args.seconds)
        stop.set()
    wall = time.monotonic() - w0
    lead_cpu, bench_cpu = cpu_seconds(lead_pid) - c0, time.process_time() - b0
    member_cpu = cpu_seconds(member_pid) - m0
    await trio.sleep(1.0)
    lat = [screens.items[str(k)] - t for k, t in made.items() if str(k) in screens.items]
    out.update(floor_busy=stats(busy_floor), streams=sum(1 for name in collies if name.startswith("s") or name == viewed[1]), items=stats(lat), missing=len(made) - len(lat), dashboard=stats(dash), updates=updates[0],
               viewed_updates=len(made), wall=wall, lead_cpu=lead_cpu, bench_cpu=bench_cpu, member_cpu=member_cpu,
               lead_cpu_per_update=lead_cpu / max(1, updates[0]), lead_cpu_share=lead_cpu / wall)
    return out


def run(quick: bool = False, asks: int | None = None, seconds: float | None = None, agents: int = 10,
        rate: float = 20.0, repo: str | None = None, parts: str = "asks,stream,stream_far", needs_wait: float = 5.0,
        history: int = 300) -> dict:
    """The figures as a dict, times in s (python -m bench: `speed`)."""
    args = argparse.Namespace(asks=asks or (4 if quick else 20), seconds=seconds or (2.0 if quick else 10.0),
                              agents=agents, rate=rate, repo=repo, needs_wait=1.0 if quick else needs_wait,
                              history=history)
    crew, socks = start(args)
    out: dict = {"load_before": os.getloadavg(), "sizes": {"asks": args.asks, "seconds": args.seconds,
                                                          "agents": args.agents, "rate": args.rate,
                                                          "needs_wait": args.needs_wait, "history": args.history}}

    async def main():
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        async with trio.open_nursery() as nursery:
            collies = {}
            for name, sock in socks.items():
                cm = open_collie(socket=str(sock), host_name="bench", caps=["asks", "send", "watch"],
                                 caller_check="off", runtime="bench")
                collie = await nursery.start(_hold, cm)
                collies[name] = collie
            panes = {name: collie.conversation("c", title="Chat") for name, collie in collies.items()}
            for collie in collies.values():
                collie.ready()
            async with httpx.AsyncClient(base_url=crew.address, timeout=30,
                                         headers={"authorization": f"Bearer {token}"}) as c:
                with trio.fail_after(60):
                    await all_ready(c, set(socks))
                if "asks" in parts.split(","):
                    async with trio.open_nursery() as n:
                        out["asks"] = await part1(args, crew, c, token, panes, n)
                        n.cancel_scope.cancel()
                if "stream" in parts.split(","):
                    async with trio.open_nursery() as n:
                        out["stream"] = await part2(args, crew, c, token, collies, n)
                        n.cancel_scope.cancel()
                if "stream_far" in parts.split(","):
                    async with trio.open_nursery() as n:
                        out["stream_far"] = await part2(args, crew, c, token, collies, n, ("workshop", "far"))
                        n.cancel_scope.cancel()
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)  # a lead's state folder: its api-token too
    out["load"] = os.getloadavg()
    return out


def args_asks(r: dict) -> int:
    return r["sizes"]["asks"]


def f_ms(s: dict | None, key: str) -> str:
    return "-" if not s else f"{s[key] * 1000:.1f} ms"


def report(r: dict) -> None:
    one, five, fifteen = r["load"]
    print(f"load average before {r['load_before'][0]:.2f}, after {one:.2f} {five:.2f} {fifteen:.2f} "
          f"({os.cpu_count()} cores)")
    a = r.get("asks")
    if a:
        f50 = pct(a["floor"] + a["floor_after"], 50)
        print(f"floor (GET /healthz on the lead): p50 {f50 * 1000:.2f} ms  p99 {pct(a['floor'], 99) * 1000:.2f} ms")
        print(f"{'ask raised -> visible':<34} {'n':>3}  {'p50':>9}  {'p99':>9}  {'max':>9}  {'p99/floor':>9}  target")
        for agent in ("own", "far"):
            for series in SERIES:
                never = a[f"{agent}.{series}"].get("needs_never")
                if never:
                    print(f"{agent + ' ' + series + ' needs':<34} {never:>3} of {args_asks(r)} asks not in Needs you "
                          f"after {r['sizes']['needs_wait']:g} s: NO")
                for w in WHERE:
                    s = a[f"{agent}.{series}"][w]
                    if not s:
                        continue
                    target = "p99 <= 100 ms" + (" (+50 ms the page waits)" if w == "needs" else "")
                    met = "yes" if s["p99"] <= 0.100 else "NO"
                    print(f"{agent + ' ' + series + ' ' + w:<34} {s['n']:>3}  {f_ms(s, 'p50'):>9}  {f_ms(s, 'p99'):>9}  "
                          f"{f_ms(s, 'max'):>9}  {s['p99'] / f50:>8.1f}x  {target}: {met}")
    for part, what in (("stream", "the lead's own agent s0"), ("stream_far", "the member's agent far")):
        s = r.get(part)
        if not s:
            continue
        f50 = pct(s["floor"], 50)
        z = r["sizes"]
        print(f"streaming: {s['streams']} agents x {z['rate']:g} updates/s for {s['wall']:.1f} s ({s['updates']} updates), "
              f"one viewed: {what} ({s['viewed_updates']} updates, {s['missing']} never shown); floor p50 {f50 * 1000:.2f} ms"
              f" p99 {pct(s['floor'], 99) * 1000:.2f} ms; floor during the stream (GET /healthz every 100 ms) p99 "
              f"{f_ms(s.get('floor_busy'), 'p99')}")
        i, d = s["items"], s["dashboard"]
        print(f"  update -> items event: p50 {f_ms(i, 'p50')}  p99 {f_ms(i, 'p99')}  max {f_ms(i, 'max')}  "
              f"target p99 <= 100 ms: {'yes' if i and i['p99'] <= 0.1 and not s['missing'] else 'NO'}")
        print(f"  GET /api/dashboard meanwhile (n={d['n']}): p50 {f_ms(d, 'p50')}  p99 {f_ms(d, 'p99')}  "
              f"target p99 <= 50 ms: {'yes' if d['p99'] <= 0.05 else 'NO'}")
        print(f"  lead CPU: {s['lead_cpu_per_update'] * 1000:.2f} ms per update ({100 * s['lead_cpu_share']:.0f} % of a "
              f"core); the member: {100 * s['member_cpu'] / s['wall']:.0f} % of a core; this process (agents, phones): "
              f"{100 * s['bench_cpu'] / s['wall']:.0f} % of a core")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=20, help="asks per series")
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--rate", type=float, default=20.0)
    p.add_argument("--parts", default="asks,stream,stream_far", help="asks, stream (viewed: the lead's own agent), "
                   "stream_far (viewed: the member's agent)")
    p.add_argument("--needs-wait", type=float, default=5.0, help="seconds an ask may take to reach Needs you")
    p.add_argument("--history", type=int, default=300, help="items the viewed conversation holds before the reply")
    p.add_argument("--repo", help="run the lead and member from this checkout")
    p.add_argument("--json", help="also write the figures here")
    args = p.parse_args()
    if args.asks < 1 or args.seconds <= 0 or args.agents < 1 or args.rate <= 0:
        p.error("--asks, --seconds, --agents and --rate must be positive")
    r = run(asks=args.asks, seconds=args.seconds, agents=args.agents, rate=args.rate, repo=args.repo,
            parts=args.parts, needs_wait=args.needs_wait, history=args.history)
    report(r)
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
