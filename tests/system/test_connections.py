"""The lead's HTTP server budgets its connections (issue 9.7): held connections cannot use up the descriptors.

Invariants:
- at most `Limits.total` connections, and `Limits.per_client` from one address; one more is refused
  at once (`503 busy`, then closed) and takes no place;
- another address still gets answers while one address holds all it may, and even when the total is
  full: it takes the place of the biggest holder's longest-idle connection;
- under pressure an idle connection closes after `PRESSURE_IDLE_SECONDS`, not the 75 s keep-alive;
  without pressure it stays open.
The in-process tests run on virtual time (autojump_clock); the last one holds real sockets against a
real `collie serve` with a low descriptor limit and checks that `collie status` and the dashboard answer.
"""

from __future__ import annotations

import os
import re
import resource
import selectors
import socket
import ssl
import stat
import subprocess
import sys
import time
from functools import partial

import httpx
import pytest
import trio

from collie.lead.door.connections import PRESSURE_IDLE_SECONDS, ConnectionBudget, Limits
from collie.lead.door.http import (KEEP_ALIVE_SECONDS, KEEPALIVE_IDLE_SECONDS, KEEPALIVE_INTERVAL_SECONDS,
                                   KEEPALIVE_PROBES, SWEEP_SECONDS, USER_TIMEOUT_SECONDS, create_app, serve_http)
from collie.lead.door.hypercorn_fix import SEND_STALL_SECONDS
from collie.lead.feed.core import HEARTBEAT
from tests.conftest import REPO, BridgeProcess, collie_env, run_collie


# --- the plain class --------------------------------------------------------------------------------
def test_limits_leave_room_for_the_rest_of_the_lead():
    """Under the default 1024 descriptors: 768 connections, 192 per address; never more than the limit minus 128."""
    assert Limits.for_descriptors(1024) == Limits(total=768, per_client=192, pressure=384)
    for nofile in (64, 256, 1024, 4096, 65536):
        limits = Limits.for_descriptors(nofile)
        assert limits.total <= max(8, nofile - 128) and limits.per_client <= limits.total


def _served(budget: ConnectionBudget, conn, client, now: float) -> None:
    """Admit `conn` and let one request of it come and go at `now`: idle, no longer waiting for its first request."""
    assert budget.admit(conn, client, now)[0]
    budget.mark(conn, idle=False, now=now)
    budget.mark(conn, idle=True, now=now)


def test_budget_refuses_over_either_limit_and_frees_on_release():
    budget = ConnectionBudget(Limits(total=4, per_client=2, pressure=2))
    assert budget.admit("a1", "A", 0) == (True, None) and budget.admit("a2", "A", 0) == (True, None)
    for conn in ("a1", "a2"):
        budget.trust(conn)  # a paired phone's requests
        budget.mark(conn, idle=False, now=1)  # both of A's are busy
    assert budget.admit("a3", "A", 1) == (False, None) and budget.refusal == "client"  # over A's share
    assert budget.admit("b1", "B", 0) == (True, None) and budget.admit("b2", "B", 0) == (True, None)
    for conn in ("b1", "b2"):
        budget.trust(conn)
        budget.mark(conn, idle=False, now=1)
    assert budget.admit("c1", "C", 2) == (False, None)  # the total is full and nothing is idle or untrusted
    assert budget.refusal == "total"
    budget.release("a1")
    assert budget.admit("c1", "C", 2) == (True, None)
    assert budget.statistics()["refused"] == 2 and budget.statistics()["open"] == 4


def test_a_newcomer_takes_the_place_of_the_biggest_holders_longest_idle_connection():
    """When the total is full, one crowd cannot lock others out: a client holding fewer gets in, and the client
    holding the most loses its longest-idle connection — until the newcomer holds about as many."""
    budget = ConnectionBudget(Limits(total=5, per_client=4, pressure=5))
    for i, since in enumerate((3.0, 1.0, 2.0)):
        _served(budget, f"a{i}", "A", since)
    _served(budget, "b0", "B", 0.0)
    _served(budget, "b1", "B", 0.0)
    for conn in ("a0", "a1", "a2", "b0", "b1"):
        budget.trust(conn)  # else an untrusted one would make room for c1 below
    assert budget.admit("c0", "C", 5.0) == (True, "a1")  # A holds 3, the most; a1 idle since t=1
    budget.trust("c0")
    assert budget.admit("c1", "C", 5.0) == (False, None)  # A and B hold 2, C 1: no one holds more than C + 1
    budget.release("a1")  # the evicted connection's own release later changes nothing
    assert budget.statistics()["open"] == 5 and budget.statistics()["evicted"] == 1


