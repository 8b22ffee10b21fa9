"""The Python durable SDK: write a durable agent in ten lines (features K1, K2; docs/sdk.md).

    async with open_collie(socket=path, host_name="hello", caps={"asks": True}) as collie:
        pane = collie.workspace("hello", title="Hello").tab("main", title="Questions").pane(
            "deploy", title="Deploy", harness="hello")
        collie.ready()
        print(f"listening {collie.address}")
        answer = await pane.ask(kind="choice", tool_call_id="deploy-1", item_id="deploy-1",
                                title="Deploy to staging?", options=[{"id": "yes", "label": "Yes"}])

`AgentCore` decides everything; this module only serves it over HTTP, runs turn tasks, and wakes
whoever waits (an `ask()`, a long-poll). Transports: a Unix socket (folder made 0700, socket 0600,
a stale socket removed; writes from this process, its parent or its descendants refused on Linux,
features T3) or HTTP/HTTPS with a bearer token (`COLLIE_TOKEN`, and `COLLIE_TOKEN_NEXT` while set).
"""

from __future__ import annotations

import datetime as dt
import errno
import hmac
import json
import os
import secrets
import socket as pysocket
import ssl
import stat
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import attrs
import trio

from collie.crew.sdk.core import AgentCore, BadRequest, DeliverAnswer, RunAction, StartTurn, Steer, StopTurn
from collie.crew.sdk.server import Inflight, Request, Response, error, handle_connection
from collie.crew.security import bearer_token
from collie.crew.wire import WAIT_MAX, WireRange, etag

CALLER_CHECK_WARNING = ("warning: this platform cannot tell who connects to the durable agent's socket, "
                        "so any process of your user can answer its asks")
READY_WAIT = 10.0
CLOSE_GRACE = 2.0
# An agent leaving `open_collie` right after a change (an ask answered: it prints and exits) waits at most this
# long for the bridge that reads it to read that change, so no ghost ask stays behind (issue 36)
SEEN_GRACE = 2.0


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@attrs.frozen
class Answer:
    """What `pane.ask()` returns: `outcome` is `accepted` (with the answer), `expired` or `stopped`."""

    outcome: str
    option_ids: list[str] = attrs.Factory(list)
    text: str | None = None
    fields: dict[str, Any] = attrs.Factory(dict)


class ItemHandle:
    """A posted item; growing kinds (`reply`, `thinking`, `notice`, `markdown`) can append and finish."""

    def __init__(self, collie: Collie, conv_id: str, seq: int) -> None:
        self._collie, self.conversation, self.seq = collie, conv_id, seq

    def update(self, **fields: Any) -> None:
        self._collie._core.update_item(self.conversation, self.seq, now_iso(), **fields)
        self._collie._changed()

    def append(self, text: str) -> None:
        item = self._collie._core.conv(self.conversation).items.get(self.seq, {})
        self.update(text=(item.get("text") or "") + text)

    def finish(self, text: str | None = None, **fields: Any) -> None:
        self.update(final=True, **({"text": text} if text is not None else {}), **fields)


