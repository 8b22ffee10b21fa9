"""The fake member's agents and scripts, with no I/O (issue 28; wire-v1.md §4–§6, features B2–B5).

A fake agent answers a write as a durable agent would, and its receipts are true: a refusal changes
nothing; a request id is applied once. A script is checked before anything runs, and a mistake names
where it is."""

from __future__ import annotations

import json
import socket

import pytest
import trio

from collie.crew.receipts import REASONS
from collie.crew.wire import ask_digest
from collie.fixtures.member.link import FakeMember, shape_problem
from collie.fixtures.member.script import ScriptError, load_script, parse_script
from collie.fixtures.member.state import FakeAgent
from tests.crewlab import REPO

WALL = 1_796_000_000.0


def send(agent: FakeAgent, rid: str, text: str, turn: int, conv: str = "c1"):
    return agent.write({"request_id": rid, "op": "send", "agent": agent.name, "conversation": conv,
                        "text": text, "turn": turn}, WALL)


def test_a_send_with_the_current_turn_is_sent_recorded_and_answered():
    agent = FakeAgent("agent-1", 3, "i1", WALL)
    rec = send(agent, "r1", "hello", 1)
    assert (rec.outcome, rec.turn) == ("sent", 2)
    items = agent.items("c1", 0)["items"]
    assert [(i["kind"], i.get("text"), i.get("request_id")) for i in items] == [
        ("user", "hello", "r1"), ("reply", "You said: hello", None)]
    state = agent.state()
    assert state["conversations"][0]["turn"] == 2 and state["conversations"][0]["state"] == "idle"


def test_a_view_is_cut_as_a_real_members_and_an_inbox_send_quotes_the_agents_own_turn():
    """D1 (issue 28, crew.md §3 and §6, issue 32): past 200 open conversations the view keeps those that
    matter — waiting, working, then the newest — and says how many it left out; an inbox send
    (`current_turn: true`) quotes the agent's own turn of its conversation, in the view or left out, as
    the owning bridge does, so it is delivered, not refused `turn_moved`."""
    agent = FakeAgent("agent-1", 231, "i1", WALL)
    agent.raise_ask("c3", WALL, title="Deploy?")
    agent.begin_stream("c5", WALL)
    view = agent.view()
    kept = [c["id"] for c in view["state"]["conversations"]]
    assert len(kept) == 200 and view["left_out"] == 31
    assert kept[:2] == ["c3", "c5"] and "c1" not in kept and "c33" not in kept and "c34" in kept
    assert len(agent.state()["conversations"]) == 231  # the agent still has them all
    rec = agent.write({"request_id": "r1", "op": "send", "agent": "agent-1", "conversation": "c1", "text": "hi",
                       "turn": None, "current_turn": True}, WALL)
    assert (rec.outcome, rec.turn) == ("sent", 2)
    stale = agent.write({"request_id": "r2", "op": "send", "agent": "agent-1", "conversation": "c1",
                         "text": "again", "turn": 1, "current_turn": True}, WALL)  # the lead's view lagged
    assert (stale.outcome, stale.turn) == ("sent", 3)
    again = agent.write({"request_id": "r2", "op": "send", "agent": "agent-1", "conversation": "c1",
                         "text": "again", "turn": 1, "current_turn": True}, WALL)
    assert again.replay and again.turn == 3 and agent.conversation("c1").turn == 3  # applied once
    assert send(agent, "r3", "quoted", 1).reason == "turn_moved"  # without it, the quote is judged
    assert FakeAgent("agent-1", 200, "i1", WALL).view().get("left_out") is None


def test_the_cli_and_the_plugin_accept_the_same_member_shapes():
    """D5: a member of 0–100 agents with 0–1000 conversations each, the same through `FakeMember` (what the
    pytest plugin builds) as through the CLI's check; anything else is refused before anything starts."""
    assert shape_problem(100, 1000) is None and shape_problem(0, 0) is None
    assert shape_problem(2, 1001) == "--conversations is from 0 to 1000"
    assert shape_problem(101, 3) == "--agents is from 0 to 100"
    FakeMember("ws://127.0.0.1:1/crew/v1", "lab", "t" * 43, agents=1, conversations=1000)
    with pytest.raises(ValueError, match="conversations is from 0 to 1000"):
        FakeMember("ws://127.0.0.1:1/crew/v1", "lab", "t" * 43, agents=1, conversations=1001)


