"""The API's door (collie.lead.door.policy, issues 9.2, 9.10, 10.8): every route × every kind of credential, and strict bodies.

Invariants:
- no `/api` route answers without a valid credential (401), whatever the route, known or not;
- the owner's credential opens every route;
- an API token (features I10, `standing` or `required`) opens exactly the inbox routes a sender needs —
  enqueue, list, read, cancel, add a message — and every other route answers it 403, whatever its path
  text (a path ending in `/inbox` is not an inbox route);
- an unknown `/api` route or method answers JSON (`not_found`, `method_not_allowed`), never HTML;
- a body is strict UTF-8 JSON, an object, nested at most 32 deep, without lone surrogates: anything
  else is 400 `bad_request` with a reason, never 500.
The lead runs in-process (no agents): the door decides before any handler, so none is needed.
"""

from __future__ import annotations

import re

import pytest

from collie.bridge.state import prepare_state
from collie.crew.config import BridgeConfig
from collie.lead.daemon import LeadDaemon, parser
from collie.lead.door import policy as door

STANDING = "s" * 40
REQUIRED = "r" * 40
SENDER_ROUTES = {  # features I10 + I7: what an external sender may do, and nothing else
    ("GET", "/api/agents/<machine>/<agent>/inbox"),
    ("POST", "/api/agents/<machine>/<agent>/inbox"),
    ("GET", "/api/inbox/<item_id>"),
    ("POST", "/api/inbox/<item_id>/cancel"),
    ("POST", "/api/inbox/<item_id>/message"),
}
STREAMS = {("GET", "/api/events")}
SAMPLE = {"machine": "local", "agent": "desk", "conv": "c1", "item_id": "i1", "ask_id": "a1", "action_id": "x",
          "starter_id": "s1", "channel": "ch1"}


@pytest.fixture
def lead(paths):
    prepare_state(paths)
    d = LeadDaemon(parser().parse_args([]), paths, BridgeConfig(agents=(), programs_off=False, sources_count=0))
    app = d.make_app()  # every route the lead serves: the API, pairing, the live channel, push, the web app
    d.hub.store.add_token("slack", STANDING, "standing")
    d.hub.store.add_token("relay", REQUIRED, "required")
    yield app, d.credential
    d.inbox.db.close()
    d.hub.store.close()
    d.journal.close()


