"""The member ⇄ lead link (crew.md §2): strict frames, bounds, who may hold a label, invite files,
and when a member publishes (issue 8.11, 9.1, 9.6, 9.14, issue 11 "Measure")."""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, open_websocket_url

from collie.bridge.reader import AgentReader
from collie.crew import crewwire
from collie.crew.crewconfig import CrewConfig
from collie.crew.crewstore import token_hash
from collie.crew.crewwire import FrameError, parse_member_frame
from collie.bridge.pace import VIEWED_GAP
from collie.crew.membercore import snapshot_frames
from collie.member.link import Coalescer, Link, agent_view, fit_items, view_shape
from tests.crewlab import Crew, fake_view, hello_frame, invite, wait_for
from tests.livelab import short_dir

TOKEN = "0123456789abcdef" * 4
GOOD_RECEIPT = {"request_id": "r1", "op": "send", "outcome": "sent", "turn": 4}


# --- strict frames (9.1) ---------------------------------------------------------------------------

@pytest.mark.parametrize(("raw", "why"), [
    ('{"type":"receipt","id":"r1","receipt":{"outcome":"sent"}}', "required field missing"),
    ('{"type":"receipt","id":"r1","receipt":{"request_id":"r1","op":"send","outcome":"sent","turn":"4"}}',
     "expected an integer"),
    ('{"type":"receipt","id":"r1","receipt":{"request_id":"r1","op":"send","outcome":"sent","replay":"false"}}',
     "expected true or false"),
    ('{"type":"receipt","id":"r1","receipt":["sent"]}', "expected"),
    ('{"type":"read_result","id":"r1","ok":1}', "expected true or false"),
    ('{"type":"snapshot","agents":"ab"}', "expected a list"),
    ('{"type":"snapshot","agents":[{"name":"../x","status":{"status":"ready"}}]}', "name rule"),
    ('{"type":"agent","name":"a","view":{"status":{"status":"bogus"}}}', "status must be one of"),
    ('{"type":"agent","name":"a","view":{"status":{"status":"ready"},"hello":[["wire",1]]}}', "expected an object"),
    ('{"type":"hello","label":"x","collie":"1","crew_wire":{"min":"1","max":1}}', "expected an integer"),
    ('{"type":"unheard-of"}', "unknown frame type"),
    ('{"type":"x\\u001b[2J\\n[bridge] FATAL"}', "unknown frame type \"x\\x1b[2J\\n[bridge] FATAL\""),
    ("{not json", "not JSON"),
    ("[" * 5000 + "]" * 5000, "not JSON"),
    ('["type"]', "not a JSON object"),
    (b'{"type":"beat"}', "binary frame"),
    ('{"type":"beat","pad":"' + "x" * crewwire.MAX_FRAME + '"}', "at most"),
])
def test_a_bad_member_frame_is_a_frame_error_that_says_why(raw, why):
    """9.1, 9.5: every frame from a member is parsed strictly; the error names the fault, escaped."""
    with pytest.raises(FrameError) as err:
        parse_member_frame(raw)
    assert why in err.value.args[0]
    assert "\n" not in err.value.args[0] and "\x1b" not in err.value.args[0]


def test_a_bad_receipt_names_its_request_so_that_request_becomes_unknown():
    with pytest.raises(FrameError) as err:
        parse_member_frame('{"type":"receipt","id":"r1","receipt":{"outcome":"sent"}}')
    assert crewwire.frame_id(err.value) == "r1"


def test_unknown_fields_are_ignored_and_good_frames_structure():
    """Forward compatibility (STYLE 3): a newer member's extra fields are ignored."""
    kind, frame = parse_member_frame(json.dumps({"type": "receipt", "id": "r1", "future": True,
                                                 "receipt": {**GOOD_RECEIPT, "future": 1}}))
    assert kind == "receipt" and frame.receipt.turn == 4 and frame.receipt.outcome == "sent"
    kind, frame = parse_member_frame(json.dumps({"type": "snapshot", "agents": [fake_view("lab", 3)]}))
    assert [v.name for v in frame.agents] == ["lab"] and frame.agents[0].conversation_count() == 3


