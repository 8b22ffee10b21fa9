"""One fault-campaign trial: real processes, writes through the phone API only, faults, and a count.

A trial (issue 8 "Done when", issue 15 item 2) starts real processes — the `tally` agent
(fixtures/tally.py: written from the wire contract alone, its ledger fsync'd per applied write), a
lead, and for crew trials a member that reaches the lead through a TCP proxy — then acts like the
phone: a burst of sends, card answers, starters and stops through the lead's HTTP API, from two
threads. Faults hit during the burst (kill -9 at the journal crash points `COLLIE_CRASH_AT` and at
random moments, SIGSTOP/SIGCONT, link cuts, the wall clock jumping past the inbox TTL, the state
folder's disk filling up); killed processes are restarted like a service manager would. The phone
then retries every request without a final receipt (none, an error, or `unknown`) under its own
request id until it gets one, waits for the inbox to drain, and asks once more for each receipt.

Then, per request id, against the agent's ledger:
    duplicate      applied more than once (by request id, or its text applied under another id)
    loss           acknowledged (`sent`, `queued`, `started`, `stopped`, `accepted`, or an inbox item
                   `done`) and never applied
    wrong receipt  the phone saw a receipt that is not true: a refusal (`refused` any reason, or an
                   answer's `decided`/`expired`/`answered`/`not_open`/`changed`/`invalid` not marked
                   `May already be applied`), or an inbox item `failed`/`expired`/`cancelled`, for
                   something the agent applied; or `sent`/`started`/`stopped`/`accepted` for
                   something it did not apply
`unresolved` counts requests that never got a final receipt.

Scenarios (chosen from the trial's seed, so `--seed S --trials 1` replays trial S):
    local     agent + lead; kill -9 of the lead at a crash point or at random, of the agent, or both
    crew      agent + member + lead; kill -9 of the member (crash point or random), of the lead, of
              the agent; SIGSTOP/SIGCONT of the member; link cuts by the proxy
    ttl       agent + lead; an approval-required sender queues items, the owner approves some, the
              wall clock jumps 25 h (past the 24 h TTL): pending items must expire and never run,
              approved ones must run once (optionally with the lead killed across the jump)
    diskfull  agent + lead whose state folder is a small tmpfs; it is filled mid-burst: every write
              gets a receipt (a refusal for the disk says so), nothing acknowledged may be lost, the
              lead keeps running
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from collie.crew import control  # noqa: E402
from collie.crew.errors import NotRunningError  # noqa: E402
from collie.fixtures.tally import read_ledger  # noqa: E402
from tests.crewlab import CutProxy  # noqa: E402

SCENARIOS = ("local", "crew", "local", "crew", "ttl", "local", "crew", "diskfull")
POINTS = ("after_begin", "after_send", "after_finish")
ACK = ("sent", "queued", "started", "stopped", "accepted")
DONE_CLAIMS = ("sent", "started", "stopped", "accepted")
ANSWER_NOT_APPLIED = ("decided", "expired", "answered", "not_open", "changed", "invalid")
MAY_BE_APPLIED = "May already be applied. Check the chat."
AGENT = "tally"
DAY = 24 * 3600.0

CLOCK_HOOK = '''"""Test-only: shift this process's wall clock (time.time) by the seconds in $COLLIE_TEST_CLOCK_FILE."""
import os, time
_path = os.environ.get("COLLIE_TEST_CLOCK_FILE")
if _path:
    _real, _mono = time.time, time.monotonic
    _state = {"at": -1.0, "offset": 0.0}
    def _shifted():
        now = _mono()
        if now - _state["at"] > 0.1:
            _state["at"] = now
            try:
                with open(_path) as fh:
                    _state["offset"] = float(fh.read().strip() or 0)
            except (OSError, ValueError):
                pass
        return _real() + _state["offset"]
    time.time = _shifted
