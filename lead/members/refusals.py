"""The lead's memory of the writes to members' agents it refused itself (crew.md §3, docs/phone-api.md).

A member's journal answers a repeated request id with its stored receipt, but a write the lead refuses
before forwarding it — `busy` on the lead's own session lock, `machine_offline`, `older_collie` — never
reaches the member. This store is the lead's journal for those, so a repeat of such an id answers the
same refusal (`replay: true`) and is never performed later, exactly as the bridge's journal does for
the lead's own agents; the same id with another body is refused `conflict`. One row per request id:

    refused    the lead refused it before anything was forwarded; `receipt` is that refusal
    forwarded  the lead forwarded it to the member at least once (recorded before the frame goes out):
               the member's journal owns its outcome. A repeat is forwarded again, and a refusal the
               lead gives it later (the member went offline after an `unknown`) is not remembered —
               the member may have applied it, so only a Retry may tell

Sends and starters are not kept here: the inbox keeps them (I1), and a "not now" refusal of theirs
(`busy`, `machine_offline`) only makes their item wait and run later under the same id.

`<state>/refusals.sqlite` (0600), WAL, `synchronous=FULL`. Rows are kept `KEEP` (24 h, wall clock —
the wire's promise for a request id, wire-v1 §1) and at most about `MAX_ROWS`; older ones go as new ones
are written. Statements run in one worker thread, grouped like the bridge journal's (one transaction,
one fsync, for every call queued while the previous batch was on disk).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import attrs

from collie.bridge.journal import GroupCommit
from collie.crew.fsutil import open_db

KEEP = 24 * 3600.0
MAX_ROWS = 100_000

SCHEMA = """
CREATE TABLE IF NOT EXISTS writes (
    request_id TEXT PRIMARY KEY,
    state TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    receipt TEXT,
    created_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS writes_age ON writes (created_at);
"""


@attrs.frozen
class Seen:
    request_id: str
    state: str  # "refused" or "forwarded"
    fingerprint: str
    receipt: dict | None


class Refusals(GroupCommit):
    def __init__(self, path: Path, *, wall: Callable[[], float] = time.time) -> None:
        super().__init__()
        self.path = path
        self.wall = wall
        self.db = open_db(path)
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- synchronous core (a worker thread) -----------------------------------------------------
    def get(self, request_id: str) -> Seen | None:
        r = self.db.execute("SELECT request_id, state, fingerprint, receipt, created_at FROM writes "
                            "WHERE request_id=?", (request_id,)).fetchone()
        if r is None or r[4] < self.wall() - KEEP:  # aged out, not deleted yet
            return None
        return Seen(r[0], r[1], r[2], json.loads(r[3]) if r[3] else None)

    def refuse(self, request_id: str, fingerprint: str, receipt: dict) -> None:
        """Remember a refusal decided before anything was forwarded (one transaction)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self._refuse(request_id, fingerprint, receipt)

    def forwarded(self, request_id: str, fingerprint: str) -> None:
        """Mark a request as forwarded, before its frame goes out (one transaction)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self._forwarded(request_id, fingerprint)

    def _refuse(self, request_id: str, fingerprint: str, receipt: dict) -> None:
        self._put(request_id, "refused", fingerprint, json.dumps(receipt))

    def _forwarded(self, request_id: str, fingerprint: str) -> None:
        self._put(request_id, "forwarded", fingerprint, None)

    def _put(self, request_id: str, state: str, fingerprint: str, receipt: str | None) -> None:
        now = self.wall()
        self.db.execute("DELETE FROM writes WHERE created_at < ?", (now - KEEP,))
        self.db.execute("DELETE FROM writes WHERE rowid <= (SELECT max(rowid) FROM writes) - ?", (MAX_ROWS - 1,))
        # a row aged out but not deleted yet is replaced; a live one (the caller looked first) stays
        self.db.execute("INSERT OR REPLACE INTO writes VALUES (?,?,?,?,?)",
                        (request_id, state, fingerprint, receipt, now))

    def count(self) -> int:
        return self.db.execute("SELECT count(*) FROM writes").fetchone()[0]

    # --- group commit: the bridge journal's own batching (bridge/journal.py), over this table ----
    def _batchable(self) -> dict:
        return {self.get: self.get, self.refuse: self._refuse, self.forwarded: self._forwarded}
