"""The member's end of the crew link, with no I/O (crew.md §2–§3): frames in, decisions and frames out.

A `MemberCore` is one link from a member to its lead, from the moment its WebSocket is open. It is fed
the lead's frames as text (`receive(raw, now)`) and the time, and says what each one asks for; it builds
the frames the member sends. It never reads a socket, sleeps or looks at a clock: `collie.member.link.Link` (a
real member, its bridge behind it) and `collie.fixtures.member.link.FakeMember` (the testing kit's, scripted
agents behind it) read and write the WebSocket, sleep until the times it names, and carry out its events.

    open ──hello()──▶ hello_sent ──receive(welcome)──▶ linked ──close()──▶ closed
                           └── receive(anything else): FrameError, closed

`TRANSITIONS` is that diagram as one table; a call out of turn (a second hello, a beat before the
welcome, a frame after close) raises `LocalProtocolError` and changes nothing. The lead's misbehaviour
is a `crewwire.FrameError`: before the welcome it ends the link; after it, it is an event and the link
goes on.

What it guarantees, once linked:
- Every frame is read strictly with the crew wire's models (`crewwire.parse_lead_frame`), and a
  `request`'s write against the member's write model (`write_type`, collie.bridge.writes.WriteRequest): the
  envelope's `id`, `agent` and `op` fill the write where it leaves them out and must match where it
  names them.
- Every `request` and `read` that names an id gets an answer, and only one: either an event the member
  carries out and then answers through `receipt` / `read_result`, or an `Answer` to send at once — a
  request it cannot read is refused `bad_request` (nothing reached the agent), a read it cannot read is
  `ok: false` with what was wrong, a read of an agent it does not have is `ok: false`. A frame naming no
  id is a `Misfit` with nothing to send: logged (escaped), dropped. Silence is never an answer.
- The ids received and not answered yet are kept (`open_requests`, `open_reads`); the answer
  settles them. A read's answer too large for one frame becomes `ok: false` saying so (the lead would
  close the link above `MAX_FRAME`).
- A beat every `beat_every` seconds from the welcome (`next_beat`, `beat(now)`), so the lead sees
  silence within OFFLINE_AFTER; a lead that does not answer the hello within WELCOME_WAIT, or a ping
  within PONG_WAIT, is gone (the adapter's time limits).
- A snapshot never exceeds a frame: the views that do not fit follow as `agent` frames
  (`snapshot_frames`), named in its `more`.

It refuses nothing the lead may send under crew.md: unknown fields are ignored, a second `welcome` and a
`viewing` of an agent the member does not have are ignored (`Ignored`).
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Container, Sequence
from typing import Any

import attrs

from collie.crew import __version__, crewwire
from collie.crew.crewwire import (Beat, FrameError, Hello, Read, ReadResult, ReceiptFrame, Request, Viewing, Welcome,
                           read_args, read_failure, refusal_of, request_structured, shown)
from collie.crew.receipts import Receipt

FRAME_ROOM = 4096  # what a frame's envelope may add to the views or results it carries
ROOM = crewwire.MAX_FRAME - FRAME_ROOM  # what one view, or one read's result, may take
WELCOME_WAIT = 10.0  # the lead answers a hello within this, or the link is given up
PONG_WAIT = crewwire.OFFLINE_AFTER  # ... a WebSocket ping within this
BAD_LINES, BAD_LINES_EVERY = 10, 60.0  # lines about the lead's bad frames logged in a minute at most
TOO_LARGE = "the answer is larger than the crew link carries"


class State(enum.Enum):
    OPEN = "open"  # the WebSocket is up; nothing said yet
    HELLO_SENT = "hello_sent"
    LINKED = "linked"
    CLOSED = "closed"


# (state, what happens) -> the state after; any other pair is refused
TRANSITIONS: dict[tuple[State, str], State] = {
    (State.OPEN, "hello"): State.HELLO_SENT,
    (State.HELLO_SENT, "welcome"): State.LINKED,
    (State.LINKED, "frame"): State.LINKED,
    (State.LINKED, "beat"): State.LINKED,
    **{(state, "close"): State.CLOSED for state in State},
}


class LocalProtocolError(RuntimeError):
    """This member's own code called the core out of turn (a bug here, not the lead's fault)."""


# --- what a frame from the lead asks for -------------------------------------------------------------

@attrs.frozen
class Welcomed:
    """The lead let this member in (`read_only`: a member older than the lead's range)."""

    welcome: Welcome


@attrs.frozen
class Watch:
    """A phone views (`on`) one of this member's agents, or stopped: poll it every 2 s while on."""

    agent: str
    on: bool


@attrs.frozen
class Write:
    """A write to carry out, then answer with `receipt(frame.id, …)`: `request` is the write structured
    (`write_type`), `args` the same as the plain dict the frame's `args` are, with `request_id`, `agent` and
    `op` filled in from the envelope."""

    frame: Request
    request: Any
    args: dict


@attrs.frozen
class Lookup:
    """A read to carry out, then answer with `read_result(frame.id, …)`: `args` as `frame.what` asks them
    (crewwire.ItemsArgs, ClosedArgs, RecentSendsArgs), of an agent this member has."""

    frame: Read
    args: Any


@attrs.frozen
class Answer:
    """Send `frame` at once; there is nothing to carry out (a read of an agent this member does not have)."""

    frame: ReadResult


@attrs.frozen
class Misfit:
    """A frame that does not fit the crew wire: send `answer` at once when there is one (a request refused
    `bad_request`, a read `ok: false`); else the frame named no id to answer and is dropped. `line` says it
    for the member's log, escaped."""

    error: FrameError

    @property
    def answer(self) -> ReceiptFrame | ReadResult | None:
        return answer_to(self.error)

    @property
    def line(self) -> str:
        return (f"a frame from the lead does not fit the crew wire ({self.error.args[0]})"
                f"{'; answered' if self.answer is not None else '; ignored'}")


@attrs.frozen
class Ignored:
    """A frame crew.md lets the lead send that asks nothing of this member; `line`: worth a log line, or None."""

    line: str | None = None


Event = Welcomed | Watch | Write | Lookup | Answer | Misfit | Ignored


def answer_to(exc: FrameError) -> ReceiptFrame | ReadResult | None:
    """The answer, at once, to a frame that does not fit: a `request` refused `bad_request`, a `read` `ok:
    false`, each with what was wrong; None when the frame named no id to answer."""
    return refusal_of(exc) or read_failure(exc)


class MemberCore:
    """One member's end of one link to its lead. `agents`: the names of the agents this member has (read
    live, e.g. the bridge's readers); `write_type`: the model a request's write is structured as."""

    def __init__(self, label: str, boot: str, *, agents: Container[str], write_type: type,
                 beat_every: float = crewwire.BEAT_EVERY, collie: str = __version__) -> None:
        self.label, self.boot, self.collie = label, boot, collie
        self.agents = agents
        self.write_type = write_type
        self.beat_every = beat_every
        self.state = State.OPEN
        self.welcome: Welcome | None = None
        self.welcome_by = math.inf  # the time the lead's welcome is due by
        self.next_beat = math.inf  # the time the next beat is due
        self.last_heard: float | None = None  # the time of the lead's last frame
        self._open: dict[tuple[str, str], list] = {}  # ("request"|"read", id) -> [op or what, how many]

    def _go(self, happening: str) -> None:
        after = TRANSITIONS.get((self.state, happening))
        if after is None:
            raise LocalProtocolError(f"{happening} while the link is {self.state.value}")
        self.state = after

    # --- the handshake ----------------------------------------------------------------------------
    def hello(self, now: float) -> Hello:
        """The first frame: who this member is, the crew wire and write ops it speaks, its process's boot."""
        self._go("hello")
        self.welcome_by = now + WELCOME_WAIT
        return Hello(self.label, self.collie, crewwire.CREW_WIRE, list(crewwire.WRITE_OPS), self.boot)

    # --- frames from the lead ---------------------------------------------------------------------
    def receive(self, raw: str | bytes, now: float) -> Event:
        """What one frame from the lead asks for. Before the welcome, anything but a `welcome` is a
        FrameError that ends the link (the state is then `closed`)."""
        if self.state is State.HELLO_SENT:
            try:
                kind, frame = crewwire.parse_lead_frame(raw)
                if kind != "welcome":
                    raise FrameError(f"expected welcome, got {shown(kind, 40)}")
            except FrameError:
                self._go("close")
                raise
            self._go("welcome")
            self.welcome, self.last_heard, self.next_beat = frame, now, now + self.beat_every
            return Welcomed(frame)
        self._go("frame")
        self.last_heard = now
        try:
            kind, frame = crewwire.parse_lead_frame(raw)
        except FrameError as exc:
            return Misfit(exc)
        if isinstance(frame, Request):
            return self.take_request(frame)
        if isinstance(frame, Read):
            return self.take_read(frame)
        if isinstance(frame, Viewing):
            return Watch(frame.agent, frame.on) if frame.agent in self.agents else Ignored()
        return Ignored(f"a {kind} frame from the lead after the link was set up: ignored")

    def take_request(self, frame: Request) -> Write | Misfit:
        """A `request` whose envelope was read: its write structured, or refused `bad_request` at once."""
        try:
            request = request_structured(frame, self.write_type)
        except FrameError as exc:
            return Misfit(exc)
        self._opened("request", frame.id, frame.op)
        return Write(frame, request, {**frame.args, "request_id": frame.id, "agent": frame.agent, "op": frame.op})

    def take_read(self, frame: Read) -> Lookup | Answer | Misfit:
        """A `read` whose envelope was read: its args as `what` asks them, or its answer at once (`ok: false`)."""
        if frame.agent not in self.agents:
            return Answer(ReadResult(frame.id, False, None))
        try:
            args = read_args(frame)
        except FrameError as exc:
            return Misfit(exc)
        self._opened("read", frame.id, frame.what)
        return Lookup(frame, args)

    # --- frames to the lead -----------------------------------------------------------------------
    def receipt(self, rid: str, receipt: Receipt | dict) -> ReceiptFrame | dict:
        """The answer to request `rid` (a dict: a receipt as a script wrote it, sent as it is)."""
        self.settle("request", rid)
        if isinstance(receipt, Receipt):
            return ReceiptFrame(rid, receipt)
        return {"type": "receipt", "id": rid, "receipt": receipt}

    def read_result(self, rid: str, ok: bool, result: dict | None) -> ReadResult:
        """The answer to read `rid`; one too large for a frame is `ok: false` saying so."""
        self.settle("read", rid)
        answer = ReadResult(rid, ok, result)
        if len(crewwire.encode(answer)) > ROOM:
            answer = ReadResult(rid, False, {"error": TOO_LARGE})
        return answer

    def settle(self, kind: str, rid: str) -> None:
        """Request or read `rid` needs no answer any more (answered, or deliberately left unanswered)."""
        entry = self._open.get((kind, rid))
        if entry is not None:
            entry[1] -= 1
            if not entry[1]:
                del self._open[(kind, rid)]

    def beat(self, now: float) -> Beat:
        """The beat due at `next_beat`; the next is due `beat_every` after this one."""
        self._go("beat")
        self.next_beat = now + self.beat_every
        return Beat()

    def close(self) -> None:
        """The link ended: nothing more is received or sent on it. What it left open, the lead sends again
        on the next link (crew.md §2)."""
        self._go("close")

    # --- what it holds ----------------------------------------------------------------------------
    def _opened(self, kind: str, rid: str, what: str) -> None:
        entry = self._open.setdefault((kind, rid), [what, 0])
        entry[1] += 1

    def open_requests(self) -> dict[str, str]:
        """Requests received and not answered yet: id -> op."""
        return {rid: what for (kind, rid), (what, _) in self._open.items() if kind == "request"}

    def open_reads(self) -> dict[str, str]:
        """Reads received and not answered yet: id -> what."""
        return {rid: what for (kind, rid), (what, _) in self._open.items() if kind == "read"}

    def statistics(self) -> dict:
        return {"state": self.state.value, "open_requests": len(self.open_requests()),
                "open_reads": len(self.open_reads()), "last_heard": self.last_heard, "next_beat": self.next_beat}


class LineBudget:
    """At most `most` lines in a window of `every` seconds that starts with its first line (a peer that
    misbehaves in a loop fills no log); `now` passed in."""

    def __init__(self, most: int = BAD_LINES, every: float = BAD_LINES_EVERY) -> None:
        self.most, self.every = most, every
        self.start, self.used = -math.inf, 0

    def allow(self, now: float) -> bool:
        if now - self.start >= self.every:
            self.start, self.used = now, 0
        self.used += 1
        return self.used <= self.most


# --- views -----------------------------------------------------------------------------------------

def snapshot_frames(views: Sequence[tuple[str, str]]) -> list[str]:
    """The frames that carry every view after a (re)connect: a `snapshot` with the views (name, JSON text)
    that fit one frame, the rest as `agent` frames named in its `more`. Built from the views' text (each
    view is encoded once), so a member holds only its frames' text, not the documents too."""
    room = ROOM
    inside, after = [], []
    for name, text in views:
        if len(text) + 1 <= room:
            inside.append(text)
            room -= len(text) + 1
        else:
            after.append((name, text))
    frames = ['{"type":"snapshot","agents":[' + ",".join(inside) + '],"more":'
              + crewwire.encode([name for name, _ in after]) + "}"]
    frames += [crewwire.encode(agent_frame(name, json.loads(text))) for name, text in after]
    return frames


def agent_frame(name: str, view: dict) -> dict:
    """An `agent` frame: one agent's view (`name` and the view's fields but its own `name`)."""
    return {"type": "agent", "name": name, "view": {k: v for k, v in view.items() if k != "name"}}
