"""The phone's credential is the lead's origin's alone, tried in a real Chromium (issue 25.1; phone-api.md
"Pairing a phone").

A browser sends a host's cookies to every port of it (RFC 6265 §8.5): a neighbour — another user's
server, an agent's dev preview on `127.0.0.1` — receives the phone's cookie when the phone visits it, and
may set cookies of the same name. Invariant: what the neighbour receives opens nothing on the lead (any
route, the live channel, a live ticket), and what it plants does not log the paired phone out — the
page keeps reading the dashboard and its live channel opens. Both over loopback HTTP and over TLS.
"""

from __future__ import annotations

import ssl
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from tests.conftest import collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.phonelab import browser  # noqa: F401 (the module's browser fixture)
from tests.phonelab import pair_link, paired
from tests.system.test_durable_e2e import Agents, live, wait_for

pytestmark = pytest.mark.slow
# Cookies of the credential's names under other paths: sent to the lead first (the longest path leads).
# One of the same name and the same Path replaces the phone's: the page renews it with its signing key.
REPLACE = ["collie_device=replaced; Path=/", "__Host-collie_device=replaced; Path=/; Secure"]
PLANTS = ["collie_device=planted-api; Path=/api", "collie_device=planted-events; Path=/api/events",
          "collie_device=planted-deep; Path=/api/dashboard", "__Host-collie_device=planted-host; Path=/api; Secure"]


class Neighbour:
    """Another web server on the same host, another port: keeps every Cookie header it is sent, and plants
    cookies of the credential's names under other paths."""

    def __init__(self, plants: list[str] = PLANTS, page: bytes = b"<!doctype html><title>dev preview</title><p>hello") -> None:
        self.cookies: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                outer.cookies.append(self.headers.get("cookie") or "")
                body = page
                self.send_response(200)
                for plant in plants:
                    self.send_header("Set-Cookie", plant)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(params=["http", "tls"])
def lead(request, paths, bridge):
    run = short_dir()
    agents = Agents()
    agents.start("deployer", "--socket", str(run / "dep" / "a.sock"))
    assert run_collie(paths, "durable", "attach", "deployer", "--socket", str(run / "dep" / "a.sock")).returncode == 0
    b = bridge(*(["--tls"] if request.param == "tls" else []), env=collie_env(paths))
    b.wait_ready()
    wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
    neighbour = Neighbour()
    yield {"paths": paths, "tls": request.param == "tls", "neighbour": neighbour,
           "verify": ssl.create_default_context(cafile=str(paths.state_dir / "tls" / "cert.pem"))
           if request.param == "tls" else True}
    neighbour.close()
    agents.stop()
    cleanup(run)


