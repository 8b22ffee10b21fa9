"""The inbox's decisions, with explicit wall-clock times (features I2–I9, B2–B4, crew.md §4; issues 8, 9).

`InboxCore` is pure: these run in microseconds and need no trio."""

from __future__ import annotations

import pytest

from collie.bridge.writes import WriteRequest
from collie.lead.inbox.core import KEEP_FINISHED, TTL_DEFAULT, InboxCore, entry_fingerprint, item_id
from collie.lead.inbox.item import Item
from collie.lead.inbox.texts import Waiting

DAY = 24 * 3600.0


def item(iid, state="approved", created=0.0, approved=None, kind="send", conv="c", position=None, seq=0, ref=None,
         sender=None, receipt=None, request=None, fingerprint=None, updated=0.0):
    return Item(id=iid, machine="laptop", agent="desk", kind=kind, conversation=conv, starter=None, text="t",
                sender=sender, state=state, created_at=created,
                approved_at=approved if approved is not None else (created if state != "pending" else None),
                position=position, runtime_ref=ref, seq=seq, receipt=receipt, request=request,
                fingerprint=fingerprint, updated_at=updated)


def test_runs_in_approval_order_not_arrival_order():
    """I3: requests run in the order they were approved, not sent."""
    core = InboxCore()
    items = [item("early-sent-late-approved", created=1, approved=50, seq=1), item("later", created=10, approved=10, seq=2)]
    assert core.next_to_run(items, set()).id == "later"


def test_pending_is_skipped_but_keeps_its_arrival_slot():
    """I3: an item waiting for approval keeps its place in the listing and is skipped when running."""
    core = InboxCore()
    items = [item("p", state="pending", created=1, seq=1), item("a", created=5, seq=2), item("b", created=6, seq=3)]
    assert core.next_to_run(items, set()).id == "a"
    assert [i.id for i in core.listing(items)] == ["p", "a", "b"]


def test_one_at_a_time_per_agent():
    """I2: nothing is dispatched while an item of the same agent runs."""
    core = InboxCore()
    assert core.next_to_run([item("r", state="running"), item("a", created=5)], set()) is None


def test_an_open_ask_holds_an_item_without_refusing_it():
    core = InboxCore()
    items = [item("to-c", created=1, conv="c", seq=1), item("to-d", created=2, conv="d", seq=2)]
    assert core.next_to_run(items, {"c"}).id == "to-d"
    assert core.next_to_run(items, set()).id == "to-c"


def test_owner_moves_override_the_order():
    """I3: the owner can reorder items before they run."""
    core = InboxCore()
    items = [item("a", created=1, seq=1), item("b", created=2, seq=2), item("c", created=3, seq=3)]
    positions = core.move(items, "c", 0)
    for i in items:
        if i.id in positions:
            i.position = positions[i.id]
    assert [i.id for i in core.listing(items)] == ["c", "a", "b"]
    assert core.next_to_run(items, set()).id == "c"
    positions = core.move(items, "c", 2)
    for i in items:
        if i.id in positions:
            i.position = positions[i.id]
    assert [i.id for i in core.listing(items)] == ["a", "b", "c"]


def test_pending_items_expire_after_the_ttl_approved_never():
    """I6: judged on stored wall-clock time, exactly at 24 h."""
    core = InboxCore()
    assert TTL_DEFAULT == DAY
    items = [item("p", state="pending", created=1000.0), item("a", state="approved", created=1000.0)]
    assert core.expired(items, 1000.0 + DAY - 0.001) == []
    assert [i.id for i in core.expired(items, 1000.0 + DAY)] == ["p"]
    assert core.expired(items, 1000.0 + 30 * DAY) == [items[0]]  # a machine that slept for a month


@pytest.mark.parametrize(("turn", "state", "done"), [(7, "working", False), (7, "idle", True), (7, "waiting", True),
                                                      (8, "working", True), (None, None, True)])
def test_done_when_the_turn_it_started_ends(turn, state, done):
    core = InboxCore()
    running = item("r", state="running", ref={"conversation": "c", "turn": 7})
    assert core.done(running, turn, state) is done


def test_the_owner_is_named_by_a_display_name_never_the_owner():
    """I7, crew.md §4, issue 36: `waiting for approval from <owner>` names the owner from COLLIE_OWNER, else
    the lead's account's full name (its passwd entry), else its login name — never `the owner`."""
    from collie.lead.daemon import owner_name

    assert owner_name({"COLLIE_OWNER": "Ana"}, ("Bo Ek,,,", "bo")) == "Ana"
    assert owner_name({}, ("Bo Ek,Room 1,,", "bo")) == "Bo Ek"
    assert owner_name({"COLLIE_OWNER": "  "}, ("", "bo")) == "bo"
    assert owner_name({"COLLIE_OWNER": "x" * 61}, ("Bo\x1b[2J", "bo")) == "bo"  # too long, not printable
    assert "the owner" not in owner_name({})


