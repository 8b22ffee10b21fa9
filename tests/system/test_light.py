"""Light on the phone (issue 39): compressed answers, revalidated reads, a long chat opened in one read, the
whole module graph at once, and a hidden page that stays silent — against a real lead and member, the
page in headless Chromium at phone size. No timing is asserted here (the figures are bench/phone_app.py's).

One agent run by this process (the SDK, in a thread) holds a conversation of 1,200 replies, and adds one
when the test asks (`say`), so the moment of a change is the test's.
"""

from __future__ import annotations

import gzip
import json
import re
import threading
import time
import zlib

import httpx
import pytest
import trio

from collie.crew.sdk import open_collie
from tests.crewlab import Crew, wait_for
from tests.livelab import short_dir
from tests.phonelab import (
    browser,  # noqa: F401 (the module's browser fixture)
    pair_link,
)
from tests.phonelab import paired as paired_from

pytestmark = pytest.mark.slow
PHONE = {"width": 390, "height": 844}
LONG = 1200  # replies in the long conversation: six newest pages of 200
TALK = "/api/agents/local/long/conversations/talk"


class LongAgent:
    """A durable agent (SDK, watch) with one conversation of LONG replies; `say(text)` adds one more."""

    def __init__(self, sock) -> None:
        self.sock, self.up, self.stop, self.queue = sock, threading.Event(), threading.Event(), []

    def run(self) -> None:
        async def main():
            async with open_collie(socket=str(self.sock), host_name="light", caps=["asks", "send", "watch"],
                                   caller_check="off", runtime="light", history_limit=LONG + 100) as collie:
                talk = collie.conversation("talk", title="Long talk")
                for n in range(LONG):
                    talk.reply(f"message {n}")
                collie.ready()
                self.up.set()
                while not self.stop.is_set():
                    while self.queue:
                        talk.reply(self.queue.pop(0))
                    await trio.sleep(0.01)
        trio.run(main)

    def say(self, text: str) -> None:
        self.queue.append(text)


@pytest.fixture(scope="module")
def crew():
    c = Crew(short_dir("cl"))
    agent = LongAgent(c.lead.run / "long.sock")
    threading.Thread(target=agent.run, daemon=True).start()
    try:
        assert agent.up.wait(60)
        assert c.lead.collie("durable", "attach", "long", "--socket", str(agent.sock)).returncode == 0
        c.lead.agent("desk", "deployer")
        c.start_lead()
        m = c.add_member("workshop")
        m.agent("lab", "deployer")
        m.serve()
        wait_for(lambda: c.online("workshop"), what="member online")
        with c.client() as h:
            wait_for(lambda: sum(a["status"] == "ready" for s in h.get("/api/dashboard").json()["sections"]
                                 for a in s["agents"]) == 3, timeout=60, what="agents ready")
            wait_for(lambda: h.get(f"{TALK}/items?newest=1").json()["items"][-1]["text"] == f"message {LONG - 1}",
                     timeout=60, what="the long conversation read")
        c.agent = agent
        yield c
    finally:
        agent.stop.set()
        c.stop()


def raw_get(c: httpx.Client, path: str, **headers) -> tuple[httpx.Response, bytes]:
    """A GET whose body is returned as it came over the wire (not decoded)."""
    with c.stream("GET", path, headers=headers) as r:
        return r, b"".join(r.iter_raw())


# --- over HTTP ----------------------------------------------------------------------------------------
def test_a_json_answer_is_gzipped_only_for_a_client_that_accepts_it(crew):
    """Issue 39: with `Accept-Encoding: gzip` a JSON answer comes gzipped and decodes to the very JSON
    the uncompressed answer carries; without it (absent, identity, or gzip;q=0) nothing is compressed.
    Either way the answer says it varies by Accept-Encoding."""
    with crew.client() as c:
        for path in ("/api/dashboard", f"{TALK}/items?newest=200"):
            packed, body = raw_get(c, path, **{"Accept-Encoding": "gzip"})
            assert packed.headers["content-encoding"] == "gzip" and "Accept-Encoding" in packed.headers["vary"]
            plain, text = raw_get(c, path, **{"Accept-Encoding": "identity"})
            assert "content-encoding" not in plain.headers and "Accept-Encoding" in plain.headers["vary"]
            assert json.loads(gzip.decompress(body)) == json.loads(text)
            assert len(body) < len(text)
        for refused in ("", "gzip;q=0", "br;q=1, gzip;q=0"):
            got, body = raw_get(c, "/api/dashboard", **{"Accept-Encoding": refused})
            assert "content-encoding" not in got.headers and json.loads(body)["sections"]


