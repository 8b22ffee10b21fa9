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

from collie.bridge.reader import PAGE_LIMIT

LOCAL = "local"
KEEP = 4096  # events kept for resumption
QUEUE = 512  # events waiting for one slow phone before it gets a snapshot instead
MAX_CHANNELS = 200
PER_DEVICE = 16  # a phone's own channels: one more ends its oldest (a client that abandons streams)
BATCH = 64  # events already queued for a channel go out in one write (one chunk, one TLS record)
HEARTBEAT = 25.0  # issue 39: an idle visible page gets at most 144 small writes an hour (proxies keep 30 s+)
HEARTBEAT_ACTIVE = 2.0  # issue 36: while the user is using the page (it says so), a `beat` after 2 s without an event
SEND_STALL = 60.0  # a write of the channel the phone takes nothing of for this long ends the channel (collie.lead.door.http)
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


# --- who gets what, and who is viewed -------------------------------------------------------------------
def agent_key(view: tuple | None) -> tuple | None:
    """The (machine, agent) a view keeps on fast polling (W5), or None on the dashboard."""
    return (view[0], view[1]) if view else None


def conv_key(view: tuple | None) -> tuple | None:
    """The scope of the events of the conversation a view shows, or None when it shows none."""
    return ("conv", *view) if view and view[2] else None


def for_viewer(ev: Event, key: tuple | None) -> bool:
    """An event without a scope goes to every channel; a conversation's only to the channels viewing it."""
    return ev.scope is None or ev.scope == key


def replay(missed: list[Event], key: tuple | None) -> list[Event]:
    """What a channel reconnecting with `Last-Event-ID` gets of the events it missed: the same as it
    would have got live (its pane and items come fresh after them)."""
    return [ev for ev in missed if for_viewer(ev, key)]


def view_change(old: tuple | None, new: tuple | None) -> list[tuple[tuple, bool]]:
    """W5: the viewing switches a channel's change of view makes, in order: the new agent on first, then
    the old one off (an agent of both views never drops to slow polling between)."""
    before, after = agent_key(old), agent_key(new)
    if before == after:
        return []
    return [(key, on) for key, on in ((after, True), (before, False)) if key is not None]


def admit(device: str | None, mine_closed: list[bool], total: int) -> tuple[int | None, str | None]:
    """Issue 11: may one more channel open for `device` (None: the local credential, not capped per
    phone), given whether each of its channels (oldest first) was ended, and how many are open in all?
    Gives (the index of its channel to end first, or None; the refusal, or None). A phone keeps at most
    PER_DEVICE channels: one more ends its oldest still open; while its ended ones do not finish either it
    alone is refused at 2 x PER_DEVICE. Nobody gets more than MAX_CHANNELS in all."""
    end = None
    if device is not None:
        if len(mine_closed) >= 2 * PER_DEVICE:
            return None, f"this phone has {len(mine_closed)} live channels open already"
        still = [i for i, closed in enumerate(mine_closed) if not closed]
        if len(still) >= PER_DEVICE:
            end = still[0]
    if total >= MAX_CHANNELS:
        return end, f"{MAX_CHANNELS} live channels are open already"
    return end, None


class Leases:
    """W5: `POST …/viewing {"on": true}` keeps an agent viewed for `length` seconds from its last repeat,
    so a script or phone that disappears never keeps it on 2-second polling; `on: false` ends it at once.
    Each change says whether the agent's viewing starts (True), ends (False) or stays as it was (None)."""

    def __init__(self, length: float = LEASE) -> None:
        self.length = length
        self.until: dict[tuple, float] = {}

    def set(self, key: tuple, on: bool, now: float) -> bool | None:
        had = key in self.until
        if on:
            self.until[key] = now + self.length
            return None if had else True
        if had:
            del self.until[key]
            return False
        return None

    def expired(self, now: float) -> list[tuple]:
        """The leases that ran out by `now`, forgotten: each agent's viewing ends."""
        gone = [key for key, until in self.until.items() if until <= now]
        for key in gone:
            del self.until[key]
        return gone


# --- what each event carries ------------------------------------------------------------------------------
def row_event(key: tuple, row: dict | None) -> tuple:
    """One agent's dashboard row (None: the agent is gone)."""
    return "row", {"machine": key[0], "agent": key[1], "row": row}, None


def sections_event(heads: list[dict]) -> tuple:
    return "sections", {"sections": heads}, None


