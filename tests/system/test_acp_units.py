"""The ACP adapter's parts without processes (issue 14): framing, the trio JSON-RPC endpoint, the file
confinement, and the mapping of permission requests onto asks."""

from __future__ import annotations

import json
import re

import pytest
import trio
import trio.testing
from acp import schema

from collie.crew.acp import files, framing
from collie.crew.acp.framing import Decoder, Malformed, Message, Noise, TooLong, escape
from collie.crew.acp.rpc import Closed, Endpoint, RpcError
from collie.crew.acp.view import permission_ask


def test_a_message_split_across_reads_is_one_message():
    """Framing: a message is a line, whatever the reads cut it into."""
    d = Decoder()
    raw = framing.encode({"jsonrpc": "2.0", "id": 1, "result": {"x": "é"}})
    assert d.feed(raw[:5]) == [] and d.feed(raw[5:-1]) == []
    assert d.feed(raw[-1:] + b'{"jsonrpc":"2.0","method":"m"}') == [Message({"jsonrpc": "2.0", "id": 1, "result": {"x": "é"}})]
    assert d.finish() == [Message({"jsonrpc": "2.0", "method": "m"})]


def test_noise_and_malformed_lines_are_events_not_errors():
    """Issue 14: stdout noise and malformed JSON-RPC are reported and the stream goes on."""
    d = Decoder()
    events = d.feed(b"Loading model...\n{broken\n[1,2]\n\n"
                    b'{"jsonrpc":"1.0","id":7,"method":"x"}\n{"jsonrpc":"2.0","id":true,"result":1}\n'
                    b'{"jsonrpc":"2.0","id":2,"result":1,"error":{}}\n{"jsonrpc":"2.0","id":3,"result":null}\n')
    assert events[0] == Noise("Loading model...")
    assert [type(e) for e in events[1:6]] == [Malformed] * 5
    assert events[3].id == 7 and events[1].id is None  # a request id that can be read is answered
    assert events[6] == Message({"jsonrpc": "2.0", "id": 3, "result": None})


def test_a_line_over_the_cap_is_dropped_as_it_comes_and_the_next_one_parsed():
    """Issue 14: messages are capped; a runaway line costs at most the cap in memory."""
    d = Decoder(max_line=100)
    assert d.feed(b"x" * 80) == []
    assert d.feed(b"y" * 80) == [] and len(d._buf) == 0
    assert d.feed(b"z" * 1000) == []
    assert d.feed(b'end\n{"jsonrpc":"2.0","method":"ok"}\n') == [TooLong(1163), Message({"jsonrpc": "2.0", "method": "ok"})]


def test_escape_makes_one_safe_log_line():
    assert escape("a\x1b[31mb\nc\u202e") == "a\\x1b[31mb\\x0ac\\u202e"
    assert escape("x" * 300).endswith("…") and len(escape("x" * 300)) == 201


def test_classify():
    assert framing.classify({"id": 1, "method": "m"}) == "request"
    assert framing.classify({"method": "m", "params": {}}) == "notification"
    assert framing.classify({"id": "a", "error": {"code": 1}}) == "response"
    assert framing.classify({"method": "m", "params": 5}) is None
    assert framing.classify({"id": 1.5, "result": 1}) is None


class Peer:
    """The agent's end of a stream pair: reads our lines, writes its own."""

    def __init__(self, stream) -> None:
        self.stream, self.decoder, self.got = stream, Decoder(), []

    async def read(self) -> dict:
        while not self.got:
            self.got += [e.body for e in self.decoder.feed(await self.stream.receive_some(65536))]
        return self.got.pop(0)

    async def write(self, raw: bytes) -> None:
        await self.stream.send_all(raw)


