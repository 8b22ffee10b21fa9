"""How many HTTP connections the lead holds, from whom, and which to close first (issue 9.7).

Every connection costs a file descriptor, and the lead needs descriptors for more than the phone:
its control socket (`collie status`), its agents' sockets, SQLite files, the log. So the HTTP server
takes at most `Limits.total` connections — the descriptor limit (RLIMIT_NOFILE) minus a reserve — and
one client address at most `Limits.per_client` of them; a connection over its address's share is
refused at once. When the total is full, a newcomer takes the place of the longest-idle connection of
the address holding the most (so one crowd of addresses cannot lock the phone out), else it is refused. Under pressure — more than half the total open, or a client past half its share — connections
that sit idle (no request in progress: before the first request, between requests, or stuck in a
TLS handshake) are closed after `PRESSURE_IDLE_SECONDS` instead of the usual 75 s keep-alive.
A member's link (a WebSocket) is never idle in this sense and is never closed for pressure.

Plain class: no trio; `now` is passed in. `lead.http` moves the sockets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

import attrs

RESERVE_MIN = 128  # descriptors kept back for the control socket, agents, members' DNS/TLS, SQLite, logs
PRESSURE_IDLE_SECONDS = 5.0
UNLIMITED_DESCRIPTORS = 65536  # what RLIM_INFINITY counts as


@attrs.frozen
class Limits:
    total: int
    per_client: int
    pressure: int  # more open connections than this: idle ones close after PRESSURE_IDLE_SECONDS

    @classmethod
    def for_descriptors(cls, nofile: int) -> Limits:
        """Limits that leave a quarter of the descriptors (at least `RESERVE_MIN`) to everything else."""
        reserve = max(RESERVE_MIN, nofile // 4)
        total = max(8, nofile - reserve)
        return cls(total=total, per_client=max(4, total // 4), pressure=total // 2)


class ConnectionBudget:
    """Admits, counts and picks idle connections to close. Connections and clients are opaque keys."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.per_client: Counter[Hashable] = Counter()
        self.client_of: dict[Hashable, Hashable] = {}
        self.idle_since: dict[Hashable, float | None] = {}  # None: a request is in progress
        self.refused = 0
        self.evicted = 0
        self.lingering = 0  # refused connections still being closed (lead.http)
        self.on_pressure: Callable[[], None] | None = None  # called when an admission brings pressure

    def admit(self, conn: Hashable, client: Hashable, now: float) -> tuple[bool, Hashable | None]:
        """(admitted, a connection to close for it). A client under its share is admitted even when the total is
        full, in place of the longest-idle connection of the client that holds the most (if it holds more than
        this one and has an idle connection). The new connection starts idle (nothing asked yet)."""
        if self.per_client[client] >= self.limits.per_client:
            self.refused += 1
            return False, None
        evicted = None
        if len(self.client_of) >= self.limits.total:
            evicted = self._victim(client)
            if evicted is None:
                self.refused += 1
                return False, None
            self.release(evicted)
            self.evicted += 1
        self.client_of[conn] = client
        self.per_client[client] += 1
        self.idle_since[conn] = now
        if self.on_pressure is not None and (self._crowded() or self._crowding(self.per_client[client])):
            self.on_pressure()  # only an admission can bring pressure: the sweeper sleeps until then
        return True, evicted

    def _victim(self, newcomer: Hashable) -> Hashable | None:
        biggest, held = max(self.per_client.items(), key=lambda kv: kv[1], default=(None, 0))
        if biggest is None or held <= self.per_client[newcomer] + 1:
            return None
        idle = [(since, id(conn), conn) for conn, since in self.idle_since.items()
                if since is not None and self.client_of[conn] == biggest]
        return min(idle)[2] if idle else None

    def release(self, conn: Hashable) -> None:
        client = self.client_of.pop(conn, None)
        self.idle_since.pop(conn, None)
        if client is not None:
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    def mark(self, conn: Hashable, *, idle: bool, now: float) -> None:
        if conn in self.idle_since:
            self.idle_since[conn] = now if idle else None

    def _crowded(self) -> bool:
        """More connections open in all than the pressure mark."""
        return len(self.client_of) > self.limits.pressure

    def _crowding(self, held: int) -> bool:
        """A client holding this many connections is past half its share."""
        return held > self.limits.per_client // 2

    def under_pressure(self) -> bool:
        return self._crowded() or any(self._crowding(n) for n in self.per_client.values())

    def to_close(self, now: float) -> list[Hashable]:
        """Idle connections to close now: all long-idle ones under total pressure, else those of crowding clients."""
        everyone = self._crowded()
        crowding = {c for c, n in self.per_client.items() if self._crowding(n)}
        if not everyone and not crowding:
            return []
        return [conn for conn, since in self.idle_since.items()
                if since is not None and now - since >= PRESSURE_IDLE_SECONDS
                and (everyone or self.client_of[conn] in crowding)]

    def statistics(self) -> dict:
        return {"open": len(self.client_of), "clients": len(self.per_client), "refused": self.refused,
                "evicted": self.evicted,
                "idle": sum(1 for s in self.idle_since.values() if s is not None), **attrs.asdict(self.limits)}
