"""Every ACP agent people run, on the phone, for real (issue 38): Gemini CLI, Qwen Code, opencode and
claude-agent-acp from the npm registry (pinned and installed by `python -m tests.browser`,
tests/agents.py), each run by `collie acp run` against the model stand-in that speaks its API
(tests/modelstandin.py: Gemini streamGenerateContent, OpenAI Chat Completions, Anthropic Messages),
attached to a real `collie serve` and read and written through the phone API.

Codex (codex-acp) and Claude Code (claude-code-acp) run the same tests; tests/system/test_acp_real.py has
more of theirs. One setup per agent for the whole module (one stand-in, one bridge, one agent process): each test
opens a conversation of its own with the `New session` starter, so that what one test leaves (a
stopped turn, claude-agent-acp's stale state after it) does not reach the next. The crash test is
the last of each agent's: it restarts the agent."""

from __future__ import annotations

import time

import httpx
import pytest

from collie.crew.acp.adapter import STALE_NOTE
from collie.crew.paths import Paths
from tests import agents
from tests.acpchecks import (SLOW, back_after_the_crash, crashed_with_an_ask_open, stopped_mid_reply,
                             stopped_with_an_ask_open)
from tests.conftest import BridgeProcess, collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.modelstandin import Edit, Fail, Hang, Read, Shell, StandIn, Text
from tests.system.test_acp_real import Phone, RealAgent, _status, _turn_of, _visible, children, rid
from tests.system.test_durable_e2e import live, wait_for

pytestmark = pytest.mark.slow
VENDORS = ["gemini", "qwen", "opencode", "claude-agent", "codex", "claude"]
ARGS = {"qwen": ("--mode", "default")}  # Qwen Code's default mode runs tools without asking
RUNTIME = {"gemini": "gemini-cli 0.61.0", "qwen": "0.24.4", "opencode": "1.18.33",
           "claude-agent": "claude-agent-acp 0.23.1", "codex": "codex-acp 0.16.0", "claude": "claude-code-acp 0.16.2"}
ERROR = "stand-in: this API key is not valid"


class Conv(Phone):
    """The phone API for one conversation of the agent."""

    def __init__(self, client: httpx.Client, agent: str, conv: str) -> None:
        super().__init__(client, agent)
        self.conv = conv

    def pane(self, conv: str | None = None) -> dict:
        return super().pane(conv or self.conv)

    def items(self, conv: str | None = None) -> list[dict]:
        return super().items(conv or self.conv)

    def send(self, text: str, conv: str | None = None) -> dict:
        # the inbox runs one request of an agent at a time (crew.md §4): the previous test's last turn may
        # still be ending (a slow agent on a loaded machine), and then this send would wait `queued`
        wait_for(lambda: not any(i.get("state") in ("running", "approved") for i in
                                 self.c.get(f"/api/agents/local/{self.agent}/inbox").json().get("items", [])),
                 timeout=SLOW, what="the agent's earlier requests ended")
        return super().send(text, conv or self.conv)

    def stop(self, conv: str | None = None) -> dict:
        return super().stop(conv or self.conv)

    def notices(self) -> str:
        return "\n".join(i["text"] for i in self.items() if i["kind"] == "notice")


class Vendor:
    def __init__(self, kind: str, client: httpx.Client, agent: RealAgent, standin: StandIn) -> None:
        self.kind, self.c, self.agent, self.standin = kind, client, agent, standin
        self.n = 0

    def conversation(self) -> Conv:
        """A new conversation (the `New session` starter: a new ACP session), ready to take a send."""
        started = self.c.post(f"/api/agents/local/{self.kind}/starters/new-session", json={"request_id": rid()}).json()
        assert started["outcome"] == "started", started
        conv = Conv(self.c, self.kind, started["conversation"])
        wait_for(lambda: "session " in (conv.pane().get("line2") or "") or conv.pane().get("actions"),
                 timeout=SLOW, what="the new session")
        return conv

    def name(self, stem: str) -> str:
        """A file name of its own in the agent's folder, per test."""
        self.n += 1
        return f"{stem}-{self.n}.txt"


