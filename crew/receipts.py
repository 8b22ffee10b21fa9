"""Receipts: what a write came to, in the words the phone shows (features B2–B10, O, R, C3, C7).

A receipt is the answer to every write, shared by the bridge, the member and the lead. Its
`outcome` is the wire outcome (`sent`, `queued`, `refused`, `unknown`, `accepted`, `decided`, …);
`card` is the exact sentence of the features O table for answers; `reason` + `text` say why a
refusal happened in words a person can act on.
"""

from __future__ import annotations

import enum
import errno
import sqlite3

import attrs

# features O (rows 2–10) and R2
DECIDED = "Decided in the durable agent."
TIMED_OUT = "Timed out before an answer."
ALREADY_ANSWERED = "Already answered. This card goes away on the next refresh."
NOT_ACCEPTED = "Not accepted. The ask may come back in a moment."
ASK_CHANGED = "This ask changed. Read it again and tap an answer."
NOT_CERTAIN = "Not certain the answer arrived. Retry sends it once more."
MAY_BE_APPLIED = "May already be applied. Check the chat."
ANSWER_REFUSED = "The answer was refused."
OLDER_COLLIE = ("This machine runs an older Collie and can't take answers here. "
                "Update it, or answer in the durable agent.")
# features R3
LINE_TIMED_OUT = "Timed out before an answer:"
LINE_DECIDED = "Decided in the durable agent:"
# features C3, C7, B10
SENT = "Sent"
NOT_CONFIRMED = "Sending, not confirmed"
NOT_SENT = "Not sent"
MOVED_ON = "The conversation moved on, so the action did not run."
NO_STARTERS = "This machine's durable agent offers no starters yet."

class Reason(enum.StrEnum):
    """Why a write was `refused`: every reason Collie itself gives (docs/phone-api.md, Receipts).

    The wire value is the member's string (`Reason.BUSY == "busy"`), so receipts, journals and the
    phone see the same words as before. A durable agent may answer a reason of its own; the bridge
    passes it on as a plain string (`collie.bridge.writes.receipt`). `unknown` receipts carry other reasons
    (`timeout`, `link`, `protocol`, `internal`, …): what left them unknown, not a refusal.

    What a refusal does to an inbox item (a send or starter waiting for its agent), as
    lead/inbox/core.py's `InboxCore.settle` and `HOLD`/`TRANSIENT` decide: a *holding* reason says
    "not now" — nothing reached the agent, and the item is approved again and dispatched later under the
    same id (after a pause); any other reason is *final* — the item ends `failed` with it. A refusal
    the sender is shown at once (a write passing straight through an empty inbox, a Retry that resumed
    an item) is final whatever its reason, except `busy`, and a replayed refusal is final too. Some are
    only given when a request enters the inbox (*at entry*): no item is made, nothing is kept.
    """

    # holding: an ask is open in the conversation (I2)
    ASK_OPEN = "ask_open"
    # holding: the quoted turn has passed (B4) — the next dispatch quotes the current one; final after
    # UNKNOWN_TURN_TRIES in a row when no turn can be quoted (collie.lead.inbox.pace); at entry: refused, not kept
    TURN_MOVED = "turn_moved"
    # holding, even for a write passing through (crew.md §3): another write holds the conversation's lock
    BUSY = "busy"
    # final: the conversation is closed
    CLOSED = "closed"
    # final; at entry, over the agent's text_max: refused, not kept (I10)
    TOO_LONG = "too_long"
    # final: the text is empty
    EMPTY = "empty"
    # final: nothing is running to stop or steer
    NOT_RUNNING = "not_running"
    # final: no such agent, machine, conversation, starter or ask
    NOT_FOUND = "not_found"
    # final: the agent does not offer that operation
    UNSUPPORTED = "unsupported"
    # holding, and its inbox pauses (TRANSIENT): the agent is down, or restarting and not greeted yet
    UNREACHABLE = "unreachable"
    # final: the agent speaks another wire version
    VERSION = "version"
    # final (answers only, never an inbox item): Always allow needs a second tap
    CONFIRM = "confirm"
    # final (answers only): the option or value is not offered on the card
    NOT_OFFERED = "not_offered"
    # final (answers only): the answer does not fit the ask
    INVALID = "invalid"
    # final (answers only): the ask cannot be answered from the phone
    READ_ONLY = "read_only"
    # final: the action's button is disabled
    DISABLED = "disabled"
    # final: the request id was used with another body (B2); right after a holding refusal of the same
    # item the item fails with that earlier refusal instead; at entry: refused, not kept
    CONFLICT = "conflict"
    # final: the agent could not read the request, or the member the lead's (docs/crew.md, "The link")
    BAD_REQUEST = "bad_request"
    # final: the agent refused Collie (its token, or this caller)
    UNAUTHORIZED = "unauthorized"
    # holding, and its inbox pauses (TRANSIENT): the state folder's disk is full, nothing was sent or kept
    DISK_FULL = "disk_full"
    # holding, and its inbox pauses (TRANSIENT): the request could not be recorded on disk for another cause
    NOT_RECORDED = "not_recorded"
    # holding: the member is offline — the lead keeps the item and its inbox pauses (collie.lead.inbox.pace);
    # a session-bound write (never an inbox item) fails at once (crew.md §3)
    MACHINE_OFFLINE = "machine_offline"
    # final: the member runs an older Collie, accepted read-only
    OLDER_COLLIE = "older_collie"
    # at entry: the sender already has WAITING_MAX items waiting; nothing kept
    INBOX_FULL = "inbox_full"


