"""The crew hub's rules as plain calls (crew.md §2, §3, §6): a member's session, its views budget and the
lead's routing decisions, each tested without a socket, a thread or trio, with exact times passed in.

These rules were tested before only through a real or simulated member link (tests/system/test_crew_link.py,
tests/system/test_hostile_members.py, tests/system/test_outside_attacks.py, tests/live/test_lead_refusals.py); each of the
tests here runs in microseconds.
"""

from __future__ import annotations

import json
import time

import attrs
import pytest

from collie.bridge.writes import WriteRequest
from collie.crew import crewwire
from collie.crew.crewwire import FrameError, Hello, Viewing
from collie.crew.receipts import NOT_CERTAIN, NOT_CONFIRMED, OLDER_COLLIE, Receipt
from collie.crew.wire import WireRange
from collie.lead.members.refusals import Seen
from collie.lead.members.routing import forwarded_receipt, judge_repeat, own_html, read_answer, refusal_before_forward
from collie.lead.members.session import (LINK_LINES, MAX_BAD_FRAMES, MAX_QUEUED, PARSE_IN_THREAD, SAY_AGAIN_AFTER,
                                         FrameQueue, LineLimiter, Member, admit_hello, apply_frame, claim, connected,
                                         crew_row, intake, keeps_label, link_ended, mark_offline, silent,
                                         too_many_bad, viewed, viewing)
from collie.lead.members.views import MEMBER_VIEWS_MAX, TOO_BIG, digest, install_views, views_kept
from tests.crewlab import fake_view


def frame(msg: dict):
    return crewwire.parse_member_frame(json.dumps(msg))[1]


def agent_msg(view: dict) -> dict:
    return {"type": "agent", "name": view["name"], "view": {k: v for k, v in view.items() if k != "name"}}


def hello(label: str = "laptop", wire=(1, 1), boot: str | None = "boot-1") -> Hello:
    return Hello(label=label, collie="0.1.0", crew_wire=WireRange(*wire), boot=boot)


def hhmm(wall: float) -> str:
    return time.strftime("%H:%M", time.localtime(wall))


def online(label: str = "laptop", views: list[dict] = ()) -> tuple[Member, dict, set]:
    """A member with a link and the given views kept: (member, its views' texts, its agents' names)."""
    member = Member(label, conn=object())
    texts: dict[str, str] = {}
    install_views(member.readers, texts, list(views), 0.0)
    return member, texts, set(member.readers)


# --- who may hold a link (crew.md §2) -----------------------------------------------------------------
def test_a_link_is_let_in_only_with_a_hello_on_a_shared_crew_wire_naming_its_tokens_label():
    """crew.md §2: the first frame must be a `hello` (else closed `protocol`), on a crew wire the lead speaks
    (else `version`), naming the label the member token was issued for (else `unauthorized`)."""
    assert admit_hello(None, "laptop").reason == crewwire.PROTOCOL
    assert admit_hello(hello(wire=(7, 9)), "laptop").reason == crewwire.VERSION
    assert admit_hello(hello("desk"), "laptop").reason == crewwire.UNAUTHORIZED
    ok = admit_hello(hello(), "laptop")
    assert ok.accepted and not ok.read_only


def test_an_older_member_above_the_floor_is_let_in_read_only_and_one_below_it_is_refused():
    """crew.md §2, features O: a member older than the lead's crew-wire range but not below its read-only
    floor is accepted read-only (its agents show; writes get "runs an older Collie"); below it, `version`."""
    older = admit_hello(hello(wire=(1, 1)), "laptop", ours=WireRange(2, 3), floor=1)
    assert older.accepted and older.read_only
    assert admit_hello(hello(wire=(1, 1)), "laptop", ours=WireRange(3, 3), floor=2).reason == crewwire.VERSION
    # even read-only, the hello must name its own label
    assert admit_hello(hello("desk", wire=(1, 1)), "laptop", ours=WireRange(2, 3), floor=1).reason == "unauthorized"


