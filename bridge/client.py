"""The bridge's HTTP client for one agent: the only place transport errors become reasons.

    AgentUnreachable(reason, detail)   any failure; `reason` is one of
        socket-not-private, no-socket, bad-socket-path   the private-path check (T1, T2) failed
        peer-not-you           the socket's listener runs as another user (checked on connect)
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
on it (T3); a connection that fails the check is closed and never pooled.

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
import socket
import ssl
import struct
from contextlib import asynccontextmanager
from urllib.parse import quote

import httpcore
import httpx
import trio

from crew import __version__
from crew.config import AgentConfig
from crew.security import check_socket_private

BIG_BODY = 256 * 1024  # bytes; a JSON answer over this is decoded off the event loop
STATE_CAP = 8 * 1024 * 1024
SMALL_CAP = 256 * 1024
DEFAULT_TIMEOUT = 10.0
MAX_CONNECTIONS = 6
THROUGH_LANES = 2  # of MAX_CONNECTIONS: the rest stay free for the poller (state, items, hello) and writes
AGENT_CODES = ("unauthorized", "bad_request", "not_found", "unsupported", "no_list", "conflict", "version", "internal")
MESSAGE_MAX = 500


class _Body(httpx.AsyncByteStream):
    """A request body that is a real async iterator, not an async generator.

    httpx's own `ByteStream.__aiter__` is an async generator; when the peer breaks the connection
    before reading the request, trio reports it garbage-collected unexhausted (httpx issue #3686,
    fix not released). An iterator object has nothing to finalize.
    """

    def __init__(self, data: bytes) -> None:
        self._data: bytes | None = data

    def __aiter__(self) -> _Body:
        return self

    async def __anext__(self) -> bytes:
        if self._data is None:
            raise StopAsyncIteration
        data, self._data = self._data, None
        return data

    async def aclose(self) -> None:
        self._data = None


class AgentUnreachable(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason, self.detail = reason, detail


class AgentRefused(AgentUnreachable):
    """The agent answered with a wire error code (`reason`); `detail` is its message (or ours)."""


class Answer:
    def __init__(self, status: int, headers: httpx.Headers, body: object | None) -> None:
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


class _PeerCheckedBackend(httpcore.AsyncNetworkBackend):
    """httpcore's trio backend, with the peer check made the moment a socket connection opens —
    before httpcore writes a byte of the request on it."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._inner = httpcore.TrioBackend()

    async def connect_unix_socket(self, path, timeout=None, socket_options=None):
        stream = await self._inner.connect_unix_socket(path, timeout=timeout, socket_options=socket_options)
        try:
            check_peer(self._path, stream.get_extra_info("socket"))
        except BaseException:
            with trio.CancelScope(shield=True):
                await stream.aclose()
            raise
        return stream

    async def connect_tcp(self, host, port, timeout=None, local_address=None, socket_options=None):
        return await self._inner.connect_tcp(host, port, timeout=timeout, local_address=local_address,
                                             socket_options=socket_options)

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _SocketTransport(httpx.AsyncHTTPTransport):
    """httpx's transport over a Unix socket, its pool using `_PeerCheckedBackend`. httpx takes no
    network backend, so the pool it made is replaced by the same pool with ours (httpx 0.28)."""

    def __init__(self, path: str, limits: httpx.Limits) -> None:
        # plain HTTP over a private socket: no certificate store to load (it cost 40-120 ms on the loop per agent)
        super().__init__(uds=path, limits=limits, retries=0, verify=False)
        self._pool = httpcore.AsyncConnectionPool(
            max_connections=limits.max_connections, max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry, uds=path, retries=0,
            network_backend=_PeerCheckedBackend(path))


def _cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return exc


@asynccontextmanager
async def _no_lane():
    yield


