"""The bridge's HTTP client for one agent: the only place transport errors become reasons.

    AgentUnreachable(reason, detail)   any failure; `reason` is one of
        socket-not-private, no-socket, bad-socket-path   the private-path check (T1, T2) failed
        peer-not-you           the socket's (or loopback port's) listener runs as another user (checked on connect)
        connection-refused     nothing listens (a stale socket, or the agent is down)
        timeout                no complete answer within the request's deadline
        tls                    the certificate check failed (the cause chain is reported)
        too-large              the answer is over the body cap
        closed                 the agent closed the connection mid-answer
        protocol               the answer is not JSON, or an unexpected status
    └── AgentRefused(code, detail)     the agent answered with an error code of the wire (§1):
        unauthorized (401/403), bad_request, not_found, unsupported, no_list, conflict, version,
        internal (500). It was reached; for every code but `internal` it did nothing.

The socket path is checked before every request (cheap `lstat` calls), so a path that stops being
private is noticed before anything is sent. On a socket, the uid of the listening process
(SO_PEERCRED) is checked as soon as a connection is made, before a byte of any request is written
on it (T3); so is the owner of a loopback TCP port's listener (`collie.crew.security.check_loopback_peer`,
issue 25.2). A connection that fails the check is closed and never pooled.

`timeout` is a total deadline for the whole exchange: waiting for a connection, connecting,
writing, and reading the whole body. An agent that drips its answer a byte at a time is cut off
there and its connection closed, not kept for the next request. The phone's read-throughs (closed
lists, closed conversations' items: `through=True`) take at most `THROUGH_LANES` of the pool's
`MAX_CONNECTIONS`, so however many the phone starts, the poll and the writes keep connections.
Bodies are capped (`cap`).
"""

from __future__ import annotations

import json
import os
import select
import socket
import ssl
import struct
from contextlib import asynccontextmanager
from urllib.parse import quote, urlsplit

import h11
import trio

from collie.crew import __version__
from collie.crew.config import AgentConfig
from collie.crew.security import Problem, check_loopback_peer, check_socket_private

BIG_BODY = 256 * 1024  # bytes; a JSON answer over this is decoded off the event loop
STATE_CAP = 8 * 1024 * 1024
SMALL_CAP = 256 * 1024
DEFAULT_TIMEOUT = 10.0
MAX_CONNECTIONS = 6
THROUGH_LANES = 2  # of MAX_CONNECTIONS: the rest stay free for the poller (state, items, hello) and writes
AGENT_CODES = ("unauthorized", "bad_request", "not_found", "unsupported", "no_list", "conflict", "version", "internal")
MESSAGE_MAX = 500
KEEP_IDLE = 2  # kept-alive connections kept idle
IDLE_EXPIRY = 30.0  # seconds an idle connection is kept
HEAD_MAX = 64 * 1024  # bytes: an answer's status line and headers
RECEIVE_SIZE = 64 * 1024


