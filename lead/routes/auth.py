"""The door at the front of every request, and the handlers that turn every failure into the one error shape.

`authenticate` runs before any handler: Host and Origin (collie.lead.door.pairing), the credential — the local one,
a paired phone's cookie with its CSRF header, or an inbox API token — then the matched route and the
body (collie.lead.door.policy; issues 9.2, 9.10, 11.2). The error handlers answer JSON for every /api failure, and for
pages too, with the pages' guard headers (issue 25).
"""

from __future__ import annotations

import time

import trio
from quart import g, has_request_context, request
from werkzeug.exceptions import HTTPException
from werkzeug.routing import RequestRedirect

from collie.crew import logs
from collie.crew.security import bearer_token, same_secret
from collie.lead.door.policy import BodyRefused, opens_to_senders, parse_body
from collie.lead.routes.common import error
from collie.lead.routes.rules import OWNER, BadRequest, http_failure, is_api, route_refusal

log = logs.get("api")


def register(app, credential: str, hub=None, *, door=None, devices=None) -> None:
    """Put the door in front of every request of `app`, and its JSON error handlers behind them."""
    from collie.lead.door.http import see_client, trust_connection
    from collie.lead.door.pairing import (PHONE_NOT_SIGNED_IN, csrf_ok, device_of, guard, presented_cookies,
                                          secure_headers)

    if hub is not None:
        from quart import websocket

        @app.before_websocket
        async def trust_members():
            """A member's link with a valid member token: a trusted connection (collie.lead.door.connections)."""
            token = bearer_token(websocket.headers.get("authorization", ""))
            if token and hub.store.member_for(token):
                trust_connection()

    @app.before_request
    async def authenticate():
        """The door: Host and Origin (collie.lead.door.pairing), the credential — the local one, a paired phone's
        cookie with its CSRF header, or an inbox API token — then the matched route and the body
        (collie.lead.door.policy; issues 9.2, 9.10, 11.2)."""
        g.sender = None
        g.device = None
        g.body = None
        g.client = see_client(request.headers)  # the phone's address, also behind a trusted proxy (issue 35)
        if door is not None:
            refused = guard(door)
            if refused is not None:
                return refused
        if not is_api(request.path):  # pages, pairing (`POST /pair`: the code is the credential), /healthz
            return None
        header = request.headers.get("authorization", "")
        given = bearer_token(header)
        why = None
        if given and same_secret(given, credential):
            g.sender = OWNER
        elif not given and devices is not None:
            dev, why = device_of(devices, time.time())  # the cookie with its device key or live ticket (issue 25.1)
            if dev is not None:
                if not csrf_ok():
                    return error(403, "csrf", "a write from the phone needs the header X-Collie-CSRF: 1")
                g.sender, g.device = OWNER, dev.id
                if devices.seen(dev, time.time()):
                    await trio.to_thread.run_sync(devices.write_seen, dev)
        elif given and hub is not None:
            g.sender = hub.store.token_for(given)  # an external sender's API token (features I10)
        if g.sender is None:
            if why is None and not given and devices is not None and presented_cookies():
                why = PHONE_NOT_SIGNED_IN  # a phone's cookie without its own device key: the phone must pair again
            return error(401, "unauthorized", why or "this route needs the API credential (Authorization: Bearer …)")
        trust_connection()  # its connection keeps its place in the budget (collie.lead.door.connections, issue 25.4)
        unrouted = request.routing_exception is not None  # Quart raises it next: a JSON 404 or 405 below
        view = None if unrouted else app.view_functions.get(request.endpoint)
        refused = route_refusal(owner=g.sender == OWNER,
                                redirected=isinstance(request.routing_exception, RequestRedirect),
                                unrouted=unrouted, opens_to_senders=opens_to_senders(view),
                                content_length=request.content_length, method=request.method, path=request.path)
        if refused is not None:
            return error(*refused)
        if unrouted:
            return None
        try:
            g.body = parse_body(await request.get_data())  # the one parse: handlers read g.body (issue 25.9)
        except BodyRefused as exc:
            return error(400, "bad_request", str(exc))
        return None

    @app.errorhandler(BadRequest)
    async def bad_request(exc):
        return error(400, "bad_request", str(exc))

    @app.errorhandler(HTTPException)
    async def http_error(exc: HTTPException):
        if not has_request_context():
            return exc  # a websocket (the members' link): Quart's own answer
        resp, status = error(*http_failure(exc.code, request.method, request.path, exc.description, exc.name))
        if not is_api(request.path):  # a page or /pair: JSON too, with the pages' guard headers (issue 25)
            secure_headers(resp)
            resp.headers["Content-Security-Policy"] = "default-src 'none'; frame-ancestors 'none'"
        return resp, status

    @app.errorhandler(Exception)
    async def internal_error(exc: Exception):
        """A defect, never bad input (the door refuses that): one escaped log line, a JSON 500."""
        if not has_request_context():
            raise exc  # a websocket (the members' link): Quart's own handling
        log.error("[api] %s %r failed: %s %r", request.method, request.path[:200], type(exc).__name__, str(exc)[:200])
        return error(500, "internal", "the lead failed on this request; the log has one line about it")
