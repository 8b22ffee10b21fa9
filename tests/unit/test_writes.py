"""The Send protocol's decisions, with no I/O (features B2–B8, C3, C4, C7, O, Q5)."""

from __future__ import annotations

import pytest

from collie.bridge.reader import ConversationView
from collie.bridge.writes import AgentFacts, Call, RecentSends, WriteRequest, plan, receipt
from collie.crew.asks import sanitize_actions, sanitize_ask
from collie.crew.receipts import (ALREADY_ANSWERED, ASK_CHANGED, DECIDED, MAY_BE_APPLIED, MOVED_ON, NOT_ACCEPTED,
                                  TIMED_OUT, Receipt)

CAPS = ("asks", "send", "steer", "abort", "starters", "rename", "close", "reopen", "actions", "history")
PERM = {"id": "a1", "kind": "permission", "title": "Deploy?", "tool": "deploy",
        "options": [{"id": "yes", "label": "Ship", "role": "allow"}, {"id": "always", "label": "Always", "role": "always_allow"},
                    {"id": "no", "label": "No", "role": "deny"}]}
TEXT = {"id": "t1", "kind": "text", "title": "Branch?", "max_length": 10}
FORM = {"id": "f1", "kind": "form", "title": "Release", "fields": [
    {"id": "env", "label": "Environment", "type": "select", "options": ["staging", "production"], "required": True},
    {"id": "force", "label": "Force", "type": "toggle"}]}


def conv(cid="c", turn=3, asks=(), state="idle", actions=None):
    acts, _ = sanitize_actions(actions or [{"id": "ship", "label": "Ship"}, {"id": "b", "label": "B", "busy": True},
                                           {"id": "d", "label": "D", "disabled": True}])
    return ConversationView(id=cid, title="T", subtitle=None, workspace=None, tab=None, harness=None, state=state,
                            turn=turn, activity=None, progress=None, asks=[sanitize_ask(a) for a in asks],
                            actions=acts, actions_cut=False, items_rev=1)


def facts(*convs, caps=CAPS, remote=False, answered=frozenset()):
    return AgentFacts(caps=caps, text_max=2000, conversations={c.id: c for c in convs or (conv(),)},
                      starters=({"id": "triage", "label": "Triage"},), answered_asks=answered)


def send(text="hello", turn=3, cid="c"):
    return WriteRequest(request_id="r1", op="send", agent="desk", conversation=cid, text=text, turn=turn)


def answer(ask, **kw):
    return WriteRequest(request_id="q1", op="answer", agent="desk", ask_id=ask["id"],
                        digest=kw.pop("digest", sanitize_ask(ask).digest), **kw)


def test_a_good_send_becomes_exactly_one_wire_call():
    got = plan(send(), facts())
    assert got == Call("/v1/conversations/c/send", {"request_id": "r1", "text": "hello", "turn": 3})


@pytest.mark.parametrize(("req", "reason"), [
    (send(turn=2), "turn_moved"),                      # a turn started after the phone looked (B4)
    (send(text=""), "empty"),
    (send(text="   "), "empty"),
    (send(text="x" * 100_000), "too_long"),
    (send(cid="gone"), "closed"),                      # a send to a closed conversation
])
def test_sends_refused_before_anything_reaches_the_agent(req, reason):
    got = plan(req, facts())
    assert isinstance(got, Receipt) and got.outcome == "refused" and got.reason == reason and got.text


def test_send_refused_while_any_ask_is_open_even_an_unreadable_one():
    """B4: answer it first, or use Steer or Stop."""
    unknown_kind = {"id": "z", "kind": "slider", "title": "How much?"}
    got = plan(send(), facts(conv(asks=[unknown_kind])))
    assert got.reason == "ask_open" and got.text == "An ask is waiting: answer it first"


def test_undeclared_capability_is_refused():
    got = plan(send(), facts(caps=("asks",)))
    assert got.reason == "unsupported"


