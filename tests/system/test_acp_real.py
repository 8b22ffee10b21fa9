"""Claude Code and Codex on the phone, for real (issue 24): the npm registry's `@zed-industries/codex-acp`
(a real Codex binary behind a node launcher) and `@zed-industries/claude-code-acp` (Claude Code through
the Claude Agent SDK), pinned and installed by `python -m tests.browser` (tests/agents.py), each run by
`collie acp run`, attached to a real `collie serve` and read and written through the phone API. Their
model is tests/modelstandin.py: the test decides what the model says, so every run is the same."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from collie.crew.errors import NotRunningError
from tests import agents
from tests.acpchecks import (SLOW, alive, back_after_the_crash, crashed_with_an_ask_open, stopped_mid_reply,
                             stopped_with_an_ask_open)
from tests.conftest import REPO, run_collie
from tests.livelab import cleanup, short_dir
from tests.modelstandin import (Edit, Fail, Hang, Plan, Shell, StandIn, Text, chat_turn, gemini_turn, messages_turn,
                                responses_turn)
from tests.system.test_durable_e2e import live, wait_for

pytestmark = pytest.mark.slow
KINDS = ["codex", "claude"]
COMMAND = "echo hello-out > made.txt && cat made.txt"


def rid() -> str:
    return str(uuid.uuid4())


def processes() -> dict[int, tuple[int, str]]:
    """Every live process: pid → (parent pid, command name), read from /proc (zombies left out)."""
    found: dict[int, tuple[int, str]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        name, rest = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if rest[0] != "Z":  # a zombie is gone, only not yet reaped
            found[int(entry)] = (int(rest[1]), name)
    return found


def descendants(pid: int) -> dict[int, str]:
    """Every process below `pid` (pid → its command name)."""
    procs = processes()
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        for child, (parent, name) in procs.items():
            if parent == p and child not in found:
                found[child] = name
                todo.append(child)
    return found


def sleeping(seconds: str) -> list[int]:
    """Every `sleep <seconds>` on the machine (a background child outlives its shell: it is not below
    the adapter any more once its parent exited)."""
    found = []
    for pid, (_, name) in processes().items():
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if name == "sleep" and argv[1:2] == [seconds.encode()]:
            found.append(pid)
    return found


def children(pid: int) -> set[int]:
    return {child for child, (parent, _) in processes().items() if parent == pid}


class RealAgent:
    """`collie acp run --name <kind> --cwd WORK --socket SOCK [--allow-terminal] -- <the real agent>`."""

    def __init__(self, kind: str, paths, run: Path, model_url: str, *, terminal: bool = False,
                 auth: bool = False, broken: bool = False, args: tuple[str, ...] = (),
                 sandbox: str | None = "1", backtrace: bool = False) -> None:
        self.kind, self.paths, self.run = kind, paths, run
        self.work = run / "work"
        self.work.mkdir(exist_ok=True)
        (self.work / "notes.txt").write_text("one\ntwo\n")
        self.sock = str(run / "acp" / "app.sock")
        home = run / "home"
        if kind == "codex":
            self.command, env = agents.codex(home, model_url, auth=auth)
        else:
            self.command, env = agents.KINDS[kind](home, model_url)
        if kind == "claude" and sandbox != "1":
            env.pop("IS_SANDBOX", None)
            if sandbox is not None:
                env["IS_SANDBOX"] = sandbox
        if broken:  # a config the agent cannot read: it exits at once, saying why on stderr
            (home / "codex" / "config.toml").write_text("model = \n")
        if backtrace:  # as some machines have it: Codex then ends its error with a stack trace
            env["RUST_BACKTRACE"] = "1"
        env.update(COLLIE_CONFIG_DIR=str(paths.config_dir), COLLIE_STATE_DIR=str(paths.state_dir))
        self.env = env
        self.terminal = terminal
        self.args = args
        self.proc: subprocess.Popen | None = None
        self.stderr: list[str] = []
        self.seen: dict[int, str] = {}  # every process seen below the adapter

    def start(self) -> None:
        extra = [*(["--allow-terminal"] if self.terminal else []), *self.args]
        self.proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "acp", "run", "--name", self.kind,
                                      "--cwd", str(self.work), "--socket", self.sock, *extra, "--", *self.command],
                                     cwd=REPO, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._drainer = threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)
        self._drainer.start()
        line = self.proc.stdout.readline()
        assert line == f"listening {self.sock}\n", (line, "".join(self.stderr))
        self.proc.stdout.readline()

    def _drain(self, stream) -> None:
        for line in stream:
            self.stderr.append(line)

    def tree(self) -> dict[int, str]:
        """The processes below the adapter now (and remembered for `left_behind`)."""
        now = descendants(self.proc.pid) if self.proc is not None else {}
        self.seen.update(now)
        return now

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.tree()
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.proc.stdout.close()
            self._drainer.join(timeout=5)
            self.proc.stderr.close()

    def left_behind(self) -> dict[int, str]:
        """What the adapter started that still runs (waited for a little: a process may be ending)."""
        try:
            wait_for(lambda: not alive(self.seen), timeout=5, what="the agent's processes gone")
        except AssertionError:
            pass
        return {pid: self.seen[pid] for pid in alive(self.seen)}

    def kill_left(self) -> None:
        for pid in alive(self.seen):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


class Phone:
    """The phone API of the bridge, for one agent's conversations."""

    def __init__(self, client: httpx.Client, agent: str) -> None:
        self.c, self.agent = client, agent
        self.base = f"/api/agents/local/{agent}/conversations"

    def pane(self, conv: str = "session-1") -> dict:
        return self.c.get(f"{self.base}/{conv}").json()

    def items(self, conv: str = "session-1") -> list[dict]:
        return self.c.get(f"{self.base}/{conv}/items").json()["items"]

    def send(self, text: str, conv: str = "session-1") -> dict:
        turn = self.pane(conv)["turn"]
        return self.c.post("/api/send", json={"request_id": rid(), "agent": self.agent, "conversation": conv,
                                              "text": text, "turn": turn}).json()

    def answer(self, ask: dict, role: str) -> dict:
        option = next(o["id"] for o in ask["options"] if o["role"] == role)
        return self.c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": self.agent,
                                                          "digest": ask["digest"],
                                                          "answer": {"option_ids": [option]}}).json()

    def stop(self, conv: str = "session-1") -> dict:
        turn = self.pane(conv)["turn"]
        return self.c.post(f"{self.base}/{conv}/stop", json={"request_id": rid(), "turn": turn}).json()

    def ask(self, timeout: float = SLOW) -> dict:
        return wait_for(lambda: self.pane()["ask"], timeout=timeout, what="an ask")

    def reply(self, needle: str, timeout: float = SLOW) -> dict:
        return wait_for(lambda: next((i for i in self.items() if i["kind"] == "reply" and i.get("final")
                                      and needle in i["text"]), None), timeout=timeout, what=f"a reply {needle!r}")

    def turn_ended(self, timeout: float = SLOW) -> list[dict]:
        """The items once the last turn has ended (a turn_end after the last user line)."""
        def ended():
            its = self.items()
            users = [i["seq"] for i in its if i["kind"] == "user"]
            ends = [i["seq"] for i in its if i["kind"] == "turn_end"]
            return its if users and ends and max(ends) > max(users) else None
        return wait_for(ended, timeout=timeout, what="the turn's end")

    def tools(self) -> list[dict]:
        return [i for i in self.items() if i["kind"] == "tool"]


