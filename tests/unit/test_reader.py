"""The bridge's per-agent reader (features W1–W4, S3, Q4, Q6, Q7, C7, B8), fed answers directly."""

from __future__ import annotations

import pytest

from collie.bridge.reader import LEFT_OUT, AgentReader
from collie.crew.asks import sanitize_actions, sanitize_ask, sanitize_item
from collie.crew.wire import WireRange, ask_digest, doctor_mismatch, utc_time


def hello(instance="i1", wire=(1, 1), caps=("asks", "history")):
    return {"wire": {"min": wire[0], "max": wire[1]}, "runtime": "pi-durable", "instance": instance, "caps": list(caps)}


def state(instance="i1", rev=5, convs=None):
    return {"rev": rev, "instance": instance, "conversations": convs if convs is not None else [
        {"id": "c", "title": "Chat", "state": "idle", "turn": 1, "items_rev": 3}]}


def page(items, first_kept=1, items_rev=None, more=False):
    last = max((i["seq"] for i in items), default=0)
    rev = items_rev if items_rev is not None else max((i["rev"] for i in items), default=0)
    return {"items": items, "first_kept": first_kept, "last": last, "items_rev": rev,
            "next_since": max((i["rev"] for i in items), default=rev), "more": more}


def item(seq, rev=None, kind="reply", **f):
    return {"seq": seq, "rev": rev or seq, "kind": kind, "text": f"t{seq}", **f}


@pytest.fixture
def reader():
    return AgentReader("desk", transport="socket", address="/s", local=True)


def test_starting_then_ready(reader):
    assert reader.status == "starting"
    reader.on_hello(hello(), 0)
    lines, stale = reader.on_state(state(), '"i1.5"', 1)
    assert reader.status == "ready" and stale == ["c"] and "ready" in lines[0]
    assert reader.status_view().runtime == "pi-durable" and reader.status_view().open_count == 1


def test_version_mismatch_logs_each_distinct_range_once(reader):
    """W2: exact log line, once per distinct range; phone sentence; doctor ranges."""
    lines = reader.on_hello(hello(wire=(2, 2)), 0)
    assert lines == ["[durable] The durable agent speaks wire v2, this Collie speaks v1. "
                     "Update Collie, or the agent's SDK."]
    assert reader.status == "version_mismatch"
    assert reader.detail == "Program speaks wire v2, this Collie speaks v1. Update Collie, or the durable agent's SDK."
    assert reader.on_hello(hello(wire=(2, 2)), 10) == []
    assert "2..3" in reader.on_hello(hello(wire=(2, 3)), 20)[0]
    assert reader.needs_hello()
    assert doctor_mismatch(WireRange(2, 3)) == "incompatible: the durable agent speaks 2..3, this Collie speaks 1..1"
    reader.on_hello(hello(wire=(1, 2)), 30)  # the agent upgraded: read it again
    reader.on_state(state(), None, 31)
    assert reader.status == "ready"


def test_garbage_state_keeps_the_last_good_view_and_logs_once(reader):
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)
    good = dict(reader.conversations)
    bad = {"rev": "many", "instance": "i1", "conversations": "nope"}
    lines, _ = reader.on_state(bad, None, 2)
    assert reader.status == "unreachable" and reader.reason == "protocol" and len(lines) == 1
    assert reader.conversations == good
    assert reader.on_state(bad, None, 3)[0] == []  # same problem: no second line
    reader.on_state(state(), None, 4)
    assert reader.status == "ready"


def test_unknown_fields_are_ignored(reader):
    """Forward compatibility: unknown fields anywhere are ignored on the durable wire."""
    reader.on_hello({**hello(), "future": {"x": 1}}, 0)
    s = state()
    s["conversations"][0]["shiny"] = True
    s["extra"] = []
    reader.on_state(s, None, 1)
    assert reader.status == "ready"


def test_gap_when_the_agent_dropped_items_before_we_read_them(reader):
    """S3: first_kept beyond the next seq expected marks a gap with the left-out line."""
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)
    reader.on_items("c", page([item(5), item(6)], first_kept=5))
    shown = reader.items("c")
    assert shown[0] == {"kind": "gap", "seq": 5, "text": LEFT_OUT} and [i["seq"] for i in shown[1:]] == [5, 6]
    assert LEFT_OUT == "Older messages were left out: the durable agent no longer keeps them."
    # later: we hold 5..6, the agent moved on to keep 9.. — items 7..8 were never read
    reader.on_items("c", page([item(9, rev=9)], first_kept=9))
    assert [i.get("seq") for i in reader.items("c") if i["kind"] == "gap"] == [5, 9]


