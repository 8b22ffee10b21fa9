"""The crew's records on the lead's disk, kept off the event loop (crew.md §1, issue 16).

`collie.crew.crewstore.CrewStore` holds them in SQLite: members (their token hashes, last contact, version) and the
API tokens, which are checked in memory. Here its statements run in one worker thread: a commit's fsync, or
the busy wait while a `collie` command holds the database, must not stall the loop. The tokens are read
again when the database's files changed (`collie tokens …` in another process: one stat a tick while idle)
and at least every TOKENS_RELOAD_MAX seconds, whatever the stat says. A failure to record a member's last
contact is logged; its link goes on.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import trio

from collie.crew import logs
from collie.crew.crewstore import CrewStore

log = logs.get("crew")

# A change to the token table made by another process is seen by the files' stat (every tick); two
# commits within one tick of the file system's clock that leave the WAL's size as it was look alike, so
# the tokens are also read again at least this often whatever the stat says.
TOKENS_RELOAD_MAX = 30.0


class CrewRecords:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.store = CrewStore(state_dir / "crew.sqlite")
        self.store.load_tokens()  # in memory from here on (start-up, before the loop serves anyone)
        self.limiter = trio.CapacityLimiter(1)
        self.loaded_at = 0.0  # trio time of the last load (the one above counts from when the hub runs)

    async def mark_seen(self, label: str, version: str | None, when: float) -> None:
        """A member's last contact on disk, in the worker thread."""
        try:
            await trio.to_thread.run_sync(self.store.seen, label, version, when, limiter=self.limiter)
        except sqlite3.Error as exc:
            log.warning("[crew] %s: could not record its last contact (%s)", label, type(exc).__name__)

    async def reload_tokens(self) -> None:
        """The API tokens from the database into memory, in the worker thread."""
        self.loaded_at = trio.current_time()
        await trio.to_thread.run_sync(self.store.load_tokens, limiter=self.limiter)

    def tokens_due(self, now: float) -> bool:
        """Read the tokens again: another process changed the database, or TOKENS_RELOAD_MAX passed."""
        return self.store.files_changed() or now - self.loaded_at >= TOKENS_RELOAD_MAX

    def forget_invite(self, label: str) -> None:
        """The member joined: the plaintext token `collie crew invite` left goes; only its hash stays (§1)."""
        try:
            (self.state_dir / "invites" / f"{label}.token").unlink(missing_ok=True)
        except OSError as exc:
            log.warning("[crew] %s: could not delete its invite file: %s", label, exc.strerror)
