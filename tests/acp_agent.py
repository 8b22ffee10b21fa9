"""A scripted ACP agent built on the `agent-client-protocol` package's own agent side (issue 14 tests).

    python tests/acp_agent.py            # speaks ACP on stdin/stdout; state in $ACP_TEST_STATE

It is what `collie acp run -- python tests/acp_agent.py` drives in tests and in bench/acp_latency.py.
Sessions are kept in the JSON file `$ACP_TEST_STATE` (default `/tmp/acp-test-agent-<uid>.json`; with an `events` list the tests read), so that
`session/load` works across restarts of the agent. What a prompt does depends on its first word:

(anything)  a thought, a two-step plan, then the reply `You said: <text> (prompt N of this session)` in
            word chunks
tool        a tool call `Edit notes.txt` that asks permission (allow once / always / reject once /
            reject always); allowed: writes notes.txt through the client and completes; rejected: fails
slow        `tick 0`, `tick 1`, … every 50 ms until cancelled (then answers `cancelled`)
read PATH   asks the client for PATH; replies `read PATH: <text>` or `refused PATH: <message>`
noise       prints a line that is not JSON, a malformed JSON-RPC message and broken JSON on stdout
crash       exits with status 3 at once
bench N S   N chunks, each carrying time.monotonic_ns() when it was sent, S seconds apart (0.02)
bash CMD    as claude-code-acp 0.16 does a Bash call: the `tool_call` twice (streamed, then with
            rawInput), a permission request carrying only rawInput and a title, then (allowed)
            `terminal/create` with CMD as one string and no args, the terminal shown in the call,
            wait, output, release; completes with rawOutput text blocks and replies `ran: <output>`
exec CMD    as codex-acp 0.16 does: the command only in rawInput (an argv `bash -lc CMD`), its output
            only in rawOutput (`stdout`, `exit_code`, `formatted_output`), no permission asked
fail        answers the prompt with JSON-RPC error −32603 `Internal error` whose data says why
            (`{"details": "401 Unauthorized: ..."}`), as an agent whose model refused the key does
askcrash    asks permission, then exits (status 4) while the ask is open
leave       a tool call left `in_progress` and the turn ended `end_turn`

Sessions offer three modes (`read-only`, the current one at first, `auto`, `full-access`) and
`session/set_mode`; after `session/new` the agent sends `available_commands_update` (`review`, `init`,
`logout`), and one config option, `model` (`small`, `large`).

Started with ACP_TEST_AUTH=env the agent offers the logins codex-acp does (`chatgpt`, and
`test-api-key` needing $TEST_AGENT_KEY) and answers session/new `Authentication required` (−32000)
until `authenticate` with a method it can use; with ACP_TEST_REFUSE_NEW=1 session/new is always
refused that way (a login that never works). With ACP_TEST_NEW_FAILS=TEXT, session/new prints TEXT
on stderr and fails `Internal error` with data `Query closed before response received`, as
claude-code-acp does when Claude Code refuses to run as root.

With ACP_TEST_STALE=1 it does what claude-agent-acp 0.23 does after a stop or an error (issue 38):
once a prompt of a session ended `cancelled` or with an error, every later prompt of that session
is answered with the end of the one before — the first at once, `end_turn` with no update at all —
while its own work goes on unseen: its updates are held until the next prompt (which sends them
before answering), its permission requests go out as they come, after its answer. Each prompt
then also sends a `usage_update` whose `used` is missing, as claude-agent-acp's `"used": null`.
ACP_TEST_ASK_AFTER=S makes `tool` wait S seconds before it asks.
misfit      (any mode) sends a `usage_update` with `"used": null` and a completed `tool_call` whose
            `title` is null (rawInput `echo kept`), then replies `misfit done`
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from acp import (PROTOCOL_VERSION, InitializeResponse, LoadSessionResponse, NewSessionResponse, PromptResponse,
                 run_agent, text_block, update_agent_message, update_agent_thought, update_user_message)
from acp.helpers import plan_entry, start_tool_call, tool_content, update_plan, update_tool_call
from acp.schema import (AgentCapabilities, AuthMethodAgent, AvailableCommand, AvailableCommandsUpdate,
                        EnvVarAuthMethod, Implementation, PermissionOption, SessionCapabilities,
                        SessionCloseCapabilities, SessionMode, SessionModeState)

STALE = os.environ.get("ACP_TEST_STALE") == "1"
HOLDING: contextvars.ContextVar[Any] = contextvars.ContextVar("holding", default=None)
STATE = Path(os.environ.get("ACP_TEST_STATE") or Path(tempfile.gettempdir()) / f"acp-test-agent-{os.getuid()}.json")


def load() -> dict:
    try:
        return json.loads(STATE.read_text())
    except FileNotFoundError:
        return {"sessions": {}, "events": []}


def save(state: dict) -> None:
    tmp = STATE.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, STATE)


class Holding:
    """The connection as a prompt answered stale sees it: its updates are kept, the rest goes out."""

    def __init__(self, conn: Any, kept: list) -> None:
        self._conn, self.kept = conn, kept

    async def session_update(self, session_id: str, update: Any, **kw) -> None:
        self.kept.append((session_id, update))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class TestAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self.lagging: set[str] = set()  # ACP_TEST_STALE: sessions one prompt behind
        self.behind: dict[str, tuple[asyncio.Task, list]] = {}
        self.state = load()
        self.cancelled: dict[str, asyncio.Event] = {}
        self.cwd = os.getcwd()
        self.auth = os.environ.get("ACP_TEST_AUTH")
        self.logged_in = self.auth is None

    def event(self, text: str) -> None:
        self.state["events"].append(text)
        save(self.state)

    @property
    def conn(self) -> Any:
        return HOLDING.get() or self._conn

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, client_capabilities=None, client_info=None, **kw):
        caps = client_capabilities.model_dump(by_alias=True) if client_capabilities else {}
        self.event(f"initialize fs={caps.get('fs')} terminal={caps.get('terminal')}")
        methods = []
        if self.auth == "env":
            methods = [AuthMethodAgent(id="chatgpt", name="Login with ChatGPT",
                                       description="Use your ChatGPT login with Codex CLI"),
                       EnvVarAuthMethod(type="env_var", id="test-api-key", name="Use TEST_AGENT_KEY",
                                        description="Requires setting the `TEST_AGENT_KEY` environment variable.",
                                        vars=[{"name": "TEST_AGENT_KEY"}])]
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities(
                                      load_session=True, session_capabilities=SessionCapabilities(close=SessionCloseCapabilities())),
                                  agent_info=Implementation(name="test-acp-agent", version="1.2.3"),
                                  auth_methods=methods)

    async def authenticate(self, method_id: str, **kw):
        from acp import AuthenticateResponse, RequestError
        self.event(f"authenticate {method_id}")
        if method_id == "test-api-key" and os.environ.get("TEST_AGENT_KEY"):
            self.logged_in = True
            return AuthenticateResponse()
        raise RequestError(-32603, "Internal error", {"details": f"cannot log in with {method_id} here"})

    async def new_session(self, cwd: str, mcp_servers=None, **kw):
        if os.environ.get("ACP_TEST_NEW_FAILS"):  # as claude-code-acp run as root with IS_SANDBOX set, not to 1
            from acp import RequestError
            print(os.environ["ACP_TEST_NEW_FAILS"], file=sys.stderr, flush=True)
            print("Error handling request {", file=sys.stderr, flush=True)
            raise RequestError(-32603, "Internal error", {"details": "Query closed before response received"})
        if not self.logged_in or os.environ.get("ACP_TEST_REFUSE_NEW"):
            from acp import RequestError
            self.event("new refused")
            raise RequestError.auth_required()
        sid = f"sess-{uuid.uuid4().hex[:8]}"
        self.state["sessions"][sid] = {"cwd": cwd, "history": [], "prompts": 0}
        self.cwd = cwd
        self.event(f"new {sid}")
        commands = AvailableCommandsUpdate(session_update="available_commands_update", available_commands=[
            AvailableCommand(name="review", description="Review my current changes"),
            AvailableCommand(name="init", description="create an AGENTS.md file"),
            AvailableCommand(name="logout", description="logout of the agent")])
        if os.environ.get("ACP_TEST_COMMANDS_FIRST"):  # the race claude-code-acp wins now and then: the
            await self.conn.session_update(session_id=sid, update=commands)  # update is read before the answer
        else:
            asyncio.get_running_loop().call_later(0.05, lambda: asyncio.ensure_future(self.conn.session_update(
                session_id=sid, update=commands)))
        from acp.schema import SessionConfigOptionSelect, SessionConfigSelectOption
        model = SessionConfigOptionSelect(id="model", name="Model", type="select", current_value="small", options=[
            SessionConfigSelectOption(value="small", name="Small"), SessionConfigSelectOption(value="large", name="Large")])
        return NewSessionResponse(session_id=sid, modes=self.modes(sid), config_options=[model])

    async def set_config_option(self, config_id: str, session_id: str, value, **kw):
        from acp.schema import SetSessionConfigOptionResponse
        self.event(f"config {session_id} {config_id}={value}")
        return SetSessionConfigOptionResponse(config_options=[])

    def modes(self, sid: str) -> SessionModeState:
        current = self.state["sessions"][sid].get("mode", "read-only")
        return SessionModeState(current_mode_id=current, available_modes=[
            SessionMode(id="read-only", name="Read Only"), SessionMode(id="auto", name="Default"),
            SessionMode(id="full-access", name="Full Access")])

    async def set_session_mode(self, mode_id: str, session_id: str, **kw):
        from acp import RequestError
        from acp.schema import SetSessionModeResponse
        if mode_id not in ("read-only", "auto", "full-access"):
            raise RequestError.invalid_params({"details": f"no mode {mode_id}"})
        self.state["sessions"][session_id]["mode"] = mode_id
        self.event(f"mode {session_id} {mode_id}")
        return SetSessionModeResponse()

    async def load_session(self, cwd: str, session_id: str, mcp_servers=None, **kw):
        session = self.state["sessions"].get(session_id)
        if session is None:
            from acp import RequestError
            raise RequestError.invalid_params({"sessionId": "unknown"})
        self.event(f"load {session_id}")
        for role, text in session["history"]:
            update = update_user_message(text_block(text)) if role == "user" else update_agent_message(text_block(text))
            await self.conn.session_update(session_id=session_id, update=update)
        return LoadSessionResponse(modes=self.modes(session_id))

    async def close_session(self, session_id: str, **kw):
        from acp.schema import CloseSessionResponse
        self.event(f"close {session_id}")
        return CloseSessionResponse()

    async def cancel(self, session_id: str, **kw) -> None:
        self.event(f"cancel {session_id}")
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def say(self, sid: str, text: str) -> None:
        await self.conn.session_update(session_id=sid, update=update_agent_message(text_block(text)))

    async def prompt(self, prompt, session_id: str, **kw):
        if not STALE:
            return await self.answer(prompt, session_id)
        sid = session_id
        if sid in self.lagging:  # claude-agent-acp after a stop or an error: one prompt behind
            before = self.behind.pop(sid, None)
            if before is not None:
                task, kept = before
                await asyncio.wait([task])
                for s, update in kept:
                    await self._conn.session_update(session_id=s, update=update)
            kept = []
            self.behind[sid] = (asyncio.ensure_future(self.unseen(prompt, sid, kept)), kept)
            self.event(f"stale end_turn {sid}")
            return PromptResponse(stop_reason="end_turn")
        try:
            got = await self.answer(prompt, sid)
        except Exception:
            self.lagging.add(sid)
            raise
        if got.stop_reason == "cancelled":
            self.lagging.add(sid)
        await self.used_null(sid)
        return got

    async def unseen(self, prompt, sid: str, kept: list) -> None:
        HOLDING.set(Holding(self._conn, kept))
        try:
            await self.answer(prompt, sid)
        except Exception as exc:  # what an error would have said goes nowhere, as there
            self.event(f"unseen error {exc}")
        await self.used_null(sid)

    async def used_null(self, sid: str) -> None:
        from acp.schema import UsageUpdate
        await self.conn.session_update(session_id=sid, update=UsageUpdate.model_construct(
            session_update="usage_update", size=200000))

    async def answer(self, prompt, session_id: str):
        sid = session_id
        text = "".join(getattr(b, "text", "") for b in prompt)
        session = self.state["sessions"][sid]
        session["prompts"] += 1
        session["history"].append(["user", text])
        save(self.state)
        cancel = self.cancelled[sid] = asyncio.Event()
        word, _, rest = text.partition(" ")
        reply = ""
        if word == "crash":
            os._exit(3)
        elif word == "slow":
            for i in range(2000):
                if cancel.is_set():
                    self.event(f"prompt cancelled {sid}")
                    return PromptResponse(stop_reason="cancelled")
                await self.say(sid, f"tick {i} ")
                await asyncio.sleep(0.05)
        elif word == "tool":
            reply = await self.tool_turn(sid, cancel)
            if reply is None:
                return PromptResponse(stop_reason="cancelled")
        elif word == "read":
            try:
                got = await self.conn.read_text_file(session_id=sid, path=rest)
                reply = f"read {rest}: {got.content}"
            except Exception as exc:  # the client's error answer
                reply = f"refused {rest}: {exc}"
            await self.say(sid, reply)
        elif word == "noise":
            os.write(1, b"this is not JSON \x1b[31m at all\n")
            os.write(1, b'{"jsonrpc": "2.0", "method": 5, "id": 99}\n')
            os.write(1, b'{"broken json\n')
            reply = "still here after the noise"
            await self.say(sid, reply)
        elif word == "bash":
            reply = await self.claude_bash(sid, rest)
        elif word == "exec":
            reply = await self.codex_exec(sid, rest)
        elif word == "fail":
            from acp import RequestError
            raise RequestError(-32603, "Internal error",
                               {"details": "401 Unauthorized: the model server refused the API key"})
        elif word == "askcrash":
            asyncio.ensure_future(self.conn.request_permission(
                session_id=sid, tool_call=update_tool_call("call-crash", title="Delete everything", kind="delete"),
                options=[PermissionOption(option_id="ok", name="Allow", kind="allow_once")]))
            await asyncio.sleep(0.5)
            os._exit(4)
        elif word == "misfit":
            raw = [{"sessionUpdate": "usage_update", "used": None, "size": 200000,
                    "cost": {"amount": 0.5, "currency": "USD"}},
                   {"sessionUpdate": "tool_call", "toolCallId": "call-misfit", "title": None, "kind": "execute",
                    "status": "completed", "rawInput": {"command": "echo kept"}}]
            for update in raw:
                os.write(1, json.dumps({"jsonrpc": "2.0", "method": "session/update",
                                        "params": {"sessionId": sid, "update": update}}).encode() + b"\n")
            reply = "misfit done"
            await self.say(sid, reply)
        elif word == "leave":
            await self.conn.session_update(session_id=sid, update=start_tool_call(
                "call-left", "Watch the logs", kind="execute", status="in_progress"))
            reply = "left it running"
            await self.say(sid, reply)
        elif word == "bench":
            count, _, every = rest.partition(" ")
            for _ in range(int(count or "10")):
                await self.say(sid, f"{time.monotonic_ns()} ")
                await asyncio.sleep(float(every or "0.02"))
            reply = "bench done"
        else:
            await self.conn.session_update(session_id=sid, update=update_agent_thought(text_block("Thinking it over.")))
            await self.conn.session_update(session_id=sid, update=update_plan([
                plan_entry("Read the prompt", status="completed"), plan_entry("Answer", status="in_progress")]))
            reply = f"You said: {text} (prompt {session['prompts']} of this session)"
            for piece in reply.split(" "):
                await self.say(sid, piece + " ")
                await asyncio.sleep(0.01)
        session["history"].append(["agent", reply])
        save(self.state)
        return PromptResponse(stop_reason="end_turn")

    async def tool_turn(self, sid: str, cancel: asyncio.Event) -> str | None:
        call = f"call-{uuid.uuid4().hex[:6]}"
        await self.conn.session_update(session_id=sid, update=start_tool_call(
            call, "Edit notes.txt", kind="edit", status="pending"))
        await asyncio.sleep(float(os.environ.get("ACP_TEST_ASK_AFTER") or 0))  # a model that takes its time
        options = [PermissionOption(option_id="allow-once-1", name="Allow", kind="allow_once"),
                   PermissionOption(option_id="allow-always-1", name="Always allow", kind="allow_always"),
                   PermissionOption(option_id="reject-once-1", name="Reject", kind="reject_once"),
                   PermissionOption(option_id="reject-always-1", name="Never", kind="reject_always")]
        answer = await self.conn.request_permission(
            session_id=sid, tool_call=update_tool_call(call, title="Edit notes.txt", kind="edit"), options=options)
        outcome = answer.outcome
        self.event(f"permission {outcome.outcome} {getattr(outcome, 'option_id', '')}".strip())
        if outcome.outcome == "cancelled" or cancel.is_set():
            await self.conn.session_update(session_id=sid, update=update_tool_call(call, status="failed"))
            return None
        if outcome.option_id.startswith("allow"):
            await self.conn.session_update(session_id=sid, update=update_tool_call(call, status="in_progress"))
            await self.conn.write_text_file(session_id=sid, path=os.path.join(self.cwd, "notes.txt"), content="noted\n")
            await self.conn.session_update(session_id=sid, update=update_tool_call(
                call, status="completed", content=[tool_content(text_block("wrote notes.txt"))]))
            reply = "Edited notes.txt."
        else:
            await self.conn.session_update(session_id=sid, update=update_tool_call(call, status="failed"))
            reply = "Left notes.txt alone."
        await self.say(sid, reply)
        return reply


    async def claude_bash(self, sid: str, command: str) -> str:
        call = f"toolu_{uuid.uuid4().hex[:8]}"
        await self.conn.session_update(session_id=sid, update=start_tool_call(
            call, "Terminal", kind="execute", status="pending", raw_input={}))
        title = "`" + command.replace("`", "\\`") + "`"
        await self.conn.session_update(session_id=sid, update=start_tool_call(
            call, title, kind="execute", status="pending", raw_input={"command": command, "description": "Run it"},
            content=[tool_content(text_block("Run it"))]))
        options = [PermissionOption(option_id="allow_always", name="Always Allow", kind="allow_always"),
                   PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
                   PermissionOption(option_id="reject", name="Reject", kind="reject_once")]
        from acp.schema import ToolCallUpdate
        answer = await self.conn.request_permission(session_id=sid, options=options, tool_call=ToolCallUpdate(
            tool_call_id=call, title=title, raw_input={"command": command, "description": "Run it"}))
        outcome = answer.outcome
        self.event(f"permission {outcome.outcome} {getattr(outcome, 'option_id', '')}".strip())
        if outcome.outcome != "selected" or outcome.option_id == "reject":
            await self.conn.session_update(session_id=sid, update=update_tool_call(call, status="failed"))
            return "not run"
        term = await self.conn.create_terminal(session_id=sid, command=command, env=[{"name": "CLAUDECODE", "value": "1"}],
                                               output_byte_limit=32000)
        from acp.schema import TerminalToolCallContent
        await self.conn.session_update(session_id=sid, update=update_tool_call(
            call, status="in_progress", title="Run it",
            content=[TerminalToolCallContent(type="terminal", terminal_id=term.terminal_id)]))
        status = await self.conn.wait_for_terminal_exit(session_id=sid, terminal_id=term.terminal_id)
        out = await self.conn.terminal_output(session_id=sid, terminal_id=term.terminal_id)
        await self.conn.release_terminal(session_id=sid, terminal_id=term.terminal_id)
        self.event(f"terminal exit {status.exit_code}")
        await self.conn.session_update(session_id=sid, update=update_tool_call(
            call, status="completed" if status.exit_code == 0 else "failed",
            raw_output=[{"type": "text", "text": out.output}]))
        reply = f"ran: {out.output.strip()}"
        await self.say(sid, reply)
        return reply

    async def codex_exec(self, sid: str, command: str) -> str:
        call = f"call_{uuid.uuid4().hex[:8]}"
        await self.conn.session_update(session_id=sid, update=start_tool_call(
            call, "Run command", kind="execute", status="in_progress",
            raw_input={"command": ["bash", "-lc", command], "cwd": self.cwd}))
        out = f"output of {command}\n"
        await self.conn.session_update(session_id=sid, update=update_tool_call(
            call, status="completed", raw_output={"stdout": out, "stderr": "", "exit_code": 0,
                                                  "formatted_output": out, "duration": {"secs": 0, "nanos": 1}}))
        reply = "exec done"
        await self.say(sid, reply)
        return reply


def main() -> None:
    asyncio.run(run_agent(TestAgent(), use_unstable_protocol=True))


if __name__ == "__main__":
    sys.exit(main())
