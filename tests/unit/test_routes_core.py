"""The phone API's request rules, each route's body and its one error shape, as plain function calls
(collie.lead.routes.rules, collie.lead.routes.bodies; issue 30). Through HTTP they are proved by tests/live/test_door.py and
tests/test_api_*.py; here each runs in microseconds, with no app, no trio and no socket.

Invariants:
- every refusal is `{"error": code, "message": message}` and nothing else (docs/phone-api.md);
- once a credential got in, the door answers in this order: a path that needs a redirect is no route (404),
  an unknown route goes on to Quart's 404/405, a route an API token does not open is 403 (features I10),
  a body over 256 KiB is 413;
- an HTTP failure keeps its own status; on /api it names the method and route, on a page the page;
- each route's body is refused with a 400 naming the first wrong field, before anything reaches an agent;
- an API token touches only its own inbox items; another's is not even said to exist.
"""

from __future__ import annotations

import pytest

from collie.lead.routes import bodies, rules
from collie.lead.routes.rules import MAX_BODY, BadRequest, error_body, http_failure, route_refusal


def test_the_one_error_shape_is_the_code_and_the_message():
    """phone-api.md: errors that are not receipts are JSON {"error": code, "message": reason}."""
    assert error_body("not_found", "no inbox item 'i1'") == {"error": "not_found", "message": "no inbox item 'i1'"}


def door(**kw):
    given = {"owner": True, "redirected": False, "unrouted": False, "opens_to_senders": False,
             "content_length": None, "method": "POST", "path": "/api/send"}
    return route_refusal(**{**given, **kw})


def test_an_api_token_opens_only_the_routes_open_to_senders():
    """I10: an API token is refused (403) every route not marked open to senders; the owner opens them all."""
    assert door(owner=False) == (403, "forbidden", "an API token opens only the inbox routes (features I10)")
    assert door(owner=False, opens_to_senders=True) is None
    assert door(owner=True) is None


def test_a_path_that_needs_a_redirect_is_no_route_even_to_a_sender():
    """10.8: `//` or a trailing `/` answers a JSON 404 naming the route, before the sender check."""
    assert door(owner=False, redirected=True, unrouted=True, path="/api//send") == (
        404, "not_found", "no route POST '/api//send': see docs/phone-api.md")


def test_an_unknown_route_is_left_to_quart_and_a_sender_learns_nothing_more():
    """11.2: an unmatched route goes on (Quart's 404 or 405, shaped by http_failure) — never a 403 that would
    tell a sender the route exists, nor a 413 for its body."""
    assert door(owner=False, unrouted=True, content_length=MAX_BODY + 1) is None


def test_a_body_over_the_limit_is_413_and_the_limit_itself_passes():
    assert door(content_length=MAX_BODY) is None
    assert door(content_length=MAX_BODY + 1) == (413, "too_large", "the body is over 262144 bytes")
    assert door(owner=False, content_length=MAX_BODY + 1)[0] == 403  # the route check comes first


@pytest.mark.parametrize("code, method, path, want", [
    (404, "GET", "/api/nope", (404, "not_found", "no route GET '/api/nope': see docs/phone-api.md")),
    (405, "DELETE", "/api/dashboard", (405, "method_not_allowed", "'/api/dashboard' does not take DELETE")),
    (413, "POST", "/api/send", (413, "too_large", "the body is over 262144 bytes")),
    (408, "POST", "/api/send", (408, "timeout", "Request Timeout: slow")),
    (404, "GET", "/nope.js", (404, "not_found", "no page '/nope.js'")),
    (413, "POST", "/pair", (413, "too_large", "the body is over 262144 bytes")),
    (405, "PUT", "/pair", (405, "method_not_allowed", "Request Timeout: slow")),
    (418, "GET", "/api/dashboard", (418, "http_error", "Request Timeout: slow")),
    (None, "GET", "/api/dashboard", (500, "http_error", "Request Timeout: slow")),
])
def test_an_http_failure_keeps_its_status_and_says_what_failed(code, method, path, want):
    """10.8, 11.2, issue 25: Quart's own failures answer the one shape — on /api naming the method and route."""
    assert http_failure(code, method, path, "Request Timeout: slow", "Timeout") == want


def test_an_http_failure_without_a_description_gives_its_name():
    assert http_failure(418, "GET", "/api/x", None, "I'm a teapot") == (418, "http_error", "I'm a teapot")