def needs_event(asks: list[dict], unreachable: list[dict] | None = None) -> tuple:
    """The whole Needs you list, as `GET /api/needs` has it: the asks waiting for you, and apart the open
    asks of agents that cannot be answered through now (collie.lead.feed.needs)."""
    return "needs", {"asks": asks} | ({"unreachable": unreachable} if unreachable is not None else {}), None


def inbox_event(view: dict) -> tuple:
    return "inbox", {"item": view}, None


def pane_event(key: tuple, pane: dict | None) -> tuple:
    _, machine, agent, conv = key
    return "pane", {"machine": machine, "agent": agent, "conversation": conv, "pane": pane}, key


def items_event(key: tuple, items: list[dict], full: bool, earlier: int | None = None) -> tuple:
    """A conversation's items: its newest page (`full`, after a full read: what the phone held is replaced;
    `earlier`, when given, is the `before` of the page above it), or the ones that changed."""
    _, machine, agent, conv = key
    data = {"machine": machine, "agent": agent, "conversation": conv, "items": items, "full": full}
    if full and earlier is not None:
        data["earlier"] = earlier
    return "items", data, key


def snapshot_data(sections: list[dict] | None, asks: list[dict], view: tuple | None, pane: dict | None = None,
                  items: list[dict] | dict | None = None, *, unreachable: list[dict] | None = None) -> dict:
    """What a fresh channel's `snapshot` carries: the dashboard (None: the phone has it already, issue 39),
    the Needs you list (and apart the asks that cannot be answered now) and what it views; for a
    conversation, its pane and its items — a page as `ConversationReads.items_of` gives it (the newest page,
    or only what changed: `items_full` false)."""
    data: dict = {"dashboard": None if sections is None else {"sections": sections}, "view": None, "needs": asks}
    if unreachable is not None:
        data["needs_unreachable"] = unreachable
    if view:
        machine, agent, conv = view
        data["view"] = {"machine": machine, "agent": agent, "conversation": conv}
        if conv:
            page = items if isinstance(items, dict) else {"items": items or [], "full": True}
            data["pane"], data["items"] = pane, page["items"]
            if not page["full"]:
                data["items_full"] = False
            elif page.get("earlier") is not None:
                data["earlier"] = page["earlier"]
    return data


def hello(channel: str) -> bytes:
    return f"retry: 2000\nevent: hello\ndata: {{\"channel\":\"{channel}\"}}\n\n".encode()


def snapshot_bytes(last_id: str, data: dict, dashboard: str | None = None) -> bytes:
    """The `snapshot` event; `dashboard`, when given, is the dashboard's JSON text as `GET /api/dashboard`
    has it (encoded once there), put in as data's `dashboard`."""
    body = json.dumps(data, separators=(',', ':'))
    if dashboard is not None:
        rest = json.dumps({k: v for k, v in data.items() if k != "dashboard"}, separators=(',', ':'))
        body = '{"dashboard":' + dashboard + ("," + rest[1:] if rest != "{}" else "}")
    return f"id: {last_id}\nevent: snapshot\ndata: {body}\n\n".encode()


PING = b"event: beat\ndata: {}\n\n"  # no id: a resume is not moved by it
UNAUTHORIZED = b"event: unauthorized\ndata: {\"error\":\"unauthorized\",\"message\":\"this phone was revoked\"}\n\n"


