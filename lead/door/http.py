"""The lead's HTTP server: the phone's API and (later) its web app.

`serve_http` follows hypercorn's own shape: report the bound addresses through `task_status`, run
until `shutdown` is set, then give open connections a short graceful deadline. Connections are
budgeted (`collie.lead.door.connections`, issue 9.7): at most a share of the descriptor limit in total and per
client address, refused (or, when the total is full, let in by closing the biggest holder's longest-idle
connection), and idle ones closed early under pressure. A connection closed before its first request was
in is answered first where it can be (`BudgetedTCPServer.part_with`): 503 when another took its place,
408 when its request did not arrive in time (issue 25 D2); a TLS handshake has 10 s.

A peer that disappears or stops reading does not hold its connection (and a phone's live channel, with the
viewing count that keeps an agent on 2 s polling) for long: every accepted TCP connection gets TCP
keep-alive and a user timeout (`prepare_socket`), and a write the peer takes nothing of for
`hypercorn_fix.SEND_STALL_SECONDS` ends the connection.
"""

from __future__ import annotations

import math
import resource
import socket
from contextvars import ContextVar
from functools import partial

import trio
from hypercorn.config import Config
from hypercorn.events import Updated
from hypercorn.trio import serve
from quart_trio import QuartTrio
from quart_trio.asgi import TrioASGIHTTPConnection

from collie.crew import crewwire, logs
from collie.lead.door import hypercorn_fix
from collie.lead.door.connections import ARRIVAL_SECONDS, UNLIMITED_DESCRIPTORS, ConnectionBudget, Limits
from collie.lead.door.jar import COOKIE_MAX, HEAD_MAX, JarGuard

GRACEFUL_SECONDS = 3.0
BACKLOG = 1024  # hypercorn's 100 reset connections under a burst of 100 clients (bench/sends.py)
# Longer than clients keep idle connections (httpx: 5 s, browsers: ~60 s), so the client always closes
# first; with hypercorn's 5 s a client could reuse a connection the server was closing at that instant.
# Under pressure idle connections close sooner (collie.lead.door.connections.PRESSURE_IDLE_SECONDS).
KEEP_ALIVE_SECONDS = 75.0
SWEEP_SECONDS = 1.0
REFUSAL_LINGER_SECONDS = 1.0  # a client that sent its request first must read the 503 before the close
MAX_LINGERING = 32  # refused connections waiting for their client to read the 503; beyond, close at once
# The 503 says which limit the newcomer met, so that it is true for the client it is sent to (issue 25.4).
# A "total" refusal happens only when every connection is a signed-in client's (collie.lead.door.connections), so it says so.
# A connection closed before its first request was in gets an answer too: made room for another, or too slow.
_REFUSAL_BODIES = {
    "client": (b"503 Service Unavailable",
               b'{"error": "busy", "message": "too many connections from your address; close some and retry"}\n'),
    "total": (b"503 Service Unavailable",
              b'{"error": "busy", "message": "the lead has all its connections in use by paired phones and members; '
              b'retry in a moment"}\n'),
    "made_room": (b"503 Service Unavailable",
                  b'{"error": "busy", "message": "the lead closed this connection, which had sent no request yet, '
                  b'to make room for another; retry"}\n'),
    "timeout": (b"408 Request Timeout",
                b'{"error": "timeout", "message": "the request did not arrive within 10 seconds"}\n'),
}
REFUSALS = {limit: (b"HTTP/1.1 %s\r\ncontent-type: application/json\r\nconnection: close\r\n"
                    b"content-length: %d\r\n\r\n%s" % (status, len(body), body))
            for limit, (status, body) in _REFUSAL_BODIES.items()}
REFUSAL = REFUSALS["client"]

# A phone whose radio drops mid-connection sends no FIN or RST: without these the kernel keeps the connection
# ~15 min while data it sent goes unacknowledged, and forever when nothing is sent (issue 11).
KEEPALIVE_IDLE_SECONDS = 30  # first probe after 30 s of silence from the peer
KEEPALIVE_INTERVAL_SECONDS = 10
KEEPALIVE_PROBES = 3  # an idle dead peer is dropped within 30 + 3 x 10 = 60 s (Linux: ~40 s, see below)
# Data sent and unacknowledged this long (the live channel's events or its 15 s heartbeat to a gone phone,
# or a zero window: a peer that stops reading) ends the connection. Linux only; it also ends unanswered
# keep-alive probes once this long has passed. A phone on a poor link acknowledges well within 30 s.
USER_TIMEOUT_SECONDS = 30

