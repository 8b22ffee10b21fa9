"""The phone app in a real browser (headless Chromium driven by Playwright) against a real lead, a real
member and fixture agents, as a person uses it: pair from the printed link, read the dashboard, answer
every kind of ask, send, steer, stop, press an agent's button, page closed conversations, run a starter,
approve and reorder inbox items (issue 12; features D, L, Q, O, R, C, N, I, S3).

Set COLLIE_SCREENSHOTS=<folder> to save the main screens at phone size (docs/screenshots/ comes from it).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests.browser import launch
from tests.crewlab import Crew, wait_for

pytestmark = pytest.mark.slow
PHONE = {"width": 360, "height": 780}
SHOTS = os.environ.get("COLLIE_SCREENSHOTS")


def shot(page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=False)


def ready(crew: Crew, machine: str, count: int) -> None:
    with crew.client() as c:
        def check():
            for s in c.get("/api/dashboard").json()["sections"]:
                if s["machine"] == machine and len(s["agents"]) == count and all(
                        a["status"] == "ready" for a in s["agents"]):
                    return True
            return False
        wait_for(check, timeout=30, what=f"{machine} agents ready")


@pytest.fixture(scope="module")
def crew():
    c = Crew(Path(tempfile.mkdtemp(prefix="cp", dir="/tmp")))
    for name, kind in (("desk", "deployer"), ("forms", "asker"), ("writer", "streamer"), ("steps", "progress"),
                       ("lib", "starters")):
        c.lead.agent(name, kind)
    c.start_lead()
    m = c.add_member("workshop")
    m.agent("lab", "deployer")
    m.serve()
    wait_for(lambda: c.online("workshop"), what="member online")
    ready(c, "local", 5)
    ready(c, "workshop", 1)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def paired_page(crew: Crew, browser):
    out = crew.lead.collie("pair", "--no-qr")
    assert out.returncode == 0, out.stderr
    link = re.search(r"(https?://\S+/pair#\S+)", out.stdout).group(1)
    ctx = browser.new_context(viewport=PHONE, device_scale_factor=2)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    page.goto(link)
    page.wait_for_url(re.compile(r"/(#/?)?$"))
    page.wait_for_selector("main section")
    page.base = link.split("/pair#")[0]
    return page


@pytest.fixture
def page(crew, browser):
    p = paired_page(crew, browser)
    yield p
    assert p.errors == [], p.errors
    p.context.close()


def chat(page, machine: str, agent: str, conv: str) -> None:
    goto(page, f"#/c/{machine}/{agent}/{conv}")
    page.wait_for_selector("main h1")


def goto(page, route: str) -> None:
    """Open a screen and wait until that screen (not the previous one) is drawn."""
    page.goto(f"{page.base}/{route}")
    page.wait_for_selector(f"main[data-route='{route}']")


def agent_items(crew: Crew, machine: str, agent: str, conv: str) -> list[dict]:
    with crew.client() as c:
        return c.get(f"/api/agents/{machine}/{agent}/conversations/{conv}/items").json().get("items", [])


def test_pair_from_the_printed_link_and_see_needs_you_across_two_machines(page):
    """D1, D5: one Durable agents section per machine with the Experimental badge; above them one Needs
    you list with every open ask on every machine; one tap opens that ask's card."""
    needs = page.locator("section.section-needs").first
    needs.get_by_text("Deploy to staging?").first.wait_for()
    entries = needs.locator("a.row")
    texts = entries.all_inner_texts()
    assert any("desk" in t for t in texts) and any("lab · workshop" in t for t in texts)
    assert page.get_by_role("heading", name="Durable agents · workshop").is_visible()
    assert page.locator("a.row:has-text('deployer, local, workshop') .badge").inner_text() == "Experimental"
    shot(page, "dashboard")
    needs.locator("a.row:has-text('workshop')").click()
    page.wait_for_selector(".card[data-ask]")
    assert page.locator(".card .head").first.inner_text() == "Needs your answer · lab"


