"""The lead's API as a client uses it: real `collie serve`, real fixture agents, HTTP with the credential."""

from __future__ import annotations

import stat
import time
import uuid

import httpx
import pytest

from collie.crew.receipts import MOVED_ON, NO_STARTERS
from tests.conftest import collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.system.test_durable_e2e import Agents, live, wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def lab(paths, bridge):
    run = short_dir()
    agents = Agents()
    for kind in ("deployer", "streamer", "starters", "progress", "nohistory", "nightly"):
        agents.start(kind, "--socket", str(run / kind / "a.sock"))
        assert run_collie(paths, "durable", "attach", kind, "--socket", str(run / kind / "a.sock")).returncode == 0
    b = bridge(env=collie_env(paths))
    address = b.wait_ready()["address"]
    wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
    token_file = paths.state_dir / "api-token"
    token = token_file.read_text().strip()
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=20) as c:
        yield c, address, token_file, paths
    agents.stop()
    cleanup(run)


def rid() -> str:
    return str(uuid.uuid4())


ROUTES = [("GET", "/api/dashboard"), ("GET", "/api/agents/local/deployer/conversations"),
          ("GET", "/api/agents/local/deployer/conversations/deploy"),
          ("GET", "/api/agents/local/deployer/conversations/deploy/items"),
          ("POST", "/api/send"), ("POST", "/api/ask/x"), ("POST", "/api/agents/local/deployer/conversations/deploy/stop"),
          ("POST", "/api/agents/local/deployer/conversations/deploy/steer"),
          ("POST", "/api/agents/local/deployer/conversations/deploy/actions/a"),
          ("POST", "/api/agents/local/deployer/conversations/deploy/rename"),
          ("POST", "/api/agents/local/deployer/conversations/deploy/close"),
          ("POST", "/api/agents/local/deployer/conversations/deploy/reopen"),
          ("GET", "/api/agents/local/deployer/starters"), ("POST", "/api/agents/local/deployer/starters/x"),
          ("POST", "/api/agents/local/deployer/viewing")]


def test_no_api_route_answers_without_the_credential(lab):
    """Issue 4 §7: a local process without the credential cannot read or answer anything."""
    c, address, token_file, paths = lab
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600 and len(token_file.read_text().strip()) == 64
    with httpx.Client(base_url=address, timeout=10) as anon:
        for method, path in ROUTES:
            for headers in ({}, {"authorization": "Bearer " + "0" * 64}, {"authorization": "Basic x"}):
                r = anon.request(method, path, json={}, headers=headers)
                assert r.status_code == 401 and r.json()["error"] == "unauthorized", (method, path)
        assert anon.get("/healthz").json()["ok"] is True
    assert token_file.read_text().strip() not in paths.log.read_text()


def test_dashboard_list_and_pane_state(lab):
    """D1, L1, B1, Q2: the section, the rows, and a pane with its oldest ask and digest."""
    c, *_ = lab
    section = c.get("/api/dashboard").json()["sections"][0]
    rows = {r["name"]: r for r in section["agents"]}
    assert rows["deployer"]["line2"] == "deployer, local" and rows["deployer"]["badge"] == "Experimental"
    assert rows["deployer"]["waiting"] == 1 and rows["deployer"]["open"] == 1 and section["waiting"] is True
    assert rows["streamer"]["waiting"] is None  # hidden when zero
    listing = c.get("/api/agents/local/deployer/conversations").json()
    assert listing["open"][0]["line"] == "Deploy to staging?" and listing["open"][0]["waiting_asks"] == 1
    pane = c.get("/api/agents/local/deployer/conversations/deploy").json()
    assert pane["needs_answer"] == "Needs your answer · deployer" and pane["input"] == ""
    ask = pane["ask"]
    assert ask["title"] == "Deploy to staging?" and len(ask["digest"]) == 64 and ask["modal"] == "unreadable"
    assert ask["always_allow"] is True


def test_answer_two_step_always_allow_then_send(lab):
    """B5, B8, O: always-allow needs `confirmed`; the answer is accepted once; a stale digest changes nothing."""
    c, *_ = lab
    ask = c.get("/api/agents/local/deployer/conversations/deploy").json()["ask"]
    stale = c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "deployer", "digest": "0" * 64,
                                                   "answer": {"option_ids": ["yes"]}}).json()
    assert stale["outcome"] == "changed" and stale["text"] == "This ask changed. Read it again and tap an answer."
    assert stale["current_ask"]["id"] == ask["id"]
    first_tap = c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "deployer", "digest": ask["digest"],
                                                       "answer": {"option_ids": ["always"]}}).json()
    assert first_tap["outcome"] == "refused" and first_tap["reason"] == "confirm"
    send_blocked = c.post("/api/send", json={"request_id": rid(), "agent": "deployer", "conversation": "deploy",
                                             "text": "hi", "turn": 0}).json()
    assert send_blocked["reason"] == "ask_open" and send_blocked["text"] == "An ask is waiting: answer it first"
    ok = c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "deployer", "digest": ask["digest"],
                                               "answer": {"option_ids": ["always"]}, "confirmed": True}).json()
    assert ok["outcome"] == "accepted" and ok["channel"] == "program" and ok["digest"] == ask["digest"]
    wait_for(lambda: any(i.get("text") == "Deployed to staging." for i in
                         c.get("/api/agents/local/deployer/conversations/deploy/items").json()["items"]))
    pane = wait_for(lambda: (lambda p: p if p["ask"] is None else None)(
        c.get("/api/agents/local/deployer/conversations/deploy").json()))
    sent = c.post("/api/send", json={"request_id": rid(), "agent": "deployer", "conversation": "deploy",
                                     "text": "again please", "turn": pane["turn"]}).json()
    assert sent["outcome"] == "sent" and sent["turn"] == pane["turn"] + 1


