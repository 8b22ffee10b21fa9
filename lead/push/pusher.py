"""Web Push for asks: limited per machine, once per ask across restarts, end-to-end encrypted (features
P1–P4, X1; crew.md §5; docs/push.md).

- **Delivery** (RFC 8030, 8291, 8292): the lead makes a VAPID key pair at first start
  (`<state>/push/vapid.pem`, 0600) and serves the public key at `GET /api/push/key`; a phone registers
  its browser's subscription with `POST /api/push/subscribe` (stored per paired device; revoking the
  device drops them). A push is encrypted with the subscription's keys (`aes128gcm`, http-ece) and
  signed (py-vapid), then POSTed over the project's trio HTTP client with `TTL`, `Urgency: high` and,
  for the "raising many asks" push, a `Topic` so it replaces instead of stacking. The push service
  sees ciphertext only. 404/410 removes the subscription; 429/5xx is retried with backoff, honouring
  `Retry-After`. Of the answer at most `ANSWER_MAX` bytes are read, raw (httpcore: never decompressed), each
  attempt bounded in time (issue 25.5). Endpoints must be `https://` to a public address, checked in every
  spelling when the phone subscribes and, for a name, where it resolves at each delivery (`GuardedBackend`);
  loopback only with `COLLIE_PUSH_LOOPBACK=1` (tests, local relays) (issue 25.6).
- **Limits** (P1, P4), per machine, sliding windows counting pushes actually sent: 3 a minute per pane,
  10 a minute and 30 an hour per agent; the ask that would be the 31st in an hour sends exactly one
  `A durable agent on {host} is raising many asks` and that agent is silent for an hour. Beyond a limit
  the ask still shows on the phone and in the Needs you list. `PushLimiter` is plain (the clock is
  passed in) and its state is saved, so a lead restart changes nothing.
- **Once per ask** (P3): `(machine, agent, tool_call_id)` is remembered on disk (30 days) whether or not
  it pushed, so an ask raised again after an agent, member or lead restart shows but does not push. At
  most `REMEMBER_PER_MACHINE` asks a machine are kept (the oldest go first): a member raising asks with
  ever-new ids cannot grow the file without bound. The new asks of one agent view are judged and kept
  in one commit, so such a flood costs one fsync a view and does not hold up other machines' pushes.
- **Text** (P2): `Permission needed in <pane>`, plus the agent's title (≤ 60) and line (≤ 120) — when it gave
  neither, the ask's own title and body (the command or change) — masked by `collie.crew.redact` unless
  `COLLIE_REDACT=off` — masked whole, then cut, so no part of a secret shows.
- **Answer from the notification** (issue 31; B5, O, Q5, Q6, T6): a `permission` ask with exactly one
  `allow` and one `deny` option, that Collie did not shorten or clean (Q6), carries inside the encrypted
  payload what the service worker needs to answer it with one tap: its digest (the answer is bound to the
  question shown, B5) and the two option ids — only when the notification shows what its card shows, the
  ask's title and body whole and unchanged (issue 42.4): other push text, or a body cut, spread over lines
  or masked, and the notification only opens the card. Always allow is never offered there (Q5: two taps and a card;
  T6: never for a remote agent). A payload that would pass what every push service must carry
  (`PAYLOAD_MAX`) goes without them: the notification then only opens the card.
"""

from __future__ import annotations

import base64
import hashlib
import ipaddress
import json
import math
import os
import re
import socket
import ssl
import time
import unicodedata
from collections import deque
from pathlib import Path
from urllib.parse import unquote, urlsplit, urlunsplit

import attrs
import httpcore
import trio

from collie.crew import logs
from collie.crew.fsutil import ensure_private_dir, open_db

log = logs.get("push")

PANE_PER_MIN = 3
AGENT_PER_MIN = 10
AGENT_PER_HOUR = 30
MINUTE, HOUR = 60.0, 3600.0
SILENCE = HOUR
REMEMBER = 30 * 86400.0
REMEMBER_PER_MACHINE = 20_000  # asks remembered for one machine (100 agents x 200 conversations open at once)
TTL = 4 * 3600  # seconds a push service keeps an undelivered ask push
MANY = "A durable agent on {host} is raising many asks"
TITLE_MAX, LINE_MAX = 60, 120
MAX_SUBSCRIPTIONS = 20
SUB_MAX_BYTES = 4096
ANSWER_MAX = 4096  # bytes of a push service's answer read at most (issue 25.5)
CONNECT_SECONDS = 10.0
DELIVERY_SECONDS = 10.0  # each read and write of one push; the whole attempt is bounded by ATTEMPT_SECONDS
ATTEMPT_SECONDS = 15.0
# RFC 8030 §7.2: a push service takes at least 4,096 bytes of encrypted body; aes128gcm (RFC 8188, 8291)
# spends 86 on its header and 17 on the record's padding delimiter and tag
PAYLOAD_MAX = 4096 - 86 - 17


