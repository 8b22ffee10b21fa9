"""A screen you can trust (issue 36): what the user types stays, a conversation's history is whole, a
silent or dead lead is said where the user looks, and every time is the phone's. Chromium at 390×844
and 360×780, the browser in Pacific/Kiritimati (UTC+14) while the lead runs in UTC.

The module's lab: a lead with agents that add items to a conversation, 2 a second (`calm`) or 100 a second
(`flood`), while one ask of every kind is open in it, a streamer (`writer`), a deployer (`desk`), and a member `workshop` with a
deployer (`lab`) and a showcase (`show`: a 40-message conversation) that the tests put to sleep and wake. The last test stops the lead.
"""

from __future__ import annotations

import json
import re
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest

from tests import phonelab
from tests.crewlab import Crew, wait_for
from tests.livelab import short_dir
from tests.phonelab import browser  # noqa: F401 (the module's browser fixture)
from tests.phonelab import checked, goto, paired_page, ready, sized_page, start_crew
from tests.system.test_phone_app import open_ask, pane_of, pump_until

pytestmark = pytest.mark.slow

ZONE = "Pacific/Kiritimati"  # UTC+14: a time in the lead's zone (UTC) reads ten hours off
PHONES = {"390x844": (390, 844, "light"), "360x780": (360, 780, "dark")}


@pytest.fixture(scope="module")
def crew():
    c = Crew(short_dir("ct"))
    c.lead.env["TZ"] = "UTC"
    start_crew(c, [("calm", "endless", "--rate", "2", "--size", "20", "--asks"),
                   ("flood", "endless", "--rate", "100", "--size", "20", "--asks"),
                   ("writer", "streamer"), ("desk", "deployer")],
               [("lab", "deployer"), ("show", "showcase")], member_env={"TZ": "UTC"})
    yield c
    c.stop()


def phone(crew: Crew, browser, size: str):
    page = sized_page(crew, browser, *PHONES[size], ZONE)
    page.size = size
    return page


@pytest.fixture(params=sorted(PHONES))
def page(request, crew, browser):
    yield from checked(phone(crew, browser, request.param))


def look(page, name: str) -> None:
    """COLLIE_LOOK=<folder>: save this screen, per phone size, to look at."""
    phonelab.look(page, name, page.size)


def newest_seq(page) -> int:
    return page.evaluate("() => Math.max(0, ...[...document.querySelectorAll('.items .item')]"
                         ".map((e) => parseInt(e.textContent, 10)).filter((n) => !isNaN(n)))")


def card(page, title: str):
    return page.locator(".card[data-ask]", has=page.locator(".title", has_text=re.compile(f"^{re.escape(title)}$")))


def active(page) -> str:
    """What has the keyboard: the focused element's tag and its label or id."""
    return page.evaluate("() => { const a = document.activeElement; return a ? `${a.tagName}:${a.id || "
                         "a.getAttribute('aria-label') || a.name || ''}` : ''; }")


def bottom(page) -> None:
    page.evaluate("scrollTo(0, document.documentElement.scrollHeight)")


