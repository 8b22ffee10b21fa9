"""The phone's door: who may come in, from where, and pairing (phone-api.md). `collie.lead.door.policy` then decides
which route a credential opens and what a body must be; `collie.lead.feed.events` is the live channel.

Guards, in the order a request meets them:
1. **Host** (DNS rebinding): the `Host` header must name this lead — a loopback name, the bound
   address, this machine's name or addresses when bound to all of them, a name given with
   `collie serve --name` (`COLLIE_NAMES` in `.env`), or the name and port of `--public-url` (the proxy or
   tunnel in front of the lead). Anything else: 421 `wrong_host`. `/healthz`
   and the members' `/crew/v1` link (bearer-authenticated, dialled by address) are exempt.
2. **Origin**: a request that carries an `Origin` must come from this lead's own origin (or exactly
   `--public-url`'s, over https); no CORS
   header is ever sent, so other sites cannot read an answer. Else 403 `cross_origin`.
3. **Credential**: a paired device's cookie together with its device key in the header
   `X-Collie-Device-Key` (`collie.lead.door.devices`: the cookie alone reaches every port of the host, the key
   only this origin's page; the live channel takes a ticket instead of the header), or
   `Authorization: Bearer` with the local credential or an inbox API token (checked in `collie.lead.routes.auth`).
4. **CSRF**: a write (POST, PUT, PATCH, DELETE) authenticated by the cookie must carry the header
   `X-Collie-CSRF: 1`, which a cross-site form or image cannot send. Bearer requests need none.

`Door` is plain: the daemon builds it with the names it serves; the API's `before_request` asks it.

"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import re
import socket
from urllib.parse import urlsplit

from quart import request

from collie.crew.security import public_parts
from collie.lead.door.devices import COOKIE_NAMES, KEY_HEADER, Device, Devices
from collie.lead.routes.common import error  # the one error shape

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
    """The names, port and scheme this lead answers to; with `public_url` also that URL's name and port (the
    proxy or tunnel in front of it), and no other."""

    def __init__(self, host: str, port: int, *, tls: bool, names: list[str] | tuple[str, ...] = (),
                 public_url: str | None = None, addresses: list[str] | None = None) -> None:
        self.tls = tls
        self.port = port
        self.trust_page = False  # the lead serves /trust (its own authority): the pairing page points to it
        self.host = host
        self.names = {n.lower().strip("[]").rstrip(".") for n in (*LOOPBACK, *names) if n}
        self.public = public_parts(public_url) if public_url else None
        if host in ("0.0.0.0", "::", ""):
            from collie.lead.door.tls import machine_addresses

            self.names |= {socket.gethostname().lower(), f"{socket.gethostname().lower()}.local"}
            self.set_addresses(machine_addresses() if addresses is None else addresses)
        else:
            self.addresses = [host.strip("[]")]
            self.names.add(host.lower().strip("[]"))

    def set_addresses(self, addresses: list[str]) -> None:
        """This machine's addresses (on 0.0.0.0/::), now: the Host check and the printed addresses follow them."""
        old = set(getattr(self, "addresses", []))
        self.addresses = list(addresses)
        self.names -= {a.lower() for a in old - set(addresses)} - set(LOOPBACK)
        self.names |= {a.lower() for a in self.addresses}

    @property
    def secure(self) -> bool:
        """The phone speaks HTTPS: the lead's own TLS, or the proxy's in front of it (`__Host-` cookie)."""
        return self.tls or self.public is not None

    def host_ok(self, header: str | None) -> bool:
        if not header:
            return False
        name, port = split_host(header)
        if self.public is not None and name == self.public[1]:
            return (443 if port is None else port) == self.public[2]
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
        if not parts.hostname:
            return False
        name = parts.hostname.lower().strip("[]")
        if self.public is not None and name == self.public[1]:
            return parts.scheme == "https" and (port or 443) == self.public[2] and not parts.path.strip("/")
        if parts.scheme != ("https" if self.tls else "http"):
            return False
        if port is not None and self.port and port != self.port:
            return False
        return name in self.names

    def base_urls(self) -> list[str]:
        """Every address a person can open, best first: the public URL, else this lead's reachable addresses
        (never 0.0.0.0 or ::), else its loopback one."""
        if self.public is not None:
            return [self.public[0]]
        return self.local_urls()

    def local_urls(self) -> list[str]:
        """The lead's own addresses a person can open (not the public URL), best first."""
        scheme = "https" if self.tls else "http"
        from collie.lead.door.tls import reachable

        shown = [a for a in self.addresses if reachable(a)] or [a if a not in ("0.0.0.0", "::", "") else
                                                                 "127.0.0.1" for a in self.addresses[:1]]
        return [f"{scheme}://{_bracket(a)}:{self.port}" for a in shown]

    def base_url(self, host: str | None = None) -> str:
        """The address a phone opens: the public URL, else `scheme://address:port`."""
        return self.base_urls()[0]


