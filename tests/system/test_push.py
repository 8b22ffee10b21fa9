"""Push (features P1–P4, X1; issue 13): the limiter on exact times and against a reference model, once
per ask across restarts, the payload a push service can only carry (never read), endpoint rules."""

from __future__ import annotations

import json
import time

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collie.lead.push.pusher import (AGENT_PER_HOUR, MANY, PushLimiter, ask_payload, canonical_endpoint,
                                     check_endpoint, parse_subscription)
from tests.conftest import collie_env, run_collie
from tests.livelab import cleanup, short_dir
from tests.pushlab import FakePushService, Subscriber
from tests.system.test_durable_e2e import Agents, live, wait_for

T0 = 1_800_000_000.0


def test_three_a_minute_per_pane():
    """P1: the 4th push in a minute from one pane is quiet; a minute after the first, it pushes again."""
    lim = PushLimiter()
    assert [lim.admit("m", "a", "p", T0 + i) for i in range(4)] == ["push", "push", "push", "quiet"]
    assert lim.admit("m", "a", "other", T0 + 4) == "push"
    assert lim.admit("m", "a", "p", T0 + 59.9) == "quiet"
    assert lim.admit("m", "a", "p", T0 + 60) == "push"


def test_ten_a_minute_per_agent():
    """P1: 10 a minute per agent on a machine: the 11th (from a fresh pane) is quiet."""
    lim = PushLimiter()
    got = [lim.admit("m", "a", f"p{i}", T0 + i) for i in range(11)]
    assert got == ["push"] * 10 + ["quiet"]
    assert lim.admit("m", "b", "p0", T0 + 11) == "push"  # another agent: its own limit
    assert lim.admit("other", "a", "p0", T0 + 11) == "push"  # P4: the same agent name on another machine


def test_thirty_an_hour_then_one_summary_and_an_hour_of_silence():
    """P1: the ask that would be the 31st in an hour sends exactly one `raising many asks` push, then
    that agent is silent for an hour; after the hour it pushes again."""
    lim = PushLimiter()
    t = T0
    got = []
    for i in range(AGENT_PER_HOUR):
        got.append(lim.admit("m", "a", f"p{i}", t))
        t += 61  # under every per-minute limit
    assert got == ["push"] * 30
    assert lim.admit("m", "a", "px", t) == "many"
    silence_from = t
    assert [lim.admit("m", "a", f"q{i}", t + 61 * i) for i in range(1, 40) if t + 61 * i < silence_from + 3600] \
        == ["quiet"] * len([i for i in range(1, 40) if t + 61 * i < silence_from + 3600])
    assert lim.admit("m", "a", "late", silence_from + 3599.9) == "quiet"
    assert lim.admit("m", "a", "late", silence_from + 3600) == "push"
    assert MANY.format(host="workshop") == "A durable agent on workshop is raising many asks"


@pytest.mark.parametrize("cut", [1, 3, 10, 30, 31, 35])
def test_a_restart_in_the_middle_changes_nothing(cut):
    """Its state survives a lead restart: a limiter rebuilt from the saved state decides the same."""
    times = [T0 + i * 7 for i in range(40)]
    panes = [f"p{i % 3}" for i in range(40)]
    straight = PushLimiter()
    expect = [straight.admit("m", "a", p, t) for p, t in zip(panes, times)]
    first = PushLimiter()
    got = [first.admit("m", "a", p, t) for p, t in zip(panes[:cut], times[:cut])]
    state = json.loads(json.dumps(first.state(times[cut - 1])))
    second = PushLimiter(state)
    got += [second.admit("m", "a", p, t) for p, t in zip(panes[cut:], times[cut:])]
    assert got == expect


class Reference:
    """The P1 rules written the plain way: every push time kept, counted by filtering."""

    def __init__(self) -> None:
        self.sent: list[tuple] = []  # (time, machine, agent, pane)
        self.silent: dict = {}

    def admit(self, m, a, p, now):
        if now < self.silent.get((m, a), float("-inf")):
            return "quiet"
        mine = [s for s in self.sent if s[1:3] == (m, a)]
        if len([s for s in mine if s[0] > now - 3600 and s[0] > self.silent.get(("since", m, a), float("-inf"))]) >= 30:
            self.silent[(m, a)] = now + 3600
            self.silent[("since", m, a)] = now
            return "many"
        if len([s for s in mine if s[0] > now - 60 and s[3] == p]) >= 3:
            return "quiet"
        if len([s for s in mine if s[0] > now - 60]) >= 10:
            return "quiet"
        self.sent.append((now, m, a, p))
        return "push"


MACHINES, AGENTS, PANES = ("m1", "m2"), ("a", "b"), ("p", "q", "r", "s")
GAPS = (0.0, 0.5, 1.0, 5.0, 20.0, 59.0, 61.0, 300.0, 1800.0, 3600.0)
# one small integer per step (cheap to generate and to shrink): which machine, agent, pane, and the gap
steps = st.lists(st.integers(0, 2 * 2 * 4 * len(GAPS) - 1), min_size=1, max_size=60)