@pytest.mark.parametrize("agent", ["calm", "flood"])
def test_what_the_user_types_or_chooses_stays_while_items_arrive(page, agent):
    """Issue 36 major 1 (Q4, C3): while the conversation gets new items — 2 a second, or a flood of 100 a
    second — drawn as they come (the user is at the newest), what the user types into a text ask, a form's text and list, a multi-choice and the
    message editor stays as typed, the field keeps the keyboard and the caret where it was, and the
    counter counts what is in the field."""
    goto(page, f"#/c/local/{agent}/f00000")
    text, form, multi = card(page, "Name the branch"), card(page, "Release"), card(page, "Which colours?")
    for c in (text, form, multi):
        c.wait_for(timeout=15000)
    drawn = newest_seq(page)

    box = text.locator("input[type=text]")
    box.click()
    bottom(page)  # the field keeps the keyboard while the chat follows its newest items
    page.keyboard.type("feature/kiri", delay=120)
    page.keyboard.press("ArrowLeft")
    page.keyboard.press("ArrowLeft")
    page.keyboard.type("X", delay=120)
    # (kept at the newest, the chat draws the items as they come: its window slides under the field)
    pump_until(page, lambda: bottom(page) or newest_seq(page) > drawn + 2, timeout=20,
               what=f"items drawn while typing ({box.input_value()!r}, {active(page)})")
    assert box.input_value() == "feature/kiXri", box.input_value()
    assert active(page) == "INPUT:Name the branch"
    assert box.evaluate("(e) => [e.selectionStart, e.selectionEnd]") == [11, 11]
    assert "13 of 40" in text.inner_text()

    note = form.locator("input[type=text]")
    note.click()
    page.keyboard.type("ship on friday", delay=80)
    form.locator("select").select_option("production")
    multi.locator("input[type=checkbox]").nth(1).check()
    editor = page.locator("#editor")
    editor.click()
    page.keyboard.type("and please be brief", delay=80)
    bottom(page)
    mark = newest_seq(page)
    pump_until(page, lambda: bottom(page) or newest_seq(page) > mark + 2, timeout=20, what="items drawn after the choices")
    assert note.input_value() == "ship on friday"
    assert form.locator("select").input_value() == "production"
    assert [b.is_checked() for b in multi.locator("input[type=checkbox]").all()] == [False, True, False]
    assert editor.input_value() == "and please be brief"
    assert active(page) == "TEXTAREA:editor"
    assert box.input_value() == "feature/kiXri"
    look(page, f"typed-{agent}")



def sleep_member(crew: Crew, label: str = "workshop") -> None:
    """The member's machine goes to sleep: its link drops and the lead says it is offline."""
    crew.members[label].kill(signal.SIGKILL)
    wait_for(lambda: not crew.online(label), timeout=30, what=f"{label} offline")


def wake_member(crew: Crew, label: str = "workshop") -> None:
    crew.members[label].serve()
    wait_for(lambda: crew.online(label), timeout=30, what=f"{label} back")


def test_a_conversation_opened_while_its_member_sleeps_shows_its_whole_history_after_the_wake(page, crew):
    """Issue 36 major 2 (C1): a member's conversation opened while the member's machine sleeps says the
    machine is offline and draws what the lead could read; once the machine is back, the chat reads
    what it could not and shows the whole history — every item the API has — not only the newest turn."""
    with crew.client() as c:
        whole = c.get("/api/agents/workshop/show/conversations/long/items").json()["items"]
    assert len(whole) >= 40
    sleep_member(crew)
    try:
        goto(page, "#/c/workshop/show/long")
        pump_until(page, lambda: "workshop is offline" in page.locator("main").inner_text(), timeout=15,
                   what="the chat says the machine is offline")
        look(page, "history-asleep")
    finally:
        wake_member(crew)
    items = page.locator(".items .item")
    pump_until(page, lambda: page.locator(".item", has_text=re.compile(r"^message 0$")).count() == 1, timeout=20,
               what="the first message drawn after the wake")
    pump_until(page, lambda: items.count() >= len(whole), timeout=10, what="every item drawn")
    assert page.locator(".item", has_text=re.compile(r"^message 39$")).count() == 1
    assert "workshop is offline" not in page.locator("main").inner_text()
    look(page, "history-woken")



def phone_clock(epoch: float) -> str:
    """HH:MM of an instant in the phone's zone (the lead's, UTC, is ten hours and more away)."""
    from datetime import datetime
    from zoneinfo import ZoneInfo
    return datetime.fromtimestamp(epoch, ZoneInfo(ZONE)).strftime("%H:%M")


def hhmm(text: str) -> str:
    found = re.findall(r"\b(\d\d:\d\d)\b", text)
    assert found, text
    return found[-1]


def offline_clock(crew: Crew) -> str:
    """The sleeping member's `offline_since` as the phone must show it, checked to differ from the lead's."""
    with crew.client() as c:
        section = next(s for s in c.get("/api/dashboard").json()["sections"] if s["machine"] == "workshop")
    want = phone_clock(section["offline_since"])
    assert want != datetime_utc(section["offline_since"])
    return want


