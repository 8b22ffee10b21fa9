"""The lead's HTTP server keeps HTTP/1.1 keep-alive honest on hypercorn 0.18 + quart-trio 0.12.

- Shutdown does not wait for idle keep-alive connections (the idle timer is re-armed).
- A request answered before its body was read (an early 401 from the door, a 404) leaves the
  connection able to serve the next request at once (issue 8.10): the rest of the body is read and
  dropped, or — for a body too large to drain — the answer says `Connection: close` and the
  connection closes after it. Never a connection that neither answers nor closes.

`collie.lead.door.hypercorn_fix` holds the fixes; each test below has a twin proving it fails without them.
Virtual time (autojump_clock) makes the waits exact and a stall fail at once.
"""

from __future__ import annotations

import pytest
import trio
from hypercorn.events import RawData
from quart import jsonify, request

from collie.lead.door import hypercorn_fix
from collie.lead.door.http import GRACEFUL_SECONDS, create_app, serve_http

STALL = 10.0  # virtual seconds: far more than any step on loopback takes


@pytest.fixture
def without_fix(monkeypatch):
    """hypercorn's own protocol and TCP server, as before the fix."""
    from hypercorn import protocol as hypercorn_protocol
    from hypercorn.protocol.h11 import H11Protocol
    from hypercorn.trio import run as hypercorn_run
    from hypercorn.trio.tcp_server import TCPServer

    monkeypatch.setattr(hypercorn_fix, "install", lambda *a, **k: None)
    monkeypatch.setattr(hypercorn_protocol, "H11Protocol", H11Protocol)
    monkeypatch.setattr(hypercorn_run, "TCPServer", TCPServer)


def early_answers(app) -> None:
    """A door that answers before reading the body, like the API's 401 and 404."""

    @app.before_request
    async def door():
        if request.path.startswith("/api/"):
            return jsonify({"error": "unauthorized"}), 401
        return None


