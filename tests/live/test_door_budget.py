"""Unauthenticated connections cannot lock paired phones and members out (issue 25.4; collie.lead.door.connections).

Real sockets against the lead's HTTP server (`collie.lead.door.http.serve_http`), virtual time: slow-body `POST /pair`
requests from four loopback addresses fill the whole budget; a phone is still answered, the slow requests
end `ARRIVAL_SECONDS` after they started, a 503 names the limit its client met, and HTTP/2 streams count.
"""

from __future__ import annotations

import ssl
from functools import partial

import pytest
import trio
from quart import request

from collie.lead.door.connections import ARRIVAL_SECONDS, ConnectionBudget, Limits
from collie.lead.door.http import SWEEP_SECONDS, create_app, serve_http, trust_connection
from tests.system.test_connections import _answer, _hold, _is_closed, _settle


def _app():
    def install(app):
        @app.post("/pair")
        async def pair():
            await request.get_data()  # a body that never comes holds the request
            return {"ok": True}

        @app.get("/api/live")
        async def live():
            trust_connection()  # what the API's door does for a valid credential
            await trio.sleep_forever()

    return create_app(install)


def _serve(app, limits):
    async def serve(shutdown, *, task_status=trio.TASK_STATUS_IGNORED):
        await serve_http(app, ["127.0.0.1:0"], shutdown, limits=limits, task_status=task_status)
    return serve


