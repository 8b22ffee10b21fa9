"""Any ACP agent on the phone (issue 14): `collie acp run` driving an ACP agent built on the
`agent-client-protocol` package's own agent side (tests/acp_agent.py), attached to a real
`collie serve`, read and written through the lead's HTTP API with the local credential."""

from __future__ import annotations

import json
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
from tests.conftest import REPO, collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.procs import terminate
from tests.system.test_durable_e2e import live, wait_for

pytestmark = pytest.mark.slow
AGENT = [sys.executable, str(REPO / "tests" / "acp_agent.py")]
BASE = "/api/agents/local/acp/conversations"


def rid() -> str:
    return str(uuid.uuid4())


class AdapterProcess:
    """`collie acp run --name acp --cwd WORK --socket SOCK -- python tests/acp_agent.py`; stderr kept."""

    def __init__(self, paths, run: Path, work: Path, env: dict | None = None, args: tuple = ()) -> None:
        self.paths, self.run, self.work = paths, run, work
        self.env, self.args = env or {}, tuple(args)
        self.sock = str(run / "acp" / "app.sock")
        self.agent_state = run / "agent-state.json"
        self.proc: subprocess.Popen | None = None
        self.stderr: list[str] = []

    def start(self) -> None:
        env = collie_env(self.paths, ACP_TEST_STATE=str(self.agent_state), **self.env)
        self.proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "acp", "run", "--name", "acp",
                                      "--cwd", str(self.work), "--socket", self.sock, *self.args, "--", *AGENT],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self._drainer = threading.Thread(target=self._drain, args=(self.proc.stderr,), daemon=True)
        self._drainer.start()
        line = self.proc.stdout.readline()
        assert line == f"listening {self.sock}\n", (line, "".join(self.stderr))
        assert self.proc.stdout.readline() == f"attach it with: collie durable attach acp --socket {self.sock} --restart\n"

    def _drain(self, stream) -> None:
        for line in stream:
            self.stderr.append(line)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None:
            self.proc.stdout.close()
            self._drainer.join(timeout=5)
            self.proc.stderr.close()

    def events(self) -> list[str]:
        try:
            return json.loads(self.agent_state.read_text())["events"]
        except (FileNotFoundError, ValueError):
            return []


@pytest.fixture
def lab(request, paths, bridge):
    run = short_dir()
    work = run / "work"
    work.mkdir()
    adapter = AdapterProcess(paths, run, work, args=getattr(request, "param", ()))
    adapter.start()
    assert run_collie(paths, "durable", "attach", "acp", "--socket", adapter.sock).returncode == 0
    address = bridge(env=collie_env(paths)).wait_ready()["address"]
    wait_for(lambda: live(paths)["acp"]["status"] == "ready")
    token = (paths.state_dir / "api-token").read_text().strip()
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=20) as c:
        yield c, adapter
    adapter.stop()
    cleanup(run)


def live_or_none(paths) -> dict:
    try:
        return live(paths)
    except NotRunningError:  # the bridge is restarting
        return {}


def pane(c) -> dict:
    return c.get(f"{BASE}/session-1").json()


def items(c, conv: str = "session-1") -> list[dict]:
    return c.get(f"{BASE}/{conv}/items").json()["items"]


def send(c, text: str, conv: str = "session-1") -> dict:
    turn = c.get(f"{BASE}/{conv}").json()["turn"]
    return c.post("/api/send", json={"request_id": rid(), "agent": "acp", "conversation": conv, "text": text,
                                     "turn": turn}).json()


def final_reply(c, needle: str, conv: str = "session-1") -> dict | None:
    return next((i for i in items(c, conv) if i["kind"] == "reply" and i.get("final") and needle in i["text"]), None)


def idle(c) -> dict | None:
    p = pane(c)
    return p if p["ask"] is None and p.get("state", "idle") != "working" and not _running(c) else None


def _running(c) -> bool:
    its = items(c)
    users = [i["seq"] for i in its if i["kind"] == "user"]
    ends = [i["seq"] for i in its if i["kind"] == "turn_end"]
    return bool(users) and (not ends or max(ends) < max(users))


