"""Know when it is done (issue 37; crew.md §5 "When a turn ends"; docs/push.md), in Chromium: a paired phone turns
on "Notify me when a turn ends" on its dashboard (its push subscription made on the way), and the lead pushes
when a turn of the lead's own agent, a member's agent or an ACP agent ends — decrypted from the fake push service
(RFC 8291) and delivered to the page's service worker through DevTools, as the lock-screen tests do."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import uuid

import httpx
import pytest

from collie.crew import control
from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.livelab import cleanup, short_dir
from tests.phonelab import (
    browser,  # noqa: F401 (the module's browser fixture)
    pair_link,
)
from tests.pushlab import FakePushService, Subscriber
from tests.system.test_push_actions import RECORD

pytestmark = pytest.mark.slow

SECRET = "ghp_" + "a1B2c3D4" * 4 + "e5F6"
AGENT = """
import sys, trio
from collie.crew.sdk import open_collie
async def on_send(pane, text):
    word = text.split()[0]
    if word == "hang":
        await trio.sleep_forever()
    if word == "fail":
        raise RuntimeError("the build broke")
    if word == "ask":
        await pane.ask(kind="permission", tool_call_id="t-" + text.split()[1], title="Deploy?", tool="deploy",
                       options=[{"id": "yes", "label": "Ship it", "role": "allow"}, {"id": "no", "label": "No", "role": "deny"}])
    pane.reply("thinking it over")
    pane.reply("All done: " + text + "\\nsecond line of the reply")
async def main():
    async with open_collie(socket=sys.argv[1], caps=["asks", "send", "abort", "watch"], on_send=on_send,
                           runtime="turns") as c:
        for i in range(12):
            c.conversation(f"c{i}", title=f"Task {i}")
        c.ready()
        print("listening", flush=True)
        await trio.sleep_forever()
trio.run(main)
"""
SUBSCRIBE_FAKE = """
  if (window.PushManager) {
    const fake = %s;
    let current = null;
    PushManager.prototype.subscribe = async function () { current = { toJSON: () => fake, endpoint: fake.endpoint }; return current; };
    PushManager.prototype.getSubscription = async function () { return current; };
  }"""
# a tap on the notification's text (no action): what the worker does is awaited, a refused focus() included
TAP = """async (shown) => {
  const waits = [];
  const ev = new Event("notificationclick");
  Object.defineProperty(ev, "notification", { value: { ...shown, close() {} } });
  Object.defineProperty(ev, "action", { value: "" });
  Object.defineProperty(ev, "waitUntil", { value: (p) => waits.push(p) });
  self.dispatchEvent(ev);
  await Promise.allSettled(waits);
}"""
HIDE = """(hidden) => {
  Object.defineProperty(document, "visibilityState", { configurable: true, get: () => hidden ? "hidden" : "visible" });
  Object.defineProperty(document, "hidden", { configurable: true, get: () => hidden });
  document.dispatchEvent(new Event("visibilitychange"));
}"""


def hide(page) -> None:
    """The page goes off screen: it tells its live channel (the lead has heard once the request is answered)."""
    with page.expect_response(lambda r: r.url.endswith("/view") and r.request.method == "POST"):
        page.evaluate(HIDE, True)


def rid() -> str:
    return str(uuid.uuid4())


class Phone:
    """A paired Chromium page at phone size whose browser subscribes with the fake push service."""

    def __init__(self, browser, address: str, link: str, sub: Subscriber) -> None:
        self.address, self.sub = address, sub
        self.ctx = browser.new_context(viewport={"width": 360, "height": 780})
        self.ctx.grant_permissions(["notifications"], origin=address)
        self.ctx.add_init_script(SUBSCRIBE_FAKE % json.dumps(sub.json()))
        self.page = self.ctx.new_page()
        self.errors: list = []
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(link)
        self.page.wait_for_url(re.compile(r"/(#/?)?$"))
        self.page.wait_for_selector("main section")

    def turn_on(self) -> None:
        """The dashboard's switch: its first tap subscribes this phone (it had no subscription) and turns it on."""
        box = self.page.get_by_label("Notify me when a turn ends")
        box.click()
        wait_for(lambda: self.settings()["all"], what="the setting on the lead")
        self.page.wait_for_selector("#turns:checked")

    def settings(self) -> dict:
        return self.page.evaluate("""async () => {
          const key = await collieDevice.stored("key");
          const r = await fetch("/api/push/turns", { headers: { "X-Collie-Device-Key": key } });
          return r.json();
        }""")

    def worker(self):
        cdp = self.ctx.new_cdp_session(self.page)
        regs: dict = {}
        cdp.on("ServiceWorker.workerRegistrationUpdated",
               lambda ev: regs.update({r["scopeURL"]: r["registrationId"] for r in ev["registrations"]}))
        cdp.send("ServiceWorker.enable")
        wait_for(lambda: (self.page.wait_for_timeout(50), regs)[1], what="the service worker's registration")
        [worker] = wait_for(lambda: (self.page.wait_for_timeout(50), self.ctx.service_workers)[1], what="the worker")
        worker.evaluate(RECORD)
        return cdp, regs, worker

    def close(self) -> None:
        self.ctx.close()


