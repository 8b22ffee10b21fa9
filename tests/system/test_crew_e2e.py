"""The crew as people run it: a real lead and real members over loopback WebSockets (issue 5)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from tests.crewlab import Crew, user_request_ids, wait_for
from tests.livelab import short_dir
from tests.procs import LIMIT

pytestmark = pytest.mark.slow


@pytest.fixture
def crew():
    c = Crew(short_dir("cc"))
    c.lead.agent("desk", "deployer")
    yield c
    c.stop()


def rid() -> str:
    return str(uuid.uuid4())


def pane(c, machine, agent, conv):
    return c.get(f"/api/agents/{machine}/{agent}/conversations/{conv}").json()


def test_join_dashboard_and_routed_writes(crew):
    """V4, D1, D5, B6: a member's agents appear in its own section; writes reach the owning machine."""
    crew.start_lead()
    m = crew.add_member("workshop")
    m.agent("lab", "streamer")
    m.serve()
    wait_for(lambda: crew.online("workshop"), what="member online")
    with crew.client() as c:
        def sections():
            got = c.get("/api/dashboard").json()["sections"]
            return got if len(got) == 2 and got[1]["agents"] and got[1]["agents"][0]["status"] == "ready" else None
        local, member = wait_for(sections, what="two sections")
        assert local["machine"] == "local" and local["agents"][0]["line2"] == "deployer, local"
        assert member["machine"] == "workshop" and member["agents"][0]["line2"] == "streamer, local, workshop"
        turn = pane(c, "workshop", "lab", "chat")["turn"]
        r = rid()
        got = c.post("/api/send", json={"request_id": r, "machine": "workshop", "agent": "lab", "conversation": "chat",
                                        "text": "hello from the phone", "turn": turn}).json()
        assert got["outcome"] == "sent", got
        assert c.post("/api/send", json={"request_id": r, "machine": "workshop", "agent": "lab", "conversation": "chat",
                                         "text": "hello from the phone", "turn": turn}).json()["replay"] is True
        wait_for(lambda: user_request_ids(c, "workshop", "lab", "chat") == [r], what="the send applied once")
        assert c.post("/api/agents/workshop/lab/viewing", json={"on": True}).json()["ok"]
        # L3, L4 through the crew: close on the member, read the closed list and its items from its agent
        closed = c.post("/api/agents/workshop/lab/conversations/chat/close", json={"request_id": rid()}).json()
        assert closed["outcome"] == "done"
        listing = wait_for(lambda: (lambda j: j if j.get("closed") else None)(
            c.get("/api/agents/workshop/lab/conversations?closed=1").json()), what="closed list")
        assert [row["id"] for row in listing["closed"]] == ["chat"] and listing["footer"] is None
        items = wait_for(lambda: (lambda j: j if j.get("open") is False else None)(
            c.get("/api/agents/workshop/lab/conversations/chat/items").json()), what="closed items")
        assert [i.get("request_id") for i in items["items"] if i["kind"] == "user"] == [r]
    status = m.collie("status").stdout
    assert "role: member" in status and "crew: member workshop of ws://" in status and ": connected" in status
    listing = crew.lead.collie("crew", "list").stdout
    assert "workshop" in listing and "online" in listing
    assert "ok   crew: member workshop, connected" in m.collie("doctor").stdout


def test_offline_member_session_writes_fail_fast_and_sends_wait_in_the_inbox(crew):
    """I1, I5, I7, crew.md §4: session-bound writes fail fast; a send waits and runs once on return."""
    crew.start_lead()
    m = crew.add_member("laptop")
    m.agent("lab", "streamer")
    m.serve()
    wait_for(lambda: crew.online("laptop"), what="member online")
    with crew.client() as c:
        wait_for(lambda: pane(c, "laptop", "lab", "chat").get("turn") is not None, what="pane")
        turn = pane(c, "laptop", "lab", "chat")["turn"]
        m.kill()  # the lid closes: kill -9
        wait_for(lambda: not crew.online("laptop"), what="member offline")
        row = c.get("/api/dashboard").json()["sections"][1]["agents"][0]
        assert row["status"] == "unreachable" and row["reason"] == "machine-offline"
        assert row["detail"].startswith("machine offline since ")
        stop = c.post("/api/agents/laptop/lab/conversations/chat/stop", json={"request_id": rid(), "turn": turn}).json()
        assert stop["outcome"] == "refused" and stop["reason"] == "machine_offline"
        r = rid()
        queued = c.post("/api/send", json={"request_id": r, "machine": "laptop", "agent": "lab", "conversation": "chat",
                                           "text": "run this in the morning", "turn": turn}).json()
        assert queued["outcome"] == "queued" and queued["text"].startswith("queued, machine offline since ")
        inbox = c.get("/api/agents/laptop/lab/inbox").json()["items"]
        assert [i["id"] for i in inbox] == [r] and inbox[0]["state_text"] == queued["text"]
        msg = c.post(f"/api/inbox/{r}/message", json={"text": "and add tests"}).json()
        assert msg["text"] == "run this in the morning\n\nand add tests"
        m.serve()  # morning
        wait_for(lambda: user_request_ids(c, "laptop", "lab", "chat") == [r], timeout=30, what="ran once")
        wait_for(lambda: all(i["state"] == "done" for i in c.get("/api/agents/laptop/lab/inbox").json()["items"]) or
                 c.get("/api/agents/laptop/lab/inbox").json()["items"] == [], what="done")


