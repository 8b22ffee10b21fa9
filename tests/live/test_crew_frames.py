"""Typed crew frames (issue 41, crew.md §2): every frame of the lead ⇄ member link is a crewwire model,
byte for byte the JSON the link carried before; the member parses the lead's frames strictly and answers
a request it cannot read at once (refused `bad_request`), so the lead never waits out its 15 s."""

from __future__ import annotations

import json
import logging

import attrs
import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from collie.bridge.reader import AgentReader
from collie.bridge.writes import OPS, WriteRequest
from collie.crew import crewwire
from collie.crew.crewconfig import CrewConfig
from collie.crew.crewwire import FrameError, parse_lead_frame, parse_member_frame
from collie.crew.membercore import MemberCore
from collie.crew.receipts import Receipt
from collie.crew.wire import WireRange
from collie.lead.members.link import FORWARD_TIMEOUT, Conn
from collie.lead.members.session import Member, connected, viewing
from collie.lead.members.routing import forwarded_receipt
from collie.member.link import Link

TOKEN = "0123456789abcdef" * 4

# --- a round trip of every frame kind is byte-identical ----------------------------------------------

names = st.from_regex(r"\A[a-z0-9][a-z0-9-]{0,31}\Z")
texts = st.text(max_size=20)
scalars = st.none() | st.booleans() | st.integers(-2 ** 53, 2 ** 53) | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(texts, inner, max_size=3), max_leaves=12)
objects = st.dictionaries(texts, json_values, max_size=4)
maybe = st.none().__or__
ranges = st.tuples(st.integers(0, 99), st.integers(0, 99)).map(lambda t: {"min": min(t), "max": max(t)})


def round_trip(text: str, parse) -> str:
    return crewwire.encode(parse(text)[1])


def statuses():
    """A view's status in the documented shape and order (docs/crew.md, "The link")."""
    def status(status, transport, address, local, token_set, reason, detail):
        return {"status": status, "transport": transport, "address": address, "local": local,
                "token_set": token_set, "reason": reason, "detail": detail}
    return st.builds(status, st.sampled_from(crewwire.AGENT_STATUSES), texts, texts, st.booleans(), st.booleans(),
                     maybe(texts), maybe(texts))


def views():
    def view(name, status, hello, state, left_out):
        out = {"name": name, "status": status, "hello": hello, "state": state}
        return {**out, "left_out": left_out} if left_out else out
    return st.builds(view, names, statuses(), maybe(objects), maybe(objects), st.integers(0, 1000))


@settings(max_examples=60, deadline=None)
@given(lead=texts, read_only=st.booleans(), wire=ranges, agent=texts, on=st.booleans(), rid=texts,
       op=st.sampled_from(crewwire.WRITE_OPS), args=objects, what=texts)
def test_every_lead_frame_round_trips_byte_for_byte(lead, read_only, wire, agent, on, rid, op, args, what):
    """The lead's frames as the lead has always written them parse into their models and encode back to the
    same bytes: an independent member reads what it read before."""
    for frame in ({"type": "welcome", "lead": lead, "read_only": read_only, "crew_wire": wire},
                  {"type": "viewing", "agent": agent, "on": on},
                  {"type": "request", "id": rid, "agent": agent, "op": op, "args": args},
                  {"type": "read", "id": rid, "agent": agent, "what": what, "args": args}):
        text = crewwire.encode(frame)
        assert round_trip(text, parse_lead_frame) == text
        assert crewwire.encode(crewwire.lead_frame(frame)) == text  # what Conn.send puts on the wire


@settings(max_examples=40, deadline=None)
@given(label=texts, collie=texts, wire=ranges, ops=st.lists(texts, max_size=3), boot=maybe(texts),
       agents=st.lists(views(), max_size=3), more=st.lists(names, max_size=3), view=views(), rid=texts,
       ok=st.booleans(), result=maybe(objects))
def test_every_member_frame_round_trips_byte_for_byte(label, collie, wire, ops, boot, agents, more, view, rid, ok,
                                                      result):
    """The member's frames in the documented shape parse into their models and encode back to the same bytes."""
    body = {k: v for k, v in view.items() if k != "name"}
    for frame in ({"type": "hello", "label": label, "collie": collie, "crew_wire": wire, "ops": ops, "boot": boot},
                  {"type": "snapshot", "agents": agents, "more": more},
                  {"type": "agent", "name": view["name"], "view": body},
                  {"type": "beat"},
                  {"type": "read_result", "id": rid, "ok": ok, "result": result}):
        text = crewwire.encode(frame)
        assert round_trip(text, parse_member_frame) == text


