"""The agent side of wire v1 as a plain state machine (docs/wire-v1.md §3–§7)."""

from __future__ import annotations

import pytest

from collie.crew.sdk.core import JOURNAL_KEEP, AgentCore, BadRequest, DeliverAnswer, StartTurn, StopTurn
from collie.crew.wire import ask_digest

NOW = "2026-11-30T01:00:00Z"
CAPS = ["asks", "send", "steer", "abort", "starters", "rename", "close", "reopen", "actions", "history", "watch"]


@pytest.fixture
def core():
    c = AgentCore(caps=CAPS, text_max=100, history_limit=5)
    c.add_conversation("c", title="Chat", now=NOW)
    return c


def send(core, rid, text="hi", turn=None, now_s=0.0):
    return core.write("send", "c", {"request_id": rid, "text": text, "turn": core.conv("c").turn if turn is None else turn},
                      NOW, now_s)


def user_items(core):
    return [i for i in core.conv("c").items.values() if i["kind"] == "user"]


def test_a_request_id_is_applied_once_and_replayed(core):
    """§1: a repeat returns the stored outcome with replay: true and does nothing again."""
    out, effects = send(core, "r1")
    assert out == {"outcome": "sent", "turn": 1} and isinstance(effects[0], StartTurn)
    again, effects2 = core.write("send", "c", {"request_id": "r1", "text": "hi", "turn": 0}, NOW, 1.0)
    assert again == {"outcome": "sent", "turn": 1, "replay": True} and effects2 == []
    assert len(user_items(core)) == 1 and core.conv("c").turn == 1


def test_same_request_id_other_body_is_a_conflict(core):
    send(core, "r1")
    with pytest.raises(BadRequest) as err:
        core.write("send", "c", {"request_id": "r1", "text": "other", "turn": 0}, NOW, 1.0)
    assert err.value.code == "conflict" and len(user_items(core)) == 1


def test_outcomes_are_remembered_at_least_24_hours(core):
    send(core, "r1", now_s=0.0)
    out, _ = core.write("send", "c", {"request_id": "r1", "text": "hi", "turn": 0}, NOW, 24 * 3600.0)
    assert out["replay"] is True
    send(core, "r-late", now_s=JOURNAL_KEEP + 10, turn=1)  # pruning happens on a later write
    assert "r1" not in core.journal


def test_the_sent_send_becomes_a_user_item_naming_the_request(core):
    """B3: effective once the user item names the request id."""
    send(core, "r1", "deploy please")
    assert user_items(core)[0]["text"] == "deploy please" and user_items(core)[0]["request_id"] == "r1"


def test_stale_turn_and_too_long_and_ask_open_refuse_and_do_nothing(core):
    """§6, B4: nothing reaches the conversation on a refusal."""
    assert send(core, "r1", turn=7)[0] == {"outcome": "refused", "reason": "turn_moved"}
    assert send(core, "r2", "x" * 101)[0]["reason"] == "too_long"
    core.raise_ask("c", {"kind": "permission", "title": "Go?", "options": [{"id": "y", "role": "allow"}]}, NOW)
    assert send(core, "r3")[0]["reason"] == "ask_open"
    assert user_items(core) == [] and core.conv("c").turn == 0


def test_send_while_running_is_queued_then_runs_after_the_turn(core):
    send(core, "r1")
    out, effects = send(core, "r2", "second")
    assert out == {"outcome": "queued", "turn": 1} and effects == []
    nxt = core.end_turn("c", NOW)
    assert nxt == StartTurn("c", "second", "r2") and core.conv("c").turn == 2
    assert [i["request_id"] for i in user_items(core)] == ["r1", "r2"]


def test_steer_keeps_the_turn_and_abort_discards_queued_text(core):
    send(core, "r1")
    send(core, "r2", "later")
    assert core.write("steer", "c", {"request_id": "s1", "text": "faster", "turn": 1}, NOW, 0)[0] == {"outcome": "sent"}
    assert core.conv("c").turn == 1
    out, effects = core.write("abort", "c", {"request_id": "a1", "turn": 1}, NOW, 0)
    assert out == {"outcome": "stopped"} and effects == [StopTurn("c")]
    assert core.conv("c").queued == [] and not core.conv("c").running
    last = list(core.conv("c").items.values())[-1]
    assert last["kind"] == "turn_end" and last["stopped"] is True
    assert core.write("abort", "c", {"request_id": "a2", "turn": 1}, NOW, 0)[0]["reason"] == "not_running"
    assert core.write("steer", "c", {"request_id": "s2", "text": "x", "turn": 1}, NOW, 0)[0]["reason"] == "not_running"


