"""How long a member's big snapshot holds up the lead (issue 9.6).

    .venv/bin/python bench/crew_snapshot.py [--agents 50] [--conversations 200] [--pad 600] [--one-frame]

A real `collie serve` lead; a simulated member (its own process, a real WebSocket link) sends one
snapshot of `agents` x `conversations` open conversations, each with one permission ask carrying
`pad` characters. Two figures:

- the lead's longest event-loop steps while it takes the snapshot (bench/loopwatch records every
  step over 2 ms inside the lead process): a step is time the lead answers nobody;
- from outside, `GET /healthz` asked back to back over one kept-alive connection, against the floor:
  the same request on the idle lead, measured in the same run.

By default the member sends the snapshot the way a member does (`collie.crew.membercore.snapshot_frames`: frames of at most
crewwire.MAX_FRAME, the rest as `agent` frames); `--one-frame` sends it as one frame, as members
did before issue 9.6 (a current lead closes such a link: code 1009).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from tests.crewlab import Crew, fake_view, hello_frame, invite  # noqa: E402


def views(agents: int, conversations: int, pad: int) -> list[dict]:
    out = []
    for a in range(agents):
        view = fake_view(f"agent{a}", conversations, instance=f"sim-{a}")
        for conv in view["state"]["conversations"]:
            conv["state"] = "waiting"
            conv["asks"] = [{"id": f"ask-{conv['id']}", "kind": "permission", "title": "Deploy to staging?",
                             "tool": "deploy", "body": "x" * pad,
                             "options": [{"id": "allow", "label": "Allow", "role": "allow"},
                                         {"id": "deny", "label": "Deny", "role": "deny"}]}]
        out.append(view)
    return out


def member_main(url: str, token: str, agents: int, conversations: int, pad: int, one_frame: bool) -> None:
    """The simulated member: connect, send the snapshot, say `sent` on stdout, then keep the link."""
    import trio
    from trio_websocket import open_websocket_url

    frames = [{"type": "snapshot", "agents": views(agents, conversations, pad)}]
    texts = [json.dumps(f, separators=(",", ":")) for f in frames]
    if not one_frame:
        from collie.crew.membercore import snapshot_frames

        texts = snapshot_frames([(v["name"], json.dumps(v, separators=(",", ":"))) for v in frames[0]["agents"]])

    async def run():
        async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {token}".encode())],
                                      max_message_size=64 * 2**20) as ws:
            await ws.send_message(hello_frame("big"))
            await ws.get_message()
            print(f"ready {len(texts)} {sum(len(t) for t in texts)}", flush=True)
            sys.stdin.readline()
            for text in texts:
                await ws.send_message(text)
            print("sent", flush=True)
            await trio.sleep(3600)

    trio.run(run)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--agents", type=int, default=50)
    p.add_argument("--conversations", type=int, default=200)
    p.add_argument("--pad", type=int, default=600)
    p.add_argument("--one-frame", action="store_true")
    p.add_argument("--member", nargs=2, metavar=("URL", "TOKEN"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.member:
        member_main(*args.member, args.agents, args.conversations, args.pad, args.one_frame)
        return
    crew = Crew(Path(tempfile.mkdtemp(prefix="cs", dir="/tmp")))
    member = None
    try:
        watch = crew.base / "loopwatch.txt"
        crew.lead.env["PYTHONPATH"] = f"{Path(__file__).resolve().parent / 'loopwatch'}:{crew.lead.env['PYTHONPATH']}"
        crew.lead.env["COLLIE_BENCH_LOOPWATCH"] = str(watch)
        crew.start_lead()
        token = invite(crew, "big")
        url = crew.address.replace("http://", "ws://") + "/crew/v1"
        member = subprocess.Popen([sys.executable, __file__, "--member", url, token, "--agents", str(args.agents),
                                   "--conversations", str(args.conversations), "--pad", str(args.pad)]
                                  + (["--one-frame"] if args.one_frame else []),
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
        _, nframes, nbytes = member.stdout.readline().split()
        api = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {api}"}, timeout=60) as c:
            def probe() -> float:
                t0 = time.perf_counter()
                assert c.get("/healthz").status_code == 200
                return time.perf_counter() - t0

            floor = [probe() for _ in range(300)]
            member.stdin.write("go\n")
            member.stdin.flush()
            t0, wall0 = time.perf_counter(), time.time()
            during: list[float] = []
            shown_at = None
            last_check = 0.0
            while time.perf_counter() - t0 < 120:
                during.append(probe())
                now = time.perf_counter()
                if now - last_check > 0.25:
                    last_check = now
                    if shown_at is None and member_agents(c) == args.agents:
                        shown_at = now - t0
                        break
            tail_until = time.perf_counter() + 1.0
            while time.perf_counter() < tail_until:
                during.append(probe())
            online = crew.online("big")
            wall1 = time.time()
        lines = [line.split(" ", 3) for line in watch.read_text().splitlines()]
        lines = [f for f in lines if wall0 <= float(f[0]) <= wall1]
        steps = [(float(wall), float(cpu), name.strip()) for _, wall, cpu, name in lines if wall != "gc"]
        pauses = sorted(((float(f[2]), f[3].strip()) for f in lines if f[1] == "gc"), reverse=True)
        f50 = statistics.median(floor)
        print(f"snapshot: {args.agents} agents x {args.conversations} conversations, one ask each "
              f"({int(nbytes) / 2**20:.1f} MiB in {nframes} frame{'s' if int(nframes) > 1 else ''})")
        print(f"floor (GET /healthz, idle lead, n={len(floor)}): p50 {f50 * 1e3:.2f} ms")
        print(f"while the lead takes the snapshot (n={len(during)}): p50 {pct(during, 50) * 1e3:.2f} ms "
              f"({pct(during, 50) / f50:.1f}x floor), p99 {pct(during, 99) * 1e3:.1f} ms "
              f"({pct(during, 99) / f50:.0f}x), max {max(during) * 1e3:.1f} ms ({max(during) / f50:.0f}x)")
        def short(name: str) -> str:
            return ".".join(name.rsplit(".", 2)[-2:])

        by_wall = sorted(steps, reverse=True)[:3]
        by_cpu = sorted(steps, key=lambda s: s[1], reverse=True)[:3]
        print(f"lead loop steps over 2 ms while taking it: {len(steps)}")
        print("  longest by wall time: " + ", ".join(f"{w * 1e3:.1f} ms ({short(n)})" for w, _, n in by_wall))
        print("  longest by the loop's CPU time: " + ", ".join(f"{c * 1e3:.1f} ms ({short(n)})" for _, c, n in by_cpu))
        print(f"garbage collections of 5 ms or more: {len(pauses)}"
              + ("; longest " + ", ".join(f"{t * 1e3:.0f} ms ({g})" for t, g in pauses[:3]) if pauses else ""))
        print(f"every agent on the dashboard after {shown_at:.2f} s" if shown_at is not None
              else f"the agents never showed (member online: {online})")
    finally:
        if member is not None:
            member.kill()
            member.wait()
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)


def member_agents(c: httpx.Client) -> int:
    sections = c.get("/api/dashboard").json()["sections"]
    return sum(len(s["agents"]) for s in sections if s["machine"] == "big")


if __name__ == "__main__":
    main()
