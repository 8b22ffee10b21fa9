"""The crew wire: JSON text frames between a member and its lead over a WebSocket (crew.md §2).

member → lead: `hello`, `snapshot`, `agent`, `beat`, `receipt`, `read_result`
lead → member: `welcome`, `viewing`, `request`, `read`

An agent's view travels as what the member's bridge read from it — the raw `hello` and `/v1/state`
documents — plus the member's status for it. The lead feeds them to its own `AgentReader`, so a
member's asks get exactly the digests, trimming and marks the lead computes for its own agents.
Unknown fields are ignored (forward compatibility); an unknown `type` is logged and skipped.
"""

from __future__ import annotations

import json

import attrs

from crew.wire import WireRange

CREW_WIRE = WireRange(1, 1)
READ_ONLY_FLOOR = 1  # a member older than CREW_WIRE.min but not below this is accepted read-only
WRITE_OPS = ("send", "steer", "abort", "answer", "action", "starter", "rename", "close", "reopen")
BEAT_EVERY = 10.0
OFFLINE_AFTER = 30.0


def encode(msg: dict) -> str:
    return json.dumps(msg, separators=(",", ":"))


def decode(text: str | bytes) -> dict:
    msg = json.loads(text)
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise ValueError("a crew frame is a JSON object with a string `type`")
    return msg


@attrs.frozen
class Admission:
    accepted: bool
    read_only: bool = False
    reason: str | None = None  # the close reason when not accepted


def admit(theirs: WireRange, ours: WireRange = CREW_WIRE, floor: int = READ_ONLY_FLOOR) -> Admission:
    """Overlap: accepted. Older than our range but not below the floor: read-only (features O,
    `This machine runs an older Collie …`). Anything else: closed with `version`."""
    if ours.highest_common(theirs) is not None:
        return Admission(True)
    if theirs.max < ours.min and theirs.max >= floor:
        return Admission(True, read_only=True)
    return Admission(False, reason="version")


def ws_url(address: str) -> str:
    """`ws://…`, `wss://…`, or an http(s) address turned into its WebSocket form, ending in /crew/v1."""
    address = address.strip().rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if address.lower().startswith(http):
            address = ws + address[len(http):]
    if not address.endswith("/crew/v1"):
        address += "/crew/v1"
    return address
