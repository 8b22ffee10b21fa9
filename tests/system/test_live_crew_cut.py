"""A member's agent with more open conversations than a view carries, as real processes (issue 32;
crew.md §3, §6; features I1, I2, L1).

A lead and a member on loopback; the member's agent (`python -m collie.fixtures many --conversations 231`) keeps
its conversations, turns and request ids in a state file (`--state`), which is the agent's own record of
what it received. Its turns take 3 s, so a send queued behind one is dispatched later by the inbox.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from tests.crewlab import REPO, Crew, wait_for
from tests.livelab import short_dir

pytestmark = pytest.mark.slow

OPEN = 231


@pytest.fixture
def crew():
    c = Crew(short_dir("cc"))
    yield c
    c.stop()


def received(state) -> dict[str, list[str]]:
    """The agent's own record: conversation -> the request ids of the sends it took, in order."""
    try:
        data = json.loads(state.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
    return {c["id"]: [i.get("request_id") for i in c["items"] if i.get("kind") == "user"] for c in data["open"]}


def test_sends_to_conversations_past_the_view_reach_the_agent_once_and_the_lead_does_not_spin(crew):
    """Issue 32: the member's view of an agent with 231 open conversations keeps the newest (the agent lists
    them last) and says how many it left out (`left_out`, the list's footer); a phone send to one the
    view left out, queued behind a running turn, and an inbox sender's request to another reach the
    agent once each, and the lead neither spins nor floods its log while they wait."""
    crew.start_lead()
    m = crew.add_member("laptop")
    sock, state = m.run / "desk.sock", m.run / "desk.json"
    proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "many", "--socket", str(sock), "--conversations",
                             str(OPEN), "--turn-ms", "3000", "--state", str(state)], cwd=REPO, env=m.env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().startswith("listening")
    m.agents["desk"] = proc
    assert m.collie("durable", "attach", "desk", "--socket", str(sock)).returncode == 0
    m.serve()
    wait_for(lambda: crew.online("laptop"), what="member online")
    token = crew.lead.collie("tokens", "create", "relay", "--approval", "standing")
    assert token.returncode == 0, token.stderr
    relay_token = (crew.lead.paths.state_dir / "tokens" / "relay.token").read_text().strip()
    with crew.client() as c:
        def listing():
            got = c.get("/api/agents/laptop/desk/conversations")
            return got.json() if got.status_code == 200 and got.json().get("open") else None
        rows = wait_for(listing, timeout=40, what="the member's agent listed")
        ids = {r["id"] for r in rows["open"]}
        assert rows["left_out"] == OPEN - len(ids) > 0, rows.get("left_out")
        assert f"c{OPEN - 1:03d}" in ids  # the newest conversation is shown
        unseen = sorted(f"c{i:03d}" for i in range(OPEN) if f"c{i:03d}" not in ids)
        assert len(unseen) >= 2
        first, queued_rid, relay_rid = str(uuid.uuid4()), str(uuid.uuid4()), str(uuid.uuid4())
        # a turn runs in a conversation the lead sees; the next sends queue behind it
        busy = sorted(ids)[0]
        got = c.post("/api/send", json={"request_id": first, "machine": "laptop", "agent": "desk",
                                        "conversation": busy, "text": "first", "turn": 0}).json()
        assert got["outcome"] == "sent", got
        got = c.post("/api/send", json={"request_id": queued_rid, "machine": "laptop", "agent": "desk",
                                        "conversation": unseen[0], "text": "to an unseen one"}).json()
        assert got["outcome"] == "queued", got
        got = c.post("/api/agents/laptop/desk/inbox", headers={"authorization": f"Bearer {relay_token}"},
                     json={"request_id": relay_rid, "conversation": unseen[1], "text": "from the relay"})
        assert got.status_code == 200 and got.json()["outcome"] == "queued", got.text
        relay_item = got.json()["item"]  # the id the agent sees (a sender's ids are scoped to it)
        lines_before = crew.lead.log().count("[inbox]")
        started = time.monotonic()

        def finished():
            states = [c.get(f"/api/inbox/{i}").json().get("state") for i in (queued_rid,)]
            relay = c.get(f"/api/inbox/{relay_rid}", headers={"authorization": f"Bearer {relay_token}"}).json()
            states.append(relay.get("state"))
            return states if all(s in ("done", "failed", "cancelled", "expired") for s in states) else None
        states = wait_for(finished, timeout=60, what="both queued sends ran")
        assert states == ["done", "done"], states
        took = time.monotonic() - started
        record = received(state)
        assert record.get(busy) == [first]
        assert record.get(unseen[0]) == [queued_rid] and record.get(unseen[1]) == [relay_item], \
            {k: v for k, v in record.items() if v}
        assert sum(len(v) for v in record.values()) == 3  # nothing else, nothing twice
        lines = crew.lead.log().count("[inbox]") - lines_before
        assert lines <= 12, (lines, took, crew.lead.log()[-3000:])  # a few lines an item, not thousands
