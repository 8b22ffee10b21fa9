"""The agent runs in its own process group and the whole group ends with it (issue 24 item 7): a
launcher (`npx @zed-industries/codex-acp`, a node script that starts the real binary) leaves nothing
behind on a stop or on a failed start's restart."""

from __future__ import annotations

import trio

from collie.crew.acp import adapter as adapter_mod
from collie.crew.acp.adapter import Adapter
from tests.system.test_acp_terminals import alive, gone


class FakeCollie:
    runtime = "x"

    def __init__(self) -> None:
        self.subtitles: list[str] = []

    def set_subtitle(self, text):
        self.subtitles.append(text)

    def set_starters(self, starters):
        pass


async def pid_in(path, timeout: float = 10) -> int:
    with trio.fail_after(timeout):
        while not (path.exists() and path.read_text().strip()):
            await trio.sleep(0.02)
    return int(path.read_text())


async def test_a_failed_start_leaves_no_child_of_the_launcher(tmp_path):
    """Issue 24 item 7: the launcher exits at once (a failed start) while the binary it started keeps
    running: the restart loop ends the binary too before it starts again."""
    pidfile = tmp_path / "child.pid"
    a = Adapter(["sh", "-c", f"sleep 300 & echo $! > {pidfile}; exit 5"], name="t", cwd=str(tmp_path),
                state_dir=tmp_path / "st", log=lambda _: None)
    a.collie = FakeCollie()
    with trio.fail_after(20):
        assert await a.run_agent_once() == 5
        await gone(await pid_in(pidfile))


async def test_a_stop_ends_the_group_even_a_child_that_ignores_sigterm(tmp_path, monkeypatch):
    """Issue 24 item 7: stopping the adapter signals the agent's whole group; what does not go on
    SIGTERM within the grace is killed — only the direct child was signalled before."""
    monkeypatch.setattr(adapter_mod, "STOP_GRACE", 0.3)
    pidfile = tmp_path / "child.pid"
    script = f"(trap '' TERM; exec sleep 300) & echo $! > {pidfile}; exec sleep 300"
    a = Adapter(["sh", "-c", script], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st", log=lambda _: None)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(a.serve, FakeCollie())
            child = await pid_in(pidfile)
            assert alive(child)
            nursery.cancel_scope.cancel()
        await gone(child)


async def agents_env(tmp_path) -> str:
    """The environment the agent started with (`env` written to a file; the agent then exits)."""
    out = tmp_path / "env.txt"
    a = Adapter(["sh", "-c", f"env > {out}; exit 1"], name="t", cwd=str(tmp_path), state_dir=tmp_path / "st",
                log=lambda _: None)
    a.collie = FakeCollie()
    with trio.fail_after(20):
        await a.run_agent_once()
    return out.read_text()


async def test_the_agent_does_not_get_collies_token(tmp_path, monkeypatch):
    """The SDK's bridge credential (COLLIE_TOKEN, COLLIE_TOKEN_NEXT) is not passed to the agent; the
    rest of the environment (the agent's own API keys) is."""
    monkeypatch.setenv("COLLIE_TOKEN", "collie-secret")
    monkeypatch.setenv("COLLIE_TOKEN_NEXT", "collie-next")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-the-agents-own")
    env = await agents_env(tmp_path)
    assert "collie-secret" not in env and "collie-next" not in env
    assert "OPENAI_API_KEY=sk-the-agents-own" in env


async def test_no_collie_variable_reaches_the_agent(tmp_path, monkeypatch):
    """Issue 42 item 11: every Collie variable is kept from the agent — `COLLIE_CREW_TOKEN` (crew.md
    tells users to export it), `COLLIE_DURABLE_TOKEN`, any `COLLIE_*TOKEN*` and the rest of Collie's
    own settings; the agent's own keys reach it."""
    for name in ("COLLIE_CREW_TOKEN", "COLLIE_DURABLE_TOKEN", "COLLIE_X_TOKEN_Y", "COLLIE_PUSH_SECRET", "COLLIE_PORT"):
        monkeypatch.setenv(name, f"value-of-{name.lower()}")
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-the-agents-own")
    env = await agents_env(tmp_path)
    assert "COLLIE_" not in env and "value-of-" not in env
    assert "ANTHROPIC_API_KEY=sk-the-agents-own" in env
