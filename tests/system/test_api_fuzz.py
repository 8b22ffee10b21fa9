"""Property-based fuzz of every /api route of a real `collie serve` (issue 9.10).

Invariant: whatever the route, credential, path segments, query and body — bytes that are not UTF-8,
JSON nested up to 1,200 deep, lone surrogates, every JSON type in every field the routes read — the
lead answers a JSON object, and a refusal carries `error` and `message`. Never a 500, never HTML.
The routes come from the running app's own list (collie.lead.routes.api), so a new route is fuzzed too.
Bodies also hold numbers, nesting and sizes at the limits (issue 25.9: a 5,000-digit integer was a 500).
Examples are derandomized: CI runs the same ~300 requests every time (about 10 s).
"""

from __future__ import annotations

import json
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import collie_env, run_collie
from tests.crewlab import wait_for
from tests.livelab import cleanup, short_dir
from tests.system.test_durable_e2e import Agents, live

pytestmark = pytest.mark.slow

ROUTES = [  # (method, route) — checked against the app's url_map by tests/live/test_door.py's table
    ("GET", "/api/dashboard"),
    ("GET", "/api/agents/{machine}/{agent}/conversations"),
    ("GET", "/api/agents/{machine}/{agent}/conversations/{conv}"),
    ("GET", "/api/agents/{machine}/{agent}/conversations/{conv}/items"),
    ("GET", "/api/agents/{machine}/{agent}/starters"),
    ("POST", "/api/agents/{machine}/{agent}/viewing"),
    ("POST", "/api/send"),
    ("POST", "/api/ask/{ask_id}"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/steer"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/stop"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/actions/{action_id}"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/rename"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/close"),
    ("POST", "/api/agents/{machine}/{agent}/conversations/{conv}/reopen"),
    ("POST", "/api/agents/{machine}/{agent}/starters/{starter_id}"),
    ("GET", "/api/agents/{machine}/{agent}/inbox"),
    ("POST", "/api/agents/{machine}/{agent}/inbox"),
    ("GET", "/api/inbox/{item_id}"),
    ("POST", "/api/inbox/{item_id}/approve"),
    ("POST", "/api/inbox/{item_id}/cancel"),
    ("POST", "/api/inbox/{item_id}/move"),
    ("POST", "/api/inbox/{item_id}/message"),
    ("POST", "/api/agents/{machine}/{agent}/inbox/clear"),
    ("POST", "/api/events/ticket"),
    ("POST", "/api/push/subscribe"),
    ("DELETE", "/api/push/subscribe"),
    ("GET", "/api/nope"),
]
FIELDS = ["request_id", "machine", "agent", "conversation", "text", "turn", "digest", "answer", "confirmed",
          "option_ids", "fields", "title", "starter", "index", "on"]

texts = st.text(st.characters(codec="utf-8") | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=40)
scalars = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False) | texts
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(FIELDS) | texts, inner, max_size=4), max_leaves=12)
objects = st.fixed_dictionaries({}, optional={f: json_values for f in FIELDS})


limit_numbers = st.one_of(
    st.sampled_from([2**63 - 1, 2**63, -(2**63 - 1), -(2**63)]).map(lambda n: str(n).encode()),
    st.sampled_from([b"1" + b"0" * 4300, b"1" + b"0" * 4299]),  # 10**4300, 10**4299: str() refuses them on 3.11
    st.integers(1, 6000).map(lambda n: b"9" * n),
    st.integers(1, 6000).map(lambda n: b"-0." + b"1" * n),
    st.sampled_from([b"1e308", b"1e309", b"-1e400", b"1E-400", b"0.5e99999"]),
)


def _dumps(value) -> bytes:
    return json.dumps(value).encode()  # ensure_ascii: lone surrogates travel as \\udXXX escapes