def test_no_gap_when_nothing_was_missed(reader):
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)
    reader.on_items("c", page([item(1), item(2)]))
    reader.on_items("c", page([item(3)], first_kept=3))  # the agent dropped 1..2 after we read them
    assert all(i["kind"] != "gap" for i in reader.items("c"))


def test_growing_item_is_replaced_by_seq(reader):
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)
    reader.on_items("c", page([item(1, rev=1, final=False, text="Hel")]))
    reader.on_items("c", page([item(1, rev=2, final=True, text="Hello")]))
    assert reader.items("c") == [{"seq": 1, "rev": 2, "kind": "reply", "text": "Hello", "final": True}]


def test_agent_restart_means_hello_again_and_reread(reader):
    """W3: a new instance is greeted again; items are re-read from 0."""
    reader.on_hello(hello("i1"), 0)
    reader.on_state(state("i1"), None, 1)
    reader.on_items("c", page([item(1, rev=3)]))
    assert reader.items_since("c") == 3
    lines, stale = reader.on_state(state("i2", rev=1), None, 2)
    assert reader.needs_hello() and stale == [] and "restarted" in lines[0]
    assert reader.items_since("c") == 0


def test_a_restarted_agent_whose_rev_started_over_is_read(reader):
    """W3, wire §3: a restarted agent's `rev` may start over (that is why the ETag holds `instance`).
    Once its hello is read, its state answers are taken even though their `rev` is below the old
    instance's: the view follows the agent, and it is ready, not stuck on the last instance's view."""
    reader.on_hello(hello("i1"), 0)
    reader.on_state(state("i1", rev=52), '"i1.52"', 1)
    reader.on_failure("connection-refused", "nothing listens there")  # the agent went down
    reader.on_hello(hello("i2"), 2)  # it came back (a hello is said first, W3)
    assert reader.etag is None  # the old instance's tag is not sent to the new one
    fresh = state("i2", rev=1, convs=[{"id": "c", "title": "Chat", "state": "working", "turn": 2, "items_rev": 1}])
    prepared = reader.prepare_state(fresh)
    assert not reader.is_older(prepared)
    reader.apply_state(prepared, fresh, '"i2.1"', 3)
    assert reader.status == "ready" and reader.conversations["c"].turn == 2 and reader.etag == '"i2.1"'
    later = state("i2", rev=2, convs=[{"id": "c", "title": "Chat", "state": "idle", "turn": 2, "items_rev": 1}])
    assert not reader.is_older(reader.prepare_state(later))
    assert reader.is_older(reader.prepare_state(state("i2", rev=0)))  # older reads of this instance still lose


def test_an_agent_that_lost_its_state_is_read_again_from_0_and_its_old_items_go(reader, tmp_path):
    """Wire §5: "a `since` greater than `items_rev` (the agent lost state) means: re-read from 0"; an
    agent only drops items from the start, so a transcript that ends before the last seq Collie holds
    was lost too. Chat then shows what the agent has now — never its lost lines mixed with new ones at
    the same seqs — a phone following `next_since` gets `reset`, and the cache forgets them as well."""
    from collie.bridge.cache import Cache

    cache = Cache(tmp_path / "cache.sqlite")
    reader.on_hello(hello("i1"), 0)
    reader.on_state(state("i1", convs=[{"id": "c", "title": "C", "state": "idle", "turn": 5, "items_rev": 5}]), None, 1)
    reader.on_items("c", page([item(s, text=f"old {s}") for s in range(1, 6)]))
    cache._save(None, None, None, reader.take_dirty(), {"c"})
    phone = reader.items_page("c", 0)["next_since"]
    assert phone == 5
    # the agent comes back with nothing of it: a new instance, turn and revisions from the start
    reader.on_hello(hello("i2"), 2)
    reader.on_state(state("i2", rev=1, convs=[{"id": "c", "title": "C", "state": "idle", "turn": 1, "items_rev": 2}]),
                    None, 3)
    assert reader.items_since("c") == 0
    lines, more = reader.on_items("c", page([item(1, text="new 1"), item(2, text="new 2")]))
    assert more and reader.items_since("c") == 0 and any("lost" in line for line in lines)  # re-read from 0
    reader.on_items("c", page([item(1, text="new 1"), item(2, text="new 2")]))
    assert [i["text"] for i in reader.items_page("c", 0)["items"]] == ["new 1", "new 2"]
    answer = reader.items_page("c", phone)
    assert answer["reset"] and [i["text"] for i in answer["items"]] == ["new 1", "new 2"]
    cache._save(None, None, None, reader.take_dirty(), {"c"})
    assert {s: i["text"] for s, i in cache.load()["items"]["c"].items()} == {1: "new 1", 2: "new 2"}
    # same instance, revisions behind what was read (the literal rule of §5): read again from 0
    reader.on_state(state("i2", rev=2, convs=[{"id": "c", "title": "C", "state": "idle", "turn": 1, "items_rev": 1}]),
                    None, 4)
    lines, more = reader.on_items("c", page([], items_rev=1))
    assert more and reader.items_since("c") == 0
    cache.close()


