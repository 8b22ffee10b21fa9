"""A hostile ACP agent against the real `collie acp run` process (issue 42 items 2, 5, 6, 7): what it
sends cannot end the adapter, freeze it, or leave a process of its terminals running — not after the
adapter's SIGTERM, not after its SIGKILL. The agent is tests/acp_hostile.py (raw JSON lines)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, collie_env
from tests.livelab import cleanup, short_dir

pytestmark = pytest.mark.slow
HOSTILE = [sys.executable, str(REPO / "tests" / "acp_hostile.py")]
LIMIT = 60.0  # the outer bound of every wait here; each ends as soon as its condition holds


def until(check, what: str, limit: float = LIMIT):
    """Poll `check()` until it is truthy (returned), at most `limit` s, else fail saying `what`."""
    end = time.monotonic() + limit
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > end:
            pytest.fail(f"not within {limit:g} s: {what}")
        time.sleep(0.02)


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):
        return False


class Hostile:
    """`collie acp run --cwd WORK --socket SOCK [args] -- python tests/acp_hostile.py`."""

    def __init__(self, paths, attack: str, *args: str, run: Path | None = None, **env: str) -> None:
        self.run = run or short_dir("ah")
        self.work = self.run / "work"
        self.work.mkdir()
        (self.work / "hello.txt").write_text("hello")
        self.out = self.run / "out.json"
        self.sock = str(self.run / "s" / "app.sock")
        env = collie_env(paths, ACP_HOSTILE=attack, ACP_HOSTILE_OUT=str(self.out), **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "acp", "run", "--name", "hostile",
                                      "--cwd", str(self.work), "--socket", self.sock, *args, "--", *HOSTILE],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stderr: list[str] = []
        self._drainer = threading.Thread(target=lambda: self.stderr.extend(self.proc.stderr), daemon=True)
        self._drainer.start()

    def result(self) -> dict:
        until(lambda: self.out.exists() or self.proc.poll() is not None, "the agent's attack ends")
        assert self.proc.poll() is None, f"the adapter ended ({self.proc.returncode}): {''.join(self.stderr)[-2000:]}"
        return json.loads(self.out.read_text())

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=LIMIT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self._drainer.join(timeout=5)
        self.proc.stderr.close()
        return self.proc.returncode


@pytest.fixture
def hostile(paths):
    made: list[Hostile] = []

    def start(attack: str, *args: str, run: Path | None = None, **env: str) -> Hostile:
        made.append(Hostile(paths, attack, *args, run=run, **env))
        return made[-1]

    yield start
    for h in made:
        h.stop(signal.SIGKILL)
        cleanup(h.run)


def test_a_lone_surrogate_in_an_id_or_a_method_does_not_end_the_adapter(hostile):
    """Issue 42 item 2: a request id `"\\ud800"`, a method `"x\\ud800"`, a malformed message with such
    an id, an update and a write holding one: each is answered (the id echoed exactly) or logged,
    and the adapter goes on serving — the honest read after them is answered, and a SIGTERM still
    ends it cleanly (status 0)."""
    h = hostile("surrogate")
    got = h.result()
    assert got[json.dumps("\ud800")]["error"]["code"] == -32602  # fs read of /nope: refused, id echoed
    assert got[json.dumps("\ud800")]["id"] == "\ud800"
    assert got['"m1"']["error"]["code"] == -32601
    assert got[json.dumps("\udfff")]["error"]["code"] == -32601
    assert got[json.dumps("\udbff")]["error"]["code"] == -32600
    assert got['"w1"']["error"]["code"] == -32602 and "not valid Unicode" in got['"w1"']["error"]["message"]
    assert got['"last"']["result"] == {"content": "hello"}
    assert not (h.work / "s.txt").exists()
    assert h.proc.poll() is None
    assert h.stop() == 0
    assert "Traceback" not in "".join(h.stderr)


def test_a_fifo_at_the_temporary_name_does_not_freeze_the_adapter(hostile):
    """Issue 42 item 5: a FIFO planted where the adapter used to put its temporary file (an open for
    writing blocks until a reader comes) is never opened: the write is done and a read sent right
    after it is answered — neither waits on the FIFO."""
    h = hostile("fifo")
    got = h.result()
    assert got['"read"'] is not None, "the adapter froze: the read was not answered"
    assert got['"read"']["result"] == {"content": "hello"}
    assert got['"write"'] is not None and got['"write"']["result"] == {}
    assert (h.work / "innocent.txt").read_text() == "written"
    assert h.stop() == 0


def escaping_terminals(h_run: Path, n: int = 2) -> dict[str, str]:
    """The env for the `terminals` attack: `n` terminals, each a shell line that leaves processes
    outside its group (tests/system/test_door_acp_terminals.py `escapes`) writing their pids to run/pidsI."""
    from tests.system.test_door_acp_terminals import escapes

    return {"ACP_HOSTILE_COMMANDS": json.dumps([escapes(h_run / f"pids{i}") for i in range(n)])}


def escaped_pids(run: Path, n: int = 2) -> list[int]:
    def read():
        lines = [line for i in range(n) if (run / f"pids{i}").exists() for line in (run / f"pids{i}").read_text().split()]
        return lines if len(lines) >= 3 * n else None

    pids = [int(p) for p in until(read, "the terminals' background processes start")]
    assert all(alive(p) for p in pids)
    return pids


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_no_terminal_process_outlives_the_adapter_even_killed(hostile, sig):
    """Issue 42 items 6, 7: the agent's terminals started processes that left their group (`setsid`,
    `setpgid`+fork, a double fork); the adapter is ended by SIGTERM, or SIGKILLed (no clean-up of its
    own can run): not one of those processes survives it."""
    run = short_dir("ah")
    h = hostile("terminals", "--allow-terminal", run=run, **escaping_terminals(run))
    got = h.result()
    assert all("terminalId" in (a or {}).get("result", {}) for a in got.values()), got
    pids = escaped_pids(run)
    h.proc.send_signal(sig)
    h.proc.wait(timeout=LIMIT)
    until(lambda: not any(alive(p) for p in pids), "every terminal process is gone")


def test_an_agent_crash_ends_its_terminals(hostile):
    """Issue 42 item 7: the agent made terminals whose processes left their group, then crashed (exit
    7): the adapter, still running, ends every process of those terminals."""
    run = short_dir("ah")
    h = hostile("exit", "--allow-terminal", run=run, ACP_HOSTILE_GO=str(run / "go"), **escaping_terminals(run))
    until(lambda: h.out.exists(), "the agent made its terminals")
    pids = escaped_pids(run)
    (run / "go").touch()  # now the agent crashes
    until(lambda: not any(alive(p) for p in pids), "every terminal process is gone after the crash")
    assert h.proc.poll() is None  # the adapter serves on (and restarts the agent)
    until(lambda: any("ended 2 terminals: the agent exited" in line for line in h.stderr), "the log says so")