def test_abort_ends_open_asks_as_stopped(core):
    send(core, "r1")
    ask = core.raise_ask("c", {"kind": "text", "title": "Name?"}, NOW)
    core.write("abort", "c", {"request_id": "a1", "turn": 1}, NOW, 0)
    assert core.ended_asks[ask.id] == "stopped"
    item = next(i for i in core.conv("c").items.values() if i["kind"] == "ask")
    assert item["end"] == "stopped"


def permission(core):
    return core.raise_ask("c", {"kind": "permission", "title": "Deploy?", "tool": "deploy", "options": [
        {"id": "yes", "role": "allow"}, {"id": "always", "role": "always_allow"}, {"id": "no", "role": "deny"}]}, NOW)


def answer(core, ask, rid, **body):
    body.setdefault("digest", ask.digest)
    return core.write("answer", ask.id, {"request_id": rid, **body}, NOW, 0)


def test_answer_outcomes(core):
    """§4: changed and invalid do not use the ask up; accepted does; then answered."""
    ask = permission(core)
    assert answer(core, ask, "q1", digest="0" * 64, option_ids=["yes"])[0] == {"outcome": "changed"}
    out, _ = answer(core, ask, "q2", option_ids=["maybe"])
    assert out["outcome"] == "invalid" and "not offered" in out["message"]
    out, effects = answer(core, ask, "q3", option_ids=["yes"])
    assert out == {"outcome": "accepted"} and effects == [DeliverAnswer(ask.id, {"option_ids": ["yes"]})]
    assert answer(core, ask, "q4", option_ids=["no"])[0] == {"outcome": "answered"}
    assert answer(core, ask, "q3", option_ids=["yes"])[0] == {"outcome": "accepted", "replay": True}
    assert core.write("answer", "nope", {"request_id": "q5", "digest": "x", "option_ids": ["y"]}, NOW, 0)[0] == {
        "outcome": "not_open"}


@pytest.mark.parametrize("end", ["decided", "expired"])
def test_answer_after_the_agent_closed_the_ask(core, end):
    ask = permission(core)
    core.close_ask(ask.id, end, NOW)
    assert answer(core, ask, "q1", option_ids=["yes"])[0] == {"outcome": end}


def test_digest_is_over_the_raw_listed_object(core):
    ask = permission(core)
    listed = core.state_json()["conversations"][0]["asks"][0]
    assert ask.digest == ask_digest(listed)


@pytest.mark.parametrize(("spec", "body", "ok"), [
    ({"kind": "choice", "options": [{"id": "a"}, {"id": "b"}]}, {"option_ids": ["a", "b"]}, False),
    ({"kind": "choice", "multiple": True, "options": [{"id": "a"}, {"id": "b"}]}, {"option_ids": ["a", "b"]}, True),
    ({"kind": "choice", "options": [{"id": "a"}]}, {"option_ids": []}, False),
    ({"kind": "text", "max_length": 5}, {"text": "123456"}, False),
    ({"kind": "text"}, {"text": "x" * 500}, True),
    ({"kind": "text"}, {"text": 5}, False),
    ({"kind": "form", "fields": [{"id": "env", "type": "select", "options": ["s", "p"], "required": True}]},
     {"fields": {}}, False),
    ({"kind": "form", "fields": [{"id": "force", "type": "toggle"}]}, {"fields": {"force": "yes"}}, False),
    ({"kind": "form", "fields": [{"id": "force", "type": "toggle"}]}, {"fields": {"force": True}}, True),
    ({"kind": "form", "fields": [{"id": "env", "type": "select", "options": ["s"]}]}, {"fields": {"env": "x"}}, False),
    ({"kind": "form", "fields": [{"id": "n", "type": "text"}]}, {"fields": {"other": "x"}}, False),
    ({"kind": "mystery"}, {"text": "x"}, False),
])
def test_answers_that_do_not_fit_are_invalid(core, spec, body, ok):
    ask = core.raise_ask("c", {"title": "Q", **spec}, NOW)
    out, _ = answer(core, ask, "q", **body)
    assert (out["outcome"] == "accepted") is ok, out


