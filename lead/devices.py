"""Paired phones: one-time pairing codes and the device credentials they are traded for (phone-api.md).

`collie pair` asks the running lead (control socket) for a pairing code. The code is 24 random
bytes, shown once inside a link, valid 10 minutes, good for one pairing. Opening the link trades it
(`POST /pair`) for a device credential: 32 random bytes sent back only as an HttpOnly,
SameSite=Strict cookie. The lead keeps SHA-256 hashes of codes and credentials, never either one.

`collie devices` lists paired phones (name, paired at, last seen); `collie devices revoke NAME`
forgets one: its next request gets 401 and its open live channels close at once.

`Devices` is a plain class: the clock is passed in, lookups are in memory (a request never waits
on the disk to be authenticated), and the SQLite file (`<state>/devices.sqlite`, 0600, WAL,
synchronous=FULL) is the record, read once at start. Only the lead process writes it.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from pathlib import Path

import attrs

from crew.fsutil import open_db

CODE_TTL = 10 * 60.0
CODE_BYTES = 24
CREDENTIAL_BYTES = 32
MAX_OPEN_CODES = 20  # unused codes kept at once; the oldest is dropped beyond this
MAX_DEVICES = 50
NAME_MAX = 40
SEEN_EVERY = 60.0  # last-seen times are written at most once a minute per device
COOKIE = "collie_device"

SCHEMA = """
CREATE TABLE IF NOT EXISTS codes (hash TEXT PRIMARY KEY, created_at REAL NOT NULL, expires_at REAL NOT NULL,
    used_at REAL);
CREATE TABLE IF NOT EXISTS devices (id TEXT PRIMARY KEY, name TEXT NOT NULL UNIQUE, hash TEXT NOT NULL UNIQUE,
    paired_at REAL NOT NULL, last_seen REAL);
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
    written_seen: float | None = None

    def public(self) -> dict:
        return {"id": self.id, "name": self.name, "paired_at": self.paired_at, "last_seen": self.last_seen}


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
        self.codes: dict[str, tuple[float, float | None]] = {
            h: (exp, used) for h, exp, used in self.db.execute("SELECT hash, expires_at, used_at FROM codes")}
        self.by_hash: dict[str, Device] = {}
        for row in self.db.execute("SELECT id, name, hash, paired_at, last_seen FROM devices"):
            dev = Device(*row)
            dev.written_seen = dev.last_seen
            self.by_hash[dev.hash] = dev
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

    def redeem(self, code: object, name: object, now: float) -> tuple[Device, str]:
        """Trade a code for a new device credential: (device, credential). Raises `PairingRefused`."""
        if not isinstance(code, str) or not 1 <= len(code) <= 200:
            raise PairingRefused("unknown", f"This pairing link is not valid. Run `{self.again}` again.")
        h = digest(code)
        found = None
        for known in self.codes:  # constant-time comparison of the hashes, whatever is stored
            if hmac.compare_digest(known, h):
                found = known
        if found is None:
            raise PairingRefused("unknown", f"This pairing link is not valid. Run `{self.again}` again.")
        expires, used = self.codes[found]
        if used is not None:
            raise PairingRefused("used", f"This pairing link was already used. Run `{self.again}` again.")
        if now >= expires:
            raise PairingRefused("expired", f"This pairing link expired (links last 10 minutes). Run `{self.again}` again.")
        if len(self.by_hash) >= MAX_DEVICES:
            raise PairingRefused("too_many", f"{MAX_DEVICES} phones are paired already. Revoke one with `collie devices revoke`.")
        credential = secrets.token_urlsafe(CREDENTIAL_BYTES)
        dev = Device(id=secrets.token_hex(6), name=self._unique(clean_name(name, "phone")), hash=digest(credential),
                     paired_at=now, last_seen=now, written_seen=now)
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            if self.db.execute("UPDATE codes SET used_at=? WHERE hash=? AND used_at IS NULL", (now, found)).rowcount != 1:
                raise PairingRefused("used", f"This pairing link was already used. Run `{self.again}` again.")
            self.db.execute("INSERT INTO devices (id, name, hash, paired_at, last_seen) VALUES (?, ?, ?, ?, ?)",
                            (dev.id, dev.name, dev.hash, dev.paired_at, dev.last_seen))
        self.codes[found] = (expires, now)
        self.by_hash[dev.hash] = dev
        return dev, credential

    def _unique(self, name: str) -> str:
        taken = {d.name for d in self.by_hash.values()}
        if name not in taken:
            return name
        n = 2
        while f"{name[:NAME_MAX - 4]} {n}" in taken:
            n += 1
        return f"{name[:NAME_MAX - 4]} {n}"

    # --- devices -------------------------------------------------------------------------------
    def device_for(self, credential: str | None) -> Device | None:
        """The paired device holding `credential`, else None. The secret itself is never kept."""
        if not credential or len(credential) > 200:
            return None
        h = digest(credential)
        dev = self.by_hash.get(h)
        if dev is not None and hmac.compare_digest(dev.hash, h):
            return dev
        return None

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
                for fn in self.on_revoke:
                    fn(dev.id)
                return dev
        return None
