"""Writes through the bridge to a real SDK agent, on virtual time (features B2–B9, O, R3, C3).

The journal runs inline here (same SQL, no worker thread) so autojump_clock's times stay exact.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from collie.bridge import writer as writer_mod
from collie.bridge.locks import STOP_WAIT
from collie.bridge.panes import chat_items
from collie.bridge.writer import Writer
from collie.bridge.writes import WriteRequest
from collie.crew.config import AgentConfig
from collie.crew.receipts import DECIDED, MAY_BE_APPLIED, NOT_ACCEPTED, NOT_CERTAIN, NOT_CONFIRMED
from collie.crew.sdk.server import Response
from tests.livelab import InlineJournal, agent, bridge_for, writer_lab


def rid() -> str:
    return str(uuid.uuid4())


async def forever(pane, text):
    await trio.sleep_forever()


setup = writer_lab  # a real agent `desk`, a bridge and a writer with an inline journal


def writes_seen(collie, suffix):
    return [c for c in collie.recorder.calls if c[1] == "POST" and c[2].endswith(suffix)]


def send(text, turn, request_id=None):
    return WriteRequest(request_id=request_id or rid(), op="send", agent="desk", conversation="c", text=text, turn=turn)


async def test_send_is_sent_once_and_a_repeat_returns_the_stored_receipt(tmp, autojump_clock):
    """B2, B3: receipt `sent` with the new turn; a repeat is the stored receipt and reaches nothing."""
    async with setup(tmp) as (collie, pane, b, w):
        req = send("hello", 0)
        first = await w.write(req)
        assert (first.outcome, first.turn) == ("sent", 1)
        again = await w.write(req)
        assert again.outcome == "sent" and again.replay and again.turn == 1
        assert len(writes_seen(collie, "/send")) == 1
        other = await w.write(send("other text", 0, request_id=req.request_id))
        assert other.reason == "conflict" and len(writes_seen(collie, "/send")) == 1
        user = [i for i in collie._core.conv("c").items.values() if i["kind"] == "user"]
        assert [(u["text"], u["request_id"]) for u in user] == [("hello", req.request_id)]


async def test_the_line_is_replaced_once_the_agent_echoes_it(tmp, autojump_clock):
    """C3: the line shows with a clock until the agent's own copy arrives (effective, B3)."""
    async with setup(tmp) as (collie, pane, b, w):
        req = send("hello", 0)
        await w.write(req)
        await trio.sleep(0.5)  # the bridge reads the agent's new items (poked after the write)
        assert w.recent_sends("desk", "c") == []
        assert any(i.get("request_id") == req.request_id for i in b.items("desk", "c"))


async def test_lock_busy_at_once_and_stop_goes_through_after_its_wait(tmp, autojump_clock, monkeypatch):
    """B7: while a send hangs, steer and answers are refused busy at once; Stop waits 10 s then goes through."""
    monkeypatch.setattr(writer_mod, "WRITE_TIMEOUT", 30.0)
    async with setup(tmp, on_send=forever) as (collie, pane, b, w):
        assert (await w.write(send("go", 0))).outcome == "sent"  # a turn now runs
        inner = collie.handle

        async def slow(req):
            if req.path.endswith("/send"):
                await trio.sleep(60)  # the agent hangs on this send
            return await inner(req)

        collie.handle = slow
        results = {}
        async with trio.open_nursery() as n:
            async def hang():
                results["send"] = (await w.write(send("hang", 1)), trio.current_time())

            n.start_soon(hang)
            await trio.sleep(1)
            t0 = trio.current_time()
            steer = await w.write(WriteRequest(request_id=rid(), op="steer", agent="desk", conversation="c",
                                               text="faster", turn=1))
            assert steer.reason == "busy" and trio.current_time() == t0
            stop = await w.write(WriteRequest(request_id=rid(), op="abort", agent="desk", conversation="c", turn=1))
            assert stop.outcome == "stopped"
            assert trio.current_time() - t0 == pytest.approx(STOP_WAIT)
        rec, at = results["send"]
        assert rec.outcome == "unknown" and at - t0 == pytest.approx(29.0)