def api_routes(app) -> list[tuple[str, str]]:
    routes = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/api/"):
            routes += [(m, rule.rule) for m in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return routes


def concrete(rule: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", lambda m: SAMPLE[m.group(1)], rule)


async def call(app, method: str, path: str, headers: dict, body: bytes = b"{}"):
    r = await app.test_client().open(path, method=method, headers={"content-type": "application/json", **headers},
                                     data=body)
    return r.status_code, await r.get_json(force=True, silent=True), r.headers.get("content-type", "")


async def test_every_route_by_every_credential(lead):
    """9.2: the table of every /api route × no credential, a wrong one, Basic, the owner's, and both API tokens."""
    app, owner = lead
    routes = api_routes(app)
    assert len(routes) >= 20 and ("POST", "/api/send") in routes
    assert {r for r in SENDER_ROUTES if r[1] != "/api/inbox/<item_id>"} <= set(routes)
    for method, rule in routes:
        path = concrete(rule)
        for headers in ({}, {"authorization": "Bearer " + "0" * 64}, {"authorization": f"Basic {owner}"},
                        {"authorization": f"Bearer {owner[:-1]}"}):
            status, body, _ = await call(app, method, path, headers)
            assert (status, body["error"]) == (401, "unauthorized"), (method, rule, headers)
        if (method, rule) not in STREAMS:  # the owner's live channel never ends: tests/system/test_pairing.py reads it
            status, body, _ = await call(app, method, path, {"authorization": f"Bearer {owner}"})
            assert status not in (401, 403), (method, rule, status, body)
        for token in (STANDING, REQUIRED):
            status, body, _ = await call(app, method, path, {"authorization": f"Bearer {token}"})
            if (method, rule) in SENDER_ROUTES:
                assert status not in (401, 403), (method, rule, status, body)
            else:
                assert (status, body["error"]) == (403, "forbidden"), (method, rule, status, body)


async def test_the_bearer_scheme_is_read_in_any_case(lead):
    """RFC 9110 §11.1: an auth scheme's name is case-insensitive — `bearer` and `BEARER` carry the
    token as `Bearer` does; the token itself is still compared exactly."""
    app, owner = lead
    for scheme in ("Bearer", "bearer", "BEARER"):
        status, body, _ = await call(app, "GET", "/api/dashboard", {"authorization": f"{scheme} {owner}"})
        assert status == 200, (scheme, body)
    status, _, _ = await call(app, "GET", "/api/dashboard", {"authorization": f"bearer {owner.upper()}"})
    assert status == 401 or owner == owner.upper()


@pytest.mark.parametrize("method, path", [
    ("POST", "/api/agents/local/desk/starters/inbox"),
    ("POST", "/api/agents/local/desk/conversations/c1/actions/inbox"),
    ("GET", "/api/agents/local/desk/conversations/inbox"),
    ("POST", "/api/agents/local/desk/conversations/inbox/stop"),
    ("POST", "/api/inbox/i1/approve"),
    ("POST", "/api/agents/local/desk/inbox/clear"),
])
async def test_a_path_ending_in_inbox_is_not_an_inbox_route(lead, method, path):
    """9.2, the reported bypass: a `required` token reached a starter, an agent button and a pane by their path
    text. The door goes by the matched route: all are 403, before any handler runs."""
    app, _owner = lead
    status, body, _ = await call(app, method, path, {"authorization": f"Bearer {REQUIRED}"})
    assert (status, body["error"]) == (403, "forbidden")


async def test_unknown_routes_answer_json_and_only_to_a_credential(lead):
    """10.8, 11.2: an unknown /api route is a JSON 404 (a wrong method a JSON 405) — to a caller who got in;
    anyone else learns nothing but 401. /healthz says only that the lead lives (11.6)."""
    app, owner = lead
    for method, path, want in (("GET", "/api/nope", 404), ("POST", "/api/agents/local/desk", 404),
                               ("GET", "/api//dashboard", 404), ("GET", "/api/agents/local//conversations", 404),
                               ("GET", "/api/send", 405), ("DELETE", "/api/dashboard", 405)):
        assert (await call(app, method, path, {}))[0] == 401
        status, body, ctype = await call(app, method, path, {"authorization": f"Bearer {owner}"})
        assert status == want and ctype.startswith("application/json")
        assert body["error"] == {404: "not_found", 405: "method_not_allowed"}[want] and body["message"]
    status, body, _ = await call(app, "GET", "/healthz", {})
    assert (status, body) == (200, {"ok": True})


BAD_BODIES = [
    (b"\xff\xfe{}", "not UTF-8"),
    (b'{"text": "caf\xe9"}', "not UTF-8"),
    (b"[" * 1000 + b"]" * 1000, "nested deeper"),
    (b'{"a": ' + b"[" * 40 + b"]" * 40 + b"}", "nested deeper"),
    (b'{"text": "\\ud800"}', "lone surrogate"),
    (b'{"\\udfff": 1}', "lone surrogate"),
    (b'{"index": NaN}', "not JSON"),
    (b"{", "not JSON"),
    (b"[1, 2]", "must be a JSON object"),
    (b'"text"', "must be a JSON object"),
    (b"null", "must be a JSON object"),
]


@pytest.mark.parametrize("raw, reason", BAD_BODIES)
async def test_bad_bodies_are_refused_with_a_reason(lead, raw, reason):
    """9.10: the fuzzer's 500s (non-UTF-8, ~1,000 deep, lone surrogates, wrong types) are each a 400 with a reason,
    on every route, for the owner and for a sender alike."""
    app, owner = lead
    for method, rule in api_routes(app):
        status, body, _ = await call(app, method, concrete(rule), {"authorization": f"Bearer {owner}"}, raw)
        assert status == 400 and body["error"] == "bad_request" and reason in body["message"], (method, rule, body)
    status, body, _ = await call(app, "POST", "/api/inbox/i1/message", {"authorization": f"Bearer {STANDING}"}, raw)
    assert status == 400 and reason in body["message"]


def test_parse_body_accepts_what_routes_take():
    assert door.parse_body(b"") is None and door.parse_body(b"  \n") is None
    assert door.parse_body('{"text": "déjà 😀 \\ud83d\\ude00", "n": [1, {"a": null}]}'.encode()) == {
        "text": "déjà 😀 😀", "n": [1, {"a": None}]}
    assert door.parse_body(b'{"a": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') is not None
    nested = b'{"a": ' + b"[" * (door.MAX_DEPTH - 1) + b"]" * (door.MAX_DEPTH - 1) + b"}"
    assert door.parse_body(nested) is not None


async def test_a_defect_is_a_json_500_and_the_members_link_keeps_its_own_refusal(lead):
    """The catch-all is for defects only: an exception in a route is a JSON 500 with one log line; the members'
    websocket link (not /api) still refuses a bad member token with its own close (crew.md §2: reason
    `unauthorized`, code 1008; tests/system/test_crew_link.py checks the reason over a real socket)."""
    from quart.testing.connections import WebsocketDisconnectError

    app, owner = lead

    @app.get("/api/boom")
    async def boom():
        raise RuntimeError("defect")

    status, body, _ = await call(app, "GET", "/api/boom", {"authorization": f"Bearer {owner}"})
    assert (status, body["error"]) == (500, "internal")
    codes = []
    try:
        async with app.test_client().websocket("/crew/v1", headers={"authorization": "Bearer nope"}) as ws:
            await ws.receive()
    except* WebsocketDisconnectError as refused:
        codes = [e.args[0] for e in refused.exceptions]
    assert codes == [1008]


async def test_api_tokens_are_checked_in_memory_and_a_change_by_the_cli_holds(paths):
    """Issue 16 (I10, 9.2): a sender's request costs no SQLite read on the event loop — the lead keeps
    the tokens' hashes in memory, the database being the record. `collie tokens revoke|create` write
    the database from another process and tell the lead (`tokens_changed`); from then on the revoked
    token is refused 401 and the new one accepted. (The lead also reloads every few seconds.)"""
    from collie.crew.crewstore import CrewStore

    prepare_state(paths)
    d = LeadDaemon(parser().parse_args([]), paths, BridgeConfig(agents=(), programs_off=False, sources_count=0))
    app = d.make_app()
    cli = CrewStore(paths.state_dir / "crew.sqlite")  # what the `collie tokens` verbs use
    try:
        cli.add_token("slack", STANDING, "standing")
        await d.hub.control_handlers()["tokens_changed"]({})
        statements: list[str] = []
        d.hub.store.db.set_trace_callback(statements.append)
        status, _, _ = await call(app, "GET", "/api/inbox/i1", {"authorization": f"Bearer {STANDING}"})
        assert status == 404 and statements == []  # let in (no such item), and nothing read from SQLite
        cli.revoke_token("slack")
        cli.add_token("relay", REQUIRED, "required")
        await d.hub.control_handlers()["tokens_changed"]({})
        assert (await call(app, "GET", "/api/inbox/i1", {"authorization": f"Bearer {STANDING}"}))[0] == 401
        assert (await call(app, "GET", "/api/inbox/i1", {"authorization": f"Bearer {REQUIRED}"}))[0] == 404
    finally:
        cli.close()
        d.inbox.db.close()
        d.hub.store.close()
        d.journal.close()


async def test_a_token_change_the_cli_could_not_announce_holds_and_idle_ticks_read_nothing(paths, autojump_clock):
    """Issue 16 (I10, idle CPU): while nothing changes, the lead's 2 s ticks read nothing from SQLite (no
    thread hop, no query: one stat of the files); when `collie tokens revoke` could not reach the
    control socket, the files' stat shows the change at the next tick and the revoked token is refused."""
    import time

    import trio

    from collie.crew.crewstore import CrewStore
    from collie.lead.members.records import TOKENS_RELOAD_MAX

    prepare_state(paths)
    cli = CrewStore(paths.state_dir / "crew.sqlite")  # what the `collie tokens` verbs use
    cli.add_token("slack", STANDING, "standing")
    d = LeadDaemon(parser().parse_args([]), paths, BridgeConfig(agents=(), programs_off=False, sources_count=0))
    app = d.make_app()
    statements: list[str] = []
    d.hub.store.db.set_trace_callback(statements.append)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(d.hub.run)
            await trio.sleep(TOKENS_RELOAD_MAX - 1)  # 14 ticks
            assert statements == []  # idle: nothing read
            assert (await call(app, "GET", "/api/inbox/i1", {"authorization": f"Bearer {STANDING}"}))[0] == 404
            cli.revoke_token("slack")  # and no `tokens_changed` call
            until = time.monotonic() + 30  # the reload runs in a worker thread: bounded in real time
            while (await call(app, "GET", "/api/inbox/i1", {"authorization": f"Bearer {STANDING}"}))[0] != 401:
                assert time.monotonic() < until, "the revoked token is still let in"
                await trio.sleep(0.5)
            assert any("api_tokens" in s for s in statements)
            nursery.cancel_scope.cancel()
    finally:
        cli.close()
        d.inbox.db.close()
        d.hub.store.close()
        d.journal.close()


async def test_a_members_last_contact_is_written_off_the_event_loop(paths):
    """Issue 16 (crew.md §2): a member connecting and leaving costs the lead's event loop no SQLite write.
    Its last contact is an fsync'd commit, and while a `collie` command holds the crew database it waits
    up to the 5 s busy timeout; a worker thread does it, and what `collie crew list` reads without a
    running lead (last contact, Collie version) is on disk once the link has ended."""
    import json
    import threading

    import trio

    from tests.crewlab import hello_frame

    prepare_state(paths)
    d = LeadDaemon(parser().parse_args([]), paths, BridgeConfig(agents=(), programs_off=False, sources_count=0))
    app = d.make_app()
    token = "m" * 64
    d.hub.store.invite("laptop", token)
    loop_thread = threading.get_ident()
    writes: list[tuple[str, bool]] = []
    d.hub.store.db.set_trace_callback(
        lambda sql: writes.append((sql, threading.get_ident() == loop_thread)) if sql.startswith("UPDATE") else None)
    try:
        with trio.fail_after(10):
            async with app.test_client().websocket("/crew/v1", headers={"authorization": f"Bearer {token}"}) as ws:
                await ws.send(hello_frame("laptop"))
                assert json.loads(await ws.receive())["type"] == "welcome"
            while len(writes) < 2 or d.hub.members["laptop"].conn is not None:  # the link's end, on the lead
                await trio.sleep(0.01)
        assert [on_loop for _, on_loop in writes] == [False, False], writes
        (row,) = [m for m in d.hub.store.members() if m["label"] == "laptop"]
        assert row["version"] == "0.1.0" and row["last_seen"] >= d.hub.members["laptop"].last_seen
    finally:
        d.inbox.db.close()
        d.hub.store.close()
        d.journal.close()
