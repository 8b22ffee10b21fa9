"""A viewed conversation's items on the live channel, however long the chat (issue 29; C1, phone-api `items`).

Invariant: every change of a viewed conversation's items reaches the viewing channel as an `items`
event the moment the lead's bridge has read it, carrying the items that changed — not the whole
conversation — whatever the number of items before it (before: the feed re-read the first page by
revision, 200 items, so in a longer chat a new or streaming item never reached the phone). A real SDK
agent and bridge on trio's autojump clock: the times asserted are exact virtual times.
"""

from __future__ import annotations

import trio

from collie.lead.feed.core import COALESCE
from collie.lead.feed.events import Feed
from tests.livelab import writer_lab


async def next_items(ch, word: str) -> list[dict]:
    while True:
        ev = await ch.receive.receive()
        if ev.kind == "items" and any(word in (i.get("text") or "") for i in ev.data["items"]):
            return ev.data["items"]


async def test_a_streaming_reply_in_a_long_chat_reaches_the_viewer_at_once(tmp, autojump_clock):
    async with writer_lab(tmp, settle=1) as (collie, pane, b, w):
        for batch in range(7):  # 280 items, 40 a read (a page of more than 50 is parsed in a worker thread,
            for i in range(40):  # which runs in real time while the clock jumps)
                pane.reply(f"earlier {batch}.{i}")
            with trio.fail_after(5):
                while "c" not in b.readers["desk"].logs or len(b.readers["desk"].logs["c"].items) < 40 * (batch + 1):
                    await b.wait_changed()
        feed = Feed(b, None, w)
        async with trio.open_nursery() as n:
            await n.start(feed.run)
            ch = feed.open(None)
            await feed.set_view(ch, ("local", "desk", "c"))
            await feed.view_events(ch)  # the phone's full read comes first
            await trio.sleep(1)  # a quiet spell after the 280 items: the bridge's burst credit is back
            reply = pane.reply("", final=False)
            lags, sizes = [], []
            for k in range(5):
                reply.append(f"w{k} ")
                made = trio.current_time()
                with trio.fail_after(5):
                    items = await next_items(ch, f"w{k} ")
                lags.append(round(trio.current_time() - made, 6))
                sizes.append(len(items))
                await trio.sleep(0.5)
            reply.finish()
            # the state read shows the change first (a pass at once), the items read right after it: the
            # next pass, one COALESCE later
            assert lags == [0.0] * 5
            assert sizes == [1] * 5  # the streaming item alone, not the chat again
            pane.reply("the end")
            with trio.fail_after(5):
                assert [i["text"] for i in await next_items(ch, "the end") if i.get("kind") != "gap"][-1] == "the end"
            n.cancel_scope.cancel()


def test_a_members_item_read_before_the_member_has_it_is_read_again_at_once():
    """29: a member sends an agent's view as soon as it read the state and reads the items just after; the
    lead's read of a viewed conversation that finds the moved item not there yet tries again 5 ms later
    (before: nothing until the agent's next change — a streaming reply's every update one update late)."""
    import trio.testing

    from tests.crewlab import fake_view
    from tests.live.test_dashboard_rows import Lab

    lab = Lab()
    lab.on_member_change = []
    lab.on_view_change = []
    view = fake_view("agent0", 1, "i0")
    lab.view("desk", view)
    reads: list[tuple[float, int]] = []
    has = {"rev": 10}

    async def read(machine, agent, what, args):
        if what == "recent_sends":
            return {"lines": []}
        reads.append((trio.current_time(), args.get("since", 0)))  # (a `newest` read: the whole page)
        items = [{"seq": 1, "rev": 11, "kind": "reply", "text": "w1", "final": False}] if has["rev"] >= 11 else []
        return {"items": [i for i in items if i["rev"] > args.get("since", 0)], "open": True}
    lab.read = read
    lab.reader = lambda m, a: lab.members[m].readers.get(a)
    feed = Feed(lab, lab)
    got: list = []

    async def main():
        async with trio.open_nursery() as n:
            await n.start(feed.run)
            ch = feed.open(None)
            await feed.set_view(ch, ("desk", "agent0", "c00"))
            await feed.view_events(ch)  # full read: up to rev 10
            await trio.sleep(1)
            view["state"]["rev"] += 1
            view["state"]["conversations"][0]["items_rev"] = 11  # the view says an item moved ...
            lab.view("desk", view)
            t0 = trio.current_time()
            feed.touch("desk", "agent0")

            async def member_reads_items():  # ... the member has read it 3 ms later
                await trio.sleep(0.003)
                has["rev"] = 11
            n.start_soon(member_reads_items)
            with trio.move_on_after(5):  # (before: no items event at all)
                while True:
                    ev = await ch.receive.receive()
                    if ev.kind == "items":
                        got.append((round(trio.current_time() - t0, 6), [i["text"] for i in ev.data["items"]]))
                        break
            n.cancel_scope.cancel()

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert got == [(0.005, ["w1"])]
    assert len([t for t, _s in reads if t >= 1.0]) == 2  # the read that found nothing, and the one 5 ms later
