"""Turn-end push settings: `GET /api/push/turns`, `POST /api/push/turns` (issue 37; docs/push.md, phone-api.md).
Each phone's own (its paired device; the local credential has its own too); turning one on needs that
phone's push subscription."""

from __future__ import annotations

import trio

from collie.lead.push.turns import ALL, TurnPusher, device_key
from collie.lead.routes.common import error
from collie.lead.routes.rules import BadRequest, _id

NO_SUBSCRIPTION = ("This phone has no push subscription: turn on notifications first "
                   "(Notify me when an agent asks).")


def setting(data) -> tuple[tuple, bool]:
    """The body of `POST /api/push/turns`: `{"all": bool}` or `{"machine", "agent", "conversation", "on": bool}`
    → (key, on); BadRequest says what is wrong."""
    if not isinstance(data, dict):
        raise BadRequest('the body must be {"all": true|false} or {"machine", "agent", "conversation", "on": true|false}')
    if "all" in data:
        if set(data) != {"all"} or type(data["all"]) is not bool:
            raise BadRequest('"all" must be true or false, alone in the body')
        return ALL, data["all"]
    extra = set(data) - {"machine", "agent", "conversation", "on"}
    if extra:
        raise BadRequest(f"unknown field {sorted(extra)[0]!r}: give machine, agent, conversation and on")
    if type(data.get("on")) is not bool:
        raise BadRequest('"on" must be true or false')
    machine = _id(data.get("machine", "local"), "machine")
    return (machine, _id(data.get("agent"), "agent"), _id(data.get("conversation"), "conversation")), data["on"]


def register(app, turns: TurnPusher) -> None:
    from quart import g, jsonify

    @app.get("/api/push/turns")
    async def push_turns():
        return jsonify(turns.settings(device_key(getattr(g, "device", None))))

    @app.post("/api/push/turns")
    async def push_turns_set():
        device = device_key(getattr(g, "device", None))
        try:
            key, on = setting(g.get("body"))
        except BadRequest as exc:
            return error(400, "bad_request", str(exc))
        if on and not turns.subscribed(device):
            return error(409, "no_subscription", NO_SUBSCRIPTION)
        await trio.to_thread.run_sync(turns.set, device, key, on, limiter=turns.pusher.limiter_disk)
        return jsonify(turns.settings(device))
