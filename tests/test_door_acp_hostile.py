"""A hostile ACP agent against the real `collie acp run` process (issue 42 items 2, 5, 6, 7): what it
sends cannot end the adapter, freeze it, or leave a process of its terminals running — not after the
adapter's SIGTERM, not after its SIGKILL. The agent is tests/acp_hostile.py (raw JSON lines)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import REPO, collie_env
from tests.live import cleanup, short_dir

pytestmark = pytest.mark.slow
HOSTILE = [sys.executable, str(REPO / "tests" / "acp_hostile.py")]
LIMIT = 30.0  # the outer bound of every wait here; each ends as soon as its condition holds


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

    def __init__(self, paths, attack: str, *args: str, **env: str) -> None:
        self.run = short_dir("ah")
        self.work = self.run / "work"
        self.work.mkdir()
        (self.work / "hello.txt").write_text("hello")
        self.out = self.run / "out.json"
        self.sock = str(self.run / "s" / "app.sock")
        env = collie_env(paths, ACP_HOSTILE=attack, ACP_HOSTILE_OUT=str(self.out), **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "crew.cli.main", "acp", "run", "--name", "hostile",
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

    def start(attack: str, *args: str, **env: str) -> Hostile:
        made.append(Hostile(paths, attack, *args, **env))
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