def test_a_path_is_named_at_most_200_characters_long():
    """A hostile path is not echoed in full into the answer."""
    status, _, message = http_failure(404, "GET", "/api/" + "a" * 5000, None, "Not Found")
    assert status == 404 and len(message) < 260


def test_only_api_paths_are_the_apis():
    assert [rules.is_api(p) for p in ("/api", "/api/", "/api/send", "/apix", "/", "/pair")] == [
        True, True, True, False, False, False]


@pytest.mark.parametrize("value", ["", ".", "..", "a/b", "x" * 129, "caf\u00e9", "tab\there", None, 7, ["a"]])
def test_an_id_that_breaks_the_wire_rule_is_refused_before_any_lookup(value):
    """wire §1, issue 9.13: 1-128 printable ASCII characters, no '/', never '.' or '..'."""
    with pytest.raises(BadRequest, match="agent must be 1-128 printable ASCII characters"):
        rules._id(value, "agent")


def test_an_id_within_the_rule_comes_back_unchanged():
    for value in ("a", "x" * 128, "c1 with spaces", "~!@#"):
        assert rules._id(value, "conversation") == value


def test_the_turn_is_required_and_an_integer():
    """B7, C7: steer, stop and buttons act on the turn the phone saw."""
    with pytest.raises(BadRequest, match="turn is required"):
        rules._turn(None)
    for bad in (True, 1.0, "3"):
        with pytest.raises(BadRequest, match="turn must be an integer"):
            rules._turn(bad)
    assert rules._turn(0) == 0


# --- each route's body (collie.lead.routes.bodies) ---------------------------------------------------------------
def refused(fn, *args, **kw) -> str:
    with pytest.raises(BadRequest) as exc:
        fn(*args, **kw)
    return str(exc.value)


@pytest.mark.parametrize("data", [None, [], "text", 3])
def test_a_handler_reads_only_an_object(data):
    """issue 25.9: a route that needs a body refuses none, or one that is not an object, with a 400."""
    assert refused(bodies.json_object, data) == "the body must be a JSON object"


def test_a_body_names_its_agent_and_its_machine_defaults_to_the_leads_own():
    assert bodies.target({"agent": "desk"}) == ("local", "desk")
    assert bodies.target({"agent": "desk", "machine": "laptop"}) == ("laptop", "desk")
    assert "agent must be" in refused(bodies.target, {})
    assert "machine must be" in refused(bodies.target, {"agent": "desk", "machine": "../x"})


SEND = {"request_id": "r1", "conversation": "c1", "text": "hello"}


def test_a_send_carries_text_request_id_conversation_and_an_optional_turn():
    """B2-B4: the send that reaches the inbox is exactly what the phone sent."""
    req = bodies.send_request({**SEND, "turn": 4}, "desk")
    assert (req.op, req.agent, req.request_id, req.conversation, req.text, req.turn) == (
        "send", "desk", "r1", "c1", "hello", 4)
    assert bodies.send_request(SEND, "desk").turn is None


@pytest.mark.parametrize("change, reason", [
    ({"text": None}, "text must be a string"),
    ({"text": 5}, "text must be a string"),
    ({"request_id": ""}, "request_id must be 1-128"),
    ({"request_id": None}, "request_id must be 1-128"),
    ({"conversation": "a/b"}, "conversation must be 1-128"),
    ({"turn": "3"}, "turn must be an integer"),
    ({"turn": True}, "turn must be an integer"),
])
def test_a_send_with_a_wrong_field_is_refused_naming_it(change, reason):
    assert refused(bodies.send_request, {**SEND, **change}, "desk").startswith(reason)


def test_the_text_is_judged_before_the_ids():
    """A body wrong twice names the first field the API always named."""
    assert refused(bodies.send_request, {"request_id": ""}, "desk") == "text must be a string"


ANSWER = {"request_id": "r2", "digest": "sha256:ab", "answer": {"option_ids": ["yes"]}}


