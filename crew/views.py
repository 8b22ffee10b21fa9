"""What the bridge knows of each agent, in the shape the CLI, the doctor and (later) the lead read.

Status is ``starting | ready | unreachable | version_mismatch`` (features D1), with a reason code
when not ready (crew.md §2): ``config``, ``socket-not-private``, ``connection-refused``, ``timeout``,
``unauthorized``, ``version``, ``bad-url``, ``insecure-url``, ``weak-token`` …, and a `detail` text
saying what to do.
"""

from __future__ import annotations

import datetime as dt

import attrs

STARTING = "starting"
READY = "ready"
UNREACHABLE = "unreachable"
VERSION_MISMATCH = "version_mismatch"

STATUS_LABEL = {
    STARTING: "Starting",
    READY: "Ready",
    UNREACHABLE: "Unreachable",
    VERSION_MISMATCH: "Version mismatch",
}


@attrs.frozen
class AgentStatus:
    name: str
    transport: str  # socket | url | none
    address: str
    local: bool
    status: str = STARTING
    reason: str | None = None
    detail: str | None = None
    runtime: str | None = None
    open_count: int = 0
    waiting_count: int = 0
    token_set: bool = False
    origin: str = "sources.json"
    wire: str | None = None  # the agent's range, e.g. "1..1"
    caps: list[str] = attrs.Factory(list)
    subtitle: str | None = None
    instance: str | None = None
    # No "last good answer" time here: it moved at every idle read, so each one counted as a change
    # of the agent (the live channel's pass, the inbox, and a whole view frame over the crew link,
    # rebuilt by the lead) — every 30 s per idle agent (issue 16, idle CPU). The reader keeps it.


def keep_conversations(raws: list, limit: int) -> tuple[list, int]:
    """A view cut to at most `limit` open conversations keeps the ones that matter (crew.md §6): waiting for
    the user, then working, then by latest `activity` (an agent lists its newest last, so among equals the
    later listed win); those kept stay in the agent's own order. Returns (kept, how many were left out).
    `raws` are the agent's raw conversation documents (untrusted: any shape)."""
    if len(raws) <= limit:
        return raws, 0

    def rank(pair: tuple[int, object]) -> tuple:
        index, raw = pair
        conv = raw if isinstance(raw, dict) else {}
        asks = conv.get("asks")
        if conv.get("state") == "waiting" or (isinstance(asks, list) and asks):
            group = 0
        elif conv.get("state") == "working":
            group = 1
        else:
            group = 2
        return (group, -_activity(conv.get("activity")), -index)

    chosen = sorted(sorted(enumerate(raws), key=rank)[:limit])
    return [raw for _, raw in chosen], len(raws) - limit


def _activity(value: object) -> float:
    """An RFC 3339 `activity` time as seconds (0 when missing or not a time)."""
    if not isinstance(value, str) or len(value) > 40:
        return 0.0
    try:
        when = dt.datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    try:
        return when.timestamp()
    except (OverflowError, OSError, ValueError):
        return 0.0
