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
"""

from __future__ import annotations

import asyncio
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
from acp.schema import AgentCapabilities, Implementation, PermissionOption

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


class TestAgent:
    def __init__(self) -> None:
        self.conn: Any = None
        self.state = load()
        self.cancelled: dict[str, asyncio.Event] = {}
        self.cwd = os.getcwd()

    def event(self, text: str) -> None:
        self.state["events"].append(text)
        save(self.state)

    def on_connect(self, conn: Any) -> None:
        self.conn = conn

    async def initialize(self, protocol_version: int, client_capabilities=None, client_info=None, **kw):
        caps = client_capabilities.model_dump(by_alias=True) if client_capabilities else {}
        self.event(f"initialize fs={caps.get('fs')} terminal={caps.get('terminal')}")
        return InitializeResponse(protocol_version=PROTOCOL_VERSION,
                                  agent_capabilities=AgentCapabilities(load_session=True),
                                  agent_info=Implementation(name="test-acp-agent", version="1.2.3"))

    async def new_session(self, cwd: str, mcp_servers=None, **kw):
        sid = f"sess-{uuid.uuid4().hex[:8]}"
        self.state["sessions"][sid] = {"cwd": cwd, "history": [], "prompts": 0}
        self.cwd = cwd
        self.event(f"new {sid}")
        return NewSessionResponse(session_id=sid)

    async def load_session(self, cwd: str, session_id: str, mcp_servers=None, **kw):
        session = self.state["sessions"].get(session_id)
        if session is None:
            from acp import RequestError
            raise RequestError.invalid_params({"sessionId": "unknown"})
        self.event(f"load {session_id}")
        for role, text in session["history"]:
            update = update_user_message(text_block(text)) if role == "user" else update_agent_message(text_block(text))
            await self.conn.session_update(session_id=session_id, update=update)
        return LoadSessionResponse()

    async def cancel(self, session_id: str, **kw) -> None:
        self.event(f"cancel {session_id}")
        self.cancelled.setdefault(session_id, asyncio.Event()).set()

    async def say(self, sid: str, text: str) -> None:
        await self.conn.session_update(session_id=sid, update=update_agent_message(text_block(text)))

    async def prompt(self, prompt, session_id: str, **kw):
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


def main() -> None:
    asyncio.run(run_agent(TestAgent()))


if __name__ == "__main__":
    sys.exit(main())