log = logs.get("http")
_budget: ContextVar[ConnectionBudget | None] = ContextVar("collie_connection_budget", default=None)
_connection: ContextVar[object | None] = ContextVar("collie_connection", default=None)  # the request's, for trust()


_proxies: ContextVar[tuple] = ContextVar("collie_trusted_proxies", default=())


def forwarded_client(peer: str, forwarded: str | None, x_forwarded_for: str | None,
                     proxies: tuple) -> str:
    """The client address of a request: the TCP peer, unless that is a trusted proxy; then the nearest address
    in `Forwarded` (else `X-Forwarded-For`) that is not itself a trusted proxy, read right to left (what a
    client writes at the left is not believed)."""
    if not _trusted(peer, proxies):
        return peer
    hops: list[str] = []
    if forwarded:
        for element in forwarded.split(","):
            for pair in element.split(";"):
                key, _, value = pair.strip().partition("=")
                if key.strip().lower() == "for":
                    hops.append(_bare(value.strip().strip('"')))
    elif x_forwarded_for:
        hops = [_bare(h.strip()) for h in x_forwarded_for.split(",")]
    for hop in reversed(hops[-16:]):
        if not hop:
            break
        if not _trusted(hop, proxies):
            return hop
    return peer


def _bare(value: str) -> str:
    """`[2001:db8::1]:443`, `1.2.3.4:5`, `1.2.3.4` → the address; anything else → ''."""
    import ipaddress

    if value.startswith("["):
        value = value[1:].split("]", 1)[0]
    elif value.count(":") == 1:
        value = value.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        return ""


def _trusted(address: str, proxies: tuple) -> bool:
    import ipaddress

    try:
        a = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(a.version == net.version and a in net for net in proxies)


def see_client(headers) -> str | None:
    """For the current request: the client address (forwarded_client), and its connection moved to it in the
    budget when it came through a trusted proxy. None outside a budgeted connection."""
    budget, conn = _budget.get(), _connection.get()
    peer = getattr(conn, "peer", None)
    if peer is None:
        return None
    if not getattr(conn, "proxied", False):
        return peer
    client = forwarded_client(peer, headers.get("forwarded"), headers.get("x-forwarded-for"), _proxies.get())
    if budget is not None:
        crowded = budget.rekey(conn, client)
        if crowded is not None:
            crowded.budget_scope.cancel()
    return client


def trust_connection() -> None:
    """The current request carried a valid credential: its connection is trusted (collie.lead.door.connections)."""
    budget, conn = _budget.get(), _connection.get()
    if budget is not None and conn is not None:
        budget.trust(conn)


def descriptor_limit() -> int:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return UNLIMITED_DESCRIPTORS if soft == resource.RLIM_INFINITY else soft


def prepare_socket(sock) -> None:
    """Keep-alive and a user timeout on an accepted TCP connection (the constants above), each where the
    platform has it; a Unix socket is left as it is. An option the kernel refuses is skipped."""
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    idle = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)  # macOS: KEEPALIVE
    options = [(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1), (socket.IPPROTO_TCP, idle, KEEPALIVE_IDLE_SECONDS),
               (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_SECONDS),
               (socket.IPPROTO_TCP, getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_PROBES),
               (socket.IPPROTO_TCP, getattr(socket, "TCP_USER_TIMEOUT", None), USER_TIMEOUT_SECONDS * 1000)]
    for level, option, value in options:
        if option is not None:
            try:
                sock.setsockopt(level, option, value)
            except OSError:
                pass


