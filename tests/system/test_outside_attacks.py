"""Attacks from outside on a running crew (a member holding a valid token, an API-token sender, anybody
on the network), found by the outside check of issue 9 and fixed at the root (crew.md §2, W4, W5).

Invariants:
- a member that never answers the lead's reads holds up only the views of its own conversations: every
  other phone's live channel (rows of other machines, the lead's own agents) keeps moving at once;
- one member cannot make the lead's log grow without bound: however fast it reconnects (or is refused),
  the link lines it causes are bounded, and the log itself keeps to a size cap.
"""

from __future__ import annotations

import gc
import json
import types
from functools import partial

import pytest
import trio
from trio_websocket import ConnectionClosed, open_websocket_url

from collie.lead.members.session import LINK_LINES
from tests.crewlab import Crew, wait_for
from tests.livelab import short_dir

STORM = 150  # links of each kind a hostile member opens in a row


class FakeBridge:
    readers: dict = {}

    def __init__(self) -> None:
        self.on_agent_change = []


async def test_a_member_that_never_answers_a_read_does_not_hold_up_other_phones(monkeypatch, autojump_clock):
    """W4/W5, crew.md §2 ("nothing a member sends can stop the lead or another member's link"): phone A views
    a conversation of member `mute`, which never answers the lead's reads (it keeps its link alive and its
    view changing). Phone B, on the dashboard, still gets the row of member `ok`'s change in the same pass
    — at the virtual instant it happened — not after A's reads of `mute` time out (2 x 5 s a pass)."""
    from collie.lead.feed import events

    monkeypatch.setattr(events, "pane_state", lambda reader, conv, *, recent_sends, machine, online: {
        "rev": reader.rev})
    monkeypatch.setattr(events, "member_row", lambda member, name, reader: {"name": name, "rev": reader.rev,
                                                                           "waiting": None})

    class Reader:
        status, reason = "ready", None

        def __init__(self):
            self.rev = 0
            self.conversations = {"chat": types.SimpleNamespace(id="chat", title="chat", asks=[])}  # no open ask

    class Member:
        online, offline_since = True, None

        def __init__(self):
            self.readers = {"lab": Reader()}

    class Hub:
        def __init__(self):
            self.members = {"mute": Member(), "ok": Member()}
            self.on_member_change, self.on_view_change = [], []
            self.reads: list = []

        def reader(self, machine, agent):
            return self.members[machine].readers.get(agent)

        async def read(self, machine, agent, what, args):
            self.reads.append((trio.current_time(), machine, what))
            if machine == "mute":
                await trio.sleep_forever()  # the member keeps beating but answers no read
            return {"lines": []} if what == "recent_sends" else {"items": [], "open": True}

    hub = Hub()
    feed = events.Feed(FakeBridge(), hub)
    a, b = feed.open(None), feed.open(None)
    a.view = ("mute", "lab", "chat")
    rows: list = []
    async with trio.open_nursery() as n:
        await n.start(feed.run)

        async def watch():
            async for ev in b.receive:
                if ev.kind == "row":
                    rows.append((trio.current_time(), ev.data["machine"], ev.data["row"]["rev"]))
        n.start_soon(watch)
        for step in range(1, 4):
            hub.members["mute"].readers["lab"].rev = step  # mute's view changes: A's pane must be read again
            feed.touch("mute", "lab")
            await trio.sleep(0.5)
            t = trio.current_time()
            hub.members["ok"].readers["lab"].rev = step
            feed.touch("ok", "lab")
            await trio.sleep(30)
            assert (t, "ok", step) in rows, rows  # at once, whatever A's reads of `mute` are doing
        assert any(m == "mute" for _t, m, _w in hub.reads)  # A's conversation was read (and never answered)
        n.cancel_scope.cancel()


