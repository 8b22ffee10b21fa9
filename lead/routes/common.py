"""What every route group shares around the plain rules (collie.lead.routes.rules, collie.lead.routes.bodies): the one
body reader, the one error response, the lookup of an agent's reader.

Every `/api` answer that is not a success is JSON `{"error": code, "message": text}` built by `error`;
a malformed request is `BadRequest` (a 400 with its message). Handlers read the body the door parsed
(collie.lead.door.policy.parse_body): `body` gives them a dict or refuses.
"""

from __future__ import annotations

from quart import g, jsonify, request

from collie.lead.routes.bodies import json_object
from collie.lead.routes.rules import LOCAL, _id, error_body, whole_number


def error(status: int, code: str, message: str):
    """The one error response: `rules.error_body` as JSON, with its status."""
    return jsonify(error_body(code, message)), status


async def body() -> dict:
    """The body the door parsed, strictly (collie.lead.door.policy.parse_body), as a dict (collie.lead.routes.bodies.json_object)."""
    return json_object(g.get("body"))


def no_agent(machine: str, agent: str):
    """The 404 of a machine or agent this lead does not know."""
    return error(404, "not_found", f"no durable agent {agent!r} on {machine!r}")


def _query_int(name: str, default: int, low: int, high: int | None = None) -> int:
    """A whole-number query parameter within [low, high] (clamped above), or 400 (rules.whole_number)."""
    return whole_number(request.args.get(name), name, default, low, high)


def masked_rows(rows: list, on: bool) -> list:
    """X1: titles and subtitles of a conversation list with secrets masked (when redaction is on)."""
    if not on:
        return rows
    from collie.crew.redact import redact

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
