"""The live channel's rules as plain calls (issue 30): no trio, no sockets, times passed in as numbers.

Invariants: a phone that reconnects with `Last-Event-ID` gets exactly the events it would have got
live, or a fresh snapshot when they cannot all be given (phone-api.md `GET /api/events`); a
conversation's events reach only its viewers; an agent is on fast polling while a channel views it or a
lease lasts, and never after (W5); one phone cannot take every channel (issue 11).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from collie.bridge.reader import PAGE_LIMIT
from collie.lead.feed.core import (ITEM_PAGES, LEASE, MAX_CHANNELS, MEMBER_ITEM_RETRIES, PER_DEVICE, EventLog,
                                   FeedState, Leases, MemberItems, admit, agent_key, asks_ended, conv_key, for_viewer,
                                   hello, inbox_event, item_revs, items_event, needs_event, replay, row_event,
                                   snapshot_bytes, view_change)
from collie.lead.feed.needs import agents_to_read

CONV = ("conv", "m1", "lab", "c1")


def test_a_reconnecting_phone_gets_what_it_missed_or_a_snapshot():
    """Last-Event-ID: the events after the id, in order; none when it is the newest; None (a fresh
    snapshot) after a restart, for an id from the future or malformed, or older than the log keeps."""
    log = EventLog(boot="b1", keep=3)
    for n in range(5):
        log.append("row", {"n": n})
    assert [e.id for e in log.since("b1-3")] == ["b1-4", "b1-5"]
    assert log.since("b1-5") == []
    assert log.since("b1-2") == [log.kept[0], log.kept[1], log.kept[2]]  # the oldest kept is b1-3
    for gone in ("b1-1", "b0-4", "b1-6", "b1-x", "", None):
        assert log.since(gone) is None, gone


def test_an_event_is_encoded_once_with_its_id():
    """Every phone gets the same bytes: `id`, `event` and the JSON data, encoded when it was logged."""
    ev = EventLog(boot="b1").append("needs", {"asks": ["é"]})
    assert ev.wire == 'id: b1-1\nevent: needs\ndata: {"asks":["é"]}\n\n'.encode()
    assert ev.encode() is ev.wire


def test_a_conversations_events_reach_only_its_viewers_live_and_on_replay():
    """A row reaches everyone; a pane only the channels viewing that conversation — the same live and
    when a reconnecting phone is given what it missed."""
    log = EventLog(boot="b1")
    row = log.append("row", {"agent": "lab"})
    pane = log.append("pane", {"pane": {}}, CONV)
    other = log.append("pane", {"pane": {}}, ("conv", "m1", "lab", "c2"))
    viewing, dashboard = conv_key(("m1", "lab", "c1")), conv_key(None)
    assert viewing == CONV and dashboard is None and conv_key(("m1", "lab", None)) is None
    assert [for_viewer(e, viewing) for e in (row, pane, other)] == [True, True, False]
    assert [for_viewer(e, dashboard) for e in (row, pane, other)] == [True, False, False]
    assert replay([row, pane, other], viewing) == [row, pane]
    assert replay([row, pane, other], dashboard) == [row]


def test_a_change_of_view_switches_fast_polling_new_on_first():
    """W5: moving from one agent to another turns the new one on before the old one off; another
    conversation of the same agent, or the same view again, switches nothing."""
    assert agent_key(("m1", "lab", "c1")) == ("m1", "lab") and agent_key(None) is None
    assert view_change(None, ("m1", "lab", "c1")) == [(("m1", "lab"), True)]
    assert view_change(("m1", "lab", "c1"), ("local", "desk", None)) == [(("local", "desk"), True),
                                                                          (("m1", "lab"), False)]
    assert view_change(("m1", "lab", "c1"), ("m1", "lab", "c2")) == []
    assert view_change(("m1", "lab", None), ("m1", "lab", None)) == []
    assert view_change(("m1", "lab", "c1"), None) == [(("m1", "lab"), False)]


def test_a_viewing_lease_lasts_sixty_seconds_from_its_last_repeat():
    """W5: `…/viewing {"on": true}` starts viewing once, a repeat renews it without switching again, it
    ends exactly LEASE seconds after the last repeat, and `on: false` ends it at once (once)."""
    leases = Leases()
    key = ("local", "desk")
    assert leases.set(key, True, 100.0) is True
    assert leases.set(key, True, 130.0) is None  # renewed: lapses at 190
    assert leases.expired(189.9) == []
    assert leases.expired(130.0 + LEASE) == [key]
    assert leases.expired(1000.0) == []  # once
    assert leases.set(key, False, 1000.0) is None  # nothing left to end
    assert leases.set(key, True, 1000.0) is True
    assert leases.set(key, False, 1001.0) is False
    assert leases.until == {}


def test_one_phone_cannot_take_every_channel():
    """Issue 11: the 17th channel of a phone ends its oldest still open; with 32 that never finished it
    alone is refused; the local credential is not capped per phone; nobody passes MAX_CHANNELS."""
    assert admit("a", [False] * (PER_DEVICE - 1), 0) == (None, None)
    assert admit("a", [True] + [False] * PER_DEVICE, 0) == (1, None)  # its oldest still open
    assert admit("a", [True] * (2 * PER_DEVICE), 0) == (None, "this phone has 32 live channels open already")
    assert admit(None, [], 150) == (None, None)
    assert admit(None, [], MAX_CHANNELS) == (None, f"{MAX_CHANNELS} live channels are open already")
    assert admit("a", [False] * PER_DEVICE, MAX_CHANNELS)[0] == 0  # ended, then refused for the total


@pytest.mark.parametrize("view", [None, ("local", "desk", None)])
def test_a_view_without_a_conversation_gets_no_conversation_events(view):
    """The dashboard and an agent's page without a chat open get rows and sections, never a pane."""
    ev = EventLog(boot="b").append("pane", {}, CONV)
    assert not for_viewer(ev, conv_key(view))


