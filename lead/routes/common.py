"""What every route group shares: the id and number rules, the one body reader, the one error shape.

Every `/api` answer that is not a success is JSON `{"error": code, "message": text}` built by `error`;
a malformed request is `BadRequest` (a 400 with its message). Handlers read the body the door parsed
(lead.door.parse_body): `body` gives them a dict or refuses.
"""

from __future__ import annotations

from quart import g, jsonify, request

LOCAL = "local"  # the lead's own machine in routes; members use their labels (crew.md)
OWNER = ("owner", "standing")
MAX_BODY = 256 * 1024
ID_MAX = 128


class BadRequest(Exception):
    pass


def error(status: int, code: str, message: str):
    return jsonify({"error": code, "message": message}), status


def is_api(path: str) -> bool:
    return path == "/api" or path.startswith("/api/")


async def body() -> dict:
    data = g.get("body")  # parsed by the door, strictly (lead.door.parse_body)
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


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


def _query_int(name: str, default: int, low: int, high: int | None = None) -> int:
    """A whole-number query parameter within [low, high] (clamped above), or 400."""
    raw = request.args.get(name)
    if raw is None:
        return default
    if not raw.isascii() or not raw.isdigit() or len(raw) > 18:
        raise BadRequest(f"{name} must be a whole number")
    value = int(raw)
    if value < low:
        raise BadRequest(f"{name} must be at least {low}")
    return min(value, high) if high is not None else value


def masked_rows(rows: list, on: bool) -> list:
    """X1: titles and subtitles of a conversation list with secrets masked (when redaction is on)."""
    if not on:
        return rows
    from crew.redact import redact

    return [{**r, **{k: redact(r[k]) for k in ("title", "subtitle", "line") if isinstance(r.get(k), str)}}
            if isinstance(r, dict) else r for r in rows]


def reader_lookup(bridge, hub):
    """The reader of `machine`/`agent` (None when unknown): the lead's own, or a member's through `hub`."""

    def reader_of(machine: str, agent: str):
        machine, agent = _id(machine, "machine"), _id(agent, "agent")  # 400 before any lookup (issue 9.13)
        if machine == LOCAL:
            return bridge.readers.get(agent)
        return hub.reader(machine, agent) if hub is not None else None
    return reader_of
