"""The inbox (features I1–I11, crew.md §4): work that waits for a machine, runs once, in approval order.

Every send and starter enters the inbox of its `(machine, agent)` first. A phone write to an agent
whose inbox is empty and whose machine is online passes straight through and runs the full Send
protocol (its receipt is the real one); anything else waits:

    pending   ──approve──▶ approved ──dispatch──▶ running ──turn ends──▶ done
       │                     │                       └──agent refuses──▶ failed (reason)
       ├─ 24 h TTL ─▶ expired └──cancel──▶ cancelled
       └──cancel──▶ cancelled

Rules:
- Order: approved items run by approval time; the owner's moves (`position`) override it. A
  pending item shows in its arrival slot and is skipped until approved. Standing senders (the
  phone, `standing` tokens) are approved on arrival; `required` tokens wait for the owner.
- One item runs at a time per agent; agents run in parallel. An item is `done` when the turn it
  started ends. At dispatch it quotes the conversation's current turn; an open ask holds it
  `approved` (not refused) until the ask closes.
- Pending items expire after the TTL (24 h; `COLLIE_INBOX_TTL` seconds in `.env`), judged by
  wall-clock times stored on disk; approved items never expire.
- Nothing runs twice: an item is `running` on disk before it is sent, and a running item whose
  machine dropped is resumed by reference — the same request id is sent again, and the member's
  journal answers with its stored receipt instead of running it again.

`InboxCore` decides (no I/O, `now` passed in); `Inbox` stores in SQLite and dispatches.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import attrs
import trio

from bridge.writes import WriteRequest
from crew import logs
from crew.fsutil import touch_private
from crew.receipts import Receipt

log = logs.get("inbox")

TTL_DEFAULT = 24 * 3600.0
TICK = 1.0
ACTIVE = ("pending", "approved", "running")
SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY, machine TEXT NOT NULL, agent TEXT NOT NULL, kind TEXT NOT NULL,
    conversation TEXT, starter TEXT, text TEXT, sender TEXT, state TEXT NOT NULL,
    created_at REAL NOT NULL, approved_at REAL, position REAL, runtime_ref TEXT, receipt TEXT,
    reason TEXT, updated_at REAL NOT NULL, seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_inbox ON items (machine, agent, state);
"""


@attrs.define
class Item:
    id: str
    machine: str
    agent: str
    kind: str  # send | starter
    conversation: str | None
    starter: str | None
    text: str | None
    sender: str | None  # None: the owner's phone; else the API token's name
    state: str
    created_at: float
    approved_at: float | None = None
    position: float | None = None
    runtime_ref: dict | None = None  # {"conversation", "turn"}: what the dispatched request started
    receipt: dict | None = None
    reason: str | None = None
    updated_at: float = 0.0
    seq: int = 0

    @property
    def order_key(self) -> tuple:
        base = self.position if self.position is not None else (self.approved_at or self.created_at)
        return (base, self.seq)

    @property
    def arrival_key(self) -> tuple:
        return (self.position if self.position is not None else self.created_at, self.seq)