def test_an_agent_back_with_no_items_at_all_is_read_and_shows_none(reader):
    """Wire §5, W3: after a restart every conversation is read from 0 once, even one whose `items_rev`
    is 0 — an agent that lost everything must not leave its old lines in Chat."""
    reader.on_hello(hello("i1"), 0)
    reader.on_state(state("i1", convs=[{"id": "c", "title": "C", "state": "idle", "turn": 3, "items_rev": 3}]), None, 1)
    reader.on_items("c", page([item(s) for s in range(1, 4)]))
    reader.on_hello(hello("i2"), 2)
    _lines, stale = reader.on_state(state("i2", rev=1, convs=[{"id": "c", "title": "C", "state": "idle", "turn": 0,
                                                               "items_rev": 0}]), None, 3)
    assert stale == ["c"]
    empty = {"items": [], "first_kept": 1, "last": 0, "items_rev": 0, "next_since": 0, "more": False}
    assert reader.on_items("c", empty)[1]  # lost: read again from 0
    assert reader.on_items("c", empty) == ([], False)
    assert reader.items_page("c", 0)["items"] == [] and reader.stale_conversations() == []


def test_an_ask_with_integers_past_2_53_has_the_rfc8785_digest_and_is_read(reader):
    """Wire §4 (digest: RFC 8785, whose numbers are IEEE 754 doubles): an ask carrying a nanosecond
    timestamp (past 2^53) is read and its digest is that of the number as a double — what a JS agent's
    RFC 8785 library gives — instead of the bridge failing on it (it stopped the whole lead). A number
    no double holds makes that state answer a protocol misfit: the agent's view stays, nothing crashes."""
    import hashlib

    ask = {"id": "ns", "kind": "permission", "title": "T", "created_ns": 1764460800123456789, "big": -(2**53),
           "options": [{"id": "y", "label": "Y", "role": "allow"}]}
    js = ('{"big":-9007199254740992,"created_ns":1764460800123456800,"id":"ns","kind":"permission",'
          '"options":[{"id":"y","label":"Y","role":"allow"}],"title":"T"}')
    assert ask_digest(ask) == hashlib.sha256(js.encode()).hexdigest()
    reader.on_hello(hello(), 0)
    convs = [{"id": "c", "title": "C", "state": "waiting", "turn": 1, "items_rev": 0, "asks": [ask]}]
    reader.on_state(state(convs=convs), None, 1)
    assert reader.status == "ready" and reader.conversations["c"].asks[0].digest == ask_digest(ask)
    huge = [{**convs[0], "asks": [{**ask, "created_ns": 10**400}]}]
    lines, _ = reader.on_state(state(rev=6, convs=huge), None, 2)
    assert reader.status == "unreachable" and reader.reason == "protocol" and "double" in lines[0]
    assert reader.conversations["c"].asks[0].digest == ask_digest(ask)  # the last good view stays


@pytest.mark.parametrize(("given", "shown"), [
    ("2026-12-01T05:00:00Z", "2026-12-01T05:00:00Z"),
    ("2026-12-01t05:00:00z", "2026-12-01T05:00:00Z"),  # RFC 3339 §5.6: T and Z may be lower case
    ("2026-12-01T05:00:00.123456789Z", "2026-12-01T05:00:00.123456Z"),  # Go's RFC3339Nano
    ("2026-12-01T06:30:00+01:30", "2026-12-01T05:00:00Z"), ("2026-12-01T05:00:00.500+00:00", "2026-12-01T05:00:00.5Z"),
    ("yesterday", None), ("2026-02-30T00:00:00Z", None), ("2026-12-01T05:00:00", None), (17, None),
])
def test_agent_times_reach_the_phone_in_one_utc_form(given, shown):
    """Wire §1: timestamps are RFC 3339; every form RFC 3339 allows reaches the phone as
    `YYYY-MM-DDTHH:MM:SS[.f]Z`, which a browser's Date reads and which sorts as text; anything else is null."""
    assert utc_time(given) == shown


