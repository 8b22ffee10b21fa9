"""The phone's live channel and push, measured where the phone sees them (issues 11, 13).

    .venv/bin/python bench/live_channel.py [--asks 200] [--members 50] [--agents 10] [--conversations 20]
                                           [--phones 100] [--seconds 20] [--rate 10]

Part 1 — ask latency: a real lead and a real member (`collie serve` processes). The agent on the member
is run by this process with the SDK (watch declared) so that the moment an ask is raised is known
exactly; a live channel on the lead views its conversation. For each ask: time from raising it in the
agent to the `pane` event carrying it on the phone's channel. The floor is a loopback HTTP round trip
to the same lead (`GET /healthz` on a kept-alive connection), measured in the same run.

Part 3 — push: ask raised on a member's agent -> the encrypted push request reaching a push service on
loopback (10 agents x 10 panes, inside the P1 limits).

Part 2 — fan-out: the same lead with members-1 simulated members (real WebSocket links) x agents x
conversations, and `--phones` live channels open. Lead CPU and RSS idle, then under `--rate` changes a
second (an ask raised and closed on a simulated agent), and the time from the change frame leaving
the member to its `row` event reaching each phone (p50/p99 over every phone and change).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import cpu_seconds, pct, rss_mib  # noqa: E402

from collie.crew.sdk import open_collie  # noqa: E402
from tests.crewlab import Crew, invite_sims, start_fake_members, toggle_fake_ask, wait_for  # noqa: E402


def ms(x: float) -> str:
    return f"{x * 1000:.1f} ms"


async def sse(client: httpx.AsyncClient, path: str, on_event, started=None) -> None:
    async with client.stream("GET", path) as resp:
        kind = data = None
        if started is not None:
            started()
        async for line in resp.aiter_lines():
            if line.startswith("event:"):
                kind = line[6:].strip()
            elif line.startswith("data:"):
                data = line[5:]
            elif line == "" and kind:
                on_event(kind, data)
                kind = data = None


async def light_sse(address: str, token: str, path: str, on_event, started=None) -> None:
    """A live channel read with h11 straight off a socket: 100 httpx streams in this one process cost more
    CPU than the lead's fan-out itself, and their backlog was measured as the lead's latency."""
    import h11

    url = httpx.URL(address)
    stream = await trio.open_tcp_stream(url.host, url.port)
    conn = h11.Connection(h11.CLIENT)
    await stream.send_all(conn.send(h11.Request(method="GET", target=path, headers=[
        ("host", f"{url.host}:{url.port}"), ("authorization", f"Bearer {token}"), ("accept", "text/event-stream")])))
    await stream.send_all(conn.send(h11.EndOfMessage()))
    buf = b""
    if started is not None:
        started()
    async with stream:
        while True:
            ev = conn.next_event()
            if ev is h11.NEED_DATA:
                conn.receive_data(await stream.receive_some(65536))
                continue
            if isinstance(ev, (h11.EndOfMessage, h11.ConnectionClosed)):
                return
            if isinstance(ev, h11.Data):
                buf += ev.data
                *blocks, buf = buf.split(b"\n\n")
                for block in blocks:
                    kind = data = None
                    for line in block.split(b"\n"):
                        if line.startswith(b"event:"):
                            kind = line[6:].strip().decode()
                        elif line.startswith(b"data:"):
                            data = line[5:]
                    if kind:
                        on_event(kind, data)


async def floor(client: httpx.AsyncClient, n: int = 200) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        await client.get("/healthz")
        out.append(time.perf_counter() - t0)
    return out


def part1(args, crew: Crew, sock: Path) -> dict:
    results: dict = {}

    async def run():
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        async with open_collie(socket=str(sock), host_name="bench", caps=["asks", "send", "watch"],
                               caller_check="off", runtime="bench") as collie:
            pane = collie.conversation("deploy", title="Deploy")
            collie.ready()
            m = crew.members["workshop"]
            assert m.collie("durable", "attach", "bench", "--socket", str(sock)).returncode == 0
            m.serve()
            wait_for(lambda: crew.online("workshop"), what="member online")
            async with httpx.AsyncClient(base_url=crew.address, timeout=30,
                                         headers={"authorization": f"Bearer {token}"}) as c:
                async def agent_ready():
                    while True:
                        dash = (await c.get("/api/dashboard")).json()["sections"]
                        rows = [a for s in dash if s["machine"] == "workshop" for a in s["agents"]]
                        if rows and rows[0]["status"] == "ready":
                            return
                        await trio.sleep(0.1)
                with trio.fail_after(30):
                    await agent_ready()
                seen = {"ask": None, "event": trio.Event()}

                def on_event(kind, data):
                    if kind in ("pane", "snapshot"):
                        doc = json.loads(data)
                        p = doc.get("pane") or {}
                        ask = (p or {}).get("ask")
                        seen["ask"] = ask["title"] if ask else None
                        seen["event"].set()

                lat = []
                async with trio.open_nursery() as n:
                    n.start_soon(sse, c, "/api/events?machine=workshop&agent=bench&conversation=deploy", on_event)
                    await trio.sleep(1.0)
                    results["floor"] = await floor(c)
                    for pause in args.pause:
                        lat = []
                        for i in range(args.asks):
                            title = f"Ask {pause}-{i}?"
                            done = {}
                            seen["event"] = trio.Event()
                            t0 = time.perf_counter()

                            async def raise_one(title=title, done=done):
                                with trio.CancelScope() as cs:
                                    done["cs"] = cs
                                    await pane.ask(kind="permission", title=title, tool_call_id=title,
                                                   options=[{"id": "y", "label": "Yes", "role": "allow"}])
                            n.start_soon(raise_one)
                            with trio.fail_after(10):
                                while seen["ask"] != title:
                                    await seen["event"].wait()
                                    seen["event"] = trio.Event()
                            lat.append(time.perf_counter() - t0)
                            done["cs"].cancel()  # the agent decides by itself: the ask closes
                            with trio.fail_after(10):
                                while seen["ask"] is not None:
                                    await seen["event"].wait()
                                    seen["event"] = trio.Event()
                            await trio.sleep(pause)
                        results.setdefault("lat", {})[pause] = lat
                    n.cancel_scope.cancel()

    trio.run(run)
    return results


def part3(args, crew: Crew, run: Path) -> dict:
    """Ask raised on a member's agent -> the encrypted push request arriving at a push service on
    loopback (fake; it decrypts nothing: the time it receives the request is what is measured).
    10 agents x 10 panes, so that every ask is inside the P1 limits (3/min per pane, 10/min per agent)."""
    from tests.pushlab import FakePushService, Subscriber

    service = FakePushService()
    results: dict = {"lat": []}

    async def run_():
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        async with httpx.AsyncClient(base_url=crew.address, timeout=30,
                                     headers={"authorization": f"Bearer {token}"}) as c:
            sub = Subscriber(service.url("/ok/bench"))
            assert (await c.post("/api/push/subscribe", json=sub.json())).json()["ok"]
            results["floor"] = await floor(c)
        async with trio.open_nursery() as n:
            collies = []
            for a in range(args.push_agents):
                cm = open_collie(socket=str(run / f"p{a}.sock"), host_name="bench", caps=["asks", "watch"],
                                 caller_check="off", runtime="bench")
                collie = await n.start(_hold, cm)
                panes = [collie.conversation(f"c{i}", title=f"Pane {i}") for i in range(10)]
                collie.ready()
                collies.append((collie, panes))
            m = crew.members["workshop"]
            for a in range(args.push_agents):
                assert m.collie("durable", "attach", f"p{a}", "--socket", str(run / f"p{a}.sock")).returncode == 0
            assert m.collie("restart").returncode == 0
            await trio.sleep(3)
            base = len(service.received)
            for i in range(10):
                for a, (collie, panes) in enumerate(collies):
                    title = f"Push {a}-{i}?"
                    t0 = time.perf_counter()

                    async def ask(pane=panes[i], title=title):
                        with trio.move_on_after(8):
                            await pane.ask(kind="permission", title=title, tool_call_id=title,
                                           options=[{"id": "y", "label": "Yes", "role": "allow"}])
                    n.start_soon(ask)
                    want = base + 1
                    with trio.fail_after(10):
                        while len(service.received) < want:
                            await trio.sleep(0.001)
                    results["lat"].append(time.perf_counter() - t0)
                    base = want
            n.cancel_scope.cancel()

    trio.run(run_)
    service.close()
    return results


async def _hold(cm, *, task_status=trio.TASK_STATUS_IGNORED):
    async with cm as collie:
        task_status.started(collie)
        await trio.sleep_forever()


def part2(args, crew: Crew) -> dict:
    sims = invite_sims(crew, args.members - 1)
    lead_pid = crew.lead.bridge.pid
    results: dict = {"fan": []}
    sent_at: dict[str, float] = {}

    async def run():
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        async with trio.open_nursery() as n:
            fakes = await start_fake_members(n, crew, sims, agents=args.agents, conversations=args.conversations)
            await trio.sleep(3)
            opened = [0]
            phones_up = trio.Event()

            def started():
                opened[0] += 1
                if opened[0] == args.phones:
                    phones_up.set()

            def on_event(kind, data):
                if kind == "row":
                    doc = json.loads(data)
                    row = doc.get("row") or {}
                    key = f"{doc['machine']}:{row.get('waiting')}"
                    t = sent_at.get(key)
                    if t is not None:
                        results["fan"].append(time.perf_counter() - t)

            limits = httpx.Limits(max_connections=args.phones + 10)
            async with httpx.AsyncClient(base_url=crew.address, timeout=60, limits=limits,
                                         headers={"authorization": f"Bearer {token}"}) as c:
                for _ in range(args.phones):
                    n.start_soon(light_sse, crew.address, token, "/api/events", on_event, started)
                with trio.fail_after(60):
                    await phones_up.wait()
                await trio.sleep(3)
                c0, w0 = cpu_seconds(lead_pid), time.monotonic()
                await trio.sleep(args.seconds)
                results["idle_cpu"] = (cpu_seconds(lead_pid) - c0) / (time.monotonic() - w0)
                results["idle_rss"] = rss_mib(lead_pid)
                c0, w0, b0 = cpu_seconds(lead_pid), time.monotonic(), time.process_time()
                k = 0
                end = time.monotonic() + args.seconds
                while time.monotonic() < end:
                    fake = fakes[k % len(fakes)]
                    label = fake.label
                    # alternate raise/close on that member's first agent; the row's waiting count says which
                    key_on = f"{label}:1"
                    key = key_on if not sent_at.get(f"{label}:on") else f"{label}:None"
                    sent_at[f"{label}:on"] = key == key_on
                    sent_at[key] = time.perf_counter()  # the member's agent frame goes in this loop's next step
                    toggle_fake_ask(fake, key)
                    k += 1
                    await trio.sleep(1 / args.rate)
                await trio.sleep(1)
                results["busy_cpu"] = (cpu_seconds(lead_pid) - c0) / (time.monotonic() - w0)
                results["busy_rss"] = rss_mib(lead_pid)
                results["bench_cpu"] = (time.process_time() - b0) / (time.monotonic() - w0)
                results["changes"] = k
                results["floor"] = await floor(c)
                n.cancel_scope.cancel()

    trio.run(run)
    return results


LONE = 0.3  # an ask after a quiet spell longer than the member poller's 0.2 s read gap (bridge/pace.py)
BEHIND = 0.05  # an ask right behind another change of the same agent: it waits for that gap, by design


def latency(lat: list[float], floor: list[float]) -> dict:
    """p50/p99 of `lat` beside the floor's, and the ratios to the floor's p50."""
    f50 = pct(floor, 50)
    return {"n": len(lat), "p50": pct(lat, 50), "p99": pct(lat, 99), "floor": {"p50": f50, "p99": pct(floor, 99)},
            "ratio_p50": pct(lat, 50) / f50, "ratio_p99": pct(lat, 99) / f50}


def run(quick: bool = False, asks: int | None = None, push_agents: int | None = None, fanout: bool = False) -> dict:
    """The figures as a dict, times in s (python -m bench): ask on a member's agent -> `pane` event on a
    live channel (part 1; 200 asks, 20 with `quick`), -> push request (part 3; 10 agents, none with
    `quick`), and with `fanout` part 2 at its command-line defaults."""
    args = argparse.Namespace(asks=asks or (20 if quick else 200), members=50, agents=10, conversations=20,
                              phones=100, seconds=20, rate=10, pause=[LONE] if quick else [LONE, BEHIND],
                              push_agents=push_agents if push_agents is not None else (0 if quick else 10))
    crew = Crew(Path(tempfile.mkdtemp(prefix="cl", dir="/tmp")))
    out: dict = {}
    try:
        crew.start_lead()
        crew.add_member("workshop")
        r1 = part1(args, crew, crew.members["workshop"].run / "bench.sock")
        out["ask_to_channel"] = latency(r1["lat"][LONE], r1["floor"])  # the issue 11 target: a lone ask
        if BEHIND in r1["lat"]:
            out["ask_behind_a_change"] = latency(r1["lat"][BEHIND], r1["floor"])
        if args.push_agents:
            r3 = part3(args, crew, crew.members["workshop"].run)
            out["ask_to_push"] = latency(r3["lat"], r3["floor"])
        if fanout:
            r2 = part2(args, crew)
            out["fanout"] = {**latency(r2["fan"], r2["floor"]), **{k: r2[k] for k in (
                "idle_cpu", "idle_rss", "busy_cpu", "busy_rss", "changes")}}
    finally:
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)  # a lead's state folder: its api-token too
    out["load"] = os.getloadavg()
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--asks", type=int, default=200)
    p.add_argument("--members", type=int, default=50)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--conversations", type=int, default=20)
    p.add_argument("--phones", type=int, default=100)
    p.add_argument("--seconds", type=float, default=20)
    p.add_argument("--rate", type=float, default=10)
    p.add_argument("--skip-fanout", action="store_true")
    p.add_argument("--skip-asks", action="store_true", help="part 2 only")
    p.add_argument("--pause", type=lambda v: [float(x) for x in v.split(",")], default=[LONE, BEHIND],
                   help="seconds between an ask closing and the next one on the same agent; one series each "
                        "(0.3: a lone ask, after a quiet spell longer than the poller's 0.2 s gap; 0.05: an ask right "
                        "behind another change, which waits for that gap by design)")
    p.add_argument("--push-agents", type=int, default=10, help="agents raising asks for the push latency (10 asks each)")
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cl", dir="/tmp"))
    crew = Crew(base)
    try:
        crew.start_lead()
        crew.add_member("workshop")
        print(f"load average {os.getloadavg()[0]:.2f}")
        if not args.skip_asks:
            r1 = part1(args, crew, crew.members["workshop"].run / "bench.sock")
            f50 = pct(r1["floor"], 50)
            print(f"floor (loopback HTTP round trip to the lead, GET /healthz): p50 {ms(f50)} p99 {ms(pct(r1['floor'], 99))}")
            for pause, lat in r1["lat"].items():
                print(f"ask raised on a member's agent {pause:g} s after the previous one closed -> pane event on the "
                      f"phone's live channel (n={len(lat)}): p50 {ms(pct(lat, 50))} ({pct(lat, 50) / f50:.1f}x floor)  "
                      f"p99 {ms(pct(lat, 99))} ({pct(lat, 99) / f50:.1f}x floor)  mean {ms(statistics.mean(lat))}")
            r3 = part3(args, crew, crew.members["workshop"].run)
            lat = r3["lat"]
            f50 = pct(r3["floor"], 50)
            print(f"ask raised on a member's agent -> push request at the push service (n={len(lat)}): "
                  f"p50 {ms(pct(lat, 50))} ({pct(lat, 50) / f50:.0f}x floor)  p99 {ms(pct(lat, 99))} "
                  f"({pct(lat, 99) / f50:.0f}x floor)")
        if not args.skip_fanout:
            r2 = part2(args, crew)
            fan = r2["fan"] or [float("nan")]
            f50 = pct(r2["floor"], 50)
            print(f"{args.members} members ({args.members - 1} simulated) x {args.agents} agents x "
                  f"{args.conversations} conversations, {args.phones} live channels:")
            print(f"  lead idle: CPU {100 * r2['idle_cpu']:.2f} % of a core, RSS {r2['idle_rss']:.0f} MiB")
            print(f"  lead under {args.rate:g} changes/s ({r2['changes']} changes): CPU {100 * r2['busy_cpu']:.1f} % "
                  f"of a core, RSS {r2['busy_rss']:.0f} MiB")
            print(f"  (this benchmark's own process, 49 members and 100 phones: CPU {100 * r2['bench_cpu']:.0f} % of a core)")
            print(f"  change frame -> row event at each phone (n={len(r2['fan'])}): p50 {ms(pct(fan, 50))} "
                  f"({pct(fan, 50) / f50:.1f}x floor)  p99 {ms(pct(fan, 99))} ({pct(fan, 99) / f50:.1f}x floor)  "
                  f"(floor p50 {ms(f50)})")
    finally:
        crew.stop()
        shutil.rmtree(base, ignore_errors=True)  # a lead's state folder: its api-token too


if __name__ == "__main__":
    main()
