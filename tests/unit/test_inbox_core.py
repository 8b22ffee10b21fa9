"""The inbox's rules that were proved only through sockets and SQLite, as plain calls (issue 30; features
I1–I10, B2–B4; crew.md §3, §4; issues 16, 32).

Everything here is pure: exact wall-clock and trio times are passed in as numbers; no trio, no sockets,
no database. Each test runs in microseconds."""

from __future__ import annotations

import attrs

from collie.bridge.writes import WriteRequest
from collie.crew.receipts import NOT_CONFIRMED, Receipt, refused
from collie.lead.inbox import texts
from collie.lead.inbox.core import (FINISHED_IN_MEMORY, HOLD_MAX, IDLE_TICK, ITEM_LINE_EVERY, PAUSE_MAX, RETRY_MAX,
                                    TICK, TTL_DEFAULT, UNKNOWN_TURN, WAITING_MAX, InboxCore, Items, entry_fingerprint,
                                    item_id)
from collie.lead.inbox.item import Item
from collie.lead.inbox.pace import Looks, Pacing

KEY = ("laptop", "desk")


def item(iid, state="approved", *, created=0.0, kind="send", conv="c", sender=None, seq=0, ref=None, request=None,
         receipt=None, updated=0.0, reason=None):
    return Item(id=iid, machine="laptop", agent="desk", kind=kind, conversation=conv, starter=None, text="t",
                sender=sender, state=state, created_at=created, approved_at=created if state != "pending" else None,
                seq=seq, runtime_ref=ref, request=request, receipt=receipt, updated_at=updated, request_id=iid,
                reason=reason)


def send(rid="r1", text="hello", turn=None, conversation="c"):
    return WriteRequest(request_id=rid, op="send", agent="desk", conversation=conversation, text=text, turn=turn)


def not_now(reason, rid="a"):
    return refused(rid, "send", reason)


APPROVED = {"state": "approved", "runtime_ref": None, "request": None}


# --- entry (B2, B4, I1, I3, I10) ----------------------------------------------------------------------
def test_a_send_longer_than_its_agent_takes_is_refused_at_entry_and_kept_nowhere():
    """I10, wire §limits: a send over the agent's `text_max` is refused `too_long` before it is kept,
    with the numbers in its sentence; one at the limit enters; starters carry no text to judge."""
    core = InboxCore()
    no = core.refuse_entry(send(text="x" * 2001), limit=2000, current_turn=None)
    assert (no.outcome, no.reason) == ("refused", "too_long") and "2001 characters; at most 2000" in no.text
    assert core.refuse_entry(send(text="x" * 2000), limit=2000, current_turn=None) is None
    starter = WriteRequest(request_id="s", op="starter", agent="desk", starter_id="fix", text="x" * 9000)
    assert core.refuse_entry(starter, limit=2000, current_turn=None) is None


def test_a_send_quoting_a_passed_turn_is_refused_at_entry_one_ahead_of_the_leads_view_is_not():
    """B4 at entry: quoting turn 3 when the lead sees turn 4 is `turn_moved`; quoting a turn ahead of the
    lead's (lagging) view, or none, or a conversation the lead does not see, enters."""
    core = InboxCore()
    assert core.refuse_entry(send(turn=3), limit=100, current_turn=4).reason == "turn_moved"
    for turn, current in ((4, 4), (5, 4), (None, 4), (3, None)):
        assert core.refuse_entry(send(turn=turn), limit=100, current_turn=current) is None


def test_an_id_taken_is_a_conflict_and_a_sender_with_a_thousand_waiting_is_refused_inbox_full():
    """B2, I10: the owner reusing an id a sender's item has is `conflict` (nothing done); a sender with
    WAITING_MAX items waiting is refused `inbox_full` with what to do; one fewer enters."""
    req = send()
    assert InboxCore.admit(req, taken=True, waiting=0).reason == "conflict"
    full = InboxCore.admit(req, taken=False, waiting=WAITING_MAX)
    assert full.reason == "inbox_full" and full.text == (f"{WAITING_MAX} of your requests already wait in "
                                                         "inboxes: wait until some have run")
    assert InboxCore.admit(req, taken=False, waiting=WAITING_MAX - 1) is None