def test_a_read_the_phone_holds_is_answered_304_on_its_etag(crew):
    """Issue 39: the dashboard and a page of items carry a strong ETag (one per representation: gzip or
    not); asking again with it in If-None-Match gives 304 and no body while nothing changed, and the
    whole answer once something did."""
    with crew.client() as c:
        for path in ("/api/dashboard", f"{TALK}/items?newest=200"):
            for coding in ("gzip", "identity"):
                first, _ = raw_get(c, path, **{"Accept-Encoding": coding})
                tag = first.headers["etag"]
                assert re.fullmatch(r'"[0-9a-f]{24}(-gz)?"', tag) and first.headers["cache-control"] == "private, no-cache"
                again, body = raw_get(c, path, **{"Accept-Encoding": coding, "If-None-Match": tag})
                assert again.status_code == 304 and body == b"" and again.headers["etag"] == tag
        old = c.get(f"{TALK}/items?newest=200").headers["etag"]
        crew.agent.say("a change the phone has not seen")
        wait_for(lambda: c.get(f"{TALK}/items?newest=200", headers={"If-None-Match": old}).status_code == 200,
                 what="the page of items changed")


def test_a_long_conversation_is_read_newest_page_first_then_page_by_page_upwards(crew):
    """Issue 39, C1: `?newest=N` is the newest N items in one read, oldest first, with `earlier` to read
    the page above (`&before=`) until it is null; the pages join with no item missing or twice. A
    member's conversation pages the same way. Mixing the two ways of paging, or a bad number, is a 400."""
    with crew.client() as c:
        first = c.get(f"{TALK}/items?newest=200").json()
        texts = [i["text"] for i in first["items"]]
        assert len(texts) == 200 and texts[0].startswith("message") and first["more"] is False
        assert isinstance(first["next_since"], int) and first["earlier"] == first["items"][0]["seq"]
        seqs, page = [i["seq"] for i in first["items"]], first
        while page["earlier"] is not None:
            page = c.get(f"{TALK}/items?newest=200&before={page['earlier']}").json()
            assert page["items"] and max(i["seq"] for i in page["items"]) < min(seqs)
            seqs = [i["seq"] for i in page["items"]] + seqs
        assert seqs == sorted(set(seqs)) and len(seqs) >= LONG
        for bad in ("newest=0", "newest=x", "before=5", "newest=10&since=3", "newest=10&before=0"):
            got = c.get(f"{TALK}/items?{bad}")
            assert got.status_code == 400 and got.json()["error"] == "bad_request", bad
        conv = c.get("/api/agents/workshop/lab/conversations").json()["open"][0]["id"]
        whole = c.get(f"/api/agents/workshop/lab/conversations/{conv}/items?limit=500").json()["items"]
        newest = c.get(f"/api/agents/workshop/lab/conversations/{conv}/items?newest=1").json()
        assert [i["seq"] for i in newest["items"] if i["kind"] != "gap"] == [max(i["seq"] for i in whole)]
        assert (newest["earlier"] is not None) == (len([i for i in whole if i["kind"] != "gap"]) > 1)


def sse_events(c: httpx.Client, path: str, until, headers: dict | None = None) -> tuple[httpx.Response, list]:
    """Read a live channel until `until(events)`; the raw bytes are decoded here (gzip when it says so)."""
    out, buf = [], b""
    with c.stream("GET", path, headers=headers or {}) as r:
        z = zlib.decompressobj(16 + zlib.MAX_WBITS) if r.headers.get("content-encoding") == "gzip" else None
        for chunk in r.iter_raw():
            buf += z.decompress(chunk) if z else chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                fields = dict(line.split(": ", 1) for line in block.decode().split("\n") if ": " in line)
                if "event" in fields:
                    out.append((fields["event"], json.loads(fields["data"]), fields.get("id")))
            if until(out):
                return r, out
    return r, out