# --- the limiter (pure) ----------------------------------------------------------------------------
class PushLimiter:
    """P1, P4: decide whether an ask pushes. `admit(...)` returns `push`, `many` (send the single
    "raising many asks" push now) or `quiet` (show, do not push); it records what it admits."""

    def __init__(self, state: dict | None = None) -> None:
        self.panes: dict[tuple, deque] = {}
        self.agents: dict[tuple, deque] = {}  # (machine, agent) -> push times within the last hour
        self.silent: dict[tuple, float] = {}  # (machine, agent) -> silent until
        if state:
            for k, v in state.get("panes", []):
                self.panes[tuple(k)] = deque(v)
            for k, v in state.get("agents", []):
                self.agents[tuple(k)] = deque(v)
            for k, v in state.get("silent", []):
                self.silent[tuple(k)] = v

    def admit(self, machine: str, agent: str, pane: str, now: float) -> str:
        akey, pkey = (machine, agent), (machine, agent, pane)
        until = self.silent.get(akey)
        if until is not None:
            if now < until:
                return "quiet"
            del self.silent[akey]
        hour = self.agents.setdefault(akey, deque())
        while hour and hour[0] <= now - HOUR:
            hour.popleft()
        mins = self.panes.setdefault(pkey, deque())
        while mins and mins[0] <= now - MINUTE:
            mins.popleft()
        if len(hour) >= AGENT_PER_HOUR:
            self.silent[akey] = now + SILENCE
            hour.clear()
            return "many"
        if len(mins) >= PANE_PER_MIN or sum(1 for t in hour if t > now - MINUTE) >= AGENT_PER_MIN:
            return "quiet"
        hour.append(now)
        mins.append(now)
        return "push"

    def state(self, now: float) -> dict:
        """What must survive a restart (empty windows dropped)."""
        return {"panes": [[list(k), [t for t in v if t > now - MINUTE]] for k, v in self.panes.items()
                          if any(t > now - MINUTE for t in v)],
                "agents": [[list(k), [t for t in v if t > now - HOUR]] for k, v in self.agents.items()
                           if any(t > now - HOUR for t in v)],
                "silent": [[list(k), v] for k, v in self.silent.items() if v > now]}


# --- text and endpoints (pure) ---------------------------------------------------------------------
def _cut(text: str | None, limit: int) -> str | None:
    if not text:
        return None
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def ask_payload(*, machine: str, agent: str, conversation: str, pane: str, ask: dict, redact_on: bool) -> dict:
    """P2: `Permission needed in <pane>`, the agent's title (≤ 60) and line (≤ 120), masked (X1); when the agent
    gave neither, the ask's own title and body (the command or change). Allow and Deny only when that is what
    the card shows (`answer_offer`)."""
    title = f"Permission needed in {_masked(pane, TITLE_MAX, redact_on)}"
    parts = [p for p in _shown(ask, redact_on) if p]
    body = " — ".join(parts) if parts else None
    payload = {"kind": "ask", "title": title, "body": body, "tag": f"ask:{machine}/{agent}/{ask.get('id')}",
               "url": f"/#/c/{_q(machine)}/{_q(agent)}/{_q(conversation)}",
               "ask": {"machine": machine, "agent": agent, "conversation": conversation, "id": ask.get("id")}}
    offer = answer_offer(ask, redact_on)
    if offer is not None:
        answerable = {**payload, "ask": {**payload["ask"], **offer}}
        if len(encode(answerable)) <= PAYLOAD_MAX:
            return answerable
    return payload


def _masked(text, limit: int, redact_on: bool) -> str | None:
    """Masked first, then cut: a cut secret no longer matches (issue 25.7)."""
    from collie.crew.redact import redact

    return _cut(redact(" ".join(str(text).split())) if text and redact_on else text, limit)


