"""The crew hub on the lead (crew.md §2–§3): the adapter between members' `/crew/v1` links and the pieces that decide.

`Hub` accepts each member's WebSocket, feeds what arrives to the member session and carries out what comes
back — closes, frames, log lines, the views file, the live channel's and the inbox's wake-ups. It decides
nothing itself:

- collie.lead.members.session: who may hold a link (hello, version, label, one link per label), how a frame is
  taken and what it changes, offline, viewing, the log lines a peer can repeat at will;
- collie.lead.members.views: the reader each view builds, and what one member's views may cost the lead;
- collie.lead.members.link: one link's sends, calls (a stalled member holds nobody past the limit) and frame queue;
- collie.lead.members.routing: reads and writes to members' agents, the lead's session lock, its remembered refusals;
- collie.lead.members.views_file: members' last views on disk, so they survive a lead restart.

Untrusted input: a wrong member token is accepted and closed at once (`unauthorized`); every frame is parsed
strictly (collie.crew.crewwire); a bad one is logged (escaped, once per link, then counted) and skipped, and when it
answered a request, that request's receipt is `unknown`. Whatever fails inside one member's link ends that
link only, never the lead. Frames carrying views are parsed (when large) and fed in a worker thread, one at
a time in arrival order; views are kept as their JSON text, not parsed documents, so the garbage collector
(which holds the GIL) has less to walk, and the GIL switch interval is 1 ms, so the event loop gets the GIL
back quickly while a worker computes. Figures: bench/README.md (issue 9.6).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import trio
from quart import websocket

from collie.bridge.bridge import Bridge
from collie.bridge.reader import AgentReader
from collie.bridge.writer import Writer
from collie.bridge.writes import WriteRequest
from collie.crew import crewwire, logs
from collie.crew.crewwire import FrameError, shown
from collie.crew.paths import Paths
from collie.crew.receipts import Receipt
from collie.crew.security import bearer_token
from collie.lead.members.link import PING_WAIT, Conn, LinkStuck, answers, close_link, feed, receive_hello
from collie.lead.members.records import CrewRecords
from collie.lead.members.refusals import Refusals
from collie.lead.members.routing import Routing
from collie.lead.members.session import (LINK_LINES, LineLimiter, Member, admit_hello, apply_frame, claim, connected,
                                         crew_row, hhmm, intake, keeps_label, link_ended, mark_offline, silent,
                                         too_many_bad, viewed, viewing)
from collie.lead.members.views import MEMBER_VIEWS_MAX, install_views, views_kept
from collie.lead.members.views_file import read_views, remove_views, views_path, write_views

log = logs.get("crew")

SAVE_EVERY = 2.0
SESSION_BOUND = ("answer", "steer", "abort", "action", "rename", "close", "reopen")
# A worker thread feeding views holds the GIL for up to this long before the event loop gets it back
# (Python's default is 5 ms; every step that makes a system call may wait that long once more).
FEED_SWITCH_INTERVAL = 0.001  # a repeated refusal (bad token, label in use) is logged at most once a minute


class Hub:
    """Members' links on the lead: `install` serves /crew/v1, `run` ticks (views saved, tokens reloaded, silent
    links closed); `read`/`write` route to members' agents (collie.lead.members.routing); `members` is what every reader sees."""

    def __init__(self, paths: Paths, bridge: Bridge, writer: Writer, *, refusals: Refusals | None = None) -> None:
        self.paths = paths
        self.bridge = bridge
        self.writer = writer
        self.records = CrewRecords(paths.state_dir)  # members' last contact, API tokens, invite files
        self.store = self.records.store
        self.members: dict[str, Member] = {}
        # reads and writes to members' agents, the lead's lock and its remembered refusals (collie.lead.members.routing)
        self.routing = Routing(self.members, refusals if refusals is not None
                               else Refusals(paths.state_dir / "refusals.sqlite"), self._bad_frame)
        self.locks, self.inflight = self.routing.locks, self.routing.inflight
        self.viewers: dict[tuple[str, str], int] = {}
        self.changed = trio.Event()
        self.on_member_change: list[Callable[[str], None]] = []
        # (label, agent): which agent's view changed, None for the whole member (the live channel
        # and push look at that agent only: issue 15.1)
        self.on_view_change: list[Callable[[str, str | None], None]] = []
        self.views_dir = paths.state_dir / "crew-views"
        self.views: dict[str, dict[str, str]] = {}  # label -> agent -> the last view, as JSON text (persisted)
        self.dirty: set[str] = set()
        self.feed_limiter = trio.CapacityLimiter(1)  # members' views are fed one at a time, off the loop
        sys.setswitchinterval(FEED_SWITCH_INTERVAL)
        self.save_limiter = trio.CapacityLimiter(1)
        self.lines = LineLimiter()  # what is logged of lines a peer can repeat at will
        for row in self.store.members():  # known members show (offline, with their last view) from the start
            member = self.members[row["label"]] = Member(row["label"], last_seen=row["last_seen"],
                                                         version=row["version"], offline_since=row["last_seen"])
            self._restore_views(member)
            if row["last_seen"] is not None:  # joined before: a plaintext copy left by an older lead goes (§1)
                self.records.forget_invite(row["label"])

    # --- views ---------------------------------------------------------------------------------
    def reader(self, machine: str, agent: str) -> AgentReader | None:
        member = self.members.get(machine)
        return member.readers.get(agent) if member else None

    def _notify(self, label: str, agents: list[str] | None = None) -> None:
        """`agents`: the only agents of the member whose views changed (None: any, or the link)."""
        self.changed.set()
        self.changed = trio.Event()
        for fn in self.on_member_change:
            fn(label)
        for fn in self.on_view_change:
            for name in agents if agents is not None else [None]:
                fn(label, name)

    def _say(self, key: str, line: str, *args, now: float, burst: int = 1) -> None:
        """Log a line that a peer can repeat at will at most `burst` times a minute (LineLimiter)."""
        held = self.lines.allow(key, now, burst)
        if held is not None:
            log.info(line + (f" ({held} more since)" if held else ""), *args)

    def _link_line(self, kind: str, label: str, line: str, *args) -> None:
        """A line about one member's link (connected, offline, refused, bad frames): a member that
        reconnects in a loop would otherwise write two lines a connection, without end."""
        self._say(f"{kind}:{label}", line, label, *args, now=trio.current_time(), burst=LINK_LINES)

    def _restore_views(self, member: Member) -> None:
        """A member's last views from its file (collie.lead.members.views_file): its agents show, offline."""
        raws = read_views(views_path(self.views_dir, member.label))
        if raws is not None:
            self._install_views(member, raws, 0.0)
            self._mark_offline(member)

    def _install_views(self, member: Member, raws: list, now: float) -> None:
        """Parse and feed views on the spot (lead start-up, before trio runs; tests): collie.lead.members.views."""
        install_views(member.readers, self.views.setdefault(member.label, {}), raws, now, MEMBER_VIEWS_MAX)

    async def _save_views(self) -> None:
        """Write the dirty members' last views (a worker thread does the JSON and the fsyncs)."""
        batch = {label: dict(self.views.get(label, {})) for label in self.dirty if label in self.members}
        self.dirty.clear()
        if batch:
            await trio.to_thread.run_sync(write_views, self.views_dir, batch, limiter=self.save_limiter)

    def _mark_offline(self, member: Member) -> None:
        mark_offline(member, time.time())

    # --- the link ----------------------------------------------------------------------------------
    def install(self, app, shutdown: trio.Event) -> None:
        @app.websocket("/crew/v1")
        async def crew_link():
            header = websocket.headers.get("authorization", "")
            token = bearer_token(header)
            label = self.store.member_for(token) if token else None
            await websocket.accept()
            ws = websocket._get_current_object()
            if label is None:  # crew.md §2: closed with a reason the member can show
                self._say("unauthorized", "[crew] refused a member link: unauthorized (a wrong or removed member token)",
                          now=trio.current_time())
                await close_link(ws, crewwire.UNAUTHORIZED)
                return
            try:
                await self._session(ws, label, shutdown)
            except Exception as exc:  # the task boundary of this member's link: it ends here, the lead goes on
                log.warning("[crew] %s: link ended by an error: %s", label, shown(f"{type(exc).__name__}: {exc}", 200))
                await close_link(ws, "internal")

    async def _session(self, ws, label: str, shutdown: trio.Event) -> None:
        """One member's link from its hello to its end; however it ends, the member is then offline."""
        hello = await receive_hello(ws)
        admission = admit_hello(hello, label)
        if not admission.accepted:
            if admission.reason == crewwire.VERSION:
                self._link_line("version", label, "[crew] %s: refused: crew wire %s is outside %s", hello.crew_wire,
                                crewwire.CREW_WIRE)
            await close_link(ws, admission.reason)
            return
        member = self.members.setdefault(label, Member(label))
        if not await self._claim(ws, member, hello):
            return
        conn = Conn(ws, label, hello.boot)
        welcome = connected(member, conn, hello, admission, time.time())
        try:  # from here on, however the link ends, the member is marked offline (finally below)
            await self.records.mark_seen(label, member.version, member.last_seen)
            self.records.forget_invite(label)
            await conn.send(welcome)
            self._link_line("connected", label, "[crew] %s: connected (Collie %s%s)", member.version,
                            ", read-only" if admission.read_only else "")
            for frame in viewed(self.viewers, label):
                await conn.send(frame)
            await self._read(ws, member, conn, shutdown)
        except LinkStuck:  # it took no frame in time (Conn.send set the reason): the link ends here
            pass
        finally:
            conn.closed.set()
            if conn.bad_frames > 1:
                self._link_line("bad-count", label, "[crew] %s: %d bad frames on this link in all", conn.bad_frames)
            if link_ended(member, conn, time.time()):
                self._link_line("offline", label, "[crew] %s: offline since %s", hhmm(member.offline_since))
                self._notify(label)
                with trio.CancelScope(shield=True):  # the link may end by cancellation (shutdown)
                    await self.records.mark_seen(label, None, member.last_seen or time.time())
            await close_link(ws, "lead shutting down" if shutdown.is_set() else conn.close_reason,
                              1001 if shutdown.is_set() else 1000)

    async def _claim(self, ws, member: Member, hello: crewwire.Hello) -> bool:
        """One link per label (collie.lead.members.session.claim): False when the newcomer was refused `label_in_use`;
        True when it may go on, an open link it replaces told to close."""
        old, label = member.conn, member.label
        if old is None:
            return True
        if claim(hello.boot, old.boot) == "probe":  # another machine, or the member restarted
            alive = await answers(old)
            if keeps_label(alive, old, member.conn):
                self._say(f"in-use:{label}", "[crew] %s: refused a second link: the label is in use by a "
                          "connected member (label_in_use)", label, now=trio.current_time())
                await close_link(ws, crewwire.LABEL_IN_USE)
                return False
            old.close_reason = "silent: it did not answer a probe when the member connected again"
            log.info("[crew] %s: the old link did not answer within %.0f s: the new link replaces it",
                     label, PING_WAIT)
        else:
            old.close_reason = "replaced by the same member's new link"  # it woke up before the old link timed out
        old.closed.set()
        return True

    async def _read(self, ws, member: Member, conn: Conn, shutdown: trio.Event) -> None:
        """Take the link's frames until it closes (collie.lead.members.session.intake): views wait for the feeder,
        the rest is applied at once; too many bad frames close the link (`protocol`)."""
        async with trio.open_nursery() as n:
            async def stop_when(event):
                await event.wait()
                n.cancel_scope.cancel()
            n.start_soon(stop_when, shutdown)
            n.start_soon(stop_when, conn.closed)
            n.start_soon(self._feed, member, conn)
            while True:
                raw = await ws.receive()
                conn.last_frame = trio.current_time()
                member.last_seen = time.time()
                try:
                    taken = intake(raw)
                    if taken[0] == "queue":
                        conn.enqueue(taken[1], len(raw))
                    else:
                        self._apply(member, conn, taken[1], taken[2], [])
                except FrameError as exc:
                    self._bad_frame(conn, exc)
                while conn.frames.full():  # backpressure: this member waits, nobody else does
                    conn.drained = trio.Event()
                    await conn.drained.wait()
                if too_many_bad(conn.bad_frames):
                    conn.close_reason = crewwire.PROTOCOL
                    n.cancel_scope.cancel()
                    break

    def _bad_frame(self, conn: Conn, exc: FrameError) -> None:
        """Logged once per link (escaped), counted; a bad answer to a request makes it `unknown`."""
        conn.bad_frames += 1
        if conn.bad_frames == 1:
            self._link_line("bad", conn.label, "[crew] %s: a frame that does not fit the crew wire was ignored: %s",
                            exc.args[0])
        request_id = crewwire.frame_id(exc)
        if request_id is not None:
            conn.resolve(request_id, exc)

    def _apply(self, member: Member, conn: Conn, kind: str, head, built: list) -> None:
        """Act on one parsed frame (collie.lead.members.session.apply_frame decides); `built` holds the readers made
        for the views it carried."""
        effect = apply_frame(member, conn.names, self.views.setdefault(member.label, {}), kind, head, built,
                             MEMBER_VIEWS_MAX)
        if effect.answer is not None:
            conn.resolve(effect.answer.id, effect.answer)
        for note in effect.notes:
            if note[0] == "bad":
                self._bad_frame(conn, note[1])
            else:
                self._link_line("too-big", member.label, "[crew] %s: agent %s: its view (cost %d) would take what "
                                "the lead keeps of this member's views over %d; not kept, shown Unreachable "
                                "(view-too-big)", shown(note[1], 40), note[2], MEMBER_VIEWS_MAX)
        if effect.dirty:
            self.dirty.add(member.label)
        if effect.save:
            conn.save_after_feed = True
        if effect.notify:
            self._notify(member.label, effect.changed)

    def kept(self, label: str, but: str | None = None) -> int:
        """What the lead keeps of one member's views, counted against MEMBER_VIEWS_MAX (collie.lead.members.views)."""
        member = self.members.get(label)
        return views_kept(member.readers if member is not None else {}, self.views.get(label, {}), but)

    async def reload_tokens(self) -> None:
        await self.records.reload_tokens()

    async def _feed(self, member: Member, conn: Conn) -> None:
        """Feed the link's queued view frames (collie.lead.members.link.feed) and swap the new readers in."""
        await feed(conn, lambda got: self._apply(member, conn, *got), lambda: self._save_views(), self._bad_frame,
                   lambda: member.conn is conn, self.feed_limiter)

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Watchdog: a member silent for 30 s is offline (its link is closed). Also saves the
        members' last views, at most every few seconds. Start it with `nursery.start`."""
        self.records.loaded_at = trio.current_time()
        task_status.started()
        while True:
            await trio.sleep(SAVE_EVERY)
            if self.dirty:
                await self._save_views()
            # a `collie tokens` change the control socket did not carry; idle, this costs one stat a tick
            if self.records.tokens_due(trio.current_time()):
                await self.reload_tokens()
            now = trio.current_time()
            for member in self.members.values():
                conn = member.conn
                if conn is not None and silent(conn.last_frame, now):
                    log.info("[crew] %s: silent for %g s", member.label, crewwire.OFFLINE_AFTER)
                    conn.close_reason = "silent"
                    conn.closed.set()

    # --- viewing -------------------------------------------------------------------
    async def set_viewing(self, label: str, agent: str, on: bool) -> None:
        frame = viewing(self.viewers, label, agent, on)
        member = self.members.get(label)
        if member and member.conn and frame is not None:
            try:
                await member.conn.send(frame)
            except LinkStuck:  # the link is ending; a new one is told what is viewed when it connects
                pass

    # --- reads and writes (collie.lead.members.routing) -----------------------------------------------------------
    async def read(self, label: str, agent: str, what: str, args: dict) -> dict | None:
        return await self.routing.read(label, agent, what, args)

    async def write(self, label: str, req: WriteRequest) -> Receipt:
        return await self.routing.write(label, req)

    async def forward(self, label: str, req: WriteRequest) -> Receipt:
        return await self.routing.forward(label, req)

    @property
    def refusals(self) -> Refusals:
        return self.routing.refusals

    @refusals.setter
    def refusals(self, refusals: Refusals) -> None:  # tests: the lead restarted
        self.routing.refusals = refusals

    # --- for `collie crew list` ------------------------------------------------------------------
    def control_handlers(self) -> dict:
        async def crew(_req):
            return {"members": [crew_row(m, self.kept(m.label)) for m in self.members.values()]}

        async def crew_remove(req):
            label = str(req.get("label"))
            member = self.members.pop(label, None)
            if member and member.conn:
                member.conn.close_reason = crewwire.UNAUTHORIZED  # its token no longer opens the link
                member.conn.closed.set()
            self.views.pop(label, None)
            remove_views(self.views_dir, label)
            return {"removed": member is not None}

        async def tokens_changed(_req):
            await self.reload_tokens()
            return {"reloaded": True}

        return {"crew": crew, "crew_remove": crew_remove, "tokens_changed": tokens_changed}
