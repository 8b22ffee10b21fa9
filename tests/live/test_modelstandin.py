"""The model stand-in the real-agent tests talk to (tests/modelstandin.py, issue 24): which scripted
step answers a request is read from the request alone, and the streams have the shapes the clients
read (server-sent events, `event:` then `data:`)."""

from __future__ import annotations

import json

import httpx

from tests.modelstandin import Fail, Shell, StandIn, Text, messages_turn, responses_turn


def test_the_step_is_the_count_of_tool_results_since_the_last_prompt():
    """A retried request or a new prompt never shifts the script: the step is the number of tool
    results after the user's last text; Claude Code's "[Request interrupted by user]" and a refused
    call's result beside a new prompt do not hide that prompt; Codex's context blocks are no prompt."""
    msgs = {"messages": [
        {"role": "user", "content": "make the file"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}]}
    assert messages_turn(msgs) == ("make the file", 1)
    msgs["messages"].append({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "t2", "content": "refused"},
        {"type": "text", "text": "[Request interrupted by user]"}, {"type": "text", "text": "then what"},
        {"type": "text", "text": "<system-reminder>noise</system-reminder>"}]})
    assert messages_turn(msgs) == ("then what", 0)
    resp = {"input": [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>…"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run it"}]},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"}]}
    assert responses_turn(resp) == ("run it", 1)


def _events(body: str) -> list[tuple[str, dict]]:
    out = []
    for block in body.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if not line.startswith(":"))
        out.append((lines["event"], json.loads(lines["data"])))
    return out


def test_a_scripted_turn_streams_as_each_api_says():
    """Responses API: created, the message's deltas, done, completed with usage; a shell call is an
    `exec_command` function call when Codex offers that tool. Messages API: message_start, a text
    block's deltas, message_delta with the stop reason, message_stop; a 401 is the API's error body."""
    with StandIn() as s, httpx.Client(base_url=s.url, timeout=10) as c:
        s.script("hello", [Text("Hello there.", chunks=2)])
        s.script("run it", [Shell("ls"), Text("Ran.")])
        s.script("fail", [Fail(401, "bad key")])
        tools = [{"type": "function", "name": "exec_command"}]
        got = _events(c.post("/v1/responses", json={"tools": tools, "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello"}]}]}).text)
        assert [k for k, _ in got] == ["response.created", "response.output_item.added", "response.output_text.delta",
                                      "response.output_text.delta", "response.output_item.done", "response.completed"]
        assert "".join(d["delta"] for k, d in got if k.endswith(".delta")) == "Hello there."
        assert got[-1][1]["response"]["usage"]["total_tokens"] == 15
        got = _events(c.post("/v1/responses", json={"tools": tools, "input": [
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run it"}]}]}).text)
        item = got[1][1]["item"]
        assert item["type"] == "function_call" and item["name"] == "exec_command"
        assert json.loads(item["arguments"]) == {"cmd": "ls"}
        got = _events(c.post("/v1/messages", json={"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": "hello"}]}).text)
        assert [k for k, _ in got] == ["message_start", "content_block_start", "content_block_delta",
                                      "content_block_delta", "content_block_stop", "message_delta", "message_stop"]
        assert got[-2][1]["delta"]["stop_reason"] == "end_turn"
        failed = c.post("/v1/messages", json={"tools": [{"name": "Bash"}], "messages": [
            {"role": "user", "content": "fail"}]})
        assert failed.status_code == 401
        assert failed.json() == {"type": "error", "error": {"type": "authentication_error", "message": "bad key"}}
        assert len(s.main_requests("responses")) == 2 and len(s.main_requests("messages")) == 2
