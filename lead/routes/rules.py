"""The rules a request's parts must follow before anything is looked up: plain functions, no Quart, no trio.

A part that breaks a rule raises `BadRequest`, whose message says what to send instead (a 400).
"""

from __future__ import annotations

LOCAL = "local"  # the lead's own machine in routes; members use their labels (crew.md)
OWNER = ("owner", "standing")
MAX_BODY = 256 * 1024
ID_MAX = 128


class BadRequest(Exception):
    pass


def _id(value, what: str) -> str:
    """The wire's id rule (§1): 1-128 printable ASCII characters, no `/`; and never `.` or `..`,
    which a URL would read as a step. Checked before an id is looked up or reaches an agent."""
    if (not isinstance(value, str) or not 1 <= len(value) <= ID_MAX or "/" in value or value in (".", "..")
            or not all(" " <= ch <= "~" for ch in value)):
        raise BadRequest(f"{what} must be 1-{ID_MAX} printable ASCII characters, without '/', and not '.' or '..'")
    return value


def _int(value, what: str) -> int | None:
    if value is None:
        return None
    if type(value) is not int:
        raise BadRequest(f"{what} must be an integer")
    return value


def _turn(value) -> int:
    """Steer, Stop and agent buttons act on the turn the phone saw (wire §6, B7, C7): required."""
    if value is None:
        raise BadRequest("turn is required: the turn the phone saw (so a tap never acts on a later turn)")
    return _int(value, "turn")



