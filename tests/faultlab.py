"""Fault lab: a real bridge killed with SIGKILL mid-burst, restarted, and a count of what the agent applied.

One trial: start the `ledger` agent (persisted state) and `collie serve` armed with a crash point
(`COLLIE_CRASH_AT`) or killed after a random delay; a client acting like the phone sends a burst of
sends and answers through the API and notes each receipt; the bridge dies; optionally the agent is
killed and restarted too; the bridge restarts; the client retries every request without a final
receipt under the same request id (the phone's Retry); then the agent's transcript is read.

    duplicate  a request id the agent applied more than once
    loss       a write the client saw acknowledged (sent, queued, accepted) that the agent never applied
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import httpx

from collie.crew import control
from collie.crew.errors import NotRunningError

REPO = Path(__file__).resolve().parent.parent
ACKED = ("sent", "queued", "accepted")


class Lab:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.run = base / "run"
        self.run.mkdir(mode=0o700, exist_ok=True)
        self.cfg, self.state = base / "cfg", base / "state"
        self.cfg.mkdir(mode=0o700, exist_ok=True)
        self.sock = self.run / "ledger.sock"
        self.agent_state = base / "agent-state.json"
        (self.cfg / "sources.json").write_text(json.dumps([{"name": "ledger", "kind": "durable", "socket": str(self.sock)}]))
        os.chmod(self.cfg / "sources.json", 0o600)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        self.env.update(COLLIE_CONFIG_DIR=str(self.cfg), COLLIE_STATE_DIR=str(self.state), PYTHONPATH=str(REPO))
        self.agent: subprocess.Popen | None = None
        self.bridge: subprocess.Popen | None = None

    # --- processes ------------------------------------------------------------------------------
    def start_agent(self) -> None:
        self.agent = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "ledger", "--socket", str(self.sock),
                                       "--state", str(self.agent_state)], cwd=REPO, env=self.env,
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.agent.stdout.readline()
        assert line.startswith("listening"), line

    def kill_agent(self) -> None:
        if self.agent and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGKILL)
        if self.agent:
            self.agent.wait()
            self.agent.stdout.close()

    def start_bridge(self, crash_at: str | None = None) -> str:
        env = dict(self.env)
        if crash_at:
            env["COLLIE_CRASH_AT"] = crash_at
        self.bridge = subprocess.Popen([sys.executable, "-m", "collie.lead", "--port", "0"], cwd=REPO, env=env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                pong = control.call(self.state / "bridge.sock", "ping", timeout=1)
                agents = control.call(self.state / "bridge.sock", "agents", timeout=1)["agents"]
                if agents and agents[0]["status"] == "ready":
                    return pong["address"]
            except NotRunningError:
                pass
            if self.bridge.poll() is not None:
                raise AssertionError(f"bridge exited {self.bridge.returncode} at start")
            time.sleep(0.05)
        raise AssertionError("bridge not ready")

    def kill_bridge(self) -> None:
        if self.bridge and self.bridge.poll() is None:
            self.bridge.send_signal(signal.SIGKILL)
        if self.bridge:
            self.bridge.wait()

    def stop(self) -> None:
        self.kill_bridge()
        self.kill_agent()

    # --- the phone ------------------------------------------------------------------------------
    def client(self, address: str) -> httpx.Client:
        token = (self.state / "api-token").read_text().strip()
        return httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30)


class Phone:
    """Acts like the phone: quotes the turn from its last receipt, answers the ask it sees."""

    def __init__(self) -> None:
        self.records: dict[str, dict] = {}  # request_id -> {kind, path, body, receipt}
        self.turns: dict[str, int] = {}

    def _post(self, c: httpx.Client, rid: str, path: str, body: dict, kind: str) -> dict | None:
        self.records.setdefault(rid, {"kind": kind, "path": path, "body": body, "receipt": None})
        try:
            got = c.post(path, json=body).json()
        except httpx.HTTPError:
            return None  # the bridge died under us
        self.records[rid]["receipt"] = got
        return got

    def burst(self, c: httpx.Client, n: int, rng: random.Random) -> None:
        for i in range(n):
            if rng.random() < 0.3:
                if not self.answer(c):
                    return
                continue
            conv = f"s{rng.randrange(5)}"
            if conv not in self.turns:
                try:
                    self.turns[conv] = c.get(f"/api/agents/local/ledger/conversations/{conv}").json()["turn"]
                except httpx.HTTPError:
                    return
            rid = str(uuid.uuid4())
            got = self._post(c, rid, "/api/send", {"request_id": rid, "agent": "ledger", "conversation": conv,
                                                   "text": f"msg {i} {rid[:8]}", "turn": self.turns[conv]}, "send")
            if got is None:
                return
            if got.get("outcome") == "sent":
                self.turns[conv] = got["turn"]
            elif got.get("reason") == "turn_moved":
                self.turns.pop(conv, None)

    def answer(self, c: httpx.Client) -> bool:
        try:
            pane = c.get("/api/agents/local/ledger/conversations/asks").json()
        except httpx.HTTPError:
            return False
        ask = pane.get("ask")
        if not ask or any(r.get("ask_id") == ask["id"] for r in self.records.values()):
            time.sleep(0.05)
            return True
        rid = str(uuid.uuid4())
        body = {"request_id": rid, "agent": "ledger", "digest": ask["digest"], "answer": {"option_ids": ["yes"]}}
        self.records[rid] = {"kind": "answer", "path": f"/api/ask/{ask['id']}", "body": body, "receipt": None,
                             "ask_id": ask["id"]}
        return self._post(c, rid, f"/api/ask/{ask['id']}", body, "answer") is not None

    def retry_all(self, c: httpx.Client) -> None:
        for _ in range(5):
            pending = [(rid, r) for rid, r in self.records.items()
                       if r["receipt"] is None or r["receipt"].get("outcome") == "unknown"]
            if not pending:
                return
            for rid, r in pending:
                self._post(c, rid, r["path"], r["body"], r["kind"])
            time.sleep(0.5)


def drain(c: httpx.Client, agent: str = "ledger", timeout: float = 60.0) -> None:
    """Wait until nothing waits or runs in the agent's inbox (approved items are never dropped)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        items = c.get(f"/api/agents/local/{agent}/inbox").json()["items"]
        if not any(i["state"] in ("approved", "running") for i in items):
            return
        time.sleep(0.2)
    raise AssertionError(f"the inbox did not drain: {items}")


