"""`collie demo`: the whole product on this machine, in one command, until Ctrl-C.

It makes one private temporary folder and runs, as separate processes, a lead and two members
(`workshop`, and `laptop`, which sleeps and wakes), each with its own config and state folders
(`COLLIE_CONFIG_DIR`, `COLLIE_STATE_DIR`) and scripted fixture agents on Unix sockets. It wires
them the way a person would, with the real CLI: `collie durable attach`, `collie crew invite`,
`collie crew join`, `collie serve`. The demo launches the agents and the bridges but is neither:
an agent refuses writes from the process that launched it (features T3), and here the bridges that
write to the agents are the demo's siblings of those agents, never their parents.

Once ready it prints a one-time pairing link for the lead: the only secret it ever prints, valid 10
minutes and once. On a terminal its QR code then stays on the screen, not redrawn, until a key press
or a phone pairs; the live view (on the alternate screen, so no redraw is left in the scrollback)
keeps the link at its top while it is valid. `p` in the live view, or `collie demo pair` in
another terminal, makes another. With `--lan` the lead serves on this machine's network address,
over TLS with a certificate from its own authority, and the demo prints the trust link (`/trust`) and the
authority's SHA-256 fingerprint to compare on the phone; without it nothing listens beyond loopback.

The lead keeps one port for the demo's whole life (the demo picks a free one and passes it as
`--port`), so a restart of the lead (`r` in the live view, `collie demo restart`, or `collie restart`
with the demo's folders) comes back on the same address and the members and phones reconnect by
themselves (features V1). A bridge that stops answering, restarts or exits is a line in the live
view; one that exited is started again. None of that ends the demo.

Guarantees: nothing is written to the user's own config or state folders (every child gets its
own); every process it started is ended within 5 s of Ctrl-C (SIGTERM, then SIGKILL after 3 s);
the temporary folder is removed. Tokens other than the pairing link are never printed: the `curl`
line reads the lead's local credential from its file.
"""

from __future__ import annotations

import errno
import ipaddress
import json
import os
import select
import shlex
import shutil
import signal
import socket
import ssl
import stat
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import attrs
import httpx

from collie.crew import control
from collie.crew.demo import Event, SleepCycle, Summary, clip, push_event
from collie.crew.errors import CollieError, NotRunningError, UsageError
from collie.crew.logs import printable
from collie.crew.paths import Paths

STOP_GRACE = 3.0  # seconds a child gets after SIGTERM before SIGKILL (features: Ctrl-C ends all within 5 s)
START_TIMEOUT = 60.0
RESTART_EVERY = 5.0  # seconds between two attempts to start a bridge that exited
POLL = 1.0
MAX_PAGES = 20  # pages of chat items one check reads at most
DEMO_ROOT = "/tmp"  # where the demo's folder is made, and where `collie demo pair` looks for it
DEMO_PREFIX = "collie-demo-"
MARK = "demo.json"  # in the demo's folder: the demo's pid, so another terminal can find a live demo
AWAKE, ASLEEP = 15.0, 10.0  # the laptop's default phases, seconds
MIN_PHASE, MAX_PHASE = 1.0, 86400.0
KEYS_HELP = "p: new pairing link · r: restart the lead · Ctrl-C: stop"


@attrs.frozen
class MachineSpec:
    machine: str  # the name the lead's API uses: "local" for the lead, else the member's label
    folder: str
    agents: tuple[tuple[str, str], ...]  # (name, fixture kind)


LEAD = MachineSpec("local", "lead", (("desk", "deployer"), ("home", "starters")))
WORKSHOP = MachineSpec("workshop", "workshop", (("forms", "asker"), ("nightly", "nightly")))
LAPTOP = MachineSpec("laptop", "laptop", (("scribe", "streamer"),))
SLEEPER = LAPTOP
SLEEPER_AGENT, SLEEPER_CONVERSATION = "scribe", "chat"


def register(sub) -> None:
    p = sub.add_parser("demo", help="see it work: a lead, two members and scripted agents on this machine",
                       description="Run a lead and two members with scripted agents on this machine, in a "
                                   "temporary folder, until Ctrl-C. Your own config and state are not touched. "
                                   "While it runs, `collie demo pair` (another terminal) prints a new pairing "
                                   "link and `collie demo restart` restarts its lead.")
    p.add_argument("action", nargs="?", choices=("pair", "restart"),
                   help="with a demo running: `pair` prints a new one-time pairing link for its lead; "
                        "`restart` restarts its lead (same address; members and phones reconnect)")
    p.add_argument("--plain", action="store_true", help="print plain progress lines instead of a live screen")
    p.add_argument("--lan", nargs="?", const="auto", metavar="ADDRESS",
                   help="serve the lead on this machine's network address (or ADDRESS), over TLS with a "
                        "certificate from the lead's own authority (trust it once at /trust), so a phone on the "
                        "same network can open it")
    p.add_argument("--no-qr", action="store_true", help="print the pairing link without its QR code")
    p.add_argument("--awake", type=seconds, default=None, metavar="SECONDS",
                   help=f"how long the laptop member stays awake between naps ({MIN_PHASE:g} to {MAX_PHASE:g}; "
                        f"default {AWAKE:g})")
    p.add_argument("--asleep", type=seconds, default=None, metavar="SECONDS",
                   help=f"how long each nap lasts; work sent meanwhile waits in the inbox ({MIN_PHASE:g} to "
                        f"{MAX_PHASE:g}; default {ASLEEP:g})")
    p.set_defaults(run=run)


