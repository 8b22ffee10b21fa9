"""Receipts: what a write came to, in the words the phone shows (features B2–B10, O, R, C3, C7).

A receipt is the answer to every write, shared by the bridge, the member and the lead. Its
`outcome` is the wire outcome (`sent`, `queued`, `refused`, `unknown`, `accepted`, `decided`, …);
`card` is the exact sentence of the features O table for answers; `reason` + `text` say why a
refusal happened in words a person can act on.
"""

from __future__ import annotations

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

REASONS = {
    "ask_open": "An ask is waiting: answer it first",
    "turn_moved": "The conversation moved on",
    "busy": "Another write to this conversation is under way: try again in a moment",
    "closed": "The conversation is closed",
    "too_long": "The text is too long",
    "empty": "The text is empty",
    "not_running": "Nothing is running in this conversation",
    "not_found": "Not found",
    "unsupported": "This durable agent does not offer that",
    "unreachable": "The durable agent is unreachable",
    "version": "The durable agent speaks another wire version",
    "confirm": "Always allow needs a second tap",
    "not_offered": "That answer is not offered on this card",
    "invalid": "The answer does not fit the ask",
    "read_only": "This ask cannot be answered from the phone.",
    "disabled": "That button is disabled",
    "conflict": "This request id was used for something else",
    "bad_request": "The durable agent could not read the request",
    "unauthorized": "The durable agent refused Collie (its token, or this caller)",
    "machine_offline": "The machine is offline",
    "disk_full": "The disk of Collie's state folder is full, so nothing was sent: free some space, then try again",
    "not_recorded": "Collie could not record the request on disk, so nothing was sent",
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


def refused(request_id: str, op: str, reason: str, detail: str | None = None, *, text: str | None = None,
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


def not_recorded(request_id: str, op: str, exc: BaseException, **kw) -> Receipt:
    """A write that could not be recorded on disk before it was sent: refused, nothing was sent
    (wire §8: the bridge never sends a write it has not first written durably)."""
    if is_disk_full(exc):
        return refused(request_id, op, "disk_full", **kw)
    return refused(request_id, op, "not_recorded", type(exc).__name__, **kw)


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