class Pushes:
    """The turn-end pushes the fake push service received for one subscription, decrypted."""

    def __init__(self, service: FakePushService, sub: Subscriber, path: str) -> None:
        self.service, self.sub, self.path = service, sub, path

    def all(self, kind: str | None = None) -> list[dict]:
        got = [self.sub.decrypt(r["body"]) for r in list(self.service.received) if r["path"] == self.path]
        return [p for p in got if kind is None or p["kind"] == kind]

    def turns(self) -> list[dict]:
        return [p for p in self.all() if p["kind"] in ("turn", "turns")]

    def wait(self, pred, what: str) -> dict:
        return wait_for(lambda: next((p for p in self.all() if pred(p)), None), timeout=30, what=what)


def pane(api, conv: str, machine: str = "local", agent: str = "desk") -> dict:
    return api.get(f"/api/agents/{machine}/{agent}/conversations/{conv}").json()


def send(api, conv: str, text: str, machine: str = "local", agent: str = "desk") -> dict:
    turn = pane(api, conv, machine, agent)["turn"]
    got = api.post("/api/send", json={"request_id": rid(), "machine": machine, "agent": agent, "conversation": conv,
                                      "text": text, "turn": turn}).json()
    assert got["outcome"] in ("sent", "queued"), got
    return got


def idle_after(api, conv: str, turn: int, machine: str = "local", agent: str = "desk") -> dict:
    return wait_for(lambda: (lambda p: p if p.get("state") == "idle" and p.get("turn", 0) > turn else None)(
        pane(api, conv, machine, agent)), timeout=30, what=f"the turn of {conv} to end")


class Lead:
    """A lead (`collie serve`) with the test agent `desk` (twelve conversations) attached, a fake push service,
    and one paired phone."""

    def __init__(self, paths, bridge, browser) -> None:
        self.paths, self.bridge_fixture, self.browser = paths, bridge, browser
        self.run = short_dir()
        self.service = FakePushService()
        self.sock = self.run / "lock" / "a.sock"
        self.sock.parent.mkdir(mode=0o700)
        self.agent = subprocess.Popen([sys.executable, "-c", AGENT, str(self.sock)], cwd=REPO, stdout=subprocess.PIPE,
                                      text=True)
        assert "listening" in self.agent.stdout.readline()
        assert run_collie(paths, "durable", "attach", "desk", "--socket", str(self.sock)).returncode == 0
        self.start()
        link = pair_link(run_collie(paths, "pair", "--no-qr"))
        self.sub = Subscriber(self.service.url("/ok/phone"))
        self.phone = Phone(browser, self.address, link, self.sub)
        self.pushes = Pushes(self.service, self.sub, "/ok/phone")

    def start(self, *args: str) -> None:
        self.lead = self.bridge_fixture(*args, env=collie_env(self.paths, COLLIE_PUSH_LOOPBACK="1"))
        self.address = self.lead.wait_ready()["address"]
        token = (self.paths.state_dir / "api-token").read_text().strip()
        self.api = httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=20)
        wait_for(lambda: pane(self.api, "c0").get("state") == "idle", what="the agent to be read")

    def restart(self) -> None:
        """Stop the lead and start it again on the same port (the page's origin, its device key's home)."""
        self.api.close()
        assert self.lead.stop() == 0
        self.start("--port", self.address.rsplit(":", 1)[1])

    def live(self) -> dict:
        return control.call(self.paths.control_socket, "live")["push"]

    def close(self) -> None:
        self.api.close()
        self.phone.close()
        self.agent.kill()
        self.agent.wait()
        self.agent.stdout.close()
        self.service.close()
        cleanup(self.run)


@pytest.fixture
def lead(paths, bridge, browser):
    lab = Lead(paths, bridge, browser)
    try:
        yield lab
        assert lab.phone.errors == []
    finally:
        lab.close()


