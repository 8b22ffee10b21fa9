"""The phone app measured in Chromium (issue 12).

    .venv/bin/python bench/phone_app.py [--asks 100] [--machines 10] [--agents 10] [--conversations 100] [--runs 5]

1. Ask raised on a member's agent -> its card visible in the page: a real lead and member; the agent is
   run by this process (SDK, watch) so the moment the ask is raised is known; the page (headless
   Chromium at phone size) shows that conversation, and a MutationObserver stamps the wall-clock time
   the card appears. Floor: a loopback HTTP round trip to the lead, measured in the same run.
2. Dashboard of `--machines` simulated members x `--agents` agents x `--conversations` open conversations
   (plus the real member's one agent): in a fresh Chromium context each run (no cache, no service worker),
   stamped in the page itself (an init script, so no Playwright round trip is counted):
   - first render: navigation start -> every section drawn (a MutationObserver);
   - interactive: the end of the last long task (main thread busy >= 50 ms, the Long Tasks API) once the
     page has been quiet for 2 s, or the first render if later (Lighthouse's TTI without its network rule);
   - a tap right after the first render: the dashboard's toggle clicked in the first task after the sections
     are drawn, stamped when its handler has redrawn the page.
   Floors in the same run: a loopback HTTP round trip to the lead, and the browser's own floor — a fresh
   context navigating to the lead's `/healthz` (navigation start -> response end).
   Bytes: everything the first load fetched (the live channel's stream aside), the dashboard JSON, and one
   live update: the `row` event a change of one agent sends, read off a live channel.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
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
from tests.crewlab import Crew, invite_sims, start_fake_members, wait_for  # noqa: E402

OBSERVE = """() => { window.__cards = {}; new MutationObserver(() => {
  for (const c of document.querySelectorAll('.card[data-ask]')) {
    const t = c.querySelector('.title'); if (t && !(t.textContent in window.__cards)) window.__cards[t.textContent] = Date.now();
  } }).observe(document.body, {subtree: true, childList: true}); }"""


# Stamped in the page before its own scripts run (an init script: the page's CSP does not apply to it).
STAMPS = """(() => {
  window.__t = {}; window.__long = [];
  try { new PerformanceObserver((l) => { for (const e of l.getEntries()) window.__long.push([e.startTime, e.duration]); })
          .observe({ type: "longtask", buffered: true }); } catch (_) {}
  const drawn = () => document.querySelectorAll("main section[data-machine]").length >= SECTIONS;
  const mo = new MutationObserver(() => {
    if (window.__t.render || !drawn()) return;
    window.__t.render = performance.now();
    setTimeout(() => {  // a tap in the first task after the first render
      const box = document.getElementById("only");
      box.click(); box.click();  // on and off again: the page draws twice, as a person's tap would once
      window.__t.tap = performance.now();
    }, 0);
  });
  document.addEventListener("DOMContentLoaded", () => mo.observe(document.body, { subtree: true, childList: true }));
  window.__quiet = () => {
    const now = performance.now(), render = window.__t.render || now;
    const ends = window.__long.map(([s, d]) => s + d);
    const last = ends.length ? Math.max(...ends) : 0;
    if (now - Math.max(render, last) < 2000) return null;
    return { last_long_end: last, long_ms: window.__long.reduce((a, [, d]) => a + d, 0) };
  };
})();"""


def poll(page, expr: str, timeout: float):
    """Evaluate `expr` in the page until it is truthy (wait_for_function's eval is refused by the CSP)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = page.evaluate(expr)
        if got:
            return got
        page.wait_for_timeout(50)
    raise AssertionError(f"not in time: {expr}")


def one_row_event(address: str, token: str, asks_q: list) -> int:
    """Bytes of the `row` event one change sends to a live channel: an ask raised on the real member's agent."""
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30) as c:
        with c.stream("GET", "/api/events") as r:
            lines = r.iter_lines()
            block: list[str] = []
            started = False
            for line in lines:
                if line == "":
                    if "event: snapshot" in block and not started:
                        started = True
                        asks_q.append("Row size?")
                    elif started and "event: row" in block:
                        return len(("\n".join(block) + "\n\n").encode())
                    block = []
                else:
                    block.append(line)
    return -1


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--asks", type=int, default=100)
    p.add_argument("--machines", type=int, default=10)
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--conversations", type=int, default=100)
    p.add_argument("--runs", type=int, default=5, help="fresh loads of the big dashboard")
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
            sims = invite_sims(crew, args.machines)
            sims_up = threading.Event()

            def sim_thread():
                async def run():
                    async with trio.open_nursery() as n:
                        await start_fake_members(n, crew, sims, agents=args.agents, conversations=args.conversations,
                                                 beat=5)
                        sims_up.set()
                        while not stop.is_set():
                            await trio.sleep(0.2)
                        n.cancel_scope.cancel()
                trio.run(run)
            threading.Thread(target=sim_thread, daemon=True).start()
            sims_up.wait(60)
            sections = 1 + len(sims)  # the real member's section and every simulated one
            with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}) as c:
                wait_for(lambda: sum(len(s["agents"]) for s in c.get("/api/dashboard").json()["sections"])
                         >= 1 + len(sims) * args.agents, timeout=60, what="every simulated agent listed")
                dash = c.get("/api/dashboard")
                n_agents = sum(len(s["agents"]) for s in dash.json()["sections"])
                n_convs = sum(a.get("open") or 0 for s in dash.json()["sections"] for a in s["agents"])
            time.sleep(2)
            stamps = STAMPS.replace("SECTIONS", str(sections))
            renders, interactive, taps, longs, sizes_all, nav_floor = [], [], [], [], [], []
            for _ in range(args.runs):
                link2 = re.search(r"(https?://\S+/pair#\S+)", crew.lead.collie("pair", "--no-qr").stdout).group(1)
                ctx = browser.new_context(viewport={"width": 360, "height": 780}, service_workers="block")
                pg = ctx.new_page()
                pg.goto(link2)  # pairs this context (its cookie), then measure a fresh navigation
                pg.wait_for_selector("main section")
                pg.goto(base + "/healthz")
                nav_floor.append(pg.evaluate("performance.getEntriesByType('navigation')[0].responseEnd"))
                ctx.add_init_script(stamps)
                sizes: list[int] = []

                def count(r, sizes=sizes):
                    if "/api/events" not in r.url:
                        try:
                            sizes.append(len(r.body()))
                        except Exception:  # a response the page navigated away from
                            pass
                pg.on("response", count)
                pg.goto(base + "/#/")
                t = poll(pg, "window.__t && window.__t.tap && window.__t", 60)
                quiet = poll(pg, "window.__quiet()", 60)  # 2 s with no long task, at least 2 s after render
                renders.append(t["render"])
                taps.append(t["tap"])
                interactive.append(max(t["render"], quiet["last_long_end"]))
                longs.append(quiet["long_ms"])
                sizes_all.append(sum(sizes))
                ctx.close()
            row_bytes = one_row_event(crew.address, token, asks_q)
            browser.close()
        stop.set()
        f50 = pct(floor, 50)
        b50 = pct(nav_floor, 50)
        print(f"load average {os.getloadavg()[0]:.2f}")
        print(f"floor (loopback HTTP round trip to the lead): p50 {f50 * 1000:.1f} ms; browser floor (fresh context "
              f"-> /healthz response end): p50 {b50:.0f} ms")
        print(f"ask raised on a member's agent -> card visible in Chromium (n={len(lat)}): "
              f"p50 {pct(lat, 50) * 1000:.0f} ms ({pct(lat, 50) / f50:.0f}x floor)  "
              f"p99 {pct(lat, 99) * 1000:.0f} ms ({pct(lat, 99) / f50:.0f}x floor)")
        print(f"dashboard of {sections} machines ({len(sims)} x {args.agents} agents x {args.conversations} conversations "
              f"+ 1 real agent): {n_agents} agents, {n_convs} open conversations, n={args.runs} fresh loads")
        for name, vals in (("first render (navigation -> every section drawn)", renders),
                           ("a tap right after first render answered", taps),
                           ("interactive (last long task ended, 2 s quiet)", interactive)):
            print(f"  {name}: p50 {pct(vals, 50):.0f} ms ({pct(vals, 50) / (f50 * 1000):.0f}x loopback, "
                  f"{pct(vals, 50) / b50:.1f}x browser floor)  max {max(vals):.0f} ms")
        print(f"  main thread in long tasks during the load: p50 {pct(longs, 50):.0f} ms")
        print(f"  bytes: first load {pct(sizes_all, 50) / 1024:.0f} KiB (dashboard JSON {len(dash.content) / 1024:.0f} KiB), "
              f"one live update (`row` event) {row_bytes} bytes")
    finally:
        stop.set()
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)


if __name__ == "__main__":
    main()