def test_one_link_per_label_the_same_boot_replaces_another_must_find_the_open_link_dead():
    """crew.md §2: a laptop waking from sleep (same `boot`) replaces its old link at once; another machine
    or a restarted member (another or no `boot`) makes the lead probe the open link, and a live one keeps
    the label (the newcomer is refused `label_in_use`)."""
    assert claim("boot-1", "boot-1") == "replace"
    assert claim("boot-2", "boot-1") == "probe"
    assert claim(None, "boot-1") == "probe"
    assert claim(None, None) == "probe"  # no boot on either side proves nothing
    old, other = object(), object()
    assert keeps_label(True, old, old)  # it answered the probe
    assert not keeps_label(False, old, old) and not keeps_label(False, old, None)  # dead: replaced
    assert keeps_label(False, old, other)  # a third link took the label while the probe waited


def test_a_member_let_in_is_online_with_its_version_and_hears_welcome_then_what_is_viewed():
    """crew.md §2: `welcome {crew_wire, lead}` answers the hello (read-only said so); then the member is told
    which of its agents a phone is viewing (it polls those every 2 s). The version it claims is cut to 40
    characters and its control characters shown escaped (it reaches logs and `collie crew list`)."""
    member = Member("laptop", offline_since=5.0)
    conn = object()
    welcome = connected(member, conn, Hello("laptop", "9.9\x1b[2J" + "x" * 80, WireRange(1, 1)),
                        crewwire.Admission(True, read_only=True), 1_764_640_000.0)
    assert crewwire.to_wire(welcome) == {"type": "welcome", "lead": "collie", "read_only": True,
                                         "crew_wire": {"min": 1, "max": 1}}
    assert member.online and member.read_only and member.offline_since is None and member.last_seen == 1_764_640_000.0
    assert member.version == "9.9\\x1b[2J" + "x" * 33 + "…"  # its first 40 characters, the escape shown
    viewers = {("laptop", "a"): 2, ("laptop", "b"): 0, ("desk", "c"): 1}
    assert viewed(viewers, "laptop") == [Viewing("a", True)]


def test_a_member_hears_only_the_first_viewer_come_and_the_last_one_go():
    """crew.md §2: `viewing {agent, on}` — two phones viewing one agent send one `on`, and `off` only when
    both left; an extra `off` never goes below zero."""
    viewers: dict = {}
    assert viewing(viewers, "laptop", "a", True) == Viewing("a", True)
    assert viewing(viewers, "laptop", "a", True) is None
    assert viewing(viewers, "laptop", "a", False) is None
    assert viewing(viewers, "laptop", "a", False) == Viewing("a", False)
    assert viewing(viewers, "laptop", "a", False) is None and viewers[("laptop", "a")] == 0


def test_only_the_members_current_link_ending_makes_it_offline():
    """One link per label: an old link that ends after a new one replaced it leaves the member online."""
    member, _, _ = online(views=[fake_view("a")])
    old, new = member.conn, object()
    member.conn = new
    assert not link_ended(member, old, 100.0) and member.online and member.readers["a"].status == "ready"
    assert link_ended(member, new, 100.0) and not member.online and member.readers["a"].reason == "machine-offline"
    row = crew_row(member, 1234)
    assert (row["online"], row["agents"], row["views_kept"], row["offline_since"]) == (False, 1, 1234, 100.0)


# --- how frames are taken (crew.md §2: the lead trusts no frame) --------------------------------------
def test_view_frames_wait_for_the_feeder_and_other_frames_apply_on_arrival():
    """A large frame is queued unparsed (parsed in the feeder's worker thread); a small snapshot or agent
    frame is queued parsed, in arrival order; receipts, read results and beats apply at once; a small
    frame that does not fit the crew wire is a bad frame."""
    big = json.dumps(agent_msg(fake_view("a", 1))) + " " * PARSE_IN_THREAD
    assert intake(big) == ("queue", ("text", big))
    kind_, (tag, kind, parsed) = intake(json.dumps(agent_msg(fake_view("a", 1))))
    assert (kind_, tag, kind, parsed.name) == ("queue", "parsed", "agent", "a")
    assert intake(json.dumps({"type": "beat"}))[:2] == ("apply", "beat")
    with pytest.raises(FrameError):
        intake('{"type": "receipt", "id": 3}')