async def test_unknown_then_retry_applies_once(tmp, autojump_clock, monkeypatch):
    """O: `Not certain the answer arrived` → Retry sends the same request id; the agent applies it once."""
    async with setup(tmp) as (collie, pane, b, w):
        inner = collie.handle
        lost = {"n": 1}

        async def lose_reply(req):
            answer = await inner(req)
            if req.path.endswith("/send") and lost["n"]:
                lost["n"] -= 1
                await trio.sleep(60)  # applied, but the reply never comes back in time
            return answer

        collie.handle = lose_reply
        req = send("once", 0)
        first = await w.write(req)
        assert first.outcome == "unknown"
        retry = await w.write(req)
        assert retry.outcome == "sent" and retry.replay
        user = [i for i in collie._core.conv("c").items.values() if i["kind"] == "user"]
        assert [u["request_id"] for u in user] == [req.request_id]


async def test_recovery_resolves_unknowns_by_itself(tmp, autojump_clock):
    """Nothing lost: a request left `unknown` is resolved in the background under its own id."""
    async with setup(tmp) as (collie, pane, b, w):
        inner = collie.handle
        state = {"drop": True}

        async def drop_once(req):
            if req.path.endswith("/send") and state["drop"]:
                state["drop"] = False
                await trio.sleep(60)  # never answered, never applied
            return await inner(req)

        collie.handle = drop_once
        req = send("eventually", 0)
        assert (await w.write(req)).outcome == "unknown"
        await trio.sleep(writer_mod.RECOVER_EVERY + 1)
        assert (await w.write(req)).outcome == "sent"
        user = [i for i in collie._core.conv("c").items.values() if i["kind"] == "user"]
        assert [u["text"] for u in user] == ["eventually"]


async def test_an_idle_writer_does_not_look_for_open_requests_again(tmp, autojump_clock):
    """Issue 16 (idle CPU): once a look found no request left open, the recovery loop reads the journal
    again only after something was journaled — idle, a minute passes with no journal call (it was a
    worker-thread hop and a query every 5 s)."""
    async with setup(tmp) as (collie, pane, b, w):
        await trio.sleep(writer_mod.RECOVER_EVERY + 1)
        calls = w.journal.calls
        await trio.sleep(60)
        assert w.journal.calls == calls
        assert (await w.write(send("hello", 0))).outcome == "sent"


async def test_answer_flow_single_use_and_r3(tmp, autojump_clock):
    """B5, O, R3: accepted once; a second answer is `answered` without reaching the agent; an ask the
    agent decided with no tap leaves one chat line."""
    async with setup(tmp) as (collie, pane, b, w):
        result = {}
        async with trio.open_nursery() as n:
            async def ask():
                result["a"] = await pane.ask(kind="permission", title="Deploy?", tool="deploy", options=[
                    {"id": "yes", "role": "allow"}, {"id": "always", "role": "always_allow"}, {"id": "no", "role": "deny"}])

            n.start_soon(ask)
            while not b.status("desk").waiting_count:
                await b.wait_changed()
            view = b.conversations("desk")[0].asks[0]
            confirm = await w.write(WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id,
                                                 digest=view.digest, option_ids=["always"]))
            assert confirm.reason == "confirm" and writes_seen(collie, "/answer") == []
            ok = await w.write(WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id,
                                            digest=view.digest, option_ids=["yes"]))
            assert ok.outcome == "accepted" and ok.text is None and ok.channel == "program" and ok.digest == view.digest
        assert result["a"].option_ids == ["yes"]
        late = await w.write(WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id,
                                          digest=view.digest, option_ids=["no"]))
        assert late.outcome == "answered" and len(writes_seen(collie, "/answer")) == 1
        # an ask the agent decides by itself, untapped: the R3 line
        async with trio.open_nursery() as n:
            n.start_soon(lambda: pane.ask(kind="text", title="Name it"))
            while not b.status("desk").waiting_count:
                await b.wait_changed()
            n.cancel_scope.cancel()  # the agent decided without the human
        await trio.sleep(1)
        tapped = await w.journal.run(w.journal.tapped_asks, "desk")
        lines = [i["line"] for i in chat_items(b.items("desk", "c"), tapped) if i.get("line")]
        assert lines == ["Decided in the durable agent: Name it"]


