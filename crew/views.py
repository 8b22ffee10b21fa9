"""What the bridge knows of each agent, in the shape the CLI, the doctor and (later) the lead read.

Status is ``starting | ready | unreachable | version_mismatch`` (features D1), with a reason code
when not ready (crew.md §2): ``config``, ``socket-not-private``, ``connection-refused``, ``timeout``,
``unauthorized``, ``version``, ``bad-url``, ``insecure-url``, ``weak-token`` …, and a `detail` text
saying what to do.
"""

from __future__ import annotations

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
