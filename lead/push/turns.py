"""Turn-end pushes, the adapter (issue 37; docs/push.md "When a turn ends"): it feeds `collie.lead.push.turn_ends.TurnEnds`
what the readers show, reads the items of a turn that ended, keeps each phone's settings, and sends through
`collie.lead.push.pusher.Pusher` what the core decided. The decisions are the core's; this module reads, waits and writes.

- **Settings** are each phone's (its paired device; "" is the local credential): "every conversation" and
  an on/off for single conversations (which wins over it), in `<state>/push/push.sqlite` (`turn_prefs`),
  at most `CONVERSATIONS_MAX` conversations a phone (the oldest setting goes). Turning one on needs a push
  subscription of that phone. Revoking the phone drops them.
- **Who gets it**: the phones whose setting is on for that conversation, less the one whose Stop ended the
  turn (the lead routes every Stop: `stopping`/`stop_answered`), less a phone whose live channel views that
  conversation with the page visible (the page says so on `visibilitychange`; no channel, or a hidden page,
  is not viewing).
- **Once per turn**: `(machine, agent, "turn:<conversation>:<turn>")` joins the asks' memory (`pushed`, 30
  days) in the same commit as the core's windows, before anything is sent; a turn seen ending again after a
  restart (a member's stale view replaced) finds it there and sends nothing.
- **The turn's words** come from its items: the lead's own agents' from the bridge (waiting, at most
  `ITEMS_WAIT`, for the items its state announced), a member's read from the member (a few pages, retried
  while its `turn_end` item is not there yet). Without them the push still goes, with no line.
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections import OrderedDict, deque

import trio

from collie.crew import logs
from collie.crew.views import READY
from collie.lead.push.pusher import REMEMBER, REMEMBER_PER_MACHINE, ViewWatcher
from collie.lead.push.turn_ends import Ended, Push, Seen, Tick, TurnEnds, turn_payload, turn_text

log = logs.get("push")

CONVERSATIONS_MAX = 1000  # conversations with their own setting, per phone
STOPS_MAX = 1000  # Stops remembered (by turn) until their turn's end is seen
ITEMS_WAIT = 5.0  # how long a turn's items are waited for
MEMBER_PAGES = 10
MEMBER_RETRIES = (0.5, 1.0, 2.0)
READ_TIMEOUT = 12.0
ALL = ("", "", "")  # the "every conversation" setting's key

SCHEMA = """
CREATE TABLE IF NOT EXISTS turn_prefs (device TEXT NOT NULL, machine TEXT NOT NULL, agent TEXT NOT NULL,
    conversation TEXT NOT NULL, on_ INTEGER NOT NULL, at REAL NOT NULL, PRIMARY KEY (device, machine, agent, conversation));
