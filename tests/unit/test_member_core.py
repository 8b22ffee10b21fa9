"""The member's end of the crew link as plain calls (collie.crew.membercore, crew.md §2–§3; issue 41): what the
lead sees a member answer, frame by frame, with no socket, no trio and the time passed in."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collie.bridge.writes import WriteRequest
from collie.crew import __version__, crewwire
from collie.crew.crewwire import FrameError, ReadResult, ReceiptFrame, Welcome
from collie.crew.membercore import (TOO_LARGE, Answer, Ignored, LineBudget, LocalProtocolError, Lookup, MemberCore, Misfit,
                             State, Watch, Welcomed, Write, snapshot_frames)
from collie.crew.receipts import Receipt

WELCOME = crewwire.encode(Welcome("collie", crew_wire=crewwire.CREW_WIRE))


def linked(agents=("lab",), at: float = 100.0) -> MemberCore:
    core = MemberCore("laptop", "boot-1", agents=set(agents), write_type=WriteRequest)
    core.hello(at)
    core.receive(WELCOME, at)
    return core


def request(rid="r1", agent="lab", op="send", **args) -> str:
    return json.dumps({"type": "request", "id": rid, "agent": agent, "op": op, "args": args})


def read(rid="q1", agent="lab", what="items", **args) -> str:
    return json.dumps({"type": "read", "id": rid, "agent": agent, "what": what, "args": args})


# --- the handshake ---------------------------------------------------------------------------------

def test_the_member_says_hello_first_and_is_linked_by_the_welcome():
    """The lead's first frame from a member is `hello` naming its label, version, crew wire, the write ops
    it carries and its process's boot; the welcome is due within 10 s; once welcomed (read-only when the
    lead says so) the first beat is due 10 s later."""
    core = MemberCore("laptop", "boot-1", agents={"lab"}, write_type=WriteRequest)
    hello = json.loads(crewwire.encode(core.hello(50.0)))
    assert hello == {"type": "hello", "label": "laptop", "collie": __version__, "crew_wire": {"min": 1, "max": 1},
                     "ops": list(crewwire.WRITE_OPS), "boot": "boot-1"}
    assert core.welcome_by == 60.0 and core.state is State.HELLO_SENT
    event = core.receive(crewwire.encode(Welcome("collie", True, crew_wire=crewwire.CREW_WIRE)), 51.5)
    assert isinstance(event, Welcomed) and event.welcome.read_only is True
    assert core.state is State.LINKED and core.next_beat == 61.5


@pytest.mark.parametrize(("raw", "said"), [
    (request(), "expected welcome, got request"),
    ('{"type":"viewing\\u001b[2J","agent":"lab","on":true}', 'unknown frame type "viewing\\x1b[2J"'),
    ("not json", "not JSON"),
])
def test_anything_but_a_welcome_first_ends_the_link_saying_what_came(raw, said):
    """A lead that answers the hello with anything else is not a lead this member can talk to: the link
    ends with an escaped reason, and nothing more is read or sent on it."""
    core = MemberCore("laptop", "boot-1", agents={"lab"}, write_type=WriteRequest)
    core.hello(0.0)
    with pytest.raises(FrameError) as err:
        core.receive(raw, 1.0)
    assert said in err.value.args[0] and "\x1b" not in err.value.args[0]
    assert core.state is State.CLOSED
    with pytest.raises(LocalProtocolError):
        core.receive(WELCOME, 2.0)


def test_a_call_out_of_turn_is_refused_and_changes_nothing():
    """The member's own code cannot send a second hello, a beat before the welcome, or read a frame
    before saying hello: each raises, and the link stays where it was."""
    core = MemberCore("laptop", "boot-1", agents={"lab"}, write_type=WriteRequest)
    with pytest.raises(LocalProtocolError, match="frame while the link is open"):
        core.receive(WELCOME, 0.0)
    core.hello(0.0)
    for call in (lambda: core.hello(1.0), lambda: core.beat(1.0)):
        with pytest.raises(LocalProtocolError):
            call()
        assert core.state is State.HELLO_SENT and core.welcome_by == 10.0


# --- requests ---------------------------------------------------------------------------------------

def test_a_write_is_carried_out_once_answered_and_the_envelope_fills_its_args():
    """A good request becomes the write to carry out, its `request_id`, `agent` and `op` taken from the
    frame where the args leave them out; it stays open until its receipt, which goes out as
    `receipt {id, receipt}`."""
    core = linked()
    event = core.receive(request(conversation="c", text="hi", turn=3), 101.0)
    assert isinstance(event, Write)
    assert event.request == WriteRequest(request_id="r1", op="send", agent="lab", conversation="c", text="hi", turn=3)
    assert event.args == {"conversation": "c", "text": "hi", "turn": 3, "request_id": "r1", "agent": "lab", "op": "send"}
    assert core.open_requests() == {"r1": "send"}
    frame = core.receipt("r1", Receipt(request_id="r1", op="send", outcome="sent", turn=3))
    assert json.loads(crewwire.encode(frame))["receipt"]["outcome"] == "sent"
    assert core.open_requests() == {}


@pytest.mark.parametrize(("raw", "fault"), [
    (request(conversation="c", text="hi", turn="3"), "request: expected an integer, got str '3' @ args.turn"),
    (request(request_id="other", conversation="c", text="hi"), "request: args.request_id other is not the request's id r1"),
    (request(op="explode"), "request: op must be one of send, steer"),
    (json.dumps({"type": "request", "id": "r1", "agent": "lab", "op": "send", "args": []}), "expected an object"),
])
def test_a_request_the_member_cannot_read_is_refused_bad_request_at_once(raw, fault):
    """Never silence: a request naming its id that the member cannot read is answered in the same call,
    refused `bad_request` (nothing reached the agent) with what was wrong, and nothing is left open."""
    core = linked()
    event = core.receive(raw, 101.0)
    assert isinstance(event, Misfit) and isinstance(event.answer, ReceiptFrame)
    rec = event.answer.receipt
    assert (event.answer.id, rec.request_id, rec.outcome, rec.reason) == ("r1", "r1", "refused", "bad_request")
    assert rec.text.startswith("The member could not read the request: ") and fault in rec.text
    assert event.line.endswith("; answered") and core.open_requests() == {}


@pytest.mark.parametrize("raw", ['{"type":"request","id":7,"agent":"lab","op":"send","args":{}}', b'{"type":"beat"}',
                                 '{"type":"viewing","agent":"lab","on":"yes"}', "[1,2]",
                                 '{"type":"x\\n[crew] FATAL"}'])
def test_a_frame_naming_no_id_to_answer_is_dropped_with_one_escaped_line_and_the_link_goes_on(raw):
    """Nothing to answer: the frame is dropped, said in one line with control characters escaped, and the
    next frame is read as usual."""
    core = linked()
    event = core.receive(raw, 101.0)
    assert isinstance(event, Misfit) and event.answer is None
    assert event.line.endswith("; ignored") and "\n" not in event.line and "\x1b" not in event.line
    assert isinstance(core.receive(request(conversation="c", text="hi"), 102.0), Write)


def test_a_request_id_sent_twice_is_open_until_both_are_answered():
    """A lead that sends the same request id again while the first is carried out gets two answers (the
    member's journal makes the second a replay); the id is open until the second."""
    core = linked()
    for _ in range(2):
        core.receive(request(op="abort", conversation="c", turn=1), 101.0)
    core.receipt("r1", {"request_id": "r1", "op": "abort", "outcome": "stopped"})
    assert core.open_requests() == {"r1": "abort"}
    core.settle("request", "r1")
    assert core.open_requests() == {}


# --- reads, views, the rest of the lead's frames -----------------------------------------------------

def test_reads_are_answered_once_each_and_at_once_when_they_cannot_be_carried_out():
    """A read of an agent the member does not have is `ok: false` with no result (the lead's link probe);
    one it cannot read is `ok: false` with what was wrong; a good one comes with its args and is open until
    its answer."""
    core = linked()
    probe = core.receive(read(agent="collie-link-probe", what="recent_sends", conversation="p"), 101.0)
    assert isinstance(probe, Answer) and probe.frame == ReadResult("q1", False, None)
    bad = core.receive(read(conversation="c", since="5"), 101.0)
    assert isinstance(bad, Misfit)
    assert bad.answer == ReadResult("q1", False, {"error": "read items: expected an integer, got str '5' @ args.since"})
    unknown = core.receive(read(what="everything"), 101.0)
    assert 'no read "everything"' in unknown.answer.result["error"]
    good = core.receive(read(conversation="c", newest=50), 101.0)
    assert isinstance(good, Lookup) and (good.args.conversation, good.args.newest, good.args.since) == ("c", 50, None)
    assert core.open_reads() == {"q1": "items"}
    assert core.read_result("q1", True, {"items": [], "open": True}) == ReadResult("q1", True, {"items": [], "open": True})
    assert core.open_reads() == {}


def test_a_read_answer_too_large_for_one_frame_says_so_instead_of_ending_the_link():
    """The lead closes a link that sends more than MAX_FRAME: an answer that would not fit is `ok: false`
    saying the answer is too large, and fits."""
    core = linked()
    core.receive(read(what="recent_sends", conversation="c"), 101.0)
    answer = core.read_result("q1", True, {"lines": [{"text": "x" * 1000}] * 1100})
    assert answer == ReadResult("q1", False, {"error": TOO_LARGE})
    assert len(crewwire.encode(answer)) < crewwire.MAX_FRAME


def test_viewing_reaches_only_agents_the_member_has_and_a_second_welcome_is_only_noted():
    """A phone viewing one of the member's agents makes it poll that agent; a `viewing` of an agent it does not
    have, or a second `welcome`, changes nothing and the link goes on."""
    core = linked(agents=("lab", "pi"))
    assert core.receive('{"type":"viewing","agent":"pi","on":true}', 101.0) == Watch("pi", True)
    assert core.receive('{"type":"viewing","agent":"ghost","on":true}', 101.0) == Ignored()
    again = core.receive(WELCOME, 102.0)
    assert isinstance(again, Ignored) and "welcome frame from the lead after the link was set up" in again.line
    assert core.state is State.LINKED and core.last_heard == 102.0


# --- time ------------------------------------------------------------------------------------------

def test_beats_go_every_ten_seconds_from_the_welcome():
    """The lead marks a member offline after 30 s of silence: a beat is due 10 s after the welcome and
    10 s after each beat, at exact times."""
    core = linked(at=100.0)
    times = []
    for _ in range(3):
        times.append(core.next_beat)
        assert json.loads(crewwire.encode(core.beat(core.next_beat))) == {"type": "beat"}
    assert times == [110.0, 120.0, 130.0] and core.next_beat == 140.0


def test_ten_lines_a_minute_about_a_lead_that_misbehaves():
    """A lead sending bad frames in a loop adds at most ten lines a minute to the member's log; the
    minute after, ten more."""
    budget = LineBudget()
    said = [budget.allow(t * 0.5) for t in range(30)]  # 15 s of bad frames
    assert said == [True] * 10 + [False] * 20
    assert [budget.allow(t) for t in (59.9, 60.0, 60.1)] == [False, True, True]


# --- views -----------------------------------------------------------------------------------------

def test_a_snapshot_is_the_same_json_as_its_frame_and_what_does_not_fit_follows_named():
    """The lead parses the snapshot the member builds from its views' text exactly as the frame's JSON;
    a view too large for the room left goes as an `agent` frame named in `more`, and every frame fits."""
    small = {"name": "a", "status": {"status": "ready"}, "hello": None, "state": None}
    half = {**small, "state": {"pad": "x" * (crewwire.MAX_FRAME * 6 // 10)}}
    views = [small, {**half, "name": "b"}, {**half, "name": "c"}]
    frames = snapshot_frames([(v["name"], crewwire.encode(v)) for v in views])
    assert frames[0] == crewwire.encode({"type": "snapshot", "agents": views[:2], "more": ["c"]})
    assert json.loads(frames[1]) == {"type": "agent", "name": "c", "view": {k: v for k, v in half.items() if k != "name"}}
    assert len(frames) == 2 and all(len(f) <= crewwire.MAX_FRAME for f in frames)
    kind, snap = crewwire.parse_member_frame(frames[0])
    assert kind == "snapshot" and snap.names() == {"a", "b", "c"}


# --- whatever the lead sends ------------------------------------------------------------------------

texts = st.text(max_size=12)
scalars = st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=10)


@settings(max_examples=200, deadline=None)
@given(kind=st.sampled_from([*crewwire.LEAD_FRAMES, "bogus"]), rid=json_values,
       agent=st.sampled_from(["lab", "ghost", 3]), op=st.sampled_from(["send", "answer", "explode"]),
       what=st.sampled_from(["items", "closed", "recent_sends", "x"]), args=json_values,
       extra=st.dictionaries(texts, json_values, max_size=2), garbage=st.none() | st.text(max_size=30))
def test_whatever_the_lead_sends_after_the_welcome_the_link_goes_on_and_every_id_is_answered(
        kind, rid, agent, op, what, args, extra, garbage):
    """No frame ends a welcomed link: `receive` always returns what to do. A `request` or `read` that names a
    string id is carried out (and then answered) or answered at once — never left in silence."""
    core = linked()
    raw = garbage if garbage is not None else json.dumps(
        {**extra, "type": kind, "id": rid, "agent": agent, "op": op, "what": what, "on": True, "args": args})
    event = core.receive(raw, 101.0)
    assert core.state is State.LINKED
    if garbage is None and kind in ("request", "read") and isinstance(rid, str):
        if isinstance(event, (Write, Lookup)):
            assert event.frame.id == rid and rid in {**core.open_requests(), **core.open_reads()}
        else:
            answer = event.frame if isinstance(event, Answer) else event.answer
            assert answer is not None and answer.id == rid