def test_standing_senders_are_approved_on_arrival_required_ones_wait_for_the_owner():
    """I3: a standing sender's request takes its place at once (approved at arrival); a `required`
    token's waits `pending`, unapproved."""
    fp = entry_fingerprint("laptop", send())
    mine = InboxCore.new_item("r1", "laptop", send(), sender=None, fingerprint=fp, approval="standing", now=50.0)
    assert (mine.state, mine.created_at, mine.approved_at, mine.fingerprint) == ("approved", 50.0, 50.0, fp)
    theirs = InboxCore.new_item(item_id("slack", "r1"), "laptop", send(), sender="slack", fingerprint=fp,
                                approval="required", now=50.0)
    assert (theirs.state, theirs.approved_at, theirs.request_id) == ("pending", None, "r1")
    assert theirs.id != "r1"  # derived: no sender can name another's item


def test_only_the_owners_write_to_an_empty_idle_online_unlocked_inbox_passes_straight_through():
    """I1: the queue is simply empty when the machine is online: the phone's write runs at once (its
    real receipt); anything else waits its turn (crew.md §3 for the lock)."""
    ok = dict(alone=True, busy=False, online=True, locked=False)
    assert InboxCore.passes_through(item("a"), **ok)
    assert not InboxCore.passes_through(item("a", sender="slack"), **ok)
    assert not InboxCore.passes_through(item("a", state="pending"), **ok)
    for change in ({"alone": False}, {"busy": True}, {"online": False}, {"locked": True}):
        assert not InboxCore.passes_through(item("a"), **{**ok, **change})


def test_a_retry_resumes_only_an_interrupted_item_with_its_recorded_request():
    """B3, I5: a repeat of an item that was sent but has no receipt (a crash, `unknown`) resumes the
    very request recorded, when its inbox is idle and online; one whose turn is known does not."""
    recorded = attrs.asdict(send(rid="a"))
    cut = item("a", state="running", request=recorded)
    assert InboxCore.resumes(cut, "running", busy=False, online=True)
    assert not InboxCore.resumes(cut, "running", busy=True, online=True)
    assert not InboxCore.resumes(cut, "running", busy=False, online=False)
    assert not InboxCore.resumes(item("a", state="running", request=recorded, ref={"turn": 2}), "running",
                                 busy=False, online=True)
    assert not InboxCore.resumes(item("a", state="running"), "running", busy=False, online=True)


def test_a_dispatch_resends_the_recorded_request_exactly_else_quotes_the_current_turn():
    """B3, crew.md §3–§4: an item with a recorded request sends that very request again; a new one quotes
    the turn the lead sees and asks the owning bridge to quote its own (`current_turn`); a starter none."""
    recorded = attrs.asdict(send(rid="a", text="as recorded", turn=7))
    assert InboxCore.request_for(item("a", request=recorded), turn=9) == WriteRequest(**recorded)
    fresh = InboxCore.request_for(item("b"), turn=9)
    assert (fresh.request_id, fresh.turn, fresh.current_turn, fresh.text) == ("b", 9, True, "t")
    starter = InboxCore.request_for(item("s", kind="starter", conv=None), turn=9)
    assert (starter.turn, starter.current_turn) == (None, False)


# --- the tick (I2, I5, I6) ------------------------------------------------------------------------------
@attrs.frozen
class Conv:
    turn: int
    state: str = "idle"
    asks: tuple = ()


def plan(items, *, now=0.0, ready=True, conversations=None, inflight=(), due=True, can_run=True, blocked=(),
         held=frozenset()):
    return InboxCore().plan(
        pending=[i for i in items if i.state == "pending"], running=[i for i in items if i.state == "running"],
        active=[i for i in items if i.state in ("pending", "approved", "running")], now=now, ready=ready,
        conversations={} if conversations is None else conversations, inflight=set(inflight),
        retry_due=lambda iid: due, can_run=can_run, blocked=set(blocked), held=lambda: held)


def test_a_tick_expires_pending_items_at_the_ttl_exactly():
    """I6: a request unanswered for 24 h is `expired` instead of running stale; one second earlier it waits."""
    waiting = [item("p", state="pending", created=100.0)]
    assert plan(waiting, now=100.0 + TTL_DEFAULT - 1).expire == ()
    assert [i.id for i in plan(waiting, now=100.0 + TTL_DEFAULT).expire] == ["p"]