def test_only_long_idle_connections_close_and_only_under_pressure():
    budget = ConnectionBudget(Limits(total=10, per_client=10, pressure=3))
    for i in range(3):
        _served(budget, i, "A", 0.0)
    assert budget.to_close(100.0) == []  # 3 open: no pressure
    _served(budget, 3, "B", 0.0)
    budget.mark(1, idle=False, now=1.0)  # a request in progress
    budget.mark(2, idle=True, now=2.0)  # its request ended at t=2
    assert budget.to_close(PRESSURE_IDLE_SECONDS) == [0, 3]
    assert budget.to_close(2.0 + PRESSURE_IDLE_SECONDS) == [0, 2, 3]


# --- a real server, virtual time ---------------------------------------------------------------------
async def _hold(port: int, source: str) -> trio.SocketStream:
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_STREAM)
    await sock.bind((source, 0))
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def _hold_idle(port: int, source: str) -> trio.SocketStream:
    """A kept-alive connection whose first request (`GET /healthz`) came and went: idle, not waiting for one
    (a connection with no request in ARRIVAL_SECONDS is closed, issue 25 D2)."""
    stream = await _hold(port, source)
    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    data = b""
    with trio.fail_after(1.0):
        while b"\r\n\r\n" not in data or len(data.partition(b"\r\n\r\n")[2]) < int(
                re.search(rb"content-length: (\d+)", data.partition(b"\r\n\r\n")[0], re.I).group(1)):
            data += await stream.receive_some(4096)
    assert data.startswith(b"HTTP/1.1 200"), data
    return stream


async def _answer(stream: trio.SocketStream) -> bytes:
    """What the server sends before it closes (or within 1 s)."""
    data = b""
    with trio.move_on_after(1.0):
        try:
            while chunk := await stream.receive_some(4096):
                data += chunk
        except trio.BrokenResourceError:  # reset: the server closed without reading
            pass
    return data


async def _healthz(port: int, source: str = "127.0.0.1") -> int:
    stream = await _hold(port, source)
    await stream.send_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    data = await _answer(stream)
    await stream.aclose()
    return int(data.split(b" ", 2)[1]) if data else 0


async def _is_closed(stream: trio.SocketStream) -> bool:
    with trio.move_on_after(0.01):
        return await stream.receive_some(1) == b""
    return False


async def _settle(app, n: int) -> None:
    """Wait until the server counts `n` open connections (it releases one just after closing it)."""
    with trio.fail_after(1.0):
        while app.config["COLLIE_CONNECTIONS"].statistics()["open"] != n:
            await trio.sleep(0.01)


async def test_one_address_cannot_take_the_server(autojump_clock):
    """9.7: an address holding its whole share gets `503 busy` for one more; another address is answered, even
    when the total is full (in place of the biggest holder's longest-idle connection)."""
    shutdown = trio.Event()
    limits = Limits(total=12, per_client=4, pressure=100)
    app = create_app()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial_serve(limits, app), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        held = [await _hold_idle(port, "127.0.0.2") for _ in range(4)]
        extra = await _hold(port, "127.0.0.2")
        refusal = await _answer(extra)
        assert refusal.startswith(b"HTTP/1.1 503") and b'"error": "busy"' in refusal
        assert await _healthz(port) == 200
        held += [await _hold_idle(port, "127.0.0.3") for _ in range(4)]
        held += [await _hold_idle(port, "127.0.0.4") for _ in range(3)]
        await _settle(app, 11)
        assert not any([await _is_closed(s) for s in held])
        assert await _healthz(port) == 200  # the 12th: the total is full, nobody evicted
        await _settle(app, 11)
        held.append(await _hold_idle(port, "127.0.0.4"))  # 12 held: the total is full
        await _settle(app, 12)
        assert await _healthz(port) == 200  # from 127.0.0.1, in place of an idle connection of 127.0.0.2
        closed = [await _is_closed(s) for s in held]
        assert closed.count(True) == 1 and any(closed[:4])  # one of 127.0.0.2's (all idle since the same instant)
        assert app.config["COLLIE_CONNECTIONS"].statistics()["evicted"] == 1
        for s in held + [extra]:
            await s.aclose()
        shutdown.set()


