"""Members' last views on the lead's disk (crew.md §2): `<state>/crew-views/<label>.json`, one file a member.

The last views a member sent survive a lead restart: its agents show offline, and sends to them wait in
the inbox instead of finding no agent. A file is one JSON object, agent name → the view as the member
sent it; it is written whole (temp → fsync → rename, 0600, in a private folder), so a crash leaves the
old file or the new one. A missing or unreadable file is no views. These functions block: the hub runs
the writes in a worker thread.
"""

from __future__ import annotations

import json
from pathlib import Path

from collie.crew.fsutil import atomic_write, ensure_private_dir


def views_path(views_dir: Path, label: str) -> Path:
    return views_dir / f"{label}.json"


def read_views(path: Path) -> list | None:
    """The views a member's file holds, as raw views; None when there is no file or it is not JSON."""
    try:
        saved = json.loads(path.read_text())
    except (FileNotFoundError, ValueError, RecursionError):
        return None
    return [raw for raw in saved.values()] if isinstance(saved, dict) else []


def write_views(views_dir: Path, batch: dict[str, dict[str, str]]) -> None:
    """Write each member's views file (label → agent → the view as JSON text)."""
    # the views are JSON text already: joining them costs a copy, not a 10 MB json.dumps under the GIL
    ensure_private_dir(views_dir)
    for label, views in batch.items():
        data = "{" + ",".join(f"{json.dumps(name)}:{text}" for name, text in views.items()) + "}"
        atomic_write(views_path(views_dir, label), data.encode(), mode=0o600)


def remove_views(views_dir: Path, label: str) -> None:
    views_path(views_dir, label).unlink(missing_ok=True)
