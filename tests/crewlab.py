"""A lead and members as real processes on loopback, each with its own config and state folders."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import httpx

from collie.crew import control
from collie.crew.errors import NotRunningError
from collie.crew.paths import Paths
from tests.procs import LIMIT

REPO = Path(__file__).resolve().parent.parent


def wait_for(fn, timeout: float = LIMIT, what: str = "condition"):
    """`fn()` once it is true, asked every 50 ms; only a condition never met reaches the generous `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not met in time")


class Machine:
    def __init__(self, base: Path, name: str) -> None:
        self.name = name
        self.paths = Paths(config_dir=base / name / "cfg", state_dir=base / name / "state")
        self.run = base / "run" / name
        self.run.mkdir(parents=True, mode=0o700, exist_ok=True)
        os.chmod(self.run.parent, 0o700)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("COLLIE_")}
        self.env.update(COLLIE_PUSH_LOOPBACK="1",  # the tests' push services listen on loopback (docs/push.md)
                        COLLIE_CONFIG_DIR=str(self.paths.config_dir), COLLIE_STATE_DIR=str(self.paths.state_dir),
                        PYTHONPATH=str(REPO))
        self.bridge: subprocess.Popen | None = None
        self.agents: dict[str, subprocess.Popen] = {}

    def collie(self, *argv: str, env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *argv], cwd=REPO, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=60)

    def agent(self, name: str, kind: str, *extra: str) -> None:
        sock = self.run / f"{name}.sock"
        proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", kind, "--socket", str(sock), *extra], cwd=REPO,
                                env=self.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert proc.stdout.readline().startswith("listening")
        self.agents[name] = proc
        assert self.collie("durable", "attach", name, "--socket", str(sock)).returncode == 0

    def serve(self, *args: str) -> dict:
        self.bridge = subprocess.Popen([sys.executable, "-m", "collie.crew.cli.main", "serve", *args], cwd=REPO, env=self.env,
                                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        def up():
            try:
                return control.call(self.paths.control_socket, "ping", timeout=1)
            except NotRunningError:
                if self.bridge.poll() is not None:
                    raise AssertionError(f"{self.name}: bridge exited {self.bridge.returncode}: {self.log()[-2000:]}")
                return None
        return wait_for(up, what=f"{self.name} bridge up")

    def log(self) -> str:
        try:
            return self.paths.log.read_text()
        except FileNotFoundError:
            return ""

    def kill(self, sig=signal.SIGKILL) -> None:
        if self.bridge and self.bridge.poll() is None:
            self.bridge.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.bridge.wait(timeout=LIMIT)

    def stop(self) -> None:
        if self.bridge and self.bridge.poll() is None:
            self.bridge.send_signal(signal.SIGCONT)
            self.bridge.kill()
            self.bridge.wait()
        for proc in self.agents.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc.stdout.close()


class Crew:
    def __init__(self, base: Path) -> None:
        self.base = base
        os.chmod(base, 0o700)
        self.lead = Machine(base, "lead")
        self.members: dict[str, Machine] = {}
        self.address = ""

    def __enter__(self) -> "Crew":
        return self

    def __exit__(self, *exc) -> None:
        """However the block ends (a fixture's setup failing included), every process of the crew ends."""
        self.stop()

    def start_lead(self, *args: str) -> None:
        pong = self.lead.serve("--port", "0", *args)
        self.address = pong["address"]

    def client(self) -> httpx.Client:
        token = (self.lead.paths.state_dir / "api-token").read_text().strip()
        return httpx.Client(base_url=self.address, headers={"authorization": f"Bearer {token}"}, timeout=30)

    def add_member(self, label: str) -> Machine:
        m = Machine(self.base, label)
        self.members[label] = m
        out = self.lead.collie("crew", "invite", "--label", label)
        assert out.returncode == 0, out.stderr
        token = (self.lead.paths.state_dir / "invites" / f"{label}.token").read_text().strip()
        ws = self.address.replace("http://", "ws://")
        joined = m.collie("crew", "join", ws, "--token-env", "T", "--label", label, env={"T": token})
        assert joined.returncode == 0, joined.stderr
        return m

    def online(self, label: str) -> bool:
        members = control.call(self.lead.paths.control_socket, "crew")["members"]
        return any(x["label"] == label and x["online"] for x in members)

    def stop(self) -> None:
        for m in self.members.values():
            m.stop()
        self.lead.stop()


def items_of(c: httpx.Client, machine: str, agent: str, conv: str) -> list[dict]:
    got = c.get(f"/api/agents/{machine}/{agent}/conversations/{conv}/items")
    return got.json().get("items", []) if got.status_code == 200 else []


def user_request_ids(c: httpx.Client, machine: str, agent: str, conv: str) -> list[str]:
    return [i.get("request_id") for i in items_of(c, machine, agent, conv) if i["kind"] == "user"]


def dump(obj) -> str:
    return json.dumps(obj, indent=1)[:3000]


class CutProxy:
    """A TCP proxy on loopback between a member and its lead; `cut()` drops every connection at once."""

    def __init__(self, target_port: int) -> None:
        import socket
        import threading

        self.target = target_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.conns: list = []
        self.lock = threading.Lock()
        self.open = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        import socket
        import threading

        while self.open:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, a, b) -> None:
        try:
            while data := a.recv(65536):
                self._passing(a, data)
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.close()
                except OSError:
                    pass

    def _passing(self, source, data: bytes) -> None:
        """Called with every chunk before it goes on (`source` is the socket it came from)."""

    def cut(self) -> None:
        import socket

        with self.lock:
            conns, self.conns = self.conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass

    def close(self) -> None:
        self.open = False
        self.cut()
        self.server.close()


def fake_view(name: str, conversations: int = 1, instance: str = "sim-1", turn: int = 3) -> dict:
    """An agent's view as a member sends it (crew.md §2), for members simulated by a test or a benchmark."""
    hello = {"wire": {"min": 1, "max": 1}, "runtime": "sim", "instance": instance,
             "caps": ["asks", "send", "steer", "abort", "history", "watch", "rename"], "limits": {"text_max": 2000}}
    convs = [{"id": f"c{i:02d}", "title": f"Conversation {i}", "subtitle": None, "workspace": {"id": "w", "title": "Work"},
              "tab": {"id": "t", "title": None}, "harness": "sim", "state": "idle", "turn": turn,
              "activity": "2026-11-30T01:00:00Z", "progress": None, "asks": [], "actions": [], "items_rev": 10}
             for i in range(conversations)]
    state = {"rev": 10, "instance": instance, "subtitle": None, "conversations": convs, "starters": []}
    status = {"name": name, "transport": "socket", "address": "/run/sim.sock", "local": True, "status": "ready"}
    return {"name": name, "status": status, "hello": hello, "state": state}


def hello_frame(label: str, boot: str = "sim-boot") -> str:
    return json.dumps({"type": "hello", "label": label, "collie": "0.1.0", "crew_wire": {"min": 1, "max": 1},
                       "ops": [], "boot": boot})


def invite(crew: Crew, label: str) -> str:
    """A member token for `label`, as `collie crew invite` makes it (for a member simulated in the test)."""
    out = crew.lead.collie("crew", "invite", "--label", label)
    assert out.returncode == 0, out.stderr
    return (crew.lead.paths.state_dir / "invites" / f"{label}.token").read_text().strip()


# --- simulated members (tests and bench/: crew_scale, live_channel, phone_app) ------------------------
def invite_sims(crew: Crew, n: int, prefix: str = "sim") -> list[tuple[str, str]]:
    """`n` member tokens written straight into the lead's crew store (faster than `collie crew invite`
    for a hundred members): [(label, token)]."""
    import secrets

    from collie.crew.crewstore import CrewStore

    store = CrewStore(crew.lead.paths.state_dir / "crew.sqlite")
    try:
        sims = [(f"{prefix}{i:02d}", secrets.token_hex(32)) for i in range(n)]
        for label, token in sims:
            store.invite(label, token)
    finally:
        store.close()
    return sims


def toggle_ask(view: dict, key: str) -> dict:
    """Raise an ask titled `key` in the first conversation of `view`, or close the open one: the next
    `agent` frame of a simulated member (its state's rev moves on)."""
    view["state"]["rev"] += 1
    conv = view["state"]["conversations"][0]
    conv["asks"] = [] if conv["asks"] else [{"id": key, "kind": "permission", "title": key,
                                             "options": [{"id": "y", "label": "Yes", "role": "allow"}]}]
    conv["state"] = "waiting" if conv["asks"] else "idle"
    return view


async def sim_member(url: str, label: str, token: str, *, agents: int = 10, conversations: int = 20,
                     ready=None, changes=None, on_change=None, beat: float = 10.0) -> None:
    """One member simulated on a real WebSocket link (crew.md §2): hello, a snapshot of `agents` fake
    views of `conversations` open conversations each, then a beat every `beat` s, until cancelled.
    `ready()` is called once the snapshot is sent. With `changes` (a trio receive channel of keys), each
    key toggles an ask on the first agent (`toggle_ask`) and sends its `agent` frame; `on_change(key)` is
    called just before the frame leaves."""
    import secrets

    import trio
    from trio_websocket import open_websocket_url

    headers = [(b"authorization", f"Bearer {token}".encode())]
    async with open_websocket_url(url, extra_headers=headers) as ws:
        await ws.send_message(hello_frame(label, boot="x"))
        await ws.get_message()
        views = [fake_view(f"agent{a}", conversations, secrets.token_hex(4)) for a in range(agents)]
        await ws.send_message(json.dumps({"type": "snapshot", "agents": views}))
        if ready is not None:
            ready()
        async with trio.open_nursery() as n:
            async def beats():
                while True:
                    await trio.sleep(beat)
                    await ws.send_message(json.dumps({"type": "beat"}))
            n.start_soon(beats)
            if changes is not None:
                async for key in changes:
                    view = toggle_ask(views[0], key)
                    if on_change is not None:
                        on_change(key)
                    await ws.send_message(json.dumps({"type": "agent", "name": view["name"],
                                                      "view": {k: v for k, v in view.items() if k != "name"}}))


async def start_sims(nursery, crew: Crew, sims: list[tuple[str, str]], *, changes: list | None = None,
                     **kw) -> None:
    """Start `sim_member` for each (label, token) of `sims` in `nursery` (with `changes[i]` for the
    i-th when given) and return once every one has sent its snapshot."""
    import trio

    url = crew.address.replace("http://", "ws://").replace("https://", "wss://") + "/crew/v1"
    left = [len(sims)]
    all_ready = trio.Event()

    def ready() -> None:
        left[0] -= 1
        if left[0] == 0:
            all_ready.set()

    for i, (label, token) in enumerate(sims):
        nursery.start_soon(partial(sim_member, url, label, token, ready=ready,
                                   changes=changes[i] if changes else None, **kw))
    if sims:
        await all_ready.wait()


# --- fake members from the testing kit (collie.fixtures.member, docs/testing.md; issue 28) ----------------
async def start_fake_members(nursery, crew: Crew, sims: list[tuple[str, str]], **kw) -> list:
    """A `collie.fixtures.member.FakeMember` for each (label, token) of `sims`, run in `nursery`; returns them
    once every one has sent its snapshot. `kw`: agents, conversations, script, beat (FakeMember's)."""
    from collie.fixtures.member import FakeMember

    members = [FakeMember(crew.address, label, token, **kw) for label, token in sims]
    for m in members:
        nursery.start_soon(m.run)
    for m in members:
        await m.wait_joined()
    return members


def toggle_fake_ask(member, key: str, agent: str = "agent-1", conversation: str = "c1") -> None:
    """Raise an ask titled `key` in a fake member's conversation, or close the open one (what
    `toggle_ask` does to a simulated member's view)."""
    if member.agent(agent).conversation(conversation).asks:
        member.close_ask(agent, conversation)
    else:
        member.raise_ask(agent, conversation, title=key)