def test_conversations_sort_newest_first_whatever_form_their_times_take(reader):
    """L2: a lower-case RFC 3339 time sorted above every upper-case one (text order: 't' > 'T'); an
    ask's expiry, an item's time and the list's activity all reach the phone in the one form."""
    from collie.bridge.panes import conversation_rows

    reader.on_hello(hello(), 0)
    convs = [{"id": "old", "title": "Old", "state": "idle", "turn": 1, "items_rev": 0,
              "activity": "2026-12-01t05:00:00z"},
             {"id": "new", "title": "New", "state": "idle", "turn": 1, "items_rev": 0,
              "activity": "2026-12-01T06:00:00Z"},
             {"id": "ask", "title": "Ask", "state": "waiting", "turn": 1, "items_rev": 0, "asks": [
                 {"id": "a", "kind": "text", "title": "T", "expires_at": "2026-12-01t07:00:00+01:00"}]}]
    reader.on_state(state(convs=convs), None, 1)
    assert [r["id"] for r in conversation_rows(reader)] == ["ask", "new", "old"]
    assert reader.conversations["old"].activity == "2026-12-01T05:00:00Z"
    assert reader.conversations["ask"].asks[0].expires_at == "2026-12-01T06:00:00Z"
    reader.on_items("new", page([item(1, at="2026-12-01t06:00:00.25z")]))
    assert reader.items_page("new", 0)["items"][0]["at"] == "2026-12-01T06:00:00.25Z"


def test_closed_conversations_leave_the_reader(reader):
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)
    reader.on_items("c", page([item(1)]))
    reader.on_state(state(convs=[]), None, 2)
    assert reader.items("c") == [] and reader.status_view().open_count == 0


def test_failure_reasons_change_the_status_and_log_once(reader):
    assert len(reader.on_failure("connection-refused", "nothing listens")) == 1
    assert reader.on_failure("connection-refused", "nothing listens") == []
    assert reader.status_view().reason == "connection-refused"


PERM = {"id": "a1", "kind": "permission", "title": "Deploy?", "tool": "deploy",
        "options": [{"id": "y", "label": "Ship", "role": "allow"}, {"id": "al", "label": "Always", "role": "always_allow"},
                    {"id": "n", "label": "No", "role": "deny"}]}


def test_permission_ask_with_always_allow():
    view = sanitize_ask(PERM)
    assert view.digest == ask_digest(PERM) and view.answerable and not view.shortened
    assert view.always_allow and view.modal == "unreadable"  # B8: always-allow is answered on its card


def test_single_tap_permission_is_not_modal():
    raw = {**PERM, "options": PERM["options"][::2]}
    assert sanitize_ask(raw).modal is None


def test_no_tool_no_always_allow_and_remote_none():
    """Q5: not offered when the ask names no tool; T6: never for a remote agent."""
    assert not sanitize_ask({k: v for k, v in PERM.items() if k != "tool"}).always_allow
    assert not sanitize_ask(PERM, remote=True).always_allow


@pytest.mark.parametrize(("raw", "cut"), [
    ({**PERM, "options": [{"id": str(i), "label": "o", "role": "deny"} for i in range(9)]}, True),
    ({"id": "a", "kind": "choice", "title": "Q", "options": [{"id": str(i)} for i in range(9)]}, True),
    ({"id": "a", "kind": "choice", "title": "Q", "options": [{"id": str(i)} for i in range(8)]}, False),
    ({"id": "a", "kind": "form", "title": "Q", "fields": [{"id": str(i), "type": "text"} for i in range(7)]}, True),
    ({"id": "a", "kind": "text", "title": "x" * 500}, True),
    ({"id": "a", "kind": "text", "title": "line\x00break"}, True),
    ({"id": "a", "kind": "choice", "title": "Q", "options": [{"id": "a", "label": "L" * 200}]}, True),
])
def test_over_the_limits_is_cut_and_marked(raw, cut):
    """Q4, Q6: Collie trims and marks the card `Text shortened`; a shortened ask never offers Always allow."""
    view = sanitize_ask(raw)
    assert view.shortened is cut
    assert view.digest == ask_digest(raw)  # the digest is of what the agent listed, not what we show
    if cut:
        assert not view.always_allow


