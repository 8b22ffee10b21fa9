"""Session writes through the phone API, on virtual time (features B7, C7; crew.md §3; issue 8.3, 8.6).

Each test drives the documented routes (`POST /api/send`, `/api/ask/<id>`, the session routes) of a
lead whose bridge talks to a real SDK agent over a socket — or, for a member's agent, to a member
link that answers like a slow member.
"""

from __future__ import annotations

import pytest
import trio

from collie.crew.config import AgentConfig
from collie.crew.receipts import MOVED_ON
from tests.apilab import FakeLink, add_member, api_lab, rid
from tests.livelab import agent

SLOW = 5.0  # how long the agent takes to answer a send it already applied


def posts(collie, suffix: str) -> list[float]:
    return [t for t, m, p in collie.recorder.calls if m == "POST" and p.endswith(suffix)]


async def asks_then_waits(pane, text):
    """A turn that asks permission at once and then works on."""
    await pane.ask(kind="permission", title="Run the migration?", tool="migrate",
                   options=[{"id": "yes", "role": "allow"}, {"id": "no", "role": "deny"}])
    await trio.sleep_forever()


def slow_sends(collie, seconds: float) -> None:
    """The agent applies a send at once (its turn starts and asks) but answers it `seconds` later."""
    inner = collie.handle

    async def handle(req):
        answer = await inner(req)
        if req.method == "POST" and req.path.endswith("/send"):
            await trio.sleep(seconds)
        return answer

    collie.handle = handle


async def test_while_a_send_is_in_flight_answers_steer_and_actions_are_busy_and_stop_waits(tmp, autojump_clock):
    """B7, crew.md §3 (issue 8.3): while the agent has not yet answered a send, a card answer for an
    ask of that conversation, a steer and an agent button are refused `busy` at once and reach
    nothing; Stop waits for the send's answer and then goes through."""
    sock = tmp / "a.sock"
    async with agent(sock, on_send=asks_then_waits) as collie:
        pane = collie.conversation("c", title="Chat")
        pane.set_actions([{"id": "ship", "label": "Ship", "icon": "send"}])
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab:
            slow_sends(collie, SLOW)
            got = {}
            async with trio.open_nursery() as n:
                async def send():
                    got["send"] = await lab.post_json("/api/send", {
                        "request_id": rid(), "agent": "desk", "conversation": "c", "text": "migrate", "turn": 0})
                    got["send_at"] = trio.current_time()

                t_send = trio.current_time()
                n.start_soon(send)
                while not lab.bridge.conversations("desk")[0].asks:  # the agent's new turn asks at once
                    await lab.bridge.wait_changed()
                pane_state = await (await lab.get("/api/agents/local/desk/conversations/c")).get_json()
                ask, turn = pane_state["ask"], pane_state["turn"]
                assert turn == 1 and "send" not in got  # the send is still in flight
                t0 = trio.current_time()
                answer = await lab.post_json(f"/api/ask/{ask['id']}", {
                    "request_id": rid(), "agent": "desk", "digest": ask["digest"], "answer": {"option_ids": ["yes"]}})
                steer = await lab.post_json("/api/agents/local/desk/conversations/c/steer",
                                            {"request_id": rid(), "text": "faster", "turn": turn})
                button = await lab.post_json("/api/agents/local/desk/conversations/c/actions/ship",
                                             {"request_id": rid(), "turn": turn})
                assert [(r["outcome"], r["reason"]) for r in (answer, steer, button)] == [("refused", "busy")] * 3
                assert trio.current_time() == t0  # at once
                stop = await lab.post_json("/api/agents/local/desk/conversations/c/stop",
                                           {"request_id": rid(), "turn": turn})
                assert stop["outcome"] == "stopped"
                assert got["send"]["outcome"] == "sent" and got["send_at"] - t_send == pytest.approx(SLOW)
                assert posts(collie, "/abort")[0] >= got["send_at"]  # Stop waited for the send's answer
            assert posts(collie, "/answer") == [] and posts(collie, "/steer") == [] and posts(collie, "/ship") == []


def member_views(conversation: dict) -> list[dict]:
    hello = {"wire": {"min": 1, "max": 1}, "runtime": "pi", "instance": "i1",
             "caps": ["asks", "send", "steer", "abort", "actions"]}
    state = {"rev": 1, "instance": "i1", "conversations": [conversation]}
    return [{"name": "desk", "status": {"status": "ready", "transport": "socket", "local": True},
             "hello": hello, "state": state}]


ASK = {"id": "a-1", "kind": "permission", "title": "Run the migration?", "tool": "migrate",
       "options": [{"id": "yes", "role": "allow"}, {"id": "no", "role": "deny"}]}