def test_answer_every_kind_of_ask(page, crew):
    """Q4, Q5: choice, multi-choice (`Pick any number`), text (`N of max`), form (`Required`), and
    Always allow with its two taps naming the tool — each answer reaches the agent."""
    chat(page, "local", "forms", "choice")
    page.locator(".card button:has-text('Green')").click()
    wait_for(lambda: any("answer: ['green']" in (i.get("text") or "") for i in agent_items(crew, "local", "forms", "choice")))

    chat(page, "local", "forms", "multi")
    card = page.locator(".card").first
    card.get_by_text("Pick any number").wait_for()
    card.get_by_label("Red").check()
    card.get_by_label("Blue").check()
    card.get_by_role("button", name="Send").click()
    wait_for(lambda: any("answer: ['red', 'blue']" in (i.get("text") or "") for i in agent_items(crew, "local", "forms", "multi")))

    chat(page, "local", "forms", "text")
    card = page.locator(".card").first
    card.locator("input[type=text]").fill("feature/x")
    card.get_by_text("9 of 40").wait_for()
    card.get_by_role("button", name="Send").click()
    wait_for(lambda: any("answer: feature/x" in (i.get("text") or "") for i in agent_items(crew, "local", "forms", "text")))

    chat(page, "local", "forms", "form")
    card = page.locator(".card").first
    card.get_by_text("Required").first.wait_for()
    shot(page, "ask-form")
    card.locator("select").select_option("staging")
    card.get_by_label("Note").fill("tonight")
    card.get_by_label("Force").check()
    card.get_by_role("button", name="Send").click()
    wait_for(lambda: any("'env': 'staging'" in (i.get("text") or "") and "'force': True" in (i.get("text") or "")
                         for i in agent_items(crew, "local", "forms", "form")))

    chat(page, "local", "desk", "deploy")
    always = page.locator(".card button:has-text('Always')")
    always.click()
    armed = page.locator(".card button:has-text('Tap again to always allow')")
    assert armed.inner_text() == "Tap again to always allow deploy"
    shot(page, "ask-permission")
    armed.click()
    wait_for(lambda: any(i.get("text") == "Deployed to staging." for i in agent_items(crew, "local", "desk", "deploy")))


def test_a_lost_reply_shows_not_certain_and_retry_applies_it_once(page, crew):
    """O: the answer reached the agent but its reply was lost: the card says `Not certain the answer
    arrived. Retry sends it once more.`; Retry (same request id) closes it, and the agent applied it once."""
    chat(page, "workshop", "lab", "deploy")
    page.wait_for_selector(".card[data-ask]")
    lost = {"n": 0}

    def drop_reply(route):
        if lost["n"] == 0:
            lost["n"] += 1
            route.fetch()  # the request reaches the lead and the agent…
            route.abort()  # …and the reply never reaches the phone
        else:
            route.continue_()

    page.route("**/api/ask/**", drop_reply)
    page.locator(".card button:has-text('Not now')").click()
    page.get_by_text("Not certain the answer arrived. Retry sends it once more.").wait_for()
    page.get_by_role("button", name="Retry").click()
    page.wait_for_selector(".card[data-ask]", state="detached")
    time.sleep(1)
    replies = [i for i in agent_items(crew, "workshop", "lab", "deploy") if i.get("kind") == "reply"]
    assert [r["text"] for r in replies].count("Not deployed (accepted).") == 1


def test_send_steer_stop_and_an_agents_buttons(page, crew):
    """C3, C5, C7: a send shows my line, then the agent's streamed reply; Stop with nothing running says
    so; agent buttons: at most 4, with their icons, a disabled one dimmed, and a tap reaches the agent."""
    chat(page, "local", "writer", "chat")
    page.get_by_label("Message").fill("hello there")
    page.locator(".editor button:has-text('Send')").click()
    page.locator(".item.reply:has-text('Looking at it: hello there done.')").wait_for(timeout=15000)
    assert page.locator(".item.user:has-text('hello there')").count() == 1
    page.get_by_role("button", name="Stop").click()
    page.get_by_text("Nothing is running in this conversation").wait_for()
    shot(page, "chat")

    chat(page, "local", "steps", "job")
    assert page.locator(".header2").inner_text() == "Jobs"  # C6: progress shows only while it works or waits
    buttons = page.locator(".bar .actions button")
    labels = buttons.all_inner_texts()
    assert labels[:2] == ["Steer", "Stop"] and len(labels) == 6  # Steer, Stop + the first 4 agent buttons
    assert page.get_by_role("button", name="Ship").is_disabled()
    assert page.locator(".bar .actions button:has-text('Next step') [aria-hidden]").inner_text().strip() == "▶"
    page.get_by_role("button", name="Next step").click()
    page.locator(".item.notice:has-text('action next')").wait_for()


