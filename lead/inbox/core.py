"""The inbox's decisions (features I1–I11, crew.md §4), with no I/O: `now` and clocks are passed in.

Every send and starter enters the inbox of its `(machine, agent)` first. A phone write to an agent
whose inbox is empty and whose machine is online passes straight through and runs the full Send
protocol (its receipt is the real one); anything else waits:

    pending   ──approve──▶ approved ──dispatch──▶ running ──turn ends──▶ done
       │                     │                       └──agent refuses──▶ failed (reason)
       ├─ 24 h TTL ─▶ expired └──cancel──▶ cancelled
       └──cancel──▶ cancelled

Rules:
- Entry. Request ids are scoped per sender (the owner's phone, each API token). A repeat with the
  same body answers what became of the first (`replay: true`: `queued` while it waits, the stored
  receipt once it ran, `expired`, `cancelled`); the same id with another body is refused
  `conflict` and nothing is done (B2). A send quoting a turn that has already passed is refused
  `turn_moved` when it enters (B4); turns started later by items ahead of it do not count. A sender
  has at most `WAITING_MAX` waiting items; items for an agent the lead does not know are refused.
- Order: approved items run by approval time; the owner's moves (`position`) override it. A
  pending item shows in its arrival slot and is skipped until approved. Standing senders (the
  phone, `standing` tokens) are approved on arrival; `required` tokens wait for the owner. A change
  by a `required` sender (`message`) sends an approved item back to `pending` for a new approval.
- One item runs at a time per agent; agents run in parallel. An item is `done` when the turn it
  started ends. At dispatch it quotes the conversation's current turn as the owning bridge reads it
  under the session's lock (`current_turn`: the lead may not see the conversation, issue 32); an open
  ask, or another write holding the session's lock, holds it `approved` (not refused) until it is gone:
  a send is never refused or failed `busy` (crew.md §3, issue 27).
- Nothing spins (issue 32): an item answered "not now" (`HOLD`) waits 1, 2, 4 … HOLD_MAX s before its
  next try (sooner when the lead sees what it waits on change), keeping its place while the items
  behind it for other conversations run; an agent that reached nothing pauses its whole inbox. One
  item logs ITEM_LINES lines at once, then one every ITEM_LINE_EVERY s. A send no machine can quote a
  turn for ends `failed` after UNKNOWN_TURN_TRIES `turn_moved` (waiting cannot change it).
- Nothing runs twice and every receipt is true: the exact request (body and turn) is recorded on
  disk before it is sent. An item interrupted before its receipt (a crash, a dropped link, an
  `unknown`) is resumed with that very request under the same id, so the journals on the way
  recognise it and answer what the agent did (B3, O); it never becomes a refusal of its own.
- Pending items expire after the TTL (24 h; `COLLIE_INBOX_TTL` seconds in `.env`), judged by
  wall-clock times stored on disk; approved items never expire. Finished items (done, expired,
  cancelled, failed) are kept with their receipts for `KEEP_FINISHED` (24 h) (I7, I9), at most
  `FINISHED_PER_SENDER` of one API token's (its newest). A send's text is held to its agent's `text_max`
  when it enters and with each message: nothing a sender does grows the record without bound.
- The event loop never waits on the disk: items live in memory, the database is the record, and
  every change is committed in a worker thread, grouped (one commit for a burst of changes). An
  answer that acknowledges a change waits until the change is on disk.

`InboxCore` and the pieces beside it decide; `collie.lead.inbox.service.Inbox` feeds them events and carries out what they return.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict

import attrs

from collie.bridge.once import conflicts
from collie.bridge.writes import WriteRequest
from collie.crew.receipts import Reason, final_unknown, refused
from collie.lead.inbox import texts
from collie.lead.inbox.item import ACTIVE, FINISHED, WAITING, Item
from collie.lead.inbox.texts import state_text

LOCAL = "local"
TTL_DEFAULT = 24 * 3600.0
KEEP_FINISHED = 24 * 3600.0
FINISHED_PER_SENDER = 1000  # finished items kept for one API token (its newest); the owner's are not counted
TEXT_CEILING = 256 * 1024  # a send's text while its agent's own limit is not known (the API's body limit)
TICK = 1.0
# nothing waiting and nothing to commit: only the purge of old finished items (every 60 s) is due, so the
# loop sleeps this long (an idle lead wakes once a minute here, not every second: issue 16, idle CPU)
IDLE_TICK = 60.0
WAITING_MAX = 1000  # waiting (pending + approved) items per sender
FINISHED_IN_MEMORY = 5000  # finished items kept in memory; older ones are read from the database
RETRY_MIN, RETRY_MAX = 1.0, 60.0  # resuming an interrupted item: backoff (trio seconds)
# refusals that leave an item waiting (nothing reached the agent); the agent not ready (unreachable: down, or
# restarting and not greeted yet) or the state folder full (disk_full, not_recorded) also pause its inbox
TRANSIENT = (Reason.UNREACHABLE, Reason.DISK_FULL, Reason.NOT_RECORDED)
HOLD = (Reason.ASK_OPEN, Reason.TURN_MOVED, Reason.BUSY, *TRANSIENT)
PAUSE_MAX = 10.0  # an agent whose dispatches reach nothing is tried again after 1, 2, 4 … 10 s
# an item answered "not now" (a HOLD refusal: an ask open, the turn moved, the session busy) waits 1, 2, 4 …
# HOLD_MAX s before its next try (issue 32: it was dispatched again at once, thousands of times a second);
# its place is kept, the items behind it for other conversations run meanwhile
HOLD_MAX = 30.0
# a send the lead could quote no turn for (it does not see the conversation) answered `turn_moved` this many
# times in a row: the owning bridge does not quote the current turn itself (an older Collie), so waiting
# changes nothing — the item ends `failed` with that true refusal
UNKNOWN_TURN_TRIES = 3
UNKNOWN_TURN = ("the lead does not see this conversation's turn and its machine does not quote it (an older "
                "Collie?): send it again from the conversation")
# what one item logs: at most ITEM_LINES lines at once, then one line every ITEM_LINE_EVERY s (the next
# line says how many were held); a held item wrote 14,004 lines in 25 s (issue 32)
ITEM_LINES, ITEM_LINE_EVERY = 2, 60.0
ID_NAMESPACE = uuid.UUID("6f1d3c1e-9a57-4d61-8a43-2b1c4f0e7a10")


def item_id(sender: str | None, request_id: str) -> str:
    """The item's id: the owner's request id itself (it is what the agent sees and what the phone
    retries with); a token sender's id is derived, so no sender can name another's item."""
    return request_id if sender is None else str(uuid.uuid5(ID_NAMESPACE, f"{sender}\0{request_id}"))


def entry_fingerprint(machine: str, req: WriteRequest) -> str:
    return attrs.evolve(req, request_id="", agent=f"{machine}/{req.agent}").fingerprint()


@attrs.frozen
class Plan:
    """What one tick does to one inbox (InboxCore.plan)."""

    expire: tuple = ()  # pending items past the TTL
    finish: tuple = ()  # running items whose turn ended: done
    look_again: bool = False  # a running item waits on its turn to end: read the agent again at once
    run: Item | None = None  # the item to dispatch now


class InboxCore:
    """Decisions over one agent's items; every method takes what it needs (`now`: wall-clock seconds)."""

    def __init__(self, ttl: float = TTL_DEFAULT) -> None:
        self.ttl = ttl

    # --- entry ------------------------------------------------------------------------------
    @staticmethod
    def repeat(existing: Item, fingerprint: str) -> str:
        """A request id seen before from this sender: `conflict` (another body) or the state to report."""
        if conflicts(existing.fingerprint, fingerprint):  # collie.bridge.once: the rule shared with the writer, routing
            return Reason.CONFLICT
        return existing.state

    @staticmethod
    def passed_turn(quoted: int | None, current: int | None) -> bool:
        """B4 at entry: the quoted turn is behind the turn the lead sees. (The lead's view may lag
        the phone, never lead it, so a quoted turn ahead of the view is not judged here.)"""
        return quoted is not None and current is not None and quoted < current

    def refuse_entry(self, req: WriteRequest, *, limit: int, current_turn: int | None):
        """A new send the agent would refuse anyway: over its `text_max` (`too_long`), or quoting a turn that
        has already passed (`turn_moved`, B4). The refusal receipt, or None; nothing of it is kept."""
        if req.op != "send":
            return None
        if isinstance(req.text, str) and len(req.text) > limit:
            return texts.too_long(req.request_id, req.op, len(req.text), limit)
        if self.passed_turn(req.turn, current_turn):
            return refused(req.request_id, req.op, Reason.TURN_MOVED)
        return None

    @staticmethod
    def admit(req: WriteRequest, *, taken: bool, waiting: int, most: int = WAITING_MAX):
        """A new request id of its sender: refused `conflict` when its item id is `taken` (the owner used an
        id a sender's item already has), `inbox_full` when the sender has `most` items `waiting`; else None."""
        if taken:
            return refused(req.request_id, req.op, Reason.CONFLICT)
        if waiting >= most:
            return texts.inbox_full(req.request_id, req.op, most)
        return None

    @staticmethod
    def new_item(iid: str, machine: str, req: WriteRequest, *, sender: str | None, fingerprint: str,
                 approval: str, now: float) -> Item:
        """The item a request becomes: a standing sender's is approved on arrival, a `required` one's pending."""
        approved = approval == "standing"
        return Item(id=iid, machine=machine, agent=req.agent, kind=req.op, conversation=req.conversation,
                    starter=req.starter_id, text=req.text, sender=sender, state="approved" if approved else "pending",
                    created_at=now, approved_at=now if approved else None, updated_at=now,
                    request_id=req.request_id, fingerprint=fingerprint)

    @staticmethod
    def passes_through(item: Item, *, alone: bool, busy: bool, online: bool, locked: bool) -> bool:
        """A phone write to an empty (`alone`), idle, online inbox whose conversation no other write holds runs
        at once: the full Send protocol, its real receipt."""
        return item.sender is None and item.state == "approved" and alone and not busy and online and not locked

    @staticmethod
    def resumes(existing: Item, verdict: str, *, busy: bool, online: bool) -> bool:
        """A repeat of an item interrupted before its receipt (a crash, `unknown`): the sender's Retry resumes
        the recorded request now, when its inbox is idle and online."""
        return verdict == "running" and (existing.runtime_ref or {}).get("turn") is None \
            and bool(existing.request) and not busy and online

    @classmethod
    def through_request(cls, item: Item, req: WriteRequest, turn: int | None) -> WriteRequest:
        """A write passing straight through goes under its item's id; a send quoting no turn quotes `turn`
        (the current one, as `request_for`)."""
        req = attrs.evolve(req, request_id=item.id)
        return cls.request_for(item, turn) if req.op == "send" and req.turn is None else req

    @staticmethod
    def request_for(item: Item, turn: int | None) -> WriteRequest:
        """The recorded request when there is one (resumed exactly); else a new one quoting `turn`, the
        conversation's current turn as the lead sees it (crew.md §4). The owning bridge quotes the turn it
        reads under the session's lock (`current_turn`, crew.md §3): the lead's view may lag it, or not show
        the conversation at all (a cut view, issue 32); `turn` is for a member whose Collie predates it."""
        if item.request:
            return WriteRequest(**item.request)
        return WriteRequest(request_id=item.id, op=item.kind, agent=item.agent, conversation=item.conversation,
                            text=item.text, turn=turn if item.kind == "send" else None, starter_id=item.starter,
                            current_turn=item.kind == "send")

    # --- time -------------------------------------------------------------------------------
    def expired(self, items, now: float) -> list[Item]:
        return [i for i in items if i.state == "pending" and now - i.created_at >= self.ttl]

    @staticmethod
    def forgotten(items, now: float, keep: float = KEEP_FINISHED) -> list[Item]:
        """Finished items older than `keep`: they may leave the record."""
        return [i for i in items if i.state in FINISHED and now - i.updated_at >= keep]

    # --- the tick ---------------------------------------------------------------------------
    def plan(self, *, pending, running, active, now: float, ready: bool, conversations, inflight,
             retry_due, can_run: bool, blocked, held) -> Plan:
        """What one look at one inbox does: pending items past the TTL expire; a running item whose turn
        ended is done, one still in its turn has the agent read again, one interrupted before its receipt
        is resumed once `retry_due(id)`; then, when the inbox `can_run` (idle, online, the agent ready, not
        paused), the resumed item or else — with nothing left running (I2) — `next_to_run` (`held()`: the
        ids waiting out a pause). `conversations`: the agent's as the lead sees them, None if unknown."""
        expire = self.expired(pending, now)
        finish, look_again, resume = [], False, None
        for item in running:
            if item.id in inflight:
                continue
            if (item.runtime_ref or {}).get("turn") is not None:
                conv = conversations.get(item.runtime_ref.get("conversation")) if conversations is not None else None
                if ready and self.done(item, conv.turn if conv else None, conv.state if conv else None):
                    finish.append(item)
                elif ready:
                    look_again = True  # waiting on its turn to end: look again at once
            elif retry_due(item.id):
                resume = item  # interrupted before its receipt: resumed by reference
        nxt = resume if can_run else None
        if can_run and nxt is None and len(finish) == len(running):  # one request at a time per agent (I2)
            gone = {i.id for i in expire} | {i.id for i in finish}
            nxt = self.next_to_run((i for i in active if i.id not in gone) if gone else active, blocked, held())
        return Plan(tuple(expire), tuple(finish), look_again, nxt)

    # --- order ------------------------------------------------------------------------------
    def next_to_run(self, items, blocked, held=frozenset()) -> Item | None:
        """The first approved item by order, unless the agent already runs one. `blocked` holds
        conversations whose sends wait (an open ask, another write holding the session's lock), `held`
        the ids of items waiting out their pause after a "not now": both keep their place. A send behind
        a held send to the same conversation waits with it (a conversation's sends run in the order
        they were approved); items for other conversations, and starters, run meanwhile."""
        best = None
        approved = []
        for item in items:
            if item.state == "running":
                return None
            if item.state != "approved":
                continue
            approved.append(item)
            if item.id in held or (item.kind == "send" and item.conversation in blocked):
                continue
            if best is None or item.order_key < best.order_key:
                best = item
        if best is None or not held:
            return best
        stopped: set = set()
        for item in sorted(approved, key=lambda i: i.order_key):
            conv = item.conversation if item.kind == "send" else None
            if conv is not None and (conv in blocked or conv in stopped):
                continue
            if item.id in held:
                if conv is not None:
                    stopped.add(conv)
                continue
            return item
        return None

    def listing(self, items) -> list[Item]:
        """What the sender and the owner see: running first, then the queue in the order it will
        run (pending items in their arrival slot), then finished items, newest first."""
        running = [i for i in items if i.state == "running"]
        waiting = sorted((i for i in items if i.state in WAITING), key=lambda i: i.queue_key)
        finished = sorted((i for i in items if i.state in FINISHED), key=lambda i: -i.updated_at)
        return running + waiting + finished

    def move(self, items, item_id: str, index: int) -> dict[str, float]:
        """The owner puts `item_id` at `index` of the waiting queue; returns new positions."""
        queue = [i for i in self.listing(items) if i.state in WAITING]
        moving = next((i for i in queue if i.id == item_id), None)
        if moving is None:
            return {}
        queue.remove(moving)
        index = max(0, min(index, len(queue)))
        keys = [i.queue_key[0] for i in queue]
        before = keys[index - 1] if index > 0 else (keys[0] - 2.0 if keys else 0.0)
        after = keys[index] if index < len(keys) else before + 2.0
        positions = {i.id: k for i, k in zip(queue, keys) if i.position is None}
        positions[moving.id] = (before + after) / 2
        return positions

    # --- running ----------------------------------------------------------------------------
    def done(self, item: Item, conversation_turn: int | None, conversation_state: str | None) -> bool:
        """A running item is done when the turn it started has ended (or its conversation closed)."""
        ref = item.runtime_ref or {}
        started = ref.get("turn")
        if started is None:
            return False
        if conversation_turn is None:  # the conversation is no longer open
            return True
        return conversation_turn > started or (conversation_turn == started and conversation_state != "working")

    @staticmethod
    def settle(item: Item, rec: dict, *, passed_through: bool = False, resumed: bool = False) -> dict:
        """The fields an item takes after a dispatch answered `rec` (a receipt as a dict).

        - `sent`/`started`: running until the turn it started ends; the agent's `queued`: the turn
          after the one running.
        - `unknown`: still running, its turn unknown; the recorded request is resumed as it is —
          unless it is final (`conflict`, a refused retry: May already be applied): no resend can
          change it, so the item ends `failed` with that receipt and the items behind it run (I2).
        - a refusal that leaves it waiting (`HOLD`: it says "not now", and nothing reached the agent —
          an open ask, a moved turn, a busy session, the agent down or restarting, the disk full):
          approved again, so acknowledged work is never dropped; the next dispatch quotes the turn
          current then. A `conflict` right after such a refusal means
          the agent's side recorded that refusal: the item fails with it (it is the true receipt).
        - `busy` (another write holds the conversation's lock; nothing was sent) never ends an item, even
          one passing through: a send waits its turn (crew.md §3). A resumed request (`resumed`: it may
          have reached the agent before) keeps its recorded request and is resumed later as it is.
        - any other refusal, and every refusal the sender is shown at once (`passed_through`: a phone
          write to an empty inbox, or a Retry that resumed the item — it must never run later):
          failed, with the reason.
        """
        outcome, reason = rec.get("outcome"), rec.get("reason")
        if outcome in ("sent", "started"):
            ref = {"conversation": rec.get("conversation") or item.conversation, "turn": rec.get("turn")}
            return {"state": "running", "runtime_ref": ref, "receipt": rec}
        if outcome == "queued" and reason != "inbox":
            ref = {"conversation": item.conversation, "turn": (rec.get("turn") or 0) + 1}
            return {"state": "running", "runtime_ref": ref, "receipt": rec}
        if outcome == "unknown" and final_unknown(rec):
            return {"state": "failed", "reason": reason or outcome, "receipt": rec}
        if outcome == "unknown":
            return {"state": "running", "runtime_ref": None, "receipt": rec}
        if outcome == "refused" and reason == Reason.BUSY and not rec.get("replay"):
            if resumed:
                return {"state": "running", "runtime_ref": None}
            return {"state": "approved", "runtime_ref": None, "request": None, "receipt": rec}
        if outcome == "refused" and passed_through:
            return {"state": "failed", "reason": reason or outcome, "receipt": rec}
        if outcome == "refused" and reason in HOLD and not rec.get("replay"):
            return {"state": "approved", "runtime_ref": None, "request": None, "receipt": rec}
        if outcome == "refused" and reason == Reason.CONFLICT and item.receipt and item.receipt.get("reason") in HOLD:
            earlier = item.receipt
            return {"state": "failed", "reason": earlier.get("reason"), "receipt": {**earlier, "replay": True}}
        if outcome == "refused" and reason == Reason.MACHINE_OFFLINE:  # the lead kept it: nothing was forwarded
            return {"state": "running" if item.request and item.receipt else "approved", "receipt": rec}
        return {"state": "failed", "reason": reason or outcome, "receipt": rec}

    # --- what the sender sees (I7) -------------------------------------------------------------
    state_text = staticmethod(state_text)  # collie.lead.inbox.texts: the sentence for each state

    @staticmethod
    def approval(item: Item, now: float) -> dict | None:
        """The owner approves a pending item (I3): it takes its place by approval time. Else nothing changes."""
        return {"state": "approved", "approved_at": now} if item.state == "pending" else None

    @staticmethod
    def cancellation(item: Item) -> dict | None:
        """The owner or its sender cancels a waiting item (I7, I9); one that runs or ended is not changed."""
        return {"state": "cancelled"} if item.state in WAITING else None

    @staticmethod
    def message(item: Item, text: str, limit: int | None = None) -> dict | None:
        """A change by the item's sender (I7): the fields to set, or None when it no longer waits;
        TextTooLong (the item unchanged) when the send would grow past its agent's `limit` (I10).
        After the owner approved a `required` sender's item, the change needs a new approval."""
        if item.state not in WAITING or item.kind != "send":
            return None
        fields: dict = {"text": f"{item.text}\n\n{text}"}
        if limit is not None and len(fields["text"]) > limit:
            raise TextTooLong(texts.message_too_long(len(fields["text"]), limit))
        fields["request"] = None  # never sent (it waits): the next dispatch carries the new text
        if item.state == "approved" and item.sender is not None and item.approved_at is not None \
                and item.approved_at > item.created_at:
            fields.update(state="pending", approved_at=None)
        return fields