def _shown(ask: dict, redact_on: bool) -> tuple[str | None, str | None]:
    """The two texts under a notification's title: the agent's push title and line (P2), else the ask's own
    title and body — as the notification shows them (masked, on one line, cut to the push limits)."""
    if ask.get("push_title") or ask.get("push_line"):
        title, line = ask.get("push_title"), ask.get("push_line")
    else:
        title, line = ask.get("title"), ask.get("body")
    return _masked(title, TITLE_MAX, redact_on), _masked(line, LINE_MAX, redact_on)


def answer_offer(ask: dict, redact_on: bool = True) -> dict | None:
    """What lets the notification answer this ask with one tap — `{"digest", "allow", "deny"}` (option ids) —
    or None: only a `permission` ask with exactly one allow and one deny option, not shortened (Q6); never
    an always-allow option (Q5, T6); and only when the notification shows what the card shows — the ask's
    title and body (the command or change), whole and unchanged — so the digest, of the whole ask, is of
    what the notification showed (B5, issue 42.4): an agent's push text that differs, or a body the
    notification cuts, spreads over lines or masks, offers only Open."""
    if ask.get("kind") != "permission" or ask.get("shortened") or not ask.get("answerable", True):
        return None
    digest = ask.get("digest")
    if not isinstance(digest, str) or not digest:
        return None
    if _shown(ask, redact_on) != (ask.get("title") or None, ask.get("body") or None):
        return None
    by_role: dict[str, list[str]] = {}
    for option in ask.get("options") or []:
        by_role.setdefault(option.get("role"), []).append(option.get("id"))
    allow, deny = by_role.get("allow", []), by_role.get("deny", [])
    if len(allow) != 1 or len(deny) != 1 or not all(isinstance(o, str) and o for o in allow + deny):
        return None  # two allows (or denies) are two different answers: one button could not say which
    return {"digest": digest, "allow": allow[0], "deny": deny[0]}


def encode(payload: dict) -> bytes:
    """A push payload as sent (before encryption)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def ask_fields(ask) -> dict:
    """An ask as the bridge read it (`collie.crew.asks.AskView`) → what `ask_payload` takes."""
    return {"id": ask.id, "title": ask.title, "body": ask.body, "push_title": ask.push_title,
            "push_line": ask.push_line, "kind": ask.kind,
            "digest": ask.digest, "shortened": ask.shortened, "answerable": ask.answerable,
            "options": [{"id": o.id, "role": o.role} for o in ask.options]}


def many_payload(machine: str, agent: str, host: str) -> dict:
    return {"kind": "many", "title": MANY.format(host=host), "body": None, "tag": f"many:{machine}/{agent}",
            "url": f"/#/a/{_q(machine)}/{_q(agent)}"}


def _q(s: str) -> str:
    from urllib.parse import quote

    return quote(s, safe="")


def _ipv4_any_spelling(host: str) -> ipaddress.IPv4Address | None:
    """`host` read as the C library reads an IPv4 literal — `10.1`, `0xa.0.0.1`, `169.254.43518`, `2130706433`,
    `012.0.0.1` all connect somewhere — or None when it is a name."""
    if not host or not all(c in "0123456789abcdefx." for c in host) or not host[0].isdigit():
        return None
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


_V4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # IPv4-compatible (deprecated), inside the reserved ::/8
_RESERVED_V6 = ipaddress.IPv6Network("::/8")
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))  # RFC 6052, RFC 8215
_SIX_TO_FOUR = ipaddress.IPv6Network("2002::/16")


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries and reaches — mapped, IPv4-compatible, NAT64, 6to4, Teredo — or None."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip in _V4_COMPATIBLE or ip in _NAT64[0]:
        return ipaddress.IPv4Address(ip.packed[12:])
    if ip.sixtofour is not None:
        return ip.sixtofour
    if ip.teredo is not None:
        return ip.teredo[1]
    return None


def address_problem(address: str, *, loopback_ok: bool = False) -> str | None:
    """None when a push may connect to this IP address, else why not: only public (globally routable)
    addresses, and loopback when the owner set `COLLIE_PUSH_LOOPBACK=1` (issue 25.6). An IPv6 address that
    carries an IPv4 one (mapped, IPv4-compatible, NAT64, 6to4, Teredo) is judged by it, and the reserved ::/8
    and the local-use NAT64 prefix are refused outright (issue 25 D3)."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return "endpoint is not a public address"
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif ip != ipaddress.IPv6Address("::1"):
            if ip in _V4_COMPATIBLE or ip in _NAT64[1] or ip.teredo is not None:
                return "endpoint is in a private address range (reserved IPv6)"
            inner = _embedded_ipv4(ip)  # NAT64 (64:ff9b::/96) or 6to4 (2002::/16): reaches that IPv4 address
            if inner is not None:
                if address_problem(str(inner)) is not None:
                    return "endpoint is in a private address range (an IPv6 address carrying a private IPv4 one)"
                return None
            if ip in _RESERVED_V6:
                return "endpoint is in a private address range (reserved IPv6)"
    if ip.is_loopback:
        return None if loopback_ok else ("endpoint is a loopback address (set COLLIE_PUSH_LOOPBACK=1 in .env to "
                                         "allow one, for tests and local relays)")
    if not ip.is_global or ip.is_multicast:
        return "endpoint is in a private address range"
    return None


