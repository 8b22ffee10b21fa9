"""One `Reason` enum for refusals (collie.crew.receipts.Reason, issue 41): the reasons Collie gives are exactly the
ones docs/phone-api.md lists, their wire value is the same string as before, and what the enum says of
each (holds an inbox item, or final) is what the inbox does (lead/inbox/core.py)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import attrs

from collie.crew.receipts import REASONS, Reason, refused
from collie.lead.inbox.core import HOLD, TRANSIENT, InboxCore
from collie.lead.inbox.item import Item

DOCS = Path(__file__).resolve().parents[2] / "docs"


def documented_refusal_reasons() -> list[str]:
    """The `reason` row of phone-api.md's Receipts table: the names listed `for refused:`."""
    page = (DOCS / "phone-api.md").read_text()
    row = next(line for line in page.splitlines() if line.startswith("| `reason` |"))
    refused_part = row.split("for `refused`:", 1)[1].split("; for `unknown`", 1)[0]
    return re.findall(r"`(\w+)`", re.sub(r"\([^)]*\)", "", refused_part))


def test_the_enum_and_the_documented_refusal_reasons_agree():
    """Every refusal reason a phone may be given by Collie is in docs/phone-api.md, once, and every
    reason listed there is one Collie gives (a new reason needs its documentation, and a dropped one too)."""
    listed = documented_refusal_reasons()
    assert len(listed) == len(set(listed))
    assert set(listed) == {r.value for r in Reason}


def test_the_wire_value_of_a_reason_is_its_old_string():
    """The phone API is unchanged: a receipt refused `busy` reads `"busy"` in JSON, compares equal to the
    bare string, and every reason with a sentence of its own keeps it."""
    rec = refused("r1", "steer", Reason.BUSY)
    assert json.loads(json.dumps(attrs.asdict(rec)))["reason"] == "busy" and rec.reason == "busy"
    assert f"{Reason.DISK_FULL}" == "disk_full" and Reason("machine_offline") is Reason.MACHINE_OFFLINE
    assert set(REASONS) <= set(Reason)
    assert refused("r1", "send", "busy").text == REASONS[Reason.BUSY]


def said_of_each_reason() -> dict[Reason, str]:
    """The first word of the comment above each member of Reason: `holding`, `final` or `at`."""
    said, comment = {}, None
    for line in inspect.getsource(Reason).splitlines():
        line = line.strip()
        if line.startswith("#"):
            comment = comment or line.lstrip("# ").split()[0].rstrip(":;,")
        elif "=" in line and comment is not None:
            said[Reason[line.split("=")[0].strip()]] = comment
            comment = None
    return said


def test_what_the_enum_says_of_each_reason_is_what_the_inbox_does():
    """collie.crew.receipts.Reason says which reasons hold an inbox item (dispatched again later) and which are
    final: the holding ones are exactly lead/inbox/core.py's HOLD and `machine_offline`, and settling an
    item refused with each gives that — approved again (or kept) for a holding one, failed for a final one."""
    said = said_of_each_reason()
    assert set(said) == set(Reason)
    holding = {r for r, word in said.items() if word == "holding"}
    assert holding == set(HOLD) | {Reason.MACHINE_OFFLINE} and set(TRANSIENT) <= holding
    for reason, word in said.items():
        item = Item(id="i1", machine="laptop", agent="a", kind="send", conversation="c", starter=None, text="go",
                    sender=None, state="running", created_at=0.0)
        state = InboxCore.settle(item, attrs.asdict(refused("i1", "send", reason)))["state"]
        assert state == ("approved" if word == "holding" else "failed"), reason
