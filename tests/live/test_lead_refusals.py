"""The lead remembers the writes to members' agents it refused itself, on virtual time (crew.md §3,
features B2, B3, B7, I1; docs/phone-api.md).

A request id is applied at most once and a repeat gets the stored receipt: for a member's agent the
member's journal keeps what it was sent, and the lead keeps (collie.lead.members.refusals) what it refused before
forwarding — `busy` on its session lock, `machine_offline`, `older_collie`. The lead's phone API in one
trio run (tests.apilab) with a member link that answers like a member; the store's SQL runs inline so
the clock stays exact. tests/system/test_live_crew_refusals.py does the same with real processes.
"""

from __future__ import annotations

import pytest
import trio

from collie.lead.members import refusals as refusals_mod
from collie.lead.members.link import FORWARD_TIMEOUT
from tests.apilab import FakeLink, InlineRefusals, add_member, api_lab, rid
from tests.live.test_disk_full import Full

SLOW = 5.0
ASK = {"id": "a-1", "kind": "permission", "title": "Run the migration?", "tool": "migrate",
       "options": [{"id": "yes", "role": "allow"}, {"id": "no", "role": "deny"}]}
CONV = {"id": "c", "title": "Chat", "state": "working", "turn": 1, "asks": [], "actions": []}


def views(conversation: dict) -> list[dict]:
    hello = {"wire": {"min": 1, "max": 1}, "runtime": "pi", "instance": "i1",
             "caps": ["asks", "send", "steer", "abort", "actions"]}
    state = {"rev": 1, "instance": "i1", "conversations": [conversation]}
    return [{"name": "desk", "status": {"status": "ready", "transport": "socket", "local": True},
             "hello": hello, "state": state}]


def receipt(msg: dict) -> dict:
    op = msg["op"]
    outcome = {"send": "sent", "abort": "stopped", "answer": "accepted"}.get(op, "done")
    return {"request_id": msg["id"], "op": op, "outcome": outcome, "turn": 2 if op == "send" else None}


def forwarded(link: FakeLink, request_id: str) -> list[str]:
    return [msg["op"] for _, msg in link.calls if msg["id"] == request_id]


async def ask_card(lab) -> dict:
    return (await (await lab.get("/api/agents/laptop/desk/conversations/c")).get_json())["ask"]


def answer_body(ask: dict, request_id: str, option: str = "yes") -> dict:
    return {"request_id": request_id, "machine": "laptop", "agent": "desk", "digest": ask["digest"],
            "answer": {"option_ids": [option]}}


def go_offline(hub, member) -> None:
    member.conn = None
    hub._mark_offline(member)


async def test_a_card_answer_refused_busy_is_answered_the_same_on_a_repeat_and_never_forwarded(tmp, autojump_clock):
    """B7, crew.md §3: a card answer refused `busy` while a send holds the member's conversation, repeated
    under the same request id once the lock is free, gets the same refusal with `replay: true` at once
    and is never forwarded; the same id with another body is refused `conflict`; a new id goes through."""
    async with api_lab(tmp, []) as lab:
        link = FakeLink(receipt, delay=SLOW)
        add_member(lab.hub, "laptop", link, views(CONV))
        async with trio.open_nursery() as n:
            n.start_soon(lab.post_json, "/api/send", {"request_id": rid(), "machine": "laptop", "agent": "desk",
                                                      "conversation": "c", "text": "migrate", "turn": 1})
            while not link.calls:
                await trio.sleep(0.01)
            add_member(lab.hub, "laptop", link, views({**CONV, "asks": [ASK]}))  # the send's turn asked
            ask = await ask_card(lab)
            tap = rid()
            first = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap))
            assert (first["outcome"], first["reason"], first["replay"]) == ("refused", "busy", False)
        assert not lab.hub.locks.locked(("laptop", "desk", "c"))  # the send's receipt came: the lock is free
        t0 = trio.current_time()
        again = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap))
        assert again == {**first, "replay": True}
        assert trio.current_time() == t0
        other = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap, "no"))
        assert (other["outcome"], other["reason"]) == ("refused", "conflict")
        assert forwarded(link, tap) == []
        fresh = rid()
        assert (await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, fresh)))["outcome"] == "accepted"
        assert forwarded(link, fresh) == ["answer"]


async def test_an_offline_refusal_is_remembered_but_a_retry_after_unknown_still_reaches_the_member(tmp, autojump_clock):
    """B3, crew.md §3–§4: a Stop refused `machine_offline` is answered the same (`replay`) after the member
    is back and is never forwarded. But a request the lead already forwarded (its answer never came:
    `unknown`) is the member's to judge: a Retry while the member is offline is refused without being
    remembered, and the Retry once it is back reaches the member (whose journal applies it at most once).
    A send to the offline member is not refused at all: it waits in the inbox and runs once (I1, I5)."""
    async with api_lab(tmp, []) as lab:
        link = FakeLink(receipt, delay=FORWARD_TIMEOUT + 1)  # no receipt in time: `unknown`
        member = add_member(lab.hub, "laptop", link, views({**CONV, "asks": [ASK]}))
        ask = await ask_card(lab)
        tap = rid()
        first = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap))
        assert first["outcome"] == "unknown"
        go_offline(lab.hub, member)
        stop = {"request_id": rid(), "turn": 1}
        refused = await lab.post_json("/api/agents/laptop/desk/conversations/c/stop", stop)
        assert (refused["outcome"], refused["reason"], refused["replay"]) == ("refused", "machine_offline", False)
        retry = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap))
        assert (retry["outcome"], retry["reason"]) == ("refused", "machine_offline")
        queued = await lab.post_json("/api/send", {"request_id": rid(), "machine": "laptop", "agent": "desk",
                                                   "conversation": "c", "text": "later", "turn": 1})
        assert queued["outcome"] == "queued"
        link.delay = 0.0
        member.conn = link  # the member is back
        lab.hub._notify("laptop")
        assert await lab.post_json("/api/agents/laptop/desk/conversations/c/stop", stop) == {**refused, "replay": True}
        assert forwarded(link, stop["request_id"]) == []
        assert (await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap)))["outcome"] == "accepted"
        assert forwarded(link, tap) == ["answer", "answer"]
        add_member(lab.hub, "laptop", link, views(CONV))  # the ask is answered: the waiting send may run
        lab.hub._notify("laptop")
        with trio.fail_after(60):
            while forwarded(link, queued["request_id"]) != ["send"]:
                await trio.sleep(0.5)