def test_prompt_streams_a_growing_reply_visible_through_the_api(lab):
    """Issue 14: a send is one session/prompt; chunks grow one reply; thought → thinking, plan → progress;
    hello names the agent (initialize's agentInfo) and a starter `New session` is offered (N1)."""
    c, adapter = lab
    rows = {r["name"]: r for r in c.get("/api/dashboard").json()["sections"][0]["agents"]}
    assert rows["acp"]["line2"].startswith("test-acp-agent 1.2.3")
    starters = wait_for(lambda: (lambda s: s if len(s) == 3 else None)(
        [s["label"] for s in c.get("/api/agents/local/acp/starters").json()["starters"]]))
    assert starters == ["New session", "/review", "/init"]  # the agent's slash commands follow
    sent = send(c, "hello there")
    assert sent["outcome"] == "sent"
    queued = c.post("/api/send", json={"request_id": rid(), "agent": "acp", "conversation": "session-1",
                                       "text": "and more", "turn": sent["turn"]}).json()
    assert queued["outcome"] == "queued"  # one prompt at a time: it runs after the first
    reply = wait_for(lambda: final_reply(c, "You said: hello"))
    assert reply["text"].strip() == "You said: hello there (prompt 1 of this session)"
    wait_for(lambda: final_reply(c, "You said: and more (prompt 2 of this session)"))
    kinds = [i["kind"] for i in items(c)]
    assert kinds[:3] == ["user", "thinking", "reply"] and kinds[-1] == "turn_end"
    assert kinds.count("reply") == 2  # the chunks of each prompt grew one item
    assert pane(c)["progress"]["steps"] == ["Read the prompt", "Answer"]
    assert any(e.startswith("initialize fs={'readTextFile': True, 'writeTextFile': True") and "terminal=False" in e
               for e in adapter.events())


def test_permission_becomes_an_ask_and_the_answer_goes_back_selected(lab):
    """Issue 14, B5, B8: request_permission → a permission ask (allow/always_allow naming the tool/deny);
    the phone's answer reaches the agent as `selected` with the agent's option id; the tool completes."""
    c, adapter = lab
    assert send(c, "tool please")["outcome"] == "sent"
    p = wait_for(lambda: (lambda p: p if p["ask"] else None)(pane(c)))
    ask = p["ask"]
    assert ask["title"] == "Edit notes.txt" and ask["always_allow"] is True
    labels = {o["label"]: o for o in ask["options"]}
    assert set(labels) == {"Allow", "Always allow", "Reject", "Never"}
    tool = next(i for i in items(c) if i["kind"] == "tool")
    assert tool["status"] == "running" and tool["title"] == "Edit notes.txt"
    ok = c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "acp", "digest": ask["digest"],
                                               "answer": {"option_ids": [labels["Allow"]["id"]]}}).json()
    assert ok["outcome"] == "accepted"
    wait_for(lambda: final_reply(c, "Edited notes.txt."))
    tool = next(i for i in items(c) if i["kind"] == "tool")
    assert tool["status"] == "completed" and tool["output"] == "wrote notes.txt"
    assert "permission selected allow-once-1" in adapter.events()
    assert (adapter.work / "notes.txt").read_text() == "noted\n"  # fs/write_text_file inside --cwd

    # a refusal: the tool shows denied... then failed as the agent reports it
    wait_for(lambda: idle(c))
    assert send(c, "tool again")["outcome"] == "sent"
    ask = wait_for(lambda: pane(c)["ask"])
    reject = next(o["id"] for o in ask["options"] if o["label"] == "Reject")
    c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "acp", "digest": ask["digest"],
                                          "answer": {"option_ids": [reject]}})
    wait_for(lambda: final_reply(c, "Left notes.txt alone."))
    assert "permission selected reject-once-1" in adapter.events()


