"""The inbox's state machine as one table (collie.lead.inbox.item.TRANSITIONS; crew.md §4, I1–I11; issue 41):
every change of an item's state the inbox makes is in it, and any other raises before anything changes."""

from __future__ import annotations

import itertools

import pytest

from collie.lead.inbox.item import ACTIVE, FINISHED, TRANSITIONS, IllegalTransition, Item, transition
from collie.lead.inbox.store import Record

STATES = (*ACTIVE, *FINISHED)
LEGAL = {("pending", "approved"), ("pending", "expired"), ("pending", "cancelled"),
         ("approved", "running"), ("approved", "cancelled"), ("approved", "pending"),
         ("running", "running"), ("running", "approved"), ("running", "failed"), ("running", "done")}


def test_the_table_has_exactly_the_diagrams_changes_and_a_finished_item_never_changes():
    """Every state has a row; the legal pairs are the diagram's; from a finished state there is none."""
    assert set(TRANSITIONS) == set(STATES)
    assert {(old, new) for old, row in TRANSITIONS.items() for new in row} == LEGAL
    assert all(TRANSITIONS[s] == {} for s in FINISHED)
    assert all(why for row in TRANSITIONS.values() for why in row.values())  # each change says what causes it


@pytest.mark.parametrize("old, new", sorted(itertools.product(STATES, STATES)))
def test_every_pair_outside_the_table_raises_and_every_pair_in_it_passes(old, new):
    if (old, new) in LEGAL:
        assert transition(old, new) == new
    else:
        with pytest.raises(IllegalTransition, match=f"from '{old}' to '{new}'"):
            transition(old, new)


class Recorder:
    """What the record's `set` writes to: memory indexes and the store, counted."""

    def __init__(self) -> None:
        self.calls = 0

    def forget(self, item) -> None:
        self.calls += 1

    remember = put = forget


def test_the_record_refuses_an_illegal_change_before_it_changes_anything():
    """A finished item set to `running` (or a pending one dispatched unapproved) raises, and the item,
    the memory indexes and the store are untouched; a legal change goes through."""
    seen = Recorder()
    record = Record(seen, lambda: 7.0, lambda item: None)
    record.mem = seen
    item = Item(id="i1", machine="local", agent="a0", kind="send", conversation="c", starter=None, text="hi",
                sender=None, state="done", created_at=1.0)
    with pytest.raises(IllegalTransition):
        record.set(item, state="running", request={"x": 1})
    item.state = "pending"
    with pytest.raises(IllegalTransition):
        record.set(item, state="running")
    assert (item.state, item.request, seen.calls) == ("pending", None, 0)
    record.set(item, state="approved", approved_at=5.0)
    assert (item.state, item.approved_at, item.updated_at) == ("approved", 5.0, 7.0) and seen.calls == 3