def test_a_turn_that_ends_pushes_done_with_its_first_line_once_and_the_tap_opens_the_chat(lead):
    """Issue 37: with "Notify me when a turn ends" on (the dashboard's switch; the phone had no push subscription,
    so the tap made one), a turn that ends pushes `Done in Task 0` with the first line of the agent's last reply,
    its secret masked (X1). Delivered to the service worker it shows that; tapping it opens the chat at its newest
    item. A lead restart pushes that turn's end no second time; the next turn's end pushes again."""
    phone = lead.phone
    for i in range(10):  # a long chat (before the switch is on): the newest item is far below the first screen
        t = send(lead.api, "c0", f"step {i}")["turn"]
        idle_after(lead.api, "c0", t - 1)
    assert phone.settings() == {"subscribed": False, "all": False, "conversations": []}
    phone.turn_on()
    assert phone.settings()["subscribed"] is True
    turn = send(lead.api, "c0", f"run the tests, token={SECRET}")["turn"]
    got = lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["turn"] == turn, "the turn's push")
    assert (got["title"], got["body"]) == ("Done in Task 0", "All done: run the tests, token=[secret]")
    assert got["url"] == "/#/c/local/desk/c0" and got["tag"] == "turn:local/desk/c0"
    assert SECRET not in json.dumps(lead.pushes.all())

    cdp, regs, worker = phone.worker()
    cdp.send("ServiceWorker.deliverPushMessage", {"origin": lead.address.rstrip("/"), "registrationId": list(regs.values())[0],
                                                  "data": json.dumps(got)})
    [shown] = wait_for(lambda: worker.evaluate("self.SHOWN"), what="the notification")
    assert (shown["title"], shown["body"], shown["data"]["url"]) == (got["title"], got["body"], got["url"])
    assert shown["actions"] == []
    worker.evaluate(TAP, shown)
    phone.page.wait_for_url(re.compile(r"#/c/local/desk/c0$"))
    last = phone.page.locator(".items > .item").last
    last.wait_for()
    assert "All done: run the tests" in last.inner_text()
    wait_for(lambda: phone.page.evaluate("(el) => el.getBoundingClientRect().bottom <= innerHeight", last.element_handle()),
             what="the newest item on screen")

    lead.restart()
    phone.page.goto(lead.address + "/#/")  # a dashboard off this chat: the next turn pushes (not viewed)
    phone.page.wait_for_selector("#turns:checked")
    assert phone.settings()["all"] is True  # the phone's setting is the lead's, kept across its restart
    turn2 = send(lead.api, "c1", "and now the docs")["turn"]
    lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c1" and p["turn"]["turn"] == turn2,
                     "the next turn's push")
    assert [p["turn"]["turn"] for p in lead.pushes.turns() if p["turn"]["conversation"] == "c0"].count(turn) == 1


def test_no_push_while_the_chat_is_open_and_visible_one_when_hidden_none_for_this_phones_stop(lead):
    """Issue 37: a turn ending in the chat this phone has open and on screen pushes nothing; with the page hidden
    (the page tells its live channel on visibilitychange) it pushes. A turn this phone stopped (its Stop, tapped in
    the chat) pushes nothing to it; one stopped by someone else says `Stopped in Task 3` and who; a turn whose last
    word is the agent's notice says `Failed in Task 4` and that notice. The chat's menu switch turns it off for one
    conversation only."""
    phone = lead.phone
    phone.turn_on()
    page = phone.page
    page.goto(lead.address + "/#/c/local/desk/c1")
    page.wait_for_selector("#turns-here:checked")  # the chat's menu shows it on (every conversation)
    t = send(lead.api, "c1", "visible work")["turn"]
    idle_after(lead.api, "c1", t - 1)
    hide(page)  # the page goes off screen
    t2 = send(lead.api, "c1", "hidden work")["turn"]
    lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["turn"] == t2, "the hidden chat's push")
    assert [p["turn"]["turn"] for p in lead.pushes.turns()] == [t2]  # none for the turn shown on screen

    # this phone's Stop (the page hidden, so only the Stop keeps the push away); another's Stop (the API's)
    t3 = send(lead.api, "c2", "hang on")["turn"]
    page.goto(lead.address + "/#/c/local/desk/c2")
    page.wait_for_selector("#turns-here")
    hide(page)
    wait_for(lambda: pane(lead.api, "c2")["state"] == "working", what="c2 working")
    page.get_by_role("button", name="Stop").click()
    idle_after(lead.api, "c2", t3 - 1)
    send(lead.api, "c3", "hang here")
    wait_for(lambda: pane(lead.api, "c3")["state"] == "working", what="c3 working")
    link = pair_link(run_collie(lead.paths, "pair", "--no-qr"))
    other = Phone(lead.browser, lead.address, link, Subscriber(lead.service.url("/ok/other")))
    try:  # another paired phone taps Stop in its chat
        other.page.goto(lead.address + "/#/c/local/desk/c3")
        other.page.get_by_role("button", name="Stop").click()
        stopped = lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c3", "Stopped in")
        assert (stopped["title"], stopped["body"]) == ("Stopped in Task 3", "Stop was tapped on another phone.")
        assert other.errors == []
    finally:
        other.close()
    t_fail = send(lead.api, "c4", "fail now")["turn"]
    failed = lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c4", "Failed in")
    assert (failed["title"], failed["body"]) == ("Failed in Task 4", "the turn failed: RuntimeError: the build broke")
    assert failed["turn"]["turn"] == t_fail
    assert not [p for p in lead.pushes.turns() if p["turn"]["conversation"] == "c2"]  # this phone's own Stop

    # the chat's menu: off for c5 only
    page.goto(lead.address + "/#/c/local/desk/c5")
    page.get_by_label("Notify me when a turn ends here").click()
    # drawn from the lead's answer (the box itself unticks at the tap, before the lead has heard of it)
    page.wait_for_selector("label[for='turns-here'][data-key='turns:false'] #turns-here:not(:checked)")
    assert phone.settings()["conversations"] == [{"machine": "local", "agent": "desk", "conversation": "c5", "on": False}]
    hide(page)
    t5 = send(lead.api, "c5", "quiet please")["turn"]
    idle_after(lead.api, "c5", t5 - 1)
    t6 = send(lead.api, "c6", "loud please")["turn"]
    lead.pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c6" and p["turn"]["turn"] == t6, "c6")
    assert not [p for p in lead.pushes.turns() if p["turn"]["conversation"] == "c5"]