_FULL_STOPS = str.maketrans({"\u3002": ".", "\uff0e": ".", "\uff61": "."})  # what URL parsers read as a dot
_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")


def canonical_host(host: str) -> str | None:
    """The host a client connects to for `host` as written in a URL: percent-escapes decoded, Unicode mapped
    (NFKC, then IDNA) to lower-case ASCII — so `１２７.0.0.1` and `%31%32%37.0.0.1` are 127.0.0.1 (issue 25 D3).
    None when it is no host name or address at all."""
    try:
        host = unquote(host, errors="strict") if "%" in host else host
    except UnicodeDecodeError:
        return None
    host = unicodedata.normalize("NFKC", host.translate(_FULL_STOPS)).lower().rstrip(".")
    if not host.isascii():
        try:
            host = host.encode("idna").decode("ascii").lower()
        except UnicodeError:
            return None
    if ":" in host:
        try:
            return str(ipaddress.IPv6Address(host.split("%", 1)[0])) + ("%" + host.split("%", 1)[1] if "%" in host else "")
        except ValueError:
            return None
    return host if _NAME.fullmatch(host) else None


def canonical_endpoint(url: object, *, loopback_ok: bool = False) -> tuple[str | None, str | None]:
    """(the endpoint with its host as a client reads it, None) when a push endpoint may be used, else (None, why
    not). A DNS name is checked again where it resolves, at each delivery (`GuardedBackend`)."""
    if not isinstance(url, str) or len(url) > 2048:
        return None, "endpoint must be an https:// URL"
    try:
        parts = urlsplit(url)
        raw_host = parts.hostname or ""
        port = parts.port
    except ValueError:
        return None, "endpoint is not a valid URL"
    if not raw_host:
        return None, "endpoint has no host"
    if parts.username is not None or parts.password is not None:
        return None, "endpoint must not carry a user name or password"
    host = canonical_host(raw_host)
    if host is None:
        return None, "endpoint's host is not a host name or an address"
    literal = _ipv4_any_spelling(host)
    if literal is None:
        try:
            literal = ipaddress.ip_address(host)
        except ValueError:
            literal = None
    if literal is not None:
        problem = address_problem(str(literal), loopback_ok=loopback_ok)
        if problem:
            return None, problem
        loopback = literal.is_loopback or (isinstance(literal, ipaddress.IPv6Address)
                                           and literal.ipv4_mapped is not None and literal.ipv4_mapped.is_loopback)
        host = str(literal)  # the address it connects to, in its plain spelling
    elif host == "localhost" or host.endswith(".localhost"):
        if not loopback_ok:
            return None, address_problem("127.0.0.1")
        loopback = True
    elif host.endswith((".local", ".internal", ".lan", ".home.arpa")) or "." not in host:
        return None, "endpoint must name a public push service"
    else:
        loopback = False
    if not (parts.scheme == "https" or (parts.scheme == "http" and loopback)):
        return None, "endpoint must be an https:// URL (http:// only on loopback)"
    netloc = (f"[{host}]" if ":" in host else host) + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment)), None


def _shown_host(url: str) -> str | None:
    try:
        return urlsplit(url).hostname
    except ValueError:
        return None


def check_endpoint(url: object, *, loopback_ok: bool = False) -> str | None:
    """None when a push endpoint may be used, else why not (`canonical_endpoint`)."""
    return canonical_endpoint(url, loopback_ok=loopback_ok)[1]


