"""An inbox item and the one table of its states (features I1–I11, crew.md §4; issue 41): plain data, no I/O.

`TRANSITIONS` is every change of state an item may take; `transition` refuses any other pair. The inbox's
decisions (collie.lead.inbox.core), its record (collie.lead.inbox.store) and what people see of an item
(collie.lead.inbox.texts) all build on this module, and it on none of them.
"""

from __future__ import annotations

import attrs

ACTIVE = ("pending", "approved", "running")
WAITING = ("pending", "approved")
FINISHED = ("done", "expired", "cancelled", "failed")
# The diagram above as the one table of every change of state an item may take (h11's `_state.py` shape):
# from each state, the states it may go to and what takes it there. `transition` raises IllegalTransition on
# any other pair, and collie.lead.inbox.store's `set` calls it on every change — a slip that would run an item
# never approved, or move a finished one, fails where it happens instead of becoming the record.
TRANSITIONS: dict[str, dict[str, str]] = {
    "pending": {"approved": "the owner approves it (I3)", "expired": "the TTL passes unapproved (I6)",
                "cancelled": "its owner or sender cancels it (I7, I9)"},
    "approved": {"running": "dispatched: its exact request is recorded, then sent",
                 "cancelled": "its owner or sender cancels it (I7, I9)",
                 "pending": "its `required` sender changes it after approval: approved again (I7)"},
    "running": {"running": "its receipt keeps it running (sent, unknown), or it is resumed as recorded",
                "approved": "a refusal that holds it (HOLD, busy), or its request could not be recorded",
                "failed": "a final refusal", "done": "the turn it started ends (I2)"},
    **{state: {} for state in FINISHED},
}


class IllegalTransition(RuntimeError):
    """A change of an inbox item's state that TRANSITIONS does not have: a bug, never a peer's doing."""


def transition(old: str, new: str) -> str:
    """`new`, when an item in state `old` may go there (TRANSITIONS); else IllegalTransition."""
    if new not in TRANSITIONS.get(old, {}):
        raise IllegalTransition(f"an inbox item does not go from {old!r} to {new!r}")
    return new


@attrs.define
class Item:
    id: str
    machine: str
    agent: str
    kind: str  # send | starter
    conversation: str | None
    starter: str | None
    text: str | None
    sender: str | None  # None: the owner's phone; else the API token's name
    state: str
    created_at: float
    approved_at: float | None = None
    position: float | None = None
    runtime_ref: dict | None = None  # {"conversation", "turn"}: what the dispatched request started
    receipt: dict | None = None
    reason: str | None = None
    updated_at: float = 0.0
    seq: int = 0
    request_id: str | None = None  # the sender's own id (scoped per sender)
    fingerprint: str | None = None  # of the request as it entered
    request: dict | None = None  # the exact request dispatched, recorded before it is sent

    @property
    def order_key(self) -> tuple:
        base = self.position if self.position is not None else (self.approved_at or self.created_at)
        return (base, self.seq)

    @property
    def arrival_key(self) -> tuple:
        return (self.position if self.position is not None else self.created_at, self.seq)

    @property
    def queue_key(self) -> tuple:
        return self.order_key if self.state == "approved" else self.arrival_key

    @property
    def sender_key(self) -> str:
        return "" if self.sender is None else f"token:{self.sender}"