bodies = st.one_of(
    objects.map(_dumps),
    json_values.map(_dumps),
    st.integers(1, 1200).map(lambda n: b'{"text": ' + b"[" * n + b"]" * n + b"}"),
    st.integers(1, 1200).map(lambda n: b"{" + b'"a":{' * n + b"}" * n + b"}"),
    st.binary(max_size=64),
    st.just(b""),
    # issue 25.9: numbers, nesting and sizes at the limits, in any field the routes read
    st.tuples(st.sampled_from(FIELDS), limit_numbers).map(lambda fv: b'{"%s": %s}' % (fv[0].encode(), fv[1])),
    st.integers(30, 34).map(lambda n: b'{"turn": ' + b"[" * n + b"1" + b"]" * n + b"}"),
    st.sampled_from([256 * 1024 - 20, 256 * 1024 - 12, 256 * 1024, 256 * 1024 + 1]).map(
        lambda n: b'{"text": "' + b"x" * (n - 12) + b'"}'),
)
segments = st.sampled_from(["local", "deployer", "deploy", "nosuch", "."]) | texts.filter(bool)
queries = st.dictionaries(st.sampled_from(["since", "closed", "cursor"]), texts, max_size=3)


@pytest.fixture
def lab(paths, bridge):
    run = short_dir()
    agents = Agents()
    sock = str(run / "deployer" / "a.sock")
    agents.start("deployer", "--socket", sock)
    assert run_collie(paths, "durable", "attach", "deployer", "--socket", sock).returncode == 0
    for name, approval in (("slack", "standing"), ("relay", "required")):
        assert run_collie(paths, "tokens", "create", name, "--approval", approval).returncode == 0
    address = bridge(env=collie_env(paths)).wait_ready()["address"]
    wait_for(lambda: live(paths)["deployer"]["status"] == "ready")
    tokens = {"owner": (paths.state_dir / "api-token").read_text().strip()}
    for name in ("slack", "relay"):
        tokens[name] = (paths.state_dir / "tokens" / f"{name}.token").read_text().strip()
    with httpx.Client(base_url=address, timeout=20) as client:
        yield client, tokens
    agents.stop()
    cleanup(run)


@settings(max_examples=300, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(route=st.sampled_from(ROUTES), who=st.sampled_from(["owner", "slack", "relay", "owner"]),
       values=st.fixed_dictionaries({k: segments for k in ("machine", "agent", "conv", "ask_id", "action_id",
                                                            "starter_id", "item_id")}),
       query=queries, body=bodies)
def test_no_request_gets_a_500(lab, route, who, values, query, body):
    """9.10: every route answers any input with JSON; a refusal is 4xx with `error` and `message`."""
    client, tokens = lab
    method, template = route
    path = template.format(**{k: quote(v.encode("utf-8", "surrogatepass"), safe="") for k, v in values.items()})
    r = client.request(method, path, params=query, content=body,
                       headers={"authorization": f"Bearer {tokens[who]}", "content-type": "application/json"})
    assert r.status_code < 500, (method, path, body[:200], r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json"), (method, path, r.text[:200])
    data = r.json()
    assert isinstance(data, dict)
    if r.status_code >= 400:
        assert isinstance(data.get("error"), str) and isinstance(data.get("message"), str), data


LIMIT_BODIES = [b'{"%s": %s}' % (field, number) for field in (b"turn", b"text", b"index", b"option_ids")
                for number in (b"9" * 5000, str(2**63).encode(), str(-(2**63)).encode(), b"1e309", b"0." + b"1" * 5000,
                               str(2**63 - 1).encode())] + [
    b'{"turn": ' + b"[" * 33 + b"]" * 33 + b"}", b'{"text": "' + b"x" * (256 * 1024 - 12) + b'"}',
    b'{"text": "' + b"x" * (256 * 1024) + b'"}']


def test_numbers_nesting_and_sizes_at_the_limits_on_every_route(lab):
    """25.9: each route, each body at a limit (a 5,000-digit integer, ±2^63, a float that overflows, 33 levels,
    256 KiB): a JSON answer under 500, and a number the lead cannot keep is a 400 naming it."""
    client, tokens = lab
    values = {"machine": "local", "agent": "deployer", "conv": "deploy", "ask_id": "a1", "action_id": "x",
              "starter_id": "s", "item_id": "i1"}
    for method, template in ROUTES:
        path = template.format(**values)
        for body in LIMIT_BODIES:
            r = client.request(method, path, content=body, headers={"authorization": f"Bearer {tokens['owner']}",
                                                                    "content-type": "application/json"})
            assert r.status_code < 500, (method, path, body[:80], r.status_code, r.text[:300])
            assert r.headers["content-type"].startswith("application/json"), (method, path, r.text[:200])
            if (b"9" * 5000 in body or str(2**63).encode() in body) and "nope" not in path:  # no route: 404 first
                assert r.status_code == 400 and r.json()["error"] == "bad_request", (method, path, r.text[:200])
