"""The dashboard's rows and sections (D1, D5), as `GET /api/dashboard` and the live channel's snapshot
show them: plain functions over the readers, no trio, no I/O.

The lead's own agents come first (no machine named), then one section per member, by label. A member's
row is built once per reader it sends and reused, with its JSON text, until that reader changes.
"""

from __future__ import annotations

import json

from collie.bridge.panes import agent_row
from collie.lead.feed.core import LOCAL


# A member's agent row, kept with its JSON text in `member.rows` (name -> [key, row, text, reader]): the hub
# builds a fresh reader for every view a member sends and only ever changes one in place to mark it
# offline (status, reason, detail: part of the key). With 1,000 members' agents of 100 conversations
# each, building every row and its JSON afresh cost ~100 ms a dashboard (bench/crew_scale.py).
def _member_entry(member, name: str, reader) -> list:
    key = (reader.status, reader.reason, reader.detail)
    got = member.rows.get(name)
    if got is None or got[3] is not reader or got[0] != key:
        if len(member.rows) > len(member.readers):  # agents gone from the member's snapshot
            member.rows = {n: e for n, e in member.rows.items() if n in member.readers}
        got = member.rows[name] = [key, agent_row(reader, member=member.label) | {"machine": member.label}, None, reader]
    return got


def member_row(member, name: str, reader) -> dict:
    return _member_entry(member, name, reader)[1]


_dumps = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps with options makes one a call


def dashboard_sections(bridge, hub) -> list[dict]:
    """D1, D5: the lead's own agents (no machine named), then one section per member."""
    sections = []
    rows = [agent_row(r) | {"machine": LOCAL} for r in bridge.readers.values()]
    if rows:
        sections.append(section_head(LOCAL, None, rows) | {"agents": rows})
    for label, member in sorted((hub.members if hub is not None else {}).items()):
        mrows = [member_row(member, n, r) for n, r in member.readers.items()]
        if mrows:
            sections.append(section_head(label, member, mrows) | {"agents": mrows})
    return sections


def dashboard_json(bridge, hub) -> str:
    """`{"sections": dashboard_sections(...)}` as JSON text, each member's row encoded once and reused."""
    parts = []
    rows = [agent_row(r) | {"machine": LOCAL} for r in bridge.readers.values()]
    if rows:
        parts.append(_dumps(section_head(LOCAL, None, rows) | {"agents": rows}))
    for label, member in sorted((hub.members if hub is not None else {}).items()):
        entries = [_member_entry(member, n, r) for n, r in member.readers.items()]
        if entries:
            for e in entries:
                if e[2] is None:
                    e[2] = _dumps(e[1])
            head = _dumps(section_head(label, member, [e[1] for e in entries]))
            parts.append(head[:-1] + ',"agents":[' + ",".join(e[2] for e in entries) + "]}")
    return '{"sections":[' + ",".join(parts) + "]}"


def section_head(machine: str, member, rows) -> dict:
    """A section without its rows; `member` is None for the lead's own agents."""
    if member is None:
        return {"machine": LOCAL, "label": None, "title": "Durable agents",
                "waiting": any(r["waiting"] for r in rows), "online": True}
    return {"machine": machine, "label": machine, "title": "Durable agents",
            "waiting": any(r["waiting"] for r in rows), "online": member.online, "offline_since": member.offline_since}


def section_heads(sections: list[dict]) -> list[dict]:
    return [{k: v for k, v in s.items() if k != "agents"} for s in sections]


def machines_of(bridge, hub) -> dict[str, dict]:
    """{machine: {agent: reader}}: the lead's own agents under LOCAL, each member's under its label."""
    members = hub.members if hub is not None else {}
    return {label: member.readers for label, member in members.items()} | {LOCAL: bridge.readers}


def heads_of(rows: dict[tuple, dict], members: dict) -> list[dict]:
    """The section heads for {(machine, agent): row} (the lead's own first, then members by label): a
    section with no rows has no head."""
    by_machine: dict[str, list] = {}
    for (machine, _agent), row in rows.items():
        by_machine.setdefault(machine, []).append(row)
    heads = [section_head(LOCAL, None, by_machine[LOCAL])] if by_machine.get(LOCAL) else []
    for label, member in sorted(members.items()):
        if by_machine.get(label):
            heads.append(section_head(label, member, by_machine[label]))
    return heads
