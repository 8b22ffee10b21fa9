"""Turn-end push settings (issue 37; docs/push.md, docs/phone-api.md): `GET`/`POST /api/push/turns` answer every bad
body with a reason and turn nothing on without a push subscription; the settings are kept on disk, bounded; a
live channel's `visible` is a boolean."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import httpx
import pytest

from collie.lead.push.pusher import PushLimiter, PushStore
from collie.lead.push.turns import ALL, CONVERSATIONS_MAX, TurnPusher
from tests.conftest import collie_env
from tests.pushlab import FakePushService, Subscriber


@pytest.fixture
def api(paths, bridge):
    address = bridge(env=collie_env(paths, COLLIE_PUSH_LOOPBACK="1")).wait_ready()["address"]
    token = (paths.state_dir / "api-token").read_text().strip()
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}", "x-collie-csrf": "1"},
                      timeout=10) as c:
        yield c


@pytest.mark.parametrize("body,why", [
    ({"all": "yes"}, '"all" must be true or false, alone in the body'),
    ({"all": True, "agent": "desk"}, '"all" must be true or false, alone in the body'),
    ({"agent": "desk", "conversation": "c1"}, '"on" must be true or false'),
    ({"agent": "desk", "conversation": "c1", "on": 1}, '"on" must be true or false'),
    ({"agent": "desk", "conversation": "c1", "on": True, "colour": "red"},
     "unknown field 'colour': give machine, agent, conversation and on"),
    ({"agent": "de/sk", "conversation": "c1", "on": True},
     "agent must be 1-128 printable ASCII characters, without '/', and not '.' or '..'"),
    ({"agent": "desk", "on": True},
     "conversation must be 1-128 printable ASCII characters, without '/', and not '.' or '..'"),
])
def test_a_bad_setting_is_refused_with_its_reason(api, body, why):
    """Every malformed body is a 400 that says what is wrong, and changes nothing."""
    got = api.post("/api/push/turns", json=body)
    assert (got.status_code, got.json()) == (400, {"error": "bad_request", "message": why})
    assert api.get("/api/push/turns").json() == {"subscribed": False, "all": False, "conversations": []}


def test_turning_it_on_needs_a_push_subscription_and_off_never_does(api):
    """Without a push subscription nothing is turned on (409, what to do); turning off always works; with one,
    every conversation and single conversations are kept as given (a conversation's own wins)."""
    got = api.post("/api/push/turns", json={"all": True})
    assert got.status_code == 409 and got.json()["error"] == "no_subscription"
    assert "turn on notifications first" in got.json()["message"]
    assert api.post("/api/push/turns", json={"agent": "desk", "conversation": "c1", "on": False}).json()["conversations"] == [
        {"machine": "local", "agent": "desk", "conversation": "c1", "on": False}]
    service = FakePushService()
    try:
        assert api.post("/api/push/subscribe", json=Subscriber(service.url("/ok/x")).json()).json() == {"ok": True}
        got = api.post("/api/push/turns", json={"all": True}).json()
        assert (got["subscribed"], got["all"]) == (True, True)
        got = api.post("/api/push/turns", json={"machine": "workshop", "agent": "desk", "conversation": "c2", "on": True})
        assert got.json()["conversations"][-1] == {"machine": "workshop", "agent": "desk", "conversation": "c2", "on": True}
    finally:
        service.close()


def test_the_live_channels_visible_is_a_boolean(api):
    """`POST /api/events/<channel>/view` takes `visible` (is the page on screen?) as true or false only."""
    with api.stream("GET", "/api/events") as stream:
        lines = stream.iter_lines()
        channel = next(json.loads(line[5:])["channel"] for line in lines if line.startswith("data:"))
        bad = api.post(f"/api/events/{channel}/view", json={"visible": "no"})
        assert (bad.status_code, bad.json()["message"]) == (400, "visible must be true or false (is the page on screen?)")
        assert api.post(f"/api/events/{channel}/view", json={"visible": False}).json()["ok"] is True


def test_settings_survive_a_restart_and_a_phone_keeps_at_most_its_bound(tmp_path):
    """The settings are on disk: a new lead reads them back. One phone's conversations with their own setting stay
    within CONVERSATIONS_MAX (the oldest goes); its every-conversation setting always stays."""
    store = PushStore(tmp_path)
    pusher = NS(bridge=NS(readers={}), hub=None, store=store, limiter=PushLimiter(), redact_on=True)
    t = TurnPusher(pusher, None)
    t.set("p1", ALL, True)
    for i in range(CONVERSATIONS_MAX + 5):
        t.set("p1", ("local", "desk", f"c{i}"), i % 2 == 0)
    again = TurnPusher(pusher, None)
    mine = again.prefs["p1"]
    assert mine[ALL] is True and len(mine) == CONVERSATIONS_MAX + 1
    assert ("local", "desk", "c4") not in mine and mine[("local", "desk", f"c{CONVERSATIONS_MAX + 4}")] is True
    assert again.wants("p1", "local", "desk", "c3") is True  # its own setting (off) went: every conversation's
    assert again.wants("p1", "local", "desk", "c5") is False
    again.drop_device("p1")
    assert TurnPusher(pusher, None).prefs == {}


def conversation(state: str, turn: int, rev: int) -> NS:
    return NS(id="c1", title="Fix the build", state=state, turn=turn, items_rev=rev)


class Inline:
    """A nursery stand-in: what is started is run when `run()` is awaited, in order."""

    def __init__(self) -> None:
        self.todo: list = []

    def start_soon(self, fn, *args) -> None:
        self.todo.append((fn, args))

    async def run(self) -> None:
        while self.todo:
            fn, args = self.todo.pop(0)
            await fn(*args)


async def test_a_turn_end_is_pushed_once_even_when_a_restarted_lead_sees_it_end_again(tmp_path):
    """P3 for turn ends: the lead pushes a turn's end, restarts, and is shown that same turn running and ending
    again (a member's stale view replaced by a fresh one): nothing more is sent. A later turn pushes."""
    import trio

    from collie.lead.push.pusher import Subscription

    sent: list[dict] = []
    items = {1: {"seq": 1, "turn": 4, "kind": "reply", "rev": 9, "text": "Fixed.\nmore"},
             2: {"seq": 2, "turn": 4, "kind": "turn_end", "rev": 10, "stopped": False}}
    reader = NS(name="desk", conversations={}, logs={"c1": NS(since=10, items=items)})

    async def deliver(sub, body, urgency, topic):
        sent.append(json.loads(body))

    store = PushStore(tmp_path)
    store.add(Subscription("https://push.example.com/x", "k", "a", "p1"), 0.0)

    async def life(views) -> None:
        """One lead's life: it is shown `views` of c1 in turn."""
        tasks = Inline()
        pusher = NS(bridge=NS(readers={"desk": reader}), hub=None, store=store, limiter=PushLimiter(), redact_on=True,
                    deliver=deliver, limiter_disk=trio.CapacityLimiter(1))
        t = TurnPusher(pusher, None)
        t.set("p1", ALL, True)
        for view in views:
            reader.conversations = {"c1": view}
            t.touch("local", "desk")
            await t._pass(tasks)
            await tasks.run()

    await life([conversation("working", 4, 8), conversation("idle", 4, 10)])
    assert [(p["title"], p["body"]) for p in sent] == [("Done in Fix the build", "Fixed.")]
    await life([conversation("working", 4, 8), conversation("idle", 4, 10)])  # restarted: a stale view, then fresh
    assert len(sent) == 1  # that turn's end was judged already
    items[3] = {"seq": 3, "turn": 5, "kind": "reply", "rev": 11, "text": "Again."}
    items[4] = {"seq": 4, "turn": 5, "kind": "turn_end", "rev": 12}
    reader.logs["c1"].since = 12
    await life([conversation("idle", 4, 10), conversation("idle", 5, 12)])
    assert [p["body"] for p in sent] == ["Fixed.", "Again."]
