"""The per-agent cache: what the bridge last read, so a pane opens at once while the agent is slow (S2).

One SQLite file per agent, ``<state>/durable/<name>/cache.sqlite`` (0600). It holds the last hello,
the last state document with its ETag, and the items of open conversations by seq (with gaps) —
no more of them than the reader keeps (its caps; items it drops are deleted here too).
Closed conversations are never cached: they are always read from the agent. A cache is a cache:
`synchronous=NORMAL` (losing the last write on power loss costs one re-read, not a promise).
Writes happen only when something changed, so an idle agent costs no disk writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import trio

from collie.crew.fsutil import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS items (conv TEXT NOT NULL, seq INTEGER NOT NULL, item TEXT NOT NULL,
                                  PRIMARY KEY (conv, seq));
CREATE TABLE IF NOT EXISTS logs (conv TEXT PRIMARY KEY, since INTEGER NOT NULL, gaps TEXT NOT NULL);
"""
VERSION = 1


class Cache:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = open_db(path, synchronous="NORMAL")  # a cache (see above)
        self.db.executescript(SCHEMA)
        row = self.db.execute("SELECT value FROM meta WHERE key='version'").fetchone()
        if row is None or json.loads(row[0]) != VERSION:
            self.db.executescript("DELETE FROM meta; DELETE FROM items; DELETE FROM logs;")
            self.db.execute("INSERT INTO meta VALUES ('version', ?)", (json.dumps(VERSION),))
        self.limiter = trio.CapacityLimiter(1)

    def close(self) -> None:
        self.db.close()

    def load(self) -> dict:
        meta = {k: json.loads(v) for k, v in self.db.execute("SELECT key, value FROM meta")}
        items: dict[str, dict[int, dict]] = {}
        for conv, seq, item in self.db.execute("SELECT conv, seq, item FROM items"):
            items.setdefault(conv, {})[seq] = json.loads(item)
        logs = {conv: (since, set(json.loads(gaps))) for conv, since, gaps in self.db.execute("SELECT * FROM logs")}
        return {"hello": meta.get("hello"), "state": meta.get("state"), "etag": meta.get("etag"),
                "items": items, "logs": logs}

    def _save(self, hello, state, etag, changed: dict, open_ids: set[str]) -> None:
        with self.db:
            self.db.execute("BEGIN")
            for key, value in (("hello", hello), ("state", state), ("etag", etag)):
                self.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
            for conv, (since, gaps, items, drop_below) in changed.items():
                self.db.execute("INSERT OR REPLACE INTO logs VALUES (?, ?, ?)", (conv, since, json.dumps(sorted(gaps))))
                if drop_below:  # dropped by the bridge's caps: the cache keeps no more than the bridge
                    self.db.execute("DELETE FROM items WHERE conv=? AND seq<?", (conv, drop_below))
                self.db.executemany("INSERT OR REPLACE INTO items VALUES (?, ?, ?)",
                                    [(conv, seq, json.dumps(item)) for seq, item in items.items()])
            known = {row[0] for row in self.db.execute("SELECT conv FROM logs")}
            for gone in known - open_ids:  # closed conversations leave the cache
                self.db.execute("DELETE FROM logs WHERE conv=?", (gone,))
                self.db.execute("DELETE FROM items WHERE conv=?", (gone,))

    async def save(self, hello, state, etag, changed: dict, open_ids: set[str]) -> None:
        await trio.to_thread.run_sync(self._save, hello, state, etag, changed, open_ids, limiter=self.limiter)