@pytest.fixture(scope="module", params=VENDORS)
def vendor(request):
    """One real agent behind `collie acp run`, attached to a bridge, for the module's tests."""
    kind = request.param
    if not agents.ready():
        pytest.fail(f"the real ACP agents are not installed in {agents.ROOT}: run `python -m tests.browser` "
                    "(the README's test command does)")
    run = short_dir()
    paths = Paths(config_dir=run / "config", state_dir=run / "state")
    started = time.monotonic()
    with StandIn() as standin:
        agent = RealAgent(kind, paths, run, standin.url, args=ARGS.get(kind, ()))
        bridge = None
        try:
            agent.start()
            assert run_collie(paths, "durable", "attach", kind, "--socket", agent.sock).returncode == 0
            bridge = BridgeProcess(paths, collie_env(paths))
            address = bridge.wait_ready()["address"]
            try:
                wait_for(lambda: _status(paths, kind) == "ready", timeout=SLOW, what=f"{kind} ready")
            except AssertionError:
                raise AssertionError(f"{kind} not ready: {live(paths)}") from None
            token = (paths.state_dir / "api-token").read_text().strip()
            with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30) as c:
                wait_for(lambda: c.get(f"/api/agents/local/{kind}/conversations").json().get("open"),
                         timeout=SLOW, what="Session 1")
                print(f"{kind} ready in {time.monotonic() - started:.1f} s")
                yield Vendor(kind, c, agent, standin)
        finally:
            print(f"collie acp run's stderr ({len(agent.stderr)} lines, the last 60):", *agent.stderr[-60:],
                  sep="\n  ")
            print("model requests:", *[(r["api"], _turn_of(r)) for r in standin.requests], sep="\n  ")
            agent.stop()
            left = agent.left_behind()
            agent.kill_left()
            if bridge is not None:
                bridge.stop()
                if bridge.proc.stdout:
                    bridge.proc.stdout.close()
            cleanup(run)
            print(f"{kind}: the module's setup and tests took {time.monotonic() - started:.1f} s")
    assert not left, f"processes left behind by {kind}: {left}"


def test_a_reply_streams_into_one_item_and_the_agent_is_named(vendor):
    """Issue 38: a send is one prompt to the real agent; the model's streamed reply grows one reply item
    that ends final; the agent's row names it after itself (initialize's agentInfo, with its version)."""
    phone = Conv(vendor.c, vendor.kind, "session-1")
    vendor.standin.script("say hello", [Text("Hello from the stand-in model.", chunks=4)])
    assert phone.send("say hello, please")["outcome"] == "sent"
    reply = phone.reply("Hello from the stand-in model.")
    assert reply["text"].strip() == "Hello from the stand-in model."
    its = phone.turn_ended()
    assert len([i for i in its if i["kind"] == "reply"]) == 1, its
    assert RUNTIME[vendor.kind] in live(vendor.agent.paths)[vendor.kind]["runtime"]


def test_a_command_asks_showing_it_and_runs_once_when_allowed(vendor):
    """Issue 38: the model asks for a shell command; the ask shows the command line and nothing ran
    before the answer; Allow reaches the agent once: the command runs once, its call ends completed
    (one item however often the agent re-sends it), and the model's reply follows."""
    phone = vendor.conversation()
    ran = vendor.name("ran")
    command = f"echo hello-out >> {ran} && cat {ran}"
    vendor.standin.script("make the file", [Shell(command), Text("Ran it.")])
    assert phone.send("make the file")["outcome"] == "sent"
    ask = phone.ask()
    assert command in _visible(ask), ask
    assert not (vendor.agent.work / ran).exists()
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Ran it.")
    assert (vendor.agent.work / ran).read_text() == "hello-out\n"  # once
    tools = [t for t in phone.tools() if t["status"] != "completed" or command in (t.get("title") or "")
             or command in (t.get("output") or "")]
    assert len(tools) == 1 and tools[0]["status"] == "completed", phone.tools()
    assert [i["end"] for i in phone.items() if i["kind"] == "ask"] == ["answered"]


def test_a_command_that_prints_nothing_shows_no_json(vendor):
    """Issue 38: a command that prints nothing (Codex then sends a rawOutput of empty fields beside its
    call_id and process_id) shows its command line at most — never the agent's raw output as JSON."""
    phone = vendor.conversation()
    quiet = vendor.name("quiet")
    vendor.standin.script("touch it quietly", [Shell(f"touch {quiet}"), Text("Touched.")])
    assert phone.send("touch it quietly")["outcome"] == "sent"
    assert phone.answer(phone.ask(), "allow")["outcome"] == "accepted"
    phone.reply("Touched.")
    assert (vendor.agent.work / quiet).exists()
    outputs = [t.get("output") or "" for t in phone.tools()]
    assert outputs and not any("{" in o or "call_id" in o or "stdout" in o for o in outputs), outputs


def test_a_denied_command_does_not_run_and_the_conversation_goes_on(vendor):
    """Issue 38, B5: Reject reaches the agent as its reject option: the command does not run, no call is
    left running, the ask ends answered, and the next prompt is answered."""
    phone = vendor.conversation()
    denied = vendor.name("denied")
    vendor.standin.script("write the denied file", [Shell(f"echo no >> {denied}"), Text("Left it alone.")])
    vendor.standin.script("anything else", [Text("Still here.")])
    assert phone.send("write the denied file")["outcome"] == "sent"
    ask = phone.ask()
    assert phone.answer(ask, "deny")["outcome"] == "accepted"
    phone.turn_ended()
    assert not (vendor.agent.work / denied).exists()
    wait_for(lambda: all(t["status"] in ("denied", "failed", "completed") for t in phone.tools()),
             what="no call left running")
    assert [i["end"] for i in phone.items() if i["kind"] == "ask"] == ["answered"]
    wait_for(lambda: phone.pane()["ask"] is None and phone.pane().get("state") != "working")
    assert phone.send("anything else")["outcome"] == "sent"
    phone.reply("Still here.")


