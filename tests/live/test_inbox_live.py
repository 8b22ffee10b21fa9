"""The inbox through the lead's API, against real SDK agents, in one trio run (issues 8, 9, 16).

A real Bridge, Writer (journal in its worker thread), Hub and Inbox (SQLite in its worker thread)
behind the Quart app; requests go through Quart's test client. Real time (the databases run in
threads, which virtual time cannot wait for), so nothing here asserts a duration: each test has an
absolute `fail_after`. How long the event loop's steps are under these loads (issue 16.2: none over
20 ms) is a figure, not a test: bench/inbox_loop.py runs the two load tests below with a LoopWatch and
prints it beside its floor (a loaded machine stretches a step; a test judging it failed 1 run in 4).
"""

from __future__ import annotations

import gc
import uuid
from contextlib import asynccontextmanager

import attrs
import trio

from collie.bridge.journal import Journal
from collie.bridge.writer import Writer
from collie.crew.config import AgentConfig
from collie.lead.door.http import create_app
from collie.lead.inbox import service as inbox_mod
from collie.lead.inbox.core import item_id
from collie.lead.inbox.service import Inbox
from collie.lead.members.hub import Hub
from collie.lead.routes.api import create_api
from collie.lead.routes.inbox import register as install_inbox_routes
from tests.apilab import InlineInbox
from tests.livelab import agent, bridge_for

TOKEN = "t" * 64
OWNER = {"authorization": f"Bearer {TOKEN}"}


def rid() -> str:
    return str(uuid.uuid4())


class Turns:
    """The agents' send handler: records every text it got; `hold` keeps turns running until released."""

    def __init__(self) -> None:
        self.texts: list[tuple[str, str, str]] = []  # (agent, conversation, text)
        self.gate = trio.Event()
        self.gate.set()

    def hold(self) -> None:
        self.gate = trio.Event()

    def release(self) -> None:
        self.gate.set()

    def handler(self, name: str):
        async def on_send(pane, text):
            self.texts.append((name, pane.id, text))
            await self.gate.wait()
            pane.reply(f"got {text}")
        return on_send


@attrs.define
class Lab:
    client: object
    inbox: Inbox
    hub: Hub
    turns: Turns
    agents: dict

    async def send(self, request_id, text, turn, conv="c", agent="a0"):
        got = await self.client.post("/api/send", headers=OWNER, json={
            "request_id": request_id, "agent": agent, "conversation": conv, "text": text, "turn": turn})
        assert got.status_code == 200, await got.get_data()
        return await got.get_json()

    async def get(self, path, headers=OWNER):
        got = await self.client.get(path, headers=headers)
        return got.status_code, await got.get_json()

    async def post(self, path, body, headers=OWNER):
        got = await self.client.post(path, headers=headers, json=body)
        return got.status_code, await got.get_json()

    async def ran(self, text, conv="c", agent="a0") -> str:
        """Send `text` quoting the current turn and wait until its turn ended."""
        request_id = rid()
        got = await self.send(request_id, text, await self.turn(conv, agent), conv=conv, agent=agent)
        assert got["outcome"] in ("sent", "queued"), got
        await self.until(lambda: _is(self, request_id, "done"), f"{text} ran")
        return request_id

    async def turn(self, conv="c", agent="a0") -> int:
        return (await self.get(f"/api/agents/local/{agent}/conversations/{conv}"))[1]["turn"]

    async def until(self, fn, what: str):
        while not await fn():
            await trio.sleep(0.01)

    async def state(self, item_id, headers=OWNER) -> str | None:
        status, body = await self.get(f"/api/inbox/{item_id}", headers)
        return body["state"] if status == 200 else None