def test_stop_mid_turn_cancels_the_prompt_and_open_permission_requests(lab):
    """Issue 14: stop ⇄ session/cancel; the agent ends the prompt `cancelled`; an open permission
    request is answered `cancelled` (ACP requires it) and its ask ends `stopped`."""
    c, adapter = lab
    sent = send(c, "slow")
    wait_for(lambda: any(i["kind"] == "reply" and "tick 2" in i["text"] for i in items(c)))
    stop = c.post(f"{BASE}/session-1/stop", json={"request_id": rid(), "turn": sent["turn"]}).json()
    assert stop["outcome"] == "stopped"
    wait_for(lambda: any(e.startswith("prompt cancelled") for e in adapter.events()))
    assert any(e.startswith("cancel sess-") for e in adapter.events())
    wait_for(lambda: [i for i in items(c) if i["kind"] == "turn_end" and i["stopped"]])
    # every item of the stopped turn ends final (waited for as a whole: which one the bridge reads final
    # first depends on the machine's load)
    wait_for(lambda: all(i.get("final", True) for i in items(c)), what="every item final after the stop")

    wait_for(lambda: idle(c))
    sent = send(c, "tool now")
    ask = wait_for(lambda: pane(c)["ask"])
    stop = c.post(f"{BASE}/session-1/stop", json={"request_id": rid(), "turn": sent["turn"]}).json()
    assert stop["outcome"] == "stopped"
    wait_for(lambda: "permission cancelled" in adapter.events())
    events = adapter.events()
    assert events.index("permission cancelled") > max(i for i, e in enumerate(events) if e.startswith("cancel sess-"))
    wait_for(lambda: pane(c)["ask"] is None)  # the ask ended with the turn (stopped)


def test_an_adapter_restart_reloads_the_sessions(lab):
    """Issue 14: conversations survive an adapter restart — each open one is reloaded with session/load,
    its replay is not shown twice, and the next prompt goes to the same ACP session."""
    c, adapter = lab
    send(c, "first")
    wait_for(lambda: final_reply(c, "prompt 1 of this session"))
    started = c.post("/api/agents/local/acp/starters/new-session", json={"request_id": rid()}).json()
    assert started["outcome"] == "started"
    second = started["conversation"]
    wait_for(lambda: any(e.startswith("new sess-") for e in adapter.events()[2:]))
    before = len(items(c))
    adapter.stop()
    adapter.start()
    wait_for(lambda: sum(e.startswith("load sess-") for e in adapter.events()) == 2, what="both sessions loaded")
    wait_for(lambda: (lambda p: p if p.get("turn") == 1 else None)(pane(c)))
    wait_for(lambda: {"session-1", second} <= {r["id"] for r in c.get(BASE).json()["open"]})
    assert len(items(c)) == before  # the replay did not duplicate the chat
    assert send(c, "second")["outcome"] == "sent"
    wait_for(lambda: final_reply(c, "You said: second (prompt 2 of this session)"))


def test_a_file_request_outside_cwd_is_refused(lab, tmp_path):
    """Issue 14: fs/read_text_file is confined to --cwd: a path outside, and a symlink inside that points
    outside, are refused (symlinks resolved first); a file inside is read."""
    c, adapter = lab
    (adapter.work / "inside.txt").write_text("inside text")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret text")
    (adapter.work / "link.txt").symlink_to(secret)
    for path, expect in ((str(adapter.work / "inside.txt"), "read"), (str(secret), "refused"),
                         (str(adapter.work / "link.txt"), "refused"),
                         (str(adapter.work / ".." / "agent-state.json"), "refused")):
        wait_for(lambda: idle(c))
        assert send(c, f"read {path}")["outcome"] == "sent"
        reply = wait_for(lambda: final_reply(c, f" {path}: "))
        assert reply["text"].startswith(expect), (path, reply["text"])
        assert "secret text" not in reply["text"]
    assert final_reply(c, "inside.txt: ")["text"].endswith("inside text")
    assert any("outside the agent's folder" in line for line in adapter.stderr)


def test_noise_and_a_crash_are_survived(lab):
    """Issue 14: stdout noise and malformed JSON-RPC are logged (escaped, one line each) and survived;
    a crashed agent is restarted, shown Starting meanwhile, and its session reloaded."""
    c, adapter = lab
    send(c, "noise")
    wait_for(lambda: final_reply(c, "still here after the noise"))
    noise = [line for line in adapter.stderr if "not JSON-RPC" in line]
    assert len(noise) == 1 and "\x1b" not in noise[0] and "\\x1b" in noise[0]
    assert sum("malformed JSON-RPC" in line for line in adapter.stderr) == 2
    wait_for(lambda: idle(c))
    send(c, "crash")
    with httpx.Client(transport=httpx.HTTPTransport(uds=adapter.sock), base_url="http://agent") as direct:
        wait_for(lambda: direct.get("/v1/state").json()["subtitle"].startswith("Starting"), what="shown Starting")
    wait_for(lambda: any(i["kind"] == "notice" and "exited during the turn" in i["text"] for i in items(c)))
    wait_for(lambda: sum(e.startswith("initialize") for e in adapter.events()) == 2, what="restarted")
    wait_for(lambda: any(e.startswith("load sess-") for e in adapter.events()))
    wait_for(lambda: idle(c))
    send(c, "after the crash")
    wait_for(lambda: final_reply(c, "You said: after the crash (prompt 3 of this session)"))
    assert any("the agent exited with status 3" in line for line in adapter.stderr)