def test_refusals_change_nothing():
    agent = FakeAgent("agent-1", 1, "i1", WALL)
    before = json.dumps(agent.state())
    stale = send(agent, "r1", "hello", 7)
    assert (stale.outcome, stale.reason, stale.text) == ("refused", "turn_moved", REASONS["turn_moved"])
    assert send(agent, "r2", "x" * 2001, 1).reason == "too_long"
    assert send(agent, "r3", "hi", 1, conv="nope").reason == "closed"
    assert json.dumps(agent.state()) == before
    agent.raise_ask("c1", WALL, title="Deploy?")
    assert send(agent, "r4", "hello", 1).reason == "ask_open"
    assert agent.conversation("c1").turn == 1 and len(agent.items("c1", 0)["items"]) == 1  # the ask item only


def test_a_request_id_is_applied_once():
    agent = FakeAgent("agent-1", 1, "i1", WALL)
    first = send(agent, "r1", "hello", 1)
    again = send(agent, "r1", "hello", 1)
    assert again.replay and again.outcome == "sent" and again.turn == first.turn
    other = send(agent, "r1", "another body", 2)
    assert (other.outcome, other.reason) == ("unknown", "conflict")
    assert [i["kind"] for i in agent.items("c1", 0)["items"]] == ["user", "reply"]


def test_an_answer_needs_the_listed_asks_digest_and_an_offered_option():
    agent = FakeAgent("agent-1", 1, "i1", WALL)
    ask = agent.raise_ask("c1", WALL, title="Deploy?", options=["Yes", "No"])
    assert [o["id"] for o in ask["options"]] == ["yes", "no"]

    def answer(rid, digest, options):
        return agent.write({"request_id": rid, "op": "answer", "agent": "agent-1", "ask_id": ask["id"],
                            "digest": digest, "option_ids": options}, WALL)
    assert answer("a1", "0" * 64, ["yes"]).outcome == "changed"
    assert answer("a2", ask_digest(ask), ["maybe"]).outcome == "invalid"
    ok = answer("a3", ask_digest(ask), ["yes"])
    assert (ok.outcome, ok.channel, ok.text) == ("accepted", "program", None)
    assert agent.conversation("c1").asks == [] and agent.conversation("c1").state == "idle"
    assert [i.get("end") for i in agent.items("c1", 0)["items"] if i["kind"] == "ask"] == ["answered"]
    assert answer("a4", ask_digest(ask), ["yes"]).outcome == "not_open"


def test_a_streamed_turn_runs_until_its_last_chunk_and_stop_ends_it():
    agent = FakeAgent("agent-1", 1, "i1", WALL)
    rec = agent.write({"request_id": "r1", "op": "send", "conversation": "c1", "text": "go", "turn": 1}, WALL,
                      stream=True)
    assert rec.outcome == "sent" and agent.conversation("c1").state == "working"
    assert send(agent, "r2", "more", 2).outcome == "queued"  # a turn runs: kept for after it
    agent.stream("c1", "half", WALL)
    assert agent.conversation("c1").state == "working"
    agent.stream("c1", " done", WALL, last=True)  # the turn ends: the kept send runs as the next turn
    conv = agent.conversation("c1")
    assert (conv.state, conv.turn) == ("idle", 3)
    assert [(i["kind"], i.get("request_id"), i.get("text")) for i in agent.items("c1", 0)["items"]][-3:] == [
        ("reply", None, "half done"), ("user", "r2", "more"), ("reply", None, "You said: more")]
    agent.write({"request_id": "r5", "op": "send", "conversation": "c1", "text": "again", "turn": 3}, WALL,
                stream=True)
    assert send(agent, "r6", "dropped", 4).outcome == "queued"
    stop = agent.write({"request_id": "r3", "op": "abort", "conversation": "c1", "turn": 4}, WALL)
    assert stop.outcome == "stopped" and agent.conversation("c1").state == "idle"
    assert "dropped" not in json.dumps(agent.items("c1", 0)) and agent.conversation("c1").turn == 4  # discarded
    assert agent.write({"request_id": "r4", "op": "abort", "conversation": "c1", "turn": 4}, WALL).reason == "not_running"


