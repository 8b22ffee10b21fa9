"""Durable wire v1: the messages between a bridge and a durable agent (docs/wire-v1.md).

Both ends use these frozen attrs classes and one lenient converter: unknown fields are ignored
(forward compatibility), wrong types are errors (a peer bug we report, never guess around).

Asks travel as raw JSON objects as well as parsed: the digest (RFC 8785 JCS, SHA-256, lowercase hex)
is computed on exactly the object the agent listed, before any parsing, trimming or redaction.
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import datetime, timezone
from typing import Any

import attrs
import rfc8785

from collie.crew.convert import describe, lenient_converter

WIRE_MIN = 1
WIRE_MAX = 1

ASK_KINDS = ("permission", "choice", "text", "form")
PERMISSION_ROLES = ("allow", "always_allow", "deny", "cancel")
WAIT_MAX = 30
ITEMS_LIMIT_DEFAULT = 500
ITEMS_LIMIT_MAX = 1000
CLOSED_PAGE = 100
TEXT_MAX_DEFAULT = 2000


class WireError(Exception):
    """A message from the peer does not fit the contract (the peer misbehaved)."""


@attrs.frozen
class WireRange:
    min: int
    max: int

    def highest_common(self, other: WireRange) -> int | None:
        top = min(self.max, other.max)
        return top if top >= max(self.min, other.min) else None

    def __str__(self) -> str:  # `2..3` for a range, as the doctor line prints it
        return f"{self.min}..{self.max}"

    def short(self) -> str:  # `v2` for one version, `2..3` for a range (features W1)
        return f"v{self.min}" if self.min == self.max else f"{self.min}..{self.max}"


OURS = WireRange(WIRE_MIN, WIRE_MAX)


def doctor_mismatch(theirs: WireRange) -> str:
    """W2: the doctor's `durable-hello` line shows both ranges."""
    return f"incompatible: the durable agent speaks {theirs}, this Collie speaks {OURS}"


@attrs.frozen
class Limits:
    text_max: int = TEXT_MAX_DEFAULT


@attrs.frozen
class HelloAnswer:
    wire: WireRange
    instance: str
    runtime: str | None = None
    subtitle: str | None = None
    caps: list[str] = attrs.Factory(list)
    limits: Limits = attrs.Factory(Limits)


@attrs.frozen
class Named:
    id: str
    title: str | None = None


@attrs.frozen
class Progress:
    steps: list[str] | None = None
    current: int | None = None
    percent: float | None = None
    label: str | None = None



@attrs.frozen
class Conversation:
    id: str
    title: str | None = None
    subtitle: str | None = None
    workspace: Named | None = None
    tab: Named | None = None
    harness: str | None = None
    state: str = "idle"
    turn: int = 0
    activity: str | None = None
    progress: Progress | None = None
    asks: list[dict[str, Any]] = attrs.Factory(list)  # raw, for the digest; parsed by collie.crew.asks
    actions: list[dict[str, Any]] = attrs.Factory(list)  # raw; cut to the limits by collie.crew.asks
    items_rev: int = 0


@attrs.frozen
class Starter:
    id: str
    label: str


@attrs.frozen
class State:
    rev: int
    instance: str
    subtitle: str | None = None
    conversations: list[Conversation] = attrs.Factory(list)
    starters: list[Starter] = attrs.Factory(list)


@attrs.frozen
class Item:
    seq: int
    rev: int
    kind: str
    id: str | None = None
    turn: int | None = None
    at: str | None = None
    final: bool = True
    text: str | None = None
    request_id: str | None = None
    lang: str | None = None
    url: str | None = None
    label: str | None = None
    tool_call_id: str | None = None
    name: str | None = None
    title: str | None = None
    status: str | None = None
    output: str | None = None
    ask_id: str | None = None
    end: str | None = None
    stopped: bool | None = None


@attrs.frozen
class ItemsPage:
    items: list[Item]
    first_kept: int
    last: int
    items_rev: int
    next_since: int
    more: bool = False


@attrs.frozen
class ClosedConversation:
    id: str
    title: str | None = None
    subtitle: str | None = None
    closed_at: str | None = None
    activity: str | None = None


@attrs.frozen
class ClosedPage:
    conversations: list[ClosedConversation]
    next: str | None = None


conv = lenient_converter()


def structure(data: Any, cls: type):
    """Structure peer data; a misfit raises `WireError` with the first path and reason."""
    try:
        return conv.structure(data, cls)
    except Exception as exc:  # cattrs raises several types; all mean "the peer sent a misfit"
        try:
            where = "; ".join(f"{msg} @ {path}" for path, msg in describe(exc)[:3])
        except Exception:
            where = str(exc)
        raise WireError(f"{cls.__name__}: {where}") from None


def unstructure(obj: Any) -> Any:
    return conv.unstructure(obj)



RFC3339 = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(?:\.(\d{1,9}))?(?:[Zz]|[+-]\d{2}:\d{2})")


def utc_time(value: object) -> str | None:
    """An agent's RFC 3339 time (wire §1) in the one form the phone gets: `YYYY-MM-DDTHH:MM:SS[.f]Z`,
    UTC, which a browser's Date reads and which sorts as text. RFC 3339 also allows a lower-case `t`/`z`,
    an offset and up to nanoseconds (Go's RFC3339Nano); None for anything that is not such a time."""
    if not isinstance(value, str) or not RFC3339.fullmatch(value):
        return None
    frac = RFC3339.fullmatch(value).group(1)
    text = value.upper()
    if frac and len(frac) > 6:  # microseconds are as fine as a phone draws
        text = text.replace("." + frac, "." + frac[:6], 1)
    try:
        when = datetime.fromisoformat(text).astimezone(timezone.utc)
    except ValueError:
        return None
    micro = f".{when.microsecond:06d}".rstrip("0") if when.microsecond else ""
    return when.strftime("%Y-%m-%dT%H:%M:%S") + micro + "Z"


SAFE_INT = 2**53 - 1  # the rfc8785 library refuses integers past this; RFC 8785 reads them as doubles


def _as_doubles(value: Any) -> Any:
    """RFC 8785 §3.2.2.3: a JSON number is an IEEE 754 double. An integer past ±(2^53 − 1) becomes the
    nearest double (what an agent's JS library does: 1764460800123456789 → 1764460800123456800); a
    number no double holds cannot be canonicalized, so the ask does not fit the wire."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        if -SAFE_INT <= value <= SAFE_INT:
            return value
        try:
            return float(value)
        except OverflowError:
            raise WireError(f"an ask holds a number no double holds ({str(value)[:24]}…)") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise WireError(f"an ask holds a number no double holds ({value})")
        return value
    if isinstance(value, list):
        return [_as_doubles(v) for v in value]
    if isinstance(value, dict):
        return {k: _as_doubles(v) for k, v in value.items()}
    raise WireError(f"an ask holds a {type(value).__name__}, not JSON")


def ask_digest(raw_ask: dict[str, Any]) -> str:
    """Lowercase hex SHA-256 of the ask's RFC 8785 canonical form, every field included (wire §4).
    Raises WireError when the ask cannot be canonicalized (a number no double holds, nesting too deep)."""
    try:
        return hashlib.sha256(rfc8785.dumps(_as_doubles(raw_ask))).hexdigest()
    except RecursionError:
        raise WireError("an ask nests too deep to canonicalize") from None
    except rfc8785.CanonicalizationError as exc:
        raise WireError(f"an ask cannot be canonicalized (RFC 8785): {exc}") from None


def etag(instance: str, rev: int) -> str:
    return f'"{instance}.{rev}"'