class AgentUnreachable(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class AgentRefused(AgentUnreachable):
    """The agent answered with a wire error code (`reason`); `detail` is its message (or ours)."""


class Answer:
    def __init__(self, status: int, headers: Headers, body: object | None) -> None:
        self.status, self.headers, self.body = status, headers, body


def path_id(value: str) -> str:
    """An id as one path segment (wire §1): every reserved byte percent-encoded, and a segment made
    only of dots (`.`, `..`) encoded too, so no URL normaliser can take it for a step."""
    quoted = quote(value, safe="")
    return quoted.replace(".", "%2E") if set(value) <= {"."} else quoted


def peer_uid(sock: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket (SO_PEERCRED), where the platform tells."""
    if not hasattr(socket, "SO_PEERCRED") or sock.family != socket.AF_UNIX:
        return None
    _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return uid


def check_peer(path: str, sock: socket.socket) -> None:
    """T3, wire §1: the process listening on the agent's socket must run as this user."""
    uid = peer_uid(sock)
    if uid is not None and uid != os.getuid():
        raise AgentUnreachable("peer-not-you", f"the process listening on {path} runs as uid {uid}")


def _cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return exc


@asynccontextmanager
async def _no_lane():
    yield


class Headers:
    """An answer's header fields (names lower-case, as h11 gives them); `get` by any case."""

    __slots__ = ("_fields",)

    def __init__(self, fields: list[tuple[bytes, bytes]]) -> None:
        self._fields = fields

    def get(self, name: str, default: str | None = None) -> str | None:
        key = name.lower().encode("latin-1")
        for k, v in self._fields:
            if k == key:
                return v.decode("latin-1")
        return default


def _readable(sock: trio.socket.SocketType) -> bool:
    """True when an idle kept-alive connection has something to read: the agent closed it (or sent
    bytes nobody asked for). Either way it must not carry the next request."""
    poller = select.poll()
    poller.register(sock.fileno(), select.POLLIN | select.POLLPRI | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(0))


class _Conn:
    __slots__ = ("stream", "sock", "h11", "idle_since")

    def __init__(self, stream: trio.abc.Stream, sock: trio.socket.SocketType) -> None:
        self.stream, self.sock = stream, sock
        self.h11 = h11.Connection(h11.CLIENT, max_incomplete_event_size=HEAD_MAX)
        self.idle_since = 0.0


class AgentClient:
    """HTTP/1.1 to one agent, written with h11 over trio streams, with a small pool of kept-alive
    connections (at most `MAX_CONNECTIONS` at once, `KEEP_IDLE` kept idle for `IDLE_EXPIRY` s).

    Not httpx: its transport and pool (httpcore, which parses with the same h11) cost 0.63-0.66 ms of
    CPU per state read here against 0.27 ms for this client, and a write makes 4-5 requests to the
    agent (the send, the reads after it, the long-poll re-armed after each change) — the largest part
    of a member's CPU per write (issue 15.1; bench/agent_client.py prints both beside the floor).

    Where each failure happens decides its reason, and the writer's receipt relies on it: a failure
    while connecting (`no-socket`, `connection-refused`, `peer-not-you`, `tls`) means not a byte of
    the request was written; anything after (`closed`, `protocol`, `timeout`, `too-large`) may have
    reached the agent. A kept-alive connection is reused only if nothing is waiting to be read on it
    (an agent that closed it is noticed before the request is written)."""

    def __init__(self, agent: AgentConfig, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.agent = agent
        self.prefix = ""
        if agent.socket:
            host = b"durable-agent"
            self.tls: ssl.SSLContext | None = None
        else:
            parts = urlsplit(agent.url)
            self.https = parts.scheme.lower() == "https"
            self.host = parts.hostname or ""
            self.port = parts.port or (443 if self.https else 80)
            self.prefix = parts.path.rstrip("/")
            try:
                host = parts.netloc.encode("ascii")
            except UnicodeEncodeError:
                host = parts.netloc.encode("idna")
            self.tls = (ssl_context or ssl.create_default_context()) if self.https else None
        headers = [(b"host", host), (b"user-agent", f"collie/{__version__}".encode()), (b"accept", b"application/json")]
        if not agent.socket:
            headers.append((b"authorization", f"Bearer {agent.token}".encode()))
        self.headers = headers
        self.slots = trio.Semaphore(MAX_CONNECTIONS)
        self.idle: list[_Conn] = []
        self.closed = False
        self.through = trio.Semaphore(THROUGH_LANES)
        self.requests = 0
        self.bytes_in = 0

    async def aclose(self) -> None:
        self.closed = True
        idle, self.idle = self.idle, []
        for conn in idle:
            conn.sock.close()
        await trio.lowlevel.checkpoint()

    def _check_path(self) -> None:
        if self.agent.socket:
            problem = check_socket_private(self.agent.socket)
            if problem:
                raise AgentUnreachable(problem.code, problem.text)

    async def request(self, method: str, path: str, *, json_body: object | None = None,
                      headers: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
                      cap: int = SMALL_CAP, through: bool = False) -> Answer:
        """One request, all of it within `timeout` seconds; raises `AgentUnreachable` (or its
        `AgentRefused`) for anything but a parsed 2xx/304 answer. `through`: a read the phone asked
        for (it waits for one of the `THROUGH_LANES`, within the same deadline)."""
        self._check_path()
        with trio.move_on_after(timeout):
            async with self.through if through else _no_lane():
                return await self._exchange(method, path, json_body, headers, cap)
        raise AgentUnreachable("timeout", f"no complete answer to {method} {path} within {timeout:g} s")

    # -- connections -----------------------------------------------------------------------------

    def _take_idle(self) -> _Conn | None:
        now = trio.current_time()
        while self.idle:
            conn = self.idle.pop()
            if now - conn.idle_since <= IDLE_EXPIRY and not _readable(conn.sock):
                return conn
            conn.sock.close()
        return None

    def _park(self, conn: _Conn) -> None:
        if self.closed or len(self.idle) >= KEEP_IDLE:
            conn.sock.close()
            return
        conn.idle_since = trio.current_time()
        self.idle.append(conn)

    async def _connect(self) -> _Conn:
        """A new connection, checked (T3 peer, TLS) before a byte of any request is written on it."""
        try:
            if self.agent.socket:
                stream = await trio.open_unix_socket(self.agent.socket)
                try:
                    check_peer(self.agent.socket, stream.socket)
                except BaseException:
                    stream.socket.close()
                    raise
                return _Conn(stream, stream.socket)
            tcp = await trio.open_tcp_stream(self.host, self.port)
        except FileNotFoundError:
            raise AgentUnreachable("no-socket", f"{self.agent.socket} does not exist: start the agent") from None
        except ConnectionRefusedError:
            raise AgentUnreachable("connection-refused", "connection refused: nothing listens there (a stale "
                                                         "socket, or the agent is down)") from None
        except OSError as exc:
            if "refused" in str(exc).lower():
                raise AgentUnreachable("connection-refused", "connection refused: nothing listens there (the "
                                                             "agent is down)") from None
            raise AgentUnreachable("connection-refused", f"cannot connect: {exc}") from None
        try:  # loopback TCP: the listener must be this user's, as a socket's (T3, issue 25.2)
            problem = check_loopback_peer(tcp.socket.getpeername(), tcp.socket.getsockname(),
                                          f"{self.host}:{self.port}")
        except OSError:
            problem = Problem("connection-refused", "the connection closed at once")
        if problem is not None:
            tcp.socket.close()
            raise AgentUnreachable(problem.code, problem.text)
        if self.tls is None:
            return _Conn(tcp, tcp.socket)
        stream = trio.SSLStream(tcp, self.tls, server_hostname=self.host, https_compatible=True)
        try:
            await stream.do_handshake()
        except trio.BrokenResourceError as exc:
            tcp.socket.close()
            root = _cause(exc)
            raise AgentUnreachable("tls", f"TLS failed: {root}") from None
        except BaseException:
            tcp.socket.close()
            raise
        return _Conn(stream, tcp.socket)

    # -- one exchange ----------------------------------------------------------------------------

    async def _exchange(self, method: str, path: str, json_body: object | None, headers: dict[str, str] | None,
                        cap: int) -> Answer:
        self.requests += 1
        content = json.dumps(json_body, separators=(",", ":")).encode() if json_body is not None else None
        hdrs = list(self.headers)
        for k, v in (headers or {}).items():
            hdrs.append((k.encode("ascii"), v.encode("ascii")))
        if content is not None:
            hdrs.append((b"content-type", b"application/json; charset=utf-8"))
        if content or method in ("POST", "PUT", "PATCH"):
            hdrs.append((b"content-length", str(len(content or b"")).encode()))
        async with self.slots:
            conn = self._take_idle() or await self._connect()
            reusable = False
            try:
                status, fields, body, reusable = await self._round_trip(conn, method, self.prefix + path, hdrs,
                                                                        content, cap)
            finally:
                if reusable:
                    self._park(conn)
                else:
                    conn.sock.close()
        self.bytes_in += len(body)
        if status == 304:
            return Answer(status, fields, None)
        try:
            if len(body) > BIG_BODY:  # a large state: decoded in a worker thread, never on the event loop (9.6)
                parsed = await trio.to_thread.run_sync(json.loads, body)
            else:
                parsed = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError, RecursionError):
            if status not in (401, 403):
                raise AgentUnreachable("protocol", f"the answer to {path} is not JSON (status {status})") from None
            parsed = None
        if status in (401, 403):
            raise AgentRefused("unauthorized", "the agent refused the token (give the agent the new token, "
                                               "re-run `collie durable attach`, `collie restart`)"
                               if not self.agent.socket else "the agent refused this caller")
        if status >= 400:
            code = parsed.get("error") if isinstance(parsed, dict) and isinstance(parsed.get("error"), str) else None
            message = parsed.get("message") if isinstance(parsed, dict) and isinstance(parsed.get("message"), str) else None
            message = message[:MESSAGE_MAX] if message else None
            if code in AGENT_CODES:
                raise AgentRefused(code, message or code)
            raise AgentUnreachable("protocol", f"{method} {path} answered {status}" + (f": {message}" if message else ""))
        if status != 200:
            raise AgentUnreachable("protocol", f"{method} {path} answered {status}")
        return Answer(status, fields, parsed)

    async def _round_trip(self, conn: _Conn, method: str, target: str, hdrs: list[tuple[bytes, bytes]],
                          content: bytes | None, cap: int) -> tuple[int, Headers, bytearray, bool]:
        """Write the request (one send) and read the whole answer; the connection is reusable only
        when both sides ended their message cleanly and nobody asked to close it."""
        h = conn.h11
        eof = False
        try:
            try:
                data = h.send(h11.Request(method=method, target=target.encode("ascii"), headers=hdrs))
                if content:
                    data += h.send(h11.Data(data=content))
                data += h.send(h11.EndOfMessage())
            except h11.LocalProtocolError as exc:
                raise AgentUnreachable("protocol", f"cannot write {method} {target}: {exc}") from None
            try:
                await conn.stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass  # an agent may answer (and close) before it read the request: read what it said
            status, fields, body = 0, Headers([]), bytearray()
            while True:
                event = h.next_event()
                if event is h11.NEED_DATA:
                    chunk = await conn.stream.receive_some(RECEIVE_SIZE)
                    eof = not chunk
                    h.receive_data(chunk)
                elif isinstance(event, h11.Response):
                    status, fields = event.status_code, Headers(list(event.headers))
                    declared = fields.get("content-length")
                    if declared and declared.isdigit() and int(declared) > cap:
                        raise AgentUnreachable("too-large", f"the answer to {target} is {declared} bytes; "
                                                            f"the limit is {cap}")
                elif isinstance(event, h11.Data):
                    body += event.data
                    if len(body) > cap:
                        raise AgentUnreachable("too-large", f"the answer to {target} is over {cap} bytes")
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, h11.ConnectionClosed):
                    raise AgentUnreachable("closed", "the agent closed the connection before it answered")
                # h11.InformationalResponse (1xx): the answer follows
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            raise AgentUnreachable("closed", f"the agent closed the connection ({type(_cause(exc)).__name__})") from None
        except h11.RemoteProtocolError as exc:
            if eof:  # the agent closed the connection before its answer was whole
                raise AgentUnreachable("closed", "the agent closed the connection mid-answer") from None
            raise AgentUnreachable("protocol", f"the answer to {method} {target} is not HTTP/1.1: {exc}") from None
        reusable = not eof and h.our_state is h11.DONE and h.their_state is h11.DONE
        if reusable:
            h.start_next_cycle()
        return status, fields, body, reusable
