"""Paired phones: one-time pairing codes and the device credentials they are traded for (phone-api.md).

`collie pair` asks the running lead (control socket) for a pairing code. The code is 24 random
bytes, shown once inside a link, valid 10 minutes, good for one pairing. Opening the link trades it
(`POST /pair`) for a device credential in two halves (issue 25.1):

- a **cookie** (32 random bytes; HttpOnly, SameSite=Strict, `__Host-collie_device` over TLS, else
  `collie_device`), which script cannot read — but which the browser also sends to every other port
  of the host (cookies are not separated by port, RFC 6265 §8.5);
- a **device key** (32 random bytes) in the answer's body, which the pairing page keeps in its
  origin's IndexedDB — separated by port, so no other server on the host ever sees it — and the page
  sends as the header `X-Collie-Device-Key` on every request.

A request is a paired phone's only with both halves of the same device, compared in constant time.
The live channel (EventSource cannot send headers) is opened with a **ticket**: 24 random bytes,
fetched with both halves (`POST /api/events/ticket`), valid 60 seconds, good only with that device's
cookie; at most 16 open a device (its own oldest goes), so one phone's flood drops no other phone's. The key (or the ticket) names the device; every cookie value of the credential's names is then
compared with that one device's cookie hash, so cookies planted by a neighbour under deeper `Path`s
(which the browser sends first) cannot shadow the phone's own, however many there are (issue 25 D1).
A device paired before device keys (its row has no key) is refused until it pairs again.

A neighbour can still *replace* the phone's cookie (one of the same name and `Path`; on `127.0.0.1`
Chromium lets even a plain-HTTP port replace a `Secure` one). So that this logs nobody out, the pairing
page also makes a **signing key** (ECDSA P-256, WebCrypto, not extractable: script can use it on the
lead's own page but never read it out) and sends its public half with the code. A page whose cookie was
replaced asks `POST /pair/renew` with its device key for a **challenge** (24 random bytes, 60 seconds,
one use, for that device; at most 4 open a device, so a flood from one device drops only its own), signs it, and trades the signature for a new cookie (`renew`). The device key
alone (say, copied off the phone) renews nothing; the old cookie stops working.

The lead keeps SHA-256 hashes of codes, cookies and keys, never one of them; tickets live in memory.

`collie devices` lists paired phones (name, paired at, last seen); `collie devices revoke NAME`
forgets one: its next request gets 401 and its open live channels close at once.

`Devices` is a plain class: the clock is passed in, lookups are in memory (a request never waits
on the disk to be authenticated), and the SQLite file (`<state>/devices.sqlite`, 0600, WAL,
synchronous=FULL) is the record, read once at start. Only the lead process writes it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from pathlib import Path

import attrs

from collie.crew.fsutil import open_db

CODE_TTL = 10 * 60.0
CODE_BYTES = 24
CREDENTIAL_BYTES = 32
MAX_OPEN_CODES = 20  # unused codes kept at once; the oldest is dropped beyond this
MAX_DEVICES = 50
NAME_MAX = 40
SEEN_EVERY = 60.0  # last-seen times are written at most once a minute per device
COOKIE = "collie_device"  # over plain HTTP (loopback)
SECURE_COOKIE = "__Host-collie_device"  # over TLS: Secure, Path=/, no Domain — a plain-HTTP neighbour cannot set it
COOKIE_NAMES = (SECURE_COOKIE, COOKIE)
KEY_HEADER = "X-Collie-Device-Key"
TICKET_TTL = 60.0
CHALLENGE_TTL = 60.0
CHALLENGES_PER_DEVICE = 4  # open renewal challenges one device may hold; its own oldest goes beyond this
RENEW_CONTEXT = b"collie-renew-v1\n"  # what a renewal signs, before the challenge
TICKET_BYTES = 24
TICKETS_PER_DEVICE = 16  # open live tickets one device may hold (tabs, reconnects); its own oldest goes beyond this

SCHEMA = """
CREATE TABLE IF NOT EXISTS codes (hash TEXT PRIMARY KEY, created_at REAL NOT NULL, expires_at REAL NOT NULL,
    used_at REAL);
