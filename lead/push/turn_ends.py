"""When a turn ends: which turns ended, what their push says, and whether it may go now (issue 37; crew.md §5
"When a turn ends"; docs/push.md). Plain classes and functions: no trio, no I/O, the clock passed in.

- **A turn ends** when a conversation the lead saw running (`working` or `waiting`) is next seen `idle`, or
  is seen `idle` at a later turn than before (a whole turn ran between two reads; an ACP agent's prompt turn
  returned). The turn that ended is the one it is seen idle at. A conversation the lead sees for the first
  time (a lead restart, a member's first view, a reopened conversation) ends nothing: the lead did not see
  it run. A conversation that closes ends nothing either.
- **What it says** (`turn_text`, `turn_payload`): `Done in <pane>` and the first line of the agent's last
  reply in that turn; `Stopped in <pane>` and who stopped it when its `turn_end` item says `stopped` (or
  the lead routed a Stop for that turn); `Failed in <pane>` and the agent's notice when the turn's last item
  is a `notice` (an ACP prompt that answered with an error, an SDK handler that raised). Masked (X1) when
  redaction is on, whole, then cut: the pane to 60 characters, the line to 120.
- **Never ahead of an ask** (`TurnEnds`): asks are judged by `collie.lead.push.pusher.PushLimiter` against asks only, so
  they keep the whole P1 budget. A turn-end push goes only while *all* pushes sent — asks, turn ends and
  folds — stay within P1 (3 a minute per pane, 10 a minute and 30 an hour per agent on a machine) and the
  agent is not silenced for raising many asks; otherwise it folds. Folded turn ends go as one push
  `N turns ended on <agent>` a minute after the first of them (so at most one a minute per agent), N counted
  for each phone; a fold is one of the agent's pushes too: while the agent's budget (10 a minute, 30 an
  hour, the "many asks" silence) has no room for it, it waits, a minute at a time, gathering what ends meanwhile. A turn end no phone is to get (nobody turned it on, the one who did views it, or stopped
  it) is no push and counts nothing.

`TurnEnds.handle(event, now) -> actions`: `Seen` (an agent's conversations as read) gives `Look` (a turn
ended: read its items); `Ended` (its text and the phones to tell) gives `Push` or folds; `Tick` gives the
folds that are due. `state()` is what survives a restart.
"""

from __future__ import annotations

from collections import deque
from urllib.parse import quote

import attrs

RUNNING = ("working", "waiting")
PANE_PER_MIN, AGENT_PER_MIN, AGENT_PER_HOUR = 3, 10, 30  # P1: the same numbers as collie.lead.push.pusher
MINUTE, HOUR = 60.0, 3600.0
FOLD_AFTER = MINUTE  # a fold push goes this long after the first turn end it holds
PANE_MAX, LINE_MAX = 60, 120
FOLD = "{n} turns ended on {agent}"
DONE, STOPPED, FAILED = "Done in {pane}", "Stopped in {pane}", "Failed in {pane}"
# who stopped a turn, as the other phones read it
STOPPED_BY_PHONE = "Stop was tapped on another phone."
STOPPED_BY_API = "Stopped through Collie's API."
STOPPED_IN_AGENT = "Stopped in the agent."
UNTITLED = "Untitled conversation"
KNOWN_MAX = 200_000  # conversations whose last state is kept (beyond it the memory starts over: no push is lost twice)


@attrs.frozen
class Seen:
    """What the lead read of one agent's open conversations: (conversation, state, turn, items_rev) each."""

    machine: str
    agent: str
    conversations: tuple


@attrs.frozen
class Look:
    """A turn ended: read the conversation's items changed since revision `since` to say how."""

    machine: str
    agent: str
    conversation: str
    turn: int
    since: int


@attrs.frozen
class Ended:
    """A turn's push, and the phones it is for (device ids; "" is the local credential)."""

    machine: str
    agent: str
    conversation: str
    payload: dict
    devices: frozenset


@attrs.frozen
class Tick:
    """Time passed: send the folds that are due."""


@attrs.frozen
class Push:
    devices: frozenset
    payload: dict


def _q(s: str) -> str:
    return quote(s, safe="")