@asynccontextmanager
async def lead(tmp, watch=None, *, agents=1, conversations=("c", "d"), wall=None):
    """The lab, once every agent is ready; `watch` (the loopwatch) is armed then: start-up (databases
    opened, agent clients made) happens before a lead serves and is not judged."""
    turns = Turns()
    async with trio.open_nursery() as outer:
        collies = {}
        for n in range(agents):
            name = f"a{n}"
            cm = agent(tmp / f"{name}.sock", on_send=turns.handler(name))
            collie = await outer_enter(outer, cm)
            for conv in conversations:
                collie.conversation(conv, title=conv)
            collie.ready()
            collies[name] = collie
        configs = [AgentConfig(name, socket=str(tmp / f"{name}.sock")) for name in collies]
        async with bridge_for(configs, tmp) as b:
            b.paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            writer = Writer(b, Journal(b.paths.state_dir / "journal.sqlite"))
            hub = Hub(b.paths, b, writer)
            inbox = Inbox(b.paths.state_dir / "inbox.sqlite", hub, writer, owner="Ana",
                          **({"wall": wall} if wall else {}))
            app = create_app(lambda a: (create_api(a, b, writer, TOKEN, hub, inbox=inbox), install_inbox_routes(a, hub, inbox)))
            async with trio.open_nursery() as n:
                await n.start(writer.recover)
                n.start_soon(inbox.run)
                while any(b.status(name).status != "ready" for name in collies):
                    await b.wait_changed()
                while any(b.pollers[name].reader.stale_conversations() for name in collies):
                    await b.wait_changed()  # first reads of every conversation's items done
                if watch is not None:
                    # the agents' objects live here only because the test runs them in-process: keep
                    # the collector's full passes to what the lead allocates while it serves
                    gc.freeze()
                    watch.arm()
                try:
                    yield Lab(app.test_client(), inbox, hub, turns, collies)
                finally:
                    gc.unfreeze()
                turns.release()
                n.cancel_scope.cancel()
        outer.cancel_scope.cancel()


async def outer_enter(nursery, cm):
    """Enter an async context manager in a task of `nursery` (kept open until that nursery ends)."""
    ready = trio.Event()
    box = []

    async def hold():
        async with cm as value:
            box.append(value)
            ready.set()
            await trio.sleep_forever()
    nursery.start_soon(hold)
    await ready.wait()
    return box[0]


async def test_a_reused_request_id_with_another_text_is_refused_and_does_nothing(tmp):
    """B2, issue 8.1: the same id with another body is refused `conflict` and nothing reaches the agent,
    whether the first passed straight through or waits in the inbox; the same body replays."""
    with trio.fail_after(20):
        async with lead(tmp) as lab:
            first = rid()
            sent = await lab.send(first, "one", await lab.turn())
            assert sent["outcome"] == "sent"
            again = await lab.send(first, "two", sent["turn"])
            assert (again["outcome"], again["reason"]) == ("refused", "conflict")
            replay = await lab.send(first, "one", sent["turn"] - 1)  # the very same request: the stored receipt
            assert (replay["outcome"], replay["replay"], replay["turn"]) == ("sent", True, sent["turn"])

            lab.turns.hold()  # a turn runs in d: the next send to this agent waits in the inbox
            await lab.send(rid(), "busy", await lab.turn("d"), conv="d")
            waiting = rid()
            queued = await lab.send(waiting, "three", sent["turn"])
            assert (queued["outcome"], queued["reason"]) == ("queued", "inbox")
            repeat = await lab.send(waiting, "three", sent["turn"])
            assert (repeat["outcome"], repeat["replay"]) == ("queued", True)  # I7: a repeat says replay
            other = await lab.send(waiting, "four", sent["turn"])
            assert (other["outcome"], other["reason"]) == ("refused", "conflict")
            lab.turns.release()
            await lab.until(lambda: _is(lab, waiting, "done"), "the queued send ran")
            texts = [t for _a, _c, t in lab.turns.texts]
            assert texts.count("one") == 1 and texts.count("three") == 1
            assert "two" not in texts and "four" not in texts


async def _is(lab, item_id, state):
    return await lab.state(item_id) == state


async def test_a_send_quoting_a_passed_turn_is_refused_when_it_enters(tmp):
    """B4, issue 8.2, crew.md §3–§4: while the agent is busy, a send quoting a turn that has passed is
    refused `turn_moved` at once, is not kept, and never reaches the agent; one quoting the current turn
    waits, and runs even though items ahead of it start turns of their own."""
    with trio.fail_after(20):
        async with lead(tmp) as lab:
            for n in range(3):
                await lab.ran(f"warm {n}")
            current = await lab.turn()
            assert current >= 3
            lab.turns.hold()
            await lab.send(rid(), "busy", await lab.turn("d"), conv="d")
            stale = rid()
            got = await lab.send(stale, "from an old screen", 0)
            assert (got["outcome"], got["reason"]) == ("refused", "turn_moved")
            assert (await lab.get(f"/api/inbox/{stale}"))[0] == 404  # nothing kept
            ahead, behind = rid(), rid()
            assert (await lab.send(ahead, "ahead", current))["outcome"] == "queued"
            assert (await lab.send(behind, "behind", current))["outcome"] == "queued"  # `ahead` will move the turn
            lab.turns.release()
            await lab.until(lambda: _is(lab, behind, "done"), "both ran")
            texts = [t for _a, _c, t in lab.turns.texts]
            assert "from an old screen" not in texts and texts[-2:] == ["ahead", "behind"]