def test_twelve_turns_at_once_fold_within_the_limits_and_an_ask_still_pushes(lead):
    """P1 with turn ends: twelve conversations end a turn at once; at most 10 turn-end pushes go in the minute
    (the agent's budget), the rest wait to fold into one `N turns ended on desk` push; an ask raised in the same
    minute still pushes (asks keep the whole budget). The fold's exact minute is tests/live/test_turn_ends.py's."""
    lead.phone.turn_on()
    turns = {f"c{i}": pane(lead.api, f"c{i}")["turn"] for i in range(12)}
    for conv in turns:
        send(lead.api, conv, f"job {conv}")  # at once: most wait their turn in the inbox (`queued`)
    for conv, t in turns.items():
        idle_after(lead.api, conv, t)
    wait_for(lambda: lead.live()["turn_pushed"] + lead.live()["turn_folded"] == 12, what="all twelve judged")
    assert lead.live()["turn_pushed"] == 10 and lead.live()["turn_folded"] == 2
    send(lead.api, "c0", "ask a1")
    ask = lead.pushes.wait(lambda p: p["kind"] == "ask", "the ask's push")
    assert ask["title"] == "Permission needed in Task 0"
    wait_for(lambda: len(lead.pushes.turns()) == 10, what="the ten turn pushes")
    assert {p["turn"]["conversation"] for p in lead.pushes.turns()} <= set(turns)