REASONS = {
    Reason.ASK_OPEN: "An ask is waiting: answer it first",
    Reason.TURN_MOVED: "The conversation moved on",
    Reason.BUSY: "Another write to this conversation is under way: try again in a moment",
    Reason.CLOSED: "The conversation is closed",
    Reason.TOO_LONG: "The text is too long",
    Reason.EMPTY: "The text is empty",
    Reason.NOT_RUNNING: "Nothing is running in this conversation",
    Reason.NOT_FOUND: "Not found",
    Reason.UNSUPPORTED: "This durable agent does not offer that",
    Reason.UNREACHABLE: "The durable agent is unreachable",
    Reason.VERSION: "The durable agent speaks another wire version",
    Reason.CONFIRM: "Always allow needs a second tap",
    Reason.NOT_OFFERED: "That answer is not offered on this card",
    Reason.INVALID: "The answer does not fit the ask",
    Reason.READ_ONLY: "This ask cannot be answered from the phone.",
    Reason.DISABLED: "That button is disabled",
    Reason.CONFLICT: "This request id was used for something else",
    Reason.BAD_REQUEST: "The durable agent could not read the request",
    Reason.UNAUTHORIZED: "The durable agent refused Collie (its token, or this caller)",
    Reason.MACHINE_OFFLINE: "The machine is offline",
    Reason.DISK_FULL: "The disk of Collie's state folder is full, so nothing was sent: free some space, then try again",
    Reason.NOT_RECORDED: "Collie could not record the request on disk, so nothing was sent",
}


@attrs.frozen
class Receipt:
    request_id: str
    op: str
    outcome: str
    reason: str | None = None
    text: str | None = None  # the refusal in a person's words, or the O-table card sentence
    message: str | None = None  # the agent's own words (B10)
    turn: int | None = None
    conversation: str | None = None
    channel: str | None = None  # "program" for answers (B5)
    digest: str | None = None
    current_ask: dict | None = None  # on `changed`: the ask as it stands now
    replay: bool = False  # the stored receipt of a request seen before


def refused(request_id: str, op: str, reason: Reason | str, detail: str | None = None, *, text: str | None = None,
            **kw) -> Receipt:
    """A refusal: nothing reached the agent (or the agent answered that it did nothing). `text`
    replaces the reason's sentence where a feature fixes another (C7's moved-on line)."""
    if text is None:
        text = REASONS.get(reason, reason)
        if detail:
            text = f"{text}: {detail}" if reason in REASONS else detail
    return Receipt(request_id=request_id, op=op, outcome="refused", reason=reason, text=text, **kw)


def is_disk_full(exc: BaseException) -> bool:
    """Did a write to the state folder fail because its disk is full (SQLite's SQLITE_FULL, ENOSPC, EDQUOT)?"""
    if isinstance(exc, sqlite3.Error) and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_FULL:
        return True
    return getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in str(exc)


def final_unknown(rec: dict) -> bool:
    """An `unknown` no resend can change (docs/phone-api.md): the agent holds the id with another body
    (`conflict`), or a retry was refused after a first attempt that may have applied. The bridge's
    journal keeps it as done and every repeat returns it; only its sentence, MAY_BE_APPLIED, says so."""
    return rec.get("outcome") == "unknown" and rec.get("text") == MAY_BE_APPLIED


def card_for(outcome: str, *, retry: bool = False, reason_text: str | None = None) -> str | None:
    """The O-table sentence for an answer's outcome; None when the card simply closes."""
    if retry and outcome in ("answered", "not_open", "changed"):
        return MAY_BE_APPLIED
    return {
        "accepted": None,
        "decided": DECIDED,
        "expired": TIMED_OUT,
        "answered": ALREADY_ANSWERED,
        "not_open": NOT_ACCEPTED,
        "changed": ASK_CHANGED,
        "unknown": NOT_CERTAIN,
        "invalid": reason_text or ANSWER_REFUSED,
        "refused": reason_text or ANSWER_REFUSED,
    }.get(outcome, reason_text)
