"""The phone's live channel: `GET /api/events`, Server-Sent Events (phone-api.md; docs/phone-api.md).

A channel starts with `hello` (its id) and a `snapshot` (the dashboard, and the pane and items of the
conversation it views), then carries changes as they happen:

    row        one agent's dashboard row changed (counts, status, line 2)
    sections   the list of sections changed (a machine joined, went offline or came back, an ask
               moved one above the others)
    needs      the Needs you list changed (`{"asks": […]}`, as `GET /api/needs`): an ask opened or
               closed anywhere, also one closed and another raised in its place (no count moves)
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
polling. A comment line every 15 s keeps proxies and phone radios from cutting an idle channel.

Bounds: a channel holds at most `QUEUE` events; a phone too slow to take them gets a fresh snapshot
instead of an ever-growing queue. At most `MAX_CHANNELS` channels are open at once. A write the phone
takes nothing of for `SEND_STALL` seconds (it stopped reading, or is gone) ends the channel.
A member's viewed conversation is read (its recent-send lines and items, a round trip to the member)
beside the pass, one read at a time per conversation: a member slow to answer, or that never answers,
holds up only the views of its own conversations, never every phone's rows and panes.

`EventLog` and `diff_rows` are plain (no trio); `Feed` moves the data.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable

import attrs
import trio

from bridge.panes import agent_row, chat_items, masked_pane, pane_state
from crew import logs
from lead.dashboard import (  # noqa: F401  (re-exported)
    dashboard_json, dashboard_sections, heads_of, machines_of, member_row, section_head, section_heads)
from lead.feed_core import (  # noqa: F401  (re-exported: lead.events is where callers look)
    FeedState, MemberItems, asks_ended, inbox_event, item_revs, items_event, needs_event, pane_event,
    BATCH, COALESCE, HEARTBEAT, ITEM_PAGES, ITEMS_WAIT, KEEP, LEASE, LOCAL, MAX_CHANNELS, MEMBER_ITEM_RETRIES,
    PER_DEVICE, QUEUE, READ_TIMEOUT, SEND_STALL, VIEW_READS, Event, EventLog, Leases, admit, agent_key, conv_key,
    diff_rows, for_viewer, view_change)
from lead.needs import NeedsList

log = logs.get("events")


@attrs.define(eq=False)
class Channel:
    id: str
    device: str | None  # the paired device's id; None for the local credential
    send: trio.MemorySendChannel
    receive: trio.MemoryReceiveChannel
    view: tuple | None = None  # (machine, agent, conversation or None)
    overflowed: bool = False
    closed: trio.Event = attrs.Factory(trio.Event)
    close_reason: str | None = None

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


class Feed:
    """Watches the bridge, the hub and the inbox; turns what changed into events for every channel."""

    redact_on = True  # X1: the pane it sends has secrets masked (install_api sets it from COLLIE_REDACT)

    def __init__(self, bridge, hub=None, writer=None, *, log_: EventLog | None = None,
                 set_viewing: Callable | None = None, wall: Callable[[], float] = time.time) -> None:
        self.bridge = bridge
        self.wall = wall  # the wall clock a Needs you entry's `since` is shown in
        self.needs = NeedsList()
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
        self.inbox_dirty: dict = {}  # (machine, agent) -> when the route's viewing lapses
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
        self.core.everything = True
        self._wake.set()

    def follow_inbox(self, inbox) -> None:
        """Send an `inbox` event for every item that changes (late receipts, I7)."""
        self.inbox = inbox
        inbox.on_change.append(self.inbox_item_changed)

    def inbox_item_changed(self, item) -> None:
        self.inbox_dirty[item.id] = item  # its view is built once per pass, however often it changed
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
    def reader_of(self, machine: str, agent: str):
        if machine == LOCAL:
            return self.bridge.readers.get(agent)
        return self.hub.reader(machine, agent) if self.hub is not None else None

    async def pane_of(self, machine: str, agent: str, conv: str) -> dict | None:
        reader = self.reader_of(machine, agent)
        if reader is None:
            return None
        if machine == LOCAL:
            recent = self.writer.recent_sends(agent, conv) if self.writer is not None else []
        else:
            recent = []
            with trio.move_on_after(READ_TIMEOUT):
                got = await self.hub.read(machine, agent, "recent_sends", {"conversation": conv})
                recent = (got or {}).get("lines", [])
            self.core.recent[("conv", machine, agent, conv)] = recent
        return self._pane(reader, machine, conv, recent)

    def _pane(self, reader, machine: str, conv: str, recent: list) -> dict:
        member = self.hub.members.get(machine) if machine != LOCAL and self.hub is not None else None
        return masked_pane(pane_state(reader, conv, recent_sends=recent, machine=machine,
                                      online=member is None or member.online), self.redact_on)

    async def items_of(self, machine: str, agent: str, conv: str) -> list[dict] | None:
        reader = self.reader_of(machine, agent)
        if reader is None or conv not in reader.conversations:
            return None
        key = ("conv", machine, agent, conv)
        if machine == LOCAL:
            tapped = await self.writer.journal.run(self.writer.journal.tapped_asks, agent) if self.writer else set()
            top = self._top_rev(machine, agent, conv)
            items = chat_items(self.bridge.items(agent, conv, 0), tapped)
            if key in self._viewed():  # the changes after this full read go as `items` events from here
                self.core.item_since.setdefault(key, top)
            return items
        got = None
        with trio.move_on_after(READ_TIMEOUT):
            got = await self.hub.read(machine, agent, "items", {"conversation": conv, "since": 0})
        if got is None:
            return None
        items = list(got.get("items") or [])
        if key in self._viewed():
            self.core.item_since.setdefault(key, max([0, *item_revs(items)]))
        return items

    async def snapshot(self, ch: Channel) -> dict:
        data: dict = {"dashboard": {"sections": dashboard_sections(self.bridge, self.hub)}, "view": None,
                      "needs": self.needs.asks()}
        if ch.view:
            machine, agent, conv = ch.view
            data["view"] = {"machine": machine, "agent": agent, "conversation": conv}
            if conv:
                data["pane"] = await self.pane_of(machine, agent, conv)
                data["items"] = await self.items_of(machine, agent, conv) or []
        return data

    async def view_events(self, ch: Channel) -> list[Event]:
        """A fresh pane and all items of what `ch` views, as events of the shared numbering."""
        out = []
        if ch.view and ch.view[2]:
            machine, agent, conv = ch.view
            key = ("conv", machine, agent, conv)
            # Reading the pane and the items may wait (the journal, a member). If a change of this
            # conversation was published meanwhile, the channel has it queued already and what was read
            # may be older: read again, or the older full set sent after it would hide the change for good.
            for _ in range(VIEW_READS):
                before = self.core.published.get(key, 0)
                pane = await self.pane_of(machine, agent, conv)
                items = await self.items_of(machine, agent, conv)
                if self.core.published.get(key, 0) == before:
                    break
            out.append(self.log.append(*pane_event(key, pane)))
            if items is not None:
                out.append(self.log.append(*items_event(key, items, True)))
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
        if self.inbox_dirty and self.inbox is not None:
            items, self.inbox_dirty = list(self.inbox_dirty.values()), {}
            for view in self.inbox.views(items):
                self._publish(*inbox_event(view))
        st = self.core
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
            self._publish(*needs_event(self.needs.asks()))
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

    async def _refresh(self, key: tuple) -> None:
        """Read a viewed conversation's pane and the items that changed since the last read, and
        publish what moved."""
        _, machine, agent, conv = key
        if machine == LOCAL:
            await self._items_read(agent, conv)
            pane = await self.pane_of(machine, agent, conv)
            items = await self._changed_items(key)
        else:  # two round trips to the member: side by side, not one after the other
            got: dict = {}

            async def read(name, fn):
                got[name] = await fn()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read, "pane", lambda: self.pane_of(machine, agent, conv))
                nursery.start_soon(read, "items", lambda: self._changed_items(key))
            pane, items = got["pane"], got["items"]
        if key not in self._viewed():  # nobody views it any more (the pass forgets its marks)
            return
        for ev in self.core.pane_changed(key, pane) + ([items_event(key, items, False)] if items else []):
            self._publish(*ev)

    async def _changed_items(self, key: tuple) -> list[dict] | None:
        """The items of a viewed conversation whose revision moved past the one sent up to (issue 29).
        Reading them by revision costs what changed, not the whole conversation; and it finds every
        change — the first page by revision (what was read before) ended 200 items in, so in a longer
        chat a new or streaming item never reached the phone. The first look after a phone started
        viewing sends nothing: the full read that phone gets (`view_events`, the snapshot) comes after
        it and holds everything up to then."""
        _, machine, agent, conv = key
        reader = self.reader_of(machine, agent)
        if reader is None or conv not in reader.conversations:
            return None
        since = self.core.item_since.get(key)
        if since is None:
            self.core.item_since[key] = self._top_rev(machine, agent, conv)
            return []
        out: list[dict] = []
        if machine == LOCAL:
            for _ in range(ITEM_PAGES):
                page = self.bridge.items_page(agent, conv, since)
                out += page["items"]
                since = page["next_since"]
                if not page["more"]:
                    break
            self.core.item_since[key] = since
            if not out:
                return []
            # the journal (a worker thread) only says which ended asks the phone tapped: most changes (a
            # streaming reply) have none, and skip the thread hop
            tapped = await self.writer.journal.run(self.writer.journal.tapped_asks, agent) \
                if self.writer and asks_ended(out) else set()
            return chat_items(out, tapped)
        cur = MemberItems(since, self._top_rev(machine, agent, conv))
        while cur.reads_left:
            got = None
            with trio.move_on_after(READ_TIMEOUT):
                got = await self.hub.read(machine, agent, "items", {"conversation": conv, "since": cur.since})
            pause = cur.took(got)
            if pause is None:
                break
            if pause:
                await trio.sleep(pause)
        if key in self.core.item_since:  # (the view may have ended meanwhile)
            self.core.item_since[key] = max(self.core.item_since[key], cur.since)
        return cur.items

    async def _items_read(self, agent: str, conv: str) -> None:
        """Wait (at most ITEMS_WAIT) until the lead's bridge has read the items of one of its agents'
        conversations that its state says moved: the bridge shows a change's state first and reads the
        items right after, and a pass woken by the state would otherwise find the item not there yet
        and leave it to the next pass, a COALESCE later (issue 29)."""
        with trio.move_on_after(ITEMS_WAIT):
            while True:
                reader = self.bridge.readers.get(agent)
                c = reader.conversations.get(conv) if reader is not None else None
                log = reader.logs.get(conv) if reader is not None else None
                if c is None or (log.since >= c.items_rev if log is not None else c.items_rev == 0):
                    return
                await self.bridge.wait_changed()

    def _top_rev(self, machine: str, agent: str, conv: str) -> int:
        """The highest item revision of a conversation: what the lead's bridge read of its own agent's, what
        the member's view says of a member's (the member reads its items right after: a read that asks past
        them answers from the start, as `reset`)."""
        reader = self.reader_of(machine, agent)
        if machine != LOCAL:
            c = reader.conversations.get(conv) if reader is not None else None
            return c.items_rev if c is not None else 0
        log = reader.logs.get(conv) if reader is not None else None
        return log.since if log is not None else 0

    async def _read_members(self) -> None:
        """The reads of viewed conversations (members' and the lead's own), each in its own task: at most
        one at a time per conversation (a change meanwhile reads it once more after), so a member that
        never answers holds only its own conversations (at most READ_TIMEOUT a read), never the pass or
        another member."""
        reading: set = set()

        async def one(key: tuple) -> None:
            try:
                while True:
                    self.to_read.pop(key, None)
                    try:
                        await self._refresh(key)
                    except Exception:  # one bad view must not end the live channel for everyone
                        log.exception("[bridge] the live channel could not read %s/%s", key[1], key[2])
                    if key not in self.to_read:
                        return
            finally:
                reading.discard(key)

        async with trio.open_nursery() as nursery:
            while True:
                await self._read_wake.wait()
                self._read_wake = trio.Event()
                for key in list(self.to_read):
                    if key not in reading:
                        reading.add(key)
                        nursery.start_soon(one, key)

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


from lead.events_routes import _snapshot, _stream, _view_from, install_events  # noqa: E402,F401  (re-exported)
