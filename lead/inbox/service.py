"""The inbox (features I1–I11, crew.md §4): work that waits for a machine, runs once, in approval order.

`Inbox` is the adapter: it feeds what happens (a request entering, the owner's and the sender's changes,
the loop's ticks) to plain classes and carries out what they return. The rules are written down with
the code that decides them:

- `collie.lead.inbox.core`: entry (repeats, conflicts, per-sender ids, limits), order, dispatch decisions,
  TTL and purge (`InboxCore`), and the items in memory (`Items`);
- `collie.lead.inbox.pace`: holds after a "not now", pauses, retries, the log budget, the loop's rests;
- `collie.lead.inbox.texts`: what the sender and the owner see (state sentences, views, replayed receipts);
- `collie.lead.inbox.store`: the record (SQLite, the grouped commits, the one place that writes rows) and
  `Record`, the one place an item changes;
- `collie.lead.inbox.dispatch` and `collie.lead.inbox.sight`: sending an item once, and reading the lead's view.

Every name imported from `collie.lead.inbox.service` before the split is still importable from here.
"""

from __future__ import annotations

import time
from pathlib import Path

import trio

from collie.bridge.once import judge_repeat, not_recorded
from collie.bridge.writes import WriteRequest
from collie.crew import logs
from collie.crew.receipts import Reason, Receipt
from collie.lead.inbox import texts
from collie.lead.inbox.core import (FINISHED_PER_SENDER, KEEP_FINISHED, LOCAL, TTL_DEFAULT, WAITING_MAX, InboxCore,
                                    entry_fingerprint, item_id)
from collie.lead.inbox.dispatch import Dispatcher, NotKept
from collie.lead.inbox.item import ACTIVE, FINISHED, Item
from collie.lead.inbox.pace import Looks, Pacing
from collie.lead.inbox.sight import Sight
from collie.lead.inbox.store import STORE_ERRORS, InboxStore, Record
from collie.lead.inbox.texts import Waiting

log = logs.get("inbox")