def test_an_answer_is_bound_to_the_digest_and_confirmed_only_by_true():
    """Features O, digest binding: the answer names the ask and the digest the phone saw; `confirmed` (the
    second tap of always_allow) counts only when it is exactly true."""
    req = bodies.answer_request(ANSWER, "desk", "a1")
    assert (req.op, req.ask_id, req.digest, req.option_ids, req.confirmed) == (
        "answer", "a1", "sha256:ab", ["yes"], False)
    assert bodies.answer_request({**ANSWER, "confirmed": True}, "desk", "a1").confirmed is True
    for almost in (1, "true", "yes", [True]):
        assert bodies.answer_request({**ANSWER, "confirmed": almost}, "desk", "a1").confirmed is False
    text = bodies.answer_request({**ANSWER, "answer": {"text": "main"}}, "desk", "a1")
    assert (text.answer_text, text.option_ids) == ("main", None)
    assert bodies.answer_request({**ANSWER, "answer": {"fields": {"n": 1}}}, "desk", "a1").fields == {"n": 1}


@pytest.mark.parametrize("change, reason", [
    ({"answer": None}, "answer must be an object"),
    ({"answer": ["yes"]}, "answer must be an object"),
    ({"answer": {"option_ids": "yes"}}, "answer.option_ids must be a list of strings"),
    ({"answer": {"option_ids": [1]}}, "answer.option_ids must be a list of strings"),
    ({"answer": {"text": 1}}, "answer.text must be a string"),
    ({"answer": {"fields": []}}, "answer.fields must be an object"),
    ({"digest": None}, "digest must be the digest of the ask you saw"),
    ({"request_id": "."}, "request_id must be 1-128"),
])
def test_an_answer_with_a_wrong_field_is_refused_naming_it(change, reason):
    assert refused(bodies.answer_request, {**ANSWER, **change}, "desk", "a1").startswith(reason)


@pytest.mark.parametrize("op", ["steer", "abort", "action"])
def test_steer_stop_and_buttons_must_quote_the_turn(op):
    """B7, C7: a tap acts only on the turn the phone saw, so the turn is required."""
    data = {"request_id": "r3", "text": "go"}
    assert refused(bodies.session_request, op, data, "desk", "c1").startswith("turn is required")
    assert bodies.session_request(op, {**data, "turn": 2}, "desk", "c1").turn == 2


def test_each_session_route_carries_only_its_own_fields():
    """B6, C7, L3: steer its text, rename its title, close and reopen only their request id."""
    steer = bodies.session_request("steer", {"request_id": "r", "turn": 1, "text": "faster"}, "desk", "c1")
    assert (steer.op, steer.conversation, steer.text, steer.turn) == ("steer", "c1", "faster", 1)
    no_text = {"request_id": "r", "turn": 1}
    assert refused(bodies.session_request, "steer", no_text, "desk", "c1") == "text must be a string"
    rename = bodies.session_request("rename", {"request_id": "r", "title": "Deploy"}, "desk", "c1")
    assert (rename.title, rename.turn) == ("Deploy", None)
    no_title = {"request_id": "r", "title": 3}
    assert refused(bodies.session_request, "rename", no_title, "desk", "c1") == "title must be a string"
    for op in ("close", "reopen"):
        req = bodies.session_request(op, {"request_id": "r", "text": "ignored", "turn": "ignored"}, "desk", "c1")
        assert (req.op, req.text, req.turn) == (op, None, None)
    button = bodies.session_request("action", {"request_id": "r", "turn": 0}, "desk", "c1", action_id="deploy")
    assert button.action_id == "deploy"


def test_a_new_conversation_needs_only_its_request_id():
    """N1-N3."""
    req = bodies.starter_request({"request_id": "r4"}, "desk", "s1")
    assert (req.op, req.agent, req.starter_id, req.conversation) == ("starter", "desk", "s1", None)
    assert refused(bodies.starter_request, {}, "desk", "s1").startswith("request_id must be 1-128")


@pytest.mark.parametrize("on", [None, "yes", 1, 0, "true", []])
def test_viewing_takes_true_or_false_and_nothing_else(on):
    """W5, issue 25: a wrong type is a 400, never a silent "off"."""
    data = {} if on is None else {"on": on}
    assert refused(bodies.viewing_on, data) == 'on must be true or false: {"on": true}'
    assert bodies.viewing_on({"on": True}) is True and bodies.viewing_on({"on": False}) is False