def test_send_streams_and_the_line_is_replaced(lab):
    """B2, B3, C3: sent, then effective once the user item names the request; the reply grows then finishes."""
    c, *_ = lab
    pane = c.get("/api/agents/local/streamer/conversations/chat").json()
    r = rid()
    got = c.post("/api/send", json={"request_id": r, "agent": "streamer", "conversation": "chat",
                                    "text": "find the bug", "turn": pane["turn"]}).json()
    assert got["outcome"] == "sent"
    again = c.post("/api/send", json={"request_id": r, "agent": "streamer", "conversation": "chat",
                                      "text": "find the bug", "turn": pane["turn"]}).json()
    assert again["outcome"] == "sent" and again["replay"] is True

    def finished():
        items = c.get("/api/agents/local/streamer/conversations/chat/items").json()["items"]
        replies = [i for i in items if i["kind"] == "reply"]
        return items if replies and replies[-1].get("final") else None

    items = wait_for(finished)
    assert [i["request_id"] for i in items if i["kind"] == "user"] == [r]
    assert any(i["kind"] == "tool" and i.get("status") == "completed" for i in items)
    assert "find the bug" in [i for i in items if i["kind"] == "reply"][-1]["text"]
    assert c.get("/api/agents/local/streamer/conversations/chat").json()["recent_sends"] == []


def test_steer_and_stop(lab):
    c, *_ = lab
    pane = c.get("/api/agents/local/streamer/conversations/chat").json()
    long_text = " ".join(f"w{i}" for i in range(200))
    sent = c.post("/api/send", json={"request_id": rid(), "agent": "streamer", "conversation": "chat",
                                     "text": long_text, "turn": pane["turn"]}).json()
    steer = c.post("/api/agents/local/streamer/conversations/chat/steer",
                   json={"request_id": rid(), "text": "shorter please", "turn": sent["turn"]}).json()
    assert steer["outcome"] == "sent"
    stop = c.post("/api/agents/local/streamer/conversations/chat/stop",
                  json={"request_id": rid(), "turn": sent["turn"]}).json()
    assert stop["outcome"] == "stopped"
    again = c.post("/api/agents/local/streamer/conversations/chat/stop",
                   json={"request_id": rid(), "turn": sent["turn"]}).json()
    assert again["outcome"] == "refused" and again["reason"] == "not_running"


def test_the_demos_nightly_job_shows_its_step_while_it_works(lab):
    """C6, issue 36 (docs/demo.md): the demo's `nightly` shows `Step 2 of 3: Save a note` — its job runs (a
    turn of its own), and progress shows only while a conversation works; `Next step` moves it on, and past
    the last step the job replies and its header falls back to the workspace."""
    from collie.crew.cli.demo import WORKSHOP

    assert ("nightly", "nightly") in WORKSHOP.agents
    c, *_ = lab
    pane = wait_for(lambda: (lambda p: p if p.get("line2") == "Step 2 of 3: Save a note" else None)(
        c.get("/api/agents/local/nightly/conversations/job").json()), what="the nightly job's step")
    assert pane["state"] == "working"
    for expected in ("Step 3 of 3: Report", "Jobs"):
        got = c.post("/api/agents/local/nightly/conversations/job/actions/next",
                     json={"request_id": rid(), "turn": pane["turn"]}).json()
        assert got["outcome"] == "done", got
        pane = wait_for(lambda: (lambda p: p if p.get("line2") == expected else None)(
            c.get("/api/agents/local/nightly/conversations/job").json()), what=expected)
    wait_for(lambda: any(i.get("text") == "Nightly job done." for i in
                         c.get("/api/agents/local/nightly/conversations/job/items").json()["items"]), what="the reply")


def test_actions_and_moved_on(lab):
    """C7: four buttons at most; a tap on an old turn does not run."""
    c, *_ = lab
    pane = c.get("/api/agents/local/progress/conversations/job").json()
    assert [a["id"] for a in pane["actions"]] == ["next", "pause", "flag", "ship"]
    assert all(len(a["label"]) <= 16 for a in pane["actions"]) and pane["actions"][3]["icon"] is None
    done = c.post("/api/agents/local/progress/conversations/job/actions/next",
                  json={"request_id": rid(), "turn": pane["turn"]}).json()
    assert done["outcome"] == "done"
    moved = c.post("/api/agents/local/progress/conversations/job/actions/next",
                   json={"request_id": rid(), "turn": pane["turn"] + 5}).json()
    assert moved["text"] == MOVED_ON
    disabled = c.post("/api/agents/local/progress/conversations/job/actions/ship",
                      json={"request_id": rid(), "turn": pane["turn"]}).json()
    assert disabled["reason"] == "disabled"