def test_the_bridge_log_keeps_to_its_size_cap(tmp_path, monkeypatch, capsys):
    """Whatever a peer makes the bridge log (a member's reconnect storm, a sender's requests), the log on
    disk stays bounded: past `LOG_MAX` bytes `bridge.log` becomes `bridge.log.1` (the one before is
    dropped); both stay 0600; `collie logs` shows the newest lines across the two, in order."""
    import argparse
    import os

    from collie.crew import logs
    from collie.crew.cli import logs_cmd
    from collie.crew.paths import Paths

    monkeypatch.setattr(logs, "LOG_MAX", 10_000)
    paths = Paths(config_dir=tmp_path / "cfg", state_dir=tmp_path)
    logs.setup(paths.log, stderr=False)
    try:
        for i in range(2_000):
            logs.get("crew").info("[crew] evil: connected (Collie 0.1.0) %04d", i)
    finally:
        logs.setup(None, stderr=False)
    files = sorted(tmp_path.glob("bridge.log*"))
    assert [f.name for f in files] == ["bridge.log", "bridge.log.1"]
    assert all(f.stat().st_size <= 10_000 + 200 for f in files)
    assert all(os.stat(f).st_mode & 0o777 == 0o600 for f in files)
    assert logs_cmd.run(argparse.Namespace(lines=3, follow=False), paths) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line[-4:] for line in shown] == ["1997", "1998", "1999"]
    assert logs_cmd.run(argparse.Namespace(lines=0, follow=False), paths) == 0
    numbers = [int(line[-4:]) for line in capsys.readouterr().out.splitlines()]
    assert numbers == list(range(numbers[0], 2_000)) and len(numbers) > 100  # both files, oldest first


@pytest.fixture
def crew():
    c = Crew(short_dir("oa"))
    yield c
    c.stop()
    gc.collect()  # after the test's trio run: the sockets trio-websocket leaves warn here, under its filter


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # trio-websocket, a link the lead closed
async def test_a_reconnect_storm_cannot_flood_the_leads_log(crew):
    """crew.md §2, V2: a member holding a valid token that reconnects in a loop — the same process
    coming back, a wrong crew-wire version, a bad frame on every link — adds at most `LINK_LINES` lines
    a minute of each kind to the lead's log (the next one says how many were held), not two lines a
    connection; the lead goes on serving, and another member stays online throughout."""
    from tests.crewlab import hello_frame, invite, sim_member

    crew.start_lead()
    evil, ok = invite(crew, "evil"), invite(crew, "ok")
    url = crew.address.replace("http://", "ws://") + "/crew/v1"
    before = crew.lead.log().count("\n")

    async def link(frames: list[str]) -> None:
        ws = None
        try:
            async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {evil}".encode())]) as ws:
                for frame in frames:
                    await ws.send_message(frame)
                await ws.get_message()
        except ConnectionClosed:
            pass
        finally:
            if ws is not None:  # trio-websocket leaves the socket open when the lead closed first
                await ws._stream.aclose()

    wrong = json.dumps({"type": "hello", "label": "evil", "collie": "9", "crew_wire": {"min": 7, "max": 7}})
    with trio.fail_after(120):
        async with trio.open_nursery() as n:
            n.start_soon(partial(sim_member, url, "ok", ok, agents=1, conversations=1, beat=2))
            await trio.to_thread.run_sync(wait_for, lambda: crew.online("ok"))
            for i in range(STORM):
                await link([hello_frame("evil", boot="same"), "not json"])
                await link([wrong])
            assert crew.online("ok")
            n.cancel_scope.cancel()
    added = crew.lead.log().split("\n")[before:]
    about_evil = [line for line in added if "[crew] evil:" in line]
    assert len(about_evil) <= 4 * LINK_LINES, "\n".join(about_evil[-20:])
    assert any("connected" in line for line in about_evil) and any("refused: crew wire" in line for line in about_evil)
    with crew.client() as c:
        assert c.get("/api/dashboard").status_code == 200


