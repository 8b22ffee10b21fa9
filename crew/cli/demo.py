"""`collie demo`: the whole product on this machine, in one command, until Ctrl-C.

It makes one private temporary folder and runs, as separate processes, a lead and two members
(`workshop`, and `laptop`, which sleeps and wakes), each with its own config and state folders
(`COLLIE_CONFIG_DIR`, `COLLIE_STATE_DIR`) and scripted fixture agents on Unix sockets. It wires
them the way a person would, with the real CLI: `collie durable attach`, `collie crew invite`,
`collie crew join`, `collie serve`. The demo launches the agents and the bridges but is neither:
an agent refuses writes from the process that launched it (features T3), and here the bridges that
write to the agents are the demo's siblings of those agents, never their parents.

Guarantees: nothing is written to the user's own config or state folders (every child gets its
own); every process it started is ended within 5 s of Ctrl-C (SIGTERM, then SIGKILL after 3 s);
the temporary folder is removed. Tokens are never printed: the `curl` line reads the lead's local
credential from its file.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import attrs
import httpx

from crew import control
from crew.demo import Event, SleepCycle, Summary, clip, push_event
from crew.errors import CollieError, NotRunningError

STOP_GRACE = 3.0  # seconds a child gets after SIGTERM before SIGKILL (features: Ctrl-C ends all within 5 s)
START_TIMEOUT = 60.0
POLL = 1.0
MAX_PAGES = 20  # pages of chat items one check reads at most


@attrs.frozen
class MachineSpec:
    machine: str  # the name the lead's API uses: "local" for the lead, else the member's label
    folder: str
    agents: tuple[tuple[str, str], ...]  # (name, fixture kind)


LEAD = MachineSpec("local", "lead", (("desk", "deployer"), ("home", "starters")))
WORKSHOP = MachineSpec("workshop", "workshop", (("forms", "asker"), ("nightly", "progress")))
LAPTOP = MachineSpec("laptop", "laptop", (("scribe", "streamer"),))
SLEEPER = LAPTOP
SLEEPER_AGENT, SLEEPER_CONVERSATION = "scribe", "chat"


def register(sub) -> None:
    p = sub.add_parser("demo", help="see it work: a lead, two members and scripted agents on this machine",
                       description="Run a lead and two members with scripted agents on this machine, in a "
                                   "temporary folder, until Ctrl-C. Your own config and state are not touched.")
    p.add_argument("--plain", action="store_true", help="print plain progress lines instead of a live screen")
    p.add_argument("--awake", type=float, default=15.0, metavar="SECONDS",
                   help="how long the laptop member stays awake between naps (default 15)")
    p.add_argument("--asleep", type=float, default=10.0, metavar="SECONDS",
                   help="how long each nap lasts; work sent meanwhile waits in the inbox (default 10)")
    p.set_defaults(run=run)


class Machine:
    """One demo machine: its folders, its environment, and the `collie` command run as it."""

    def __init__(self, base: Path, spec: MachineSpec) -> None:
        self.spec = spec
        root = base / spec.folder
        self.config_dir, self.state_dir, self.run_dir = root / "cfg", root / "state", root / "run"
        for d in (root, self.run_dir):
            d.mkdir(mode=0o700, parents=True, exist_ok=True)
        package_root = str(Path(__file__).resolve().parents[2])
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        self.env.update(COLLIE_CONFIG_DIR=str(self.config_dir), COLLIE_STATE_DIR=str(self.state_dir),
                        PYTHONPATH=os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p))
        self.log_dir = root
        self.bridge: subprocess.Popen | None = None

    def socket(self, agent: str) -> Path:
        return self.run_dir / f"{agent}.sock"

    def collie(self, *argv: str, env: dict | None = None) -> str:
        """Run the real `collie` command as this machine; its output, or CollieError with its last line."""
        done = subprocess.run([sys.executable, "-m", "crew.cli.main", *argv], env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
        if done.returncode != 0:
            last = (done.stderr.strip() or done.stdout.strip() or f"exit {done.returncode}").splitlines()[-1]
            raise CollieError(f"`collie {' '.join(argv[:2])}` failed on {self.spec.machine}: {clip(last, 300)}")
        return done.stdout

    def ping(self) -> dict | None:
        try:
            return control.call(self.state_dir / "bridge.sock", "ping", timeout=1.0)
        except (NotRunningError, CollieError):
            return None


def _end_with_the_demo() -> None:
    """In the child, before exec: on Linux, get SIGTERM if the demo dies without cleaning up (kill -9)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class Processes:
    """Every long-running process the demo started; `stop_all` ends them all within 5 s."""

    def __init__(self) -> None:
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, argv: list[str], env: dict, log: Path) -> subprocess.Popen:
        with open(log, "ab") as out:
            # a session of its own: a terminal's Ctrl-C reaches only the demo, which stops them in order
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True,
                                    preexec_fn=_end_with_the_demo if sys.platform == "linux" else None)
        self.procs.append((name, proc))
        return proc

    def stop(self, proc: subprocess.Popen, grace: float = STOP_GRACE) -> None:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(grace)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs = [(n, p) for n, p in self.procs if p is not proc]

    def stop_all(self) -> int:
        live = [p for _n, p in self.procs if p.poll() is None]
        for p in live:
            p.terminate()
        deadline = time.monotonic() + STOP_GRACE
        for p in live:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
        for _n, p in self.procs:
            p.wait()
        self.procs = []
        return len(live)