def test_starters_rename_close_reopen_and_closed_list(lab):
    """N1–N3, L3–L5: starters open a conversation; close moves it to the closed list; reopen brings it back."""
    c, *_ = lab
    page = c.get("/api/agents/local/starters/starters").json()
    assert page["title"] == "New conversation" and [s["id"] for s in page["starters"]] == ["triage", "review"]
    assert c.get("/api/agents/local/nohistory/starters").json()["empty"] == NO_STARTERS
    started = c.post("/api/agents/local/starters/starters/triage", json={"request_id": rid()}).json()
    assert started["outcome"] == "started" and started["conversation"]
    conv = started["conversation"]
    wait_for(lambda: any(r["id"] == conv for r in c.get("/api/agents/local/starters/conversations").json()["open"]))
    renamed = c.post(f"/api/agents/local/starters/conversations/{conv}/rename", json={"request_id": rid(), "title": "Triage"}).json()
    assert renamed["outcome"] == "done"
    closed = c.post(f"/api/agents/local/starters/conversations/{conv}/close", json={"request_id": rid()}).json()
    assert closed["outcome"] == "done"
    first = c.get("/api/agents/local/starters/conversations?closed=1").json()
    assert len(first["closed"]) == 100 and first["closed"][0]["id"] == conv and first["next"]
    pages = [first]
    while pages[-1]["next"]:
        pages.append(c.get(f"/api/agents/local/starters/conversations?closed=1&cursor={pages[-1]['next']}").json())
    assert sum(len(p["closed"]) for p in pages) == 251
    items = wait_for(lambda: (lambda j: j if j["open"] is False else None)(
        c.get(f"/api/agents/local/starters/conversations/{conv}/items").json()))
    assert items["open"] is False and any(i.get("text") == "Started triage." for i in items["items"])
    reopened = c.post(f"/api/agents/local/starters/conversations/{conv}/reopen", json={"request_id": rid()}).json()
    assert reopened["outcome"] == "done"
    nolist = c.get("/api/agents/local/nohistory/conversations?closed=1").json()
    assert nolist["closed"] == [] and nolist["footer"] is None and nolist["reason"] == "no_history"


@pytest.mark.parametrize(("path", "body", "status"), [
    ("/api/send", "not json", 400),
    ("/api/send", {"agent": "streamer", "conversation": "chat", "text": "x", "turn": 0}, 400),  # no request_id
    ("/api/send", {"request_id": "a/b", "agent": "streamer", "conversation": "chat", "text": "x", "turn": 0}, 400),
    ("/api/send", {"request_id": "r", "agent": "streamer", "conversation": "chat", "text": 5, "turn": 0}, 400),
    ("/api/send", {"request_id": "r", "agent": "streamer", "conversation": "chat", "text": "x", "turn": "0"}, 400),
    ("/api/send", {"request_id": "r", "agent": "nobody", "conversation": "chat", "text": "x", "turn": 0}, 404),
    ("/api/send", {"request_id": "r", "machine": "mars", "agent": "streamer", "conversation": "c", "text": "x", "turn": 0}, 404),
    ("/api/ask/a1", {"request_id": "r", "agent": "deployer", "digest": "d", "answer": "yes"}, 400),
    ("/api/ask/a1", {"request_id": "r", "agent": "deployer", "answer": {"option_ids": ["yes"]}}, 400),
])
def test_malformed_requests(lab, path, body, status):
    c, *_ = lab
    r = c.post(path, content=body) if isinstance(body, str) else c.post(path, json=body)
    assert r.status_code == status and r.json()["message"]


@pytest.mark.parametrize(("text", "reason"), [("", "empty"), ("x" * 100_000, "too_long")])
def test_empty_and_huge_text_are_refused_with_a_reason(lab, text, reason):
    c, *_ = lab
    pane = c.get("/api/agents/local/streamer/conversations/chat").json()
    got = c.post("/api/send", json={"request_id": rid(), "agent": "streamer", "conversation": "chat", "text": text,
                                    "turn": pane["turn"]}).json()
    assert got["outcome"] == "refused" and got["reason"] == reason and got["text"]


def test_doctor_counts_the_program_line(lab):
    """B9: reads and each outcome on one line."""
    c, address, token_file, paths = lab
    pane = c.get("/api/agents/local/streamer/conversations/chat").json()
    c.post("/api/send", json={"request_id": rid(), "agent": "streamer", "conversation": "chat", "text": "hi",
                              "turn": pane["turn"]})
    time.sleep(0.2)
    doctor = run_collie(paths, "doctor").stdout
    line = next(line for line in doctor.splitlines() if "program:" in line)
    assert "reads" in line and "sent 1" in line