CREATE TABLE IF NOT EXISTS devices (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, hash TEXT NOT NULL UNIQUE,
    paired_at REAL NOT NULL, last_seen REAL, key_hash TEXT, sign_key TEXT);
"""


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


@attrs.define
class Device:
    id: str
    name: str
    hash: str
    paired_at: float
    last_seen: float | None = None
    key_hash: str | None = None  # None: paired before device keys (issue 25.1); refused until paired again
    sign_key: str | None = None  # the page's public signing key (base64url P-256 point); None: no renewal
    written_seen: float | None = None

    def public(self) -> dict:
        return {"id": self.id, "name": self.name, "paired_at": self.paired_at, "last_seen": self.last_seen}


class RenewRefused(Exception):
    """A cookie renewal that cannot be done; the message says what the phone should do."""


_B64URL = re.compile(r"[A-Za-z0-9_-]+")


def _b64url(text: str) -> bytes:
    """Unpadded base64url, as WebCrypto's callers write it; anything else (padding, `+`, `/`) is refused."""
    if not _B64URL.fullmatch(text):
        raise ValueError("not unpadded base64url")
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def parse_sign_key(value: object) -> str | None:
    """A public signing key as the pairing page sends it (base64url of the 65-byte uncompressed P-256
    point), checked to be a point on the curve; None when absent. Raises `ValueError` when malformed."""
    if value is None:
        return None
    if not isinstance(value, str) or not 80 <= len(value) <= 100:
        raise ValueError("sign_key must be the base64url of a 65-byte P-256 public key")
    from cryptography.hazmat.primitives.asymmetric import ec

    try:
        raw = _b64url(value)
        ec.EllipticCurvePublicKey.from_encoded_point(ec.SECP256R1(), raw)
    except (ValueError, TypeError):
        raise ValueError("sign_key is not a P-256 public key") from None
    if len(raw) != 65:
        raise ValueError("sign_key must be an uncompressed P-256 point (65 bytes)")
    return value


def signature_ok(sign_key: str, data: bytes, signature: object) -> bool:
    """True when `signature` (base64url of WebCrypto's 64-byte r‖s) is `sign_key`'s over `data`."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

    if not isinstance(signature, str) or len(signature) > 100:
        return False
    try:
        raw = _b64url(signature)
        if len(raw) != 64:
            return False
        pub = ec.EllipticCurvePublicKey.from_encoded_point(
            ec.SECP256R1(), _b64url(sign_key))
        pub.verify(encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big")), data,
                   ec.ECDSA(hashes.SHA256()))
        return True
    except (InvalidSignature, ValueError, TypeError):
        return False


class PairingRefused(Exception):
    """A code that cannot be traded: `code` is unknown, expired or used (one word for the phone)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


_NAME_OK = re.compile(r"[^\x00-\x1f\x7f]+")


def clean_name(name: object, fallback: str) -> str:
    """A device's display name: printable, at most 40 characters, else `fallback`."""
    if not isinstance(name, str):
        return fallback
    name = " ".join("".join(_NAME_OK.findall(name)).split())[:NAME_MAX]
    return name or fallback