async def test_a_retry_that_finds_the_ask_decided(tmp, autojump_clock):
    """O: a retry of an unknown answer that finds the ask decided keeps its own row; answered → may be applied."""
    async with setup(tmp) as (collie, pane, b, w):
        inner = collie.handle

        async def lose(req):
            if req.path.endswith("/answer"):
                await trio.sleep(60)
            return await inner(req)

        async with trio.open_nursery() as n:
            n.start_soon(lambda: pane.ask(kind="text", title="T", expires_in=100))
            while not b.status("desk").waiting_count:
                await b.wait_changed()
            view = b.conversations("desk")[0].asks[0]
            collie.handle = lose
            req = WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id, digest=view.digest,
                               answer_text="x")
            assert (await w.write(req)).outcome == "unknown"
            n.cancel_scope.cancel()  # the agent decides meanwhile
        collie.handle = inner
        retry = await w.write(req)
        assert retry.outcome == "decided" and retry.text == DECIDED


async def test_writes_to_one_session_never_interleave(tmp, autojump_clock):
    """B7: concurrent send/steer/answer/stop on one session: no two reach the agent at once; stop lands
    within its limit."""
    async with setup(tmp, on_send=forever) as (collie, pane, b, w):
        inner = collie.handle
        windows = []

        async def timed(req):
            if req.method == "POST":
                start = trio.current_time()
                await trio.sleep(0.5)
                answer = await inner(req)
                windows.append((start, trio.current_time(), req.path))
                return answer
            return await inner(req)

        collie.handle = timed
        receipts = []
        async with trio.open_nursery() as n:
            for i in range(20):
                op = ["send", "steer", "abort", "send"][i % 4]

                async def one(op=op, i=i):
                    t0 = trio.current_time()
                    turn = collie._core.conv("c").turn
                    req = WriteRequest(request_id=rid(), op=op, agent="desk", conversation="c",
                                       text=f"t{i}" if op != "abort" else None, turn=turn)
                    rec = await w.write(req)
                    receipts.append((op, rec, trio.current_time() - t0))

                n.start_soon(one)
                await trio.sleep(0.2)
        non_stop = sorted((s, e) for s, e, p in windows if not p.endswith("/abort"))
        for (s1, e1), (s2, e2) in zip(non_stop, non_stop[1:]):
            assert s2 >= e1, "two writes reached the agent at once"
        for op, rec, took in receipts:
            if op == "abort":
                assert took <= STOP_WAIT + writer_mod.WRITE_TIMEOUT
            else:
                assert rec.outcome in ("sent", "queued", "refused")
        assert any(rec.reason == "busy" for op, rec, _ in receipts)


async def test_a_double_tap_sends_once_and_both_get_the_receipt(tmp, autojump_clock):
    """Two concurrent writes with one request id (a double tap, or the inbox and the phone at once):
    the agent sees one request; both callers get the same outcome; nothing raises."""
    async with setup(tmp) as (collie, pane, b, w):
        req = send("twice", 0)
        got = []
        async with trio.open_nursery() as n:
            for _ in range(3):
                async def one():
                    got.append(await w.write(req))
                n.start_soon(one)
        assert sorted(r.outcome for r in got) == ["sent", "sent", "sent"]
        assert sum(r.replay for r in got) == 2 and len(writes_seen(collie, "/send")) == 1
        assert len(w.inflight) == 0