@settings(max_examples=60, deadline=None)
@given(rec=st.builds(Receipt, request_id=texts, op=st.sampled_from(OPS), outcome=texts, reason=maybe(texts),
                     text=maybe(texts), message=maybe(texts), turn=maybe(st.integers(0, 2 ** 31)),
                     conversation=maybe(texts), channel=maybe(texts), digest=maybe(texts),
                     current_ask=maybe(objects), replay=st.booleans()))
def test_a_receipt_frame_is_the_receipt_exactly_as_before(rec):
    """crew.md §2: `receipt {id, receipt}` carries the receipt exactly as the phone API shows it (every field,
    in order, as `attrs.asdict` wrote it before the model)."""
    text = crewwire.encode({"type": "receipt", "id": rec.request_id, "receipt": attrs.asdict(rec)})
    assert crewwire.encode(crewwire.ReceiptFrame(rec.request_id, rec)) == text
    assert round_trip(text, parse_member_frame) == text


def test_the_frames_our_lead_and_member_build_are_todays_bytes():
    """The models the lead's session and the member build are the JSON they wrote as dicts before."""
    member = Member("laptop")
    welcome = connected(member, object(), crewwire.Hello("laptop", "1.0", WireRange(1, 1)),
                        crewwire.Admission(True), 1.0)
    assert crewwire.encode(welcome) == '{"type":"welcome","lead":"collie","read_only":false,"crew_wire":{"min":1,"max":1}}'
    assert crewwire.encode(viewing({}, "laptop", "a", True)) == '{"type":"viewing","agent":"a","on":true}'
    hello = crewwire.Hello("laptop", "1.0", crewwire.CREW_WIRE, list(crewwire.WRITE_OPS), "b00t")
    assert json.loads(crewwire.encode(hello)) == {
        "type": "hello", "label": "laptop", "collie": "1.0", "crew_wire": {"min": 1, "max": 1},
        "ops": list(crewwire.WRITE_OPS), "boot": "b00t"}
    assert crewwire.encode(crewwire.Beat()) == '{"type":"beat"}'
    assert crewwire.encode(crewwire.ReadResult("r", False, None)) == '{"type":"read_result","id":"r","ok":false,"result":null}'


def test_the_lead_never_sends_a_frame_that_does_not_fit():
    """A frame the lead's own code built wrong is refused before it goes (a lead bug, not a member's)."""
    with pytest.raises(ValueError, match="does not fit the crew wire"):
        crewwire.lead_frame({"type": "request", "id": "r1", "agent": "a", "op": "launch", "args": {}})
    with pytest.raises(ValueError, match="the member's"):
        crewwire.lead_frame(crewwire.Beat())


# --- a malformed request is answered at once --------------------------------------------------------

@pytest.mark.parametrize(("args", "op", "why"), [
    ({"turn": "3", "text": "hi", "conversation": "c"}, "send", "expected an integer, got str '3' @ args.turn"),
    ({"text": "hi", "op": "steer"}, "send", "args.op steer is not the request's op send"),
    ({"option_ids": "yes", "ask_id": "k"}, "answer", "expected a list"),
    ({"confirmed": "true"}, "answer", "expected true or false"),
])
def test_a_request_the_member_cannot_read_is_refused_bad_request_naming_the_fault(args, op, why):
    """A request whose write does not fit (a wrong type, an envelope contradicting its args) is refused
    `bad_request` with what was wrong: nothing reached the agent."""
    _, frame = parse_lead_frame(json.dumps({"type": "request", "id": "r1", "agent": "a", "op": op, "args": args}))
    with pytest.raises(FrameError) as err:
        crewwire.request_structured(frame, WriteRequest)
    answer = crewwire.refusal_of(err.value)
    assert answer.id == "r1" and answer.receipt.request_id == "r1" and answer.receipt.op == op
    assert answer.receipt.outcome == "refused" and answer.receipt.reason == "bad_request"
    assert why in answer.receipt.text


def test_a_request_naming_its_write_only_in_the_envelope_is_read():
    """crew.md §2 `request {id, agent, op, args}`: a lead that leaves `request_id`, `agent` and `op` out of
    `args` (they are in the envelope) is understood; ours sends them in both, which must agree."""
    _, frame = parse_lead_frame('{"type":"request","id":"r9","agent":"lab","op":"send",'
                                '"args":{"conversation":"c","text":"hi","turn":4,"later":1}}')
    req = crewwire.request_structured(frame, WriteRequest)
    assert (req.request_id, req.agent, req.op, req.conversation, req.text, req.turn) == ("r9", "lab", "send", "c", "hi", 4)


