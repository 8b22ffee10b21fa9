"""The bridge's agent client: per-request cost, and how long a dripping agent can hold a read (issue 9.9).

    .venv/bin/python bench/agent_client.py [--n 500] [--every 3]

Two real agent processes on Unix sockets: a fixture agent (`nohistory`) and a `drip` agent that
answers a closed-list read one byte every `--every` seconds. Prints:
- the floor: a hand-written HTTP/1.1 `GET /v1/state` on one kept-alive socket (same agent, same run);
- `AgentClient.request("GET", "/v1/state")` p50/p99 and its ratio to the floor (the total deadline
  and the per-connection peer check are on this path);
- a closed-list read from the drip agent: when it ends, and the state read's latency while five
  such reads are in flight.
Run it with another checkout's code first on the path to compare (PYTHONPATH=/path/to/checkout).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
if str(REPO) not in sys.path:
    sys.path.append(str(REPO))

from measure import pct  # noqa: E402

from collie.bridge import client as client_mod  # noqa: E402
from collie.bridge.client import AgentClient, AgentUnreachable  # noqa: E402

THROUGH = hasattr(client_mod, "THROUGH_LANES")  # an older checkout has no lanes
from collie.crew.config import AgentConfig  # noqa: E402


def start(kind: str, sock: Path, *extra: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # the agents always come from this checkout
    proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", kind, "--socket", str(sock), *extra], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().startswith("listening"), kind
    return proc


async def floor(sock: Path, n: int) -> list[float]:
    stream = await trio.open_unix_socket(str(sock))
    request = b"GET /v1/state HTTP/1.1\r\nhost: a\r\naccept: application/json\r\n\r\n"
    out = []
    async with stream:
        for _ in range(n):
            t = time.perf_counter()
            await stream.send_all(request)
            data = b""
            while b"\r\n\r\n" not in data:
                data += await stream.receive_some(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(v for k, _, v in (line.partition(b":") for line in head.split(b"\r\n")[1:])
                              if k.strip().lower() == b"content-length"))
            while len(body) < length:
                body += await stream.receive_some(65536)
            out.append(time.perf_counter() - t)
    return out


async def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=500)
    p.add_argument("--every", type=float, default=3.0)
    args = p.parse_args()
    base = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    os.chmod(base, 0o700)
    agents = [start("nohistory", base / "a.sock"), start("drip", base / "d.sock", "--every", str(args.every))]
    try:
        cpu0 = time.process_time()
        raw = await floor(base / "a.sock", args.n)
        raw_cpu = (time.process_time() - cpu0) / args.n
        client = AgentClient(AgentConfig("a", socket=str(base / "a.sock")))
        lat = []
        for _ in range(20):
            await client.request("GET", "/v1/state")
        cpu0 = time.process_time()
        for _ in range(args.n):
            t = time.perf_counter()
            await client.request("GET", "/v1/state")
            lat.append(time.perf_counter() - t)
        client_cpu = (time.process_time() - cpu0) / args.n
        await client.aclose()
        f50, f99 = pct(raw, 50) * 1000, pct(raw, 99) * 1000
        c50, c99 = pct(lat, 50) * 1000, pct(lat, 99) * 1000
        print(f"floor (raw HTTP on one socket, n={args.n}): p50 {f50:.3f} ms  p99 {f99:.3f} ms; "
              f"client CPU {raw_cpu * 1000:.3f} ms per request")
        print(f"AgentClient GET /v1/state (n={args.n}): p50 {c50:.3f} ms ({c50 / f50:.1f}x floor)  "
              f"p99 {c99:.3f} ms ({c99 / f50:.1f}x floor); client CPU {client_cpu * 1000:.3f} ms per request "
              f"({client_cpu / raw_cpu:.1f}x floor)")

        drip = AgentClient(AgentConfig("d", socket=str(base / "d.sock")))
        ended: list[tuple[float, str]] = []
        state_lat: list[float] = []
        t0 = time.perf_counter()
        with trio.move_on_after(300):
            async with trio.open_nursery() as n:
                async def closed_list():
                    try:
                        await drip.request("GET", "/v1/conversations?state=closed&limit=100", timeout=10.0,
                                           **({"through": True} if THROUGH else {}))
                        ended.append((time.perf_counter() - t0, "answered"))
                    except AgentUnreachable as exc:
                        ended.append((time.perf_counter() - t0, exc.reason))

                for _ in range(5):
                    n.start_soon(closed_list)
                await trio.sleep(1)
                for _ in range(5):
                    t = time.perf_counter()
                    try:
                        await drip.request("GET", "/v1/state", timeout=5.0)
                        state_lat.append(time.perf_counter() - t)
                    except AgentUnreachable as exc:
                        state_lat.append(float("nan"))
                        print("state read failed during the drips:", exc.reason)
        await drip.aclose()
        print(f"5 closed-list reads from an agent dripping 1 byte / {args.every:g} s (deadline 10 s): "
              f"ended after {', '.join(f'{t:.2f} s ({r})' for t, r in sorted(ended)) or 'more than 300 s'}")
        ok = [x for x in state_lat if x == x]
        failed = f", {len(state_lat) - len(ok)} of {len(state_lat)} failed" if len(ok) < len(state_lat) else ""
        print(f"state reads during them: median {statistics.median(ok) * 1000 if ok else float('nan'):.2f} ms, "
              f"max {max(ok) * 1000 if ok else float('nan'):.2f} ms{failed}")
    finally:
        for proc in agents:
            proc.kill()
            proc.wait()
            proc.stdout.close()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    trio.run(main)