def test_approval_required_sender_order_cancel_and_ttl(crew):
    """I3, I4, I6, I9, I10: a token that needs approval waits; approval order decides; cancel; TTL."""
    crew.lead.paths.config_dir.mkdir(parents=True, exist_ok=True)
    (crew.lead.paths.config_dir / ".env").write_text("COLLIE_OWNER=Ana\nCOLLIE_INBOX_TTL=3\n")
    crew.start_lead()
    m = crew.add_member("lab")
    m.agent("bot", "streamer")
    m.serve()
    wait_for(lambda: crew.online("lab"), what="member online")
    assert crew.lead.collie("tokens", "create", "slack", "--approval", "required").returncode == 0
    assert crew.lead.collie("tokens", "create", "ci", "--approval", "standing").returncode == 0
    slack = (crew.lead.paths.state_dir / "tokens" / "slack.token").read_text().strip()
    ci = (crew.lead.paths.state_dir / "tokens" / "ci.token").read_text().strip()
    m.kill()
    wait_for(lambda: not crew.online("lab"), what="offline")
    import httpx

    def sender(token):
        return httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {token}"}, timeout=20)

    with sender(slack) as s, sender(ci) as ci_client, crew.client() as owner:
        assert s.get("/api/dashboard").status_code == 403  # a sender token opens the inbox only (issue 9.2)
        first, second, expiring, cancelled = rid(), rid(), rid(), rid()
        got = s.post("/api/agents/lab/bot/inbox", json={"request_id": first, "conversation": "chat", "text": "one"}).json()
        assert got["outcome"] == "queued" and got["text"] == "waiting for approval from Ana"
        item = {first: got["item"]}  # a sender's request ids are its own (issue 9.4): items have their own ids
        for sender, r, text in ((ci_client, second, "two"), (s, expiring, "stale"), (ci_client, cancelled, "no")):
            item[r] = sender.post("/api/agents/lab/bot/inbox", json={"request_id": r, "conversation": "chat",
                                                                     "text": text}).json()["item"]
        assert [i["request_id"] for i in s.get("/api/agents/lab/bot/inbox").json()["items"]] == [first, expiring]
        assert s.post(f"/api/inbox/{first}/approve").status_code == 403  # only the owner approves
        assert owner.post(f"/api/inbox/{item[cancelled]}/cancel").json()["state"] == "cancelled"
        time.sleep(1.0)
        approved = owner.post(f"/api/inbox/{item[first]}/approve").json()
        assert approved["state"] == "approved"
        wait_for(lambda: s.get(f"/api/inbox/{expiring}").json()["state"] == "expired", timeout=10, what="expiry")
        m.serve()
        wait_for(lambda: len(user_request_ids(owner, "lab", "bot", "chat")) >= 2, timeout=40, what="both ran")
        time.sleep(1.0)
        ran = user_request_ids(owner, "lab", "bot", "chat")
        assert ran == [item[second], item[first]]  # approval order: "two" was approved on arrival, "one" later
        assert item[expiring] not in ran and item[cancelled] not in ran  # no stale run, no cancelled run


def test_lead_restart_and_link_drop_resume_without_duplicates(crew):
    """Reconnect with backoff, fresh snapshot; a lead restarted mid-queue still runs each item once."""
    crew.start_lead()
    m = crew.add_member("box")
    m.agent("bot", "streamer")
    m.serve()
    wait_for(lambda: crew.online("box"), what="member online")
    with crew.client() as c:  # the lead knows the member's agents once its snapshot arrived
        wait_for(lambda: c.get("/api/agents/box/bot/conversations/chat").status_code == 200, what="snapshot")
    # the laptop goes: its link ends and it is offline at once (a member silent for 30 s goes offline the
    # same way; that rule runs on the virtual clock in tests/live/test_member_silence.py, not 30 real seconds)
    m.kill()
    wait_for(lambda: not crew.online("box"), timeout=LIMIT, what="member offline")
    with crew.client() as c:
        ids = [rid() for _ in range(3)]
        for i, r in enumerate(ids):
            got = c.post("/api/send", json={"request_id": r, "machine": "box", "agent": "bot", "conversation": "chat",
                                            "text": f"job {i}", "turn": 0}).json()
            assert got.get("outcome") == "queued", got
    crew.lead.kill()  # the lead restarts while the work waits
    port = crew.address.rsplit(":", 1)[1]
    crew.lead.serve("--port", port)
    with crew.client() as c:  # the sleeping member's agents are remembered, offline, and take work
        row = c.get("/api/dashboard").json()["sections"][-1]["agents"][0]
        assert (row["name"], row["status"], row["reason"]) == ("bot", "unreachable", "machine-offline")
        late = rid()
        got = c.post("/api/send", json={"request_id": late, "machine": "box", "agent": "bot", "conversation": "chat",
                                        "text": "after the restart", "turn": 0}).json()
        assert got.get("outcome") == "queued", got
        assert got["text"].startswith("queued, machine offline since ")
        ids.append(late)
    m.serve()  # the laptop is back
    wait_for(lambda: crew.online("box"), timeout=LIMIT, what="member back")
    with crew.client() as c:
        wait_for(lambda: len(user_request_ids(c, "box", "bot", "chat")) == 4, timeout=60, what="all ran")
        time.sleep(1.5)
        assert user_request_ids(c, "box", "bot", "chat") == ids


def test_removed_member_is_refused(crew):
    """crew.md §2: a removed (or wrong) member token gets a close with the reason `unauthorized`."""
    crew.start_lead()
    m = crew.add_member("old")
    m.serve()
    wait_for(lambda: crew.online("old"), what="online")
    assert crew.lead.collie("crew", "remove", "old").returncode == 0
    wait_for(lambda: "the lead refused this member (unauthorized)" in m.log(), timeout=40, what="refusal logged")
    assert "not connected" in m.collie("status").stdout
