"""Our bridge against a durable agent written from docs/wire-v1.md alone (tests/independent_agent.py:
asyncio, a hand-written HTTP/1.1 server, chunked and `Connection: close` answers, odd header case,
unknown fields everywhere, ids that need percent-encoding, unicode). Real processes, attached and
driven the documented way (`collie durable attach`, `collie serve`, the phone API).

Invariant: every receipt is true against the agent's own ledger — `sent`/`done`/`accepted`/… means
the agent applied it exactly once, `refused` means nothing reached it — including when the agent is
killed after applying a write and before answering, and comes back with its `rev` started over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.independent_agent import CONV_ID, digest
from tests.livelab import cleanup, short_dir

pytestmark = pytest.mark.slow
Q = lambda s: quote(s, safe="")  # noqa: E731
CONV = f"/api/agents/local/indie/conversations/{Q(CONV_ID)}"


class Indie:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc: subprocess.Popen | None = None

    def start(self, **env: str) -> None:
        with open(self.folder / "agent.log", "a") as log:  # the child keeps its own copy of the descriptor
            self._start(log, env)

    def _start(self, log, env: dict) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.independent_agent", str(self.folder)], cwd=REPO,
                                     env={**os.environ, **env}, stdout=subprocess.PIPE,
                                     stderr=log, text=True)
        assert self.proc.stdout.readline().startswith("listening ")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()
            self.proc.stdout.close()

    @property
    def sock(self) -> str:
        return str(self.folder / "sock" / "agent.sock")

    def ledger(self, rid: str) -> list[dict]:
        path = self.folder / "ledger.jsonl"
        return [e for e in map(json.loads, path.read_text().splitlines()) if e["request_id"] == rid]

    def conv(self) -> dict:
        return json.loads((self.folder / "state.json").read_text())["convs"][CONV_ID]


@pytest.fixture
def lab(paths, bridge):
    run = short_dir("ia")
    indie = Indie(run)
    indie.start()
    assert run_collie(paths, "durable", "attach", "indie", "--socket", indie.sock).returncode == 0
    address = bridge(env=collie_env(paths)).wait_ready()["address"]
    token = (paths.state_dir / "api-token").read_text().strip()
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=30) as c:
        wait_for(lambda: pane(c).get("agent_status") == "ready")
        yield c, indie
    indie.stop()
    cleanup(run)


def pane(c: httpx.Client) -> dict:
    return c.get(CONV).json()


def post(c: httpx.Client, path: str, **body) -> tuple[str, dict]:
    rid = body.setdefault("request_id", str(uuid.uuid4()))
    r = c.post(path, json=body)
    assert r.status_code == 200, r.text
    return rid, r.json()


def test_every_write_of_the_docs_and_its_receipt_against_the_agents_ledger(lab):
    """B2–B8, wire §4/§6: each receipt matches what the agent recorded, exactly once; refusals reach nothing."""
    c, indie = lab
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="héllo ✓ 🚀", turn=0)
    assert (r["outcome"], r["turn"], r["message"]) == ("sent", 1, "reçu ✓")
    assert [e["outcome"]["outcome"] for e in indie.ledger(rid)] == ["sent"]
    wait_for(lambda: pane(c)["turn"] == 1)

    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="hold on", turn=1)
    assert r["outcome"] == "sent" and indie.ledger(rid)
    wait_for(lambda: pane(c)["state"] == "working")
    rid, r = post(c, f"{CONV}/steer", text="à gauche", turn=2)
    assert r["outcome"] == "sent" and indie.ledger(rid)[0]["outcome"] == {"outcome": "sent"}
    rid, r = post(c, f"{CONV}/actions/{Q('ship it?#')}", turn=2)
    assert r["outcome"] == "done" and indie.ledger(rid)[0]["target"].endswith("ship it?#")
    for action, reason in (("busy one", "busy"), ("off", "disabled"), ("a5", "not_found")):  # a5: past the 4 drawn
        rid, r = post(c, f"{CONV}/actions/{Q(action)}", turn=2)
        assert (r["outcome"], r["reason"]) == ("refused", reason) and indie.ledger(rid) == []
    rid, r = post(c, f"{CONV}/stop", turn=2)
    assert r["outcome"] == "stopped" and indie.ledger(rid)
    wait_for(lambda: pane(c)["state"] == "idle")

    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="x" * 2001, turn=2)
    assert (r["outcome"], r["reason"]) == ("refused", "too_long") and indie.ledger(rid) == []

    answers = {"permission": {"option_ids": ["yes"]}, "choice": {"option_ids": ["a b", "β"]},
               "text": {"text": "staging-2 ✓"}, "form": {"fields": {"env": "staging", "force": True}}}
    for kind, answer in answers.items():
        turn = pane(c)["turn"]
        rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text=f"ask {kind}", turn=turn)
        assert r["outcome"] == "sent"
        ask = wait_for(lambda: pane(c)["ask"])
        assert ask["digest"] == digest(indie.conv()["asks"][0])  # RFC 8785 of the raw object: 1.0, 1e-7, nulls
        rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="too soon", turn=turn + 1)
        assert (r["outcome"], r["reason"]) == ("refused", "ask_open") and indie.ledger(rid) == []
        rid, r = post(c, f"/api/ask/{Q(ask['id'])}", agent="indie", digest=ask["digest"], answer=answer)
        assert (r["outcome"], r["message"]) == ("accepted", "merci") and len(indie.ledger(rid)) == 1
        wait_for(lambda: pane(c)["ask"] is None)

    rid, r = post(c, f"/api/agents/local/indie/starters/{Q('triage ?#1')}")
    assert (r["outcome"], r["conversation"]) == ("started", "s 1") and len(indie.ledger(rid)) == 1
    for op, body in (("rename", {"title": "Nouveau ✓"}), ("close", {}), ("reopen", {})):
        rid, r = post(c, f"/api/agents/local/indie/conversations/{Q('s 1')}/{op}", **body)
        assert r["outcome"] == "done" and len(indie.ledger(rid)) == 1, (op, r)
        wait_for(lambda: (op == "close") != any(
            row["id"] == "s 1" for row in c.get("/api/agents/local/indie/conversations").json()["open"]))


def test_agent_killed_after_applying_comes_back_with_rev_started_over(lab):
    """Wire §1, §3, §8; W3: killed after applying a send and before answering, the receipt is `unknown`,
    never `refused`; the bridge resends it under its id and the agent applies it once. The agent comes
    back with its `rev` started over (legal: that is why the ETag holds `instance`); the bridge reads it
    again at once — ready, the turn the agent has — and the next send quoting that turn is sent."""
    c, indie = lab
    for n in range(8):  # the agent's rev climbs well above where the restarted one starts
        assert post(c, f"{CONV}/rename", title=f"t{n}")[1]["outcome"] == "done"
    (indie.folder / "fault").write_text("after")
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="first", turn=0)
    assert r["outcome"] == "unknown" and len(indie.ledger(rid)) == 1
    indie.stop()
    indie.start(INDIE_REV_FROM_ONE="1")
    wait_for(lambda: post(c, "/api/send", agent="indie", conversation=CONV_ID, text="first", turn=0,
                          request_id=rid)[1]["outcome"] == "sent", what="the send resolved")
    assert len(indie.ledger(rid)) == 1
    wait_for(lambda: pane(c)["agent_status"] == "ready" and pane(c)["turn"] == 1, timeout=8,
             what="the restarted agent read again")
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="second", turn=1)
    assert (r["outcome"], r["turn"]) == ("sent", 2) and len(indie.ledger(rid)) == 1


def test_an_agent_answering_conflict_does_not_hold_up_later_sends(lab):
    """Wire §1, B3, I2: an agent that answers a send `400 conflict` (it holds that id with another body)
    did nothing with it: the receipt is the final `unknown` (May already be applied), and the next
    send to that agent is sent at once — the inbox does not wait on the first forever."""
    c, indie = lab
    (indie.folder / "fault").write_text("conflict")
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="one", turn=0)
    assert (r["outcome"], r["reason"]) == ("unknown", "conflict") and indie.ledger(rid) == []
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="two", turn=0)
    assert (r["outcome"], r["turn"]) == ("sent", 1) and len(indie.ledger(rid)) == 1


@pytest.mark.parametrize("answer", ['{"outcome": "maybe"}', '{"outcome": "sent"}', '[1]'])
def test_an_answer_outside_the_wire_table_is_unknown_and_holds_nothing_up(lab, answer):
    """Wire §6, B3: the agent applied a send but answered outside the table (an outcome the route does
    not have, `sent` without its `turn`, not an object): the receipt is the final `unknown` (protocol,
    May already be applied) — not the misfit passed on — it is applied once, and the next send goes."""
    c, indie = lab
    (indie.folder / "fault").write_text("answer:" + answer)
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="one", turn=0)
    assert (r["outcome"], r["reason"], r["text"]) == ("unknown", "protocol", "May already be applied. Check the chat.")
    assert len(indie.ledger(rid)) == 1
    wait_for(lambda: pane(c)["turn"] == 1)
    rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text="two", turn=1)
    assert (r["outcome"], r["turn"]) == ("sent", 2) and len(indie.ledger(rid)) == 1


def test_an_ask_that_changed_at_the_agent_comes_back_with_the_receipt(lab):
    """Wire §4, B5, O: the ask changed at the agent after the bridge read it; the agent's own digest
    check answers `changed` and applies nothing. The receipt carries `current_ask` — the ask as it stands
    now, as docs/phone-api.md promises for `changed` — so the phone shows it and a tap answers it."""
    c, indie = lab
    post(c, "/api/send", agent="indie", conversation=CONV_ID, text="ask choice", turn=0)
    ask = wait_for(lambda: pane(c)["ask"])
    (indie.folder / "fault").write_text("mutate")
    rid, r = post(c, f"/api/ask/{Q(ask['id'])}", agent="indie", digest=ask["digest"], answer={"option_ids": ["a b"]})
    assert r["outcome"] == "changed" and [e["outcome"] for e in indie.ledger(rid)] == [{"outcome": "changed"}]
    now = indie.conv()["asks"][0]
    assert r["current_ask"]["title"] == now["title"] and r["current_ask"]["digest"] == digest(now)
    rid, r = post(c, f"/api/ask/{Q(ask['id'])}", agent="indie", digest=r["current_ask"]["digest"],
                  answer={"option_ids": ["a b"]})
    assert r["outcome"] == "accepted" and len(indie.ledger(rid)) == 1


def test_an_agent_that_does_not_echo_request_ids_is_matched_by_text(lab):
    """C3, C4, wire §6: an agent that cannot echo the request id in its `user` item is matched by the
    identical text: the pane's own line (the clock) goes once the agent's copy arrives — even when the
    bridge reads that copy (a long-poll woken by the send) before it has recorded the send's receipt."""
    c, indie = lab
    indie.stop()
    indie.start(INDIE_VARIANTS="noecho")
    wait_for(lambda: pane(c)["agent_status"] == "ready")
    for n, text in enumerate(["sans écho ✓", "encore"]):
        rid, r = post(c, "/api/send", agent="indie", conversation=CONV_ID, text=text, turn=n)
        assert r["outcome"] == "sent"
        wait_for(lambda: pane(c)["turn"] == n + 1 and pane(c)["recent_sends"] == [], timeout=5,
                 what=f"the line of {text!r} replaced by the agent's copy")
