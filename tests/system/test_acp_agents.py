"""The adapter against the scripted agent playing the real agents' parts (issue 24 items 1–9):
claude-code-acp's Bash call (a shell line in a terminal, its ask showing the command), codex-acp's
login (`authMethods`, `Authentication required`) and its rawInput/rawOutput, an agent's error with
its reason, a crash with an ask open. The adapter is real, and so is the agent process (the
`agent-client-protocol` package's agent side); the SDK's core stands in for the bridge (no sockets)."""

from __future__ import annotations

import json
import sys
import time
from contextlib import asynccontextmanager

import trio

from collie.crew.acp.adapter import Adapter
from collie.crew.sdk.agent import now_iso
from tests.conftest import REPO
from tests.system.test_acp_terminals import alive
from tests.unit.test_acp_view import collie

AGENT = [sys.executable, str(REPO / "tests" / "acp_agent.py")]


class Lab:
    def __init__(self, adapter: Adapter, c, logs: list[str], state) -> None:
        self.adapter, self.c, self.logs, self.state = adapter, c, logs, state

    def events(self) -> list[str]:
        try:
            return json.loads(self.state.read_text())["events"]
        except (FileNotFoundError, ValueError):
            return []

    def items(self, conv: str = "session-1", kind: str | None = None) -> list[dict]:
        its = list(self.c._core.conv(conv).items.values())
        return [i for i in its if kind is None or i["kind"] == kind]

    async def send(self, text: str, conv: str = "session-1") -> None:
        await self.adapter.on_send(self.c.pane_of(conv), text)

    async def ask(self) -> object:
        while not self.c._core.asks:
            await trio.sleep(0.02)
        return next(iter(self.c._core.asks.values()))

    def write(self, route: str, conv: str, action: str | None = None) -> dict:
        body = {"request_id": f"r-{route}-{time.time()}"}
        if conv in self.c._core.conversations:
            body["turn"] = self.c._core.conv(conv).turn
        outcome, effects = self.c._core.write(route, conv, body, now_iso(), time.time(), action)
        for eff in effects:  # as the SDK runs them, without its nursery
            if type(eff).__name__ == "RunAction":
                self.nursery.start_soon(self.c._on_action, self.c.pane_of(eff.conversation), eff.action_id)
        self.c._apply([e for e in effects if type(e).__name__ != "RunAction"])
        return outcome

    def answer(self, ask, label: str) -> None:
        oid = next(o["id"] for o in ask.raw["options"] if o["label"] == label)
        outcome, effects = self.c._core.write("answer", ask.id, {"request_id": f"r-{ask.id}", "digest": ask.digest,
                                                                 "option_ids": [oid]}, now_iso(), time.time(), None)
        assert outcome["outcome"] == "accepted"
        self.c._apply(effects)


@asynccontextmanager
async def lab(tmp_path, monkeypatch, *, env: dict | None = None, **kw):
    state = tmp_path / "agent.json"
    monkeypatch.setenv("ACP_TEST_STATE", str(state))
    for k, v in (env or {}).items():
        monkeypatch.setenv(k, v)
    work = tmp_path / "work"
    work.mkdir(parents=True)
    c = collie()
    logs: list[str] = []
    adapter = Adapter(AGENT, name="t", cwd=str(work), state_dir=tmp_path / "st", log=logs.append, **kw)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            await nursery.start(adapter.serve, c)
            t = Lab(adapter, c, logs, state)
            t.nursery = nursery
            c._on_action = adapter.on_action
            yield t
            nursery.cancel_scope.cancel()


async def test_claudes_bash_call_runs_as_a_shell_line_and_its_ask_shows_the_command(tmp_path, monkeypatch):
    """Issue 24 items 2, 3, 5, 6: claude-code-acp's Bash (`command: "touch x && ls"`, no args) runs
    in --cwd as the agent means it; the ask shows the command line; the doubled tool_call is one item
    that ends completed showing the command and its output; no process is left."""
    async with lab(tmp_path, monkeypatch, allow_terminal=True) as t:
        async with trio.open_nursery() as n:
            n.start_soon(t.send, "bash touch made.txt && ls && echo $CLAUDECODE")
            ask = await t.ask()
            assert ask.raw["body"].splitlines()[0] == "$ touch made.txt && ls && echo $CLAUDECODE"
            assert ask.raw["title"] == "`touch made.txt && ls && echo $CLAUDECODE`"
            t.answer(ask, "Allow")
        assert (tmp_path / "work" / "made.txt").exists()
        assert "terminal exit 0" in t.events()
        tools = t.items(kind="tool")
        assert len(tools) == 1, tools
        assert tools[0]["status"] == "completed"
        assert tools[0]["output"] == "$ touch made.txt && ls && echo $CLAUDECODE\nmade.txt\n1"
        assert any(i["kind"] == "reply" and i["text"] == "ran: made.txt\n1" for i in t.items())
        assert t.adapter.terminals.count() == 0