def wait_until(what: str, fn, timeout: float = START_TIMEOUT, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value:
            return value
        if time.monotonic() > deadline:
            raise CollieError(f"the demo gave up waiting for {what} after {timeout:g} s")
        time.sleep(every)


def tail(path: Path, n: int = 5) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])
    except OSError:
        return ""


class Demo:
    def __init__(self, base: Path, args, out) -> None:
        self.args = args
        self.out = out  # a Screen: prints progress, draws the summary
        self.procs = Processes()
        self.machines = {spec.machine: Machine(base, spec) for spec in (LEAD, WORKSHOP, LAPTOP)}
        self.lead = self.machines[LEAD.machine]
        self.address = ""
        self.client: httpx.Client | None = None
        self.events: list[Event] = []
        self.asleep: set[str] = set()
        self.waiting_to_run: list[str] = []  # request ids sent while the sleeper slept, not yet run
        self.naps = 0
        self.items_since = 0  # how far check_ran has read the sleeper's chat

    # --- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        agents = []
        for m in self.machines.values():
            for name, kind in m.spec.agents:
                log = m.log_dir / f"agent-{name}.log"
                proc = self.procs.start(f"{m.spec.machine}/{name}", [sys.executable, "-m", "fixtures", kind,
                                                                     "--socket", str(m.socket(name))], m.env, log)
                agents.append((m, name, proc, log))
        self.out.progress(f"started {len(agents)} fixture agents")
        for m, name, proc, log in agents:
            def listening(proc=proc, log=log, name=name):
                if proc.poll() is not None:
                    raise CollieError(f"the fixture agent {name} exited {proc.returncode}: {clip(tail(log), 300)}")
                try:
                    return "listening " in log.read_text(errors="replace")
                except FileNotFoundError:
                    return False
            wait_until(f"agent {name}", listening)
            m.collie("durable", "attach", name, "--socket", str(m.socket(name)))
        self.out.progress("attached them with `collie durable attach`")
        pong = self.serve(self.lead, "--port", "0")
        self.address = pong["address"]
        token = (self.lead.state_dir / "api-token").read_text().strip()
        self.client = httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=5.0)
        self.out.progress(f"lead serving the phone API on {self.address}")
        for spec in (WORKSHOP, LAPTOP):
            m = self.machines[spec.machine]
            self.lead.collie("crew", "invite", "--label", spec.machine)
            member_token = (self.lead.state_dir / "invites" / f"{spec.machine}.token").read_text().strip()
            m.collie("crew", "join", self.address.replace("http://", "ws://"), "--token-env", "COLLIE_CREW_TOKEN",
                     "--label", spec.machine, env={"COLLIE_CREW_TOKEN": member_token})
            self.serve(m)
            self.out.progress(f"{spec.machine} joined with `collie crew invite` / `collie crew join`")
        wait_until("every agent to be ready on the lead", self.all_ready)
        self.send_to_sleeper("Hello from collie demo: please summarise the crew.")

    def serve(self, m: Machine, *options: str) -> dict:
        m.bridge = self.procs.start(f"{m.spec.machine}/bridge", [sys.executable, "-m", "crew.cli.main", "serve",
                                                                 *options], m.env, m.log_dir / "serve.log")

        def up():
            if m.bridge.poll() is not None:
                raise CollieError(f"the {m.spec.machine} bridge exited {m.bridge.returncode}: "
                                  f"{clip(tail(m.log_dir / 'serve.log'), 300)}")
            return m.ping()
        return wait_until(f"the {m.spec.machine} bridge", up)

    def get(self, path: str) -> dict | None:
        try:
            got = self.client.get(path)
            return got.json() if got.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def all_ready(self) -> bool:
        dash = self.get("/api/dashboard") or {}
        ready = {(s["machine"], a["name"]) for s in dash.get("sections", []) for a in s.get("agents", [])
                 if a.get("status") == "ready"}
        return all((m.spec.machine, name) in ready for m in self.machines.values() for name, _k in m.spec.agents)

    # --- what the demo does while it runs -------------------------------------------------------
    def event(self, what: str, target: str, outcome: str, text: str = "", request_id: str = "") -> None:
        self.events = push_event(self.events, Event(time.strftime("%H:%M:%S"), what, target, outcome, clip(text),
                                                    request_id))
        rid = f" {request_id}" if request_id else ""
        self.out.progress(f"{what}{rid} {target}: {outcome}" + (f" ({clip(text)})" if text else ""))

    def send_to_sleeper(self, text: str) -> dict:
        pane = self.get(f"/api/agents/{SLEEPER.machine}/{SLEEPER_AGENT}/conversations/{SLEEPER_CONVERSATION}") or {}
        rid = str(uuid.uuid4())
        try:
            got = self.client.post("/api/send", json={
                "request_id": rid, "machine": SLEEPER.machine, "agent": SLEEPER_AGENT,
                "conversation": SLEEPER_CONVERSATION, "text": text, "turn": pane.get("turn", 0)}).json()
        except (httpx.HTTPError, ValueError) as exc:
            got = {"outcome": "error", "text": str(exc)}
        target = f"{SLEEPER.machine}/{SLEEPER_AGENT}"
        self.event("send", target, got.get("outcome", "?"), got.get("text") or got.get("reason") or "",
                   request_id=rid)
        return {**got, "request_id": rid}

    def sleep(self) -> None:
        m = self.machines[SLEEPER.machine]
        self.procs.stop(m.bridge)
        self.asleep.add(SLEEPER.machine)
        self.event("sleep", SLEEPER.machine, "asleep", "its bridge stopped, like a closed lid")

        def offline():
            dash = self.get("/api/dashboard") or {}
            return any(s.get("machine") == SLEEPER.machine and s.get("online") is False for s in dash.get("sections", []))
        wait_until(f"the lead to see {SLEEPER.machine} offline", offline, timeout=45)
        self.naps += 1
        got = self.send_to_sleeper(f"Note {self.naps}: written while the laptop slept; stream it back when it wakes.")
        if got.get("outcome") == "queued":
            self.waiting_to_run.append(got["request_id"])

    def wake(self) -> None:
        m = self.machines[SLEEPER.machine]
        self.serve(m)
        self.asleep.discard(SLEEPER.machine)
        self.event("wake", SLEEPER.machine, "awake", "its bridge started again; the lead resends its inbox")

    def check_ran(self) -> None:
        """Follow the sleeper's chat from where the last read ended; a user item naming a request id ran it."""
        if not self.waiting_to_run or SLEEPER.machine in self.asleep:
            return
        ran = set()
        for _page in range(MAX_PAGES):
            got = self.get(f"/api/agents/{SLEEPER.machine}/{SLEEPER_AGENT}/conversations/{SLEEPER_CONVERSATION}"
                           f"/items?since={self.items_since}")
            if not got:
                break
            items = [i for i in got.get("items", []) if isinstance(i, dict)]
            ran |= {i.get("request_id") for i in items if i.get("kind") == "user"}
            seqs = [i["seq"] for i in items if isinstance(i.get("seq"), int)]
            # the route's own cursor where it gives one, else the highest position seen
            self.items_since = got["next_since"] if isinstance(got.get("next_since"), int) else max(
                [self.items_since, *seqs])
            if not got.get("more"):
                break
        for rid in [r for r in self.waiting_to_run if r in ran]:
            self.waiting_to_run.remove(rid)
            self.event("ran", f"{SLEEPER.machine}/{SLEEPER_AGENT}", "done", "it ran after the laptop woke",
                       request_id=rid)

    def summary(self) -> Summary:
        dash = self.get("/api/dashboard") or {}
        asks, inbox = [], []
        for s in dash.get("sections", []):
            machine = s.get("machine")
            for a in s.get("agents", []):
                name = a.get("name")
                agent_path = f"/api/agents/{quote(str(machine), safe='')}/{quote(str(name), safe='')}"
                if a.get("waiting"):
                    convs = self.get(f"{agent_path}/conversations") or {}
                    for row in convs.get("open", []):
                        if not row.get("waiting"):
                            continue
                        pane = self.get(f"{agent_path}/conversations/{quote(str(row.get('id')), safe='')}") or {}
                        ask = pane.get("ask") or {}
                        kind = ask.get("kind") or "?"
                        if kind == "choice" and ask.get("multiple"):
                            kind = "choice (many)"
                        asks.append({"machine": machine, "agent": name, "conversation": row.get("id"), "kind": kind,
                                     "title": ask.get("title") or row.get("line")})
                for item in (self.get(f"{agent_path}/inbox") or {}).get("items", []):
                    inbox.append({**item, "machine": machine, "agent": name})
        return Summary.from_api(dash, asks, inbox, machines=list(self.machines), asleep=self.asleep)

    def run(self) -> None:
        self.start()
        self.out.ready(self.address, self.lead.state_dir / "api-token")
        cycle = SleepCycle.starting(time.monotonic(), awake=self.args.awake, asleep=self.args.asleep)
        while True:
            step = cycle.step(time.monotonic())
            if step == "sleep":
                self.sleep()
            elif step == "wake":
                self.wake()
            self.check_ran()
            self.out.draw(self.summary(), self.events)
            time.sleep(POLL)


