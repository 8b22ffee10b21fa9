"""The API's door: who may use which route, and what a request body must be before any handler sees it.

- **By route, never by path text** (issue 9.2). The door authorizes the route (Quart endpoint) that
  matched. The local API credential (the owner) opens every `/api` route; an API token of features
  I10 opens only the routes marked `@open_to_senders` — the inbox routes an external sender needs
  (enqueue, list its own items, read, cancel or add a message to one). Any other route answers a
  valid API token `403 forbidden`; no valid credential at all is `401 unauthorized`, before routing
  is revealed (an unknown route is `404` only to a caller who got in).
- **Strict bodies** (issues 9.10, 25.9). A body is strict UTF-8 JSON: an object, no key twice in one object, nested at most `MAX_DEPTH`
  levels, no `NaN`/`Infinity`, no number outside what SQLite and the wire keep (an integer beyond ±(2^63-1),
  a float that overflows to infinity, a literal over `NUMBER_MAX_CHARS` characters), no lone surrogate in any
  string (it could not be stored or sent on). Anything else is refused `400 bad_request` with the reason,
  so a handler only ever sees a dict (or no body) and bad input can never surface as a 500. The API
  parses each body once, here, and its handlers read that result.

Plain functions: no trio, no Quart request object (the API passes the bytes in).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable

MAX_DEPTH = 32  # far beyond any route's body; keeps every walk of a body well inside the recursion limit
INT_MAX = 2**63 - 1  # SQLite's INTEGER; beyond it Python refuses to store the number (a 500 before issue 25.9)
NUMBER_MAX_CHARS = 40  # a number literal longer than this is refused before Python converts it

_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")


class BodyRefused(ValueError):
    """A request body the API will not read; the message is the reason given to the client."""


def open_to_senders(view: Callable) -> Callable:
    """Mark a route an API token of features I10 may use (the door checks the matched route)."""
    view.open_to_senders = True
    return view


def opens_to_senders(view: Callable | None) -> bool:
    return view is not None and getattr(view, "open_to_senders", False) is True


def _depth(text: str) -> int:
    skeleton = _NOT_BRACKETS.sub("", _STRINGS.sub("", text))  # brackets outside strings, in C
    depth = deepest = 0
    for c in skeleton:
        if c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def _unique_keys(pairs: list) -> dict:
    """An object's members, refused when a key repeats: which one wins would be one parser's choice (issue 25)."""
    data = dict(pairs)
    if len(data) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise BodyRefused(f"the body holds the key {key[:60]!r} twice")
            seen.add(key)
    return data


def _no_constant(name: str):
    raise BodyRefused(f"the body holds {name}, which is not JSON")


def _int(text: str) -> int:
    if len(text) > NUMBER_MAX_CHARS:
        raise BodyRefused(f"the body holds a number of {len(text)} digits; numbers are at most {INT_MAX}")
    value = int(text)
    if not -INT_MAX <= value <= INT_MAX:
        raise BodyRefused(f"the body holds the number {text}, beyond the largest one kept ({INT_MAX})")
    return value


def _float(text: str) -> float:
    if len(text) > NUMBER_MAX_CHARS:
        raise BodyRefused(f"the body holds a number {len(text)} characters long; at most {NUMBER_MAX_CHARS} are read")
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise BodyRefused(f"the body holds the number {text}, too large for a float")
    return value


def parse_body(raw: bytes) -> dict | None:
    """The request body as a JSON object, or None when there is none. Raises `BodyRefused`."""
    if not raw.strip():
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BodyRefused(f"the body is not UTF-8 (byte {exc.start})") from None
    if _depth(text) > MAX_DEPTH:
        raise BodyRefused(f"the body is nested deeper than {MAX_DEPTH} levels")
    try:
        data = json.loads(text, parse_constant=_no_constant, parse_int=_int, parse_float=_float,
                          object_pairs_hook=_unique_keys)
    except BodyRefused:
        raise
    except json.JSONDecodeError as exc:
        raise BodyRefused(f"the body is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None
    except RecursionError:  # unreachable after the depth check; kept so no body can ever be a 500
        raise BodyRefused(f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # any other conversion Python refuses: still the client's input, still a 400
        raise BodyRefused(f"the body cannot be read: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise BodyRefused(f"the body must be a JSON object, not {_kind(data)}")
    try:  # a lone surrogate (an escape such as \ud800 with no pair) cannot be encoded: find it in C
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise BodyRefused("the body holds a lone surrogate escape (\\ud800-\\udfff without its pair)") from None
    return data


def _kind(value) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number",
            type(None): "null"}.get(type(value), "another value")