class PushRefused(Exception):
    """A push endpoint's name resolved, or its connection went, to an address a push may not reach."""


class GuardedBackend(httpcore.TrioBackend):
    """httpcore's trio backend, connecting only to addresses `address_problem` allows: the name is resolved
    here, every address is checked, one allowed is connected to, and the peer is checked again (issue 25.6)."""

    def __init__(self, *, loopback_ok: bool) -> None:
        self.loopback_ok = loopback_ok

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        with trio.fail_after(CONNECT_SECONDS):
            infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        addresses = [info[4][0] for info in infos]
        allowed = [a for a in addresses if address_problem(a, loopback_ok=self.loopback_ok) is None]
        if not allowed:
            why = address_problem(addresses[0], loopback_ok=self.loopback_ok) if addresses else "it does not resolve"
            raise PushRefused(f"{host} resolves to {', '.join(addresses[:3]) or 'nothing'}: {why}")
        stream = await super().connect_tcp(allowed[0], port, timeout, local_address, socket_options)
        peer = stream.get_extra_info("server_addr")[0]
        if address_problem(peer, loopback_ok=self.loopback_ok) is not None:
            await stream.aclose()
            raise PushRefused(f"{host} connected to {peer}, which a push may not reach")
        return stream


def push_pool(*, loopback_ok: bool) -> httpcore.AsyncConnectionPool:
    """The push client: HTTP/1.1, certificates checked, guarded addresses. httpcore never decompresses."""
    return httpcore.AsyncConnectionPool(ssl_context=ssl.create_default_context(), http1=True, http2=False,
                                        max_connections=16, keepalive_expiry=30.0,
                                        network_backend=GuardedBackend(loopback_ok=loopback_ok))


async def post_push(pool, url: str, body: bytes, headers: dict) -> tuple[int, dict[str, str]]:
    """POST one push: (status, headers). At most `ANSWER_MAX` bytes of the answer are read, raw — a push
    service's gzip is never inflated (2 MiB of it was 4.3 GB in the lead before issue 25.5)."""
    hdrs = [(k.encode(), v.encode()) for k, v in headers.items()]
    timeouts = {"connect": CONNECT_SECONDS, "read": DELIVERY_SECONDS, "write": DELIVERY_SECONDS,
                "pool": DELIVERY_SECONDS}
    async with pool.stream("POST", url, headers=hdrs, content=body, extensions={"timeout": timeouts}) as resp:
        got = 0
        async for chunk in resp.aiter_stream():
            got += len(chunk)
            if got >= ANSWER_MAX:
                break  # the rest is dropped with the connection
        return resp.status, {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in resp.headers}


def b64d(s: str) -> bytes:
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def b64e(b: bytes) -> str:
    return base64.urlsafe_b64encode(b).rstrip(b"=").decode()


@attrs.frozen
class Subscription:
    endpoint: str
    p256dh: str
    auth: str
    device: str | None


def parse_subscription(data: object, device: str | None, *, loopback_ok: bool = False) -> Subscription:
    """A browser's PushSubscription JSON → Subscription; ValueError says what is wrong."""
    if not isinstance(data, dict):
        raise ValueError("the body must be a PushSubscription: {\"endpoint\", \"keys\": {\"p256dh\", \"auth\"}}")
    endpoint, problem = canonical_endpoint(data.get("endpoint"), loopback_ok=loopback_ok)
    if problem:
        raise ValueError(problem)
    keys = data.get("keys")
    if not isinstance(keys, dict) or not isinstance(keys.get("p256dh"), str) or not isinstance(keys.get("auth"), str):
        raise ValueError("keys.p256dh and keys.auth must be base64url strings")
    try:
        point, auth = b64d(keys["p256dh"]), b64d(keys["auth"])
    except (ValueError, TypeError):
        raise ValueError("keys.p256dh and keys.auth must be base64url strings") from None
    if len(point) != 65 or point[0] != 4 or len(auth) != 16:
        raise ValueError("keys.p256dh must be an uncompressed P-256 point and keys.auth 16 bytes")
    return Subscription(endpoint, keys["p256dh"], keys["auth"], device)