class AgentClient:
    """Requests go straight to httpx's transport (its connection pool), not through `httpx.AsyncClient`:
    the client's layers (URL merging, cookies, auth, redirects, event hooks) are nothing the wire uses
    and cost most of the CPU of a request (issue 15.1: 0.78 ms a state read, against 0.1 ms for the same
    request written by hand)."""

    def __init__(self, agent: AgentConfig, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.agent = agent
        limits = httpx.Limits(max_connections=MAX_CONNECTIONS, max_keepalive_connections=2, keepalive_expiry=30)
        self.base = "http://durable-agent" if agent.socket else agent.url.rstrip("/")
        headers = [(b"host", httpx.URL(self.base).netloc), (b"user-agent", f"collie/{__version__}".encode()),
                   (b"accept", b"application/json")]
        if agent.socket:
            self.transport: httpx.AsyncBaseTransport = _SocketTransport(agent.socket, limits)
        else:
            headers.append((b"authorization", f"Bearer {agent.token}".encode()))
            verify = ssl_context or ssl.create_default_context()
            self.transport = httpx.AsyncHTTPTransport(verify=verify, limits=limits, retries=0, trust_env=False)
        self.headers = headers
        self.through = trio.Semaphore(THROUGH_LANES)
        self.requests = 0
        self.bytes_in = 0

    async def aclose(self) -> None:
        await self.transport.aclose()

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
                return await self._exchange(method, path, json_body, headers, timeout, cap)
        raise AgentUnreachable("timeout", f"no complete answer to {method} {path} within {timeout:g} s")

    async def _exchange(self, method: str, path: str, json_body: object | None, headers: dict[str, str] | None,
                        timeout: float, cap: int) -> Answer:
        self.requests += 1
        content = json.dumps(json_body, separators=(",", ":")).encode() if json_body is not None else None
        hdrs = list(self.headers)
        for k, v in (headers or {}).items():
            hdrs.append((k.encode("ascii"), v.encode("ascii")))
        if content is not None:
            hdrs.append((b"content-type", b"application/json; charset=utf-8"))
        if content or method in ("POST", "PUT", "PATCH"):
            hdrs.append((b"content-length", str(len(content or b"")).encode()))
        request = httpx.Request(method, self.base + path, headers=hdrs, stream=_Body(content or b""),
                                extensions={"timeout": {"connect": timeout, "read": timeout, "write": timeout,
                                                        "pool": timeout}})
        try:
            resp = await self.transport.handle_async_request(request)
            try:
                declared = resp.headers.get("content-length")
                if declared and declared.isdigit() and int(declared) > cap:
                    raise AgentUnreachable("too-large", f"the answer to {path} is {declared} bytes; the limit is {cap}")
                body = bytearray()
                async for chunk in resp.aiter_raw():
                    body += chunk
                    if len(body) > cap:
                        raise AgentUnreachable("too-large", f"the answer to {path} is over {cap} bytes")
            finally:
                await resp.aclose()
        except httpx.TimeoutException:
            raise AgentUnreachable("timeout", f"no answer to {method} {path} within {timeout:g} s") from None
        except httpx.ConnectError as exc:
            root = _cause(exc)
            if isinstance(root, ssl.SSLError):
                raise AgentUnreachable("tls", f"TLS failed: {root}") from None
            if isinstance(root, ConnectionRefusedError) or "refused" in str(exc).lower():
                raise AgentUnreachable("connection-refused", "connection refused: nothing listens there (a stale "
                                                             "socket, or the agent is down)") from None
            if isinstance(root, FileNotFoundError):
                raise AgentUnreachable("no-socket", f"{self.agent.socket} does not exist: start the agent") from None
            raise AgentUnreachable("connection-refused", f"cannot connect: {root or exc}") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise AgentUnreachable("closed", f"the agent closed the connection ({type(_cause(exc)).__name__})") from None
        except httpx.HTTPError as exc:
            raise AgentUnreachable("protocol", f"{type(exc).__name__}: {exc}") from None
        self.bytes_in += len(body)
        status = resp.status_code
        if status == 304:
            return Answer(status, resp.headers, None)
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
        return Answer(status, resp.headers, parsed)