async def test_codex_exec_output_reaches_the_chat(tmp_path, monkeypatch):
    """Issue 24 item 6: codex gives the command only in rawInput and its output only in rawOutput."""
    async with lab(tmp_path, monkeypatch) as t:
        await t.send("exec ls -la")
        tool = t.items(kind="tool")[0]
        assert tool["status"] == "completed" and tool["output"] == "$ ls -la\noutput of ls -la"


async def test_the_agents_error_reason_reaches_the_chat_in_plain_words(tmp_path, monkeypatch):
    """Issue 24 item 4: `Internal error` with data `{"details": "401 …"}` shows the 401, not
    `Internal error`, and no Python class name."""
    async with lab(tmp_path, monkeypatch) as t:
        await t.send("fail")
        notices = [i["text"] for i in t.items(kind="notice")]
        assert notices == ["The agent answered the prompt with an error: 401 Unauthorized: the model server "
                           "refused the API key"]


async def test_a_login_from_the_environment_is_used(tmp_path, monkeypatch):
    """Issue 24 item 1: the agent offers logins (like codex-acp: ChatGPT, an API key variable) and
    refuses session/new until one is done; the adapter authenticates with the one the environment
    provides, and the first conversation works."""
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_AUTH": "env", "TEST_AGENT_KEY": "k-1"}) as t:
        while "session-1" not in t.c._core.conversations:
            await trio.sleep(0.02)
        assert "authenticate test-api-key" in t.events()
        assert t.c.unavailable is None
        await t.send("hello")
        assert any("You said: hello" in i["text"] for i in t.items(kind="reply"))


async def test_without_a_usable_login_the_row_says_what_to_do_and_no_empty_session_is_left(tmp_path, monkeypatch):
    """Issue 24 items 1 and 8: no method can be used (the variable is not set): session/new is refused
    `Authentication required`; the agent's row says so in words with what to do (Unreachable with
    this reason, not Ready), no empty `Session 1` is made, and the healthy agent is not restarted."""
    monkeypatch.delenv("TEST_AGENT_KEY", raising=False)
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_AUTH": "env"}) as t:
        while t.c.unavailable is None:
            await trio.sleep(0.02)
        assert t.c.unavailable == (
            "The agent needs a login. It offers: Login with ChatGPT (--auth chatgpt): Use your ChatGPT login with "
            "Codex CLI; Use TEST_AGENT_KEY (--auth test-api-key): Requires setting the `TEST_AGENT_KEY` environment "
            "variable. Set what it needs in the environment of collie acp run, or pick one with --auth METHOD, "
            "and start it again.")
        assert not t.c._core.conversations  # no empty Session 1
        await trio.sleep(0.3)
        assert t.adapter.restarts == 0 and sum(e.startswith("initialize") for e in t.events()) == 1
        status, body = await _state(t.c)
        assert status == 500 and body["message"] == t.c.unavailable


async def test_a_refused_session_says_what_the_agent_printed(tmp_path, monkeypatch):
    """Issue 24 items 4 and 8: claude-code-acp as root without IS_SANDBOX=1 answers session/new
    `Query closed before response received` while Claude Code prints why on stderr: the row says both."""
    said = "--dangerously-skip-permissions cannot be used with root/sudo privileges for security reasons"
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_NEW_FAILS": said}) as t:
        while t.c.unavailable is None:
            await trio.sleep(0.02)
        assert t.c.unavailable == f"The agent refused a new session: Query closed before response received (it said: {said})"
        assert not t.c._core.conversations


