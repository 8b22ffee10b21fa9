"""The phone API's request rules and its one error shape, as plain function calls (lead.routes.rules;
issue 30). Through HTTP they are proved by tests/test_door.py and tests/test_api_*.py; here each runs in
microseconds, with no app, no trio and no socket.

Invariants:
- every refusal is `{"error": code, "message": message}` and nothing else (docs/phone-api.md);
- once a credential got in, the door answers in this order: a path that needs a redirect is no route (404),
  an unknown route goes on to Quart's 404/405, a route an API token does not open is 403 (features I10),
  a body over 256 KiB is 413;
- an HTTP failure keeps its own status; on /api it names the method and route, on a page the page.
"""

from __future__ import annotations

import pytest

from lead.routes import rules
from lead.routes.rules import MAX_BODY, BadRequest, error_body, http_failure, route_refusal


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
