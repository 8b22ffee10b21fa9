"""The phone app as a user holds it (issue 23): every screen at 390×844 and at 360 px wide, light and
dark, with the browser's clock in another time zone than the lead's. Each test is a defect seen by a
new user; the features it checks are named in its docstring.

The module's lab: a lead with a deployer (`desk`), a showcase (`show`), a streamer (`writer`), a
progress agent with five buttons (`steps`), starters with closed history (`lib`), an agent that declares
no history (`solo`), an entry whose agent never runs (`ghost`), and a member `workshop` with a deployer
(`lab`). The last tests take the member, then the lead, down.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import httpx
import pytest

from tests import phonelab
from tests.crewlab import Crew, wait_for
from tests.livelab import short_dir
from tests.phonelab import browser  # noqa: F401 (the module's browser fixture)
from tests.phonelab import checked, goto, ready, sized_page, start_crew
from tests.system.test_phone_app import agent_items, open_ask, pane_of, pump_until

pytestmark = pytest.mark.slow

# (viewport width, height, colour scheme, the browser's time zone): the lead runs in UTC
PHONES = {"390x844-light": (390, 844, "light", "Pacific/Kiritimati"),
          "360x780-dark": (360, 780, "dark", "America/Anchorage")}
RAW = re.compile(r"\bnull\b|\bundefined\b|\bNaN\b|\b1[5-9]\d{8}(\.\d+)?\b|\[object")

AGENTS = (("desk", "deployer"), ("show", "showcase"), ("writer", "streamer"), ("steps", "progress"),
          ("lib", "starters"), ("solo", "nohistory"))


@pytest.fixture(scope="module")
def crew():
    c = Crew(short_dir("cs"))
    start_crew(c, AGENTS, [("lab", "deployer")], ghost=True, others={"ghost": "unreachable"})
    yield c
    c.stop()


def phone_page(crew: Crew, browser, phone: str, service_workers: str = "block"):
    page = sized_page(crew, browser, *PHONES[phone], service_workers)
    page.zone = PHONES[phone][3]
    return page


@pytest.fixture(params=sorted(PHONES))
def page(request, crew, browser):
    yield from checked(phone_page(crew, browser, request.param))


def look(page, name: str) -> None:
    """COLLIE_LOOK=<folder>: save this screen, per phone, to look at (not docs/screenshots/)."""
    phonelab.look(page, name, page.viewport_size["width"])


def in_view(page, locator) -> bool:
    """The element is wholly on screen, below the header and above the action bar (when there is one)."""
    return page.evaluate("""(el) => {
        const r = el.getBoundingClientRect();
        const top = document.querySelector('header.top').getBoundingClientRect().bottom;
        const bar = document.querySelector('.bar');
        const bottom = bar ? bar.getBoundingClientRect().top : innerHeight;
        return r.height > 0 && r.top >= top - 1 && r.bottom <= bottom + 1;
    }""", locator.element_handle())


def screen_text(page) -> str:
    return page.locator("header.top").inner_text() + "\n" + page.locator("main").inner_text()


def test_a_permission_card_speaks_collies_words_with_the_agents_label_faint_below(page, crew):
    """Q4, Q5: one button per option in Collie's words by its role — `Allow`, `Always allow`, `Deny` — the
    agent's own label (`Ship it`, `Always`, `Not now`) a faint second line; Always allow still takes two taps."""
    open_ask(crew, "local", "desk", "deploy")
    goto(page, "#/c/local/desk/deploy")
    card = page.locator(".card[data-ask]").first
    buttons = card.locator(".opts button")
    wait_for(lambda: buttons.count() == 3)
    words = [(b.locator(".role").inner_text(), b.locator(".agent-label").inner_text()) for b in buttons.all()]
    assert words == [("Allow", "Ship it"), ("Always allow", "Always"), ("Deny", "Not now")]
    first = buttons.first
    role_colour = first.locator(".role").evaluate("e => getComputedStyle(e).opacity")
    label_colour = first.locator(".agent-label").evaluate("e => getComputedStyle(e).opacity")
    assert float(label_colour) < float(role_colour)
    card.get_by_role("button", name=re.compile("^Always allow")).click()
    assert card.locator(".opts button").nth(1).locator(".role").inner_text() == "Tap again to always allow deploy"
    assert in_view(page, card)