@pytest.fixture
def standin():
    with StandIn() as s:
        yield s


@pytest.fixture
def real(request, paths, bridge, standin):
    """One real agent (`kind` from the test's parameter) behind `collie acp run`, attached, ready."""
    if not agents.ready():
        pytest.fail(f"the real ACP agents are not installed in {agents.ROOT}: run `python -m tests.browser` "
                    "(the README's test command does)")
    kind = request.param if isinstance(request.param, str) else request.param[0]
    options = {} if isinstance(request.param, str) else request.param[1]
    run = short_dir()
    agent = RealAgent(kind, paths, run, standin.url, **options)
    agent.start()
    try:
        assert run_collie(paths, "durable", "attach", kind, "--socket", agent.sock).returncode == 0
        address = bridge().wait_ready()["address"]
        if not options.get("broken") and options.get("sandbox", "1") == "1":
            wait_for(lambda: _status(paths, kind) == "ready", timeout=SLOW, what=f"{kind} ready")
        token = (paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30) as c:
            phone = Phone(c, kind)
            if not options.get("broken") and options.get("sandbox", "1") == "1":
                wait_for(lambda: phone.c.get(phone.base).json().get("open"), timeout=SLOW, what="Session 1")
            yield phone, agent, standin
            print("items at the end:", *phone.c.get(f"{phone.base}/session-1/items").json().get("items", []),
                  sep="\n  ")
    finally:
        print(f"collie acp run's stderr ({len(agent.stderr)} lines, the last 60):", *agent.stderr[-60:], sep="\n  ")
        print("model requests:", *[(r["api"], _turn_of(r)) for r in standin.requests], sep="\n  ")
        agent.stop()
        left = agent.left_behind()
        agent.kill_left()
        cleanup(run)
    assert not left, f"processes left behind by {kind}: {left}"


