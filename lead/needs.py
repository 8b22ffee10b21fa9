"""The Needs you list, kept current agent by agent: a plain class (no trio, no I/O; issue 29).

Every open ask on every machine, oldest first — the order in which the lead first saw them — in the
shape of `GET /api/needs` (phone-api.md). The live channel keeps one `NeedsList`, tells it which agents
changed (`update`), and sends a `needs` event with the whole list whenever the list changed: a new
ask, a closed one, or one closed and another raised in its place, which leaves every count (and so
every dashboard row) as it was. Updating one agent looks at that agent's conversations only.

`now` is the wall clock (seconds since the epoch), as `since` is shown to the phone.
"""

from __future__ import annotations

import datetime


def _since(seen: float) -> str:
    return datetime.datetime.fromtimestamp(seen, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class NeedsList:
    def __init__(self) -> None:
        self.by_agent: dict[tuple[str, str], list[tuple]] = {}  # (machine, agent) -> [(first seen, entry)]
        self.first_seen: dict[tuple[str, str, str], float] = {}  # (machine, agent, ask id) -> wall clock
        self._list: list[dict] | None = []

    def update(self, machine: str, agent: str, reader, now: float, *, redact_on: bool = True) -> bool:
        """Read one agent's open asks again (`reader` None: the agent is gone); True when they changed.
        With `redact_on` the titles are masked like the conversation list's (X1)."""
        from crew.redact import redact

        def mask(text):
            return redact(text) if redact_on and isinstance(text, str) else text
        key = (machine, agent)
        entries = []
        alive = set()
        if reader is not None:
            for conv in reader.conversations.values():
                for ask in conv.asks:
                    ask_key = (machine, agent, ask.id)
                    alive.add(ask_key)
                    seen = self.first_seen.setdefault(ask_key, now)
                    entries.append((seen, conv.id, {
                        "machine": machine, "agent": agent, "conversation": conv.id,
                        "conversation_title": mask(conv.title or "Untitled conversation"), "ask": ask.id,
                        "title": mask(ask.title), "kind": ask.kind, "expires_at": ask.expires_at, "since": _since(seen)}))
        for old in self.by_agent.get(key, []):
            ask_key = (machine, agent, old[2]["ask"])
            if ask_key not in alive:
                self.first_seen.pop(ask_key, None)
        before = self.by_agent.get(key, [])
        if entries:
            self.by_agent[key] = entries
        else:
            self.by_agent.pop(key, None)
        if [e[2] for e in entries] == [e[2] for e in before]:
            return False
        self._list = None
        return True

    def agents(self) -> list[tuple[str, str]]:
        return list(self.by_agent)

    def asks(self) -> list[dict]:
        """The whole list, oldest first (then by machine, agent and conversation, as GET /api/needs)."""
        if self._list is None:
            every = [(seen, machine, agent, conv, entry) for (machine, agent), entries in self.by_agent.items()
                     for seen, conv, entry in entries]
            every.sort(key=lambda e: e[:4])
            self._list = [e[4] for e in every]
        return self._list
