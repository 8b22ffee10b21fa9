"""Canary (issue 15.3; T5, security rules): a token set as an agent's token, a member token and an API
token appears in no log line, CLI output, API response, live event, push payload or file other than the
ones meant to hold it — and those are 0600. A whole crew runs, is used through every door, restarted,
and then everything it left behind is searched."""

from __future__ import annotations

import re
import secrets
import signal
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from tests.crewlab import REPO, Crew, wait_for
from tests.livelab import short_dir
from tests.pushlab import FakePushService, Subscriber

pytestmark = pytest.mark.slow


def test_no_token_leaks_anywhere():
    base = short_dir("cy")
    crew = Crew(base)
    service = FakePushService()
    agent_token = "canaryA" + secrets.token_hex(28)
    seen: list[str] = []  # every output and answer the test saw
    procs: list[subprocess.Popen] = []
    try:
        # an agent reached over loopback HTTP with a canary token (T4, T5)
        env = {**crew.lead.env, "COLLIE_TOKEN": agent_token}
        agent = subprocess.Popen([sys.executable, "-m", "collie.fixtures", "deployer", "--url", "http://127.0.0.1:0"],
                                 cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(agent)
        url = agent.stdout.readline().split(" ", 1)[1].strip()
        out = crew.lead.collie("durable", "attach", "web", "--url", url, "--token-env", "AT", env={"AT": agent_token})
        assert out.returncode == 0, out.stderr
        seen += [out.stdout, out.stderr]
        crew.start_lead()
        member = crew.add_member("workshop")
        member.agent("lab", "streamer")
        member.serve()
        wait_for(lambda: crew.online("workshop"), what="member online")
        member_token = _read_member_token(member)
        api = crew.lead.collie("tokens", "create", "relay", "--approval", "standing")
        seen += [api.stdout, api.stderr]
        api_token = Path(re.search(r"(/\S+\.token)", api.stdout).group(1)).read_text().strip()
        canaries = {"agent": agent_token, "member": member_token, "api": api_token}

        with crew.client() as c:
            wait_for(lambda: all(a["status"] == "ready" for s in c.get("/api/dashboard").json()["sections"]
                                 for a in s["agents"]), what="every agent ready")
            sub = Subscriber(service.url("/ok/canary"))
            seen.append(c.post("/api/push/subscribe", json=sub.json()).text)
            events: list[str] = []
            stop = threading.Event()

            def listen():
                try:
                    with httpx.Client(base_url=crew.address, timeout=None,
                                      headers=dict(c.headers)) as ec:
                        with ec.stream("GET", "/api/events?machine=workshop&agent=lab&conversation=chat") as r:
                            for line in r.iter_lines():
                                events.append(line)
                                if stop.is_set():
                                    return
                except httpx.HTTPError:
                    pass
            t = threading.Thread(target=listen, daemon=True)
            t.start()
            for path in ("/api/dashboard", "/api/needs", "/api/agents/local/web/conversations",
                         "/api/agents/local/web/conversations/deploy", "/api/agents/local/web/conversations/deploy/items",
                         "/api/agents/workshop/lab/conversations/chat", "/api/agents/workshop/lab/inbox",
                         "/api/push/key", "/api/agents/local/web/conversations?closed=1"):
                seen.append(c.get(path).text)
            pane = c.get("/api/agents/local/web/conversations/deploy").json()
            ask = pane["ask"]
            seen.append(c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "agent": "web",
                                                              "digest": ask["digest"],
                                                              "answer": {"option_ids": ["no"]}}).text)
            turn = c.get("/api/agents/workshop/lab/conversations/chat").json()["turn"]
            seen.append(c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": "workshop",
                                                  "agent": "lab", "conversation": "chat", "text": "hello",
                                                  "turn": turn}).text)
            turn = c.get("/api/agents/local/web/conversations/deploy").json()["turn"]
            seen.append(c.post("/api/send", json={"request_id": str(uuid.uuid4()), "agent": "web",  # asks again: a push
                                                  "conversation": "deploy", "text": "deploy", "turn": turn}).text)
            with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {api_token}"}) as relay:
                seen.append(relay.post("/api/agents/workshop/lab/inbox", json={
                    "request_id": str(uuid.uuid4()), "conversation": "chat", "text": "from the relay"}).text)
                seen.append(relay.get("/api/dashboard").text)  # refused: the reason must not echo the token
            with httpx.Client(base_url=crew.address, headers={"authorization": f"Bearer {member_token}"}) as wrong:
                seen.append(wrong.get("/api/dashboard").text)
            with httpx.Client(base_url=crew.address, headers={"authorization": "Bearer " + agent_token}) as wrong:
                seen.append(wrong.get("/api/dashboard").text)
            wait_for(lambda: service.received, what="a push")
            seen += [repr(sub.decrypt(r["body"])) for r in service.received]
            seen += [repr(r["headers"]) for r in service.received]
            stop.set()
        for m in (crew.lead, member):
            for verb in (("status",), ("doctor",), ("durable", "list"), ("logs", "-n", "0"), ("crew", "list"),
                         ("tokens", "list"), ("devices",)):
                got = m.collie(*verb)
                seen += [got.stdout, got.stderr]
        assert crew.lead.collie("restart").returncode == 0
        member.kill(signal.SIGTERM)
        crew.lead.kill(signal.SIGTERM)
        seen += events

        # what the test saw
        for name, token in canaries.items():
            for text in seen:
                assert token not in text, f"the {name} token leaked into an output or answer: {text[:200]!r}"
        # every file the crew left behind
        allowed = {
            "agent": {crew.lead.paths.config_dir / "sources.json"},
            "member": {member.paths.config_dir / "crew.json"},
            "api": {crew.lead.paths.state_dir / "tokens" / "relay.token"},
        }
        for f in base.rglob("*"):  # both machines' config and state folders, logs, caches, journals
            if not f.is_file() or f.is_symlink():
                continue
            data = f.read_bytes()
            for name, token in canaries.items():
                if token.encode() in data:
                    assert f in allowed[name], f"the {name} token is in {f}"
                    assert stat.S_IMODE(f.stat().st_mode) == 0o600, f"{f} holds a token and is not 0600"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()
        service.close()
        crew.stop()


def _read_member_token(member) -> str:
    import json

    return json.loads((member.paths.config_dir / "crew.json").read_text())["token"]
