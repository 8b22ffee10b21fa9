"""Ids in the phone API's routes follow the wire's id rule, and reach an agent percent-encoded
(wire §1: 1–128 printable ASCII characters, no `/`; issue 9.13)."""

from __future__ import annotations

from urllib.parse import quote

from collie.bridge.client import path_id
from collie.bridge.writes import AgentFacts, Call, WriteRequest, plan
from collie.crew.config import AgentConfig
from tests.apilab import api_lab, rid
from tests.livelab import agent

BAD = ["\x00", "a\x00b", "\x1b[31mred", "tab\there", "é", "x" * 129, "x" * 5000, ".", ".."]
ODD = "a b%c?d#e&f=g'h\"i:j;k"  # legal: every byte printable ASCII, no '/'


def routes(bad: str) -> list[tuple[str, str, dict | None]]:
    q = quote(bad, safe="")
    write = {"request_id": rid(), "turn": 0, "text": "x", "title": "x"}
    return [
        ("GET", f"/api/agents/{q}/desk/conversations", None),
        ("GET", f"/api/agents/local/{q}/conversations", None),
        ("GET", f"/api/agents/local/desk/conversations/{q}", None),
        ("GET", f"/api/agents/local/desk/conversations/{q}/items", None),
        ("GET", f"/api/agents/local/{q}/starters", None),
        ("POST", f"/api/agents/local/desk/conversations/{q}/steer", write),
        ("POST", f"/api/agents/local/desk/conversations/{q}/stop", write),
        ("POST", f"/api/agents/local/desk/conversations/c/actions/{q}", write),
        ("POST", f"/api/agents/local/desk/conversations/{q}/rename", write),
        ("POST", f"/api/agents/local/desk/conversations/{q}/reopen", write),
        ("POST", f"/api/agents/local/desk/starters/{q}", write),
        ("POST", f"/api/ask/{q}", {"request_id": rid(), "agent": "desk", "digest": "d", "answer": {"text": "x"}}),
        ("POST", "/api/send", {"request_id": rid(), "agent": "desk", "conversation": bad, "text": "x", "turn": 0}),
        ("POST", "/api/send", {"request_id": bad, "agent": "desk", "conversation": "c", "text": "x", "turn": 0}),
    ]


async def test_ids_that_break_the_wire_rule_are_400_and_reach_no_agent(tmp, autojump_clock):
    """9.13: NUL, escapes, control characters, non-ASCII, over-long ids, `.` and `..` in any route
    or body id get 400 with a reason; the agent is asked nothing for them."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        collie.conversation("c", title="Chat")
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab:
            before = len(collie.recorder.calls)
            for bad in BAD:
                for method, path, body in routes(bad):
                    if method == "GET":
                        r = await lab.get(path)
                    else:
                        r = await lab.post(path, body)
                    got = await r.get_json()
                    assert r.status_code == 400, (bad, path, r.status_code, got)
                    assert got["error"] == "bad_request" and "printable ASCII" in got["message"], (bad, path)
            agent_calls = [c for c in collie.recorder.calls[before:] if c[2] != "/v1/state"]
            assert agent_calls == []


async def test_a_legal_odd_id_reaches_the_agent_exactly(tmp, autojump_clock):
    """9.13, wire §1: an id with spaces, `%`, `?`, `#` and quotes is legal; it is percent-encoded
    into the agent's URL, so the agent reads exactly that conversation."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        old = collie.conversation(ODD, title="Odd")
        old.reply("kept words")
        old.close()
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab:
            got = await (await lab.get(f"/api/agents/local/desk/conversations/{quote(ODD, safe='')}/items")).get_json()
            assert got["open"] is False and [i["text"] for i in got["items"] if i["kind"] == "reply"] == ["kept words"]
            reopened = await lab.post_json(f"/api/agents/local/desk/conversations/{quote(ODD, safe='')}/reopen",
                                           {"request_id": rid()})
            assert reopened["outcome"] == "done" and ODD in collie._core.conversations


def test_dot_segments_are_encoded_whole():
    """wire §1: `.` and `..` as ids never become URL steps (`/v1/conversations/./items` is
    `/v1/conversations/items` to any URL normaliser)."""
    assert [path_id(v) for v in (".", "..", "a.b", "a/b", ODD)] == [
        "%2E", "%2E%2E", "a.b", "a%2Fb", quote(ODD, safe="")]
    facts = AgentFacts(caps=("reopen",), text_max=2000, conversations={})
    assert plan(WriteRequest(request_id="r", op="reopen", agent="d", conversation=".."), facts) == Call(
        "/v1/conversations/%2E%2E/reopen", {"request_id": "r"})


async def test_an_agents_own_dot_conversations_are_read_at_their_encoded_paths(tmp, autojump_clock):
    """wire §1: an agent may name a conversation `.` or `..` (printable ASCII, no `/`). The bridge reads
    their items at `/v1/conversations/%2E/items` and `…/%2E%2E/items`, never at a bare dot segment,
    which an agent's URL normaliser would take for a step (`/v1/conversations/../items` is `/v1/items`)."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        for conv in (".", ".."):
            collie.conversation(conv, title=f"dots {conv}").reply(f"words of {conv}")
        collie.ready()
        async with api_lab(tmp, [AgentConfig("desk", socket=str(sock))]) as lab:
            while lab.bridge.pollers["desk"].reader.stale_conversations():
                await lab.bridge.wait_changed()
            reads = {p.partition("?")[0] for _t, m, p in collie.recorder.calls if "/items" in p}
            assert reads == {"/v1/conversations/%2E/items", "/v1/conversations/%2E%2E/items"}
            texts = {i.get("text") for i in lab.bridge.pollers["desk"].reader.items("..")}
            assert "words of .." in texts
