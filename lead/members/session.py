"""A member's session on the lead, with no I/O (crew.md §2): what its frames change and what the lead answers.

`Member` is one member as the lead knows it: its agents' readers, its link, its version and last contact.
The functions below decide, from that state and the time passed in; `collie.lead.members.hub.Hub` reads the socket,
feeds them, and carries out what they return (closes, frames to send, lines to log, files to write).

- Who may hold a link (`admit_hello`, `claim`): the first frame must be a `hello` (else `protocol`), on
  a crew wire the lead speaks (else `version`; older but not below the floor: read-only), naming the
  label its member token was issued for (else `unauthorized`). One link per label — two machines sharing
  one invite would otherwise push each other off for ever: a newcomer with the open link's `boot` (one
  random id per member process) is the same member reconnecting before the lead saw its old link die (a
  laptop waking from sleep), and replaces it; any other (another machine, or the member restarted) makes
  the lead probe the open link with a read, and only a link that does not answer within PING_WAIT is
  replaced (else the newcomer is refused `label_in_use`).
- A link let in (`connected`): the member is online, with the version its hello named (escaped, at most 40
  characters); the lead answers `welcome` and then `viewing` for each of its agents a phone is viewing
  (`viewing` counts the phones: the member hears only the first on and the last off). A link ended
  (`link_ended`) makes the member offline only if it was its current link.
- How a frame is taken (`intake`, `FrameQueue`): frames carrying views wait, in arrival order, for the
  hub's feeder (a large one is parsed in the feeder's worker thread); a newer small `agent` frame
  replaces a waiting one for the same agent; a link with more than MAX_QUEUED characters waiting is not
  read until the feeder catches up. Every other frame is applied on arrival. A link that sent more than
  MAX_BAD_FRAMES bad frames is closed (`protocol`); one silent for OFFLINE_AFTER is offline (`silent`).
- What a frame changes (`apply_frame`): a `snapshot` names every agent the member has (the others go)
  and is saved at once; an `agent` frame adds or replaces one agent's view (at most MAX_AGENTS names);
  a `receipt` or `read_result` is the answer a waiting call gets; a second `hello` is a bad frame. A view
  is kept only within the member's budget (collie.lead.members.views). A view its reader could not be built
  for is a bad frame of its own: that agent's last view stays, the frame's other views are taken.
- Log lines a peer can repeat at will (`LineLimiter`): at most `burst` of one key a minute, the next one
  saying how many were held — a member reconnecting in a loop wrote two lines a connection, without end.
- Offline (`mark_offline`): every agent of the member shows Unreachable, `machine-offline`, with
  `machine offline since HH:MM` — the time of its last frame.
"""

from __future__ import annotations

import datetime as dt
from collections import deque

import attrs

from collie.bridge.reader import AgentReader
from collie.crew import crewwire
from collie.crew.crewwire import Admission, FrameError, Hello, Viewing, Welcome, shown
from collie.crew.views import UNREACHABLE
from collie.crew.wire import WireRange
from collie.lead.members.views import MEMBER_VIEWS_MAX, keep_view


def hhmm(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall).strftime("%H:%M")


@attrs.define
class Member:
    label: str
    readers: dict[str, AgentReader] = attrs.Factory(dict)
    conn: object | None = None  # its link (collie.lead.members.link.Conn): only compared here
    version: str | None = None
    read_only: bool = False
    offline_since: float | None = None  # wall clock of the last frame, once offline
    last_seen: float | None = None  # wall clock
    rows: dict = attrs.Factory(dict)  # the dashboard's row of each agent, kept by collie.lead.feed.events

    @property
    def online(self) -> bool:
        return self.conn is not None

MAX_BAD_FRAMES = 100  # bad frames one link may send before the lead closes it (`protocol`)
PARSE_IN_THREAD = 64 * 1024  # frames larger than this are parsed in a worker thread
DIGEST_INLINE = 16 * 1024  # views in frames up to this size are built on the loop (well under a millisecond)
MAX_QUEUED = 4 * crewwire.MAX_FRAME  # characters of view frames one link may have waiting; then it is not read
SAY_AGAIN_AFTER = 60.0
LINK_LINES = 10  # lines of one kind about one member's links logged a minute; the next says how many were held