class Inbox:
    """The inbox of every agent the lead knows: entry, the owner's and the sender's changes, what they see,
    and the loop that runs items (trio; it decides nothing itself)."""

    def __init__(self, path: Path, hub, writer, *, owner: str = "the owner", ttl: float = TTL_DEFAULT,
                 wall=time.time) -> None:
        self.on_change: list = []  # called with each item that changed (the live channel's `inbox` events)
        self.store = InboxStore(path, run=self._db)  # the record; the one place that writes rows
        self.record = Record(self.store, wall, self._changed)  # the items in memory and on disk
        self.core = InboxCore(ttl)
        self.hub = hub
        self.writer = writer
        self.sight = Sight(hub, writer)  # what the lead's view shows of machines, agents and locks
        self.owner = owner
        self.wall = wall
        self.wake = trio.Event()
        # in memory: every active item, and the most recent finished ones; the database is the record
        self.mem = mem = self.record.mem
        self.active, self.pending, self.running = mem.active, mem.pending, mem.running  # its indexes, shared
        self.finished, self.by_key, self.by_id = mem.finished, mem.by_key, mem.by_id
        self.pace = Pacing()  # holds after a "not now", paused inboxes, retries, each item's log budget
        self._last_purge = 0.0
        self.looks = Looks()  # which inboxes the next tick looks at, and how long the loop rests
        # sends items, once each, one at a time per agent
        self.dispatcher = Dispatcher(self.record, self.core, self.pace, self.sight, self.store, writer=writer, hub=hub,
                                     sync=self._sync, poke=self.poke)
        self.busy, self.inflight = self.dispatcher.busy, self.dispatcher.inflight
        self.record.load(wall() - KEEP_FINISHED)
        hub.on_view_change.append(lambda label, name: self.poke(None if name is None else (label, name)))
        # a send that waited for another write's lock goes as soon as it is let go (crew.md §3)
        if getattr(writer, "locks", None) is not None:
            writer.locks.on_release.append(lambda key: self.poke((LOCAL, key[0])))
        if getattr(hub, "locks", None) is not None:
            hub.locks.on_release.append(lambda key: self.poke((key[0], key[1])))

    # --- the record ---------------------------------------------------------------------------
    @property
    def db(self):
        return self.store.db

    @db.setter
    def db(self, db) -> None:
        self.store.db = db

    def _changed(self, item: Item) -> None:
        """After every change of an item: its pacing ends with it, an active one ends the loop's rest, and
        the live channel hears of it (late receipts reach the phone, I7)."""
        if item.state in FINISHED:
            self.pace.finished(item.id)
        if item.state in ACTIVE and self.looks.woken():
            self.wake.set()
        for fn in self.on_change:
            fn(item)

    async def _sync(self) -> None:
        """Return once every change made before the call is on disk."""
        await self.store.sync()

    async def _db(self, fn, *args):
        """How the store's SQL runs: in a worker thread, one at a time on this database."""
        return await self.store.in_thread(fn, *args)

    async def get(self, item_id: str) -> Item | None:
        return await self.record.get(item_id)

    def items(self, machine: str, agent: str) -> list[Item]:
        """The agent's items in memory: every active one and the recent finished ones."""
        return self.mem.of(machine, agent)

    def poke(self, key: tuple[str, str] | None = None) -> None:
        """Look at the inbox `key` (machine, agent) at once — every inbox when None."""
        self.looks.poke(key)
        self.wake.set()

    # --- what the phone and senders see ---------------------------------------------------------
    def knows(self, machine: str, agent: str) -> bool:
        """Is there such an agent (the lead's own, or a member's, online or remembered)?"""
        return self.sight.reader(machine, agent) is not None

    def text_max(self, machine: str, agent: str) -> int:
        return self.sight.text_max(machine, agent)

    def waiting(self, item: Item, ahead: int | None = None) -> Waiting:
        return self.sight.waiting(item, self.active.get((item.machine, item.agent), {}).values(), ahead)

    def state_text(self, item: Item, ahead: int | None = None) -> str:
        waiting = self.waiting(item, ahead) if item.state == "approved" else Waiting()
        return self.core.state_text(item, owner=self.owner, waiting=waiting)

    def view(self, item: Item, ahead: int | None = None) -> dict:
        return texts.view(item, text=self.state_text(item, ahead), member=self.sight.member(item.machine))

    def views(self, items: list[Item]) -> list[dict]:
        """`view` of each item, how many are ahead counted in one pass per inbox (not one per item)."""
        ahead: dict[str, int] = {}
        for key in {(i.machine, i.agent) for i in items}:
            ahead.update(texts.ahead_counts(self.active.get(key, {}).values()))
        return [self.view(i, ahead.get(i.id)) for i in items]

    def waiting_lines(self, machine: str, agent: str, conversation: str) -> list[dict]:
        """The phone's own sends to `conversation` still waiting in this inbox, as the pane's recent-sends
        lines (`queued`, B10, C9): the page keeps showing them after a reload until the agent has them."""
        return [{"request_id": i.request_id or i.id, "text": i.text or "", "state": "queued"}
                for i in self.core.listing(self.items(machine, agent))
                if i.kind == "send" and i.sender is None and i.conversation == conversation
                and i.state in ("pending", "approved")]

    def listing(self, machine: str, agent: str, sender: str | None = None, *, owner: bool = True) -> list[Item]:
        items = self.core.listing(self.items(machine, agent))
        return items if owner else [i for i in items if i.sender == sender]

    # --- entry --------------------------------------------------------------------------------
    async def submit(self, machine: str, req: WriteRequest, *, sender: str | None,
                     approval: str = "standing") -> Receipt:
        """A send or starter enters the inbox; a phone write to an empty, online inbox runs at once."""
        fingerprint = entry_fingerprint(machine, req)
        existing = await self.record.find(sender, req.request_id)
        if existing is not None:
            return await self._repeat(existing, req, fingerprint)
        if req.op == "send":  # the agent would refuse it (too long, B4 a passed turn): never kept
            conv = self.sight.conversation(machine, req.agent, req.conversation)
            no = self.core.refuse_entry(req, limit=self.sight.text_max(machine, req.agent),
                                        current_turn=conv.turn if conv is not None else None)
            if no is not None:
                return no
        iid = item_id(sender, req.request_id)
        taken = await self.get(iid) is not None  # the owner used an id a sender's item already has
        sender_key = "" if sender is None else f"token:{sender}"
        existing = self.by_key.get((sender_key, req.request_id))
        if existing is not None:  # entered while we looked in the record
            return await self._repeat(existing, req, fingerprint)
        no = self.core.admit(req, taken=taken, waiting=self.mem.waiting_by_sender.get(sender_key, 0), most=WAITING_MAX)
        if no is not None:
            return no
        item = self.core.new_item(iid, machine, req, sender=sender, fingerprint=fingerprint, approval=approval,
                                  now=self.wall())
        key = (machine, req.agent)
        self.record.insert(item)
        if self.core.passes_through(item, alone=len(self.active[key]) == 1, busy=key in self.busy,
                                    online=self.sight.online(machine), locked=self.sight.locked(item)):
            self.busy.add(key)  # passes straight through: the full Send protocol, its real receipt
            req = self.core.through_request(item, req, self.dispatcher.turn(item, self.sight.reader(machine, req.agent)))
            try:
                rec = await self.dispatcher.dispatch(item, req, passed_through=True)
            except NotKept as exc:
                return self._not_kept(item, req, exc.__cause__)
            finally:
                self.busy.discard(key)
            if item.state == "approved":  # another write took the lock first: it waits its turn (crew.md §3)
                return self._queued(item)
            return rec
        try:
            await self._sync()  # a `queued` receipt promises the request is kept
        except STORE_ERRORS as exc:
            return self._not_kept(item, req, exc)
        log.info("[inbox] %s/%s: %s %s (%s)", machine, req.agent, req.op, item.id, item.state)
        self.poke(key)
        return self._queued(item)

    def _not_kept(self, item: Item, req: WriteRequest, exc: BaseException) -> Receipt:
        """The new item could not be written to disk (the state folder is full): it is not acknowledged,
        so it is not kept at all — not in memory, not in a later commit — and nothing was sent."""
        self.record.discard(item)
        self.pace.retry_at.pop(item.id, None)
        self.store.failed()
        log.info("[inbox] %s/%s: %s %s refused: not recorded (%s: %s)", item.machine, item.agent, req.op, item.id,
                 type(exc).__name__, exc)
        return not_recorded(req, exc)

    async def _repeat(self, existing: Item, req: WriteRequest, fingerprint: str) -> Receipt:
        """A request id this sender used before (its item `existing`): another body is refused `conflict`;
        a double tap while the first runs waits for it, then is judged again (collie.bridge.once); an interrupted
        item is resumed by the Retry; else what became of it (`replay`)."""
        rid, op = req.request_id, req.op
        no = judge_repeat(req, existing.fingerprint, None, fingerprint=fingerprint)
        if no is not None:
            return no
        if await self.inflight.wait_out(existing.id):
            return await self._repeat(existing, req, fingerprint)
        verdict = self.core.repeat(existing, fingerprint)
        if self.core.resumes(existing, verdict, busy=(existing.machine, existing.agent) in self.busy,
                             online=self.sight.online(existing.machine)):  # the Retry resumes the recorded request
            self.busy.add((existing.machine, existing.agent))
            try:
                rec = await self.dispatcher.dispatch(existing, WriteRequest(**existing.request), passed_through=True)
            except NotKept:  # nothing sent now; an earlier attempt may have been: not certain, Retry again
                return texts.not_confirmed(rid, op, Reason.DISK_FULL)
            finally:
                self.busy.discard((existing.machine, existing.agent))
            return texts.resumed(existing, rec, rid, op)
        return texts.replay(existing, verdict, rid, op, self.state_text(existing))

    def _queued(self, item: Item) -> Receipt:
        return texts.queued(item, self.state_text(item))

    # --- the owner's and the sender's changes -----------------------------------------------------
    async def approve(self, item: Item) -> Item:
        fields = self.core.approval(item, self.wall())
        if fields is not None:
            self.record.set(item, **fields)
            await self._sync()
            self.poke((item.machine, item.agent))
        return item

    async def cancel(self, item: Item) -> Item:
        fields = self.core.cancellation(item)
        if fields is not None:
            self.record.set(item, **fields)
            await self._sync()
        return item

    async def clear(self, machine: str, agent: str) -> int:
        """I9: clearing the inbox cancels every waiting request."""
        waiting = [i for i in self.active.get((machine, agent), {}).values() if self.core.cancellation(i)]
        for item in waiting:
            self.record.set(item, **self.core.cancellation(item))
        await self._sync()
        return len(waiting)

    async def message(self, item: Item, text: str) -> Item | None:
        """None when the item no longer waits (the change is refused); TextTooLong when the send would
        be longer than its agent takes."""
        fields = self.core.message(item, text, self.sight.text_max(item.machine, item.agent))
        if fields is None:
            return None
        self.record.set(item, **fields)
        await self._sync()
        return item

    async def move(self, item: Item, index: int) -> Item:
        inbox = self.active.get((item.machine, item.agent), {})
        for iid, pos in self.core.move(inbox.values(), item.id, index).items():
            self.record.set(inbox[iid], position=pos)
        await self._sync()
        self.poke((item.machine, item.agent))
        return item

    def _timers(self, clock: float) -> float | None:
        """Wake the loop at the soonest pause's end (exact times on virtual clocks), and look at the
        inboxes whose pauses have ended."""
        soonest, keys = self.pace.timers(clock, self.by_id, self.active)
        self.looks.keys |= keys
        return soonest

    def _tick(self, nursery: trio.Nursery) -> None:
        now, clock = self.wall(), trio.current_time()
        for key in self.looks.take(clock, self.active):  # every inbox at least every TICK, else the poked ones
            self.dispatcher.look(key, now, clock, nursery)
        if now - self._last_purge >= 60.0:
            self._last_purge = now
            self.record.drop(self.core.forgotten(list(self.finished.values()), now))
            if not self.mem.complete or self.mem.over_share(FINISHED_PER_SENDER):
                nursery.start_soon(self._purge_record, now - KEEP_FINISHED)
        if self.store.due:
            nursery.start_soon(self.store.sync_later)

    async def _purge_record(self, before: float) -> None:
        try:
            await self.record.purge(before, FINISHED_PER_SENDER)
        except STORE_ERRORS:
            self.store.failed()

    def _local_change(self, name: str) -> None:
        """A local agent's turn ending (or any change) may let its next item run: look at once."""
        self.poke((LOCAL, name))

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """The loop that runs items. Start it with `nursery.start`: when that returns, the inbox hears of its
        local agents' changes and runs what is due."""
        bridge = self.writer.bridge
        bridge.on_agent_change.append(self._local_change)
        try:
            await self._run(task_status)
        finally:
            bridge.on_agent_change.remove(self._local_change)

    async def _run(self, task_status) -> None:
        async with trio.open_nursery() as nursery:
            task_status.started()
            while True:
                self._timers(trio.current_time())
                self._tick(nursery)
                wait = self.looks.rest(active=bool(self.active), store_idle=self.store.idle)
                wait = self.looks.until(wait, self._timers(trio.current_time()), trio.current_time())
                with trio.move_on_after(wait):
                    await self.wake.wait()
                self.looks.resting = False
                self.wake = trio.Event()

    def statistics(self) -> dict:
        return {"active": sum(len(v) for v in self.active.values()), "finished_in_memory": len(self.finished),
                "inflight": len(self.inflight), "commits_pending": self.store.behind,
                "held": len(self.pace.held), "paused": len(self.pace.paused)}


def with_waiting(recent: list, inbox, machine: str, agent: str, conv: str) -> list:
    """The owner's recent sends, then those still waiting in the lead's inbox (`queued`, B10, C9)."""
    if inbox is None or not isinstance(recent, list):
        return recent
    ids = {line.get("request_id") for line in recent if isinstance(line, dict)}
    return recent + [line for line in inbox.waiting_lines(machine, agent, conv) if line["request_id"] not in ids]