def seconds(text: str) -> float:
    """A nap or an awake phase: a number of seconds within MIN_PHASE..MAX_PHASE (argparse: exit 2)."""
    import argparse
    import math

    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not MIN_PHASE <= value <= MAX_PHASE:  # also NaN and infinities
        raise argparse.ArgumentTypeError(f"{clip(text, 40)!r} is not a number of seconds from {MIN_PHASE:g} "
                                         f"to {MAX_PHASE:g}")
    return value


# what each action can be given: a flag another action takes is refused, not ignored
START_ONLY = {"lan": "--lan", "plain": "--plain", "awake": "--awake", "asleep": "--asleep"}
ACTION_FLAGS = {"pair": ("no_qr",), "restart": ()}


def check_flags(args) -> None:
    """`demo pair --lan`, `demo restart --no-qr`, …: a flag that does not apply to the action is an error."""
    if args.action is None:
        return
    given = [flag for name, flag in {**START_ONLY, "no_qr": "--no-qr"}.items()
             if getattr(args, name, None) not in (None, False) and name not in ACTION_FLAGS[args.action]]
    if not given:
        return
    cmd = own_command()
    why = {"pair": "it prints a link for the running demo, on the address the demo was started with",
           "restart": "it restarts the running demo's lead as it was started"}[args.action]
    hint = f" (to pair over the network, stop the demo and start it with `{cmd} demo --lan`)" if "--lan" in given else ""
    raise UsageError(f"`demo {args.action}` does not take {' or '.join(given)}: {why}{hint}")


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
        self.options: tuple[str, ...] = ()  # what `collie serve` was given: the same at every start
        self.started: float | None = None  # the running bridge's start time (its ping's `started`)
        self.down = False  # the bridge did not answer its last ping
        self.exited = False  # the bridge exited and the demo has not started it again yet
        self.retry_at = 0.0

    def socket(self, agent: str) -> Path:
        return self.run_dir / f"{agent}.sock"

    def collie(self, *argv: str, env: dict | None = None) -> str:
        """Run the real `collie` command as this machine; its output, or CollieError with its last line."""
        done = subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *argv], env={**self.env, **(env or {})},
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


# --- where the lead listens -------------------------------------------------------------------------
SIOCGIFADDR = 0x8915


def lan_address() -> str | None:
    """This machine's IPv4 address on its network: the source of its default route, else the first
    non-loopback interface address. None when it has only loopback."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: a UDP connect picks the route's source address, sends nothing
            addr = s.getsockname()[0]
        if not ipaddress.ip_address(addr).is_loopback and addr != "0.0.0.0":
            return addr
    except OSError:
        pass
    try:
        import fcntl

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for _index, name in socket.if_nameindex():
                try:
                    packed = fcntl.ioctl(s.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
                except OSError:
                    continue  # no IPv4 address on it
                addr = socket.inet_ntoa(packed[20:24])
                if not ipaddress.ip_address(addr).is_loopback:
                    return addr
    except (OSError, ImportError):
        pass
    return None


def lead_host(lan: str | None) -> str:
    """The address the demo's lead binds: loopback, or with --lan this machine's network address."""
    if lan is None:
        return "127.0.0.1"
    if lan == "auto":
        found = lan_address()
        if found is None:
            raise UsageError("--lan: this machine has no network address besides loopback; connect it to a "
                             "network, or give the address with --lan ADDRESS")
        return found
    try:
        addr = ipaddress.ip_address(lan.strip("[]"))
    except ValueError:
        raise UsageError(f"--lan {clip(lan, 60)} is not an IP address: give this machine's network address "
                         "(like 192.168.1.20), or --lan alone to use the one it has") from None
    if addr.is_loopback or addr.is_unspecified:
        raise UsageError(f"--lan {addr} is not a network address: give one a phone can reach (or leave --lan out "
                         "to stay on loopback)")
    return str(addr)


def free_port(host: str) -> int:
    """A port free on `host` now; the lead is given it as --port, so every restart binds it again."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            return s.getsockname()[1]
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            raise UsageError(f"--lan {host} is an IP address, but not an address of this machine: give one it "
                             "has, or --lan alone to use the one it has") from None
        raise UsageError(f"cannot listen on {host}: {(exc.strerror or str(exc)).lower()}") from None


