"""The crew wire: JSON text frames between a member and its lead over a WebSocket (crew.md §2).

member → lead: `hello`, `snapshot`, `agent`, `beat`, `receipt`, `read_result`
lead → member: `welcome`, `viewing`, `request`, `read`

Every frame of either direction is a frozen attrs class below (`MEMBER_FRAMES`, `LEAD_FRAMES`); `encode`
writes one as `{"type": …, <its fields in order>}`, byte for byte the JSON the link has always carried
(an `AgentView`'s `left_out` only when not 0). `parse_member_frame` (the lead's side) and
`parse_lead_frame` (the member's side) are the only ways a peer's text becomes a frame.

An agent's view travels as what the member's bridge read from it — the raw `hello` and `/v1/state`
documents — plus the member's status for it. The lead feeds them to its own `AgentReader`, so a
member's asks get exactly the digests, trimming and marks the lead computes for its own agents.

Every frame from a member is untrusted: `parse_member_frame` structures it with one lenient cattrs
converter (unknown fields are ignored, for forward compatibility; a wrong type, a missing field, an
unknown `type`, a binary frame or more than the bounds below is a `FrameError`). The bounds keep one
member's frame small enough to handle without stalling the lead: `MAX_FRAME` bytes a frame (the lead's
WebSocket server closes the link above it, code 1009), `MAX_AGENTS` agents a member,
`MAX_CONVERSATIONS` open conversations an agent view (the member cuts to it before sending, keeping the
conversations that matter and saying how many it left out, `left_out`; the lead cuts again).
"""

from __future__ import annotations

import json
import typing
import unicodedata
from typing import Any

import attrs
import cattrs
from cattrs.gen import make_dict_unstructure_fn, override

from collie.crew.convert import describe, lenient_converter
from collie.crew.receipts import Reason, Receipt, refused
from collie.crew.sources import NAME_RULE
from collie.crew.views import keep_conversations
from collie.crew.wire import WireRange

CREW_WIRE = WireRange(1, 1)
READ_ONLY_FLOOR = 1  # a member older than CREW_WIRE.min but not below this is accepted read-only
WRITE_OPS = ("send", "steer", "abort", "answer", "action", "starter", "rename", "close", "reopen")
BEAT_EVERY = 10.0
OFFLINE_AFTER = 30.0
MIN_GAP = 0.1  # a member publishes an agent's view at most once per this gap (the first change at once)

MAX_FRAME = 1024 * 1024  # bytes of one frame, either way (trio-websocket's default, and the lead's server limit)
MAX_AGENTS = 100  # agents one member may show
# open conversations of one agent view (crew.md §6 designs for 100; a cut view keeps those that matter and
# says how many it left out; 200 at ~750 characters each is ~150 KB of a 1 MiB frame, bench/README.md)
MAX_CONVERSATIONS = 200
LEFT_OUT_MAX = 10 ** 9  # a member's count of the conversations it left out, at most
# entries one `read_result` may carry, counted before anything is structured (a million tiny items fit
# a frame and took the lead's loop ~175 ms to structure): a member's cache keeps 2,000 items a conversation
# (collie.bridge.reader.KEEP_ITEMS) and answers them all behind the left-out line; a closed page is the agent's 100
MAX_READ_ITEMS = 2001
MAX_READ_ROWS = 1000  # closed conversations or recent-send lines
AGENT_STATUSES = ("starting", "ready", "unreachable", "version_mismatch")

# close reasons (crew.md §2)
UNAUTHORIZED = "unauthorized"
VERSION = "version"
LABEL_IN_USE = "label_in_use"
PROTOCOL = "protocol"


class FrameError(ValueError):
    """A frame from the peer does not fit the crew wire (the peer misbehaved). `args`: the message (escaped),
    then the `id` the frame named (a string, or None) and its `type`, when it had them; `op`: a bad
    request's op, when it named one as a string."""

    op: str | None = None