def test_page_250_closed_conversations_and_run_a_starter(page, crew):
    """L1, L5, N1, N2: closed conversations load 100 at a time with `Load more`; a starter opens a new
    conversation in Chat."""
    goto(page, "#/a/local/lib")
    page.get_by_role("heading", name="Closed").wait_for()
    closed = page.locator("ul[aria-label='Closed'] li")
    wait_for(lambda: closed.count() == 100)
    page.get_by_role("button", name="Load more").click()
    wait_for(lambda: closed.count() == 200)
    page.get_by_role("button", name="Load more").click()
    wait_for(lambda: closed.count() == 250)
    assert page.get_by_role("button", name="Load more").count() == 0
    shot(page, "conversations")
    page.get_by_role("link", name="New conversation").click()
    page.get_by_role("heading", name="New conversation").wait_for()
    shot(page, "new-conversation")
    page.get_by_role("button", name="Triage the inbox").click()
    page.locator(".item.reply:has-text('Started triage.')").wait_for(timeout=15000)


def test_inbox_approve_and_reorder(page, crew):
    """I3, I7: a sender whose requests need approval queues two; the owner sees `waiting for approval`,
    moves the second above the first and approves both: they run in the order the owner set."""
    out = crew.lead.collie("tokens", "create", f"relay{uuid.uuid4().hex[:6]}", "--approval", "required")
    assert out.returncode == 0, out.stderr
    path = re.search(r"(/\S+)", out.stdout).group(1)
    token = Path(path.rstrip(":,.")).read_text().strip()
    with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}, timeout=20) as relay:
        for text in ("first from relay", "second from relay"):
            r = relay.post("/api/agents/local/writer/inbox",
                           json={"request_id": str(uuid.uuid4()), "conversation": "chat", "text": text})
            assert r.status_code == 200, r.text
    goto(page, "#/inbox/local/writer")
    items = page.locator(".inbox-item:has-text('from relay')")  # earlier sends are kept there as done (I9)
    wait_for(lambda: items.count() == 2)
    assert "waiting for approval from" in items.nth(0).inner_text()
    shot(page, "inbox")
    items.nth(1).get_by_role("button", name="Move up").click()
    wait_for(lambda: "second from relay" in items.nth(0).inner_text())
    items.nth(0).get_by_role("button", name="Approve").click()
    page.locator(".inbox-item:has-text('first from relay')").get_by_role("button", name="Approve").click()

    def order():
        users = [i["text"] for i in agent_items(crew, "local", "writer", "chat") if i.get("kind") == "user"]
        return [t for t in users if "from relay" in t]
    wait_for(lambda: order() == ["second from relay", "first from relay"], timeout=30, what="both ran, in order")


def test_main_screens_pass_an_accessibility_check(page):
    """Labels, contrast and touch-target size of the dashboard, a list and a chat with a card, checked by
    axe-core in the same browser: no serious or critical violation."""
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    options = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21aa", "wcag22aa"]}}
    for where in ("/#/", "/#/a/local/desk", "/#/c/local/forms/form", "/#/c/local/desk/deploy"):
        goto(page, where[1:])
        time.sleep(0.3)
        result = axe.run(page, options=options)
        bad = [v for v in result.response["violations"] if v.get("impact") in ("serious", "critical")]
        assert bad == [], (where, [(v["id"], [n["target"] for n in v["nodes"]][:3]) for v in bad])


def test_the_shell_opens_offline_and_says_so(page):
    """The PWA: a service worker keeps the shell, which opens with no network and says it is offline."""
    page.goto(page.base + "/#/")
    for _ in range(150):  # polled from here: the page's CSP forbids the eval wait_for_function uses
        if page.evaluate("navigator.serviceWorker.controller !== null"):
            break
        page.wait_for_timeout(100)
    page.reload()
    page.wait_for_selector("main section")
    page.context.set_offline(True)
    try:
        page.reload()
        page.get_by_text("Offline: showing what was last loaded.").wait_for(timeout=10000)
        assert page.locator("header .home").inner_text() == "Collie"
    finally:
        page.context.set_offline(False)
    manifest = page.evaluate("fetch('/manifest.webmanifest').then(r => r.json())")
    assert manifest["display"] == "standalone" and manifest["start_url"] == "/"