def test_every_time_is_the_phones_and_the_queued_line_goes_once_the_message_can_run(page, crew):
    """Issue 36 major 5 (C9, I7): while `workshop` sleeps, every `since HH:MM` the phone shows — the
    dashboard's section, the chat's notice, a send's `queued, machine offline since …`, the inbox line —
    is the instant the lead sent, in the phone's zone (read back from the DOM, the lead in UTC); once
    the machine is back the queued line goes (the message runs). The machine's section keeps its height
    (issue 36 minor: no jump when a member sleeps or wakes)."""
    goto(page, "#/")
    section = page.locator("section[data-machine='workshop']")
    head = section.locator("h2")
    pump_until(page, lambda: "online" in head.inner_text(), timeout=10, what="the section online")
    height = section.bounding_box()["height"]
    sleep_member(crew)
    try:
        want = offline_clock(crew)
        pump_until(page, lambda: "offline since" in head.inner_text(), timeout=10, what="the section offline")
        assert hhmm(head.inner_text()) == want, (head.inner_text(), want)
        assert section.bounding_box()["height"] == height
        look(page, "dashboard-asleep")

        goto(page, "#/inbox/workshop/show")
        text = f"while asleep {uuid.uuid4().hex[:6]}"
        goto(page, "#/c/workshop/show/long")
        pump_until(page, lambda: "workshop is offline since" in page.locator("main").inner_text(), timeout=10,
                   what="the chat's notice")
        assert hhmm(page.locator("main p.warning").inner_text()) == want
        page.locator("#editor").fill(text)
        page.locator(".bar").get_by_role("button", name="Send", exact=True).click()
        note = page.locator("#editor-note")
        pump_until(page, lambda: "queued" in note.inner_text(), timeout=10, what="the send queued")
        assert note.inner_text() == f"queued, machine offline since {want}"
        look(page, "queued-offline")
        page.go_back()
        line = page.locator(".inbox-item", has_text=text).locator(".l2")
        pump_until(page, lambda: line.count() and "machine offline since" in line.inner_text(), timeout=10,
                   what="the inbox line")
        assert hhmm(line.inner_text()) == want
        page.go_forward()
        pump_until(page, lambda: "queued, machine offline since" in note.inner_text(), timeout=10, what="the chat again")
    finally:
        wake_member(crew)
    pump_until(page, lambda: "offline" not in page.locator("main").inner_text(), timeout=15,
               what="no offline sentence left in the chat")


def test_an_answer_refused_while_the_machine_sleeps_says_since_when_and_goes_when_it_is_back(page, crew):
    """Issue 36 major 5 and minor (O): an answer tapped while `workshop` sleeps says `The machine is offline:
    workshop since HH:MM` in the phone's zone; once the machine is back the sentence goes and the ask has
    one card, its buttons live — no stale duplicate with a live Send."""
    ask = open_ask(crew, "workshop", "lab", "deploy")
    sleep_member(crew)
    try:
        want = offline_clock(crew)
        goto(page, "#/c/workshop/lab/deploy")
        the_card = card(page, ask["title"])
        the_card.wait_for()
        the_card.get_by_role("button", name=re.compile("^Allow")).click()
        outcome = the_card.locator(".outcome")
        pump_until(page, lambda: outcome.count() and "The machine is offline" in outcome.inner_text(), timeout=10,
                   what="the answer refused")
        assert outcome.inner_text() == f"The machine is offline: workshop since {want}"
        look(page, "answer-offline")
    finally:
        wake_member(crew)
    pump_until(page, lambda: "offline" not in page.locator("main").inner_text(), timeout=15,
               what="no offline sentence left in the chat")
    pump_until(page, lambda: card(page, ask["title"]).count() == 1, timeout=10, what="one card for the ask")
    assert card(page, ask["title"]).locator(".outcome").count() == 0
    assert card(page, ask["title"]).get_by_role("button", name=re.compile("^Allow")).is_enabled()


def datetime_utc(epoch: float) -> str:
    from datetime import UTC, datetime
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M")