def _cut(text: str | None, limit: int, redact_on: bool) -> str | None:
    """One line: masked whole (X1), then cut — a cut secret would no longer match its pattern."""
    if not text:
        return None
    from collie.crew.redact import redact

    text = " ".join(str(text).split())
    if redact_on:
        text = redact(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(text: str | None) -> str | None:
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None


def turn_text(items: list[dict], turn: int, stopper: str | None) -> tuple[str, str | None]:
    """(how, line) of turn `turn` from the conversation's items: `stopped` (line: who), `failed` (line: the
    agent's notice) or `done` (line: the first line of its last reply). `stopper` is the device whose Stop
    the lead routed for this turn ("" the local credential, None: none)."""
    mine = sorted((i for i in items if isinstance(i, dict) and i.get("turn") == turn and isinstance(i.get("seq"), int)),
                  key=lambda i: i["seq"])
    end = next((i for i in reversed(mine) if i.get("kind") == "turn_end"), None)
    if stopper is not None or (end is not None and end.get("stopped") is True):
        return "stopped", STOPPED_IN_AGENT if stopper is None else (STOPPED_BY_API if stopper == "" else STOPPED_BY_PHONE)
    said = [i for i in mine if i.get("kind") not in ("turn_end", "user", "gap")]
    if said and said[-1].get("kind") == "notice":
        return "failed", first_line(said[-1].get("text"))
    reply = next((i for i in reversed(said) if i.get("kind") in ("reply", "markdown") and first_line(i.get("text"))), None)
    return "done", first_line(reply.get("text")) if reply else None


def turn_payload(*, machine: str, agent: str, conversation: str, turn: int, pane: str | None, how: str,
                 line: str | None, redact_on: bool) -> dict:
    """The push of one turn end: its title, its line (masked, ≤ 120), the chat it opens."""
    head = {"done": DONE, "stopped": STOPPED, "failed": FAILED}[how]
    return {"kind": "turn", "title": head.format(pane=_cut(pane, PANE_MAX, redact_on) or UNTITLED),
            "body": _cut(line, LINE_MAX, redact_on), "tag": f"turn:{machine}/{agent}/{conversation}",
            "url": f"/#/c/{_q(machine)}/{_q(agent)}/{_q(conversation)}",
            "turn": {"machine": machine, "agent": agent, "conversation": conversation, "turn": turn, "how": how}}


def fold_payload(machine: str, agent: str, n: int) -> dict:
    return {"kind": "turns", "title": FOLD.format(n=n, agent=agent), "body": None, "tag": f"turns:{machine}/{agent}",
            "url": f"/#/a/{_q(machine)}/{_q(agent)}"}


class TurnEnds:
    """Which turns ended, and which of their pushes go now (see the module's note). `asks` is the ask
    limiter (`collie.lead.push.pusher.PushLimiter`): its windows are read, never written."""

    def __init__(self, asks, state: dict | None = None) -> None:
        self.asks = asks
        self.known: dict[tuple, tuple[str, int, int]] = {}  # (machine, agent, conv) -> (state, turn, rev before the turn)
        self.panes: dict[tuple, deque] = {}  # (machine, agent, conv) -> turn-end and fold pushes sent, last minute
        self.agents: dict[tuple, deque] = {}  # (machine, agent) -> those sent in the last hour
        self.folds: dict[tuple, dict] = {}  # (machine, agent) -> {"due": t, "counts": {device: n}}
        state = state or {}
        for k, v in state.get("panes", []):
            self.panes[tuple(k)] = deque(v)
        for k, v in state.get("agents", []):
            self.agents[tuple(k)] = deque(v)
        for k, due, counts in state.get("folds", []):
            self.folds[tuple(k)] = {"due": due, "counts": dict(counts)}

    def handle(self, event, now: float) -> list:
        if isinstance(event, Seen):
            return self._seen(event)
        if isinstance(event, Ended):
            return self._ended(event, now)
        if isinstance(event, Tick):
            return self._tick(now)
        raise TypeError(f"not an event of TurnEnds: {event!r}")

    def next_due(self) -> float | None:
        """When the next fold is due (None: none is waiting)."""
        return min((f["due"] for f in self.folds.values()), default=None)

    # --- which turns ended ------------------------------------------------------------------------
    def _seen(self, ev: Seen) -> list:
        out = []
        if len(self.known) > KNOWN_MAX:
            self.known.clear()
        listed = set()
        for conv, state, turn, rev in ev.conversations:
            key = (ev.machine, ev.agent, conv)
            listed.add(conv)
            before = self.known.get(key)
            if before is None:
                self.known[key] = (state, turn, rev if state not in RUNNING else 0)
                continue
            was, was_turn, since = before
            if state == "idle" and (was in RUNNING or turn > was_turn):
                out.append(Look(ev.machine, ev.agent, conv, turn, since))
            # the revision items of a coming turn are above: the last one seen while idle
            self.known[key] = (state, turn, rev if state == "idle" else since)
        for key in [k for k in self.known if k[0] == ev.machine and k[1] == ev.agent and k[2] not in listed]:
            del self.known[key]  # closed (or left out of the view): it ends nothing
        return out

    # --- may it go now ----------------------------------------------------------------------------
    def _window(self, d: dict, key: tuple, now: float, span: float) -> deque:
        q = d.setdefault(key, deque())
        while q and q[0] <= now - span:
            q.popleft()
        return q

    def _room(self, machine: str, agent: str, conv: str | None, now: float) -> bool:
        """May one more push of this agent (of conversation `conv`; None: a fold) go now, all pushes counted?"""
        akey = (machine, agent)
        if self.asks.silent.get(akey, 0.0) > now:
            return False  # the agent raised many asks: silent for the hour, turn ends too
        ask_hour = [t for t in self.asks.agents.get(akey, ()) if t > now - HOUR]
        hour = self._window(self.agents, akey, now, HOUR)
        minute = sum(1 for t in hour if t > now - MINUTE) + sum(1 for t in ask_hour if t > now - MINUTE)
        if minute >= AGENT_PER_MIN or len(hour) + len(ask_hour) >= AGENT_PER_HOUR:
            return False
        if conv is None:
            return True
        pkey = (machine, agent, conv)
        ask_pane = [t for t in self.asks.panes.get(pkey, ()) if t > now - MINUTE]
        return len(self._window(self.panes, pkey, now, MINUTE)) + len(ask_pane) < PANE_PER_MIN

    def _sent(self, machine: str, agent: str, conv: str | None, now: float) -> None:
        self._window(self.agents, (machine, agent), now, HOUR).append(now)
        if conv is not None:
            self._window(self.panes, (machine, agent, conv), now, MINUTE).append(now)

    def _ended(self, ev: Ended, now: float) -> list:
        if not ev.devices:
            return []
        akey = (ev.machine, ev.agent)
        fold = self.folds.get(akey)
        if fold is None and self._room(ev.machine, ev.agent, ev.conversation, now):
            self._sent(ev.machine, ev.agent, ev.conversation, now)
            return [Push(frozenset(ev.devices), ev.payload)]
        if fold is None:
            fold = self.folds[akey] = {"due": now + FOLD_AFTER, "counts": {}}
        for d in ev.devices:
            fold["counts"][d] = fold["counts"].get(d, 0) + 1
        return []

    def _tick(self, now: float) -> list:
        out = []
        for akey in sorted(k for k, f in self.folds.items() if f["due"] <= now):
            if not self._room(akey[0], akey[1], None, now):
                self.folds[akey]["due"] = now + FOLD_AFTER  # the agent's budget is spent: a minute later, and again
                continue
            fold = self.folds.pop(akey)
            by_n: dict[int, set] = {}
            for device, n in fold["counts"].items():
                by_n.setdefault(n, set()).add(device)
            for n in sorted(by_n):
                out.append(Push(frozenset(by_n[n]), fold_payload(akey[0], akey[1], n)))
            self._sent(akey[0], akey[1], None, now)
        return out

    def state(self, now: float) -> dict:
        """What must survive a restart (empty windows dropped)."""
        return {"panes": [[list(k), [t for t in v if t > now - MINUTE]] for k, v in self.panes.items()
                          if any(t > now - MINUTE for t in v)],
                "agents": [[list(k), [t for t in v if t > now - HOUR]] for k, v in self.agents.items()
                           if any(t > now - HOUR for t in v)],
                "folds": [[list(k), f["due"], sorted(f["counts"].items())] for k, f in self.folds.items()]}