def test_a_section_moves_above_when_an_ask_arrives(browser):
    """D2, D5: the section of the machine whose agent waits for you sits above the others; when its ask
    is answered it moves back down, and when a new ask arrives it moves above again — live, no reload."""
    c = Crew(Path(tempfile.mkdtemp(prefix="cq", dir="/tmp")))
    try:
        c.lead.agent("writer", "streamer")
        c.start_lead()
        m = c.add_member("workshop")
        m.agent("lab", "deployer")
        m.serve()
        wait_for(lambda: c.online("workshop"), what="member online")
        ready(c, "local", 1)
        ready(c, "workshop", 1)
        page = paired_page(c, browser)
        order = lambda: page.locator("main section[data-machine]").evaluate_all(  # noqa: E731
            "els => els.map(e => e.dataset.machine)")
        wait_for(lambda: order() == ["workshop", "local"], what="the waiting member's section first")
        page.locator("section.section-needs a.row").first.click()
        page.locator(".card button:has-text('Ship it')").click()
        page.locator(".item.reply:has-text('Deployed to staging.')").wait_for()
        goto(page, "#/")
        wait_for(lambda: order() == ["local", "workshop"], what="the answered section back down")
        with c.client() as api:
            turn = api.get("/api/agents/workshop/lab/conversations/deploy").json()["turn"]
            got = api.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "workshop", "agent": "lab",
                                              "conversation": "deploy", "text": "again", "turn": turn}).json()
            assert got["outcome"] in ("sent", "queued"), got
        wait_for(lambda: order() == ["workshop", "local"], what="the section above again when the ask arrives")
        assert page.errors == []
        page.context.close()
    finally:
        c.stop()


def test_push_through_the_service_worker_shows_the_asks_notification(paths, bridge, browser):
    """P2 in the browser: the page subscribes through its service worker (the browser's push service is
    replaced by a fake one on loopback: headless Chromium has no network), a new ask makes the lead send
    an encrypted push, the fake service decrypts it with the subscription's key and delivers it to the
    service worker (DevTools protocol), which shows `Permission needed in <pane>`."""
    from tests.conftest import collie_env, run_collie
    from tests.live import cleanup, short_dir
    from tests.pushlab import FakePushService, Subscriber
    from tests.test_durable_e2e import Agents, live

    service = FakePushService()
    run = short_dir()
    agents = Agents()
    try:
        agents.start("asker", "--socket", str(run / "ask" / "a.sock"))
        assert run_collie(paths, "durable", "attach", "forms", "--socket", str(run / "ask" / "a.sock")).returncode == 0
        b = bridge(env=collie_env(paths))
        address = b.wait_ready()["address"]
        wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
        link = re.search(r"(https?://\S+/pair#\S+)", run_collie(paths, "pair", "--no-qr").stdout).group(1)
        sub = Subscriber(service.url("/ok/chromium"))
        ctx = browser.new_context(viewport=PHONE)
        ctx.grant_permissions(["notifications"], origin=address)
        # the browser's own push service is out of reach here: subscribe() answers with our fake one
        ctx.add_init_script(f"""
          if (window.PushManager) {{
            const fake = {json_dumps(sub.json())};
            let current = null;
            PushManager.prototype.subscribe = async function () {{ current = {{ toJSON: () => fake, endpoint: fake.endpoint }}; return current; }};
            PushManager.prototype.getSubscription = async function () {{ return current; }};
          }}""")
        page = ctx.new_page()
        errors: list = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(link)
        page.wait_for_selector("main section")
        page.get_by_role("button", name="Notify me when an agent asks").click()
        page.get_by_text("Notifications are on for this phone.").wait_for()
        cdp = ctx.new_cdp_session(page)
        regs: dict = {}
        cdp.on("ServiceWorker.workerRegistrationUpdated",
               lambda ev: regs.update({r["scopeURL"]: r["registrationId"] for r in ev["registrations"]}))
        cdp.send("ServiceWorker.enable")
        for _ in range(100):  # Playwright delivers events while the test calls into it
            if regs:
                break
            page.wait_for_timeout(100)
        assert regs, "the service worker's registration"
        with httpx.Client(base_url=address, timeout=10,
                          headers={"authorization": f"Bearer {(paths.state_dir / 'api-token').read_text().strip()}"}) as c:
            pane = c.get("/api/agents/local/forms/conversations/choice").json()
            ask = pane["ask"]
            c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "agent": "forms",
                                                   "digest": ask["digest"], "answer": {"option_ids": ["red"]}})
        got = service.wait(lambda r: r["path"] == "/ok/chromium")
        payload = sub.decrypt(got["body"])
        assert payload["title"] == "Permission needed in Pick one"
        origin = address.rstrip("/")
        cdp.send("ServiceWorker.deliverPushMessage", {"origin": origin, "registrationId": list(regs.values())[0],
                                                      "data": json_dumps(payload)})
        titles = lambda: page.evaluate(  # noqa: E731
            "navigator.serviceWorker.ready.then(r => r.getNotifications()).then(ns => ns.map(n => n.title))")
        wait_for(lambda: titles() == ["Permission needed in Pick one"], what="the notification")
        assert errors == []
        ctx.close()
    finally:
        agents.stop()
        service.close()
        cleanup(run)