# ---- the minors -----------------------------------------------------------------------------------------
def test_always_allow_takes_its_second_tap_on_the_same_spot_and_disarms(page, crew):
    """Issue 36 minor, Q5: the first tap on `Always allow` turns it into `Tap again to always allow deploy`
    in the same place (at 390 and 360 px the second tap, at the same point, lands on it); unanswered, it
    turns back after 5 s; the answered card collapses to one line with the choice."""
    open_ask(crew, "local", "desk", "deploy")
    goto(page, "#/c/local/desk/deploy")
    the_card = card(page, "Deploy to staging?")
    always = the_card.locator(".opts button").nth(1)
    always.wait_for()
    box = always.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.click(x, y)
    armed = the_card.locator(".opts button").nth(1)
    pump_until(page, lambda: armed.locator(".role").inner_text() == "Tap again to always allow deploy", timeout=5,
               what="armed")
    look(page, "always-armed")
    under = page.evaluate("([x, y]) => document.elementFromPoint(x, y).closest('button').innerText", [x, y])
    assert under.startswith("Tap again to always allow deploy"), under
    pump_until(page, lambda: armed.locator(".role").inner_text() == "Always allow", timeout=10, what="disarmed")
    page.mouse.click(x, y)
    pump_until(page, lambda: "Tap again" in armed.inner_text(), timeout=5, what="armed again")
    page.mouse.click(x, y)
    line = page.locator(".card.answered", has_text="You always allowed · deploy")
    line.wait_for(timeout=10000)
    assert line.bounding_box()["height"] < 60
    look(page, "answered")


COUNT_BEATS = """window.beats = 0; window.EventSource = class extends window.EventSource {
    constructor(...args) { super(...args); this.addEventListener('beat', () => { window.beats += 1; }); } };"""


def test_the_lead_keeps_the_newest_telling_of_use_when_the_tellings_race(crew, browser):
    """Issue 36 major 3 (phone-api.md `active`): the page tells the lead what it views and whether the user is
    using it. When a chat's first telling (`active: false`) is still on its way as the user begins to use the
    page, the lead still ends up told `active: true` — it beats every 2 s — and the strip never says the lead
    is not answering while it answers. (The `active: true` telling overtaking the older one left the lead
    beating every 25 s, the page saying `The lead is not answering` 4 s after use began, and the always-allow
    tap refused: the flake of the test above.)"""
    page = paired_page(crew, browser, init_script=COUNT_BEATS, viewport={"width": 390, "height": 844},
                       has_touch=True, timezone_id=ZONE)
    held, told = [], []

    def on_view(route):
        body = json.loads(route.request.post_data or "{}")
        if body.get("conversation") != "deploy":
            return route.continue_()
        told.append(body.get("active"))
        if not held:
            held.append(route)  # the chat's first telling, kept on its way
        else:
            route.continue_()

    page.route("**/api/events/*/view", on_view)
    goto(page, "#/c/local/desk/deploy")
    pump_until(page, lambda: held, timeout=10, what="the chat's first telling on its way")
    assert told == [False], told
    page.evaluate(BANNER_SEEN)
    page.locator("main h1").click()  # the user begins to use the page
    deadline = time.monotonic() + 1  # (room for a telling that would overtake the held one)
    while len(told) < 2 and time.monotonic() < deadline:
        page.wait_for_timeout(50)
    held[0].continue_()
    pump_until(page, lambda: told[-1] is True, timeout=10, what="the page in use told")
    beats = page.evaluate("window.beats")
    pump_until(page, lambda: page.evaluate("window.beats") >= beats + 3, timeout=20, what="a beat every 2 s")
    assert page.evaluate("window.bannerSeen") == []
    assert page.locator("#banner").is_hidden()
    page.unroute("**/api/events/*/view")
    assert page.errors == [], page.errors
    page.context.close()


def test_a_text_ask_is_sent_with_enter_and_collapses_to_the_answer(page, crew):
    """Issue 36 minor, Q4: Enter in a text ask's field sends it; the agent takes it and the card collapses to
    `You answered · <text>`."""
    goto(page, "#/c/local/flood/f00000")
    text = card(page, "Name the branch")
    text.wait_for(timeout=15000)
    name = f"enter/{uuid.uuid4().hex[:4]}"
    text.locator("input[type=text]").fill(name)
    text.locator("input[type=text]").press("Enter")
    page.locator(".card.answered", has_text=f"You answered · {name}").wait_for(timeout=10000)