def test_a_snapshot_cannot_name_more_agents_than_a_member_may_show():
    """crew.md §2 ("at most 100 agents a member"): the agents a snapshot carries and those it names in
    `more` (whose views follow as `agent` frames) count together; 100 carried plus 100 more other names
    let one member show 200 agents (and hold twice the views on the lead). The same names in both count once."""
    import pytest

    from collie.crew import crewwire
    from tests.crewlab import fake_view

    carried = [fake_view(f"a{i}", 1) for i in range(crewwire.MAX_AGENTS)]
    with pytest.raises(crewwire.FrameError, match="more than 100 agents"):
        crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": carried,
                                                "more": [f"m{i}" for i in range(crewwire.MAX_AGENTS)]}))
    with pytest.raises(crewwire.FrameError, match="more than 100 agents"):
        crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": carried[:60],
                                                "more": [f"m{i}" for i in range(41)]}))
    _kind, snap = crewwire.parse_member_frame(json.dumps({"type": "snapshot", "agents": carried[:60],
                                                          "more": [f"a{i}" for i in range(50)] + ["m0", "m1"]}))
    assert len(snap.names()) == 62


async def test_a_flood_of_asks_from_one_member_keeps_the_push_memory_bounded_and_cheap(tmp_path, monkeypatch):
    """P3, crew.md §5 ("nothing unbounded grows"): a member whose agent raises asks with ever-new ids (1,000
    in one view here) makes the lead remember at most `REMEMBER_PER_MACHINE` of that machine's asks on disk
    (the oldest go first; the lead's own and other machines' memories are untouched), and the whole view
    costs one disk commit, not one fsync per ask — so the flood cannot hold up other machines' pushes
    for seconds. Each ask is still judged by the limits (30 an hour per agent) exactly once."""
    import sqlite3
    from types import SimpleNamespace as NS

    from collie.lead.push import pusher as push

    monkeypatch.setattr(push, "REMEMBER_PER_MACHINE", 300)

    def reader(name: str, asks: list[str]):
        conv = NS(id="c0", title="Pane", asks=[NS(id=a, tool_call_id=None, title="Pick", body=None, push_title=None, push_line=None, kind="choice",
                                                     digest="d", shortened=False, answerable=True, options=[])
                                                  for a in asks])
        return NS(name=name, conversations={"c0": conv})

    bridge = NS(readers={"desk": reader("desk", ["mine"])}, on_agent_change=[])
    hub = NS(members={"calm": NS(readers={"b": reader("b", ["theirs"])}),
                      "evil": NS(readers={"a0": reader("a0", [f"x{i}" for i in range(1_000)])})}, on_view_change=[])
    pusher = push.Pusher(bridge, hub, tmp_path / "push", host="lead", client_factory=FakeClient)
    commits = []
    db = pusher.store.db
    pusher.store.db = CountingDb(db, commits)
    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            await n.start(pusher.run)
            while sum(pusher.stats[k] for k in ("pushed", "quiet", "many")) < 1_002:
                await trio.sleep(0.01)
            n.cancel_scope.cancel()
    rows = dict(sqlite3.connect(tmp_path / "push" / "push.sqlite").execute(
        "SELECT machine, count(*) FROM pushed GROUP BY machine").fetchall())
    assert rows == {"local": 1, "calm": 1, "evil": 300}
    assert pusher.stats["pushed"] + pusher.stats["many"] <= push.AGENT_PER_HOUR + 2 + 1  # the limits held
    assert len(commits) <= 3, len(commits)  # one per agent view that brought new asks


class CountingDb:
    """The push store's database, counting its write transactions (each one an fsync)."""

    def __init__(self, db, commits: list) -> None:
        self._db, self._commits = db, commits

    def execute(self, sql, *args):
        if sql.strip().upper().startswith("BEGIN"):
            self._commits.append(sql)
        return self._db.execute(sql, *args)

    def __getattr__(self, name):
        return getattr(self._db, name)

    def __enter__(self):
        return self._db.__enter__()

    def __exit__(self, *exc):
        return self._db.__exit__(*exc)


class FakeClient:
    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        return False


