"""Terminal commands cannot escape (issue 42 items 6 and 7): a command that leaves its process group
(`setsid`, `setpgid` then fork, a double fork) is still ended by `terminal/release`, `terminal/kill`
and the adapter's end, and still counts against the limit of terminals until it is gone."""

from __future__ import annotations

import shlex
import sys

import pytest
import trio

from collie.crew.acp import terminals as terms_mod
from collie.crew.acp.rpc import RpcError
from tests.system.test_acp_terminals import ENVIRON, alive, create, finished

LIMIT = 60.0  # the outer bound of every wait; each ends as soon as its condition holds (the machine may be loaded)


def escapes(pidfile) -> str:
    """A shell line whose three background processes each leave the command's process group (a new
    session; a new group, then a fork; a double fork, re-parented away from the shell), each writing
    its pid to `pidfile` and sleeping; the line itself ends at once."""
    p = shlex.quote(str(pidfile))
    py = (f"import os; os.setpgid(0, 0)\nif os.fork() == 0:\n    open({str(pidfile)!r}, 'a').write(f'{{os.getpid()}}\\n')"
          "\n    os.execvp('sleep', ['sleep', '300'])")
    return (f"setsid sh -c 'echo $$ >> {p}; exec sleep 300' </dev/null >/dev/null 2>&1 & "
            f"(sh -c 'echo $$ >> {p}; exec sleep 300' </dev/null >/dev/null 2>&1 &) ; "
            f"{shlex.quote(sys.executable)} -c {shlex.quote(py)} </dev/null >/dev/null 2>&1; "
            f"echo started")


async def with_terminals(body, tmp_path, **kw):
    """`body(terminals)` inside a running `Terminals`, ended after it (its `serve` cancelled)."""
    from collie.crew.acp.terminals import Terminals

    t = Terminals(str(tmp_path), environ=ENVIRON, **kw)
    with trio.fail_after(LIMIT * 2):
        async with trio.open_nursery() as nursery:
            await nursery.start(t.serve)
            await body(t)
            nursery.cancel_scope.cancel()
    return t


async def pids_in(pidfile, n: int = 3) -> list[int]:
    with trio.fail_after(LIMIT):
        while True:
            lines = pidfile.read_text().split() if pidfile.exists() else []
            if len(lines) >= n:
                return [int(x) for x in lines]
            await trio.sleep(0.02)


async def all_gone(pids: list[int]) -> None:
    with trio.fail_after(LIMIT):
        while any(alive(p) for p in pids):
            await trio.sleep(0.02)


@pytest.mark.parametrize("how", ["terminal/release", "terminal/kill"])
async def test_a_command_that_leaves_its_group_is_still_ended(tmp_path, how):
    """Issue 42 item 6: `setsid`, `setpgid`+fork and a double fork escaped the group that release and
    kill signalled; now every descendant of the command is ended, whatever group it moved to."""
    pidfile = tmp_path / "pids"

    async def body(t):
        tid = await create(t, escapes(pidfile))
        pids = await pids_in(pidfile)
        status, out = await finished(t, tid)
        assert status == {"exitCode": 0, "signal": None} and out == "started\n"  # the line itself ended
        assert all(alive(p) for p in pids)
        assert await t.handle(how, {"sessionId": "s", "terminalId": tid}) == {}
        await all_gone(pids)

    await with_terminals(body, tmp_path)


async def test_the_adapters_end_ends_every_escaped_process(tmp_path):
    """Issue 42 item 6: the adapter's end (its SIGTERM cancels `Terminals.serve`) ends what escaped
    the group, released or not."""
    pids = []

    async def body(t):
        for i in range(2):
            await create(t, escapes(tmp_path / f"pids{i}"))
            pids.extend(await pids_in(tmp_path / f"pids{i}"))
        await t.handle("terminal/release", {"sessionId": "s", "terminalId": "t1"})

    await with_terminals(body, tmp_path)
    await all_gone(pids)


