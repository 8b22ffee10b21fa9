"""Kept-alive connections reused right after a live channel closed, over TLS (issue 11).

    .venv/bin/python bench/tls_reuse.py [--rounds 2000] [--workers 8] [--http2] [--burn 2]
    .venv/bin/python bench/tls_reuse.py --threads [--rounds 100] [--unsafe-close]

A real `collie serve --tls` lead (generated certificate) with one fixture agent.

Default: each worker (trio, httpx) owns one HTTP client and repeats: GET the dashboard (kept alive),
open the live channel viewing the agent's conversation, read its snapshot, close the channel, and at
once GET the dashboard and the pane again. With HTTP/1.1 closing the channel mid-body ends its
connection; with `--http2` everything shares one connection (httpx never resets an abandoned stream, so
the lead keeps those channels until the connection closes; a browser resets it: see
tests/system/test_pairing.py::test_http2_phone_closing_its_live_channel_drops_the_viewing_and_keeps_the_connection).

`--threads`: the tests' way (tests/system/test_pairing.py `Stream`): the channel read by a thread with a sync
client, closed from the main thread, then a new connection's requests, and a view change that makes
the lead write on the channel it has not yet seen closed. `--unsafe-close` closes the socket under the
blocked reading thread as `Stream.close` did before (issue 11's "TLS keep-alive defect").

`--burn N` runs N busy processes beside the lead (load). Prints how many rounds failed and how (a cut
body, a TLS error, a timeout).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import trio

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collie.crew import control  # noqa: E402
from collie.crew.paths import Paths  # noqa: E402


def burn(stop) -> None:
    while not stop.is_set():
        sum(i * i for i in range(10_000))


def describe(exc: BaseException) -> str:
    chain = []
    while exc is not None and len(chain) < 4:
        chain.append(f"{type(exc).__name__}: {str(exc)[:90]}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(chain)


async def worker(base: str, ctx: ssl.SSLContext, token: str, rounds: int, http2: bool, failures: collections.Counter,
                 done: list) -> None:
    headers = {"authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, verify=ctx, http2=http2, headers=headers, timeout=10) as c:
        for _ in range(rounds):
            try:
                r = await c.get("/api/dashboard")
                r.raise_for_status()
                async with c.stream("GET", "/api/events?agent=deployer&conversation=deploy") as s:
                    async for line in s.aiter_lines():
                        if line.startswith("event: snapshot"):
                            break
                for path in ("/api/dashboard", "/api/agents/local/deployer/conversations/deploy"):
                    r = await c.get(path)
                    r.raise_for_status()
                    r.json()
                done[0] += 1
            except Exception as exc:  # noqa: BLE001 — counted and shown
                failures[describe(exc)] += 1


def thread_rounds(args, base: str, ctx: ssl.SSLContext, token: str) -> tuple[collections.Counter, int, float]:
    from tests.system.test_pairing import Stream

    failures: collections.Counter = collections.Counter()
    done = 0
    headers = {"authorization": f"Bearer {token}"}
    t0 = time.perf_counter()
    with httpx.Client(base_url=base, verify=ctx, headers=headers, timeout=10) as c:
        c.verify_context = ctx
        for _ in range(args.rounds):
            try:
                s = Stream(c, "/api/events?agent=deployer&conversation=deploy")
                channel = s.wait(lambda e: e[0] == "hello")[2]["channel"]
                s.wait(lambda e: e[0] == "snapshot")
                if args.unsafe_close:
                    s.ctx.__exit__(None, None, None)
                    s.own.close()
                else:
                    s.close()
                with httpx.Client(base_url=base, verify=ctx, headers=headers, timeout=10) as fresh:
                    fresh.get("/api/dashboard").json()
                    fresh.post(f"/api/events/{channel}/view", json={"agent": "deployer", "conversation": "deploy"})
                    fresh.get("/api/agents/local/deployer/conversations/deploy").json()
                c.get("/api/dashboard").json()
                done += 1
            except Exception as exc:  # noqa: BLE001 — counted and shown
                failures[describe(exc)] += 1
    return failures, done, time.perf_counter() - t0


async def main_async(args, base: str, ctx: ssl.SSLContext, token: str) -> tuple[collections.Counter, int, float]:
    failures: collections.Counter = collections.Counter()
    done = [0]
    per = max(1, args.rounds // args.workers)
    t0 = time.perf_counter()
    async with trio.open_nursery() as n:
        for _ in range(args.workers):
            n.start_soon(worker, base, ctx, token, per, args.http2, failures, done)
    return failures, done[0], time.perf_counter() - t0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2000)
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--http2", action="store_true")
    p.add_argument("--burn", type=int, default=0)
    p.add_argument("--threads", action="store_true", help="the tests' thread-read live channel (one round at a time)")
    p.add_argument("--unsafe-close", action="store_true", help="with --threads: close under the reading thread")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctls") as tmp:
        tmp = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        env.update(COLLIE_CONFIG_DIR=str(tmp / "config"), COLLIE_STATE_DIR=str(tmp / "state"))
        paths = Paths(config_dir=tmp / "config", state_dir=tmp / "state")
        sock = tmp / "dep" / "a.sock"
        agent = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "deployer", "--socket", str(sock)], cwd=REPO,
                                 env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        agent.stdout.readline()
        subprocess.run([sys.executable, "-m", "collie.crew.cli.main", "durable", "attach", "deployer", "--socket", str(sock)],
                       cwd=REPO, env=env, check=True, capture_output=True)
        lead = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve", "--port", "0", "--tls"], cwd=REPO,
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        stop = multiprocessing.Event()
        burners = [multiprocessing.Process(target=burn, args=(stop,)) for _ in range(args.burn)]
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    address = control.call(paths.control_socket, "ping", timeout=1)["address"]
                    break
                except Exception:  # noqa: BLE001 — not up yet
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
            port = int(address.rsplit(":", 1)[1])
            ctx = ssl.create_default_context(cafile=str(paths.state_dir / "tls" / "cert.pem"))
            token = (paths.state_dir / "api-token").read_text().strip()
            for b in burners:
                b.start()
            if args.threads:
                failures, done, took = thread_rounds(args, f"https://127.0.0.1:{port}", ctx, token)
            else:
                failures, done, took = trio.run(main_async, args, f"https://127.0.0.1:{port}", ctx, token)
            stats = control.call(paths.control_socket, "live")
        finally:
            stop.set()
            for b in burners:
                b.join()
            lead.terminate()
            lead.wait(timeout=15)
            agent.kill()
            agent.wait()
            agent.stdout.close()
    mode = ("a reading thread, " + ("unsafe close" if args.unsafe_close else "shut down, joined, closed")
            if args.threads else f"{args.workers} workers")
    print(f"{'HTTP/2' if args.http2 else 'HTTP/1.1'} over TLS, {mode}, burn {args.burn}, "
          f"load {os.getloadavg()[0]:.1f}: {done} rounds ok in {took:.1f} s, {sum(failures.values())} failed")
    for what, n in failures.most_common():
        print(f"  {n:5d}  {what}")
    print(f"  lead after: {stats['channels']} live channels open, viewers {stats['viewers']}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