class InboxCore:
    """Decisions over one set of items; every method takes `now` (wall-clock seconds)."""

    def __init__(self, ttl: float = TTL_DEFAULT) -> None:
        self.ttl = ttl

    def expired(self, items: list[Item], now: float) -> list[Item]:
        return [i for i in items if i.state == "pending" and now - i.created_at >= self.ttl]

    def next_to_run(self, items: list[Item], blocked: set[str]) -> Item | None:
        """The first approved item by order, unless the agent already runs one; `blocked` holds
        conversations with an open ask (their items wait, keeping their place)."""
        if any(i.state == "running" for i in items):
            return None
        for item in sorted((i for i in items if i.state == "approved"), key=lambda i: i.order_key):
            if item.kind == "send" and item.conversation in blocked:
                continue
            return item
        return None

    def listing(self, items: list[Item]) -> list[Item]:
        """What the sender and the owner see: running first, then the queue in the order it will
        run, pending items in their arrival slot."""
        running = [i for i in items if i.state == "running"]
        waiting = sorted((i for i in items if i.state in ("approved", "pending")),
                         key=lambda i: i.order_key if i.state == "approved" else i.arrival_key)
        return running + waiting

    def move(self, items: list[Item], item_id: str, index: int) -> dict[str, float]:
        """The owner puts `item_id` at `index` of the waiting queue; returns new positions."""
        queue = [i for i in self.listing(items) if i.state in ("approved", "pending")]
        moving = next((i for i in queue if i.id == item_id), None)
        if moving is None:
            return {}
        queue.remove(moving)
        index = max(0, min(index, len(queue)))
        keys = [(i.order_key if i.state == "approved" else i.arrival_key)[0] for i in queue]
        before = keys[index - 1] if index > 0 else (keys[0] - 2.0 if keys else 0.0)
        after = keys[index] if index < len(keys) else before + 2.0
        positions = {i.id: k for i, k in zip(queue, keys) if i.position is None}
        positions[moving.id] = (before + after) / 2
        return positions

    def done(self, item: Item, conversation_turn: int | None, conversation_state: str | None) -> bool:
        """A running item is done when the turn it started has ended (or its conversation closed)."""
        ref = item.runtime_ref or {}
        started = ref.get("turn")
        if started is None:
            return False
        if conversation_turn is None:  # the conversation is no longer open
            return True
        return conversation_turn > started or (conversation_turn == started and conversation_state != "working")

    @staticmethod
    def state_text(item: Item, *, online: bool, offline_since: str | None, owner: str) -> str:
        """I7: what the sender sees."""
        if item.state == "pending":
            return f"waiting for approval from {owner}"
        if item.state == "approved":
            return f"queued, machine offline since {offline_since}" if not online and offline_since else "queued"
        if item.state == "failed":
            return f"failed: {item.reason}" if item.reason else "failed"
        return item.state