async def test_a_members_agent_is_locked_the_same_way(tmp, autojump_clock):
    """B7, crew.md §3 (issue 8.3): the lead holds one lock per session of a member's agent too — a
    card answer while the member has not answered a send is refused `busy` at once and is not
    forwarded; Stop waits for the send's receipt, then is forwarded."""
    async with api_lab(tmp, []) as lab:
        def receipt(msg):
            op = msg["op"]
            outcome = {"send": "sent", "abort": "stopped"}.get(op, "done")
            return {"request_id": msg["id"], "op": op, "outcome": outcome, "turn": 2 if op == "send" else None}

        link = FakeLink(receipt, delay=SLOW)
        conv = {"id": "c", "title": "Chat", "state": "working", "turn": 1, "asks": [],
                "actions": [{"id": "ship", "label": "Ship"}]}
        member = add_member(lab.hub, "laptop", link, member_views(conv))
        got = {}
        async with trio.open_nursery() as n:
            async def send():
                got["send"] = await lab.post_json("/api/send", {
                    "request_id": rid(), "machine": "laptop", "agent": "desk", "conversation": "c",
                    "text": "migrate", "turn": 1})
                got["send_at"] = trio.current_time()

            t_send = trio.current_time()
            n.start_soon(send)
            while not link.calls:
                await trio.sleep(0.01)
            # the member's agent raised an ask in that conversation; the member's new view arrives
            add_member(lab.hub, "laptop", link, member_views({**conv, "asks": [ASK]}))
            ask = (await (await lab.get("/api/agents/laptop/desk/conversations/c")).get_json())["ask"]
            t0 = trio.current_time()
            answer = await lab.post_json(f"/api/ask/{ask['id']}", {
                "request_id": rid(), "machine": "laptop", "agent": "desk", "digest": ask["digest"],
                "answer": {"option_ids": ["yes"]}})
            steer = await lab.post_json("/api/agents/laptop/desk/conversations/c/steer",
                                        {"request_id": rid(), "text": "faster", "turn": 1})
            assert [(r["outcome"], r["reason"]) for r in (answer, steer)] == [("refused", "busy")] * 2
            assert trio.current_time() == t0
            stop = await lab.post_json("/api/agents/laptop/desk/conversations/c/stop", {"request_id": rid(), "turn": 1})
            assert stop["outcome"] == "stopped"
        assert got["send"]["outcome"] == "sent" and got["send_at"] - t_send == pytest.approx(SLOW)
        ops = [(msg["op"], at - t_send) for at, msg in link.calls]
        assert ops == [("send", 0.0), ("abort", pytest.approx(SLOW))]
        assert member.online


async def forever(pane, text):
    await trio.sleep_forever()


@pytest.mark.parametrize("route", ["stop", "actions/ship", "steer"])
async def test_stop_buttons_and_steer_must_quote_the_turn(tmp, autojump_clock, route):
    """wire §6, B7, C7 (issue 8.6): a session write without `turn` is a 400 with a reason; one
    quoting a turn that has passed is refused `turn_moved` — `The conversation moved on, so the
    action did not run.` for Stop and buttons — and nothing reaches the agent; the current turn goes."""
    sock = tmp / "a.sock"
    async with agent(sock, on_send=forever) as collie:
        pane = collie.conversation("c", title="Chat")
        pane.set_actions([{"id": "ship", "label": "Ship", "icon": "send"}])
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab:
            for turn in (0, 1):  # turn 1 runs, is stopped; turn 2 runs: a phone that saw turn 1 is stale
                sent = await lab.post_json("/api/send", {"request_id": rid(), "agent": "desk", "conversation": "c",
                                                         "text": f"go {turn}", "turn": turn})
                assert sent["outcome"] == "sent"
                if turn == 0:
                    stopped = await lab.post_json("/api/agents/local/desk/conversations/c/stop",
                                                  {"request_id": rid(), "turn": 1})
                    assert stopped["outcome"] == "stopped"
                    while lab.bridge.conversations("desk")[0].state == "working":
                        await lab.bridge.wait_changed()
            before = len(posts(collie, "/abort"))
            path = f"/api/agents/local/desk/conversations/c/{route}"
            extra = {"text": "faster"} if route == "steer" else {}
            missing = await lab.post(path, {"request_id": rid(), **extra})
            assert missing.status_code == 400
            assert "turn is required" in (await missing.get_json())["message"]
            stale = await lab.post_json(path, {"request_id": rid(), "turn": 1, **extra})
            assert (stale["outcome"], stale["reason"]) == ("refused", "turn_moved")
            if route != "steer":
                assert stale["text"] == MOVED_ON
            suffix = {"stop": "/abort", "actions/ship": "/actions/ship", "steer": "/steer"}[route]
            seen = len(posts(collie, suffix)) - (before if route == "stop" else 0)
            assert seen == 0  # nothing reached the agent
            current = await lab.post_json(path, {"request_id": rid(), "turn": 2, **extra})
            assert current["outcome"] in ("stopped", "done", "sent")
            assert len(posts(collie, suffix)) - (before if route == "stop" else 0) == 1