async def test_finished_items_keep_their_receipts_and_waiting_items_say_why(tmp):
    """I7, I9, issue 8.9: a finished item is readable one by one and in the list with its receipt; an
    approved item held by an open ask says so; a repeat of an expired request answers `expired`."""
    clock = [1_000_000.0]
    with trio.fail_after(20):
        async with lead(tmp, wall=lambda: clock[0]) as lab:
            lab.hub.store.add_token("slack", "s" * 40, "required")
            slack = {"authorization": "Bearer " + "s" * 40}
            done = rid()
            assert (await lab.send(done, "hello", await lab.turn()))["outcome"] == "sent"
            await lab.until(lambda: _is(lab, done, "done"), "done")
            status, item = await lab.get(f"/api/inbox/{done}")
            assert status == 200 and item["receipt"]["outcome"] == "sent" and item["state_text"] == "done"
            listed = (await lab.get("/api/agents/local/a0/inbox"))[1]["items"]
            assert [(i["id"], i["state"]) for i in listed] == [(done, "done")]

            ask_task_done = trio.Event()

            async def ask():
                await lab.agents["a0"].pane_of("c").ask(kind="permission", title="Go?", tool="t", options=[
                    {"id": "yes", "label": "Yes", "role": "allow"}])
                ask_task_done.set()
            async with trio.open_nursery() as n:
                n.start_soon(ask)
                await lab.until(lambda: _ask_open(lab), "the ask shows")
                lab.turns.hold()
                await lab.send(rid(), "busy", await lab.turn("d"), conv="d")
                held = rid()
                await lab.send(held, "after the ask", await lab.turn())
                lab.turns.release()
                await lab.until(lambda: _text_is(lab, held, "queued, waiting: an ask is open"), "held by the ask")
                n.cancel_scope.cancel()

            late = rid()
            got = (await lab.post("/api/agents/local/a0/inbox", {"request_id": late, "conversation": "c", "text": "x"},
                                  slack))[1]
            assert (got["outcome"], got["text"]) == ("queued", "waiting for approval from Ana")
            clock[0] += inbox_mod.TTL_DEFAULT
            lab.inbox.poke()
            await lab.until(lambda: _is_as(lab, late, "expired", slack), "expired")
            again = (await lab.post("/api/agents/local/a0/inbox", {"request_id": late, "conversation": "c", "text": "x"},
                                    slack))[1]
            assert (again["outcome"], again["replay"]) == ("expired", True)
            listed = (await lab.get("/api/agents/local/a0/inbox", slack))[1]["items"]
            assert [(i["request_id"], i["state"]) for i in listed] == [(late, "expired")]  # a sender sees its own


async def test_a_malformed_inbox_item_id_is_a_bad_request_and_an_unknown_one_is_not_found(tmp):
    """The wire's id rule (1-128 printable ASCII, no `/`) holds for inbox item ids too: a control
    character or an over-long id is `400 bad_request`, told apart from a well-formed id that names no item."""
    with trio.fail_after(20):
        async with lead(tmp) as lab:
            for bad in ("a%0Ab", "%00", "x" * 129, "%C3%A9t%C3%A9"):
                status, body = await lab.get(f"/api/inbox/{bad}")
                assert (status, body["error"]) == (400, "bad_request"), bad
                status, body = await lab.post(f"/api/inbox/{bad}/cancel", {})
                assert (status, body["error"]) == (400, "bad_request"), bad
            status, body = await lab.get(f"/api/inbox/{rid()}")
            assert (status, body["error"]) == (404, "not_found")


async def _ask_open(lab):
    return (await lab.get("/api/agents/local/a0/conversations/c"))[1].get("ask") is not None


async def _text_is(lab, item_id, text):
    return (await lab.get(f"/api/inbox/{item_id}"))[1].get("state_text") == text


async def _is_as(lab, item_id, state, headers):
    return await lab.state(item_id, headers) == state