@pytest.mark.parametrize("req", [
    send(),
    answer(PERM, option_ids=["yes"]),
    WriteRequest(request_id="r2", op="abort", agent="desk", conversation="c", turn=3),
    WriteRequest(request_id="r3", op="starter", agent="desk", starter_id="triage"),
])
def test_a_write_before_the_hello_is_read_is_not_ready_never_unsupported(req):
    """W3, W4, issue 8: right after an agent (re)starts, before its hello is read again, its capabilities
    are not known. That is not "does not offer": the write is refused `unreachable` (not ready; nothing
    reached the agent, try again in a moment), which the inbox holds rather than fails."""
    got = plan(req, facts(conv(asks=[PERM]) if req.op == "answer" else conv(), caps=None))
    assert isinstance(got, Receipt) and (got.outcome, got.reason) == ("refused", "unreachable")
    assert "starting" in got.text and "does not offer" not in got.text


def test_answer_with_the_digest_seen_goes_through():
    got = plan(answer(PERM, option_ids=["yes"]), facts(conv(asks=[PERM])))
    assert isinstance(got, Call) and got.path == "/v1/asks/a1/answer"
    assert got.body == {"request_id": "q1", "digest": sanitize_ask(PERM).digest, "option_ids": ["yes"]}


def test_a_changed_ask_reaches_nothing_and_comes_back():
    """B5: on mismatch nothing reaches the agent and the reply carries the ask as it is now."""
    got = plan(answer(PERM, option_ids=["yes"], digest="0" * 64), facts(conv(asks=[PERM])))
    assert got.outcome == "changed" and got.text == ASK_CHANGED and got.current_ask["id"] == "a1"
    assert got.current_ask["digest"] == sanitize_ask(PERM).digest


def test_always_allow_needs_the_second_tap():
    """B8, Q5: /api/ask may not skip the confirmation."""
    first = plan(answer(PERM, option_ids=["always"]), facts(conv(asks=[PERM])))
    assert first.outcome == "refused" and first.reason == "confirm" and "deploy" in first.text
    second = plan(answer(PERM, option_ids=["always"], confirmed=True), facts(conv(asks=[PERM])))
    assert isinstance(second, Call)


def test_always_allow_not_offered_without_a_tool_or_when_shortened():
    no_tool = {k: v for k, v in PERM.items() if k != "tool"}
    assert plan(answer(no_tool, option_ids=["always"], confirmed=True), facts(conv(asks=[no_tool]))).reason == "not_offered"
    long = {**PERM, "title": "x" * 1000}
    assert plan(answer(long, option_ids=["always"], confirmed=True), facts(conv(asks=[long]))).reason == "not_offered"


@pytest.mark.parametrize(("ask", "kw", "reason"), [
    (PERM, {"option_ids": ["maybe"]}, "not_offered"),
    (PERM, {"option_ids": []}, "invalid"),
    (PERM, {"option_ids": ["yes", "no"]}, "invalid"),
    (TEXT, {"answer_text": "x" * 11}, "too_long"),
    (TEXT, {}, "invalid"),
    (FORM, {"fields": {"force": True}}, "invalid"),                       # missing required field
    (FORM, {"fields": {"env": "staging", "force": "yes"}}, "invalid"),    # a form value for a toggle
    (FORM, {"fields": {"env": "moon"}}, "not_offered"),
    (FORM, {"fields": {"env": "staging", "extra": 1}}, "invalid"),
    ({"id": "s", "kind": "slider", "title": "?"}, {"answer_text": "5"}, "read_only"),
])
def test_answers_that_do_not_fit_are_refused_with_a_reason(ask, kw, reason):
    got = plan(answer(ask, **kw), facts(conv(asks=[ask])))
    assert isinstance(got, Receipt) and got.reason == reason and got.text and got.channel == "program"


def test_a_fitting_form_answer():
    got = plan(answer(FORM, fields={"env": "staging", "force": False}), facts(conv(asks=[FORM])))
    assert isinstance(got, Call) and got.body["fields"] == {"env": "staging", "force": False}


def test_unknown_ask_ids_are_forwarded_for_the_agents_reason():
    """Not listed: the agent applies nothing to a closed ask, and its answer names the O-table row."""
    got = plan(WriteRequest(request_id="q", op="answer", agent="d", ask_id="ghost", digest="x", option_ids=["y"]),
               facts())
    assert isinstance(got, Call) and got.path == "/v1/asks/ghost/answer"