@settings(max_examples=150, deadline=None)
@given(kind=st.sampled_from(sorted(crewwire.LEAD_FRAMES)), rid=json_values, fields=objects, args=json_values)
def test_whatever_a_lead_sends_the_member_reads_it_or_knows_what_to_answer(kind, rid, fields, args):
    """Any JSON object of a lead frame's type is a model or a FrameError (never another exception, which would
    end the member's link); a request or read that names a string id and cannot be read gets its answer."""
    frame = {**fields, "type": kind, "id": rid, "agent": "lab", "op": "send", "what": "items", "args": args}
    try:
        _, model = parse_lead_frame(json.dumps(frame))
        if kind == "request":
            crewwire.request_structured(model, WriteRequest)
        elif kind == "read":
            crewwire.read_args(model)
    except FrameError as exc:
        answer = crewwire.refusal_of(exc) or crewwire.read_failure(exc)
        if kind in ("request", "read") and isinstance(rid, str):
            assert answer is not None and answer.id == rid
            if kind == "request":
                assert (answer.receipt.request_id, answer.receipt.outcome, answer.receipt.reason) == (
                    rid, "refused", "bad_request")
        else:
            assert answer is None


class Pipe:
    """One end of an in-memory WebSocket: what the lead's Conn and the member's Link call on theirs."""

    def __init__(self, out: trio.MemorySendChannel, into: trio.MemoryReceiveChannel) -> None:
        self.out, self.into = out, into

    async def send(self, text: str) -> None:  # the lead's side (quart-trio's websocket)
        await self.out.send(text)

    send_message = send  # the member's side (trio-websocket)

    async def get_message(self) -> str:
        return await self.into.receive()

    async def ping(self) -> None:
        pass


def welcomed(core: MemberCore) -> MemberCore:
    """`core` past its handshake (its hello sent, the lead's welcome read), as a link's session starts."""
    core.hello(trio.current_time())
    core.receive(crewwire.encode(crewwire.Welcome("collie", crew_wire=crewwire.CREW_WIRE)), trio.current_time())
    return core


class QuietBridge:
    """A member's bridge with one agent that never changes (the link's publisher sends one snapshot)."""

    def __init__(self) -> None:
        self.readers = {"lab": AgentReader("lab", transport="socket", address="/x", local=True)}
        self.on_agent_change: list = []
        self.viewed: list = []

    def set_viewing(self, name: str, on: bool) -> None:
        self.viewed.append((name, on))


async def test_a_malformed_request_gets_its_refusal_at_once_not_after_15_s(autojump_clock, caplog):
    """Issue 41: a request the member cannot read was dropped in silence, so the lead waited FORWARD_TIMEOUT
    (15 s) and told the phone `unknown`. Now the member answers it in the same instant (virtual time 0.0)
    refused `bad_request`, naming the fault; the lead takes that receipt as the write's true answer. A frame
    that names no id to answer is logged escaped and dropped, and the link goes on."""
    to_member_send, to_member_recv = trio.open_memory_channel(10)
    to_lead_send, to_lead_recv = trio.open_memory_channel(10)
    conn = Conn(Pipe(to_member_send, to_lead_recv), "laptop", "boot")
    bridge = QuietBridge()
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "laptop"), bridge=bridge, writer=None)
    req = WriteRequest(request_id="r1", op="send", agent="lab", conversation="c", text="hi", turn=3)
    bad_args = {**attrs.asdict(req), "turn": "3"}

    async def lead_reader():
        async for raw in to_lead_recv:
            kind, frame = parse_member_frame(raw)
            if kind == "receipt":
                conn.resolve(frame.id, frame)

    caplog.set_level(logging.INFO, logger="collie.crew")
    async with trio.open_nursery() as n:
        n.start_soon(link._session, Pipe(to_lead_send, to_member_recv), welcomed(link.new_core()))
        n.start_soon(lead_reader)
        await to_member_send.send('{"type":"request","id":7,"agent":"lab\\u001b[2J","op":"send","args":{}}')
        await to_member_send.send("not json\n[crew] FATAL")
        start = trio.current_time()
        got = await conn.call({"type": "request", "id": "r1", "agent": "lab", "op": "send", "args": bad_args},
                              FORWARD_TIMEOUT)
        took = trio.current_time() - start
        await conn.send({"type": "viewing", "agent": "lab", "on": True})  # the link goes on
        await trio.sleep(0.001)
        n.cancel_scope.cancel()
    assert took == 0.0
    rec, bad = forwarded_receipt(req, got)
    assert bad is None and rec.outcome == "refused" and rec.reason == "bad_request"
    assert rec.text == ("The member could not read the request: request: expected an integer, got str '3' @ args.turn")
    assert bridge.viewed == [("lab", True)]
    lines = [r.getMessage() for r in caplog.records if "does not fit the crew wire" in r.getMessage()]
    assert len(lines) == 3 and lines[0].endswith("; ignored") and lines[2].endswith("; answered")
    assert "not JSON" in lines[1]
    assert all("\x1b" not in line and "\n" not in line for line in lines)