# --- drawing ----------------------------------------------------------------------------------------
def curl_line(address: str, token_file: Path) -> str:
    return f'curl -s -H "Authorization: Bearer $(cat {token_file})" {address}/api/dashboard'


class PlainScreen:
    """No TTY, or --plain: progress lines, and a summary line each time it changes."""

    def __init__(self, stream=None) -> None:
        self.stream = stream or sys.stdout
        self.last = ""

    def progress(self, text: str) -> None:
        print(f"[demo] {text}", file=self.stream, flush=True)

    def ready(self, address: str, token_file: Path) -> None:
        self.progress(f"ready: phone API on {address} (Ctrl-C stops everything)")
        self.progress(f"try: {curl_line(address, token_file)}")

    def draw(self, summary: Summary, _events) -> None:
        line = summary.plain_line()
        if line != self.last:
            self.last = line
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        pass


class RichScreen:
    """A TTY: the live one-screen summary (machines, agents, open asks, inbox, last receipts)."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console()
        self.live = None
        self.head = None

    def progress(self, text: str) -> None:
        if self.live is None:
            self.console.print(f"[dim]\\[demo][/dim] {escape(text)}")

    def ready(self, address: str, token_file: Path) -> None:
        from rich.live import Live
        from rich.text import Text

        self.head = Text.assemble(("Collie demo", "bold"), " — phone API on ", (address, "cyan"),
                                  "   (Ctrl-C stops everything)")
        self.console.print(f"[dim]\\[demo][/dim] ready: phone API on {escape(address)}")
        # printed once, above the live screen, soft-wrapped: a copy of a wrapped line stays one command
        self.console.print(Text.assemble(("[demo] try: ", "dim"), curl_line(address, token_file)), soft_wrap=True)
        self.live = Live(console=self.console, auto_refresh=False, transient=True)
        self.live.start()

    def draw(self, summary: Summary, events) -> None:
        if self.live is not None:
            self.live.update(render(self.head, summary, events), refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def render(head, summary: Summary, events):
    from rich.console import Group
    from rich.table import Table

    fixed = {"at": 8, "outcome": 7, "state": 8, "role": 6}  # short columns that must never be cut

    def table(title: str, *columns: str) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", box=None, pad_edge=False, expand=False)
        for c in columns:
            t.add_column(c, style="dim" if c in ("machine", "at") else None, no_wrap=True, overflow="ellipsis",
                         min_width=fixed.get(c))
        return t

    machines = table("Machines", "machine", "role", "state")
    colour = {"online": "green", "asleep": "yellow", "offline": "red"}
    for m in summary.machines:
        machines.add_row(m.machine, m.role, f"[{colour.get(m.state, 'white')}]{m.state}[/]")
    agents = table("Agents", "machine", "agent", "runtime", "status", "open", "waiting")
    for a in summary.agents:
        agents.add_row(a.machine, escape(a.name), escape(a.line2), escape(a.status),
                       "" if a.open is None else str(a.open), "" if not a.waiting else f"[magenta]{a.waiting}[/]")
    asks = table(f"Open asks ({len(summary.asks)})", "machine", "agent", "conversation", "kind", "title")
    for a in summary.asks[:8]:
        asks.add_row(a.machine, escape(a.agent), escape(a.conversation), escape(a.kind), escape(a.title))
    if len(summary.asks) > 8:
        asks.add_row("", "", "", "", f"… and {len(summary.asks) - 8} more")
    inbox = table("Inbox", "machine", "agent", "state", "what the sender sees")
    for i in summary.inbox[:4]:
        inbox.add_row(i.machine, escape(i.agent), escape(i.state), escape(i.text))
    if len(summary.inbox) > 4:
        inbox.add_row("", "", "", f"… and {len(summary.inbox) - 4} more")
    if not summary.inbox:
        inbox.add_row("", "", "empty", "work sent while laptop sleeps waits here")
    receipts = table("Last receipts", "at", "what", "target", "outcome", "text")
    for e in events:
        receipts.add_row(e.at, escape(e.label), escape(e.target), escape(e.outcome), escape(e.text))
    return Group(head, "", machines, "", agents, "", asks, "", inbox, "", receipts)


# --- the verb ----------------------------------------------------------------------------------------
def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


def run(args, _paths) -> int:
    screen = PlainScreen() if args.plain or not sys.stdout.isatty() else RichScreen()
    base = Path(tempfile.mkdtemp(prefix="collie-demo-", dir="/tmp" if os.path.isdir("/tmp") else None))
    os.chmod(base, 0o700)
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    demo = Demo(base, args, screen)
    status = 0
    try:
        demo.run()
    except KeyboardInterrupt:
        status = 130
    except CollieError as exc:
        screen.close()
        print(f"collie: {exc}", file=sys.stderr)
        status = exc.exit_status
    finally:
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        screen.close()
        if demo.client is not None:
            demo.client.close()
        n = demo.procs.stop_all()
        shutil.rmtree(base, ignore_errors=True)
        print(f"[demo] stopped {n} processes and removed {base}", flush=True)
        for s, h in old.items():
            signal.signal(s, h)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0 if status == 130 else status
