"""The phone's live channel: `GET /api/events`, Server-Sent Events (phone-api.md; docs/phone-api.md).

A channel starts with `hello` (its id) and a `snapshot` (the dashboard, and the pane and items of the
conversation it views), then carries changes as they happen:

    row        one agent's dashboard row changed (counts, status, line 2)
    sections   the list of sections changed (a machine joined, went offline or came back, an ask
               moved one above the others)
    needs      the Needs you list changed (`{"asks": […], "unreachable": […]}`, as `GET /api/needs`): an ask
               opened or closed anywhere, also one closed and another raised in its place (no count moves)
    pane       the viewed conversation's pane state changed (asks appear and close, turn, progress,
               actions, recent sends and their receipts)
    items      new or changed chat items of the viewed conversation
    inbox      an inbox item changed state (queued, running, done, expired, cancelled, failed): the
               receipt of a write that finished late
    unauthorized  the phone was revoked; the channel ends

Every event has an id `<boot>-<n>`. A phone that reconnects with `Last-Event-ID` gets the events it
missed (global ones from the log, and a fresh pane and items for what it views), or — when the lead
restarted or the log no longer reaches back that far — a fresh `snapshot`. Nothing is lost either way.

Viewing: a channel says what it views (`?machine=&agent=&conversation=` or `POST
/api/events/<channel>/view`). While at least one channel views an agent, its owner polls it every 2 s
(W5); the count drops when the channel closes, so an abandoned phone never keeps an agent on fast
polling. A `beat` event keeps proxies and phone radios from cutting an idle channel: every 25 s on an idle
page, every 2 s while the user is using it (the page says so), so the phone tells a silent lead within seconds.

Bounds: a channel holds at most `QUEUE` events; a phone too slow to take them gets a fresh snapshot
instead of an ever-growing queue. At most `MAX_CHANNELS` channels are open at once. A write the phone
takes nothing of for `SEND_STALL` seconds (it stopped reading, or is gone) ends the channel.
A member's viewed conversation is read (its recent-send lines and items, a round trip to the member)
beside the pass, one read at a time per conversation: a member slow to answer, or that never answers,
holds up only the views of its own conversations, never every phone's rows and panes.

The decisions are plain, with the time passed in (issue 30): what each event carries, when changes
coalesce, what is sent again and what a reconnecting phone is given (`collie.lead.feed.core`), the Needs you
list (`collie.lead.feed.needs`), the rows and sections (`collie.lead.feed.dashboard`). `Feed` feeds them what changed and carries
out what comes back: it reads (the conversations' reads in `collie.lead.feed.reads`), queues and sleeps. The
routes and the stream are in `collie.lead.routes.events`.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import attrs
import trio

from collie.bridge.panes import agent_row, masked_pane, pane_state
from collie.crew import logs
from collie.lead.door.packing import body_tag
from collie.lead.feed.core import (COALESCE, LEASE, LOCAL, QUEUE, VIEW_READS, Event, EventLog, FeedState, Leases,
                                   admit, agent_key, conv_key, for_viewer, inbox_event, items_event, needs_event,
                                   pane_event, snapshot_bytes, snapshot_data, view_change)
from collie.lead.feed.dashboard import dashboard_json, dashboard_sections, heads_of, machines_of, member_row
from collie.lead.feed.needs import NeedsList
from collie.lead.feed.needs_file import read_seen, write_seen
from collie.lead.feed.reads import ConversationReads

log = logs.get("events")

SEEN_SAVE_GAP = 1.0  # the asks' first-seen times are written at most this often
RECALL_FOR = 600.0  # a first-seen time kept from before a restart waits this long for its ask to be seen


@attrs.define(eq=False)
class Channel:
    id: str
    device: str | None  # the paired device's id; None for the local credential
    send: trio.MemorySendChannel
    receive: trio.MemoryReceiveChannel
    view: tuple | None = None  # (machine, agent, conversation or None)
    visible: bool = True  # the page is on screen (it says so on visibilitychange; issue 37: no turn-end push then)
    active: bool = False  # the user is using the page (a tap, a key, a scroll in the last minute): beats every 2 s
    overflowed: bool = False
    closed: trio.Event = attrs.Factory(trio.Event)
    close_reason: str | None = None
    # issue 39: what the phone says it holds already, used once: the viewed conversation's items up to this
    # revision (its next read of them gives only what changed), the dashboard with this tag (packing.body_tag)
    items_since: int | None = None
    have: str | None = None

    @property
    def agent_key(self) -> tuple | None:
        return agent_key(self.view)

    @property
    def conv_key(self) -> tuple | None:
        return conv_key(self.view)

    def offer(self, ev: Event) -> None:
        if self.overflowed or not for_viewer(ev, self.conv_key):
            return
        try:
            self.send.send_nowait(ev)
        except trio.WouldBlock:
            self.overflowed = True  # the stream sends a fresh snapshot when it catches up
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass


class Feed(ConversationReads):
    """Watches the bridge, the hub and the inbox; turns what changed into events for every channel.

    Only the first change of a burst waits for nothing: after each pass the next waits COALESCE. A pass
    never waits on a member: the conversations' reads run beside it (`_read_members`). One bad view or
    peer is logged and ends nothing."""

    redact_on = True  # X1: the pane it sends has secrets masked (install_api sets it from COLLIE_REDACT)

    def __init__(self, bridge, hub=None, writer=None, *, log_: EventLog | None = None,
                 set_viewing: Callable | None = None, wall: Callable[[], float] = time.time,
                 seen_path: Path | None = None) -> None:
        self.bridge = bridge
        self.wall = wall  # the wall clock a Needs you entry's `since` is shown in
        # when each open ask was first seen, kept in `seen_path` across restarts (collie.lead.feed.needs_file)
        self.seen_path = seen_path
        self.needs = NeedsList(recall=read_seen(seen_path) if seen_path is not None else None)
        self._seen_saved: dict | None = None
        self._seen_wake = trio.Event()
        self.hub = hub
        self.writer = writer
        self.log = log_ or EventLog()
        self.channels: dict[str, Channel] = {}
        self.core = FeedState()  # what was sent, what changed since (the decisions)
        self._wake = trio.Event()
        self.to_read: dict[tuple, None] = {}  # members' viewed conversations to read again (see _read_members)
        self._read_wake = trio.Event()
        self.set_viewing = set_viewing
        self.events_sent = 0
        self.leases = Leases()
        self.inbox = None
        bridge_hooks = getattr(bridge, "on_agent_change", None)
        if bridge_hooks is not None:
            bridge_hooks.append(lambda name: self.touch(LOCAL, name))
        if hub is not None:
            hub.on_view_change.append(self.touch)

    # --- what changed ----------------------------------------------------------------------------
    def touch(self, machine: str, agent: str | None) -> None:
        self.core.touch(machine, agent)
        self._wake.set()

    def touch_all(self) -> None:
        self.core.touch_all()
        self._wake.set()

    def follow_inbox(self, inbox) -> None:
        """Send an `inbox` event for every item that changes (late receipts, I7)."""
        self.inbox = inbox
        inbox.on_change.append(self.inbox_item_changed)

    def inbox_item_changed(self, item) -> None:
        self.core.inbox_changed(item)  # its view is built once per pass, however often it changed
        self._wake.set()

    def _publish(self, kind: str, data: dict, scope: tuple | None = None) -> Event:
        ev = self.log.append(kind, data, scope)
        self.core.published_on(scope)
        for ch in list(self.channels.values()):
            ch.offer(ev)
        self.events_sent += 1
        return ev

    # --- channels --------------------------------------------------------------------------------
    def open(self, device: str | None) -> Channel:
        mine = [c for c in self.channels.values() if c.device == device] if device is not None else []
        end, refused = admit(device, [c.closed.is_set() for c in mine], len(self.channels))
        if end is not None:
            self._end(mine[end], "replaced")
        if refused:
            raise OverflowError(refused)
        send, receive = trio.open_memory_channel(QUEUE)
        ch = Channel(secrets.token_urlsafe(12), device, send, receive)
        self.channels[ch.id] = ch
        return ch

    async def set_view(self, ch: Channel, view: tuple | None) -> None:
        old, ch.view = ch.view, view
        for key, on in view_change(old, view):
            await self._viewing(key, on)

    async def close(self, ch: Channel) -> None:
        if self.channels.pop(ch.id, None) is None:
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_after(2):
                await self.set_view(ch, None)
        ch.send.close()
        ch.closed.set()

    async def lease_view(self, machine: str, agent: str, on: bool) -> None:
        """The `…/viewing` route: viewing for `LEASE` seconds, renewed by repeating it, so that a
        script or phone that disappears never keeps an agent on 2-second polling."""
        switch = self.leases.set((machine, agent), on, trio.current_time())
        if switch is not None:
            await self._viewing((machine, agent), switch)

    async def _expire_leases(self) -> None:
        while True:
            await trio.sleep(LEASE / 6)
            for key in self.leases.expired(trio.current_time()):
                await self._viewing(key, False)

    def revoke_device(self, device_id: str) -> None:
        for ch in list(self.channels.values()):
            if ch.device == device_id:
                self._end(ch, "unauthorized")

    def shutdown(self) -> None:
        for ch in list(self.channels.values()):
            self._end(ch, "shutdown")
        self._save_seen(self.needs.kept())

    def _save_seen(self, kept: dict) -> None:
        """Write when each open ask was first seen, if that changed since the last write."""
        if self.seen_path is None or kept == self._seen_saved:
            return
        try:
            write_seen(self.seen_path, kept)
            self._seen_saved = kept
        except OSError as exc:  # a full disk costs the asks' ages after a restart, never the live channel
            log.warning("[bridge] could not keep the asks' first-seen times: %s", exc)

    async def _keep_seen(self) -> None:
        """Save the first-seen times at most every SEEN_SAVE_GAP while they change; the times recalled from
        the last run and not seen again within RECALL_FOR are forgotten (those asks closed meanwhile)."""
        forget_at = trio.current_time() + RECALL_FOR
        while True:
            with trio.move_on_at(forget_at if self.needs.recall else math.inf):
                await self._seen_wake.wait()
            self._seen_wake = trio.Event()
            if trio.current_time() >= forget_at:
                self.needs.recall.clear()
            await trio.to_thread.run_sync(self._save_seen, self.needs.kept())
            await trio.sleep(SEEN_SAVE_GAP)

    @staticmethod
    def _end(ch: Channel, reason: str) -> None:
        ch.close_reason = reason
        ch.closed.set()
        ch.send.close()

    async def _viewing(self, key: tuple, on: bool) -> None:
        if self.set_viewing is not None:
            try:
                await self.set_viewing(key[0], key[1], on)
            except Exception as exc:  # a gone member or agent must not break the channel
                log.info("[bridge] viewing %s/%s: %s", key[0], key[1], exc)

    # --- what a channel shows ----------------------------------------------------------------------
    def _pane(self, reader, machine: str, conv: str, recent: list) -> dict:
        member = self.hub.members.get(machine) if machine != LOCAL and self.hub is not None else None
        return masked_pane(pane_state(reader, conv, recent_sends=recent, machine=machine,
                                      online=member is None or member.online), self.redact_on)

    async def snapshot(self, ch: Channel) -> dict:
        view, sections, asks = ch.view, dashboard_sections(self.bridge, self.hub), self.needs.asks()
        pane = items = None
        if view and view[2]:
            pane = await self.pane_of(*view)
            items = await self.items_of(*view)
        return snapshot_data(sections, asks, view, pane, items, unreachable=self.needs.unreachable())

    async def snapshot_wire(self, ch: Channel, last_id: str) -> bytes:
        """The `snapshot` event as sent (issue 39): the dashboard left out (null) when the phone opened the
        channel with `have=` the tag of the dashboard it read, and it is still that; the viewed conversation's
        items since the revision it said it holds, else its newest page."""
        view, asks = ch.view, self.needs.asks()
        text = dashboard_json(self.bridge, self.hub)
        same = ch.have is not None and body_tag(text.encode()) == ch.have
        ch.have = None
        pane = items = None
        if view and view[2]:
            since, ch.items_since = ch.items_since, None
            pane = await self.pane_of(*view)
            items = await self.items_of(*view, since=since)
        return snapshot_bytes(last_id, snapshot_data(None, asks, view, pane, items, unreachable=self.needs.unreachable()), None if same else text)

    async def view_events(self, ch: Channel) -> list[Event]:
        """A fresh pane and all items of what `ch` views, as events of the shared numbering."""
        out = []
        if ch.view and ch.view[2]:
            machine, agent, conv = ch.view
            key = ("conv", machine, agent, conv)
            # Reading the pane and the items may wait (the journal, a member). If a change of this
            # conversation was published meanwhile, the channel has it queued already and what was read
            # may be older: read again, or the older full set sent after it would hide the change for good.
            since, ch.items_since = ch.items_since, None
            for _ in range(VIEW_READS):
                before = self.core.published.get(key, 0)
                pane = await self.pane_of(machine, agent, conv)
                items = await self.items_of(machine, agent, conv, since=since)
                if self.core.published.get(key, 0) == before:
                    break
            out.append(self.log.append(*pane_event(key, pane)))
            if items is not None and (items["full"] or items["items"]):
                out.append(self.log.append(*items_event(key, items["items"], items["full"], items.get("earlier"))))
        return out

    # --- the loop ------------------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        self.core.rows = self._all_rows()
        self.core.heads = self._heads()
        self._update_needs(set(), True)
        self.core.everything = False
        task_status.started()
        bridge_changed = getattr(self.bridge, "wait_changed", None)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._expire_leases)
            if self.seen_path is not None:
                nursery.start_soon(self._keep_seen)
            nursery.start_soon(self._read_members)
            if bridge_changed is not None and getattr(self.bridge, "on_agent_change", None) is None:
                nursery.start_soon(self._follow, bridge_changed)
            while True:
                await self._wake.wait()
                self._wake = trio.Event()
                try:
                    await self.pass_once()
                except Exception:  # one bad view must not end the live channel for everyone
                    log.exception("[bridge] the live channel could not compute a change")
                await trio.sleep(COALESCE)

    async def _follow(self, wait_changed) -> None:
        while True:
            await wait_changed()
            self.touch_all()

    def _all_rows(self) -> dict:
        rows = self._rows_of(LOCAL, None)
        for label in sorted(self.hub.members if self.hub is not None else {}):
            rows.update(self._rows_of(label, None))
        return rows

    async def pass_once(self) -> None:
        st = self.core
        if self.inbox is not None and st.inbox:
            for view in self.inbox.views(st.take_inbox()):
                self._publish(*inbox_event(view))
        dirty, everything = st.take()
        if everything:
            fresh, before = self._all_rows(), st.rows
        else:
            fresh = {key: row for machine, agent in dirty for key, row in self._rows_of(machine, agent).items()}
            before = st.kept_rows(dirty)
        rows = st.rows_changed(before, fresh)
        for ev in rows + st.heads_changed(self._heads() if (rows or dirty or everything) else st.heads):
            self._publish(*ev)
        if self._update_needs(dirty, everything):
            self._publish(*needs_event(self.needs.asks(), self.needs.unreachable()))
            self._seen_wake.set()
        # panes and items: only what some channel views, and only on the agents that changed
        viewed = self._viewed()
        for key in st.to_read(viewed, dirty, everything):
            _, machine, agent, conv = key
            reader = self.reader_of(machine, agent)
            if key in st.recent and reader is not None and machine != LOCAL:
                # the member's view is here already: show it now with the recent-send lines last read, then
                # read those (a round trip to the member) and correct the pane if they moved
                for ev in st.pane_changed(key, self._pane(reader, machine, conv, st.recent[key])):
                    self._publish(*ev)
            # the reads run beside this pass, never in it: a member slow to answer (or that never does) must not
            # hold up every other phone's rows and panes; nor the lead's own agent's items, which the bridge
            # reads right after the state that woke this pass (see _refresh)
            self.to_read[key] = None
            self._read_wake.set()
        st.forget(viewed)

    def _update_needs(self, dirty: set, everything: bool) -> bool:
        """Look again at the open asks of the agents in `dirty` (all with `everything`); True when the
        Needs you list changed."""
        return self.needs.read(machines_of(self.bridge, self.hub), self.wall(), dirty=dirty, everything=everything,
                               redact_on=self.redact_on)

    def _viewed(self) -> set:
        return {ch.conv_key for ch in self.channels.values() if ch.conv_key}

    def _heads(self) -> list[dict]:
        """The section heads, from the rows this feed keeps current (not every reader's row again)."""
        return heads_of(self.core.rows, self.hub.members if self.hub is not None else {})

    def _rows_of(self, machine: str, agent: str | None) -> dict:
        if machine == LOCAL:
            readers = {agent: self.bridge.readers[agent]} if agent in self.bridge.readers else (
                dict(self.bridge.readers) if agent is None else {})
            return {(LOCAL, n): agent_row(r) | {"machine": LOCAL} for n, r in readers.items()}
        member = self.hub.members.get(machine) if self.hub is not None else None
        if member is None:
            return {}
        readers = member.readers if agent is None else {k: v for k, v in member.readers.items() if k == agent}
        return {(machine, n): member_row(member, n, r) for n, r in readers.items()}

    def statistics(self) -> dict:
        return {"channels": len(self.channels), "events": self.events_sent, "seq": self.log.seq}


