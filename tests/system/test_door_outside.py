"""Findings of an attacker's outside check of the door, replayed through a real `collie serve` and real sockets
(issue 25, second round; docs/threat-model.md, docs/phone-api.md "The door's guards").

- D1: cookies of the device cookie's name planted by a neighbour (another port of the host) under deeper
  Paths — which the browser sends ahead of the phone's — do not shadow the phone's own cookie, however many;
  a cookie without its key, or a key with another device's cookie, still opens nothing.
"""

from __future__ import annotations

import re

import httpx
import pytest

from tests.conftest import run_collie
from tests.system.test_durable_e2e import deployer_lead

pytestmark = pytest.mark.slow
CSRF = {"X-Collie-CSRF": "1"}
ITEMS = "/api/agents/local/deployer/conversations/deploy/items"


@pytest.fixture(scope="module")
def lead():
    with deployer_lead() as lab:
        yield lab


def pair(lead, name: str = "pixel") -> tuple[str, str]:
    """(cookie value, device key) of a newly paired phone."""
    done = run_collie(lead["paths"], "pair", "--no-qr")
    assert done.returncode == 0, done.stderr
    code = re.search(r"/pair#(\S+)", done.stdout).group(1)
    r = httpx.post(lead["base"] + "/pair", json={"code": code, "name": name}, headers=CSRF)
    assert r.status_code == 200, r.text
    return r.cookies["collie_device"], r.json()["key"]


def phone_get(lead, path: str, cookie_header: str, key: str | None):
    headers = {"cookie": cookie_header, **({"X-Collie-Device-Key": key} if key else {})}
    return httpx.get(lead["base"] + path, headers=headers, timeout=10)


@pytest.mark.parametrize("planted", [8, 9, 200])
def test_planted_cookies_ahead_of_the_phones_do_not_lock_it_out_of_a_conversation(lead, planted):
    """D1: what Chromium sends for a conversation route when a neighbour planted cookies under deeper Paths:
    theirs first, the phone's last. The conversation's items and the dashboard both answer the phone."""
    cookie, key = pair(lead, f"pixel {planted}")
    header = "; ".join([f"collie_device=junk{i}" for i in range(planted)] + [f"collie_device={cookie}"])
    for path in (ITEMS, "/api/dashboard"):
        r = phone_get(lead, path, header, key)
        assert r.status_code == 200, (path, r.status_code, r.text[:200])
    write = httpx.post(lead["base"] + "/api/agents/local/deployer/conversations/deploy/rename", json={"title": "x"},
                       headers={"cookie": header, "X-Collie-Device-Key": key, **CSRF}, timeout=10)
    assert write.status_code != 401, write.text


def test_a_cookie_opens_nothing_without_its_own_devices_key(lead):
    """D1, kept: the cookie alone (what a neighbour receives) or with another device's key opens nothing,
    even with the other device's cookie in the same header."""
    c1, k1 = pair(lead, "one")
    c2, k2 = pair(lead, "two")
    assert phone_get(lead, "/api/dashboard", f"collie_device={c1}", None).status_code == 401
    assert phone_get(lead, "/api/dashboard", f"collie_device={c1}", k2).status_code == 401
    assert phone_get(lead, "/api/dashboard", f"collie_device={c1}", "junk").status_code == 401
    assert phone_get(lead, "/api/dashboard", f"collie_device={c1}; collie_device={c2}", k2).status_code == 200


GUARDS = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


def test_a_pair_body_over_the_limit_and_an_unknown_page_answer_json_with_the_guard_headers(lead):
    """A 300 KB body to /pair is the API's JSON 413, and an unknown page is a JSON 404 — both with the pages'
    guard headers, never the framework's bare HTML."""
    big = httpx.post(lead["base"] + "/pair", content=b'{"code": "' + b"x" * 300_000 + b'"}',
                     headers={**CSRF, "content-type": "application/json"})
    missing = httpx.get(lead["base"] + "/no/such/page")
    assert big.status_code == 413 and big.json()["error"] == "too_large", big.text[:200]
    assert missing.status_code == 404 and missing.json()["error"] == "not_found", missing.text[:200]
    for r in (big, missing):
        assert r.headers["content-type"].startswith("application/json")
        assert {k: r.headers.get(k) for k in GUARDS} == GUARDS, r.headers
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"]


@pytest.mark.parametrize("body", [{}, {"on": "yes"}, {"on": 1}, {"on": None}, {"off": True}])
def test_viewing_takes_a_strict_boolean(lead, body):
    """phone-api.md: wrong types are a 400 — `on` must be true or false."""
    r = httpx.post(lead["base"] + "/api/agents/local/deployer/viewing", json=body,
                   headers={"authorization": f"Bearer {lead['token']}"})
    assert r.status_code == 400 and "on must be true or false" in r.json()["message"], r.text
    ok = httpx.post(lead["base"] + "/api/agents/local/deployer/viewing", json={"on": False},
                    headers={"authorization": f"Bearer {lead['token']}"})
    assert ok.status_code == 200, ok.text


@pytest.mark.parametrize("path", ["/api/send", "/pair", "/api/agents/local/deployer/viewing"])
def test_a_key_given_twice_is_refused_naming_it(lead, path):
    """A JSON object with a key twice is a 400 naming the key (which one wins would be one parser's choice)."""
    r = httpx.post(lead["base"] + path, content=b'{"on": true, "code": "x", "on": false}',
                   headers={"authorization": f"Bearer {lead['token']}", "content-type": "application/json", **CSRF})
    assert r.status_code == 400 and "the key 'on' twice" in r.json()["message"], r.text


def test_a_phone_cookie_without_its_key_is_told_to_pair_again(lead):
    """The 401 for a device cookie with a missing or wrong key tells a phone's user what to do."""
    cookie, _key = pair(lead, "lost key")
    for key in (None, "wrong"):
        r = phone_get(lead, "/api/dashboard", f"collie_device={cookie}", key)
        assert r.status_code == 401 and "pair it again with `collie pair`" in r.json()["message"], r.text
    bare = httpx.get(lead["base"] + "/api/dashboard")
    assert bare.status_code == 401 and "Authorization: Bearer" in bare.json()["message"]
