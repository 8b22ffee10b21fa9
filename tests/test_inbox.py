"""The inbox's decisions, with explicit wall-clock times (features I2–I7, crew.md §4)."""

from __future__ import annotations

import pytest

from lead.inbox import TTL_DEFAULT, InboxCore, Item

DAY = 24 * 3600.0


def item(iid, state="approved", created=0.0, approved=None, kind="send", conv="c", position=None, seq=0, ref=None):
    return Item(id=iid, machine="laptop", agent="desk", kind=kind, conversation=conv, starter=None, text="t",
                sender=None, state=state, created_at=created,
                approved_at=approved if approved is not None else (created if state != "pending" else None),
                position=position, runtime_ref=ref, seq=seq)


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


def test_state_texts():
    """I7: what the sender sees, word for word."""
    core = InboxCore()
    assert core.state_text(item("x", state="pending"), online=True, offline_since=None, owner="Ana") == \
        "waiting for approval from Ana"
    assert core.state_text(item("x"), online=False, offline_since="22:00", owner="Ana") == \
        "queued, machine offline since 22:00"
    assert core.state_text(item("x"), online=True, offline_since=None, owner="Ana") == "queued"
    for state in ("running", "done", "expired", "cancelled"):
        assert core.state_text(item("x", state=state), online=True, offline_since=None, owner="Ana") == state
