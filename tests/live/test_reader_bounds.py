"""What the bridge keeps of an agent is bounded, a change costs only what changed, and items page by
revision (issues 16.3, 9.6, 8.8; features S3, W4). The reader is fed answers directly (no I/O)."""

from __future__ import annotations

import pytest

from collie.bridge import reader as reader_mod
from collie.bridge.cache import Cache
from collie.bridge.reader import KEEP_ITEMS, LEFT_OUT, MAX_CONVERSATIONS, AgentReader, item_cost


def hello(instance="i1"):
    return {"wire": {"min": 1, "max": 1}, "runtime": "t", "instance": instance, "caps": ["asks", "watch"]}


def conv(i, **f):
    return {"id": f"c{i}", "title": f"Conversation {i}", "state": "idle", "turn": 1, "items_rev": 0, **f}


def state(convs, rev=5, instance="i1"):
    return {"rev": rev, "instance": instance, "conversations": convs}


def page(items, first_kept=1, more=False, last=None):
    rev = max((i["rev"] for i in items), default=0)
    last = max((i["seq"] for i in items), default=0) if last is None else last  # wire §5: the highest seq of all
    return {"items": items, "first_kept": first_kept, "last": last,
            "items_rev": rev, "next_since": rev, "more": more}


def item(seq, rev=None, kind="reply", **f):
    return {"seq": seq, "rev": rev or seq, "kind": kind, "text": f"t{seq}", **f}


@pytest.fixture
def reader():
    r = AgentReader("desk", transport="socket", address="/s", local=True)
    r.on_hello(hello(), 0)
    return r


# --- 16.3: a change re-parses only what changed -------------------------------------------------
def test_a_change_reparses_only_the_conversation_that_moved(reader):
    """16.3: with 100 open conversations, a state answer where one changed parses that one only; the
    view shows the change and the 99 others are the very same views as before."""
    convs = [conv(i) for i in range(100)]
    reader.on_state(state(convs, rev=1), None, 1)
    assert reader.reparsed == 100
    before = dict(reader.conversations)
    changed = [dict(c) for c in convs]
    changed[42] = conv(42, state="working", turn=2)
    reader.on_state(state(changed, rev=2), None, 2)
    assert reader.reparsed == 1
    assert reader.conversations["c42"].state == "working" and reader.conversations["c42"].turn == 2
    assert all(reader.conversations[f"c{i}"] is before[f"c{i}"] for i in range(100) if i != 42)


def test_an_older_state_read_is_not_applied_over_a_newer_one(reader):
    """A read that finishes after a newer one (a parse in a worker thread) never rolls the view back."""
    reader.on_state(state([conv(1, turn=3)], rev=9), None, 1)
    old = reader.prepare_state(state([conv(1, turn=2)], rev=8))
    assert reader.is_older(old)


# --- 9.6: bounded memory per conversation and per agent -------------------------------------------
def test_a_conversation_keeps_its_newest_items_with_the_left_out_line(reader):
    """9.6, S3: an agent sending endless items costs at most KEEP_ITEMS items of that conversation;
    the oldest go, and Chat shows the left-out line where they were."""
    reader.on_state(state([conv(1, items_rev=3000)]), None, 1)
    for start in range(1, 3001, 500):
        reader.on_items("c1", page([item(s) for s in range(start, start + 500)]), 1)
    log = reader.logs["c1"]
    assert len(log.items) == KEEP_ITEMS and min(log.items) == 3001 - KEEP_ITEMS
    first = reader.items("c1", 0, limit=1)
    assert first[0] == {"kind": "gap", "seq": 3001 - KEEP_ITEMS, "text": LEFT_OUT}
    # an update to an item dropped here is ignored, not kept again
    reader.on_items("c1", page([item(5, rev=3001)]), 2)
    assert 5 not in log.items


def test_an_agent_keeps_about_keep_bytes_of_items(reader, monkeypatch):
    """9.6: items of all conversations of one agent stay under the byte budget; the conversation that
    holds the most gives up its oldest items first, and every conversation keeps its newest item."""
    monkeypatch.setattr(reader_mod, "KEEP_BYTES", 200_000)
    reader.on_state(state([conv(1, items_rev=100), conv(2, items_rev=3)]), None, 1)
    reader.on_items("c2", page([item(s, text="x" * 1000) for s in range(1, 4)]), 1)
    reader.on_items("c1", page([item(s, text="y" * 10_000) for s in range(1, 101)]), 1)
    total = sum(log.cost for log in reader.logs.values())
    assert total <= 200_000
    assert sorted(reader.logs["c2"].items) == [1, 2, 3]  # the small one is untouched
    assert 100 in reader.logs["c1"].items and min(reader.logs["c1"].items) > 1
    assert reader.items("c1")[0]["kind"] == "gap"
    assert total == sum(item_cost(i) for log in reader.logs.values() for i in log.items.values())


