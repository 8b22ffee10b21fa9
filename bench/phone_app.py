"""The phone app measured in Chromium (issue 12).

    .venv/bin/python bench/phone_app.py [--asks 100] [--machines 10] [--agents 10] [--conversations 100]

1. Ask raised on a member's agent -> its card visible in the page: a real lead and member; the agent is
   run by this process (SDK, watch) so the moment the ask is raised is known; the page (headless
   Chromium at phone size) shows that conversation, and a MutationObserver stamps the wall-clock time
   the card appears. Floor: a loopback HTTP round trip to the lead, measured in the same run.
2. Dashboard of `--machines` machines (the lead, one real member and simulated members) x agents x
   conversations: first render in Chromium (navigation start to every section drawn), bytes over the
   wire for the first load, and bytes per live update (one row event).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from crew.sdk import open_collie  # noqa: E402
from tests.browser import launch  # noqa: E402
from tests.crewlab import Crew, invite_sims, start_sims, wait_for  # noqa: E402

OBSERVE = """() => { window.__cards = {}; new MutationObserver(() => {
  for (const c of document.querySelectorAll('.card[data-ask]')) {
    const t = c.querySelector('.title'); if (t && !(t.textContent in window.__cards)) window.__cards[t.textContent] = Date.now();
  } }).observe(document.body, {subtree: true, childList: true}); }"""


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--asks", type=int, default=100)
    p.add_argument("--machines", type=int, default=10)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--conversations", type=int, default=100)
    args = p.parse_args()
    from playwright.sync_api import sync_playwright

    crew = Crew(Path(tempfile.mkdtemp(prefix="cu", dir="/tmp")))
    sock = None
    stop = threading.Event()
    raised: dict[str, float] = {}
    agent_up = threading.Event()
    asks_q: list = []

    def agent_thread():
        async def run():
            async with open_collie(socket=str(sock), host_name="bench", caps=["asks", "send", "watch"],
                                   caller_check="off", runtime="bench") as collie:
                pane = collie.conversation("deploy", title="Deploy")
                collie.ready()
                agent_up.set()
                async with trio.open_nursery() as n:
                    while not stop.is_set():
                        if asks_q:
                            title = asks_q.pop(0)

                            async def one(title=title):
                                with trio.move_on_after(5):
                                    raised[title] = time.time()
                                    await pane.ask(kind="permission", title=title,
                                                   options=[{"id": "y", "label": "Yes", "role": "allow"}])
                            n.start_soon(one)
                        await trio.sleep(0.002)
                    n.cancel_scope.cancel()
        trio.run(run)

    try:
        crew.start_lead()
        m = crew.add_member("workshop")
        sock = m.run / "bench.sock"
        threading.Thread(target=agent_thread, daemon=True).start()
        agent_up.wait(10)
        assert m.collie("durable", "attach", "bench", "--socket", str(sock)).returncode == 0
        m.serve()
        wait_for(lambda: crew.online("workshop"), what="member online")
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}) as c:
            wait_for(lambda: any(a["status"] == "ready" for s in c.get("/api/dashboard").json()["sections"]
                                 if s["machine"] == "workshop" for a in s["agents"]), what="agent ready")
            floor = []
            for _ in range(200):
                t0 = time.perf_counter()
                c.get("/healthz")
                floor.append(time.perf_counter() - t0)
        link = re.search(r"(https?://\S+/pair#\S+)", crew.lead.collie("pair", "--no-qr").stdout).group(1)
        base = link.split("/pair#")[0]
        with sync_playwright() as pw:
            browser = launch(pw)
            page = browser.new_context(viewport={"width": 360, "height": 780}).new_page()
            page.goto(link)
            page.wait_for_selector("main section")
            page.goto(f"{base}/#/c/workshop/bench/deploy")
            page.wait_for_selector("main h1")
            page.evaluate(OBSERVE)
            lat = []
            for i in range(args.asks):
                title = f"Ask {i}?"
                asks_q.append(title)
                page.wait_for_function(f"() => window.__cards && ({json.dumps(title)} in window.__cards)", timeout=10000)
                shown = page.evaluate(f"() => window.__cards[{json.dumps(title)}]") / 1000
                lat.append(shown - raised[title])
                page.wait_for_selector(".card[data-ask]", state="detached", timeout=10000)
            # part 2: a big dashboard
            sims = invite_sims(crew, max(0, args.machines - 2))
            sims_up = threading.Event()

            def sim_thread():
                async def run():
                    async with trio.open_nursery() as n:
                        await start_sims(n, crew, sims, agents=args.agents, conversations=args.conversations, beat=5)
                        sims_up.set()
                        while not stop.is_set():
                            await trio.sleep(0.2)
                        n.cancel_scope.cancel()
                trio.run(run)
            if sims:
                threading.Thread(target=sim_thread, daemon=True).start()
                sims_up.wait(60)
            time.sleep(2)
            sizes: list[int] = []
            renders = []
            for _ in range(3):
                link2 = re.search(r"(https?://\S+/pair#\S+)", crew.lead.collie("pair", "--no-qr").stdout).group(1)
                ctx = browser.new_context(viewport={"width": 360, "height": 780})
                pg = ctx.new_page()
                pg.goto(link2)
                pg.wait_for_selector("main section")
                sizes.clear()
                def count(r):
                    if "events" not in r.url:
                        try:
                            sizes.append(len(r.body()))
                        except Exception:  # a response the page navigated away from
                            pass
                pg.on("response", count)
                t0 = time.perf_counter()
                pg.goto(base + "/?fresh=1#/")
                pg.wait_for_function(f"() => document.querySelectorAll('main section[data-machine]').length >= {1 + len(sims)}",
                                     timeout=30000)
                renders.append(time.perf_counter() - t0)
                first_load = sum(sizes)
                ctx.close()
            with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}) as c:
                dash = c.get("/api/dashboard")
                n_agents = sum(len(s["agents"]) for s in dash.json()["sections"])
            browser.close()
        stop.set()
        f50 = pct(floor, 50)
        print(f"load average {os.getloadavg()[0]:.2f}")
        print(f"floor (loopback HTTP round trip to the lead): p50 {f50 * 1000:.1f} ms")
        print(f"ask raised on a member's agent -> card visible in Chromium (n={len(lat)}): "
              f"p50 {pct(lat, 50) * 1000:.0f} ms ({pct(lat, 50) / f50:.0f}x floor)  "
              f"p99 {pct(lat, 99) * 1000:.0f} ms ({pct(lat, 99) / f50:.0f}x floor)")
        print(f"dashboard of {1 + len(sims)} machines, {n_agents} agents: first render p50 "
              f"{pct(renders, 50) * 1000:.0f} ms (navigation to every section drawn), first load "
              f"{first_load / 1024:.0f} KiB (dashboard JSON {len(dash.content) / 1024:.0f} KiB)")
    finally:
        stop.set()
        crew.stop()


if __name__ == "__main__":
    main()
