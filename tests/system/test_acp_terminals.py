"""ACP terminals as the real agents use them (issue 24 item 2, issue 25 item 8): a shell line, an
environment from an allow-list, the agent's folder, bounded output, and no process left behind."""

from __future__ import annotations

import os
import subprocess

import pytest
import trio

from collie.crew.acp import terminals as terms_mod
from collie.crew.acp.rpc import RpcError
from collie.crew.acp.terminals import Terminals

ENVIRON = {"PATH": os.environ["PATH"], "HOME": "/home/someone", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
           "COLLIE_TOKEN": "collie-secret-token", "OPENAI_API_KEY": "sk-not-for-terminals",
           "GITHUB_TOKEN": "ghp_notforterminals", "EXTRA_ONE": "passed on"}


def alive(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except FileNotFoundError:
        return False


async def gone(pid: int) -> None:
    while alive(pid):
        await trio.sleep(0.02)


async def create(t: Terminals, command: str, args=None, **kw) -> str:
    params = {"sessionId": "s", "command": command, **kw}
    if args is not None:
        params["args"] = args
    return (await t.handle("terminal/create", params))["terminalId"]


async def finished(t: Terminals, tid: str) -> tuple[dict, str]:
    status = await t.handle("terminal/wait_for_exit", {"sessionId": "s", "terminalId": tid})
    out = await t.handle("terminal/output", {"sessionId": "s", "terminalId": tid})
    return status, out["output"]


async def with_terminals(body, tmp_path, **kw):
    t = Terminals(str(tmp_path), environ=ENVIRON, **kw)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(t.serve)
            await body(t)
            nursery.cancel_scope.cancel()
    return t


async def test_one_string_without_args_is_a_shell_line(tmp_path):
    """Issue 24 item 2: claude-code-acp sends `command: "touch x && ls"` and no args: it runs as the
    agent means it (a shell line), in --cwd; with args the program gets exactly those arguments."""
    async def body(t):
        status, out = await finished(t, await create(t, "touch made.txt && ls && pwd"))
        assert status == {"exitCode": 0, "signal": None}
        assert out.split() == ["made.txt", str(tmp_path.resolve())]
        status, out = await finished(t, await create(t, "printf", ["%s|", "a b", "&& c"]))
        assert out == "a b|&& c|"  # args are not a shell line: nothing is split or run

    await with_terminals(body, tmp_path)


async def test_the_environment_is_an_allow_list_plus_what_the_agent_gave(tmp_path):
    """Issue 25 item 8: a terminal does not inherit the adapter's environment (no Collie token, no API
    key, no other secret); it gets PATH, HOME, the locale, the variables the agent sent, and the names
    the owner passed with --terminal-env."""
    async def body(t):
        _, out = await finished(t, await create(t, "env", env=[{"name": "CLAUDECODE", "value": "1"}]))
        env = dict(line.split("=", 1) for line in out.splitlines())
        for secret in ("collie-secret-token", "sk-not-for-terminals", "ghp_notforterminals"):
            assert secret not in out
        assert env["CLAUDECODE"] == "1" and env["HOME"] == "/home/someone" and env["LC_ALL"] == "C.UTF-8"
        assert env["PATH"] == os.environ["PATH"] and env["EXTRA_ONE"] == "passed on"
        assert env["PWD"] == str(tmp_path.resolve())

    await with_terminals(body, tmp_path, env_names=("EXTRA_ONE",))


async def test_release_and_kill_end_the_whole_process_group(tmp_path):
    """Issue 24 item 2, issue 25 item 8: a released or killed terminal leaves no process behind, not
    even what the command started in the background; the leader's exit is the terminal's exit even
    while a background child holds the output open."""
    async def body(t):
        tid = await create(t, "sleep 300 & echo $!; sleep 300")
        while not (await t.handle("terminal/output", {"sessionId": "s", "terminalId": tid}))["output"]:
            await trio.sleep(0.02)
        child = int((await t.handle("terminal/output", {"sessionId": "s", "terminalId": tid}))["output"])
        leader = t.by_id[tid].proc.pid
        assert alive(child) and alive(leader)
        assert await t.handle("terminal/release", {"sessionId": "s", "terminalId": tid}) == {}
        await gone(child)
        await gone(leader)

        tid = await create(t, "sleep 300 & echo $!; exit 3")
        status, out = await finished(t, tid)  # returns although the background sleep keeps stdout open
        assert status == {"exitCode": 3, "signal": None}
        child = int(out)
        assert alive(child)
        await t.handle("terminal/kill", {"sessionId": "s", "terminalId": tid})
        await gone(child)

        tid = await create(t, "sleep", ["300"])
        await t.handle("terminal/kill", {"sessionId": "s", "terminalId": tid})
        status, _ = await finished(t, tid)
        assert status == {"exitCode": None, "signal": "SIGKILL"}

    await with_terminals(body, tmp_path)


async def test_the_adapters_end_ends_every_terminal_group(tmp_path):
    """No process outlives the adapter: its end kills every terminal's group, released or not."""
    pids = []

    async def body(t):
        for command in ("sleep 300 & echo $!; wait", "(sleep 300 &); echo started; sleep 300"):
            tid = await create(t, command)
            while not (await t.handle("terminal/output", {"sessionId": "s", "terminalId": tid}))["output"]:
                await trio.sleep(0.02)
            pids.append(t.by_id[tid].proc.pid)
        pids.append(int((await t.handle("terminal/output", {"sessionId": "s", "terminalId": "t1"}))["output"]))

    await with_terminals(body, tmp_path)
    assert not [p for p in pids if alive(p)]
    stray = subprocess.run(["ps", "-eo", "pgid=,stat=,args="], capture_output=True, text=True, check=True).stdout
    assert not [line for line in stray.splitlines() if int(line.split()[0]) in pids and not line.split()[1].startswith("Z")]


async def test_the_terminal_limit_bounds_processes(tmp_path, monkeypatch):
    """Issue 24 item 2: the limit counts terminals not released and released ones whose processes are
    not yet gone; once a released group is empty a new terminal may start."""
    monkeypatch.setattr(terms_mod, "TERMINALS_MAX", 3)

    async def body(t):
        ids = [await create(t, "sleep 300") for _ in range(3)]
        with pytest.raises(RpcError, match="at most 3 terminals"):
            await create(t, "true")
        await t.handle("terminal/release", {"sessionId": "s", "terminalId": ids[0]})
        while t.count() >= 3:
            await trio.sleep(0.02)
        assert await create(t, "true")
        assert t.count() == 3

    await with_terminals(body, tmp_path)


async def test_output_is_bounded_and_cut_on_a_character(tmp_path):
    """Issue 24 item 2: output is kept up to outputByteLimit, cut at the start, never mid-character."""
    async def body(t):
        status, out = await finished(t, await create(t, "for i in 1 2 3 4 5 6 7 8 9; do printf 'é€'; done; echo end",
                                                      outputByteLimit=10))
        assert status["exitCode"] == 0
        got = await t.handle("terminal/output", {"sessionId": "s", "terminalId": "t1"})
        assert got["truncated"] is True and "\ufffd" not in out
        assert out.endswith("end\n") and len(out.encode()) <= 10

    await with_terminals(body, tmp_path)


async def test_live_output_is_reported_at_most_twice_a_second_and_the_last_lines_too(autojump_clock, tmp_path):
    """Issue 24 "Beyond" (live terminal output): output reaches the chat at once, then at most every
    0.5 s; what grew within that time is reported when it is up, so the lines before a silence show."""
    from types import SimpleNamespace

    told = []
    t = Terminals(str(tmp_path), environ=ENVIRON, on_output=lambda tid: told.append((trio.current_time(), tid)))
    term = SimpleNamespace(id="t1", released=False, told=float("-inf"), flush_due=False)
    async with trio.open_nursery() as nursery:
        await nursery.start(t.serve)
        t._tell(term)           # 0.0: at once
        await trio.sleep(0.1)
        t._tell(term)           # 0.1: held
        await trio.sleep(0.1)
        t._tell(term)           # 0.2: still held, one report scheduled
        await trio.sleep(1.0)   # silence: the held output is reported at 0.5
        t._tell(term)           # 1.2: at once again
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    assert told == [(0.0, "t1"), (0.5, "t1"), (1.2, "t1")]
