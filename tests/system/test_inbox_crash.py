"""Receipts stay true across kill -9 (issue 8.4; features B3, O; crew.md §4).

A real `collie serve` (the lead, whose sends all pass its inbox) is killed with SIGKILL at a journal
point while sends are inside the agent; it restarts; the phone retries every request it has no
final receipt for with the same request id, waits for the inbox to drain, then asks once more for
every send (same id, same body) to learn what became of it. Against the agent's own transcript:

    wrong receipt   `refused` for a send the agent performed, or `sent` for one it did not
    duplicate       a request id the agent applied more than once
    lost            a send acknowledged (`sent`, `queued`) that the agent never applied

The cause found: after a restart the inbox resent the interrupted item as a *new* request quoting
the conversation's turn of that moment; the bridge's journal had recorded the first one (another
turn, so another body) and answered `conflict`, which the inbox stored as the item's receipt. Now
the exact request is recorded in the inbox before it is sent and resumed as recorded.
"""

from __future__ import annotations

import random
from pathlib import Path

import httpx
import pytest

from tests.faultlab import Lab, Phone, drain, read_agent
from tests.livelab import short_dir
from tests.procs import LIMIT

pytestmark = pytest.mark.slow


def final_receipts(phone: Phone, c: httpx.Client) -> dict[str, dict]:
    out = {}
    for rid, r in phone.records.items():
        if r["kind"] == "send":
            out[rid] = c.post(r["path"], json=r["body"]).json()
    return out


def judge(phone: Phone, finals: dict[str, dict], items: dict) -> dict:
    applied: dict[str, int] = {}
    for conv_items in items.values():
        for it in conv_items:
            if it["kind"] == "user" and it.get("request_id"):
                applied[it["request_id"]] = applied.get(it["request_id"], 0) + 1
    wrong, lost = [], []
    for rid, r in phone.records.items():
        if r["kind"] != "send":
            continue
        shown = [x for x in (r["receipt"], finals.get(rid)) if x]
        for rec in shown:
            if (rec.get("outcome") == "refused" and applied.get(rid)) or (rec.get("outcome") == "sent" and not applied.get(rid)):
                wrong.append((rid[:8], rec.get("outcome"), rec.get("reason"), applied.get(rid, 0)))
        if any(rec.get("outcome") in ("sent", "queued") for rec in shown) and not applied.get(rid):
            lost.append(rid[:8])
    return {"sends": sum(1 for r in phone.records.values() if r["kind"] == "send"), "wrong": wrong, "lost": lost,
            "duplicates": [r[:8] for r, n in applied.items() if n > 1]}


def trial(crash_at: str, seed: int, burst: int = 24) -> dict:
    base = short_dir("ic")
    lab = Lab(base)
    try:
        lab.start_agent()
        address = lab.start_bridge(crash_at)
        phone = Phone()
        with lab.client(address) as c:
            phone.burst(c, burst, random.Random(seed))
        lab.bridge.wait(timeout=LIMIT)  # the crash point fired mid-burst
        lab.kill_bridge()
        address = lab.start_bridge()
        with lab.client(address) as c:
            phone.retry_all(c)
            drain(c)
            finals = final_receipts(phone, c)
        return judge(phone, finals, read_agent(lab.sock))
    finally:
        lab.stop()


@pytest.mark.parametrize("crash_at", ["after_send:2", "after_send:5", "after_begin:3"])
def test_receipts_after_a_kill_are_what_the_agent_did(crash_at):
    """B3, O, crew.md §4: a request recorded before the crash is resumed exactly as recorded; every
    receipt the phone is shown, before or after the crash, is `sent` only if the agent performed the
    send and `refused` only if it did not; nothing is applied twice or lost."""
    result = trial(crash_at, seed=sum(map(ord, crash_at)))
    print(result)
    assert result["wrong"] == [], result
    assert result["duplicates"] == [] and result["lost"] == [], result
