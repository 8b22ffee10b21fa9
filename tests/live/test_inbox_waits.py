"""Sends wait their turn, and a waiting item never spins, on virtual time (issues 27 and 32; crew.md §3, §4;
features B7, I1, I2).

- A send (the phone's, or an inbox sender's) that meets the conversation's lock held by any other write
  — send, steer, card answer, agent button, rename, close — waits in the inbox as `queued` and goes once
  the lock is let go; it is never refused or failed `busy`. Checked on the lead's own agent (a real SDK
  agent, whose record of the requests it received is read back) and on a member's agent (a member link
  that records what the lead forwarded).
- An item answered "not now" waits 1, 2, 4 … 30 s before its next try, logs at most two lines at once and
  then one a minute, and does not hold the items behind it for other conversations.
- A send the lead can quote no turn for, to a member that does not quote it either, ends `failed` with
  that true refusal after three tries instead of waiting for ever.
"""

from __future__ import annotations

import logging

import pytest
import trio

from collie.bridge.writes import WriteRequest
from collie.crew.config import AgentConfig
from collie.lead.inbox import core as inbox_core
from tests.apilab import FakeLink, add_member, api_lab, rid
from tests.livelab import agent

HOLD = 3.0  # how long the holder's write keeps the conversation's lock
ASK = {"id": "a-1", "kind": "permission", "title": "Run the migration?", "tool": "migrate",
       "options": [{"id": "yes", "role": "allow"}, {"id": "no", "role": "deny"}]}
KINDS = ["send", "steer", "answer", "action", "rename", "close"]
SUFFIX = {"send": "/send", "steer": "/steer", "answer": "/answer", "action": "/actions/ship", "rename": "/rename",
          "close": "/close"}


def slow(collie, suffix: str, seconds: float) -> None:
    """The agent applies the first POST ending in `suffix` at once but answers it `seconds` later."""
    inner = collie.handle
    done: list = []

    async def handle(req):
        answer = await inner(req)
        if req.method == "POST" and req.path.endswith(suffix) and not done:
            done.append(True)
            await trio.sleep(seconds)
        return answer

    collie.handle = handle


def holder_request(kind: str, machine: str, turn: int, ask: dict | None) -> tuple[str, dict]:
    base = f"/api/agents/{machine}/desk/conversations/c"
    if kind == "send":
        return "/api/send", {"request_id": rid(), "machine": machine, "agent": "desk", "conversation": "c",
                             "text": "the holder", "turn": turn}
    if kind == "answer":
        return f"/api/ask/{ask['id']}", {"request_id": rid(), "machine": machine, "agent": "desk",
                                          "digest": ask["digest"], "answer": {"option_ids": ["yes"]}}
    body = {"steer": {"text": "faster", "turn": turn}, "action": {"turn": turn}, "rename": {"title": "Renamed"},
            "close": {}}[kind]
    path = {"steer": "steer", "action": "actions/ship", "rename": "rename", "close": "close"}[kind]
    return f"{base}/{path}", {"request_id": rid(), **body}


async def echo_then_wait(pane, text):
    pane.reply(f"got {text}")