class Pane:
    """One conversation of the agent (a pane in dashboard terms)."""

    def __init__(self, collie: Collie, conv_id: str) -> None:
        self._collie, self.id = collie, conv_id

    @property
    def _conv(self):
        return self._collie._core.conv(self.id)

    @property
    def turn(self) -> int:
        return self._conv.turn

    @property
    def running(self) -> bool:
        return self._conv.running

    def post(self, kind: str, **fields: Any) -> ItemHandle:
        seq = self._collie._core.add_item(self.id, kind, now_iso(), **fields)
        self._collie._changed()
        return ItemHandle(self._collie, self.id, seq)

    def reply(self, text: str = "", *, final: bool = True) -> ItemHandle:
        return self.post("reply", text=text, final=final)

    def thinking(self, text: str = "", *, final: bool = True) -> ItemHandle:
        return self.post("thinking", text=text, final=final)

    def notice(self, text: str, *, final: bool = True) -> ItemHandle:
        return self.post("notice", text=text, final=final)

    def markdown(self, text: str, *, final: bool = True) -> ItemHandle:
        return self.post("markdown", text=text, final=final)

    def code(self, text: str, lang: str | None = None) -> ItemHandle:
        return self.post("code", text=text, lang=lang)

    def link(self, url: str, label: str | None = None) -> ItemHandle:
        return self.post("link", url=url, label=label)

    def tool(self, tool_call_id: str, name: str, title: str | None = None, status: str = "running") -> ItemHandle:
        return self.post("tool", tool_call_id=tool_call_id, name=name, title=title, status=status, output=None)

    def progress(self, *, steps: list[str] | None = None, current: int | None = None,
                 percent: float | None = None, label: str | None = None) -> None:
        if steps is not None:
            value = {"steps": list(steps), "current": current or 0}
        elif percent is not None:
            value = {"percent": percent, "label": label}
        else:
            value = None
        self._set(progress=value)

    def set_actions(self, actions: list[dict]) -> None:
        self._set(actions=[dict(a) for a in actions])

    def set_title(self, title: str) -> None:
        self._set(title=title)

    def set_subtitle(self, subtitle: str | None) -> None:
        self._set(subtitle=subtitle)

    def _set(self, **fields: Any) -> None:
        self._collie._core.set_fields(self.id, **fields)
        self._collie._changed()

    @asynccontextmanager
    async def turn_scope(self) -> AsyncIterator[Pane]:
        """A turn the agent starts on its own initiative (`turn` grows by 1)."""
        self._collie._core.start_turn(self.id)
        self._collie._changed()
        try:
            yield self
        finally:
            self._collie._end_turn(self.id)

    async def ask(self, *, kind: str, title: str, tool_call_id: str | None = None, item_id: str | None = None,
                  options: list[dict] | None = None, multiple: bool | None = None, max_length: int | None = None,
                  placeholder: str | None = None, fields: list[dict] | None = None, body: str | None = None,
                  tool: str | None = None, expires_in: float | None = None, push: dict | None = None,
                  **extra: Any) -> Answer:
        """Raise an ask and wait for the human. Cancelling the wait means the agent decided itself."""
        collie = self._collie
        spec = {"kind": kind, "tool_call_id": tool_call_id, "item_id": item_id, "title": title, "body": body,
                "tool": tool, "options": options, "multiple": multiple, "max_length": max_length,
                "placeholder": placeholder, "fields": fields, "push": push, **extra}
        if expires_in is not None:
            at = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=expires_in)
            spec["expires_at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
        ask = collie._core.raise_ask(self.id, spec, now_iso())
        waiter = collie._answers[ask.id] = _Waiter()
        collie._changed()
        try:
            with trio.move_on_after(expires_in if expires_in is not None else float("inf")):
                await waiter.event.wait()
            if waiter.answer is not None:
                a = waiter.answer
                return Answer("accepted", option_ids=list(a.get("option_ids") or []), text=a.get("text"),
                              fields=dict(a.get("fields") or {}))
            if waiter.stopped:
                return Answer("stopped")
            collie._core.close_ask(ask.id, "expired", now_iso())
            collie._changed()
            return Answer("expired")
        finally:
            collie._answers.pop(ask.id, None)
            if ask.id in collie._core.asks:  # cancelled: the agent decided without the human
                collie._core.close_ask(ask.id, "decided", now_iso())
                collie._changed()

    def close(self) -> None:
        core = self._collie._core
        conv = core.conversations.pop(self.id, None)
        if conv is not None:
            conv.closed_at = now_iso()
            core.closed[self.id] = conv
            core.touch()
            self._collie._changed()


class _Waiter:
    def __init__(self) -> None:
        self.event = trio.Event()
        self.answer: dict | None = None
        self.stopped = False


class Tab:
    def __init__(self, collie: Collie, workspace: dict, tab: dict) -> None:
        self._collie, self._workspace, self._tab = collie, workspace, tab

    def pane(self, conv_id: str, *, title: str | None = None, harness: str | None = None,
             subtitle: str | None = None) -> Pane:
        self._collie._core.add_conversation(conv_id, title=title, subtitle=subtitle, workspace=self._workspace,
                                            tab=self._tab, harness=harness, now=now_iso())
        self._collie._changed()
        return Pane(self._collie, conv_id)


class Workspace:
    def __init__(self, collie: Collie, ws: dict) -> None:
        self._collie, self._ws = collie, ws

    def tab(self, tab_id: str, *, title: str | None = None) -> Tab:
        return Tab(self._collie, self._ws, {"id": tab_id, "title": title})


TurnHandler = Callable[[Pane, str], Awaitable[None]]


class Collie:
    """The agent's end of the durable wire. Made by `open_collie`; lives inside its `async with`."""

    def __init__(self, *, caps: list[str], runtime: str | None, subtitle: str | None, host_name: str | None,
                 text_max: int, history_limit: int, keeps_list: bool, wire: WireRange, tokens: list[str],
                 caller_check: bool, on_send, on_steer, on_action, on_starter) -> None:
        self.instance = secrets.token_hex(6)
        self._core = AgentCore(caps=caps, text_max=text_max, history_limit=history_limit, keeps_list=keeps_list,
                               instance=self.instance)
        self._core.subtitle = subtitle
        self.runtime = runtime or host_name or "durable"
        self.host_name = host_name
        self.wire = wire
        self._tokens = [t.encode() for t in tokens]
        self._caller_check = caller_check
        self._on_send, self._on_steer, self._on_action, self._on_starter = on_send, on_steer, on_action, on_starter
        self._ready = trio.Event()
        self._change = trio.Event()
        self._answers: dict[str, _Waiter] = {}
        self._turns: dict[str, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self.address = ""
        self.bridge_hellos: list[dict] = []  # what bridges said in hello (W3), newest last
        self.inflight = Inflight()
        self._state_path: Path | None = None
        self._saved_rev = -1
        self._served_rev: int | None = None  # the newest rev a reader of /v1/state was given (None: never read)
        self.requests_served = 0
        # set (a sentence) while the agent is up but cannot work: the poll of /v1/state is answered
        # 500 `internal` with it, so the bridge shows the agent Unreachable with this reason
        self.unavailable: str | None = None

    # --- building -------------------------------------------------------------------------
    def workspace(self, ws_id: str, *, title: str | None = None) -> Workspace:
        return Workspace(self, {"id": ws_id, "title": title})

    def conversation(self, conv_id: str, *, title: str | None = None, subtitle: str | None = None) -> Pane:
        self._core.add_conversation(conv_id, title=title, subtitle=subtitle, now=now_iso())
        self._changed()
        return Pane(self, conv_id)

    def pane_of(self, conv_id: str) -> Pane:
        self._core.conv(conv_id)
        return Pane(self, conv_id)

    @property
    def panes(self) -> list[Pane]:
        return [Pane(self, cid) for cid in self._core.conversations]

    def set_starters(self, starters: list[dict]) -> None:
        self._core.set_starters(starters)
        self._changed()

    def set_subtitle(self, subtitle: str | None) -> None:
        self._core.subtitle = subtitle
        self._core.touch()
        self._changed()

    def ready(self) -> None:
        """Start answering the bridge (requests that came earlier wait for this)."""
        self._ready.set()

    @property
    def rev(self) -> int:
        return self._core.rev

    def _changed(self) -> None:
        self._change.set()
        self._change = trio.Event()

    # --- turns ------------------------------------------------------------------------------
    def _end_turn(self, conv_id: str, *, stopped: bool = False) -> None:
        if conv_id not in self._core.conversations and conv_id not in self._core.closed:
            return
        nxt = self._core.end_turn(conv_id, now_iso(), stopped=stopped)
        self._changed()
        if nxt is not None:
            self._apply([nxt])

    async def _run_turn(self, effect: StartTurn) -> None:
        pane = Pane(self, effect.conversation)
        handler = self._on_starter if effect.starter else self._on_send
        with trio.CancelScope() as scope:
            self._turns[effect.conversation] = scope
            try:
                if handler is not None:
                    await handler(pane, effect.starter if effect.starter else effect.text)
            except Exception as exc:  # an agent bug ends the turn with a note, not the agent
                pane.notice(f"the turn failed: {type(exc).__name__}: {exc}")
        if self._turns.get(effect.conversation) is scope:
            del self._turns[effect.conversation]
        if not scope.cancelled_caught:
            self._end_turn(effect.conversation)

    def _apply(self, effects) -> None:
        for eff in effects:
            if isinstance(eff, StartTurn):
                self._nursery.start_soon(self._run_turn, eff)
            elif isinstance(eff, StopTurn):
                for waiter_id, waiter in list(self._answers.items()):
                    if self._core.ended_asks.get(waiter_id) == "stopped":
                        waiter.stopped = True
                        waiter.event.set()
                scope = self._turns.pop(eff.conversation, None)
                if scope is not None:
                    scope.cancel()
            elif isinstance(eff, Steer):
                if self._on_steer is not None:
                    self._nursery.start_soon(self._on_steer, Pane(self, eff.conversation), eff.text)
            elif isinstance(eff, DeliverAnswer):
                waiter = self._answers.get(eff.ask_id)
                if waiter is not None:
                    waiter.answer = eff.answer
                    waiter.event.set()
            elif isinstance(eff, RunAction):
                if self._on_action is not None:
                    self._nursery.start_soon(self._on_action, Pane(self, eff.conversation), eff.action_id)
        self._changed()

    # --- persistence --------------------------------------------------------------------------
    def _load(self) -> list:
        try:
            data = json.loads(self._state_path.read_text())
        except FileNotFoundError:
            return []
        return self._core.restore(data, now_iso())

    def _save(self) -> None:
        if self._state_path is None or self._saved_rev == self._core.rev:
            return
        tmp = self._state_path.with_name(self._state_path.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(self._core.snapshot(), fh, separators=(",", ":"))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, self._state_path)
        self._saved_rev = self._core.rev

    async def _save_loop(self) -> None:
        """The agent's own changes (items, progress) are saved at most twice a second."""
        while True:
            await self._change.wait()
            await trio.sleep(0.5)
            self._save()

    # --- HTTP -----------------------------------------------------------------------------
    def _authorized(self, req: Request) -> bool:
        if not self._tokens:
            return True
        given = bearer_token(req.headers.get("authorization", "")).encode()
        if not given:
            return False
        ok = False
        for token in self._tokens:
            ok |= hmac.compare_digest(given, token)
        return ok

    def _caller_refused(self, req: Request) -> bool:
        if not self._caller_check or req.peer is None:
            return False
        return is_own_family(req.peer.pid)

    async def handle(self, req: Request) -> Response:
        self.requests_served += 1
        if not self._authorized(req):
            return error(401, "unauthorized", "a wrong or missing token")
        with trio.move_on_after(READY_WAIT):
            await self._ready.wait()
        if not self._ready.is_set():
            return error(500, "internal", "the agent is still starting")
        seg = req.segments
        if req.method == "POST" and seg == ("hello",):
            return self._hello(req)
        if not seg or seg[0] != "v1":
            return error(404, "not_found", f"no route {req.path}")
        if self.wire.highest_common(WireRange(1, 1)) is None:
            return error(409, "version", f"this agent speaks wire {self.wire.short()}")
        if self.unavailable is not None and req.method == "GET" and seg[1:] == ("state",):
            return error(500, "internal", self.unavailable)
        try:
            if req.method == "GET":
                return await self._read(req, seg[1:])
            if req.method == "POST":
                if self._caller_refused(req):
                    return error(403, "unauthorized",
                                 "writes from the durable agent's own process, its parent or its children are refused")
                return self._write(req, seg[1:])
        except BadRequest as exc:
            return error(exc.status, exc.code, exc.message)
        return error(404, "not_found", f"no route {req.method} {req.path}")

    def _hello(self, req: Request) -> Response:
        try:
            hello = json.loads(req.body or b"{}")
        except ValueError:
            return error(400, "bad_request", "hello body is not JSON")
        if isinstance(hello, dict):
            self.bridge_hellos.append(hello)
            theirs = hello.get("wire") if isinstance(hello.get("wire"), dict) else {}
            try:
                rng = WireRange(int(theirs.get("min")), int(theirs.get("max")))
            except (TypeError, ValueError):
                rng = None
            if rng is not None and self.wire.highest_common(rng) is None:
                print(f"[durable] Collie {hello.get('collie')} speaks wire {rng.short()}, this agent speaks "
                      f"{self.wire.short()}. Update Collie, or the agent's SDK.", file=sys.stderr)
        body = {"wire": {"min": self.wire.min, "max": self.wire.max}, "runtime": self.runtime,
                "subtitle": self._core.subtitle, "instance": self.instance, "caps": self._core.caps,
                "limits": {"text_max": self._core.text_max}}
        return Response(200, body)

    async def _until_seen(self, limit: float) -> None:
        """Going away: if a bridge reads this agent, give it up to `limit` seconds to read the last change."""
        with trio.move_on_after(limit):
            while self._served_rev is not None and self._served_rev < self._core.rev:
                await trio.sleep(0.02)

    async def _read(self, req: Request, seg: tuple[str, ...]) -> Response:
        core = self._core
        if seg == ("state",):
            tag = etag(self.instance, core.rev)
            if req.headers.get("if-none-match") == tag:
                wait = req.query.get("wait")
                if wait is not None and "watch" in core.caps:
                    try:
                        seconds = min(max(int(wait), 1), WAIT_MAX)
                    except ValueError:
                        return error(400, "bad_request", "wait must be a whole number of seconds")
                    with trio.move_on_after(seconds):
                        while etag(self.instance, core.rev) == tag and not self.inflight.closing:
                            await self._change.wait()
                if etag(self.instance, core.rev) == tag:
                    self._served_rev = core.rev
                    return Response(304, None, (("etag", tag),))
            self._served_rev = core.rev
            return Response(200, core.state_json(), (("etag", etag(self.instance, core.rev)),))
        if seg == ("conversations",):
            if req.query.get("state") != "closed":
                return error(400, "bad_request", "only state=closed is listed here; open ones are in /v1/state")
            limit = _int(req.query.get("limit"), 100)
            return Response(200, core.closed_json(req.query.get("cursor"), limit))
        if len(seg) == 3 and seg[0] == "conversations" and seg[2] == "items":
            since = _int(req.query.get("since"), 0)
            limit = _int(req.query.get("limit"), 500)
            return Response(200, core.items_json(seg[1], since, limit))
        return error(404, "not_found", f"no route GET {req.path}")

    def _write(self, req: Request, seg: tuple[str, ...]) -> Response:
        try:
            body = json.loads(req.body or b"{}")
        except ValueError:
            return error(400, "bad_request", "the body is not JSON")
        if not isinstance(body, dict):
            return error(400, "bad_request", "the body must be a JSON object")
        route, target, action = None, None, None
        if len(seg) == 3 and seg[0] == "asks" and seg[2] == "answer":
            route, target = "answer", seg[1]
        elif len(seg) == 2 and seg[0] == "starters":
            route, target = "starter", seg[1]
        elif len(seg) == 3 and seg[0] == "conversations" and seg[2] in ("send", "steer", "abort", "rename", "close", "reopen"):
            route, target = seg[2], seg[1]
        elif len(seg) == 4 and seg[0] == "conversations" and seg[2] == "actions":
            route, target, action = "action", seg[1], seg[3]
        if route is None:
            return error(404, "not_found", f"no route POST {req.path}")
        outcome, effects = self._core.write(route, target, body, now_iso(), time.time(), action)
        self._save()  # the outcome is on disk before the bridge hears it
        self._apply(effects)
        return Response(200, outcome)

    # --- serving ----------------------------------------------------------------------------
    async def _serve_listener(self, listener, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with listener:
            task_status.started()
            await trio.serve_listeners(partial(handle_connection, handler=lambda req: self.handle(req),
                                               inflight=self.inflight), [listener])


def _int(value: str | None, default: int) -> int:
    if value is None:
        return default
    try:
        return int(value)
    except ValueError:
        raise BadRequest("bad_request", f"{value!r} is not a whole number") from None


def is_own_family(pid: int) -> bool:
    """T3: is `pid` this process, its parent, or one of its descendants?"""
    me = os.getpid()
    if pid in (me, os.getppid()):
        return True
    seen = 0
    while pid > 1 and seen < 64:
        try:
            with open(f"/proc/{pid}/stat", "rb") as fh:
                raw = fh.read()
        except OSError:
            return False
        ppid = int(raw[raw.rindex(b")") + 2:].split()[1])
        if ppid == me:
            return True
        pid, seen = ppid, seen + 1
    return False


def platform_can_tell_peer() -> bool:
    return hasattr(pysocket, "SO_PEERCRED") and os.path.isdir("/proc/self")


async def _socket_listener(path: str) -> trio.SocketListener:
    folder = Path(path).parent
    if not folder.exists():
        folder.mkdir(parents=True, mode=0o700)
    if os.path.lexists(path):
        st = os.lstat(path)
        if not stat.S_ISSOCK(st.st_mode):
            raise OSError(errno.EEXIST, f"{path} exists and is not a socket; remove it")
        probe = pysocket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
        try:
            probe.connect(path)
        except (ConnectionRefusedError, FileNotFoundError):
            os.unlink(path)  # stale: left by a crash
        else:
            raise OSError(errno.EADDRINUSE, f"another agent already listens on {path}")
        finally:
            probe.close()
    sock = trio.socket.socket(pysocket.AF_UNIX, pysocket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        await sock.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(128)
    return trio.SocketListener(sock)


@contextmanager
def _bare_interrupt():
    """A Ctrl-C that ends the agent leaves `open_collie` as one KeyboardInterrupt, not wrapped in its
    nursery's exception group, so an `except KeyboardInterrupt` around `trio.run` catches it."""
    try:
        yield
    except BaseExceptionGroup as group:
        if group.split(KeyboardInterrupt)[1] is None:  # nothing but interrupts
            raise KeyboardInterrupt from None
        raise


@asynccontextmanager
async def open_collie(
    *,
    socket: str | None = None,
    url: str | None = None,
    host_name: str | None = None,
    runtime: str | None = None,
    subtitle: str | None = None,
    caps: dict[str, bool] | list[str] | None = None,
    text_max: int = 2000,
    history_limit: int = 2000,
    keeps_list: bool = True,
    caller_check: str = "on",
    token: str | None = None,
    token_next: str | None = None,
    ssl_context: ssl.SSLContext | None = None,
    wire: tuple[int, int] = (1, 1),
    on_send: TurnHandler | None = None,
    on_steer: TurnHandler | None = None,
    on_action: Callable[[Pane, str], Awaitable[None]] | None = None,
    on_starter: TurnHandler | None = None,
    state_path: str | os.PathLike | None = None,
) -> AsyncIterator[Collie]:
    """Serve a durable agent on `socket` (a path) or `url` (``http://127.0.0.1:PORT``, ``https://HOST:PORT``;
    port 0 picks one). Over a URL the bearer token is `token` or ``$COLLIE_TOKEN`` (and
    ``$COLLIE_TOKEN_NEXT`` while set). Call `ready()` once the panes are built.

    With `state_path`, conversations, turns and the request-id journal survive a restart: every
    write is saved (atomically, fsync'd) before its answer is sent."""
    if (socket is None) == (url is None):
        raise ValueError("give exactly one of socket= or url=")
    cap_list = [k for k, v in caps.items() if v] if isinstance(caps, dict) else list(caps or [])
    tokens: list[str] = []
    if url is not None:
        token = token or os.environ.get("COLLIE_TOKEN")
        token_next = token_next or os.environ.get("COLLIE_TOKEN_NEXT")
        tokens = [t for t in (token, token_next) if t]
        if not tokens:
            raise ValueError("an agent served over a URL needs a token: set COLLIE_TOKEN (openssl rand -hex 32)")
    check = caller_check != "off"
    if socket is not None and check and not platform_can_tell_peer():
        print(CALLER_CHECK_WARNING, file=sys.stderr)
    collie = Collie(caps=cap_list, runtime=runtime, subtitle=subtitle, host_name=host_name, text_max=text_max,
                    history_limit=history_limit, keeps_list=keeps_list, wire=WireRange(*wire), tokens=tokens,
                    caller_check=check, on_send=on_send, on_steer=on_steer, on_action=on_action,
                    on_starter=on_starter)
    with _bare_interrupt():
        async with trio.open_nursery() as nursery:
            collie._nursery = nursery
            if state_path is not None:
                collie._state_path = Path(state_path)
                effects = collie._load()
            else:
                effects = []
            if socket is not None:
                listener = await _socket_listener(socket)
                collie.address = socket
            else:
                parts = urlsplit(url)
                listeners = await trio.open_tcp_listeners(parts.port or 0, host=parts.hostname)
                listener = listeners[0]
                for extra in listeners[1:]:
                    await extra.aclose()
                port = listener.socket.getsockname()[1]
                if ssl_context is not None:
                    listener = trio.SSLListener(listener, ssl_context, https_compatible=True)
                scheme = "https" if ssl_context is not None else "http"
                collie.address = f"{scheme}://{parts.hostname}:{port}"
            await nursery.start(collie._serve_listener, listener)
            collie._apply(effects)
            if collie._state_path is not None:
                nursery.start_soon(collie._save_loop)
            try:
                yield collie
            finally:
                with trio.CancelScope(shield=True):
                    await collie._until_seen(SEEN_GRACE)
                    collie.inflight.closing = True
                    collie._changed()  # open long-polls answer now
                    await collie.inflight.drain(CLOSE_GRACE)  # answer what was accepted before going
                nursery.cancel_scope.cancel()
                collie._save()
                if socket is not None:
                    with trio.CancelScope(shield=True):
                        try:
                            os.unlink(socket)
                        except FileNotFoundError:
                            pass
