"""A send behind another write waits its turn, as real processes (issue 27; crew.md §3; features B7, I1).

The agent is tests/independent_agent.py (written from docs/wire-v1.md alone), whose ledger is its own
record of the writes it applied; its `hold:3` fault answers the next write 3 s after applying it, so
that write holds the conversation's lock on the lead (and, on a member, on the member too).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid
from urllib.parse import quote

import pytest

from tests.crewlab import REPO, Crew, wait_for
from tests.independent_agent import CONV_ID
from tests.livelab import short_dir

pytestmark = pytest.mark.slow


@pytest.fixture
def crew():
    c = Crew(short_dir("cw"))
    yield c
    c.stop()


def start_indie(machine, folder) -> str:
    folder.mkdir(mode=0o700)
    proc = subprocess.Popen([sys.executable, "-m", "tests.independent_agent", str(folder)], cwd=REPO,
                            env=machine.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().startswith("listening ")
    machine.agents["indie"] = proc
    sock = str(folder / "sock" / "agent.sock")
    assert machine.collie("durable", "attach", "indie", "--socket", sock).returncode == 0
    return sock


def ledger(folder) -> list[dict]:
    try:
        return [json.loads(line) for line in (folder / "ledger.jsonl").read_text().splitlines()]
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("where", ["local", "laptop"])
def test_a_send_behind_a_held_rename_waits_and_reaches_the_agent_once_after_it(crew, where):
    """Issue 27: while a rename holds the conversation (the agent answers it 3 s late), a phone send and an
    inbox sender's send to it are answered `queued` — never `busy` — and the agent's own ledger shows the
    rename, then each send, once each; their items end `done`, not `failed`. On the lead's own agent and on
    a member's."""
    folder = crew.base / "indie"
    if where == "local":
        start_indie(crew.lead, folder)
        crew.start_lead()
    else:
        crew.start_lead()
        m = crew.add_member(where)
        start_indie(m, folder)
        m.serve()
        wait_for(lambda: crew.online(where), what="member online")
    token = crew.lead.collie("tokens", "create", "relay", "--approval", "standing")
    assert token.returncode == 0, token.stderr
    relay_token = (crew.lead.paths.state_dir / "tokens" / "relay.token").read_text().strip()
    conv = f"/api/agents/{where}/indie/conversations/{quote(CONV_ID, safe='')}"
    with crew.client() as c:
        pane = wait_for(lambda: c.get(conv).json() if c.get(conv).status_code == 200 else None, timeout=40,
                        what="the agent's pane")
        (folder / "fault").write_text("hold:3")
        rename = str(uuid.uuid4())
        held: dict = {}
        holder = threading.Thread(target=lambda: held.update(
            c.post(f"{conv}/rename", json={"request_id": rename, "title": "Held"}).json()))
        holder.start()
        wait_for(lambda: any(r["request_id"] == rename for r in ledger(folder)), what="the rename applied")
        phone = c.post("/api/send", json={"request_id": str(uuid.uuid4()), "machine": where, "agent": "indie",
                                          "conversation": CONV_ID, "text": "from the phone",
                                          "turn": pane["turn"]}).json()
        relay = c.post(f"/api/agents/{where}/indie/inbox", headers={"authorization": f"Bearer {relay_token}"},
                       json={"request_id": str(uuid.uuid4()), "conversation": CONV_ID, "text": "from a sender"}).json()
        assert (phone["outcome"], phone["reason"]) == ("queued", "inbox"), phone
        assert relay["outcome"] == "queued", relay
        holder.join(timeout=30)
        assert held.get("outcome") == "done", held
        ids = [phone["request_id"], relay["item"]]

        def states():
            got = [c.get(f"/api/inbox/{i}").json().get("state") for i in ids]
            return got if all(s in ("done", "failed", "cancelled", "expired") for s in got) else None
        assert wait_for(states, timeout=60, what="both sends ran") == ["done", "done"]
        applied = [r["request_id"] for r in ledger(folder)]
        assert applied == [rename, *ids], applied  # in order, once each
