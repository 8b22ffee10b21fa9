"""The rules a request's parts must follow, and the one shape of every refusal: plain functions, no Quart, no trio.

- A part that breaks a rule raises `BadRequest`, whose message says what to send instead (a 400).
- Every refusal the lead's routes give — the door's, a handler's, an HTTP failure Quart raised (an
  unknown route, a wrong method, a body too large) — is `error_body(code, message)`:
  `{"error": code, "message": message}`, with a message a person can act on.
- The door's order (issue 9.2): no credential is 401 before routing is revealed; then an unknown route is
  404 (a 405 for a wrong method), a route an API token does not open is 403, a body over `MAX_BODY` 413.
"""

from __future__ import annotations

LOCAL = "local"  # the lead's own machine in routes; members use their labels (crew.md)
OWNER = ("owner", "standing")
MAX_BODY = 256 * 1024
ID_MAX = 128
HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 408: "timeout", 413: "too_large"}


class BadRequest(Exception):
    pass


def error_body(code: str, message: str) -> dict:
    """The one error shape (phone-api.md): `{"error": code, "message": message}`."""
    return {"error": code, "message": message}


def is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


def no_route(method: str, path: str) -> str:
    return f"no route {method} {path[:200]!r}: see docs/phone-api.md"


def too_large() -> str:
    return f"the body is over {MAX_BODY} bytes"


def whole_number(raw: str | None, name: str, default: int, low: int, high: int | None = None) -> int:
    """A query parameter's text as a whole number: `default` when absent, at least `low` (else 400), at most
    `high` (clamped, so a page is never larger than the reader allows). Digits only, at most 18 of them."""
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"{name} must be a whole number")
    value = int(raw)
    if value < low:
        raise BadRequest(f"{name} must be at least {low}")
    return min(value, high) if high is not None else value


def sender_name(sender: tuple) -> str | None:
    """The name an API token's items carry (features I10); None for the owner."""
    return None if sender == OWNER else sender[0]


def inbox_refusal(sender: tuple, item, item_id: str, *, owner_only: bool) -> tuple[int, str, str] | None:
    """Who may touch an inbox item (I3-I10): the owner any; an API token only its own — another sender's item
    is not even said to exist (404) — and then only to read, cancel or add a message (`owner_only`: 403)."""
    owner = sender == OWNER
    if item is None or not (owner or item.sender == sender[0]):
        return 404, "not_found", f"no inbox item {item_id!r}"
    if owner_only and not owner:
        return 403, "forbidden", "only the owner (or the item's sender, to cancel or add a message) may do that"
    return None


def route_refusal(*, owner: bool, redirected: bool, unrouted: bool, opens_to_senders: bool,
                  content_length: int | None, method: str, path: str) -> tuple[int, str, str] | None:
    """The door's answer once a credential got in: (status, code, message), or None to go on. `redirected`:
    the path would need a redirect (`//`, a trailing `/`), which is no route; `unrouted`: no route matched at
    all — None, so Quart raises its 404 or 405 and `http_failure` shapes it."""
    if redirected:
        return 404, "not_found", no_route(method, path)
    if unrouted:
        return None
    if not owner and not opens_to_senders:
        return 403, "forbidden", "an API token opens only the inbox routes (features I10)"
    if content_length is not None and content_length > MAX_BODY:
        return 413, "too_large", too_large()
    return None


def http_failure(code: int | None, method: str, path: str, description: str | None,
                 name: str) -> tuple[int, str, str]:
    """What an HTTP failure Quart raised answers: (status, code, message), the status always the failure's
    own. On an /api path a 404 names the method and route and a 405 the method the route does not take;
    a page's 404 names the page."""
    status, code_name = code or 500, HTTP_CODES.get(code, "http_error")
    if code == 413:
        return status, code_name, too_large()
    if not is_api(path):
        return status, code_name, f"no page {path[:200]!r}" if code == 404 else (description or name)
    if code == 404:
        return 404, "not_found", no_route(method, path)
    if code == 405:
        return 405, "method_not_allowed", f"{path[:200]!r} does not take {method}"
    return status, code_name, description or name


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



