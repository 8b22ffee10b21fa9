"""The lead's own refusals of writes to a member's agent are remembered, with real processes (crew.md §3;
features B2, B3, B7; docs/phone-api.md).

A real lead and member (`collie serve`) over loopback, the member's agent the `tally` fixture, whose
fsync'd ledger is an independent count of what the agent applied. Invariant: a card answer the lead
refused (`busy`, `machine_offline`) and that the phone repeats under the same request id gets the same
refusal with `replay: true` — after the lock frees, after the member comes back, after the lead
restarts — and never reaches the agent.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import pytest

from collie.fixtures.tally import read_ledger
from tests.crewlab import REPO, Crew, CutProxy, Machine, wait_for
from tests.livelab import short_dir

pytestmark = pytest.mark.slow


@pytest.fixture
def crew():
    c = Crew(short_dir("cr"))
    yield c
    c.stop()


def rid() -> str:
    return str(uuid.uuid4())


class CountingProxy(CutProxy):
    """The member's link through a loopback proxy that counts the bytes the lead sent to the member: a
    write the lead forwarded to a frozen member shows here (its frame waits in the socket)."""

    def __init__(self, target_port: int) -> None:
        self.to_member = 0
        super().__init__(target_port)

    def _passing(self, source, data: bytes) -> None:
        if source.getpeername()[1] == self.target:
            self.to_member += len(data)


def join(crew: Crew, label: str, address: str) -> Machine:
    m = crew.members[label] = Machine(crew.base, label)
    assert crew.lead.collie("crew", "invite", "--label", label).returncode == 0
    token = (crew.lead.paths.state_dir / "invites" / f"{label}.token").read_text().strip()
    joined = m.collie("crew", "join", address, "--token-env", "T", "--label", label, env={"T": token})
    assert joined.returncode == 0, joined.stderr
    return m


def tally(m: Machine) -> Path:
    """The `tally` agent on member `m`, attached as `tally`; returns its ledger."""
    sock, ledger = m.run / "tally.sock", m.run / "ledger.jsonl"
    proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures.tally", "--socket", str(sock), "--ledger", str(ledger)],
                            cwd=REPO, env=m.env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout.readline().startswith("listening")
    m.agents["tally"] = proc
    assert m.collie("durable", "attach", "tally", "--socket", str(sock)).returncode == 0
    return ledger


def open_ask(c, label: str) -> dict:
    def ready():
        got = c.get(f"/api/agents/{label}/tally/conversations/asks")
        return got.json() if got.status_code == 200 and got.json().get("ask") else None
    return wait_for(ready, timeout=40, what="the member's agent asks")


def answer(c, label: str, pane: dict, request_id: str, option: str = "yes") -> dict:
    ask = pane["ask"]
    got = c.post(f"/api/ask/{ask['id']}", json={"request_id": request_id, "machine": label, "agent": "tally",
                                                "digest": ask["digest"], "answer": {"option_ids": [option]}})
    assert got.status_code == 200, got.text
    return got.json()


def applied(ledger: Path, request_id: str) -> list[dict]:
    return [r for r in read_ledger(ledger) if r["request_id"] == request_id]


def test_a_card_answer_refused_busy_is_refused_again_after_the_lock_frees(crew):
    """B7, crew.md §3: while a Stop of the ask's conversation waits on a frozen member, a card answer is
    refused `busy`; repeated under the same request id once the member answered and the lock is free,
    it gets the same refusal with `replay: true`, and the agent never saw it (its ledger); the same id
    with another body is refused `conflict`; a new tap goes through."""
    crew.start_lead()
    proxy = CountingProxy(int(crew.address.rsplit(":", 1)[1]))
    try:
        m = join(crew, "box", f"ws://127.0.0.1:{proxy.port}")
        ledger = tally(m)
        m.serve()
        wait_for(lambda: crew.online("box"), what="member online")
        with crew.client() as c:
            pane = open_ask(c, "box")
            m.kill(signal.SIGSTOP)  # the member freezes: what the lead forwards now waits for it
            before = proxy.to_member
            stopped: dict = {}

            def stop():
                with crew.client() as c2:
                    stopped["receipt"] = c2.post("/api/agents/box/tally/conversations/asks/stop",
                                                 json={"request_id": rid(), "turn": pane["turn"]}).json()
            holder = threading.Thread(target=stop)
            holder.start()
            wait_for(lambda: proxy.to_member > before, what="the stop forwarded: the lead holds the lock")
            tap = rid()
            first = answer(c, "box", pane, tap)
            assert (first["outcome"], first["reason"], first["replay"]) == ("refused", "busy", False)
            m.bridge.send_signal(signal.SIGCONT)
            holder.join(timeout=30)
            assert stopped["receipt"]["outcome"] != "unknown", stopped  # the member answered: the lock is free
            again = answer(c, "box", pane, tap)
            assert again == {**first, "replay": True}
            other = answer(c, "box", pane, tap, option="no")
            assert (other["outcome"], other["reason"]) == ("refused", "conflict")
            assert applied(ledger, tap) == []
            fresh = rid()
            got = answer(c, "box", pane, fresh)
            assert got["outcome"] == "accepted", got
            assert [r["applied"] for r in applied(ledger, fresh)] == [True]
            assert applied(ledger, tap) == []
    finally:
        proxy.close()


def test_a_card_answer_refused_offline_is_refused_again_when_the_member_is_back_and_after_a_lead_restart(crew):
    """crew.md §3–§4, B2: a card answer refused `machine_offline`, repeated under the same request id once
    the member is back, gets the same refusal with `replay: true` — also from a lead killed and started
    again — and the agent never saw it (its ledger)."""
    crew.start_lead()
    m = crew.add_member("box")
    ledger = tally(m)
    m.serve()
    wait_for(lambda: crew.online("box"), what="member online")
    with crew.client() as c:
        pane = open_ask(c, "box")
        m.kill()  # the lid closes: kill -9
        wait_for(lambda: not crew.online("box"), what="member offline")
        tap = rid()
        first = answer(c, "box", pane, tap)
        assert (first["outcome"], first["reason"], first["replay"]) == ("refused", "machine_offline", False)
        m.serve()
        wait_for(lambda: crew.online("box"), timeout=40, what="member back")
        assert open_ask(c, "box")["ask"] == pane["ask"]  # the same ask, still open
        assert answer(c, "box", pane, tap) == {**first, "replay": True}
    crew.lead.kill()
    crew.lead.serve("--port", crew.address.rsplit(":", 1)[1])
    wait_for(lambda: crew.online("box"), timeout=60, what="member back on the restarted lead")
    with crew.client() as c:
        open_ask(c, "box")
        assert answer(c, "box", pane, tap) == {**first, "replay": True}
        assert applied(ledger, tap) == []
        fresh = rid()
        got = answer(c, "box", pane, fresh)
        assert got["outcome"] == "accepted", got
        assert applied(ledger, tap) == []