def decode(n: int) -> tuple:
    n, g = divmod(n, len(GAPS))
    n, p = divmod(n, 4)
    m, a = divmod(n, 2)
    return MACHINES[m], AGENTS[a], PANES[p], GAPS[g]


@settings(max_examples=10_000, deadline=None, database=None)
@given(steps)
def test_the_limiter_agrees_with_a_plain_reference_model(seq):
    """≥ 10,000 generated sequences of asks: the limiter and the reference decide the same every time."""
    lim, ref = PushLimiter(), Reference()
    now = T0
    for m, a, p, dt in map(decode, seq):
        now += dt
        assert lim.admit(m, a, p, now) == ref.admit(m, a, p, now)


def test_push_text_and_redaction():
    """P2, X1: `Permission needed in <pane>`, the agent's title (≤ 60) and line (≤ 120), secrets masked."""
    got = ask_payload(machine="local", agent="desk", conversation="deploy", pane="Deploy",
                      ask={"id": "a-1", "push_title": "Deploy " + "x" * 80, "push_line": "with AKIAIOSFODNN7EXAMPLE"},
                      redact_on=True)
    assert got["title"] == "Permission needed in Deploy"
    title, line = got["body"].split(" — ")
    assert len(title) == 60 and title.endswith("…")
    assert line == "with [secret]"
    assert got["url"] == "/#/c/local/desk/deploy"
    plain = ask_payload(machine="local", agent="desk", conversation="c", pane="P", ask={"id": "x", "push_line": "AKIAIOSFODNN7EXAMPLE"},
                        redact_on=False)
    assert plain["body"] == "AKIAIOSFODNN7EXAMPLE"


@pytest.mark.parametrize("url,ok", [
    ("https://fcm.googleapis.com/fcm/send/abc", True), ("https://updates.push.services.mozilla.com/wpush/v2/x", True),
    ("http://127.0.0.1:9000/push", False), ("https://localhost:9000/push", False), ("http://[::1]:9000/p", False),
    ("http://push.example.com/x", False), ("https://10.0.0.5/x", False), ("https://192.168.1.2/x", False),
    ("https://169.254.169.254/latest", False), ("ftp://x.example.com", False), ("https://router.local/x", False),
    ("", False), (None, False), ("https://[fd00::1]/x", False),
    # issue 25.6: every spelling the C library connects to
    ("https://10.1/x", False), ("https://0xa.0.0.1/x", False), ("https://169.254.43518/x", False),
    ("https://2130706433/x", False), ("https://012.0.0.1/x", False), ("https://0x7f.1/x", False),
    ("https://[::ffff:10.0.0.1]/x", False), ("https://[::ffff:7f00:1]/x", False), ("https://100.64.0.1/x", False),
    ("https://0.0.0.0/x", False), ("https://[::]/x", False), ("https://[fe80::1]/x", False),
    ("https://8.8.8.8/x", True), ("https://0x08.8.8.8/x", True), ("https://u:p@push.example.com/x", False),
    # issue 25 D3: IPv6 carrying a private IPv4 address, reserved IPv6, Unicode and percent spellings of a host
    ("https://[::10.0.0.1]/", False), ("https://[::127.0.0.1]/", False), ("https://[::8.8.8.8]/", False),
    ("https://[64:ff9b::a00:1]/", False), ("https://[64:ff9b:1::808:808]/", False), ("https://[2002:a00:1::]/", False),
    ("https://[2001:0:4136:e378:8000:63bf:f5ff:fffe]/", False),
    ("https://\uff11\uff10.0.0.1/", False), ("https://%31%30.0.0.1/", False), ("https://10\u30020.0.1/", False),
    ("https://\uff11\uff12\uff17.0.0.1:8472/", False), ("https://%31%32%37.0.0.1:8472/", False),
    ("https://l\uff4fcalhost/x", False), ("https://%ff.example.com/x", False), ("https://a%2fb.example.com/x", False),
    ("https://[64:ff9b::808:808]/", True), ("https://[2002:808:808::]/", True), ("https://[2606:4700::1111]/", True),
    ("https://f\uff43m.googleapis.com/x", True),
])
def test_endpoint_rules(url, ok):
    """Endpoints must be https:// to a public address in every spelling; loopback only with COLLIE_PUSH_LOOPBACK."""
    assert (check_endpoint(url) is None) is ok


@pytest.mark.parametrize("url", ["http://127.0.0.1:9000/push", "https://localhost:9000/push", "http://[::1]:9000/p",
                                 "https://127.1/x"])
def test_loopback_endpoints_only_when_the_owner_allows_them(url):
    assert check_endpoint(url) is not None and check_endpoint(url, loopback_ok=True) is None
    assert check_endpoint("http://10.0.0.1:9000/x", loopback_ok=True) is not None