async def _slow_pair(port: int, source: str) -> trio.SocketStream:
    stream = await _hold(port, source)
    await stream.send_all(b"POST /pair HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                          b"Content-Length: 100000\r\n\r\n{\"code\": ")
    return stream


async def _get(port: int, path: str, source: str = "127.0.0.1") -> bytes:
    stream = await _hold(port, source)
    await stream.send_all(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path.encode())
    data = await _answer(stream)
    await stream.aclose()
    return data


async def test_slow_unauthenticated_bodies_from_four_addresses_do_not_lock_a_phone_out(autojump_clock):
    app = _app()
    limits = Limits(total=8, per_client=2, pressure=100)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(_serve(app, limits), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        start = trio.current_time()
        slow = []
        for i in range(8):  # 0.1 s apart: the first is the longest-running
            slow.append(await _slow_pair(port, f"127.0.0.{2 + i // 2}"))
            await trio.sleep(0.1)
        await _settle(app, 8)
        with trio.fail_after(1):
            while app.config["COLLIE_CONNECTIONS"].statistics()["untrusted_busy"] < 8:
                await trio.sleep(0.01)
        answer = await _get(port, "/healthz")  # the total is full of untrusted requests in progress
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert app.config["COLLIE_CONNECTIONS"].statistics()["evicted"] == 1
        closed = [await _is_closed(s) for s in slow]
        assert closed.count(True) == 1 and closed[0]  # the longest-running one made room
        # the others end ARRIVAL_SECONDS after they started (at the next sweep), not before
        await trio.sleep(start + ARRIVAL_SECONDS - trio.current_time())
        assert not any([await _is_closed(s) for s in slow[1:]])
        await trio.sleep(0.8 + SWEEP_SECONDS + 0.1)  # the last started 0.8 s after the first
        assert all([await _is_closed(s) for s in slow[1:]])
        for s in slow:
            await s.aclose()
        shutdown.set()


async def test_a_trusted_request_is_not_cut_and_the_503_names_the_limit_met(autojump_clock):
    """A phone's live channel (trusted) runs past ARRIVAL_SECONDS; when trusted requests fill the total, a
    newcomer from another address is told the lead is full — not that its own address holds too many."""
    app = _app()
    limits = Limits(total=2, per_client=2, pressure=100)
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(_serve(app, limits), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        live = []
        for _ in range(2):
            s = await _hold(port, "127.0.0.2")
            await s.send_all(b"GET /api/live HTTP/1.1\r\nHost: x\r\n\r\n")
            live.append(s)
        with trio.fail_after(1):
            while app.config["COLLIE_CONNECTIONS"].statistics()["trusted"] < 2:
                await trio.sleep(0.01)
        await trio.sleep(ARRIVAL_SECONDS * 3)
        assert not any([await _is_closed(s) for s in live])
        refusal = await _get(port, "/healthz", "127.0.0.3")
        assert refusal.startswith(b"HTTP/1.1 503") and b"all its connections in use" in refusal, refusal
        own = await _get(port, "/healthz", "127.0.0.2")
        assert own.startswith(b"HTTP/1.1 503") and b"from your address" in own, own
        for s in live:
            await s.aclose()
        shutdown.set()


def test_http2_streams_count_as_connections():
    """Each open HTTP/2 stream beyond a connection's first counts for its address and in the total."""
    budget = ConnectionBudget(Limits(total=4, per_client=3, pressure=100))
    assert budget.admit("h2", "A", 0) == (True, None)
    budget.trust("h2")
    budget.mark("h2", idle=False, now=0)  # a phone's connection with three requests in progress
    budget.set_streams("h2", 3)
    assert budget.used() == 3
    assert budget.admit("a2", "A", 0) == (False, None) and budget.refusal == "client"
    assert budget.admit("b1", "B", 0) == (True, None)
    budget.trust("b1")  # else b2 would take the place of b1, untrusted and waiting for its first request
    assert budget.admit("b2", "B", 0) == (False, None) and budget.refusal == "total"
    budget.set_streams("h2", 1)
    assert budget.used() == 2 and budget.admit("b2", "B", 0) == (True, None)
    budget.set_streams("h2", 5)
    budget.release("h2")
    assert budget.used() == 2 and budget.statistics()["streams"] == 0


async def test_http2_streams_are_counted_on_a_real_connection(autojump_clock):
    """Three slow `POST /pair` streams on one HTTP/2 connection (prior knowledge, cleartext) count as three
    connections of its address; as they end, the count comes down."""
    import h2.config
    import h2.connection

    app = _app()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(_serve(app, Limits(total=20, per_client=20, pressure=100)), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        stream = await _hold(port, "127.0.0.2")
        conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
        conn.initiate_connection()
        for sid in (1, 3, 5):
            conn.send_headers(sid, [(":method", "POST"), (":path", "/pair"), (":scheme", "http"),
                                    (":authority", "x"), ("content-length", "1000")])
            conn.send_data(sid, b"{")
        await stream.send_all(conn.data_to_send())
        budget = app.config["COLLIE_CONNECTIONS"]
        with trio.fail_after(2):
            while budget.statistics()["streams"] != 2:
                await trio.sleep(0.05)
        assert budget.used() == 3 and budget.statistics()["open"] == 1
        await stream.aclose()
        with trio.fail_after(2):
            while budget.used() != 0:
                await trio.sleep(0.05)
        shutdown.set()


async def _slow_headers(port: int, source: str, lines: list) -> None:
    """A client that sends one header line every 2 s and never ends its headers (slowloris): what it is answered
    before the lead closes it goes to `lines`."""
    stream = await _hold(port, source)
    try:
        await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        data = b""
        while True:
            with trio.move_on_after(2.0):
                chunk = await stream.receive_some(4096)
                data += chunk
                if not chunk:
                    break
            await stream.send_all(b"X-Slow: 1\r\n")
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        pass
    finally:
        lines.append((trio.current_time(), data))
        await stream.aclose()


@pytest.mark.parametrize("tls", [False, True])
async def test_slow_headers_and_silent_handshakes_cannot_keep_a_phone_out(autojump_clock, tmp_path, tls):
    """Issue 25 D2: untrusted connections still in their headers (plain: a header line every 2 s) or their TLS
    handshake (no ClientHello) fill the whole budget — some from the phone's own address. Every new connection
    of the phone is answered (it takes the place of the longest-waiting untrusted one), the connection whose
    place it took is told so (plain HTTP: 503), and no connection waits more than ARRIVAL_SECONDS (+ one sweep)
    for its request: the rest are answered `408` then."""
    from collie.lead.door.tls import make_certificate

    app = _app()
    limits = Limits(total=8, per_client=8, pressure=100)
    certs = {}
    if tls:
        cert, key = make_certificate(["127.0.0.1"])
        (tmp_path / "cert.pem").write_bytes(cert)
        (tmp_path / "key.pem").write_bytes(key)
        certs = {"certfile": str(tmp_path / "cert.pem"), "keyfile": str(tmp_path / "key.pem")}
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    shutdown = trio.Event()
    answers: list = []
    silent: list = []
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial(serve_http, app, ["127.0.0.1:0"], shutdown, limits=limits, **certs))
        port = int(binds[0].rsplit(":", 1)[1])
        start = trio.current_time()
        for i in range(8):  # the phone's own address among them, 0.1 s apart: the first waits the longest
            source = f"127.0.0.{1 + i // 2}"
            if tls:
                silent.append(await _hold(port, source))  # never sends its ClientHello
            else:
                nursery.start_soon(_slow_headers, port, source, answers)
            await trio.sleep(0.1)
        await _settle(app, 8)
        budget = app.config["COLLIE_CONNECTIONS"]
        phone = []
        for n in range(3):  # three new connections of the phone, 1 s apart, each answered and kept alive
            stream = await _hold(port, "127.0.0.1")
            if tls:
                stream = trio.SSLStream(stream, ctx, server_hostname="127.0.0.1")
            await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            with trio.fail_after(2):
                while not answer.endswith(b"}\n"):
                    chunk = await stream.receive_some(4096)
                    assert chunk, (n, answer)  # closed with no answer
                    answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), (n, answer)
            phone.append(stream)
            await trio.sleep(1.0)
        assert budget.statistics()["evicted"] == 3
        await trio.sleep(start + ARRIVAL_SECONDS + SWEEP_SECONDS + 0.9 - trio.current_time())
        await _settle(app, 3)  # the phone's three, idle: every waiting one is gone
        if tls:
            assert all([await _is_closed(s) for s in silent])
            for s in silent:
                await s.aclose()
        else:
            await trio.sleep(2.1)  # the slow clients notice at their next line
            assert len(answers) == 8
            made_room = [a for _, a in answers if b"to make room" in a]
            late = [(t, a) for t, a in answers if a.startswith(b"HTTP/1.1 408")]
            assert len(made_room) == 3 and all(a.startswith(b"HTTP/1.1 503") for a in made_room), answers
            assert len(late) == 5, answers
        for s in phone:
            await s.aclose()
        shutdown.set()


async def test_many_connections_at_once_from_one_address_are_each_answered(autojump_clock):
    """Issue 25 D2: more connections at once from one address than its share, each sending a request at once:
    every one is answered — 200, or 503 naming why — none is closed with no answer."""
    app = _app()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(_serve(app, Limits(total=100, per_client=4, pressure=100)), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        streams = [await _hold(port, "127.0.0.2") for _ in range(12)]
        for s in streams:
            await s.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers = [await _answer(s) for s in streams]
        assert all(a.startswith((b"HTTP/1.1 200", b"HTTP/1.1 503")) for a in answers), answers
        assert any(a.startswith(b"HTTP/1.1 200") for a in answers)
        for s in streams:
            await s.aclose()
        shutdown.set()
