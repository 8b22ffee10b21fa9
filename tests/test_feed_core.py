"""The live channel's rules as plain calls (issue 30): no trio, no sockets, times passed in as numbers.

Invariants: a phone that reconnects with `Last-Event-ID` gets exactly the events it would have got
live, or a fresh snapshot when they cannot all be given (phone-api.md `GET /api/events`); a
conversation's events reach only its viewers; an agent is on fast polling while a channel views it or a
lease lasts, and never after (W5); one phone cannot take every channel (issue 11).
"""

from __future__ import annotations

import pytest

from lead.feed_core import (
    LEASE, MAX_CHANNELS, PER_DEVICE, EventLog, Leases, admit, agent_key, conv_key, for_viewer, replay,
    view_change,
)

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