def test_a_members_turn_pushes_from_the_lead_and_not_while_its_chat_is_on_screen(browser):
    """Issue 37, P4: the lead decides for a member's agents as for its own — it sees the member's view change.
    A turn of `workshop`'s agent that ends pushes `Done in Task 0` and the first line of the reply, masked; with its
    chat open and visible on the phone the next turn pushes nothing, hidden it pushes; this phone's Stop, routed
    through the lead to the member, pushes nothing to it."""
    from tests.crewlab import Crew

    service = FakePushService()
    crew = Crew(short_dir("tp"))
    phone = agent = None
    try:
        crew.start_lead()
        m = crew.add_member("workshop")
        sock = m.run / "desk.sock"
        agent = subprocess.Popen([sys.executable, "-c", AGENT, str(sock)], cwd=REPO, env=m.env, stdout=subprocess.PIPE,
                                 text=True)
        assert "listening" in agent.stdout.readline()
        assert m.collie("durable", "attach", "desk", "--socket", str(sock)).returncode == 0
        m.serve()
        link = pair_link(crew.lead.collie("pair", "--no-qr"))
        sub = Subscriber(service.url("/ok/member"))
        phone = Phone(browser, crew.address, link, sub)
        pushes = Pushes(service, sub, "/ok/member")
        with crew.client() as api:
            wait_for(lambda: pane(api, "c0", "workshop").get("state") == "idle", what="the member's agent")
            phone.turn_on()
            t = send(api, "c0", f"deploy with key={SECRET}", "workshop")["turn"]
            got = pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["turn"] == t, "the member's turn push")
            assert (got["title"], got["body"]) == ("Done in Task 0", "All done: deploy with key=[secret]")
            assert got["url"] == "/#/c/workshop/desk/c0" and got["turn"]["machine"] == "workshop"

            phone.page.goto(crew.address + "/#/c/workshop/desk/c1")
            phone.page.wait_for_selector("#turns-here:checked")
            t1 = send(api, "c1", "on screen", "workshop")["turn"]
            idle_after(api, "c1", t1 - 1, "workshop")
            hide(phone.page)
            t2 = send(api, "c1", "off screen", "workshop")["turn"]
            pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c1", "the hidden chat's push")
            assert [p["turn"]["turn"] for p in pushes.turns() if p["turn"]["conversation"] == "c1"] == [t2]

            t3 = send(api, "c2", "hang on", "workshop")["turn"]
            phone.page.goto(crew.address + "/#/c/workshop/desk/c2")
            phone.page.wait_for_selector("#turns-here")
            hide(phone.page)
            wait_for(lambda: pane(api, "c2", "workshop")["state"] == "working", what="c2 working")
            phone.page.get_by_role("button", name="Stop").click()
            idle_after(api, "c2", t3 - 1, "workshop")
            t4 = send(api, "c3", "after the stop", "workshop")["turn"]
            pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["conversation"] == "c3" and p["turn"]["turn"] == t4, "c3")
            assert not [p for p in pushes.turns() if p["turn"]["conversation"] == "c2"]
        assert phone.errors == []
    finally:
        if phone is not None:
            phone.close()
        if agent is not None:
            agent.kill()
            agent.wait()
            agent.stdout.close()
        crew.stop()
        service.close()
        cleanup(crew.base)


def test_an_acp_agents_turn_pushes_when_its_prompt_turn_returns(paths, bridge, browser):
    """Issue 37 with a real ACP agent (Codex through `collie acp run`, its model tests/modelstandin.py): the prompt
    turn returns and the phone gets `Done in <pane>` with the first line of the model's reply; a prompt the model
    answers with an error pushes `Failed in <pane>` and the agent's reason."""
    from tests import agents
    from tests.modelstandin import Fail, StandIn, Text
    from tests.system.test_acp_real import SLOW, RealAgent

    if not agents.ready():
        pytest.fail(f"the real ACP agents are not installed in {agents.ROOT}: run `python -m tests.browser`")
    service = FakePushService()
    run = short_dir()
    phone = None
    with StandIn() as standin:
        agent = RealAgent("codex", paths, run, standin.url)
        agent.start()
        try:
            assert run_collie(paths, "durable", "attach", "codex", "--socket", agent.sock).returncode == 0
            address = bridge(env=collie_env(paths, COLLIE_PUSH_LOOPBACK="1")).wait_ready()["address"]
            token = (paths.state_dir / "api-token").read_text().strip()
            link = pair_link(run_collie(paths, "pair", "--no-qr"))
            sub = Subscriber(service.url("/ok/acp"))
            phone = Phone(browser, address, link, sub)
            pushes = Pushes(service, sub, "/ok/acp")
            with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30) as api:
                title = wait_for(lambda: pane(api, "session-1", agent="codex").get("title"), timeout=SLOW,
                                 what="Session 1")
                phone.turn_on()
                standin.script("check the build", [Text("The build is green.\nAll 12 checks passed.")])
                t = send(api, "session-1", "check the build", agent="codex")["turn"]
                got = pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["turn"] == t, "the prompt turn's push")
                assert (got["title"], got["body"]) == (f"Done in {title}", "The build is green.")
                ends = [i for i in api.get("/api/agents/local/codex/conversations/session-1/items").json()["items"]
                        if i["kind"] == "turn_end" and i.get("turn") == t]
                assert ends  # it came once the prompt turn had returned
                standin.script("break it", [Fail(400, "the model refused the request")])
                t2 = send(api, "session-1", "break it", agent="codex")["turn"]
                failed = pushes.wait(lambda p: p["kind"] == "turn" and p["turn"]["turn"] == t2, "the failed turn's push")
                assert failed["title"] == f"Failed in {title}"
                assert failed["body"].startswith("The agent answered the prompt with an error: ")
                assert "the model refused the request" in failed["body"] and len(failed["body"]) <= 120
            assert phone.errors == []
        finally:
            if phone is not None:
                phone.close()
            agent.stop()
            agent.kill_left()
            service.close()
            cleanup(run)