def test_a_chat_opens_at_its_newest_item_above_the_composer(page):
    """C1: a long conversation opens at its newest message, wholly visible above the action bar."""
    goto(page, "#/c/local/show/long")
    last = page.locator(".item", has_text=re.compile(r"^message 39$"))
    last.wait_for()
    pump_until(page, lambda: in_view(page, last), timeout=5, what="the newest message in view")
    assert not in_view(page, page.locator(".item").first)


def test_a_needs_you_tap_lands_on_that_asks_card(page):
    """D5, Q2, Q8: tapping one Needs you entry of a conversation with seven asks opens the chat on that
    very card, even when it is one of those behind `Show 2 more`."""
    needs = page.locator("section[aria-labelledby='needs-h']")
    entry = needs.locator("a.row", has_text="Pick 5")
    entry.wait_for()
    entry.click()
    card = page.locator(".card[data-ask]", has=page.locator(".title", has_text=re.compile("^Pick 5$")))
    card.wait_for()
    pump_until(page, lambda: in_view(page, card), timeout=5, what="the tapped ask's card in view")


def test_the_chat_follows_new_items_and_offers_them_when_scrolled_up(page, crew):
    """C1, C3: while the user is at the bottom each new item comes into view; scrolled up, a `New items`
    button appears instead, and a tap on it goes to the newest."""
    conv = f"c{uuid.uuid4().hex[:6]}"
    with crew.client() as c:
        turn = c.get("/api/agents/local/writer/conversations/chat").json()["turn"]
        for i in range(4):
            rec = c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "local", "agent": "writer",
                                            "conversation": "chat", "text": f"warm up {conv} {i}", "turn": turn}).json()
            wait_for(lambda: pane_of(crew, "local", "writer", "chat")["state"] == "idle"
                     and pane_of(crew, "local", "writer", "chat")["turn"] != turn, what="the reply")
            turn = pane_of(crew, "local", "writer", "chat")["turn"]
    goto(page, "#/c/local/writer/chat")
    page.locator("#editor").fill(f"follow {conv}")
    page.get_by_role("button", name="Send", exact=True).click()
    newest = page.locator(".item.markdown, .item.text, .item", has_text=f"follow {conv} done.").last
    newest.wait_for(timeout=10000)
    pump_until(page, lambda: in_view(page, newest), timeout=5, what="the streamed reply followed")
    page.mouse.wheel(0, -3000)
    page.wait_for_timeout(200)
    with crew.client() as c:
        turn = pane_of(crew, "local", "writer", "chat")["turn"]
        c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "local", "agent": "writer",
                                  "conversation": "chat", "text": f"while up {conv}", "turn": turn})
    more = page.get_by_role("button", name="New items")
    more.wait_for(timeout=10000)
    look(page, "new-items")
    more.click()
    last = page.locator(".item", has_text=f"while up {conv} done.").last
    last.wait_for(timeout=10000)
    pump_until(page, lambda: in_view(page, last), timeout=5, what="the newest item after New items")


def test_the_action_bar_keeps_every_button_whole_and_dims_what_cannot_act(page):
    """C7: Steer and Stop, then four of the agent's buttons; with nothing running Steer and Stop dim in
    place; every label (up to 16 characters) is whole; icons are drawn by the page (an unknown one draws
    none); the bar stays a small part of the screen."""
    goto(page, "#/c/local/steps/job")
    bar = page.locator(".bar")
    bar.wait_for()
    buttons = bar.locator(".actions button")
    wait_for(lambda: buttons.count() == 6)
    names = [b.get_attribute("aria-label") or b.inner_text() for b in buttons.all()]
    assert names[:2] == ["Steer", "Stop"]
    assert names[2:] == ["Next step", "Pause", "Flag it for lat…", "Ship"]  # the lead cut the label to 16
    for b in buttons.all()[:2]:
        assert b.is_disabled(), "Steer and Stop cannot act when nothing runs"
    clipped = buttons.evaluate_all("els => els.filter(e => e.scrollWidth > e.clientWidth + 1).map(e => e.innerText)")
    assert clipped == []
    shown = [b.inner_text().strip() for b in buttons.all()]
    assert shown[4] == "Flag it for lat…"
    icons = [b.locator("svg").count() for b in buttons.all()[2:]]
    assert icons == [1, 1, 1, 0]  # play, pause, flag; `rocket` is not one of the twelve
    assert bar.evaluate("e => e.querySelectorAll('.actions button').length") == 6
    box = bar.bounding_box()
    assert box["height"] <= page.viewport_size["height"] * 0.2, box


