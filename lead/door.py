"""The phone's door: who may come in, from where, and the pairing and live-channel routes (phone-api.md).

Guards, in the order a request meets them:
1. **Host** (DNS rebinding): the `Host` header must name this lead — a loopback name, the bound
   address, this machine's name or addresses when bound to all of them, or a name given with
   `collie serve --name` (`COLLIE_NAMES` in `.env`). Anything else: 421 `wrong_host`. `/healthz`
   and the members' `/crew/v1` link (bearer-authenticated, dialled by address) are exempt.
2. **Origin**: a request that carries an `Origin` must come from this lead's own origin; no CORS
   header is ever sent, so other sites cannot read an answer. Else 403 `cross_origin`.
3. **Credential**: a paired device's cookie (`collie_device`), or `Authorization: Bearer` with the
   local credential or an inbox API token (checked in `lead.api`).
4. **CSRF**: a write (POST, PUT, PATCH, DELETE) authenticated by the cookie must carry the header
   `X-Collie-CSRF: 1`, which a cross-site form or image cannot send. Bearer requests need none.

`Door` is plain: the daemon builds it with the names it serves; the API's `before_request` asks it.
"""

from __future__ import annotations

import ipaddress
import socket
import time
from urllib.parse import urlsplit

import trio
from quart import Response, g, jsonify, make_response, request

from crew import logs
from lead.devices import COOKIE, Devices, PairingRefused
from lead.events import Channel, Feed

log = logs.get("door")

CSRF_HEADER = "X-Collie-CSRF"
WRITES = ("POST", "PUT", "PATCH", "DELETE")
LOOPBACK = ("127.0.0.1", "localhost", "::1")
EXEMPT = ("/healthz", "/crew/v1")
COOKIE_MAX_AGE = 400 * 86400  # browsers cap cookies at 400 days; pairing again renews it


def split_host(value: str) -> tuple[str, int | None]:
    """`Host` header → (lowercase name, port or None). IPv6 literals lose their brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        name, _, rest = value[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = value.rpartition(":") if value.count(":") == 1 else (value, "", "")
        if not name:
            name, port = port, ""
    return name.rstrip("."), (int(port) if port.isdigit() else None)


class Door:
    def __init__(self, host: str, port: int, *, tls: bool, names: list[str] | tuple[str, ...] = ()) -> None:
        self.tls = tls
        self.port = port
        self.names = {n.lower().strip("[]").rstrip(".") for n in (*LOOPBACK, *names) if n}
        if host in ("0.0.0.0", "::", ""):
            self.names |= {socket.gethostname().lower(), f"{socket.gethostname().lower()}.local"}
            try:
                for info in socket.getaddrinfo(socket.gethostname(), None):
                    self.names.add(info[4][0].lower())
            except OSError:
                pass
        else:
            self.names.add(host.lower().strip("[]"))

    def host_ok(self, header: str | None) -> bool:
        if not header:
            return False
        name, port = split_host(header)
        if port is not None and self.port and port != self.port:
            return False
        return name in self.names

    def origin_ok(self, origin: str | None) -> bool:
        if origin is None:
            return True
        try:
            parts = urlsplit(origin)
            port = parts.port
        except ValueError:
            return False
        if parts.scheme != ("https" if self.tls else "http") or not parts.hostname:
            return False
        if port is not None and self.port and port != self.port:
            return False
        return parts.hostname.lower().strip("[]") in self.names

    def base_url(self, host: str) -> str:
        """The address a phone opens: `scheme://host:port`."""
        shown = host
        if host in ("0.0.0.0", "::", ""):
            shown = socket.gethostname()
        try:
            if isinstance(ipaddress.ip_address(shown), ipaddress.IPv6Address):
                shown = f"[{shown}]"
        except ValueError:
            pass
        return f"{'https' if self.tls else 'http'}://{shown}:{self.port}"


def error(status: int, code: str, message: str):
    return jsonify({"error": code, "message": message}), status


def guard(door: Door):
    """Checks 1, 2 and 4 of the module's list; None lets the request through to the credential check."""
    path = request.path
    if path in EXEMPT:
        return None
    if not door.host_ok(request.headers.get("host")):
        return error(421, "wrong_host", "this lead does not serve that name: open it by its address, or add the "
                                        "name with `collie serve --name NAME`")
    if not door.origin_ok(request.headers.get("origin")):
        return error(403, "cross_origin", "requests from other sites are refused")
    return None


def csrf_ok() -> bool:
    return request.method not in WRITES or request.headers.get(CSRF_HEADER) == "1"


