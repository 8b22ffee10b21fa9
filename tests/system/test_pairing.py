"""The phone's door, tried as a phone and as an attacker would: real `collie serve`, real fixture agents,
real TLS with the generated certificate, HTTP/2, and the live channel (issue 11; phone-api.md; D, I7, W5)."""

from __future__ import annotations

import json
import re
import socket
import ssl
import stat
import threading
import time
import uuid
from contextlib import closing

import h2.config
import h2.connection
import h2.errors
import h2.events
import httpx
import pytest

from collie.crew import control
from tests.conftest import collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.system.test_durable_e2e import Agents, live, wait_for

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
    r = c.post("/pair", json={"code": code, "name": name}, headers=CSRF)
    assert r.status_code == 200, r.text
    c.headers["X-Collie-Device-Key"] = r.json()["key"]  # the page keeps it in its origin's storage (issue 25.1)
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
        first = c.post("/pair", json={"code": code, "name": "pixel"})
        assert first.status_code == 200
        set_cookie = first.headers["set-cookie"].lower()
        assert "httponly" in set_cookie and "samesite=strict" in set_cookie and "secure" in set_cookie
        assert set_cookie.startswith("__host-collie_device=") and "path=/" in set_cookie and "domain" not in set_cookie
        key = first.json()["key"]
        assert c.get("/api/dashboard").status_code == 401  # the cookie alone reaches every port: not enough
        assert c.get("/api/dashboard", headers={"X-Collie-Device-Key": key}).status_code == 200
    with httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10) as other:
        again = other.post("/pair", json={"code": code, "name": "thief"})
        assert again.status_code == 401 and again.json()["error"] == "pairing_used"
        assert other.get("/api/dashboard").status_code == 401
    cookie = first.cookies["__Host-collie_device"]
    for f in paths.state_dir.rglob("*"):
        if f.is_file():
            data = f.read_bytes()
            assert code.encode() not in data and cookie.encode() not in data and key.encode() not in data, f
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