# --- storage ---------------------------------------------------------------------------------------
SCHEMA = """
CREATE TABLE IF NOT EXISTS subs (endpoint TEXT PRIMARY KEY, p256dh TEXT NOT NULL, auth TEXT NOT NULL, device TEXT,
    created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS pushed (machine TEXT NOT NULL, agent TEXT NOT NULL, key TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (machine, agent, key));
CREATE TABLE IF NOT EXISTS limiter (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL);
"""


class PushStore:
    """`<state>/push/push.sqlite` (0600): subscriptions, the asks already seen, the limiter's windows."""

    def __init__(self, folder: Path) -> None:
        ensure_private_dir(folder)
        path = folder / "push.sqlite"
        self.db = open_db(path)
        self.db.executescript(SCHEMA)
        self.subs = {r[0]: Subscription(*r) for r in self.db.execute("SELECT endpoint, p256dh, auth, device FROM subs")}
        row = self.db.execute("SELECT state FROM limiter WHERE id=1").fetchone()
        self.limiter_state = json.loads(row[0]) if row else None

    def seen(self, machine: str, agent: str, key: str) -> bool:
        return self.db.execute("SELECT 1 FROM pushed WHERE machine=? AND agent=? AND key=?",
                               (machine, agent, key)).fetchone() is not None

    def remember(self, machine: str, agent: str, key: str, now: float, limiter: dict) -> bool:
        """Mark an ask seen and save the limiter, in one commit; False when it was seen already."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            cur = self.db.execute("INSERT OR IGNORE INTO pushed VALUES (?, ?, ?, ?)", (machine, agent, key, now))
            self.db.execute("INSERT OR REPLACE INTO limiter VALUES (1, ?)", (json.dumps(limiter),))
            self.db.execute("DELETE FROM pushed WHERE at < ?", (now - REMEMBER,))
        return cur.rowcount == 1

    def unseen(self, machine: str, agent: str, keys: list[str]) -> set[str]:
        return {k for k in keys if not self.seen(machine, agent, k)}

    def remember_all(self, machine: str, agent: str, keys: list[str], now: float, limiter: dict) -> None:
        """Mark asks seen and save the limiter, in one commit; keep at most REMEMBER_PER_MACHINE of the
        machine's asks (the oldest go)."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("INSERT OR IGNORE INTO pushed VALUES (?, ?, ?, ?)",
                                [(machine, agent, k, now) for k in keys])
            self.db.execute("INSERT OR REPLACE INTO limiter VALUES (1, ?)", (json.dumps(limiter),))
            self.db.execute("DELETE FROM pushed WHERE at < ?", (now - REMEMBER,))
            (count,) = self.db.execute("SELECT count(*) FROM pushed WHERE machine=?", (machine,)).fetchone()
            if count > REMEMBER_PER_MACHINE:
                self.db.execute("DELETE FROM pushed WHERE rowid IN (SELECT rowid FROM pushed WHERE machine=? "
                                "ORDER BY at, rowid LIMIT ?)", (machine, count - REMEMBER_PER_MACHINE))

    def add(self, sub: Subscription, now: float) -> None:
        mine = [s for s in self.subs.values() if s.device == sub.device and s.endpoint != sub.endpoint]
        for old in sorted(mine, key=lambda s: s.endpoint)[: max(0, len(mine) - MAX_SUBSCRIPTIONS + 1)]:
            self.remove(old.endpoint)
        self.db.execute("INSERT OR REPLACE INTO subs VALUES (?, ?, ?, ?, ?)",
                        (sub.endpoint, sub.p256dh, sub.auth, sub.device, now))
        self.subs[sub.endpoint] = sub

    def remove(self, endpoint: str) -> bool:
        self.db.execute("DELETE FROM subs WHERE endpoint=?", (endpoint,))
        return self.subs.pop(endpoint, None) is not None

    def drop_device(self, device: str) -> int:
        gone = [s.endpoint for s in self.subs.values() if s.device == device]
        for e in gone:
            self.remove(e)
        return len(gone)


# --- keys and the wire -------------------------------------------------------------------------------
def load_vapid(folder: Path):
    """The lead's VAPID key pair, made at first start (private key 0600)."""
    from py_vapid import Vapid02

    ensure_private_dir(folder)
    path = folder / "vapid.pem"
    if path.exists():
        if (path.stat().st_mode & 0o777) != 0o600:
            path.chmod(0o600)
        return Vapid02.from_file(str(path))
    v = Vapid02()
    v.generate_keys()
    from collie.crew.fsutil import atomic_write

    atomic_write(path, v.private_pem(), mode=0o600)
    return v