def test_a_tick_ends_the_running_item_when_its_turn_ends_and_runs_the_next_in_the_same_tick():
    """I2: one request at a time per agent — the next runs only once the running one's turn has ended
    (then at once, not a tick later); while it runs the agent is read again."""
    running = item("r", state="running", ref={"conversation": "c", "turn": 4})
    nxt = item("n", created=1.0, seq=1)
    still = plan([running, nxt], conversations={"c": Conv(4, "working")})
    assert (still.finish, still.look_again, still.run) == ((), True, None)
    ended = plan([running, nxt], conversations={"c": Conv(5)})
    assert [i.id for i in ended.finish] == ["r"] and ended.run.id == "n"
    assert plan([running, nxt], ready=False, conversations={"c": Conv(5)}).finish == ()


def test_a_tick_resumes_an_interrupted_item_when_its_retry_is_due_and_nothing_while_one_is_in_flight():
    """I5: an item interrupted before its receipt is resumed (by reference) once its backoff ends, before
    anything else; an inbox that cannot run (offline, paused, busy) dispatches nothing."""
    cut = item("cut", state="running")
    other = item("o", created=1.0, seq=1)
    assert plan([cut, other]).run.id == "cut"
    assert plan([cut, other], due=False).run is None
    assert plan([cut, other], inflight={"cut"}).run is None
    assert plan([other], can_run=False).run is None


# --- pacing: nothing spins (issue 32) -------------------------------------------------------------------
def test_a_not_now_waits_1_2_4_up_to_30_s_and_a_new_reason_starts_again():
    """Issue 32, crew.md §3: an item answered "not now" waits 1, 2, 4 … HOLD_MAX s before its next try
    (it was dispatched again thousands of times a second), keeping its place (approved)."""
    pace, a = Pacing(), item("a")
    waits = []
    for clock in range(8):
        fields, line = pace.after(a, send(rid="a", turn=1), not_now("ask_open"), dict(APPROVED), float(clock),
                                  locked=False, signature=("sig",))
        assert fields == APPROVED
        waits.append(pace.held["a"].until - clock)
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, HOLD_MAX, HOLD_MAX, HOLD_MAX]
    assert line == ("%s waits: %s; trying again in %g s", "a", "ask_open", HOLD_MAX)
    pace.after(a, send(rid="a", turn=1), not_now("busy"), dict(APPROVED), 10.0, locked=False, signature=None)
    assert pace.held["a"].until == 11.0


def test_a_send_waiting_on_the_leads_own_lock_is_not_paused_it_goes_when_the_lock_is_let_go():
    """crew.md §3: `busy` because another write holds the lead's lock: no pause (the lock's release pokes it)."""
    pace = Pacing()
    fields, line = pace.after(item("a"), send(rid="a"), not_now("busy"), dict(APPROVED), 0.0, locked=True,
                              signature=None)
    assert fields == APPROVED and "a" not in pace.held
    assert line == ("%s waits: another write holds the conversation", "a")


def test_a_send_no_machine_can_quote_a_turn_for_fails_after_three_turn_moved():
    """Issue 32: `turn_moved` to a send that quoted no turn, UNKNOWN_TURN_TRIES times in a row, ends it
    `failed` with that true refusal and a sentence saying what to do (waiting cannot change it)."""
    pace, a, req = Pacing(), item("a"), send(rid="a", turn=None)
    for clock in (0.0, 1.0):
        assert pace.after(a, req, not_now("turn_moved"), dict(APPROVED), clock, locked=False,
                          signature=None)[0] == APPROVED
    fields, line = pace.after(a, req, not_now("turn_moved"), dict(APPROVED), 3.0, locked=False, signature=None)
    assert (fields["state"], fields["reason"], fields["receipt"]["message"]) == ("failed", "turn_moved", UNKNOWN_TURN)
    assert line is None and "a" not in pace.held
    quoted = send(rid="b", turn=4)  # one that quoted a turn just waits for the next
    for clock in (0.0, 1.0, 3.0, 7.0):
        assert pace.after(item("b"), quoted, not_now("turn_moved"), dict(APPROVED), clock, locked=False,
                          signature=None)[0] == APPROVED