'''


def wait_for(fn, timeout: float = 20.0, what: str = "condition", every: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(every)
    raise TrialError(f"{what}: not met within {timeout:g} s")


class TrialError(Exception):
    pass


class Skip(Exception):
    pass


# --- processes -----------------------------------------------------------------------------------
class Proc:
    """A process the trial owns; the supervisor restarts it when it dies (Restart=on-failure)."""

    def __init__(self, name: str, start) -> None:
        self.name = name
        self._start = start
        self.popen: subprocess.Popen | None = None
        self.starts = 0
        self.hold = False  # do not restart while set
        self.lock = threading.Lock()
        self.armed = False  # started with a crash point that has not fired yet
        self.killed_by_us = False

    def start(self, **kw) -> None:
        with self.lock:
            self.popen = None
            self.starts += 1
            self.popen = self._start(self, **kw)
            self.armed = bool(kw.get("crash_at"))

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.alive():
            try:
                self.popen.send_signal(sig)
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


class Trial:
    def __init__(self, seed: int, base: Path, burst: int = 24, extra_open: int = 0) -> None:
        self.seed = seed
        self.extra_open = extra_open  # the agent's open conversations beyond its own six (`--open`, issue 32)
        self.rng = random.Random(seed)
        self.scenario = SCENARIOS[seed % len(SCENARIOS)]
        self.base = base
        self.burst = burst
        os.chmod(base, 0o700)
        self.run = base / "run"
        self.run.mkdir(mode=0o700)
        self.logs = base / "logs"
        self.logs.mkdir()
        self.events: list[str] = []
        self.t0 = time.monotonic()
        self.procs: list[Proc] = []
        self.supervising = False
        self.proxy: CutProxy | None = None
        self.lead_port = 0
        self.address = ""
        self.machine = "local"
        self.token = ""
        self.clock_file = base / "clock-offset"
        self.mounted: Path | None = None
        self.crash_points_hit = 0
        self.exits: list[str] = []  # processes that died on their own (not kill -9): a crash
        self.kills = 0
        self.faults: list[str] = []
        self.full = False
        self.notes: list[str] = []
        self.turn_seconds = self.rng.choice((0.15, 0.3, 0.6))
        self.sup_rng = random.Random(seed ^ 0x5EED)

    def event(self, text: str) -> None:
        self.events.append(f"{time.monotonic() - self.t0:7.2f}  {text}")

    # --- folders and env ----------------------------------------------------------------------
    def machine_dirs(self, name: str) -> tuple[Path, Path]:
        cfg, state = self.base / name / "cfg", self.base / name / "state"
        cfg.mkdir(parents=True, mode=0o700, exist_ok=True)
        state.mkdir(parents=True, mode=0o700, exist_ok=True)
        return cfg, state

    def env(self, name: str, **extra: str) -> dict:
        cfg, state = self.base / name / "cfg", self.base / name / "state"
        env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        env.update(COLLIE_CONFIG_DIR=str(cfg), COLLIE_STATE_DIR=str(state), PYTHONPATH=str(REPO), **extra)
        return env

    def collie(self, name: str, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *argv], cwd=REPO,
                              env={**self.env(name), **(env or {})}, capture_output=True, text=True, timeout=60)

    # --- the agent ----------------------------------------------------------------------------
    @property
    def sock(self) -> Path:
        return self.run / "tally.sock"

    @property
    def ledger(self) -> Path:
        return self.base / "agent" / "ledger.jsonl"

    def _start_agent(self, proc: Proc, **_kw) -> subprocess.Popen:
        self.ledger.parent.mkdir(mode=0o700, exist_ok=True)
        out = open(self.logs / "agent.log", "ab")
        p = subprocess.Popen([sys.executable, "-m", "collie.fixtures.tally", "--socket", str(self.sock), "--ledger",
                              str(self.ledger), "--turn", str(self.turn_seconds), "--open", str(self.extra_open)],
                             cwd=REPO,
                             env=self.env("agent"), stdout=subprocess.PIPE, stderr=out)
        out.close()
        line = p.stdout.readline()
        p.stdout.close()
        if not line.startswith(b"listening"):
            p.kill()
            p.wait()
            raise TrialError(f"agent did not start: {line!r}")
        return p

    # --- bridges ------------------------------------------------------------------------------
    def _start_bridge(self, proc: Proc, crash_at: str | None = None) -> subprocess.Popen:
        name = proc.name
        extra = {}
        if crash_at:
            extra["COLLIE_CRASH_AT"] = crash_at
        env = self.env(name, **extra)
        if name == "lead" and self.scenario == "ttl":
            env["PYTHONPATH"] = f"{self.base / 'clockhook'}{os.pathsep}{REPO}"
            env["COLLIE_TEST_CLOCK_FILE"] = str(self.clock_file)
        out = open(self.logs / f"{name}.log", "ab")
        p = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve",
                              *(("--port", str(self.lead_port)) if name == "lead" else ())],
                             cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
        out.close()
        ctl = self.base / name / "state" / "bridge.sock"

        def up():
            if p.poll() is not None:
                raise TrialError(f"{name} exited {p.returncode} at start")
            try:
                return control.call(ctl, "ping", timeout=1)
            except NotRunningError:
                return None
            except OSError:
                return None
        try:
            pong = wait_for(up, timeout=30, what=f"{name} up")
        except TrialError:
            p.kill()
            p.wait()
            raise
        if name == "lead" and not self.lead_port:
            self.address = pong["address"]
            self.lead_port = int(self.address.rsplit(":", 1)[1])
        return p

    def agent_ready(self) -> bool:
        try:
            r = httpx.get(f"{self.address}/api/agents/{self.machine}/{AGENT}/conversations/s0",
                          headers={"authorization": f"Bearer {self.token}"}, timeout=5)
            return r.status_code == 200 and r.json().get("agent_status") == "ready"
        except (httpx.HTTPError, ValueError):
            return False

    def setup(self) -> tuple[Proc, Proc, Proc | None]:
        agent = Proc("agent", self._start_agent)
        lead = Proc("lead", self._start_bridge)
        member = None
        self.procs = [agent, lead]
        agent.start()
        sources = [{"name": AGENT, "kind": "durable", "socket": str(self.sock)}]
        lead_cfg, lead_state = self.machine_dirs("lead")
        if self.scenario == "crew":
            self.machine = "box"
            (lead_cfg / "sources.json").write_text("[]")
            box_cfg, _ = self.machine_dirs("box")
            (box_cfg / "sources.json").write_text(json.dumps(sources))
            os.chmod(box_cfg / "sources.json", 0o600)
        else:
            (lead_cfg / "sources.json").write_text(json.dumps(sources))
        os.chmod(lead_cfg / "sources.json", 0o600)
        if self.scenario == "ttl":
            (self.base / "clockhook").mkdir(mode=0o700)
            (self.base / "clockhook" / "sitecustomize.py").write_text(CLOCK_HOOK)
            self.clock_file.write_text("0")
            (lead_cfg / ".env").write_text("COLLIE_OWNER=Ana\n")
        if self.scenario == "diskfull":
            try:
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m,mode=0700", "tmpfs", str(lead_state)],
                               check=True, capture_output=True, timeout=10)
            except (subprocess.CalledProcessError, OSError, subprocess.TimeoutExpired) as exc:
                err = getattr(exc, "stderr", b"") or str(exc).encode()
                raise Skip(f"cannot mount a tmpfs for the state folder ({err.decode(errors='replace').strip()[:120]})")
            self.mounted = lead_state
        crash = None
        if self.scenario == "local" and self.rng.random() < 0.6:
            crash = f"{self.rng.choice(POINTS)}:{self.rng.randint(1, 8)}"
            self.faults.append(f"lead crash {crash}")
        lead.start(crash_at=crash)
        self.token = (lead_state / "api-token").read_text().strip()
        if self.scenario == "crew":
            member = Proc("box", self._start_bridge)
            self.procs.append(member)
            out = self.collie("lead", "crew", "invite", "--label", "box")
            if out.returncode:
                raise TrialError(f"invite: {out.stderr}")
            invite = (lead_state / "invites" / "box.token").read_text().strip()
            joined = self.collie("box", "crew", "join", self.address.replace("http://", "ws://"), "--token-env", "T",
                                 "--label", "box", env={"T": invite})
            if joined.returncode:
                raise TrialError(f"join: {joined.stderr}")
            self.proxy = CutProxy(self.lead_port)
            crew_json = self.base / "box" / "cfg" / "crew.json"
            cfg = json.loads(crew_json.read_text())
            cfg["lead"] = f"ws://127.0.0.1:{self.proxy.port}/crew/v1"
            crew_json.write_text(json.dumps(cfg))
            crash = None
            if self.rng.random() < 0.5:
                crash = f"{self.rng.choice(POINTS)}:{self.rng.randint(1, 8)}"
                self.faults.append(f"member crash {crash}")
            member.start(crash_at=crash)
        wait_for(self.agent_ready, timeout=40, what="the agent ready through the lead", every=0.1)
        return agent, lead, member

    # --- supervisor -----------------------------------------------------------------------------
    def supervise(self) -> None:
        try:
            self._supervise()
        except Exception as exc:  # never let a harness thread die silently
            self.event(f"supervisor failed: {type(exc).__name__}: {exc}")

    def _supervise(self) -> None:
        while self.supervising:
            for proc in self.procs:
                if proc.hold or proc.alive() or proc.starts == 0:
                    continue
                rc = proc.popen.returncode if proc.popen is not None else None
                self.event(f"{proc.name} died ({rc}); restarting")
                if rc is not None and rc != -signal.SIGKILL:
                    self.exits.append(f"{proc.name} exited {rc} by itself")
                if rc == -signal.SIGKILL and proc.armed and not proc.killed_by_us:
                    self.crash_points_hit += 1
                    self.event(f"{proc.name} reached its crash point")
                proc.armed = proc.killed_by_us = False
                time.sleep(self.sup_rng.uniform(0.2, 0.8))
                try:
                    proc.start()
                except TrialError as exc:
                    self.event(f"{proc.name} restart failed: {exc}")
                    time.sleep(0.5)
            time.sleep(0.1)

    def kill(self, proc: Proc) -> None:
        self.event(f"kill -9 {proc.name}")
        proc.killed_by_us = True
        self.kills += 1
        proc.kill()

    # --- fault plans ------------------------------------------------------------------------------
    def plan(self, agent: Proc, lead: Proc, member: Proc | None) -> list[tuple[int, str, object]]:
        """(after the k-th phone request, label, action) — from the seed."""
        rng = self.rng
        n = self.burst
        plan: list[tuple[int, str, object]] = []

        def at() -> int:
            return rng.randint(2, n - 2)

        if self.scenario == "local" and self.faults:  # a crash point armed: let it fire; maybe the agent too
            if rng.random() < 0.4:
                plan.append((at(), "kill -9 agent", lambda: self.kill(agent)))
        elif self.scenario == "local":
            for what in rng.sample(["lead", "agent", "both"], rng.choice((1, 1, 2))):
                if what in ("lead", "both"):
                    plan.append((at(), "kill -9 lead", lambda: self.kill(lead)))
                if what in ("agent", "both"):
                    plan.append((at(), "kill -9 agent", lambda: self.kill(agent)))
        elif self.scenario == "crew":
            options = ["member", "lead", "agent", "stop", "cut", "cut2"]
            for what in rng.sample(options, rng.choice((1, 2, 2))):
                if what == "member":
                    plan.append((at(), "kill -9 member", lambda: self.kill(member)))
                elif what == "lead":
                    plan.append((at(), "kill -9 lead", lambda: self.kill(lead)))
                elif what == "agent":
                    plan.append((at(), "kill -9 agent", lambda: self.kill(agent)))
                elif what == "stop":
                    secs = rng.choice((1.5, 3.0, 6.0))
                    plan.append((at(), f"SIGSTOP member {secs:g} s", lambda s=secs: self.freeze(member, s)))
                else:
                    plan.append((at(), "cut the link", self.cut))
                    if what == "cut2":
                        plan.append((at(), "cut the link", self.cut))
        elif self.scenario == "diskfull":
            secs = rng.choice((2.0, 4.0))
            plan.append((rng.randint(n // 4, n // 2), f"state folder full for {secs:g} s",
                         lambda: self.fill_disk(secs)))
        for _k, label, _fn in plan:
            self.faults.append(label)
        return sorted(plan, key=lambda p: p[0])

    def freeze(self, proc: Proc, seconds: float) -> None:
        self.event(f"SIGSTOP {proc.name}")
        proc.signal(signal.SIGSTOP)
        time.sleep(seconds)
        proc.signal(signal.SIGCONT)
        self.event(f"SIGCONT {proc.name}")

    def cut(self) -> None:
        self.event("cut the member's link")
        self.proxy.cut()

    def fill_disk(self, seconds: float) -> None:
        self.event("fill the state folder")
        self.full = True
        filler = self.mounted / "filler"
        try:
            with open(filler, "wb") as fh:
                block = b"\0" * 65536
                while True:
                    fh.write(block)
                    fh.flush()
        except OSError:  # full (or already full: the lead's own files filled it)
            pass
        try:  # the last few bytes too
            with open(filler, "ab") as fh:
                while True:
                    fh.write(b"\0" * 512)
                    fh.flush()
        except OSError:
            pass
        time.sleep(seconds)
        self.free_disk()

    def free_disk(self) -> None:
        (self.mounted / "filler").unlink(missing_ok=True)
        self.full = False
        self.event("free the state folder")

    def teardown(self) -> None:
        self.supervising = False
        for proc in self.procs:
            proc.hold = True
        for proc in reversed(self.procs):
            proc.kill()
        if self.proxy:
            self.proxy.close()
        if self.mounted is not None:
            subprocess.run(["umount", "-l", str(self.mounted)], capture_output=True, timeout=20)


# --- the phone -------------------------------------------------------------------------------------
class Phone:
    """Acts like the phone: reads the pane it writes to, quotes its turn, keeps every receipt."""

    def __init__(self, trial: Trial) -> None:
        self.trial = trial
        self.records: dict[str, dict] = {}
        self.lock = threading.Lock()
        self.count = 0
        self.answered: set[str] = set()

    def client(self, token: str | None = None) -> httpx.Client:
        return httpx.Client(base_url=self.trial.address, timeout=30,
                            headers={"authorization": f"Bearer {token or self.trial.token}"})

    def pane(self, c: httpx.Client, conv: str) -> dict | None:
        """The pane as the phone sees it; while the lead is down or the pane unknown, it waits (≤ 8 s)."""
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline:
            try:
                r = c.get(f"/api/agents/{self.trial.machine}/{AGENT}/conversations/{conv}")
                if r.status_code == 200:
                    return r.json()
            except (httpx.HTTPError, ValueError):
                pass
            time.sleep(0.2)
        return None

    def new(self, kind: str, path: str, body: dict, **extra) -> str:
        rid = body["request_id"]
        with self.lock:
            self.records[rid] = {"kind": kind, "path": path, "body": body, "receipts": [], **extra}
        return rid

    def post(self, c: httpx.Client, rid: str, phase: str) -> dict | None:
        rec = self.records[rid]
        full = self.trial.full
        try:
            r = c.post(rec["path"], json=rec["body"])
            try:
                got = r.json()
            except ValueError:
                got = None
            if r.status_code != 200 or not isinstance(got, dict) or "outcome" not in got:
                got = {"error": f"HTTP {r.status_code}", "body": (r.text or "")[:300]}
        except httpx.HTTPError as exc:
            got = {"error": type(exc).__name__}
        got["phase"] = phase
        if full:
            got["disk_full"] = True
        with self.lock:
            rec["receipts"].append(got)
        return got if "outcome" in got else None

    def one(self, c: httpx.Client, rng: random.Random, i: int) -> None:
        m = self.trial.machine
        roll = rng.random()
        if roll < 0.55:
            conv = f"s{rng.randrange(5)}"
            pane = self.pane(c, conv)
            if pane is None:
                return
            rid = str(uuid.uuid4())
            self.new("send", "/api/send", {"request_id": rid, "machine": m, "agent": AGENT, "conversation": conv,
                                           "text": f"{rid} send {i}", "turn": pane.get("turn")})
            self.post(c, rid, "burst")
        elif roll < 0.75:
            pane = self.pane(c, "asks")
            ask = (pane or {}).get("ask")
            if not ask or ask["id"] in self.answered:
                time.sleep(0.05)
                return
            self.answered.add(ask["id"])
            rid = str(uuid.uuid4())
            self.new("answer", f"/api/ask/{ask['id']}", {"request_id": rid, "machine": m, "agent": AGENT,
                                                         "digest": ask["digest"],
                                                         "answer": {"option_ids": [rng.choice(("yes", "no"))]}},
                     ask_id=ask["id"])
            self.post(c, rid, "burst")
        elif roll < 0.85:
            rid = str(uuid.uuid4())
            self.new("starter", f"/api/agents/{m}/{AGENT}/starters/job", {"request_id": rid})
            self.post(c, rid, "burst")
        else:
            conv = f"s{rng.randrange(5)}"
            pane = self.pane(c, conv)
            if pane is None:
                return
            rid = str(uuid.uuid4())
            self.new("stop", f"/api/agents/{m}/{AGENT}/conversations/{conv}/stop",
                     {"request_id": rid, "turn": pane.get("turn")})
            self.post(c, rid, "burst")

    def burst(self, n: int, seed: int, hook) -> None:
        rng = random.Random(seed)
        with self.client() as c:
            for i in range(n):
                self.one(c, rng, i)
                with self.lock:
                    self.count += 1
                    k = self.count
                hook(k)

    def unresolved(self) -> list[str]:
        out = []
        for rid, rec in self.records.items():
            finals = [r for r in rec["receipts"] if r.get("outcome") not in (None, "unknown")]
            if not finals:
                out.append(rid)
        return out

    def retry_all(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while time.monotonic() < deadline:
                pending = self.unresolved()
                if not pending:
                    return
                for rid in pending:
                    self.post(c, rid, "retry")
                time.sleep(0.5)


# --- the trial ------------------------------------------------------------------------------------
def run_trial(seed: int, *, burst: int = 24, keep: str = "failed", root: Path | None = None,
              patience: float = 30.0, extra_open: int = 0) -> dict:
    """One trial; `patience` bounds the phone's retries and the wait for the inbox to drain."""
    base = Path(tempfile.mkdtemp(prefix=f"fc{seed}-", dir=str(root or "/tmp")))
    trial = Trial(seed, base, burst, extra_open)
    result: dict = {"seed": seed, "scenario": trial.scenario, "folder": str(base)}
    started = time.monotonic()
    phone = None
    try:
        agent, lead, member = trial.setup()
        phone = Phone(trial)
        plan = trial.plan(agent, lead, member)
        trial.supervising = True
        sup = threading.Thread(target=trial.supervise, daemon=True)
        sup.start()
        fault_threads: list[threading.Thread] = []
        fired = set()
        plan_lock = threading.Lock()

        def hook(k: int) -> None:
            with plan_lock:
                for idx, (at, label, fn) in enumerate(plan):
                    if at <= k and idx not in fired:
                        fired.add(idx)
                        t = threading.Thread(target=fn, daemon=True)
                        t.start()
                        fault_threads.append(t)

        extra = {}
        if trial.scenario == "ttl":
            extra = ttl_phase_one(trial, phone)
        workers = [threading.Thread(target=phone.burst, args=(burst // 2, seed * 7 + w, hook)) for w in (1, 2)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        hook(10 ** 9)  # anything planned past the burst's end fires now
        for t in fault_threads:
            t.join(timeout=60)
        if trial.scenario == "ttl":
            ttl_phase_two(trial, phone, extra, lead)
        # every process back up and the agent seen ready through the lead
        wait_for(lambda: all(p.alive() for p in trial.procs), timeout=40, what="every process back up")
        wait_for(trial.agent_ready, timeout=60, what="the agent ready again", every=0.2)
        phone.retry_all(timeout=1.5 * patience)
        stuck = drain(trial, phone, timeout=patience)
        if trial.scenario == "ttl":
            extra.update(ttl_check(trial, phone, extra))
        with phone.client() as c, phone.client(extra.get("token")) as s:
            for rid, rec in list(phone.records.items()):
                # what an acknowledged request came to: the phone asks once more (same id, same body);
                # a refusal is final and is not asked again
                if rec.get("before_jump"):  # 25 h ago on the lead's clock: past the 24 h memory of ids
                    continue
                if any(r.get("outcome") in ACK for r in rec["receipts"]):
                    phone.post(s if rec["kind"] == "sender" else c, rid, "final")
            inbox_states = read_inbox_states(c, phone)
        time.sleep(0.3)
        result.update(judge(trial, phone, inbox_states))
        result["stuck"] = stuck
        result["ttl"] = extra.get("violations", [])
    except Skip as exc:
        result.update(skipped=str(exc))
    except Exception as exc:  # a harness failure or a trial that could not finish: keep it
        result.update(error=f"{type(exc).__name__}: {exc}")
    finally:
        trial.teardown()
        result["faults"] = trial.faults
        result["crash_points_hit"] = trial.crash_points_hit
        result["kills"] = trial.kills
        result["exits"] = trial.exits
        result["events"] = trial.events
        result["seconds"] = round(time.monotonic() - started, 1)
        if phone is not None:
            (base / "trial.json").write_text(json.dumps({"result": result, "records": phone.records}, indent=1,
                                                         default=str))
    failed = bool(result.get("error")) or any(result.get(k) for k in
                                              ("duplicates", "losses", "wrong_receipts", "unresolved", "stuck",
                                               "ttl", "disk_unclear", "exits"))
    result["failed"] = failed
    if result.get("skipped") or keep == "none" or (keep == "failed" and not failed):
        if trial.mounted is None or not os.path.ismount(trial.mounted):
            shutil.rmtree(base, ignore_errors=True)
    return result


def drain(trial: Trial, phone: Phone, timeout: float = 60.0) -> int:
    """Wait until nothing of the phone's waits or runs in the inbox; the number still there after."""
    deadline = time.monotonic() + timeout
    quiet = 0
    items: list = []
    with phone.client() as c:
        while time.monotonic() < deadline:
            try:
                items = c.get(f"/api/agents/{trial.machine}/{AGENT}/inbox").json()["items"]
            except (httpx.HTTPError, ValueError, KeyError):
                items = [{"state": "?"}]
            busy = [i for i in items if i.get("state") in ("approved", "running", "?")]
            quiet = quiet + 1 if not busy else 0
            if quiet >= 3:
                time.sleep(0.7)  # the last turn ends
                return 0
            time.sleep(0.3)
    stuck = [i for i in items if i.get("state") in ("approved", "running")]
    trial.event(f"inbox not drained after {timeout:g} s: {[(i.get('id'), i.get('state')) for i in stuck]}")
    return len(stuck)


def read_inbox_states(c: httpx.Client, phone: Phone) -> dict[str, dict]:
    """Final inbox item of each send and starter, where the lead lets it be read."""
    out = {}
    index = inbox_ids(c, phone.trial.machine)
    for rid, rec in phone.records.items():
        if rec["kind"] not in ("send", "starter", "sender"):
            continue
        try:
            r = c.get(f"/api/inbox/{index.get(rid, {}).get('id', rid)}")
            if r.status_code == 200:
                out[rid] = r.json()
        except (httpx.HTTPError, ValueError):
            pass
    return out


def inbox_ids(c: httpx.Client, machine: str) -> dict[str, dict]:
    """request id -> the owner's view of its inbox item (an item's id may be derived from the
    request id, as for token senders)."""
    try:
        items = c.get(f"/api/agents/{machine}/{AGENT}/inbox").json()["items"]
    except (httpx.HTTPError, ValueError, KeyError):
        return {}
    return {i.get("request_id") or i["id"]: i for i in items}


# --- TTL: the wall clock jumps past it -------------------------------------------------------------
def ttl_phase_one(trial: Trial, phone: Phone) -> dict:
    out = trial.collie("lead", "tokens", "create", "slack", "--approval", "required")
    if out.returncode:
        raise TrialError(f"tokens create: {out.stderr}")
    token = (trial.base / "lead" / "state" / "tokens" / "slack.token").read_text().strip()
    pending, approved = [], []
    with phone.client(token) as s, phone.client() as owner:
        for i in range(6):
            rid = str(uuid.uuid4())
            phone.new("sender", f"/api/agents/local/{AGENT}/inbox",
                      {"request_id": rid, "conversation": f"s{i % 5}", "text": f"{rid} sender {i}"}, approval=False,
                      token=token)
            got = phone.post(s, rid, "burst")
            if got is None or got.get("outcome") != "queued":
                raise TrialError(f"sender item not queued: {phone.records[rid]['receipts'][-1]}")
        ids = [rid for rid, r in phone.records.items() if r["kind"] == "sender"]
        index = inbox_ids(owner, "local")
        for rid in trial.rng.sample(ids, 2):
            r = owner.post(f"/api/inbox/{index.get(rid, {}).get('id', rid)}/approve")
            if r.status_code == 200 and r.json().get("state") in ("approved", "running", "done"):
                phone.records[rid]["approval"] = True
                approved.append(rid)
        pending = [rid for rid in ids if rid not in approved]
    return {"token": token, "pending_before": pending, "approved_before": approved}


def ttl_phase_two(trial: Trial, phone: Phone, extra: dict, lead: Proc) -> None:
    shift = DAY + 3600.0
    restart = trial.rng.random() < 0.5
    if restart:
        trial.faults.append("kill -9 lead across the clock jump")
        lead.hold = True
        trial.kill(lead)
    with phone.lock:
        for rec in phone.records.values():
            rec["before_jump"] = True
    trial.clock_file.write_text(str(shift))
    trial.faults.append("wall clock +25 h")
    trial.event("wall clock jumps +25 h")
    if restart:
        lead.hold = False
    wait_for(lambda: lead.alive(), timeout=30, what="lead back")
    wait_for(trial.agent_ready, timeout=40, what="agent ready after the jump", every=0.2)
    time.sleep(2.5)  # a few inbox ticks (1 s each)
    after = []
    with phone.client(extra["token"]) as s:
        for i in range(2):
            rid = str(uuid.uuid4())
            phone.new("sender", f"/api/agents/local/{AGENT}/inbox",
                      {"request_id": rid, "conversation": f"s{i}", "text": f"{rid} sender-after {i}"}, approval=False,
                      token=extra["token"])
            phone.post(s, rid, "burst")
            after.append(rid)
    time.sleep(2.5)
    extra["pending_after"] = after
    with phone.client() as owner:
        index = inbox_ids(owner, "local")
        listing = {rid: i["state"] for rid, i in index.items()}
        extra["listing_after_jump"] = listing
        for rid in after:  # the owner approves what came after the jump: it must run
            r = owner.post(f"/api/inbox/{index.get(rid, {}).get('id', rid)}/approve")
            if r.status_code == 200 and r.json().get("state") in ("approved", "running", "done"):
                phone.records[rid]["approval"] = True


def ttl_check(trial: Trial, phone: Phone, extra: dict) -> dict:
    violations = []
    with phone.client(extra["token"]) as s:  # the sender asks again about what expired
        for rid in extra["pending_before"]:
            got = phone.post(s, rid, "after-ttl") or {}
            if got.get("outcome") != "expired":
                violations.append(f"{rid}: expired item repeated answers {got.get('outcome')!r} "
                                  f"({got.get('text')!r}), not 'expired'")
    listing = extra.get("listing_after_jump", {})
    for rid in extra["pending_before"]:
        if listing.get(rid) in ("pending", "approved", "running"):  # absent, or `expired`, is right
            violations.append(f"{rid}: pending past the TTL but still {listing[rid]} after the jump")
    for rid in extra.get("pending_after", []):
        if listing.get(rid) not in ("pending", "approved", "running"):
            violations.append(f"{rid}: queued after the jump but gone from the inbox before its TTL")
    return {"violations": violations}


# --- judging ----------------------------------------------------------------------------------------
def judge(trial: Trial, phone: Phone, inbox_states: dict[str, dict]) -> dict:
    ledger = read_ledger(trial.ledger)
    applied: dict[str, int] = {}
    for rec in ledger:
        if rec.get("applied"):
            applied[rec["request_id"]] = applied.get(rec["request_id"], 0) + 1
            text = (rec.get("effect") or {}).get("text") or ""
            owner = text.split(" ", 1)[0]
            if owner and owner != rec["request_id"] and owner in phone.records:
                applied[owner] = applied.get(owner, 0) + 1  # its text, applied under another request id
    dups, losses, wrong, unresolved = [], [], [], []
    disk: dict[str, int] = {}
    disk_unclear = 0
    for rid, rec in phone.records.items():
        n = applied.get(rid, 0)
        receipts = rec["receipts"]
        item = inbox_states.get(rid) or {}
        if n > 1:
            dups.append(rid)
        sender_pending = rec["kind"] == "sender" and not rec.get("approval")
        acked = any(r.get("outcome") in ACK for r in receipts) and not sender_pending
        acked = acked or item.get("state") == "done"
        if acked and n == 0:
            losses.append(rid)
        bad = []
        for r in receipts:
            out = r.get("outcome")
            if out in DONE_CLAIMS and n == 0:
                bad.append(r)
            elif n > 0 and (out == "refused" or (rec["kind"] == "answer" and out in ANSWER_NOT_APPLIED
                                                 and r.get("text") != MAY_BE_APPLIED)):
                bad.append(r)
            if r.get("disk_full"):
                key = out or r.get("error", "?")
                if out == "refused":
                    key = f"refused {r.get('reason')}"
                disk[key] = disk.get(key, 0) + 1
                # A true receipt is fine (a write that still fit in space SQLite already had is on disk:
                # acknowledging it is true, and a loss would be counted as one); what is not is no receipt
                # (an HTTP error, a dropped connection) or a refusal that does not say why.
                text = f"{r.get('reason')} {r.get('text')}".lower()
                if out is None or (out == "refused" and r.get("reason") in ("internal", "not_recorded", None)
                                   and not any(w in text for w in ("disk", "space", "full"))):
                    disk_unclear += 1
        if n > 0 and item.get("state") in ("failed", "expired", "cancelled"):
            bad.append({"inbox_state": item.get("state"), "reason": item.get("reason")})
        if bad:
            wrong.append({"request_id": rid, "kind": rec["kind"], "applied": n, "receipts": bad})
        if not [r for r in receipts if r.get("outcome") not in (None, "unknown")]:
            unresolved.append(rid)
    out = {"requests": len(phone.records), "applied": sum(1 for rid in phone.records if applied.get(rid)),
           "acknowledged": sum(1 for rid, rec in phone.records.items()
                               if any(r.get("outcome") in ACK for r in rec["receipts"])),
           "duplicates": len(dups), "losses": len(losses), "wrong_receipts": len(wrong),
           "unresolved": len(unresolved), "detail": {"duplicates": dups, "losses": losses, "wrong": wrong[:20],
                                                     "unresolved": unresolved}}
    if trial.scenario == "diskfull":
        out["disk_full_answers"] = disk
        out["disk_unclear"] = disk_unclear
    return out