async def test_an_escaped_process_counts_against_the_limit_until_it_is_gone(tmp_path, monkeypatch):
    """Issue 42 item 6: 40 terminals whose processes escaped passed the limit of 16 (a released
    terminal stopped counting when its group was empty, its escapees still running). Now a released
    terminal counts until its last process is gone: whenever the count drops, they are."""
    monkeypatch.setattr(terms_mod, "TERMINALS_MAX", 3)

    async def body(t):
        pids, terms = [], []
        for i in range(3):
            tid = await create(t, escapes(tmp_path / f"pids{i}"))
            terms.append(t.by_id[tid])
            await finished(t, tid)
            pids.append(await pids_in(tmp_path / f"pids{i}"))
        with pytest.raises(RpcError, match="at most 3 terminals"):
            await create(t, "true")  # the commands ended, their escapees did not: the limit holds
        for term in terms:
            await t.handle("terminal/release", {"sessionId": "s", "terminalId": term.id})
        with trio.fail_after(LIMIT):
            while t.count() == 3:
                await trio.sleep(0.01)
        freed = [i for i, term in enumerate(terms) if term.gone.is_set()]
        assert freed and not any(alive(p) for i in freed for p in pids[i])  # a slot comes back once all of it is gone

    await with_terminals(body, tmp_path)


async def test_release_all_ends_a_sessions_terminals_only(tmp_path):
    """Issue 42 item 7: a Stop or a closed conversation ends the terminals of its session (the
    adapter calls `release_all(session)`), the other sessions' terminals run on; the agent's end
    ends all."""
    async def body(t):
        a = (await t.handle("terminal/create", {"sessionId": "A", "command": escapes(tmp_path / "a")}))["terminalId"]
        b = (await t.handle("terminal/create", {"sessionId": "B", "command": escapes(tmp_path / "b")}))["terminalId"]
        pa, pb = await pids_in(tmp_path / "a"), await pids_in(tmp_path / "b")
        assert t.release_all("A") == 1
        await all_gone(pa)
        assert all(alive(p) for p in pb) and b in t.by_id and a not in t.by_id
        assert t.release_all() == 1
        await all_gone(pb)

    await with_terminals(body, tmp_path)


async def test_a_program_that_cannot_be_run_is_refused(tmp_path):
    """A terminal whose program does not exist is refused with the reason (as before the supervisor),
    and takes no place."""
    async def body(t):
        with pytest.raises(RpcError, match="cannot run no-such-program-here: No such file"):
            await create(t, "no-such-program-here", ["x"])
        with trio.fail_after(LIMIT):
            while t.count():
                await trio.sleep(0.01)

    await with_terminals(body, tmp_path)



async def test_a_stop_ends_the_terminals_of_its_session(tmp_path, monkeypatch):
    """Issue 42 item 7: a prompt makes the agent run a command in a terminal that leaves processes
    outside its group, and the agent never releases it; Stop on the phone (the send cancelled) ends
    every one of them."""
    import json

    from collie.crew.acp.adapter import Adapter
    from tests.conftest import REPO
    from tests.unit.test_acp_view import collie

    pidfile = tmp_path / "pids"
    monkeypatch.setenv("ACP_HOSTILE", "stop")
    monkeypatch.setenv("ACP_HOSTILE_OUT", str(tmp_path / "out.json"))
    monkeypatch.setenv("ACP_HOSTILE_COMMANDS", json.dumps([escapes(pidfile) + "; sleep 300"]))
    work = tmp_path / "work"
    work.mkdir()
    (work / "hello.txt").write_text("hello")
    c = collie()
    logs: list[str] = []
    adapter = Adapter([sys.executable, str(REPO / "tests" / "acp_hostile.py")], name="t", cwd=str(work),
                      state_dir=tmp_path / "st", log=logs.append, allow_terminal=True)
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            await nursery.start(adapter.serve, c)
            while "session-1" not in c._core.conversations:
                await trio.sleep(0.02)
            async with trio.open_nursery() as n:
                stop = trio.CancelScope()

                async def send():
                    with stop:
                        await adapter.on_send(c.pane_of("session-1"), "go")

                n.start_soon(send)
                pids = await pids_in(pidfile)
                assert all(alive(p) for p in pids) and adapter.terminals.count() == 1
                stop.cancel()
            await all_gone(pids)
            assert "ended 1 terminal: the turn was stopped" in logs
            nursery.cancel_scope.cancel()