def test_an_inbox_entry_is_a_send_or_a_starter():
    """I3, I10: text and conversation make a send; a starter id makes a new conversation (its text kept)."""
    send = bodies.inbox_request({"request_id": "r5", "conversation": "c1", "text": "hi"}, "desk")
    assert (send.op, send.conversation, send.text, send.starter_id, send.turn) == ("send", "c1", "hi", None, None)
    start = bodies.inbox_request({"request_id": "r6", "starter": "s1", "conversation": "ignored"}, "desk")
    assert (start.op, start.conversation, start.starter_id) == ("starter", None, "s1")
    assert refused(bodies.inbox_request, {"request_id": "r7"}, "desk") == \
        "give text (and conversation) for a send, or a starter id"
    assert refused(bodies.inbox_request, {"request_id": "r7", "text": "hi"}, "desk").startswith("conversation must be")
    assert refused(bodies.inbox_request, {"request_id": "r7", "starter": "a/b"}, "desk").startswith("starter must be")
    assert refused(bodies.inbox_request, {"request_id": "r7", "text": "hi", "conversation": "c1"}, "..").startswith(
        "agent must be")


def test_a_move_takes_a_whole_index_and_a_message_some_text():
    """I3: the owner reorders by index (0 first); I7: a sender's added message is not only white space."""
    assert bodies.move_index({"index": 0}) == 0
    for bad in ({}, {"index": "1"}, {"index": 1.0}, {"index": True}):
        assert refused(bodies.move_index, bad) == "index must be an integer (0 = first in the queue)"
    assert bodies.message_text({"text": " also this "}) == " also this "
    for bad in ({}, {"text": ""}, {"text": " \n\t"}, {"text": 5}):
        assert refused(bodies.message_text, bad) == "text must be a non-empty string"


# --- who may touch an inbox item (collie.lead.routes.rules.inbox_refusal) -----------------------------------------
class Item:
    def __init__(self, sender):
        self.sender = sender


SLACK = ("slack", "standing")


def test_a_sender_touches_only_its_own_items_and_never_learns_of_anothers():
    """I10: another sender's item, or the owner's, answers 404 — not even said to exist — as a missing one does."""
    gone = (404, "not_found", "no inbox item 'i1'")
    assert rules.inbox_refusal(SLACK, Item("relay"), "i1", owner_only=False) == gone
    assert rules.inbox_refusal(SLACK, Item(None), "i1", owner_only=False) == gone
    assert rules.inbox_refusal(SLACK, None, "i1", owner_only=False) == gone
    assert rules.inbox_refusal(SLACK, Item("slack"), "i1", owner_only=False) is None


def test_approving_and_moving_are_the_owners_alone():
    """I3, I10: a sender may read, cancel or add a message to its item; approve and move are 403 to it."""
    assert rules.inbox_refusal(SLACK, Item("slack"), "i1", owner_only=True) == (
        403, "forbidden", "only the owner (or the item's sender, to cancel or add a message) may do that")
    assert rules.inbox_refusal(SLACK, Item("relay"), "i1", owner_only=True)[0] == 404  # existence first, never a 403
    for item in (Item("slack"), Item(None)):
        assert rules.inbox_refusal(rules.OWNER, item, "i1", owner_only=True) is None
    assert rules.inbox_refusal(rules.OWNER, None, "i1", owner_only=True)[0] == 404
    assert (rules.sender_name(rules.OWNER), rules.sender_name(SLACK)) == (None, "slack")


def test_a_page_of_items_takes_whole_numbers_and_is_clamped_to_the_readers_limit():
    """Issues 8.8, 9.6: `since` and `limit` are digits only; `limit` above the reader's maximum is clamped, not
    refused, and below 1 is a 400; absent, each has its default."""
    assert rules.whole_number(None, "limit", 200, 1, 1000) == 200
    assert rules.whole_number("0", "since", 0, 0) == 0
    assert rules.whole_number("5000", "limit", 200, 1, 1000) == 1000
    assert rules.whole_number("9" * 18, "since", 0, 0) == int("9" * 18)
    assert refused(rules.whole_number, "0", "limit", 200, 1, 1000) == "limit must be at least 1"
    for raw in ("", "-1", "+1", "1.5", " 1", "1e3", "٣", "9" * 19):
        assert refused(rules.whole_number, raw, "since", 0, 0) == "since must be a whole number", raw


def test_unsubscribing_names_the_endpoint():
    """Features P: `DELETE /api/push/subscribe` takes the endpoint it removes; anything else is a 400."""
    assert bodies.push_endpoint({"endpoint": "https://push.example/x"}) == "https://push.example/x"
    for bad in (None, {}, {"endpoint": None}, {"endpoint": ["https://push.example/x"]}, ["x"]):
        assert refused(bodies.push_endpoint, bad) == 'give the subscription\'s endpoint: {"endpoint": "https://…"}'
