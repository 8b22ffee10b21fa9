"""The browser's cookie jar at the lead's door (issue 42.3): any `Cookie` a browser can send is read, and a
jar that grew too big is cleared of what the lead does not own.

A browser sends a host's cookies to every port of it (RFC 6265 §8.5), so a neighbour page on another
port of the host can fill the phone's jar for the lead's host: Chromium keeps 180 cookies of up to 4096
bytes each per host, about 740 KB of `Cookie` on every request. Servers refuse such a request (431); the
lead then answered 431 to its own page and API, the neighbour long gone, and clearing the host's cookies
in the browser would also have wiped the page's device key (IndexedDB): pair again.

So the HTTP server takes request heads of up to `HEAD_MAX` + `COOKIE_MAX` (`collie.lead.door.http`), and
`JarGuard`, in front of the app, holds every other bound as before:

- the request target and the headers other than `Cookie` are at most `HEAD_MAX` (16 KiB, hypercorn's own
  bound): more is `431 {"error": "too_large", …}`;
- the app sees only the cookies of the credential's names (`collie.lead.door.devices.COOKIE_NAMES`) whose values could be
  a credential (at most `OWN_VALUE_MAX` characters); every other cookie stays out of the request;
- when the whole `Cookie` is over `CLEAR_OVER` (8 KiB), the answer clears (`Set-Cookie` with `Max-Age=0`)
  cookies the lead does not own, the biggest first, until what is left of them is at most `KEEP_FOREIGN`
  (4 KiB): small cookies of the host's other servers (a notebook's login) are left alone. A cookie is cleared
  at `Path=/` and at the request path's own prefixes (a cookie is only replaced at its own path), at most
  `CLEAR_BYTES` of `Set-Cookie` an answer; the page's next requests clear the rest. The phone recovers
  by itself: the jar is small again after the page's first load. Cookies of the credential's names are
  never cleared (the phone's own is among them), nor `__Host-`/`__Secure-` ones over plain HTTP (a browser
  takes those only over TLS).

A WebSocket (the crew link) is filtered the same way but clears nothing. Plain ASGI; no Quart.
"""

from __future__ import annotations

import json
import re

from collie.lead.door.devices import COOKIE_NAMES

HEAD_MAX = 16 * 1024  # request target + every header but Cookie
COOKIE_MAX = 1024 * 1024  # a browser's whole jar for one host: 180 cookies x 4096 bytes, with room to spare
CLEAR_OVER = 8 * 1024  # a Cookie larger than this has foreign cookies cleared ...
KEEP_FOREIGN = 4 * 1024  # ... down to this much of them
CLEAR_BYTES = 32 * 1024  # Set-Cookie bytes one answer carries at most (browsers take 256 KiB of headers)
CLEAR_PATHS = 4  # path prefixes of the request a cookie is also cleared at, besides "/"
OWN_VALUE_MAX = 200  # a credential is 43 characters; anything longer under its name is not one
_OWN = {name.encode() for name in COOKIE_NAMES}
_PREFIXED = (b"__host-", b"__secure-")  # browsers match these prefixes case-insensitively
_SEGMENT = re.compile(rb"[A-Za-z0-9._~%-]+")
_EXPIRED = b"=; Max-Age=0; Expires=Thu, 01 Jan 1970 00:00:00 GMT; Path="
_TOO_LARGE = json.dumps({"error": "too_large", "message": f"the request's headers (cookies aside) are over "
                                                          f"{HEAD_MAX // 1024} KiB"}).encode()


def sort_jar(values: list[bytes], raw_path: bytes, secure: bool) -> tuple[bytes, list[bytes]]:
    """(the `Cookie` the app sees: the credential's names only, the `Set-Cookie` values that clear foreign
    cookies of a jar over `CLEAR_OVER`) from the request's `Cookie` header values."""
    own: list[bytes] = []
    foreign: dict[bytes, int] = {}  # name -> bytes it takes in the jar
    total = 0
    for value in values:
        total += len(value)
        for pair in value.split(b";"):
            pair = pair.strip(b" \t")
            name, eq, val = pair.partition(b"=")
            name = name.strip(b" \t")
            if name in _OWN:
                if len(val.strip(b" \t")) <= OWN_VALUE_MAX:
                    own.append(pair)
            elif eq and name:
                foreign[name] = foreign.get(name, 0) + len(pair) + 2
    kept = b"; ".join(own)
    if total <= CLEAR_OVER or not foreign:
        return kept, []
    left = sum(foreign.values())
    doomed = []
    for name, size in sorted(foreign.items(), key=lambda kv: kv[1], reverse=True):
        if left <= KEEP_FOREIGN:
            break
        if not secure and name.lower().startswith(_PREFIXED):
            continue
        doomed.append(name)
        left -= size
    tail = b"; Secure" if secure else b""
    clears, spent = [], 0
    for at in _paths(raw_path):
        for name in doomed:
            line = name + _EXPIRED + at + tail
            spent += len(line) + 14
            if spent > CLEAR_BYTES:
                return kept, clears
            clears.append(line)
    return kept, clears


def _paths(raw_path: bytes) -> list[bytes]:
    """"/" and the request path's prefixes at its slashes, with and without the slash (a neighbour may set
    either), nearest "/" first, at most `CLEAR_PATHS` of them besides "/". The path as the browser sent it
    (percent-encoded, as cookie paths are matched); a segment of any other byte ends the list."""
    out = [b"/"]
    prefix = b""
    for part in raw_path.split(b"?", 1)[0].split(b"/")[1:]:
        if not part or not _SEGMENT.fullmatch(part):
            break
        prefix += b"/" + part
        out += [prefix, prefix + b"/"]
    return out[: 1 + CLEAR_PATHS]


class JarGuard:
    """ASGI middleware: the bounds and the clearing above, in front of `app`."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        cookies, others = [], []
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
        for name, value in scope["headers"]:
            if name == b"cookie":
                cookies.append(value)
            else:
                others.append((name, value))
                size += len(name) + len(value) + 4
        if size > HEAD_MAX:
            await _refuse(scope, send)
            return
        if not cookies:
            await self.app(scope, receive, send)
            return
        kept, clears = sort_jar(cookies, scope.get("raw_path") or b"/", scope.get("scheme") in ("https", "wss"))
        scope = dict(scope, headers=others + ([(b"cookie", kept)] if kept else []))
        if not clears or scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def clearing(message) -> None:
            if message["type"] == "http.response.start":
                message = dict(message, headers=[*message.get("headers", []),
                                                 *((b"set-cookie", line) for line in clears)])
            await send(message)

        await self.app(scope, receive, clearing)


async def _refuse(scope, send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await send({"type": "http.response.start", "status": 431,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(_TOO_LARGE)).encode()),
                            (b"connection", b"close"), (b"x-content-type-options", b"nosniff")]})
    await send({"type": "http.response.body", "body": _TOO_LARGE})