def public_key_b64(vapid) -> str:
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    return b64e(vapid.public_key.public_bytes(Encoding.X962, PublicFormat.UncompressedPoint))


def encrypt(sub: Subscription, payload: bytes) -> bytes:
    """RFC 8291 aes128gcm with a fresh sender key: only the subscriber can read it."""
    import http_ece
    from cryptography.hazmat.primitives.asymmetric import ec

    sender = ec.generate_private_key(ec.SECP256R1())
    return http_ece.encrypt(payload, salt=os.urandom(16), private_key=sender, dh=b64d(sub.p256dh),
                            auth_secret=b64d(sub.auth), version="aes128gcm")


def vapid_headers(vapid, endpoint: str, subject: str, now: float) -> dict:
    parts = urlsplit(endpoint)
    aud = f"{parts.scheme}://{parts.netloc}"
    return vapid.sign({"aud": aud, "exp": int(now) + 12 * 3600, "sub": subject})


class ViewWatcher:
    """What the ask pushes (`Pusher`) and the turn-end pushes (`collie.lead.push.turns.TurnPusher`) share: woken when an
    agent view changes, the lead's own agents' (the bridge's `on_agent_change`) or a member's
    (`hub.on_view_change`); `dirty` holds the `(machine, agent)` views changed since the last look
    (`agent` None: all of that machine's)."""

    def __init__(self, bridge, hub) -> None:
        self.bridge, self.hub = bridge, hub
        self.dirty: set[tuple] = set()
        self._wake = trio.Event()
        hooks = getattr(bridge, "on_agent_change", None)
        if hooks is not None:
            hooks.append(lambda name: self.touch("local", name))
        if hub is not None:
            hub.on_view_change.append(self.touch)

    def touch(self, machine: str, agent: str | None) -> None:
        self.dirty.add((machine, agent))
        self._wake.set()

    def _readers(self, machine: str, agent: str | None) -> list:
        if machine == "local":
            rs = self.bridge.readers
        else:
            member = self.hub.members.get(machine) if self.hub is not None else None
            rs = member.readers if member else {}
        return [r for n, r in list(rs.items()) if agent is None or n == agent]

    def _started(self, task_status) -> None:
        """The start-up of both services: every machine's views are looked at once, then `nursery.start` returns."""
        self.touch("local", None)
        for label in list(self.hub.members) if self.hub is not None else []:
            self.touch(label, None)
        task_status.started()

    async def _woken(self, timeout: float = math.inf) -> None:
        """Wait until a view changes (at most `timeout` seconds)."""
        with trio.move_on_after(timeout):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = trio.Event()