PAIR_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<title>Pair with Collie</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:30rem;margin:2rem auto;padding:0 1rem}
button{font:inherit;padding:.75rem 1.25rem;min-height:48px}</style></head>
<body><h1>Pair this phone</h1>
<p id="msg">Pairing…</p>
<script>
(async () => {
  const msg = document.getElementById("msg");
  const code = location.hash.slice(1);
  history.replaceState(null, "", location.pathname);
  if (!code) { msg.textContent = "This pairing link has no code. Run collie pair again."; return; }
  try {
    const r = await fetch("/api/pair", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Collie-CSRF": "1"},
      body: JSON.stringify({code, name: navigator.platform || "phone"})});
    const body = await r.json();
    if (r.ok) { msg.textContent = "Paired as " + body.device.name + ". Opening Collie…"; location.replace("/"); }
    else { msg.textContent = body.message; }
  } catch (e) { msg.textContent = "Could not reach Collie. Try again."; }
})();
</script></body></html>
"""


def install_door(app, door: Door, devices: Devices, feed: Feed, *, owner_check) -> None:
    """The pairing page and route, and the live channel. `owner_check()` says whether the request's
    credential (already checked by the API) may read everything (a device or the local credential)."""

    @app.get("/pair")
    async def pair_page():
        resp = await make_response(PAIR_PAGE)
        resp.headers["Content-Type"] = "text/html; charset=utf-8"
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["Content-Security-Policy"] = ("default-src 'none'; script-src 'unsafe-inline'; "
                                                   "style-src 'unsafe-inline'; connect-src 'self'")
        return resp

    @app.post("/api/pair")
    async def pair():
        data = await request.get_json(force=True, silent=True)
        if not isinstance(data, dict):
            return error(400, "bad_request", "the body must be a JSON object: {\"code\": \"…\"}")
        try:
            dev, credential = devices.redeem(data.get("code"), data.get("name"), time.time())
        except PairingRefused as exc:
            return error(401 if exc.code != "too_many" else 409, f"pairing_{exc.code}", str(exc))
        log.info("[bridge] paired a phone: %s", dev.name)
        resp = jsonify({"device": dev.public()})
        resp.set_cookie(COOKIE, credential, max_age=COOKIE_MAX_AGE, httponly=True, samesite="Strict",
                        secure=door.tls, path="/")
        resp.headers["Cache-Control"] = "no-store"
        return resp

    @app.get("/api/events")
    async def events():
        if not owner_check():
            return error(403, "forbidden", "the live channel is for paired phones and the local credential")
        try:
            view = _view_from(request.args)
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        try:
            ch = feed.open(getattr(g, "device", None))
        except OverflowError as exc:
            return error(503, "busy", str(exc))
        last = request.headers.get("Last-Event-ID") or request.args.get("last_event_id")
        try:
            await feed.set_view(ch, view)
        except BaseException:
            await feed.close(ch)
            raise
        missed = feed.log.since(last)
        resp = Response(_stream(feed, ch, missed), mimetype="text/event-stream")
        resp.headers["Cache-Control"] = "no-store"
        resp.headers["X-Accel-Buffering"] = "no"
        resp.timeout = None
        return resp

    @app.post("/api/events/<channel>/view")
    async def events_view(channel: str):
        ch = feed.channels.get(channel)
        if ch is None or ch.device != getattr(g, "device", None):
            return error(404, "not_found", "no such live channel (it may have closed: open /api/events again)")
        data = await request.get_json(force=True, silent=True)
        if not isinstance(data, dict):
            return error(400, "bad_request", "the body must be a JSON object")
        try:
            view = _view_from(data)
        except ValueError as exc:
            return error(400, "bad_request", str(exc))
        await feed.set_view(ch, view)
        for ev in await feed.view_events(ch):
            ch.offer(ev)
        return jsonify({"ok": True, "view": data if view else None})


def _view_from(args) -> tuple | None:
    machine, agent, conv = args.get("machine"), args.get("agent"), args.get("conversation")
    if agent in (None, ""):
        return None
    for name, value in (("machine", machine or "local"), ("agent", agent), ("conversation", conv)):
        if value is None:
            continue
        if not isinstance(value, str) or not 1 <= len(value) <= 128 or "/" in value or not value.isprintable():
            raise ValueError(f"{name} must be 1-128 printable characters without '/'")
    return (machine or "local", agent, conv or None)


async def _stream(feed: Feed, ch: Channel, missed):
    """The body of one live channel: hello, snapshot or missed events, then changes and heartbeats."""
    try:
        yield f"retry: 2000\nevent: hello\ndata: {{\"channel\":\"{ch.id}\"}}\n\n".encode()
        if missed is None:
            yield await _snapshot(feed, ch)
        else:
            for ev in missed:
                if ev.scope is None or ev.scope == ch.conv_key:
                    yield ev.encode()
            for ev in await feed.view_events(ch):
                yield ev.encode()
        while True:
            if ch.overflowed:
                while True:
                    try:
                        ch.receive.receive_nowait()
                    except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                        break
                ch.overflowed = False
                yield await _snapshot(feed, ch)
            if ch.closed.is_set():
                break
            got = None
            with trio.move_on_after(15.0):
                try:
                    got = await ch.receive.receive()
                except (trio.EndOfChannel, trio.ClosedResourceError):
                    break
            if ch.closed.is_set():
                break
            yield got.encode() if got is not None else b": ping\n\n"
        if ch.close_reason == "unauthorized":
            yield b"event: unauthorized\ndata: {\"error\":\"unauthorized\",\"message\":\"this phone was revoked\"}\n\n"
    finally:
        await feed.close(ch)


async def _snapshot(feed: Feed, ch: Channel) -> bytes:
    import json

    seq_id = f"{feed.log.boot}-{feed.log.seq}"
    data = await feed.snapshot(ch)
    return f"id: {seq_id}\nevent: snapshot\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()