def write_private(path: Path, text: str) -> None:
    """A file of the demo's own, readable by this user only (0600), as the lead wants its `.env`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)


def own_command() -> str:
    """How to run this `collie` again, as the user can type it: `collie` when that is on PATH."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "collie":
        on_path = shutil.which("collie")
        try:
            if on_path and os.path.samefile(on_path, argv0):
                return "collie"
        except OSError:
            pass
        if os.path.exists(argv0):
            return shlex.quote(os.path.abspath(argv0))
    return f"{shlex.quote(sys.executable)} -m collie.crew.cli.main"


class Demo:
    def __init__(self, base: Path, args, out) -> None:
        self.args = args
        self.out = out  # a Screen: prints progress, draws the summary
        self.base = base
        self.procs = Processes()
        self.machines = {spec.machine: Machine(base, spec) for spec in (LEAD, WORKSHOP, LAPTOP)}
        self.lead = self.machines[LEAD.machine]
        self.host = lead_host(getattr(args, "lan", None))
        self.address = ""
        self.client: httpx.Client | None = None
        self.events: list[Event] = []
        self.asleep: set[str] = set()
        self.note_due = False  # the sleeper is asleep and the note for its inbox is not sent yet
        self.waiting_to_run: list[str] = []  # request ids sent while the sleeper slept, not yet run
        self.naps = 0
        self.items_since = 0  # how far check_ran has read the sleeper's chat
        self.agents: dict[tuple[str, str], tuple[str, subprocess.Popen, float]] = {}  # (kind, process, retry at)
        self.link: tuple[float | None, set[str]] | None = None  # the shown link: expiry, phones paired before it

    # --- start-up -----------------------------------------------------------------------------
    def start(self) -> None:
        agents = []
        for m in self.machines.values():
            for name, kind in m.spec.agents:
                log = m.log_dir / f"agent-{name}.log"
                proc = self.start_agent(m, name, kind)
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
        # a used or expired link tells the phone what gives another here (the lead reads its .env at every start)
        write_private(self.lead.config_dir / ".env", f'COLLIE_PAIR_COMMAND="{own_command()} demo pair"\n')
        for attempt in range(3):  # the free port can be taken between our look and the lead's bind
            try:
                pong = self.serve(self.lead, "--host", self.host, "--port", str(free_port(self.host)))
                break
            except CollieError as exc:
                if "address already in use" not in str(exc) or attempt == 2:
                    raise
        self.address = pong["address"]
        token = (self.lead.state_dir / "api-token").read_text().strip()
        verify: ssl.SSLContext | bool = True
        pin: list[str] = []
        if self.address.startswith("https://"):
            authority = self.lead.state_dir / "tls" / "ca.pem"  # the lead's own certificate authority (collie.lead.door.tls)
            verify = ssl.create_default_context(cafile=str(authority))
            if pong.get("authority"):  # the members trust it by the invite's fingerprint, as any member does
                pin = ["--ca-sha256", pong["authority"]]
        self.client = httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=5.0,
                                   verify=verify)
        self.out.progress(f"lead serving the phone API on {self.address}")
        for spec in (WORKSHOP, LAPTOP):
            m = self.machines[spec.machine]
            self.lead.collie("crew", "invite", "--label", spec.machine)
            member_token = (self.lead.state_dir / "invites" / f"{spec.machine}.token").read_text().strip()
            m.collie("crew", "join", self.address.replace("https://", "wss://").replace("http://", "ws://"),
                     *pin, "--token-env", "COLLIE_CREW_TOKEN", "--label", spec.machine,
                     env={"COLLIE_CREW_TOKEN": member_token})
            self.serve(m)
            self.out.progress(f"{spec.machine} joined with `collie crew invite` / `collie crew join`")
        wait_until("every agent to be ready on the lead", self.all_ready)
        self.send_to_sleeper("Hello from collie demo: please summarise the crew.")

    def start_agent(self, m: Machine, name: str, kind: str) -> subprocess.Popen:
        proc = self.procs.start(f"{m.spec.machine}/{name}", [sys.executable, "-m", "collie.fixtures", kind,
                                                             "--socket", str(m.socket(name))], m.env,
                                m.log_dir / f"agent-{name}.log")
        self.agents[(m.spec.machine, name)] = (kind, proc, 0.0)
        return proc

    def serve(self, m: Machine, *options: str, timeout: float = START_TIMEOUT) -> dict:
        if options:
            m.options = options
        m.bridge = self.procs.start(f"{m.spec.machine}/bridge", [sys.executable, "-m", "collie.crew.cli.main", "serve",
                                                                 *m.options], m.env, m.log_dir / "serve.log")

        def up():
            if m.bridge.poll() is not None:
                raise CollieError(f"the {m.spec.machine} bridge exited {m.bridge.returncode}: "
                                  f"{clip(tail(m.log_dir / 'serve.log'), 300)}")
            return m.ping()
        pong = wait_until(f"the {m.spec.machine} bridge", up, timeout=timeout)
        m.started, m.down, m.exited = pong.get("started"), False, False
        return pong

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

    # --- pairing and restarting the lead ----------------------------------------------------------
    def pairing(self) -> dict:
        """A new one-time pairing link from the lead (its code is the only secret the demo prints)."""
        return control.call(self.lead.state_dir / "bridge.sock", "pair")

    def show_pairing(self) -> None:
        try:
            before = self.paired_phones()
            got = self.pairing()
        except CollieError as exc:
            self.event("pair", "local", "not now", str(exc))
            return
        self.link = (got.get("expires_at"), before)
        self.out.pairing(got, qr=not self.args.no_qr and self.out.is_terminal, more=more_hint(self.out.keys))

    def paired_phones(self) -> set[str]:
        """The ids of the phones paired with the lead now (raises CollieError while it does not answer)."""
        got = control.call(self.lead.state_dir / "bridge.sock", "devices", timeout=2.0)
        return {d.get("id") for d in got.get("devices", []) if isinstance(d, dict)}

    def check_link(self) -> None:
        """The shown link ends when a phone pairs or it expires: off the live view's top, the QR screen closes."""
        if self.link is None:
            return
        expires, before = self.link
        try:
            new = [d for d in control.call(self.lead.state_dir / "bridge.sock", "devices", timeout=2.0)["devices"]
                   if isinstance(d, dict) and d.get("id") not in before]
        except (CollieError, KeyError, TypeError):
            new = []  # the lead is restarting: look again next time
        if new:
            self.link = None
            name = clip(new[-1].get("name"), 40)
            self.event("pair", "local", "paired", f"a phone paired as {name}")
            self.out.link_done(f"A phone paired as {name}. p: a link for another one.")
        elif isinstance(expires, (int, float)) and time.time() >= expires:
            self.link = None
            self.event("pair", "local", "expired", f"the pairing link expired; `{own_command()} demo pair` makes another")
            self.out.link_done("The pairing link expired. p: a new one.")

    def restart_lead(self) -> None:
        """`r` in the live view: what `collie demo restart` asks for. Its return is seen by `watch`."""
        try:
            control.call(self.lead.state_dir / "bridge.sock", "restart")
            self.event("restart", "local", "asked", "the lead restarts on the same address")
        except CollieError as exc:
            self.event("restart", "local", "refused", str(exc))

    def key(self, ch: str) -> None:
        if ch in "pP":
            self.show_pairing()
        elif ch in "rR":
            self.out.hide_qr()
            self.restart_lead()
        elif self.out.qr_shown:  # any other key leaves the QR screen for the live view
            self.out.hide_qr()

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
        self.note_due = True
        self.event("sleep", SLEEPER.machine, "asleep", "its bridge stopped, like a closed lid")

    def send_note(self) -> None:
        """Once the lead shows the sleeper offline, send it a note: the lead keeps it in the inbox."""
        if not self.note_due:
            return
        dash = self.get("/api/dashboard") or {}
        if not any(s.get("machine") == SLEEPER.machine and s.get("online") is False for s in dash.get("sections", [])):
            return
        self.note_due = False
        self.naps += 1
        got = self.send_to_sleeper(f"Note {self.naps}: written while the laptop slept; stream it back when it wakes.")
        if got.get("outcome") == "queued":
            self.waiting_to_run.append(got["request_id"])

    def wake(self) -> None:
        m = self.machines[SLEEPER.machine]
        self.note_due = False
        try:
            self.serve(m, timeout=20.0)
        except CollieError as exc:
            m.exited, m.retry_at = True, time.monotonic() + RESTART_EVERY
            self.event("wake", SLEEPER.machine, "failed", str(exc))
        else:
            self.event("wake", SLEEPER.machine, "awake", "its bridge started again; the lead resends its inbox")
        self.asleep.discard(SLEEPER.machine)

    def watch(self, now: float) -> None:
        """Say what became of each bridge: not answering, restarted (and where), exited (start it again)."""
        for m in self.machines.values():
            name = m.spec.machine
            if name in self.asleep or m.bridge is None:
                continue
            if m.bridge.poll() is not None:
                if not m.exited:
                    m.exited, m.retry_at = True, now
                    self.event("exit", name, f"exited {m.bridge.returncode}", "the demo starts it again; "
                               f"log: {m.log_dir / 'serve.log'}")
                if now >= m.retry_at:
                    m.retry_at = now + RESTART_EVERY
                    try:
                        pong = self.serve(m, timeout=20.0)
                    except CollieError as exc:
                        self.event("start", name, "failed", str(exc))
                    else:
                        self.event("start", name, "back", self.where(m, pong))
                continue
            pong = m.ping()
            if pong is None:
                if not m.down:
                    m.down = True
                    self.event("down", name, "silent", "its bridge does not answer (restarting?)")
                continue
            if pong.get("started") != m.started:
                m.started, m.down = pong.get("started"), False
                self.event("restart", name, "back", self.where(m, pong))
            elif m.down:
                m.down = False
                self.event("up", name, "answers", "its bridge answers again")

    def watch_agents(self, now: float) -> None:
        """A fixture agent that exited is started again on its socket; its bridge reconnects by itself."""
        for (machine, name), (kind, proc, retry_at) in list(self.agents.items()):
            if proc.poll() is None or now < retry_at:
                continue
            self.event("exit", f"{machine}/{name}", f"exited {proc.returncode}", "the demo starts the agent again")
            self.procs.procs = [(n, p) for n, p in self.procs.procs if p is not proc]
            self.start_agent(self.machines[machine], name, kind)
            self.agents[(machine, name)] = (kind, self.agents[(machine, name)][1], now + RESTART_EVERY)

    def where(self, m: Machine, pong: dict) -> str:
        if m is not self.lead:
            return "it reconnects to the lead by itself"
        address = pong.get("address") or "?"
        if address == self.address:
            return f"same address {address}; all reconnect"
        return f"on {address}, not {self.address}"

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
        silent = {m.spec.machine for m in self.machines.values() if m.down or m.exited}
        return Summary.from_api(dash, asks, inbox, machines=list(self.machines), asleep=self.asleep, silent=silent)

    def run(self) -> None:
        self.start()
        (self.base / MARK).write_text(json.dumps({"pid": os.getpid(), "address": self.address}))
        self.out.ready(self.address, self.lead.state_dir / "api-token")
        self.show_pairing()
        self.out.live_view()
        awake = AWAKE if self.args.awake is None else self.args.awake
        asleep = ASLEEP if self.args.asleep is None else self.args.asleep
        cycle = SleepCycle.starting(time.monotonic(), awake=awake, asleep=asleep)
        while True:
            now = time.monotonic()
            step = cycle.step(now)
            if step == "sleep":
                self.sleep()
            elif step == "wake":
                self.wake()
            self.watch(now)
            self.watch_agents(now)
            self.send_note()
            self.check_ran()
            self.check_link()
            self.out.draw(self.summary(), self.events)
            deadline = now + POLL
            while (left := deadline - time.monotonic()) > 0:
                for ch in self.out.keys.wait(left):
                    self.key(ch)