async def test_a_member_keeps_its_own_lock_under_the_leads(tmp, autojump_clock, monkeypatch):
    """crew.md §3 (issue 8.3): on a member (`caller_locked`: the lead holds the session's lock), a
    write the lead gave up waiting for may still be in flight here — a card answer for that
    conversation is then refused `busy` at once and reaches nothing; a Stop, which already waited at
    the lead, reaches the agent at once instead of waiting a second time."""
    monkeypatch.setattr(writer_mod, "WRITE_TIMEOUT", 30.0)
    async with setup(tmp) as (collie, pane, b, w):
        inner = collie.handle

        async def slow(req):
            answer = await inner(req)
            if req.path.endswith("/rename"):
                await trio.sleep(20)  # applied at once, answered late
            return answer

        collie.handle = slow
        async with trio.open_nursery() as n:
            n.start_soon(lambda: pane.ask(kind="text", title="Name it"))
            while not b.status("desk").waiting_count:
                await b.wait_changed()
            view = b.conversations("desk")[0].asks[0]
            turn = b.conversations("desk")[0].turn
            n.start_soon(lambda: w.write(WriteRequest(request_id=rid(), op="rename", agent="desk", conversation="c",
                                                      title="Renamed"), caller_locked=True))
            await trio.sleep(1)
            t0 = trio.current_time()
            busy = await w.write(WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id,
                                              digest=view.digest, answer_text="x"), caller_locked=True)
            assert busy.reason == "busy" and trio.current_time() == t0 and writes_seen(collie, "/answer") == []
            await w.write(WriteRequest(request_id=rid(), op="abort", agent="desk", conversation="c", turn=turn),
                          caller_locked=True)
            assert [t - t0 for t, _m, _p in writes_seen(collie, "/abort")] == [pytest.approx(0, abs=0.1)]
            n.cancel_scope.cancel()


STATUS_OF = {"not_found": 404, "unsupported": 404, "bad_request": 400, "conflict": 400, "version": 409, "internal": 500}


def refuse_writes(collie, code: str):
    """The agent answers every write with the wire error `code` (wire §1)."""
    inner = collie.handle

    async def handle(req):
        if req.method == "POST" and req.path.startswith("/v1/"):
            collie.recorder.calls.append((trio.current_time(), req.method, req.path))
            return Response(STATUS_OF[code], {"error": code, "message": f"the agent says {code}"})
        return await inner(req)

    collie.handle = handle
    return inner


@pytest.mark.parametrize(("code", "outcome", "reason", "text"), [
    ("not_found", "refused", "not_found", "Not found: the agent says not_found"),
    ("unsupported", "refused", "unsupported", "This durable agent does not offer that: the agent says unsupported"),
    ("bad_request", "refused", "bad_request", "The durable agent could not read the request: the agent says bad_request"),
    ("version", "refused", "version", "The durable agent speaks another wire version: the agent says version"),
    ("conflict", "unknown", "conflict", MAY_BE_APPLIED),
    ("internal", "unknown", "internal", NOT_CONFIRMED),
])
async def test_agent_error_answers_to_a_send_get_their_own_receipts(tmp, autojump_clock, code, outcome, reason, text):
    """O, B3, wire §1 (issue 8.5): an agent that answers a send with an error code did answer — the
    receipt names that code, never `unreachable`. A refusal means it did nothing, and a repeat is
    the stored receipt; `conflict` (the id is the agent's with another body: an earlier form of this
    request may have run) is a final `May already be applied. Check the chat.`; `internal` (not
    known what it did) stays open and a Retry resends it under its id."""
    async with setup(tmp) as (collie, pane, b, w):
        inner = refuse_writes(collie, code)
        req = send("hello", 0)
        first = await w.write(req)
        assert (first.outcome, first.reason, first.text) == (outcome, reason, text)
        assert len(writes_seen(collie, "/send")) == 1
        collie.handle = inner  # the agent is well again
        again = await w.write(req)
        if code == "internal":
            assert again.outcome == "sent" and len(writes_seen(collie, "/send")) == 2
        else:
            assert again.replay and (again.outcome, again.reason) == (outcome, reason)
            assert len(writes_seen(collie, "/send")) == 1
        if code == "conflict":  # the phone's line: `Sending, not confirmed`, never `Not sent`
            assert [line["state"] for line in w.recent_sends("desk", "c")] == ["not_confirmed"]


