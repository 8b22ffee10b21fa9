"""The lead's HTTP door under two abuses (issues 8.10, 9.7). Prints figures; asserts nothing.

    .venv/bin/python bench/http_door.py [--pairs 1000] [--without-fix] [--hold 5000] [--nofile 1024]

1. Early answers: `--pairs` request pairs on one kept-alive connection (httpx, like a script would):
   a POST answered 401 before its body is read, then a GET. Counts stalls (no answer within 2 s) and
   prints the per-request latency beside the floor — a raw loopback TCP round trip measured in the
   same run. `--without-fix` runs hypercorn's own protocol (as before issue 8.10).
2. Held connections: a real `collie serve` with `--nofile` descriptors; `--hold` idle connections
   from ten loopback addresses. Prints how many it admitted and refused, the descriptors it uses,
   and how long `collie status` and the dashboard take while they are held.
"""

from __future__ import annotations

import argparse
import os
import resource
import selectors
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

from collie.crew import control  # noqa: E402
from collie.crew.errors import NotRunningError  # noqa: E402


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f} ms"


# --- 1. early answers ------------------------------------------------------------------------------------
def serve_in_thread(without_fix: bool) -> tuple[int, int, trio.Event, threading.Thread]:
    from quart import jsonify, request

    from collie.lead.door import hypercorn_fix
    from collie.lead.door.http import create_app, serve_http

    if without_fix:
        from hypercorn import protocol as hypercorn_protocol
        from hypercorn.protocol.h11 import H11Protocol
        from hypercorn.trio import run as hypercorn_run
        from hypercorn.trio.tcp_server import TCPServer

        hypercorn_fix.install = lambda *a, **k: (setattr(hypercorn_protocol, "H11Protocol", H11Protocol),
                                                 setattr(hypercorn_run, "TCPServer", TCPServer))

    def door(app):
        @app.before_request
        async def early():
            if request.path.startswith("/api/"):
                return jsonify({"error": "unauthorized"}), 401
            return None

    ready: list = []

    async def main():
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve_http, create_app(door), ["127.0.0.1:0"], stop)
            echo = trio.socket.socket()
            await echo.bind(("127.0.0.1", 0))
            echo.listen(1)
            ready.extend([int(binds[0].rsplit(":", 1)[1]), echo.getsockname()[1], stop,
                          trio.lowlevel.current_trio_token()])

            async def echo_one():
                conn, _ = await echo.accept()
                while data := await conn.recv(64):
                    await conn.send(data)
                conn.close()

            nursery.start_soon(echo_one)
            await stop.wait()
            nursery.cancel_scope.cancel()

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    while len(ready) < 4:
        time.sleep(0.01)
    return ready[0], ready[1], ready[2], ready[3], thread


def early_answers(pairs: int, without_fix: bool) -> None:
    port, echo_port, stop, trio_token, thread = serve_in_thread(without_fix)
    floor = []
    with socket.create_connection(("127.0.0.1", echo_port)) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(1000):
            t = time.perf_counter()
            s.sendall(b"x")
            s.recv(64)
            floor.append(time.perf_counter() - t)
    lat, stalls, new_connections = [], 0, 0
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=2) as c:
        for _ in range(pairs):
            for method, path in (("POST", "/api/send"), ("GET", "/healthz")):
                t = time.perf_counter()
                try:
                    r = c.request(method, path, json={"text": "hello"})
                    lat.append(time.perf_counter() - t)
                    assert r.status_code in (200, 401)
                except httpx.TimeoutException:
                    stalls += 1
                except httpx.TransportError:
                    new_connections += 1
    trio.from_thread.run_sync(stop.set, trio_token=trio_token)
    thread.join(10)
    f50 = pct(floor, 50)
    print(f"early answers ({'hypercorn as is' if without_fix else 'with lead.hypercorn_fix'}): {pairs} pairs "
          f"(401 before the body, then GET) on one connection")
    print(f"  stalled (no answer in 2 s): {stalls}   connection errors: {new_connections}")
    print(f"  request p50 {ms(pct(lat, 50))} ({pct(lat, 50) / f50:.0f}x floor), p99 {ms(pct(lat, 99))} "
          f"({pct(lat, 99) / f50:.0f}x floor); floor (raw loopback TCP round trip) p50 {ms(f50)}")