# --- what changed, and what was sent -------------------------------------------------------------------
class FeedState:
    """What the phones were last sent, and what changed since: the plain half of `collie.lead.feed.events.Feed`.

    Changes coalesce: however often an agent is touched between two passes, the next pass reads it once
    (`take`), and an inbox item that changed many times is sent once, as it is then (`take_inbox`). An
    event goes out only when what it carries differs from what was last sent: an unchanged row, sections
    list or pane sends nothing. What was kept of a conversation nobody views any more is dropped
    (`forget`), so a phone that opens it again gets a full read, never changes against an old one.
    """

    def __init__(self) -> None:
        self.rows: dict[tuple, dict] = {}  # (machine, agent) -> the row last sent
        self.heads: list[dict] = []
        self.panes: dict[tuple, dict] = {}  # ("conv", m, a, c) -> last pane sent
        self.item_since: dict[tuple, int] = {}  # ("conv", m, a, c) -> the item revision sent up to
        self.published: dict[tuple, int] = {}  # ("conv", m, a, c) -> events published on it so far
        self.recent: dict[tuple, list] = {}  # ("conv", m, a, c) -> a member's recent-send lines last read
        self.dirty: set[tuple] = set()  # (machine, agent) or (machine, None) for a whole member
        self.everything = True
        self.inbox: dict = {}  # inbox item id -> the item, changed since the last pass

    def touch(self, machine: str, agent: str | None) -> None:
        self.dirty.add((machine, agent))

    def touch_all(self) -> None:
        self.everything = True

    def inbox_changed(self, item) -> None:
        self.inbox[item.id] = item

    def take_inbox(self) -> list:
        items, self.inbox = list(self.inbox.values()), {}
        return items

    def take(self) -> tuple[set, bool]:
        """What changed since the last pass (the agents touched; whether everything is to be read again)."""
        dirty, self.dirty = self.dirty, set()
        everything, self.everything = self.everything, False
        return dirty, everything

    def kept_rows(self, dirty: set) -> dict:
        """The rows last sent of the agents touched (of every agent of a machine touched whole)."""
        before = {}
        for machine, agent in dirty:
            for key, row in self.rows.items():
                if key[0] == machine and (agent is None or key[1] == agent):
                    before[key] = row
        return before

    def rows_changed(self, before: dict, fresh: dict) -> list[tuple]:
        """A `row` event for each row new or changed between `before` and `fresh`, then for each gone."""
        changed, removed = diff_rows(before, fresh)
        out = []
        for key in changed:
            self.rows[key] = fresh[key]
            out.append(row_event(key, fresh[key]))
        for key in removed:
            self.rows.pop(key, None)
            out.append(row_event(key, None))
        return out

    def heads_changed(self, heads: list[dict]) -> list[tuple]:
        if heads == self.heads:
            return []
        self.heads = heads
        return [sections_event(heads)]

    def pane_changed(self, key: tuple, pane: dict | None) -> list[tuple]:
        if pane == self.panes.get(key):
            return []
        self.panes[key] = pane
        return [pane_event(key, pane)]

    def published_on(self, scope: tuple | None) -> None:
        if scope is not None:
            self.published[scope] = self.published.get(scope, 0) + 1

    @staticmethod
    def to_read(viewed: set, dirty: set, everything: bool) -> list[tuple]:
        """The viewed conversations whose agent changed: only these are read again."""
        return [key for key in viewed if everything or (key[1], key[2]) in dirty or (key[1], None) in dirty]

    def forget(self, viewed: set) -> None:
        for key in [k for k in self.panes if k not in viewed]:
            self.panes.pop(key, None)
            self.item_since.pop(key, None)
            self.published.pop(key, None)
        for key in [k for k in self.recent if k not in viewed]:
            del self.recent[key]


# --- a viewed conversation's items ---------------------------------------------------------------------
def item_revs(items: list) -> list[int]:
    """The revisions of the items a member sent (dicts with an integer `rev`; gaps are not items)."""
    return [i["rev"] for i in items if isinstance(i, dict) and isinstance(i.get("rev"), int) and i.get("kind") != "gap"]


def asks_ended(items: list[dict]) -> bool:
    """R3: whether an ask was decided or expired among these items (only then is it worth asking the
    journal which ended asks the phone tapped)."""
    return any(i.get("kind") == "ask" and i.get("end") in ("decided", "expired") for i in items)


class MemberItems:
    """Issue 29: a member's changed items, read page by page from the revision sent up to (`since`).

    A full page is followed by the next at once. The member sends an agent's view as soon as it read the
    state and reads the items right after, so a read that brings nothing new while the view says the
    conversation reached `target` is tried again after each pause of MEMBER_ITEM_RETRIES, then left to
    the next change. At most ITEM_PAGES pages plus those retries; a read with no answer ends it."""

    def __init__(self, since: int, target: int) -> None:
        self.since, self.target = since, target
        self.items: list[dict] = []
        self.retries = list(MEMBER_ITEM_RETRIES)
        self.reads_left = ITEM_PAGES + len(self.retries)

    def took(self, got: dict | None) -> float | None:
        """One read's answer (None: none came): the pause before the next read (0: at once), or None
        when the reading is done."""
        self.reads_left -= 1
        if got is None:
            return None
        page = [i for i in got.get("items") or [] if isinstance(i, dict)]
        self.items += page
        revs = item_revs(page)
        if revs and max(revs) > self.since:
            self.since = max(revs)
            return 0.0 if len(revs) >= PAGE_LIMIT else None
        if self.since >= self.target or not self.retries:  # nothing new: the member may not have read it yet
            return None
        return self.retries.pop(0)