def test_a_stopped_reply_loses_its_typing_cursor(page):
    """Issue 36 minor, C2: a reply still growing shows a cursor; Stop ends the turn (`stopped`) and the reply
    left unfinished shows none."""
    goto(page, "#/c/local/writer/chat")
    words = " ".join(f"w{i}" for i in range(120))  # the streamer writes a word every 50 ms: 6 s of reply
    page.locator("#editor").fill(words)
    page.locator(".bar").get_by_role("button", name="Send", exact=True).click()
    growing = page.locator(".item.reply.cursor")
    growing.wait_for(timeout=10000)
    page.locator(".bar").get_by_role("button", name="Stop").click()
    pump_until(page, lambda: page.locator(".item.notice", has_text=re.compile("^stopped$")).count() >= 1, timeout=10,
               what="the turn stopped")
    pump_until(page, lambda: growing.count() == 0, timeout=5, what="no cursor left")
    assert page.locator(".items .item.reply", has_text="Looking").count() >= 1  # the unfinished reply stays (Stop may come after its first word)


def test_the_in_app_back_goes_back_without_adding_a_history_entry(page):
    """Issue 36 minor: the header's `Back` is the phone's Back — the page before, no new history entry — so
    the phone's own Back afterwards never goes forward into the screen just left."""
    goto(page, "#/")
    page.locator("section[data-machine='local'] a.row", has_text="desk").click()
    page.wait_for_selector("main[data-route='#/a/local/desk']:not([aria-busy])")
    page.locator("ul.rows a.row").first.click()
    page.wait_for_selector("main[data-route^='#/c/local/desk/']:not([aria-busy])")
    length = page.evaluate("history.length")
    page.locator("#back").click()
    page.wait_for_selector("main[data-route='#/a/local/desk']:not([aria-busy])")
    assert page.evaluate("history.length") == length
    page.locator("#back").click()
    page.wait_for_selector("main[data-route='#/']:not([aria-busy])")
    assert page.locator("#back").is_hidden()


def test_the_inbox_rows_match_an_added_message_is_its_own_paragraph_and_typing_survives_changes(page, crew):
    """Issue 36 minors and major 1 (I7, I9): every waiting row has its buttons in the same places; a message
    added is shown as its own paragraph under the text; what the owner types into `Message to add` stays,
    with the keyboard, while the inbox changes under it; once nothing waits the inbox says so."""
    tag = uuid.uuid4().hex[:6]
    out = crew.lead.collie("tokens", "create", f"relay{tag}", "--approval", "required")
    assert out.returncode == 0, out.stderr
    token = Path(re.search(r"(/\S+)", out.stdout).group(1).rstrip(":,.")).read_text().strip()

    def queue(text: str) -> None:  # a sender whose requests wait for the owner's approval (I3)
        with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}, timeout=20) as relay:
            got = relay.post("/api/agents/local/desk/inbox",
                             json={"request_id": str(uuid.uuid4()), "conversation": "deploy", "text": text})
            assert got.status_code == 200, got.text

    for i in range(3):
        queue(f"number {i} {tag}")
    goto(page, "#/inbox/local/desk")
    rows = page.locator(".inbox-item", has_text=tag)
    pump_until(page, lambda: rows.count() == 3, timeout=10, what="three waiting")
    lefts = [[round(b.bounding_box()["x"]) for b in r.locator("button").all()] for r in rows.all()]
    assert len(set(map(tuple, lefts))) == 1, lefts
    tops = [[round(b.bounding_box()["y"] - r.bounding_box()["y"]) for b in r.locator("button").all()] for r in rows.all()]
    assert len(set(map(tuple, tops))) == 1, tops
    look(page, "inbox-rows")
    rows.nth(2).get_by_role("button", name="Add a message").click()
    field = page.get_by_label("Message to add")
    pump_until(page, lambda: active(page) == "INPUT:Message to add", timeout=5, what="the field has the keyboard")
    page.keyboard.type("and please", delay=50)
    queue(f"number 3 {tag}")  # the inbox changes while the owner types
    pump_until(page, lambda: rows.count() == 4, timeout=10, what="the fourth drawn")
    page.keyboard.type(" be brief", delay=50)
    assert field.input_value() == "and please be brief"
    assert active(page) == "INPUT:Message to add"
    page.keyboard.press("Enter")
    added = rows.filter(has_text="and please be brief").locator(".l1")
    pump_until(page, lambda: added.count() == 1, timeout=10, what="the message added")
    assert added.inner_text() == f"number 2 {tag}\n\nand please be brief"
    look(page, "inbox-added")
    for n in range(4, 0, -1):
        pump_until(page, lambda: rows.get_by_role("button", name="Cancel", exact=True).count() == n, timeout=10,
                   what=f"{n} waiting")
        rows.get_by_role("button", name="Cancel", exact=True).first.click()
    page.get_by_text("Nothing waits here.", exact=True).wait_for(timeout=10000)


