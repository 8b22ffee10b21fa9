"""What a member's view frames build on the lead (crew.md §2, §6): a fresh `AgentReader` per view, and its cost.

A member sends the raw hello and state its bridge read; the lead feeds them to a reader of its own, so
digests, trimming and pane state are computed exactly as for its own agents. These functions do no I/O
and import no trio: they run in a worker thread (`digest_text` parses a large frame there too, so its
parsed documents never outlive the call) or, for a small view, on the loop.

The budget: what the lead keeps of one member's views never passes `MEMBER_VIEWS_MAX` (`views_kept`
counts it; `keep_view` and `install_views` enforce it). A view that would pass it is not kept: its agent
keeps its last view (or an empty one) and shows Unreachable, `view-too-big`; the member's other agents
are untouched, and a later view that fits is taken as ever.
"""

from __future__ import annotations

from collie.bridge.reader import AgentReader
from collie.crew import crewwire
from collie.crew.crewwire import AgentView
from collie.crew.views import UNREACHABLE

# What the lead keeps of one member's views, as an estimate of the bytes they hold (`view_cost`: the JSON
# text, the strings parsed from it, CONVERSATION_COST a conversation). Without a bound one member filling
# every wire limit (100 agents x a 1 MiB frame; four-byte UTF-8 characters keep as twelve in our ASCII
# JSON) made the lead hold 300 MB of views, ~490 MiB of RSS (~1 GiB at its peak) and a 300 MB views file
# (bench/member_views.py). A member at crew.md §6's design scale (10 agents x 100 conversations) costs
# ~1.5 M with fake_view's sizes (~1.3 MiB of RSS measured) and ~2.5 M at 750 characters a conversation:
# far inside. One member at the budget keeps ~10 MiB of RSS beyond what taking its frames costs at all
# (+12-48 MiB measured, mostly the worker threads' malloc arenas, which every member shares), so 100
# members (235 MiB at the design scale) pass 1 GiB together only when most of them are hostile.
MEMBER_VIEWS_MAX = 8 * 1024 * 1024
# The parsed objects of one open conversation beside its strings: 100 x 10 x 100 views held 132 MiB
# (bench/README.md, issue 15.1), ~1.4 KB a conversation with its ~255 characters of text.
CONVERSATION_COST = 1024
TOO_BIG = "view-too-big"  # the reason a member's agent shows Unreachable when its view would pass the budget


def build_reader(view: AgentView, now: float) -> tuple[AgentReader, str]:
    """A fresh reader fed one member's view of an agent, and the view as JSON text to persist (no I/O;
    run in a worker thread: a bounded view's JSON holds the GIL for a few ms at most)."""
    st = view.status
    reader = AgentReader(view.name, transport=st.transport, address=st.address, local=st.local,
                         token_set=st.token_set)
    if view.hello is not None:
        reader.on_hello(view.hello, now)
    if view.state is not None and reader.hello is not None:
        reader.on_state(view.state, None, now)
    reader.left_out = min(crewwire.LEFT_OUT_MAX, reader.left_out + view.left_out)  # the list's footer (issue 32)
    if not (reader.status == UNREACHABLE and reader.reason == "protocol"):  # our own parse failure wins
        reader.status, reader.reason, reader.detail = st.status, st.reason, st.detail
    text = crewwire.encode(view.as_wire())
    reader.raw_hello = reader.raw_state = None  # kept as `text`: fewer live objects for the GC to walk
    reader._parsed = {}  # nor the raw conversations kept to re-parse only changed ones: a new view gets a new reader
    return reader, text


def view_cost(reader: AgentReader | None, text: str) -> int:
    """What one kept view counts against its member's MEMBER_VIEWS_MAX: its text twice (the JSON kept, and
    the strings the reader parsed from it) and CONVERSATION_COST a conversation."""
    return 2 * len(text) + CONVERSATION_COST * (len(reader.conversations) if reader is not None else 0)


def digest(kind: str, frame, now: float) -> tuple[str, object, list]:
    """(kind, what the loop needs, [(agent, reader or None, view text or the error)]) for one frame:
    readers built for the views a `snapshot` or `agent` frame carries (worker thread, no I/O)."""
    if kind == "snapshot":
        views, head = frame.agents, frame.names()
    elif kind == "agent":
        views, head = [frame.agent_view()], frame.name
    else:
        return kind, frame, []
    built = []
    for view in views:
        try:
            built.append((view.name, *build_reader(view.trimmed(), now)))
        except Exception as exc:  # e.g. an ask nested too deep for its digest: this view only is dropped
            built.append((view.name, None, f"{type(exc).__name__}: {exc}"))
    return kind, head, built


def digest_text(raw: str, now: float) -> tuple[str, object, list]:
    """Parse a large frame and build the readers it carries, in one worker-thread call: its parsed
    documents never outlive the call, so they never pile up for the garbage collector."""
    return digest(*crewwire.parse_member_frame(raw), now)


def views_kept(readers: dict[str, AgentReader], views: dict[str, str], but: str | None = None) -> int:
    """What the lead keeps of one member's views (`readers` and `views`, its JSON texts), counted against
    MEMBER_VIEWS_MAX (`but`: leaving that agent's view out, as a new one would replace it)."""
    return sum(view_cost(readers.get(name), text) for name, text in views.items() if name != but)


def keep_view(readers: dict[str, AgentReader], views: dict[str, str], name: str, reader: AgentReader, text: str,
              budget: int = MEMBER_VIEWS_MAX) -> int | None:
    """Keep a new view of agent `name` if the member's views stay within `budget`: None when kept, else the
    view's cost, the agent then shown Unreachable (`view-too-big`) with its last view kept, or with none."""
    cost = view_cost(reader, text)
    if views_kept(readers, views, but=name) + cost > budget:
        too_big(readers, name, reader, budget)
        return cost
    readers[name] = reader
    views[name] = text
    return None


def too_big(readers: dict[str, AgentReader], name: str, refused: AgentReader, budget: int = MEMBER_VIEWS_MAX) -> None:
    """Agent `name` shows Unreachable (`view-too-big`): its last kept view stays, or an empty one says why."""
    reader = readers.get(name)
    if reader is None:  # nothing kept of it yet: an empty view, only to say why
        reader = readers[name] = AgentReader(name, transport=refused.transport, address=refused.address,
                                             local=refused.local, token_set=refused.token_set)
    reader.status, reader.reason = UNREACHABLE, TOO_BIG
    reader.detail = f"its view is too big: the lead keeps at most {budget // 2**20} MiB of one machine's views"


def install_views(readers: dict[str, AgentReader], views: dict[str, str], raws: list, now: float,
                  budget: int = MEMBER_VIEWS_MAX) -> None:
    """Parse and feed views on the spot (lead start-up; tests), each as a snapshot would carry it; one that
    does not fit the wire, or the budget (a views file an older lead wrote), is skipped."""
    for raw in raws:
        try:
            view = crewwire.parse_member_frame(crewwire.encode({"type": "snapshot", "agents": [raw]}))[1].agents[0]
            reader, text = build_reader(view.trimmed(), now)
        except (crewwire.FrameError, RecursionError, ValueError):
            continue
        if views_kept(readers, views, but=view.name) + view_cost(reader, text) > budget:
            continue
        readers[view.name] = reader
        views[view.name] = text
