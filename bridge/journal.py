"""The request journal: every write, on disk before it reaches the agent, then its outcome.

``<state>/journal.sqlite`` (0600), WAL, ``synchronous=FULL`` — an acknowledged write survives a
power cut. One row per request id:

    pending   written, maybe sent, no answer yet (a crash here is resolved at the next start)
    unknown   sent, and no answer came in time: the phone shows "not certain"; Retry resends it
    done      the agent answered (or the bridge refused after recording); `receipt` is final

A session-bound write the bridge refused before sending (`plan`, busy, version) is recorded `done` at
once with its refusal (`refusal`: no wire body, no ask), so a repeat answers that same receipt. A send
or starter the inbox dispatched and that reached nothing (connection refused) is taken back out
(`forget`): the inbox keeps it and dispatches it again later under the same id.

Rules the writer builds on: a request id is recorded once, with the fingerprint of what the phone
asked; the same id with another fingerprint is a conflict; a `done` row answers every repeat.
Wall-clock times are stored (they must mean something after a restart or a sleep).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import attrs
import trio

from collie.crew.fsutil import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    request_id TEXT PRIMARY KEY,
    agent TEXT NOT NULL,
    op TEXT NOT NULL,
    target TEXT,
    fingerprint TEXT NOT NULL,
    wire_path TEXT NOT NULL,
    wire_body TEXT NOT NULL,
    ask_id TEXT,
    state TEXT NOT NULL,
    receipt TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS requests_open ON requests (state) WHERE state != 'done';
CREATE INDEX IF NOT EXISTS requests_ask ON requests (agent, ask_id) WHERE ask_id IS NOT NULL;
"""


@attrs.frozen
class Row:
    request_id: str
    agent: str
    op: str
    target: str | None
    fingerprint: str
    wire_path: str
    wire_body: dict
    ask_id: str | None
    state: str
    receipt: dict | None
    attempts: int
    created_at: float


class GroupCommit:
    """One SQLite connection driven from one worker thread, with group commit: the journal's calls
    made while a batch is on disk wait and go together in the next one. A subclass sets `self.db` and
    names in `_batchable` the calls that may share one transaction."""

    db: sqlite3.Connection

    def __init__(self) -> None:
        self.limiter = trio.CapacityLimiter(1)
        self._queue: list[_Call] = []  # calls waiting for the next batch
        self._flushing: trio.Event | None = None  # a batch is in the worker thread
        self.calls = 0  # calls made through `run`: unchanged, nothing was read or written since

    def _batchable(self) -> dict:
        """The calls that may share one transaction (none of them opens or ends one itself), and
        what to call inside it."""
        raise NotImplementedError

    def _run_batch(self, batch: list) -> None:
        """In the worker thread: every call queued while the previous batch ran, in order. Runs of
        batchable calls share one transaction, so one fsync makes all of them durable; any other
        call runs on its own. When a shared transaction fails (disk full, …) it is rolled back
        whole and its calls are run again one by one, each its own transaction, so each caller
        gets its own outcome and nothing is applied twice."""
        inside = self._batchable()
        i = 0
        while i < len(batch):
            j = i
            while j < len(batch) and batch[j].fn in inside:
                j += 1
            group = batch[i:j] if j > i + 1 else []
            if group:
                try:
                    self.db.execute("BEGIN IMMEDIATE")
                    try:
                        results = [inside[c.fn](*c.args) for c in group]
                        self.db.execute("COMMIT")
                    except BaseException:
                        self.db.execute("ROLLBACK")
                        raise
                except Exception:
                    group = []  # each on its own, below
                else:
                    for c, result in zip(group, results):
                        c.result = (True, result)
                    i = j
                    continue
            for c in batch[i:max(j, i + 1)]:
                try:
                    c.result = (True, c.fn(*c.args))
                except Exception as exc:
                    c.result = (False, exc)
            i = max(j, i + 1)

    async def run(self, fn, *args):
        """Run `fn(*args)` in the journal's worker thread. Calls made while a batch is on disk wait
        and go together in the next one (group commit: one fsync for all the journal writes ready
        in a tick, issue 15.1); each returns once its own change is on disk."""
        call = _Call(fn, args)
        self.calls += 1
        self._queue.append(call)
        try:
            while call.result is None:
                if self._flushing is not None:
                    await self._flushing.wait()
                    continue
                batch, self._queue = self._queue, []
                self._flushing = done = trio.Event()
                try:
                    await trio.to_thread.run_sync(self._run_batch, batch, limiter=self.limiter)
                except BaseException as exc:  # not run (cancelled waiting for the thread): nobody waits forever
                    for c in batch:
                        if c.result is None:
                            c.result = (False, exc if isinstance(exc, Exception) else RuntimeError("not run"))
                    raise
                finally:
                    self._flushing = None
                    done.set()
        except BaseException:
            if call.result is None and call in self._queue:
                self._queue.remove(call)  # cancelled before its batch started: it never runs
            raise
        ok, value = call.result
        if not ok:
            raise value
        return value