def json_dumps(obj) -> str:
    import json

    return json.dumps(obj)


def test_an_expired_ask_keeps_its_buttons_and_a_late_tap_says_timed_out(paths, bridge, browser):
    """Q3, O, R2: the card counts down (`Expires in N s`, then `Expired`); after expiry its buttons stay,
    and a late tap is answered `Timed out before an answer.`"""
    from tests.conftest import collie_env, run_collie
    from tests.live import cleanup, short_dir
    from tests.test_durable_e2e import Agents, live

    run = short_dir()
    agents = Agents()
    try:
        agents.start("deployer", "--socket", str(run / "d" / "a.sock"), "--expires", "8")
        assert run_collie(paths, "durable", "attach", "desk", "--socket", str(run / "d" / "a.sock")).returncode == 0
        b = bridge(env=collie_env(paths))
        b.wait_ready()
        wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
        link = re.search(r"(https?://\S+/pair#\S+)", run_collie(paths, "pair", "--no-qr").stdout).group(1)
        ctx = browser.new_context(viewport=PHONE)
        page = ctx.new_page()
        page.goto(link)
        page.wait_for_selector("main section")
        page.base = link.split("/pair#")[0]
        chat(page, "local", "desk", "deploy")
        # the agent's first ask expired before anyone looked: R3 leaves its line in the chat
        page.locator(".item.line:has-text('Timed out before an answer: Deploy to staging?')").wait_for(timeout=20000)
        page.get_by_label("Message").fill("deploy again")
        page.locator(".editor button:has-text('Send')").click()  # the agent asks again, 8 s to answer
        counting = page.locator(".card:has([data-expiry]:text-matches('^Expires in [0-9]+ s$'))")
        counting.wait_for(timeout=15000)
        card = page.locator(f".card[data-ask='{counting.get_attribute('data-ask')}']")
        card.locator("[data-expiry]:text('Expired')").wait_for(timeout=20000)
        page.wait_for_timeout(2000)  # the agent has closed it by now: the card stays (Q3)
        card.locator("button:has-text('Ship it')").click()
        card.locator(".outcome:has-text('Timed out before an answer.')").wait_for()
        ctx.close()
    finally:
        agents.stop()
        cleanup(run)


def test_an_ask_that_changed_under_you_comes_back_as_it_is_now(page):
    """O, B5: when the ask changed while the card was shown (the digest the phone quotes is no longer the
    ask's), nothing reaches the agent; the card says `This ask changed. Read it again and tap an answer.`
    and shows the ask as it stands now, ready for a new tap."""
    chat(page, "local", "forms", "choice")
    card = page.locator(".card").first
    card.wait_for()

    def stale(route):
        body = json.loads(route.request.post_data)
        body["digest"] = "0" * 64  # what the phone saw before the ask changed
        route.continue_(post_data=json.dumps(body))

    page.route("**/api/ask/**", stale)
    card.locator("button:has-text('Red')").click()
    page.get_by_text("This ask changed. Read it again and tap an answer.").wait_for()
    page.unroute("**/api/ask/**")
    assert page.locator(".card button:has-text('Red')").is_enabled()


def test_a_slow_first_read_does_not_hide_what_the_live_channel_sent(page):
    """W4, C1: opening a chat reads its items over HTTP while the live channel sends them too, then
    every change after them. When the HTTP answer comes back last it may be older than what the channel
    sent; the app keeps the channel's. (Before: the older read replaced them, and a change that came in
    between — in CI an ask that expired — stayed unseen until the next one.)"""
    held = []
    page.route("**/api/agents/local/forms/conversations/choice/items", lambda route: held.append(route))
    page.goto(f"{page.base}/#/c/local/forms/choice")
    page.locator(".card[data-ask]").first.wait_for()  # drawn from what the live channel sent
    for _ in range(200):  # route handlers run while Playwright waits, not during a plain sleep
        if held:
            break
        page.wait_for_timeout(50)
    held[0].fulfill(status=200, content_type="application/json",
                    body=json_dumps({"items": [{"seq": 1, "kind": "user", "text": "an older read"}]}))
    page.wait_for_selector("main:not([aria-busy])")
    assert page.get_by_text("an older read").count() == 0
    assert page.locator(".card[data-ask]").first.is_visible()
    page.unroute("**/api/agents/local/forms/conversations/choice/items")
