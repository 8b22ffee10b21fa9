"""Ctrl-C ends an agent quietly (docs/fixtures.md: a fixture "runs until Ctrl-C"; docs/sdk.md): no
traceback of the nursery's exception group, its socket removed, and an SDK program's own
`except KeyboardInterrupt` around `trio.run` catches it."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.livelab import short_dir
from tests.procs import ended, readline, running

pytestmark = pytest.mark.slow

SDK_PROGRAM = """
import sys, trio
from collie.crew.sdk import open_collie
async def main():
    async with open_collie(socket=sys.argv[1], host_name="t") as collie:
        collie.ready()
        print("listening", flush=True)
        await trio.sleep_forever()
try:
    trio.run(main)
except KeyboardInterrupt:
    print("caught", flush=True)
"""


def interrupt(argv: list[str]) -> subprocess.CompletedProcess:
    """Start `argv`, wait for its `listening` line, Ctrl-C it and wait for its end (each with the generous
    outer limit of tests.procs: a loaded machine is slow, not wrong); it never outlives the test."""
    with running(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        assert readline(proc, "the agent's listening line").startswith("listening")
        proc.send_signal(signal.SIGINT)
        out, err = ended(proc, "the agent after Ctrl-C")
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def test_a_fixture_agent_ends_on_ctrl_c_without_a_traceback():
    sock = short_dir("ki") / "a.sock"
    got = interrupt([sys.executable, "-m", "collie.fixtures", "deployer", "--socket", str(sock)])
    assert "Traceback" not in got.stderr, got.stderr
    assert got.returncode == 0 and not sock.exists()


def test_an_sdk_program_catches_ctrl_c_as_one_keyboard_interrupt():
    sock = short_dir("ki") / "a.sock"
    got = interrupt([sys.executable, "-c", SDK_PROGRAM, str(sock)])
    assert got.stdout.strip() == "caught" and "Traceback" not in got.stderr, got.stderr
    assert got.returncode == 0 and not sock.exists()