def _turn_of(request: dict):
    read = {"responses": responses_turn, "messages": messages_turn, "gemini": gemini_turn,
            "chat": chat_turn}[request["api"]]
    return read(request["body"]), bool(request["body"].get("tools"))


def _status(paths, name: str) -> str | None:
    try:
        return live(paths).get(name, {}).get("status")
    except NotRunningError:
        return None


def dashboard_row(phone, name: str) -> dict | None:
    rows = {r["name"]: r for s in phone.c.get("/api/dashboard").json()["sections"] for r in s["agents"]}
    return rows.get(name)


def words(r) -> str:
    """What an agent's dashboard row says."""
    return " ".join(str(r.get(k) or "") for k in ("line2", "status_label", "reason", "detail")) if r else ""


def _visible(ask: dict) -> str:
    return f"{ask.get('title') or ''}\n{ask.get('body') or ''}"


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_shell_command_asks_showing_the_command_and_runs_when_allowed(real):
    """Issue 24 items 3, 5, 6: the model asks for a shell command; the phone's ask shows the command
    line; Allow runs it in the agent's folder; its output reaches the tool item, which ends completed
    (one item for the call, however often the agent re-sends it); the model then replies."""
    phone, agent, standin = real
    standin.script("make the file", [Shell(COMMAND), Text("Ran it.")])
    assert phone.send("make the file")["outcome"] == "sent"
    ask = phone.ask()
    assert COMMAND in _visible(ask), ask
    assert not (agent.work / "made.txt").exists()  # nothing ran before the answer
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Ran it.")
    assert (agent.work / "made.txt").read_text() == "hello-out\n"
    tools = phone.tools()
    assert len(tools) == 1, tools  # one toolCallId, one item
    assert tools[0]["status"] == "completed", tools
    assert "hello-out" in (tools[0].get("output") or ""), tools


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_denied_command_does_not_run(real):
    """Issue 24 item 5, B5: Reject on the phone reaches the agent as its reject option: the command does
    not run, the turn ends (both agents end the turn on a refusal: no further model call), the ask ends
    answered, and the call is at most one item (Codex announces a call only once it runs), denied or
    failed, none left `running`; the next prompt is answered."""
    phone, agent, standin = real
    standin.script("make the file", [Shell(COMMAND), Text("Left it alone.")])
    standin.script("then what", [Text("Still here.")])
    assert phone.send("make the file")["outcome"] == "sent"
    ask = phone.ask()
    assert phone.answer(ask, "deny")["outcome"] == "accepted"
    phone.turn_ended()
    assert not (agent.work / "made.txt").exists()
    tools = phone.tools()
    assert len(tools) == {"codex": 0, "claude": 1}[agent.kind], tools
    assert all(t["status"] in ("denied", "failed") for t in tools), tools
    assert [i["end"] for i in phone.items() if i["kind"] == "ask"] == ["answered"]
    assert phone.send("then what")["outcome"] == "sent"
    phone.reply("Still here.")


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_an_edit_asks_showing_the_file_and_the_change(real):
    """Issue 24 item 3: a file edit's ask shows the file and the change (the old and the new line), not
    a bare `edit <path>`; Allow applies it."""
    phone, agent, standin = real
    notes = agent.work / "notes.txt"
    standin.script("fix the notes", [Edit(str(notes), "two", "TWO"), Text("Edited.")])
    assert phone.send("fix the notes")["outcome"] == "sent"
    ask = phone.ask()
    shown = _visible(ask)
    assert "notes.txt" in shown and "two" in ask.get("body", "") and "TWO" in ask.get("body", ""), ask
    assert notes.read_text() == "one\ntwo\n"
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Edited.")
    assert notes.read_text() == "one\nTWO\n"


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_model_error_reaches_the_phone_in_the_agents_words(real):
    """Issue 24 item 4: an error from the model (a 401, then a 500) ends the turn with a notice that
    carries the agent's own reason, not `Internal error` alone nor a Python class name; the next
    prompt works again."""
    phone, agent, standin = real
    errors = [(401, "stand-in: this API key is not valid"), (500, "stand-in: the model server broke")]
    for status, message in errors:
        standin.script(f"break with {status}", [Fail(status, message)])
    standin.script("and now?", [Text("Fine again.")])
    for status, message in errors:
        wait_for(lambda: phone.pane()["ask"] is None and phone.pane().get("state") != "working")
        assert phone.send(f"break with {status}")["outcome"] == "sent"
        its = phone.turn_ended()
        turn = max(i["turn"] for i in its if i["kind"] == "user")
        shown = "\n".join(i["text"] for i in its if i["kind"] in ("notice", "reply") and i.get("turn") == turn)
        # the agent's own reason: the server's words where the agent passes them on (Codex words a 500 itself)
        reason = "experiencing high demand" if (agent.kind, status) == ("codex", 500) else message
        assert reason in shown, (status, shown)
        assert "RpcError" not in shown and shown.strip() != "Internal error", (status, shown)
    assert phone.send("and now?")["outcome"] == "sent"
    phone.reply("Fine again.")


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_stop_ends_the_turn_and_the_agent_goes_on(real):
    """Issue 24 item 5, K3: stop mid-reply sends session/cancel; the turn ends stopped, no item stays
    running, and the next prompt is answered. Stop with a command's ask open: the ask ends stopped,
    the command never runs, and its call does not stay `running`."""
    phone, agent, standin = real
    standin.script("think long", [Hang("Thinking about it")])
    standin.script("and after", [Text("After the stop.")])
    standin.script("make the file", [Shell(COMMAND), Text("Ran it.")])
    stopped_mid_reply(phone)
    assert phone.send("and after")["outcome"] == "sent"
    phone.reply("After the stop.")

    phone.turn_ended()
    assert phone.send("make the file")["outcome"] == "sent"
    stopped_with_an_ask_open(phone, agent.work / "made.txt")


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_crashed_agent_is_restarted_whole_and_its_open_ask_is_not_called_decided(real):
    """Issue 24 items 5, 7, 9: the agent's main process dies (SIGKILL) while a command's ask is open. The
    turn ends saying the agent exited; the ask ends without claiming it was decided; its call does not
    stay `running`; whatever the agent had started (codex-acp's binary) goes with it; the adapter
    starts the agent again, reloads the session, and the next prompt is answered."""
    phone, agent, standin = real
    standin.script("make the file", [Shell(COMMAND), Text("Ran it.")])
    standin.script("after the crash", [Text("Back again.")])
    assert phone.send("make the file")["outcome"] == "sent"
    asks = crashed_with_an_ask_open(phone, agent, lambda before: next(
        pid for pid, name in before.items() if name == "node" and pid in children(agent.proc.pid)))
    assert "Decided" not in (asks[0].get("line") or ""), asks
    back_after_the_crash(phone, agent.work / "made.txt")


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_reply_streams_and_an_adapter_restart_leaves_no_process(real):
    """Issue 24 items 7, K3: a send is one session/prompt to the real agent; the model's streamed reply
    grows one reply item that ends final; the agent is named after itself (initialize's agentInfo).
    Stopping `collie acp run` ends the whole agent (codex-acp's node launcher and its native binary;
    Claude Code's node and its `claude`) — nothing is left running; started again, the session is
    reloaded and the next prompt is answered in it."""
    phone, agent, standin = real
    standin.script("say hello", [Text("Hello from the stand-in model.", chunks=4)])
    standin.script("second", [Text("Second answer.")])
    assert phone.send("say hello, please")["outcome"] == "sent"
    reply = phone.reply("Hello from the stand-in model.")
    assert reply["text"].strip() == "Hello from the stand-in model."
    its = phone.turn_ended()
    assert [i["kind"] for i in its if i["kind"] == "reply"] == ["reply"]  # four chunks, one item
    assert live(agent.paths)[agent.kind]["runtime"].startswith(
        {"codex": "codex-acp 0.16.0", "claude": "@zed-industries/claude-code-acp 0.16.2"}[agent.kind])
    assert any("say hello, please" in str(r["body"]) for r in standin.requests)
    tree = agent.tree()
    assert "node" in tree.values(), tree
    if agent.kind == "codex":
        assert agents.CODEX_BINARY in tree.values(), tree  # the launcher started the real binary
    agent.stop()
    assert not agent.left_behind(), agent.left_behind()
    agent.start()
    wait_for(lambda: phone.pane().get("agent_status") == "ready" and "Starting" not in phone.pane().get("line2", ""),
             timeout=SLOW, what="ready again")
    wait_for(lambda: phone.send("second")["outcome"] == "sent", timeout=SLOW, what="a send taken")
    phone.reply("Second answer.")
    assert len([i for i in phone.items() if i["kind"] == "user"]) == 2  # the same conversation went on


