"""The live channel's decisions, with no trio and no I/O (issue 30): the numbered events a phone
receives and the log a reconnecting phone resumes from (`Last-Event-ID`).

Every event has an id `<boot>-<n>` and is encoded once, whatever the number of phones. `EventLog.since`
gives every event after an id, or None when it cannot give them all (the lead restarted, the log no
longer reaches back that far, a bad id): the phone then gets a fresh snapshot, so nothing is lost.
"""

from __future__ import annotations

import json
import secrets
from collections import deque

import attrs

LOCAL = "local"
KEEP = 4096  # events kept for resumption
QUEUE = 512  # events waiting for one slow phone before it gets a snapshot instead
MAX_CHANNELS = 200
PER_DEVICE = 16  # a phone's own channels: one more ends its oldest (a client that abandons streams)
BATCH = 64  # events already queued for a channel go out in one write (one chunk, one TLS record)
HEARTBEAT = 15.0
SEND_STALL = 60.0  # a write of the channel the phone takes nothing of for this long ends the channel (lead.http)
LEASE = 60.0  # `POST …/viewing {"on": true}` keeps an agent viewed this long unless renewed
COALESCE = 0.02  # after the first change is sent at once, at most one pass per 20 ms
READ_TIMEOUT = 5.0
VIEW_READS = 3  # a view's first pane and items are read again at most this often while changes race them
ITEMS_WAIT = 0.5  # how long a viewed conversation's refresh waits for the bridge to read the items that moved
MEMBER_ITEM_RETRIES = (0.005, 0.01, 0.02, 0.04)  # a member's items read again after these pauses (see _changed_items)
ITEM_PAGES = 10  # pages of changed items a viewed conversation's change reads at most (the rest at the next)


@attrs.frozen
class Event:
    id: str
    seq: int
    kind: str
    data: dict
    scope: tuple | None = None  # None: every channel; ("conv", machine, agent, conversation): its viewers
    wire: bytes = attrs.field(default=b"", repr=False, eq=False)  # encoded once, whatever the number of phones

    def encode(self) -> bytes:
        if self.wire:
            return self.wire
        body = json.dumps(self.data, separators=(",", ":"), ensure_ascii=False)
        return f"id: {self.id}\nevent: {self.kind}\ndata: {body}\n\n".encode()


class EventLog:
    """Numbered events, the last `keep` of them kept so that a reconnecting phone misses nothing."""

    def __init__(self, boot: str | None = None, keep: int = KEEP) -> None:
        self.boot = boot or secrets.token_hex(4)
        self.seq = 0
        self.kept: deque[Event] = deque(maxlen=keep)

    def append(self, kind: str, data: dict, scope: tuple | None = None) -> Event:
        self.seq += 1
        ev = Event(f"{self.boot}-{self.seq}", self.seq, kind, data, scope)
        ev = attrs.evolve(ev, wire=ev.encode())
        self.kept.append(ev)
        return ev

    def since(self, last_id: str | None) -> list[Event] | None:
        """The events after `last_id`, or None when they cannot all be given (restart, too old, bad id)."""
        if not last_id:
            return None
        boot, _, n = last_id.rpartition("-")
        if boot != self.boot or not n.isdigit():
            return None
        seq = int(n)
        if seq > self.seq:
            return None
        if seq == self.seq:
            return []
        if not self.kept or self.kept[0].seq > seq + 1:
            return None
        return [e for e in self.kept if e.seq > seq]


def diff_rows(before: dict, after: dict) -> tuple[list, list]:
    """(changed or new keys, removed keys) between two {key: row} maps."""
    changed = [k for k, v in after.items() if before.get(k) != v]
    removed = [k for k in before if k not in after]
    return changed, removed