class Client:
    """A raw HTTP/1.1 client on one connection: it sees exactly what the server sends."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream, self.buf = stream, b""

    async def _fill(self) -> bool:
        data = await self.stream.receive_some(65536)
        self.buf += data
        return bool(data)

    async def response(self) -> tuple[int, dict[str, str], bytes]:
        """One whole response; raises EOFError when the server closed instead."""
        with trio.fail_after(STALL):
            while b"\r\n\r\n" not in self.buf:
                if not await self._fill():
                    raise EOFError(self.buf)
            head, self.buf = self.buf.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            headers = {k.strip().lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
            length = int(headers.get("content-length", "0"))
            while len(self.buf) < length:
                if not await self._fill():
                    raise EOFError(self.buf)
            body, self.buf = self.buf[:length], self.buf[length:]
        return int(lines[0].split()[1]), headers, body

    async def closed(self) -> bool:
        with trio.fail_after(STALL):
            while await self._fill():
                pass
        return True


async def _serving(nursery, shutdown) -> int:
    binds = await nursery.start(serve_http, create_app(early_answers), ["127.0.0.1:0"], shutdown)
    return int(binds[0].rsplit(":", 1)[1])


def _post_head(path: str, length: int, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: x", "Content-Type: application/json", f"Content-Length: {length}", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _early_answer_pairs(n: int) -> int:
    """`n` pairs on one connection: a POST answered 401 (before or after its body came), then a GET. Returns how
    many GETs were answered before the connection stalled or closed."""
    shutdown = trio.Event()
    answered = 0
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery, shutdown)
        client = Client(await trio.open_tcp_stream("127.0.0.1", port))
        for i in range(n):
            try:
                await _pair(client, i)
            except (trio.TooSlowError, EOFError):
                break
            answered += 1
        await client.stream.aclose()
        shutdown.set()
    return answered


async def _pair(client: Client, i: int) -> None:
    body, get = b'{"text": "%s"}' % (b"x" * (i % 50)), b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    if i % 2:  # head first, the answer comes, then the body: the server surely answers early
        await client.stream.send_all(_post_head("/api/send", len(body)))
        status, headers, _ = await client.response()
        await trio.sleep(0.01)  # the server finishes that answer before the body comes
        await client.stream.send_all(body + get)
    else:  # all at once: the server may or may not have read the body when it answers
        await client.stream.send_all(_post_head("/api/send", len(body)) + body + get)
        status, headers, _ = await client.response()
    assert status == 401 and "close" not in headers.get("connection", "")
    status, headers, _ = await client.response()
    assert status == 200 and "close" not in headers.get("connection", "")


async def test_early_answers_never_stall_the_next_request(autojump_clock):
    """Issue 8.10: 400 request pairs on one kept-alive connection, each POST answered 401 before its body was
    read and each followed by a GET — every GET is answered on the same connection, none stalls."""
    assert await _early_answer_pairs(400) == 400


async def test_without_the_fix_the_next_request_stalls(autojump_clock, without_fix):
    """Proves the test above fails without the fix: a GET after an early 401 stalls (or finds the connection
    closed although the 401 promised to keep it)."""
    assert await _early_answer_pairs(100) < 100


async def test_a_body_too_large_to_drain_closes_the_connection(autojump_clock):
    """RFC 9112 §9.6: a body over the drain limit (or of unknown length) is not read; the early answer says
    `Connection: close` and the server closes, so the client never waits on a connection that will not answer."""
    big = hypercorn_fix.DRAIN_MAX_BYTES + 1
    for head in (_post_head("/api/send", big), _post_head("/api/send", 0).replace(
            b"Content-Length: 0", b"Transfer-Encoding: chunked")):
        shutdown = trio.Event()
        async with trio.open_nursery() as nursery:
            port = await _serving(nursery, shutdown)
            client = Client(await trio.open_tcp_stream("127.0.0.1", port))
            await client.stream.send_all(head)
            status, headers, _ = await client.response()
            assert status == 401 and headers["connection"] == "close"
            assert await client.closed()
            await client.stream.aclose()
            shutdown.set()


async def _shutdown_time_with_idle_connection() -> float:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        port = await _serving(nursery, shutdown)
        client = Client(await trio.open_tcp_stream("127.0.0.1", port))
        await client.stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await client.response())[0] == 200
        start = trio.current_time()
        shutdown.set()
    await client.stream.aclose()
    return trio.current_time() - start


async def test_shutdown_does_not_wait_for_idle_keepalive(autojump_clock):
    assert await _shutdown_time_with_idle_connection() < 1.0


async def test_without_the_fix_shutdown_waits_the_graceful_timeout(autojump_clock, without_fix):
    """Proves the test above would fail without the fix."""
    assert await _shutdown_time_with_idle_connection() >= GRACEFUL_SECONDS


async def test_each_answer_goes_out_in_one_write_head_and_body_together(autojump_clock, monkeypatch):
    """Fix 4 (issue 15.1, 16): a response whose head declares its length goes out in one write with
    its body — a GET, an early 401, a 404, a HEAD — not a head the client wakes for and then a body.
    A streamed answer (no length) still sends its head at once and each chunk as it comes."""
    writes: list[bytes] = []
    real = hypercorn_fix.FixedTCPServer.protocol_send

    async def recording(self, event):
        if isinstance(event, RawData) and event.data:  # (an empty one writes nothing)
            writes.append(bytes(event.data))
        await real(self, event)

    monkeypatch.setattr(hypercorn_fix.FixedTCPServer, "protocol_send", recording)
    release = trio.Event()

    def install(app) -> None:
        early_answers(app)

        @app.get("/stream")
        async def stream():
            async def chunks():
                yield b"first;"
                await release.wait()
                yield b"second"
            return chunks(), 200, {"content-type": "text/plain"}

    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, create_app(install), ["127.0.0.1:0"], shutdown)
        client = Client(await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1])))
        for head, status, body in ((b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, b'{"ok":true}\n'),
                                   (_post_head("/api/send", 2) + b"{}", 401, b'{"error":"unauthorized"}\n'),
                                   (b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n", 404, None),
                                   (b"HEAD /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 200, b"")):
            writes.clear()
            await client.stream.send_all(head)
            if head.startswith(b"HEAD"):
                with trio.fail_after(STALL):
                    while b"\r\n\r\n" not in client.buf:
                        await client._fill()
                got_status = int(client.buf.split()[1])
                client.buf = b""
            else:
                got_status, _, got_body = await client.response()
                if body is not None:
                    assert got_body == body
            assert got_status == status
            await trio.sleep(0.1)
            assert len(writes) == 1, (head, writes)  # head and body in the same write
            assert writes[0].startswith(b"HTTP/1.1 %d" % status)
        writes.clear()
        await client.stream.send_all(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
        with trio.fail_after(STALL):
            while b"first;" not in client.buf:
                await client._fill()
        assert writes[0].startswith(b"HTTP/1.1 200")  # the head did not wait for the stream to end
        release.set()
        with trio.fail_after(STALL):
            while b"second" not in client.buf:
                await client._fill()
        await client.stream.aclose()
        shutdown.set()


@pytest.mark.parametrize("versions, named", [
    ({"hypercorn": "0.19.0", "quart-trio": "0.12.0"}, "not hypercorn 0.19.0 (written for 0.18.x)"),
    ({"hypercorn": "0.18.0", "quart-trio": "0.13.1"}, "not quart-trio 0.13.1 (written for 0.12.x)"),
    ({"hypercorn": "1.0", "quart-trio": None}, "not hypercorn 1.0 (written for 0.18.x), quart-trio not installed (written for 0.12.x)"),
])
def test_the_fixes_refuse_a_hypercorn_or_quart_trio_they_were_not_written_for(monkeypatch, versions, named):
    """Issue 41: the fixes replace private internals of hypercorn 0.18 and quart-trio 0.12 (pyproject.toml pins
    both series); on any other release `install()` patches nothing and says which package is of which
    version, and what to install."""
    from importlib.metadata import PackageNotFoundError

    from hypercorn import protocol as hypercorn_protocol

    def installed(name):
        if versions[name] is None:
            raise PackageNotFoundError(name)
        return versions[name]
    before, real = hypercorn_protocol.H11Protocol, hypercorn_fix.check_versions
    real()  # the versions installed here are the ones it was written for
    monkeypatch.setattr(hypercorn_fix, "check_versions", lambda: real(installed))
    with pytest.raises(hypercorn_fix.UnknownVersion) as refused:
        hypercorn_fix.install()
    assert named in str(refused.value) and "pip install -c constraints.txt" in str(refused.value)
    assert hypercorn_protocol.H11Protocol is before  # nothing patched


class _SlowWire:
    """A connection's stream whose first write takes until `release` is set; it keeps what it is sent."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.release = trio.Event()

    async def send_all(self, data) -> None:
        if not self.sent:
            self.sent.append(b"")
            await self.release.wait()
            self.sent[0] = bytes(data)
        else:
            self.sent.append(bytes(data))


