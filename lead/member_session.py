"""One member as the lead knows it (crew.md §2): its agents' readers, its link, its version and last contact.

No trio and no I/O here: what a member's frames change is decided from this state and the time passed in.
"""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

import attrs

from bridge.reader import AgentReader

if TYPE_CHECKING:
    from lead.crew_link import Conn


def hhmm(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall).strftime("%H:%M")


@attrs.define
class Member:
    label: str
    readers: dict[str, AgentReader] = attrs.Factory(dict)
    conn: Conn | None = None
    version: str | None = None
    read_only: bool = False
    offline_since: float | None = None  # wall clock of the last frame, once offline
    last_seen: float | None = None  # wall clock
    rows: dict = attrs.Factory(dict)  # the dashboard's row of each agent, kept by lead.events

    @property
    def online(self) -> bool:
        return self.conn is not None
