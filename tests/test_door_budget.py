"""Unauthenticated connections cannot lock paired phones and members out (issue 25.4; lead.connections).

Real sockets against the lead's HTTP server (`lead.http.serve_http`), virtual time: slow-body `POST /pair`
requests from four loopback addresses fill the whole budget; a phone is still answered, the slow requests
end `ARRIVAL_SECONDS` after they started, a 503 names the limit its client met, and HTTP/2 streams count.
"""

from __future__ import annotations

import trio
from quart import request

from lead.connections import ARRIVAL_SECONDS, ConnectionBudget, Limits
from lead.http import SWEEP_SECONDS, create_app, serve_http, trust_connection
from tests.test_connections import _answer, _hold, _is_closed, _settle


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