def test_an_agent_that_reached_nothing_pauses_its_inbox_1_2_4_up_to_10_s_and_a_receipt_ends_the_pause():
    """crew.md §4 "not now": the agent down or restarting (`unreachable`), the disk full: the whole inbox
    waits 1, 2, 4 … PAUSE_MAX s; the first dispatch that reaches the agent ends the pause."""
    pace = Pacing()
    pauses = [pace.after(item("a"), send(rid="a"), not_now("unreachable"), dict(APPROVED), 0.0, locked=False,
                         signature=None)[1][-1] for _ in range(6)]
    assert pauses == [1.0, 2.0, 4.0, 8.0, PAUSE_MAX, PAUSE_MAX]
    assert pace.paused_now(KEY, 9.9) and not pace.paused_now(KEY, PAUSE_MAX)
    sent = Receipt(request_id="a", op="send", outcome="sent", turn=3)
    pace.after(item("a"), send(rid="a"), sent, {"state": "running", "runtime_ref": {"turn": 3}}, 1.0,
               locked=False, signature=None)
    assert not pace.paused_now(KEY, 1.0)


def test_an_interrupted_item_is_resumed_after_1_2_4_up_to_60_s():
    """B3, I5: an `unknown` (no receipt) leaves the item running with its recorded request, resumed
    after a backoff that doubles to RETRY_MAX; it is due exactly then."""
    pace = Pacing()
    unknown = Receipt(request_id="a", op="send", outcome="unknown", reason="unreachable")
    backoffs = []
    for _ in range(7):
        pace.after(item("a", state="running"), send(rid="a"), unknown, {"state": "running", "runtime_ref": None},
                   100.0, locked=False, signature=None)
        backoffs.append(pace.retry_at["a"][1])
    assert backoffs == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, RETRY_MAX]
    assert not pace.retry_due("a", 100.0 + RETRY_MAX - 0.5) and pace.retry_due("a", 100.0 + RETRY_MAX)


def test_a_held_item_is_tried_again_early_when_what_it_waits_on_changes_and_its_inbox_is_looked_at_once():
    """Issue 32: the hold ends when the pause is over, or sooner when the conversation's turn, state or
    asks change in the lead's view; the loop wakes at the exact end and looks at that inbox once."""
    pace, a = Pacing(), item("a")
    pace.after(a, send(rid="a"), not_now("ask_open"), dict(APPROVED), 10.0, locked=False, signature=(4, "idle", ("q",)))
    assert pace.held_now([a], 10.5, lambda i: (4, "idle", ("q",))) == {"a"}
    assert pace.held_now([a], 10.5, lambda i: (4, "idle", ())) == set()  # the ask was answered
    assert pace.held_now([a], 11.0, lambda i: (4, "idle", ("q",))) == set()
    assert pace.timers(10.5, {"a": a}, {KEY: {}}) == (11.0, set())
    assert pace.timers(11.0, {"a": a}, {KEY: {}}) == (None, {KEY})
    assert pace.timers(12.0, {"a": a}, {KEY: {}}) == (None, set())


def test_one_item_logs_two_lines_at_once_then_one_a_minute_saying_how_many_were_held():
    """Issue 32: a held item wrote 14,004 lines in 25 s; now ITEM_LINES at once, then one every
    ITEM_LINE_EVERY s, the line after a silence counting those held."""
    pace = Pacing()
    assert [pace.line("a", t) for t in (0.0, 0.0, 1.0, 2.0)] == [0, 0, None, None]
    assert pace.line("a", ITEM_LINE_EVERY - 1) is None
    assert pace.line("a", ITEM_LINE_EVERY) == 3
    assert pace.line("b", 5.0) == 0  # another item's budget is its own
    pace.finished("a")
    assert pace.line("a", ITEM_LINE_EVERY) == 0


def test_the_loop_looks_at_every_inbox_each_second_only_the_poked_ones_between_and_rests_a_minute_idle():
    """Issue 16 (idle CPU): a change of one agent does not walk every agent's inbox; every inbox is
    looked at least every TICK; with nothing to do the loop sleeps IDLE_TICK, cut to a pause's end."""
    looks, active = Looks(), {("l", "a"): {}, ("l", "b"): {}}
    assert sorted(looks.take(0.0, active)) == [("l", "a"), ("l", "b")]
    looks.poke(("l", "b"))
    looks.poke(("l", "gone"))
    assert looks.take(0.5, active) == [("l", "b")]
    assert looks.take(0.6, active) == []
    assert sorted(looks.take(TICK, active)) == [("l", "a"), ("l", "b")]
    looks.poke(None)
    assert len(looks.take(TICK + 0.1, active)) == 2
    assert looks.rest(active=True, store_idle=True) == TICK
    assert looks.rest(active=False, store_idle=False) == TICK
    assert looks.rest(active=False, store_idle=True) == IDLE_TICK and looks.resting
    assert looks.until(IDLE_TICK, 107.5, 100.0) == 7.5 and looks.until(IDLE_TICK, None, 100.0) == IDLE_TICK
    assert looks.woken() and not looks.resting and not looks.woken()


