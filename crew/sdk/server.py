"""A small HTTP/1.1 server for the SDK: h11 over trio streams, JSON in and out.

It serves a Unix socket (reading the caller's pid and uid with SO_PEERCRED) or TCP, optionally
with TLS. Bodies are capped at `MAX_BODY`; each connection handles requests one after another
(keep-alive) and is closed after `IDLE_TIMEOUT` seconds of silence.
"""

from __future__ import annotations

import json
from http import HTTPStatus
import socket
import struct
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import h11
import trio

MAX_BODY = 1024 * 1024
IDLE_TIMEOUT = 60.0
READ_TIMEOUT = 10.0


@attrs.frozen
class Peer:
    pid: int
    uid: int


@attrs.frozen
class Request:
    method: str
    path: str  # percent-decoded segments joined by "/"
    segments: tuple[str, ...]
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    peer: Peer | None


@attrs.frozen
class Response:
    status: int
    body: dict | None = None
    headers: tuple[tuple[str, str], ...] = ()


Handler = Callable[[Request], Awaitable[Response]]


class Inflight:
    """Counts requests being handled, so a closing server can finish what it accepted."""

    def __init__(self) -> None:
        self.count = 0
        self.closing = False
        self._idle = trio.Event()
        self._idle.set()

    def __enter__(self) -> None:
        self.count += 1
        self._idle = trio.Event() if self.count == 1 else self._idle

    def __exit__(self, *exc) -> None:
        self.count -= 1
        if self.count == 0:
            self._idle.set()

    async def drain(self, timeout: float) -> None:
        self.closing = True
        with trio.move_on_after(timeout):
            await self._idle.wait()


def peer_of(stream: trio.abc.Stream) -> Peer | None:
    sock = getattr(stream, "socket", None)
    if sock is None or sock.family != socket.AF_UNIX or not hasattr(socket, "SO_PEERCRED"):
        return None
    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    return Peer(pid=pid, uid=uid)


def error(status: int, code: str, message: str) -> Response:
    return Response(status, {"error": code, "message": message})


async def handle_connection(stream: trio.abc.Stream, handler: Handler, inflight: Inflight | None = None) -> None:
    conn = h11.Connection(h11.SERVER, max_incomplete_event_size=64 * 1024)
    peer = peer_of(stream)
    try:
        while True:
            request = None
            body = bytearray()
            too_big = False
            timeout = IDLE_TIMEOUT
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    with trio.move_on_after(timeout) as scope:
                        data = await stream.receive_some(65536)
                    if scope.cancelled_caught:
                        return
                    conn.receive_data(data)
                    continue
                if isinstance(event, h11.Request):
                    request = event
                    timeout = READ_TIMEOUT
                elif isinstance(event, h11.Data):
                    if len(body) + len(event.data) > MAX_BODY:
                        too_big = True
                    else:
                        body += event.data
                elif isinstance(event, h11.EndOfMessage):
                    break
                elif isinstance(event, (h11.ConnectionClosed, h11.PAUSED)):
                    return
            assert request is not None
            with inflight if inflight is not None else _null():
                await _respond(conn, stream, request, bytes(body), too_big, handler, peer)
            if inflight is not None and inflight.closing:
                return
            if conn.our_state is h11.MUST_CLOSE or conn.their_state is h11.MUST_CLOSE:
                return
            try:
                conn.start_next_cycle()
            except h11.LocalProtocolError:
                return
    except (h11.RemoteProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.move_on_after(1, shield=True):
            await stream.aclose()


class _null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc) -> None:
        return None


async def _respond(conn: h11.Connection, stream: trio.abc.Stream, request: h11.Request, body: bytes,
                   too_big: bool, handler: Handler, peer: Peer | None) -> None:
    if too_big:
        response = error(413, "bad_request", f"the body is over {MAX_BODY} bytes")
    else:
        parts = urlsplit(request.target.decode("ascii", "replace"))
        req = Request(
            method=request.method.decode(), path=parts.path,
            segments=tuple(unquote(s) for s in parts.path.split("/") if s), query=dict(parse_qsl(parts.query)),
            headers={k.decode().lower(): v.decode("latin-1") for k, v in request.headers}, body=body, peer=peer,
        )
        try:
            response = await handler(req)
        except Exception as exc:  # an agent bug must not kill the server
            response = error(500, "internal", f"{type(exc).__name__}: {exc}")
    payload = b"" if response.body is None else json.dumps(response.body, separators=(",", ":")).encode()
    headers = [(b"content-length", str(len(payload)).encode())]
    if response.body is not None:
        headers.append((b"content-type", b"application/json; charset=utf-8"))
    headers += [(k.encode(), v.encode()) for k, v in response.headers]
    phrase = HTTPStatus(response.status).phrase.encode() if response.status in HTTPStatus._value2member_map_ else b""
    # head, body and end in one write: the client wakes once per answer, not once per part
    data = conn.send(h11.Response(status_code=response.status, headers=headers, reason=phrase)) or b""
    if payload:
        data += conn.send(h11.Data(data=payload)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)