async def test_idle_connections_close_early_only_under_pressure(autojump_clock):
    """9.7: past the pressure mark idle connections close after PRESSURE_IDLE_SECONDS (+ at most one sweep), not
    after the 75 s keep-alive; below it they stay open."""
    shutdown = trio.Event()
    limits = Limits(total=20, per_client=20, pressure=5)
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(partial_serve(limits), shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        calm = [await _hold_idle(port, "127.0.0.2") for _ in range(5)]
        await trio.sleep(KEEP_ALIVE_SECONDS / 2)
        assert not any([await _is_closed(s) for s in calm])  # 5 open: no pressure, no early close
        one_more = await _hold_idle(port, "127.0.0.3")  # 6: pressure; the 5 long-idle ones go at the next sweep
        await trio.sleep(SWEEP_SECONDS + 0.1)
        assert all([await _is_closed(s) for s in calm]) and not await _is_closed(one_more)
        await trio.sleep(KEEP_ALIVE_SECONDS / 4)
        assert not await _is_closed(one_more)  # alone again: no pressure
        start = trio.current_time()
        crowd = [await _hold_idle(port, "127.0.0.4") for _ in range(6)]  # pressure even once `one_more` went
        while not await _is_closed(crowd[0]):
            await trio.sleep(0.1)
        assert PRESSURE_IDLE_SECONDS <= trio.current_time() - start <= PRESSURE_IDLE_SECONDS + SWEEP_SECONDS + 0.2
        for s in calm + crowd + [one_more]:
            await s.aclose()
        shutdown.set()


def partial_serve(limits: Limits, app=None):
    async def serve(shutdown, *, task_status=trio.TASK_STATUS_IGNORED):
        await serve_http(app or create_app(), ["127.0.0.1:0"], shutdown, limits=limits, task_status=task_status)
    return serve


async def _open_after_client_closes(n: int) -> list[int]:
    """Open connections the server counts right after `n` clients closed theirs, then 1 s later."""
    shutdown = trio.Event()
    app = create_app()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, app, ["127.0.0.1:0"], shutdown)
        port = int(binds[0].rsplit(":", 1)[1])
        for s in [await _hold(port, "127.0.0.2") for _ in range(n)]:
            await s.aclose()
        await trio.sleep(0.1)
        seen = [app.config["COLLIE_CONNECTIONS"].statistics()["open"]]
        await trio.sleep(1.0)
        seen.append(app.config["COLLIE_CONNECTIONS"].statistics()["open"])
        shutdown.set()
    return seen


async def test_a_connection_the_client_closed_is_released_at_once(autojump_clock):
    """9.7 (collie.lead.door.hypercorn_fix, fix 3): a closed connection gives its descriptor back at once, not after the
    75 s keep-alive timer — opening and closing connections fast cannot pile up descriptors."""
    assert await _open_after_client_closes(50) == [0, 0]


async def test_without_the_fix_closed_connections_hold_on(autojump_clock, monkeypatch):
    """Proves the test above fails without fix 3."""
    from hypercorn.trio.tcp_server import TCPServer

    from collie.lead.door import hypercorn_fix

    monkeypatch.setattr(hypercorn_fix.FixedTCPServer, "_read_data", TCPServer._read_data)
    assert await _open_after_client_closes(50) == [50, 50]


# --- a real `collie serve`, real held sockets -------------------------------------------------------------
class LowLimitBridge(BridgeProcess):
    """`collie serve` with a descriptor limit of `nofile` (so the test can reach it with a few hundred sockets)."""

    def __init__(self, paths, env, nofile: int) -> None:
        self.paths = paths
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "collie.crew.cli.main", "serve", "--port", "0"], cwd=REPO, env=env,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))


def _hold_sync(port: int, source: str, n: int) -> list[socket.socket]:
    held = []
    for _ in range(n):
        s = socket.socket()
        s.bind((source, 0))
        s.connect(("127.0.0.1", port))
        held.append(s)
    return held


