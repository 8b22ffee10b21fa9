"""What `collie demo` shows and when its sleeping member sleeps: plain classes, no processes, no I/O.

`SleepCycle` decides when the sleeping member's bridge stops and starts again (`now` is passed in).
`Summary.from_api` turns the lead's JSON answers into the one-screen summary; `plain_line` and the
CLI's rich renderer draw it. Everything here reads JSON a local lead produced, but it is still
parsed defensively (`.get`, bounded lengths): a summary must never crash the demo.
"""

from __future__ import annotations

import attrs

from collie.crew.views import READY, STATUS_LABEL

MAX_TEXT = 60
MAX_EVENTS = 6
WAITING_OR_RUNNING = ("pending", "approved", "running")  # inbox states worth a line; finished ones are not


def clip(value, limit: int = MAX_TEXT) -> str:
    """One printable line of at most `limit` characters (control characters become spaces)."""
    text = "".join(ch if ch.isprintable() else " " for ch in str("" if value is None else value))
    return text if len(text) <= limit else text[: limit - 1] + "…"


@attrs.define
class SleepCycle:
    """The sleeping member is awake for `awake` seconds, then asleep for `asleep`, and so on.

    `step(now)` returns "sleep" or "wake" once when a phase ends, else None. A step that comes late
    (the demo was busy) starts the next phase from `now`, so a phase never shrinks to nothing.
    """

    awake: float
    asleep: float
    state: str = "awake"
    until: float = 0.0

    @classmethod
    def starting(cls, now: float, *, awake: float, asleep: float) -> SleepCycle:
        return cls(awake=awake, asleep=asleep, state="awake", until=now + awake)

    def step(self, now: float) -> str | None:
        if now < self.until:
            return None
        if self.state == "awake":
            self.state, self.until = "asleep", now + self.asleep
            return "sleep"
        self.state, self.until = "awake", now + self.awake
        return "wake"


@attrs.frozen
class MachineLine:
    machine: str
    role: str
    state: str


@attrs.frozen
class AgentLine:
    machine: str
    name: str
    line2: str
    status: str  # the word the phone shows (features D2: `Starting`, `Unreachable`, …), `Ready` when ready
    open: int | None
    waiting: int | None
    ready: bool = False


@attrs.frozen
class AskLine:
    machine: str
    agent: str
    conversation: str
    kind: str
    title: str


@attrs.frozen
class InboxLine:
    machine: str
    agent: str
    item: str
    state: str
    text: str


@attrs.frozen
class Summary:
    machines: tuple[MachineLine, ...] = ()
    agents: tuple[AgentLine, ...] = ()
    asks: tuple[AskLine, ...] = ()
    inbox: tuple[InboxLine, ...] = ()

    @classmethod
    def from_api(cls, dashboard: dict, asks: list[dict], inbox: list[dict], *, machines: list[str],
                 asleep: set[str], silent: set[str] = frozenset()) -> Summary:
        """`machines`: every machine the demo started, lead first; `asleep`: those the demo put to sleep;
        `silent`: those whose bridge does not answer (restarting, or exited)."""
        sections = {s.get("machine"): s for s in dashboard.get("sections", []) if isinstance(s, dict)}
        mlines, alines = [], []
        for i, machine in enumerate(machines):
            s = sections.get(machine)
            if machine in asleep:
                state = "asleep"
            elif machine in silent:
                state = "silent"
            elif s is None:
                state = "starting"
            else:
                state = "online" if s.get("online", True) else "offline"
            mlines.append(MachineLine(machine, "lead" if i == 0 else "member", state))
            for a in (s or {}).get("agents", []):
                status = a.get("status")
                word = a.get("status_label") or (STATUS_LABEL.get(status) if isinstance(status, str) else None)
                alines.append(AgentLine(machine, clip(a.get("name"), 32), clip(a.get("line2")),
                                        clip(word or status, 20),
                                        a.get("open"), a.get("waiting"), ready=status == READY))
        return cls(
            machines=tuple(mlines), agents=tuple(alines),
            asks=tuple(AskLine(clip(a.get("machine"), 32), clip(a.get("agent"), 32), clip(a.get("conversation"), 32),
                               clip(a.get("kind"), 16), clip(a.get("title"))) for a in asks),
            inbox=tuple(InboxLine(clip(i.get("machine"), 32), clip(i.get("agent"), 32), clip(i.get("id"), 40),
                                  clip(i.get("state"), 12), clip(i.get("state_text")))
                        for i in inbox if i.get("state") in WAITING_OR_RUNNING))

    def plain_line(self) -> str:
        """The summary in one line, for terminals without a screen (`--plain`, no TTY)."""
        machines = ", ".join(f"{m.machine} {m.state}" for m in self.machines)
        waiting = sum(1 for i in self.inbox if i.state in ("approved", "pending"))
        return (f"[demo] summary: {machines}; {len(self.agents)} agents, "
                f"{sum(1 for a in self.agents if a.ready)} ready; {len(self.asks)} open asks; "
                f"inbox: {waiting} waiting, {sum(1 for i in self.inbox if i.state == 'running')} running")


@attrs.frozen
class Event:
    """One line of the summary's `Last receipts`: a write the demo made, or what became of it."""

    at: str
    what: str
    target: str
    outcome: str
    text: str = ""
    request_id: str = ""

    @property
    def label(self) -> str:
        """`what` and the start of the request id: enough to tell requests apart on a screen."""
        return f"{self.what} {self.request_id[:8]}" if self.request_id else self.what


def push_event(events: list[Event], event: Event) -> list[Event]:
    return [*events, event][-MAX_EVENTS:]