def test_state_texts():
    """I7: what the sender sees, word for word, including why an approved item waits."""
    core = InboxCore()
    assert core.state_text(item("x", state="pending"), owner="Ana") == "waiting for approval from Ana"
    assert core.state_text(item("x"), owner="Ana", waiting=Waiting(online=False, offline_since="22:00")) == \
        "queued, machine offline since 22:00"
    assert core.state_text(item("x"), owner="Ana") == "queued"
    assert core.state_text(item("x"), owner="Ana", waiting=Waiting(ask_open=True)) == "queued, waiting: an ask is open"
    assert core.state_text(item("x"), owner="Ana", waiting=Waiting(ahead=3)) == "queued, waiting: 3 ahead"
    assert core.state_text(item("x"), owner="Ana", waiting=Waiting(agent_status="unreachable")) == \
        "queued, waiting: the agent is unreachable"
    for state in ("running", "done", "expired", "cancelled"):
        assert core.state_text(item("x", state=state), owner="Ana") == state
    failed = item("x", state="failed")
    failed.reason = "closed"
    assert core.state_text(failed, owner="Ana") == "failed: closed"


def send(rid="r1", text="hello", turn=5, conv="c"):
    return WriteRequest(request_id=rid, op="send", agent="desk", conversation=conv, text=text, turn=turn)


def test_a_reused_request_id_with_another_body_is_a_conflict():
    """B2, issue 8.1: the same id and body is a repeat; another text, turn or target is `conflict`."""
    core = InboxCore()
    fp = entry_fingerprint("laptop", send())
    first = item("r1", fingerprint=fp)
    assert core.repeat(first, entry_fingerprint("laptop", send())) == "approved"
    assert core.repeat(first, entry_fingerprint("laptop", send(text="other"))) == "conflict"
    assert core.repeat(first, entry_fingerprint("laptop", send(turn=6))) == "conflict"
    assert core.repeat(first, entry_fingerprint("other-machine", send())) == "conflict"
    expired = item("r1", state="expired", fingerprint=fp)
    assert core.repeat(expired, fp) == "expired"  # I7: reported as expired, not as queued


def test_request_ids_are_scoped_per_sender():
    """Issue 9.4: a sender's id never names the owner's item, nor another sender's."""
    assert item_id(None, "abc") == "abc"  # the phone's own id: what the agent sees and the phone retries with
    assert item_id("slack", "abc") not in ("abc", item_id("ci", "abc"))
    assert item_id("slack", "abc") == item_id("slack", "abc")


@pytest.mark.parametrize(("quoted", "current", "passed"), [(0, 5, True), (4, 5, True), (5, 5, False), (6, 5, False),
                                                           (None, 5, False), (3, None, False)])
def test_a_send_quoting_a_passed_turn_is_refused_at_entry(quoted, current, passed):
    """B4, issue 8.2, crew.md §3: judged when it enters against the turn the lead sees; a quoted turn
    ahead of the lead's view is the view lagging, not a passed turn."""
    assert InboxCore.passed_turn(quoted, current) is passed


SENT = {"outcome": "sent", "turn": 8, "request_id": "r"}


def test_settle_after_a_dispatch():
    """crew.md §4, B3: what the inbox does with each receipt of a dispatched item."""
    core = InboxCore()
    waiting = item("r", state="running", request={"turn": 7})
    assert core.settle(waiting, SENT) == {"state": "running", "runtime_ref": {"conversation": "c", "turn": 8},
                                          "receipt": SENT}
    agent_queued = {"outcome": "queued", "turn": 7}
    assert core.settle(waiting, agent_queued)["runtime_ref"] == {"conversation": "c", "turn": 8}
    unknown = core.settle(waiting, {"outcome": "unknown"})
    assert unknown["state"] == "running" and unknown["runtime_ref"] is None and "request" not in unknown  # resumed as recorded
    held = core.settle(waiting, {"outcome": "refused", "reason": "ask_open"})
    assert held["state"] == "approved" and held["request"] is None  # nothing reached the agent: quotes anew later
    assert core.settle(waiting, {"outcome": "refused", "reason": "closed"})["state"] == "failed"
    replayed = core.settle(waiting, {"outcome": "refused", "reason": "turn_moved", "replay": True})
    assert (replayed["state"], replayed["reason"]) == ("failed", "turn_moved")


def test_a_refusal_shown_to_the_sender_is_final():
    """Issue 8.4: a request the phone was told is refused never runs later."""
    core = InboxCore()
    passing = item("r", state="running", request={"turn": 7})
    got = core.settle(passing, {"outcome": "refused", "reason": "turn_moved"}, passed_through=True)
    assert got["state"] == "failed"


