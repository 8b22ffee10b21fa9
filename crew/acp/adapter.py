"""Serve an ACP agent (a child process speaking JSON-RPC on stdio) as a durable agent (issue 14, docs/acp.md).

The adapter is the agent's ACP *client* and the durable wire's agent, through the SDK:
- it starts the agent, sends `initialize` (protocol version 1, our file capabilities, terminals only
  with `allow_terminal`) and names itself in hello after the agent (`agentInfo` name/version);
- each ACP session is one conversation; the starter `New session` runs `session/new` in `cwd`; the
  list conv id → session id lives in `sessions.json` (0600) so that after a restart every open
  conversation is reloaded with `session/load` where the agent supports it (its replay is not shown
  again: the SDK's own state file kept the items); where it cannot, the next send opens a new session
  and says so in the chat;
- a send is one `session/prompt` (the SDK queues sends while a turn runs); a stop sends
  `session/cancel`, answers every open permission request of that session `cancelled`, and waits a
  bounded time for the prompt's answer;
- a crashed agent is restarted with backoff (1 s doubling to 30 s, reset after a minute of good
  health); the agent's subtitle says `Starting` meanwhile, and a turn that was running ends with a note;
- the agent runs in its own process group, ended whole (SIGTERM, 3 s, SIGKILL) on every stop and
  before every restart, and without any `COLLIE_*` variable in its environment (issue 24 item 7,
  issue 42 item 11);
- it logs in with `authenticate` where the agent offers a method the environment provides, or the
  one `--auth` names (item 1);
- while the agent cannot work (it cannot start, exits while starting, refuses initialize, a login or
  the first session) `trouble` says why in plain words (words.py), and the SDK's `unavailable`
  makes the agent's row Unreachable with that sentence; a healthy agent that refuses is not
  restarted, and no conversation is made without a session (item 8);
- a closed conversation closes its session where the agent offers `session/close`; modes are the
  conversation's buttons (`session/set_mode`); slash commands are starters (item 9, "Beyond").
- a turn silent for 30 s says `No output for 30 s`, growing, until the agent sends anything (issue 38);
- a prompt answered `end_turn` before any update of it, right after a stop or an error in its session
  (claude-agent-acp's stale answer), does not end the turn: it stays open for the asks that follow,
  and a later ask of that session is shown in a turn of its own, never cancelled unseen (issue 38).
Every message from the agent is validated with the `agent-client-protocol` package's models before
use; what fails validation is answered `invalid params` (requests) or logged (notifications); an
update broken only in some of its own fields is kept without them, the log naming its type.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import typing
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pydantic
import trio
from acp import schema
from acp.meta import PROTOCOL_VERSION

from collie.crew import __version__
from collie.crew.acp import files, framing, procs
from collie.crew.acp.framing import escape
from collie.crew.acp.rpc import Closed, Endpoint, RpcError
from collie.crew.acp.view import SessionView, permission_ask
from collie.crew.acp.words import (AUTH_REQUIRED, Refusal, choose_auth, is_frame, login_needed, plain, reason_of,
                                   says_error)
from collie.crew.errors import CollieError
from collie.crew.fsutil import atomic_write, ensure_private_dir
from collie.crew.sdk.agent import now_iso

INIT_TIMEOUT = 30.0
CANCEL_GRACE = 10.0
BACKOFF_FIRST, BACKOFF_MAX, HEALTHY_AFTER = 1.0, 30.0, 60.0
STOP_GRACE = 3.0
FILE_TIMEOUT, FILE_THREADS = 10.0, 4  # one fs/* request's bound, and how many run at once (issue 42 item 5)
AGENT_ENV_DROPPED = ("COLLIE_",)  # Collie's own variables (its tokens above all): not the agent's business
NEW_SESSION = {"id": "new-session", "label": "New session"}
CAPS = ["asks", "send", "abort", "starters", "rename", "close", "reopen", "history", "watch", "actions"]
SESSIONS_MAX = 1000
STDERR_LINE = 500
CRASHED = "The agent process exited during the turn; it is restarted."
NOT_RUNNING = "The agent is not running (it restarts); try again shortly."
STDERR_KEPT = 3  # the agent's last stderr lines, for the reason it did not start
STDERR_RECENT = 50
COMMANDS_MAX = 7  # slash commands offered as starters, after New session
COMMANDS_SKIPPED = {"logout", "login"}  # one tap on the phone must not log the agent out (codex-acp offers /logout)
RETRY_FIRST = 30.0  # a refused first session/new is tried again this often
STDERR_WAIT = 0.5  # after the agent exited, how long its last stderr lines may take to arrive
HELD_SESSIONS, HELD_UPDATES, HELD_FOR = 4, 8, 10.0  # updates for a session id not yet recorded (see _on_update)
QUIET_AFTER, QUIET_EVERY = 30.0, 15.0  # a turn silent this long says `No output for 30 s`, then every 15 s
STALE_HOLD = 20.0  # a turn answered with a stale end_turn stays open this long after its last ask (issue 38)
STALE_NOTE = ("The agent answered this message at once, before doing anything for it (claude-agent-acp does "
              "this after a stop or an error); what it still does for it may show with your next message.")


UPDATE_TYPES: dict[str, type] = {
    typing.get_args(m.model_fields["session_update"].annotation)[0]: m
    for m in typing.get_args(schema.SessionNotification.model_fields["update"].annotation)
    if isinstance(m, type) and "session_update" in m.model_fields}


class Backoff:
    """How long to wait before restarting an agent that exited: 1 s, then doubling to 30 s; back to
    1 s when the run that just ended lasted a minute or more (plain: times are passed in)."""

    def __init__(self, first: float = BACKOFF_FIRST, most: float = BACKOFF_MAX, healthy: float = HEALTHY_AFTER) -> None:
        self.first, self.most, self.healthy = first, most, healthy
        self.next = first

    def after_exit(self, started: float, ended: float) -> float:
        if ended - started >= self.healthy:
            self.next = self.first
        delay = self.next
        self.next = min(self.next * 2, self.most)
        return delay


class _Turn:
    """One `session/prompt` in flight."""

    def __init__(self, conv_id: str, session_id: str) -> None:
        self.conv_id, self.session_id = conv_id, session_id
        self.done = trio.Event()
        self.stop_reason: str | None = None
        self.error: str | None = None
        self.cancel_sent = trio.Event()
        self.updates = 0  # session updates seen since the prompt was sent
        self.last_output = trio.current_time()  # when the agent last showed something of this turn
        self.asking = 0  # permission requests of this turn open now
        self.poke = trio.Event()  # set on any sign of life (an update, an ask opened or closed, a stop)
        self.stale = False  # answered end_turn before any update, right after a cancel or an error

    def alive(self) -> None:
        self.last_output = trio.current_time()
        self.poke.set()
        self.poke = trio.Event()


class Sessions:
    """conv id → {"session_id", "cwd"}, kept in a small JSON file (0600, replaced atomically)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.by_conv: dict[str, dict] = {}
        self._by_session: dict[str, str] = {}
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except ValueError:
            raise CollieError(f"{path} is not JSON; move it away to start afresh") from None
        for conv_id, entry in (data.get("sessions") or {}).items():
            if isinstance(entry, dict) and isinstance(entry.get("session_id"), str):
                self.by_conv[conv_id] = {"session_id": entry["session_id"], "cwd": entry.get("cwd")}
                self._by_session[entry["session_id"]] = conv_id

    def set(self, conv_id: str, session_id: str, cwd: str) -> None:
        old = self.by_conv.pop(conv_id, None)
        if old is not None:
            self._by_session.pop(old["session_id"], None)
        self.by_conv[conv_id] = {"session_id": session_id, "cwd": cwd}
        self._by_session[session_id] = conv_id
        while len(self.by_conv) > SESSIONS_MAX:
            dropped = self.by_conv.pop(next(iter(self.by_conv)))
            self._by_session.pop(dropped["session_id"], None)
        self.save()

    def save(self) -> None:
        atomic_write(self.path, json.dumps({"version": 1, "sessions": self.by_conv}, indent=1).encode())

    def conv_of(self, session_id: str) -> str | None:
        return self._by_session.get(session_id)