# --- 2. held connections --------------------------------------------------------------------------------
def held_connections(hold: int, nofile: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="door"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
    env.update(COLLIE_CONFIG_DIR=str(tmp / "cfg"), COLLIE_STATE_DIR=str(tmp / "state"))
    proc = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve", "--port", "0"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)))
    from collie.crew.paths import Paths

    control_socket = Paths(config_dir=tmp / "cfg", state_dir=tmp / "state").control_socket
    held: list[socket.socket] = []
    try:
        pong = None
        for _ in range(400):
            try:
                pong = control.call(control_socket, "ping", timeout=1)
                break
            except NotRunningError:
                time.sleep(0.05)
        address = pong["address"]
        port = int(address.rsplit(":", 1)[1])
        auth = {"authorization": "Bearer " + (tmp / "state" / "api-token").read_text().strip()}
        before = len(os.listdir(f"/proc/{proc.pid}/fd"))
        t = time.perf_counter()
        unanswered = 0  # connects that timed out: nobody accepts any more (the backlog is full)
        for i in range(hold):
            s = socket.socket()
            s.settimeout(2)
            s.bind((f"127.0.0.{2 + i % 10}", 0))
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                unanswered += 1
                if unanswered >= 3:
                    break
                continue
            held.append(s)
        opened = time.perf_counter() - t
        time.sleep(0.5)
        with selectors.DefaultSelector() as sel:
            for s in held:
                sel.register(s, selectors.EVENT_READ)
            refused = len(sel.select(timeout=0))
        fds = len(os.listdir(f"/proc/{proc.pid}/fd"))
        t = time.perf_counter()
        try:
            status = subprocess.run([sys.executable, "-m", "collie.crew.cli.main", "status"], cwd=REPO, env=env,
                                    capture_output=True, text=True, timeout=30)
            bridge_line = next((line for line in status.stdout.splitlines() if line.startswith("bridge:")), "")
            status_line = f"exit {status.returncode}, {bridge_line!r}"
        except subprocess.TimeoutExpired:
            status_line = "no answer in 30 s"
        status_s = time.perf_counter() - t
        t = time.perf_counter()
        dash = None
        while time.perf_counter() - t < 30:
            try:
                dash = httpx.get(f"{address}/api/dashboard", headers=auth, timeout=5).status_code
                if dash == 200:
                    break
            except httpx.TransportError as exc:
                dash = type(exc).__name__
            time.sleep(0.1)
        dash_s = time.perf_counter() - t
        print(f"held connections: {hold} idle sockets from 10 addresses against `collie serve` "
              f"with {nofile} descriptors")
        print(f"  opened {len(held)} in {opened:.1f} s ({unanswered} connects timed out, then stopped); refused "
              f"{refused}, admitted {len(held) - refused}; "
              f"server descriptors {before} before, {fds} while held (limit {nofile})")
        print(f"  `collie status`: {status_line} in {status_s:.2f} s; "
              f"dashboard {dash} after {dash_s:.2f} s")
    finally:
        for s in held:
            s.close()
        proc.terminate()
        proc.wait(15)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--pairs", type=int, default=1000)
    p.add_argument("--without-fix", action="store_true")
    p.add_argument("--hold", type=int, default=5000)
    p.add_argument("--nofile", type=int, default=1024)
    args = p.parse_args()
    early_answers(args.pairs, args.without_fix)
    if args.hold and not args.without_fix:
        held_connections(args.hold, args.nofile)


if __name__ == "__main__":
    main()