@pytest.mark.parametrize("real", [("claude", {"terminal": True})], indirect=True)
def test_claude_codes_bash_runs_as_a_shell_line_in_an_adapter_terminal(real):
    """Issue 24 item 2: with `--allow-terminal` claude-code-acp runs Bash through `terminal/create` with
    one string, `echo … > made.txt && cat made.txt`: the adapter runs it as a shell line in the agent's
    folder, the output reaches the tool item, and the terminal's environment holds none of the adapter's
    secrets (here the model's API key, which only the agent was given)."""
    phone, agent, standin = real
    standin.script("make the file", [Shell(COMMAND), Text("Ran it.")])
    standin.script("show the env", [Shell("env; echo env-done"), Text("Shown.")])
    assert phone.send("make the file")["outcome"] == "sent"
    ask = phone.ask()
    assert COMMAND in _visible(ask), ask
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Ran it.")
    assert (agent.work / "made.txt").read_text() == "hello-out\n"
    tools = phone.tools()
    assert len(tools) == 1 and tools[0]["status"] == "completed", tools
    assert "hello-out" in (tools[0].get("output") or ""), tools
    wait_for(lambda: phone.pane()["ask"] is None)
    assert phone.send("show the env")["outcome"] == "sent"
    ask = phone.ask()
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Shown.")
    sent_back = "\n".join(str(r["body"]["messages"][-1]) for r in standin.requests
                          if r["api"] == "messages" and "env-done" in str(r["body"].get("messages", [])[-1:]))
    assert "env-done" in sent_back  # the command's output went back to the model
    assert "sk-ant-standin-test" not in sent_back and "COLLIE_" not in sent_back

    # a command that leaves a child behind: the call ends when the shell does, and the released
    # terminal takes its whole process group with it
    standin.script("in the background", [Shell("sleep 321 & echo started"), Text("Backgrounded.")])
    wait_for(lambda: phone.pane()["ask"] is None)
    assert phone.send("in the background")["outcome"] == "sent"
    ask = phone.ask()
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Backgrounded.", timeout=30)
    assert any("started" in str(r["body"]["messages"][-1]) for r in standin.requests
               if r["api"] == "messages" and "in the background" in str(r["body"]))  # it ran
    wait_for(lambda: not sleeping("321"), timeout=20, what="the background sleep ended with its terminal")


