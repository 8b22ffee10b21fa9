"""What one hostile member's views make a real lead hold: RSS and the views file (crew.md §2, §6).

    .venv/bin/python bench/member_views.py [--agents 100] [--chars ascii|emoji|tiny] [--same] [--seconds 8]

A real lead (`collie serve`) takes one member at crew.md §6's design scale (10 agents × 100
conversations: the testing kit's collie.fixtures.member.FakeMember), then one hostile member on a real WebSocket link that fills
every limit: `--agents` agents (100 at most), each one `agent` frame of just under 1 MiB carrying 200
conversations with long titles. `emoji` titles are four UTF-8 bytes a character on the link but twelve
characters in the lead's kept JSON (`\\ud83d\\ude00`). Printed: the lead's VmRSS after the normal member
and at its peak while the hostile one is taken (sampled every 0.2 s for `--seconds` after its last
frame left), the size of each member's views file, how many of the hostile agents the lead shows and
what it counts as kept of each member's views (`views_kept`, collie.lead.members.hub.MEMBER_VIEWS_MAX). `tiny` sends
fake_view's small conversations instead: the readers' objects beside the text. `--same` names one
agent in every frame: the lead keeps one view, so the RSS shows what taking the frames costs (parsing,
the worker threads' malloc arenas), not keeping them.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

import trio
from trio_websocket import open_websocket_url

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collie.crew import control  # noqa: E402
from collie.fixtures.member import FakeMember  # noqa: E402
from tests.crewlab import Crew, fake_view, hello_frame, invite, wait_for  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from measure import rss_mib  # noqa: E402

CONVERSATIONS = 200


def big_view(name: str, chars: str) -> dict:
    """A view whose `agent` frame is just under 1 MiB (bytes on the link) with 200 conversations."""
    view = fake_view(name, CONVERSATIONS)
    if chars == "tiny":  # many small conversations: what the readers' objects cost beside the text
        return view
    glyph, width = ("x", 1) if chars == "ascii" else ("\U0001F600", 4)
    base = len(json.dumps({"type": "agent", "name": name, "view": view}, ensure_ascii=False).encode())
    per = (1024 * 1024 - 4096 - base) // CONVERSATIONS // width
    for conv in view["state"]["conversations"]:
        conv["title"] = glyph * per
    return view


async def hostile(url: str, token: str, agents: int, chars: str, sent: trio.Event, same: bool) -> None:
    async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {token}".encode())],
                                  message_queue_size=64) as ws:
        await ws.send_message(hello_frame("evil", boot="evil"))
        await ws.get_message()
        await ws.send_message(json.dumps({"type": "snapshot", "agents": [], "more": [f"a{i}" for i in range(agents)]}))
        for i in range(agents):
            view = big_view("a0" if same else f"a{i}", chars)
            frame = json.dumps({"type": "agent", "name": view["name"],
                                "view": {k: v for k, v in view.items() if k != "name"}}, ensure_ascii=False)
            assert len(frame.encode()) <= 1024 * 1024
            await ws.send_message(frame)
        sent.set()
        while True:
            await trio.sleep(5)
            await ws.send_message(json.dumps({"type": "beat"}))


async def main(args) -> dict:
    crew = Crew(Path(tempfile.mkdtemp(prefix="mv", dir="/tmp")))
    try:
        crew.start_lead()
        pid = crew.lead.bridge.pid
        normal, evil = invite(crew, "normal"), invite(crew, "evil")
        url = crew.address.replace("http://", "ws://") + "/crew/v1"
        out: dict = {"rss_start_mib": rss_mib(pid)}
        async with trio.open_nursery() as n:
            n.start_soon(FakeMember(url, "normal", normal, agents=10, conversations=100, beat=5).run)
            await trio.to_thread.run_sync(wait_for, lambda: crew.online("normal"))
            await trio.sleep(4)  # its views saved
            out["rss_normal_mib"] = rss_mib(pid)
            sent = trio.Event()
            n.start_soon(hostile, url, evil, args.agents, args.chars, sent, args.same)
            peak, end = 0.0, None
            give_up = time.monotonic() + 120
            while end is None or time.monotonic() < end:
                peak = max(peak, rss_mib(pid))
                if end is None and (sent.is_set() or time.monotonic() > give_up):
                    end = time.monotonic() + args.seconds
                await trio.sleep(0.2)
            out["rss_hostile_peak_mib"] = peak
            out["rss_hostile_end_mib"] = rss_mib(pid)
            views = crew.lead.paths.state_dir / "crew-views"
            out["views_file_bytes"] = {p.stem: p.stat().st_size for p in views.glob("*.json")}
            members = control.call(crew.lead.paths.control_socket, "crew")["members"]
            for key in ("online", "agents", "views_kept"):
                out[key] = {m["label"]: m.get(key) for m in members}
            n.cancel_scope.cancel()
        return out
    finally:
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)  # the lead's state folder: its api-token too


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--chars", choices=("ascii", "emoji", "tiny"), default="ascii")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--same", action="store_true", help="every frame for one agent (what taking the frames costs)")
    print(json.dumps(trio.run(main, parser.parse_args()), indent=1))