def admit_hello(hello: Hello | None, label: str, ours: WireRange = crewwire.CREW_WIRE,
                floor: int = crewwire.READ_ONLY_FLOOR) -> Admission:
    """The lead's answer to a link's first frame, `label` being the one its member token opens: accepted
    (read-only for a member older than `ours` but not below `floor`), or closed with `protocol`, `version`
    or `unauthorized`."""
    if hello is None:
        return Admission(False, reason=crewwire.PROTOCOL)
    admission = crewwire.admit(hello.crew_wire, ours, floor)
    if admission.accepted and hello.label != label:
        return Admission(False, reason=crewwire.UNAUTHORIZED)
    return admission


def claim(boot: str | None, open_boot: str | None) -> str:
    """A new link for a label whose link is open: "replace" when it carries the open link's `boot` (the
    same member process, back before the lead saw its old link die), else "probe" (another machine, or
    the member restarted): the open link keeps the label if it answers."""
    return "replace" if boot is not None and boot == open_boot else "probe"


def keeps_label(alive: bool, open_conn, conn_now) -> bool:
    """After the probe: the open link keeps its label when it answered, or another link took it meanwhile."""
    return alive or conn_now not in (open_conn, None)


def connected(member: Member, conn: object, hello: Hello, admission: Admission, wall: float,
              ours: WireRange = crewwire.CREW_WIRE) -> Welcome:
    """The member's state once its new link `conn` is let in, and the `welcome` the lead answers."""
    member.conn, member.read_only = conn, admission.read_only
    member.version = shown(hello.collie, 40)
    member.offline_since = None
    member.last_seen = wall
    return Welcome("collie", admission.read_only, crew_wire=ours)


def viewed(viewers: dict[tuple[str, str], int], label: str) -> list[Viewing]:
    """The `viewing` frames a member's new link is told after `welcome`: one for each agent a phone views."""
    return [Viewing(agent, True)
            for (m, agent), count in list(viewers.items()) if m == label and count]


def link_ended(member: Member, conn: object, wall: float) -> bool:
    """A link ended: True (the member is now offline since its last frame) when it was the member's current
    link; False when another link had replaced it, which the member keeps."""
    if member.conn is not conn:
        return False
    member.conn = None
    mark_offline(member, wall)
    return True


def viewing(viewers: dict[tuple[str, str], int], label: str, agent: str, on: bool) -> Viewing | None:
    """Count a phone starting (`on`) or ending its viewing of an agent: the `viewing` frame to send the
    member when the agent's first viewer came or its last went, else None (more viewers change nothing)."""
    key = (label, agent)
    before = viewers.get(key, 0)
    after = max(0, before + (1 if on else -1))
    viewers[key] = after
    return Viewing(agent, after > 0) if (before == 0) != (after == 0) else None


def crew_row(member: Member, kept: int) -> dict:
    """A member as `collie crew list` shows it."""
    return {"label": member.label, "online": member.online, "version": member.version,
            "last_seen": member.last_seen, "offline_since": member.offline_since,
            "read_only": member.read_only, "agents": len(member.readers), "views_kept": kept}


def intake(raw) -> tuple:
    """How the lead takes one frame off a link: ("queue", entry) for the feeder — ("text", raw) for a large
    frame, parsed in its worker thread; ("parsed", kind, frame) for a small one carrying views — or
    ("apply", kind, frame) for any other, applied on arrival. Raises FrameError for a bad small frame."""
    if isinstance(raw, str) and len(raw) > PARSE_IN_THREAD:
        return "queue", ("text", raw)
    kind, frame = crewwire.parse_member_frame(raw)
    if kind in ("snapshot", "agent"):  # views are fed in arrival order, by the feeder
        return "queue", ("parsed", kind, frame)
    return "apply", kind, frame


def digest_inline(entry: tuple) -> bool:
    """Is a queued entry's view built on the loop? A small parsed one only: there a thread hop costs more."""
    return entry[0] == "parsed" and entry[-1] <= DIGEST_INLINE