CREATE TABLE IF NOT EXISTS turn_state (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL);
"""


def device_key(device: str | None) -> str:
    return device or ""


class TurnPusher(ViewWatcher):
    def __init__(self, pusher, feed, *, wall=time.time) -> None:
        super().__init__(pusher.bridge, pusher.hub)
        self.pusher, self.feed = pusher, feed
        self.wall = wall
        self.db = pusher.store.db
        self.db.executescript(SCHEMA)
        self.prefs: dict[str, dict[tuple, bool]] = {}
        for device, m, a, c, on in self.db.execute(
                "SELECT device, machine, agent, conversation, on_ FROM turn_prefs ORDER BY at, rowid"):
            self.prefs.setdefault(device, {})[(m, a, c)] = bool(on)
        row = self.db.execute("SELECT state FROM turn_state WHERE id=1").fetchone()
        self.core = TurnEnds(pusher.limiter, json.loads(row[0]) if row else None)
        self.stops: OrderedDict[tuple, str] = OrderedDict()
        self.stats = {"turn_pushed": 0, "turn_folded": 0, "fold_pushed": 0}
        self.sent_log: deque = deque(maxlen=100)  # (when, payload title, devices) for tests and doctor

    # --- settings ---------------------------------------------------------------------------------
    def subscribed(self, device: str) -> bool:
        return any(device_key(s.device) == device for s in self.pusher.store.subs.values())

    def settings(self, device: str) -> dict:
        mine = self.prefs.get(device, {})
        return {"subscribed": self.subscribed(device), "all": mine.get(ALL, False),
                "conversations": [{"machine": m, "agent": a, "conversation": c, "on": on}
                                  for (m, a, c), on in mine.items() if (m, a, c) != ALL]}

    def set(self, device: str, key: tuple, on: bool) -> None:
        """Keep one setting (`ALL`, or a conversation's), in memory and on disk (call in a worker thread)."""
        mine = self.prefs.setdefault(device, {})
        mine.pop(key, None)
        mine[key] = on  # the newest last: the oldest conversation's setting goes first
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute("INSERT OR REPLACE INTO turn_prefs VALUES (?, ?, ?, ?, ?, ?)",
                            (device, *key, int(on), self.wall()))
            extra = [k for k in mine if k != ALL][:-CONVERSATIONS_MAX] if len(mine) > CONVERSATIONS_MAX else []
            for k in extra:
                del mine[k]
                self.db.execute("DELETE FROM turn_prefs WHERE device=? AND machine=? AND agent=? AND conversation=?",
                                (device, *k))

    def drop_device(self, device: str) -> None:
        """A revoked phone's settings go with it."""
        self.prefs.pop(device_key(device), None)
        self.db.execute("DELETE FROM turn_prefs WHERE device=?", (device_key(device),))

    def wants(self, device: str, machine: str, agent: str, conv: str) -> bool:
        mine = self.prefs.get(device, {})
        on = mine.get((machine, agent, conv))
        return mine.get(ALL, False) if on is None else on

    def viewing(self, device: str, machine: str, agent: str, conv: str) -> bool:
        """The phone has this conversation open with its page visible (a live channel says so)."""
        return any(device_key(ch.device) == device and ch.view == (machine, agent, conv)
                   and getattr(ch, "visible", True) and not ch.closed.is_set()
                   for ch in list(self.feed.channels.values())) if self.feed is not None else False

    def recipients(self, machine: str, agent: str, conv: str, stopper: str | None) -> frozenset:
        phones = {device_key(s.device) for s in self.pusher.store.subs.values()}
        return frozenset(d for d in phones if d != stopper and self.wants(d, machine, agent, conv)
                         and not self.viewing(d, machine, agent, conv))

    # --- Stop, as the lead routes it ----------------------------------------------------------------
    def stopping(self, machine: str, agent: str, conv: str, turn, device: str | None) -> None:
        """A Stop for this turn is on its way from `device`: its end is not pushed to that phone."""
        if not isinstance(turn, int):
            return
        self.stops[(machine, agent, conv, turn)] = device_key(device)
        while len(self.stops) > STOPS_MAX:
            self.stops.popitem(last=False)

    def stop_answered(self, machine: str, agent: str, conv: str, turn, outcome: str | None) -> None:
        """A Stop refused did not end the turn: forget it."""
        if outcome == "refused" and isinstance(turn, int):
            self.stops.pop((machine, agent, conv, turn), None)

    # --- the loop ------------------------------------------------------------------------------------
    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start with `nursery.start`, after `Pusher.run` (its client sends): every machine looked at once when it
        returns. A turn end seen is judged, and its push sent, in a task of its own."""
        async with trio.open_nursery() as tasks:
            self._started(task_status)
            while True:
                due = self.core.next_due()
                await self._woken(math.inf if due is None else max(0.0, due - self.wall()))
                try:
                    await self._pass(tasks)
                except Exception:  # one odd view must not stop turn-end pushes for the others
                    log.exception("[bridge] turn-end push: a pass failed")

    async def _pass(self, tasks) -> None:
        """One look at the views changed (`tasks`: where each turn end seen, and each push, is started)."""
        now = self.wall()
        folds = self.core.handle(Tick(), now)
        if folds:
            await self._save(None, now)
            self._send(tasks, folds, "fold_pushed")
        dirty, self.dirty = self.dirty, set()
        for machine, agent in dirty:
            for reader in self._readers(machine, agent):
                if getattr(reader, "status", READY) != READY:
                    continue  # its last view is kept, not an empty one: a turn that ends meanwhile is seen after
                convs = tuple((c.id, c.state, c.turn, c.items_rev) for c in list(reader.conversations.values()))
                for look in self.core.handle(Seen(machine, reader.name, convs), now):
                    tasks.start_soon(self._ended, tasks, look)

    async def _save(self, key: tuple | None, now: float) -> bool:
        """Keep the core's windows (and `key`, a turn end seen, in the same commit); False when `key` was kept
        before: that turn's end was judged already."""
        state = json.dumps(self.core.state(now))

        def write() -> bool:
            with self.db:
                self.db.execute("BEGIN IMMEDIATE")
                first = True
                if key is not None:
                    first = self.db.execute("INSERT OR IGNORE INTO pushed VALUES (?, ?, ?, ?)", (*key, now)).rowcount == 1
                    # the asks' bounds hold for turn ends too: 30 days, at most REMEMBER_PER_MACHINE a machine
                    self.db.execute("DELETE FROM pushed WHERE at < ?", (now - REMEMBER,))
                    (count,) = self.db.execute("SELECT count(*) FROM pushed WHERE machine=?", (key[0],)).fetchone()
                    if count > REMEMBER_PER_MACHINE:
                        self.db.execute("DELETE FROM pushed WHERE rowid IN (SELECT rowid FROM pushed WHERE machine=? "
                                        "ORDER BY at, rowid LIMIT ?)", (key[0], count - REMEMBER_PER_MACHINE))
                self.db.execute("INSERT OR REPLACE INTO turn_state VALUES (1, ?)", (state,))
            return first
        return await trio.to_thread.run_sync(write, limiter=self.pusher.limiter_disk)

    async def _seen_before(self, key: tuple) -> bool:
        def read() -> bool:
            return self.db.execute("SELECT 1 FROM pushed WHERE machine=? AND agent=? AND key=?", key).fetchone() is not None
        return await trio.to_thread.run_sync(read, limiter=self.pusher.limiter_disk)

    async def _ended(self, tasks, look) -> None:
        machine, agent, conv, turn = look.machine, look.agent, look.conversation, look.turn
        key = (machine, agent, f"turn:{conv}:{turn}")
        try:
            if await self._seen_before(key):
                return
            stopper = self.stops.pop((machine, agent, conv, turn), None)
            wanted = self.recipients(machine, agent, conv, stopper)
            items = await self._items(look) if wanted else []
            how, line = turn_text(items, turn, stopper)
            reader = next(iter(self._readers(machine, agent)), None)
            view = reader.conversations.get(conv) if reader is not None else None
            payload = turn_payload(machine=machine, agent=agent, conversation=conv, turn=turn,
                                   pane=view.title if view is not None else None, how=how, line=line,
                                   redact_on=self.pusher.redact_on)
            now = self.wall()
            devices = self.recipients(machine, agent, conv, stopper)  # as of now: a phone may have looked meanwhile
            pushes = self.core.handle(Ended(machine, agent, conv, payload, devices), now)
            if not await self._save(key, now):
                return
            if devices and not pushes:
                self.stats["turn_folded"] += 1
            self._send(tasks, pushes, "turn_pushed")
        except Exception:
            log.exception("[bridge] turn-end push for %s/%s failed", machine, agent)

    def _send(self, tasks, pushes: list, stat: str) -> None:
        for push in pushes:
            if not isinstance(push, Push):
                continue
            self.stats[stat] += 1
            self.sent_log.append((self.wall(), push.payload["title"], sorted(push.devices)))
            body = json.dumps(push.payload, separators=(",", ":")).encode()
            # RFC 8030 Topic: a push service still holding this conversation's (or fold's) earlier push replaces it
            topic = hashlib.sha256(push.payload["tag"].encode()).hexdigest()[:32]
            for sub in list(self.pusher.store.subs.values()):
                if device_key(sub.device) in push.devices:
                    tasks.start_soon(self.pusher.deliver, sub, body, "high", topic)

    # --- a turn's items ---------------------------------------------------------------------------------
    async def _items(self, look) -> list[dict]:
        if look.machine == "local":
            return await self._local_items(look)
        return await self._member_items(look)

    async def _local_items(self, look) -> list[dict]:
        with trio.move_on_after(ITEMS_WAIT):
            while True:
                reader = self.bridge.readers.get(look.agent)
                c = reader.conversations.get(look.conversation) if reader is not None else None
                log_ = reader.logs.get(look.conversation) if reader is not None else None
                if c is None or (log_ is not None and log_.since >= c.items_rev):
                    break
                await self.bridge.wait_changed()
        reader = self.bridge.readers.get(look.agent)
        log_ = reader.logs.get(look.conversation) if reader is not None else None
        return [i for i in log_.items.values() if i.get("turn") == look.turn] if log_ is not None else []

    async def _member_items(self, look) -> list[dict]:
        since, out, retries = look.since, [], list(MEMBER_RETRIES)
        for _ in range(MEMBER_PAGES + len(MEMBER_RETRIES)):
            got = None
            with trio.move_on_after(READ_TIMEOUT):
                got = await self.hub.read(look.machine, look.agent, "items",
                                          {"conversation": look.conversation, "since": since})
            if got is None:
                break
            page = [i for i in got.get("items") or [] if isinstance(i, dict)]
            out += page
            revs = [i["rev"] for i in page if isinstance(i.get("rev"), int)]
            if any(i.get("kind") == "turn_end" and i.get("turn") == look.turn for i in out):
                break
            if revs and max(revs) > since:
                since = max(revs)
                continue
            if not retries:
                break
            await trio.sleep(retries.pop(0))  # the member may not have read that turn's items yet
        return [i for i in out if i.get("turn") == look.turn]