def _refused(sockets: list[socket.socket]) -> int:
    """How many of `sockets` the server refused within 0.5 s: `503 busy` then closed, or (past 32 refusals at
    once) just closed. An admitted socket stays silent: the server waits for its request."""
    with selectors.DefaultSelector() as sel:
        for s in sockets:
            sel.register(s, selectors.EVENT_READ)
        time.sleep(0.5)
        ready = [key.fileobj for key, _ in sel.select(timeout=0)]
    n = 0
    for s in ready:
        try:
            first = s.recv(64)
            n += first.startswith(b"HTTP/1.1 503") or first == b""
        except ConnectionResetError:
            n += 1
    return n


@pytest.mark.slow
def test_held_connections_leave_status_and_dashboard_answering(paths):
    """9.7: a lead with 256 descriptors takes 128 connections, 32 per address. 100 held from one address: 68 are
    refused and the dashboard answers at once; 280 held from eight addresses fill the total: `collie status`
    (the control socket) and the dashboard (in place of an idle held connection) still answer at once."""
    limits = Limits.for_descriptors(256)
    assert (limits.total, limits.per_client) == (128, 32)
    lead = LowLimitBridge(paths, collie_env(paths), 256)
    held: list[socket.socket] = []
    try:
        address = lead.wait_ready()["address"]
        port = int(address.rsplit(":", 1)[1])
        token = (paths.state_dir / "api-token").read_text().strip()
        auth = {"authorization": f"Bearer {token}"}
        one = _hold_sync(port, "127.0.0.2", 100)
        held += one
        assert _refused(one) == 100 - limits.per_client
        assert httpx.get(f"{address}/api/dashboard", headers=auth, timeout=5).status_code == 200
        for i in range(3, 10):
            held += _hold_sync(port, f"127.0.0.{i}", 40)
        status = run_collie(paths, "status", timeout=10)
        assert status.returncode == 0 and "bridge: running" in status.stdout, status.stdout + status.stderr
        assert httpx.get(f"{address}/api/dashboard", headers=auth, timeout=5).status_code == 200
    finally:
        for s in held:
            s.close()
        lead.stop()
        lead.proc.stdout.close()
    assert "Too many open files" not in paths.log.read_text()


# --- a gone or stalled peer does not hold its connection (issue 11: radio drops) -----------------------------
def _server_end(match) -> socket.socket | None:
    """The lead's own end of a connection as the kernel holds it: the server runs in this process, so its
    accepted socket is one of our descriptors; `match(sock)` picks it, read through a duplicate."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if not stat.S_ISSOCK(os.fstat(int(name)).st_mode):
                continue
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:
            continue
        try:
            if match(sock):
                return sock
        except OSError:
            pass
        sock.close()
    return None


def _keepalive_options(sock: socket.socket) -> dict:
    return {"keepalive": sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            "idle": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            "interval": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            "probes": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            "user_timeout_ms": sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT)}


WANTED = {"keepalive": 1, "idle": KEEPALIVE_IDLE_SECONDS, "interval": KEEPALIVE_INTERVAL_SECONDS,
          "probes": KEEPALIVE_PROBES, "user_timeout_ms": USER_TIMEOUT_SECONDS * 1000}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd") or not hasattr(socket, "TCP_USER_TIMEOUT"),
                    reason="reads the server's socket through /proc (Linux)")
async def test_accepted_connections_find_a_gone_peer_plain_and_tls_but_not_unix(tmp_path):
    """Issue 11 (W5): a phone whose radio drops sends no FIN, so the lead must find out itself. Every TCP
    connection the lead's server accepts — plain, TLS, and so also a member's crew link, served by the same
    server on `/crew/v1` — has TCP keep-alive (an idle dead peer is dropped within 30 + 3 x 10 s) and a
    30 s user timeout (sent data unacknowledged that long ends it). A Unix socket gets none of it and is
    served as before. Read from the kernel on the server's own end of each connection."""
    from collie.lead.door.tls import make_certificate

    cert, key = make_certificate(["127.0.0.1"])
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    unix_path = str(tmp_path / "lead.sock")
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: keep-alive\r\n\r\n"
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        plain = await nursery.start(serve_http, create_app(), ["127.0.0.1:0"], shutdown)
        tls = await nursery.start(partial(serve_http, certfile=str(tmp_path / "cert.pem"),
                                          keyfile=str(tmp_path / "key.pem")),
                                  create_app(), ["127.0.0.1:0"], shutdown)
        unix = await nursery.start(serve_http, create_app(), [f"unix:{unix_path}"], shutdown)
        assert tls[0].startswith("https://") and unix
        ctx = ssl.create_default_context()
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
        streams = {"plain": await trio.open_tcp_stream("127.0.0.1", int(plain[0].rsplit(":", 1)[1])),
                   "tls": await trio.open_ssl_over_tcp_stream("127.0.0.1", int(tls[0].rsplit(":", 1)[1]),
                                                              ssl_context=ctx),
                   "unix": await trio.open_unix_socket(unix_path)}
        for stream in streams.values():
            await stream.send_all(request)
            with trio.fail_after(5):
                assert (await stream.receive_some(4096)).startswith(b"HTTP/1.1 200")
        for kind in ("plain", "tls"):
            client = getattr(streams[kind], "transport_stream", streams[kind]).socket
            mine, port = client.getsockname(), client.getpeername()[1]
            server = _server_end(lambda s: s.family == socket.AF_INET and s.getpeername() == mine
                                 and s.getsockname()[1] == port)
            assert server is not None, kind
            with server:
                assert _keepalive_options(server) == WANTED, kind
        accepted = _server_end(lambda s: s.family == socket.AF_UNIX and s.getsockname() == unix_path
                               and not s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN))
        assert accepted is not None
        with accepted:
            assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
        for stream in streams.values():
            await stream.aclose()
        shutdown.set()