def test_history_window_drops_only_the_start(core):
    """§5: first_kept only grows; seq stays fixed."""
    for i in range(8):
        core.add_item("c", "reply", NOW, text=str(i))
    page = core.items_json("c", 0)
    assert page["first_kept"] == 4 and [i["seq"] for i in page["items"]] == [4, 5, 6, 7, 8] and page["last"] == 8


def test_items_paging_by_rev(core):
    core.history_limit = 100
    seqs = [core.add_item("c", "reply", NOW, text=str(i)) for i in range(7)]
    core.update_item("c", seqs[0], text="edited")
    page = core.items_json("c", 0, limit=3)
    assert [i["seq"] for i in page["items"]] == [2, 3, 4] and page["more"] is True
    rest = core.items_json("c", page["next_since"], limit=100)
    assert [i["seq"] for i in rest["items"]] == [5, 6, 7, 1] and rest["more"] is False
    assert core.items_json("c", 10**9)["items"][0]["seq"] == 2  # the reader is ahead: re-read from 0


def test_closed_list_pages_newest_first(core):
    for i in range(250):
        core.add_conversation(f"old{i}", now=NOW)
        core.write("close", f"old{i}", {"request_id": f"x{i}"}, f"2026-11-30T01:{i // 60:02d}:{i % 60:02d}Z", 0)
    first = core.closed_json(None)
    assert len(first["conversations"]) == 100 and first["conversations"][0]["id"] == "old249"
    second = core.closed_json(first["next"])
    third = core.closed_json(second["next"])
    assert len(third["conversations"]) == 50 and third["next"] is None
    core.keeps_list = False
    with pytest.raises(BadRequest) as err:
        core.closed_json(None)
    assert err.value.code == "no_list"


def test_send_to_a_closed_conversation_is_refused(core):
    core.write("close", "c", {"request_id": "x"}, NOW, 0)
    assert send(core, "r1", turn=0)[0]["reason"] == "closed"
    assert core.write("reopen", "c", {"request_id": "y"}, NOW, 0)[0] == {"outcome": "done"}
    assert send(core, "r2", turn=0)[0]["outcome"] == "sent"


def test_actions(core):
    core.set_fields("c", actions=[{"id": "go", "label": "Go"}, {"id": "b", "label": "B", "busy": True},
                                  {"id": "d", "label": "D", "disabled": True}])
    act = lambda rid, a, turn=0: core.write("action", "c", {"request_id": rid, "turn": turn}, NOW, 0, a)[0]  # noqa: E731
    assert act("1", "go") == {"outcome": "done"}
    assert act("2", "b")["reason"] == "busy" and act("3", "d")["reason"] == "disabled"
    assert act("4", "zz")["reason"] == "not_found" and act("5", "go", turn=3)["reason"] == "turn_moved"


def test_undeclared_capability_is_unsupported():
    core = AgentCore(caps=["asks"])
    core.add_conversation("c", now=NOW)
    with pytest.raises(BadRequest) as err:
        core.write("send", "c", {"request_id": "r", "text": "x", "turn": 0}, NOW, 0)
    assert err.value.code == "unsupported" and err.value.status == 404


def test_starter_opens_a_conversation_and_starts_its_turn(core):
    core.set_starters([{"id": "triage", "label": "Triage"}])
    out, effects = core.write("starter", "triage", {"request_id": "s"}, NOW, 0)
    assert out["outcome"] == "started" and out["turn"] == 1 and out["conversation"] in core.conversations
    assert effects[0].starter == "triage"


def test_a_multiple_choice_may_be_answered_with_none_picked():
    """Q4, issue 36: `Pick any number` includes zero: the agent takes an empty `option_ids` for a `choice`
    with `multiple`, and still refuses it for a single choice or a permission."""
    from collie.crew.sdk.core import validate_answer

    opts = [{"id": "red", "label": "Red"}, {"id": "blue", "label": "Blue"}]
    assert validate_answer({"kind": "choice", "multiple": True, "options": opts}, {"option_ids": []}) is None
    assert validate_answer({"kind": "choice", "options": opts}, {"option_ids": []}) == "option_ids must name an option"
    assert validate_answer({"kind": "permission", "options": opts}, {"option_ids": []}) == "option_ids must name an option"
    assert validate_answer({"kind": "choice", "multiple": True, "options": opts}, {"option_ids": "red"}) == \
        "option_ids must be a list of option ids"