def test_at_most_max_conversations_are_read(reader):
    """9.6, issue 32: a state listing 1,500 open conversations keeps MAX_CONVERSATIONS — the newest (an
    agent lists them last) — counts the rest (`left_out`, the list's footer), and logs it once."""
    lines, stale = reader.on_state(state([conv(i) for i in range(1500)]), None, 1)
    assert len(reader.conversations) == MAX_CONVERSATIONS and len(stale) <= MAX_CONVERSATIONS
    assert len(reader.raw_state["conversations"]) == MAX_CONVERSATIONS  # what the cache and the lead keep
    assert "c1499" in reader.conversations and "c0" not in reader.conversations
    assert reader.left_out == 1500 - MAX_CONVERSATIONS
    assert sum("are read (waiting, working, then the newest)" in line for line in lines) == 1
    lines, _ = reader.on_state(state([conv(i) for i in range(1500)], rev=6), None, 2)
    assert not any("are read" in line for line in lines)


def test_the_cache_drops_what_the_reader_dropped(reader, tmp_path):
    """9.6, S2: the cache holds no more than the reader keeps, so a restart does not load it all back."""
    cache = Cache(tmp_path / "cache.sqlite")
    reader.on_state(state([conv(1, items_rev=2500)]), None, 1)
    for start in range(1, 2501, 500):
        reader.on_items("c1", page([item(s) for s in range(start, start + 500)]), 1)
        cache._save(reader.raw_hello, reader.raw_state, None, reader.take_dirty(), set(reader.conversations))
    loaded = cache.load()
    assert len(loaded["items"]["c1"]) == KEEP_ITEMS and min(loaded["items"]["c1"]) == 2501 - KEEP_ITEMS
    cache.close()


# --- 8.8: paging by revision ---------------------------------------------------------------------
def test_a_change_to_an_earlier_item_reaches_a_client_following_next_since(reader):
    """8.8, wire §5: a client that read items 1..3 and then follows `next_since` gets the tool call (seq 1)
    going from running to completed — paging by seq would never send it again."""
    reader.on_state(state([conv(1, items_rev=3)]), None, 1)
    reader.on_items("c1", page([item(1, kind="tool", status="running"), item(2), item(3)]), 1)
    first = reader.items_page("c1", 0)
    assert [i["seq"] for i in first["items"]] == [1, 2, 3] and first["next_since"] == 3 and not first["more"]
    reader.on_items("c1", page([item(1, rev=4, kind="tool", status="completed")], last=3), 2)
    nxt = reader.items_page("c1", first["next_since"])
    assert [(i["seq"], i["status"]) for i in nxt["items"]] == [(1, "completed")] and nxt["next_since"] == 4
    assert reader.items_page("c1", 4)["items"] == []


def test_pages_are_bounded_and_follow_on(reader):
    """9.6: an answer holds at most `limit` items and about PAGE_BYTES; following `next_since` while
    `more` reads every item exactly once."""
    reader.on_state(state([conv(1, items_rev=1000)]), None, 1)
    for start in range(1, 1001, 500):
        reader.on_items("c1", page([item(s, text="z" * 5000) for s in range(start, start + 500)]), 1)
    got, since, answers = [], 0, 0
    while True:
        p = reader.items_page("c1", since, limit=500)
        answers += 1
        assert len(p["items"]) <= 500 and sum(item_cost(i) for i in p["items"]) <= reader_mod.PAGE_BYTES + 6000
        got += [i["seq"] for i in p["items"]]
        since = p["next_since"]
        if not p["more"]:
            break
    assert got == list(range(1, 1001)) and answers > 2


def test_a_since_beyond_what_was_read_starts_over(reader):
    """Wire §5 for the phone: a `since` above what the bridge read (revisions started over) answers from
    0 with `reset`, so the client replaces what it holds."""
    reader.on_state(state([conv(1, items_rev=2)]), None, 1)
    reader.on_items("c1", page([item(1), item(2)]), 1)
    p = reader.items_page("c1", 50)
    assert p["reset"] and [i["seq"] for i in p["items"]] == [1, 2]


# --- 9.6: large answers are parsed off the event loop ------------------------------------------------
async def test_a_large_state_is_parsed_in_a_worker_thread(monkeypatch):
    """9.6: a state listing more than INLINE_MAX conversations is parsed in a worker thread, not on the
    event loop every other agent and request shares; a small one stays inline (cheap, exact in tests)."""
    import threading

    import trio

    from collie.bridge import poller as poller_mod
    from collie.crew.config import AgentConfig
    from tests.livelab import agent, bridge_for, cleanup, short_dir

    where: list[tuple[int, bool]] = []
    inner = AgentReader.prepare_state

    def spy(self, data):
        where.append((len(data.get("conversations", [])), threading.current_thread() is threading.main_thread()))
        return inner(self, data)

    monkeypatch.setattr(AgentReader, "prepare_state", spy)
    d = short_dir()
    try:
        with trio.fail_after(20):
            async with agent(d / "a.sock") as collie:
                for i in range(poller_mod.INLINE_MAX + 10):
                    collie.conversation(f"c{i}")
                collie.ready()
                async with bridge_for([AgentConfig("desk", socket=str(d / "a.sock"))], d) as b:
                    while b.status("desk").status != "ready":
                        await b.wait_changed()
                    assert len(b.readers["desk"].conversations) == poller_mod.INLINE_MAX + 10
    finally:
        cleanup(d)
    assert where and all(not on_loop for n, on_loop in where if n > poller_mod.INLINE_MAX)