def _bracket(host: str) -> str:
    try:
        if isinstance(ipaddress.ip_address(host), ipaddress.IPv6Address):
            return f"[{host}]"
    except ValueError:
        pass
    return host


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


def presented_cookies() -> list[str]:
    """Every value of the credential's cookie names (a planted one under another Path comes too)."""
    return [v for name in COOKIE_NAMES for v in request.cookies.getlist(name)]


def device_of(devices: Devices, now: float) -> tuple[Device | None, str | None]:
    """(the paired device this request comes from, or None; why not, when a cookie came without the rest).
    Its device key in `X-Collie-Device-Key`, or for the live channel (`GET /api/events`) a ticket."""
    cookies = presented_cookies()
    if not cookies:
        return None, None
    if request.method == "GET" and request.path == "/api/events" and request.args.get("ticket"):
        dev = devices.device_for_ticket(cookies, request.args.get("ticket"), now)
    else:
        dev = devices.device_for(cookies, request.headers.get(KEY_HEADER))
    if dev is not None:
        return dev, None
    if devices.paired_before_keys(cookies):
        return None, "this phone was paired before device keys: pair it again with `collie pair`"
    return None, None


# The 401 for a request that carries a device cookie but not that device's key (a page without its key, a
# revoked phone, a cookie from elsewhere): what the phone's user should do (docs/errors.md).
PHONE_NOT_SIGNED_IN = ("this phone is not signed in to this lead (its device key is missing or does not match "
                       "its cookie, or it was revoked): pair it again with `collie pair`")


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
<!--trust-->
<script>
// The device key: kept in this origin's IndexedDB (no other port can read it), sent by the app as
// X-Collie-Device-Key; beside it a signing key script cannot read out, which renews a replaced cookie
function keep(values) {
  return new Promise((ok, fail) => {
    const o = indexedDB.open("collie", 1);
    o.onupgradeneeded = () => o.result.createObjectStore("device");
    o.onerror = () => fail(o.error);
    o.onsuccess = () => { const tx = o.result.transaction("device", "readwrite");
      for (const [k, v] of Object.entries(values)) tx.objectStore("device").put(v, k);
      tx.oncomplete = () => ok(); tx.onerror = () => fail(tx.error); };
  });
}
const b64url = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/[+]/g, "-").replace(/[/]/g, "_").replace(/=+$/, "");
async function signingKey() {
  try {
    const pair = await crypto.subtle.generateKey({name: "ECDSA", namedCurve: "P-256"}, false, ["sign", "verify"]);
    return {pair, pub: b64url(await crypto.subtle.exportKey("raw", pair.publicKey))};
  } catch (e) { return null; }
}
(async () => {
  const msg = document.getElementById("msg");
  const code = location.hash.slice(1);
  history.replaceState(null, "", location.pathname);
  if (!code) { msg.textContent = "This pairing link has no code. A new link comes from collie pair on the lead: ask whoever runs it."; return; }
  try {
    const sign = await signingKey();
    const r = await fetch("/pair", {method: "POST", credentials: "same-origin",
      headers: {"Content-Type": "application/json", "X-Collie-CSRF": "1"},
      body: JSON.stringify({code, name: navigator.platform || "phone", ...(sign ? {sign_key: sign.pub} : {})})});
    const body = await r.json();
    if (r.ok) { await keep(sign ? {key: body.key, sign: sign.pair} : {key: body.key}); msg.textContent = "Paired as " + body.device.name + ". Opening Collie…"; location.replace("/"); }
    else { msg.textContent = body.message; }
  } catch (e) { msg.textContent = "Could not reach Collie. Try again."; }
})();
</script></body></html>
"""


def _inline_hashes(page: str, tag: str) -> str:
    """CSP sources allowing exactly the page's inline `<tag>` blocks, by their SHA-256 (no 'unsafe-inline')."""
    blocks = re.findall(rf"<{tag}>(.*?)</{tag}>", page, re.DOTALL)
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)


# The pairing page must run its one inline script (it trades the code from the URL's fragment and keeps the
# device key in this origin's IndexedDB before the app exists): allowed by hash, nothing else (issue 25 D4).
PAIR_CSP = (f"default-src 'none'; script-src {_inline_hashes(PAIR_PAGE, 'script')}; "
            f"style-src {_inline_hashes(PAIR_PAGE, 'style')}; connect-src 'self'; base-uri 'none'; "
            "form-action 'none'; frame-ancestors 'none'")
# Over the lead's own authority the pairing page points to /trust (collie.lead.door.trust): trusting it is what gives the
# phone notifications and the lock-screen answer.
TRUST_LINE = ('<p id="trust">First time on this phone? <a href="/trust">Trust this lead once</a>: then it can '
              'notify you and take answers from the lock screen.</p>')
ANSWER_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"  # JSON: nothing runs


def secure_headers(resp) -> None:
    """The headers the app's own pages carry (collie.lead.web.serve): no framing, no sniffing, no referrer."""
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Referrer-Policy"] = "no-referrer"