def test_changes_coalesce_and_only_what_moved_is_sent():
    """However often agents are touched between two passes, the pass takes each once; a row goes out
    only when it differs from the one last sent, a gone agent's as `row: null` (D1, D5)."""
    st = FeedState()
    assert st.take() == (set(), True)  # the first pass reads everything
    st.rows_changed({}, {("local", "desk"): {"n": 1}, ("m1", "lab"): {"n": 1}, ("m1", "ops"): {"n": 1}})
    for _ in range(3):
        st.touch("m1", "lab")
    st.touch("m1", None)
    assert st.take() == ({("m1", "lab"), ("m1", None)}, False)
    assert st.take() == (set(), False)
    dirty = {("m1", None)}
    assert set(st.kept_rows(dirty)) == {("m1", "lab"), ("m1", "ops")}
    assert set(st.kept_rows({("m1", "lab")})) == {("m1", "lab")}
    fresh = {("m1", "lab"): {"n": 1}, ("m1", "ops"): {"n": 2}}
    assert st.rows_changed(st.kept_rows(dirty), fresh) == [
        ("row", {"machine": "m1", "agent": "ops", "row": {"n": 2}}, None)]
    assert st.rows_changed(st.kept_rows(dirty), {("m1", "lab"): {"n": 1}}) == [
        ("row", {"machine": "m1", "agent": "ops", "row": None}, None)]
    assert set(st.rows) == {("local", "desk"), ("m1", "lab")}


def test_sections_and_panes_go_out_only_when_they_change():
    """An unchanged sections list or pane sends nothing; a changed one is sent once, to its viewers."""
    st = FeedState()
    heads = [{"machine": "m1", "online": True}]
    assert st.heads_changed(heads) == [("sections", {"sections": heads}, None)]
    assert st.heads_changed([dict(h) for h in heads]) == []
    pane = {"asks": ["a1"]}
    assert st.pane_changed(CONV, pane) == [
        ("pane", {"machine": "m1", "agent": "lab", "conversation": "c1", "pane": pane}, CONV)]
    assert st.pane_changed(CONV, {"asks": ["a1"]}) == []
    assert st.pane_changed(CONV, {"asks": []})[0][1]["pane"] == {"asks": []}