class Stream:
    """A live channel read on a thread, so a test can act and then wait for an event."""

    def __init__(self, client: httpx.Client, path: str = "/api/events", headers: dict | None = None) -> None:
        self.events: list[tuple[str, str | None, dict]] = []  # (kind, id, data)
        self.cond = threading.Condition()
        # a client of its own: an httpx client is not shared between the reading thread and the test's
        self.own = httpx.Client(base_url=client.base_url, headers=client.headers, timeout=None,
                                verify=getattr(client, "verify_context", True))
        self.ctx = self.own.stream("GET", path, headers=headers or {})
        self.resp = self.ctx.__enter__()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        kind = ev_id = data = None
        try:
            for line in self.resp.iter_lines():
                if line.startswith("event:"):
                    kind = line[6:].strip()
                elif line.startswith("id:"):
                    ev_id = line[3:].strip()
                elif line.startswith("data:"):
                    data = json.loads(line[5:])
                elif line == "" and kind:
                    with self.cond:
                        self.events.append((kind, ev_id, data))
                        self.cond.notify_all()
                    kind = ev_id = data = None
        except (httpx.HTTPError, RuntimeError):
            pass

    def wait(self, pred, timeout: float = 15.0, start: int = 0):
        """The first event (from index `start`) that `pred` accepts; waits for it."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                for ev in self.events[start:]:
                    if pred(ev):
                        return ev
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"no such event; got {[e[0] for e in self.events]}")
                self.cond.wait(left)

    def close(self) -> None:
        """Ends the channel as a phone does, without racing the reading thread. Closing the socket under a
        thread blocked in SSL_read let OpenSSL, which keeps the raw descriptor number, read on from the next
        connection given that number: that connection's answers came back cut, or as `WRONG_VERSION_NUMBER`
        or a bad record MAC (the issue 11 "TLS keep-alive defect"). So: shut the socket down (the read
        returns), wait for the thread, then close."""
        sock = self.resp.extensions["network_stream"].get_extra_info("socket")
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # the lead closed it already
        self.thread.join(timeout=10)
        assert not self.thread.is_alive(), "the live channel's reading thread did not end"
        self.ctx.__exit__(None, None, None)
        self.own.close()


def owner_client(lead) -> httpx.Client:
    token = (lead["paths"].state_dir / "api-token").read_text().strip()
    c = httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=15, headers={"authorization": f"Bearer {token}"})
    c.verify_context = lead["ctx"]  # for the live channel's own client (Stream)
    return c


def test_live_channel_carries_rows_panes_items_and_drops_viewing_when_it_dies(lead):
    """W5, D1, C1: a channel viewing a conversation gets its pane and items; an answered ask changes the
    row, the pane (the ask closes) and the items; the agent polls at the viewed cadence only while the
    channel is open."""
    paths = lead["paths"]
    with owner_client(lead) as c:
        s = Stream(c, "/api/events?agent=deployer&conversation=deploy")
        snap = s.wait(lambda e: e[0] == "snapshot")[2]
        assert snap["pane"]["ask"]["title"] == "Deploy to staging?"
        row = snap["dashboard"]["sections"][0]["agents"][0]
        assert row["waiting"] == 1
        assert control.call(paths.control_socket, "live")["viewers"] == {"local/deployer": 1}
        ask = snap["pane"]["ask"]
        r = c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "agent": "deployer",
                                                   "digest": ask["digest"], "answer": {"option_ids": ["yes"]}})
        assert r.json()["outcome"] == "accepted", r.json()
        s.wait(lambda e: e[0] == "pane" and e[2]["pane"]["ask"] is None)
        s.wait(lambda e: e[0] == "row" and e[2]["agent"] == "deployer" and e[2]["row"]["waiting"] is None)
        s.wait(lambda e: e[0] == "items" and any(i.get("kind") == "reply" and "Deployed" in (i.get("text") or "")
                                                 for i in e[2]["items"]))
        s.close()
        wait_for(lambda: control.call(paths.control_socket, "live")["viewers"] == {})
        assert control.call(paths.control_socket, "live")["channels"] == 0


def test_resume_after_a_drop_loses_nothing(lead):
    """A phone that reconnects with Last-Event-ID gets what happened while it was away: the events it
    missed, or a fresh snapshot when the lead restarted."""
    with owner_client(lead) as c:
        s = Stream(c)
        s.wait(lambda e: e[0] == "snapshot")
        last_id = s.events[-1][1]
        s.close()
        pane = c.get("/api/agents/local/deployer/conversations/deploy").json()
        ask = pane["ask"]
        c.post(f"/api/ask/{ask['id']}", json={"request_id": str(uuid.uuid4()), "agent": "deployer",
                                               "digest": ask["digest"], "answer": {"option_ids": ["no"]}})
        wait_for(lambda: c.get("/api/dashboard").json()["sections"][0]["agents"][0]["waiting"] is None)
        again = Stream(c, headers={"Last-Event-ID": last_id})
        again.wait(lambda e: e[0] == "row" and e[2]["agent"] == "deployer" and e[2]["row"]["waiting"] is None)
        assert not any(e[0] == "snapshot" for e in again.events)
        again.close()
        lead["bridge"].stop()
    # a restarted lead cannot replay: the phone gets a fresh snapshot (a new port: the old one may be taken
    # by another program the moment it is free)
    b = lead["bridge"].__class__(lead["paths"], collie_env(lead["paths"]), "--tls")
    try:
        port = int(b.wait_ready()["address"].rsplit(":", 1)[1])
        token = (lead["paths"].state_dir / "api-token").read_text().strip()
        with httpx.Client(base_url=f"https://127.0.0.1:{port}", verify=lead["ctx"], timeout=15,
                          headers={"authorization": f"Bearer {token}"}) as c:
            c.verify_context = lead["ctx"]
            fresh = Stream(c, headers={"Last-Event-ID": last_id})
            fresh.wait(lambda e: e[0] == "snapshot")
            fresh.close()
    finally:
        b.stop()
        b.proc.stdout.close()


def test_connections_stay_whole_when_live_channels_close(lead):
    """A phone that closes its live channel and goes on over kept-alive and new connections gets every
    answer whole — no cut body, no `WRONG_VERSION_NUMBER` (issue 11). The lead still writes to a channel
    it has not yet seen closed (the view change below makes it write at once); that must reach no other
    connection. Before `Stream.close` shut its socket down first, a reading thread still blocked in
    SSL_read went on reading from the next connection given the same descriptor number (most rounds)."""
    paths = lead["paths"]
    view = {"agent": "deployer", "conversation": "deploy"}
    with owner_client(lead) as c:
        assert c.get("/api/dashboard").status_code == 200  # a kept-alive connection from here on
        for _ in range(20):
            s = Stream(c, "/api/events?agent=deployer&conversation=deploy")
            channel = s.wait(lambda e: e[0] == "hello")[2]["channel"]
            s.wait(lambda e: e[0] == "snapshot")
            s.close()
            with httpx.Client(base_url=lead["base"], verify=lead["ctx"], timeout=10, headers=c.headers) as fresh:
                assert fresh.get("/api/dashboard").json()["sections"][0]["agents"][0]["name"] == "deployer"
                moved = fresh.post(f"/api/events/{channel}/view", json=view)
                assert moved.status_code in (200, 404), moved.text  # 404 once the lead saw the channel close
                assert fresh.get("/api/agents/local/deployer/conversations/deploy").json()["ask"] is not None
            assert c.get("/api/agents/local/deployer/conversations/deploy").json()["ask"] is not None
        wait_for(lambda: control.call(paths.control_socket, "live")["channels"] == 0)
        assert control.call(paths.control_socket, "live")["viewers"] == {}


class H2Phone:
    """One HTTP/2 connection driven as a browser drives it: an EventSource that is closed resets its stream
    (RST_STREAM CANCEL) and the connection stays. (httpx cannot: it never resets a stream it abandons.)"""

    def __init__(self, lead) -> None:
        ctx = ssl.create_default_context(cafile=str(lead["paths"].state_dir / "tls" / "cert.pem"))
        ctx.set_alpn_protocols(["h2"])
        self.sock = ctx.wrap_socket(socket.create_connection(("127.0.0.1", lead["port"]), timeout=10),
                                    server_hostname="127.0.0.1")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.authority = f"127.0.0.1:{lead['port']}"
        self.token = (lead["paths"].state_dir / "api-token").read_text().strip()
        self.conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        self.status: dict[int, int] = {}
        self.body: dict[int, bytes] = {}
        self.ended: set[int] = set()
        self._flush()

    def _flush(self) -> None:
        self.sock.sendall(self.conn.data_to_send())

    def request(self, path: str) -> int:
        sid = self.conn.get_next_available_stream_id()
        self.conn.send_headers(sid, [(":method", "GET"), (":path", path), (":scheme", "https"),
                                     (":authority", self.authority), ("authorization", f"Bearer {self.token}")],
                               end_stream=True)
        self._flush()
        self.body[sid] = b""
        return sid

    def pump(self, until) -> None:
        deadline = time.monotonic() + 10
        while not until():
            assert time.monotonic() < deadline, "no answer on the HTTP/2 connection"
            data = self.sock.recv(65536)
            assert data, "the lead closed the HTTP/2 connection"
            for ev in self.conn.receive_data(data):
                if isinstance(ev, h2.events.ResponseReceived):
                    self.status[ev.stream_id] = int(dict(ev.headers)[":status"])
                elif isinstance(ev, h2.events.DataReceived):
                    self.conn.acknowledge_received_data(ev.flow_controlled_length, ev.stream_id)
                    if ev.stream_id in self.body:
                        self.body[ev.stream_id] += ev.data
                elif isinstance(ev, h2.events.StreamEnded):
                    self.ended.add(ev.stream_id)
            self._flush()

    def get(self, path: str) -> dict:
        sid = self.request(path)
        self.pump(lambda: sid in self.ended)
        assert self.status[sid] == 200, self.body[sid]
        return json.loads(self.body.pop(sid))

    def cancel(self, sid: int) -> None:
        self.conn.reset_stream(sid, h2.errors.ErrorCodes.CANCEL)
        self.body.pop(sid, None)
        self._flush()

    def close(self) -> None:
        self.conn.close_connection()
        self._flush()
        self.sock.close()


def test_http2_phone_closing_its_live_channel_drops_the_viewing_and_keeps_the_connection(lead):
    """W5 over HTTP/2: a phone closing its live channel resets that stream only; the lead ends the channel and
    its viewing count at once, and the same connection goes on answering whole (issue 11.3, 11.4)."""
    paths = lead["paths"]
    phone = H2Phone(lead)
    try:
        for _ in range(10):
            sid = phone.request("/api/events?agent=deployer&conversation=deploy")
            phone.pump(lambda: b"event: snapshot" in phone.body.get(sid, b""))
            assert phone.status[sid] == 200
            assert control.call(paths.control_socket, "live")["viewers"] == {"local/deployer": 1}
            phone.cancel(sid)
            assert phone.get("/api/dashboard")["sections"][0]["agents"][0]["name"] == "deployer"
            wait_for(lambda: control.call(paths.control_socket, "live")["viewers"] == {})
        assert control.call(paths.control_socket, "live")["channels"] == 0
        assert phone.get("/api/agents/local/deployer/conversations/deploy")["ask"] is not None
    finally:
        phone.close()


def test_serve_pair_and_doctor_print_the_certificate_fingerprint(lead):
    """TLS without homework: the SHA-256 fingerprint of the lead's own certificate authority (issue 35) is printed
    by serve (its ready line in the log), pair and doctor, and they agree."""
    from collie.lead.door.tls import fingerprint_file

    paths = lead["paths"]
    fp = fingerprint_file(paths.state_dir / "tls" / "ca.pem")
    assert fp in paths.log.read_text()
    assert fp in run_collie(paths, "pair", "--no-qr").stdout
    doctor = run_collie(paths, "doctor").stdout
    assert "ok   tls: " in doctor and fp in doctor and "ok   phones: 0 paired" in doctor


def test_off_loopback_the_lead_serves_tls_only_with_a_certificate_it_made(paths, bridge):
    """`--host` beyond loopback without a certificate: the lead makes one (key 0600) and speaks only TLS."""
    b = bridge("--host", "0.0.0.0", env=collie_env(paths))
    port = int(b.wait_ready()["address"].rsplit(":", 1)[1])
    cert = paths.state_dir / "tls" / "cert.pem"
    assert stat.S_IMODE((paths.state_dir / "tls" / "key.pem").stat().st_mode) == 0o600
    ctx = ssl.create_default_context(cafile=str(cert))
    with httpx.Client(verify=ctx, timeout=10) as c:
        assert c.get(f"https://127.0.0.1:{port}/healthz").status_code == 200
    with httpx.Client(timeout=10) as plain:
        with pytest.raises(httpx.HTTPError):
            plain.get(f"http://127.0.0.1:{port}/healthz")