def test_unknown_kind_is_read_only():
    view = sanitize_ask({"id": "a", "kind": "slider", "title": "How much?"})
    assert not view.answerable and view.modal == "unreadable" and view.title == "How much?"


def test_text_ask_limits():
    """Q4: a text ask's answer is at most 2,000 characters; an agent that asked for more is cut to that and
    the card says `Text shortened` (so it never offers Always allow); a form's text field the same."""
    plain = sanitize_ask({"id": "a", "kind": "text", "title": "T"})
    assert plain.max_length == 500 and not plain.shortened
    assert not sanitize_ask({"id": "a", "kind": "text", "title": "T", "max_length": 2000}).shortened
    long = sanitize_ask({"id": "a", "kind": "text", "title": "T", "max_length": 9000})
    assert long.max_length == 2000 and long.shortened
    form = sanitize_ask({"id": "a", "kind": "form", "title": "T",
                         "fields": [{"id": "f", "type": "text", "label": "Note", "max_length": 2001}]})
    assert form.fields[0].max_length == 2000 and form.shortened


def test_asks_answered_on_the_card_are_modal_unreadable():
    """Q9, B8: text asks, multi-choice asks, forms and a permission with Always allow are answered on the
    card itself (more than one tap): pane state reports them `modal: unreadable`; a one-tap permission or
    single choice does not."""
    def modal(**ask):
        return sanitize_ask({"id": "a", "title": "T", **ask}).modal

    yes_no = [{"id": "y", "label": "Yes", "role": "allow"}, {"id": "n", "label": "No", "role": "deny"}]
    assert modal(kind="text") == "unreadable"
    assert modal(kind="form", fields=[{"id": "f", "type": "text", "label": "F"}]) == "unreadable"
    assert modal(kind="choice", multiple=True, options=[{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]) \
        == "unreadable"
    assert modal(kind="permission", options=yes_no) != "unreadable"
    always = [*yes_no, {"id": "ya", "label": "Always", "role": "always_allow"}]
    assert modal(kind="permission", options=always, tool="deploy") == "unreadable"
    assert modal(kind="choice", options=[{"id": "a", "label": "A"}, {"id": "b", "label": "B"}]) != "unreadable"


def test_actions_are_cut_to_four_and_sixteen_characters():
    """C7: at most 4 buttons, labels at most 16, unknown icons draw none."""
    views, cut = sanitize_actions([{"id": str(i), "label": "A very long label here", "icon": "rocket"} for i in range(6)])
    assert cut and len(views) == 4 and all(len(v.label) <= 16 for v in views) and views[0].icon is None
    views, cut = sanitize_actions([{"id": "p", "label": "Play", "icon": "play"}])
    assert not cut and views[0].icon == "play"


def test_links_must_be_https():
    assert sanitize_item({"kind": "link", "url": "http://evil", "label": "x"})["url"] is None
    assert sanitize_item({"kind": "link", "url": "javascript:alert(1)"})["cut"] is True
    assert sanitize_item({"kind": "link", "url": "https://ok"})["url"] == "https://ok"


def test_the_conversations_left_to_read_follow_every_state_and_items_page(reader):
    """What a 304 long-poll still reads (W2, issue 16): a conversation whose items moved and were not
    read yet stays listed until read — asked twice, it is listed twice — and a later state that
    moves it again lists it again (the answer is remembered between looks only while nothing changed)."""
    reader.on_hello(hello(), 0)
    reader.on_state(state(), None, 1)  # items_rev 3, nothing read
    assert reader.stale_conversations() == ["c"] and reader.stale_conversations() == ["c"]
    reader.on_items("c", page([item(1), item(2, rev=3)]))
    assert reader.stale_conversations() == [] and reader.stale_conversations() == []
    moved = state(rev=6, convs=[{"id": "c", "title": "Chat", "state": "idle", "turn": 1, "items_rev": 4}])
    reader.on_state(moved, None, 2)
    assert reader.stale_conversations() == ["c"]
    reader.on_items("c", page([item(3, rev=4)]))
    assert reader.stale_conversations() == []
    reader.on_state(state("i2", rev=1), None, 3)  # a restart: everything is read again from 0
    reader.on_hello(hello("i2"), 3)
    reader.on_state(moved, None, 4)
    assert reader.stale_conversations() == ["c"]