def test_only_viewed_conversations_of_changed_agents_are_read_and_unviewed_ones_are_forgotten():
    """A pass reads again the viewed conversations whose agent (or whole machine) changed, all of them
    after a full change; a conversation nobody views any more is forgotten, so opening it again starts
    from a full read (its pane is sent again even if it did not change)."""
    other = ("conv", "local", "desk", "c9")
    viewed = {CONV, other}
    assert FeedState.to_read(viewed, {("m1", "lab")}, False) == [CONV]
    assert FeedState.to_read(viewed, {("m1", None)}, False) == [CONV]
    assert FeedState.to_read(viewed, {("m1", "ops"), ("m2", None)}, False) == []
    assert sorted(FeedState.to_read(viewed, set(), True)) == sorted(viewed)
    st = FeedState()
    st.pane_changed(CONV, {"p": 1})
    st.item_since[CONV], st.recent[CONV] = 7, ["sent · hi"]
    st.published_on(CONV)
    st.published_on(None)
    assert st.published == {CONV: 1}
    st.forget({CONV})
    assert CONV in st.panes and st.item_since[CONV] == 7
    st.forget(set())
    assert st.panes == st.item_since == st.published == st.recent == {}
    assert st.pane_changed(CONV, {"p": 1}) != []


def test_what_each_event_carries():
    """phone-api.md: a conversation's pane and items name it and are scoped to its viewers; `items`
    says whether it is the full set; needs, inbox and rows go to every channel."""
    assert items_event(CONV, [{"seq": 1}], True) == (
        "items", {"machine": "m1", "agent": "lab", "conversation": "c1", "items": [{"seq": 1}], "full": True}, CONV)
    assert needs_event([]) == ("needs", {"asks": []}, None)
    assert inbox_event({"id": "i1"}) == ("inbox", {"item": {"id": "i1"}}, None)
    assert row_event(("local", "desk"), None) == ("row", {"machine": "local", "agent": "desk", "row": None}, None)
    assert hello("ch1") == b'retry: 2000\nevent: hello\ndata: {"channel":"ch1"}\n\n'
    assert snapshot_bytes("b-3", {"view": None}) == b'id: b-3\nevent: snapshot\ndata: {"view":null}\n\n'


def _reader(*asks, conv="c1", status="ready", reason=None):
    return SimpleNamespace(status=status, reason=reason, conversations={conv: SimpleNamespace(id=conv, title="Deploy", asks=[
        SimpleNamespace(id=a, title=a, kind="permission", expires_at=None) for a in asks])})


def test_the_needs_list_reads_the_agents_that_changed_and_the_ones_gone():
    """29, D1: a machine changed whole has every agent it has read again, and the ones it no longer has
    leave the list; an agent changed alone is read alone; read whole, every machine is."""
    machines = {"local": {"desk": "r-desk"}, "m1": {"lab": "r-lab"}}
    listed = [("m1", "gone"), ("m2", "old")]
    assert agents_to_read(machines, listed, {("m1", None)}, False) == {("m1", "lab"): "r-lab", ("m1", "gone"): None}
    assert agents_to_read(machines, listed, {("local", "desk"), ("m2", "x")}, False) == {
        ("local", "desk"): "r-desk", ("m2", "x"): None}
    assert agents_to_read(machines, listed) == {("local", "desk"): "r-desk", ("m1", "lab"): "r-lab",
                                                ("m1", "gone"): None, ("m2", "old"): None}


def test_get_api_needs_keeps_when_it_first_saw_an_ask_and_forgets_closed_ones():
    """D1: `GET /api/needs` (collie.lead.web.serve.needs_list) is the live channel's list read whole: oldest first, an ask
    still open keeps the time first seen across requests, a closed one is forgotten (raised again, it is new)."""
    from collie.lead.web.serve import needs_list

    first_seen: dict = {}
    bridge = SimpleNamespace(readers={"desk": _reader("a1")})
    assert [(a["ask"], a["since"]) for a in needs_list(bridge, None, first_seen, 100.0)] == [
        ("a1", "1970-01-01T00:01:40Z")]
    bridge.readers["desk"] = _reader("a1", "a2")
    assert [(a["ask"], a["since"]) for a in needs_list(bridge, None, first_seen, 200.0)] == [
        ("a1", "1970-01-01T00:01:40Z"), ("a2", "1970-01-01T00:03:20Z")]
    bridge.readers["desk"] = _reader("a2")
    assert [a["ask"] for a in needs_list(bridge, None, first_seen, 300.0)] == ["a2"]
    assert first_seen == {("local", "desk", "a2"): 200.0}
    bridge.readers.clear()
    assert needs_list(bridge, None, first_seen, 400.0) == [] and first_seen == {}