# --- memory (I4, I7, I10) ------------------------------------------------------------------------------
def test_memory_counts_each_senders_waiting_items_and_keeps_the_newest_finished_ones():
    """I10: each sender's waiting items are counted as they change state; finished items beyond
    FINISHED_IN_MEMORY leave memory (then misses are looked up in the record: `complete` is False)."""
    mem = Items(finished_max=2)
    a, b = item("a", sender="slack"), item("b", sender="slack", state="pending")
    for i in (a, b):
        mem.remember(i)
    assert mem.waiting_by_sender == {"token:slack": 2} and mem.active[KEY].keys() == {"a", "b"}
    mem.forget(a)
    a.state = "cancelled"
    mem.remember(a)
    assert mem.waiting_by_sender == {"token:slack": 1} and mem.complete
    for iid in ("x", "y"):
        mem.remember(item(iid, state="done"))
    assert list(mem.finished) == ["x", "y"] and "a" not in mem.by_id and not mem.complete
    assert [i.id for i in mem.of("laptop", "desk")] == ["b", "x", "y"]
    assert Items().finished_max == FINISHED_IN_MEMORY


def test_a_sender_over_its_share_of_finished_items_is_seen_the_owners_are_not_counted():
    """I7, I10: a sender that enqueues and cancels in a loop is over its share; the owner never is."""
    mem = Items()
    for n in range(3):
        mem.remember(item(f"o{n}", state="cancelled"))
        mem.remember(item(f"s{n}", state="cancelled", sender="flood"))
    assert mem.over_share(2) and not mem.over_share(3)


# --- what the sender sees (I7, B2) ----------------------------------------------------------------------
def test_an_approved_item_says_what_it_waits_for_machine_first_then_agent_then_ask_then_ahead():
    """I7: `queued, machine offline since 22:00` first; then the agent's state, an open ask, the items ahead."""
    a = item("a")
    W = texts.Waiting
    assert texts.state_text(a, owner="o", waiting=W(online=False, offline_since="22:00", agent_status="down",
                                                     ask_open=True, ahead=3)) == "queued, machine offline since 22:00"
    assert texts.state_text(a, owner="o", waiting=W(agent_status="not_greeted", ask_open=True)) == \
        "queued, waiting: the agent is not greeted"
    assert texts.state_text(a, owner="o", waiting=W(ask_open=True, ahead=3)) == "queued, waiting: an ask is open"
    assert texts.state_text(a, owner="o", waiting=W(ahead=3)) == "queued, waiting: 3 ahead"
    assert texts.state_text(item("p", state="pending"), owner="Ana") == "waiting for approval from Ana"


def test_how_many_are_ahead_counts_the_running_item_and_the_approved_ones_before_it():
    """I7: the count matches one item at a time and the whole inbox in one pass."""
    queue = [item("r", state="running"), item("a", created=1.0, seq=1), item("b", created=2.0, seq=2),
             item("p", state="pending", created=0.5)]
    assert texts.ahead_counts(queue) == {"a": 1, "b": 2}
    assert [texts.ahead_of(i, queue) for i in queue[1:3]] == [1, 2]


def test_a_view_hides_the_recorded_request_and_shows_the_offline_time_in_utc_while_it_waits():
    """I7: the phone shows the machine's last frame in its own zone: ISO UTC, only on an approved item."""
    @attrs.frozen
    class Member:
        online: bool = False
        offline_since: float | None = 86400.0 + 3600.0
        last_seen: float | None = None

    a = item("a", request={"request_id": "a"})
    v = texts.view(a, text="queued", member=Member())
    assert "request" not in v and "fingerprint" not in v and v["state_text"] == "queued"
    assert v["offline_since_at"] == "1970-01-02T01:00:00Z"
    assert texts.view(item("d", state="done"), text="done", member=Member())["offline_since_at"] is None
    assert texts.view(a, text="queued", member=Member(online=True))["offline_since_at"] is None
    assert texts.offline_since(Member(offline_since=None), str) == "never connected"