@pytest.mark.parametrize("kind", KINDS)
async def test_a_send_behind_any_write_on_the_leads_agent_waits_and_goes_once(tmp, autojump_clock, kind):
    """Issue 27, B7, I1: while a `kind` write holds the conversation (the agent answers it 3 s late), a
    phone send and an inbox sender's send to it are answered `queued` at once — never `busy` — and reach
    the agent once each, in order, after the holder; a steer behind the holder is still refused `busy`."""
    sock = tmp / "a.sock"
    async with agent(sock, on_send=echo_then_wait) as collie:
        pane = collie.conversation("c", title="Chat")
        pane.set_actions([{"id": "ship", "label": "Ship", "icon": "send"}])
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab, trio.open_nursery() as n:
            ask = None
            if kind == "answer":
                n.start_soon(lambda: pane.ask(kind="permission", title="Run the migration?", tool="migrate",
                                              options=ASK["options"]))
                while not lab.bridge.conversations("desk")[0].asks:
                    await lab.bridge.wait_changed()
                ask = (await (await lab.get("/api/agents/local/desk/conversations/c")).get_json())["ask"]
            slow(collie, SUFFIX[kind], HOLD)
            path, body = holder_request(kind, "local", 0, ask)
            held: dict = {}

            async def hold():
                held["receipt"] = await lab.post_json(path, body)
                held["at"] = trio.current_time()
            n.start_soon(hold)
            while not lab.writer.locks.locked(("desk", "c")):
                await trio.sleep(0.01)
            t0 = trio.current_time()
            # the turn the phone shows now (a held send may already have moved it: B4 checks the quote at entry)
            shown = await (await lab.get("/api/agents/local/desk/conversations/c")).get_json()
            turn = shown.get("turn", 0)  # a closing conversation may be gone from the list already
            phone = await lab.post_json("/api/send", {"request_id": rid(), "agent": "desk", "conversation": "c",
                                                      "text": "from the phone", "turn": turn})
            relay = await lab.inbox.submit("local", WriteRequest(request_id=rid(), op="send", agent="desk",
                                                                 conversation="c", text="from a sender"),
                                           sender="relay", approval="standing")
            steer = await lab.post_json("/api/agents/local/desk/conversations/c/steer",
                                        {"request_id": rid(), "text": "now", "turn": turn})
            assert (phone["outcome"], phone["reason"]) == ("queued", "inbox") and relay.outcome == "queued"
            assert (steer["outcome"], steer["reason"]) == ("refused", "busy")  # B7: steer stays busy
            assert trio.current_time() == t0
            items = [lab.inbox.by_id[phone["request_id"]], lab.inbox.by_id[inbox_core.item_id("relay", relay.request_id)]]
            with trio.fail_after(60):
                while any(i.state not in inbox_core.FINISHED for i in items):
                    await trio.sleep(0.05)
            assert held["at"] - t0 == pytest.approx(HOLD, abs=0.1)
            posts = [(t, p) for t, m, p in collie.recorder.calls
                     if m == "POST" and any(p.endswith(x) for x in SUFFIX.values())]  # the writes it received
            sends = [t for t, p in posts if p.endswith("/send")]
            holder = [p for t, p in posts if p.endswith(SUFFIX[kind])]
            if kind == "close":  # the holder closed it: the sends end with the true refusal, nothing reached
                assert [(i.state, i.reason) for i in items] == [("failed", "closed")] * 2
                assert sends == [] and len(holder) == 1
            else:
                assert [i.state for i in items] == ["done", "done"], [(i.state, i.reason) for i in items]
                assert len(sends) == (3 if kind == "send" else 2)  # once each (and the holder's own send)
                assert min(t for t in sends[-2:]) >= held["at"] - 0.01  # after the holder let go
                assert posts[0][1].endswith(SUFFIX[kind])  # the holder first
                if kind != "send":  # dispatched the moment the lock was let go
                    assert sends[-2] - held["at"] == pytest.approx(0, abs=0.1)
            assert all(i.reason != "busy" for i in items)
            n.cancel_scope.cancel()


def new_view(lab, link, views: list[dict]) -> None:
    """The member's next view of its agent arrives (as a frame would: the hub tells who watches)."""
    add_member(lab.hub, "laptop", link, views)
    lab.hub._notify("laptop", ["desk"])


def member_views(asks: list | None = None, turn: int = 1, state: str = "idle", convs: tuple = ("c", "d")) -> list[dict]:
    hello = {"wire": {"min": 1, "max": 1}, "runtime": "pi", "instance": "i1",
             "caps": ["asks", "send", "steer", "abort", "actions", "rename", "close"]}
    conversations = [{"id": cid, "title": cid, "state": state if cid == "c" else "idle", "turn": turn,
                      "asks": (asks or []) if cid == "c" else [],
                      "actions": [{"id": "ship", "label": "Ship"}]} for cid in convs]
    return [{"name": "desk", "status": {"status": "ready", "transport": "socket", "local": True},
             "hello": hello, "state": {"rev": 1, "instance": "i1", "conversations": conversations}}]


