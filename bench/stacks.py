"""What 100 requests at once cost with no work behind them, on three HTTP servers (issues 15, 16).

    .venv/bin/python bench/stacks.py [--clients 100] [--bursts 10]

The issue-16 target for a burst — 100 sends at once, receipts p99 within 100x the floor (one httpx
round trip to a trivial server) — and issue 15's 300 writes a second with p99 under 50 ms are judged
with the phones on the same two cores as the servers. This measures the part of that which no
server code can remove: the same 100 httpx clients (one per phone, connections opened first, as
bench/inbox.py and bench/crew_writes.py send) asking `GET /` of three servers that answer a small
JSON document and do nothing else:

- the floor's own server: the standard library's threaded HTTP/1.1 server (bench/inbox.py);
- a hand-written HTTP/1.1 server on h11 over trio, the least a Python server on our stack can do;
- hypercorn + quart-trio with one route: the lead's HTTP stack.

Printed for each: p50 and p99 over `--bursts` bursts, as multiples of the floor's p50; the server's
CPU and the clients' CPU per request; the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import trio

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from inbox import FLOOR_SERVER, clients, round_trips  # noqa: E402
from measure import cpu_seconds, pct  # noqa: E402

H11_SERVER = """
import h11, trio
BODY = b'{"ok": true}'
HEAD = [("content-type", "application/json"), ("content-length", str(len(BODY)))]
async def handle(stream):
    conn = h11.Connection(h11.SERVER)
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await stream.receive_some(65536)
            if not data:
                return
            conn.receive_data(data)
        elif isinstance(event, h11.EndOfMessage):
            await stream.send_all(conn.send(h11.Response(status_code=200, headers=HEAD)) + conn.send(h11.Data(data=BODY))
                                  + conn.send(h11.EndOfMessage()))
            conn.start_next_cycle()
        elif isinstance(event, h11.ConnectionClosed):
            return
async def main():
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1", backlog=1024)
    print(listeners[0].socket.getsockname()[1], flush=True)
    await trio.serve_listeners(handle, listeners)
trio.run(main)
"""

QUART_SERVER = """
import socket, trio
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio
app = QuartTrio("stack")
@app.get("/")
async def root():
    return {"ok": True}
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
config = Config(); config.bind = [f"127.0.0.1:{port}"]; config.backlog = 1024; config.keep_alive_timeout = 75
config.accesslog = None; config.errorlog = None
print(port, flush=True)
trio.run(serve, app, config)
"""

SERVERS = {"stdlib threaded (the floor's)": FLOOR_SERVER, "h11 on trio": H11_SERVER,
           "hypercorn + quart-trio": QUART_SERVER}


def start(code: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    return proc, f"http://127.0.0.1:{int(proc.stdout.readline())}/"


async def measure(servers: dict, n: int, bursts: int) -> dict:
    async with httpx.AsyncClient() as side:
        floor = await round_trips(side, servers["stdlib threaded (the floor's)"][1], 300)
    out = {"floor_p50": pct(floor, 50), "servers": {}}
    async with clients("http://127.0.0.1", n) as cs:
        for name, (proc, url) in servers.items():
            async def burst(into: list) -> None:
                async def get(c) -> None:
                    t0 = time.perf_counter()
                    (await c.get(url)).raise_for_status()
                    into.append(time.perf_counter() - t0)
                async with trio.open_nursery() as nursery:
                    for c in cs:
                        nursery.start_soon(get, c)
            await burst([])  # every client's connection open first, as a phone's is
            lat: list[float] = []
            server0, client0 = cpu_seconds(proc.pid), time.process_time()
            for _ in range(bursts):
                await burst(lat)
            requests = n * bursts
            out["servers"][name] = {"p50": pct(lat, 50), "p99": pct(lat, 99),
                                    "server_cpu": (cpu_seconds(proc.pid) - server0) / requests,
                                    "client_cpu": (time.process_time() - client0) / requests}
    out["load"] = os.getloadavg()[0]
    return out


def run(n: int = 100, bursts: int = 10) -> dict:
    started = {}
    try:
        for name, code in SERVERS.items():
            started[name] = start(code)
        return trio.run(measure, started, n, bursts)
    finally:
        for proc, _ in started.values():
            proc.kill()
            proc.wait()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clients", type=int, default=100, help="requests at once, one httpx client each")
    p.add_argument("--bursts", type=int, default=10)
    args = p.parse_args()
    if args.clients < 1 or args.bursts < 1:
        p.error("--clients and --bursts must be at least 1")
    r = run(args.clients, args.bursts)
    f = r["floor_p50"]
    print(f"floor: one httpx round trip to the standard library's server, p50 {f * 1000:.2f} ms")
    for name, s in r["servers"].items():
        print(f"{name:30} {args.clients} at once: p50 {s['p50'] * 1000:6.1f} ms ({s['p50'] / f:4.0f}x floor)  "
              f"p99 {s['p99'] * 1000:6.1f} ms ({s['p99'] / f:4.0f}x floor); CPU per request: server "
              f"{s['server_cpu'] * 1000:.3f} ms, the clients {s['client_cpu'] * 1000:.3f} ms")
    print(f"load average (1 min): {r['load']:.2f} on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