class Adapter:
    def __init__(self, command: list[str], *, name: str, cwd: str, state_dir: Path, allow_terminal: bool = False,
                 terminal_env: tuple[str, ...] = (), auth: str | None = None, mode: str | None = None,
                 config: dict[str, str] | None = None, log: Callable[[str], None] | None = None, max_line: int = framing.MAX_LINE) -> None:
        self.command, self.name, self.cwd = command, name, os.path.realpath(cwd)
        self.allow_terminal, self.terminal_env = allow_terminal, tuple(terminal_env)
        self.state_dir = state_dir
        ensure_private_dir(state_dir)
        self.sessions = Sessions(state_dir / "sessions.json")
        self.max_line = max_line
        self._log = log or (lambda line: print(f"[acp] {name}: {line}", file=sys.stderr, flush=True))
        self.collie = None
        self.endpoint: Endpoint | None = None
        self.agent_info: dict | None = None
        self.can_load = False
        self.can_close = False
        self._new_modes = None  # the modes the last session/new offered
        self._new_config: list = []  # and its config options
        self.commands: list[str] = []  # the agent's slash commands, offered as starters
        self.live_sessions: set[str] = set()  # session ids the running agent knows (new or loaded)
        self.loading: set[str] = set()  # sessions replaying history now: their updates are not shown again
        self._held: dict[str, tuple[float, list]] = {}  # session id not yet recorded -> (since, its updates)
        self.views: dict[str, SessionView] = {}  # conv id -> view
        self.turns: dict[str, _Turn] = {}  # session id -> the prompt in flight
        self.last_end: dict[str, str] = {}  # session id -> how its last turn ended (ended, stopped, error…)
        self.lagging: set[str] = set()  # sessions that answered a prompt with a stale end_turn (issue 38)
        self._misfits: set[tuple[str, str]] = set()  # (update type, field) left out, logged once each
        self.up = trio.Event()  # set while the agent answers
        self.restarts = 0
        self.terminals = None
        self.auth = auth  # --auth METHOD
        self.mode = mode  # --mode MODE: each new session is put in it
        self.config = dict(config or {})  # --config ID=VALUE: each new session gets them
        self.auth_methods: list = []
        self.trouble: str | None = None  # why the agent cannot work now (its row says so), or None
        self.stderr_tail: deque[str] = deque(maxlen=STDERR_KEPT)  # its last lines, backtrace frames left out
        self.stderr_errors: list[str] = []  # its first few lines saying what went wrong (`Error: …`), this run
        self._run_mark = 0
        self.stderr_count = 0  # lines so far: what the agent printed during a request is known by this
        self.stderr_recent: deque[tuple[int, str]] = deque(maxlen=STDERR_RECENT)
        self._file_threads = trio.CapacityLimiter(FILE_THREADS)

    # --- the SDK's callbacks -----------------------------------------------------------------
    def view(self, conv_id: str) -> SessionView:
        v = self.views.get(conv_id)
        if v is None:
            v = self.views[conv_id] = SessionView(self.collie.pane_of(conv_id), self._terminal_output)
        return v

    def _terminal_output(self, terminal_id: str) -> str | None:
        term = self.terminals.by_id.get(terminal_id) if self.terminals is not None else None
        return term.output_text() if term is not None else None

    def _terminal_changed(self, terminal_id: str) -> None:
        try:
            for view in self.views.values():
                view.terminal_changed(terminal_id)
        except Exception as exc:  # our bug stays a log line: it must not end the terminals (or the adapter)
            self._log(f"showing terminal output failed: {type(exc).__name__}: {escape(str(exc))}")

    def _end_terminals(self, why: str, session_id: str | None = None) -> None:
        """End the terminals of a session (or all): nothing a command started outlives a Stop, a closed
        conversation or the agent that asked for it (issue 42 item 7). They count against the limit
        until their last process is gone."""
        if self.terminals is not None:
            ended = self.terminals.release_all(session_id)
            if ended:
                self._log(f"ended {ended} terminal{'s' if ended > 1 else ''}: {why}")

    def _set_trouble(self, text: str) -> None:
        """The agent cannot work: say why on its row (Unreachable with this reason) and in the log."""
        if text != self.trouble:
            self._log(f"the agent cannot work: {escape(text, 500)}")
        self.trouble = text
        self.collie.unavailable = text
        self.collie.set_subtitle(text[:200])

    def _clear_trouble(self) -> None:
        if self.trouble is not None:
            self._log("the agent works again")
        self.trouble = None
        self.collie.unavailable = None

    def _refused(self, what: str, exc: BaseException, since: int | None = None) -> str:
        if isinstance(exc, RpcError) and exc.code == AUTH_REQUIRED:
            return login_needed(self.auth_methods)
        return plain(f"The agent refused {what}: {reason_of(exc)}{self._said_since(since)}")

    def _said_since(self, since: int | None) -> str:
        """The first line the agent printed on stderr since `since` (its own words for a refusal:
        Claude Code's `… cannot be used with root/sudo privileges …`), as ` (it said: …)`."""
        if since is None:
            return ""
        first = next((t for n, t in self.stderr_recent if n > since), None)
        return f" (it said: {first})" if first else ""

    async def _stderr_settles(self) -> None:
        """A refusal's stderr lines may arrive just after its answer (two pipes): wait a moment."""
        await trio.sleep(STDERR_WAIT)

    async def _agent(self) -> Endpoint:
        if self.trouble is not None and not self.up.is_set():
            raise Refusal(self.trouble)
        with trio.move_on_after(INIT_TIMEOUT):
            await self.up.wait()
        if self.endpoint is None or not self.up.is_set():
            raise Refusal(self.trouble or NOT_RUNNING)
        return self.endpoint

    async def _session_new(self, ep: Endpoint) -> str:
        """One `session/new` in --cwd; raises what the agent answered."""
        with trio.fail_after(INIT_TIMEOUT):
            raw = await ep.request("session/new", {"cwd": self.cwd, "mcpServers": []})
        got = schema.NewSessionResponse.model_validate(raw)
        self._new_modes = got.modes
        self._new_config = list(got.config_options or [])
        return got.session_id

    async def new_session(self, conv_id: str) -> str:
        ep = await self._agent()
        since = self.stderr_count
        try:
            session_id = await self._session_new(ep)
        except (RpcError, Closed, trio.TooSlowError, pydantic.ValidationError) as exc:
            await self._stderr_settles()
            raise Refusal(self._refused("a new session", exc, since)) from None
        self.sessions.set(conv_id, session_id, self.cwd)
        self.live_sessions.add(session_id)
        self.view(conv_id).set_modes(self._new_modes)
        self._recorded(session_id)  # after the answer's modes: what the agent sent since is newer
        await self._start_mode(ep, conv_id, session_id)
        await self._start_config(ep, conv_id, session_id)
        if self.trouble is not None:
            self._clear_trouble()
        return session_id

    async def on_starter(self, pane, starter_id: str) -> None:
        try:
            session_id = await self.new_session(pane.id)
        except Refusal as exc:
            pane.notice(str(exc))
            return
        if pane._conv.subtitle is None:
            pane.set_subtitle(f"session {session_id[:40]}")
        command = self._command_of(starter_id)
        if command is not None:  # the agent's slash command, as its first prompt
            pane.post("user", text=f"/{command}")
            await self.prompt(pane, session_id, f"/{command}")

    def _command_of(self, starter_id: str) -> str | None:
        if starter_id.startswith("cmd-") and starter_id[4:].isdigit():
            i = int(starter_id[4:])
            return self.commands[i] if i < len(self.commands) else None
        return None

    def _on_commands(self, update: schema.AvailableCommandsUpdate) -> None:
        """`available_commands_update`: the agent's slash commands become starters after `New session`."""
        names = [c.name for c in update.available_commands
                 if c.name and c.name.isprintable() and c.name.lower() not in COMMANDS_SKIPPED][:COMMANDS_MAX]
        if names == self.commands:
            return
        self.commands = names
        self.collie.set_starters([NEW_SESSION] + [{"id": f"cmd-{i}", "label": f"/{n}"[:60]}
                                                  for i, n in enumerate(names)])

    async def on_action(self, pane, action_id: str) -> None:
        """A mode button: `session/set_mode` (the agent's answer, or its refusal, shows). Runs in the
        SDK's own nursery, so nothing may escape it."""
        try:
            await self._set_mode(pane, action_id)
        except Exception as exc:
            self._log(f"the mode button failed: {type(exc).__name__}: {escape(str(exc))}")

    async def _set_mode(self, pane, action_id: str) -> None:
        view = self.view(pane.id)
        mode = view.mode_of_action(action_id)
        entry = self.sessions.by_conv.get(pane.id)
        if mode is None or entry is None:
            return
        try:
            ep = await self._agent()
            if entry["session_id"] not in self.live_sessions:
                await self._load_again(entry)
            with trio.fail_after(INIT_TIMEOUT):
                await ep.request("session/set_mode", {"sessionId": entry["session_id"], "modeId": mode})
        except Refusal as exc:
            pane.notice(str(exc))
            return
        except (RpcError, Closed, trio.TooSlowError) as exc:
            pane.notice(plain(f"The agent did not change the mode: {reason_of(exc)}"))
            return
        view.mode_changed(mode)

    async def on_send(self, pane, text: str) -> None:
        try:
            entry = self.sessions.by_conv.get(pane.id)
            await self._agent()
            if entry is not None and entry["session_id"] not in self.live_sessions:
                await self._load_again(entry)  # a conversation reopened after its session was closed
            if entry is None or entry["session_id"] not in self.live_sessions:
                if entry is not None:
                    pane.notice("The agent could not reload this session; this message starts a new one.")
                await self.new_session(pane.id)
                entry = self.sessions.by_conv[pane.id]
        except Refusal as exc:
            pane.notice(str(exc))
            return
        await self.prompt(pane, entry["session_id"], text)

    async def prompt(self, pane, session_id: str, text: str) -> None:
        try:
            ep = await self._agent()
        except Refusal as exc:
            pane.notice(str(exc))
            return
        turn = _Turn(pane.id, session_id)
        self.turns[session_id] = turn
        view = self.view(pane.id)
        view.begin()
        stopped = False
        watch = trio.CancelScope()
        try:
            self._nursery.start_soon(self._run_prompt, ep, turn, text)
            self._nursery.start_soon(self._watch_quiet, turn, view, watch)
            try:
                await turn.done.wait()
            except trio.Cancelled:
                stopped = True
                with trio.move_on_after(CANCEL_GRACE, shield=True):
                    await self._cancel(ep, turn)
                raise
        finally:
            watch.cancel()
            if stopped or turn.stop_reason == "cancelled":
                how = "stopped"
            elif turn.error is not None:
                how = "crashed" if turn.error == CRASHED else "error"
            else:
                how = "ended"
            self.last_end[session_id] = how
            view.quiet(None)
            view.finish(how)
            if self.turns.get(session_id) is turn:
                del self.turns[session_id]
            if stopped:
                self._end_terminals("the turn was stopped", session_id)
        if turn.error is not None:
            pane.notice(turn.error)
        elif turn.stale:
            pane.notice(STALE_NOTE)
        elif turn.stop_reason not in (None, "end_turn"):
            pane.notice(f"The turn ended: {turn.stop_reason.replace('_', ' ')}.")

    async def _watch_quiet(self, turn: _Turn, view: SessionView, scope: trio.CancelScope) -> None:
        with scope:
            await self._say_quiet(turn, view)

    async def _say_quiet(self, turn: _Turn, view: SessionView) -> None:
        """A turn with no update for `QUIET_AFTER` says so (`No output for 30 s`, then 45 s, …) so that an
        agent retrying its model in silence is not taken for one at work; an ask open is not silence
        (the turn waits for the human). The words go as soon as the agent shows anything again."""
        while True:
            quiet = trio.current_time() - turn.last_output
            if quiet < QUIET_AFTER:
                wait = QUIET_AFTER - quiet
            else:
                wait = QUIET_EVERY - (quiet - QUIET_AFTER) % QUIET_EVERY
            await trio.sleep(wait)
            quiet = trio.current_time() - turn.last_output
            if turn.asking == 0 and quiet >= QUIET_AFTER:
                view.quiet(quiet)

    async def _run_prompt(self, ep: Endpoint, turn: _Turn, text: str) -> None:
        try:
            raw = await ep.request("session/prompt", {"sessionId": turn.session_id,
                                                      "prompt": [{"type": "text", "text": text}]})
            turn.stop_reason = schema.PromptResponse.model_validate(raw).stop_reason
            if (turn.stop_reason == "end_turn" and turn.updates == 0 and not turn.cancel_sent.is_set()
                    and self.last_end.get(turn.session_id) in ("stopped", "error")):
                await self._hold_stale(turn)
        except RpcError as exc:
            turn.error = (login_needed(self.auth_methods) if exc.code == AUTH_REQUIRED
                          else plain(f"The agent answered the prompt with an error: {reason_of(exc)}"))
        except Closed:
            turn.error = CRASHED
        except pydantic.ValidationError:
            turn.error = "The agent's answer to session/prompt does not fit the ACP schema."
        finally:
            turn.done.set()

    async def _hold_stale(self, turn: _Turn) -> None:
        """A stale end_turn (issue 38): the prompt answered `end_turn` before any update of it, right after
        a stop or an error in its session — claude-agent-acp 0.23 answers with what was left of the
        stopped turn and goes on with this prompt unseen, asking permission after the answer. The turn
        is not ended on it: it stays open, so that those asks reach the phone in the turn they belong
        to, until `STALE_HOLD` seconds pass with no ask open and no sign of the agent, or a stop. The
        session is remembered as lagging: an ask that still comes after the turn ended is shown in a
        turn of its own instead of being cancelled unseen."""
        turn.stale = True
        self.lagging.add(turn.session_id)
        self._log(f"session {escape(turn.session_id, 40)} answered a prompt end_turn before any update of it, "
                  f"right after {'an error' if self.last_end.get(turn.session_id) == 'error' else 'a stopped turn'}: "
                  "a stale answer; the turn stays open")
        while not turn.cancel_sent.is_set():
            poke = turn.poke
            if turn.asking:
                await poke.wait()
                continue
            with trio.move_on_after(STALE_HOLD):
                await poke.wait()
            if poke is turn.poke and not poke.is_set():
                return

    async def _cancel(self, ep: Endpoint, turn: _Turn) -> None:
        """Stop: `session/cancel`, then (the open permission requests answer `cancelled` as their asks
        end `stopped`) wait for the prompt's answer, which ACP says is `cancelled`."""
        try:
            await ep.notify("session/cancel", {"sessionId": turn.session_id})
        except (Closed, RpcError):
            pass
        turn.cancel_sent.set()
        turn.poke.set()
        await turn.done.wait()
        if turn.stop_reason is not None and turn.stop_reason != "cancelled" and not turn.stale:
            self._log(f"the agent ended a cancelled turn with {escape(turn.stop_reason, 40)}, not cancelled")

    # --- requests and notifications from the agent --------------------------------------------------
    async def handle(self, method: str, params: Any, is_notification: bool) -> Any:
        try:
            if method == "session/update":
                note = self._lenient_update(params)
                if note is not None:
                    self._on_update(note)
                return None
            if method == "session/request_permission":
                return await self._on_permission(schema.RequestPermissionRequest.model_validate(params))
            if method == "fs/read_text_file":
                req = schema.ReadTextFileRequest.model_validate(params)
                self._known_session(req.session_id)
                try:
                    return {"content": await self._file_io(files.read_text, self.cwd, req.path, req.line, req.limit)}
                except files.Refused as exc:
                    self._log(f"refused fs/read_text_file: {escape(str(exc))}")
                    raise RpcError(framing.INVALID_PARAMS, str(exc)) from None
            if method == "fs/write_text_file":
                req = schema.WriteTextFileRequest.model_validate(params)
                self._known_session(req.session_id)
                try:
                    await self._file_io(files.write_text, self.cwd, req.path, req.content)
                except files.Refused as exc:
                    self._log(f"refused fs/write_text_file: {escape(str(exc))}")
                    raise RpcError(framing.INVALID_PARAMS, str(exc)) from None
                return {}
            if method.startswith("terminal/"):
                if self.terminals is None:
                    raise RpcError(framing.METHOD_NOT_FOUND, "terminals are not offered (collie acp run --allow-terminal)")
                self._known_session(params.get("sessionId") if isinstance(params, dict) else None)
                return await self.terminals.handle(method, params)
        except pydantic.ValidationError as exc:
            self._log(f"{escape(method, 60)} from the agent does not fit the ACP schema ({exc.error_count()} errors)")
            raise RpcError(framing.INVALID_PARAMS, "the params do not fit the ACP schema") from None
        if is_notification:
            return None
        raise RpcError(framing.METHOD_NOT_FOUND, f"the client does not offer {method[:60]}")

    async def _file_io(self, fn: Callable, *args: Any) -> Any:
        """A file request off the event loop (issue 42 item 5): in a worker thread, at most
        `FILE_THREADS` at once, answered within `FILE_TIMEOUT` s whatever the file is (a FIFO, a hung
        network mount). A request that takes longer is refused; its thread, abandoned, still holds
        its place until it ends, so a stuck folder cannot grow the number of threads."""
        with trio.move_on_after(FILE_TIMEOUT):
            return await trio.to_thread.run_sync(fn, *args, limiter=self._file_threads, abandon_on_cancel=True)
        raise files.Refused(f"the file system did not answer within {FILE_TIMEOUT:g} s (nothing is known "
                            "of what was done)")

    def _known_session(self, session_id: str) -> str:
        conv_id = self.sessions.conv_of(session_id)
        if conv_id is None or session_id not in self.live_sessions:
            raise RpcError(framing.INVALID_PARAMS, "unknown session")
        return conv_id

    def _lenient_update(self, params: Any) -> schema.SessionNotification | None:
        """A `session/update`, validated; one whose update breaks the schema in some of its own fields
        (claude-agent-acp's `usage_update` with `"used": null`) is kept without those fields, and the log
        names the update type and the fields (once each). Anything else that does not fit is logged
        with its update type and dropped."""
        try:
            return schema.SessionNotification.model_validate(params)
        except pydantic.ValidationError as exc:
            errors = exc.errors()
        update = params.get("update") if isinstance(params, dict) else None
        kind = update.get("sessionUpdate") if isinstance(update, dict) else None
        kind = kind if isinstance(kind, str) else "?"
        cls = UPDATE_TYPES.get(kind)
        broken = {e["loc"][2] for e in errors if len(e["loc"]) >= 3 and e["loc"][:2] == ("update", kind)}
        whole = [e for e in errors if not (len(e["loc"]) >= 3 and e["loc"][:2] == ("update", kind))]
        if cls is None or whole or not broken or not all(isinstance(f, str) for f in broken):
            self._log(f"session/update {escape(kind, 40)} from the agent does not fit the ACP schema "
                      f"({len(errors)} errors): left out")
            return None
        fields = {}
        for name, info in cls.model_fields.items():
            key = info.alias or name
            if key in update and key not in broken:
                try:
                    fields[name] = pydantic.TypeAdapter(info.annotation).validate_python(update[key])
                except pydantic.ValidationError:
                    broken.add(key)
        try:
            session_id = pydantic.TypeAdapter(str).validate_python(params.get("sessionId"))
        except pydantic.ValidationError:
            self._log(f"session/update {escape(kind, 40)} from the agent has no session id: left out")
            return None
        for field in sorted(broken):
            if (kind, field) not in self._misfits and len(self._misfits) < 64:
                self._misfits.add((kind, field))
                self._log(f"session/update {escape(kind, 40)}: its field {escape(field, 40)} does not fit the ACP "
                          "schema; the update is kept without it")
        absent = {name: None for name in cls.model_fields if name not in fields}  # read as "not said"
        update_model = cls.model_construct(_fields_set=set(fields), **absent, **fields)
        return schema.SessionNotification.model_construct(session_id=session_id, update=update_model)

    def _on_update(self, note: schema.SessionNotification) -> None:
        if self.sessions.conv_of(note.session_id) is None and note.session_id not in self.loading:
            self._hold(note)
            return
        if isinstance(note.update, schema.AvailableCommandsUpdate):
            self._on_commands(note.update)
            return
        if note.session_id in self.loading:
            return  # a replay of what the SDK's state file already holds
        conv_id = self.sessions.conv_of(note.session_id)
        if conv_id is None or conv_id not in self.collie._core.conversations:
            return
        view = self.view(conv_id)
        turn = self.turns.get(note.session_id)
        if turn is not None:
            turn.updates += 1
            turn.alive()
            view.quiet(None)
        view.apply(note.update)

    def _hold(self, note: schema.SessionNotification) -> None:
        """An update for a session id not recorded yet: claude-code-acp sends its slash commands
        right after `session/new`'s answer, which may be read before the adapter has recorded the
        session. Kept, bounded (a few sessions, a few updates each, for a short while), until
        `_recorded` applies them; anything else is dropped as before."""
        now = trio.current_time()
        for sid in [s for s, (since, _) in self._held.items() if now - since > HELD_FOR]:
            del self._held[sid]
        if note.session_id not in self._held:
            if len(self._held) >= HELD_SESSIONS:
                del self._held[next(iter(self._held))]
            self._held[note.session_id] = (now, [])
        kept = self._held[note.session_id][1]
        if len(kept) < HELD_UPDATES:
            kept.append(note)

    def _recorded(self, session_id: str) -> None:
        """The session is recorded: what it sent before that is applied now, in order."""
        since, kept = self._held.pop(session_id, (0.0, []))
        if trio.current_time() - since > HELD_FOR:
            return
        for note in kept:
            self._on_update(note)

    async def _on_permission(self, req: schema.RequestPermissionRequest) -> dict:
        conv_id = self._known_session(req.session_id)
        turn = self.turns.get(req.session_id)
        if turn is None and req.session_id in self.lagging and conv_id in self.collie._core.conversations:
            # after a stale end_turn the agent asks for a prompt whose turn ended: shown, not cancelled unseen
            self._log(f"session {escape(req.session_id, 40)} asks after its turn ended (stale end_turn): shown")
            async with self.view(conv_id).pane.turn_scope():
                ghost = _Turn(conv_id, req.session_id)
                ghost.cancel_sent.set()  # no prompt of ours is running: a stop there has nothing to wait for
                self.turns[req.session_id] = ghost
                try:
                    return await self._ask(req, conv_id, ghost)
                finally:
                    self.view(conv_id).finish("ended")
                    if self.turns.get(req.session_id) is ghost:
                        del self.turns[req.session_id]
        if turn is None or turn.cancel_sent.is_set():  # no turn to ask in: nobody can answer it
            return {"outcome": {"outcome": "cancelled"}}
        turn.asking += 1
        turn.alive()
        self.view(conv_id).quiet(None)
        try:
            return await self._ask(req, conv_id, turn)
        finally:
            turn.asking -= 1
            turn.alive()

    async def _ask(self, req: schema.RequestPermissionRequest, conv_id: str, turn: _Turn) -> dict:
        view = self.view(conv_id)
        call_id = req.tool_call.tool_call_id
        known = view.calls.get(call_id)
        spec, back = permission_ask(req, view.tool_names.get(call_id), f"it-{known.handle.seq}" if known else None,
                                    known)
        if not back:
            return {"outcome": {"outcome": "cancelled"}}
        answer = await view.pane.ask(**spec)
        if answer.outcome == "accepted" and answer.option_ids and answer.option_ids[0] in back:
            chosen = answer.option_ids[0]
            role = next(o["role"] for o in spec["options"] if o["id"] == chosen)
            if role == "deny":
                view.tool_denied(call_id)
            return {"outcome": {"outcome": "selected", "optionId": back[chosen]}}
        if answer.outcome == "stopped":
            with trio.move_on_after(CANCEL_GRACE):
                await turn.cancel_sent.wait()  # ACP: cancel first, then the open requests answer cancelled
        return {"outcome": {"outcome": "cancelled"}}

    # --- the agent process ----------------------------------------------------------------------
    async def _initialize(self, ep: Endpoint) -> None:
        caps = {"fs": {"readTextFile": True, "writeTextFile": True}, "terminal": self.allow_terminal}
        with trio.fail_after(INIT_TIMEOUT):
            raw = await ep.request("initialize", {"protocolVersion": PROTOCOL_VERSION, "clientCapabilities": caps,
                                                  "clientInfo": {"name": "collie-acp", "version": __version__}})
        got = schema.InitializeResponse.model_validate(raw)
        if got.protocol_version != PROTOCOL_VERSION:
            raise RpcError(framing.INVALID_REQUEST, f"the agent speaks ACP {got.protocol_version}, "
                                                    f"this adapter speaks {PROTOCOL_VERSION}")
        caps = got.agent_capabilities
        self.can_load = bool(caps and caps.load_session)
        self.can_close = bool(caps and caps.session_capabilities and caps.session_capabilities.close is not None)
        info = got.agent_info
        self.agent_info = {"name": info.name, "version": info.version} if info else None
        if info is not None:
            self.collie.runtime = f"{info.name[:40]} {info.version[:20]}".strip()
        self.auth_methods = list(got.auth_methods or [])
        method = choose_auth(self.auth_methods, agent_env(os.environ), self.auth)
        if method is not None:
            try:
                with trio.fail_after(INIT_TIMEOUT):
                    await ep.request("authenticate", {"methodId": method.id})
            except RpcError as exc:
                raise Refusal(plain(f"The agent refused the login {method.id}: {reason_of(exc)}")) from None
            self._log(f"logged in with {escape(method.id, 60)}")

    async def _reload_sessions(self, ep: Endpoint) -> None:
        self.live_sessions.clear()
        if not self.can_load:
            return
        for conv_id, entry in list(self.sessions.by_conv.items()):
            if conv_id not in self.collie._core.conversations:
                continue
            sid = entry["session_id"]
            keep_replay = not self.collie._core.conversations[conv_id].items
            if not keep_replay:
                self.loading.add(sid)
            try:
                with trio.fail_after(INIT_TIMEOUT):
                    raw = await ep.request("session/load", {"sessionId": sid, "cwd": entry.get("cwd") or self.cwd,
                                                            "mcpServers": []})
                self.live_sessions.add(sid)
                self._loaded_modes(conv_id, raw)
                await self._start_mode(ep, conv_id, sid)  # a reloaded session may be back in the agent's default
                if keep_replay:
                    self.view(conv_id).finish()  # the replayed reply is complete
            except (RpcError, trio.TooSlowError) as exc:
                self._log(f"session/load of {escape(sid, 40)} failed: {escape(reason_of(exc))}")
                if isinstance(exc, RpcError) and exc.code == AUTH_REQUIRED:
                    self._set_trouble(login_needed(self.auth_methods))
            finally:
                self.loading.discard(sid)

    async def _first_conversation(self, ep: Endpoint) -> bool | None:
        """A fresh adapter opens one conversation so that there is somewhere to type at once — only
        once the agent gave it a session (no empty `Session 1`). True: done or not needed; None: the
        agent refused (its row says why; it is not restarted for that); False: it failed."""
        if self.collie._core.conversations or self.sessions.by_conv:
            return True
        since = self.stderr_count
        try:
            session_id = await self._session_new(ep)
        except RpcError as exc:
            await self._stderr_settles()
            self._set_trouble(self._refused("a new session", exc, since))
            return None
        except (Closed, trio.TooSlowError, pydantic.ValidationError) as exc:
            self._set_trouble(plain(f"The agent did not start: {reason_of(exc)}"))
            return False
        conv_id = "session-1"
        pane = self.collie.conversation(conv_id, title="Session 1")
        self.sessions.set(conv_id, session_id, self.cwd)
        self.live_sessions.add(session_id)
        pane.set_subtitle(f"session {session_id[:40]}")
        self.view(conv_id).set_modes(self._new_modes)
        self._recorded(session_id)  # after the answer's modes: what the agent sent since is newer
        await self._start_mode(ep, conv_id, session_id)
        await self._start_config(ep, conv_id, session_id)
        return True

    async def _load_again(self, entry: dict) -> None:
        """`session/load` one session quietly (the chat already holds its items)."""
        if not self.can_load or self.endpoint is None:
            return
        sid = entry["session_id"]
        self.loading.add(sid)
        try:
            with trio.fail_after(INIT_TIMEOUT):
                raw = await self.endpoint.request("session/load", {"sessionId": sid, "cwd": entry.get("cwd") or self.cwd,
                                                                   "mcpServers": []})
            self.live_sessions.add(sid)
            conv_id = self.sessions.conv_of(sid)
            if conv_id is not None:
                self._loaded_modes(conv_id, raw)
                await self._start_mode(self.endpoint, conv_id, sid)
        except (RpcError, Closed, trio.TooSlowError) as exc:
            self._log(f"session/load of {escape(sid, 40)} failed: {escape(reason_of(exc))}")
        finally:
            self.loading.discard(sid)

    def _loaded_modes(self, conv_id: str, raw: Any) -> None:
        try:
            modes = schema.LoadSessionResponse.model_validate(raw or {}).modes
        except pydantic.ValidationError:
            self._log("the agent's answer to session/load does not fit the ACP schema (its modes are not shown)")
            return
        if conv_id in self.collie._core.conversations:
            self.view(conv_id).set_modes(modes)

    async def _close_sessions(self, ep: Endpoint) -> None:
        """A conversation closed on the phone closes its ACP session (`session/close`, where the agent
        offers it: codex-acp does); reopened, the next send loads it again."""
        seen = None
        while True:
            core = self.collie._core
            shape = (len(core.conversations), len(core.closed))  # a close or reopen changes it
            if shape == seen:
                await self.collie._change.wait()
                continue
            seen = shape
            for conv_id, entry in list(self.sessions.by_conv.items()):
                sid = entry["session_id"]
                if conv_id in self.collie._core.closed and sid in self.live_sessions:
                    self.live_sessions.discard(sid)
                    self._end_terminals("its conversation was closed", sid)
                    if self.can_close:
                        try:
                            with trio.fail_after(INIT_TIMEOUT):
                                await ep.request("session/close", {"sessionId": sid})
                        except (RpcError, trio.TooSlowError) as exc:
                            self._log(f"session/close of {escape(sid, 40)} failed: {escape(reason_of(exc))}")
                        except Closed:
                            return  # the agent went away; the restart loads what is open
            await self.collie._change.wait()

    async def _start_mode(self, ep: Endpoint, conv_id: str, session_id: str) -> None:
        """`--mode MODE`: a new session is put in that mode (Codex starts Read Only) where it offers it."""
        view = self.view(conv_id)
        if self.mode is None or self.mode == view.mode:
            return
        if self.mode not in dict(view.modes):
            offered = ", ".join(m for m, _ in view.modes) or "none"
            view.pane.notice(plain(f"--mode {self.mode}: the agent offers no such mode here (it offers: {offered})"))
            return
        try:
            with trio.fail_after(INIT_TIMEOUT):
                await ep.request("session/set_mode", {"sessionId": session_id, "modeId": self.mode})
        except (RpcError, trio.TooSlowError) as exc:
            view.pane.notice(plain(f"The agent did not change the mode to {self.mode}: {reason_of(exc)}"))
            return
        view.mode_changed(self.mode)

    async def _start_config(self, ep: Endpoint, conv_id: str, session_id: str) -> None:
        """`--config ID=VALUE`: a new session gets these of the agent's config options (Codex: `model`,
        `reasoning_effort`) through `session/set_config_option`; what it does not offer is said."""
        pane = self.view(conv_id).pane
        offered = {o.id: o for o in self._new_config}
        for option_id, value in self.config.items():
            option = offered.get(option_id)
            if isinstance(option, schema.SessionConfigOptionSelect):
                values = [v.value for v in option.options if isinstance(v, schema.SessionConfigSelectOption)]
                values += [v.value for g in option.options if isinstance(g, schema.SessionConfigSelectGroup)
                           for v in g.options]
                wanted: str | bool | None = value if value in values else None
                choices = ", ".join(values)
            elif isinstance(option, schema.SessionConfigOptionBoolean):
                wanted = {"true": True, "false": False}.get(value.lower())
                choices = "true, false"
            else:
                ids = ", ".join(offered) or "none"
                pane.notice(plain(f"--config {option_id}: the agent offers no such option here (it offers: {ids})"))
                continue
            if wanted is None:
                pane.notice(plain(f"--config {option_id}={value}: not one of {choices}"))
                continue
            try:
                with trio.fail_after(INIT_TIMEOUT):
                    await ep.request("session/set_config_option",
                                     {"sessionId": session_id, "configId": option_id, "value": wanted})
            except (RpcError, trio.TooSlowError) as exc:
                pane.notice(plain(f"The agent did not set {option_id} to {value}: {reason_of(exc)}"))

    async def _retry_first(self, ep: Endpoint) -> None:
        """While the first session/new is refused (a login missing, say), ask again now and then: a
        login done meanwhile on the machine makes the agent work without a restart."""
        while self.trouble is not None and not self.sessions.by_conv:
            await trio.sleep(RETRY_FIRST)
            if await self._first_conversation(ep):
                self._clear_trouble()
                self.collie.set_subtitle(self.collie.runtime)
                return

    async def _start(self, ep: Endpoint, nursery: trio.Nursery) -> bool:
        """initialize (and authenticate), reload the sessions, open the first conversation. False: the
        agent failed (it is restarted); True: it answers — working, or refusing with its row saying why
        (a healthy agent is not restarted for a refusal)."""
        try:
            await self._initialize(ep)
        except Refusal as exc:
            self._set_trouble(str(exc))
            return True
        except RpcError as exc:
            await self._stderr_settles()
            self._set_trouble(plain(f"The agent refused to start: {reason_of(exc)}{self._said_since(self._run_mark)}"))
            return True
        except (Closed, trio.TooSlowError, pydantic.ValidationError) as exc:
            if not isinstance(exc, Closed):  # an exit is said with its status and stderr, once it is known
                self._set_trouble(plain(f"The agent did not start: {reason_of(exc)}"))
            return False
        self.endpoint = ep
        before = self.trouble
        self.trouble = None  # what this start finds out, from here
        try:
            await self._reload_sessions(ep)
        except Closed:
            self.trouble = before
            return False
        self.up.set()
        nursery.start_soon(self._close_sessions, ep)
        first = await self._first_conversation(ep)
        if first is False:
            return False
        if first is None:
            nursery.start_soon(self._retry_first, ep)
            return True
        if self.trouble is None:
            if before is not None:
                self._log("the agent works again")
            self.collie.unavailable = None
            self.collie.set_subtitle(self.collie.runtime)
        return True

    async def run_agent_once(self, *, task_status=trio.TASK_STATUS_IGNORED) -> int | None:
        """Start the agent, initialize it, serve it until it exits; returns its exit status (None: it
        could not be started). `started` once the first initialize ended, however it ended."""
        self.collie.set_subtitle("Starting")
        reported = False

        def report() -> None:
            nonlocal reported
            if not reported:
                reported = True
                task_status.started()

        try:
            proc = await trio.lowlevel.open_process(self.command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.PIPE, cwd=self.cwd, env=agent_env(os.environ),
                                                    start_new_session=True)
        except OSError as exc:
            self._log(f"cannot start {escape(shlex.join(self.command))}: {escape(exc.strerror or str(exc))}")
            self._set_trouble(plain(f"Cannot start {shlex.join(self.command)}: {exc.strerror or exc}"))
            report()
            return None
        self._log(f"started {escape(shlex.join(self.command))} (pid {proc.pid})")
        ep = Endpoint(proc.stdin, proc.stdout, self.handle, log=self._log, max_line=self.max_line)
        self.stderr_tail.clear()
        self.stderr_errors.clear()
        self._run_mark = self.stderr_count
        stderr_done = trio.Event()
        started = False  # initialize answered (the agent runs, working or refusing)
        try:
            async with trio.open_nursery() as nursery:
                async def serve_then_stop(task_status=trio.TASK_STATUS_IGNORED):
                    await ep.serve(task_status=task_status)  # the agent closed its stdout
                    with trio.move_on_after(STDERR_WAIT):  # its last words, for the reason
                        await stderr_done.wait()
                    self._agent_gone()
                    nursery.cancel_scope.cancel()

                async def exit_then_stop():
                    await proc.wait()
                    with trio.move_on_after(STDERR_WAIT):  # its last words, for the reason
                        await stderr_done.wait()
                    self._agent_gone()
                    nursery.cancel_scope.cancel()

                await nursery.start(serve_then_stop)
                nursery.start_soon(exit_then_stop)
                nursery.start_soon(self._relay_stderr, proc.stderr, stderr_done)
                ok = await self._start(ep, nursery)
                started = ok
                report()
                if not ok:
                    with trio.move_on_after(STDERR_WAIT):  # its last words, for the reason
                        await stderr_done.wait()
                    nursery.cancel_scope.cancel()
        finally:
            report()  # the agent died while starting: the adapter serves anyway and restarts it
            with trio.CancelScope(shield=True):
                self.up = trio.Event()
                self.endpoint = None
                self.live_sessions.clear()
                self._held.clear()
                self.lagging.clear()  # a new agent process starts with no stale state
                for turn in list(self.turns.values()):
                    if not turn.done.is_set():
                        turn.error = CRASHED
                        turn.done.set()
                self._end_terminals("the agent exited")
                await _stop_process(proc)
        self._log(f"the agent exited with status {proc.returncode}")
        if not started and (self.trouble is None or not self.trouble.startswith("The agent did not start")):
            last = " / ".join(self.stderr_errors or self.stderr_tail)
            self._set_trouble(plain(f"The agent exited while starting (status {proc.returncode})"
                                    + (f": {last}" if last else "; it printed nothing on stderr")))
        return proc.returncode

    def _agent_gone(self) -> None:
        """The agent went away: its open asks end `stopped` — nobody decided them (issue 24 item 9);
        without this the SDK would close them `decided` as their waits are cancelled."""
        if not self.views:
            return
        core = self.collie._core
        ours = [a for a in core.asks.values() if a.conversation in self.views]
        for ask in ours:
            core.close_ask(ask.id, "stopped", now_iso())
        if ours:
            self.collie._changed()

    async def _relay_stderr(self, stream: trio.abc.ReceiveStream, done: trio.Event | None = None) -> None:
        """The agent's stderr, line by line, escaped, into the adapter's log (a line cut at 500
        characters); for the reason it did not start, its first lines saying what went wrong
        (`Error: …`) are kept, and its last lines without a backtrace's frames (RUST_BACKTRACE=1)."""
        buf = bytearray()

        def line_out(raw: bytes) -> None:
            self._log(f"agent: {escape(raw, STDERR_LINE)}")
            text = plain(raw.decode("utf-8", "replace"), 160)
            if says_error(text):
                if len(self.stderr_errors) < STDERR_KEPT:
                    self.stderr_errors.append(text)
            if not is_frame(text) or not self.stderr_tail:
                self.stderr_tail.append(text)
            self.stderr_count += 1
            self.stderr_recent.append((self.stderr_count, text))

        try:
            async with stream:
                while data := await stream.receive_some(65536):
                    buf += data
                    while (nl := buf.find(b"\n")) >= 0:
                        line, buf = bytes(buf[:nl]), buf[nl + 1:]
                        if line.strip():
                            line_out(line.rstrip())
                    if len(buf) > STDERR_LINE * 4:  # no newline coming: show what there is
                        line_out(bytes(buf))
                        buf.clear()
            if buf.strip():
                line_out(bytes(buf))
        finally:
            if done is not None:
                done.set()

    async def supervise(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Keep the agent running: restart it after every exit, waiting as `Backoff` says."""
        backoff = Backoff()
        while True:
            started = trio.current_time()
            await self.run_agent_once(task_status=task_status)
            task_status = trio.TASK_STATUS_IGNORED
            delay = backoff.after_exit(started, trio.current_time())
            self.restarts += 1
            self.collie.set_subtitle(f"Starting: the agent exited; restart in {delay:g} s")
            await trio.sleep(delay)

    async def serve(self, collie, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Run the agent under `collie` (an open SDK `Collie`); `started` once the first initialize ended."""
        self.collie = collie
        collie.set_starters([NEW_SESSION])
        if self.allow_terminal:
            from collie.crew.acp.terminals import Terminals

            self.terminals = Terminals(self.cwd, env_names=self.terminal_env, on_output=self._terminal_changed)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if self.terminals is not None:
                await nursery.start(self.terminals.serve)
            await nursery.start(self.supervise)
            task_status.started()


def agent_env(source) -> dict[str, str]:
    """The agent's environment: the adapter's, without any of Collie's own variables (`COLLIE_*`: the
    SDK's `COLLIE_TOKEN`, `COLLIE_TOKEN_NEXT`, a member's `COLLIE_CREW_TOKEN`, `COLLIE_DURABLE_TOKEN`,
    and every other; issue 42 item 11)."""
    return {k: v for k, v in source.items() if not k.startswith(AGENT_ENV_DROPPED)}


async def _stop_process(proc: trio.Process, grace: float | None = None) -> None:
    """End the agent's whole process group: close its stdin, SIGTERM the group, give it `STOP_GRACE`
    to go (the leader and everything it started: an `npx` launcher's binary too), then SIGKILL what
    is left. The group is signalled even when the leader has exited already."""
    grace = STOP_GRACE if grace is None else grace
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            try:
                await stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
    pgid = proc.pid
    procs.kill_group(pgid, signal.SIGTERM)
    with trio.move_on_after(grace):
        await proc.wait()
        while procs.group_alive(pgid):
            await trio.sleep(procs.GROUP_POLL)
    await procs.end_group(pgid)
    if proc.returncode is None:
        proc.kill()
        await proc.wait()
