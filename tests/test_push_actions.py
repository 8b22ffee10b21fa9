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

from crew.asks import sanitize_ask
from lead.push import PAYLOAD_MAX, answer_offer, ask_fields, ask_payload, encode
from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.live import cleanup, short_dir
from tests.pushlab import FakePushService, Subscriber

PERMISSION = [{"id": "yes", "label": "Ship it", "role": "allow"},
              {"id": "always", "label": "Always", "role": "always_allow"},
              {"id": "no", "label": "Not now", "role": "deny"}]


def payload_of(raw: dict, *, remote: bool = False, conversation: str = "deploy") -> dict:
    view = sanitize_ask(raw, remote=remote)
    return ask_payload(machine="local", agent="desk", conversation=conversation, pane="Deploy", ask=ask_fields(view),
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
    what gives way (the notification then opens the card), the push itself still goes."""
    small = payload_of(ask())
    assert len(encode(small)) <= PAYLOAD_MAX and "digest" in small["ask"]
    long_id = "é" * 120  # 6 bytes each once JSON-escaped, several times over (tag, url, ask)
    big = payload_of(ask(id="a" * 128, options=[{"id": "y" * 128, "role": "allow"}, {"id": "n" * 128, "role": "deny"}]),
                     conversation=long_id)
    assert "digest" not in big["ask"] and big["title"] == "Permission needed in Deploy"
    assert answer_offer(ask_fields(sanitize_ask(ask()))) is not None


# --- in Chromium: a real lead, a real agent, a push delivered through the browser's own push event --------
AGENT = """
import os, sys, trio
from crew.sdk import open_collie
OPTIONS = %r
async def main():
    async with open_collie(socket=sys.argv[1], caps=["asks"], runtime="locker") as c:
        deploy, rotate = c.conversation("deploy", title="Deploy"), c.conversation("rotate", title="Rotate")
        c.ready()
        print("listening", flush=True)
        async def one(pane, tool):
            got = await pane.ask(kind="permission", tool_call_id=tool + "-1", title=tool + "?", body="3 services",
                                 tool=tool, options=OPTIONS, push={"title": tool, "line": "staging"})
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
            n.start_soon(one, deploy, "deploy")
            n.start_soon(one, rotate, "rotate")
            n.start_soon(change_when_told)
            await trio.sleep_forever()
trio.run(main)
""" % (PERMISSION,)

# run in the worker: record what it shows (headless Chromium's getNotifications() may miss a notification just
# shown, tests/test_phone_app.py), and tap a notification's action — a script cannot click one, so the test
# dispatches the browser's event with the notification the worker showed, and waits for what it waits for
RECORD = """(() => {
  self.SHOWN = [];
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


@pytest.mark.slow
def test_allow_and_deny_from_the_notification_reach_the_agent_once_and_only_for_the_ask_shown(paths, bridge, browser):
    """B5, O, P3 in Chromium: two pushes (decrypted: each carries its ask's digest and option ids) are
    delivered to the service worker through the browser's push event; each shows `Allow` and `Deny`. Allow on
    the first reaches the agent once and the notification says `Allowed`; the same tap again is the same
    request (its request id kept in IndexedDB): a replay, still `Allowed`, and the agent got one answer. The
    second ask changes before its Deny: nothing reaches the agent and the notification says
    `This ask changed. Read it again and tap an answer.`, its tap opening the card."""
    service = FakePushService()
    run = short_dir()
    go, flag = run / "ask-now", run / "change-now"
    sock = run / "lock" / "a.sock"
    sock.parent.mkdir(mode=0o700)
    agent = subprocess.Popen([sys.executable, "-c", AGENT, str(sock), str(go), str(flag)], cwd=REPO, stdout=subprocess.PIPE,
                             text=True)
    lines: list[str] = []
    try:
        assert "listening" in agent.stdout.readline()
        threading.Thread(target=lambda: lines.extend(iter(agent.stdout.readline, "")), daemon=True).start()
        assert run_collie(paths, "durable", "attach", "desk", "--socket", str(sock)).returncode == 0
        b = bridge(env=collie_env(paths, COLLIE_PUSH_LOOPBACK="1"))  # the fake push service listens on loopback
        address = b.wait_ready()["address"]
        link = re.search(r"(https?://\S+/pair#\S+)", run_collie(paths, "pair", "--no-qr").stdout).group(1)
        sub = Subscriber(service.url("/ok/chromium"))
        ctx = browser.new_context(viewport={"width": 360, "height": 780})
        ctx.grant_permissions(["notifications"], origin=address)
        page = ctx.new_page()
        errors: list = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(link)  # pairing: the cookie, and the device key in this origin's IndexedDB
        page.wait_for_selector("main section")
        token = (paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=10) as c:
            assert c.post("/api/push/subscribe", json=sub.json()).json() == {"ok": True}
        c2 = httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=10)
        agent_desk = lambda conv: c2.get(f"/api/agents/local/desk/conversations/{conv}").json()  # noqa: E731
        go.write_text("now")
        pushes = {}
        for conv in ("deploy", "rotate"):
            wait_for(lambda conv=conv: agent_desk(conv).get("ask"), what=f"the {conv} ask")
        for got in [service.wait(lambda r, conv=conv: r["path"] == "/ok/chromium"
                                 and sub.decrypt(r["body"])["ask"]["conversation"] == conv)
                    for conv in ("deploy", "rotate")]:
            payload = sub.decrypt(got["body"])
            pushes[payload["ask"]["conversation"]] = payload
        for conv, payload in pushes.items():
            now = agent_desk(conv)["ask"]
            assert payload["ask"] == {"machine": "local", "agent": "desk", "conversation": conv, "id": now["id"],
                                      "digest": now["digest"], "allow": "yes", "deny": "no"}
        cdp = ctx.new_cdp_session(page)
        regs: dict = {}
        cdp.on("ServiceWorker.workerRegistrationUpdated",
               lambda ev: regs.update({r["scopeURL"]: r["registrationId"] for r in ev["registrations"]}))
        cdp.send("ServiceWorker.enable")
        wait_for(lambda: (page.wait_for_timeout(50), regs)[1], what="the service worker's registration")
        [worker] = wait_for(lambda: (page.wait_for_timeout(50), ctx.service_workers)[1], what="the service worker")
        worker.evaluate(RECORD)
        shown = lambda: worker.evaluate("self.SHOWN")  # noqa: E731
        for i, conv in enumerate(("deploy", "rotate")):
            cdp.send("ServiceWorker.deliverPushMessage", {"origin": address.rstrip("/"),
                                                          "registrationId": list(regs.values())[0],
                                                          "data": json.dumps(pushes[conv])})
            wait_for(lambda i=i: len(shown()) > i, what=f"the {conv} notification")
        deploy, rotate = shown()
        for n, conv in ((deploy, "deploy"), (rotate, "rotate")):
            assert n["title"] == f"Permission needed in {conv.title()}"
            assert n["body"] == f"{conv} — staging"
            assert [(a["action"], a["title"]) for a in n["actions"]] == [("allow", "Allow"), ("deny", "Deny")]
            assert n["tag"] == pushes[conv]["tag"] and n["data"]["url"] == f"/#/c/local/desk/{conv}"

        # Allow: the agent gets it once, bound to the digest shown; the notification says `Allowed`
        worker.evaluate(TAP, [deploy, "allow"])
        wait_for(lambda: any(line.startswith("answer deploy") for line in lines), what="the agent's answer")
        after = shown()[-1]
        assert (after["title"], after["tag"], after.get("actions") or []) == ("Allowed", deploy["tag"], [])
        assert after["body"] == "deploy — staging" and after["data"]["url"] == "/#/c/local/desk/deploy"
        # the same tap again (a retry after a lost reply): the same request id, a replay — the agent got one
        worker.evaluate(TAP, [deploy, "allow"])
        assert shown()[-1]["title"] == "Allowed"
        assert c2.get("/api/agents/local/desk/conversations/deploy").json().get("asks") == []  # the ask is closed
        assert [line for line in lines if line.startswith("answer")] == ["answer deploy accepted yes\n"]

        # the rotate ask changes under its notification: Deny is refused, the notification says so
        flag.write_text("now")
        wait_for(lambda: "changed\n" in lines, what="the agent to change its ask")
        wait_for(lambda: agent_desk("rotate")["ask"]["digest"] != pushes["rotate"]["ask"]["digest"],
                 what="the lead to read the changed ask")
        worker.evaluate(TAP, [rotate, "deny"])
        after = shown()[-1]
        assert after["title"] == "This ask changed. Read it again and tap an answer."
        assert (after["tag"], after.get("actions") or [], after["data"]["url"]) == (rotate["tag"], [],
                                                                                     "/#/c/local/desk/rotate")
        assert agent_desk("rotate")["ask"]["id"] == pushes["rotate"]["ask"]["id"]  # still open: nothing reached it
        assert [line for line in lines if line.startswith("answer")] == ["answer deploy accepted yes\n"]
        assert errors == []
        c2.close()
        ctx.close()
    finally:
        agent.kill()
        agent.wait()
        agent.stdout.close()
        service.close()
        cleanup(run)