def test_a_newer_view_of_an_agent_replaces_its_waiting_one_and_the_queue_counts_what_waits():
    """crew.md §2 (rate-limited views): only the latest view of an agent is worth building, so a newer
    `agent` frame replaces a waiting one for the same agent, keeping the others' order; past MAX_QUEUED
    characters waiting, the link is not read until the feeder catches up."""
    q = FrameQueue()
    a1, b, a2 = (frame(agent_msg(fake_view(n, 1, turn=t))) for n, t in (("a", 1), ("b", 1), ("a", 2)))
    q.put(("parsed", "agent", a1), 100)
    q.put(("parsed", "agent", b), 200)
    q.put(("text", "raw"), 300)
    q.put(("parsed", "agent", a2), 400)
    assert [e[-1] for e in q.entries] == [200, 300, 400] and q.size == 900
    assert q.take()[2] is b and q.size == 700
    assert not q.full()
    q.put(("text", "huge"), MAX_QUEUED - 700)
    assert not q.full()  # exactly at the bound: still read
    q.put(("text", "one more"), 1)
    assert q.full()


def test_a_link_is_closed_past_the_bad_frame_bound_and_offline_after_thirty_silent_seconds():
    """crew.md §2: too many bad frames close the link (`protocol`); a member silent for 30 s is offline."""
    assert not too_many_bad(MAX_BAD_FRAMES) and too_many_bad(MAX_BAD_FRAMES + 1)
    assert not silent(100.0, 130.0) and silent(100.0, 130.001)


# --- what a frame changes (crew.md §2) ----------------------------------------------------------------
def test_a_snapshot_names_every_agent_and_the_ones_it_leaves_out_go():
    """crew.md §2: on reconnect the member sends a fresh snapshot; an agent it no longer names is gone from
    the lead, and the snapshot is saved at once (a crash must not lose it)."""
    member, texts, names = online(views=[fake_view("a"), fake_view("b")])
    snap = frame({"type": "snapshot", "agents": [fake_view("a", 2)], "more": []})
    effect = apply_frame(member, names, texts, *digest("snapshot", snap, 5.0))
    assert set(member.readers) == set(texts) == names == {"a"}
    assert len(member.readers["a"].conversations) == 2
    assert effect.save and effect.dirty and effect.notify and effect.changed is None


def test_an_agent_frame_changes_that_agent_only_and_no_member_shows_more_than_max_agents():
    """crew.md §2: an `agent` frame replaces one agent's view (the live channel looks at that agent only);
    a member naming more than MAX_AGENTS agents gets a bad frame, and nothing changes."""
    member, texts, names = online(views=[fake_view("a"), fake_view("b")])
    b_before = member.readers["b"]
    effect = apply_frame(member, names, texts, *digest("agent", frame(agent_msg(fake_view("a", 3))), 5.0))
    assert effect.changed == ["a"] and effect.dirty and not effect.save
    assert len(member.readers["a"].conversations) == 3 and member.readers["b"] is b_before
    names |= {f"x{i}" for i in range(crewwire.MAX_AGENTS - 2)}
    with pytest.raises(FrameError, match="more than 100 agents"):
        apply_frame(member, names, texts, *digest("agent", frame(agent_msg(fake_view("new"))), 5.0))
    assert "new" not in names and "new" not in member.readers