def test_a_refused_send_stays_as_not_sent_and_a_button_jumps_to_the_ask(page, crew):
    """C3, B4, B10: a send while an ask is open is refused: my line stays, marked `Not sent`, its text is
    back in the editor, and a button next to the editor jumps to the ask's card."""
    open_ask(crew, "local", "desk", "deploy")
    goto(page, "#/c/local/desk/deploy")
    text = f"ship it please {uuid.uuid4().hex[:6]}"
    page.locator("#editor").fill(text)
    page.get_by_role("button", name="Send", exact=True).click()
    line = page.locator(".item.mine", has_text=text)
    line.wait_for()
    pump_until(page, lambda: "Not sent" in line.inner_text(), what="Not sent on my line")
    assert page.locator("#editor").input_value() == text
    page.evaluate("scrollTo(0, 0)")
    look(page, "refused")
    jump = page.get_by_role("button", name="Go to the question")
    jump.click()
    card = page.locator(".card[data-ask]").first
    pump_until(page, lambda: in_view(page, card), timeout=5, what="the ask's card in view")


def test_rename_from_the_chat_and_the_composer_grows(page):
    """C8 (rename, when the agent offers it), C3: the header's `Rename` renames the conversation in the
    agent; the composer grows with a long text instead of staying one 44 px line."""
    goto(page, "#/c/local/show/upload")
    name = f"Upload {uuid.uuid4().hex[:6]}"
    page.get_by_role("button", name="Rename").click()
    page.get_by_label("New title").fill(name)
    page.get_by_role("button", name="Save").click()
    page.locator("main h1", has_text=name).wait_for(timeout=10000)
    box = page.locator("#editor")
    low = box.bounding_box()["height"]
    box.fill("a long message\n" * 4)
    page.wait_for_timeout(100)
    assert box.bounding_box()["height"] > low + 30


def test_a_sent_line_keeps_its_clock_and_the_editor_says_sent(page):
    """C3: once the agent took a send, the line shows the small clock (not the word `Sent`) until the
    agent's copy replaces it; the editor says `Sent`."""
    goto(page, "#/c/local/writer/chat")

    def receipt(route):
        body = route.request.post_data_json
        route.fulfill(json={"outcome": "sent", "request_id": body["request_id"], "op": "send"})
    page.route("**/api/send", receipt)
    page.locator("#editor").fill("clock please")
    page.get_by_role("button", name="Send", exact=True).click()
    line = page.locator(".item.mine", has_text="clock please")
    line.wait_for()
    pump_until(page, lambda: page.locator("#editor-note").inner_text() == "Sent", what="the editor says Sent")
    assert line.locator(".state").inner_text() == "🕓"
    page.unroute("**/api/send")


def test_no_screen_shows_a_raw_value_and_times_are_the_phones(page, crew):
    """D1, L, N1, I7, C: no `null`, `undefined` or raw epoch on the dashboard, a list, a chat, the new
    conversation screen, a closed conversation, the inbox; the closed view is titled by its title."""
    for route in ("#/", "#/a/local/lib", "#/a/local/ghost", "#/c/local/show/kinds", "#/new/local/lib",
                  "#/new/local/solo", "#/inbox/local/writer", "#/closed/local/lib/old-249", "#/a/workshop/lab"):
        goto(page, route)
        page.wait_for_timeout(300)
        text = screen_text(page)
        assert not RAW.search(text), (route, RAW.search(text).group(0), text)
    assert page.locator("main h1").first.inner_text().startswith("Experimental") is False
    goto(page, "#/closed/local/lib/old-249")
    page.locator("main h1", has_text="Old work 249").wait_for(timeout=5000)


def test_reopen_shows_only_for_an_agent_that_declared_it_and_back_goes_up(page):
    """L3, W4: a closed conversation of an agent that never declared reopen has no `Reopen`; the header's
    Back goes up one screen (an installed web app has no browser back button)."""
    goto(page, "#/closed/local/solo/only")
    page.wait_for_timeout(500)
    assert page.get_by_role("button", name="Reopen").count() == 0
    goto(page, "#/closed/local/lib/old-249")
    page.get_by_role("button", name="Reopen").wait_for()
    goto(page, "#/c/local/desk/deploy")
    page.get_by_role("link", name="Back").click()
    page.wait_for_selector("main[data-route='#/a/local/desk']")
    page.get_by_role("link", name="Back").click()
    page.wait_for_selector("main[data-route='#/']")