def test_an_edit_asks_showing_the_file_and_the_change(vendor):
    """Issue 38: a file edit's ask shows the file and the change (the old and the new line); nothing is
    changed before the answer; Allow applies it."""
    phone = vendor.conversation()
    notes = vendor.agent.work / vendor.name("notes")
    notes.write_text("one\ntwo\n")
    # Qwen Code and claude-agent-acp edit only a file they read first
    vendor.standin.script(f"fix {notes.name}", [Read(str(notes)), Edit(str(notes), "two", "TWO"), Text("Edited.")])
    assert phone.send(f"fix {notes.name}")["outcome"] == "sent"
    ask = phone.ask()
    body = ask.get("body") or ""
    assert notes.name in _visible(ask) and "-two" in body and "+TWO" in body, ask
    assert notes.read_text() == "one\ntwo\n"
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Edited.")
    assert notes.read_text() == "one\nTWO\n"


def test_a_model_error_reaches_the_phone_in_the_agents_words(vendor):
    """Issue 38: the model refuses the key (401): the turn ends with a notice carrying the server's own
    words as the agent passes them on, not `Internal error` alone, no JSON, no Python class name."""
    phone = vendor.conversation()
    vendor.standin.script("break with 401", [Fail(401, ERROR)])
    assert phone.send("break with 401")["outcome"] == "sent"
    phone.turn_ended()
    shown = phone.notices() + "\n".join(i["text"] for i in phone.items() if i["kind"] == "reply")
    assert ERROR in shown, shown
    assert "RpcError" not in shown and '{"error"' not in shown and shown.strip() != "Internal error", shown


def test_stop_mid_reply_ends_the_turn_and_the_next_ask_is_seen(vendor):
    """Issue 38, K3: Stop mid-reply sends session/cancel; the turn ends stopped and no item stays
    growing. The next prompt's ask reaches the phone and Allow runs its command once — also with
    claude-agent-acp, which answers that prompt with a stale end_turn and asks afterwards (the adapter
    keeps the turn open for it and says so)."""
    phone = vendor.conversation()
    after = vendor.name("after")
    vendor.standin.script("think long", [Hang("Thinking about it")])
    vendor.standin.script("after the stop", [Shell(f"echo after >> {after}"), Text("After the stop.")])
    stopped_mid_reply(phone)
    wait_for(lambda: phone.send("after the stop")["outcome"] == "sent", what="a send taken")
    ask = phone.ask()
    assert f"echo after >> {after}" in _visible(ask), ask
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    wait_for(lambda: (vendor.agent.work / after).exists(), timeout=SLOW, what="the command run")
    if vendor.kind == "claude-agent":  # its reply comes with the next prompt; the turn ends on the adapter's hold
        wait_for(lambda: STALE_NOTE in phone.notices(), timeout=SLOW, what="the stale turn said")
    else:
        phone.reply("After the stop.")
    assert (vendor.agent.work / after).read_text() == "after\n"


def test_stop_with_an_ask_open_ends_it_stopped_and_nothing_runs(vendor):
    """Issue 38: Stop with a command's ask open: the ask ends stopped (not decided), the command never
    runs, the turn ends stopped and its call does not stay running."""
    phone = vendor.conversation()
    never = vendor.name("never")
    vendor.standin.script("ask then stop", [Shell(f"echo never >> {never}"), Text("Ran it.")])
    assert phone.send("ask then stop")["outcome"] == "sent"
    stopped_with_an_ask_open(phone, vendor.agent.work / never)


def test_zz_a_crash_with_an_ask_open_leaves_nothing_running_and_the_agent_comes_back(vendor):
    """Issue 38 (last of each agent's: it restarts it): the agent's main process dies (SIGKILL) with a
    command's ask open. The turn ends saying the agent exited; the ask does not claim it was decided;
    no call stays running; every process of the crashed agent is gone; the adapter starts it again and
    the conversation's next prompt is answered."""
    base = f"/api/agents/local/{vendor.kind}/conversations"
    for row in vendor.c.get(base).json()["open"]:  # after the restart only this one is loaded again
        turn = vendor.c.get(f"{base}/{row['id']}").json()["turn"]
        vendor.c.post(f"{base}/{row['id']}/close", json={"request_id": rid(), "turn": turn})
    wait_for(lambda: not vendor.c.get(base).json()["open"], what="the earlier conversations closed")
    phone = vendor.conversation()
    crashed = vendor.name("crashed")
    vendor.standin.script("before the crash", [Shell(f"echo crashed >> {crashed}"), Text("Ran it.")])
    vendor.standin.script("after the crash", [Text("Back again.")])
    assert phone.send("before the crash")["outcome"] == "sent"
    crashed_with_an_ask_open(phone, vendor.agent, lambda before: next(iter(children(vendor.agent.proc.pid))))
    back_after_the_crash(phone, vendor.agent.work / crashed)
