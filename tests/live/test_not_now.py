"""Refusals that say "not now", and refusals that must be remembered, on virtual time (issue 8; features
B2, B3, B7, I1, I4, I5, O).

A real SDK agent on a socket, a real Bridge, Writer and Inbox (their SQL run inline so the clock stays
virtual). Faults are injected where the bridge meets the agent: the next write's connection is refused
(as in the moment an agent restarts), exactly as the client reports it.
"""

from __future__ import annotations

import uuid
from contextlib import asynccontextmanager

import pytest
import trio

from collie.bridge.client import AgentUnreachable
from collie.bridge.writes import WriteRequest
from collie.lead.inbox import core as inbox_core
from tests.livelab import cleanup, inbox_lab, short_dir


@pytest.fixture
def tmp():
    d = short_dir()
    yield d
    cleanup(d)


def rid() -> str:
    return str(uuid.uuid4())


class Gate:
    """The agent's send handler: records each text; a turn runs until the gate opens."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.open = trio.Event()

    async def on_send(self, pane, text):
        self.texts.append(text)
        await self.open.wait()
        pane.reply(f"got {text}")


def refuse_next_write(b, suffix: str) -> list[float]:
    """Make the next POST ending in `suffix` fail as a refused connection (nothing reaches the agent);
    returns the list the virtual time of that refusal is put in."""
    client = b.pollers["a0"].client
    inner = client.request
    when: list[float] = []

    async def request(method, path, **kw):
        if method == "POST" and path.endswith(suffix) and not when:
            when.append(trio.current_time())
            raise AgentUnreachable("connection-refused", "nobody listens on the socket (injected)")
        return await inner(method, path, **kw)

    client.request = request
    return when


@asynccontextmanager
async def lab(tmp, gate: Gate):
    async with inbox_lab(tmp, on_send=gate.on_send) as got:
        yield got
        gate.open.set()


def send(text: str, request_id: str | None = None, turn: int | None = None) -> WriteRequest:
    return WriteRequest(request_id=request_id or rid(), op="send", agent="a0", conversation="c", text=text, turn=turn)


async def test_a_queued_send_that_reaches_nothing_waits_and_runs_later(tmp, autojump_clock):
    """I4, I5, issue 8 (campaign seeds 35, 109): a queued send acknowledged `queued`, dispatched in the
    moment its agent cannot be reached (the connection refused: it is restarting), is not dropped as
    `failed unreachable`. Nothing reached the agent, so the item waits `approved`, its inbox pauses 1 s,
    and then it runs once; its sender never sees `failed`."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox):
        states: list[tuple[str, str]] = []
        inbox.on_change.append(lambda item: states.append((item.id, item.state)))
        first = await inbox.submit("local", send("first"), sender=None)
        assert first.outcome == "sent"
        second = await inbox.submit("local", send("second"), sender=None)
        assert second.outcome == "queued"
        refused_at = refuse_next_write(b, "/send")
        gate.open.set()  # the first turn ends: the second is dispatched, and its connection is refused
        with trio.move_on_after(60):
            while (await inbox.get(second.request_id)).state not in ("done", "failed"):
                await trio.sleep(0.01)
        assert gate.texts == ["first", "second"]  # once each
        mine = [s for i, s in states if i == second.request_id]
        assert "failed" not in mine and mine[-1] == "done", mine
        assert "approved" in mine[mine.index("running"):], mine  # held after the refused dispatch
        ran_again = [c[0] for c in collie.recorder.calls if c[2] == "/v1/conversations/c/send"][-1]
        assert ran_again - refused_at[0] == pytest.approx(inbox_core.RETRY_MIN, abs=inbox_core.TICK)
        assert (await inbox.get(second.request_id)).receipt["outcome"] == "sent"


async def test_a_send_passing_through_that_reaches_nothing_is_refused_and_never_runs(tmp, autojump_clock):
    """B3, I1: the same failure on a phone send that passes straight through an empty inbox is shown to
    the phone at once as `refused unreachable` (true: nothing reached the agent), so it ends `failed`
    and never runs later; a repeat of its id answers that refusal (`replay`)."""
    gate = Gate()
    gate.open.set()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox):
        refuse_next_write(b, "/send")
        req = send("hello", turn=0)
        got = await inbox.submit("local", req, sender=None)
        assert (got.outcome, got.reason) == ("refused", "unreachable")
        await trio.sleep(30)
        again = await inbox.submit("local", req, sender=None)
        assert (again.outcome, again.reason, again.replay) == ("refused", "unreachable", True)
        assert gate.texts == [] and (await inbox.get(req.request_id)).state == "failed"


async def test_a_session_write_refused_before_sending_is_remembered(tmp, autojump_clock):
    """B2, B7, C7, phone-api.md "Receipts", issue 8: a refusal is a receipt. A button tapped while it is
    busy is refused (plan), a steer while a send holds the session is refused `busy` (the lock), a stop
    while the agent is down is refused `unreachable`; repeating each request id later — when the button
    is free, the session idle, the agent back — answers the same refusal with `replay: true`, and
    nothing reaches the agent."""
    gate = Gate()
    async with lab(tmp, gate) as (collie, pane, b, writer, inbox):
        assert (await inbox.submit("local", send("hang", turn=0), sender=None)).outcome == "sent"  # a turn runs
        pane.set_actions([{"id": "ship", "label": "Ship", "busy": True}])
        await b.pollers["a0"].read_now()
        tap = WriteRequest(request_id=rid(), op="action", agent="a0", conversation="c", action_id="ship", turn=1)
        assert (await writer.write(tap)).reason == "busy"
        inner = collie.handle

        async def slow(req):
            if req.path.endswith("/steer") and not gate.open.is_set():
                await trio.sleep(5)
            return await inner(req)
        collie.handle = slow
        steer_now = WriteRequest(request_id=rid(), op="steer", agent="a0", conversation="c", text="faster", turn=1)
        steer = WriteRequest(request_id=rid(), op="steer", agent="a0", conversation="c", text="now", turn=1)
        async with trio.open_nursery() as n:
            n.start_soon(writer.write, steer_now)  # holds the session 5 s
            await trio.sleep(1)
            assert (await writer.write(steer)).reason == "busy"
        refuse_next_write(b, "/abort")
        stop = WriteRequest(request_id=rid(), op="abort", agent="a0", conversation="c", turn=1)
        assert (await writer.write(stop)).reason == "unreachable"
        pane.set_actions([{"id": "ship", "label": "Ship"}])
        await b.pollers["a0"].read_now()
        posted = len([c for c in collie.recorder.calls if c[1] == "POST"])
        for req, reason in ((tap, "busy"), (steer, "busy"), (stop, "unreachable")):
            again = await writer.write(req)
            assert (again.outcome, again.reason, again.replay) == ("refused", reason, True), again
        assert len([c for c in collie.recorder.calls if c[1] == "POST"]) == posted  # nothing reached the agent