async def test_a_senders_text_is_held_to_the_agents_limit_on_entry_and_with_every_message(tmp_path):
    """I7, I10, wire §limits (`text_max`, 2000 for an SDK agent by default): an API-token sender could put
    256 KiB in every item (kept 24 h, 5,000 of them in the lead's memory: ~8 MB/s of inbox.sqlite and 800 MB
    of RSS measured) and grow a waiting item without end by adding messages — text the agent would refuse
    `too_long` anyway. Now a send over the agent's limit is refused `too_long` when it enters (nothing
    kept, nothing reaches the agent), and a message that would take the send over it is refused 400
    with the item unchanged."""
    from tests.live.test_inbox_live import lead, rid

    with trio.fail_after(30):
        async with lead(tmp_path) as lab:
            lab.hub.store.add_token("slack", "s" * 40, "required")
            slack = {"authorization": "Bearer " + "s" * 40}
            long = rid()
            status, got = await lab.post("/api/agents/local/a0/inbox",
                                         {"request_id": long, "conversation": "c", "text": "x" * 2001}, slack)
            assert status == 200 and (got["outcome"], got["reason"]) == ("refused", "too_long"), got
            assert "at most 2000" in got["text"]
            assert await lab.state(long, slack) is None  # not kept
            mine = rid()
            status, got = await lab.post("/api/agents/local/a0/inbox",
                                         {"request_id": mine, "conversation": "c", "text": "x" * 1000}, slack)
            assert got["outcome"] == "queued"  # pending: it waits for the owner's approval
            status, _ = await lab.post(f"/api/inbox/{mine}/message", {"text": "y" * 900}, slack)
            assert status == 200
            for _ in range(3):
                status, refused = await lab.post(f"/api/inbox/{mine}/message", {"text": "z" * 200}, slack)
                assert status == 400 and refused["error"] == "bad_request", refused
                assert "at most 2000" in refused["message"]
            status, item = await lab.get(f"/api/inbox/{mine}", slack)
            assert item["text"] == "x" * 1000 + "\n\n" + "y" * 900 and item["state"] == "pending"
            assert lab.turns.texts == []


async def test_a_sender_cannot_fill_the_disk_with_finished_items(tmp_path, monkeypatch):
    """I7, I10 (a sender has at most 1,000 waiting items; finished ones stay listed 24 h): an API-token
    sender that enqueues and cancels in a loop left every cancelled item on disk for 24 h — ~160 a second,
    0.7 MB/s of inbox.sqlite measured. Now each sender keeps at most `FINISHED_PER_SENDER` finished items
    (its newest; the oldest go at the next purge, in memory and on disk). The owner's are not counted
    against a sender, and another sender's stay."""
    import sqlite3

    from collie.lead.inbox import service as inbox_mod
    from tests.live.test_inbox_live import lead, rid

    monkeypatch.setattr(inbox_mod, "FINISHED_PER_SENDER", 5)
    clock = [1_000_000.0]
    with trio.fail_after(30):
        async with lead(tmp_path, wall=lambda: clock[0]) as lab:
            for name in ("flood", "calm"):
                lab.hub.store.add_token(name, name[0] * 40, "required")
            flood, calm = {"authorization": "Bearer " + "f" * 40}, {"authorization": "Bearer " + "c" * 40}
            ids: dict[str, list] = {"flood": [], "calm": []}
            for who, headers, n in (("flood", flood, 12), ("calm", calm, 2)):
                for _ in range(n):
                    clock[0] += 1
                    mine = rid()
                    got = (await lab.post("/api/agents/local/a0/inbox",
                                          {"request_id": mine, "conversation": "c", "text": "spam"}, headers))[1]
                    assert got["outcome"] == "queued"
                    assert (await lab.post(f"/api/inbox/{mine}/cancel", {}, headers))[1]["state"] == "cancelled"
                    ids[who].append(mine)
            clock[0] += 61  # the next purge
            lab.inbox.poke()

            async def listed(headers):
                return [i["request_id"] for i in (await lab.get("/api/agents/local/a0/inbox", headers))[1]["items"]]

            while len(await listed(flood)) > 5:
                await trio.sleep(0.01)
                lab.inbox.poke()
            assert await listed(flood) == ids["flood"][-5:][::-1]  # the newest five, newest first
            assert await listed(calm) == ids["calm"][::-1]
            assert await lab.state(ids["flood"][0], flood) is None and await lab.state(ids["flood"][-1], flood)
            db = sqlite3.connect(lab.inbox.path if hasattr(lab.inbox, "path") else tmp_path / "state" / "inbox.sqlite")
            rows = dict(db.execute("SELECT sender, count(*) FROM items GROUP BY sender").fetchall())
            db.close()
            assert rows == {"flood": 5, "calm": 2}, rows


