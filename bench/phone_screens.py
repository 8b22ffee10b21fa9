"""Ask raised -> the Needs you entry drawn in the phone's page, in Chromium (issue 29).

    .venv/bin/python bench/phone_screens.py [--asks 10] [--repo PATH]

A real lead with its own agent `own` and a real member with its agent `far`, both run by this process
with the SDK (in a thread of their own), so the moment an ask is raised is known. The page — headless
Chromium at phone size, paired like a phone — shows the dashboard (`/#/`). It is only read, never
changed: a MutationObserver (installed through the DevTools protocol, as a person's extension would)
stamps the moment the page's text first holds each ask's title, which on the dashboard is the
Needs you list; beside it, a live channel opened in the page's context stamps when the lead's
`needs` event carrying the ask reaches the browser (issue 29: what a page that draws Needs you from
that event, instead of fetching `GET /api/needs` 50 ms after a row event, would wait). Two series on each agent (`--asks` each):
- `lone`: an ask after a quiet spell;
- `swap`: an open ask closes and another is raised at the same moment (no count moves).
An ask not drawn within `--wait` seconds is counted as never drawn. Floor: a loopback HTTP round trip
to the lead, measured in the same run. `--repo PATH`: run the lead and member from another checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from measure import pair_link, paired_phone, pct, round_trips  # noqa: E402

from collie.crew.sdk import open_collie  # noqa: E402
from tests import crewlab  # noqa: E402
from tests.browser import launch  # noqa: E402
from tests.crewlab import Crew, wait_for  # noqa: E402

OPTIONS = [{"id": "y", "label": "Yes", "role": "allow"}]
WATCH = """(titles) => { window.__drawn = window.__drawn || {}; window.__want = titles;
  if (!window.__mo) { window.__mo = new MutationObserver(() => {
      const text = document.body.textContent;
      for (const t of window.__want) if (!(t in window.__drawn) && text.includes(t)) window.__drawn[t] = Date.now();
    });
    window.__mo.observe(document.body, { subtree: true, childList: true, characterData: true }); } }"""


# A live channel of its own in the page's context (its cookie, its connection limits): when the lead's
# `needs` event reaches the browser — what a page drawing Needs you from that event would draw on.
EVENTS = """() => { window.__evt = {}; const es = new EventSource("/api/events");
  es.addEventListener("needs", (e) => { const now = Date.now();
    for (const a of JSON.parse(e.data).asks) if (!(a.title in window.__evt)) window.__evt[a.title] = now; }); }"""


class Agents:
    """The SDK agents in a trio loop of their own thread; commands go through a queue."""

    def __init__(self, socks: dict[str, Path]) -> None:
        self.socks = socks
        self.q: queue.Queue = queue.Queue()
        self.up = threading.Event()
        self.raised: dict[str, float] = {}
        self.thread = threading.Thread(target=lambda: trio.run(self._run), daemon=True)
        self.thread.start()
        assert self.up.wait(20)

    async def _run(self) -> None:
        async with trio.open_nursery() as n:
            panes, open_asks = {}, {}
            for name, sock in self.socks.items():
                collie = await n.start(_hold, open_collie(socket=str(sock), host_name="bench",
                                                          caps=["asks", "send", "watch"], caller_check="off",
                                                          runtime="bench"))
                panes[name] = collie.conversation("c", title="Chat")
                collie.ready()
            self.up.set()

            async def ask(name, title, task_status=trio.TASK_STATUS_IGNORED):
                with trio.CancelScope() as cs:
                    task_status.started(cs)
                    await panes[name].ask(kind="permission", title=title, tool_call_id=title, options=OPTIONS)

            while True:
                try:
                    cmd = self.q.get_nowait()
                except queue.Empty:
                    await trio.sleep(0.002)
                    continue
                if cmd is None:
                    n.cancel_scope.cancel()
                    return
                op, name, title = cmd
                if op == "close" or op == "swap":
                    old = open_asks.pop(name, None)
                    if old is not None:
                        old.cancel()
                        await trio.sleep(0)
                if op in ("raise", "swap"):
                    self.raised[title] = time.time()
                    open_asks[name] = await n.start(ask, name, title)

    def send(self, op: str, name: str, title: str = "") -> None:
        self.q.put((op, name, title))

    def stop(self) -> None:
        self.q.put(None)
        self.thread.join(10)


async def _hold(cm, *, task_status=trio.TASK_STATUS_IGNORED):
    async with cm as collie:
        task_status.started(collie)
        await trio.sleep_forever()


def run(asks: int = 10, wait: float = 5.0, repo: str | None = None) -> dict:
    from playwright.sync_api import sync_playwright

    if repo:
        crewlab.REPO = Path(repo).resolve()
    crew = Crew(Path(tempfile.mkdtemp(prefix="ps", dir="/tmp")))
    out: dict = {"load_before": os.getloadavg(), "asks": asks, "wait": wait}
    agents = None
    try:
        socks = {"own": crew.lead.run / "own.sock"}
        assert crew.lead.collie("durable", "attach", "own", "--socket", str(socks["own"])).returncode == 0
        crew.start_lead()
        m = crew.add_member("workshop")
        socks["far"] = m.run / "far.sock"
        assert m.collie("durable", "attach", "far", "--socket", str(socks["far"])).returncode == 0
        agents = Agents(socks)
        m.serve()
        wait_for(lambda: crew.online("workshop"), what="member online")
        token = (crew.lead.paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}) as c:
            wait_for(lambda: {a["name"] for s in c.get("/api/dashboard").json()["sections"] for a in s["agents"]
                              if a["status"] == "ready"} >= {"own", "far"}, timeout=60, what="agents ready")
            floor = round_trips(c)
        out["floor"] = {"p50": pct(floor, 50), "p99": pct(floor, 99)}
        link = pair_link(crew)
        base = link.split("/pair#")[0]
        with sync_playwright() as pw:
            browser = launch(pw)
            _, page = paired_phone(browser, link, {"width": 360, "height": 780})
            page.goto(f"{base}/#/")
            page.wait_for_selector("main section")
            page.evaluate(EVENTS)
            page.wait_for_timeout(1500)
            for name in ("own", "far"):
                for series in ("lone", "swap"):
                    lat, never, evt = [], 0, []
                    for i in range(asks):
                        title = f"{name} {series} {i}?"
                        if series == "swap":
                            first = f"{name} {series} first {i}?"  # (the page's text must not hold `title`)
                            page.evaluate(WATCH, [first])
                            agents.send("raise", name, first)
                            assert _wait_drawn(page, first, 15), first
                            page.wait_for_timeout(300)
                        page.evaluate(WATCH, [title])
                        agents.send("swap" if series == "swap" else "raise", name, title)
                        drawn = _wait_drawn(page, title, wait)
                        if drawn is None:
                            never += 1
                        else:
                            lat.append(drawn / 1000 - agents.raised[title])
                        page.wait_for_timeout(300)
                        got = page.evaluate(f"() => window.__evt[{json.dumps(title)}]")
                        if got:
                            evt.append(got / 1000 - agents.raised[title])
                        agents.send("close", name)
                        page.wait_for_timeout(400)
                    out[f"{name}.{series}"] = {"n": len(lat), "never": never,
                                               "p50": pct(lat, 50) if lat else None,
                                               "p99": pct(lat, 99) if lat else None,
                                               "max": max(lat) if lat else None,
                                               "event": {"n": len(evt), "p50": pct(evt, 50), "p99": pct(evt, 99)}
                                               if evt else None}
            browser.close()
    finally:
        if agents is not None:
            agents.stop()
        crew.stop()
        shutil.rmtree(crew.base, ignore_errors=True)  # a lead's state folder: its api-token too
    out["load"] = os.getloadavg()
    return out


def _wait_drawn(page, title: str, timeout: float) -> float | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = page.evaluate(f"() => (window.__drawn || {{}})[{json.dumps(title)}]")
        if got:
            return got
        page.wait_for_timeout(5)
    return None


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--asks", type=int, default=10)
    p.add_argument("--wait", type=float, default=5.0, help="seconds an ask may take to be drawn")
    p.add_argument("--repo", help="run the lead and member from this checkout")
    p.add_argument("--json")
    args = p.parse_args()
    if args.asks < 1 or args.wait <= 0:
        p.error("--asks and --wait must be positive")
    r = run(args.asks, args.wait, args.repo)
    f50 = r["floor"]["p50"]
    print(f"load average before {r['load_before'][0]:.2f}, after {' '.join(f'{x:.2f}' for x in r['load'])} "
          f"({os.cpu_count()} cores); floor (GET /healthz) p50 {f50 * 1000:.2f} ms")
    for name, what in (("own", "the lead's own agent"), ("far", "the member's agent")):
        for series in ("lone", "swap"):
            s = r[f"{name}.{series}"]
            shown = "-" if s["p50"] is None else f"p50 {s['p50'] * 1000:.1f} ms  p99 {s['p99'] * 1000:.1f} ms  " \
                                                  f"max {s['max'] * 1000:.1f} ms"
            met = "yes" if s["p99"] is not None and s["p99"] <= 0.1 and not s["never"] else "NO"
            print(f"ask ({series}) on {what} -> Needs you drawn in Chromium (n={s['n']}, never drawn {s['never']}): "
                  f"{shown}  target p99 <= 100 ms: {met}")
            e = s["event"]
            if e:
                print(f"    the lead's `needs` event in the same browser (n={e['n']} of {r['asks']}): p50 {e['p50'] * 1000:.1f} ms"
                      f"  p99 {e['p99'] * 1000:.1f} ms  (what a page drawing Needs you from it would wait)")
            else:
                print("    the lead sends no `needs` event")
    if args.json:
        Path(args.json).write_text(json.dumps(r, indent=1))


if __name__ == "__main__":
    main()
