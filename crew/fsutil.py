"""Small durable-file helpers: private folders, 0600 files, atomic replace.

An atomic write is temp file (0600, same folder) → write → fsync → rename over the target →
fsync the folder, so a crash leaves either the old file or the new one, never half of each.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path


def ensure_private_dir(path: Path) -> None:
    """Create `path` (and parents) and make the leaf 0700."""
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    if stat.S_IMODE(path.stat().st_mode) != 0o700:
        os.chmod(path, 0o700)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Replace `path` with `data` atomically; the file ends with `mode`."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        tmp.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def touch_private(path: Path) -> None:
    """Create `path` if missing and make it 0600 (logs, journals)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def open_db(path: Path, *, synchronous: str = "FULL") -> sqlite3.Connection:
    """Open one of our SQLite files: its folder made 0700 if missing, the file 0600 (SQLite gives its
    -wal and -shm files the same mode), WAL, `synchronous` as given (FULL: a commit is on disk when it
    returns), a 5 s busy timeout, autocommit (callers open their own transactions). Usable from a
    worker thread."""
    if synchronous not in ("FULL", "NORMAL"):
        raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    touch_private(path)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={synchronous}")
    db.execute("PRAGMA busy_timeout=5000")
    return db