@pytest.mark.parametrize("kind", KINDS)
async def test_a_send_behind_any_write_on_a_members_agent_waits_and_goes_once(tmp, autojump_clock, kind):
    """Issue 27, B7, crew.md §3: the same on a member's agent under the lead's lock — the phone's send and
    a sender's send are `queued` while the holder's request waits for the member's receipt (3 s), then
    each is forwarded once, after it, the moment its receipt is in."""
    async with api_lab(tmp, []) as lab:
        def sends() -> int:
            return sum(1 for _, m in link.calls if m["op"] == "send")

        def answer(msg):  # each send starts the next turn, and it ends at once (the views below show it)
            outcome = {"send": "sent", "answer": "accepted"}.get(msg["op"], "done")
            return {"request_id": msg["id"], "op": msg["op"], "outcome": outcome,
                    "turn": 1 + sends() if msg["op"] == "send" else None}
        link = FakeLink(answer, delay=HOLD)
        add_member(lab.hub, "laptop", link, member_views([ASK] if kind == "answer" else None))
        ask = None
        if kind == "answer":
            ask = (await (await lab.get("/api/agents/laptop/desk/conversations/c")).get_json())["ask"]
        path, body = holder_request(kind, "laptop", 1, ask)
        held: dict = {}
        async with trio.open_nursery() as n:
            async def hold():
                held["receipt"] = await lab.post_json(path, body)
                held["at"] = trio.current_time()
                if kind == "answer":  # the member's next view: the ask is answered
                    new_view(lab, link, member_views())
            n.start_soon(hold)
            while not link.calls:
                await trio.sleep(0.01)
            link.delay = 0.0
            t0 = trio.current_time()
            phone = await lab.post_json("/api/send", {"request_id": rid(), "machine": "laptop", "agent": "desk",
                                                      "conversation": "c", "text": "from the phone", "turn": 1})
            relay = await lab.inbox.submit("laptop", WriteRequest(request_id=rid(), op="send", agent="desk",
                                                                  conversation="c", text="from a sender"),
                                           sender="relay", approval="standing")
            assert phone["outcome"] == "queued" and relay.outcome == "queued" and trio.current_time() == t0
            ids = [phone["request_id"], inbox_core.item_id("relay", relay.request_id)]
            shown = 0
            with trio.fail_after(30):
                while sum(1 for _, m in link.calls if m["id"] in ids) < 2:
                    if "at" in held and sends() != shown:  # the member's view: the turn a send started ended
                        shown = sends()
                        new_view(lab, link, member_views(turn=1 + shown))
                    await trio.sleep(0.01)
            n.cancel_scope.cancel()
        ops = [(m["op"], m["id"]) for _, m in link.calls]
        assert ops == [(kind, body["request_id"]), ("send", ids[0]), ("send", ids[1])], ops  # in order, once
        times = [t for t, m in link.calls if m["id"] in ids]
        assert times[0] - held["at"] == pytest.approx(0, abs=0.01) or kind == "send"
        assert times[0] - t0 == pytest.approx(HOLD, abs=0.01) or kind == "send"
        forwarded = [m for _, m in link.calls if m["id"] in ids]
        assert all(m["args"]["current_turn"] is True for m in forwarded)  # the member quotes the turn it reads
        states = [lab.inbox.by_id[i].state for i in ids]
        assert "failed" not in states, [(lab.inbox.by_id[i].state, lab.inbox.by_id[i].reason) for i in ids]


async def test_a_not_now_answer_pauses_the_item_with_a_backoff_and_its_log_is_bounded(tmp, autojump_clock, caplog):
    """Issue 32, I2: a send the member answers `busy` seven times (its own lock: a write the lead stopped
    waiting for) is tried again after 1, 2, 4, 8, 16, 30 and 30 s — never at once — then runs once; the
    lead logs three lines about it in those 91 s, not one per try."""
    caplog.set_level(logging.INFO, logger="collie")
    refusals = 7

    def answer(msg):
        if len(link.calls) <= refusals:
            return {"request_id": msg["id"], "op": "send", "outcome": "refused", "reason": "busy"}
        return {"request_id": msg["id"], "op": "send", "outcome": "sent", "turn": 2}
    async with api_lab(tmp, []) as lab:
        link = FakeLink(answer)
        add_member(lab.hub, "laptop", link, member_views())
        caplog.clear()
        got = await lab.inbox.submit("laptop", WriteRequest(request_id=rid(), op="send", agent="desk",
                                                            conversation="c", text="hello"),
                                     sender="relay", approval="standing")
        assert got.outcome == "queued"
        iid = inbox_core.item_id("relay", got.request_id)
        with trio.fail_after(300):
            while lab.inbox.by_id[iid].state != "running" or (lab.inbox.by_id[iid].runtime_ref or {}).get("turn") is None:
                await trio.sleep(0.5)
        times = [t for t, _ in link.calls]
        assert [round(b - a, 6) for a, b in zip(times, times[1:])] == [1, 2, 4, 8, 16, 30, 30]
        lines = [r.getMessage() for r in caplog.records if iid in r.getMessage()]
        about = [line for line in lines if "running" in line or "waits" in line]
        assert len(about) == 3, about
        assert "more lines about it held" in about[2]
        assert lab.inbox.by_id[iid].state == "running"  # sent once; done when its turn ends


async def test_items_behind_a_held_item_for_other_conversations_run_meanwhile(tmp, autojump_clock):
    """Issue 32, I2: while a send waits out its pause (the member answers `ask_open`: an ask the lead's view
    does not show), the send approved after it to another conversation is dispatched at once, and a send
    to the held one's conversation waits behind it (a conversation's sends keep their order)."""
    def answer(msg):
        if msg["args"]["conversation"] == "c":
            return {"request_id": msg["id"], "op": "send", "outcome": "refused", "reason": "ask_open"}
        return {"request_id": msg["id"], "op": "send", "outcome": "sent", "turn": 2}
    async with api_lab(tmp, []) as lab:
        link = FakeLink(answer)
        add_member(lab.hub, "laptop", link, member_views())

        async def submit(conv: str) -> str:
            got = await lab.inbox.submit("laptop", WriteRequest(request_id=rid(), op="send", agent="desk",
                                                                conversation=conv, text=f"to {conv}"),
                                         sender="relay", approval="standing")
            return inbox_core.item_id("relay", got.request_id)
        held = await submit("c")
        while not link.calls:
            await trio.sleep(0.01)
        t0 = link.calls[0][0]
        other, behind = await submit("d"), await submit("c")
        with trio.fail_after(5):
            while len(link.calls) < 2:
                await trio.sleep(0.01)
        assert link.calls[1][1]["id"] == other and link.calls[1][0] - t0 < 0.1
        new_view(lab, link, member_views(turn=2))  # the turn the send to d started has ended
        await trio.sleep(20)
        ids = [m["id"] for _, m in link.calls]
        assert behind not in ids and lab.inbox.by_id[behind].state == "approved"
        assert ids.count(held) >= 3 and lab.inbox.by_id[held].state == "approved"