def _live_channel_app():
    """A lead app serving only the live channel, over a bridge with no agents; `viewing` records
    (time, agent, on) each time the feed turns an agent's viewed polling on or off."""
    from collie.lead.feed.events import Feed
    from collie.lead.routes.events import install_events

    viewing: list = []

    async def set_viewing(machine, agent, on):
        viewing.append((trio.current_time(), agent, on))

    class Bridge:
        readers: dict = {}
        on_agent_change: list = []

    feed = Feed(Bridge(), set_viewing=set_viewing)

    def install(a):
        from collie.lead.door.http import trust_connection

        a.before_request(trust_connection)  # as the API's door does for a paired phone (collie.lead.door.connections)
        install_events(a, feed, owner_check=lambda: True)
    return create_app(install), feed, viewing


async def test_a_phone_that_stops_reading_loses_its_live_channel_and_viewing(autojump_clock):
    """Issue 11 (W5, I7): a phone that stops reading its live channel (a frozen app, or gone where the
    kernel has no TCP_USER_TIMEOUT) ends that channel once it has taken nothing for SEND_STALL_SECONDS —
    and with it the viewing that keeps its agent on 2 s polling. Another phone reading its own channel
    keeps it. Before, hypercorn's write waited for the stalled peer forever."""
    app, feed, viewing = _live_channel_app()
    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, app, ["127.0.0.1:0"], shutdown)
        port = int(binds[0].rsplit(":", 1)[1])

        async def open_channel(agent: str, rcvbuf: int | None = None) -> trio.SocketStream:
            sock = trio.socket.socket()
            if rcvbuf:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)  # a small window: fills sooner
            await sock.connect(("127.0.0.1", port))
            stream = trio.SocketStream(sock)
            await stream.send_all(b"GET /api/events?agent=%s HTTP/1.1\r\nHost: x\r\n\r\n" % agent.encode())
            return stream

        frozen = await open_channel("desk", rcvbuf=4096)  # never reads
        reading = await open_channel("lab")
        taken = 0

        async def read_all():
            nonlocal taken
            try:
                while chunk := await reading.receive_some(1 << 20):
                    taken += len(chunk)
            except trio.ClosedResourceError:  # closed below, at the end of the test
                pass
        nursery.start_soon(read_all)
        try:
            with trio.fail_after(5):
                while len(viewing) < 2:
                    await trio.sleep(0.01)
            t0 = trio.current_time()
            for i in range(200):  # 200 events of ~64 KiB: far more than the socket buffers hold
                feed._publish("row", {"machine": "local", "agent": "lab", "row": {"line2": "x" * 65536, "i": i}})
                await trio.sleep(0)
            with trio.fail_after(10 * SEND_STALL_SECONDS):
                while len(viewing) < 3:
                    await trio.sleep(0.5)
            ended_at, agent, on = viewing[2]
            assert (agent, on) == ("desk", False)
            assert ended_at - t0 == SEND_STALL_SECONDS, ended_at - t0
            assert [ch.view[1] for ch in feed.channels.values()] == ["lab"]  # the reading phone keeps its channel
            assert taken > 200 * 65536
            await trio.sleep(HEARTBEAT * 2)
            assert [ch.view[1] for ch in feed.channels.values()] == ["lab"]
        finally:  # (before the fix, only the frozen phone closing its end lets the server stop)
            for stream in (frozen, reading):
                await stream.aclose()
            shutdown.set()


