"""The phone's web app, served by the lead (issue 12): static files and the Needs you list.

The app is plain HTML, CSS and ES modules in `lead/web/` — no build step, nothing fetched from
elsewhere. Every page is served with a strict Content-Security-Policy (scripts and styles from this
lead only, no inline script), `X-Content-Type-Options: nosniff`, and `X-Frame-Options: DENY`.

`GET /api/needs` lists every open ask on every machine, oldest first (the order in which the lead
first saw them), so the dashboard can show one Needs you list above the sections.
"""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from quart import Response, jsonify

WEB = Path(__file__).resolve().parent / "web"
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/api.js": ("api.js", "text/javascript; charset=utf-8"),
    "/state.js": ("state.js", "text/javascript; charset=utf-8"),
    "/dom.js": ("dom.js", "text/javascript; charset=utf-8"),
    "/dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "/agent.js": ("agent.js", "text/javascript; charset=utf-8"),
    "/chat.js": ("chat.js", "text/javascript; charset=utf-8"),
    "/askcard.js": ("askcard.js", "text/javascript; charset=utf-8"),
    "/items.js": ("items.js", "text/javascript; charset=utf-8"),
    "/inbox.js": ("inbox.js", "text/javascript; charset=utf-8"),
    "/newconv.js": ("newconv.js", "text/javascript; charset=utf-8"),
    "/push.js": ("push.js", "text/javascript; charset=utf-8"),
    "/strings.js": ("strings.js", "text/javascript; charset=utf-8"),
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/sw.js": ("sw.js", "text/javascript; charset=utf-8"),
    "/manifest.webmanifest": ("manifest.webmanifest", "application/manifest+json"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
}
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def needs_list(bridge, hub, first_seen: dict, now: float) -> list[dict]:
    """Every open ask on every machine, oldest first."""
    out = []
    readers = [("local", r) for r in bridge.readers.values()]
    for label, member in sorted((hub.members if hub is not None else {}).items()):
        readers += [(label, r) for r in member.readers.values()]
    alive = set()
    for machine, reader in readers:
        for conv in reader.conversations.values():
            for ask in conv.asks:
                key = (machine, reader.name, ask.id)
                alive.add(key)
                seen = first_seen.setdefault(key, now)
                out.append({"machine": machine, "agent": reader.name, "conversation": conv.id,
                            "conversation_title": conv.title or "Untitled conversation", "ask": ask.id,
                            "title": ask.title, "kind": ask.kind, "expires_at": ask.expires_at,
                            "since": datetime.datetime.fromtimestamp(seen, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                            "_t": seen})
    for key in list(first_seen):
        if key not in alive:
            del first_seen[key]
    out.sort(key=lambda a: (a["_t"], a["machine"], a["agent"], a["conversation"]))
    for a in out:
        del a["_t"]
    return out


def install_web(app, bridge, hub) -> None:
    cache: dict[str, bytes] = {}
    first_seen: dict = {}

    def static(path: str):
        async def serve():
            name, ctype = FILES[path]
            if name not in cache:
                cache[name] = (WEB / name).read_bytes()
            resp = Response(cache[name], content_type=ctype)
            resp.headers["Content-Security-Policy"] = CSP
            resp.headers["X-Content-Type-Options"] = "nosniff"
            resp.headers["X-Frame-Options"] = "DENY"
            resp.headers["Referrer-Policy"] = "no-referrer"
            resp.headers["Cache-Control"] = "no-cache"
            if path == "/sw.js":
                resp.headers["Service-Worker-Allowed"] = "/"
            return resp
        serve.__name__ = f"web_{FILES[path][0].replace('.', '_')}"
        return serve

    for path in FILES:
        app.add_url_rule(path, view_func=static(path), methods=["GET"])

    @app.get("/api/needs")
    async def needs():
        return jsonify({"asks": needs_list(bridge, hub, first_seen, time.time())})