async def test_auth_picks_the_method_and_a_refused_login_is_said(tmp_path, monkeypatch):
    """Issue 24 item 1: `--auth METHOD` picks the method; the agent's refusal of it is shown in words;
    a method the agent does not offer is named with those it does."""
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_AUTH": "env", "TEST_AGENT_KEY": "k"}, auth="chatgpt") as t:
        while t.c.unavailable is None:
            await trio.sleep(0.02)
        assert "authenticate chatgpt" in t.events()
        assert t.c.unavailable == "The agent refused the login chatgpt: cannot log in with chatgpt here"
    async with lab(tmp_path / "b", monkeypatch, env={"ACP_TEST_AUTH": "env"}, auth="nope") as t:
        while t.c.unavailable is None:
            await trio.sleep(0.02)
        assert t.c.unavailable == "--auth nope: the agent offers no such login method (it offers: chatgpt, test-api-key)"


async def test_a_crash_with_an_ask_open_ends_it_stopped_not_decided(tmp_path, monkeypatch):
    """Issue 24 item 9: an ask ended by a crash was not decided by anyone: it ends `stopped`; the
    turn ends with the crash notice; the agent is restarted."""
    async with lab(tmp_path, monkeypatch) as t:
        async with trio.open_nursery() as n:
            n.start_soon(t.send, "askcrash")
            ask = await t.ask()
        assert t.c._core.ended_asks[ask.id] == "stopped"
        item = next(i for i in t.items(kind="ask") if i["ask_id"] == ask.id)
        assert item["end"] == "stopped"
        assert any("exited during the turn" in i["text"] for i in t.items(kind="notice"))


async def test_a_call_left_open_by_the_agent_ends_with_the_turn(tmp_path, monkeypatch):
    """Issue 24 item 5: a tool call the agent never closes does not spin for good."""
    async with lab(tmp_path, monkeypatch) as t:
        await t.send("leave")
        tool = t.items(kind="tool")[0]
        assert tool["status"] == "failed" and tool["output"] == "The turn ended without the agent saying this call finished."


async def test_no_agent_process_outlives_the_adapter(tmp_path, monkeypatch):
    """Issue 24 item 7: after the adapter ends, the agent's process is gone."""
    async with lab(tmp_path, monkeypatch) as t:
        while not t.adapter.up.is_set():
            await trio.sleep(0.02)
        pid = int(next(line for line in t.logs if line.startswith("started ")).rsplit("pid ", 1)[1].rstrip(")"))
        assert alive(pid)
    assert not alive(pid)


async def test_closing_a_conversation_closes_its_session_and_reopening_loads_it(tmp_path, monkeypatch):
    """Issue 24 item 9: a conversation closed on the phone sends session/close (the agent offers it);
    reopened, the next send loads the same session again and goes on in it."""
    async with lab(tmp_path, monkeypatch) as t:
        await t.send("one")
        sid = t.adapter.sessions.by_conv["session-1"]["session_id"]
        assert t.write("close", "session-1") == {"outcome": "done"}
        while f"close {sid}" not in t.events():
            await trio.sleep(0.02)
        assert t.write("reopen", "session-1") == {"outcome": "done"}
        await t.send("two")
        assert f"load {sid}" in t.events()
        assert any("You said: two (prompt 2 of this session)" in i["text"] for i in t.items(kind="reply"))


async def test_modes_are_buttons_and_a_tap_sets_the_mode(tmp_path, monkeypatch):
    """Issue 24 "Beyond": a session's modes (Codex: Read Only / Default / Full Access) are the
    conversation's buttons, the current one dimmed and named in the subtitle; a tap sends
    session/set_mode, and the mode kept across a reload."""
    async with lab(tmp_path, monkeypatch) as t:
        while "session-1" not in t.c._core.conversations:
            await trio.sleep(0.02)
        conv = t.c._core.conv("session-1")
        assert conv.actions == [{"id": "mode-0", "label": "Read Only", "disabled": True},
                                {"id": "mode-1", "label": "Default", "disabled": False},
                                {"id": "mode-2", "label": "Full Access", "disabled": False}]
        assert conv.subtitle == "Mode: Read Only"
        assert t.write("action", "session-1", action="mode-1") == {"outcome": "done"}
        while not any(e.startswith("mode sess-") for e in t.events()):
            await trio.sleep(0.02)
        while conv.subtitle != "Mode: Default":
            await trio.sleep(0.02)
        assert [a["disabled"] for a in conv.actions] == [False, True, False]