def encode(msg: Any) -> str:
    """One frame's text: a frame model (`{"type": …, …}`, see `to_wire`) or a plain JSON value."""
    return json.dumps(to_wire(msg) if attrs.has(type(msg)) else msg, separators=(",", ":"))


def shown(value: object, limit: int = 80) -> str:
    """A peer's value made safe for one log line or a terminal: control and format characters are
    shown escaped (`\\n`, `\\x1b`), and long values are cut."""
    text = value if isinstance(value, str) else repr(value)
    cut = len(text) > limit
    out = "".join(c if unicodedata.category(c)[0] != "C" else c.encode("unicode_escape", "backslashreplace")
                  .decode("ascii") for c in text[:limit])
    return out + ("…" if cut else "")


# --- frames from a member ----------------------------------------------------------------------

def _name(_inst, attribute, value) -> None:
    if not NAME_RULE.match(value):
        raise ValueError(f"{attribute.name} breaks the name rule")


def _left_out(_inst, attribute, value) -> None:
    if type(value) is not int or not 0 <= value <= LEFT_OUT_MAX:
        raise ValueError(f"{attribute.name} must be a whole number from 0 to {LEFT_OUT_MAX}")


def _one_of(choices):
    """A validator: the field's value is one of `choices` (the error names them)."""
    def check(_inst, attribute, value) -> None:
        if value not in choices:
            raise ValueError(f"{attribute.name} must be one of {', '.join(choices)}")
    return check


@attrs.frozen
class Hello:
    label: str
    collie: str
    crew_wire: WireRange
    ops: list[str] = attrs.Factory(list)
    boot: str | None = None  # one per member process: the same boot again is the same member reconnecting


@attrs.frozen
class MemberStatus:
    """The member's own status for one of its agents (the parts the lead shows)."""

    status: str = attrs.field(validator=_one_of(AGENT_STATUSES))
    transport: str = "socket"
    address: str = ""
    local: bool = True
    token_set: bool = False
    reason: str | None = None
    detail: str | None = None


@attrs.frozen
class AgentView:
    """One agent as its member read it: the raw hello and state documents (the lead parses them as
    wire v1), and the member's status for it."""

    name: str = attrs.field(validator=_name)
    status: MemberStatus
    hello: dict | None = None
    state: dict | None = None
    left_out: int = attrs.field(default=0, validator=_left_out)  # open conversations the view does not carry

    def conversation_count(self) -> int:
        convs = (self.state or {}).get("conversations")
        return len(convs) if isinstance(convs, list) else 0

    def trimmed(self) -> AgentView:
        """At most MAX_CONVERSATIONS open conversations, those that matter (collie.crew.views.keep_conversations);
        `left_out` counts the rest too."""
        if self.conversation_count() <= MAX_CONVERSATIONS:
            return self
        assert self.state is not None
        kept, cut = keep_conversations(self.state["conversations"], MAX_CONVERSATIONS)
        return attrs.evolve(self, state={**self.state, "conversations": kept},
                            left_out=min(LEFT_OUT_MAX, self.left_out + cut))

    def as_wire(self) -> dict:
        return _conv.unstructure(self)  # `left_out` only when not 0


def _max_agents(_inst, _attribute, value) -> None:
    if len(value) > MAX_AGENTS:
        raise ValueError(f"more than {MAX_AGENTS} agents")


@attrs.frozen
class Snapshot:
    agents: list[AgentView] = attrs.field(validator=_max_agents)
    more: list[str] = attrs.field(factory=list, validator=_max_agents)  # agents whose views follow as `agent` frames

    def __attrs_post_init__(self) -> None:
        if len(self.names()) > MAX_AGENTS:  # those carried and those to follow count together
            raise ValueError(f"more than {MAX_AGENTS} agents")

    def names(self) -> set[str]:
        return {v.name for v in self.agents} | set(self.more)


@attrs.frozen
class ViewBody:
    status: MemberStatus
    hello: dict | None = None
    state: dict | None = None
    left_out: int = attrs.field(default=0, validator=_left_out)