class Journal(GroupCommit):
    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.db = open_db(path)  # WAL, synchronous=FULL
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    @staticmethod
    def _row(r) -> Row:
        return Row(request_id=r[0], agent=r[1], op=r[2], target=r[3], fingerprint=r[4], wire_path=r[5],
                   wire_body=json.loads(r[6]), ask_id=r[7], state=r[8], receipt=json.loads(r[9]) if r[9] else None,
                   attempts=r[10], created_at=r[11])

    # --- synchronous core (called in a worker thread) ------------------------------------------
    def get(self, request_id: str) -> Row | None:
        r = self.db.execute("SELECT * FROM requests WHERE request_id=?", (request_id,)).fetchone()
        return self._row(r) if r else None

    def begin(self, row: Row, now: float) -> Row | None:
        """Record a new request; returns the existing row instead when the id was seen before."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            return self._begin(row, now)

    def _begin(self, row: Row, now: float) -> Row | None:
        existing = self.get(row.request_id)
        if existing is not None:
            return existing
        self.db.execute(
            "INSERT INTO requests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (row.request_id, row.agent, row.op, row.target, row.fingerprint, row.wire_path,
             json.dumps(row.wire_body), row.ask_id, "pending", None, 1, now, now))
        return None

    def refusal(self, row: Row, now: float) -> None:
        """Record a request the bridge refused before sending anything (state `done`, its receipt)."""
        self.db.execute(
            "INSERT OR IGNORE INTO requests VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (row.request_id, row.agent, row.op, row.target, row.fingerprint, "", "{}", None, "done",
             json.dumps(row.receipt), 0, now, now))

    def forget(self, request_id: str) -> None:
        """Take back a request that reached nothing on its first attempt (its caller keeps it)."""
        self.db.execute("DELETE FROM requests WHERE request_id=? AND state='pending' AND attempts<=1", (request_id,))

    def attempt(self, request_id: str, now: float) -> None:
        self.db.execute("UPDATE requests SET attempts=attempts+1, state='pending', updated_at=? WHERE request_id=?",
                        (now, request_id))

    def finish(self, request_id: str, receipt: dict, now: float) -> None:
        self.db.execute("UPDATE requests SET state='done', receipt=?, updated_at=? WHERE request_id=?",
                        (json.dumps(receipt), now, request_id))

    def unknown(self, request_id: str, receipt: dict, now: float) -> None:
        self.db.execute("UPDATE requests SET state='unknown', receipt=?, updated_at=? WHERE request_id=?",
                        (json.dumps(receipt), now, request_id))

    def open_rows(self) -> list[Row]:
        return [self._row(r) for r in self.db.execute(
            "SELECT * FROM requests WHERE state != 'done' ORDER BY created_at")]

    def accepted_answer(self, agent: str, ask_id: str) -> str | None:
        for (receipt,) in self.db.execute(
                "SELECT receipt FROM requests WHERE agent=? AND ask_id=? AND state='done'", (agent, ask_id)):
            if receipt and json.loads(receipt).get("outcome") == "accepted":
                return receipt
        return None

    def tapped_asks(self, agent: str) -> set[str]:
        return {a for (a,) in self.db.execute(
            "SELECT DISTINCT ask_id FROM requests WHERE agent=? AND ask_id IS NOT NULL", (agent,))}

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for state, receipt in self.db.execute("SELECT state, receipt FROM requests"):
            outcome = json.loads(receipt).get("outcome") if receipt else state
            out[outcome] = out.get(outcome, 0) + 1
        return out

    # --- group commit ---------------------------------------------------------------------------
    def _batchable(self) -> dict:
        return {self.begin: self._begin, self.attempt: self.attempt, self.finish: self.finish,
                self.unknown: self.unknown, self.get: self.get, self.accepted_answer: self.accepted_answer,
                self.tapped_asks: self.tapped_asks}


@attrs.define(eq=False)
class _Call:
    fn: object
    args: tuple
    result: tuple | None = None  # (True, value) or (False, the exception)
