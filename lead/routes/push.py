"""Push: `GET /api/push/key`, `POST /api/push/subscribe`, `DELETE /api/push/subscribe` (phone-api.md).
A subscription is checked by collie.lead.push.pusher.parse_subscription; a phone removes only its own."""

from __future__ import annotations

import time

import trio

from collie.lead.push.pusher import Pusher, canonical_endpoint, parse_subscription
from collie.lead.routes.bodies import push_endpoint
from collie.lead.routes.common import error
from collie.lead.routes.rules import BadRequest


def register(app, pusher: Pusher) -> None:
    """`GET /api/push/key`, `POST /api/push/subscribe`, `DELETE /api/push/subscribe` (phone-api.md)."""
    from quart import g, jsonify

    @app.get("/api/push/key")
    async def push_key():
        return jsonify({"key": pusher.public_key})

    @app.post("/api/push/subscribe")
    async def push_subscribe():
        data = g.get("body")  # parsed by the door, strictly (collie.lead.door.policy.parse_body)
        try:
            sub = parse_subscription(data, getattr(g, "device", None), loopback_ok=pusher.loopback_ok)
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        await trio.to_thread.run_sync(pusher.store.add, sub, time.time())
        return jsonify({"ok": True})

    @app.delete("/api/push/subscribe")
    async def push_unsubscribe():
        try:
            endpoint = push_endpoint(g.get("body"))
        except BadRequest as exc:
            return error(400, "bad_request", str(exc))
        canonical = canonical_endpoint(endpoint, loopback_ok=True)[0]  # as stored at subscribe time (issue 25 D3)
        endpoint = endpoint if endpoint in pusher.store.subs else (canonical or endpoint)
        sub = pusher.store.subs.get(endpoint)
        if sub is None or (sub.device != getattr(g, "device", None) and getattr(g, "device", None) is not None):
            return error(404, "not_found", "no such subscription")
        await trio.to_thread.run_sync(pusher.store.remove, endpoint)
        return jsonify({"ok": True})