def test_an_ask_whose_agent_cannot_be_answered_is_listed_apart_and_not_counted():
    """36.6, D1: an ask of an agent whose program exited is not waiting for you: it leaves `asks` (what
    Needs you (N) counts) for `unreachable`, with the agent's status and reason, and keeps the time first
    seen; back, it is counted again, as old. An agent on a machine that is offline (asleep, or not yet back
    after a lead restart) is not known to be gone: its ask still waits for you."""
    from collie.lead.feed.needs import NeedsList

    needs = NeedsList()
    machines = {"local": {"desk": _reader("a1")}, "m1": {"lab": _reader("b1")}}
    assert needs.read(machines, 100.0)
    assert [a["ask"] for a in needs.asks()] == ["a1", "b1"] and needs.unreachable() == []
    machines["local"]["desk"] = _reader("a1", status="unreachable", reason="connection-refused")
    machines["m1"]["lab"] = _reader("b1", status="unreachable", reason="machine-offline")
    assert needs.read(machines, 200.0)
    assert [a["ask"] for a in needs.asks()] == ["b1"]
    assert [(a["ask"], a["status"], a["reason"], a["since"]) for a in needs.unreachable()] == [
        ("a1", "unreachable", "connection-refused", "1970-01-01T00:01:40Z")]
    machines["m1"]["lab"] = _reader("b1", status="version_mismatch", reason="version")
    assert needs.read(machines, 210.0)
    assert needs.asks() == [] and [a["ask"] for a in needs.unreachable()] == ["a1", "b1"]
    assert needs_event(needs.asks(), needs.unreachable())[1]["unreachable"] == needs.unreachable()
    machines["local"]["desk"] = _reader("a1")
    assert needs.read(machines, 300.0)
    assert [(a["ask"], a["since"]) for a in needs.asks()] == [("a1", "1970-01-01T00:01:40Z")]
    assert "status" not in needs.asks()[0]


def test_an_asks_first_seen_time_is_recalled_after_a_restart(tmp_path):
    """36.6: the lead keeps when it first saw each open ask (collie.lead.feed.needs_file, 0600); a lead started anew
    recalls it, so an ask 8 min old is still 8 min old (not `now`); a recalled time never lies in the
    future, and a broken file costs only the ages."""
    from collie.lead.feed.needs import NeedsList
    from collie.lead.feed.needs_file import read_seen, write_seen

    before = NeedsList()
    before.read({"local": {"desk": _reader("a1", "a2")}}, 100.0)
    path = tmp_path / "asks-seen.json"
    write_seen(path, before.kept())
    assert path.stat().st_mode & 0o777 == 0o600
    after = NeedsList(recall=read_seen(path))
    after.read({"local": {"desk": _reader("a1")}}, 580.0)
    assert [(a["ask"], a["since"]) for a in after.asks()] == [("a1", "1970-01-01T00:01:40Z")]
    assert after.kept() == {("local", "desk", "a1"): 100.0, ("local", "desk", "a2"): 100.0}
    future = NeedsList(recall={("local", "desk", "a1"): 900.0})
    future.read({"local": {"desk": _reader("a1")}}, 580.0)
    assert future.asks()[0]["since"] == "1970-01-01T00:09:40Z"
    path.write_text('{"version": 1, "asks": [["local", "desk", "a1", "x"], 3, ["local", "desk", "a2", 50]]}')
    assert read_seen(path) == {("local", "desk", "a2"): 50.0}
    path.write_text("{not json")
    assert read_seen(path) == {}


def _page(*revs, kind="text"):
    return {"items": [{"seq": r, "rev": r, "kind": kind} for r in revs]}


def test_a_members_changed_items_are_read_page_by_page_and_retried_until_its_view_is_reached():
    """Issue 29: a full page is followed by the next at once; a read that brings nothing new while the
    member's view says the conversation moved is tried again after 5, 10, 20, 40 ms, then left to the
    next change; what was read is what the phone gets, and the revision read up to moves with it."""
    cur = MemberItems(since=10, target=12)
    assert cur.took(_page()) == 0.005  # the member has not read the items yet
    assert cur.took(_page(10)) == 0.01  # nothing past what was sent
    assert cur.took(_page(11, 12)) is None and cur.since == 12
    assert [i["rev"] for i in cur.items] == [10, 11, 12]
    full = MemberItems(since=0, target=PAGE_LIMIT + 1)
    assert full.took(_page(*range(1, PAGE_LIMIT + 1))) == 0.0  # a full page: the next at once
    assert full.took(_page(PAGE_LIMIT + 1)) is None and full.since == PAGE_LIMIT + 1
    late = MemberItems(since=5, target=9)
    assert [late.took(_page()) for _ in range(5)] == [0.005, 0.01, 0.02, 0.04, None]
    assert late.since == 5  # given up until the next change: nothing lost, read from 5 again then
    assert MemberItems(since=5, target=5).took(_page()) is None  # up to date: no retry
    assert MemberItems(since=5, target=9).took(None) is None  # no answer (5 s): done