class BudgetedTCPServer(hypercorn_fix.FixedTCPServer):
    """One connection, admitted by the budget of the `serve_http` that accepted it."""

    async def run(self) -> None:
        prepare_socket(hypercorn_fix.socket_of(self.stream))
        budget = _budget.get()
        if budget is None:
            await super().run()
            return
        try:
            sock = hypercorn_fix.socket_of(self.stream)
            peer = sock.getpeername()
        except OSError:
            return  # gone already
        client = peer[0] if isinstance(peer, tuple) else "unix"
        self.peer, self.proxied = client, _trusted(client, _proxies.get())
        self.budget_scope = trio.CancelScope()  # before admitting: from then on another may evict this one
        admitted, evicted = budget.admit(self, client, trio.current_time(), proxied=self.proxied)
        if evicted is not None:
            if budget.evicted_waiting:
                evicted.part_with("made_room")
            evicted.budget_scope.cancel()  # trio's listener closes its stream
        if not admitted:
            if not hasattr(self.stream, "transport_stream") and budget.lingering < MAX_LINGERING:
                await self._refuse(budget, REFUSALS.get(budget.refusal or "client", REFUSAL))  # plain HTTP: say why
            return  # trio's listener closes the stream
        token = _connection.set(self)  # the requests' tasks inherit it: the API marks the connection trusted
        try:
            with self.budget_scope:
                await super().run()
        except Exception as exc:  # a defect met by one connection ends that connection, never the server
            log.error("[http] a connection from %s failed: %s", crewwire.shown(client, 60),
                      crewwire.shown(f"{exc.__class__.__name__}: {exc}", 300))
        finally:
            _connection.reset(token)
            budget.release(self)

    parting: bytes | None = None  # what to send before closing: this connection had sent no whole request

    def part_with(self, reason: str) -> None:
        """Answer `REFUSALS[reason]` before closing, where the connection can still carry it: plain HTTP, or TLS
        past its handshake (hypercorn's protocol is made then). A TLS handshake cut short just closes."""
        if hasattr(self, "protocol"):
            self.parting = REFUSALS[reason]

    async def _close(self) -> None:
        parting, self.parting = self.parting, None
        if parting is not None:
            budget = _budget.get()
            if budget is not None and budget.lingering < MAX_LINGERING:
                with trio.CancelScope(shield=True):  # it is closing because it was cancelled: the answer still goes
                    await self._refuse(budget, parting)
        await super()._close()

    def streams_changed(self, n: int) -> None:
        """HTTP/2 (collie.lead.door.hypercorn_fix): `n` streams are open on this connection."""
        budget = _budget.get()
        if budget is not None:
            budget.set_streams(self, n)

    async def _refuse(self, budget: ConnectionBudget, refusal: bytes = REFUSAL) -> None:
        """503, then a short lingering close: read what the client sent, or closing resets the connection
        and the client may never see the 503 (RFC 9112 §9.6). Bounded in time and in number."""
        budget.lingering += 1
        try:
            with trio.move_on_after(REFUSAL_LINGER_SECONDS):
                await self.stream.send_all(refusal)
                if not hasattr(self.stream, "transport_stream"):
                    await self.stream.send_eof()
                while await self.stream.receive_some(4096):
                    pass
        except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError):
            pass
        finally:
            budget.lingering -= 1

    async def protocol_send(self, event) -> None:
        if isinstance(event, Updated) and (budget := _budget.get()) is not None:
            budget.mark(self, idle=event.idle, now=trio.current_time())
        await super().protocol_send(event)


async def _sweep(budget: ConnectionBudget) -> None:
    """Under pressure, close connections idle for `PRESSURE_IDLE_SECONDS` (trio closes their sockets), and
    always untrusted requests past `ARRIVAL_SECONDS`. With neither it sleeps until an admission or an untrusted
    request wakes it (an idle lead does not wake for it)."""
    pressed = trio.Event()
    budget.on_pressure = pressed.set
    while True:
        if not budget.needs_sweep():
            await pressed.wait()
            pressed = trio.Event()
            budget.on_pressure = pressed.set
        await trio.sleep(SWEEP_SECONDS)
        for conn in budget.to_close(trio.current_time()):
            if conn in budget.waiting_since:
                conn.part_with("timeout")  # its first request did not arrive within ARRIVAL_SECONDS
            budget.mark(conn, idle=False, now=trio.current_time())  # picked once
            conn.budget_scope.cancel()