@pytest.mark.parametrize("real", [("codex", {"auth": True})], indirect=True)
def test_codex_logs_in_with_the_api_key_its_environment_gives(real):
    """Issue 24 item 1: codex-acp whose model provider needs Codex's own login (as OpenAI's does) reaches
    the model with no key at all unless the client calls `authenticate` (a real server answers 401;
    with Codex's built-in provider `session/new` is refused `Authentication required`). With
    OPENAI_API_KEY in its environment the adapter logs in with `openai-api-key`: the model gets it."""
    phone, agent, standin = real
    standin.script("who am i", [Text("Logged in.")])
    assert phone.send("who am i")["outcome"] == "sent"
    phone.reply("Logged in.")
    keys = {r["headers"].get("authorization") for r in standin.requests if r["api"] == "responses"}
    assert keys == {"Bearer sk-standin-test"}, keys


@pytest.mark.parametrize("real", [("codex", {"broken": True, "backtrace": True})], indirect=True)
def test_an_agent_that_cannot_start_says_why_on_its_row(real):
    """Issue 24 item 8: codex-acp with a config it cannot read exits at once, every time. Its row does
    not claim it can work: it says `Starting` or `Unreachable` with the agent's own reason (its stderr),
    and no empty `Session 1` is left behind; nothing of it keeps running between the restarts. With
    RUST_BACKTRACE=1 (set on some machines) Codex follows its error with a stack trace: the row still
    gives the `Error: …` line, not the trace's last frames."""
    phone, agent, standin = real

    def row():
        return dashboard_row(phone, "codex")

    try:
        shown = wait_for(lambda: (lambda r: r if "error loading config" in words(r) else None)(row()),
                         timeout=SLOW / 2, what="the agent's reason on its row")
    except AssertionError:
        raise AssertionError(f"the row never gave the agent's reason: {row()}") from None
    assert "Starting" in words(shown) or "Unreachable" in words(shown), shown
    assert "Error: error loading config" in words(shown) and "clone3" not in words(shown), shown
    assert phone.c.get(phone.base).json().get("open") == [], "an empty Session 1 was opened"
    assert not standin.requests


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_what_a_zed_user_has_the_agents_commands_modes_and_context(real):
    """Issue 24 'Beyond': Codex's slash commands (`available_commands_update`, sent in its first turn)
    are starters, without /logout; its `usage_update` shows as the context used. Claude Code's modes
    are the conversation's buttons, and a tap on `Accept Edits` really changes the mode: the next edit
    runs without an ask. Claude Code's slash commands are starters too: it sends them right after
    `session/new`'s answer, often before the adapter has recorded the session (they are held until it is)."""
    phone, agent, standin = real
    notes = agent.work / "notes.txt"
    standin.script("warm up", [Text("Warm.")])
    standin.script("fix the notes", [Edit(str(notes), "two", "TWO"), Text("Edited.")])
    assert phone.send("warm up")["outcome"] == "sent"
    phone.reply("Warm.")

    def labels():
        return [s["label"] for s in phone.c.get(f"/api/agents/local/{agent.kind}/starters").json()["starters"]]

    if agent.kind == "codex":
        wait_for(lambda: any(label.startswith("/") for label in labels()), what="the agent's commands as starters")
        assert "/review" in labels() and not {"/logout", "/login"} & set(labels()), labels()
        wait_for(lambda: "context" in (phone.pane().get("line2") or ""), what="the context used")
        return
    wait_for(lambda: any(label.startswith("/") for label in labels()), what="the agent's commands as starters")
    assert labels()[0] == "New session" and not {"/logout", "/login"} & set(labels()), labels()
    actions = {a["label"]: a for a in phone.pane()["actions"]}
    assert {"Default", "Accept Edits", "Plan Mode"} <= set(actions), actions
    phone.turn_ended()
    done = phone.c.post(f"{phone.base}/session-1/actions/{actions['Accept Edits']['id']}",
                        json={"request_id": rid(), "turn": phone.pane()["turn"]}).json()
    assert done["outcome"] == "done", done
    wait_for(lambda: "Accept Edits" in (phone.pane().get("line2") or ""), what="the mode shown")
    assert phone.send("fix the notes")["outcome"] == "sent"
    phone.reply("Edited.")
    assert notes.read_text() == "one\nTWO\n"
    assert not [i for i in phone.items() if i["kind"] == "ask"]  # accepted by the mode, not asked


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_closed_and_reopened_conversation_goes_on_in_the_same_session(real):
    """Issue 24 item 9: closing a conversation on the phone closes its ACP session where the agent
    offers that (codex-acp does: the session is then gone from the agent and must be loaded again);
    reopened, the next prompt goes to the same session — the model gets the earlier prompt as
    history — instead of a new, empty one or an error."""
    phone, agent, standin = real
    standin.script("remember plums", [Text("Plums noted.")])
    standin.script("what fruit", [Text("You said plums.")])
    assert phone.send("remember plums")["outcome"] == "sent"
    phone.reply("Plums noted.")
    phone.turn_ended()
    turn = phone.pane()["turn"]
    closed = phone.c.post(f"{phone.base}/session-1/close", json={"request_id": rid(), "turn": turn}).json()
    assert closed["outcome"] == "done", closed
    wait_for(lambda: not phone.c.get(phone.base).json().get("open"), what="closed")
    reopened = phone.c.post(f"{phone.base}/session-1/reopen", json={"request_id": rid(), "turn": turn}).json()
    assert reopened["outcome"] == "done", reopened
    wait_for(lambda: phone.c.get(phone.base).json().get("open"), what="open again")
    wait_for(lambda: phone.send("what fruit")["outcome"] == "sent", timeout=SLOW, what="a send taken")
    phone.reply("You said plums.")
    last = [r for r in standin.requests if "what fruit" in str(r["body"]) and r["body"].get("tools")][-1]
    assert "remember plums" in str(last["body"]), "the reopened conversation started a new session"
    assert not [i for i in phone.items() if i["kind"] == "notice" and "new one" in i["text"]]


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_the_agents_plan_is_progress_for_its_turn_only(real):
    """Issue 24 item 9, C6: the plan the agent sends (Codex's update_plan, Claude Code's TodoWrite)
    becomes the conversation's progress steps; a later turn without a plan no longer shows it."""
    phone, agent, standin = real
    standin.script("plan it", [Plan(("Read the notes", "Fix the notes")), Text("Planned.")])
    standin.script("just chat", [Text("Chatting.")])
    assert phone.send("plan it")["outcome"] == "sent"
    phone.reply("Planned.")
    wait_for(lambda: (phone.pane().get("progress") or {}).get("steps") == ["Read the notes", "Fix the notes"],
             what="the plan as progress")
    phone.turn_ended()
    assert phone.send("just chat")["outcome"] == "sent"
    phone.reply("Chatting.")
    phone.turn_ended()
    assert not (phone.pane().get("progress") or {}).get("steps"), phone.pane().get("progress")