async def test_endpoint_answers_requests_survives_garbage_and_keeps_notification_order():
    """Issue 14: requests answered once (unknown method → -32601, a malformed request with an id →
    -32600); noise and stray responses logged and survived; notifications handled in order."""
    ours, theirs = trio.testing.memory_stream_pair()
    logs, notes = [], []

    async def handler(method, params, is_notification):
        if is_notification:
            notes.append(params["n"])
            return None
        if method == "fs/read_text_file":
            return {"content": "hi"}
        raise RpcError(framing.METHOD_NOT_FOUND, "no")

    ep = Endpoint(ours, ours, handler, log=logs.append)
    peer = Peer(theirs)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            await nursery.start(ep.serve)
            await peer.write(b"banner \x1b[0m\n" + b"".join(framing.encode(framing.notification("u", {"n": i}))
                                                          for i in range(50)))
            await peer.write(b'{"jsonrpc":"2.0","id":5,"method":"fs/read_text_file","params":{}}\n'
                             b'{"jsonrpc":"2.0","id":6,"method":"nope"}\n{"jsonrpc":"1.0","id":7,"method":"x"}\n'
                             b'{"jsonrpc":"2.0","id":99,"result":1}\n')
            answers = {m["id"]: m for m in [await peer.read() for _ in range(3)]}
            assert answers[5]["result"] == {"content": "hi"}
            assert answers[6]["error"]["code"] == framing.METHOD_NOT_FOUND
            assert answers[7]["error"]["code"] == framing.INVALID_REQUEST
            assert notes == list(range(50))

            async def ask():
                return await ep.request("session/new", {"cwd": "/"})

            result = []
            nursery.start_soon(lambda: _store(result, ask()))
            sent = await peer.read()
            assert sent["method"] == "session/new"
            await peer.write(framing.encode(framing.result(sent["id"], {"sessionId": "s1"})))
            await trio.testing.wait_all_tasks_blocked()
            assert result == [{"sessionId": "s1"}]
            nursery.start_soon(lambda: _store(result, ep.request("session/prompt", {})))
            await peer.read()
            await theirs.aclose()  # the agent dies before answering
    assert isinstance(result[1], Closed)
    assert ep.stats.noise == 1 and ep.stats.malformed == 1 and ep.stats.stray_responses == 1
    assert any("not JSON-RPC: banner \\x1b[0m" in line for line in logs)


async def _store(out: list, coro) -> None:
    try:
        out.append(await coro)
    except Exception as exc:
        out.append(exc)


async def test_an_outgoing_message_over_the_cap_is_refused_before_it_is_written():
    ours, theirs = trio.testing.memory_stream_pair()
    ep = Endpoint(ours, ours, None, log=print, max_line=64)
    with pytest.raises(RpcError, match="over the 64 cap"):
        await ep.notify("session/cancel", {"sessionId": "x" * 100})


def test_files_are_confined_to_the_folder_symlinks_resolved_first(tmp_path):
    """Issue 14: reads and writes stay inside --cwd; `..`, absolute paths elsewhere, symlinks pointing
    out and relative paths are refused; a symlink inside pointing inside is fine."""
    root, outside = tmp_path / "work", tmp_path / "outside"
    root.mkdir(), outside.mkdir()
    (root / "a.txt").write_text("one\ntwo\nthree\n")
    (outside / "secret").write_text("s")
    (root / "out").symlink_to(outside / "secret")
    (root / "in").symlink_to(root / "a.txt")
    (root / "dir-out").symlink_to(outside)
    assert files.read_text(root, str(root / "a.txt"), line=2, limit=1) == "two\n"
    assert files.read_text(root, str(root / "in")) == "one\ntwo\nthree\n"
    for bad in (str(outside / "secret"), str(root / "out"), str(root / ".." / "outside" / "secret"), "a.txt",
                str(root / "dir-out" / "secret"), "/etc/passwd", ""):
        with pytest.raises(files.Refused):
            files.read_text(root, bad)
    with pytest.raises(files.Refused):
        files.write_text(root, str(root / "dir-out" / "new"), "x")
    assert not (outside / "new").exists()
    files.write_text(root, str(root / "b.txt"), "written")
    assert (root / "b.txt").read_text() == "written"
    with pytest.raises(files.Refused, match="over"):
        (root / "big").write_bytes(b"x" * (files.READ_MAX + 1))
        files.read_text(root, str(root / "big"))


def test_permission_options_map_to_roles_with_our_own_ids():
    """Issue 14: allow_once → allow, allow_always → always_allow naming the tool, reject_* → deny; the
    agent's option ids never reach the wire, and map back exactly."""
    req = schema.RequestPermissionRequest.model_validate({
        "sessionId": "s", "toolCall": {"toolCallId": "c1", "title": "Run rm -rf build", "kind": "execute"},
        "options": [{"optionId": "a/../b", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "always", "name": "Always", "kind": "allow_always"},
                    {"optionId": "no", "name": "No", "kind": "reject_once"},
                    {"optionId": "never", "name": "Never", "kind": "reject_always"}]})
    spec, back = permission_ask(req, "Run rm -rf build", "it-4")
    assert [(o["id"], o["role"]) for o in spec["options"]] == [("o0", "allow"), ("o1", "always_allow"),
                                                                ("o2", "deny"), ("o3", "deny")]
    assert back == {"o0": "a/../b", "o1": "always", "o2": "no", "o3": "never"}
    assert spec["tool"] == "Run rm -rf build" and spec["kind"] == "permission" and spec["item_id"] == "it-4"
    json.dumps(spec)