def test_a_chat_reloaded_while_the_phone_is_offline_shows_what_was_last_loaded(crew, browser):
    """Issue 36 minor (phone-app.md): the page installed (its service worker), a chat read once, then the
    phone offline and the chat reloaded: it shows the conversation as last loaded, marked so — never
    `Loading…` for ever."""
    page = paired_page(crew, browser, "allow", viewport={"width": 390, "height": 844}, timezone_id=ZONE)
    page.size = "390x844"
    goto(page, "#/c/local/desk/deploy")
    page.locator(".card[data-ask], .item").first.wait_for(timeout=10000)
    pump_until(page, lambda: page.evaluate("!!navigator.serviceWorker.controller") or (page.reload() and False),
               timeout=20, what="the service worker in control")
    page.wait_for_selector("main[data-route='#/c/local/desk/deploy']:not([aria-busy])")
    page.context.set_offline(True)
    page.reload()
    page.wait_for_selector("main[data-route='#/c/local/desk/deploy']:not([aria-busy])", timeout=15000)
    pump_until(page, lambda: "This phone is offline" in page.locator("#banner").inner_text(), timeout=10,
               what="the banner")
    assert "Loading…" not in page.locator("main").inner_text()
    assert page.locator("main h1").inner_text().startswith("Deploy")
    look(page, "offline-reload")
    page.context.set_offline(False)
    assert page.errors == [], page.errors
    page.context.close()


def test_a_member_sleeping_and_waking_moves_nothing_the_user_reads(page, crew):
    """Issue 36 minor (C7): the chat's notice and its Rename/Close row come and go when `workshop` sleeps and
    wakes; the item the user reads stays where it is on screen, and the row's buttons dim in place."""
    goto(page, "#/c/workshop/show/long")
    page.locator(".item", has_text=re.compile(r"^message 20$")).wait_for(timeout=10000)
    target = page.locator(".item", has_text=re.compile(r"^message 25$"))
    target.evaluate("(e) => e.scrollIntoView({block: 'center'})")
    page.wait_for_timeout(200)
    assert page.evaluate("innerHeight + scrollY < document.documentElement.scrollHeight - 100")  # reading, not following
    before = target.bounding_box()["y"]
    sleep_member(crew)
    try:
        pump_until(page, lambda: "workshop is offline" in page.locator("main").inner_text(), timeout=10, what="asleep")
        page.wait_for_timeout(200)
        assert abs(target.bounding_box()["y"] - before) <= 1, (target.bounding_box()["y"], before)
        assert page.get_by_role("button", name="Rename").is_disabled()
    finally:
        wake_member(crew)
    pump_until(page, lambda: "workshop is offline" not in page.locator("main").inner_text(), timeout=15, what="awake")
    page.wait_for_timeout(200)
    assert abs(target.bounding_box()["y"] - before) <= 1, (target.bounding_box()["y"], before)


BANNER_SEEN = """() => { window.bannerSeen = []; const b = document.getElementById('banner');
    new MutationObserver(() => { if (!b.hidden) window.bannerSeen.push(b.textContent); })
      .observe(b, {attributes: true, childList: true, characterData: true, subtree: true}); }"""


def banner_on_screen(page) -> bool:
    """The banner is shown and wholly inside the viewport, wherever the page is scrolled."""
    return page.evaluate("""() => { const b = document.getElementById('banner'); if (b.hidden) return false;
        const r = b.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; }""")


