"""What the sender and the owner see of an inbox item (features I7, I8, B2; crew.md §4), with no I/O.

Guarantees:
- Every state has one sentence (`state_text`): a pending item names who must approve it; an approved one
  says what it waits for, in this order: the machine offline (since when), the agent not ready, an open
  ask, the items ahead; a failed one its reason.
- A view (`view`) is the item as stored minus what only the lead needs (the recorded request, the
  fingerprint), plus its sentence and, while its machine is offline, the last frame's time in UTC (the
  phone shows it in its own zone).
- A repeat of a request id answers what became of the first (`replay`), never a new outcome: the stored
  receipt once it ran, `expired` / `cancelled`, else `queued`. A repeat that tried again and could not
  be sure answers `unknown` with NOT_CONFIRMED (it is never a refusal of its own).
"""

from __future__ import annotations

import datetime as dt

import attrs

from collie.crew.receipts import NOT_CONFIRMED, Reason, Receipt, refused
from collie.lead.inbox.item import Item


@attrs.frozen
class Waiting:
    """What an approved item is waiting for, as the inbox knows it now."""

    online: bool = True
    offline_since: str | None = None
    agent_status: str = "ready"
    ask_open: bool = False
    ahead: int = 0


def state_text(item: Item, *, owner: str, waiting: Waiting = Waiting()) -> str:
    if item.state == "pending":
        return f"waiting for approval from {owner}"
    if item.state == "approved":
        if not waiting.online:
            return f"queued, machine offline since {waiting.offline_since}" if waiting.offline_since else "queued"
        if waiting.agent_status != "ready":
            return f"queued, waiting: the agent is {waiting.agent_status.replace('_', ' ')}"
        if waiting.ask_open:
            return "queued, waiting: an ask is open"
        if waiting.ahead:
            return f"queued, waiting: {waiting.ahead} ahead"
        return "queued"
    if item.state == "failed":
        return f"failed: {item.reason}" if item.reason else "failed"
    return item.state


# --- how many are ahead ------------------------------------------------------------------------
def ahead_of(item: Item, queue) -> int:
    """The items of its inbox (`queue`) that run before `item`: the running one and approved ones before it."""
    return sum(1 for i in queue if i.state == "running" or (i.state == "approved" and i.order_key < item.order_key))


def ahead_counts(queue) -> dict[str, int]:
    """`ahead_of` for every approved item of one inbox, in one pass."""
    queue = list(queue)
    running = sum(1 for i in queue if i.state == "running")
    approved = sorted((i for i in queue if i.state == "approved"), key=lambda i: i.order_key)
    return {i.id: running + n for n, i in enumerate(approved)}


# --- the machine offline ---------------------------------------------------------------------------
def offline_since(member, hhmm) -> str | None:
    """When the offline machine `member` was last heard of, as `hhmm` writes it (None while online)."""
    if member is None or member.online:
        return None
    since = member.offline_since or member.last_seen
    return hhmm(since) if since else "never connected"


def offline_since_at(member) -> str | None:
    """The offline machine's last frame as an ISO UTC time, for a phone to show in its own zone."""
    since = (member.offline_since or member.last_seen) if member is not None and not member.online else None
    if not since:
        return None
    return dt.datetime.fromtimestamp(since, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def view(item: Item, *, text: str, member) -> dict:
    """The item as the API shows it (`text`: its state sentence; `member`: its machine, None for the lead's)."""
    d = attrs.asdict(item, recurse=False)
    d.pop("request", None)
    d.pop("fingerprint", None)
    d["state_text"] = text
    d["offline_since_at"] = offline_since_at(member) if item.state == "approved" else None
    return d


# --- receipts ----------------------------------------------------------------------------------
def queued(item: Item, text: str) -> Receipt:
    return Receipt(request_id=item.request_id or item.id, op=item.kind, outcome="queued", reason="inbox", text=text)


def replay(existing: Item, verdict: str, rid: str, op: str, text: str) -> Receipt:
    """A repeat of `existing` (InboxCore.repeat gave `verdict`) that was not tried again: what became of it."""
    if existing.receipt and existing.state in ("running", "done", "failed"):
        return attrs.evolve(receipt_of(existing.receipt), request_id=rid, replay=True)
    if verdict in ("expired", "cancelled"):
        return Receipt(request_id=rid, op=op, outcome=verdict, reason="inbox", text=text, replay=True)
    return attrs.evolve(queued(existing, text), request_id=rid, replay=True)


def resumed(existing: Item, rec: Receipt, rid: str, op: str) -> Receipt:
    """What a Retry that resumed `existing` answers: the receipt of this attempt, as a replay — unless the
    lock refused it `busy` while the item may have reached the agent before (it is resumed later, issue 27)."""
    if rec.reason == Reason.BUSY and existing.state == "running":
        return not_confirmed(rid, op, rec.reason)
    return attrs.evolve(rec, request_id=rid, replay=True)


def not_confirmed(rid: str, op: str, reason: str) -> Receipt:
    """A Retry that sent nothing now, after an attempt that may have reached the agent: not certain."""
    return Receipt(request_id=rid, op=op, outcome="unknown", reason=reason, text=NOT_CONFIRMED, replay=True)


def too_long(rid: str, op: str, length: int, limit: int) -> Receipt:
    return refused(rid, op, Reason.TOO_LONG, f"{length} characters; at most {limit}")


def inbox_full(rid: str, op: str, most: int) -> Receipt:
    return refused(rid, op, Reason.INBOX_FULL,
                   f"{most} of your requests already wait in inboxes: wait until some have run")


def message_too_long(length: int, limit: int) -> str:
    return f"with this message the send would be {length} characters; the agent takes at most {limit}"


def receipt_of(d: dict) -> Receipt:
    """A stored receipt (a dict) as a Receipt, ignoring fields this Collie does not know."""
    fields = {f.name for f in attrs.fields(Receipt)}
    return Receipt(**{k: v for k, v in d.items() if k in fields})
