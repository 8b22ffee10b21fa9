"""The ACP adapter's added latency per streamed chunk (issue 14).

    .venv/bin/python bench/acp_latency.py [--chunks 300] [--every 0.02]

Three paths, each measured the same way in the same run — the time from a chunk being sent to a reader
of the durable wire seeing it (the reader long-polls `GET /v1/state?wait=` and then reads the items,
as a bridge does with `watch`); every chunk carries `time.monotonic_ns()` from when it was sent:

1. `acp`: `collie acp run -- python tests/acp_agent.py`; the ACP agent streams `agent_message_chunk`s.
2. `sdk floor`: a plain SDK agent appending the same chunks to a reply (no ACP, no child process).
3. `pipe floor`: a loopback round trip through two pipes and a `cat` child (the physical cost of
   the extra stdio hop the adapter adds).

The adapter's added latency is (1) − (2); the ratio column is against the SDK floor. It includes the
ACP agent's own cost after it stamped the chunk (the package's pydantic serialisation, asyncio); the
last line separates the adapter's own CPU per chunk (framing, JSON, the ACP model, the mapping).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure import pct  # noqa: E402

SDK_AGENT = """
import sys, time, trio
from collie.crew.sdk import open_collie
async def turn(pane, text):
    n, every = (int(x) if i == 0 else float(x) for i, x in enumerate(text.split()[1:3]))
    reply = pane.reply("", final=False)
    for _ in range(n):
        reply.append(f"{time.monotonic_ns()} ")
        await trio.sleep(every)
    reply.finish()
async def main():
    async with open_collie(socket=sys.argv[1], caps=["send", "watch", "history"], on_send=turn) as c:
        c.conversation("session-1", title="floor")
        c.ready()
        print("listening", c.address, flush=True)
        await trio.sleep_forever()
trio.run(main)
"""


def detached(cmd: list[str], out: Path, env: dict) -> int:
    """Start `cmd` through a shell that exits at once, so that this process is not the agent's parent
    (the SDK refuses writes from its own parent, features T3); returns the pid."""
    shell = " ".join(f"'{c}'" for c in cmd) + f" > {out} 2> {out}.err & echo $!"
    return int(subprocess.run(["sh", "-c", shell], env=env, capture_output=True, text=True, check=True).stdout)


def wait_listening(out: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.exists() and "listening" in out.read_text():
            return
        time.sleep(0.05)
    raise SystemExit(f"the agent did not start: {out.read_text() if out.exists() else ''}"
                     f"{Path(str(out) + '.err').read_text() if Path(str(out) + '.err').exists() else ''}")


def measure(sock: str, text: str, n: int) -> list[float]:
    """Send `text`; follow the reply through state long-polls and item reads; ms per chunk."""
    seen_ns: dict[int, int] = {}
    with httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://agent", timeout=60) as c:
        state = c.get("/v1/state").json()
        conv = state["conversations"][0]
        since = conv["items_rev"]
        etag = None
        r = c.post(f"/v1/conversations/{conv['id']}/send", json={"request_id": str(uuid.uuid4()), "text": text,
                                                                  "turn": conv["turn"]})
        assert r.json()["outcome"] == "sent", r.text
        deadline = time.monotonic() + 120
        while len(seen_ns) < n and time.monotonic() < deadline:
            headers = {"if-none-match": etag} if etag else {}
            s = c.get("/v1/state?wait=30", headers=headers)
            etag = s.headers.get("etag")
            if s.status_code == 304:
                continue
            page = c.get(f"/v1/conversations/{conv['id']}/items?since={since}").json()
            now = time.monotonic_ns()
            for item in page["items"]:
                if item["kind"] != "reply":
                    continue
                for word in item["text"].split():
                    if word.isdigit():
                        seen_ns.setdefault(int(word), now)
    return [(seen - sent) / 1e6 for sent, seen in seen_ns.items()]


def pipe_floor(rounds: int) -> list[float]:
    cat = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    out = []
    line = b'{"jsonrpc":"2.0","method":"session/update","params":{"sessionId":"s","update":{}}}\n'
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        cat.stdin.write(line)
        got = b""
        while not got.endswith(b"\n"):
            got += cat.stdout.read(65536)
        out.append((time.perf_counter_ns() - t0) / 1e6)
    cat.stdin.close()
    cat.wait()
    return out


def adapter_cpu(rounds: int) -> float:
    """µs of the adapter's own work per chunk, in process: framing, JSON, the ACP model, the mapping."""
    from acp import schema

    from collie.crew.acp.framing import Decoder, encode
    from collie.crew.acp.view import SessionView

    class Handle:
        def append(self, text):
            pass

    class Pane:
        def post(self, kind, **fields):
            return Handle()

    view, decoder = SessionView(Pane()), Decoder()
    line = encode({"jsonrpc": "2.0", "method": "session/update", "params": {"sessionId": "s", "update": {
        "sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "1234567890123 "}}}})
    t0 = time.perf_counter_ns()
    for _ in range(rounds):
        for event in decoder.feed(line):
            view.apply(schema.SessionNotification.model_validate(event.body["params"]).update)
    return (time.perf_counter_ns() - t0) / rounds / 1e3


def row(name: str, ms: list[float], floor: float) -> str:
    p50, p99 = statistics.median(ms), pct(ms, 99)
    return f"| {name} | {len(ms)} | {p50:.2f} ms | {p99:.2f} ms | {p50 / floor:.2f}× |"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--chunks", type=int, default=300)
    ap.add_argument("--every", type=float, default=0.02, help="seconds between two chunks")
    args = ap.parse_args()
    run = Path(tempfile.mkdtemp(prefix="acpb", dir="/tmp"))
    os.chmod(run, 0o700)
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLLIE_STATE_DIR": str(run / "state"),
           "ACP_TEST_STATE": str(run / "agent.json")}
    (run / "work").mkdir()
    pids = []
    try:
        acp_sock, sdk_sock = str(run / "a" / "app.sock"), str(run / "s" / "app.sock")
        pids.append(detached([sys.executable, "-m", "collie.crew.cli.main", "acp", "run", "--name", "bench", "--cwd",
                              str(run / "work"), "--socket", acp_sock, "--", sys.executable,
                              str(REPO / "tests" / "acp_agent.py")], run / "acp.out", env))
        pids.append(detached([sys.executable, "-c", SDK_AGENT, sdk_sock], run / "sdk.out", env))
        wait_listening(run / "acp.out")
        wait_listening(run / "sdk.out")
        time.sleep(1)
        pipe = pipe_floor(2000)
        acp = measure(acp_sock, f"bench {args.chunks} {args.every}", args.chunks)
        sdk = measure(sdk_sock, f"bench {args.chunks} {args.every}", args.chunks)
        floor = statistics.median(sdk)
        print(f"chunk sent → visible to a `watch` reader, {args.chunks} chunks per path")
        print("| path | chunks | p50 | p99 | ratio to SDK floor |")
        print("|---|---|---|---|---|")
        print(row("acp (collie acp run + tests/acp_agent.py)", acp, floor))
        print(row("sdk floor (SDK agent appending chunks)", sdk, floor))
        print(f"| pipe floor (loopback round trip through `cat`) | {len(pipe)} | {statistics.median(pipe):.3f} ms "
              f"| {pct(pipe, 99):.3f} ms | — |")
        print(f"adapter's added latency per chunk: p50 {statistics.median(acp) - floor:+.2f} ms "
              f"(of which the adapter's own CPU: {adapter_cpu(20000):.1f} µs; the rest is the agent's side "
              f"(asyncio, pydantic) and the extra process hop)")
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        shutil.rmtree(run, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