class Devices:
    def __init__(self, path: Path, *, again: str = "collie pair") -> None:
        self.again = again  # the command a refused link tells to run (`collie demo pair` in the demo)
        self.db = open_db(path)
        self.db.executescript(SCHEMA)
        columns = {row[1] for row in self.db.execute("PRAGMA table_info(devices)")}
        if "key_hash" not in columns:
            self.db.execute("ALTER TABLE devices ADD COLUMN key_hash TEXT")  # a file from before device keys
        if "sign_key" not in columns:
            self.db.execute("ALTER TABLE devices ADD COLUMN sign_key TEXT")  # a file from before renewals
        self.tickets: dict[str, tuple[str, float]] = {}  # hash -> (device id, expires)
        self.challenges: dict[str, tuple[str, float]] = {}  # cookie renewals: challenge -> (device id, expires)
        self.codes: dict[str, tuple[float, float | None]] = {
            h: (exp, used) for h, exp, used in self.db.execute("SELECT hash, expires_at, used_at FROM codes")}
        self.by_hash: dict[str, Device] = {}
        for row in self.db.execute("SELECT id, name, hash, paired_at, last_seen, key_hash, sign_key FROM devices"):
            dev = Device(*row)
            dev.written_seen = dev.last_seen
            self.by_hash[dev.hash] = dev
        self.by_key: dict[str, Device] = {d.key_hash: d for d in self.by_hash.values() if d.key_hash is not None}
        self.on_revoke: list[Callable[[str], None]] = []

    def close(self) -> None:
        self.db.close()

    # --- codes ---------------------------------------------------------------------------------
    def new_code(self, now: float) -> tuple[str, float]:
        """A fresh one-time code and when it expires. Only its hash is kept."""
        self._forget_old_codes(now)
        open_codes = sorted((exp, h) for h, (exp, used) in self.codes.items() if used is None and exp > now)
        for _, h in open_codes[: max(0, len(open_codes) - MAX_OPEN_CODES + 1)]:
            self._drop_code(h)
        code = secrets.token_urlsafe(CODE_BYTES)
        h, expires = digest(code), now + CODE_TTL
        self.db.execute("INSERT INTO codes (hash, created_at, expires_at) VALUES (?, ?, ?)", (h, now, expires))
        self.codes[h] = (expires, None)
        return code, expires

    def _drop_code(self, h: str) -> None:
        self.db.execute("DELETE FROM codes WHERE hash=?", (h,))
        self.codes.pop(h, None)

    def _forget_old_codes(self, now: float) -> None:
        # a used or expired code is kept a day, so that a second try says "used" or "expired"
        for h, (exp, used) in list(self.codes.items()):
            if max(exp, used or 0) + 86400 < now:
                self._drop_code(h)

    def new_link(self) -> str:
        """Where a new link comes from, told neutrally: the phone's user may never have run the command (issue 36)."""
        return f"A new link comes from `{self.again}` on the lead: ask whoever runs it."

    def redeem(self, code: object, name: object, now: float, sign_key: str | None = None) -> tuple[Device, str, str]:
        """Trade a code for a new device credential: (device, cookie, key). Raises `PairingRefused`.
        `sign_key` (checked by `parse_sign_key`) lets the device renew a replaced cookie."""
        if not isinstance(code, str) or not 1 <= len(code) <= 200:
            raise PairingRefused("unknown", f"This pairing link is not valid. {self.new_link()}")
        h = digest(code)
        found = None
        for known in self.codes:  # constant-time comparison of the hashes, whatever is stored
            if hmac.compare_digest(known, h):
                found = known
        if found is None:
            raise PairingRefused("unknown", f"This pairing link is not valid. {self.new_link()}")
        expires, used = self.codes[found]
        if used is not None:
            raise PairingRefused("used", f"This pairing link was already used: a link pairs one phone. {self.new_link()}")
        if now >= expires:
            raise PairingRefused("expired", f"This pairing link expired (links last 10 minutes). {self.new_link()}")
        if len(self.by_hash) >= MAX_DEVICES:
            raise PairingRefused("too_many", f"{MAX_DEVICES} phones are paired already. Revoke one with `collie devices revoke`.")
        credential, key = secrets.token_urlsafe(CREDENTIAL_BYTES), secrets.token_urlsafe(CREDENTIAL_BYTES)
        dev = Device(id=secrets.token_hex(6), name=self._unique(clean_name(name, "phone")), hash=digest(credential),
                     paired_at=now, last_seen=now, key_hash=digest(key), sign_key=sign_key, written_seen=now)
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            if self.db.execute("UPDATE codes SET used_at=? WHERE hash=? AND used_at IS NULL", (now, found)).rowcount != 1:
                raise PairingRefused("used", f"This pairing link was already used: a link pairs one phone. {self.new_link()}")
            self.db.execute("INSERT INTO devices (id, name, hash, paired_at, last_seen, key_hash, sign_key) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (dev.id, dev.name, dev.hash, dev.paired_at, dev.last_seen, dev.key_hash, dev.sign_key))
        self.codes[found] = (expires, now)
        self.by_hash[dev.hash] = dev
        self.by_key[dev.key_hash] = dev
        return dev, credential, key

    def _unique(self, name: str) -> str:
        taken = {d.name for d in self.by_hash.values()}
        if name not in taken:
            return name
        n = 2
        while f"{name[:NAME_MAX - 4]} {n}" in taken:
            n += 1
        return f"{name[:NAME_MAX - 4]} {n}"

    # --- devices -------------------------------------------------------------------------------
    def _holds_cookie(self, dev: Device, cookies) -> bool:
        """True when one of `cookies` is `dev`'s own. Every value is compared — in constant time, against this
        one device's hash only — so planted cookies ahead of the phone's cannot push it out of reach, and their
        number is bounded only by the header size the server accepts (each costs one SHA-256)."""
        held = False
        for credential in cookies:
            if isinstance(credential, str) and credential and len(credential) <= 200:
                held |= hmac.compare_digest(dev.hash, digest(credential))
        return held

    def device_for(self, cookies, key: str | None) -> Device | None:
        """The paired device whose key is `key` and whose cookie is among `cookies`, else None. The key names
        the device (its hash is looked up); the cookies are then checked against that device's alone. Both
        halves are needed: the cookie alone reaches every port of the host. The secrets are never kept."""
        if not isinstance(key, str) or not key or len(key) > 200:
            return None
        dev = self.by_key.get(digest(key))
        if dev is None or dev.key_hash is None or dev.hash not in self.by_hash:
            return None
        return dev if self._holds_cookie(dev, cookies) else None

    def paired_before_keys(self, cookies) -> bool:
        """True when a cookie is a device's that was paired before device keys (it must pair again)."""
        for credential in cookies:
            if isinstance(credential, str) and credential and len(credential) <= 200:
                dev = self.by_hash.get(digest(credential))
                if dev is not None and dev.key_hash is None:
                    return True
        return False

    # --- live-channel tickets ------------------------------------------------------------------
    def new_ticket(self, dev: Device, now: float) -> str:
        """A ticket that opens the live channel for `dev` (with its cookie) for `TICKET_TTL` seconds."""
        for h, (_dev_id, expires) in list(self.tickets.items()):
            if expires <= now:
                del self.tickets[h]
        # bounded per device (at most MAX_DEVICES × TICKETS_PER_DEVICE in all, issue 42.9): one phone asking
        # again and again drops only its own oldest, never another phone's ticket
        mine = [h for h, (dev_id, _exp) in self.tickets.items() if dev_id == dev.id]  # oldest first
        for h in mine[: max(0, len(mine) - TICKETS_PER_DEVICE + 1)]:
            del self.tickets[h]
        ticket = secrets.token_urlsafe(TICKET_BYTES)
        self.tickets[digest(ticket)] = (dev.id, now + TICKET_TTL)
        return ticket

    def device_for_ticket(self, cookies, ticket: str | None, now: float) -> Device | None:
        """The device a live ticket was given to, when one of `cookies` is that device's own; else None."""
        if not isinstance(ticket, str) or not ticket or len(ticket) > 200:
            return None
        held = self.tickets.get(digest(ticket))
        if held is None or held[1] <= now:
            return None
        dev = self.by_id(held[0])
        return dev if dev is not None and self._holds_cookie(dev, cookies) else None

    # --- cookie renewal (a neighbour replaced the phone's cookie) ------------------------------------
    def _by_key(self, key: object) -> Device | None:
        if not isinstance(key, str) or not key or len(key) > 200:
            return None
        dev = self.by_key.get(digest(key))
        return dev if dev is not None and dev.hash in self.by_hash else None

    def new_challenge(self, key: object, now: float) -> str:
        """A challenge for the device whose key is `key`, to sign with its signing key. Raises `RenewRefused`
        for an unknown key or a device paired without a signing key (both must pair again)."""
        dev = self._by_key(key)
        if dev is None:
            raise RenewRefused("this phone is not paired with this lead: pair it again with `collie pair`")
        if dev.sign_key is None:
            raise RenewRefused("this phone was paired without a signing key, so its cookie cannot be renewed: "
                               "pair it again with `collie pair`")
        for h, (_dev_id, expires) in list(self.challenges.items()):
            if expires <= now:
                del self.challenges[h]
        # bounded per device (at most MAX_DEVICES × CHALLENGES_PER_DEVICE in all): one device asking again and
        # again drops only its own oldest, never another phone's challenge
        mine = [h for h, (dev_id, _exp) in self.challenges.items() if dev_id == dev.id]  # oldest first
        for h in mine[: max(0, len(mine) - CHALLENGES_PER_DEVICE + 1)]:
            del self.challenges[h]
        challenge = secrets.token_urlsafe(TICKET_BYTES)
        self.challenges[digest(challenge)] = (dev.id, now + CHALLENGE_TTL)
        return challenge

    def renew(self, key: object, challenge: object, signature: object, now: float) -> tuple[Device, str]:
        """A new cookie for the device whose key is `key`, when `signature` is its signing key's over
        `RENEW_CONTEXT + challenge` and the challenge is one given to it, unexpired and unused (used up by
        its own device's try whatever the outcome; another device's try leaves it). The old cookie stops
        working. Raises `RenewRefused`."""
        dev = self._by_key(key)
        h = digest(challenge) if isinstance(challenge, str) and len(challenge) <= 200 else None
        held = self.challenges.get(h) if h is not None else None
        if dev is not None and held is not None and held[0] == dev.id:
            del self.challenges[h]  # used up by its own device, whatever the outcome; another's try uses nothing
        if dev is None or dev.sign_key is None or held is None or held[0] != dev.id or held[1] <= now:
            raise RenewRefused("this renewal is not valid (an unknown, expired or used challenge): try again")
        if not signature_ok(dev.sign_key, RENEW_CONTEXT + challenge.encode(), signature):
            raise RenewRefused("the signature does not match this phone's signing key: pair it again with `collie pair`")
        credential = secrets.token_urlsafe(CREDENTIAL_BYTES)
        self.db.execute("UPDATE devices SET hash=? WHERE id=?", (digest(credential), dev.id))
        del self.by_hash[dev.hash]
        dev.hash = digest(credential)
        self.by_hash[dev.hash] = dev
        return dev, credential

    def by_id(self, device_id: str) -> Device | None:
        return next((d for d in self.by_hash.values() if d.id == device_id), None)

    def seen(self, dev: Device, now: float) -> bool:
        """Note a request from `dev`; True when the time should be written (at most once a minute)."""
        dev.last_seen = now
        return dev.written_seen is None or now - dev.written_seen >= SEEN_EVERY

    def write_seen(self, dev: Device) -> None:
        self.db.execute("UPDATE devices SET last_seen=? WHERE id=?", (dev.last_seen, dev.id))
        dev.written_seen = dev.last_seen

    def listing(self) -> list[dict]:
        return [d.public() for d in sorted(self.by_hash.values(), key=lambda d: d.paired_at)]

    def revoke(self, name_or_id: str) -> Device | None:
        """Forget a device by name or id; its live channels are closed by the `on_revoke` hooks."""
        for dev in list(self.by_hash.values()):
            if name_or_id in (dev.name, dev.id):
                self.db.execute("DELETE FROM devices WHERE id=?", (dev.id,))
                del self.by_hash[dev.hash]
                if dev.key_hash is not None:
                    self.by_key.pop(dev.key_hash, None)
                self.tickets = {h: t for h, t in self.tickets.items() if t[0] != dev.id}
                self.challenges = {h: t for h, t in self.challenges.items() if t[0] != dev.id}
                for fn in self.on_revoke:
                    fn(dev.id)
                return dev
        return None