async def test_a_members_items_answer_of_a_million_tiny_items_does_not_block_the_lead(tmp_path, loopwatch):
    """crew.md §2 ("the lead trusts no frame"), S2: a member's cache keeps at most 2,000 items a
    conversation, so an items answer carries at most that (plus the left-out line). A member answering
    every items read with 1 MiB of 250,000 empty items held the lead's event loop ~175 ms a read while the
    lead structured them (every phone and member waited: /healthz took 140 ms typically, 600 ms at worst,
    with a phone viewing its conversation). Now such an answer is a bad frame, refused before it is
    structured: the phone's items read answers at once with the "didn't answer" footer, no loop step
    blocks over 20 ms, and the lead's own items pages work."""
    from collie.crew import crewwire
    from tests.apilab import FakeLink, add_member, api_lab, frame
    from tests.crewlab import fake_view

    class Flooding(FakeLink):
        label, bad_frames = "evil", 0  # what the hub counts a bad frame on (collie.lead.members.hub.Conn)

        def resolve(self, request_id, answer):
            pass

        async def call(self, msg, timeout):
            if msg["type"] == "read" and msg["what"] == "items":
                return flood  # the frame as the lead's feeder thread parsed it (collie.lead.members.hub: frames over 64 KiB)
            return await super().call(msg, timeout)

    flood = frame({"type": "read_result", "id": "r", "ok": True, "result": {"items": [{}] * 250_000, "open": True}})

    with trio.fail_after(30):
        async with api_lab(tmp_path, []) as lab:
            link = Flooding(lambda msg: {"request_id": msg["id"], "op": msg["op"], "outcome": "sent"})
            add_member(lab.hub, "evil", link, [fake_view("a", 1)])
            gc.freeze()  # the flood lives in this test (in the lead it is the feeder's, then garbage)
            loopwatch.arm()
            try:
                for _ in range(5):
                    got = await lab.get("/api/agents/evil/a/conversations/c00/items")
                    body = await got.get_json()
                    assert got.status_code == 200 and body["items"] == [] and body["footer"]
            finally:
                gc.unfreeze()
    assert crewwire.MAX_READ_ITEMS == 2_001


def test_the_crew_wires_items_bound_follows_the_members_cache():
    """The bound above is the member's own: KEEP_ITEMS a conversation, plus the left-out line."""
    from collie.bridge.reader import KEEP_ITEMS
    from collie.crew import crewwire

    assert crewwire.MAX_READ_ITEMS == KEEP_ITEMS + 1


async def test_a_members_items_never_bring_their_own_html_to_the_phone(tmp_path):
    """C1 (Markdown rendered on the lead, raw HTML shown as text), crew.md §2 ("the lead trusts no frame"):
    the phone app puts a markdown item's `html` into the page as HTML. The lead rendered its own agents'
    Markdown but passed a member's `html` through as the member sent it: a member could put any markup in
    the lead's page (a fake "Ship it" button, a link or refresh to another site). Now the lead renders
    every member item's Markdown itself from its text and drops any other `html` — on the items route and
    on the live channel (both read through `Hub.read`)."""
    from collie.crew.markdown import render
    from tests.apilab import FakeLink, add_member, api_lab, frame
    from tests.crewlab import fake_view

    evil = ("<meta http-equiv=refresh content='0;url=https://evil.example/'>"
            "<a class=\"btn\" href=\"https://evil.example/\">Ship it</a>")
    items = [{"kind": "markdown", "seq": 1, "rev": 1, "text": "**plain** <b>words</b>", "html": evil},
             {"kind": "user", "seq": 2, "rev": 2, "text": "hi", "html": evil},
             {"kind": "markdown", "seq": 3, "rev": 3, "text": "x" * 200_000, "html": evil}]

    class Injecting(FakeLink):
        async def call(self, msg, timeout):
            if msg["type"] == "read" and msg["what"] == "items":
                return frame({"type": "read_result", "id": msg["id"], "ok": True,
                              "result": {"items": items, "open": True}})
            return await super().call(msg, timeout)

    with trio.fail_after(30):
        async with api_lab(tmp_path, []) as lab:
            add_member(lab.hub, "evil", Injecting(lambda m: {}), [fake_view("a", 1)])
            got = await (await lab.get("/api/agents/evil/a/conversations/c00/items")).get_json()
            through = await lab.hub.read("evil", "a", "items", {"conversation": "c00", "since": 0})
            for answer in (got["items"], through["items"]):
                assert [i.get("html") for i in answer] == [render("**plain** <b>words</b>"), None, None]
                assert "evil.example" not in json.dumps(answer)
            assert "<strong>plain</strong> &lt;b&gt;words&lt;/b&gt;" in got["items"][0]["html"]