def test_views_are_bounded():
    """9.6: at most MAX_AGENTS agents a member and MAX_CONVERSATIONS conversations a view."""
    with pytest.raises(FrameError, match="more than 100 agents"):
        parse_member_frame(json.dumps({"type": "snapshot", "agents": [fake_view(f"a{i}") for i in range(101)]}))
    _, frame = parse_member_frame(json.dumps({"type": "snapshot", "agents": [fake_view("lab", 500)]}))
    assert frame.agents[0].trimmed().conversation_count() == crewwire.MAX_CONVERSATIONS


# --- what the member sends stays under the frame limit (9.6) ------------------------------------------

def test_a_snapshot_too_big_for_one_frame_sends_the_rest_as_agent_frames():
    views = [fake_view(f"a{i}", 150, instance="x" * 40) for i in range(40)]
    frames = [json.loads(f) for f in snapshot_frames([(v["name"], crewwire.encode(v)) for v in views])]
    assert all(len(crewwire.encode(f)) <= crewwire.MAX_FRAME for f in frames)
    snap = frames[0]
    assert snap["type"] == "snapshot" and snap["more"] and len(snap["agents"]) + len(snap["more"]) == 40
    assert [f["name"] for f in frames[1:]] == snap["more"]
    kind, parsed = parse_member_frame(crewwire.encode(snap))
    assert parsed.names() == {f"a{i}" for i in range(40)}


def test_an_items_answer_too_big_keeps_the_newest_items_behind_the_left_out_line():
    """S3: older items are left out with the left-out line, never the link."""
    items = [{"kind": "agent", "seq": i, "text": "y" * 1000} for i in range(1, 3000)]
    fitted = fit_items({"items": items, "open": True})
    assert len(crewwire.encode(fitted)) <= crewwire.MAX_FRAME
    assert fitted["items"][0]["kind"] == "gap" and fitted["items"][-1]["seq"] == 2999
    assert fitted["items"][1]["seq"] == fitted["items"][0]["seq"]


# --- when the member publishes (issue 11 "Measure") -----------------------------------------------

HELLO = {"wire": {"min": 1, "max": 1}, "runtime": "sim", "instance": "i1", "caps": ["asks", "send"]}


class FakeBridge:
    """The member's bridge as the link sees it: readers, an edge-triggered change event, and the
    hooks told which agent changed (`Bridge.on_agent_change`)."""

    def __init__(self, names) -> None:
        self.readers = {n: AgentReader(n, transport="socket", address="/x", local=True) for n in names}
        self._changed = trio.Event()
        self.on_agent_change: list = []
        for name in names:
            self.change(name, 0)

    async def wait_changed(self) -> None:
        await self._changed.wait()

    def change(self, name: str, turn: int, items_rev: int = 0, state: str = "idle") -> None:
        reader = self.readers[name]
        now = trio.current_time()
        reader.on_hello(HELLO, now)
        reader.on_state({"rev": turn * 1000 + items_rev, "instance": "i1",
                         "conversations": [{"id": "c", "turn": turn, "state": state, "items_rev": items_rev}]},
                        None, now)
        self._changed.set()
        self._changed = trio.Event()
        for fn in self.on_agent_change:
            fn(name)


async def test_a_lone_change_is_published_at_once_then_at_most_one_frame_per_gap(autojump_clock):
    """Issue 11: leading-edge coalescing — the first change after a quiet spell goes at once; changes
    within MIN_GAP (0.1 s) of an agent's last frame (here a reply streaming in: items only, the turn
    and its state unchanged) go together at the gap's end, newest state only; each agent has its own gap."""
    bridge = FakeBridge(["a", "b"])
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "m"), bridge=bridge, writer=None)
    sent: list = []

    async def send(frame: dict | str) -> None:
        frame = json.loads(frame) if isinstance(frame, str) else frame  # the snapshot goes as text
        rev = None if frame["type"] == "snapshot" else frame["view"]["state"]["conversations"][0]["items_rev"]
        sent.append((round(trio.current_time(), 9), frame["type"], frame.get("name"), rev))

    async def script():
        for at, name, rev in ((1.0, "a", 1), (1.02, "a", 2), (1.04, "a", 3), (1.05, "b", 1), (5.0, "a", 4),
                              (5.3, "a", 5), (5.3, "b", 2)):
            await trio.sleep_until(at)
            bridge.change(name, 0, items_rev=rev)

    async with trio.open_nursery() as n:
        n.start_soon(link._publish, send)
        n.start_soon(script)
        await trio.sleep_until(10)
        n.cancel_scope.cancel()
    assert sent == [(0.0, "snapshot", None, None),
                    (1.0, "agent", "a", 1),     # the first change: at once, not 0.1 s later
                    (1.05, "agent", "b", 1),    # another agent: its own gap
                    (1.1, "agent", "a", 3),     # 1.02 and 1.04: one frame at the end of a's gap, newest state
                    (5.0, "agent", "a", 4),     # a lone change: at once
                    (5.3, "agent", "a", 5), (5.3, "agent", "b", 2)]


