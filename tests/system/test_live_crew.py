"""The live channel across a crew: a member's asks, the machine going offline and back, and late receipts
from the inbox reach the phone without polling (issue 11; D5, I7, W5)."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path

import pytest

from collie.crew import control
from tests.crewlab import Crew, wait_for
from tests.livelab import short_dir
from tests.system.test_pairing import Stream

pytestmark = pytest.mark.slow


@pytest.fixture
def crew():
    c = Crew(short_dir("cd"))
    c.lead.agent("desk", "streamer")
    yield c
    c.stop()


def test_member_asks_offline_and_back_and_inbox_receipts_arrive_live(crew):
    """A member's ask shows in its row and the viewed pane; its machine going offline and coming back
    changes the sections; a send queued while it sleeps reports `queued`, then `done` once it ran —
    all on one live channel; the member polls its agent fast only while the channel views it."""
    crew.start_lead()
    m = crew.add_member("workshop")
    m.agent("lab", "deployer")
    m.serve()
    wait_for(lambda: crew.online("workshop"), what="member online")
    with crew.client() as c:
        wait_for(lambda: any(s["machine"] == "workshop" and s["agents"] and s["agents"][0]["status"] == "ready"
                             for s in c.get("/api/dashboard").json()["sections"]), what="member agent ready")
        s = Stream(c, "/api/events?machine=workshop&agent=lab&conversation=deploy")
        snap = s.wait(lambda e: e[0] == "snapshot")[2]
        member = [x for x in snap["dashboard"]["sections"] if x["machine"] == "workshop"][0]
        assert member["agents"][0]["member"] == "workshop" and member["agents"][0]["runtime"] == "deployer"
        assert snap["pane"]["ask"]["title"] == "Deploy to staging?" and snap["pane"]["online"] is True
        assert control.call(crew.lead.paths.control_socket, "live")["viewers"] == {"workshop/lab": 1}

        m.kill(signal.SIGKILL)
        s.wait(lambda e: e[0] == "sections" and any(x["machine"] == "workshop" and not x["online"]
                                                    for x in e[2]["sections"]), timeout=40)
        s.wait(lambda e: e[0] == "pane" and e[2]["pane"] and e[2]["pane"]["online"] is False
               and e[2]["pane"]["controls"]["stop"] is False and e[2]["pane"]["controls"]["send"] is True, timeout=40)
        turn = snap["pane"]["turn"]
        rid = str(uuid.uuid4())
        got = c.post("/api/send", json={"request_id": rid, "machine": "workshop", "agent": "lab",
                                        "conversation": "deploy", "text": "while you slept", "turn": turn}).json()
        assert got["outcome"] == "queued", got
        queued = s.wait(lambda e: e[0] == "inbox" and e[2]["item"]["request_id"] == rid)[2]["item"]
        assert queued["state"] == "approved" and queued["state_text"].startswith("queued, machine offline since")
        after = len(s.events)
        m.serve()

        def workshop_online(e):
            return e[0] == "sections" and [x for x in e[2]["sections"] if x["machine"] == "workshop"][0]["online"]
        s.wait(workshop_online, timeout=40, start=after)
        # the queued send waits while the agent's ask is open (crew.md §4); answering it lets it run
        ask = wait_for(lambda: c.get("/api/agents/workshop/lab/conversations/deploy").json().get("ask"))
        c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "machine": "workshop", "agent": "lab",
                                              "digest": ask["digest"], "answer": {"option_ids": ["no"]}})
        s.wait(lambda e: e[0] == "inbox" and e[2]["item"]["request_id"] == rid
               and e[2]["item"]["state"] in ("running", "done"), timeout=40, start=after)
        s.close()
        wait_for(lambda: control.call(crew.lead.paths.control_socket, "live")["viewers"] == {},
                 what="viewing released")
