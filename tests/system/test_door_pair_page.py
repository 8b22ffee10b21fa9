"""The pairing page and `POST /pair` carry the same guard headers as the app's pages (issue 25, "Also"):
a page that trades a secret must not be framed (clickjacking), sniffed or leak its URL in a Referer."""

from __future__ import annotations

import base64
import hashlib
import re

import httpx
import pytest

from tests.system.test_door_bodies import lead  # noqa: F401 - the fixture: a real `collie serve` on loopback

pytestmark = pytest.mark.slow


def test_the_pairing_page_and_its_answer_cannot_be_framed_or_sniffed(lead):  # noqa: F811
    base = str(lead.base_url)
    page = httpx.get(base + "/pair")
    answer = httpx.post(base + "/pair", json={"code": "nope"}, headers={"X-Collie-CSRF": "1"})
    assert page.status_code == 200 and answer.status_code == 401
    for r in (page, answer):
        assert r.headers["x-content-type-options"] == "nosniff"
        assert r.headers["x-frame-options"] == "DENY"
        assert r.headers["referrer-policy"] == "no-referrer"
    csp = page.headers["content-security-policy"]
    assert "frame-ancestors 'none'" in csp and "base-uri 'none'" in csp and "form-action 'none'" in csp
    # issue 25 D4: POST /pair's answers carry a policy too, and the page's inline script runs by its hash only
    for r in (answer, httpx.post(base + "/pair", content=b"[", headers={"X-Collie-CSRF": "1"})):
        assert "frame-ancestors 'none'" in r.headers["content-security-policy"], r.headers
    assert "unsafe-inline" not in csp
    for tag, directive in (("script", "script-src"), ("style", "style-src")):
        block = re.search(rf"<{tag}>(.*?)</{tag}>", page.text, re.DOTALL).group(1)
        digest = base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()
        assert f"{directive} 'sha256-{digest}'" in csp, (tag, csp)