async def test_the_frame_showing_a_turn_end_is_not_held_by_the_gap(autojump_clock):
    """Issue 16.1 on a member, crew.md §4: a send starts a turn (a frame at once) and the turn ends
    30 ms later; the lead runs the agent's next inbox item when it sees that end, so the frame goes at
    once too, not at the end of the 0.1 s gap (which capped a member's agent at a few items a second)."""
    bridge = FakeBridge(["a"])
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "m"), bridge=bridge, writer=None)
    sent: list = []

    async def send(frame: dict | str) -> None:
        frame = json.loads(frame) if isinstance(frame, str) else frame  # the snapshot goes as text
        if frame["type"] == "agent":
            c = frame["view"]["state"]["conversations"][0]
            sent.append((round(trio.current_time(), 9), c["turn"], c["state"], c["items_rev"]))

    async def script():
        for at, turn, state, rev in ((1.0, 1, "working", 1), (1.01, 1, "working", 2), (1.03, 1, "idle", 3),
                                     (1.04, 2, "working", 1), (1.05, 2, "working", 2)):
            await trio.sleep_until(at)
            bridge.change("a", turn, items_rev=rev, state=state)

    async with trio.open_nursery() as n:
        n.start_soon(link._publish, send)
        n.start_soon(script)
        await trio.sleep_until(5)
        n.cancel_scope.cancel()
    assert sent == [(1.0, 1, "working", 1),   # the turn starts: at once
                    (1.03, 1, "idle", 3),     # it ends within the gap: at once (was 1.1), with the streamed item
                    (1.04, 2, "working", 1),  # the next item's turn starts: at once
                    (1.14, 2, "working", 2)]  # only the streamed item waits for the gap


async def test_after_a_leads_send_the_member_reads_at_once_until_the_turn_ends(autojump_clock):
    """Issue 16.1 on a member: the lead's inbox runs the next item once the turn a write started has
    ended; the member asks its bridge for a read at once after each change (`read_soon`) until its
    view shows that turn ended — not one read per burst gap — and then stops asking."""
    bridge = FakeBridge(["a"])
    asked: list[float] = []
    bridge.read_soon = lambda name: asked.append(round(trio.current_time(), 9))
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "m"), bridge=bridge, writer=None)
    reader = bridge.readers["a"]

    def state(turn: int, working: bool) -> None:
        reader.on_state({"rev": turn * 2 + working, "instance": "i1",
                         "conversations": [{"id": "c", "turn": turn, "state": "working" if working else "idle"}]},
                        None, trio.current_time())
        bridge._changed.set()
        bridge._changed = trio.Event()

    state(1, True)  # the send started turn 1

    async def agent():
        await trio.sleep(0.03)
        state(1, True)  # a reply streams in: still working
        await trio.sleep(0.02)
        state(1, False)  # the turn ends
        await trio.sleep(1)
        state(1, False)

    async with trio.open_nursery() as n:
        n.start_soon(agent)
        await link._follow_turn("a", "c", 1)
        done_at = trio.current_time()
    assert asked == [0.0, 0.03]  # at once, then after the change that still showed the turn working
    assert done_at == pytest.approx(0.05)  # returned as the view showed the turn ended


def test_coalescer_decides_without_a_clock():
    c = Coalescer(0.1)
    assert c.decide("a", "v1", 10.0) == 0
    c.mark("a", "v1", 10.0)
    assert c.decide("a", "v1", 10.01) is None  # the lead has it
    assert c.decide("a", "v2", 10.04) == pytest.approx(0.06)
    assert c.decide("a", "v2", 10.2) == 0