async def test_a_read_the_member_cannot_read_is_answered_at_once_with_the_fault(autojump_clock):
    """A read with args of the wrong type, or of a kind the member does not know, is answered `ok: false` with
    what was wrong, in the same instant — a read of an agent the member does not have stays a plain `ok: false`
    (the lead's link probe)."""
    answers: list = []
    to_member_send, to_member_recv = trio.open_memory_channel(10)
    to_lead_send, to_lead_recv = trio.open_memory_channel(10)
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "laptop"), bridge=QuietBridge(), writer=None)
    async with trio.open_nursery() as n:
        n.start_soon(link._session, Pipe(to_lead_send, to_member_recv), welcomed(link.new_core()))
        for raw in ('{"type":"read","id":"a","agent":"lab","what":"items","args":{"conversation":"c","since":"5"}}',
                    '{"type":"read","id":"b","agent":"lab","what":"everything","args":{}}',
                    '{"type":"read","id":"c","agent":"collie-link-probe","what":"recent_sends","args":{"conversation":"p"}}'):
            await to_member_send.send(raw)
        while len(answers) < 3:
            text = await to_lead_recv.receive()
            if json.loads(text)["type"] == "read_result":
                answers.append((trio.current_time(), text))
        n.cancel_scope.cancel()
    assert [at for at, _ in answers] == [0.0, 0.0, 0.0]
    got = [json.loads(text) for _, text in answers]
    assert got[0] == {"type": "read_result", "id": "a", "ok": False,
                      "result": {"error": "read items: expected an integer, got str '5' @ args.since"}}
    assert got[1]["ok"] is False and 'no read "everything"' in got[1]["result"]["error"]
    assert got[2] == {"type": "read_result", "id": "c", "ok": False, "result": None}


async def test_the_kits_fake_member_refuses_a_malformed_request_at_once_too(autojump_clock):
    """The testing kit's fake member reads the lead's frames with the same models as member/link.py: a request
    it cannot read gets the same `bad_request` refusal in the same instant; a good one is still answered."""
    from collie.fixtures.member.link import FakeMember

    to_member_send, to_member_recv = trio.open_memory_channel(10)
    to_lead_send, to_lead_recv = trio.open_memory_channel(10)
    conn = Conn(Pipe(to_member_send, to_lead_recv), "laptop", "boot")
    fake = FakeMember("ws://127.0.0.1:1", "laptop", TOKEN, agents=1, conversations=1)

    async def lead_reader():
        async for raw in to_lead_recv:
            kind, frame = parse_member_frame(raw)
            if kind in ("receipt", "read_result"):
                conn.resolve(frame.id, frame)

    async with trio.open_nursery() as n:
        n.start_soon(fake._session, Pipe(to_lead_send, to_member_recv), None, welcomed(fake.new_core()))
        n.start_soon(lead_reader)
        start = trio.current_time()
        got = await conn.call({"type": "request", "id": "r1", "agent": "agent-1", "op": "rename",
                               "args": {"conversation": "c1", "title": ["not", "text"]}}, FORWARD_TIMEOUT)
        read = await conn.call({"type": "read", "id": "q1", "agent": "agent-1", "what": "recent_sends",
                                "args": {"conversation": "c1"}}, FORWARD_TIMEOUT)
        took = trio.current_time() - start
        n.cancel_scope.cancel()
    assert took == 0.0
    assert got.receipt.outcome == "refused" and got.receipt.reason == "bad_request"
    assert "expected a string" in got.receipt.text and "args.title" in got.receipt.text
    assert read.ok is True and read.result == {"lines": []}


async def test_a_lead_sending_bad_frames_in_a_loop_adds_ten_lines_a_minute_to_the_members_log(autojump_clock, caplog):
    """Bound what a peer makes us keep: the member logs at most ten lines a minute about the lead's bad frames
    (each still answered when it names a request), then logs again after the minute."""
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "laptop"), bridge=QuietBridge(), writer=None)
    sent: list = []

    async def send(frame) -> None:
        sent.append(frame)

    caplog.set_level(logging.INFO, logger="collie.crew")
    bad = '{"type":"request","id":"r","agent":"lab","op":"send","args":[]}'
    for _ in range(15):
        try:
            parse_lead_frame(bad)
        except FrameError as exc:
            await link._bad_frame(send, exc)
    await trio.sleep(60)
    try:
        parse_lead_frame(bad)
    except FrameError as exc:
        await link._bad_frame(send, exc)
    assert len([r for r in caplog.records if "does not fit the crew wire" in r.getMessage()]) == 11
    assert len(sent) == 16 and all(f.receipt.reason == "bad_request" for f in sent)
