"""The crew hub on the lead: members' links, their agents' views, and routing writes to them (crew.md §2–§3).

- `/crew/v1` (WebSocket): the member's bearer token is checked *before* accepting (a wrong token
  gets HTTP 401, no socket); then `hello` → `welcome`, or a close with the reason `version`. A
  member older than our crew-wire range but not below the floor is accepted read-only: its agents
  show, writes to them get `This machine runs an older Collie …`. A second connection with the same
  label replaces the first (a laptop waking up before the old link timed out).
- Views: a member sends the raw hello and state its bridge read; the lead feeds them to its own
  `AgentReader`, so digests, trimming and pane state are computed exactly as for its own agents.
- Offline: a member silent for 30 s is offline; its agents show Unreachable with reason
  `machine-offline` and `machine offline since HH:MM` (the time of its last frame).
- Writes: one lock per session on the lead (busy at once, Stop waits 10 s then goes through); the
  request is forwarded once; no receipt within the limit → `unknown` (the member's own journal makes
  a resend of the same id safe). Session-bound writes to an offline member fail fast with
  `machine_offline`; sends and starters go to the inbox (lead.inbox).
"""

from __future__ import annotations

import datetime as dt
import json
import time
import uuid
from collections.abc import Callable

import attrs
import trio
from quart import abort, websocket

from bridge.bridge import Bridge
from bridge.locks import Busy, SessionLocks
from bridge.reader import AgentReader
from bridge.writer import Writer
from bridge.writes import WriteRequest, lock_key
from crew import crewwire, logs
from crew.crewstore import CrewStore
from crew.fsutil import atomic_write, ensure_private_dir
from crew.paths import Paths
from crew.receipts import NOT_CERTAIN, NOT_CONFIRMED, OLDER_COLLIE, Receipt, refused
from crew.views import UNREACHABLE
from crew.wire import WireRange

log = logs.get("crew")

FORWARD_TIMEOUT = 15.0  # the member's own write timeout (10 s) plus the link
READ_TIMEOUT = 12.0
HELLO_TIMEOUT = 10.0
SAVE_EVERY = 2.0
SESSION_BOUND = ("answer", "steer", "abort", "action", "rename", "close", "reopen")


def hhmm(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall).strftime("%H:%M")


class Conn:
    def __init__(self, ws, label: str) -> None:
        self.ws = ws
        self.label = label
        self.send_lock = trio.Lock()
        self.pending: dict[str, tuple[trio.Event, list]] = {}
        self.closed = trio.Event()
        self.last_frame = trio.current_time()

    async def send(self, msg: dict) -> None:
        async with self.send_lock:
            await self.ws.send(crewwire.encode(msg))

    async def call(self, msg: dict, timeout: float) -> dict | None:
        """Send a request or read and wait for its answer; None on timeout or a dropped link."""
        done = trio.Event()
        slot: list = []
        self.pending[msg["id"]] = (done, slot)
        try:
            await self.send(msg)
            with trio.move_on_after(timeout):
                async with trio.open_nursery() as n:
                    async def closed():
                        await self.closed.wait()
                        n.cancel_scope.cancel()
                    n.start_soon(closed)
                    await done.wait()
                    n.cancel_scope.cancel()
        except Exception:  # the socket went away while sending
            return None
        finally:
            self.pending.pop(msg["id"], None)
        return slot[0] if slot else None

    def resolve(self, msg: dict) -> None:
        entry = self.pending.get(str(msg.get("id")))
        if entry is not None:
            entry[1].append(msg)
            entry[0].set()


@attrs.define
class Member:
    label: str
    readers: dict[str, AgentReader] = attrs.Factory(dict)
    conn: Conn | None = None
    version: str | None = None
    read_only: bool = False
    offline_since: float | None = None  # wall clock of the last frame, once offline
    last_seen: float | None = None  # wall clock

    @property
    def online(self) -> bool:
        return self.conn is not None


