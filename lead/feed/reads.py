"""The reads of the conversations phones view, for the live channel (`collie.lead.feed.events.Feed` inherits them).

A viewed conversation's pane and items are read beside the feed's pass, one read at a time per
conversation (`_read_members`): a member slow to answer, or that never answers (at most READ_TIMEOUT a
read), holds up only its own conversations, never the pass or another member. What to read and what the
answers mean is decided by `collie.lead.feed.core` (`MemberItems`, `FeedState`); these methods only do the
round trips, the journal's thread hop and the waits.
"""

from __future__ import annotations

import trio

from collie.bridge.panes import chat_items
from collie.bridge.reader import PAGE_LIMIT, PAGE_LIMIT_MAX
from collie.crew import logs
from collie.lead.feed.core import (ITEM_PAGES, ITEMS_WAIT, LOCAL, READ_TIMEOUT, MemberItems, asks_ended, item_revs,
                                   items_event)

log = logs.get("events")


class ConversationReads:
    """Needs `bridge`, `hub`, `writer`, `core` (a FeedState), `_viewed()`, `_pane()` and `_publish()`."""

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
        from collie.lead.inbox.service import with_waiting

        return self._pane(reader, machine, conv, with_waiting(recent, self.inbox, machine, agent, conv))

    async def items_of(self, machine: str, agent: str, conv: str, since: int | None = None) -> dict | None:
        """What a channel that starts viewing a conversation gets of its items (issue 39): the newest page
        by position, `{"items", "full": True, "earlier"}` (what the chat draws; older pages the phone reads
        when asked), or — when the phone says it holds them up to revision `since` — only the items changed
        after it, `{"items", "full": False}` (a whole page of changes or a reset: the newest page instead)."""
        reader = self.reader_of(machine, agent)
        if reader is None or conv not in reader.conversations:
            return None
        key = ("conv", machine, agent, conv)
        if machine == LOCAL:
            tapped = await self.writer.journal.run(self.writer.journal.tapped_asks, agent) if self.writer else set()
            top = self._top_rev(machine, agent, conv)
            if key in self._viewed():  # the changes after this read go as `items` events from here
                self.core.item_since.setdefault(key, top)
            if since is not None:
                page = self.bridge.items_page(agent, conv, since, PAGE_LIMIT_MAX)
                if not page["more"] and not page["reset"]:
                    return {"items": chat_items(page["items"], tapped), "full": False}
            page = self.bridge.items_newest(agent, conv, PAGE_LIMIT)
            return {"items": chat_items(page["items"], tapped), "full": True, "earlier": page["earlier"]}
        got = None
        if since is not None:
            with trio.move_on_after(READ_TIMEOUT):
                got = await self.hub.read(machine, agent, "items", {"conversation": conv, "since": since})
            if got is not None and len(item_revs(got.get("items") or [])) < PAGE_LIMIT:
                if key in self._viewed():
                    self.core.item_since.setdefault(key, max([since, *item_revs(got.get("items") or [])]))
                return {"items": list(got.get("items") or []), "full": False}
            got = None
        with trio.move_on_after(READ_TIMEOUT):
            got = await self.hub.read(machine, agent, "items", {"conversation": conv, "newest": PAGE_LIMIT})
        if got is None:
            return None
        items = list(got.get("items") or [])
        if key in self._viewed():
            top = got.get("next_since")
            self.core.item_since.setdefault(key, top if isinstance(top, int) else max([0, *item_revs(items)]))
        return {"items": items, "full": True, "earlier": got.get("earlier")}

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
