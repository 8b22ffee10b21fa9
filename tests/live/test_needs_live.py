"""The Needs you list on the live channel (issue 29; D1, phone-api.md `needs`).

Invariants: the live channel sends a `needs` event whenever the set of open asks changes — an ask
raised or closed anywhere, and also an ask closed and another raised in its place in one view, which
moves no count and so no dashboard row (before, the page learned of it only at some later row event:
seconds late, or never) — and the list it carries is `GET /api/needs`'s (collie.lead.web.serve.needs_list), oldest
first. The plain list is tested directly; the feed on trio's autojump clock.
"""

from __future__ import annotations

import trio
import trio.testing

from collie.lead.feed.events import Feed
from collie.lead.feed.needs import NeedsList
from collie.lead.web.serve import needs_list
from tests.crewlab import fake_view
from tests.live.test_dashboard_rows import Lab


def ask_view(view: dict, *titles: str, conv: int = 0) -> dict:
    """`view` with exactly these asks open in its conversation `conv` (ids = titles), its rev moved on."""
    view["state"]["rev"] += 1
    c = view["state"]["conversations"][conv]
    c["asks"] = [{"id": t, "kind": "permission", "title": t, "options": [{"id": "y", "label": "Yes", "role": "allow"}]}
                 for t in titles]
    c["state"] = "waiting" if titles else "idle"
    return view


def test_the_list_is_oldest_first_and_an_ask_swapped_for_another_is_a_change():
    """29: one ask closed and another raised in the same view changes the list though no count moves;
    an ask still open keeps the time it was first seen; an agent gone takes its asks with it."""
    lab = Lab()
    a, b = fake_view("a", 2, "ia"), fake_view("b", 1, "ib")
    lab.view("desk", ask_view(a, "First?"))
    lab.view("laptop", ask_view(b, "Second?"))
    needs = NeedsList()
    assert needs.update("laptop", "b", lab.members["laptop"].readers["b"], 200.0)
    assert needs.update("desk", "a", lab.members["desk"].readers["a"], 100.0)
    assert [x["title"] for x in needs.asks()] == ["First?", "Second?"]  # first seen first, whatever the order
    assert not needs.update("desk", "a", lab.members["desk"].readers["a"], 300.0)  # nothing moved
    lab.view("desk", ask_view(a, "First?", conv=0) and ask_view(a, "First?", "Third?"))
    assert needs.update("desk", "a", lab.members["desk"].readers["a"], 400.0)
    assert [x["title"] for x in needs.asks()] == ["First?", "Second?", "Third?"]
    assert needs.asks()[0]["since"] == "1970-01-01T00:01:40Z"  # 100 s: still the time it was first seen
    lab.view("desk", ask_view(a, "Fourth?", "Third?"))  # First? closed, Fourth? raised: still two asks
    assert needs.update("desk", "a", lab.members["desk"].readers["a"], 500.0)
    assert [x["title"] for x in needs.asks()] == ["Second?", "Third?", "Fourth?"]
    assert needs.update("laptop", "b", None, 600.0)  # gone
    assert [x["title"] for x in needs.asks()] == ["Third?", "Fourth?"]
    assert ("desk", "a", "First?") not in needs.first_seen


def test_the_live_channel_sends_needs_when_an_ask_is_swapped_for_another():
    """29, D1: on a member's agent an ask closes and another opens in one view: the channel sends no row
    (no count moved) but a `needs` event whose list is GET /api/needs's at that moment (before: no event
    at all, and the page's Needs you kept the closed ask until some other row changed); so does a second
    ask in a conversation already waiting."""
    lab = Lab()
    lab.on_member_change = []
    lab.on_view_change = []
    view = fake_view("agent0", 3, "i0")
    lab.view("desk", view)
    clock = [1000.0]
    feed = Feed(lab, lab, wall=lambda: clock[0])
    sent: list = []

    async def main():
        async with trio.open_nursery() as n:
            await n.start(feed.run)
            feed._publish = lambda kind, data, scope=None: sent.append((kind, data))
            for titles in (["Deploy?"], ["Deploy again?"], ["Deploy again?", "Really?"], []):
                sent.clear()
                clock[0] += 1
                lab.view("desk", ask_view(view, *titles))
                feed.touch("desk", "agent0")
                await trio.sleep(0.1)
                needs = [d["asks"] for k, d in sent if k == "needs"]
                assert len(needs) == 1 and [a["title"] for a in needs[0]] == titles
                first_seen = {(m, a, k): t for (m, a, k), t in feed.needs.first_seen.items()}
                assert needs[0] == needs_list(lab, lab, first_seen, clock[0])
                rows = [d for k, d in sent if k == "row"]
                # the row counts conversations waiting: a swap, or a second ask in the same one, moves nothing
                assert len(rows) == (1 if titles in (["Deploy?"], []) else 0)
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_the_snapshot_carries_the_list():
    """29: a fresh channel's snapshot has the Needs you list beside the dashboard."""
    lab = Lab()
    lab.on_member_change = []
    lab.on_view_change = []
    lab.view("desk", ask_view(fake_view("agent0", 1, "i0"), "Deploy?"))
    feed = Feed(lab, lab, wall=lambda: 0.0)

    async def main():
        async with trio.open_nursery() as n:
            await n.start(feed.run)
            ch = feed.open(None)
            snap = await feed.snapshot(ch)
            assert [a["title"] for a in snap["needs"]] == ["Deploy?"]
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