async def test_an_older_members_refusal_is_remembered_and_survives_a_lead_restart(tmp, autojump_clock):
    """crew.md §2–§3: a write to a read-only (older) member is refused `older_collie`; once the member is
    updated, a repeat of that id still gets the refusal (`replay`), also from a lead started again on
    the same state folder, and is never forwarded."""
    async with api_lab(tmp, []) as lab:
        link = FakeLink(receipt)
        member = add_member(lab.hub, "laptop", link, views(CONV))
        member.read_only = True
        steer = {"request_id": rid(), "text": "faster", "turn": 1}
        first = await lab.post_json("/api/agents/laptop/desk/conversations/c/steer", steer)
        assert (first["outcome"], first["reason"]) == ("refused", "older_collie")
        member.read_only = False
        lab.hub.refusals.close()
        lab.hub.refusals = InlineRefusals(lab.hub.paths.state_dir / "refusals.sqlite")  # the lead restarted
        again = await lab.post_json("/api/agents/laptop/desk/conversations/c/steer", steer)
        assert again == {**first, "replay": True}
        assert link.calls == []


async def test_a_refusal_that_cannot_be_recorded_is_refused_disk_full_and_kept_nowhere(tmp, autojump_clock):
    """Wire §8, issue 15: with the lead's state disk full, a write the lead refuses is answered with a JSON
    receipt `refused disk_full` (never a 500), and one it would forward is refused `disk_full` before
    anything goes out; nothing is kept, so once space is back the same id is judged afresh."""
    async with api_lab(tmp, []) as lab:
        link = FakeLink(receipt)
        member = add_member(lab.hub, "laptop", link, views({**CONV, "asks": [ASK]}))
        ask = await ask_card(lab)
        full = Full(lab.hub.refusals)
        full.fill()
        go_offline(lab.hub, member)
        tap = rid()
        got = await lab.post(f"/api/ask/{ask['id']}", answer_body(ask, tap))
        assert (got.status_code, got.content_type) == (200, "application/json")
        assert ((await got.get_json())["outcome"], (await got.get_json())["reason"]) == ("refused", "disk_full")
        member.conn = link
        online = await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap))
        assert (online["outcome"], online["reason"]) == ("refused", "disk_full")
        assert link.calls == []
        full.free()
        assert (await lab.post_json(f"/api/ask/{ask['id']}", answer_body(ask, tap)))["outcome"] == "accepted"
        assert forwarded(link, tap) == ["answer"]


async def test_refusals_are_kept_24_hours_and_the_store_is_bounded(tmp, monkeypatch):
    """Wire-v1 §1 (a request id's outcome is kept at least 24 hours), issue 9 (bounded): a refusal is
    answered for 24 h of wall-clock time, then forgotten and deleted; the store never holds more than
    MAX_ROWS rows, the oldest going first."""
    wall = [1_000_000.0]
    store = InlineRefusals(tmp / "refusals.sqlite", wall=lambda: wall[0])
    await store.run(store.refuse, "old", "fp", {"outcome": "refused"})
    wall[0] += 24 * 3600 - 1
    assert (await store.run(store.get, "old")).receipt == {"outcome": "refused"}
    wall[0] += 2
    assert await store.run(store.get, "old") is None
    await store.run(store.forwarded, "new", "fp")
    assert store.count() == 1
    monkeypatch.setattr(refusals_mod, "MAX_ROWS", 5)
    for k in range(12):
        await store.run(store.refuse, f"r{k}", "fp", {"outcome": "refused"})
    assert store.count() == 5
    assert [await store.run(store.get, f"r{k}") is not None for k in range(12)] == [False] * 7 + [True] * 5
    store.close()


async def test_grouped_calls_share_one_commit_and_each_gets_its_own_outcome(tmp):
    """The event loop stays free (issue 15.1): the store's statements run in a worker thread, calls made
    while a batch is on disk go together in the next one, and each caller gets its own result."""
    store = refusals_mod.Refusals(tmp / "refusals.sqlite")
    async with trio.open_nursery() as n:
        for k in range(20):
            n.start_soon(store.run, store.refuse, f"r{k}", "fp", {"outcome": "refused", "k": k})
    got = [await store.run(store.get, f"r{k}") for k in range(20)]
    assert [g.receipt["k"] for g in got] == list(range(20))
    store.close()