@pytest.mark.parametrize(("code", "outcome", "reason", "text"), [
    ("not_found", "not_open", None, NOT_ACCEPTED),
    ("unsupported", "refused", "unsupported", "This durable agent does not offer that: the agent says unsupported"),
    ("conflict", "unknown", "conflict", MAY_BE_APPLIED),
    ("internal", "unknown", "internal", NOT_CERTAIN),
])
async def test_agent_error_answers_to_a_card_answer_use_the_o_table(tmp, autojump_clock, code, outcome, reason, text):
    """O (issue 8.5): an answer the agent refuses with an error code gets the O table's row where one
    fits (no such open ask: `Not accepted. The ask may come back in a moment.`), keeps
    `channel: program` and its digest, and is never `unreachable`."""
    async with setup(tmp) as (collie, pane, b, w):
        async with trio.open_nursery() as n:
            n.start_soon(lambda: pane.ask(kind="text", title="Name it"))
            while not b.status("desk").waiting_count:
                await b.wait_changed()
            view = b.conversations("desk")[0].asks[0]
            refuse_writes(collie, code)
            got = await w.write(WriteRequest(request_id=rid(), op="answer", agent="desk", ask_id=view.id,
                                             digest=view.digest, answer_text="x"))
            assert (got.outcome, got.reason, got.text) == (outcome, reason, text)
            assert got.channel == "program" and got.digest == view.digest
            n.cancel_scope.cancel()


async def test_a_send_after_the_view_shows_the_last_sends_turn_reads_nothing_first(tmp, autojump_clock):
    """Issue 15.1 (B4): before a write the bridge makes sure its view covers the previous write to the
    conversation. When the view already shows the turn the previous send started (the bridge read
    the agent after it), no extra state read goes out first."""
    async with setup(tmp, on_send=lambda pane, text: pane.reply("ok")) as (collie, pane, b, w):
        first = await w.write(send("one", 0))
        assert first.outcome == "sent"
        await trio.sleep(0.5)  # the poller, poked by the write, reads the new turn
        assert b.readers["desk"].conversations["c"].turn == first.turn
        state_reads = len([c for c in collie.recorder.calls if c[1] == "GET" and c[2].startswith("/v1/state")])
        second = await w.write(send("two", first.turn))
        assert second.outcome == "sent" and second.turn == first.turn + 1
        after = len([c for c in collie.recorder.calls if c[1] == "GET" and c[2].startswith("/v1/state")])
        assert after == state_reads  # nothing read between the phone's send and the agent's receipt


async def test_a_write_in_the_moment_an_agent_restarts_waits_for_its_hello(tmp, autojump_clock):
    """W3, W4, issue 8: right after the agent restarted, before the bridge has read its hello again (the
    poller is still in its back-off), its capabilities are not known. A send then is not refused
    `unsupported` ("does not offer send" — it does): the writer says hello itself, reads the state, and the
    send reaches the new instance once, without waiting for the poller. With the agent still gone the same
    send is refused `unreachable` at once (nothing reached it), never `unsupported`."""
    sock = tmp / "a.sock"
    async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
        w = Writer(b, InlineJournal(tmp / "journal.sqlite"))
        async with trio.open_nursery() as n:
            first_gone = trio.Event()

            async def first():
                async with agent(sock) as collie:
                    collie.conversation("c", title="Chat")
                    collie.ready()
                    await first_gone.wait()

            n.start_soon(first)
            while b.status("desk").status != "ready":
                await b.wait_changed()
            first_gone.set()
            while b.status("desk").status != "unreachable":
                await b.wait_changed()
            t0 = trio.current_time()
            down = await w.write(send("while down", 0))
            assert (down.outcome, down.reason) == ("refused", "unreachable"), down
            assert trio.current_time() == t0
            async with agent(sock) as again:
                again.conversation("c", title="Chat")
                again.ready()
                assert b.readers["desk"].hello is None  # the bridge has not greeted the new instance yet
                t1 = trio.current_time()
                got = await w.write(send("after the restart", 0))
                assert (got.outcome, got.turn) == ("sent", 1), got
                assert trio.current_time() - t1 < 1.0  # not after the poller's back-off (1 s)
                posts = [c[2] for c in again.recorder.calls if c[1] == "POST"]
                assert posts[0] == "/hello" and posts.count("/v1/conversations/c/send") == 1, posts
                n.cancel_scope.cancel()