def test_an_unreachable_agent_is_explained_in_the_users_words_on_each_of_its_screens(page):
    """D1: an agent that does not answer says so in plain words on the dashboard, its list and its chat —
    never the protocol (`GET /v1/…`, `wait=`); Send says why it is off."""
    for route in ("#/", "#/a/local/ghost", "#/c/local/ghost/any"):
        goto(page, route)
        text = screen_text(page)
        assert "/v1/" not in text and "wait=" not in text and "ECONN" not in text, (route, text)
        if route != "#/":
            assert "ghost is not answering" in text, (route, text)
        look(page, f"ghost-{route.count('/')}")
    row = page.locator("a.row[href='#/a/local/ghost']")
    goto(page, "#/")
    assert "not running" in row.inner_text() or "not answering" in row.inner_text()


def test_closing_a_conversation_and_clearing_the_inbox_ask_first(page, crew):
    """C8, I9, I7: `Close conversation` and `Clear the inbox` act only on a second, confirming tap; the
    `Cancel` beside a message being added cancels that edit, not the request. L4: the closed list is read
    again when a conversation closes."""
    n = 0 if page.viewport_size["width"] == 360 else 1  # each phone closes its own
    goto(page, f"#/a/local/lib")
    goto(page, f"#/c/local/lib/open-{n}")
    page.get_by_role("button", name="Close conversation").click()
    page.wait_for_timeout(500)
    assert pane_of(crew, "local", "lib", f"open-{n}").get("conversation") == f"open-{n}", "one tap closed it"
    page.get_by_role("button", name="Tap again to close").click()
    page.wait_for_selector("main[data-route='#/a/local/lib']")
    page.locator("ul[aria-label='Closed'] a.row", has_text=f"Open work {n}").first.wait_for(timeout=10000)

    out = crew.lead.collie("tokens", "create", f"relay{uuid.uuid4().hex[:6]}", "--approval", "required")
    token = Path(re.search(r"(/\S+)", out.stdout).group(1).rstrip(":,.")).read_text().strip()
    with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}, timeout=20) as relay:
        relay.post("/api/agents/local/steps/inbox", json={"request_id": str(uuid.uuid4()), "conversation": "job",
                                                          "text": "from relay"}).raise_for_status()
    goto(page, "#/inbox/local/steps")
    item = page.locator(".inbox-item", has_text="from relay").first
    item.wait_for()
    item.get_by_role("button", name="Add a message").click()
    item.get_by_label("Message to add").fill("never mind")
    item.get_by_role("button", name="Cancel").click()
    item.get_by_role("button", name="Add a message").wait_for(timeout=5000)
    assert "waiting for approval" in item.inner_text()
    page.get_by_role("button", name="Clear the inbox").click()
    page.wait_for_timeout(500)
    assert "waiting for approval" in page.locator(".inbox-item", has_text="from relay").first.inner_text()
    page.get_by_role("button", name="Tap again to clear the inbox").click()
    pump_until(page, lambda: "cancelled" in page.locator(".inbox-item", has_text="from relay").first.inner_text(),
               what="the request cancelled")


def test_a_request_waiting_for_approval_is_counted_where_the_user_looks_first(page, crew):
    """I3, D5: an API-token sender's request waiting for the owner's approval shows in Needs you and on
    the agent's row, not only inside that agent's inbox."""
    out = crew.lead.collie("tokens", "create", f"relay{uuid.uuid4().hex[:6]}", "--approval", "required")
    token = Path(re.search(r"(/\S+)", out.stdout).group(1).rstrip(":,.")).read_text().strip()
    with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}, timeout=20) as relay:
        relay.post("/api/agents/local/solo/inbox", json={"request_id": str(uuid.uuid4()), "conversation": "only",
                                                         "text": "approve me"}).raise_for_status()
    goto(page, "#/")
    needs = page.locator("section[aria-labelledby='needs-h']")
    entry = needs.locator("a.row[href='#/inbox/local/solo']")
    entry.wait_for(timeout=10000)
    assert "waiting for your approval" in entry.inner_text()
    row = page.locator("a.row[href='#/a/local/solo']")
    assert row.get_by_label(re.compile("1 request waiting for approval")).count() == 1
    entry.click()
    page.locator(".inbox-item", has_text="approve me").get_by_role("button", name="Approve").click()
    goto(page, "#/")
    pump_until(page, lambda: needs.locator("a.row[href='#/inbox/local/solo']").count() == 0, what="the count gone")


