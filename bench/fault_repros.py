"""Minimal reproductions of the defects the fault campaign found (bench/README.md, issue 8).

    .venv/bin/python -m bench.fault_repros conflict      # issue 8.4: `refused conflict` for a send the agent performed
    .venv/bin/python -m bench.fault_repros diskfull      # the state folder full: a clear refusal, the lead stays up
    .venv/bin/python -m bench.fault_repros expired       # a repeat of an expired item answers `queued`
    .venv/bin/python -m bench.fault_repros refused-then-applied   # a refusal is remembered: a repeat answers it

Each prints what the phone saw and what the agent's ledger says, then `DEFECT` or `ok` (`KEEP=1` keeps
the trial folder, logs and ledger included); all print `ok` since issue 8 was closed. A queued send
dispatched while its agent cannot be reached (README item 2) depends on a ~0.1 s window and has no
script here: replay its campaign seeds (35, 109), or see tests/live/test_not_now.py, which injects it.
Real processes on loopback, the same `tally` agent and lead as the campaign; each takes a few seconds.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.faultrun import AGENT, Phone, Proc, Trial, read_ledger, wait_for  # noqa: E402


def _trial(scenario: str) -> Trial:
    base = Path(tempfile.mkdtemp(prefix=f"fr-{scenario}-", dir="/tmp"))
    t = Trial(0, base)
    t.scenario = scenario
    t.turn_seconds = 0.3
    return t


def _applied(t: Trial, rid: str) -> int:
    return sum(1 for r in read_ledger(t.ledger) if r["request_id"] == rid and r.get("applied"))


def _send(phone: Phone, c, conv: str = "s0") -> str:
    turn = phone.pane(c, conv)["turn"]
    rid = str(uuid.uuid4())
    phone.new("send", "/api/send", {"request_id": rid, "machine": phone.trial.machine, "agent": AGENT,
                                    "conversation": conv, "text": f"{rid} repro", "turn": turn})
    return rid


def _start(t: Trial, crash: str | None = None) -> tuple[Proc, Proc]:
    """Agent + lead, the lead armed with a crash point; no faults planned, no supervisor."""
    t.rng.random = lambda: 1.0  # setup(): no random crash point
    agent, lead, _ = t.setup()
    if crash:
        lead.kill()
        lead.start(crash_at=crash)
        wait_for(t.agent_ready, timeout=30, what="agent ready")
    return agent, lead


def conflict() -> bool:
    """Lead killed right after the agent answered a send (after_send), restarted; the phone retries."""
    t = _trial("local")
    try:
        agent, lead = _start(t, crash="after_send:1")
        phone = Phone(t)
        with phone.client() as c:
            rid = _send(phone, c)
            first = phone.post(c, rid, "burst")
            wait_for(lambda: not lead.alive(), timeout=10, what="the crash point")
            lead.start()
            wait_for(t.agent_ready, timeout=30, what="agent ready")
            time.sleep(3)  # the inbox and the writer's recovery look at the interrupted request
            again = phone.post(c, rid, "retry")
        n = _applied(t, rid)
        print(f"first answer: {_short(first)}\nretry, same request id: {_short(again)}\nagent applied it {n} time(s)")
        bad = n == 1 and (again or {}).get("outcome") == "refused"
        print("DEFECT: a refusal for a send the agent performed" if bad else "ok")
        return bad
    finally:
        _done(t)


def diskfull() -> bool:
    """The lead's state folder (a 6 MiB tmpfs) fills up; the phone sends once."""
    t = _trial("diskfull")
    try:
        agent, lead = _start(t)
        phone = Phone(t)
        with phone.client() as c:
            rid = _send(phone, c)
            t.full = True
            filler = t.mounted / "filler"
            try:
                with open(filler, "wb") as fh:
                    while True:
                        fh.write(b"\0" * 65536)
                        fh.flush()
            except OSError:
                pass
            got = phone.post(c, rid, "burst")
            time.sleep(3)
            alive = lead.alive()
        rec = phone.records[rid]["receipts"][-1]
        print(f"send while the state folder is full: {_short(rec)}\nlead still running 3 s later: {alive}")
        bad = got is None or got.get("outcome") != "refused" or not alive
        print("DEFECT: no clear refusal, or the bridge died" if bad else "ok")
        return bad
    finally:
        _done(t)


def expired() -> bool:
    """An approval-required item expires (wall clock +25 h); its sender repeats the request id."""
    from bench.faultrun import ttl_phase_one

    t = _trial("ttl")
    try:
        agent, lead = _start(t)
        phone = Phone(t)
        extra = ttl_phase_one(t, phone)
        t.clock_file.write_text(str(25 * 3600))
        time.sleep(3)
        rid = extra["pending_before"][0]
        with phone.client(extra["token"]) as s:
            got = phone.post(s, rid, "after-ttl")
        print(f"repeat of an item that expired: {_short(got)}")
        bad = (got or {}).get("outcome") != "expired"
        print("DEFECT: the sender is told `queued`, not `expired`" if bad else "ok")
        return bad
    finally:
        _done(t)


def refused_then_applied() -> bool:
    """An answer refused before it reached the agent (`unsupported`: the agent's caps unknown while it
    restarts), then the same request id again once the agent is back: it is performed."""
    t = _trial("local")
    try:
        agent, lead = _start(t)
        phone = Phone(t)
        with phone.client() as c:
            ask = phone.pane(c, "asks")["ask"]
            rid = str(uuid.uuid4())
            phone.new("answer", f"/api/ask/{ask['id']}", {"request_id": rid, "machine": "local", "agent": AGENT,
                                                          "digest": ask["digest"], "answer": {"option_ids": ["yes"]}})
            agent.kill()
            time.sleep(1.0)  # the bridge notices the agent is gone
            first = phone.post(c, rid, "burst")
            agent.start()
            wait_for(t.agent_ready, timeout=30, what="agent ready")
            again = phone.post(c, rid, "retry")
        n = _applied(t, rid)
        print(f"first answer: {_short(first)}\nsame request id again: {_short(again)}\nagent applied it {n} time(s)")
        bad = (first or {}).get("outcome") == "refused" and n > 0
        print("DEFECT: a request id first refused was later performed" if bad else "ok")
        return bad
    finally:
        _done(t)


def _done(t: Trial) -> None:
    t.teardown()
    if not os.environ.get("KEEP"):
        shutil.rmtree(t.base, ignore_errors=True)


def _short(rec: dict | None) -> str:
    if not rec:
        return "no receipt"
    keys = ("outcome", "reason", "text", "replay", "error")
    return ", ".join(f"{k}={rec[k]!r}" for k in keys if rec.get(k) is not None)


REPROS = {"conflict": conflict, "diskfull": diskfull, "expired": expired, "refused-then-applied": refused_then_applied}

if __name__ == "__main__":
    names = sys.argv[1:] or list(REPROS)
    unknown = [name for name in names if name not in REPROS]
    if unknown:
        print(f"python -m bench.fault_repros: no reproduction {', '.join(map(repr, unknown))} "
              f"(there are: {', '.join(REPROS)})", file=sys.stderr)
        sys.exit(2)
    found = [name for name in names if REPROS[name]()]
    sys.exit(1 if found else 0)
