"""The phone's door, tried as a phone and as an attacker would: real `collie serve`, real fixture agents,
real TLS with the generated certificate, HTTP/2, and the live channel (issue 11; phone-api.md; D, I7, W5)."""

from __future__ import annotations

import json
from contextlib import closing
import re
import ssl
import stat
import threading
import time
import uuid

import httpx
import pytest

from crew import control
from tests.conftest import collie_env, run_collie
from tests.live import cleanup, short_dir
from tests.test_durable_e2e import Agents, live, wait_for

pytestmark = pytest.mark.slow
CSRF = {"X-Collie-CSRF": "1"}


@pytest.fixture
def lead(paths, bridge):
    """A lead over TLS (generated certificate) on loopback with one deployer agent."""
    run = short_dir()
    agents = Agents()
    agents.start("deployer", "--socket", str(run / "dep" / "a.sock"))
    assert run_collie(paths, "durable", "attach", "deployer", "--socket", str(run / "dep" / "a.sock")).returncode == 0
    b = bridge("--tls", env=collie_env(paths))
    address = b.wait_ready()["address"]
    wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
    port = int(address.rsplit(":", 1)[1])
    cert = paths.state_dir / "tls" / "cert.pem"
    ctx = ssl.create_default_context(cafile=str(cert))
    yield {"base": f"https://127.0.0.1:{port}", "port": port, "ctx": ctx, "paths": paths, "bridge": b}
    agents.stop()
    cleanup(run)


def pair_link(paths) -> str:
    done = run_collie(paths, "pair", "--no-qr")
    assert done.returncode == 0, done.stderr
    return re.search(r"(https?://\S+/pair#\S+)", done.stdout).group(1)


def pair(lead, name="pixel") -> httpx.Client:
    link = pair_link(lead["paths"])
    code = link.split("#", 1)[1]
    c = httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10)
    r = c.post("/api/pair", json={"code": code, "name": name}, headers=CSRF)
    assert r.status_code == 200, r.text
    return c


def test_pairing_is_single_use_and_gives_an_httponly_strict_secure_cookie(lead):
    """A pairing link works once; the cookie is HttpOnly, SameSite=Strict and Secure over TLS; the lead
    keeps no copy of the code or the credential (only hashes)."""
    paths = lead["paths"]
    out = run_collie(paths, "pair")
    assert out.returncode == 0
    assert "SHA-256" in out.stdout and "▀" in out.stdout or "█" in out.stdout  # the fingerprint and a QR code
    code = re.search(r"/pair#(\S+)", out.stdout).group(1)
    with httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10) as c:
        first = c.post("/api/pair", json={"code": code, "name": "pixel"})
        assert first.status_code == 200
        set_cookie = first.headers["set-cookie"].lower()
        assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "secure" in set_cookie
        assert c.get("/api/dashboard").status_code == 200
    with httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10) as other:
        again = other.post("/api/pair", json={"code": code, "name": "thief"})
        assert again.status_code == 401 and again.json()["error"] == "pairing_used"
        assert other.get("/api/dashboard").status_code == 401
    cookie = first.cookies["collie_device"]
    for f in paths.state_dir.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert code.encode() not in data and cookie.encode() not in data, f
    assert stat.S_IMODE((paths.state_dir / "devices.sqlite").stat().st_mode) == 0o600
    assert stat.S_IMODE((paths.state_dir / "tls" / "key.pem").stat().st_mode) == 0o600


def test_guards_refuse_missing_cookie_csrf_foreign_host_and_origin(lead):
    """Every /api route needs a credential; cookie writes need the CSRF header; a foreign Host (DNS
    rebinding) or Origin is refused; unknown /api routes answer JSON."""
    c = pair(lead)
    with closing(c):
        with httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10) as anon:
            assert anon.get("/api/dashboard").status_code == 401
        body = {"request_id": str(uuid.uuid4()), "machine": "local", "agent": "deployer", "conversation": "deploy",
                "text": "hi", "turn": 0}
        no_csrf = c.post("/api/send", json=body)
        assert no_csrf.status_code == 403 and no_csrf.json()["error"] == "csrf"
        foreign = c.get("/api/dashboard", headers={"host": f"evil.example:{lead['port']}"})
        assert foreign.status_code == 421 and foreign.json()["error"] == "wrong_host"
        cross = c.get("/api/dashboard", headers={"origin": "https://evil.example"})
        assert cross.status_code == 403 and cross.json()["error"] == "cross_origin"
        assert "access-control-allow-origin" not in cross.headers
        same = c.get("/api/dashboard", headers={"origin": f"https://127.0.0.1:{lead['port']}"})
        assert same.status_code == 200


def test_http2_client_gets_dashboard_and_live_channel_on_one_connection(lead):
    """Over TLS the lead speaks HTTP/2 (ALPN h2): one connection carries the dashboard and the live
    channel at once."""
    token = (lead["paths"].state_dir / "api-token").read_text().strip()
    with httpx.Client(base_url=lead["base"], verify=lead["ctx"], http2=True, timeout=10,
                      headers={"authorization": f"Bearer {token}"}) as c:
        with c.stream("GET", "/api/events") as events:
            assert events.http_version == "HTTP/2"
            lines = events.iter_lines()
            seen = read_events(lines, until="snapshot")
            assert seen[-1][0] == "snapshot"
            dash = c.get("/api/dashboard")
            assert dash.http_version == "HTTP/2" and dash.status_code == 200
            assert len(c._transport._pool.connections) == 1


def read_events(lines, until: str, limit: int = 50) -> list[tuple[str, dict]]:
    out, kind, data = [], None, None
    for line in lines:
        if line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data = json.loads(line[5:])
        elif line == "" and kind:
            out.append((kind, data))
            if kind == until or len(out) >= limit:
                return out
            kind, data = None, None
    return out


def test_revoked_phone_gets_401_at_once_also_on_its_open_live_channel(lead):
    """`collie devices revoke` ends the phone's live channel with `unauthorized` and its next request is 401."""
    c = pair(lead, "pixel")
    paths = lead["paths"]
    listed = run_collie(paths, "devices")
    assert "pixel" in listed.stdout
    got: list = []
    with closing(c):
        with c.stream("GET", "/api/events") as events:
            lines = events.iter_lines()
            read_events(lines, until="snapshot")
            done = threading.Event()

            def rest():
                got.extend(read_events(lines, until="unauthorized"))
                done.set()

            threading.Thread(target=rest, daemon=True).start()
            assert run_collie(paths, "devices", "revoke", "pixel").returncode == 0
            assert done.wait(10)
        assert got[-1][0] == "unauthorized"
        assert c.get("/api/dashboard").status_code == 401
    assert "no paired phones" in run_collie(paths, "devices").stdout
