"""ACP `terminal/*` for `collie acp run --allow-terminal`: commands run in the agent's folder.

Off by default (the client capability `terminal` is then false and every `terminal/*` request is
refused). When allowed (issue 24 item 2, issue 25 item 8):
- a `command` without `args` is a shell line (`/bin/sh -c <command>`: `touch x && ls` is what
  claude-code-acp sends); with `args` the program runs with exactly those arguments;
- the environment is built from an allow-list (`ENV_ALLOWED`, plus the names given with
  `--terminal-env`) and the `env` the agent sent: the adapter's own environment (tokens, keys) is not
  passed on;
- it runs in the session's folder (`--cwd`) or the `cwd` the agent asked for, inside it;
- output is kept up to the agent's `outputByteLimit` (at most 1 MiB), cut at the start on a
  character boundary;
- each terminal is its own process group (a new session): `terminal/kill`, `terminal/release` and the
  adapter's end signal the whole group, so nothing a command started in the background is left;
- at most `TERMINALS_MAX` terminals whose processes may still run: a released terminal counts until
  its group is gone.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Callable, Iterable
from typing import Any

import trio
from acp import schema

from crew.acp import files, framing
from crew.acp.procs import GROUP_GRACE, GROUP_POLL, end_group, group_alive, kill_group
from crew.acp.rpc import RpcError

OUTPUT_MAX = 1024 * 1024
TERMINALS_MAX = 16
OUTPUT_EVERY = 0.5  # live output reaches the chat at most this often per terminal
SHELL = "/bin/sh"
ENV_ALLOWED = ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR")
ENV_PREFIXES = ("LC_",)


def terminal_env(source: dict[str, str], extra_names: Iterable[str] = (), given: Iterable[Any] = ()) -> dict[str, str]:
    """The allow-listed part of `source`, then the variables the agent gave (`EnvVariable`s)."""
    allowed = set(ENV_ALLOWED) | set(extra_names)
    env = {k: v for k, v in source.items() if k in allowed or k.startswith(ENV_PREFIXES)}
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
    def __init__(self, proc: trio.Process, limit: int) -> None:
        self.proc, self.limit = proc, limit
        self.pgid = proc.pid  # start_new_session: the leader's pid is the group's id
        self.output = bytearray()
        self.truncated = False
        self.exited = trio.Event()
        self.gone = trio.Event()  # no process of the group is left (set after `exited`)
        self.released = False
        self.id = ""
        self.told = float("-inf")  # when the output was last reported
        self.flush_due = False  # output grew since, and a report is scheduled

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
        self._dying: set[_Terminal] = set()  # released, but a process of the group may still run
        self._counter = 0
        self._nursery: trio.Nursery | None = None

    def count(self) -> int:
        """What the limit counts: terminals not released, and released ones until their group is gone."""
        return len(self.by_id) + len(self._dying)

    async def serve(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                every = [*self.by_id.values(), *self._dying]
                for term in every:
                    kill_group(term.pgid)
                for term in every:
                    await end_group(term.pgid)
                    if term.proc.returncode is None:
                        with trio.move_on_after(GROUP_GRACE):
                            await term.proc.wait()

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
            kill_group(term.pgid)
            return {}
        if method == "terminal/release":
            term.released = True
            kill_group(term.pgid)
            del self.by_id[req_id]
            if not term.gone.is_set():
                self._dying.add(term)
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
        try:
            proc = await trio.lowlevel.open_process(argv_of(req.command, req.args), cwd=cwd, env=env,
                                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                                    stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as exc:
            raise RpcError(framing.INTERNAL_ERROR, f"cannot run {req.command[:80]}: {exc.strerror or exc}") from None
        self._counter += 1
        tid = f"t{self._counter}"
        limit = min(req.output_byte_limit, OUTPUT_MAX) if req.output_byte_limit is not None else OUTPUT_MAX
        term = self.by_id[tid] = _Terminal(proc, max(limit, 0))
        term.id = tid
        self._nursery.start_soon(self._pump, term)
        self._nursery.start_soon(self._reap, term)
        return {"terminalId": tid}

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

    async def _reap(self, term: _Terminal) -> None:
        """The leader's exit is the terminal's exit; the group is followed until it is empty (a command's
        background children count against the limit until then, and are ended on release)."""
        await term.proc.wait()
        term.exited.set()
        while group_alive(term.pgid):
            if term.released:
                await end_group(term.pgid)
            await trio.sleep(GROUP_POLL)
        term.gone.set()
        self._dying.discard(term)


def _status(term: _Terminal) -> dict:
    code = term.proc.returncode
    if code is not None and code < 0:
        return {"exitCode": None, "signal": signal.Signals(-code).name if -code in signal.valid_signals() else str(-code)}
    return {"exitCode": code, "signal": None}