async def test_a_send_no_machine_can_quote_a_turn_for_ends_with_a_true_refusal(tmp, autojump_clock):
    """Issue 32: a send to a conversation the lead does not see goes out asking the owning bridge to quote
    the turn (`current_turn`); a member that does not (an older Collie) answers `turn_moved` each time.
    Waiting cannot change that: after the tries at 0, 1 and 3 s the item ends `failed` with that refusal
    and a reason the sender can act on — never `queued` for ever — and the items behind it run."""
    def answer(msg):
        if msg["args"]["conversation"] == "unseen":
            return {"request_id": msg["id"], "op": "send", "outcome": "refused", "reason": "turn_moved"}
        return {"request_id": msg["id"], "op": "send", "outcome": "sent", "turn": 2}
    async with api_lab(tmp, []) as lab:
        link = FakeLink(answer)
        add_member(lab.hub, "laptop", link, member_views())
        got = await lab.inbox.submit("laptop", WriteRequest(request_id=rid(), op="send", agent="desk",
                                                            conversation="unseen", text="hello"),
                                     sender="relay", approval="standing")
        iid = inbox_core.item_id("relay", got.request_id)
        with trio.fail_after(60):
            while lab.inbox.by_id[iid].state != "failed":
                await trio.sleep(0.01)
        times = [t for t, m in link.calls if m["id"] == iid]
        assert [round(t - times[0], 6) for t in times] == [0, 1, 3]
        assert all(m["args"]["turn"] is None and m["args"]["current_turn"] for _, m in link.calls)
        item = lab.inbox.by_id[iid]
        assert item.reason == "turn_moved" and item.receipt["outcome"] == "refused"
        assert item.receipt["message"] == inbox_core.UNKNOWN_TURN
        assert lab.inbox.state_text(item) == "failed: turn_moved"


async def test_a_retry_of_an_interrupted_send_behind_a_held_lock_is_not_confirmed_and_runs_once(tmp, autojump_clock):
    """Issue 27, B3: a phone send whose receipt never came (`unknown`) may have run. Its Retry while a rename
    holds the conversation answers `unknown` (not confirmed) — never `refused busy`, which would say it did
    not run — and the recorded request is resumed, unchanged, once the lock is let go: one request id, the
    same body each time it is forwarded."""
    def answer(msg):
        if msg["op"] == "send" and sum(1 for _, m in link.calls if m["op"] == "send") == 1:
            return {"request_id": msg["id"], "op": "send", "outcome": "unknown", "reason": "link"}
        return {"request_id": msg["id"], "op": msg["op"], "outcome": "sent" if msg["op"] == "send" else "done",
                "turn": 2 if msg["op"] == "send" else None}
    async with api_lab(tmp, []) as lab:
        link = FakeLink(answer)
        add_member(lab.hub, "laptop", link, member_views())
        body = {"request_id": rid(), "machine": "laptop", "agent": "desk", "conversation": "c", "text": "hi", "turn": 1}
        first = await lab.post_json("/api/send", body)
        assert first["outcome"] == "unknown"
        link.delay = 20.0  # the rename below holds the conversation 20 s
        async with trio.open_nursery() as n:
            n.start_soon(lab.post_json, "/api/agents/laptop/desk/conversations/c/rename",
                         {"request_id": rid(), "title": "Renamed"})
            while not lab.hub.locks.locked(("laptop", "desk", "c")):
                await trio.sleep(0.01)
            retry = await lab.post_json("/api/send", body)
            assert (retry["outcome"], retry["replay"]) == ("unknown", True), retry
            link.delay = 0.0
        with trio.fail_after(120):
            while sum(1 for _, m in link.calls if m["op"] == "send") < 2:
                await trio.sleep(0.1)
        sends = [m for _, m in link.calls if m["op"] == "send"]
        assert [m["id"] for m in sends] == [body["request_id"]] * 2 and sends[0]["args"] == sends[1]["args"]
        assert lab.inbox.by_id[body["request_id"]].state == "running"  # sent; done when its turn ends