class FrameQueue:
    """View frames waiting for the feeder, in arrival order, each with its size in characters (`size`
    counts them all). A newer `agent` frame replaces a waiting parsed one for the same agent: only the
    latest view of an agent is worth building."""

    def __init__(self) -> None:
        self.entries: deque = deque()
        self.size = 0

    def put(self, entry: tuple, size: int) -> None:
        if entry[0] == "parsed" and entry[1] == "agent":  # a newer view of the same agent replaces a waiting one
            for old in [e for e in self.entries if e[0] == "parsed" and e[1] == "agent" and e[2].name == entry[2].name]:
                self.entries.remove(old)
                self.size -= old[3]
        self.entries.append((*entry, size))
        self.size += size

    def take(self) -> tuple:
        entry = self.entries.popleft()
        self.size -= entry[-1]
        return entry

    def full(self) -> bool:
        """More than MAX_QUEUED characters wait: the link is not read until the feeder catches up."""
        return self.size > MAX_QUEUED


def too_many_bad(bad_frames: int) -> bool:
    """A link that sent more than MAX_BAD_FRAMES bad frames is closed (`protocol`)."""
    return bad_frames > MAX_BAD_FRAMES


def silent(last_frame: float, now: float) -> bool:
    """A member whose link sent nothing for OFFLINE_AFTER seconds is offline (its link is closed)."""
    return now - last_frame > crewwire.OFFLINE_AFTER


@attrs.define
class FrameEffect:
    """What one applied frame asks of the hub, in order: `answer` to hand to the call waiting for its id;
    `notes` to log and count, ("bad", FrameError) or ("too_big", agent, cost); `dirty`: the member's views
    file is out of date; `save`: write it as soon as the queued views are fed; `notify`: tell the live
    channel, the inbox and push, `changed` naming the only agents whose views changed (None: any)."""

    answer: object | None = None
    notes: list = attrs.Factory(list)
    dirty: bool = False
    save: bool = False
    notify: bool = False
    changed: list[str] | None = None


def apply_frame(member: Member, names: set[str], views: dict[str, str], kind: str, head, built: list,
                budget: int = MEMBER_VIEWS_MAX) -> FrameEffect:
    """Apply one parsed frame to `member` (`names`: its agents as its link last said, changed in place;
    `views`: its kept views' texts). `built` holds (agent, reader or None, view text or the error) for the
    views the frame carried. Raises FrameError, changing nothing, for a frame that has no place here."""
    effect = FrameEffect()
    if kind == "snapshot":
        names.clear()
        names.update(head)
        for gone in set(member.readers) - names:
            del member.readers[gone]
            views.pop(gone, None)
            effect.dirty = True
        effect.save = True  # on disk at once, a crash must not lose it
    elif kind == "agent":
        if head not in names and len(names) >= crewwire.MAX_AGENTS:
            raise FrameError(f"agent: more than {crewwire.MAX_AGENTS} agents")
        names.add(head)
    elif kind in ("receipt", "read_result"):
        effect.answer = head
        return effect
    elif kind == "beat":
        return effect
    else:  # a second hello
        raise FrameError(f"{kind} after the link was set up")
    for name, reader, text in built:
        if reader is None:
            effect.notes.append(("bad", FrameError(f"agent {name}: {shown(text, 120)}")))
            continue
        cost = keep_view(member.readers, views, name, reader, text, budget)
        if cost is not None:
            effect.notes.append(("too_big", name, cost))
            continue
        effect.dirty = True
    effect.notify = True
    effect.changed = [name for name, _, _ in built] if kind == "agent" else None
    return effect


def mark_offline(member: Member, wall: float) -> None:
    """The member's link is gone: its agents show Unreachable since its last frame (`wall`, the wall clock
    now, when it never sent one)."""
    since = member.last_seen or wall
    member.offline_since = since
    for reader in member.readers.values():
        reader.status, reader.reason = UNREACHABLE, "machine-offline"
        reader.detail = f"machine offline since {hhmm(since)}"


class LineLimiter:
    """How often a line a peer can repeat at will is logged: at most `burst` times in SAY_AGAIN_AFTER seconds
    from the first; the first one after says how many were held."""

    def __init__(self) -> None:
        self.said: dict[str, tuple[float | None, int, int]] = {}  # key -> (window start, logged, held since)

    def allow(self, key: str, now: float, burst: int = 1) -> int | None:
        """None: hold this line; else log it, with this many held before it (0: say nothing of them)."""
        start, logged, held = self.said.get(key, (None, 0, 0))
        if start is None or now - start >= SAY_AGAIN_AFTER:
            start, logged = now, 0
        if logged >= burst:
            self.said[key] = (start, logged, held + 1)
            return None
        self.said[key] = (start, logged + 1, 0)
        return held