@attrs.frozen
class AgentFrame:
    name: str = attrs.field(validator=_name)
    view: ViewBody

    def agent_view(self) -> AgentView:
        return AgentView(self.name, self.view.status, self.view.hello, self.view.state, self.view.left_out)


@attrs.frozen
class Beat:
    pass


@attrs.frozen
class ReceiptFrame:
    id: str
    receipt: Receipt


@attrs.frozen
class ReadResult:
    id: str
    ok: bool
    result: dict | None = None


MEMBER_FRAMES: dict[str, type] = {"hello": Hello, "snapshot": Snapshot, "agent": AgentFrame, "beat": Beat,
                                  "receipt": ReceiptFrame, "read_result": ReadResult}


# --- frames from the lead ----------------------------------------------------------------------

@attrs.frozen
class Welcome:
    """The lead's answer to a `hello` it lets in (fields in the wire's order)."""

    lead: str
    read_only: bool = False  # a member older than the lead's range: its agents show, writes are refused
    crew_wire: WireRange = attrs.field(kw_only=True)


@attrs.frozen
class Viewing:
    agent: str
    on: bool


@attrs.frozen
class Request:
    """A write for one of the member's agents: `args` is the write itself (collie.bridge.writes.WriteRequest's
    fields; `request_structured` checks them against the envelope)."""

    id: str
    agent: str
    op: str = attrs.field(validator=_one_of(WRITE_OPS))
    args: dict = attrs.Factory(dict)


@attrs.frozen
class Read:
    """A read of one of the member's agents; `args` by `what` (`READ_ARGS`, checked by `read_args`)."""

    id: str
    agent: str
    what: str
    args: dict = attrs.Factory(dict)


LEAD_FRAMES: dict[str, type] = {"welcome": Welcome, "viewing": Viewing, "request": Request, "read": Read}


# what a `read` asks, by `what` (fields the member does not know, like the lead's `limit`, are ignored)
@attrs.frozen
class ItemsArgs:
    conversation: str
    since: int | None = None  # the items changed after this revision (None: 0)
    newest: int | None = None  # issue 39: the newest `newest` items by position ...
    before: int | None = None  # ... above this seq


@attrs.frozen
class ClosedArgs:
    cursor: str | None = None


@attrs.frozen
class RecentSendsArgs:
    conversation: str


READ_ARGS: dict[str, type] = {"items": ItemsArgs, "closed": ClosedArgs, "recent_sends": RecentSendsArgs}


# what a `read` answers, by `what` (crew.md §2; `closed` is the closed list, features L4)
@attrs.frozen
class ItemsResult:
    items: list[dict]
    open: bool
    # issue 39: a read with `newest` (a page by position) answers these too; an older member leaves them out
    next_since: int | None = None
    earlier: int | None = None


@attrs.frozen
class ClosedResult:
    closed: list[dict]
    next: str | None = None
    footer: str | None = None
    reason: str | None = None


@attrs.frozen
class RecentSendsResult:
    lines: list[dict]


READ_RESULTS: dict[str, type] = {"items": ItemsResult, "closed": ClosedResult, "recent_sends": RecentSendsResult}


def _strict_dict(value, _type):
    if type(value) is not dict:
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _list_hook(conv: cattrs.Converter):
    def factory(type_):
        (elem,) = typing.get_args(type_) or (Any,)

        def hook(value, _type):
            if type(value) is not list:
                raise TypeError(f"expected a list, got {type(value).__name__}")
            return [conv.structure(v, elem) for v in value]

        return hook

    return factory


def _converter() -> cattrs.Converter:
    conv = lenient_converter()  # unknown fields ignored; str/int/bool/float never coerced
    conv.register_structure_hook(dict, _strict_dict)
    # a JSON object a frame carries (an agent's documents, a write's args) goes out as it is: copying it
    # value by value cost a 200-conversation view 4x the time of its encoding
    conv.register_unstructure_hook_func(lambda t: t is dict or typing.get_origin(t) is dict, lambda d: d)
    conv.register_structure_hook_factory(lambda t: typing.get_origin(t) is list, _list_hook(conv))
    return conv