def test_the_live_channel_sends_only_what_the_phone_does_not_hold(crew):
    """Issue 39: the channel's stream is gzipped for a client that accepts it (each event readable as it
    comes); its snapshot leaves the dashboard out (null) when the phone says it read the current one
    (`have=` its tag), and sends it whole otherwise; a channel viewing a chat the phone read up to a
    revision (`items_since=`) gets only the items changed after it, then each change as it comes."""
    with crew.client() as c:
        dash = c.get("/api/dashboard")
        tag = dash.headers["etag"].strip('"').removesuffix("-gz")
        r, got = sse_events(c, f"/api/events?have={tag}", lambda ev: any(k == "snapshot" for k, _, _ in ev),
                            {"Accept-Encoding": "gzip"})
        assert r.headers["content-encoding"] == "gzip"
        snap = next(d for k, d, _ in got if k == "snapshot")
        assert snap["dashboard"] is None and isinstance(snap["needs"], list)
        _, got = sse_events(c, "/api/events?have=" + "0" * 24, lambda ev: any(k == "snapshot" for k, _, _ in ev),
                            {"Accept-Encoding": "identity"})
        assert next(d for k, d, _ in got if k == "snapshot")["dashboard"] == dash.json()
        assert c.get("/api/events?have=xyz").status_code == 400
        assert c.get("/api/events?items_since=-1").status_code == 400
        page = c.get(f"{TALK}/items?newest=200").json()
        said = f"said at {time.time()}"

        asked = []

        def until(ev):  # once the snapshot is in, the agent replies
            if not asked and any(k == "snapshot" for k, _, _ in ev):
                asked.append(crew.agent.say(said))
            return any(k == "items" and said in str(d) for k, d, _ in ev)
        _, got = sse_events(c, f"/api/events?machine=local&agent=long&conversation=talk&items_since={page['next_since']}",
                            until)
        snap = next(d for k, d, _ in got if k == "snapshot")
        assert snap["items_full"] is False and all(i["rev"] > page["next_since"] for i in snap["items"])
        assert len(snap["items"]) <= 2 and snap["dashboard"]["sections"]
        change = next(d for k, d, _ in got if k == "items" and said in str(d))
        assert change["full"] is False and [i["text"] for i in change["items"]] == [said]


# --- in Chromium ----------------------------------------------------------------------------------------
def paired(crew: Crew, browser):
    return paired_from(browser, pair_link(crew.lead.collie("pair", "--no-qr")), viewport=PHONE)


def test_a_long_chat_opens_with_one_read_of_its_newest_page(crew, browser):
    """Issue 39, C1: a conversation of 1,200 items opens at its newest with exactly one items request (the
    newest page), and the live channel sends none of them again; `Show earlier messages` reads one page
    more (the one above), drawn above what was on screen."""
    page = paired(crew, browser)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/items?" in r.url else None)
    page.goto(f"{page.base}/#/c/local/long/talk")
    page.locator(".items .item", has_text=f"message {LONG - 1}").first.wait_for()
    page.wait_for_timeout(1500)  # the channel opens, is told the view, and settles
    assert len(reads) == 1 and "newest=200" in reads[0], reads
    assert page.locator(".items .item").count() <= 201
    page.goto(f"{page.base}/healthz")  # a whole load of the chat's address: one read too
    reads.clear()
    page.goto(f"{page.base}/#/c/local/long/talk")
    page.locator(".items .item", has_text=f"message {LONG - 1}").first.wait_for()
    page.wait_for_timeout(1500)
    assert len(reads) == 1 and "newest=200" in reads[0], reads
    page.get_by_role("button", name=re.compile("Show .*earlier messages")).click()
    page.locator(".items .item", has_text=f"message {LONG - 300}").first.wait_for()
    assert len(reads) == 2 and "before=" in reads[1], reads
    assert page.errors == []
    page.context.close()


def pump(page, fn, timeout: float = 20.0, what: str = "condition"):
    """wait_for, letting Playwright deliver the DevTools events meanwhile (a plain sleep would not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if fn():
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{what} not met in time")


HIDE = """(hidden) => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => hidden ? "hidden" : "visible" });
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def test_a_hidden_page_closes_its_channel_and_draws_what_it_missed_when_shown(crew, browser):
    """Issue 39: the page's own visibilitychange handler closes the live channel when the page is hidden
    (no event reaches a phone in a pocket), and when it is shown again opens it from the last event it had
    (`last_event_id`: a replay, no snapshot) and draws the reply that came meanwhile."""
    page = paired(crew, browser)
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    channels, ended, messages = {}, set(), []
    cdp.on("Network.requestWillBeSent", lambda e: channels.__setitem__(e["requestId"], e["request"]["url"])
           if "/api/events?" in e["request"]["url"] or e["request"]["url"].endswith("/api/events") else None)
    cdp.on("Network.loadingFailed", lambda e: ended.add(e["requestId"]) if e["requestId"] in channels else None)
    cdp.on("Network.loadingFinished", lambda e: ended.add(e["requestId"]) if e["requestId"] in channels else None)
    cdp.on("Network.eventSourceMessageReceived", lambda e: messages.append((time.monotonic(), e["eventName"])))
    page.goto(f"{page.base}/healthz")  # then a whole load of the chat, its channel seen from the start
    page.goto(f"{page.base}/#/c/local/long/talk")
    page.locator(".items .item", has_text=f"message {LONG - 1}").first.wait_for()
    pump(page, lambda: any(name == "snapshot" for _, name in messages), what="the channel's snapshot")
    first = [rid for rid in channels if rid not in ended]
    assert len(first) == 1
    page.evaluate(HIDE, True)
    pump(page, lambda: first[0] in ended, timeout=5, what="the channel closed once hidden")
    hidden_at = time.monotonic()
    said = f"while hidden {time.time()}"
    crew.agent.say(said)
    with crew.client() as c:
        wait_for(lambda: said in str(c.get(f"{TALK}/items?newest=5").json()), what="the reply read by the lead")
    page.wait_for_timeout(1000)
    assert [m for m in messages if m[0] > hidden_at] == []  # nothing reached the hidden page
    assert page.locator(".items .item", has_text=said).count() == 0
    page.evaluate(HIDE, False)
    page.locator(".items .item", has_text=said).first.wait_for(timeout=5000)
    again = [url for rid, url in channels.items() if rid not in ended]
    assert len(again) == 1 and "last_event_id=" in again[0], again
    assert "snapshot" not in [name for t, name in messages if t > hidden_at]
    assert page.errors == []
    page.context.close()