class Inbox:
    def __init__(self, path: Path, hub, writer, *, owner: str = "the owner", ttl: float = TTL_DEFAULT,
                 wall=time.time) -> None:
        touch_private(path)
        self.db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.core = InboxCore(ttl)
        self.hub = hub
        self.writer = writer
        self.owner = owner
        self.wall = wall
        self.wake = trio.Event()
        self.running: set[tuple[str, str]] = set()  # inboxes with a dispatch task in flight
        self._seq = (self.db.execute("SELECT MAX(seq) FROM items").fetchone()[0] or 0)
        hub.inbox = self
        hub.on_member_change.append(lambda _label: self.poke())

    # --- storage ----------------------------------------------------------------------------------
    def _row(self, r) -> Item:
        return Item(id=r[0], machine=r[1], agent=r[2], kind=r[3], conversation=r[4], starter=r[5], text=r[6],
                    sender=r[7], state=r[8], created_at=r[9], approved_at=r[10], position=r[11],
                    runtime_ref=json.loads(r[12]) if r[12] else None, receipt=json.loads(r[13]) if r[13] else None,
                    reason=r[14], updated_at=r[15], seq=r[16])

    def items(self, machine: str, agent: str, *, active_only: bool = True) -> list[Item]:
        sql = "SELECT * FROM items WHERE machine=? AND agent=?" + (" AND state IN ('pending','approved','running')"
                                                                   if active_only else "")
        return [self._row(r) for r in self.db.execute(sql, (machine, agent))]

    def get(self, item_id: str) -> Item | None:
        r = self.db.execute("SELECT * FROM items WHERE id=?", (item_id,)).fetchone()
        return self._row(r) if r else None

    def _insert(self, item: Item) -> None:
        self._seq += 1
        item.seq = self._seq
        self.db.execute("INSERT INTO items VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (item.id, item.machine, item.agent, item.kind, item.conversation, item.starter, item.text,
                         item.sender, item.state, item.created_at, item.approved_at, item.position,
                         json.dumps(item.runtime_ref) if item.runtime_ref else None,
                         json.dumps(item.receipt) if item.receipt else None, item.reason, item.updated_at, item.seq))

    def _set(self, item_id: str, **fields) -> None:
        fields["updated_at"] = self.wall()
        for key in ("runtime_ref", "receipt"):
            if key in fields and fields[key] is not None:
                fields[key] = json.dumps(fields[key])
        cols = ", ".join(f"{k}=?" for k in fields)
        self.db.execute(f"UPDATE items SET {cols} WHERE id=?", (*fields.values(), item_id))

    def poke(self) -> None:
        self.wake.set()

    # --- what the phone and senders do ---------------------------------------------------------------
    def _online(self, machine: str) -> bool:
        if machine == "local":
            return True
        member = self.hub.members.get(machine)
        return bool(member and member.online)

    def _offline_since(self, machine: str) -> str | None:
        member = self.hub.members.get(machine)
        if member is None or member.online:
            return None
        from lead.hub import hhmm

        since = member.offline_since or member.last_seen
        return hhmm(since) if since else "never connected"

    def view(self, item: Item) -> dict:
        d = attrs.asdict(item)
        d["state_text"] = self.core.state_text(item, online=self._online(item.machine),
                                               offline_since=self._offline_since(item.machine), owner=self.owner)
        return d

    async def submit(self, machine: str, req: WriteRequest, *, sender: str | None, approval: str = "standing") -> Receipt:
        """A send or starter enters the inbox; a phone write to an empty, online inbox runs at once."""
        existing = self.get(req.request_id)
        if existing is not None:  # the phone's Retry, or a resend: report, never enqueue twice
            if existing.receipt and existing.state in ("done", "running", "failed"):
                return attrs.evolve(Receipt(**existing.receipt), replay=True)
            return self._queued_receipt(existing)
        now = self.wall()
        approved = approval == "standing"
        item = Item(id=req.request_id, machine=machine, agent=req.agent, kind=req.op, conversation=req.conversation,
                    starter=req.starter_id, text=req.text, sender=sender, state="approved" if approved else "pending",
                    created_at=now, approved_at=now if approved else None, updated_at=now)
        active = self.items(machine, req.agent)
        pass_through = sender is None and approved and not active and self._online(machine)
        if pass_through:
            key = (machine, req.agent)
            item.state = "running"
            item.runtime_ref = {"conversation": req.conversation, "turn": None}
            self._insert(item)
            self.running.add(key)  # the dispatcher must not take this for an interrupted run
            try:
                return await self._dispatch(machine, req, item)
            finally:
                self.running.discard(key)
                self.poke()
        self._insert(item)
        log.info("[inbox] %s/%s: %s %s (%s)", machine, req.agent, req.op, item.id, item.state)
        self.poke()
        return self._queued_receipt(item)

    def _queued_receipt(self, item: Item) -> Receipt:
        text = self.core.state_text(item, online=self._online(item.machine),
                                    offline_since=self._offline_since(item.machine), owner=self.owner)
        return Receipt(request_id=item.id, op=item.kind, outcome="queued", reason="inbox", text=text)

    def approve(self, item_id: str) -> Item | None:
        item = self.get(item_id)
        if item is None or item.state != "pending":
            return item
        self._set(item_id, state="approved", approved_at=self.wall())
        self.poke()
        return self.get(item_id)

    def cancel(self, item_id: str) -> Item | None:
        item = self.get(item_id)
        if item is None or item.state not in ("pending", "approved"):
            return item
        self._set(item_id, state="cancelled")
        return self.get(item_id)

    def clear(self, machine: str, agent: str) -> int:
        """I9: clearing the inbox cancels every waiting request."""
        n = 0
        for item in self.items(machine, agent):
            if item.state in ("pending", "approved"):
                self._set(item.id, state="cancelled")
                n += 1
        return n

    def message(self, item_id: str, text: str) -> Item | None:
        item = self.get(item_id)
        if item is None or item.state not in ("pending", "approved") or item.kind != "send":
            return item
        self._set(item_id, text=f"{item.text}\n\n{text}")
        return self.get(item_id)

    def move(self, item_id: str, index: int) -> Item | None:
        item = self.get(item_id)
        if item is None:
            return None
        for iid, pos in self.core.move(self.items(item.machine, item.agent), item_id, index).items():
            self._set(iid, position=pos)
        self.poke()
        return self.get(item_id)

    # --- dispatch -------------------------------------------------------------------------------
    def _reader(self, machine: str, agent: str):
        if machine == "local":
            return self.writer.bridge.readers.get(agent)
        return self.hub.reader(machine, agent)

    async def _dispatch(self, machine: str, req: WriteRequest, item: Item, *, from_queue: bool = False) -> Receipt:
        if machine == "local":
            rec = await self.writer.write(req)
        else:
            rec = await self.hub.write(machine, req)
        self._after_receipt(item, rec, from_queue=from_queue)
        return rec

    HOLD = ("ask_open", "turn_moved", "busy", "machine_offline", "unreachable")

    def _after_receipt(self, item: Item, rec: Receipt, *, from_queue: bool = False) -> None:
        plain = attrs.asdict(rec)
        if rec.outcome in ("sent", "started"):
            ref = {"conversation": rec.conversation or item.conversation, "turn": rec.turn}
            self._set(item.id, state="running", runtime_ref=ref, receipt=plain)
        elif rec.outcome == "queued" and rec.reason != "inbox":
            ref = {"conversation": item.conversation, "turn": (rec.turn or 0) + 1}
            self._set(item.id, state="running", runtime_ref=ref, receipt=plain)
        elif rec.outcome == "unknown" or (from_queue and rec.reason in self.HOLD) or rec.reason == "machine_offline":
            # not known to have run, or held by an open ask / a moving turn: it keeps its place and
            # the same request id goes again later (the journals make a resend safe)
            self._set(item.id, state="approved", receipt=plain, runtime_ref=None)
        else:
            self._set(item.id, state="failed", reason=rec.reason or rec.outcome, receipt=plain)
        self.poke()

    async def _run_item(self, item: Item) -> None:
        key = (item.machine, item.agent)
        try:
            reader = self._reader(item.machine, item.agent)
            turn = None
            if item.kind == "send" and reader is not None and item.conversation in reader.conversations:
                turn = reader.conversations[item.conversation].turn
            req = WriteRequest(request_id=item.id, op=item.kind, agent=item.agent, conversation=item.conversation,
                               text=item.text, turn=turn, starter_id=item.starter)
            self._set(item.id, state="running", runtime_ref={"conversation": item.conversation, "turn": None})
            log.info("[inbox] %s/%s: running %s", item.machine, item.agent, item.id)
            await self._dispatch(item.machine, req, item, from_queue=True)
        finally:
            self.running.discard(key)

    def _tick(self, nursery: trio.Nursery) -> None:
        now = self.wall()
        inboxes = {(m, a) for m, a in self.db.execute(
            "SELECT DISTINCT machine, agent FROM items WHERE state IN ('pending','approved','running')")}
        for machine, agent in inboxes:
            items = self.items(machine, agent)
            for item in self.core.expired(items, now):
                self._set(item.id, state="expired")
                log.info("[inbox] %s/%s: %s expired after %g s without approval", machine, agent, item.id, self.core.ttl)
            items = self.items(machine, agent)
            reader = self._reader(machine, agent)
            for item in items:
                if item.state == "running" and item.runtime_ref and item.runtime_ref.get("turn") is not None:
                    conv = reader.conversations.get(item.runtime_ref.get("conversation")) if reader else None
                    if reader is not None and reader.status == "ready" and self.core.done(
                            item, conv.turn if conv else None, conv.state if conv else None):
                        self._set(item.id, state="done")
                elif item.state == "running" and (item.runtime_ref or {}).get("turn") is None and (machine, agent) not in self.running:
                    # a run interrupted before its receipt (a crash or a dropped link): resume by reference
                    if self._online(machine):
                        self._set(item.id, state="approved")
            if (machine, agent) in self.running or not self._online(machine):
                continue
            if reader is None or reader.status != "ready":
                continue
            blocked = {cid for cid, c in reader.conversations.items() if c.asks}
            nxt = self.core.next_to_run(self.items(machine, agent), blocked)
            if nxt is not None:
                self.running.add((machine, agent))
                nursery.start_soon(self._run_item, nxt)

    async def _follow_bridge(self) -> None:
        """A local agent's turn ending (or any change) may let the next item run: look at once."""
        while True:
            await self.writer.bridge.wait_changed()
            self.poke()

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._follow_bridge)
            while True:
                self._tick(nursery)
                with trio.move_on_after(TICK):
                    await self.wake.wait()
                self.wake = trio.Event()