async def test_request_ids_are_scoped_per_sender_and_waiting_items_are_bounded(tmp, monkeypatch):
    """Issue 9.4: a sender reusing the owner's request id gets its own item, never the owner's receipt;
    its reuse with another body is `conflict`; an unknown agent is refused; waiting items are bounded."""
    monkeypatch.setattr(inbox_mod, "WAITING_MAX", 2)
    with trio.fail_after(20):
        async with lead(tmp) as lab:
            lab.hub.store.add_token("slack", "s" * 40, "required")
            slack = {"authorization": "Bearer " + "s" * 40}
            shared = rid()
            owner = await lab.send(shared, "the owner's secret plan", await lab.turn())
            assert owner["outcome"] == "sent"
            status, got = await lab.post("/api/agents/local/a0/inbox",
                                         {"request_id": shared, "conversation": "c", "text": "mine"}, slack)
            assert status == 200 and got["outcome"] == "queued" and "replay" in got and not got["replay"]
            assert got["item"] != shared and "secret" not in str(got)
            status, item = await lab.get(f"/api/inbox/{shared}", slack)  # its own, by its own request id
            assert status == 200 and item["text"] == "mine" and item["sender"] == "slack"
            other = (await lab.post("/api/agents/local/a0/inbox",
                                    {"request_id": shared, "conversation": "c", "text": "changed"}, slack))[1]
            assert (other["outcome"], other["reason"]) == ("refused", "conflict")
            status, _ = await lab.post("/api/agents/local/nobody/inbox",
                                       {"request_id": rid(), "conversation": "c", "text": "x"}, slack)
            assert status == 404
            assert (await lab.post("/api/agents/local/a0/inbox", {"request_id": rid(), "conversation": "c",
                                                                   "text": "2"}, slack))[1]["outcome"] == "queued"
            full = (await lab.post("/api/agents/local/a0/inbox", {"request_id": rid(), "conversation": "c",
                                                                   "text": "3"}, slack))[1]
            assert (full["outcome"], full["reason"]) == ("refused", "inbox_full")
            assert [t for _a, _c, t in lab.turns.texts] == ["the owner's secret plan"]


async def test_a_change_after_approval_goes_back_for_approval(tmp):
    """Issue 9.3: a `required` sender's message to an item the owner approved sends it back to
    `pending`; only the owner's new approval lets it run, with the changed text."""
    with trio.fail_after(20):
        async with lead(tmp) as lab:
            lab.hub.store.add_token("slack", "s" * 40, "required")
            slack = {"authorization": "Bearer " + "s" * 40}
            lab.turns.hold()
            busy = rid()
            await lab.send(busy, "busy", await lab.turn("d"), conv="d")
            mine = rid()
            got = (await lab.post("/api/agents/local/a0/inbox", {"request_id": mine, "conversation": "c",
                                                                  "text": "tidy the logs"}, slack))[1]
            assert (await lab.post(f"/api/inbox/{got['item']}/approve", {}))[1]["state"] == "approved"
            changed = (await lab.post(f"/api/inbox/{mine}/message", {"text": "and drop the database"}, slack))[1]
            assert changed["state"] == "pending" and changed["text"].endswith("and drop the database")
            lab.turns.release()
            await lab.until(lambda: _is(lab, busy, "done"), "the busy turn ended")  # the tick that saw it end
            assert await lab.state(got["item"]) == "pending"  # would have dispatched an approved item at once
            assert [t for _a, _c, t in lab.turns.texts] == ["busy"]
            await lab.post(f"/api/inbox/{got['item']}/approve", {})
            await lab.until(lambda: _is(lab, got["item"], "done"), "ran after the new approval")
            assert lab.turns.texts[-1][2] == "tidy the logs\n\nand drop the database"
            status, refused = await lab.post(f"/api/inbox/{mine}/message", {"text": "too late"}, slack)
            assert status == 409 and refused["error"] == "not_waiting"


async def test_a_hundred_sends_at_once_are_each_answered_and_reach_their_agent_once(tmp, watch=None):
    """Issue 16.2, I1, I2: 100 sends at once to 100 conversations of 10 agents: every one is answered
    (one `sent` per agent, the rest `queued`), every one reaches its agent exactly once. (`watch`: the
    LoopWatch of bench/inbox_loop.py, which measures the loop's steps during this.)"""
    convs = [f"c{i}" for i in range(10)]
    with trio.fail_after(60):
        async with lead(tmp, watch, agents=10, conversations=convs) as lab:
            turns = {(f"a{a}", c): await lab.turn(c, f"a{a}") for a in range(10) for c in convs}
            outcomes: dict[str, int] = {}

            async def one(a, c):
                got = await lab.send(rid(), f"to {a}/{c}", turns[(a, c)], conv=c, agent=a)
                outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
            async with trio.open_nursery() as n:
                for a, c in turns:
                    n.start_soon(one, a, c)
            assert set(outcomes) <= {"sent", "queued"} and sum(outcomes.values()) == 100 and outcomes["sent"] >= 10
            await lab.until(lambda: _all_done(lab), "all ran")
            got = sorted(lab.turns.texts)
            assert got == sorted((a, c, f"to {a}/{c}") for a, c in turns)


async def _all_done(lab):
    for a in range(10):
        items = (await lab.get(f"/api/agents/local/a{a}/inbox"))[1]["items"]
        if len(items) != 10 or any(i["state"] != "done" for i in items):
            return False
    return True