@pytest.mark.parametrize("real", KINDS, indirect=True)
def test_a_command_too_long_for_the_card_says_text_shortened_and_offers_no_always_allow(real):
    """Issue 24 item 3, Q6: a command line longer than the card's title is cut by Collie, which then
    says `Text shortened` and offers no Always allow (one tap must not always allow what nobody saw
    whole); Allow still runs the whole command."""
    phone, agent, standin = real
    long = "echo " + "x" * 300 + " > long.txt"
    standin.script("a long one", [Shell(long), Text("Ran the long one.")])
    assert phone.send("a long one")["outcome"] == "sent"
    ask = phone.ask()
    assert ask["text_shortened"] and not ask["always_allow"], ask
    assert phone.answer(ask, "allow")["outcome"] == "accepted"
    phone.reply("Ran the long one.")
    assert (agent.work / "long.txt").read_text() == "x" * 300 + "\n"


@pytest.mark.parametrize("real", [("codex", {"args": ("--config", "reasoning_effort=high")})], indirect=True)
def test_codex_config_options_reach_the_model(real):
    """Issue 24 'Beyond': `collie acp run --config reasoning_effort=high` sets Codex's config option in
    each new session (session/set_config_option): what reaches the model says effort high."""
    phone, agent, standin = real
    standin.script("think hard", [Text("Hard thought.")])
    assert phone.send("think hard")["outcome"] == "sent"
    phone.reply("Hard thought.")
    efforts = {(body.get("reasoning") or {}).get("effort") for body in standin.main_requests("responses")}
    assert efforts == {"high"}, efforts


