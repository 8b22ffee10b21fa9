"""Bodies at and past the limits, against a real `collie serve` (issue 25.9; phone-api.md "Errors").

Invariant: a body the API cannot read — a 5,000-digit integer, a number past ±(2^63-1), a float that
overflows to infinity, a number literal of thousands of characters — is a `400 bad_request` whose
message says what was wrong, on every write route and on `POST /pair`; never a 500.
"""

from __future__ import annotations

import httpx
import pytest

from tests.system.test_durable_e2e import deployer_lead

pytestmark = pytest.mark.slow

WRITES = ["/api/send", "/api/ask/a1", "/api/agents/local/deployer/conversations/deploy/steer",
          "/api/agents/local/deployer/conversations/deploy/stop", "/api/agents/local/deployer/starters/s1",
          "/api/agents/local/deployer/conversations/deploy/rename", "/api/agents/local/deployer/inbox",
          "/api/push/subscribe", "/api/agents/local/deployer/viewing"]
HUGE = b"9" * 5000


@pytest.fixture(scope="module")
def lead():
    with deployer_lead() as lab, httpx.Client(base_url=lab["base"], timeout=20,
                                              headers={"authorization": f"Bearer {lab['token']}"}) as c:
        yield c


@pytest.mark.parametrize("path", WRITES)
@pytest.mark.parametrize("body, says", [
    (b'{"request_id": "r1", "machine": "local", "agent": "deployer", "conversation": "deploy", "text": "hi", "turn": '
     + HUGE + b'}', "5000 digits"),
    (b'{"turn": 9223372036854775808, "text": "x"}', "beyond the largest"),
    (b'{"turn": -9223372036854775808}', "beyond the largest"),
    (b'{"turn": 1e400}', "too large for a float"),
    (b'{"turn": 0.' + b"1" * 5000 + b'}', "characters long"),
    (b'{"a": [' + b",".join([b"1"] * 20000) + b']}', None),  # many numbers at the limit: fine for the parser
])
def test_a_number_the_lead_cannot_keep_is_a_400_with_a_reason(lead, path, body, says):
    r = lead.post(path, content=body, headers={"content-type": "application/json"})
    assert r.status_code < 500, (path, r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    if says is not None:
        assert r.status_code == 400, (path, r.text[:300])
        assert r.json()["error"] == "bad_request" and says in r.json()["message"], r.json()


def test_pair_reads_its_body_with_the_same_strict_parser(lead):
    r = httpx.post(str(lead.base_url) + "/pair", content=b'{"code": "x", "name": ' + HUGE + b'}',
                   headers={"X-Collie-CSRF": "1", "content-type": "application/json"})
    assert r.status_code == 400 and "5000 digits" in r.json()["message"], r.text