class Hub:
    def __init__(self, paths: Paths, bridge: Bridge, writer: Writer) -> None:
        self.paths = paths
        self.bridge = bridge
        self.writer = writer
        self.store = CrewStore(paths.state_dir / "crew.sqlite")
        self.members: dict[str, Member] = {}
        self.locks = SessionLocks()
        self.viewers: dict[tuple[str, str], int] = {}
        self.changed = trio.Event()
        self.on_member_change: list[Callable[[str], None]] = []
        self.inbox = None  # set by lead.inbox when it runs
        self.views_dir = paths.state_dir / "crew-views"
        self.views: dict[str, dict[str, dict]] = {}  # label -> agent -> the last raw view (persisted)
        self.dirty: set[str] = set()
        for row in self.store.members():  # known members show (offline, with their last view) from the start
            member = self.members[row["label"]] = Member(row["label"], last_seen=row["last_seen"],
                                                         version=row["version"], offline_since=row["last_seen"])
            self._restore_views(member)

    # --- views ---------------------------------------------------------------------------------
    def reader(self, machine: str, agent: str) -> AgentReader | None:
        member = self.members.get(machine)
        return member.readers.get(agent) if member else None

    def _notify(self, label: str) -> None:
        self.changed.set()
        self.changed = trio.Event()
        for fn in self.on_member_change:
            fn(label)

    def _restore_views(self, member: Member) -> None:
        """The last views a member sent survive a lead restart: its agents show offline, and sends to
        them wait in the inbox instead of finding no agent."""
        try:
            saved = json.loads((self.views_dir / f"{member.label}.json").read_text())
        except (FileNotFoundError, ValueError):
            return
        for view in saved.values() if isinstance(saved, dict) else []:
            if isinstance(view, dict):
                self._apply_view(member, view, remember=False, now=0.0)  # before trio runs: no clock yet
        self.views[member.label] = saved
        self._mark_offline(member)

    def _save_views(self) -> None:
        ensure_private_dir(self.views_dir)
        for label in list(self.dirty):
            self.dirty.discard(label)
            if label in self.members:
                atomic_write(self.views_dir / f"{label}.json",
                             json.dumps(self.views.get(label, {}), separators=(",", ":")).encode(), mode=0o600)

    def _apply_view(self, member: Member, view: dict, *, remember: bool = True, now: float | None = None) -> None:
        name = view.get("name")
        if not isinstance(name, str):
            return
        if remember:
            self.views.setdefault(member.label, {})[name] = view
            self.dirty.add(member.label)
        status = view.get("status") if isinstance(view.get("status"), dict) else {}
        reader = member.readers.get(name)
        if reader is None:
            reader = member.readers[name] = AgentReader(
                name, transport=str(status.get("transport", "socket")), address=str(status.get("address", "")),
                local=bool(status.get("local", True)), token_set=bool(status.get("token_set")))
        now = trio.current_time() if now is None else now
        if isinstance(view.get("hello"), dict):
            reader.on_hello(view["hello"], now)
        if isinstance(view.get("state"), dict) and reader.hello is not None:
            reader.on_state(view["state"], None, now)
        if status.get("status") in ("starting", "ready", "unreachable", "version_mismatch"):
            reader.status, reader.reason, reader.detail = status["status"], status.get("reason"), status.get("detail")

    def _mark_offline(self, member: Member) -> None:
        since = member.last_seen or time.time()
        member.offline_since = since
        for reader in member.readers.values():
            reader.status, reader.reason = UNREACHABLE, "machine-offline"
            reader.detail = f"machine offline since {hhmm(since)}"

    # --- the link ----------------------------------------------------------------------------------
    def install(self, app, shutdown: trio.Event) -> None:
        @app.websocket("/crew/v1")
        async def crew_link():
            header = websocket.headers.get("authorization", "")
            token = header[7:] if header.startswith("Bearer ") else ""
            label = self.store.member_for(token) if token else None
            if label is None:
                abort(401)
            await websocket.accept()
            await self._session(label, shutdown)

    async def _session(self, label: str, shutdown: trio.Event) -> None:
        ws = websocket._get_current_object()
        with trio.move_on_after(HELLO_TIMEOUT):
            try:
                hello = crewwire.decode(await ws.receive())
            except ValueError:
                hello = {}
        if not hello or hello.get("type") != "hello":
            await ws.close(1008, "expected hello")
            return
        try:
            theirs = WireRange(int(hello["crew_wire"]["min"]), int(hello["crew_wire"]["max"]))
        except (KeyError, TypeError, ValueError):
            await ws.close(1008, "version")
            return
        admission = crewwire.admit(theirs)
        if not admission.accepted:
            log.info("[crew] %s: refused: crew wire %s is outside %s", label, theirs, crewwire.CREW_WIRE)
            await ws.close(1008, "version")
            return
        if hello.get("label") != label:
            await ws.close(1008, "unauthorized")
            return
        member = self.members.setdefault(label, Member(label))
        if member.conn is not None:  # the same machine again: the newest link wins
            member.conn.closed.set()
        conn = Conn(ws, label)
        member.conn, member.read_only = conn, admission.read_only
        member.version = str(hello.get("collie"))
        member.offline_since = None
        member.last_seen = time.time()
        self.store.seen(label, member.version, member.last_seen)
        await conn.send({"type": "welcome", "crew_wire": {"min": crewwire.CREW_WIRE.min, "max": crewwire.CREW_WIRE.max},
                         "lead": "collie", "read_only": admission.read_only})
        log.info("[crew] %s: connected (Collie %s%s)", label, member.version, ", read-only" if admission.read_only else "")
        for (m, agent), count in self.viewers.items():
            if m == label and count:
                await conn.send({"type": "viewing", "agent": agent, "on": True})
        try:
            async with trio.open_nursery() as n:
                async def stop_when(event):
                    await event.wait()
                    n.cancel_scope.cancel()
                n.start_soon(stop_when, shutdown)
                n.start_soon(stop_when, conn.closed)
                while True:
                    msg = crewwire.decode(await ws.receive())
                    conn.last_frame = trio.current_time()
                    member.last_seen = time.time()
                    self._frame(member, msg)
        except (ValueError, json.JSONDecodeError):
            log.info("[crew] %s: sent a frame that is not crew wire; closing", label)
        finally:
            conn.closed.set()
            if member.conn is conn:
                member.conn = None
                self.store.seen(label, None, member.last_seen or time.time())
                self._mark_offline(member)
                log.info("[crew] %s: offline since %s", label, hhmm(member.offline_since))
                self._notify(label)
            with trio.move_on_after(1, shield=True):
                try:
                    await ws.close(1001, "lead shutting down" if shutdown.is_set() else "closed")
                except Exception:
                    pass

    def _frame(self, member: Member, msg: dict) -> None:
        kind = msg["type"]
        if kind == "snapshot":
            names = set()
            for view in msg.get("agents") or []:
                if isinstance(view, dict):
                    self._apply_view(member, view)
                    names.add(view.get("name"))
            for gone in set(member.readers) - names:
                del member.readers[gone]
                self.views.get(member.label, {}).pop(gone, None)
            self._save_views()  # once per connection: on disk at once, a crash must not lose it
            self._notify(member.label)
        elif kind == "agent":
            if isinstance(msg.get("view"), dict):
                self._apply_view(member, {**msg["view"], "name": msg.get("name")})
                self._notify(member.label)
        elif kind in ("receipt", "read_result"):
            if member.conn is not None:
                member.conn.resolve(msg)
        elif kind == "beat":
            pass
        else:
            log.info("[crew] %s: unknown frame type %r ignored", member.label, kind)

    async def run(self) -> None:
        """Watchdog: a member silent for 30 s is offline (its link is closed). Also saves the
        members' last views, at most every few seconds."""
        while True:
            await trio.sleep(SAVE_EVERY)
            if self.dirty:
                await trio.to_thread.run_sync(self._save_views)
            now = trio.current_time()
            for member in self.members.values():
                conn = member.conn
                if conn is not None and now - conn.last_frame > crewwire.OFFLINE_AFTER:
                    log.info("[crew] %s: silent for %g s", member.label, crewwire.OFFLINE_AFTER)
                    conn.closed.set()

    # --- viewing, reads, writes -------------------------------------------------------------------
    async def set_viewing(self, label: str, agent: str, on: bool) -> None:
        key = (label, agent)
        before = self.viewers.get(key, 0)
        after = max(0, before + (1 if on else -1))
        self.viewers[key] = after
        member = self.members.get(label)
        if member and member.conn and (before == 0) != (after == 0):
            await member.conn.send({"type": "viewing", "agent": agent, "on": after > 0})

    async def read(self, label: str, agent: str, what: str, args: dict) -> dict | None:
        member = self.members.get(label)
        if member is None or member.conn is None:
            return None
        got = await member.conn.call({"type": "read", "id": str(uuid.uuid4()), "agent": agent, "what": what,
                                      "args": args}, READ_TIMEOUT)
        return got.get("result") if got and got.get("ok") else None

    def offline_text(self, member: Member) -> str:
        since = member.offline_since or member.last_seen
        return f"since {hhmm(since)}" if since else "(never connected)"

    async def write(self, label: str, req: WriteRequest) -> Receipt:
        member = self.members.get(label)
        if member is None:
            return refused(req.request_id, req.op, "not_found", f"no machine {label!r} in this crew")
        if member.read_only:
            return Receipt(request_id=req.request_id, op=req.op, outcome="refused", reason="older_collie",
                           text=OLDER_COLLIE)
        if member.conn is None:
            return refused(req.request_id, req.op, "machine_offline", f"{label} {self.offline_text(member)}")
        reader = member.readers.get(req.agent)
        key = lock_key(req, reader.conversations if reader is not None else {})  # an answer: its ask's conversation
        try:
            async with self.locks.hold((label, *key), stop=req.op == "abort"):
                return await self.forward(label, req)
        except Busy:
            return refused(req.request_id, req.op, "busy")

    async def forward(self, label: str, req: WriteRequest) -> Receipt:
        """Send one request to the member (the caller holds the session lock)."""
        member = self.members.get(label)
        if member is None or member.conn is None:
            return refused(req.request_id, req.op, "machine_offline", f"{label} {self.offline_text(member) if member else ''}")
        got = await member.conn.call({"type": "request", "id": req.request_id, "agent": req.agent, "op": req.op,
                                      "args": attrs.asdict(req)}, FORWARD_TIMEOUT)
        if got is None or not isinstance(got.get("receipt"), dict):
            return Receipt(request_id=req.request_id, op=req.op, outcome="unknown", reason="link",
                           text=NOT_CERTAIN if req.op == "answer" else NOT_CONFIRMED)
        fields = {f.name for f in attrs.fields(Receipt)}
        return Receipt(**{k: v for k, v in got["receipt"].items() if k in fields})

    # --- for `collie crew list` ------------------------------------------------------------------
    def control_handlers(self) -> dict:
        async def crew(_req):
            return {"members": [{"label": m.label, "online": m.online, "version": m.version,
                                 "last_seen": m.last_seen, "offline_since": m.offline_since,
                                 "read_only": m.read_only, "agents": len(m.readers)} for m in self.members.values()]}

        async def crew_remove(req):
            label = str(req.get("label"))
            member = self.members.pop(label, None)
            if member and member.conn:
                member.conn.closed.set()
            self.views.pop(label, None)
            (self.views_dir / f"{label}.json").unlink(missing_ok=True)
            return {"removed": member is not None}

        return {"crew": crew, "crew_remove": crew_remove}