async def test_queued_items_do_not_wait_for_the_idle_poll(tmp, autojump_clock):
    """Issue 16.1, I2: with an agent that cannot long-poll (plain polling every 10 s), queued items whose
    turns take 0.5 s each run back to back: while an item waits for its turn to end the inbox asks the
    bridge to read again, so each is done about a tick after its turn ended, not at the next idle poll."""
    from collie.bridge.poller import IDLE_EVERY
    from tests.livelab import ALL_CAPS, inbox_lab

    async def slow(pane, text):
        await trio.sleep(0.5)
        pane.reply(f"got {text}")
    async with inbox_lab(tmp, caps=[c for c in ALL_CAPS if c != "watch"], on_send=slow) as (_c, _p, _b, _w, inbox):
        t0 = trio.current_time()
        from collie.bridge.writes import WriteRequest
        ids = [rid() for _ in range(4)]
        for r in ids:
            got = await inbox.submit("local", WriteRequest(request_id=r, op="send", agent="a0", conversation="c",
                                                           text=r, turn=None), sender=None)
            assert got.outcome in ("sent", "queued")
        while any(i.state != "done" for i in inbox.items("local", "a0")):
            await trio.sleep(0.01)
        took = trio.current_time() - t0
    print(f"4 items of 0.5 s turns done after {took:.3f} s (virtual)")
    assert took < IDLE_EVERY, took  # four 0.5 s turns; one idle poll alone would be 10 s


async def test_three_hundred_requests_waiting_for_one_agent_are_each_queued_and_listed_in_order(tmp, watch=None):
    """Issue 16.2, I1, I7: 300 requests at once to one busy agent are each answered `queued` once kept on
    disk, and the inbox lists them in order. (`watch`: as above; waiting items are kept in memory, so a
    new one costs the same whatever waits, and commits are grouped off the loop — bench/inbox_loop.py.)"""
    with trio.fail_after(60):
        async with lead(tmp, watch) as lab:
            lab.turns.hold()
            await lab.send(rid(), "busy", await lab.turn("d"), conv="d")
            outcomes: dict[str, int] = {}

            async def one(k):
                got = (await lab.post("/api/agents/local/a0/inbox", {"request_id": f"job-{k:03d}", "conversation": "c",
                                                                     "text": f"job {k}"}))[1]
                outcomes[got["outcome"]] = outcomes.get(got["outcome"], 0) + 1
            async with trio.open_nursery() as n:
                for k in range(300):
                    n.start_soon(one, k)
            assert outcomes == {"queued": 300}
            listed = (await lab.get("/api/agents/local/a0/inbox"))[1]["items"]
            assert len(listed) == 301 and listed[0]["state"] == "running"
            assert (await lab.post("/api/agents/local/a0/inbox/clear", {}))[1] == {"cancelled": 300}
            lab.turns.release()


async def test_the_record_survives_a_restart(tmp):
    """crew.md §4, I7: what the inbox keeps in memory is on disk once answered: a new lead on the same
    file has the waiting items (in order, with their entry fingerprints) and the finished ones."""
    from types import SimpleNamespace

    from collie.bridge.writes import WriteRequest

    def stubs():
        hub = SimpleNamespace(members={}, on_member_change=[], on_view_change=[], inbox=None, reader=lambda m, a: None)
        return hub, SimpleNamespace(bridge=SimpleNamespace(readers={}, pollers={}))
    path = tmp / "inbox.sqlite"
    first = InlineInbox(path, *stubs())
    ids = []
    for k in range(3):
        req = WriteRequest(request_id=f"r{k}", op="send", agent="desk", conversation="c", text=f"t{k}")
        got = await first.submit("laptop", req, sender="slack", approval="standing")
        assert got.outcome == "queued"
        ids.append(got.request_id)
    gone = await first.get(item_id("slack", "r1"))
    await first.cancel(gone)
    again = InlineInbox(path, *stubs())
    listed = again.listing("laptop", "desk")
    assert [(i.request_id, i.state) for i in listed] == [("r0", "approved"), ("r2", "approved"), ("r1", "cancelled")]
    repeat = await again.submit("laptop", WriteRequest(request_id="r0", op="send", agent="desk", conversation="c",
                                                       text="t0"), sender="slack")
    assert (repeat.outcome, repeat.replay) == ("queued", True)
    other = await again.submit("laptop", WriteRequest(request_id="r0", op="send", agent="desk", conversation="c",
                                                      text="changed"), sender="slack")
    assert (other.outcome, other.reason) == ("refused", "conflict")