def test_a_receipt_answers_its_waiting_call_and_a_second_hello_is_a_bad_frame():
    """crew.md §2: a `receipt` or `read_result` is the answer the lead's call with that id waits for (it
    changes no view); a `hello` once the link is set up has no place and is a bad frame."""
    member, texts, names = online(views=[fake_view("a")])
    rec = frame({"type": "receipt", "id": "r1", "receipt": {"request_id": "r1", "op": "steer", "outcome": "sent"}})
    effect = apply_frame(member, names, texts, "receipt", rec, [])
    assert effect.answer is rec and not effect.notify and not effect.dirty
    with pytest.raises(FrameError, match="hello after the link was set up"):
        apply_frame(member, names, texts, "hello", hello(), [])


def test_a_view_the_lead_cannot_build_is_a_bad_frame_and_the_frames_other_views_are_taken():
    """crew.md §2: one bad view in a snapshot costs that agent its update only."""
    member, texts, names = online(views=[fake_view("a"), fake_view("b")])
    a_before = member.readers["a"]
    built = [("a", None, "RecursionError: too deep"), *digest("agent", frame(agent_msg(fake_view("b", 4))), 1.0)[2]]
    effect = apply_frame(member, names, texts, "snapshot", {"a", "b"}, built)
    assert [n[0] for n in effect.notes] == ["bad"] and "agent a: RecursionError" in effect.notes[0][1].args[0]
    assert member.readers["a"] is a_before and len(member.readers["b"].conversations) == 4


# --- the views budget (crew.md §6: past the design scale nothing is lost, but nothing grows unbounded) -
def test_a_view_over_the_budget_is_not_kept_and_its_agent_says_why_until_one_fits():
    """A view that would take its member over the budget leaves the agent's last view in place, shown
    Unreachable (`view-too-big`) with a reason a person can act on; the other agents are untouched, the
    count never passes the budget, and a later view that fits is taken as ever."""
    member, texts, names = online(views=[fake_view("a", 3), fake_view("b", 3)])
    budget = views_kept(member.readers, texts) + 10_000
    old_a, old_b = member.readers["a"], member.readers["b"]
    effect = apply_frame(member, names, texts, *digest("agent", frame(agent_msg(fake_view("a", 200))), 0.0), budget)
    assert [n[:2] for n in effect.notes] == [("too_big", "a")] and not effect.dirty
    assert member.readers["a"] is old_a and (old_a.status, old_a.reason) == ("unreachable", TOO_BIG)
    assert old_a.detail.startswith("its view is too big: the lead keeps at most")
    assert member.readers["b"] is old_b and old_b.status == "ready"
    assert views_kept(member.readers, texts) <= budget
    apply_frame(member, names, texts, *digest("agent", frame(agent_msg(fake_view("a", 4))), 0.0), budget)
    assert member.readers["a"].status == "ready" and len(member.readers["a"].conversations) == 4


def test_a_new_agent_over_the_budget_shows_unreachable_with_an_empty_view():
    """An agent with nothing kept yet whose first view passes the budget still shows, Unreachable and why."""
    member, texts, names = online()
    effect = apply_frame(member, names, texts, *digest("agent", frame(agent_msg(fake_view("a", 50))), 0.0), 1000)
    reader = member.readers["a"]
    assert effect.notes[0][:2] == ("too_big", "a") and reader.reason == TOO_BIG and not reader.conversations
    assert texts == {}


def test_views_restored_from_a_file_are_cut_to_the_budget_and_bad_ones_skipped():
    """A views file an older lead wrote (without the budget) is cut to it at start-up; a view that does not
    fit the wire is skipped, not fatal."""
    readers, texts = {}, {}
    one = len(json.dumps(fake_view("r0", 3)))
    install_views(readers, texts, [{"name": "bad"}, *(fake_view(f"r{i}", 3) for i in range(40))], 0.0, 20 * one)
    assert 0 < len(readers) < 40 and "bad" not in readers and views_kept(readers, texts) <= 20 * one
    assert MEMBER_VIEWS_MAX == 8 * 2**20


