"""The lead's crew records: invited members and API tokens (SQLite `<state>/crew.sqlite`, 0600).

Only SHA-256 hashes of tokens are stored; a token is shown once, by writing it to a 0600 file.
Both the `collie` command (invite, remove, tokens) and the running lead use this file; SQLite's
WAL mode makes that safe.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import time
from pathlib import Path

from collie.crew.fsutil import open_db

SCHEMA = """
CREATE TABLE IF NOT EXISTS members (label TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE,
    created_at REAL NOT NULL, last_seen REAL, version TEXT);
CREATE TABLE IF NOT EXISTS api_tokens (name TEXT PRIMARY KEY, token_hash TEXT NOT NULL UNIQUE,
    approval TEXT NOT NULL CHECK (approval IN ('standing', 'required')), created_at REAL NOT NULL);
"""


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class CrewStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.db = open_db(path)
        self.db.executescript(SCHEMA)
        self._tokens: dict[str, tuple[str, str]] | None = None  # token hash -> (name, approval), once loaded
        self._loaded_from: tuple | None = None  # files_signature() when the tokens were loaded

    def close(self) -> None:
        self.db.close()

    # members ---------------------------------------------------------------------------------
    def invite(self, label: str, token: str) -> None:
        self.db.execute("INSERT INTO members (label, token_hash, created_at) VALUES (?, ?, ?)",
                        (label, token_hash(token), time.time()))

    def member_for(self, token: str) -> str | None:
        wanted = token_hash(token)
        row = self.db.execute("SELECT label, token_hash FROM members WHERE token_hash=?", (wanted,)).fetchone()
        if row and hmac.compare_digest(row[1], wanted):
            return row[0]
        return None

    def seen(self, label: str, version: str | None, when: float) -> None:
        """Its last contact, never moved back (a closing link's mark may land after its successor's)."""
        self.db.execute("UPDATE members SET last_seen=MAX(COALESCE(last_seen, 0), ?), version=COALESCE(?, version) "
                        "WHERE label=?", (when, version, label))

    def members(self) -> list[dict]:
        return [{"label": r[0], "created_at": r[1], "last_seen": r[2], "version": r[3]} for r in
                self.db.execute("SELECT label, created_at, last_seen, version FROM members ORDER BY label")]

    def remove(self, label: str) -> bool:
        return self.db.execute("DELETE FROM members WHERE label=?", (label,)).rowcount > 0

    # API tokens for inbox senders (features I10) -------------------------------------------------
    # The running lead keeps the tokens' hashes in memory (`load_tokens`), the database being the
    # record: a sender's request then costs no SQLite read on the event loop (issue 16). The `collie
    # tokens` verbs write the database and tell the lead to load it again (`tokens_changed` on the
    # control socket); the lead also looks every few seconds whether the file changed (`files_changed`,
    # one stat each of the database and its WAL, no SQLite read) and reloads it then in a worker
    # thread, so a revocation holds even when that call could not be made.
    def add_token(self, name: str, token: str, approval: str) -> None:
        self.db.execute("INSERT INTO api_tokens VALUES (?, ?, ?, ?)", (name, token_hash(token), approval, time.time()))
        if self._tokens is not None:
            self.load_tokens()

    def files_signature(self) -> tuple:
        """What changes when another process commits to the database: the database file's and its WAL's
        inode, size and modification time."""
        sig = []
        for path in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = os.stat(path)
            except OSError:
                sig.append(None)
            else:
                sig.append((st.st_ino, st.st_size, st.st_mtime_ns))
        return tuple(sig)

    def files_changed(self) -> bool:
        """Whether the files changed since the tokens were last loaded (so they should be loaded again)."""
        return self.files_signature() != self._loaded_from

    def load_tokens(self) -> None:
        """Read every token's hash into memory (a worker thread in the running lead)."""
        self._loaded_from = self.files_signature()  # before the read: a commit after it shows as a change
        self._tokens = {h: (n, a) for n, a, h in self.db.execute("SELECT name, approval, token_hash FROM api_tokens")}

    def token_for(self, token: str) -> tuple[str, str] | None:
        wanted = token_hash(token)
        if self._tokens is not None:  # every stored hash compared in constant time, no early exit
            found = None
            for stored, entry in self._tokens.items():
                if hmac.compare_digest(stored, wanted):
                    found = entry
            return found
        row = self.db.execute("SELECT name, approval, token_hash FROM api_tokens WHERE token_hash=?", (wanted,)).fetchone()
        if row and hmac.compare_digest(row[2], wanted):
            return row[0], row[1]
        return None

    def tokens(self) -> list[dict]:
        return [{"name": r[0], "approval": r[1], "created_at": r[2]} for r in
                self.db.execute("SELECT name, approval, created_at FROM api_tokens ORDER BY name")]

    def revoke_token(self, name: str) -> bool:
        gone = self.db.execute("DELETE FROM api_tokens WHERE name=?", (name,)).rowcount > 0
        if self._tokens is not None:
            self.load_tokens()
        return gone