async def test_an_http2_channel_the_phone_takes_nothing_of_ends_alone(autojump_clock):
    """Issue 11 (W5): over HTTP/2 a phone can keep its connection alive while it takes nothing of its live
    channel's stream (its window stays shut: a frozen app). That channel ends after SEND_STALL seconds —
    its viewing too, and the stream is reset so the phone knows — and the connection's other requests
    are still answered."""
    import h2.config
    import h2.connection
    import h2.events

    from collie.lead.feed.core import SEND_STALL

    app, feed, viewing = _live_channel_app()
    shutdown = trio.Event()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    reset_at: list = []
    answers: dict = {}
    async with trio.open_nursery() as nursery:
        binds = await nursery.start(serve_http, app, ["127.0.0.1:0"], shutdown)
        stream = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
        conn.initiate_connection()  # HTTP/2 with prior knowledge (h2c)
        conn.send_headers(1, [(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                              (":path", "/api/events?agent=desk")], end_stream=True)
        await stream.send_all(conn.data_to_send())

        async def read():
            while data := await stream.receive_some(1 << 20):
                for ev in conn.receive_data(data):
                    if isinstance(ev, h2.events.DataReceived):
                        if ev.stream_id == 1:  # the connection's window only: the channel's stays shut
                            conn.increment_flow_control_window(ev.flow_controlled_length)
                        else:
                            conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                            answers[ev.stream_id] = answers.get(ev.stream_id, b"") + ev.data
                    elif isinstance(ev, h2.events.StreamReset) and ev.stream_id == 1:
                        reset_at.append(trio.current_time())
                await stream.send_all(conn.data_to_send())
        nursery.start_soon(read)
        await _across_the_socket(lambda: viewing, "the channel's request reached the feed")
        t0 = trio.current_time()
        for i in range(8):  # 512 KiB: far beyond the stream's 64 KiB window and the server's buffer
            feed._publish("row", {"machine": "local", "agent": "desk", "row": {"line2": "x" * 65536, "i": i}})
            await trio.sleep(0)
        with trio.fail_after(10 * SEND_STALL):
            while len(viewing) < 2 or not reset_at:
                await trio.sleep(0.5)
        assert viewing[1] == (t0 + SEND_STALL, "desk", False) and reset_at == [t0 + SEND_STALL]
        assert feed.channels == {}
        conn.send_headers(3, [(":method", "GET"), (":scheme", "http"), (":authority", "x"),
                              (":path", "/healthz")], end_stream=True)
        await stream.send_all(conn.data_to_send())
        await _across_the_socket(lambda: b"ok" in answers.get(3, b""), "the connection's next request answered")
        nursery.cancel_scope.cancel()
    await stream.aclose()


async def _across_the_socket(cond, what: str, limit: float = 10.0) -> None:
    """Wait for what crosses a real socket without letting virtual time run on: a sleeping wait lets the
    autojump clock pass the server's timers (the door's 10 s for a first request) before the bytes land."""
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"not seen in {limit} s: {what}"
        await trio.sleep(0)


async def test_an_idle_server_does_not_wake_to_sweep(autojump_clock):
    """Issue 16 (idle CPU): with no pressure the sweeper sleeps until an admission brings some, so a lead
    nobody talks to is not woken every second (over 5 idle minutes: no task step at all)."""
    steps: list[str] = []

    class Steps(trio.abc.Instrument):
        def before_task_step(self, task) -> None:
            steps.append(task.name)

    shutdown = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(partial_serve(Limits(total=20, per_client=20, pressure=5)), shutdown)
        await trio.sleep(1)
        me = trio.lowlevel.current_task().name
        trio.lowlevel.add_instrument(Steps())
        await trio.sleep(300)
        assert [name for name in steps if name != me] == []
        shutdown.set()
