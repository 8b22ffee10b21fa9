"""Helpers: a real SDK agent and a real Bridge in one trio run (sockets are real, time is virtual)."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from collie.bridge.bridge import Bridge
from collie.bridge.journal import Journal
from collie.bridge.writer import Writer
from collie.crew.config import AgentConfig, BridgeConfig
from collie.crew.paths import Paths
from collie.crew.sdk import open_collie

ALL_CAPS = ["asks", "send", "steer", "abort", "starters", "rename", "close", "reopen", "actions", "history", "watch"]


MADE: list[Path] = []  # folders short_dir made in this test session (tests/conftest.py removes them)


def short_dir(prefix: str = "c") -> Path:
    """A private folder with a short path (socket paths must stay under 103 bytes). It is removed when
    the test session ends with every test passed, and kept for a look otherwise."""
    d = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
    os.chmod(d, 0o700)
    MADE.append(d)
    return d


class Recorder:
    """Wraps an agent's handler to record (virtual time, method, path) of every request."""

    def __init__(self, collie) -> None:
        self.calls: list[tuple[float, str, str]] = []
        inner = collie.handle

        async def handle(req):
            self.calls.append((trio.current_time(), req.method, req.path))
            return await inner(req)

        collie.handle = handle

    def times(self, path: str) -> list[float]:
        return [t for t, _m, p in self.calls if p == path]


@asynccontextmanager
async def agent(sock: Path, *, caps=ALL_CAPS, **kw):
    async with open_collie(socket=str(sock), host_name="t", caps=caps, caller_check="off", **kw) as collie:
        rec = Recorder(collie)
        collie.recorder = rec
        yield collie


@asynccontextmanager
async def bridge_for(agents: list[AgentConfig], state: Path, *, use_cache: bool = False, **kw):
    paths = Paths(config_dir=state / "cfg", state_dir=state / "state")
    b = Bridge(BridgeConfig(agents=tuple(agents), programs_off=False, sources_count=len(agents)), paths,
               host="testhost", use_cache=use_cache, **kw)
    async with trio.open_nursery() as nursery:
        await nursery.start(b.serve)
        try:
            yield b
        finally:
            nursery.cancel_scope.cancel()


def cleanup(d: Path) -> None:
    shutil.rmtree(d, ignore_errors=True)


class InlineJournal(Journal):
    """The journal's SQL run inline (no worker thread), so virtual times stay exact."""

    async def run(self, fn, *args):
        self.calls += 1
        await trio.lowlevel.checkpoint()  # like the real one (a worker thread), every call yields
        return fn(*args)


@asynccontextmanager
async def writer_lab(tmp: Path, *, settle: float = 0.0, **kw):
    """A real SDK agent `desk` with one conversation `c`, a bridge reading it and a writer with an inline
    journal, recovered and ready: yields (collie, pane, bridge, writer). `kw` goes to the agent
    (caps, on_send, ...); `settle` is virtual time to wait once the agent is ready."""
    sock = tmp / "a.sock"
    async with agent(sock, **kw) as collie:
        pane = collie.conversation("c", title="Chat")
        collie.ready()
        async with bridge_for([AgentConfig("desk", socket=str(sock))], tmp) as b:
            w = Writer(b, InlineJournal(tmp / "journal.sqlite"))
            async with trio.open_nursery() as n:
                await n.start(w.recover)
                while b.status("desk").status != "ready":
                    await b.wait_changed()
                await trio.sleep(settle)
                yield collie, pane, b, w
                n.cancel_scope.cancel()


@asynccontextmanager
async def inbox_lab(tmp: Path, **kw):
    """A real SDK agent `a0` with one conversation `c`, a bridge reading it, a writer and an inbox (both
    with their SQL inline) under the bridge's state folder, the inbox running and the agent ready:
    yields (collie, pane, bridge, writer, inbox). `kw` goes to the agent (caps, on_send, ...)."""
    from collie.lead.members.hub import Hub
    from tests.apilab import InlineInbox  # here, not above: tests.apilab imports this module

    async with agent(tmp / "a0.sock", **kw) as collie:
        pane = collie.conversation("c", title="c")
        collie.ready()
        async with bridge_for([AgentConfig("a0", socket=str(tmp / "a0.sock"))], tmp) as b:
            b.paths.state_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            writer = Writer(b, InlineJournal(b.paths.state_dir / "journal.sqlite"))
            hub = Hub(b.paths, b, writer)
            inbox = InlineInbox(b.paths.state_dir / "inbox.sqlite", hub, writer)
            async with trio.open_nursery() as n:
                n.start_soon(inbox.run)
                while b.status("a0").status != "ready":
                    await b.wait_changed()
                yield collie, pane, b, writer, inbox
                n.cancel_scope.cancel()