_conv = _converter()


def _reason(exc: BaseException, root: str = "$") -> str:
    try:
        return "; ".join(f"{msg} @ {root}{path[1:]}" for path, msg in describe(exc)[:2])
    except Exception:
        return f"{type(exc).__name__}: {exc}"


def _omit_zero_left_out(conv: cattrs.Converter, cls: type):
    """A view's `left_out` goes on the wire only when it is not 0 (as members have always sent it)."""
    base = make_dict_unstructure_fn(cls, conv, left_out=override(omit=True))

    def hook(view):
        out = base(view)
        if view.left_out:
            out["left_out"] = view.left_out
        return out

    return hook


for _cls in (AgentView, ViewBody):
    _conv.register_unstructure_hook(_cls, _omit_zero_left_out(_conv, _cls))

FRAME_KINDS: dict[type, str] = {cls: kind for frames in (MEMBER_FRAMES, LEAD_FRAMES) for kind, cls in frames.items()}


def to_wire(frame: Any) -> dict:
    """A frame model as the JSON object the link carries: `type` first, then its fields in order."""
    kind = FRAME_KINDS.get(type(frame))
    out = _conv.unstructure(frame)
    return {"type": kind, **out} if kind is not None else out


def lead_frame(msg: Any):
    """A frame the lead sends, as its model: a model is returned as it is; a dict (`{"type": "request", …}`)
    is structured, so a frame that does not fit the crew wire never leaves the lead (ValueError)."""
    if type(msg) in FRAME_KINDS:
        if FRAME_KINDS[type(msg)] not in LEAD_FRAMES:
            raise ValueError(f"a {FRAME_KINDS[type(msg)]} frame is the member's, not the lead's")
        return msg
    cls = LEAD_FRAMES.get(msg.get("type")) if isinstance(msg, dict) else None
    if cls is None:
        raise ValueError(f"not a frame the lead sends: {shown(msg)}")
    try:
        return _conv.structure(msg, cls)
    except Exception as exc:
        raise ValueError(f"the lead's own {msg['type']} frame does not fit the crew wire: {_reason(exc)}") from None


def _parse(raw: str | bytes, frames: dict[str, type]) -> tuple[str, object]:
    if not isinstance(raw, str):
        raise FrameError("a binary frame (the crew wire sends JSON text frames)")
    if len(raw) > MAX_FRAME:
        raise FrameError(f"a frame of {len(raw)} characters (at most {MAX_FRAME})")
    try:
        msg = json.loads(raw)
    except (ValueError, RecursionError):
        raise FrameError("not JSON") from None
    if not isinstance(msg, dict) or not isinstance(msg.get("type"), str):
        raise FrameError("not a JSON object with a string `type`")
    kind = msg["type"]
    cls = frames.get(kind)
    if cls is None:
        raise FrameError(f"unknown frame type \"{shown(kind, 40)}\"")
    try:
        return kind, _conv.structure(msg, cls)
    except Exception as exc:  # cattrs raises several types; all mean "the peer sent a misfit"
        err = FrameError(f"{kind}: {shown(_reason(exc), 200)}", msg.get("id") if isinstance(msg.get("id"), str)
                         else None, kind)
        err.op = msg.get("op") if isinstance(msg.get("op"), str) else None
    raise err


def parse_member_frame(raw: str | bytes) -> tuple[str, object]:
    """(type, frame) for one frame from a member, or FrameError saying what is wrong (escaped)."""
    return _parse(raw, MEMBER_FRAMES)


def parse_lead_frame(raw: str | bytes) -> tuple[str, object]:
    """(type, frame) for one frame from the lead, or FrameError saying what is wrong (escaped); for a
    `request` or `read` whose `id` is a string, `frame_id` names it, so it can be answered."""
    return _parse(raw, LEAD_FRAMES)


def frame_kind(exc: FrameError) -> str | None:
    """The type of the frame a FrameError is about, when the frame named a known one."""
    return exc.args[2] if len(exc.args) > 2 else None