def read_agent(sock: Path) -> dict:
    """The agent's own transcript (reads are open to anyone of the user; only writes are checked)."""
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://agent", timeout=10) as a:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            state = a.get("/v1/state").json()
            if all(cv["state"] != "working" for cv in state["conversations"]):
                break
            time.sleep(0.1)
        items = {cv["id"]: a.get(f"/v1/conversations/{cv['id']}/items?since=0&limit=1000").json()["items"]
                 for cv in state["conversations"]}
    return items


def tally(phone: Phone, items: dict) -> dict:
    applied: dict[str, int] = {}
    for conv_items in items.values():
        for it in conv_items:
            if it["kind"] == "user" and it.get("request_id"):
                applied[it["request_id"]] = applied.get(it["request_id"], 0) + 1
    answered_asks = {it.get("ask_id") for it in items.get("asks", []) if it["kind"] == "ask" and it.get("end") == "answered"}
    dups = sum(1 for n in applied.values() if n > 1)
    losses = 0
    acked = 0
    for rid, r in phone.records.items():
        rec = r["receipt"] or {}
        if rec.get("outcome") not in ACKED:
            continue
        acked += 1
        if r["kind"] == "send" and applied.get(rid, 0) == 0:
            losses += 1
        if r["kind"] == "answer" and r["ask_id"] not in answered_asks:
            losses += 1
    return {"requests": len(phone.records), "acked": acked, "duplicates": dups, "losses": losses,
            "applied_sends": sum(applied.values())}


def trial(base: Path, *, crash_at: str | None, random_kill: float | None, restart_agent: bool, seed: int,
          burst: int = 30) -> dict:
    lab = Lab(base)
    rng = random.Random(seed)
    try:
        lab.start_agent()
        address = lab.start_bridge(crash_at)
        phone = Phone()
        timer = threading.Timer(random_kill, lab.kill_bridge) if random_kill is not None else None
        with lab.client(address) as c:
            if timer is not None:
                timer.start()
            phone.burst(c, burst, rng)
        if timer is not None:
            timer.cancel()  # the burst may end before the kill: never kill the next bridge
            timer.join()
        try:
            lab.bridge.wait(timeout=3)  # a crash point fired: the process is dying
            crashed = True
        except subprocess.TimeoutExpired:
            crashed = False
        lab.kill_bridge()
        if restart_agent:
            lab.kill_agent()
            lab.start_agent()
        address = lab.start_bridge()
        time.sleep(0.5)
        with lab.client(address) as c:
            phone.retry_all(c)
            drain(c)
        result = tally(phone, read_agent(lab.sock))
        result["crashed"] = crashed
        return result
    finally:
        lab.stop()
