"""Small helpers the benchmarks share: a process's CPU time and RSS from /proc, percentiles, the lead's own
round trip (a floor), and a phone paired in Chromium."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

LINK = re.compile(r"(https?://\S+/pair#\S+)")


def round_trips(client, n: int = 200) -> list[float]:
    """`n` loopback round trips to the lead's `/healthz` over `client` (an httpx client on the lead), in seconds:
    the floor of a latency the lead answers."""
    floor = []
    for _ in range(n):
        t0 = time.perf_counter()
        client.get("/healthz")
        floor.append(time.perf_counter() - t0)
    return floor


def pair_link(crew) -> str:
    """A fresh pairing link of `crew`'s lead (`collie pair`)."""
    return LINK.search(crew.lead.collie("pair", "--no-qr").stdout).group(1)


def paired_phone(browser, link: str, viewport: dict, **context) -> tuple:
    """A new browser context (`viewport`, more options in `context`) paired from `link` (its cookie, its keys),
    and its page, on the dashboard drawn."""
    ctx = browser.new_context(viewport=viewport, **context)
    page = ctx.new_page()
    page.goto(link)
    page.wait_for_selector("main section")
    return ctx, page


def check_writable(parser, path, what: str) -> None:
    """Stop with a usage error (exit 2) before any work when `path` cannot be written: a benchmark or a
    campaign that finds out only at its end loses everything it measured."""
    try:
        with open(path, "a"):
            pass
    except OSError as exc:
        parser.error(f"cannot write {what} to {path}: {exc.strerror or exc}")


def cpu_seconds(pid: int) -> float:
    """utime + stime of `pid`, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(values, p: float) -> float:
    """The p-th percentile (nearest rank) of `values`."""
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


# --- the floor: an httpx round trip to a trivial server, measured in the same run ----------------------
FLOOR_SERVER = """
import sys, trio
from functools import partial
from hypercorn.config import Config
from hypercorn.trio import serve
from quart_trio import QuartTrio
app = QuartTrio("floor")
@app.get("/")
async def root():
    return {"ok": True}
async def main():
    cfg = Config()
    cfg.bind = [sys.argv[1]]
    cfg.accesslog = cfg.errorlog = None
    async with trio.open_nursery() as n:
        binds = await n.start(partial(serve, app, cfg))
        print(binds[0], flush=True)
trio.run(main)
"""


class Floor:
    """A trivial server (the same stack as the lead: hypercorn + quart-trio, one route answering a small
    JSON object) in its own process, and an httpx client timing round trips to it over the same
    transport as the figure it stands beside: TCP loopback (`bind="127.0.0.1:0"`) or a Unix socket
    (`bind="unix:/path"`)."""

    def __init__(self, bind: str = "127.0.0.1:0") -> None:
        import subprocess
        import sys

        self.bind = bind
        self.proc = subprocess.Popen([sys.executable, "-c", FLOOR_SERVER, bind], stdout=subprocess.PIPE, text=True)
        self.address = self.proc.stdout.readline().strip()

    def client(self):
        import httpx

        if self.bind.startswith("unix:"):
            return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(uds=self.bind[5:]), base_url="http://localhost")
        return httpx.AsyncClient(base_url=self.address)

    async def measure(self, n: int = 300) -> dict:
        """Round-trip times (s) and the client's CPU per round trip (s), after a warm-up."""
        import time

        rtts = []
        async with self.client() as c:
            for _ in range(20):
                await c.get("/")
            cpu0 = time.process_time()
            for _ in range(n):
                t0 = time.perf_counter()
                await c.get("/")
                rtts.append(time.perf_counter() - t0)
            cpu = (time.process_time() - cpu0) / n
        return {"p50": pct(rtts, 50), "p99": pct(rtts, 99), "cpu": cpu, "n": n}

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} cores)"


