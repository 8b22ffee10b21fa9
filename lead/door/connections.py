"""How many HTTP connections the lead holds, from whom, and which to close first (issues 9.7, 25.4).

Every connection costs a file descriptor, and the lead needs descriptors for more than the phone:
its control socket (`collie status`), its agents' sockets, SQLite files, the log. So the HTTP server
takes at most `Limits.total` connections — the descriptor limit (RLIMIT_NOFILE) minus a reserve — and
one client address at most `Limits.per_client` of them. Each open HTTP/2 stream beyond a connection's
first counts as one more connection, for its address and in the total.

**Trusted and untrusted.** A connection is *trusted* once one of its requests carried a valid
credential (a paired phone, the local credential, an API token, a member's link); until then anyone
may hold it. An untrusted connection must deliver its first request (TLS handshake, request line and
headers) within `ARRIVAL_SECONDS` of being admitted, and each request in progress must have arrived and
been answered within `ARRIVAL_SECONDS` of its headers (a slow `POST /pair` is closed then). And untrusted
connections never keep anyone out (issue 25 D2): a newcomer over its address's share, or arriving when the
total is full, takes the place of the untrusted connection (of that address, or of anyone) that has waited
the longest — for its first request, or for its request in progress to end.

When the total is full and no untrusted connection waits, a newcomer takes the place of the longest-idle
connection of the address holding the most (so one crowd of addresses cannot lock the phone out), else of
the longest-idle untrusted connection, else it is refused — and told which limit it met (`refusal`): a
"total" refusal means every connection is trusted. Under pressure — more
than half the total open, or a client past half its share — connections that sit idle (no request in
progress: before the first request, between requests, or stuck in a TLS handshake) are closed after
`PRESSURE_IDLE_SECONDS` instead of the usual 75 s keep-alive. A member's link (a WebSocket) is never
idle in this sense and is never closed for pressure.

**Behind a proxy** (`--public-url`, issue 35) every connection comes from the proxy's address, so a
connection from a trusted proxy (`--trusted-proxy`) is admitted without its address's share (the total
still holds), and each of its requests moves it to the client the proxy names (`rekey`, from `Forwarded` /
`X-Forwarded-For`): the shares and the untrusted rules then see the phone and the flooder apart.

Plain class: no trio; `now` is passed in. `collie.lead.door.http` moves the sockets.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

import attrs

RESERVE_MIN = 128  # descriptors kept back for the control socket, agents, members' DNS/TLS, SQLite, logs
PRESSURE_IDLE_SECONDS = 5.0
ARRIVAL_SECONDS = 10.0  # an untrusted first request not in, or request in progress, this long is closed (25.4, D2)
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
        self.busy_since: dict[Hashable, float] = {}  # when the request in progress started
        self.waiting_since: dict[Hashable, float] = {}  # admitted, no request yet (TLS handshake, request line, headers)
        self.trusted: set[Hashable] = set()  # a request on it carried a valid credential
        self.streams: dict[Hashable, int] = {}  # open HTTP/2 streams, when more than one
        self.extra: Counter[Hashable] = Counter()  # per client: streams beyond each connection's first
        self.refusal: str | None = None  # the limit the last refused newcomer met: "client" or "total"
        self.evicted_waiting = False  # the last connection evicted had sent no whole request yet (collie.lead.door.http answers it)
        self.refused = 0
        self.evicted = 0
        self.lingering = 0  # refused connections still being closed (collie.lead.door.http)
        self.on_pressure: Callable[[], None] | None = None  # called when an admission brings pressure

    def _held(self, client: Hashable) -> int:
        return self.per_client[client] + self.extra[client]

    def used(self) -> int:
        return len(self.client_of) + sum(self.extra.values())

    def admit(self, conn: Hashable, client: Hashable, now: float, *, proxied: bool = False) -> tuple[bool, Hashable | None]:
        """(admitted, a connection to close for it). A client under its share is admitted even when the total is
        full, in place of the longest-waiting untrusted connection, else of the longest-idle connection of the
        client that holds the most (if it holds more than this one), else of the longest-idle untrusted one.
        A client at its share is admitted only in place of one of its own waiting untrusted connections. The
        new connection starts idle, untrusted and waiting for its first request (`evicted_waiting` says
        whether the one it replaced was waiting too: collie.lead.door.http answers it)."""
        evicted = None
        if not proxied and self._held(client) >= self.limits.per_client:
            evicted = self._untrusted_victim(client)
            if evicted is None:
                return self._refuse("client")
        elif self.used() >= self.limits.total:
            evicted = self._untrusted_victim(None)
            if evicted is None:
                evicted = self._victim(client)
            if evicted is None:
                evicted = self._untrusted_idle_victim()
            if evicted is None:
                return self._refuse("total")
        self.evicted_waiting = evicted is not None and evicted in self.waiting_since
        if evicted is not None:
            self.release(evicted)
            self.evicted += 1
        self.client_of[conn] = client
        self.per_client[client] += 1
        self.idle_since[conn] = now
        self.waiting_since[conn] = now
        if self.on_pressure is not None:
            self.on_pressure()  # the sweeper looks: its request has ARRIVAL_SECONDS to arrive (and maybe pressure)
        return True, evicted

    def _refuse(self, limit: str) -> tuple[bool, None]:
        self.refused += 1
        self.refusal = limit
        return False, None

    def _untrusted_victim(self, client: Hashable | None) -> Hashable | None:
        """The untrusted connection (of `client`, or of anyone) that has waited the longest: for its first request
        to arrive (TLS handshake, request line, headers) or for its request in progress to end."""
        busy = [(since, id(conn), conn) for conn, since in (*self.busy_since.items(), *self.waiting_since.items())
                if conn not in self.trusted and (client is None or self.client_of.get(conn) == client)]
        return min(busy)[2] if busy else None

    def _untrusted_idle_victim(self) -> Hashable | None:
        """The untrusted connection idle the longest between requests: a full total then holds only trusted ones."""
        idle = [(since, id(conn), conn) for conn, since in self.idle_since.items()
                if since is not None and conn not in self.trusted]
        return min(idle)[2] if idle else None

    def _victim(self, newcomer: Hashable) -> Hashable | None:
        biggest, held = max(((c, self._held(c)) for c in self.per_client), key=lambda kv: kv[1], default=(None, 0))
        if biggest is None or held <= self._held(newcomer) + 1:
            return None
        idle = [(since, id(conn), conn) for conn, since in self.idle_since.items()
                if since is not None and self.client_of[conn] == biggest]
        return min(idle)[2] if idle else None

    def rekey(self, conn: Hashable, client: Hashable) -> Hashable | None:
        """A request on `conn` (from a trusted proxy) comes from `client`: count it there. Returns a connection to
        close when that puts `client` over its share: its longest-waiting untrusted one other than `conn`."""
        old = self.client_of.get(conn)
        if old is None or old == client:
            return None
        streams = self.streams.get(conn, 1)
        self.per_client[old] -= 1
        self.extra[old] -= streams - 1
        for counter in (self.per_client, self.extra):
            if counter[old] <= 0:
                del counter[old]
        self.client_of[conn] = client
        self.per_client[client] += 1
        if streams > 1:
            self.extra[client] += streams - 1
        if self._held(client) <= self.limits.per_client:
            return None
        busy = [(since, id(c), c) for c, since in (*self.busy_since.items(), *self.waiting_since.items())
                if c is not conn and c not in self.trusted and self.client_of.get(c) == client]
        return min(busy)[2] if busy else None

    def trust(self, conn: Hashable) -> None:
        """A request on `conn` carried a valid credential."""
        if conn in self.client_of:
            self.trusted.add(conn)

    def set_streams(self, conn: Hashable, n: int) -> None:
        """`conn` (HTTP/2) now has `n` open streams: those beyond the first count as connections."""
        client = self.client_of.get(conn)
        if client is None:
            return
        before = max(0, self.streams.get(conn, 1) - 1)
        after = max(0, n - 1)
        self.streams[conn] = n
        self.extra[client] += after - before
        if self.extra[client] <= 0:
            del self.extra[client]

    def release(self, conn: Hashable) -> None:
        client = self.client_of.pop(conn, None)
        self.idle_since.pop(conn, None)
        self.busy_since.pop(conn, None)
        self.waiting_since.pop(conn, None)
        self.trusted.discard(conn)
        streams = self.streams.pop(conn, 1)
        if client is not None and streams > 1:
            self.extra[client] -= streams - 1
            if self.extra[client] <= 0:
                del self.extra[client]
        if client is not None:
            self.per_client[client] -= 1
            if self.per_client[client] <= 0:
                del self.per_client[client]

    def mark(self, conn: Hashable, *, idle: bool, now: float) -> None:
        if conn in self.idle_since:
            self.idle_since[conn] = now if idle else None
            if idle:
                self.busy_since.pop(conn, None)
            elif conn not in self.busy_since:
                self.waiting_since.pop(conn, None)  # its first request's headers are in
                self.busy_since[conn] = now
                if conn not in self.trusted and self.on_pressure is not None:
                    self.on_pressure()  # an untrusted request has ARRIVAL_SECONDS: the sweeper must look

    def _crowded(self) -> bool:
        """More connections open in all than the pressure mark."""
        return self.used() > self.limits.pressure

    def _crowding(self, held: int) -> bool:
        """A client holding this many connections is past half its share."""
        return held > self.limits.per_client // 2

    def under_pressure(self) -> bool:
        return self._crowded() or any(self._crowding(self._held(c)) for c in self.per_client)

    def needs_sweep(self) -> bool:
        """Pressure, or an untrusted request in progress (it has `ARRIVAL_SECONDS`)."""
        return (self.under_pressure() or bool(self.waiting_since)
                or any(conn not in self.trusted for conn in self.busy_since))

    def to_close(self, now: float) -> list[Hashable]:
        """Connections to close now: untrusted requests past `ARRIVAL_SECONDS`; under total pressure every long-idle
        connection, else the long-idle ones of crowding clients."""
        late = [conn for conn, since in (*self.busy_since.items(), *self.waiting_since.items())
                if conn not in self.trusted and now - since >= ARRIVAL_SECONDS]
        everyone = self._crowded()
        crowding = {c for c in self.per_client if self._crowding(self._held(c))}
        if not everyone and not crowding:
            return late
        return list(dict.fromkeys(late + [conn for conn, since in self.idle_since.items()
                                          if since is not None and now - since >= PRESSURE_IDLE_SECONDS
                                          and (everyone or self.client_of[conn] in crowding)]))

    def statistics(self) -> dict:
        return {"open": len(self.client_of), "clients": len(self.per_client), "refused": self.refused,
                "evicted": self.evicted, "trusted": len(self.trusted), "streams": sum(self.extra.values()),
                "untrusted_busy": sum(1 for c in self.busy_since if c not in self.trusted),
                "waiting": len(self.waiting_since),
                "idle": sum(1 for s in self.idle_since.values() if s is not None), **attrs.asdict(self.limits)}