async def test_mode_option_puts_each_new_session_in_that_mode(tmp_path, monkeypatch):
    """`--mode auto`: a Codex-like agent whose sessions start Read Only has each new session put in
    `auto` (it can edit); a mode it does not offer is said in the conversation."""
    async with lab(tmp_path, monkeypatch, mode="auto") as t:
        while "session-1" not in t.c._core.conversations:
            await trio.sleep(0.02)
        assert any(e.startswith("mode sess-") and e.endswith(" auto") for e in t.events())
        assert t.c._core.conv("session-1").subtitle == "Mode: Default"
    async with lab(tmp_path / "b", monkeypatch, mode="yolo") as t:
        while "session-1" not in t.c._core.conversations or not t.items(kind="notice"):
            await trio.sleep(0.02)
        assert t.items(kind="notice")[0]["text"] == ("--mode yolo: the agent offers no such mode here "
                                                     "(it offers: read-only, auto, full-access)")


async def test_config_option_is_set_in_each_new_session(tmp_path, monkeypatch):
    """`--config model=large`: each new session gets the agent's config option (Codex: model,
    reasoning effort); an option or a value it does not offer is said in the conversation."""
    async with lab(tmp_path, monkeypatch, config={"model": "large", "effort": "high"}) as t:
        while "session-1" not in t.c._core.conversations or len(t.items(kind="notice")) < 1:
            await trio.sleep(0.02)
        assert any(e.startswith("config sess-") and e.endswith(" model=large") for e in t.events())
        assert [i["text"] for i in t.items(kind="notice")] == [
            "--config effort: the agent offers no such option here (it offers: model)"]
    async with lab(tmp_path / "b", monkeypatch, config={"model": "huge"}) as t:
        while "session-1" not in t.c._core.conversations or not t.items(kind="notice"):
            await trio.sleep(0.02)
        assert t.items(kind="notice")[0]["text"] == "--config model=huge: not one of small, large"


async def test_the_agents_slash_commands_are_starters(tmp_path, monkeypatch):
    """Issue 24 "Beyond": `available_commands_update` offers the agent's commands as starters after
    `New session` (not `/logout`: one tap must not log the agent out); one opens a new session whose
    first prompt is the command."""
    async with lab(tmp_path, monkeypatch) as t:
        while len(t.c._core.starters) < 3:
            await trio.sleep(0.02)
        assert t.c._core.starters == [{"id": "new-session", "label": "New session"},
                                      {"id": "cmd-0", "label": "/review"}, {"id": "cmd-1", "label": "/init"}]
        t.c.conversation("s-2", title="/review")
        await t.adapter.on_starter(t.c.pane_of("s-2"), "cmd-0")
        assert [i["text"] for i in t.items("s-2", kind="user")] == ["/review"]
        assert any("You said: /review (prompt 1 of this session)" in i["text"] for i in t.items("s-2", kind="reply"))


async def test_commands_sent_before_the_session_is_recorded_are_not_lost(tmp_path, monkeypatch):
    """Issue 24 "Beyond": claude-code-acp sends `available_commands_update` right after
    `session/new`'s answer, and it may be read before the adapter has recorded the session (about
    1 run in 6 with the real agent). The scripted agent sends it before the answer, every time: the
    commands are held for that session id and still become starters once the session is recorded."""
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_COMMANDS_FIRST": "1"}) as t:
        with trio.move_on_after(5):
            while len(t.c._core.starters) < 3:
                await trio.sleep(0.02)
        assert t.c._core.starters == [{"id": "new-session", "label": "New session"},
                                      {"id": "cmd-0", "label": "/review"}, {"id": "cmd-1", "label": "/init"}]
        assert not t.adapter._held


async def _state(c) -> tuple[int, dict]:
    from collie.crew.sdk.server import Request

    c.ready()
    resp = await c.handle(Request(method="GET", path="/v1/state", segments=("v1", "state"), query={}, headers={},
                                  body=b"", peer=None))
    return resp.status, resp.body


def _answer_first(c) -> None:
    """Answer the oldest open ask with its first option, as the phone does."""
    ask = next(iter(c._core.asks.values()))
    outcome, effects = c._core.write("answer", ask.id, {"request_id": f"r-{ask.id}", "digest": ask.digest,
                                                        "option_ids": [ask.raw["options"][0]["id"]]},
                                     now_iso(), time.time(), None)
    assert outcome["outcome"] == "accepted", outcome
    c._apply(effects)