def ms(seconds: float, floor: float | None = None) -> str:
    """`12.3 ms (8.2x floor)`: a latency with its ratio to the floor beside it."""
    text = f"{seconds * 1000:.1f} ms"
    return f"{text} ({seconds / floor:.1f}x floor)" if floor else text


# --- a lead in a private folder (the benchmarks that run `python -m collie.lead` with their own agents) ------
def lead_folder(base, sources) -> tuple:
    """cfg/ with a sources.json naming each durable agent (`sources`: name -> socket path), state/ and
    run/ (0700) inside `base` (made 0700); returns (cfg, state, run, env) — env for the lead and agents."""
    import json

    base = Path(base)
    os.chmod(base, 0o700)
    cfg, state, run = base / "cfg", base / "state", base / "run"
    for d in (cfg, run):
        d.mkdir(mode=0o700, exist_ok=True)
    (cfg / "sources.json").write_text(json.dumps([{"name": n, "kind": "durable", "socket": str(s)}
                                                  for n, s in sources.items()]))
    os.chmod(cfg / "sources.json", 0o600)
    repo = Path(__file__).resolve().parent.parent
    env = {**os.environ, "COLLIE_CONFIG_DIR": str(cfg), "COLLIE_STATE_DIR": str(state), "PYTHONPATH": str(repo)}
    return cfg, state, run, env


def start_lead(env: dict, state, repo=None, stderr=None):
    """`python -m collie.lead --port 0` from the checkout `repo` (this one by default); returns (process, pong)
    once its control socket answers."""
    import subprocess
    import sys
    import time

    from collie.crew import control
    from collie.crew.errors import NotRunningError

    repo = Path(repo or Path(__file__).resolve().parent.parent).resolve()
    lead = subprocess.Popen([sys.executable, "-m", "collie.lead", "--port", "0"], env={**env, "PYTHONPATH": str(repo)},
                            cwd=repo, stdout=subprocess.DEVNULL, stderr=stderr or subprocess.DEVNULL)
    while True:
        try:
            return lead, control.call(Path(state) / "bridge.sock", "ping", timeout=2)
        except NotRunningError:
            if lead.poll() is not None:
                raise RuntimeError(f"the lead exited {lead.returncode}") from None
            time.sleep(0.1)


# --- many SDK agents in one process (the agent hosts the benchmarks run with `python -c`) ------------
async def run_agents(folder: str, n: int, convs: int, word: str, *, item: str = "item {i}",
                     name_hosts: bool = False, **open_kw) -> None:
    """Runs the SDK agents a00, a01, ... (n of them) in this process, each on `folder/<name>.sock` with
    conversations c000, c001, ... (`convs` of them, each holding one reply: `item` with its number) in
    one workspace, and prints `word` on a line of its own once every one of them is ready. `open_kw`
    goes to open_collie; `name_hosts` gives each agent its own name as its host name."""
    import trio

    from collie.crew.sdk import open_collie

    left = [n]

    async def one(name: str) -> None:
        kw = {"host_name": name, **open_kw} if name_hosts else open_kw
        async with open_collie(socket=f"{folder}/{name}.sock", **kw) as collie:
            ws = collie.workspace("w", title="Work").tab("t")
            for i in range(convs):
                ws.pane(f"c{i:03d}", title=f"Conversation {i}").reply(item.format(i=i))
            collie.ready()
            left[0] -= 1
            if left[0] == 0:
                print(word, flush=True)
            await trio.sleep_forever()
    async with trio.open_nursery() as nursery:
        for a in range(n):
            nursery.start_soon(one, f"a{a:02d}")


def runs_from(doc: str, argv: list[str] | None, what: str) -> int:
    """`--runs N` (default 3, at least 1) of a benchmark script whose docstring is `doc`."""
    import argparse

    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help=f"{what} (default 3)")
    runs = p.parse_args(argv).runs
    if runs < 1:
        p.error(f"--runs {runs} is not at least 1")
    return runs