@pytest.mark.parametrize("script, error", [
    ([], "the top level must be an object"),
    ({"steps": []}, "unknown field 'steps'"),
    ({"requests": [{"receipt": {"outcome": "refused"}}]}, "requests[0].receipt: a refused receipt needs a reason"),
    ({"requests": [{"receipt": {"outcome": "maybe"}}]}, "requests[0].receipt.outcome must be one of"),
    ({"requests": [{"op": 3}]}, "requests[0].op must be a string"),
    ({"requests": [{"op": "sned"}]}, "requests[0].op 'sned' is not a write the lead sends: one of send, steer,"),
    ({"requests": [{"delay": -1}]}, "requests[0].delay must be a number ≥ 0"),
    ({"requests": [{"stream": {"chunks": []}}]}, "requests[0].stream.chunks must be a non-empty list"),
    ({"timeline": [{"do": "explode"}]}, "timeline[0].do must be one of ask, close_ask"),
    ({"timeline": [{"do": "explode"}]}, "(got 'explode')"),
    ({"timeline": [{"do": "say", "title": "x"}]}, "timeline[0]: say takes no field 'title'"),
    ({"timeline": [{"do": "malformed", "kind": "evil"}]}, "timeline[0].kind must be one of json"),
    ({"timeline": [{"do": "silent", "for": "long"}]}, "timeline[0].for must be a number"),
    ({"timeline": [{"do": "close_ask", "end": "answered"}]}, "timeline[0].end must be \"decided\" or \"expired\""),
])
def test_a_script_mistake_is_named(script, error):
    with pytest.raises(ScriptError) as got:
        parse_script(script)
    assert error in str(got.value)


def test_the_docs_example_script_is_valid_and_shown_in_the_docs():
    path = REPO / "docs" / "examples" / "lab-script.json"
    script = load_script(path)
    assert [s.do for s in script.timeline] == ["ask", "say", "malformed", "drop", "silent"]
    assert path.read_text().strip() in (REPO / "docs" / "testing.md").read_text()


def test_the_first_matching_rule_with_uses_left_decides():
    script = parse_script({"requests": [
        {"op": "send", "text": "deploy", "receipt": {"outcome": "refused", "reason": "busy"}, "times": 1},
        {"op": "send", "members": ["b"], "receipt": "none"}]})
    args = {"op": "send", "text": "please deploy", "agent": "agent-1"}
    assert script.rule_for("a", args).receipt == {"outcome": "refused", "reason": "busy"}
    assert script.rule_for("a", args) is None  # used up
    assert script.rule_for("b", args).receipt == "none"


def test_a_snapshot_too_big_for_one_frame_names_the_rest_and_every_frame_fits_the_wire():
    """100 agents of 200 conversations (~7 MB of views): the snapshot carries what fits one frame,
    names the others in `more`, and they follow as `agent` frames; the lead's parser takes every frame."""
    from collie.crew import crewwire
    from collie.crew.membercore import snapshot_frames

    agents = [FakeAgent(f"agent-{i}", 200, "i", WALL) for i in range(1, 101)]
    frames = snapshot_frames([(a.name, crewwire.encode(a.view())) for a in agents])
    parsed = [crewwire.parse_member_frame(f) for f in frames]
    assert all(len(f) <= crewwire.MAX_FRAME for f in frames)
    kind, snap = parsed[0]
    assert kind == "snapshot" and snap.more and len(frames) == 1 + len(snap.more)
    assert {v.name for v in snap.agents} | {f.name for _, f in parsed[1:]} == {a.name for a in agents}
    assert [f.name for _, f in parsed[1:]] == snap.more


class FakeSocket:
    """The two calls a fake member's session makes on its WebSocket, in memory, with virtual times."""

    def __init__(self) -> None:
        import trio

        self.sent: list[tuple[float, dict]] = []
        self.to_member, self.inbox = trio.open_memory_channel(100)

    async def send_message(self, text) -> None:
        import trio

        self.sent.append((trio.current_time(), json.loads(text)))

    async def get_message(self):
        return await self.inbox.receive()


