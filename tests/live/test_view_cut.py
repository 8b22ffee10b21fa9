"""A view cut to fewer conversations than the agent has keeps those that matter and says how many it left
out (issue 32; crew.md §2, §6; features L1)."""

from __future__ import annotations

import json

import pytest

from collie.crew import crewwire
from collie.crew.crewwire import FrameError
from collie.crew.views import keep_conversations
from collie.lead.members.views import build_reader
from tests.apilab import FakeLink, add_member, api_lab
from tests.crewlab import fake_view


def conv(cid: str, state: str = "idle", activity: str | None = "2026-11-30T01:00:00Z", asks: list | None = None) -> dict:
    return {"id": cid, "state": state, "activity": activity, "asks": asks or [], "turn": 1}


def test_the_cut_keeps_waiting_then_working_then_the_latest_activity_in_the_agents_order():
    """crew.md §6: waiting for the user first, then working, then by latest activity (among equals, the
    ones the agent lists last: its newest); what is kept stays in the agent's order."""
    raws = [conv("old-waiting", "waiting", "2020-01-01T00:00:00Z"), conv("old-idle", activity="2020-01-01T00:00:00Z"),
            conv("asks-open", asks=[{"id": "a"}], activity=None), conv("working", "working", "2021-01-01T00:00:00Z"),
            conv("new-idle", activity="2026-11-30T02:00:00+00:00"), conv("mid-idle", activity="2025-01-01T00:00:00Z"),
            conv("bad-time", activity="yesterday"), "not an object", conv("equal-listed-earlier"), conv("equal-listed-later")]
    kept, left = keep_conversations(raws, 5)
    assert [c["id"] for c in kept] == ["old-waiting", "asks-open", "working", "new-idle", "equal-listed-later"]
    assert left == len(raws) - 5
    assert keep_conversations(raws, 100) == (raws, 0)


def test_a_members_cut_view_reaches_the_phone_with_how_many_it_left_out():
    """A member's view of 231 conversations is cut to MAX_CONVERSATIONS by the lead too, keeping the newest,
    and the reader the lead builds says how many were left out, added to what the member itself left out."""
    view = fake_view("desk", 231)
    view["left_out"] = 7  # the member's own cut
    frame = crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": [view]}))[1]
    reader, text = build_reader(frame.agents[0].trimmed(), 0.0)
    assert len(reader.conversations) == crewwire.MAX_CONVERSATIONS
    assert "c230" in reader.conversations and "c00" not in reader.conversations
    assert reader.left_out == 7 + 231 - crewwire.MAX_CONVERSATIONS
    assert json.loads(text)["left_out"] == reader.left_out  # kept in the views file too


@pytest.mark.parametrize("bad", [-1, True, 1.5, "3", crewwire.LEFT_OUT_MAX + 1])
def test_a_members_left_out_must_be_a_whole_number(bad):
    """Untrusted input: a `left_out` that is not a whole number from 0 to LEFT_OUT_MAX is a bad frame."""
    view = {**fake_view("desk", 1), "left_out": bad}
    with pytest.raises(FrameError):
        crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": [view]}))
    body = {k: v for k, v in view.items() if k != "name"}
    with pytest.raises(FrameError):
        crewwire.parse_member_frame(json.dumps({"type": "agent", "name": "desk", "view": body}))


async def test_the_conversation_list_answers_left_out_next_to_open(tmp, autojump_clock):
    """phone-api.md: `GET …/conversations` carries `left_out` (an integer, 0 when nothing is left out)."""
    async with api_lab(tmp, []) as lab:
        add_member(lab.hub, "laptop", FakeLink(lambda m: {}), [fake_view("desk", 231), fake_view("pi", 3)])
        got = await (await lab.get("/api/agents/laptop/desk/conversations")).get_json()
        assert len(got["open"]) == crewwire.MAX_CONVERSATIONS and got["left_out"] == 231 - crewwire.MAX_CONVERSATIONS
        assert (await (await lab.get("/api/agents/laptop/pi/conversations")).get_json())["left_out"] == 0