def test_the_conversation_list_follows_the_agent_while_open(page, crew):
    """L4: an answered ask stops showing waiting, a new conversation appears, without a reload."""
    ask = open_ask(crew, "local", "desk", "deploy")
    goto(page, "#/a/local/desk")
    row = page.locator("ul[aria-label='Open conversations'] a.row", has_text="Deploy")
    pump_until(page, lambda: row.locator(".count-needs").count() == 1, what="the waiting count")
    with crew.client() as c:
        got = c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "machine": "local", "agent": "desk",
                                                    "digest": ask["digest"], "answer": {"option_ids": ["no"]}}).json()
        assert got["outcome"] == "accepted", got
    pump_until(page, lambda: row.locator(".count-needs").count() == 0, timeout=5, what="the answered ask gone")
    goto(page, "#/a/local/lib")
    rows = page.locator("ul[aria-label='Open conversations'] a.row")
    before = rows.count()
    with crew.client() as c:
        got = c.post("/api/agents/local/lib/starters/triage", json={"request_id": str(uuid.uuid4())}).json()
        assert got["outcome"] in ("started", "queued"), got
    pump_until(page, lambda: rows.count() == before + 1, timeout=8, what="the new conversation listed")


def test_a_member_offline_says_since_when_in_the_phones_clock_and_the_bar_keeps_its_buttons(page, crew):
    """D1, C7, I7: with a member offline its section says since when, in the phone's time zone (no epoch);
    its chat keeps Steer, Stop and the agent's buttons in place, dimmed, and says why."""
    goto(page, "#/c/workshop/lab/deploy")
    bar = page.locator(".bar .actions button")
    wait_for(lambda: bar.count() == 3)
    before = bar.count()
    if crew.online("workshop"):
        crew.members["workshop"].stop()
    wait_for(lambda: not crew.online("workshop"), timeout=30, what="member offline")
    pump_until(page, lambda: "workshop is offline" in screen_text(page), timeout=15, what="the chat says so")
    assert bar.count() == before
    assert all(b.is_disabled() for b in bar.all())
    look(page, "member-offline-chat")
    goto(page, "#/")
    head = page.locator("section[data-machine='workshop'] h2")
    text = head.inner_text()
    assert "offline since" in text and not RAW.search(text), text
    hhmm = re.search(r"(\d{1,2}):(\d\d)", text)
    assert hhmm, text
    zone_now = page.evaluate("() => new Date().toLocaleTimeString([], {hour: '2-digit', minute: '2-digit', hour12: false})")
    assert abs(int(hhmm.group(1)) - int(zone_now[:2])) % 24 <= 1, (text, zone_now)
    # I7: a send queued for the offline machine says since when in the phone's clock too, not the lead's
    with crew.client() as c:
        got = c.post("/api/agents/workshop/lab/inbox", json={"request_id": str(uuid.uuid4()), "conversation": "deploy",
                                                             "text": f"after the nap ({page.zone})"})
        assert got.status_code in (200, 202), got.text
    goto(page, "#/inbox/workshop/lab")
    line = page.locator(".inbox-item", has_text=f"after the nap ({page.zone})").locator(".l2")
    pump_until(page, lambda: "machine offline since" in line.inner_text(), timeout=10, what="the queued line")
    queued = re.search(r"since (\d{1,2}):(\d\d)", line.inner_text())
    assert queued and queued.group(0) == "since " + hhmm.group(0), (line.inner_text(), text)


