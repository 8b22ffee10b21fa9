"""The Needs you list, kept current agent by agent: a plain class (no trio, no I/O; issue 29).

Every open ask on every machine, oldest first — the order in which the lead first saw them — in the
shape of `GET /api/needs` (phone-api.md). The live channel keeps one `NeedsList`, tells it which agents
changed (`update`), and sends a `needs` event with the whole list whenever the list changed: a new
ask, a closed one, or one closed and another raised in its place, which leaves every count (and so
every dashboard row) as it was. Updating one agent looks at that agent's conversations only.

`read` is the one rule for which agents to look at again: every agent of a machine that changed whole
(of every machine, for the whole list), the ones it no longer has but the list still holds, and each
agent that changed alone. `GET /api/needs` reads the whole list with it; the live channel what changed.

`now` is the wall clock (seconds since the epoch), as `since` is shown to the phone.

An ask whose agent is gone is not waiting for you (issue 36.6): when the agent's own bridge says it cannot
reach it (`unreachable`: its program exited, its socket is gone …) or cannot speak to it
(`version_mismatch`), its asks are listed apart (`unreachable`), each with the agent's `status` and
`reason`, so the phone can say why, and are not counted in Needs you (N). The asks of an agent whose
machine is offline (reason `machine-offline`: a laptop asleep, or a lead just restarted that its members
have not reached again yet) or that is `starting` still wait for you and are counted: the agent is not
known to be gone, and its ask is answerable once the machine is back (a notification is not closed for a
member's nap).

An ask's age survives a lead restart: `recall` holds the first-seen times the lead kept on disk
(collie.lead.feed.needs_file), and an ask seen again takes its time from there instead of now.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable

GONE = ("unreachable", "version_mismatch")
MACHINE_OFFLINE = "machine-offline"


def waits_for_you(reader) -> bool:
    """Are this agent's open asks waiting for you? Not when its own bridge says it is gone (see above)."""
    return reader.status not in GONE or reader.reason == MACHINE_OFFLINE


def _since(seen: float) -> str:
    return datetime.datetime.fromtimestamp(seen, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def agents_to_read(machines: dict[str, dict], listed: Iterable[tuple[str, str]], dirty=frozenset(),
                   everything: bool = True) -> dict[tuple[str, str], object]:
    """{(machine, agent): its reader, or None when it is gone} for the agents `dirty` names —
    (machine, None) for a whole machine — or for every machine with `everything`. `machines` maps each
    machine to its {agent: reader}; `listed` are the agents the list holds asks of."""
    todo: dict[tuple[str, str], object] = {}
    whole = set(machines) if everything else {m for m, a in dirty if a is None}
    for machine in whole:  # whole machines: every agent they have, and the ones they no longer have
        readers = machines.get(machine, {})
        todo.update({(machine, name): r for name, r in readers.items()})
        todo.update({k: None for k in listed if k[0] == machine and k not in todo})
    if everything:
        todo.update({k: None for k in listed if k not in todo})
    for machine, agent in dirty:
        if agent is not None and (machine, agent) not in todo:
            todo[(machine, agent)] = machines.get(machine, {}).get(agent)
    return todo


class NeedsList:
    def __init__(self, first_seen: dict | None = None, recall: dict | None = None) -> None:
        # (machine, agent) -> [(first seen, conversation, entry, counted)]
        self.by_agent: dict[tuple[str, str], list[tuple]] = {}
        # (machine, agent, ask id) -> wall clock; given, it is kept across lists (GET /api/needs's own)
        self.first_seen: dict[tuple[str, str, str], float] = {} if first_seen is None else first_seen
        # the same, as the lead kept it before it restarted: taken (and forgotten here) when the ask is seen
        self.recall: dict[tuple[str, str, str], float] = {} if recall is None else recall
        self._list: list[dict] | None = []
        self._apart: list[dict] | None = []

    def read(self, machines: dict[str, dict], now: float, *, dirty=frozenset(), everything: bool = True,
             redact_on: bool = True) -> bool:
        """Read again the agents `agents_to_read` names; True when the list changed. Read whole, it also
        forgets when it first saw every ask no longer open (a `first_seen` given from before)."""
        changed = False
        for (machine, agent), reader in agents_to_read(machines, self.by_agent, dirty, everything).items():
            changed |= self.update(machine, agent, reader, now, redact_on=redact_on)
        if everything:
            alive = {(m, a, e[2]["ask"]) for (m, a), entries in self.by_agent.items() for e in entries}
            for key in [k for k in self.first_seen if k not in alive]:
                del self.first_seen[key]
        return changed

    def update(self, machine: str, agent: str, reader, now: float, *, redact_on: bool = True) -> bool:
        """Read one agent's open asks again (`reader` None: the agent is gone); True when they changed.
        With `redact_on` the titles are masked like the conversation list's (X1)."""
        from collie.crew.redact import redact

        def mask(text):
            return redact(text) if redact_on and isinstance(text, str) else text
        key = (machine, agent)
        entries = []
        alive = set()
        if reader is not None:
            counted = waits_for_you(reader)
            for conv in reader.conversations.values():
                for ask in conv.asks:
                    ask_key = (machine, agent, ask.id)
                    alive.add(ask_key)
                    seen = self.first_seen.get(ask_key)
                    if seen is None:
                        seen = self.first_seen[ask_key] = min(now, self.recall.pop(ask_key, now))
                    entry = {
                        "machine": machine, "agent": agent, "conversation": conv.id,
                        "conversation_title": mask(conv.title or "Untitled conversation"), "ask": ask.id,
                        "title": mask(ask.title), "kind": ask.kind, "expires_at": ask.expires_at, "since": _since(seen)}
                    if not counted:
                        entry |= {"status": reader.status, "reason": reader.reason}
                    entries.append((seen, conv.id, entry, counted))
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
        self._list = self._apart = None
        return True

    def agents(self) -> list[tuple[str, str]]:
        return list(self.by_agent)

    def _sorted(self, counted: bool) -> list[dict]:
        every = [(seen, machine, agent, conv, entry) for (machine, agent), entries in self.by_agent.items()
                 for seen, conv, entry, c in entries if c == counted]
        every.sort(key=lambda e: e[:4])
        return [e[4] for e in every]

    def asks(self) -> list[dict]:
        """The asks waiting for you, oldest first (then by machine, agent and conversation, as GET /api/needs)."""
        if self._list is None:
            self._list = self._sorted(True)
        return self._list

    def unreachable(self) -> list[dict]:
        """The open asks of agents that cannot be answered through now, in the same order, each with its
        agent's `status` and `reason`: not waiting for you."""
        if self._apart is None:
            self._apart = self._sorted(False)
        return self._apart

    def kept(self) -> dict[tuple[str, str, str], float]:
        """What the lead keeps on disk: when it first saw each open ask, and the times it recalls but has not
        seen again yet."""
        return {**self.recall, **self.first_seen}