def request_structured(frame: Request, cls: type):
    """The write a `request` carries, as `cls` (collie.bridge.writes.WriteRequest): `args` structured strictly (a
    wrong type or a missing field is a FrameError naming it; unknown fields are ignored). The envelope's
    `id`, `agent` and `op` fill `request_id`, `agent` and `op` where `args` leaves them out, and must be
    the same where it names them."""
    args = dict(frame.args)
    problem = None
    for key, value in (("request_id", frame.id), ("agent", frame.agent), ("op", frame.op)):
        if key in args and args[key] != value:
            problem = (f"request: args.{key} {shown(args[key], 40)} is not the request's {key.split('_')[-1]} "
                       f"{shown(value, 40)}")
            break
        args[key] = value
    if problem is None:
        try:
            return _conv.structure(args, cls)
        except Exception as exc:
            problem = f"request: {shown(_reason(exc, 'args'), 200)}"
    err = FrameError(problem, frame.id, "request")
    err.op = frame.op
    raise err


def refusal_of(exc: FrameError) -> ReceiptFrame | None:
    """The member's answer, at once, to a `request` it could not read: refused `bad_request` (nothing reached
    the agent) with what was wrong; None when the frame named no request id to answer."""
    if frame_kind(exc) != "request" or frame_id(exc) is None:
        return None
    rid = frame_id(exc)
    return ReceiptFrame(rid, refused(rid, exc.op or "", Reason.BAD_REQUEST,
                                     text=f"The member could not read the request: {exc.args[0]}"))


def read_failure(exc: FrameError) -> ReadResult | None:
    """The member's answer to a `read` it could not read: `ok: false` with what was wrong (as for any failed
    read); None when the frame named no id to answer."""
    if frame_kind(exc) != "read" or frame_id(exc) is None:
        return None
    return ReadResult(frame_id(exc), False, {"error": exc.args[0]})


def read_args(frame: Read):
    """A `read`'s args as its `what` asks them (READ_ARGS), or a FrameError naming what is wrong."""
    cls = READ_ARGS.get(frame.what)
    if cls is None:
        raise FrameError(f"read: no read \"{shown(frame.what, 40)}\" (reads: {', '.join(READ_ARGS)})", frame.id, "read")
    try:
        return _conv.structure(frame.args, cls)
    except Exception as exc:
        raise FrameError(f"read {frame.what}: {shown(_reason(exc, 'args'), 200)}", frame.id, "read") from None


def frame_id(exc: FrameError) -> str | None:
    """The request id a bad `receipt`/`read_result` frame named, if any: that request is answered `unknown`."""
    return exc.args[1] if len(exc.args) > 1 else None


def parse_read_result(what: str, result: object):
    """The structured answer to a `read` of `what`; FrameError when it does not fit."""
    cls = READ_RESULTS.get(what)
    if cls is None:
        raise FrameError(f"no read \"{shown(what, 40)}\"")
    field, most = {"items": ("items", MAX_READ_ITEMS), "closed": ("closed", MAX_READ_ROWS),
                   "recent_sends": ("lines", MAX_READ_ROWS)}[what]
    entries = result.get(field) if isinstance(result, dict) else None
    if isinstance(entries, list) and len(entries) > most:
        raise FrameError(f"read_result {what}: {len(entries)} {field} (at most {most})")
    try:
        return _conv.structure(result, cls)
    except Exception as exc:
        raise FrameError(f"read_result {what}: {shown(_reason(exc), 200)}") from None


def unstructure(obj: Any) -> Any:
    return _conv.unstructure(obj)


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
    return Admission(False, reason=VERSION)


def ws_url(address: str) -> str:
    """`ws://…`, `wss://…`, or an http(s) address turned into its WebSocket form, ending in /crew/v1."""
    address = address.strip().rstrip("/")
    for http, ws in (("https://", "wss://"), ("http://", "ws://")):
        if address.lower().startswith(http):
            address = ws + address[len(http):]
    if not address.endswith("/crew/v1"):
        address += "/crew/v1"
    return address