def test_an_offline_members_agents_show_unreachable_since_its_last_frame():
    """crew.md §4, features D: an offline member's agents show `Unreachable` with reason
    `machine offline since HH:MM`, the time of its last frame (or now, for one never seen)."""
    last = 1_764_640_000.0
    member, _, _ = online(views=[fake_view("a"), fake_view("b")])
    member.last_seen = last
    mark_offline(member, last + 3600)
    assert member.offline_since == last
    assert {(r.status, r.reason, r.detail) for r in member.readers.values()} == {
        ("unreachable", "machine-offline", f"machine offline since {hhmm(last)}")}
    never, _, _ = online(views=[fake_view("a")])
    mark_offline(never, last + 3600)
    assert never.readers["a"].detail == f"machine offline since {hhmm(last + 3600)}"


# --- log lines a peer can repeat at will --------------------------------------------------------------
def test_a_member_reconnecting_in_a_loop_writes_ten_lines_a_minute_and_then_says_how_many_were_held():
    """Lines about one member's links are at most LINK_LINES of a kind a minute (counted from the first);
    the first one after says how many were held; another member's lines are counted apart."""
    lines = LineLimiter()
    got = [lines.allow("connected:laptop", 100.0 + i, LINK_LINES) for i in range(15)]
    assert got == [0] * 10 + [None] * 5
    assert lines.allow("connected:desk", 114.0, LINK_LINES) == 0
    assert lines.allow("connected:laptop", 100.0 + SAY_AGAIN_AFTER - 0.001, LINK_LINES) is None
    assert lines.allow("connected:laptop", 100.0 + SAY_AGAIN_AFTER, LINK_LINES) == 6
    assert lines.allow("connected:laptop", 161.0, LINK_LINES) == 0


def test_a_repeated_refusal_is_logged_once_a_minute():
    lines = LineLimiter()
    assert [lines.allow("unauthorized", t) for t in (0.0, 1.0, 59.0, 60.0, 61.0)] == [0, None, None, 2, None]


# --- routing (crew.md §3) -----------------------------------------------------------------------------
def req(op: str = "steer", rid: str = "r1", text: str = "go") -> WriteRequest:
    return WriteRequest(request_id=rid, op=op, agent="a", conversation="c00", text=text, turn=3)


def test_a_repeat_of_a_refused_id_answers_the_same_refusal_and_another_body_is_a_conflict():
    """crew.md §3, wire-v1 §1: a session-bound write the lead refused itself answers that refusal again
    (`replay: true`) and never runs later; the same id with another body is refused `conflict`; an id
    the lead forwarded before is forwarded again (the member's journal owns its outcome)."""
    first = req()
    busy = Receipt(request_id="r1", op="steer", outcome="refused", reason="busy", text="Busy")
    seen = Seen("r1", "refused", first.fingerprint(), attrs.asdict(busy))
    again = judge_repeat(seen, req())
    assert again.replay and (again.outcome, again.reason) == ("refused", "busy")
    conflict = judge_repeat(seen, req(text="something else"))
    assert (conflict.outcome, conflict.reason, conflict.replay) == ("refused", "conflict", False)
    assert judge_repeat(Seen("r1", "forwarded", first.fingerprint(), None), req()) is None
    assert judge_repeat(None, req()) is None


def test_the_lead_refuses_a_write_to_an_older_or_offline_member_itself():
    """crew.md §3, features O: a write to a read-only (older Collie) member gets the O row's sentence; to an
    offline member, `machine_offline` with since when; an online member's write goes on to the lock."""
    assert refusal_before_forward("laptop", Member("laptop", conn=object()), req()) is None
    older = refusal_before_forward("laptop", Member("laptop", conn=object(), read_only=True), req("answer"))
    assert (older.outcome, older.reason, older.text) == ("refused", "older_collie", OLDER_COLLIE)
    gone = refusal_before_forward("laptop", Member("laptop", last_seen=1_764_640_000.0), req())
    assert gone.reason == "machine_offline" and gone.text.endswith(f"laptop since {hhmm(1_764_640_000.0)}")
    never = refusal_before_forward("laptop", Member("laptop"), req())
    assert never.text.endswith("laptop (never connected)")


