"""Pairing and devices: the pairing page (`/pair`), the route that trades a code for a device cookie and
key (`POST /pair`), the renewal of a cookie a neighbour replaced (`POST /pair/renew`), and
`POST /api/events/ticket`: a paired phone's ticket for the live channel (issue 25.1).
Who may come in, and the guards' rules, are collie.lead.door.pairing's (the door in collie.lead.routes.auth asks them)."""

from __future__ import annotations

import time

from quart import jsonify, make_response, request

from collie.crew import logs
from collie.lead.door.devices import (CHALLENGE_TTL, COOKIE, KEY_HEADER, SECURE_COOKIE, TICKET_TTL, Devices,
                                      PairingRefused, RenewRefused, parse_sign_key)
from collie.lead.door.pairing import (ANSWER_CSP, COOKIE_MAX_AGE, PAIR_CSP, PAIR_PAGE, TRUST_LINE, Door, csrf_ok,
                                      secure_headers)
from collie.lead.door.policy import BodyRefused, parse_body
from collie.lead.routes.common import error

log = logs.get("door")


def with_cookie(resp, door: Door, credential: str):
    """The device cookie on an answer (pairing, renewal): HttpOnly, SameSite=Strict, `__Host-` when the phone
    speaks HTTPS (the lead's own TLS, or the proxy's of `--public-url`)."""
    resp.set_cookie(SECURE_COOKIE if door.secure else COOKIE, credential, max_age=COOKIE_MAX_AGE, httponly=True,
                    samesite="Strict", secure=door.secure, path="/")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def register(app, door: Door, devices: Devices) -> None:
    """The pairing page (`/pair`), the route that trades a code for a device cookie and key (`POST /pair`),
    and `POST /api/events/ticket`: a paired phone's ticket for the live channel (issue 25.1)."""
    from quart import g

    @app.post("/api/events/ticket")
    async def events_ticket():
        dev = devices.by_id(g.device) if g.get("device") else None
        if dev is None:  # the local credential (the door let only owners in): its header opens the channel
            return jsonify({"ticket": None, "expires_in": 0,
                            "message": "the local credential needs no ticket: send it to /api/events as Authorization"})
        return jsonify({"ticket": devices.new_ticket(dev, time.time()), "expires_in": int(TICKET_TTL)})

    @app.after_request
    async def pair_headers(resp):
        if request.path in ("/pair", "/pair/renew"):  # the page and every answer of POST /pair, refusals too
            secure_headers(resp)
            resp.headers.setdefault("Content-Security-Policy", ANSWER_CSP)
        return resp

    @app.get("/pair")
    async def pair_page():
        resp = await make_response(PAIR_PAGE.replace("<!--trust-->", TRUST_LINE if door.trust_page else ""))
        resp.headers["Content-Type"] = "text/html; charset=utf-8"
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["Content-Security-Policy"] = PAIR_CSP
        return resp

    @app.post("/pair")
    async def pair():
        try:
            data = parse_body(await request.get_data())
        except BodyRefused as exc:
            return error(400, "bad_request", str(exc))
        if not isinstance(data, dict):
            return error(400, "bad_request", "the body must be a JSON object: {\"code\": \"…\"}")
        try:
            sign_key = parse_sign_key(data.get("sign_key"))
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        try:
            dev, credential, key = devices.redeem(data.get("code"), data.get("name"), time.time(), sign_key)
        except PairingRefused as exc:
            return error(401 if exc.code != "too_many" else 409, f"pairing_{exc.code}", str(exc))
        log.info("[bridge] paired a phone: %s (from %s)", dev.name, g.get("client") or "?")
        return with_cookie(jsonify({"device": dev.public(), "key": key}), door, credential)

    @app.post("/pair/renew")
    async def renew():
        """A replaced cookie renewed (issue 25.1): `{}` with the device key gives a challenge; `{challenge,
        signature}` (the page's signing key over RENEW_CONTEXT + challenge) gives a new cookie."""
        if not csrf_ok():
            return error(403, "csrf", "a write from the phone needs the header X-Collie-CSRF: 1")
        try:
            data = parse_body(await request.get_data())
        except BodyRefused as exc:
            return error(400, "bad_request", str(exc))
        if not isinstance(data, dict) or set(data) - {"challenge", "signature"}:
            return error(400, "bad_request", "the body must be {} or {\"challenge\": …, \"signature\": …}")
        if data and not all(isinstance(data.get(k), str) for k in ("challenge", "signature")):
            return error(400, "bad_request", "challenge and signature must both be strings (base64url)")
        key, now = request.headers.get(KEY_HEADER), time.time()
        try:
            if not data:
                return jsonify({"challenge": devices.new_challenge(key, now), "expires_in": int(CHALLENGE_TTL)})
            dev, credential = devices.renew(key, data.get("challenge"), data.get("signature"), now)
        except RenewRefused as exc:
            return error(401, "unauthorized", str(exc))
        log.info("[bridge] renewed a phone's cookie: %s (from %s)", dev.name, g.get("client") or "?")
        return with_cookie(jsonify({"device": dev.public()}), door, credential)