def test_a_send_refused_busy_waits_even_when_it_passed_through():
    """Issue 27, crew.md §3, B7: `busy` (another write took the lock first; nothing was sent) never ends an
    item — not even one the phone is answered at once: it waits `approved` and quotes anew later. A resumed
    request (it may have reached the agent before) keeps its recorded request and stays `running`."""
    core = InboxCore()
    passing = item("r", state="running", request={"turn": 7})
    busy = {"outcome": "refused", "reason": "busy"}
    got = core.settle(passing, busy, passed_through=True)
    assert (got["state"], got["request"]) == ("approved", None)
    assert core.settle(passing, busy)["state"] == "approved"
    resumed = core.settle(passing, busy, passed_through=True, resumed=True)
    assert resumed == {"state": "running", "runtime_ref": None}  # the recorded request is kept
    assert core.settle(passing, {**busy, "replay": True}, passed_through=True)["state"] == "failed"


def test_a_held_item_keeps_its_place_and_the_others_run_past_it():
    """Issue 32, I2: a held item does not run; the next one for another conversation does, and a send to
    the held one's conversation waits behind it (its sends keep their order); a starter runs."""
    core = InboxCore()
    items = [item("held", created=1), item("same", created=2), item("other", created=3, conv="d")]
    assert core.next_to_run(items, set(), {"held"}).id == "other"
    assert core.next_to_run(items[:2], set(), {"held"}) is None
    assert core.next_to_run(items, set()).id == "held"
    assert core.next_to_run([*items[:2], item("job", created=4, kind="starter", conv=None)], set(), {"held"}).id == "job"


def test_a_conflict_after_a_held_refusal_keeps_the_true_refusal():
    """The agent's side recorded the earlier refusal: the item fails with it, not with `conflict`."""
    core = InboxCore()
    earlier = {"outcome": "refused", "reason": "turn_moved", "request_id": "r"}
    retried = item("r", state="running", receipt=earlier)
    got = core.settle(retried, {"outcome": "refused", "reason": "conflict"})
    assert got["state"] == "failed" and got["reason"] == "turn_moved" and got["receipt"]["reason"] == "turn_moved"


def test_a_final_unknown_ends_the_item_and_frees_the_queue():
    """B3, wire §1 (docs/phone-api.md): an `unknown` no resend can change — the agent holds the id with
    another body (`conflict`), or a retry was refused — is final: the item stops running with that
    receipt (May already be applied), so it is never resent and the items behind it run (I2)."""
    core = InboxCore()
    waiting = item("r", state="running", request={"turn": 7})
    final = {"outcome": "unknown", "reason": "conflict", "text": "May already be applied. Check the chat."}
    got = core.settle(waiting, final)
    assert got["state"] == "failed" and got["reason"] == "conflict" and got["receipt"] == final
    behind = [item("r", state="failed", seq=1), item("next", seq=2)]
    assert core.next_to_run(behind, set()).id == "next"
    resumable = core.settle(waiting, {"outcome": "unknown", "reason": "timeout", "text": "Sending, not confirmed"})
    assert resumable["state"] == "running"  # only the final kind ends it


def test_finished_items_are_kept_a_day():
    """I7, I9, issue 8.9: done, expired, cancelled and failed items stay readable for 24 h."""
    assert KEEP_FINISHED >= DAY
    items = [item("d", state="done", updated=1000.0), item("q", state="approved", updated=0.0)]
    assert InboxCore.forgotten(items, 1000.0 + DAY - 1) == []
    assert [i.id for i in InboxCore.forgotten(items, 1000.0 + DAY)] == ["d"]
    listing = InboxCore().listing(items + [item("e", state="expired", updated=2000.0)])
    assert [i.id for i in listing] == ["q", "e", "d"]  # waiting first, then finished, newest first


def test_a_change_after_approval_needs_a_new_approval():
    """Issue 9.3: a `required` sender's message to an item the owner approved sends it back to pending;
    the owner's and standing senders' items stay approved; a running item takes no change."""
    core = InboxCore()
    approved_later = item("x", sender="slack", created=10.0, approved=50.0)
    got = core.message(approved_later, "and delete prod")
    assert got["state"] == "pending" and got["approved_at"] is None and got["text"] == "t\n\nand delete prod"
    assert "state" not in core.message(item("y", sender="ci", created=10.0), "more")  # standing: approved on arrival
    assert "state" not in core.message(item("z", created=10.0), "more")  # the owner's own
    assert core.message(item("p", state="pending", sender="slack"), "more")["text"] == "t\n\nmore"
    assert core.message(item("r", state="running"), "late") is None
