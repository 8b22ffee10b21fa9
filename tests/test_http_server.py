"""The lead's HTTP server shuts down promptly with idle keep-alive connections open.

Without `lead.hypercorn_fix` an idle HTTP/1.1 connection never closes and shutdown waits the whole
graceful timeout; with it, shutdown finishes at once. Virtual time (autojump_clock) makes this exact.
"""

from __future__ import annotations

import trio

from lead import hypercorn_fix
from lead.http import GRACEFUL_SECONDS, create_app, serve_http


async def _shutdown_time_with_idle_connection() -> float:
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, create_app(), ["127.0.0.1:0"], shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        data = b""
        while b'"ok":true' not in data.replace(b" ", b""):
            data += await stream.receive_some(4096)
        assert data.startswith(b"HTTP/1.1 200")
        start = trio.current_time()
        shutdown.set()
    await stream.aclose()
    return trio.current_time() - start


async def test_shutdown_does_not_wait_for_idle_keepalive(autojump_clock):
    assert await _shutdown_time_with_idle_connection() < 1.0


async def test_without_the_fix_shutdown_waits_the_graceful_timeout(autojump_clock, monkeypatch):
    """Proves the test above would fail without the fix."""
    monkeypatch.setattr(hypercorn_fix, "install", lambda: None)
    from hypercorn.trio import run as hypercorn_run
    from hypercorn.trio.tcp_server import TCPServer

    monkeypatch.setattr(hypercorn_run, "TCPServer", TCPServer)
    assert await _shutdown_time_with_idle_connection() >= GRACEFUL_SECONDS