class Items:
    """The items in memory, filed by inbox and state (no I/O): every active item, and the newest
    FINISHED_IN_MEMORY finished ones; the record has the rest.

    Invariants: an item is filed under exactly its current state (`forget` it before changing it, then
    `remember` it); `waiting_by_sender` counts each sender's pending and approved items; `complete` is
    False once a finished item left memory (then a miss must be looked up in the record). The indexes by
    state let a tick look only at what it may change (issue 16.2: walking every waiting item on every
    change made a backlog cost O(n) per change)."""

    def __init__(self, finished_max: int = FINISHED_IN_MEMORY) -> None:
        self.finished_max = finished_max
        self.active: dict[tuple[str, str], dict[str, Item]] = {}  # (machine, agent) -> id -> item
        self.pending: dict[tuple[str, str], dict[str, Item]] = {}
        self.running: dict[tuple[str, str], dict[str, Item]] = {}
        self.finished: OrderedDict[str, Item] = OrderedDict()
        self.by_key: dict[tuple[str, str], Item] = {}  # (sender_key, request_id) -> item, for those in memory
        self.by_id: dict[str, Item] = {}
        self.waiting_by_sender: dict[str, int] = {}
        self.complete = True  # every finished item of the record is in memory

    def remember(self, item: Item) -> None:
        self.by_key[(item.sender_key, item.request_id or item.id)] = item
        self.by_id[item.id] = item
        if item.state in ACTIVE:
            self.active.setdefault((item.machine, item.agent), {})[item.id] = item
            if item.state == "pending":
                self.pending.setdefault((item.machine, item.agent), {})[item.id] = item
            elif item.state == "running":
                self.running.setdefault((item.machine, item.agent), {})[item.id] = item
            if item.state in WAITING:
                self.waiting_by_sender[item.sender_key] = self.waiting_by_sender.get(item.sender_key, 0) + 1
        else:
            self.finished[item.id] = item
            self.finished.move_to_end(item.id)
            while len(self.finished) > self.finished_max:
                _, old = self.finished.popitem(last=False)
                self.by_key.pop((old.sender_key, old.request_id or old.id), None)
                self.by_id.pop(old.id, None)
                self.complete = False

    def forget(self, item: Item) -> None:
        """Take `item` out of the indexes (before a change of state re-files it)."""
        key = (item.machine, item.agent)
        for index in (self.pending, self.running):
            ids = index.get(key)
            if ids is not None and ids.pop(item.id, None) is not None and not ids:
                del index[key]
        inbox = self.active.get(key)
        if inbox is not None and inbox.pop(item.id, None) is not None:
            if item.state in WAITING:
                self.waiting_by_sender[item.sender_key] -= 1
            if not inbox:
                del self.active[(item.machine, item.agent)]
        self.finished.pop(item.id, None)
        self.by_key.pop((item.sender_key, item.request_id or item.id), None)
        self.by_id.pop(item.id, None)

    def over_share(self, most: int) -> bool:
        """Does a sender hold more than `most` finished items? (The owner's are not counted.)"""
        counts: dict[str, int] = {}
        for item in self.finished.values():
            if item.sender is not None:
                counts[item.sender] = counts.get(item.sender, 0) + 1
        return any(n > most for n in counts.values())

    def of(self, machine: str, agent: str) -> list[Item]:
        """The agent's items in memory: every active one and the recent finished ones."""
        out = list(self.active.get((machine, agent), {}).values())
        out += [i for i in self.finished.values() if i.machine == machine and i.agent == agent]
        return out


class TextTooLong(ValueError):
    """A message would take a waiting send over its agent's `text_max` (the item is unchanged)."""



@attrs.define
class Hold:
    """An item's pause after a "not now" answer (issue 32)."""

    until: float  # trio time of its next try
    backoff: float
    tries: int  # consecutive answers of this reason
    reason: str
    signature: object  # what it waits on, as the lead's view showed it (Inbox._signature)
    due: bool = False  # its inbox was looked at once the pause ended