def test_attach_flag_attaches_through_the_durable_attach_path(paths, bridge):
    """Issue 14, A9: `--attach` runs `collie durable attach <name> --socket <path> --restart` itself; the
    default socket is $XDG_RUNTIME_DIR/collie-acp/<name>/app.sock with both folders 0700."""
    run = short_dir()
    try:
        bridge(env=collie_env(paths)).wait_ready()
        env = collie_env(paths, XDG_RUNTIME_DIR=str(run), ACP_TEST_STATE=str(run / "agent.json"))
        proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "acp", "run", "--attach", "--cwd", str(run),
                                 "--", *AGENT], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            sock = run / "collie-acp" / "acp-agent" / "app.sock"
            assert proc.stdout.readline() == f"listening {sock}\n"
            assert proc.stdout.readline() == "attached acp-agent\n"
            for folder in (sock.parent, sock.parent.parent):
                assert os.stat(folder).st_mode & 0o777 == 0o700
            wait_for(lambda: live_or_none(paths).get("acp-agent", {}).get("status") == "ready")
            assert live(paths)["acp-agent"]["runtime"] == "test-acp-agent 1.2.3"
        finally:
            terminate(proc)
    finally:
        cleanup(run)


def test_an_agent_that_needs_a_login_shows_unreachable_with_what_to_do(paths, bridge):
    """Issue 24 items 1 and 8: an agent that answers every session/new `Authentication required`
    (codex-acp without a key) is not shown Ready: the dashboard row says Unreachable with the agent's
    logins and what to do, and no empty Session 1 is listed."""
    run = short_dir()
    work = run / "work"
    work.mkdir()
    adapter = AdapterProcess(paths, run, work, env={"ACP_TEST_AUTH": "env", "TEST_AGENT_KEY": ""})
    adapter.start()
    try:
        assert run_collie(paths, "durable", "attach", "acp", "--socket", adapter.sock).returncode == 0
        address = bridge(env=collie_env(paths)).wait_ready()["address"]
        wait_for(lambda: live_or_none(paths).get("acp", {}).get("status") == "unreachable")
        token = (paths.state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=20) as c:
            rows = {r["name"]: r for r in c.get("/api/dashboard").json()["sections"][0]["agents"]}
        row = rows["acp"]
        assert row["status_label"] == "Unreachable"
        assert row["detail"].startswith("The agent needs a login. It offers: Login with ChatGPT (--auth chatgpt)")
        assert "Use TEST_AGENT_KEY (--auth test-api-key)" in row["detail"]
        assert "Error" not in row["detail"]
        assert sum(e.startswith("initialize") for e in adapter.events()) == 1  # not restarted
    finally:
        adapter.stop()
        cleanup(run)


@pytest.mark.parametrize("lab", [("--allow-terminal",)], indirect=True)
def test_claudes_bash_call_from_the_phone_shows_the_command_and_its_output(lab):
    """Issue 24 items 2, 3, 5, 6 through the bridge and the lead: the card shows the command line it
    approves; allowed, the shell line runs in --cwd through a terminal; one tool item ends completed
    with the command and what it printed; no terminal is left."""
    c, adapter = lab
    assert send(c, "bash echo hi > out.txt && cat out.txt")["outcome"] == "sent"
    ask = wait_for(lambda: pane(c)["ask"])
    assert ask["body"].splitlines()[0] == "$ echo hi > out.txt && cat out.txt"
    allow = next(o["id"] for o in ask["options"] if o["label"] == "Allow")
    ok = c.post(f"/api/ask/{ask['id']}", json={"request_id": rid(), "agent": "acp", "digest": ask["digest"],
                                               "answer": {"option_ids": [allow]}}).json()
    assert ok["outcome"] == "accepted"
    wait_for(lambda: final_reply(c, "ran: hi"))
    assert (adapter.work / "out.txt").read_text() == "hi\n"
    tools = [i for i in items(c) if i["kind"] == "tool"]
    assert len(tools) == 1 and tools[0]["status"] == "completed"
    assert tools[0]["output"] == "$ echo hi > out.txt && cat out.txt\nhi"