def test_the_default_name_comes_from_the_agent_not_its_launcher():
    from collie.crew.cli.acp_cmd import default_name

    assert default_name(["npx", "@zed-industries/claude-code-acp"]) == "claude-code-acp"
    assert default_name(["python3.11", "tests/acp_agent.py"]) == "acp-agent"
    assert default_name(["gemini", "--experimental-acp"]) == "gemini"
    assert default_name(["uvx", "foo@1.2"]) == "foo"


def test_restart_backoff_doubles_to_thirty_seconds_and_resets_after_a_healthy_minute():
    """Issue 14: a crashing agent is restarted after 1, 2, 4 … 30 s; a run of a minute resets it."""
    from collie.crew.acp.adapter import Backoff

    b = Backoff()
    assert [b.after_exit(0, 0.5) for _ in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert b.after_exit(100, 160) == 1 and b.after_exit(200, 201) == 2
    assert b.after_exit(300, 359.9) == 4  # 59.9 s is not yet healthy


async def test_the_supervisor_waits_exactly_the_backoff_between_restarts(autojump_clock, monkeypatch, tmp_path):
    """Issue 14: the restart loop sleeps exactly 1, 2, 4 s (virtual time) and says `Starting` meanwhile."""
    from collie.crew.acp.adapter import Adapter

    starts, subtitles = [], []

    class FakeCollie:
        runtime = "x"

        def set_subtitle(self, text):
            subtitles.append((trio.current_time(), text))

    adapter = Adapter(["true"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=lambda _: None)
    adapter.collie = FakeCollie()

    async def run_once(*, task_status=trio.TASK_STATUS_IGNORED):
        starts.append(trio.current_time())
        task_status.started()
        return 1

    monkeypatch.setattr(adapter, "run_agent_once", run_once)
    with trio.move_on_after(7.5):
        await adapter.supervise()
    assert starts == [0, 1, 3, 7]
    assert subtitles[:3] == [(0, "Starting: the agent exited; restart in 1 s"),
                             (1, "Starting: the agent exited; restart in 2 s"),
                             (3, "Starting: the agent exited; restart in 4 s")]


async def test_terminals_are_refused_unless_allowed_and_confined_when_allowed(tmp_path):
    """Issue 14: without --allow-terminal every terminal/* request is refused (−32601); with it a
    command runs in --cwd, its output and exit status come back, a cwd outside is refused."""
    from collie.crew.acp.adapter import Adapter
    from collie.crew.acp.terminals import Terminals

    adapter = Adapter(["true"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=lambda _: None)
    with pytest.raises(RpcError) as refused:
        await adapter.handle("terminal/create", {"sessionId": "s", "command": "echo"}, False)
    assert refused.value.code == framing.METHOD_NOT_FOUND
    terms = Terminals(str(tmp_path))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(terms.serve)
            made = await terms.handle("terminal/create", {"sessionId": "s", "command": "sh",
                                                          "args": ["-c", "pwd; exit 4"]})
            status = await terms.handle("terminal/wait_for_exit", {"sessionId": "s", "terminalId": made["terminalId"]})
            assert status == {"exitCode": 4, "signal": None}
            out = await terms.handle("terminal/output", {"sessionId": "s", "terminalId": made["terminalId"]})
            assert out["output"].strip() == str(tmp_path.resolve()) and out["exitStatus"]["exitCode"] == 4
            with pytest.raises(RpcError):
                await terms.handle("terminal/create", {"sessionId": "s", "command": "true", "cwd": "/"})
            nursery.cancel_scope.cancel()


def test_the_session_list_survives_a_restart_and_a_broken_file_is_not_overwritten(tmp_path):
    """Issue 14: sessions.json (0600) maps conversations to ACP sessions across restarts; a file that is
    not JSON stops the adapter with what to do instead of being replaced."""
    from collie.crew.acp.adapter import Sessions
    from collie.crew.errors import CollieError

    path = tmp_path / "sessions.json"
    s = Sessions(path)
    s.set("session-1", "sess-a", "/w")
    s.set("c2", "sess-b", "/w")
    s.set("session-1", "sess-c", "/w")  # the agent could not reload it: a new session
    again = Sessions(path)
    assert again.by_conv == {"session-1": {"session_id": "sess-c", "cwd": "/w"}, "c2": {"session_id": "sess-b", "cwd": "/w"}}
    assert again.conv_of("sess-c") == "session-1" and again.conv_of("sess-a") is None
    assert path.stat().st_mode & 0o777 == 0o600
    path.write_text("{nope")
    with pytest.raises(CollieError, match="move it away"):
        Sessions(path)
    assert path.read_text() == "{nope"


REFUSE_INIT = ('read line; echo \'{"jsonrpc":"2.0","id":0,"error":{"code":-32603,"message":"Internal error",'
               '"data":{"details":"401 Unauthorized: invalid x-api-key"}}}\'; sleep 5')


RUST_TRACE = r"""cat >&2 <<'EOF'
Error: error loading config: invalid type: string, expected a map

Caused by:
    invalid type: string, expected a map

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
             at /root/.cargo/registry/src/anyhow-1.0.98/src/backtrace.rs:27:14
   8: start_thread
             at ./nptl/pthread_create.c:442:8
   9: clone3
             at ./misc/../sysdeps/unix/sysv/linux/x86_64/clone3.S:81
EOF
exit 1"""  # codex with a config it cannot read, under RUST_BACKTRACE=1 (issue 24 item 8)


@pytest.mark.parametrize(("command", "expect", "restarted"), [
    (["/nonexistent/acp-agent"], "Cannot start /nonexistent/acp-agent: No such file or directory", True),
    (["sh", "-c", "echo 'Welcome!'; echo 'cannot reach the model server' >&2; exit 5"],
     "The agent exited while starting (status 5): cannot reach the model server", True),
    (["sh", "-c", RUST_TRACE], "The agent exited while starting (status 1): Error: error loading config: "
     "invalid type: string, expected a map", True),
    (["sh", "-c", REFUSE_INIT], "The agent refused to start: 401 Unauthorized: invalid x-api-key", False),
])
async def test_an_agent_that_fails_to_start_does_not_stop_the_adapter(tmp_path, command, expect, restarted):
    """Issue 14, issue 24 items 4 and 8: whatever the agent does while starting (missing, exits,
    refuses initialize), the adapter reports started and serves; the agent's row says why in words
    (Unreachable with that reason, not Ready: its stderr, its own error data, no class names). An agent
    that exits is restarted; one that answers with a refusal is not (it is healthy)."""
    from collie.crew.acp.adapter import Adapter

    logs, subtitles = [], []

    class FakeCollie:
        runtime = "x"
        unavailable = None

        def set_subtitle(self, text):
            subtitles.append(text)

        def set_starters(self, starters):
            pass

    collie = FakeCollie()
    adapter = Adapter(command, name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=logs.append)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(adapter.serve, collie)
            while collie.unavailable is None:
                await trio.sleep(0.02)
            assert collie.unavailable == expect
            if restarted:
                while not any(s.startswith("Starting: the agent exited") for s in subtitles):
                    await trio.sleep(0.02)
                assert collie.unavailable == expect  # still said while it restarts
            else:
                await trio.sleep(0.3)
                assert adapter.restarts == 0 and not any(s.startswith("Starting: the agent exited") for s in subtitles)
            nursery.cancel_scope.cancel()
    assert subtitles[0] == "Starting" and not adapter.up.is_set()
    assert not any(re.search(r"\b[A-Z]\w*Error:", line) for line in logs)  # no RpcError: … (the agent's Error: is its own)


async def test_the_agents_stderr_is_relayed_escaped_line_by_line(tmp_path):
    """Every peer is untrusted: what the agent prints on stderr reaches the log escaped, one line each."""
    from collie.crew.acp.adapter import Adapter

    logs = []
    adapter = Adapter(["true"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=logs.append)
    send, receive = trio.testing.memory_stream_pair()
    await send.send_all(b"warming up \x1b[2J\n\nlast without newline")
    await send.aclose()
    with trio.fail_after(5):
        await adapter._relay_stderr(receive)
    assert logs == ["agent: warming up \\x1b[2J", "agent: last without newline"]


async def test_updates_for_a_session_not_yet_recorded_are_held_bounded_and_briefly(autojump_clock, tmp_path):
    """Issue 24 "Beyond" (claude-code-acp's commands before the session is recorded): an update for
    an unknown session id is held, but only a few sessions, a few updates each, for HELD_FOR seconds
    — an agent sending updates for ids it never answered with cannot grow the adapter."""
    from collie.crew.acp.adapter import HELD_FOR, HELD_SESSIONS, HELD_UPDATES, Adapter

    adapter = Adapter(["true"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=lambda line: None)

    def note(sid: str, n: int) -> schema.SessionNotification:
        return schema.SessionNotification.model_validate({"sessionId": sid, "update": {
            "sessionUpdate": "available_commands_update", "availableCommands": [{"name": f"c{n}", "description": "d"}]}})

    for i in range(HELD_SESSIONS + 3):
        for n in range(HELD_UPDATES + 5):
            adapter._on_update(note(f"s{i}", n))
    assert list(adapter._held) == [f"s{i}" for i in range(3, HELD_SESSIONS + 3)]  # the oldest dropped
    assert all(len(kept) == HELD_UPDATES for _, kept in adapter._held.values())
    await trio.sleep(HELD_FOR + 1)
    adapter._on_update(note("late", 0))
    assert list(adapter._held) == ["late"]  # the others expired


async def test_a_silent_turn_says_no_output_for_n_seconds_growing_and_it_goes_with_output(autojump_clock, tmp_path):
    """Issue 38: a turn with no update for 30 s says `No output for 30 s` on the phone's line 2 (the
    subtitle), growing every 15 s (`45 s`, …), so that an agent retrying its model in silence is not
    taken for one at work; the words go as soon as an update comes and the plain subtitle is back.
    With a plan step running the words go beside that step (line 2 shows the step); while an ask is
    open the turn waits for the human and is not called silent."""
    from collie.crew.acp.adapter import Adapter, _Turn
    from tests.system.test_acp_agents import _answer_first
    from tests.unit.test_acp_view import collie

    c = collie()
    pane = c.conversation("c1", title="C")
    pane.set_subtitle("session s1")
    adapter = Adapter(["true"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=lambda line: None)
    adapter.collie = c
    adapter.sessions.set("c1", "s1", str(tmp_path))
    adapter.live_sessions.add("s1")
    start = trio.current_time()
    turn = adapter.turns["s1"] = _Turn("c1", "s1")
    conv = c._core.conv("c1")

    async def at(t: float) -> None:
        await trio.sleep_until(start + t)

    async def update(kind: dict) -> None:
        await adapter.handle("session/update", {"sessionId": "s1", "update": kind}, True)

    chunk = {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "x"}}
    async with trio.open_nursery() as n:
        n.start_soon(adapter._watch_quiet, turn, adapter.view("c1"), trio.CancelScope())
        await at(29.999)
        assert conv.subtitle == "session s1"
        await at(30.001)
        assert conv.subtitle == "No output for 30 s"
        await at(44.999)
        assert conv.subtitle == "No output for 30 s"
        await at(45.001)
        assert conv.subtitle == "No output for 45 s"
        await at(50)
        await update(chunk)
        assert conv.subtitle == "session s1"
        await at(79.999)
        assert conv.subtitle == "session s1"
        await at(80.001)
        assert conv.subtitle == "No output for 30 s"
        await update({"sessionUpdate": "plan", "entries": [
            {"content": "Read", "priority": "high", "status": "completed"},
            {"content": "Fix", "priority": "high", "status": "in_progress"}]})  # at 80.001
        assert conv.subtitle == "session s1" and conv.progress == {"steps": ["Read", "Fix"], "current": 1}
        await at(110.002)
        assert conv.progress == {"steps": ["Read", "Fix · No output for 30 s"], "current": 1}
        assert conv.subtitle == "session s1"
        await update(chunk)  # at 110.002
        assert conv.progress == {"steps": ["Read", "Fix"], "current": 1}
        n.start_soon(adapter.handle, "session/request_permission", {
            "sessionId": "s1", "toolCallId": "x", "toolCall": {"toolCallId": "call-1", "title": "Run make"},
            "options": [{"optionId": "ok", "name": "Allow", "kind": "allow_once"}]}, False)
        await at(200)
        assert conv.progress == {"steps": ["Read", "Fix"], "current": 1}  # an ask open is not silence
        _answer_first(c)
        await at(229.999)  # the answer at 200 is a sign of life
        assert conv.progress == {"steps": ["Read", "Fix"], "current": 1}
        await at(230.001)
        assert conv.progress == {"steps": ["Read", "Fix · No output for 30 s"], "current": 1}
        await at(230 + 90 + 0.001)
        assert conv.progress == {"steps": ["Read", "Fix · No output for 2 min"], "current": 1}
        n.cancel_scope.cancel()


def test_a_model_servers_json_error_passed_on_as_the_message_reads_as_words():
    """Issue 38: Gemini CLI answers a refused prompt with the model server's JSON error body as its
    message; the chat says `401 UNAUTHENTICATED: <the server's words>`, not the JSON."""
    from collie.crew.acp.rpc import RpcError
    from collie.crew.acp.words import reason_of

    body = '{"error":{"code":401,"message":"stand-in: this API key is not valid","status":"UNAUTHENTICATED"}}'
    assert reason_of(RpcError(401, body)) == "401 UNAUTHENTICATED: stand-in: this API key is not valid"
    assert reason_of(RpcError(-32603, "{not json")) == "{not json"
