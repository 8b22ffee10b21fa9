"""The phone's web app, served by the lead (issue 12): static files and the Needs you list.

The app is plain HTML, CSS and ES modules in `lead/web/` — no build step, nothing fetched from
elsewhere. Every page is served with a strict Content-Security-Policy (scripts and styles from this
lead only; the one inline script, boot.js, allowed by its hash), `X-Content-Type-Options: nosniff`,
and `X-Frame-Options: DENY`.

`GET /api/needs` lists every open ask on every machine, oldest first (the order in which the lead
first saw them), so the dashboard can show one Needs you list above the sections: those waiting for you
(`asks`), and apart those whose agent cannot be answered through now (`unreachable`, collie.lead.feed.needs).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import re
import time
from pathlib import Path

from quart import Response, jsonify, request

from collie.lead.feed.dashboard import machines_of
from collie.lead.feed.needs import NeedsList

WEB = Path(__file__).resolve().parent  # this module lives beside the app's files
JS = "text/javascript; charset=utf-8"
MODULES = ['device', 'app', 'api', 'state', 'dom', 'dashboard', 'agent', 'chat', 'askcard', 'items', 'icons', 'inbox', 'newconv', 'push', 'strings']
FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    **{f"/{m}.js": (f"{m}.js", JS) for m in MODULES},
    "/app.css": ("app.css", "text/css; charset=utf-8"),
    "/sw.js": ("sw.js", JS),
    "/manifest.webmanifest": ("manifest.webmanifest", "application/manifest+json"),
    "/icon.svg": ("icon.svg", "image/svg+xml"),
}
SHELL = (*(f"/{m}.js" for m in MODULES), "/app.css", "/manifest.webmanifest")  # named versioned in index.html
ENTRY = "app.js"
_STATIC = re.compile(rb"""\bimport\s*(?:[\w*{}\s,$]+\s*from\s*)?["']\./([a-z]+\.js)["']""")


def module_graph(raw: dict[str, bytes], entry: str = ENTRY) -> list[str]:
    """The modules the first screen (the dashboard) cannot run without: the static import graph of `entry`,
    breadth first. The page names them for preloading; what a screen imports when first shown
    (`import("./x.js")`) comes when it is shown, so the first load keeps to issue 29's budget (≤ 30 KB over
    the wire). No build step: read off the sources."""
    order: list[str] = []
    queue = [entry]
    while queue:
        name = queue.pop(0)
        if name in order or name not in raw:
            continue
        order.append(name)
        queue += sorted({m.decode() for m in _STATIC.findall(raw[name])} - set(order))
    return [n for n in order if n != entry]


CSP = ("default-src 'self'; script-src 'self' {boot}; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "manifest-src 'self'; worker-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


def needs_read(bridge, hub, first_seen: dict, now: float, redact_on: bool = True,
               recall: dict | None = None) -> NeedsList:
    """Every open ask on every machine, oldest first; titles masked like the conversation list's (X1):
    the live channel's rule (collie.lead.feed.needs), read whole, with the times `first_seen` (and `recall`, from before
    a restart) kept from before."""
    needs = NeedsList(first_seen, recall)
    needs.read(machines_of(bridge, hub), now, redact_on=redact_on)
    return needs


def needs_list(bridge, hub, first_seen: dict, now: float, redact_on: bool = True) -> list[dict]:
    """The asks waiting for you (needs_read)."""
    return needs_read(bridge, hub, first_seen, now, redact_on).asks()


def approvals_list(inbox) -> list[dict]:
    """Per agent, the API-token senders' requests waiting for the owner's approval (I3): the dashboard
    counts them in Needs you and on the agent's row, not only inside that agent's inbox."""
    pending = getattr(inbox, "pending", None)
    if not isinstance(pending, dict):
        return []
    out = [{"machine": machine, "agent": agent, "count": len(items)}
           for (machine, agent), items in pending.items() if items]
    return sorted(out, key=lambda a: (a["machine"], a["agent"]))


class Static:
    """The page's files, read once: each with its gzip body and a strong ETag. `version` names this set of
    files: index.html and sw.js refer to the shell as /v/<version>/…, served immutable, so a repeat visit
    revalidates only the page itself (a 304) and a new release is a new name."""

    def __init__(self, folder: Path = WEB) -> None:
        raw = {name: (folder / name).read_bytes() for name, _ in FILES.values()}
        # issues 39, 29: the browser learns the first screen's modules from the page itself, at once
        self.preloads = module_graph(raw)
        links = "".join(f'<link rel="modulepreload" href="/{n}">' for n in self.preloads).encode()
        raw["index.html"] = raw["index.html"].replace(b"<!-- modulepreload -->", links)
        self.version = hashlib.sha256(b"".join(hashlib.sha256(raw[n]).digest() for n in sorted(raw))).hexdigest()[:16]
        v = f"/v/{self.version}".encode()
        for path in SHELL:
            raw["index.html"] = raw["index.html"].replace(f'"{path}"'.encode(), b'"' + v + path.encode() + b'"')
        raw["sw.js"] = raw["sw.js"].replace(b'const VERSION = "dev";', f'const VERSION = "{self.version}";'.encode())
        # boot.js runs inline, first thing in <head> (it starts the first screen's read): allowed by its hash
        boot = (folder / "boot.js").read_bytes()
        raw["index.html"] = raw["index.html"].replace(b'<script data-inline="boot.js"></script>',
                                                      b"<script>" + boot + b"</script>")
        self.csp = CSP.format(boot=f"'sha256-{base64.b64encode(hashlib.sha256(boot).digest()).decode()}'")
        self.files = {}
        for name, body in raw.items():
            tag = '"' + hashlib.sha256(body).hexdigest()[:20] + '"'
            self.files[name] = (body, gzip.compress(body, 9, mtime=0), tag)


def serve_file(static: Static, name: str, ctype: str, *, immutable: bool) -> Response:
    body, packed, tag = static.files[name]
    wanted = request.headers.get("If-None-Match", "")
    gz = "gzip" in request.headers.get("Accept-Encoding", "").lower() and len(packed) < len(body)
    if tag in [t.strip().removeprefix("W/") for t in wanted.split(",")]:
        resp = Response(b"", status=304)
    else:
        resp = Response(packed if gz else body, content_type=ctype)
        if gz:
            resp.headers["Content-Encoding"] = "gzip"
    resp.headers["ETag"] = tag
    resp.headers["Vary"] = "Accept-Encoding"
    resp.headers["Cache-Control"] = "public, max-age=31536000, immutable" if immutable else "no-cache"
    if resp.status_code != 304:
        resp.headers["Content-Security-Policy"] = static.csp
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["Referrer-Policy"] = "no-referrer"
        resp.headers["X-Content-Type-Options"] = "nosniff"
    if name == "sw.js":
        resp.headers["Service-Worker-Allowed"] = "/"
    return resp


def install_web(app, bridge, hub, redact_on: bool | None = None, needs: NeedsList | None = None, inbox=None) -> None:
    """`needs`: the live channel's list, whose first-seen times (kept across restarts) GET /api/needs shares."""
    if redact_on is None:
        import os

        from collie.crew.redact import enabled
        redact_on = enabled(dict(os.environ))
    static = Static()
    first_seen: dict = needs.first_seen if needs is not None else {}
    recall: dict = needs.recall if needs is not None else {}

    def plain(path: str):
        name, ctype = FILES[path]

        async def serve():
            return serve_file(static, name, ctype, immutable=False)
        serve.__name__ = f"web_{name.replace('.', '_')}"
        return serve

    for path in FILES:
        app.add_url_rule(path, view_func=plain(path), methods=["GET"])

    by_name = {name: ctype for name, ctype in FILES.values() if name not in ("index.html", "sw.js")}

    @app.get("/v/<version>/<name>")
    async def web_versioned(version: str, name: str):
        if name not in by_name:
            return Response("not found", status=404, content_type="text/plain")
        # an old version's name still gets today's file, for revalidation only: never cached for good
        return serve_file(static, name, by_name[name], immutable=version == static.version)

    @app.get("/api/needs")
    async def needs():
        got = needs_read(bridge, hub, first_seen, time.time(), redact_on, recall)
        return jsonify({"asks": got.asks(), "unreachable": got.unreachable(),
                        "approvals": approvals_list(inbox)})