class BoundedSendConnection(TrioASGIHTTPConnection):
    """quart-trio's HTTP handling, with a bound on each write of a response that sets `send_stall_seconds`
    (the live channel): a write that does not finish in time ends that response only — its body's
    `finally` runs and, over HTTP/2, the stream is reset (`hypercorn_fix`, fixes 6 and 7) while the
    connection's other streams go on. Over HTTP/1.1 the connection's own bound (fix 5) ends it."""

    async def _send_response(self, send, response) -> None:
        bound = getattr(response, "send_stall_seconds", None)
        if bound is None:
            await super()._send_response(send, response)
            return
        with trio.CancelScope() as scope:
            async def bounded(message) -> None:
                scope.deadline = trio.current_time() + bound
                await send(message)
                scope.deadline = math.inf
            await super()._send_response(bounded, response)


def create_app(install=None) -> QuartTrio:
    """The lead's app; `install(app)` adds the API routes (the daemon passes them in)."""
    app = QuartTrio(__name__)  # not "collie": that is a namespace package, with no root path
    app.asgi_http_class = BoundedSendConnection
    app.config["MAX_CONTENT_LENGTH"] = 256 * 1024
    app.asgi_app = JarGuard(app.asgi_app)  # any browser's Cookie read, other headers bounded (issue 42.3)
    if install is not None:
        install(app)

    @app.get("/healthz")
    async def healthz():
        """Liveness only: no auth, and so no data — not even the version (issue 11.6)."""
        return {"ok": True}

    return app


async def serve_http(
    app: QuartTrio,
    binds: list[str],
    shutdown: trio.Event,
    *,
    certfile: str | None = None,
    keyfile: str | None = None,
    limits: Limits | None = None,
    trusted_proxies: list[str] | tuple = (),
    task_status=trio.TASK_STATUS_IGNORED,
) -> None:
    import ipaddress

    hypercorn_fix.install(BudgetedTCPServer)
    config = Config()
    config.bind = binds
    config.graceful_timeout = GRACEFUL_SECONDS
    config.backlog = BACKLOG
    config.keep_alive_timeout = KEEP_ALIVE_SECONDS
    # hypercorn's 1,000 requests a connection ends an HTTP/2 connection by a GOAWAY naming the request in
    # progress, which then goes unanswered (ERR_HTTP2_PROTOCOL_ERROR in Chromium, issue 42.10): no count
    # limit — a connection is bounded by the budget, its idle time and its streams (collie.lead.door.connections)
    config.keep_alive_max_requests = 2**62
    config.ssl_handshake_timeout = ARRIVAL_SECONDS  # hypercorn's 60 s; the budget's sweep bounds it too
    # a head holds a browser's whole cookie jar for the host; collie.lead.door.jar bounds the rest of it to HEAD_MAX
    config.h11_max_incomplete_size = HEAD_MAX + COOKIE_MAX
    config.h2_max_header_list_size = HEAD_MAX + COOKIE_MAX + 32 * 1024  # h2 counts 32 bytes a field
    config.websocket_max_message_size = crewwire.MAX_FRAME  # a bigger frame closes the link (1009), issue 9.6
    config.accesslog = None
    config.errorlog = None
    if certfile:
        config.certfile, config.keyfile = certfile, keyfile
        made = config.create_ssl_context

        def keep_context():
            """hypercorn's context, kept so that a certificate issued anew is served without a restart (issue 35)."""
            ctx = made()
            app.config["COLLIE_SSL_CONTEXT"] = ctx
            return ctx
        config.create_ssl_context = keep_context
    budget = ConnectionBudget(limits or Limits.for_descriptors(descriptor_limit()))
    app.config["COLLIE_CONNECTIONS"] = budget  # statistics() for benchmarks and tests
    token = _budget.set(budget)  # the server's connection tasks inherit this context
    proxies = _proxies.set(tuple(ipaddress.ip_network(p, strict=False) for p in trusted_proxies))
    try:
        async with trio.open_nursery() as nursery:
            bound = await nursery.start(partial(serve, app, config, shutdown_trigger=shutdown.wait))
            sweeper = trio.CancelScope()
            nursery.start_soon(_run_in, sweeper, _sweep, budget)
            task_status.started(bound)
            await shutdown.wait()
            sweeper.cancel()
    finally:
        _budget.reset(token)
        _proxies.reset(proxies)


async def _run_in(scope: trio.CancelScope, fn, *args) -> None:
    with scope:
        await fn(*args)