IMPORTS = re.compile(r"""\bimport\b[^;"'()]*?(?:\(\s*)?["']\./([\w-]+\.js)["']""")
STATIC_IMPORTS = re.compile(r"""\bimport\b(?:[^;"'()]*?\bfrom)?\s*["']\./([\w-]+\.js)["']""")  # not import("…")


def imported(pattern, names) -> set[str]:
    """The modules `pattern` finds imported from `names`, and theirs in turn (walked here, apart from the lead's walk)."""
    from collie.lead.web.serve import WEB
    graph, todo = set(), list(names)
    while todo:
        name = todo.pop()
        for dep in pattern.findall((WEB / name).read_text()):
            if dep not in graph:
                graph.add(dep)
                todo.append(dep)
    return graph


def test_the_page_preloads_the_dashboards_modules_and_the_other_screens_come_when_shown(crew, browser):
    """Issues 39 and 29: the page names the modules the dashboard cannot run without (app.js's static
    imports and theirs) as <link rel="modulepreload">, so the browser learns them from the page itself —
    and only those, so the first load keeps to issue 29's budget (≤ 30 KB over the wire; bench/phone_app.py
    --page). Each other screen's modules (on-demand imports) load when that screen is shown: every module
    the page loads while each screen is shown is one of the import graph."""
    first = imported(STATIC_IMPORTS, ["app.js"]) - {"app.js"}
    graph = imported(IMPORTS, ["app.js"]) - {"app.js"}
    assert first < graph  # the other screens' modules are not the dashboard's
    page = paired(crew, browser)
    links = page.eval_on_selector_all("link[rel=modulepreload]", "ls => ls.map((l) => l.getAttribute('href'))")
    preloaded = {h.rsplit("/", 1)[-1] for h in links}
    assert preloaded == first and len(links) == len(first)
    assert all(re.fullmatch(r"/v/[0-9a-f]{16}/[\w-]+\.js", h) for h in links)
    for route in ("#/a/local/desk", "#/c/local/long/talk", "#/new/local/desk", "#/inbox/local/desk", "#/"):
        page.goto(f"{page.base}/{route}")
        page.wait_for_selector(f"main[data-route='{route}']")
    loaded = set(page.evaluate("performance.getEntriesByType('resource').map((e) => e.name)"
                               ".filter((u) => u.endsWith('.js')).map((u) => u.split('/').pop())"))
    assert loaded and loaded <= graph | {"app.js"}
    assert loaded > preloaded  # the screens shown brought their own modules
    assert page.errors == []
    page.context.close()


def test_an_idle_page_gets_a_beat_every_25_s_and_one_in_use_every_2_s(crew):
    """Issues 39 and 36: a channel nobody uses gets its first beat only after 25 s without an event (at
    most 144 small writes an hour to a phone on the table), and once the page says the user is using it
    (`active: true` with its view) beats come every 2 s, so the page can tell a silent lead within
    seconds: three of them before an idle channel could have had one more."""
    beats: list[float] = []
    state = {"snapshot": None, "told": False}
    with crew.client() as c, crew.client() as teller:
        def until(ev):
            now = time.monotonic()
            kinds = [k for k, _, _ in ev]
            if state["snapshot"] is None and "snapshot" in kinds:
                state["snapshot"] = now
            while len(beats) < kinds.count("beat"):
                beats.append(now)
            if beats and not state["told"]:
                channel = next(d for k, d, _ in ev if k == "hello")["channel"]
                assert teller.post(f"/api/events/{channel}/view", json={"active": "yes"}).status_code == 400
                got = teller.post(f"/api/events/{channel}/view", json={"active": True})
                assert got.status_code == 200, got.text
                state["told"] = now
            return len(beats) >= 4
        sse_events(c, "/api/events", until)
    assert beats[0] - state["snapshot"] >= 20  # idle: nothing for 25 s (a later beat only: load delays it)
    assert beats[3] - state["told"] < 25  # in use: three beats where an idle channel gets none