def test_a_turn_ending_within_the_gap_goes_at_once_a_streamed_item_waits():
    """Issue 16.1, crew.md §4: the lead runs an agent's next inbox item when it sees the turn end, so
    the frame that shows it is never held by the gap (the agent's queue would crawl at one item per
    gap); a reply streaming into the same turn is still paced."""
    def view(state: str, turn: int, items_rev: int) -> dict:
        return {"name": "a", "status": {"status": "ready"},
                "state": {"rev": items_rev, "conversations": [{"id": "c", "turn": turn, "state": state,
                                                               "items_rev": items_rev}]}}
    c = Coalescer(0.1)
    started = view("working", 4, 10)
    c.mark("a", json.dumps(started), 10.0, view_shape(started))
    streamed = view("working", 4, 11)
    assert c.decide("a", json.dumps(streamed), 10.02, view_shape(streamed)) == pytest.approx(0.08)
    ended = view("idle", 4, 12)
    assert c.decide("a", json.dumps(ended), 10.02, view_shape(ended)) == 0
    c.mark("a", json.dumps(ended), 10.02, view_shape(ended))
    asked = view("waiting", 4, 13)  # an ask opening: a state change too
    assert c.decide("a", json.dumps(asked), 10.03, view_shape(asked)) == 0
    gone = {"name": "a", "status": {"status": "unreachable"}, "state": None}
    assert c.decide("a", json.dumps(gone), 10.03, view_shape(gone)) == 0


def test_an_ask_swapped_for_another_goes_at_once_and_a_viewed_agent_streams_at_the_viewed_gap():
    """Issue 29: an ask closed and another raised at once leaves the conversation `waiting` — still a change
    the gap never holds (Needs you shows it); while a phone views the agent, a streamed item waits for
    VIEWED_GAP (50 ms) at most, not MIN_GAP, as the bridge reads it at that pace."""
    def view(asks: list[str], items_rev: int) -> dict:
        return {"name": "a", "status": {"status": "ready"},
                "state": {"rev": items_rev, "conversations": [{"id": "c", "turn": 4, "state": "waiting",
                                                               "items_rev": items_rev,
                                                               "asks": [{"id": x} for x in asks]}]}}
    c = Coalescer(0.1)
    first = view(["q1"], 10)
    c.mark("a", json.dumps(first), 10.0, view_shape(first))
    swapped = view(["q2"], 11)
    assert c.decide("a", json.dumps(swapped), 10.01, view_shape(swapped)) == 0
    c.mark("a", json.dumps(swapped), 10.01, view_shape(swapped))
    streamed = view(["q2"], 12)
    assert c.decide("a", json.dumps(streamed), 10.02, view_shape(streamed)) == pytest.approx(0.09)
    assert c.decide("a", json.dumps(streamed), 10.02, view_shape(streamed), VIEWED_GAP) == pytest.approx(0.04)


async def test_a_view_too_big_for_the_link_says_so_instead_of_breaking_it():
    bridge = FakeBridge(["a"])
    reader = bridge.readers["a"]
    reader.raw_state = {"rev": 1, "instance": "i1", "conversations": [{"id": f"c{i}", "title": "t" * 20000}
                                                                       for i in range(100)]}
    view = agent_view(bridge, "a")
    assert view["state"] is None and view["status"]["status"] == "unreachable"
    assert "larger than the crew link carries" in view["status"]["detail"]


class StuckSocket:
    """A member's link whose peer stopped reading: a frame, once the socket's buffers are full, never goes."""

    async def send(self, text: str) -> None:
        await trio.sleep_forever()


async def test_a_member_that_stops_reading_holds_nobody_past_the_forward_timeout(autojump_clock):
    """crew.md §2 (found by the outside check): a member whose link takes no frame — it stopped reading its
    socket, TCP still up — held a write's sender until the server's 60 s send-stall rule, and every
    write, read and `viewing` change queued behind it longer. Now a request's time limit counts from the
    call, its frame's send included: the write answers `unknown` (reason `link`) at 15 s exactly, the
    one queued behind it at its own 15 s, and the link is ended as stalled."""
    from collie.lead.members.link import FORWARD_TIMEOUT, Conn, LinkStuck

    conn = Conn(StuckSocket(), "laptop", "boot")
    ended: dict[str, float] = {}

    async def call(rid: str, delay: float) -> None:
        await trio.sleep(delay)
        start = trio.current_time()
        got = await conn.call({"type": "request", "id": rid, "agent": "a", "op": "send", "args": {}}, FORWARD_TIMEOUT)
        assert got is None
        ended[rid] = trio.current_time() - start

    async with trio.open_nursery() as n:
        n.start_soon(call, "first", 0)
        n.start_soon(call, "second", 1)  # waits for the first one's frame to go, within its own limit
    assert ended == {"first": FORWARD_TIMEOUT, "second": FORWARD_TIMEOUT}
    assert conn.closed.is_set() and conn.close_reason == "stalled: it took no frame for 15 s"
    start = trio.current_time()
    with pytest.raises(LinkStuck):
        await conn.send({"type": "viewing", "agent": "a", "on": True})
    assert trio.current_time() - start == FORWARD_TIMEOUT


