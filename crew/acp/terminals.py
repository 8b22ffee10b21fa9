"""ACP `terminal/*` for `collie acp run --allow-terminal`: commands run in the agent's folder.

Off by default (the client capability `terminal` is then false and every `terminal/*` request is
refused). When allowed (issue 24 item 2, issue 25 item 8):
- a `command` without `args` is a shell line (`/bin/sh -c <command>`: `touch x && ls` is what
  claude-code-acp sends); with `args` the program runs with exactly those arguments;
- the environment is built from an allow-list (`ENV_ALLOWED`, the locale's `ENV_LOCALE` names, plus
  the names given with `--terminal-env`, never a `COLLIE_*` one) and the `env` the agent sent: the
  adapter's own environment (tokens, keys) is not passed on;
- it runs in the session's folder (`--cwd`) or the `cwd` the agent asked for, inside it;
- output is kept up to the agent's `outputByteLimit` (at most 1 MiB), cut at the start on a
  character boundary;
- each terminal runs under its own supervisor (`crew/acp/reaper.py`, a child subreaper): whatever
  the command starts stays in the supervisor's tree even if it leaves the process group or the
  session (`setsid`, `setpgid`, a double fork), and `terminal/kill`, `terminal/release`, a Stop or a
  closed conversation (the session's terminals), the agent's exit (all of them) and the adapter's end
  — its SIGKILL too, seen by the supervisor as the end of its control pipe — end that whole tree
  (issue 42 items 6 and 7);
- at most `TERMINALS_MAX` terminals whose processes may still run: a released terminal counts until
  its supervisor exited, which it does only once no process of the command is left.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import trio
from acp import schema

from collie.crew.acp import files, framing
from collie.crew.acp.rpc import RpcError

OUTPUT_MAX = 1024 * 1024
TERMINALS_MAX = 16
OUTPUT_EVERY = 0.5  # live output reaches the chat at most this often per terminal
SHELL = "/bin/sh"
REAPER = str(Path(__file__).with_name("reaper.py"))  # each terminal's supervisor (issue 42 items 6, 7)
START_WAIT = 30.0  # the supervisor says `started` (or why not) within this
START_NUDGE = 0.5  # until it does, it is resumed this often (its command may have stopped it first)
END_GRACE = 5.0  # at the adapter's end, how long the supervisors get to end their trees
ENV_ALLOWED = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR")
ENV_LOCALE = ("LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_MONETARY", "LC_NUMERIC", "LC_TIME", "LC_PAPER",
              "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION")  # by name: not LC_*
ENV_NEVER = "COLLIE_"  # Collie's own variables, its tokens: never, not even named by --terminal-env


def terminal_env(source: dict[str, str], extra_names: Iterable[str] = (), given: Iterable[Any] = ()) -> dict[str, str]:
    """The allow-listed part of `source` (never a `COLLIE_*` variable; the locale by its known names
    only, so `LC_SECRET_TOKEN` stays out: issue 42 items 11, 12), then the variables the agent gave
    (`EnvVariable`s: values of its own)."""
    allowed = set(ENV_ALLOWED) | set(ENV_LOCALE) | set(extra_names)
    env = {k: v for k, v in source.items() if k in allowed and not k.startswith(ENV_NEVER)}
    env.setdefault("PATH", os.defpath)
    for var in given:
        env[var.name] = var.value
    return env


def argv_of(command: str, args: list[str] | None) -> list[str]:
    """A shell line when the agent sends one string and no arguments; else the program and its args."""
    if not args:
        return [SHELL, "-c", command]
    return [command, *args]


class _Terminal:
    def __init__(self, proc: trio.Process, control: int, status: trio.lowlevel.FdStream, limit: int,
                 session_id: str) -> None:
        self.proc, self.limit, self.session_id = proc, limit, session_id  # proc: its supervisor (reaper.py)
        self.control = control  # our end of the supervisor's stdin: a byte, or closing it, ends everything
        self.status_stream = status
        self.status: tuple[int | None, int | None] | None = None  # (exit code, signal) once the command ended
        self.output = bytearray()
        self.truncated = False
        self.exited = trio.Event()
        self.gone = trio.Event()  # the supervisor exited: no process of the terminal is left
        self.released = False
        self.id = ""
        self.told = float("-inf")  # when the output was last reported
        self.flush_due = False  # output grew since, and a report is scheduled

    def end(self) -> None:
        """End every process of the terminal (the supervisor kills its whole tree, then exits)."""
        if self.control >= 0:
            try:
                os.write(self.control, b"k")
            except OSError:  # the supervisor is gone already, or its pipe is full of the same request
                pass
        if self.proc.returncode is None:  # a command may have stopped its supervisor (SIGSTOP): resume it
            try:
                self.proc.send_signal(signal.SIGCONT)
            except OSError:
                pass

    def close_control(self) -> None:
        if self.control >= 0:
            os.close(self.control)
            self.control = -1

    def output_text(self) -> str:
        data = bytes(self.output)
        if self.truncated:  # the cut may have split a character: drop its continuation bytes
            i = 0
            while i < len(data) and i < 4 and data[i] & 0xC0 == 0x80:
                i += 1
            data = data[i:]
        return data.decode("utf-8", "replace")


class Terminals:
    def __init__(self, cwd: str, *, env_names: Iterable[str] = (), environ: dict[str, str] | None = None,
                 on_output: Callable[[str], None] | None = None) -> None:
        self.cwd = cwd
        self.on_output = on_output  # called with the terminal id when its output grew (at most every OUTPUT_EVERY)
        self.env_names = tuple(env_names)
        self.environ = dict(os.environ if environ is None else environ)
        self.by_id: dict[str, _Terminal] = {}  # not released yet
        self._dying: set[_Terminal] = set()  # released, but a process of it may still run
        self._supervised: set[_Terminal] = set()  # whose supervisor has not been waited for yet
        self._counter = 0
        self._nursery: trio.Nursery | None = None

    def count(self) -> int:
        """What the limit counts: terminals not released, and released ones until their last process is
        gone (their supervisor exited)."""
        return len(self.by_id) + len(self._dying)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                every = list(self._supervised)
                for term in every:
                    term.end()
                    term.close_control()
                with trio.move_on_after(END_GRACE):
                    for term in every:
                        await term.proc.wait()
                for term in every:  # a supervisor that did not go in time (stopped by its command?)
                    if term.proc.returncode is None:
                        term.proc.kill()
                        await term.proc.wait()

    def release_all(self, session_id: str | None = None) -> int:
        """End every terminal (of one session, or all): the agent that made them stopped, crashed or
        closed the session. They count until their last process is gone. Returns how many."""
        ended = [tid for tid, term in self.by_id.items() if session_id is None or term.session_id == session_id]
        for tid in ended:
            self._release(tid)
        return len(ended)

    def _release(self, tid: str) -> None:
        term = self.by_id.pop(tid)
        term.released = True
        term.end()
        if not term.gone.is_set():
            self._dying.add(term)

    async def handle(self, method: str, params: Any) -> Any:
        if method == "terminal/create":
            return await self._create(schema.CreateTerminalRequest.model_validate(params))
        req_id = params.get("terminalId") if isinstance(params, dict) else None
        term = self.by_id.get(req_id) if isinstance(req_id, str) else None
        if term is None:
            raise RpcError(framing.INVALID_PARAMS, "unknown terminal")
        if method == "terminal/output":
            return {"output": term.output_text(), "truncated": term.truncated,
                    **({"exitStatus": _status(term)} if term.exited.is_set() else {})}
        if method == "terminal/wait_for_exit":
            await term.exited.wait()
            return _status(term)
        if method == "terminal/kill":
            term.end()
            return {}
        if method == "terminal/release":
            self._release(req_id)
            return {}
        raise RpcError(framing.METHOD_NOT_FOUND, f"the client does not offer {method[:60]}")

    async def _create(self, req: schema.CreateTerminalRequest) -> dict:
        if self.count() >= TERMINALS_MAX:
            raise RpcError(framing.INTERNAL_ERROR, f"at most {TERMINALS_MAX} terminals at once; release one first")
        try:
            cwd = str(files.confine(self.cwd, req.cwd)) if req.cwd else self.cwd
        except files.Refused as exc:
            raise RpcError(framing.INVALID_PARAMS, str(exc)) from None
        if not req.command:
            raise RpcError(framing.INVALID_PARAMS, "the command is empty")
        env = terminal_env(self.environ, self.env_names, req.env or [])
        env["PWD"] = cwd
        control_r, control_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            proc = await trio.lowlevel.open_process(
                [sys.executable, "-I", "-S", REAPER, str(status_w), "--", *argv_of(req.command, req.args)],
                cwd=cwd, env=env, stdin=control_r, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                pass_fds=(status_w,), start_new_session=True)
        except OSError as exc:
            for fd in (control_r, control_w, status_r, status_w):
                os.close(fd)
            raise RpcError(framing.INTERNAL_ERROR, f"cannot run {req.command[:80]}: {exc.strerror or exc}") from None
        os.close(control_r)
        os.close(status_w)
        os.set_blocking(control_w, False)
        limit = min(req.output_byte_limit, OUTPUT_MAX) if req.output_byte_limit is not None else OUTPUT_MAX
        term = _Terminal(proc, control_w, trio.lowlevel.FdStream(status_r), max(limit, 0), req.session_id)
        self._counter += 1
        term.id = f"t{self._counter}"
        self.by_id[term.id] = term
        self._supervised.add(term)
        self._nursery.start_soon(self._pump, term)
        started = trio.Event()
        problem: list[str] = []
        self._nursery.start_soon(self._watch, term, started, problem)
        with trio.move_on_after(START_WAIT):
            while not started.is_set():
                with trio.move_on_after(START_NUDGE):
                    await started.wait()
                if not started.is_set() and proc.returncode is None:
                    # the command may have stopped its supervisor (`kill -STOP $PPID`) before it said `started`
                    try:
                        proc.send_signal(signal.SIGCONT)
                    except OSError:
                        pass
        if problem or not started.is_set():
            self._release(term.id)
            raise RpcError(framing.INTERNAL_ERROR, f"cannot run {req.command[:80]}: "
                                                   f"{problem[0] if problem else 'it did not start in time'}")
        return {"terminalId": term.id}

    async def _pump(self, term: _Terminal) -> None:
        async with term.proc.stdout:
            while True:
                try:
                    data = await term.proc.stdout.receive_some(65536)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    break
                if not data:
                    break
                term.output += data
                if len(term.output) > term.limit:
                    del term.output[:len(term.output) - term.limit]
                    term.truncated = True
                self._tell(term)
        self._tell(term, force=True)

    def _tell(self, term: _Terminal, force: bool = False) -> None:
        """Report grown output at most every OUTPUT_EVERY; what grew meanwhile is reported when that
        time is up (so the last lines before a silence show too)."""
        if self.on_output is None or term.released:
            return
        now = trio.current_time()
        if force or now - term.told >= OUTPUT_EVERY:
            term.told = now
            term.flush_due = False
            self.on_output(term.id)
        elif not term.flush_due:
            term.flush_due = True
            self._nursery.start_soon(self._flush_later, term, term.told + OUTPUT_EVERY)

    async def _flush_later(self, term: _Terminal, at: float) -> None:
        await trio.sleep_until(at)
        if term.flush_due:
            self._tell(term, force=True)

    async def _watch(self, term: _Terminal, started: trio.Event, problem: list[str]) -> None:
        """The supervisor's reports: `started`, or `error` (the command could not be run); then the
        command's end (the terminal's exit); then its own exit, once every process of the terminal
        is gone — only then does a released terminal stop counting."""
        buf = bytearray()
        async with term.status_stream:
            while True:
                try:
                    data = await term.status_stream.receive_some(1024)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if not data:
                    break
                buf += data
                while (nl := buf.find(b"\n")) >= 0:
                    word, _, value = bytes(buf[:nl]).decode("ascii", "replace").partition(" ")
                    del buf[:nl + 1]
                    if word == "started":
                        started.set()
                    elif word == "error" and value.isdigit():
                        problem.append(os.strerror(int(value)))
                        started.set()
                    elif word in ("exit", "signal") and value.split(" ")[0].isdigit():
                        number = int(value.split(" ")[0])
                        term.status = (number, None) if word == "exit" else (None, number)
                        if value.endswith(" last"):  # nothing of the command runs any more
                            self._gone(term)
                        term.exited.set()
        term.close_control()
        await term.proc.wait()
        if not started.is_set():
            problem.append(f"its supervisor exited with status {term.proc.returncode}")
            started.set()
        if term.status is None:  # the supervisor was killed before the command's end was known
            term.status = (None, signal.SIGKILL)
        term.exited.set()
        self._gone(term)
        self._supervised.discard(term)

    def _gone(self, term: _Terminal) -> None:
        term.gone.set()
        self._dying.discard(term)


def _status(term: _Terminal) -> dict:
    code, sig = term.status or (None, None)
    if sig is not None:
        return {"exitCode": None, "signal": signal.Signals(sig).name if sig in signal.valid_signals() else str(sig)}
    return {"exitCode": code, "signal": None}