def more_hint(keys: Keys) -> str:
    press = "press p here, or " if keys.on else ""
    return f"Another link: {press}run `{own_command()} demo pair` in another terminal."


# --- finding the running demo from another terminal -----------------------------------------------
def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def running_demos(root: str | None = None) -> list[Path]:
    """This user's live demos' folders, newest first: private folders named collie-demo-* whose
    demo.json names a live process."""
    found = []
    try:
        entries = list(Path(root or DEMO_ROOT).glob(f"{DEMO_PREFIX}*"))
    except OSError:
        return []
    for d in entries:
        try:
            st = d.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
                continue
            mark = json.loads((d / MARK).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(mark, dict) and _alive(mark.get("pid")):
            found.append((st.st_mtime, d))
    return [d for _t, d in sorted(found, reverse=True)]


def lead_paths_of(folder: Path) -> Paths:
    return Paths(config_dir=folder / LEAD.folder / "cfg", state_dir=folder / LEAD.folder / "state")


def find_demo() -> Paths:
    demos = running_demos()
    if not demos:
        raise NotRunningError(f"no demo is running: start one with `{own_command()} demo`")
    if len(demos) > 1:
        print(f"({len(demos)} demos are running; this is the newest, in {demos[0]})", file=sys.stderr)
    return lead_paths_of(demos[0])


def pairing_lines(got: dict, more: str, command: str = "collie") -> list[str]:
    """What to do with a pairing link: the link, the certificate to compare, where it opens, another one."""
    lines = ["Pair a phone: open this link on it (valid 10 minutes, works once):", f"  {printable(got['link'])}"]
    if got.get("trust"):
        lines += [f"First time on this phone? Trust the lead once, for notifications and answers from the lock "
                  f"screen: {printable(got['trust'])}",
                  f"The lead's certificate authority (SHA-256): {printable(got['fingerprint'])}; trust it only if the "
                  "phone shows this fingerprint. (Tapping past the browser's warning opens the page too, but then "
                  "the phone gets no notifications.)"]
    elif got.get("fingerprint"):
        lines += [f"The lead's certificate (SHA-256): {printable(got['fingerprint'])}",
                  "The phone's browser warns that the certificate is not trusted: open the certificate's details "
                  "there and go on only if it shows this fingerprint."]
    if got.get("loopback"):
        lines.append("This address opens in a browser on this machine only; for a phone on your network, "
                     f"start the demo with `{command} demo --lan`.")
    lines.append(more)
    return lines


def pair_with_running(args) -> int:
    paths = find_demo()
    got = control.call(paths.control_socket, "pair")
    if not args.no_qr and sys.stdout.isatty():
        from collie.crew.cli.pair_cmd import qr_text

        print(qr_text(printable(got["link"])))
    for line in pairing_lines(got, f"Another link: run `{own_command()} demo pair` again.", own_command()):
        print(line)
    return 0


def restart_running(_args) -> int:
    from collie.crew.cli.restart import restart_bridge

    paths = find_demo()
    before = control.call(paths.control_socket, "ping")
    restart_bridge(paths)
    after = control.call(paths.control_socket, "ping")
    same = "the same address" if after.get("address") == before.get("address") else f"not {before.get('address')}"
    print(f"the demo's lead is back on {after.get('address')} ({same}); its members and paired phones reconnect "
          "by themselves")
    return 0


# --- drawing ----------------------------------------------------------------------------------------
def curl_line(address: str, token_file: Path) -> str:
    cacert = f"--cacert {token_file.parent / 'tls' / 'ca.pem'} " if address.startswith("https://") else ""
    return f'curl -s {cacert}-H "Authorization: Bearer $(cat {token_file})" {address}/api/dashboard'


class Keys:
    """Single key presses from the terminal the demo runs in (cbreak mode: Ctrl-C still interrupts).

    Off when stdin is not a terminal: `wait` then only sleeps. `close` gives the terminal back as it was.
    """

    def __init__(self, stream=None, *, on: bool = True) -> None:
        self.fd: int | None = None
        self.saved = None
        stream = sys.stdin if stream is None else stream
        try:
            if on and stream is not None and stream.isatty():
                import termios
                import tty

                fd = stream.fileno()
                if os.tcgetpgrp(fd) != os.getpgrp():
                    return  # started in the background (`collie demo &`): changing the terminal would stop us
                self.saved = termios.tcgetattr(fd)
                tty.setcbreak(fd)
                self.fd = fd
        except Exception:  # no terminal to read keys from (termios.error, OSError, …): the demo runs without
            self.fd = None

    @property
    def on(self) -> bool:
        return self.fd is not None

    def wait(self, timeout: float) -> str:
        """The keys pressed within `timeout` seconds (returns at the first)."""
        if self.fd is None:
            time.sleep(max(0.0, timeout))
            return ""
        try:
            ready, _w, _x = select.select([self.fd], [], [], max(0.0, timeout))
            data = os.read(self.fd, 64) if ready else b""
        except InterruptedError:
            return ""
        except OSError:
            self.fd = None
            return ""
        if ready and not data:  # the terminal went away
            self.close()
            return ""
        return data.decode(errors="ignore")

    def close(self) -> None:
        if self.saved is not None:
            import termios

            try:
                termios.tcsetattr(self.fd if self.fd is not None else sys.stdin.fileno(), termios.TCSADRAIN,
                                  self.saved)
            except (OSError, ValueError, termios.error):
                pass
            self.saved = None
        self.fd = None


class PlainScreen:
    """No TTY, or --plain: progress lines, and a summary line each time it changes."""

    def __init__(self, stream=None, keys: Keys | None = None) -> None:
        self.stream = stream or sys.stdout
        self.last = ""
        self.keys = keys or Keys(on=False)
        self.is_terminal = self.stream.isatty()

    def progress(self, text: str) -> None:
        print(f"[demo] {text}", file=self.stream, flush=True)

    def ready(self, address: str, token_file: Path) -> None:
        self.progress(f"ready: phone API on {address} (Ctrl-C stops everything)")
        self.progress(f"try: {curl_line(address, token_file)}")

    def pairing(self, got: dict, *, qr: bool, more: str) -> None:
        if qr:
            from collie.crew.cli.pair_cmd import qr_text

            print(qr_text(printable(got["link"])), file=self.stream)
        for line in pairing_lines(got, more, own_command()):
            print(line if line.startswith("  ") else f"[demo] {line}", file=self.stream, flush=True)

    qr_shown = False  # the QR code is printed once, with the lines; nothing is redrawn over it

    def link_done(self, note: str) -> None:
        pass  # the event line said it

    def hide_qr(self) -> None:
        pass

    def live_view(self) -> None:
        pass

    def draw(self, summary: Summary, _events) -> None:
        line = summary.plain_line()
        if line != self.last:
            self.last = line
            print(line, file=self.stream, flush=True)

    def close(self) -> None:
        self.keys.close()


# --- the pairing link in a terminal: what fits in width × height (pure, so a test can try every size) -----
QR_GAP = 2  # columns between the QR code and the text beside it
MIN_SIDE = 24  # the narrowest text column worth putting beside the QR code


def _rows(text: str, width: int) -> list[str]:
    """`text` as rows of at most `width` columns (a link or a fingerprint is cut where it must be)."""
    import textwrap

    if not text:
        return [""]
    return textwrap.wrap(text, max(1, width), break_long_words=True, break_on_hyphens=False) or [""]


def _link_rows(link: str, width: int) -> list[str]:
    """The link on rows of its own, indented by two spaces when it fits so: one row from 80 columns up."""
    if len(link) + 2 <= width:
        return [f"  {link}"]
    return [link[i:i + max(1, width)] for i in range(0, len(link), max(1, width))]


def _fingerprint_rows(fingerprint: str, width: int) -> list[str]:
    """A SHA-256 fingerprint (AB:CD:…) cut between two bytes, as many bytes a row as `width` holds."""
    parts = fingerprint.split(":")
    per = max(1, (width + 1) // 3)
    return [":".join(parts[i:i + per]) for i in range(0, len(parts), per)]


def until(got: dict) -> str:
    expires = got.get("expires_at")
    return time.strftime("%H:%M", time.localtime(expires)) if isinstance(expires, (int, float)) else "10 minutes"


def qr_rows(got: dict, width: int, command: str) -> tuple[list[str], int]:
    """The pairing screen at `width` columns: the QR code, the link under it, and beside it (under it when
    the window is narrow) when it expires, the certificate to compare and the keys; and the columns the QR
    code needs. It fits a window when those columns are there and it has as many rows as returned."""
    from collie.crew.cli.pair_cmd import qr_text

    link = printable(got["link"])
    qr = [line for line in qr_text(link).splitlines() if line.strip()]
    qw = max((len(line) for line in qr), default=0)
    fp = printable(got["fingerprint"]) if got.get("fingerprint") else ""

    def side(w: int) -> list[str]:
        rows = _rows("Pair a phone: scan this code with its camera, or open the link below.", w)
        rows += _rows(f"Valid until {until(got)}, works once.", w)
        if fp:
            rows += [""] + _rows("On the phone, go on only if the certificate's SHA-256 is:", w)
            rows += _fingerprint_rows(fp, w)
        if got.get("loopback"):
            rows += [""] + _rows(f"This address opens on this machine only; for a phone, start `{command} demo "
                                 "--lan`.", w)
        rows += [""] + _rows("Any key: the live view (the link stays at its top). p: a new link. Ctrl-C: stop.", w)
        return rows

    below = _link_rows(link, width)
    sw = width - qw - QR_GAP
    if sw < MIN_SIDE:
        return qr + below + side(width), qw
    text = side(sw)
    return [f"{(qr[i] if i < len(qr) else '').ljust(qw)}{' ' * QR_GAP}{text[i] if i < len(text) else ''}".rstrip()
            for i in range(max(len(qr), len(text)))] + below, qw


def qr_screen(got: dict, width: int, height: int, command: str) -> tuple[list[str] | None, str]:
    """The pairing screen's rows when it fits `width` × `height`, else None and what to do instead."""
    rows, qw = qr_rows(got, width, command)
    if qw <= width and len(rows) <= height:
        return rows, ""
    need = f"{qw} columns" if qw > width else f"{len(rows)} rows at this width"
    return None, (f"The QR code does not fit this window ({width}×{height}; it needs {need}): make the window "
                  f"taller and press p, or run `{command} demo pair` in another terminal.")


def pair_rows(got: dict | None, note: str, width: int, *, qr_note: str = "") -> list[str]:
    """The top of the live view: while a link is valid, the link (one row from 80 columns) and its
    certificate's fingerprint; else what became of the last one (`note`)."""
    if got is None:
        return _rows(note, width) if note else []
    rows = _rows(f"Pair a phone with this link (until {until(got)}, once); p: a new one with its QR code", width)
    rows += _link_rows(printable(got["link"]), width)
    if got.get("trust"):
        rows += _rows(f"First time? Trust the lead once (notifications): {printable(got['trust'])}", width)
        rows += _rows("The phone must show this authority SHA-256:", width)
        rows += _fingerprint_rows(printable(got["fingerprint"]), width)
    elif got.get("fingerprint"):
        rows += _rows("The phone must show this certificate SHA-256:", width)
        rows += _fingerprint_rows(printable(got["fingerprint"]), width)
    if qr_note:
        rows += _rows(qr_note, width)
    return rows


class RichScreen:
    """A TTY: the live one-screen summary (machines, agents, open asks, inbox, last receipts), drawn on
    the terminal's alternate screen (nothing of a redraw is left in the scrollback), with the pairing
    link at its top while it is valid. A new link is first shown as its QR code on a screen of its own,
    not redrawn, until a key press or the phone pairs (when the window is too small for it, the live view
    says how big it must be, or to run `… demo pair`)."""

    def __init__(self, keys: Keys | None = None) -> None:
        from rich.console import Console

        self.console = Console()
        self.live = None
        self.head = None
        self.keys = keys or Keys()
        self.is_terminal = True
        self.link: dict | None = None  # the pairing link while it is valid
        self.link_note = ""  # what became of the last one
        self.qr_shown = False  # the QR screen is up: redraws wait for a key, the phone pairing, or the link's end
        self.last: tuple[Summary, list] | None = None
        self.qr_size = (0, 0)  # the window's size when the QR screen was drawn
        self.want_qr = False

    def progress(self, text: str) -> None:
        if self.live is None:
            self.console.print(f"[dim]\\[demo][/dim] {escape(text)}")

    def ready(self, address: str, token_file: Path) -> None:
        from rich.text import Text

        keys = f"   ({KEYS_HELP})" if self.keys.on else "   (Ctrl-C stops everything)"
        self.head = Text.assemble(("Collie demo", "bold"), " — phone app on ", (address, "cyan"), keys)
        self.console.print(f"[dim]\\[demo][/dim] ready: phone API on {escape(address)}")
        # printed once, above the live screen, soft-wrapped: a copy of a wrapped line stays one command
        self.console.print(Text.assemble(("[demo] try: ", "dim"), curl_line(address, token_file)), soft_wrap=True)

    def pairing(self, got: dict, *, qr: bool, more: str) -> None:
        from rich.text import Text

        live = self.live
        if live is not None:  # the lines go to the terminal's own screen, below what the demo printed
            live.stop()
        for line in pairing_lines(got, more, own_command()):
            style = "bold" if line.startswith("  ") else ""
            self.console.print(Text(line, style=style), soft_wrap=True, highlight=False)
        self.link, self.link_note = got, ""
        self.want_qr = qr  # not with --no-qr: then neither the QR screen nor a word about its size
        self.qr_shown = qr and self.keys.on  # without keys nothing would end the QR screen but the link
        if live is not None:
            self.live_view()

    def link_done(self, note: str) -> None:
        """The link was used (a phone paired) or expired: off the top of the live view, the QR screen ends."""
        self.link, self.link_note, self.qr_shown = None, note, False
        self.redraw()

    def hide_qr(self) -> None:
        self.qr_shown = False
        self.redraw()

    def live_view(self) -> None:
        from rich.live import Live

        self.live = Live(console=self.console, auto_refresh=False, screen=True)
        self.live.start()
        self.redraw()

    def draw(self, summary: Summary, events) -> None:
        self.last = (summary, list(events))
        if not self.qr_shown or self.console.size != self.qr_size:  # the QR screen stays as drawn, unless resized
            self.redraw()

    def redraw(self) -> None:
        if self.live is None:
            return
        from rich.console import Group
        from rich.text import Text

        width, height = self.console.size
        qr_note = ""
        if self.link is not None and self.keys.on and self.want_qr:
            rows, qr_note = qr_screen(self.link, width, height, own_command())
            if rows is not None and self.qr_shown:
                self.live.update(Group(*(Text(r, no_wrap=True, overflow="crop") for r in rows)), refresh=True)
                self.qr_size = (width, height)
                return
            self.qr_shown = False
        top = [Text(r, no_wrap=True, overflow="crop", style="bold" if r.startswith("  ") else "")
               for r in pair_rows(self.link, self.link_note, width, qr_note=qr_note)]
        summary, events = self.last if self.last is not None else (Summary(), [])
        self.live.update(render(self.head, summary, events, top=top), refresh=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        self.keys.close()


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def render(head, summary: Summary, events, top=()):
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
    colour = {"online": "green", "asleep": "yellow", "offline": "red", "silent": "red"}
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
    return Group(head, *top, "", machines, "", agents, "", asks, "", inbox, "", receipts)


# --- the verb ----------------------------------------------------------------------------------------
def _raise_interrupt(_signum, _frame):
    raise KeyboardInterrupt


def run(args, _paths) -> int:
    check_flags(args)
    if args.action == "pair":
        return pair_with_running(args)
    if args.action == "restart":
        return restart_running(args)
    free_port(lead_host(args.lan))  # a bad --lan is one line before anything starts
    keys = Keys()
    screen = PlainScreen(keys=keys) if args.plain or not sys.stdout.isatty() else RichScreen(keys=keys)
    base = Path(tempfile.mkdtemp(prefix=DEMO_PREFIX, dir=DEMO_ROOT if os.path.isdir(DEMO_ROOT) else None))
    os.chmod(base, 0o700)
    old = {s: signal.signal(s, _raise_interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    demo = None
    status = 0
    try:
        demo = Demo(base, args, screen)
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
        n = 0
        if demo is not None:
            if demo.client is not None:
                demo.client.close()
            n = demo.procs.stop_all()
        shutil.rmtree(base, ignore_errors=True)
        print(f"[demo] stopped {n} processes and removed {base}", flush=True)
        for s, h in old.items():
            signal.signal(s, h)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    return 0 if status == 130 else status