async def _writes_when_a_waiting_writer_is_cancelled(server_class) -> list[bytes]:
    """Two writes on one connection: the first holds the socket; the second's task (a request whose client
    reset its stream) is cancelled while it waits. What reaches the wire, in order."""
    server = server_class(None, None, None, None, _SlowWire())

    class Protocol:
        async def handle(self, event) -> None:
            pass

    server.protocol = Protocol()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.protocol_send, RawData(data=b"first"))
        await trio.sleep(1)
        waiting = trio.CancelScope()
        nursery.start_soon(_cancelled_send, server, waiting)
        await trio.sleep(1)
        waiting.cancel()
        await trio.sleep(1)
        server.stream.release.set()
    return server.stream.sent


async def _cancelled_send(server, scope: trio.CancelScope) -> None:
    with scope:
        await server.protocol_send(RawData(data=b"headers the encoder counted"))


async def test_a_write_whose_task_is_cancelled_while_it_waits_still_goes_out_in_order(autojump_clock):
    """Fix 11: bytes the protocol took from h2's buffer reach the client even when the task writing them is
    cancelled while another write holds the socket (a browser resetting a stream as it leaves a page). Lost,
    they were a HEADERS block the HPACK encoder had counted: every later answer on the connection failed to
    decode in Chromium (ERR_HTTP2_COMPRESSION_ERROR, seen in CI)."""
    assert await _writes_when_a_waiting_writer_is_cancelled(hypercorn_fix.FixedTCPServer) == [
        b"first", b"headers the encoder counted"]


async def test_without_the_fix_a_cancelled_waiting_write_is_lost(autojump_clock):
    """Proves the test above would fail without the fix: hypercorn's own server drops the bytes."""
    from hypercorn.trio.tcp_server import TCPServer

    assert await _writes_when_a_waiting_writer_is_cancelled(TCPServer) == [b"first"]