# --- who may hold a label, bad tokens, invite files (8.11, 9.14): a real lead ------------------------

@pytest.fixture
def crew():
    c = Crew(short_dir("cl"))
    yield c
    c.stop()


async def closed_reason(url: str, token: str, hello: str) -> str | None:
    """Connect, say hello; None when welcomed (the link is then left), else the lead's close reason."""
    try:
        async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {token}".encode())],
                                      disconnect_timeout=2) as ws:
            await ws.send_message(hello)
            msg = json.loads(await ws.get_message())
            assert msg["type"] == "welcome"
            return None
    except ConnectionClosed as exc:
        return exc.reason.reason


async def answer_reads(ws) -> None:
    """What a live member does with the lead's reads of agents it does not have: answers `ok: false`."""
    while True:
        msg = json.loads(await ws.get_message())
        if msg.get("type") == "read":
            await ws.send_message(json.dumps({"type": "read_result", "id": msg["id"], "ok": False}))


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # trio-websocket, server closes first
async def test_one_link_per_label_a_wrong_token_is_unauthorized_and_the_invite_file_goes(crew):
    """8.11: a second link claiming a label that is online is refused `label_in_use` and the first
    stays; the same member (same `boot`) reconnecting replaces its old link; a wrong token, or a hello
    naming another label, is closed `unauthorized`. 9.14: once the member joined, the lead keeps only
    the token's hash — the plaintext copy in invites/ is gone."""
    crew.start_lead()
    token = invite(crew, "laptop")
    token_file = crew.lead.paths.state_dir / "invites" / "laptop.token"
    url = crew.address.replace("http://", "ws://") + "/crew/v1"
    headers = [(b"authorization", f"Bearer {token}".encode())]
    with trio.fail_after(60):
        async with open_websocket_url(url, extra_headers=headers, disconnect_timeout=2) as first:
            await first.send_message(hello_frame("laptop", boot="boot-A"))
            assert json.loads(await first.get_message())["type"] == "welcome"
            assert not token_file.exists()
            kept = b"".join(p.read_bytes() for p in crew.lead.paths.state_dir.rglob("*") if p.is_file()
                            and not p.is_socket())
            assert token_hash(token).encode() in kept and token.encode() not in kept
            # another machine with the same invite: the lead probes the first link, which answers as a live
            # member does; the newcomer is refused, and the first link is untouched
            async with trio.open_nursery() as n:
                n.start_soon(answer_reads, first)
                assert await closed_reason(url, token, hello_frame("laptop", boot="boot-B")) == crewwire.LABEL_IN_USE
                n.cancel_scope.cancel()
            await first.send_message(json.dumps({"type": "beat"}))
            assert crew.online("laptop")
            # a wrong token, and a right token whose hello names another label
            assert await closed_reason(url, "f" * 64, hello_frame("laptop", boot="boot-A")) == crewwire.UNAUTHORIZED
            assert await closed_reason(url, token, hello_frame("desk", boot="boot-A")) == crewwire.UNAUTHORIZED
            # the laptop woke up before the lead noticed its old link die: same boot, it takes over
            async with open_websocket_url(url, extra_headers=headers, disconnect_timeout=2) as second:
                await second.send_message(hello_frame("laptop", boot="boot-A"))
                assert json.loads(await second.get_message())["type"] == "welcome"
                with pytest.raises(ConnectionClosed):
                    while True:
                        await first.get_message()
                assert crew.online("laptop")
    wait_for(lambda: not crew.online("laptop"), what="offline after the link closed")
    log = crew.lead.log()
    assert log.count("label_in_use") == 1 and token not in log
    gc.collect()  # trio-websocket's leaked sockets warn here (filtered), not in whichever test runs next


