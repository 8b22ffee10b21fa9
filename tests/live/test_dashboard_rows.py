"""The dashboard's rows of members' agents are built once per view and still always current (D1, D5, §6).

Invariants: `GET /api/dashboard`'s JSON text (collie.lead.feed.events.dashboard_json, which reuses each member row
and its encoding) says exactly what `dashboard_sections` says; a member going offline, a new view of
an agent (an ask raised) and an agent gone all show on the very next dashboard — the rows kept per
reader never hide a change. Speed at crew scale is measured by bench/crew_scale.py, not here.
"""

from __future__ import annotations

import json

from collie.crew import crewwire
from collie.lead.feed.dashboard import dashboard_json, dashboard_sections
from collie.lead.members.hub import Hub
from collie.lead.members.session import Member
from collie.lead.members.views import build_reader
from tests.crewlab import fake_view, toggle_ask


class Lab:
    """The parts of a bridge and a hub the dashboard reads: readers built as the hub builds them."""

    def __init__(self) -> None:
        self.readers: dict = {}  # the lead's own agents: none here
        self.members: dict[str, Member] = {}

    def view(self, label: str, view: dict) -> None:
        frame = crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": [view]}))[1]
        member = self.members.setdefault(label, Member(label))
        member.conn = member.conn or object()  # online
        member.readers[view["name"]], _ = build_reader(frame.agents[0].trimmed(), 0.0)

    def both(self) -> tuple[list, list]:
        return json.loads(dashboard_json(self, self))["sections"], dashboard_sections(self, self)


def test_the_dashboard_text_says_what_the_sections_say_after_every_change():
    lab = Lab()
    views = {(m, a): fake_view(f"agent{a}", 5, f"i{a}") for m in ("desk", "laptop") for a in range(3)}
    for (m, _a), v in views.items():
        lab.view(m, v)
    text, sections = lab.both()
    assert text == sections and [s["machine"] for s in text] == ["desk", "laptop"]
    assert not any(s["waiting"] for s in text)

    lab.view("laptop", toggle_ask(views[("laptop", 1)], "Deploy?"))  # a new view: an ask raised
    text, sections = lab.both()
    assert text == sections
    laptop = text[1]
    assert laptop["waiting"] and [r["waiting"] for r in laptop["agents"]] == [None, 1, None]

    Hub._mark_offline(None, lab.members["desk"])  # the same readers, changed in place
    lab.members["desk"].conn = None
    text, sections = lab.both()
    assert text == sections
    assert not text[0]["online"] and {r["status"] for r in text[0]["agents"]} == {"unreachable"}
    assert all(r["detail"].startswith("machine offline since") for r in text[0]["agents"])

    del lab.members["laptop"].readers["agent0"]  # gone from the member's snapshot
    text, sections = lab.both()
    assert text == sections and [r["name"] for r in text[1]["agents"]] == ["agent1", "agent2"]


def test_the_live_channel_sends_the_sections_the_dashboard_shows():
    """The feed derives section heads from the rows it keeps: after each change its last `sections`
    event equals the heads of a dashboard built from scratch (D5: a section with an ask moves up)."""
    import trio
    import trio.testing

    from collie.lead.feed.dashboard import section_heads
    from collie.lead.feed.events import Feed

    lab = Lab()
    lab.on_member_change = []
    lab.on_view_change = []
    views = {m: fake_view("agent0", 3, m) for m in ("desk", "laptop")}
    for m, v in views.items():
        lab.view(m, v)
    feed = Feed(lab, lab)
    sent: list = []

    async def main():
        async with trio.open_nursery() as n:
            await n.start(feed.run)
            feed._publish = lambda kind, data, scope=None: sent.append((kind, data))
            steps = [lambda: lab.view("laptop", toggle_ask(views["laptop"], "Deploy?")),
                     lambda: Hub._mark_offline(None, lab.members["desk"]),
                     lambda: lab.view("laptop", toggle_ask(views["laptop"], "Deploy?"))]
            for step in steps:
                step()
                for label in lab.members:
                    feed.touch(label, None)
                await trio.sleep(0.1)
                heads = [d["sections"] for k, d in sent if k == "sections"][-1]
                assert heads == section_heads(dashboard_sections(lab, lab))
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    kinds = [k for k, _d in sent if k != "needs"]  # tests/live/test_needs_live.py looks at `needs`
    assert kinds == ["row", "sections"] * 3  # each step changes one agent's row and the heads
