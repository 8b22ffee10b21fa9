"""What the inbox sees of the lead's machines and agents (crew.md §3, §4): read-only lookups, no decisions.

The inbox decides on what the lead's view shows now (its own agents' readers through the writer's
bridge, members' through the hub), and on the session locks (the writer's for the lead's agents, the
hub's for members'). This is the one place it reads them; nothing here blocks, writes or sleeps.
"""

from __future__ import annotations

from collie.lead.inbox.core import LOCAL, TEXT_CEILING
from collie.lead.inbox.item import Item
from collie.lead.inbox.texts import Waiting, ahead_of, offline_since


def _hhmm(wall: float) -> str:
    from collie.lead.members.session import hhmm

    return hhmm(wall)


class Sight:
    """The lead's view of machines, agents, conversations and locks, as the inbox needs it."""

    def __init__(self, hub, writer) -> None:
        self.hub, self.writer = hub, writer

    def online(self, machine: str) -> bool:
        if machine == LOCAL:
            return True
        member = self.hub.members.get(machine)
        return bool(member and member.online)

    def member(self, machine: str):
        return self.hub.members.get(machine) if self.hub is not None else None

    def reader(self, machine: str, agent: str):
        if machine == LOCAL:
            return self.writer.bridge.readers.get(agent)
        return self.hub.reader(machine, agent)

    def conversation(self, machine: str, agent: str, conversation: str | None):
        reader = self.reader(machine, agent)
        return reader.conversations.get(conversation or "") if reader is not None else None

    def text_max(self, machine: str, agent: str) -> int:
        """The longest send text the agent takes (its hello's `limits.text_max`); while its hello is not
        known, the API's body limit. A sender's text is held to it when it enters and with each message,
        so no item grows past what the agent would take."""
        hello = getattr(self.reader(machine, agent), "hello", None)
        return hello.limits.text_max if hello is not None else TEXT_CEILING

    def waiting(self, item: Item, queue, ahead: int | None = None) -> Waiting:
        """What an approved item waits for now (`queue`: its inbox's active items, to count those ahead)."""
        reader = self.reader(item.machine, item.agent)
        conv = reader.conversations.get(item.conversation) if reader is not None and item.conversation else None
        return Waiting(online=self.online(item.machine), offline_since=offline_since(self.member(item.machine), _hhmm),
                       agent_status=reader.status if reader is not None else "unknown",
                       ask_open=bool(conv and conv.asks), ahead=ahead_of(item, queue) if ahead is None else ahead)

    def signature(self, item: Item):
        """What a held item waits on, as the lead's view shows it: its conversation's turn, state and asks
        (None when the lead does not see it, or for a starter)."""
        if item.kind != "send":
            return None
        conv = self.conversation(item.machine, item.agent, item.conversation)
        return None if conv is None else (conv.turn, conv.state, tuple(a.id for a in conv.asks))

    def locked(self, item: Item) -> bool:
        """Does another write hold the session lock this item's write would take (crew.md §3)? Then a
        send waits, keeping its place, and goes when the lock is let go."""
        return item.kind == "send" and self.lock_held(item.machine, item.agent, item.conversation)

    def lock_held(self, machine: str, agent: str, conversation: str | None) -> bool:
        if machine == LOCAL:
            locks, key = getattr(self.writer, "locks", None), (agent, conversation or "")
        else:
            locks, key = getattr(self.hub, "locks", None), (machine, agent, conversation or "")
        return locks is not None and locks.locked(key)

    def read_again(self, machine: str, agent: str) -> None:
        """16.1: ask the owning bridge to read the agent again at once (a write just went out, or a
        turn the inbox waits on may have ended). Members' agents are read by their own bridge."""
        if machine == LOCAL:
            self.writer.bridge.read_soon(agent)


class Blocked:
    """The conversations of one inbox whose sends wait (InboxCore.next_to_run's `blocked`): an ask open
    in the lead's view (crew.md §4), or another write holding the session's lock (crew.md §3)."""

    def __init__(self, sight: Sight, key: tuple[str, str], reader) -> None:
        self.sight, self.key, self.reader = sight, key, reader

    def __contains__(self, conversation) -> bool:
        conv = self.reader.conversations.get(conversation or "") if self.reader is not None else None
        if conv is not None and conv.asks:
            return True
        return self.sight.lock_held(*self.key, conversation)