def test_needs_you_drops_an_answered_ask_while_its_conversation_still_waits(page, crew):
    """D1, issue 29: an ask answered while others stay open in its conversation moves no dashboard row
    (the row counts conversations waiting); Needs you drops it within a second all the same, from the live
    channel's `needs` event (before, the page read Needs you again on row events only and kept it)."""
    goto(page, "#/")
    with crew.client() as c:
        needs = c.get("/api/needs").json()["asks"]
    picks = [a for a in needs if a["title"] in ("Pick 1", "Pick 2", "Pick 3", "Pick 4")]
    assert picks, needs
    target = pane = ask = None
    for p in picks:
        pane = pane_of(crew, p["machine"], p["agent"], p["conversation"])
        ask = next((a for a in pane["asks"] if a["id"] == p["ask"]), None)
        if ask is not None:
            target = p
            break
    assert target is not None, picks
    entry = page.locator("section[aria-labelledby='needs-h'] a.row", has_text=target["title"])
    entry.wait_for()
    with crew.client() as c:
        got = c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "machine": target["machine"],
                                                   "agent": target["agent"], "digest": ask["digest"],
                                                   "answer": {"option_ids": ["a"]}}).json()
        assert got["outcome"] == "accepted", got
    pump_until(page, lambda: entry.count() == 0, timeout=3, what="the answered ask gone from Needs you")
    assert page.locator("section[aria-labelledby='needs-h'] a.row", has_text="Pick 5").count() == 1


def test_the_phone_offline_and_the_lead_unreachable_are_told_apart(crew, browser):
    """The phone offline says so; the lead out of reach says so (not `Offline`) within a few seconds, and
    a tap says what it did not do. Runs last, at one size: it stops the lead."""
    page = phone_page(crew, browser, "360x780-dark")
    goto(page, "#/c/local/writer/chat")
    page.context.set_offline(True)
    banner = page.locator("#banner")
    pump_until(page, lambda: "This phone is offline" in banner.inner_text(), timeout=5, what="phone offline")
    page.context.set_offline(False)
    pump_until(page, lambda: banner.is_hidden(), timeout=10, what="back online")
    crew.lead.stop()
    pump_until(page, lambda: "Can't reach the lead" in banner.inner_text(), timeout=8, what="lead unreachable")
    page.locator("#editor").fill("into the void")
    page.get_by_role("button", name="Send", exact=True).click()
    # issue 36: with the lead known out of reach the page sends nothing, and says so
    pump_until(page, lambda: "Not sent: the lead is out of reach." in page.locator("#editor-note").inner_text(),
               timeout=8, what="the tap said what it did not do")
    assert page.locator(".item.mine", has_text="into the void").locator(".state").inner_text() == "Not sent"
    assert page.locator("#editor").input_value() == "into the void"
    assert page.errors == [], page.errors
    page.context.close()


def test_a_long_conversation_opens_at_its_newest_with_a_bounded_number_of_nodes(browser):
    """#29, C1: a conversation of 2,000 kept items (an agent that never stops appending) opens at its
    newest item and draws at most 200 of them; `Show N earlier messages` adds a page above, keeping what
    was on screen in place."""
    c = Crew(short_dir("cl"))
    c.lead.agent("flood", "endless", "--rate", "400", "--size", "40")
    c.start_lead()
    try:
        ready(c, "local", 1)
        with c.client() as cl:
            wait_for(lambda: len(cl.get("/api/agents/local/flood/conversations/f00000/items?limit=500")
                                 .json().get("items", [])) >= 500, timeout=30, what="500 items")
        page = phone_page(c, browser, "390x844-light")
        goto(page, "#/c/local/flood/f00000")
        page.locator(".items .item").first.wait_for()
        pump_until(page, lambda: page.locator(".items .item").count() >= 150, timeout=15, what="the newest page")
        assert page.locator(".items .item").count() <= 200
        newest = "() => Math.max(...[...document.querySelectorAll('.items .item')].map((e) => " \
                 "parseInt(e.textContent, 10)).filter((n) => !isNaN(n)))"
        # the newest items (the live channel's), not the conversation's first page
        pump_until(page, lambda: page.evaluate(newest) > 500, timeout=10, what="the newest items drawn")
        assert page.locator(".items .item").count() <= 200
        # the agent appends 400 items a second: the chat keeps following them (one check may land between
        # an item drawn and the scroll that follows it, so it is polled)
        pump_until(page, lambda: in_view(page, page.locator(".items .item").last), timeout=5,
                   what="the newest item in view")
        page.evaluate("scrollTo(0, 0)")
        earlier = page.get_by_role("button", name=re.compile(r"^Show \d+ earlier messages$"))
        earlier.click()
        pump_until(page, lambda: page.locator(".items .item").count() > 200, timeout=5, what="an earlier page")
        assert page.locator(".items .item").count() <= 400
        assert page.errors == [], page.errors
        page.context.close()
    finally:
        c.stop()


