"""Turn-end push settings (issue 37; docs/push.md, docs/phone-api.md): `GET`/`POST /api/push/turns` answer every bad
body with a reason and turn nothing on without a push subscription; the settings are kept on disk, bounded; a
live channel's `visible` is a boolean."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import httpx
import pytest

from lead.push import PushLimiter, PushStore
from lead.turn_push import ALL, CONVERSATIONS_MAX, TurnPusher
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
