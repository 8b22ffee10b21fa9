"""What a browser's whole cookie jar costs the lead per request (issue 42.3). Prints figures; asserts nothing.

    .venv/bin/python bench/cookie_jar.py [--requests 300] [--cookies 180]

The lead's own app and server (`collie.lead.door.http`) on loopback, one kept-alive HTTP/1.1 connection (httpx):
`GET /healthz` with a jar of `--cookies` cookies of 4,096 bytes (Chromium's most for one host) and the
phone's own cookie, beside the same request with only the phone's cookie — the floor, measured in the same
run. The difference is what reading and sorting the jar costs (h11's parse of the head, `collie.lead.door.jar`), and
what a client sending such a jar again and again can make the lead spend.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402


def serve_in_thread() -> tuple[int, object, trio.Event, threading.Thread]:
    from collie.lead.door.http import create_app, serve_http

    ready: list = []
    stop_box: list = []

    async def main() -> None:
        stop = trio.Event()
        stop_box.append((trio.lowlevel.current_trio_token(), stop))
        async with trio.open_nursery() as n:
            bound = await n.start(serve_http, create_app(), ["127.0.0.1:0"], stop)
            ready.append(int(bound[0].rsplit(":", 1)[1]))

    t = threading.Thread(target=trio.run, args=(main,), daemon=True)
    t.start()
    while not ready:
        time.sleep(0.01)
    return ready[0], *stop_box[0], t


def timed(client: httpx.Client, headers: dict, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = client.get("/healthz", headers=headers)
        out.append(time.perf_counter() - t0)
        assert r.status_code == 200, r.status_code
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--cookies", type=int, default=180)
    args = ap.parse_args()
    port, token, stop, thread = serve_in_thread()
    own = "collie_device=" + "A" * 43
    jar = "; ".join([*(f"bomb{i:03d}={'x' * (4096 - 7)}" for i in range(args.cookies)), own])
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        timed(client, {"cookie": own}, 20)  # warm up
        rounds = {"floor (own cookie only)": [], f"jar of {args.cookies} x 4 KB ({len(jar) // 1024} KiB)": []}
        for _ in range(args.requests // 20):  # interleaved, so load on the machine falls on both alike
            rounds["floor (own cookie only)"] += timed(client, {"cookie": own}, 20)
            rounds[f"jar of {args.cookies} x 4 KB ({len(jar) // 1024} KiB)"] += timed(client, {"cookie": jar}, 20)
        cleared = len(client.get("/healthz", headers={"cookie": jar}).headers.get_list("set-cookie"))
    trio.from_thread.run_sync(stop.set, trio_token=token)
    thread.join(10)
    floor = sorted(rounds["floor (own cookie only)"])
    print("| request | n | p50 | p99 | p50 over the floor |")
    print("|---|---|---|---|---|")
    for name, samples in rounds.items():
        s = sorted(samples)
        print(f"| {name} | {len(s)} | {pct(s, 50) * 1000:.2f} ms | {pct(s, 99) * 1000:.2f} ms | "
              f"+{(pct(s, 50) - pct(floor, 50)) * 1000:.2f} ms |")
    print(f"Set-Cookie lines clearing the jar in one answer: {cleared}")


if __name__ == "__main__":
    main()