async def test_no_collie_variable_and_no_unknown_lc_name_reaches_a_terminal(tmp_path):
    """Issue 42 items 11, 12: a terminal gets no `COLLIE_*` variable — not `COLLIE_CREW_TOKEN` (which
    crew.md tells users to export), not even one named with --terminal-env — and the locale only by
    its known names: `LC_SECRET_TOKEN` stays out, `LC_TIME` comes in."""
    environ = {**ENVIRON, "COLLIE_CREW_TOKEN": "crew-secret", "COLLIE_DURABLE_TOKEN": "durable-secret",
               "LC_SECRET_TOKEN": "lc-secret", "LC_TIME": "C.UTF-8", "LC_IDENTIFICATION": "C"}
    from collie.crew.acp.terminals import Terminals

    t = Terminals(str(tmp_path), environ=environ, env_names=("COLLIE_CREW_TOKEN", "EXTRA_ONE"))
    with trio.fail_after(LIMIT):
        async with trio.open_nursery() as nursery:
            await nursery.start(t.serve)
            _, out = await finished(t, await create(t, "env"))
            nursery.cancel_scope.cancel()
    env = dict(line.split("=", 1) for line in out.splitlines())
    assert not [k for k in env if k.startswith("COLLIE_")]
    assert "secret" not in out and "LC_SECRET_TOKEN" not in env
    assert env["LC_TIME"] == "C.UTF-8" and env["LC_ALL"] == "C.UTF-8" and env["LC_IDENTIFICATION"] == "C"
    assert env["EXTRA_ONE"] == "passed on"


def test_terminal_env_refuses_a_collie_variable(paths, tmp_path):
    """Issue 42 item 11: naming a Collie variable with --terminal-env is a usage error that says why,
    before anything starts."""
    from tests.conftest import run_collie

    done = run_collie(paths, "acp", "run", "--terminal-env", "COLLIE_CREW_TOKEN", "--socket",
                      str(tmp_path / "s" / "app.sock"), "--", "true")
    assert done.returncode == 2 and "Collie's own variables (its tokens) are never passed to terminals" in done.stderr
    assert not (tmp_path / "s").exists()


async def test_a_command_that_stops_its_supervisor_is_still_ended(tmp_path):
    """Issue 42 item 6: a command that stops its own supervisor (`kill -STOP $PPID`) before leaving
    processes behind is still ended on release: the supervisor is resumed and ends its tree."""
    pidfile = tmp_path / "pids"

    async def body(t):
        tid = await create(t, "kill -STOP $PPID; " + escapes(pidfile) + "; sleep 300")
        pids = await pids_in(pidfile)
        await t.handle("terminal/release", {"sessionId": "s", "terminalId": tid})
        await all_gone(pids)

    await with_terminals(body, tmp_path)


async def test_a_supervisor_stopped_before_it_says_started_is_resumed(tmp_path, monkeypatch):
    """The race inside the test above, made certain: the command's `kill -STOP $PPID` can come before its
    supervisor has said `started` (a loaded machine runs the command first). Here the supervisor is
    stopped before it runs at all; the adapter resumes it, and the terminal starts and runs — it did not,
    `cannot run …: it did not start in time` after 30 s (seen once in a full run)."""
    real = terms_mod.REAPER
    stopped_first = tmp_path / "stopped_first.py"
    stopped_first.write_text("import os, signal, sys\nos.kill(os.getpid(), signal.SIGSTOP)\n"
                             f"os.execv(sys.executable, [sys.executable, '-I', '-S', {real!r}, *sys.argv[1:]])\n")
    monkeypatch.setattr(terms_mod, "REAPER", str(stopped_first))

    async def body(t):
        tid = await create(t, "echo resumed")
        status, out = await finished(t, tid)
        assert status == {"exitCode": 0, "signal": None} and out == "resumed\n"

    await with_terminals(body, tmp_path)