def pump_until(page, check, what: str, timeout_ms: int = 20000) -> None:
    """Wait for `check()` while Playwright delivers the page's events (the sync API runs them only inside its calls)."""
    for _ in range(timeout_ms // 50):
        if check():
            return
        page.wait_for_timeout(50)
    raise AssertionError(f"{what}: not met in time")


def cookie_values(header: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for part in header.split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            out.setdefault(name, []).append(value)
    return out


def paired_phone(lead, browser):
    """A Chromium context paired from `collie pair`'s link, on the dashboard with its live channel open; the
    statuses of the channel's responses (appended as they come) and the lead's address."""
    channel: list[int] = []
    page = paired(browser, pair_link(run_collie(lead["paths"], "pair", "--no-qr")), ignore_https_errors=True,
                  watch=lambda p: p.on("response", lambda r: channel.append(r.status) if "/api/events?" in r.url else None))
    pump_until(page, lambda: 200 in channel, what="the live channel open")
    return page.context, page, channel, page.base


def test_the_cookie_a_neighbour_receives_opens_nothing_and_its_planted_cookies_lock_no_one_out(lead, browser):
    neighbour = lead["neighbour"]
    ctx, page, channel, base = paired_phone(lead, browser)
    try:
        # the phone visits a neighbour's page: the neighbour gets the host's cookies and plants its own
        page.goto(neighbour.url)
        page.wait_for_selector("p")
        got = cookie_values(neighbour.cookies[-1])
        stolen = got.get("collie_device", []) + got.get("__Host-collie_device", [])
        if not lead["tls"]:
            assert stolen, neighbour.cookies  # the attack is real: plain HTTP sends the phone's cookie here
        csrf = {"X-Collie-CSRF": "1"}
        send = {"request_id": str(uuid.uuid4()), "machine": "local", "agent": "deployer", "conversation": "deploy",
                "text": "from the neighbour", "turn": 0}
        with httpx.Client(base_url=base, verify=lead["verify"], timeout=10) as thief:
            for value in stolen:
                for name in ("collie_device", "__Host-collie_device"):
                    jar = {"cookie": f"{name}={value}"}
                    assert thief.get("/api/dashboard", headers=jar).status_code == 401
                    assert thief.post("/api/send", json=send, headers={**jar, **csrf}).status_code == 401
                    assert thief.post("/api/events/ticket", json={}, headers={**jar, **csrf}).status_code == 401
                    assert thief.get("/api/events", headers=jar).status_code == 401
                    assert thief.get("/api/events?ticket=x", headers=jar).status_code == 401
        # back on the lead, with the planted cookies in the jar: still paired, the live channel still opens
        channel.clear()
        page.goto(base + "/")
        page.wait_for_selector("main section")
        pump_until(page, lambda: 200 in channel, what="the live channel open again")
        assert 401 not in channel
        assert page.locator("text=This phone is not paired").count() == 0
        planted = {c["value"] for c in ctx.cookies() if c["value"].startswith("planted")}
        assert planted, ctx.cookies()  # the browser did keep the neighbour's cookies: they were sent to the lead
    finally:
        ctx.close()


def test_a_cookie_a_neighbour_replaced_is_renewed_by_the_page_without_pairing_again(lead, browser):
    """Issue 25.1: a neighbour that sets a cookie of the credential's name and Path replaces the phone's (on
    127.0.0.1 Chromium lets even plain HTTP replace a Secure one). The page renews it with the signing key
    the pairing page made: the dashboard, the live channel and a send work without pairing again, the
    cookie is a new one, and the replaced value, sent to the lead, opens nothing."""
    replacer = Neighbour(REPLACE)
    ctx, page, channel, base = paired_phone(lead, browser)
    own = "__Host-collie_device" if lead["tls"] else "collie_device"  # the name the lead sets
    mine = lambda: {c["value"] for c in ctx.cookies() if c["name"] == own}
    try:
        paired = mine()
        page.goto(replacer.url)
        page.wait_for_selector("p")
        assert mine() == {"replaced"}, ctx.cookies()  # the attack is real: the phone's own cookie is gone
        channel.clear()
        page.goto(base + "/")
        page.wait_for_selector("main section")
        pump_until(page, lambda: 200 in channel, what="the live channel open again")
        assert page.locator("text=This phone is not paired").count() == 0
        renewed = mine()
        assert len(renewed) == 1 and not renewed & (paired | {"replaced"}), ctx.cookies()
        sent = page.evaluate("""async () => (await import('/api.js')).write('/api/send', {request_id: crypto.randomUUID(),
            machine: 'local', agent: 'deployer', conversation: 'deploy', text: 'after renewal'})""")
        assert sent["outcome"] in ("sent", "refused") and sent.get("reason") != "unauthorized", sent
        with httpx.Client(base_url=base, verify=lead["verify"], timeout=10) as thief:
            for name in ("collie_device", "__Host-collie_device"):
                for value in ("replaced", *paired):
                    assert thief.get("/api/dashboard", headers={"cookie": f"{name}={value}"}).status_code == 401
    finally:
        ctx.close()
        replacer.close()