def test_an_ask_answered_through_this_bridge_is_single_use():
    got = plan(answer(PERM, option_ids=["no"]), facts(conv(asks=[PERM]), answered=frozenset({"a1"})))
    assert got.outcome == "answered" and got.text == ALREADY_ANSWERED


@pytest.mark.parametrize(("outcome", "retry", "text"), [
    ("accepted", False, None), ("decided", False, DECIDED), ("expired", False, TIMED_OUT),
    ("answered", False, ALREADY_ANSWERED), ("not_open", False, NOT_ACCEPTED), ("changed", False, ASK_CHANGED),
    ("answered", True, MAY_BE_APPLIED), ("not_open", True, MAY_BE_APPLIED), ("changed", True, MAY_BE_APPLIED),
    ("decided", True, DECIDED), ("expired", True, TIMED_OUT),
])
def test_every_answer_outcome_has_its_card_text(outcome, retry, text):
    """O: each outcome maps to its exact sentence; a retry that finds the ask closed says 'May already be applied'."""
    rec = receipt(answer(PERM, option_ids=["yes"]), {"outcome": outcome}, retry=retry)
    assert rec.text == text and rec.channel == "program" and rec.digest == sanitize_ask(PERM).digest


def test_action_targets_the_newest_turn_seen():
    """C7: if the conversation moved on, nothing runs and the phone says so."""
    req = WriteRequest(request_id="x", op="action", agent="d", conversation="c", action_id="ship", turn=2)
    got = plan(req, facts())
    assert got.outcome == "refused" and got.text == MOVED_ON
    assert receipt(req, {"outcome": "refused", "reason": "turn_moved"}).text == MOVED_ON
    assert plan(WriteRequest(request_id="x", op="action", agent="d", conversation="c", action_id="b", turn=3),
                facts()).reason == "busy"
    assert plan(WriteRequest(request_id="x", op="action", agent="d", conversation="c", action_id="d", turn=3),
                facts()).reason == "disabled"
    assert isinstance(plan(WriteRequest(request_id="x", op="action", agent="d", conversation="c", action_id="ship",
                                        turn=3), facts()), Call)


def test_send_receipts():
    req = send()
    assert receipt(req, {"outcome": "sent", "turn": 4}) == Receipt(request_id="r1", op="send", outcome="sent", turn=4)
    assert receipt(req, {"outcome": "queued", "turn": 3}).outcome == "queued"
    got = receipt(req, {"outcome": "refused", "reason": "ask_open"})
    assert got.reason == "ask_open" and got.text == "An ask is waiting: answer it first"
    assert receipt(req, {"outcome": "sent", "turn": 4, "replay": True}).replay


@pytest.mark.parametrize(("op", "answer"), [
    ("send", {"outcome": "maybe"}), ("send", {"outcome": "sent"}), ("send", {"outcome": "sent", "turn": "x"}),
    ("send", {"outcome": "queued", "turn": True}), ("send", {}), ("send", {"outcome": "done"}),
    ("steer", {"outcome": "stopped"}), ("abort", {"outcome": "sent"}), ("action", {"outcome": "started"}),
    ("rename", {"outcome": "refused", "reason": "turn_moved"}), ("close", {"outcome": "sent"}),
    ("starter", {"outcome": "started", "turn": 1}), ("starter", {"outcome": "started", "conversation": "s/1", "turn": 1}),
    ("starter", {"outcome": "refused", "reason": "nope"}), ("answer", {"outcome": "sent"}), ("answer", {}),
])
def test_an_answer_outside_the_wire_table_is_a_final_unknown(op, answer):
    """Wire §4/§6 (strict at the boundary): the agent answered, but with an outcome its route does not
    have, or without the fields it must carry (`turn`, `conversation`). What it did is not known, and a
    resend would get the same answer back: the receipt is the final `unknown` (`protocol`, May already
    be applied) — never the misfit passed on as if it were a receipt, nor a refusal the route cannot give."""
    req = WriteRequest(request_id="r1", op=op, agent="d", conversation="c", text="t", turn=3, title="x",
                       starter_id="s", action_id="a", ask_id="k", digest="d" * 64, option_ids=["y"])
    got = receipt(req, answer)
    assert (got.outcome, got.reason, got.text) == ("unknown", "protocol", MAY_BE_APPLIED)


