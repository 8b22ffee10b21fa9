"""The bridge's HTTP client for one agent: the only place transport errors become reasons.

    AgentUnreachable(reason, detail)   any failure; `reason` is one of
        socket-not-private, no-socket, bad-socket-path   the private-path check (T1, T2) failed
        peer-not-you           the socket's listener runs as another user
        connection-refused     nothing listens (a stale socket, or the agent is down)
        timeout                no answer within the request's limit
        tls                    the certificate check failed (the cause chain is reported)
        too-large              the answer is over the body cap
        closed                 the agent closed the connection mid-answer
        protocol               the answer is not JSON, or an unexpected status
    └── AgentRefused(code, detail)     the agent answered with an error code of the wire (§1):
        unauthorized (401/403), bad_request, not_found, unsupported, no_list, conflict, version,
        internal (500). It was reached; for every code but `internal` it did nothing.

The socket path is checked before every request (cheap `lstat` calls), so a path that stops being
private is noticed before anything is sent. Every request has a timeout; bodies are capped.
"""

from __future__ import annotations

import json
import os
import socket
import ssl
import struct

import httpx

from crew import __version__
from crew.config import AgentConfig
from crew.security import check_socket_private

STATE_CAP = 8 * 1024 * 1024
SMALL_CAP = 256 * 1024
DEFAULT_TIMEOUT = 10.0
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


def _cause(exc: BaseException) -> BaseException:
    while exc.__cause__ is not None or exc.__context__ is not None:
        exc = exc.__cause__ or exc.__context__
    return exc


class AgentClient:
    def __init__(self, agent: AgentConfig, *, ssl_context: ssl.SSLContext | None = None) -> None:
        self.agent = agent
        headers = {"user-agent": f"collie/{__version__}", "accept": "application/json"}
        limits = httpx.Limits(max_connections=4, max_keepalive_connections=2, keepalive_expiry=30)
        if agent.socket:
            transport = httpx.AsyncHTTPTransport(uds=agent.socket, limits=limits, retries=0)
            self.http = httpx.AsyncClient(transport=transport, base_url="http://durable-agent", headers=headers,
                                          timeout=DEFAULT_TIMEOUT)
        else:
            headers["authorization"] = f"Bearer {agent.token}"
            verify = ssl_context or ssl.create_default_context()
            self.http = httpx.AsyncClient(base_url=agent.url.rstrip("/"), headers=headers, verify=verify,
                                          timeout=DEFAULT_TIMEOUT, limits=limits, trust_env=False)
        self.requests = 0
        self.bytes_in = 0

    async def aclose(self) -> None:
        await self.http.aclose()

    def _check_path(self) -> None:
        if self.agent.socket:
            problem = check_socket_private(self.agent.socket)
            if problem:
                raise AgentUnreachable(problem.code, problem.text)

    def _check_peer(self, response: httpx.Response) -> None:
        if not self.agent.socket or not hasattr(socket, "SO_PEERCRED"):
            return
        stream = response.extensions.get("network_stream")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is None:
            return
        _pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
        if uid != os.getuid():
            raise AgentUnreachable("peer-not-you", f"the process listening on {self.agent.socket} runs as uid {uid}")

    async def request(self, method: str, path: str, *, json_body: object | None = None,
                      headers: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
                      cap: int = SMALL_CAP) -> Answer:
        """One request; raises `AgentUnreachable` for anything but a parsed answer."""
        self._check_path()
        self.requests += 1
        content = json.dumps(json_body, separators=(",", ":")).encode() if json_body is not None else None
        hdrs = dict(headers or {})
        if content is not None:
            hdrs["content-type"] = "application/json; charset=utf-8"
        request = self.http.build_request(method, path, headers=hdrs, timeout=timeout)
        request.stream = _Body(content or b"")
        if content:
            request.headers["content-length"] = str(len(content))
        try:
            resp = await self.http.send(request, stream=True)
            try:
                self._check_peer(resp)
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
            parsed = json.loads(body) if body else None
        except (ValueError, UnicodeDecodeError):
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