@pytest.mark.parametrize("real", [("claude", {"sandbox": "yes"})], indirect=True)
def test_claude_code_as_root_with_is_sandbox_not_1_says_so_on_its_row(real):
    """Issue 24 item 8: as root, claude-code-acp offers Bypass Permissions when IS_SANDBOX is set at
    all, but Claude Code itself accepts only IS_SANDBOX=1: with `IS_SANDBOX=yes` every session is
    refused. Its row is then not Ready but gives the agent's own reason (root), no empty Session 1 is
    made, and the agent is not restarted over and over. As another user the same agent works."""
    phone, agent, standin = real
    if os.geteuid() != 0:
        wait_for(lambda: _status(agent.paths, "claude") == "ready", timeout=SLOW, what="ready")
        return
    try:
        shown = wait_for(lambda: (lambda r: r if "root" in words(r) else None)(dashboard_row(phone, "claude")),
                         timeout=SLOW / 2, what="the reason on the row")
    except AssertionError:
        raise AssertionError(f"the row never gave the agent's reason: {dashboard_row(phone, 'claude')}") from None
    assert "Unreachable" in words(shown) or "Starting" in words(shown), shown
    assert phone.c.get(phone.base).json().get("open") == [], "an empty Session 1 was opened"
    assert sum("started node" in line for line in agent.stderr) == 1, agent.stderr