class Pusher(ViewWatcher):
    """Watches for new asks on every machine and pushes them to the paired phones, within the limits."""

    def __init__(self, bridge, hub, folder: Path, *, host: str, redact_on: bool = True,
                 subject: str = "mailto:collie@localhost", client_factory=None, loopback_ok: bool = False) -> None:
        super().__init__(bridge, hub)
        self.store = PushStore(folder)
        self.vapid = load_vapid(folder)
        self.public_key = public_key_b64(self.vapid)
        self.limiter = PushLimiter(self.store.limiter_state)
        self.host, self.redact_on, self.subject = host, redact_on, subject
        self.client_factory = client_factory
        self.loopback_ok = loopback_ok  # COLLIE_PUSH_LOOPBACK=1: loopback endpoints allowed (tests, local relays)
        self.limiter_disk = trio.CapacityLimiter(1)
        self.stats = {"pushed": 0, "quiet": 0, "many": 0, "failed": 0, "removed": 0}
        self.known: set[tuple] = set()  # asks already looked at (their row is on disk)
        self.sent_log: deque = deque(maxlen=100)  # (when, machine, agent, ask, decision) for tests and doctor

    async def run(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        """Start with `nursery.start`: the push client is open and every machine looked at once when it returns."""
        factory = self.client_factory or (lambda: push_pool(loopback_ok=self.loopback_ok))
        async with factory() as client, trio.open_nursery() as deliveries:
            self.client = client
            self._started(task_status)
            while True:
                await self._woken()
                dirty, self.dirty = self.dirty, set()
                for machine, agent in dirty:
                    try:
                        await self._scan(deliveries, machine, agent)
                    except Exception:  # one machine's odd view must not stop pushes for the others
                        log.exception("[bridge] push: could not look at %s", machine)

    async def _scan(self, deliveries: trio.Nursery, machine: str, agent: str | None) -> None:
        for reader in self._readers(machine, agent):
            new = []  # (conversation, ask, key) not looked at before
            for conv in list(reader.conversations.values()):
                for ask in list(conv.asks):
                    key = ask.tool_call_id or f"ask:{ask.id}"
                    if (machine, reader.name, key) in self.known:
                        continue
                    if len(self.known) > 100_000:
                        self.known.clear()
                    self.known.add((machine, reader.name, key))
                    new.append((conv, ask, key))
            if not new:
                continue
            unseen = await trio.to_thread.run_sync(self.store.unseen, machine, reader.name, [k for *_, k in new],
                                                   limiter=self.limiter_disk)
            new = [(conv, ask, key) for conv, ask, key in new if key in unseen]
            if not new:
                continue
            now = time.time()
            decisions = [self.limiter.admit(machine, reader.name, conv.id, now) for conv, _ask, _key in new]
            await trio.to_thread.run_sync(self.store.remember_all, machine, reader.name, [k for *_, k in new], now,
                                          self.limiter.state(now), limiter=self.limiter_disk)
            for (conv, ask, _key), decision in zip(new, decisions):
                self.stats[decision if decision != "push" else "pushed"] += 1
                self.sent_log.append((now, machine, reader.name, ask.id, decision))
                if decision == "push":
                    payload = ask_payload(machine=machine, agent=reader.name, conversation=conv.id,
                                          pane=conv.title or "Untitled conversation",
                                          ask=ask_fields(ask), redact_on=self.redact_on)
                    self._send_all(deliveries, payload, urgency="high", topic=None)
                elif decision == "many":
                    host = self.host if machine == "local" else machine
                    topic = "many-" + hashlib.sha256(f"{machine}/{reader.name}".encode()).hexdigest()[:24]
                    self._send_all(deliveries, many_payload(machine, reader.name, host), urgency="high", topic=topic)

    def _send_all(self, deliveries: trio.Nursery, payload: dict, *, urgency: str, topic: str | None) -> None:
        body = encode(payload)
        for sub in list(self.store.subs.values()):
            deliveries.start_soon(self.deliver, sub, body, urgency, topic)

    async def deliver(self, sub: Subscription, body: bytes, urgency: str, topic: str | None) -> int | None:
        """One push to one subscription, with retries; returns the push service's last status."""
        delay = 1.0
        for attempt in range(4):
            # stored before the rules, or since: checked again, and sent to its host as a client reads it (issue 25 D3)
            endpoint, problem = canonical_endpoint(sub.endpoint, loopback_ok=self.loopback_ok)
            if problem:
                log.info("[bridge] push to %r not sent: %s", _shown_host(sub.endpoint), problem)
                self.stats["failed"] += 1
                return None
            now = time.time()
            headers = {"TTL": str(TTL), "Urgency": urgency, "Content-Encoding": "aes128gcm",
                       "Content-Type": "application/octet-stream",
                       **vapid_headers(self.vapid, endpoint, self.subject, now)}
            if topic:
                headers["Topic"] = topic
            try:
                with trio.fail_after(ATTEMPT_SECONDS):
                    status, answer = await post_push(self.client, endpoint, encrypt(sub, body), headers)
            except PushRefused as exc:
                log.info("[bridge] push not sent: %s", exc)
                self.stats["failed"] += 1
                return None
            except Exception as exc:  # noqa: BLE001 - a push service's failure is that push's failure
                log.info("[bridge] push to %r failed: %s", urlsplit(endpoint).hostname, type(exc).__name__)
                status = None
            else:
                if status < 300:
                    return status
                if status in (404, 410):
                    self.store.remove(sub.endpoint)
                    self.stats["removed"] += 1
                    log.info("[bridge] push subscription gone (%s): removed", status)
                    return status
                if status != 429 and status < 500:
                    self.stats["failed"] += 1
                    log.info("[bridge] push refused by the push service: HTTP %s", status)
                    return status
                retry_after = answer.get("retry-after", "")
                if retry_after.isdigit():
                    delay = min(float(retry_after), 600.0)
            if attempt < 3:
                await trio.sleep(delay)
                delay = min(delay * 2, 600.0)
        self.stats["failed"] += 1
        return status