def send_while_out(page, text: str, why: str) -> None:
    """A send tapped while the lead is out says it did not go: `Not sent`, the text back in the editor."""
    page.locator("#editor").fill(text)
    page.locator(".bar").get_by_role("button", name="Send", exact=True).click()
    line = page.locator(".item.mine", has_text=text)
    pump_until(page, lambda: line.count() and line.locator(".state").inner_text() == "Not sent", timeout=5,
               what="the line marked Not sent")
    assert page.locator("#editor-note").inner_text() == f"Not sent: {why}"
    assert page.locator("#editor").input_value() == text


def test_a_hung_lead_is_said_on_screen_within_five_seconds_and_taps_say_they_did_not_go(page, crew):
    """Issue 36 major 3: the lead stops answering (SIGSTOP: a sleeping laptop, a black-holed network)
    under a chat scrolled to its newest of thousands of items. Within 5 s of its last word the strip
    fixed under the header — on screen, not 9,000 px above — says `The lead is not answering (N s)` and
    counts; a send and an ask's answer tapped meanwhile say they did not go; the strip goes once the lead
    answers again."""
    goto(page, "#/c/local/flood/f00000")
    card(page, "Deploy to staging?").wait_for(timeout=15000)
    bottom(page)
    assert page.evaluate("document.documentElement.scrollHeight") > 3 * page.viewport_size["height"]
    page.evaluate(BANNER_SEEN)
    crew.lead.kill(signal.SIGSTOP)
    try:
        pump_until(page, lambda: banner_on_screen(page), timeout=10, what="the strip on screen")
        first = page.evaluate("window.bannerSeen[0]")
        n = int(re.search(r"\((\d+) s\)", first).group(1))
        assert first.startswith("The lead is not answering (") and n <= 5, first
        pump_until(page, lambda: f"({n + 1} s)" in page.locator("#banner").inner_text() or
                   f"({n + 2} s)" in page.locator("#banner").inner_text(), timeout=5, what="the strip counts")
        bottom(page)
        assert banner_on_screen(page)
        look(page, "lead-hung")
        send_while_out(page, f"while hung {uuid.uuid4().hex[:6]}", "the lead is out of reach.")
        ask = card(page, "Deploy to staging?")
        ask.get_by_role("button", name=re.compile("^Allow")).click()
        pump_until(page, lambda: "Nothing was done: the lead is out of reach." in ask.inner_text(), timeout=5,
                   what="the card says nothing was done")
    finally:
        crew.lead.kill(signal.SIGCONT)
    pump_until(page, lambda: page.locator("#banner").is_hidden(), timeout=10, what="the strip gone")


@pytest.mark.parametrize("size", sorted(PHONES))
def test_a_killed_lead_is_said_on_screen_and_taps_say_they_did_not_go(browser, size):
    """Issue 36 major 3: the lead killed under a chat scrolled to its newest item: the strip fixed under
    the header says `Can't reach the lead` on screen within 5 s, a send and an answer tapped meanwhile
    say they did not go, and the strip goes when a restarted lead answers."""
    c = Crew(short_dir("ck"))
    c.lead.env["TZ"] = "UTC"
    c.lead.agent("show", "showcase")
    c.lead.agent("desk", "deployer")
    c.start_lead()
    try:
        ready(c, "local", 2)
        open_ask(c, "local", "desk", "deploy")
        page = phone(c, browser, size)
        goto(page, "#/c/local/show/long")
        page.locator(".item", has_text=re.compile(r"^message 39$")).wait_for()
        bottom(page)
        page.evaluate(BANNER_SEEN)
        c.lead.kill(signal.SIGKILL)
        pump_until(page, lambda: banner_on_screen(page), timeout=10, what="the strip on screen")
        assert page.evaluate("window.bannerSeen[0]").startswith("Can't reach the lead"), page.evaluate("window.bannerSeen")
        look(page, "lead-killed")
        send_while_out(page, f"while dead {uuid.uuid4().hex[:6]}", "the lead is out of reach.")
        c.start_lead("--port", c.address.rsplit(":", 1)[1])  # the same address: the page comes back to it
        pump_until(page, lambda: page.locator("#banner").is_hidden(), timeout=15, what="the strip gone")
        assert page.errors == [], page.errors
        page.context.close()
    finally:
        c.stop()
