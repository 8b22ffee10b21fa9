"""How the inbox paces its tries and its loop (issues 16, 32; crew.md §3, §4), with no I/O: the trio clock is
passed in as `clock`.

Guarantees:
- Nothing spins. An item answered "not now" (a `HOLD` refusal: an open ask, a moved turn, a busy session)
  waits 1, 2, 4 … HOLD_MAX s before its next try and keeps its place; a change of what it waits on (its
  `signature`: the conversation's turn, state and asks as the lead sees them) ends the wait early. A send
  waiting on the lead's own lock is not paused: it goes the moment the lock is let go.
- An inbox whose dispatch reached nothing (the agent down or restarting, the disk full, the machine
  offline) pauses as a whole for 1, 2, 4 … PAUSE_MAX s; an interrupted item (no receipt yet, or `unknown`)
  is resumed as it was recorded after RETRY_MIN, 2, 4 … RETRY_MAX s.
- A send the lead could quote no turn for, answered `turn_moved` UNKNOWN_TURN_TRIES times in a row, ends
  `failed` with that true refusal (UNKNOWN_TURN): waiting cannot change it.
- One item logs at most ITEM_LINES lines at once, then one every ITEM_LINE_EVERY s; the line after a
  silence says how many were held (a held item once wrote 14,004 lines in 25 s).
"""

from __future__ import annotations

import attrs

from collie.crew.receipts import Reason
from collie.lead.inbox.core import (HOLD, HOLD_MAX, IDLE_TICK, ITEM_LINE_EVERY, ITEM_LINES, PAUSE_MAX, RETRY_MAX,
                                    RETRY_MIN, TICK, TRANSIENT, UNKNOWN_TURN, UNKNOWN_TURN_TRIES, Hold)
from collie.lead.inbox.item import Item


class Pacing:
    """The inbox's timers: items held after a "not now", inboxes paused, interrupted items' retries, and
    each item's log budget. Methods return what to do; the caller logs and wakes."""

    def __init__(self) -> None:
        self.retry_at: dict[str, tuple[float, float]] = {}  # item id -> (trio time, backoff)
        self.paused: dict[tuple[str, str], tuple[float, float]] = {}  # inbox -> (trio time, backoff): reached nothing
        self.held: dict[str, Hold] = {}  # item id -> its pause after a "not now" (issue 32)
        self.lines: dict[str, list] = {}  # item id -> [lines it may log now, trio time of the last refill, held]

    def finished(self, item_id: str) -> None:
        """The item ended: nothing of it is paced any more."""
        self.held.pop(item_id, None)
        self.lines.pop(item_id, None)

    # --- after a dispatch ---------------------------------------------------------------------
    def after(self, item: Item, req, rec, fields: dict, clock: float, *, locked: bool,
              signature) -> tuple[dict, tuple | None]:
        """A dispatch of `item` (the request `req`) answered the receipt `rec`, and InboxCore.settle chose
        `fields`: the fields to set, paced, and the line to log about it (a format and its arguments) or
        None. `locked`: the lead's own lock holds the item's conversation; `signature`: what it waits on."""
        line = None
        if fields.get("state") == "running" and (fields.get("runtime_ref") or {}).get("turn") is None:
            _, backoff = self.retry_at.get(item.id, (0.0, RETRY_MIN / 2))
            backoff = min(RETRY_MAX, backoff * 2)
            self.retry_at[item.id] = (clock + backoff, backoff)
        else:
            self.retry_at.pop(item.id, None)
        key = (item.machine, item.agent)
        if fields.get("state") == "approved" and rec.reason in (*TRANSIENT, Reason.MACHINE_OFFLINE):
            self.held.pop(item.id, None)
            line = ("%s waits: %s; trying again in %g s", item.id, rec.reason, self.pause(key, clock))
        else:
            self.paused.pop(key, None)
            if fields.get("state") == "approved" and rec.outcome == "refused" and rec.reason in HOLD:
                fields, line = self._hold(item, req, rec, fields, clock, locked=locked, signature=signature)
            elif fields.get("state") != "running" or (fields.get("runtime_ref") or {}).get("turn") is not None:
                self.held.pop(item.id, None)
            elif rec.outcome == "refused":  # a resumed request the lock held: resumed as it is, later
                line = ("%s waits: %s; resumed in %g s", item.id, rec.reason, self.retry_at[item.id][1])
        return fields, line

    def pause(self, key: tuple[str, str], clock: float) -> float:
        """The inbox `key` reached nothing (the agent down, the disk full): wait 1, 2, 4 … 10 s before its next try."""
        _, pause = self.paused.get(key, (0.0, RETRY_MIN / 2))
        pause = min(PAUSE_MAX, pause * 2)
        self.paused[key] = (clock + pause, pause)
        return pause

    def _hold(self, item: Item, req, rec, fields: dict, clock: float, *, locked: bool, signature):
        """An item answered "not now" waits 1, 2, 4 … HOLD_MAX s before its next try (or until what it
        waits for changes in the lead's view: the conversation's turn, state or asks). A `turn_moved`
        to a send that could quote no turn, UNKNOWN_TURN_TRIES times in a row, ends it (UNKNOWN_TURN)."""
        old = self.held.get(item.id)
        same = old is not None and old.reason == rec.reason
        backoff = min(HOLD_MAX, old.backoff * 2) if same else RETRY_MIN
        tries = old.tries + 1 if same else 1
        if rec.reason == Reason.TURN_MOVED and req.op == "send" and req.turn is None and tries >= UNKNOWN_TURN_TRIES:
            self.held.pop(item.id, None)
            receipt = {**attrs.asdict(rec), "message": UNKNOWN_TURN}
            return {"state": "failed", "reason": Reason.TURN_MOVED, "receipt": receipt, "runtime_ref": None}, None
        if rec.reason == Reason.BUSY and locked:  # the lead's own lock: it goes the moment that is let go
            self.held.pop(item.id, None)
            return fields, ("%s waits: another write holds the conversation", item.id)
        self.held[item.id] = Hold(clock + backoff, backoff, tries, rec.reason, signature)
        return fields, ("%s waits: %s; trying again in %g s", item.id, rec.reason, backoff)

    # --- what the tick may do now ----------------------------------------------------------------
    def retry_due(self, item_id: str, clock: float) -> bool:
        return self.retry_at.get(item_id, (0.0, 0.0))[0] <= clock

    def paused_now(self, key: tuple[str, str], clock: float) -> bool:
        return self.paused.get(key, (0.0,))[0] > clock

    def held_now(self, items, clock: float, signature_of) -> set[str]:
        """The ids of `items` still waiting out a pause (a change of what they wait on, `signature_of(item)`,
        ends the pause early)."""
        out = set()
        for item in items:
            hold = self.held.get(item.id)
            if hold is not None and hold.until > clock and hold.signature == signature_of(item):
                out.add(item.id)
        return out

    def timers(self, clock: float, by_id: dict, active) -> tuple[float | None, set]:
        """(the soonest pause's end, to wake at it; the inboxes whose pauses have ended, to look at).
        A held item's inbox is looked at once when its pause ends."""
        soonest, keys = None, set()
        for iid, hold in self.held.items():
            item = by_id.get(iid)
            if item is None:
                continue
            if hold.until <= clock and not hold.due:
                hold.due = True
                keys.add((item.machine, item.agent))
            elif hold.until > clock:
                soonest = hold.until if soonest is None else min(soonest, hold.until)
        for key, (until, _) in self.paused.items():
            if until > clock:
                soonest = until if soonest is None else min(soonest, until)
            elif key in active:
                keys.add(key)
        for iid, (until, _) in self.retry_at.items():
            item = by_id.get(iid)
            if until > clock:
                soonest = until if soonest is None else min(soonest, until)
            elif item is not None:
                keys.add((item.machine, item.agent))
        return soonest, keys

    # --- the log budget ---------------------------------------------------------------------------
    def line(self, item_id: str, clock: float) -> int | None:
        """May the item log a line now? None: hold it; else how many lines were held before it."""
        budget = self.lines.setdefault(item_id, [float(ITEM_LINES), clock, 0])
        budget[0] = min(float(ITEM_LINES), budget[0] + (clock - budget[1]) / ITEM_LINE_EVERY)
        budget[1] = clock
        if budget[0] < 1.0:
            budget[2] += 1
            return None
        budget[0] -= 1.0
        held, budget[2] = budget[2], 0
        return held


