"""Shared fixtures: private config/state folders per test, the CLI in-process, the daemon as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from crew import control
from crew.errors import NotRunningError
from crew.paths import Paths

REPO = Path(__file__).resolve().parent.parent


def pytest_sessionfinish(session, exitstatus):
    """The short folders the tests made in /tmp (`tests.live.short_dir`: a crew's state, sockets, logs)
    go when every test passed; after a failure they stay, for a look at what the processes wrote."""
    from tests.live import MADE, cleanup

    if exitstatus == 0:
        for d in MADE:
            cleanup(d)


@pytest.fixture
def tmp():
    """A private folder with a short path (for sockets), removed after the test."""
    from tests.live import cleanup, short_dir

    d = short_dir()
    yield d
    cleanup(d)


@pytest.fixture
def paths(tmp_path, monkeypatch) -> Paths:
    cfg, state = tmp_path / "config", tmp_path / "state"
    monkeypatch.setenv("COLLIE_CONFIG_DIR", str(cfg))
    monkeypatch.setenv("COLLIE_STATE_DIR", str(state))
    for var in list(os.environ):
        if var.startswith("COLLIE_") and var not in ("COLLIE_CONFIG_DIR", "COLLIE_STATE_DIR"):
            monkeypatch.delenv(var)
    return Paths(config_dir=cfg, state_dir=state)


@pytest.fixture
def cli(paths, capsys):
    """Run `collie ...` in-process; returns (status, stdout, stderr)."""
    from crew.cli.main import main

    def run(*argv: str):
        try:
            status = main(list(argv))
        except SystemExit as exc:  # argparse usage errors
            status = exc.code
        out = capsys.readouterr()
        return status, out.out, out.err

    return run


def collie_env(paths: Paths, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
    env.update(COLLIE_CONFIG_DIR=str(paths.config_dir), COLLIE_STATE_DIR=str(paths.state_dir), **extra)
    return env


def run_collie(paths: Paths, *argv: str, env: dict | None = None, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crew.cli.main", *argv], cwd=REPO, env=env or collie_env(paths),
                          capture_output=True, text=True, timeout=timeout)


class BridgeProcess:
    def __init__(self, paths: Paths, env: dict[str, str], *args: str) -> None:
        self.paths = paths
        self.proc = subprocess.Popen([sys.executable, "-m", "crew.cli.main", "serve", "--port", "0", *args],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_ready(self, timeout: float = 20) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"bridge exited {self.proc.returncode}: {self.proc.stdout.read()}")
            try:
                return control.call(self.paths.control_socket, "ping", timeout=1)
            except NotRunningError:
                time.sleep(0.05)
        raise AssertionError("bridge did not become ready")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


@pytest.fixture
def bridge(paths):
    started: list[BridgeProcess] = []

    def start(*args: str, env: dict | None = None) -> BridgeProcess:
        b = BridgeProcess(paths, env or collie_env(paths), *args)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()
        if b.proc.stdout:
            b.proc.stdout.close()


@pytest.fixture
async def loopwatch():
    """Fails the test when one task step blocked the event loop longer than 20 ms (issue 16.2)."""
    from tests.loopwatch import LoopWatch

    with LoopWatch() as watch:
        yield watch
    assert not watch.slow, watch.report()
