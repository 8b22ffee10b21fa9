"""Shared fixtures: private config/state folders per test, the CLI in-process, the daemon as a process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collie.crew import control
from collie.crew.errors import NotRunningError
from collie.crew.paths import Paths
from tests.procs import LIMIT

REPO = Path(__file__).resolve().parent.parent


# A shell starts a background job (`pytest ... &`, a CI step, an agent's tool) with SIGINT ignored, and an
# ignored signal stays ignored in every program started from it: a Ctrl-C test's SIGINT then does nothing
# and the test waits out its limit. Handled (not ignored) here, SIGINT is back to its default in every
# program a test starts, as it is under a person's terminal.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Every program a test starts inherits this variable (tests that build a program's environment copy
# os.environ; the ones that drop COLLIE_* keep it), so the session's end finds what a test left running
# even after its parent died and it was re-parented. Under pytest-xdist each worker marks its programs
# with a mark of its own below the run's (`<run>/gw0`): a worker judges only what its own tests started,
# and the controller, at the end, finds what a worker that died left behind (any mark below the run's).
os.environ["TESTS_RUN"] = f"{os.getpid()}-{time.time_ns()}"
LEFT_GRACE = 5.0  # seconds a program ending after its test (SIGTERM sent, Chromium closing) gets to go
LEFT_BY_WORKERS: list[str] = []  # the controller's: what each xdist worker found left running and killed


def pytest_configure(config):
    worker = getattr(config, "workerinput", None)
    if worker is not None:  # an xdist worker: its mark goes below the run's (its controller's)
        os.environ["TESTS_RUN"] = f"{worker['run_mark']}/{worker['workerid']}"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist's controller, for each worker it starts: the run's mark, below which the worker makes its own."""
    node.workerinput["run_mark"] = os.environ["TESTS_RUN"]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist's controller: a worker's own session-end check is reported and fails the run here."""
    LEFT_BY_WORKERS.extend(f"{node.gateway.id}: {line}" for line in getattr(node, "workeroutput", {}).get("left", []))


def leftovers(config) -> set[int]:
    """This run's programs still running: below pytest, or carrying the run's mark (under xdist's controller:
    a mark below the run's, i.e. a worker's, whose worker ended without ending them)."""
    from tests.procs import descendants, marked

    mark = os.environ["TESTS_RUN"]
    if config.pluginmanager.has_plugin("dsession"):
        return marked(f"TESTS_RUN={mark}/", prefix=True)
    return (descendants(os.getpid()) | marked(f"TESTS_RUN={mark}")) - {os.getpid()}


def pytest_sessionfinish(session, exitstatus):
    """Nothing of a run is left running after it: a program a test started and did not end is listed,
    killed, and the run fails (issue 41). The short folders the tests made in /tmp
    (`tests.livelab.short_dir`: a crew's state, sockets, logs) go when every test passed; after a failure
    they stay, for a look at what the processes wrote."""
    from tests.livelab import MADE, cleanup
    from tests.procs import command

    deadline = time.monotonic() + LEFT_GRACE
    while (left := leftovers(session.config)) and time.monotonic() < deadline:
        time.sleep(0.1)
    said = [f"{pid}: {command(pid)}" for pid in sorted(left)]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if hasattr(session.config, "workerinput"):  # an xdist worker: its controller reports and fails the run
        session.config.workeroutput["left"] = said
        said = []
    said += LEFT_BY_WORKERS
    if said:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = f"{len(said)} program(s) the tests started were still running at the end (killed now):"
        if reporter is not None:
            reporter.write_sep("=", "LEFT RUNNING", red=True, bold=True)
            reporter.write_line(message)
            for line in said:
                reporter.write_line("  " + line)
        else:
            print(message, *said, sep="\n  ", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        exitstatus = session.exitstatus
    if exitstatus == 0:
        for d in MADE:
            cleanup(d)


LAYERS = ("unit", "live", "system")  # tests/<layer>/: docs/architecture.md, "The tests, in three layers"


def pytest_collection_modifyitems(config, items):
    """Each test is marked with its layer (its folder), so `-m unit`, `-m "not system"` select by layer."""
    for item in items:
        layer = item.path.parent.name
        if layer in LAYERS and item.path.parent.parent == Path(__file__).parent:
            item.add_marker(layer)


@pytest.fixture
def tmp():
    """A private folder with a short path (for sockets), removed after the test."""
    from tests.livelab import cleanup, short_dir

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
    from collie.crew.cli.main import main

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
    return subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *argv], cwd=REPO, env=env or collie_env(paths),
                          capture_output=True, text=True, timeout=timeout)


class BridgeProcess:
    def __init__(self, paths: Paths, env: dict[str, str], *args: str) -> None:
        self.paths = paths
        self.proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve", "--port", "0", *args],
                                     cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def wait_ready(self, timeout: float = LIMIT) -> dict:
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