class Looks:
    """Which inboxes the next tick looks at, and how long the loop rests before it (issue 16: idle CPU).

    Invariants: every inbox is looked at least every TICK s (timers — expiry, retries, pauses — are met
    there) and at once after `poke()`; in between only the inboxes something happened to (`poke(key)`):
    a change of one agent does not walk every agent's inbox. With nothing active, nothing poked and
    nothing to commit the loop rests IDLE_TICK s, and an item that turns active ends the rest
    (`woken()`); a pause ending sooner wakes it at that exact time."""

    def __init__(self) -> None:
        self.all = True
        self.keys: set[tuple[str, str]] = set()
        self.next_full = 0.0
        self.resting = False  # the loop sleeps IDLE_TICK: an item that turns active must wake it

    def poke(self, key: tuple[str, str] | None) -> None:
        """Look at the inbox `key` (machine, agent) at the next tick — every inbox when None."""
        if key is None:
            self.all = True
        else:
            self.keys.add(key)

    def take(self, clock: float, active) -> list[tuple[str, str]]:
        """The inboxes this tick looks at (`active`: the inboxes with active items)."""
        if self.all or clock >= self.next_full:
            keys = list(active)
            self.all, self.next_full = False, clock + TICK
        else:
            keys = [k for k in self.keys if k in active]
        self.keys = set()
        return keys

    def rest(self, *, active: bool, store_idle: bool) -> float:
        """After a tick: how long to sleep, before `until` cuts it short."""
        self.resting = not active and not self.keys and not self.all and store_idle
        return IDLE_TICK if self.resting else TICK

    @staticmethod
    def until(wait: float, soonest: float | None, clock: float) -> float:
        """`wait`, cut short to the soonest pause's end (exact times on virtual clocks)."""
        return wait if soonest is None else min(wait, max(0.0, soonest - clock))

    def woken(self) -> bool:
        """An item turned active: end a rest (True when the loop must be woken)."""
        if self.resting:
            self.resting = False
            return True
        return False