def test_starters_and_session_routes():
    assert plan(WriteRequest(request_id="s", op="starter", agent="d", starter_id="triage"), facts()) == Call(
        "/v1/starters/triage", {"request_id": "s"})
    assert plan(WriteRequest(request_id="s", op="starter", agent="d", starter_id="nope"), facts()).reason == "not_found"
    assert plan(WriteRequest(request_id="s", op="rename", agent="d", conversation="c", title=" "), facts()).reason == "empty"
    assert plan(WriteRequest(request_id="s", op="reopen", agent="d", conversation="c"), facts()).reason == "not_found"
    assert plan(WriteRequest(request_id="s", op="abort", agent="d", conversation="c", turn=3), facts()).body == {
        "request_id": "s", "turn": 3}


def test_ids_are_percent_encoded_in_paths():
    got = plan(WriteRequest(request_id="r", op="close", agent="d", conversation="a b?"), facts(conv("a b?")))
    assert got.path == "/v1/conversations/a%20b%3F/close"


# --- C3, C4 ---------------------------------------------------------------------------------
def test_a_line_goes_when_the_agent_echoes_its_request_id():
    lines = RecentSends()
    lines.add("r1", "hello", "sent", now=0.0)
    assert lines.visible(1.0) == [{"request_id": "r1", "text": "hello", "state": "clock"}]
    lines.observe([{"kind": "user", "seq": 4, "text": "hello", "request_id": "r1"}], {4: 2.0})
    assert lines.visible(2.0) == []


def test_text_match_within_30_seconds_for_agents_that_do_not_echo_ids():
    lines = RecentSends()
    lines.add("r1", "hello", "sent", now=100.0)
    lines.observe([{"kind": "user", "seq": 1, "text": "hello"}], {1: 131.0})  # too late: 31 s
    assert len(lines.visible(131.0)) == 1
    lines.observe([{"kind": "user", "seq": 2, "text": "hello"}], {2: 130.0})  # exactly 30 s: matches
    assert lines.visible(131.0) == []


def test_a_queued_send_is_matched_by_text_when_its_copy_is_read_before_its_turn_end_is_noticed():
    """C4: a queued send's copy is matched from the moment it went out until 30 s after its turn's
    end — also when the copy is read before the pane noticed that end (`turn_ended` comes with a view)."""
    lines = RecentSends()
    lines.add("r1", "later", "queued", now=100.0)
    lines.observe([{"kind": "user", "seq": 5, "text": "later"}], {5: 250.0})  # the turn ended, copy read at 250
    assert lines.visible(251.0) == []
    early = RecentSends()
    early.add("r2", "same", "sent", now=100.0)
    early.observe([{"kind": "user", "seq": 1, "text": "same"}], {1: 99.0})  # a line from before this send
    assert len(early.visible(101.0)) == 1


def test_an_unechoed_line_stops_showing_after_10_minutes():
    lines = RecentSends()
    lines.add("r1", "hello", "sent", now=0.0)
    assert len(lines.visible(599.9)) == 1
    assert lines.visible(600.0) == []


def test_a_queued_lines_clock_starts_when_its_turn_ends():
    """wire-v1 §6: the ten-minute clock of a queued send starts when the running turn ends."""
    lines = RecentSends()
    lines.add("r1", "later", "queued", now=0.0)
    assert lines.visible(5000.0)[0]["state"] == "queued"
    lines.turn_ended(5000.0)
    assert len(lines.visible(5599.0)) == 1 and lines.visible(5600.0) == []


def test_unknown_and_refused_lines():
    lines = RecentSends()
    lines.add("r1", "a", "unknown", now=0.0)
    lines.add("r2", "b", "refused", now=0.0)
    assert [line["state"] for line in lines.visible(1.0)] == ["not_confirmed", "not_sent"]
