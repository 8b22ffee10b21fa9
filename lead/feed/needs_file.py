"""When the lead first saw each open ask, on disk, so an ask's age survives a lead restart (issue 36.6).

`<state>/asks-seen.json` (0600, replaced atomically): `{"version": 1, "asks": [[machine, agent, ask id,
first seen], …]}`, the first-seen time in wall-clock seconds. The live channel (collie.lead.feed.events.Feed) writes it
at most once a second while its Needs you list changes, and once more when the lead shuts down. The file
is untrusted on reading: a broken or foreign one is ignored (the asks' ages then start from now), a row
that does not fit is skipped, and at most MAX_KEPT rows are read.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from collie.crew import logs
from collie.crew.fsutil import atomic_write

log = logs.get("events")

NAME = "asks-seen.json"
MAX_KEPT = 100_000  # asks: far above what a crew has open (100 agents a machine)
TEXT_MAX = 1000  # characters of a machine, agent or ask id


def _fits(row) -> bool:
    return (isinstance(row, list) and len(row) == 4 and all(isinstance(x, str) and 0 < len(x) <= TEXT_MAX
                                                           for x in row[:3])
            and isinstance(row[3], (int, float)) and not isinstance(row[3], bool) and math.isfinite(row[3])
            and row[3] > 0)


def read_seen(path: Path) -> dict[tuple[str, str, str], float]:
    """{(machine, agent, ask id): first seen}, or {} when there is no usable file."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        log.warning("[bridge] %s is unreadable (%s): the asks' ages start from now", path, type(exc).__name__)
        return {}
    rows = data.get("asks") if isinstance(data, dict) and data.get("version") == 1 else None
    if not isinstance(rows, list):
        return {}
    return {(r[0], r[1], r[2]): float(r[3]) for r in rows[:MAX_KEPT] if _fits(r)}


def write_seen(path: Path, seen: dict[tuple[str, str, str], float]) -> None:
    rows = [[m, a, k, t] for (m, a, k), t in sorted(seen.items(), key=lambda e: e[1])[-MAX_KEPT:]]
    atomic_write(path, json.dumps({"version": 1, "asks": rows}, separators=(",", ":")).encode())