def test_a_repeat_answers_what_became_of_the_first_never_a_new_outcome():
    """B2: the stored receipt once it ran; `expired` / `cancelled` with its sentence; else `queued`;
    and a Retry that could not be sure is `unknown` with NOT_CONFIRMED — never a refusal of its own."""
    stored = attrs.asdict(Receipt(request_id="a", op="send", outcome="sent", turn=3, text="sent"))
    ran = texts.replay(item("a", state="done", receipt={**stored, "future_field": 1}), "done", "mine", "send", "done")
    assert (ran.outcome, ran.request_id, ran.replay, ran.turn) == ("sent", "mine", True, 3)
    gone = texts.replay(item("a", state="expired"), "expired", "mine", "send", "expired")
    assert (gone.outcome, gone.reason, gone.text, gone.replay) == ("expired", "inbox", "expired", True)
    waits = texts.replay(item("a"), "approved", "mine", "send", "queued, waiting: 2 ahead")
    assert (waits.outcome, waits.reason, waits.text, waits.request_id) == ("queued", "inbox",
                                                                           "queued, waiting: 2 ahead", "mine")
    unsure = texts.not_confirmed("mine", "send", "disk_full")
    assert (unsure.outcome, unsure.text, unsure.replay) == ("unknown", NOT_CONFIRMED, True)


# --- the owner's and the sender's changes (I3, I7, I9, I10) ------------------------------------------
def test_only_a_pending_item_is_approved_only_a_waiting_one_is_cancelled():
    """I3, I7, I9: approving takes a pending item's place by approval time; a running or finished item
    cannot be cancelled (clearing the inbox cancels only what waits)."""
    assert InboxCore.approval(item("p", state="pending"), 70.0) == {"state": "approved", "approved_at": 70.0}
    assert InboxCore.approval(item("a"), 70.0) is None
    for state in ("pending", "approved"):
        assert InboxCore.cancellation(item("x", state=state)) == {"state": "cancelled"}
    for state in ("running", "done", "expired", "cancelled", "failed"):
        assert InboxCore.cancellation(item("x", state=state)) is None


def test_a_message_that_would_take_a_send_past_its_agents_limit_is_refused_and_changes_nothing():
    """I7, I10: a sender's message grows its waiting send only up to the agent's `text_max`."""
    import pytest

    from collie.lead.inbox.core import TextTooLong

    waiting = item("a")  # text "t"
    assert InboxCore.message(waiting, "x" * 7, limit=10)["text"] == "t\n\n" + "x" * 7  # exactly 10
    with pytest.raises(TextTooLong, match="would be 11 characters; the agent takes at most 10"):
        InboxCore.message(waiting, "x" * 8, limit=10)
    assert waiting.text == "t"


def test_a_write_passing_through_goes_under_its_items_id_and_a_send_without_a_turn_quotes_the_current_one():
    """I1, B4, crew.md §3: the phone's write passes through with the full Send protocol under its item's id;
    one that quoted its turn keeps it, one that did not quotes the lead's current turn."""
    token = item(item_id("ci", "r1"), sender="ci")
    quoted = InboxCore.through_request(token, send(rid="r1", turn=3), turn=9)
    assert (quoted.request_id, quoted.turn, quoted.current_turn) == (token.id, 3, False)
    unquoted = InboxCore.through_request(item("r1"), send(rid="r1"), turn=9)
    assert (unquoted.request_id, unquoted.turn, unquoted.current_turn) == ("r1", 9, True)


def test_a_retry_refused_busy_after_an_earlier_attempt_is_not_confirmed_never_refused():
    """Issue 27, B3: a resumed Retry the lock refused `busy` may have reached the agent before: `unknown`,
    not a refusal; any other answer is this attempt's receipt, as a replay under the sender's id."""
    busy = refused("a", "send", "busy")
    unsure = texts.resumed(item("a", state="running"), busy, "mine", "send")
    assert (unsure.outcome, unsure.reason, unsure.text) == ("unknown", "busy", NOT_CONFIRMED)
    sent = Receipt(request_id="a", op="send", outcome="sent", turn=2)
    assert texts.resumed(item("a", state="running"), sent, "mine", "send") == attrs.evolve(sent, request_id="mine",
                                                                                          replay=True)