def test_a_member_cannot_keep_the_lead_reading_forever():
    """Every peer is untrusted: full pages that never end stop after ITEM_PAGES reads plus the retries;
    a gap or an item without an integer revision moves nothing."""
    cur = MemberItems(since=0, target=10 ** 9)
    reads = 0
    while cur.reads_left:
        reads += 1
        if cur.took(_page(*range(reads * PAGE_LIMIT, (reads + 1) * PAGE_LIMIT))) is None:
            break
    assert reads == ITEM_PAGES + len(MEMBER_ITEM_RETRIES)
    assert item_revs([{"rev": 3, "kind": "gap"}, {"rev": "7"}, "x", {"rev": 4}]) == [4]


def test_only_an_ask_decided_or_expired_needs_the_journal():
    """R3: the journal is asked which ended asks the phone tapped only when an ask ended among the items."""
    assert not asks_ended([{"kind": "text"}, {"kind": "ask", "end": None}])
    assert asks_ended([{"kind": "ask", "end": "expired"}]) and asks_ended([{"kind": "ask", "end": "decided"}])


def test_sections_follow_the_rows_the_feed_keeps():
    """D1, D5: the lead's own section first, then one per member by label, each waiting when one of its
    rows waits; a member with no rows has no section; an offline member's section says so."""
    from collie.lead.feed.dashboard import heads_of

    m = {"b": SimpleNamespace(online=False, offline_since="2026-01-01T00:00:00Z"),
         "a": SimpleNamespace(online=True, offline_since=None), "c": SimpleNamespace(online=True, offline_since=None)}
    rows = {("b", "x"): {"waiting": 0}, ("local", "desk"): {"waiting": 0}, ("a", "y"): {"waiting": 2}}
    heads = heads_of(rows, m)
    assert [(h["machine"], h["label"], h["waiting"], h["online"]) for h in heads] == [
        ("local", None, False, True), ("a", "a", True, True), ("b", "b", False, False)]
    assert heads[2]["offline_since"] == "2026-01-01T00:00:00Z" and {h["title"] for h in heads} == {"Durable agents"}


def test_an_inbox_item_that_changed_many_times_is_sent_once_as_it_is_now():
    """I7: between two passes an item queued, running and done is one `inbox` event, with its last state."""
    st = FeedState()
    for state in ("queued", "running", "done"):
        st.inbox_changed(SimpleNamespace(id="i1", state=state))
    st.inbox_changed(SimpleNamespace(id="i2", state="queued"))
    assert [(i.id, i.state) for i in st.take_inbox()] == [("i1", "done"), ("i2", "queued")]
    assert st.take_inbox() == []


def test_a_snapshot_carries_the_dashboard_the_needs_and_what_the_channel_views():
    """phone-api.md: a fresh channel's snapshot has the dashboard and the Needs you list (29); viewing a
    conversation, its pane and all its items (none read yet: an empty list, never null)."""
    from collie.lead.feed.core import snapshot_data

    assert snapshot_data([{"machine": "local"}], [], None) == {
        "dashboard": {"sections": [{"machine": "local"}]}, "view": None, "needs": []}
    agent = snapshot_data([], [], ("m1", "lab", None))
    assert agent["view"] == {"machine": "m1", "agent": "lab", "conversation": None} and "pane" not in agent
    chat = snapshot_data([], [{"ask": "a1"}], ("m1", "lab", "c1"), {"asks": []}, None)
    assert chat["pane"] == {"asks": []} and chat["items"] == [] and chat["needs"] == [{"ask": "a1"}]


def test_the_live_channels_decisions_run_without_trio():
    """STYLE.md habit 1, issue 30: the pieces that decide (collie.lead.feed.core, collie.lead.feed.dashboard, collie.lead.feed.needs)
    import no trio, so every rule above is a plain call."""
    import subprocess
    import sys

    probe = ("import sys, collie.lead.feed.core, collie.lead.feed.dashboard, collie.lead.feed.needs; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'trio'))")
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    assert got.stdout.strip() == "[]"