async def stop_while_slow(t) -> None:
    """Send `slow` and Stop it once it ticks, as the SDK stops a turn: the send's scope cancelled."""
    async with trio.open_nursery() as n:
        scope = trio.CancelScope()

        async def send() -> None:
            with scope:
                await t.send("slow")

        n.start_soon(send)
        while not any("tick 1" in i["text"] for i in t.items(kind="reply")):
            await trio.sleep(0.02)
        scope.cancel()


async def test_a_stale_end_turn_after_a_stop_does_not_end_the_turn_so_its_ask_is_seen(tmp_path, monkeypatch):
    """Issue 38: as claude-agent-acp 0.23 after a stop (ACP_TEST_STALE), the next prompt is answered
    `end_turn` at once, before any update of it, and the agent asks permission for it afterwards.
    The adapter does not end that turn on the stale answer: the ask reaches the phone, Allow reaches
    the agent once and the edit is made; the turn ends once the agent stays silent with no ask open,
    saying what happened; what the agent did for it shows with the next message, not lost."""
    from collie.crew.acp import adapter as adapter_module

    monkeypatch.setattr(adapter_module, "STALE_HOLD", 1.0, raising=False)
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_STALE": "1"}) as t:
        await stop_while_slow(t)
        assert any(e.startswith("cancel ") for e in t.events()), (t.events(), t.items(), t.logs)
        async with trio.open_nursery() as n:
            n.start_soon(t.send, "tool")
            ask = await t.ask()
            assert ask.raw["title"] == "Edit notes.txt"
            assert any(e.startswith("stale end_turn") for e in t.events())  # answered before it asked
            t.answer(ask, "Allow")
        assert (tmp_path / "work" / "notes.txt").read_text() == "noted\n"
        assert [e for e in t.events() if e.startswith("permission")] == ["permission selected allow-once-1"]
        assert t.items(kind="ask")[-1]["end"] == "answered"
        assert adapter_module.STALE_NOTE in [i["text"] for i in t.items(kind="notice")]
        assert any("stale" in line and "end_turn" in line for line in t.logs), t.logs
        await t.send("hello")
        assert any(i["kind"] == "reply" and "Edited notes.txt." in i["text"] for i in t.items())


async def test_an_ask_after_a_stale_turn_ended_is_shown_not_cancelled_unseen(tmp_path, monkeypatch):
    """Issue 38: after an error the agent (ACP_TEST_STALE) answers the next prompt stale; when its ask
    comes only after the adapter ended that turn, the ask is still shown (in a turn of its own) and
    its answer reaches the agent — it is never cancelled unseen."""
    from collie.crew.acp import adapter as adapter_module

    monkeypatch.setattr(adapter_module, "STALE_HOLD", 0.0, raising=False)
    async with lab(tmp_path, monkeypatch, env={"ACP_TEST_STALE": "1", "ACP_TEST_ASK_AFTER": "1"}) as t:
        await t.send("fail")
        async with trio.open_nursery() as n:
            n.start_soon(t.send, "tool")  # answered stale; held 0 s: the turn ends before the ask comes
            ask = await t.ask()
            t.answer(ask, "Reject")
        while not [e for e in t.events() if e.startswith("permission")]:
            await trio.sleep(0.02)
        assert [e for e in t.events() if e.startswith("permission")] == ["permission selected reject-once-1"]
        assert (tmp_path / "work" / "notes.txt").exists() is False


async def test_an_update_that_breaks_the_schema_in_one_field_is_kept_without_it(tmp_path, monkeypatch):
    """Issue 38: claude-agent-acp sends `usage_update` with `"used": null`; an update whose one field
    breaks the schema (here also a `tool_call` whose `title` is null) is kept without that field — the
    call is shown, completed, with its command — and the log names the update type and the field."""
    async with lab(tmp_path, monkeypatch) as t:
        await t.send("misfit")
        tools = t.items(kind="tool")
        assert [(x["tool_call_id"], x["status"], x["output"]) for x in tools] == [
            ("call-misfit", "completed", "$ echo kept")], tools
        assert [i["text"] for i in t.items(kind="reply")] == ["misfit done"]
        said = [line for line in t.logs if "does not fit the ACP schema" in line]
        assert any("usage_update" in line and "used" in line for line in said), said
        assert any("tool_call" in line and "title" in line for line in said), said