def test_a_flooding_chat_keeps_what_the_user_reads_types_and_taps(browser):
    """#29, C1, Q1: while an agent appends 400 items a second, a user who scrolled up keeps reading the same
    items (the window does not slide under them, new ones wait behind `New items`), a half-typed answer
    in the ask card stays as typed, and a tap on the card's Send lands (the agent replies it)."""
    c = Crew(short_dir("cf"))
    c.lead.agent("flood", "endless", "--rate", "400", "--size", "40", "--ask")
    c.start_lead()
    base = "/api/agents/local/flood/conversations/f00000"

    def replies() -> list[str]:  # every kept item's text, read page by page to the newest
        texts, since = [], None
        with c.client() as cl:
            while True:
                page = cl.get(f"{base}/items?limit=500" + (f"&since={since}" if since else "")).json()
                texts += [i.get("text") or "" for i in page.get("items", [])]
                if not page.get("more"):
                    return texts
                since = page["next_since"]

    newest = "() => Math.max(...[...document.querySelectorAll('.items .item')].map((e) => " \
             "parseInt(e.textContent, 10)).filter((n) => !isNaN(n)))"
    try:
        ready(c, "local", 1)
        wait_for(lambda: len(replies()) >= 300, timeout=30, what="300 items")
        page = phone_page(c, browser, "390x844-light")
        goto(page, "#/c/local/flood/f00000")
        card = page.locator(".card[data-ask]")
        card.wait_for()
        pump_until(page, lambda: page.locator(".items .item").count() >= 150, timeout=15, what="the newest page")
        box = card.locator("input[type=text]")
        box.fill("feature/half")
        page.evaluate("scrollTo(0, 0)")
        first = page.locator(".items .item").first
        first.evaluate("(e) => { e.seenByTest = true; }")  # the very node the user is reading
        reading, drawn = first.inner_text(), page.evaluate(newest)
        # the agent goes on 400 items past what the page drew while the user reads the top
        pump_until(page, lambda: max((int(t.split()[0]) for t in replies()[-50:] if t[:1].isdigit()), default=0)
                   > drawn + 400, timeout=15, what="400 more items")
        pump_until(page, lambda: page.get_by_role("button", name="New items").is_visible(), timeout=10,
                   what="New items offered")
        assert first.evaluate("(e) => e.seenByTest === true") and first.inner_text() == reading
        assert page.evaluate(newest) < drawn + 400, "the window slid to the newest items under the reader"
        assert box.input_value() == "feature/half"
        assert "12 of 40" in card.inner_text()
        asked = card.get_attribute("data-ask")
        card.get_by_role("button", name="Send").click()
        wait_for(lambda: "answer: feature/half" in replies(), timeout=15, what="the answer replied")
        pump_until(page, lambda: page.locator(".card[data-ask]:not(.answered)").get_attribute("data-ask") != asked, timeout=10,
                   what="the next ask in its place")
        assert page.errors == [], page.errors
        page.context.close()
    finally:
        c.stop()



def test_a_secret_in_a_conversation_title_is_masked_on_every_screen(browser):
    """X1 (and the phone app issue): a conversation renamed to a title holding a GitHub token shows
    `[secret]` in its place in the chat header, the agent's conversation list and the Needs you entry —
    never the token, on any screen the phone draws."""
    secret = "ghp_0123456789abcdefghij0123456789abcdef"
    c = Crew(short_dir("cm"))
    c.lead.agent("desk", "deployer")
    c.start_lead()
    try:
        ready(c, "local", 1)
        open_ask(c, "local", "desk", "deploy")
        with c.client() as cl:
            got = cl.post("/api/agents/local/desk/conversations/deploy/rename",
                          json={"request_id": str(uuid.uuid4()), "title": f"deploy {secret}"}).json()
            assert got["outcome"] == "done", got
            wait_for(lambda: "[secret]" in (cl.get("/api/agents/local/desk/conversations/deploy").json().get("title") or ""),
                     what="the renamed title")
        page = phone_page(c, browser, "390x844-light")
        for route, where in (("#/", "Needs you"), ("#/a/local/desk", "the conversation list"),
                             ("#/c/local/desk/deploy", "the chat header")):
            goto(page, route)
            pump_until(page, lambda: "deploy [secret]" in screen_text(page), timeout=10, what=f"the title on {where}")
            assert secret not in page.content() and "ghp_" not in screen_text(page), where
        assert page.errors == [], page.errors
        page.context.close()
    finally:
        c.stop()