def test_only_the_receipt_for_this_id_and_op_is_believed_anything_else_is_unknown():
    """B3, crew.md §2: a receipt for another request is a bad frame and this write's receipt is `unknown`
    (`protocol`); no answer within the limit is `unknown` (`link`), the answer's own words for a card answer."""
    sent = frame({"type": "receipt", "id": "r1", "receipt": {"request_id": "r1", "op": "steer", "outcome": "sent"}})
    assert forwarded_receipt(req(), sent) == (sent.receipt, None)
    other = frame({"type": "receipt", "id": "r1", "receipt": {"request_id": "r9", "op": "steer", "outcome": "sent"}})
    rec, bad = forwarded_receipt(req(), other)
    assert (rec.outcome, rec.reason, rec.text) == ("unknown", "protocol", NOT_CONFIRMED)
    assert "not the request r1/steer" in bad.args[0]
    rec, bad = forwarded_receipt(req("answer"), None)
    assert (rec.outcome, rec.reason, rec.text, bad) == ("unknown", "link", NOT_CERTAIN, None)
    rec, bad = forwarded_receipt(req(), FrameError("bad receipt", "r1"))
    assert (rec.reason, bad) == ("protocol", None)  # counted already, when it arrived


def test_a_read_answer_that_does_not_fit_the_wire_is_no_answer_and_a_bad_frame():
    """crew.md §2, S2: a read's answer is checked (counts first) before the lead uses it."""
    ok = frame({"type": "read_result", "id": "r", "ok": True, "result": {"lines": [{"text": "sent · hi"}]}})
    assert read_answer("recent_sends", ok) == ({"lines": [{"text": "sent · hi"}]}, None)
    bad_shape = frame({"type": "read_result", "id": "r", "ok": True, "result": {"lines": ["sent · hi"]}})
    assert read_answer("recent_sends", bad_shape)[1] is not None
    flood = frame({"type": "read_result", "id": "r", "ok": True, "result": {"items": [{}] * 2_500, "open": True}})
    result, bad = read_answer("items", flood)
    assert result is None and isinstance(bad, FrameError)
    assert read_answer("items", None) == (None, None)
    no = frame({"type": "read_result", "id": "r", "ok": False, "error": "no such agent"})
    assert read_answer("items", no) == (None, None)


def test_a_members_chat_items_never_bring_their_own_html():
    """C1: the phone puts `html` into the page as markup, so only the lead's own rendering is passed on."""
    items = own_html([{"kind": "markdown", "text": "**hi**", "html": "<img src=x onerror=alert(1)>"},
                      {"kind": "text", "text": "plain", "html": "<script>"}])
    assert "onerror" not in json.dumps(items) and "<script>" not in json.dumps(items)
    assert "<strong>hi</strong>" in items[0]["html"] and "html" not in items[1]


def test_a_members_views_file_reads_back_what_was_written_and_is_private(tmp_path):
    """crew.md §2: a member's last views survive a lead restart, in a 0600 file of its own; a missing or
    unreadable file is no views, not a failed start."""
    from collie.lead.members.views_file import read_views, remove_views, views_path, write_views

    views = {"a": json.dumps(fake_view("a")), "b\"x": json.dumps(fake_view("b\"x"))}
    write_views(tmp_path / "crew-views", {"laptop": views})
    path = views_path(tmp_path / "crew-views", "laptop")
    assert read_views(path) == [fake_view("a"), fake_view("b\"x")]
    assert path.stat().st_mode & 0o777 == 0o600 and (tmp_path / "crew-views").stat().st_mode & 0o077 == 0
    path.write_text("{not json")
    assert read_views(path) is None
    remove_views(tmp_path / "crew-views", "laptop")
    assert read_views(path) is None
