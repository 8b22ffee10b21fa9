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

from crew.paths import Paths
from tests.conftest import BridgeProcess, collie_env, run_collie
from tests.crewlab import wait_for
from tests.live import cleanup, short_dir
from tests.test_durable_e2e import Agents, live

pytestmark = pytest.mark.slow
CSRF = {"X-Collie-CSRF": "1"}
ITEMS = "/api/agents/local/deployer/conversations/deploy/items"


@pytest.fixture(scope="module")
def lead():
    run = short_dir()
    paths = Paths(config_dir=run / "config", state_dir=run / "state")
    agents = Agents()
    sock = str(run / "deployer" / "a.sock")
    agents.start("deployer", "--socket", sock)
    assert run_collie(paths, "durable", "attach", "deployer", "--socket", sock).returncode == 0
    b = BridgeProcess(paths, collie_env(paths))
    address = b.wait_ready()["address"]
    wait_for(lambda: live(paths)["deployer"]["status"] == "ready")
    token = (paths.state_dir / "api-token").read_text().strip()
    yield {"base": address, "paths": paths, "token": token, "bridge": b}
    b.stop()
    b.proc.stdout.close()
    agents.stop()
    cleanup(run)


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