def big_view(name: str) -> dict:
    """An agent's view whose `agent` frame is just under the crew wire's 1 MiB: 200 conversations with
    long titles (what one hostile member may send for each of its 100 agents)."""
    from collie.crew import crewwire
    from tests.crewlab import fake_view

    view = fake_view(name, crewwire.MAX_CONVERSATIONS)
    per = (crewwire.MAX_FRAME - len(json.dumps({"type": "agent", "name": name, "view": view})) - 4096)
    for conv in view["state"]["conversations"]:
        conv["title"] = "x" * (per // crewwire.MAX_CONVERSATIONS)
    return view


def agent_frame(view: dict) -> str:
    return json.dumps({"type": "agent", "name": view["name"], "view": {k: v for k, v in view.items() if k != "name"}})


@pytest.mark.slow
async def test_one_member_cannot_make_the_lead_keep_more_than_its_views_budget(crew):
    """crew.md §2 and its limits: what the lead keeps of one member's views is bounded by
    `MEMBER_VIEWS_MAX` (one member filling every wire limit — 100 agents, each a 1 MiB view — made the
    lead hold ~300 MB of views and a 300 MB views file). A view that would take the member over it is
    not kept — by the lead's own count, and in its views file — and its agent shows Unreachable with
    the reason `view-too-big`, logged (escaped) at most `LINK_LINES` times a minute; the member's agents
    that fit stay ready, another member is untouched, and a later view that fits is shown again."""
    from collie.crew import control
    from collie.lead.members.views import MEMBER_VIEWS_MAX, TOO_BIG
    from tests.crewlab import fake_view, hello_frame, invite, sim_member

    crew.start_lead()
    evil, ok = invite(crew, "evil"), invite(crew, "ok")
    url = crew.address.replace("http://", "ws://") + "/crew/v1"
    names = [f"a{i}" for i in range(6)]  # 2.3 M a view by the lead's count: three fit the 8 MiB, three do not
    frames = [agent_frame(big_view(name)) for name in names]

    def kept(label: str) -> int:
        return {m["label"]: m for m in control.call(crew.lead.paths.control_socket, "crew")["members"]}[label]["views_kept"]

    with crew.client() as c:
        def rows() -> dict:
            return {s["machine"]: {a["name"]: a for a in s["agents"]} for s in c.get("/api/dashboard").json()["sections"]}

        def shown_all() -> dict | None:
            got = rows()
            return got if len(got.get("evil", {})) == len(names) and len(got.get("ok", {})) == 2 else None

        with trio.fail_after(120):
            async with trio.open_nursery() as n:
                n.start_soon(partial(sim_member, url, "ok", ok, agents=2, conversations=3, beat=2))
                async with open_websocket_url(url, extra_headers=[(b"authorization", f"Bearer {evil}".encode())]) as ws:
                    await ws.send_message(hello_frame("evil"))
                    await ws.get_message()
                    for frame in frames:
                        await ws.send_message(frame)
                    got = await trio.to_thread.run_sync(partial(wait_for, shown_all, 60, "every agent shown"))
                    evil_rows = got["evil"]
                    ready = [a for a in names if evil_rows[a]["status"] == "ready"]
                    too_big = [a for a in names if evil_rows[a]["reason"] == TOO_BIG]
                    assert ready == names[:3] and too_big == names[3:], evil_rows
                    assert all(evil_rows[a]["status"] == "unreachable" and "too big" in evil_rows[a]["detail"]
                               for a in too_big)
                    assert 0 < kept("evil") <= MEMBER_VIEWS_MAX
                    assert all(row["status"] == "ready" for row in got["ok"].values())
                    saved = crew.lead.paths.state_dir / "crew-views" / "evil.json"  # what the lead kept, no more
                    await trio.to_thread.run_sync(partial(wait_for, lambda: saved_names(saved) == set(names[:3]), 30,
                                                          "the kept views saved"))
                    assert saved.stat().st_size < MEMBER_VIEWS_MAX / 2
                    # a smaller view of an agent refused before is taken and shown
                    await ws.send_message(agent_frame(fake_view("a5", 2)))
                    await trio.to_thread.run_sync(partial(wait_for, lambda: rows()["evil"]["a5"]["status"] == "ready",
                                                          30, "the smaller view shown"))
                    assert rows()["evil"]["a5"]["open"] == 2 and kept("evil") <= MEMBER_VIEWS_MAX
                    assert crew.online("ok") and crew.online("evil")
                    n.cancel_scope.cancel()
    log = crew.lead.log()
    lines = [line for line in log.splitlines() if "[crew] evil: agent" in line]
    assert 1 <= len(lines) <= LINK_LINES and all(TOO_BIG in line for line in lines), lines
    assert "Traceback" not in log


def saved_names(path) -> set | None:
    """The agents whose views the lead's views file holds (None while it is not written)."""
    try:
        return set(json.loads(path.read_text()))
    except (FileNotFoundError, ValueError):
        return None


async def test_a_view_over_the_budget_keeps_the_agents_last_view_and_a_views_file_is_cut_to_it(tmp_path, monkeypatch):
    """The budget above, inside the hub: a view that would take the member over `MEMBER_VIEWS_MAX` leaves
    the agent's last kept view in place (shown Unreachable, `view-too-big`, like the `protocol` rule for
    the lead's own agents), the other agents' views are untouched, and the lead's count never passes the
    budget. Views restored at start-up (a file an older lead wrote, without the budget) are cut to it too."""
    from types import SimpleNamespace as NS

    from collie.lead.members import hub as hub_mod
    from collie.lead.members.session import Member
    from collie.lead.members.views import TOO_BIG, digest
    from tests.apilab import FakeLink, add_member, api_lab, frame
    from tests.crewlab import fake_view

    with trio.fail_after(30):
        async with api_lab(tmp_path, []) as lab:
            hub = lab.hub
            member = add_member(hub, "evil", FakeLink(lambda m: {}), [fake_view("a", 3), fake_view("b", 3)])
            before = hub.kept("evil")
            monkeypatch.setattr(hub_mod, "MEMBER_VIEWS_MAX", before + 10_000)  # room for a few more characters
            old_a, old_b = member.readers["a"], member.readers["b"]
            conn = NS(names={"a", "b"}, label="evil", bad_frames=0, save_after_feed=False)
            hub._apply(member, conn, *digest("agent", frame(json.loads(agent_frame(fake_view("a", 200)))), 0.0))
            assert member.readers["a"] is old_a and len(old_a.conversations) == 3  # the last kept view stays
            assert (old_a.status, old_a.reason) == ("unreachable", TOO_BIG)
            assert member.readers["b"] is old_b and old_b.status == "ready"
            assert hub.kept("evil") == before
            hub._apply(member, conn, *digest("agent", frame(json.loads(agent_frame(fake_view("a", 4)))), 0.0))
            assert member.readers["a"].status == "ready" and len(member.readers["a"].conversations) == 4
            assert before < hub.kept("evil") <= hub_mod.MEMBER_VIEWS_MAX

            restored = hub.members["old"] = Member("old")
            hub._install_views(restored, [fake_view(f"r{i}", 3) for i in range(40)], 0.0)
            assert 0 < len(restored.readers) < 40 and hub.kept("old") <= hub_mod.MEMBER_VIEWS_MAX