async def test_a_silent_member_sends_and_answers_nothing_until_its_silence_ends(autojump_clock):
    """`silent` (docs/testing.md): no beat, no receipt, no view while it lasts — what the lead takes for
    a machine gone quiet — and everything resumes after it, on exact virtual times."""
    import trio

    from collie.crew import crewwire
    from collie.fixtures.member.link import FakeMember

    m = FakeMember("ws://127.0.0.1:1", "laptop", "t" * 64, agents=1, conversations=1)
    ws = FakeSocket()
    request = {"type": "request", "id": "r1", "agent": "agent-1", "op": "rename",
               "args": {"request_id": "r1", "op": "rename", "agent": "agent-1", "conversation": "c1", "title": "x"}}
    async with trio.open_nursery() as n:
        core = m.new_core()
        core.hello(0.0)
        core.receive(crewwire.encode(crewwire.Welcome("collie", crew_wire=crewwire.CREW_WIRE)), 0.0)
        n.start_soon(m._session, ws, None, core)
        await trio.sleep(15)
        m.set_silent(40)  # 15 s → 55 s
        m.raise_ask("agent-1", "c1", title="Deploy?")
        await ws.to_member.send(json.dumps(request))  # ignored: silent
        await trio.sleep(50)
        await ws.to_member.send(json.dumps({**request, "id": "r2", "args": {**request["args"], "request_id": "r2"}}))
        await trio.sleep(10)
        n.cancel_scope.cancel()
    kinds = [(t, f["type"]) for t, f in ws.sent]
    assert kinds[0] == (0, "snapshot")
    assert [t for t, k in kinds if k == "beat"] == [10, 60, 70]  # none at 20 … 50: silent
    assert [t for t, k in kinds if k == "agent"][0] == 55  # the ask raised while silent goes when it ends
    assert [(t, f["id"]) for t, f in ws.sent if f["type"] == "receipt"] == [(65, "r2")]


async def test_a_member_that_cannot_join_says_why_once_per_distinct_failure_while_it_retries(
        autojump_clock, capsys, monkeypatch):
    """D2: each retry that fails the same way prints nothing more; a different failure prints its own
    line. The summary says it never joined, after how many tries, and why."""
    from collie.fixtures.member import cli, link

    refusals = iter([ConnectionRefusedError(111, "Connection refused")] * 6 + [socket.gaierror(-2, "unknown")] * 3)

    async def dial(host, port):  # as trio's: each address's error inside; a name that does not resolve as is
        inner = next(refusals, None)
        if inner is None:
            await trio.sleep_forever()  # then nothing answers at all
        if isinstance(inner, socket.gaierror):
            raise inner
        raise OSError(f"all attempts to connect to {host}:{port} failed") from ExceptionGroup("x", [inner])
    monkeypatch.setattr(link.trio, "open_tcp_stream", dial)
    m = FakeMember("ws://127.0.0.1:9/crew/v1", "lab-1", "t" * 43, agents=1, conversations=1)
    with trio.move_on_after(120):
        await cli.lab([m])
    assert capsys.readouterr().err.splitlines() == [
        "lab-1: cannot reach the lead at ws://127.0.0.1:9/crew/v1: connection refused; retrying",
        "lab-1: cannot reach the lead at ws://127.0.0.1:9/crew/v1: no such host; retrying",
        "lab-1: cannot reach the lead at ws://127.0.0.1:9/crew/v1: no answer in 10 s; retrying"]
    # dials at 0, 0.5, 1.5, 3.5, 7.5, 15.5 (refused), 25.5, 35.5, 45.5 (no such host), 55.5, 75.5, 95.5, 115.5
    assert m.attempts == 13 and m.joined_at is None
    cli.print_summary([m])
    assert capsys.readouterr().out.splitlines() == [
        "lab-1: never joined (13 tries: cannot reach the lead at ws://127.0.0.1:9/crew/v1: no answer in 10 s)",
        "1 member, 0 requests in all; 1 never joined"]