async def silent_link(address: str, token: str, hello: str) -> trio.SocketStream:
    """A member's link that was welcomed and then went silent (its process was killed behind a proxy
    that still holds the connection): from here on it reads nothing and answers nothing."""
    from urllib.parse import urlsplit

    from wsproto import ConnectionType, WSConnection
    from wsproto.events import AcceptConnection, Request, TextMessage

    where = urlsplit(address)
    stream = await trio.open_tcp_stream(where.hostname, where.port)
    ws = WSConnection(ConnectionType.CLIENT)
    await stream.send_all(ws.send(Request(host=where.netloc, target="/crew/v1",
                                          extra_headers=[(b"authorization", f"Bearer {token}".encode())])))
    said = ""
    while "welcome" not in said:
        ws.receive_data(await stream.receive_some(65536))
        for ev in ws.events():
            if isinstance(ev, AcceptConnection):
                await stream.send_all(ws.send(TextMessage(data=hello)))
            elif isinstance(ev, TextMessage):
                said += ev.data
    return stream


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # trio-websocket, server closes first
async def test_a_member_restarted_while_the_lead_holds_its_dead_link_is_taken_at_once(crew):
    """8.11 (found by the fault campaign, seeds 41 and 62): a member killed after its link was cut comes
    back with a new `boot` while the lead still holds the old link. The lead probes the old link with
    a read; it answers nothing, so the new link is welcomed at once (before: refused `label_in_use` until the old
    link was declared silent after 30 s, and queued sends waited that long). A link that answers keeps
    its label (the other test)."""
    crew.start_lead()
    token = invite(crew, "laptop")
    url = crew.address.replace("http://", "ws://") + "/crew/v1"
    with trio.fail_after(60):
        stale = await silent_link(crew.address, token, hello_frame("laptop", boot="boot-A"))
        assert crew.online("laptop")
        assert await closed_reason(url, token, hello_frame("laptop", boot="boot-B")) is None  # welcomed
        await stale.aclose()
    log = crew.lead.log()
    assert "the old link did not answer within 5 s: the new link replaces it" in log
    assert "label_in_use" not in log and token not in log
    gc.collect()


def test_the_member_says_what_a_refusal_means():
    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "laptop"), bridge=None, writer=None)

    def closed(reason):
        from wsproto.frame_protocol import CloseReason as Code
        from trio_websocket import CloseReason
        return ConnectionClosed(CloseReason(Code.POLICY_VIOLATION, reason))

    assert "refused this member (unauthorized): the member token is wrong" in link.describe(closed("unauthorized"))
    said = link.describe(ExceptionGroup("g", [closed("label_in_use")]))
    assert "another machine is connected as laptop" in said and "its own invite" in said
    assert link.describe(closed("x\n\x1b[2J")) == "the lead closed the link: x\\n\\x1b[2J"


async def test_a_view_that_arrives_while_the_views_file_is_saved_is_not_left_waiting(tmp_path, monkeypatch):
    """crew.md §2: after a member's snapshot (every reconnect) the lead writes its views file; an `agent`
    frame that came during that write (the turn a restarted member's recovery just ended) was left in the
    queue: the feeder replaced the event the frame had set and slept until the next frame. The lead then
    showed the turn running for good and the inbox held every send behind it (a fault test stuck 120 s)."""
    from collie.lead.members.link import Conn
    from tests.apilab import FakeLink, add_member, api_lab, frame

    with trio.fail_after(30):
        async with api_lab(tmp_path, []) as lab:
            hub = lab.hub
            member = add_member(hub, "box", FakeLink(lambda m: {}), [])
            conn = member.conn = Conn(None, "box", "boot-1")
            saving, release = trio.Event(), trio.Event()

            async def slow_save():  # the views file's fsync, held until the test lets it go
                saving.set()
                await release.wait()
            monkeypatch.setattr(hub, "_save_views", slow_save)
            snapshot = json.dumps({"type": "snapshot", "agents": [fake_view("a", 2, turn=1)], "more": []})
            later = fake_view("a", 2, turn=2)
            async with trio.open_nursery() as n:
                n.start_soon(hub._feed, member, conn)
                conn.enqueue(("parsed", "snapshot", frame(json.loads(snapshot))), len(snapshot))
                await saving.wait()  # the snapshot is applied; its views are being written
                raw = json.dumps({"type": "agent", "name": "a", "view": {k: v for k, v in later.items() if k != "name"}})
                conn.enqueue(("parsed", "agent", frame(json.loads(raw))), len(raw))
                release.set()
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert not conn.queue  # fed, not waiting for a frame that may never come
                assert {c.turn for c in member.readers["a"].conversations.values()} == {2}
                n.cancel_scope.cancel()
