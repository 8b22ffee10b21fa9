"""The inbox's record (features I4, I7, I9; crew.md §4): one SQLite table of items, written in grouped commits.

Guarantees:
- One place writes rows: `_write` (one transaction per batch) and `_purge` (old finished items). Nothing
  else in the lead changes `inbox.sqlite`.
- Group commit: `put` marks an item's row for the next commit; `sync` returns once every change made
  before the call is on disk, and one commit (one fsync) carries every change made while the previous one
  ran. A commit that fails keeps its rows for the next one (nothing marked is ever lost from memory).
- The event loop never waits on the disk: every read and write here runs in a worker thread, one at a
  time on this database.
- The record migrates on open (columns added by issues 8 and 9); WAL mode, `synchronous=FULL`.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import attrs
import trio

from collie.crew import logs
from collie.crew.fsutil import open_db
from collie.lead.inbox.core import Items
from collie.lead.inbox.item import FINISHED, Item, transition

log = logs.get("inbox")

STORE_ERRORS = (sqlite3.Error, OSError)  # writing the record failed (the state folder's disk is full, …)

COLUMNS = ("id", "machine", "agent", "kind", "conversation", "starter", "text", "sender", "state", "created_at",
           "approved_at", "position", "runtime_ref", "receipt", "reason", "updated_at", "seq", "request_id",
           "fingerprint", "request")
JSON_COLUMNS = ("runtime_ref", "receipt", "request")
SCHEMA = """
CREATE TABLE IF NOT EXISTS items (
    id TEXT PRIMARY KEY, machine TEXT NOT NULL, agent TEXT NOT NULL, kind TEXT NOT NULL,
    conversation TEXT, starter TEXT, text TEXT, sender TEXT, state TEXT NOT NULL,
    created_at REAL NOT NULL, approved_at REAL, position REAL, runtime_ref TEXT, receipt TEXT,
    reason TEXT, updated_at REAL NOT NULL, seq INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS items_inbox ON items (machine, agent, state);
"""
MIGRATIONS = {"request_id": "TEXT", "fingerprint": "TEXT", "request": "TEXT"}  # added by issues 8 and 9


def from_row(r) -> Item:
    d = dict(zip(COLUMNS, r))
    for key in JSON_COLUMNS:
        d[key] = json.loads(d[key]) if d[key] else None
    return Item(**d)


def to_row(item: Item) -> tuple:
    d = attrs.asdict(item, recurse=False)
    return tuple(json.dumps(d[c]) if c in JSON_COLUMNS and d[c] is not None else d[c] for c in COLUMNS)


class InboxStore:
    """The record of every item, and the grouped commits that keep it in step with memory."""

    def __init__(self, path: Path, run=None) -> None:
        self.db = open_db(path)  # WAL, synchronous=FULL
        self.db.executescript(SCHEMA)
        have = {r[1] for r in self.db.execute("PRAGMA table_info(items)")}
        for col, kind in MIGRATIONS.items():
            if col not in have:
                self.db.execute(f"ALTER TABLE items ADD COLUMN {col} {kind}")
        self.db.execute("UPDATE items SET request_id=id WHERE request_id IS NULL")
        self.limiter = trio.CapacityLimiter(1)  # one worker thread at a time on this database
        self.run = run or self.in_thread  # how SQL reaches the database (tests run it inline on virtual time)
        self.failing = False  # the last commit failed (logged once until one succeeds)
        self._dirty: dict[str, tuple] = {}
        self._gone: set[str] = set()
        self._gen = self._flushed = 0
        self._flushing: trio.Event | None = None

    # --- start-up (before the loop runs) ------------------------------------------------------
    def load(self, keep_after: float, limit: int) -> tuple[int, list[Item], list[Item]]:
        """(highest seq, every active item, the newest finished ones updated after `keep_after`: at most
        `limit` + 1, newest first, so the caller sees whether more exist)."""
        seq = self.db.execute("SELECT MAX(seq) FROM items").fetchone()[0] or 0
        cols = ",".join(COLUMNS)
        active = [from_row(r) for r in self.db.execute(
            f"SELECT {cols} FROM items WHERE state IN ('pending','approved','running')")]
        rows = self.db.execute(f"SELECT {cols} FROM items WHERE state NOT IN ('pending','approved','running') "
                               "AND updated_at > ? ORDER BY updated_at DESC LIMIT ?", (keep_after, limit + 1))
        return seq, active, [from_row(r) for r in rows]

    # --- the grouped commit -------------------------------------------------------------------
    def put(self, item: Item) -> None:
        """Mark `item` as it is now for the next commit."""
        self._dirty[item.id] = to_row(item)
        self._gen += 1

    def drop(self, item_id: str) -> None:
        """The item leaves the record at the next commit."""
        self._gone.add(item_id)
        self._gen += 1

    def unmark(self, item_id: str) -> bool:
        """Forget a change not yet committed (True if there was one)."""
        return self._dirty.pop(item_id, None) is not None

    @property
    def behind(self) -> int:
        """Changes not yet on disk."""
        return self._gen - self._flushed

    @property
    def idle(self) -> bool:
        """Nothing to commit and no commit running."""
        return self._flushed >= self._gen and self._flushing is None

    @property
    def due(self) -> bool:
        """Changes wait and no commit is running (a commit nobody waits for may start)."""
        return self._flushed < self._gen and self._flushing is None

    def _write(self, rows: dict[str, tuple], gone: set[str]) -> None:
        """In a worker thread: one transaction for a batch of changes."""
        marks = ",".join("?" * len(COLUMNS))
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(f"INSERT OR REPLACE INTO items ({','.join(COLUMNS)}) VALUES ({marks})", list(rows.values()))
            self.db.executemany("DELETE FROM items WHERE id=?", [(i,) for i in gone])

    async def sync(self) -> None:
        """Return once every change made before the call is on disk (group commit: one commit for
        all the changes made while the previous one ran)."""
        target = self._gen
        while self._flushed < target:
            if self._flushing is not None:
                await self._flushing.wait()
                continue
            self._flushing = event = trio.Event()
            rows, gone, gen = self._dirty, self._gone, self._gen
            self._dirty, self._gone = {}, set()
            try:
                await self.run(self._write, rows, gone)
                self._flushed = gen
                if self.failing:
                    self.failing = False
                    log.info("[inbox] the inbox is written to disk again")
            except BaseException:
                for key, row in rows.items():  # not on disk: keep them for the next commit
                    self._dirty.setdefault(key, row)
                self._gone |= gone
                raise
            finally:
                self._flushing = None
                event.set()

    async def sync_later(self) -> None:
        """A commit nobody waits for (changes made by the tick): a failure is logged once, and the
        changes stay for the next commit."""
        try:
            await self.sync()
        except STORE_ERRORS:
            self.failed()

    def failed(self) -> None:
        if not self.failing:
            log.warning("[inbox] the inbox could not be written to disk (is the state folder full?); new requests "
                        "are refused until it can, and what it holds is written then")
        self.failing = True

    # --- reads and the purge (worker threads) ---------------------------------------------------
    async def in_thread(self, fn, *args):
        return await trio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    def _read_one(self, where: str, args: tuple) -> Item | None:
        r = self.db.execute(f"SELECT {','.join(COLUMNS)} FROM items WHERE {where}", args).fetchone()
        return from_row(r) if r else None

    async def read(self, item_id: str) -> Item | None:
        return await self.run(self._read_one, "id=?", (item_id,))

    async def find(self, sender: str | None, request_id: str) -> Item | None:
        return await self.run(self._read_one, "COALESCE(sender,'')=? AND request_id=?", (sender or "", request_id))

    def _purge(self, before: float, per_sender: int) -> list[str]:
        with self.db:
            self.db.execute("DELETE FROM items WHERE state IN ('done','expired','cancelled','failed') "
                            "AND updated_at < ?", (before,))
            over = [row[0] for row in self.db.execute(
                "SELECT id FROM (SELECT id, row_number() OVER (PARTITION BY sender ORDER BY updated_at DESC, "
                "seq DESC) AS n FROM items WHERE sender IS NOT NULL AND state IN "
                "('done','expired','cancelled','failed')) WHERE n > ?", (per_sender,))]
            self.db.executemany("DELETE FROM items WHERE id=?", [(i,) for i in over])
        return over

    async def purge(self, before: float, per_sender: int) -> list[str]:
        """Finished items older than `before` leave the record, and so do a sender's finished items beyond
        its newest `per_sender`; returns the ids of the latter. A change still to commit for one of them is
        turned into its removal (it would bring the row back)."""
        over = await self.run(self._purge, before, per_sender)
        for iid in over:
            if self.unmark(iid):
                self.drop(iid)
        return over


class Record:
    """The inbox's items: in memory (`Items`) and on disk (`InboxStore`), changed in one place.

    Invariants: every change of an item goes through `set` — re-filed under its new state, stamped
    `updated_at` by the wall clock, marked for the next commit, then announced (`changed`) — so memory
    and the record agree after each commit; a lookup memory cannot answer once it is not complete goes
    to the record."""

    def __init__(self, store: InboxStore, wall, changed) -> None:
        self.store, self.wall, self.changed = store, wall, changed
        self.mem = Items()
        self.seq = 0  # the last item's arrival number

    def load(self, keep_after: float) -> None:
        """At start-up: every active item, and the newest finished ones updated after `keep_after`."""
        limit = self.mem.finished_max
        self.seq, active, finished = self.store.load(keep_after, limit)
        for item in active:
            self.mem.remember(item)
        self.mem.complete = len(finished) <= limit
        for item in reversed(finished[:limit]):
            self.mem.remember(item)

    def set(self, item: Item, **fields) -> None:
        """Change an item in memory and mark it for the next commit (`await store.sync()` to wait for it);
        a change of state is one TRANSITIONS has (IllegalTransition before anything changes)."""
        if "state" in fields:
            transition(item.state, fields["state"])
        self.mem.forget(item)
        for key, value in fields.items():
            setattr(item, key, value)
        item.updated_at = self.wall()
        self.mem.remember(item)
        self.store.put(item)
        self.changed(item)

    def insert(self, item: Item) -> None:
        self.seq += 1
        item.seq = self.seq
        self.set(item)

    def discard(self, item: Item) -> None:
        """A new item that could not be written: kept nowhere, not in memory, not in a later commit."""
        self.mem.forget(item)
        self.store.unmark(item.id)

    def drop(self, items) -> None:
        """Finished items that may leave memory and the record (at the next commit)."""
        for item in items:
            self.mem.forget(item)
            self.store.drop(item.id)

    async def get(self, item_id: str) -> Item | None:
        if item_id in self.mem.by_id:
            return self.mem.by_id[item_id]
        if self.mem.complete:
            return None
        return await self.store.read(item_id)

    async def find(self, sender: str | None, request_id: str) -> Item | None:
        key = ("" if sender is None else f"token:{sender}", request_id)
        if key in self.mem.by_key:
            return self.mem.by_key[key]
        if self.mem.complete:
            return None
        return await self.store.find(sender, request_id)

    async def purge(self, before: float, per_sender: int) -> None:
        """Finished items older than `before` leave the record, and so do a sender's finished items beyond
        its newest `per_sender`, from memory too: a sender that enqueues and cancels in a loop cannot fill
        the disk. Raises STORE_ERRORS when the record cannot be written."""
        for iid in await self.store.purge(before, per_sender):
            item = self.mem.by_id.get(iid)
            if item is not None and item.state in FINISHED:
                self.mem.forget(item)