@pytest.mark.parametrize("url, canonical", [
    ("https://\uff11\uff12\uff17.0.0.1:8472/ok/x", "https://127.0.0.1:8472/ok/x"),
    ("https://%31%32%37.0.0.1:8472/ok/x", "https://127.0.0.1:8472/ok/x"),
    ("https://127.1/x", "https://127.0.0.1/x"), ("https://[::1]:9/x", "https://[::1]:9/x"),
    ("https://F\uff23M.googleapis.com/fcm/send/a?b=c", "https://fcm.googleapis.com/fcm/send/a?b=c"),
])
def test_an_endpoint_is_kept_with_its_host_as_a_client_reads_it(url, canonical):
    """Issue 25 D3: the host is normalised once, at subscribe time (percent-escapes, Unicode), and the subscription
    keeps that spelling — the push goes where a client would go, and is checked there."""
    assert canonical_endpoint(url, loopback_ok=True) == (canonical, None)
    assert parse_subscription(Subscriber(url).json(), None, loopback_ok=True).endpoint == canonical
    assert canonical.startswith("https://fcm") or "loopback" in canonical_endpoint(url)[1]
    assert canonical_endpoint("https://\uff11\uff10.0.0.1/")[1] == "endpoint is in a private address range"


def test_subscriptions_are_parsed_strictly():
    sub = Subscriber("https://push.example.com/x").json()
    assert parse_subscription(sub, "dev1").device == "dev1"
    for bad in ({}, {"endpoint": sub["endpoint"]}, {**sub, "keys": {"p256dh": "AAAA", "auth": sub["keys"]["auth"]}},
                {**sub, "endpoint": "http://push.example.com/x"}, [], "x"):
        with pytest.raises(ValueError):
            parse_subscription(bad, None)


# --- a real lead, a real agent, a fake push service that decrypts -------------------------------------
@pytest.fixture
def pushlab(paths, bridge):
    service = FakePushService()
    run = short_dir()
    agents = Agents()
    yield service, run, agents, paths, bridge
    agents.stop()
    service.close()
    cleanup(run)


@pytest.mark.slow
def test_an_ask_pushes_once_encrypted_end_to_end_and_not_again_after_a_restart(pushlab):
    """P2, P3, RFC 8291/8292: a new ask reaches the push service as ciphertext only; decrypted with the
    subscription's key it reads `Permission needed in Deploy` with the agent's title and line; the VAPID
    signature verifies against /api/push/key; after a lead restart the same open ask does not push again;
    a subscription the push service says is gone (410) is removed."""
    service, run, agents, paths, bridge = pushlab
    b = bridge(env=collie_env(paths, COLLIE_PUSH_LOOPBACK="1"))  # the fake push service listens on loopback
    address = b.wait_ready()["address"]
    token = (paths.state_dir / "api-token").read_text().strip()
    phone = Subscriber(service.url("/ok/phone"))
    gone = Subscriber(service.url("/gone/old"))
    with httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=10) as c:
        key = c.get("/api/push/key").json()["key"]
        for s in (phone, gone):
            assert c.post("/api/push/subscribe", json=s.json()).json() == {"ok": True}
        bad = c.post("/api/push/subscribe", json={**phone.json(), "endpoint": "https://10.1.2.3/x"})
        assert bad.status_code == 400 and "private" in bad.json()["message"]
    agents.start("deployer", "--socket", str(run / "dep" / "a.sock"))
    assert run_collie(paths, "durable", "attach", "desk", "--socket", str(run / "dep" / "a.sock"),
                      "--restart").returncode == 0
    got = service.wait(lambda r: r["path"] == "/ok/phone")
    assert b"Permission needed" not in got["body"] and b"staging" not in got["body"]  # ciphertext only
    assert got["headers"]["Content-Encoding"] == "aes128gcm" and got["headers"]["Urgency"] == "high"
    assert int(got["headers"]["TTL"]) > 0
    from py_vapid import Vapid02

    auth = got["headers"]["Authorization"]
    assert Vapid02.verify(auth) and f"k={key}" in auth
    payload = phone.decrypt(got["body"])
    assert payload["title"] == "Permission needed in Deploy"
    assert payload["body"] == "Deploy to staging? — 3 services will restart."  # the card's text: Allow (B5)
    assert payload["ask"]["allow"] == "yes"
    assert payload["url"] == "/#/c/local/desk/deploy"
    service.wait(lambda r: r["path"] == "/gone/old" and r["status"] == 410)
    wait_for(lambda: control_live(paths)["push"]["subscriptions"] == 1)
    # a lead restart: the same ask is still open, and does not push again (P3)
    assert run_collie(paths, "restart").returncode == 0
    wait_for(lambda: all(a["status"] == "ready" for a in live(paths).values()))
    time.sleep(2)
    assert len([r for r in service.received if r["path"] == "/ok/phone"]) == 1


def control_live(paths) -> dict:
    from collie.crew import control

    return control.call(paths.control_socket, "live")
