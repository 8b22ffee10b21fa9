"""The door's plain parts: pairing codes and devices, the Host/Origin rules, the event log (issue 11)."""

from __future__ import annotations

import sqlite3

import pytest

from collie.lead.door.devices import CODE_TTL, TICKET_TTL, TICKETS_PER_DEVICE, Devices, PairingRefused, clean_name
from collie.lead.door.pairing import Door, split_host
from collie.lead.door.tls import covered, fingerprint_pem, make_certificate
from collie.lead.feed.core import EventLog, diff_rows

T0 = 1_800_000_000.0


@pytest.fixture
def devices(tmp_path):
    d = Devices(tmp_path / "devices.sqlite")
    yield d
    d.close()


def test_a_code_pairs_once_and_only_within_ten_minutes(devices, tmp_path):
    """A pairing code is single use and valid 10 minutes; a wrong, used or expired code says which."""
    code, expires = devices.new_code(T0)
    assert expires == T0 + CODE_TTL
    late, _ = devices.new_code(T0)
    dev, credential, key = devices.redeem(code, "Pixel 9", T0 + CODE_TTL - 1)
    assert dev.name == "Pixel 9" and devices.device_for([credential], key) is dev
    with pytest.raises(PairingRefused) as used:
        devices.redeem(code, "again", T0 + 1)
    assert used.value.code == "used"
    with pytest.raises(PairingRefused) as expired:
        devices.redeem(late, "late", T0 + CODE_TTL)
    assert expired.value.code == "expired"
    for bad in ("nope", "", None, 5, "x" * 500):
        with pytest.raises(PairingRefused) as unknown:
            devices.redeem(bad, "x", T0)
        assert unknown.value.code == "unknown"


def test_only_hashes_are_stored_and_devices_survive_a_restart(devices, tmp_path):
    """The lead stores hashes only; a paired phone stays paired across a lead restart; revoking forgets it."""
    code, _ = devices.new_code(T0)
    dev, credential, key = devices.redeem(code, "phone", T0)
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir() if p.is_file())
    assert code.encode() not in raw and credential.encode() not in raw and key.encode() not in raw
    devices.close()
    again = Devices(tmp_path / "devices.sqlite")
    assert again.device_for([credential], key).name == "phone"
    revoked: list[str] = []
    again.on_revoke.append(revoked.append)
    assert again.revoke("phone").id == dev.id and revoked == [dev.id]
    assert again.device_for([credential], key) is None
    assert again.revoke("phone") is None
    again.close()
    assert sqlite3.connect(tmp_path / "devices.sqlite").execute("SELECT COUNT(*) FROM devices").fetchone() == (0,)


def test_device_names_are_cleaned_and_unique(devices):
    assert clean_name("Pixel\x1b[31m\nevil", "phone") == "Pixel[31mevil"
    assert clean_name("", "phone") == "phone" and clean_name(None, "phone") == "phone"
    assert len(clean_name("x" * 100, "phone")) == 40
    names = []
    for _ in range(3):
        code, _ = devices.new_code(T0)
        names.append(devices.redeem(code, "iPhone", T0)[0].name)
    assert names == ["iPhone", "iPhone 2", "iPhone 3"]


def test_last_seen_is_written_at_most_once_a_minute(devices):
    code, _ = devices.new_code(T0)
    dev, _, _ = devices.redeem(code, "p", T0)
    assert devices.seen(dev, T0 + 30) is False
    assert devices.seen(dev, T0 + 60) is True
    devices.write_seen(dev)
    assert devices.seen(dev, T0 + 90) is False and dev.last_seen == T0 + 90


@pytest.mark.parametrize("host,ok", [
    ("127.0.0.1:8470", True), ("localhost:8470", True), ("[::1]:8470", True), ("LOCALHOST:8470", True),
    ("127.0.0.1", True), ("evil.example:8470", False), ("127.0.0.1:9999", False), ("", False),
    ("localhost.:8470", True), ("127.0.0.1.evil.example:8470", False), ("10.0.0.5:8470", False),
])
def test_host_rule_refuses_names_the_lead_does_not_serve(host, ok):
    """DNS rebinding: only the names this lead serves pass."""
    assert Door("127.0.0.1", 8470, tls=False).host_ok(host) is ok


def test_names_given_with_name_are_served():
    door = Door("0.0.0.0", 8470, tls=True, names=["collie.lan"])
    assert door.host_ok("collie.lan:8470") and door.host_ok("127.0.0.1:8470")
    assert not door.host_ok("evil.example:8470")


@pytest.mark.parametrize("origin,ok", [
    (None, True), ("https://127.0.0.1:8470", True), ("https://localhost:8470", True),
    ("http://127.0.0.1:8470", False), ("https://evil.example", False), ("null", False),
    ("https://127.0.0.1:1", False), ("https://127.0.0.1:8470.evil", False),
])
def test_origin_rule(origin, ok):
    assert Door("127.0.0.1", 8470, tls=True).origin_ok(origin) is ok


def test_split_host():
    assert split_host("[::1]:80") == ("::1", 80)
    assert split_host("Example.COM") == ("example.com", None)
    assert split_host("a:b:c") == ("a:b:c", None)


def test_event_log_gives_what_was_missed_or_says_it_cannot():
    """A reconnecting phone gets the events after its last id, or None (then a fresh snapshot)."""
    log = EventLog(boot="b1", keep=3)
    ids = [log.append("row", {"n": n}).id for n in range(5)]
    assert [e.data["n"] for e in log.since(ids[2])] == [3, 4]
    assert log.since(ids[4]) == []
    assert log.since(ids[0]) is None  # older than what is kept
    assert log.since("other-3") is None and log.since(None) is None and log.since("b1-99") is None
    assert log.since("b1-x") is None


def test_diff_rows():
    assert diff_rows({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4}) == (["b", "c"], [])
    assert diff_rows({"a": 1}, {}) == ([], ["a"])


def test_generated_certificate_covers_its_names():
    cert, key = make_certificate(["localhost", "127.0.0.1", "collie.lan"])
    assert covered(cert, ["localhost", "127.0.0.1"]) and not covered(cert, ["other.lan"])
    fp = fingerprint_pem(cert)
    assert len(fp.split(":")) == 32 and fp == fp.upper()
    assert b"PRIVATE KEY" in key


class FakeBridge:
    readers: dict = {}

    def __init__(self) -> None:
        self.on_agent_change = []


async def test_a_viewing_lease_lapses_when_not_renewed(autojump_clock):
    """W5: `POST …/viewing {"on": true}` keeps an agent on 2 s polling for 60 s unless repeated, so a
    phone that disappears never keeps it there; repeating it renews; `on: false` ends it at once."""
    import trio

    from collie.lead.feed.events import Feed

    calls: list = []

    async def set_viewing(machine, agent, on):
        calls.append((trio.current_time(), machine, agent, on))

    feed = Feed(FakeBridge(), set_viewing=set_viewing)
    async with trio.open_nursery() as n:
        await n.start(feed.run)
        t0 = trio.current_time()
        await feed.lease_view("local", "desk", True)
        await trio.sleep(30)
        await feed.lease_view("local", "desk", True)  # renewed at +30: lapses at +90
        await trio.sleep(100)
        await feed.lease_view("m1", "lab", True)
        await feed.lease_view("m1", "lab", False)
        n.cancel_scope.cancel()
    on, off, on2, off2 = calls
    assert on[1:] == ("local", "desk", True) and on[0] == t0
    assert off[1:] == ("local", "desk", False) and 90 <= off[0] - t0 <= 100
    assert on2[1:] == ("m1", "lab", True) and off2[1:] == ("m1", "lab", False) and off2[0] == on2[0]


async def test_a_change_while_a_view_is_read_is_not_hidden_by_the_older_read(autojump_clock):
    """W4, R3: opening a conversation reads its pane and items (which may wait on the journal or a
    member). A change published meanwhile reaches the channel first; the view's full set that follows
    must not be the older read, or the phone shows the ask open until the next change (in CI: an ask
    that expired while the chat opened never got its `Timed out before an answer:` line)."""
    import trio

    from collie.lead.feed.events import Feed

    class RacyFeed(Feed):
        state = {"pane": {"asks": ["a1"]}, "items": [{"seq": 1, "kind": "ask", "ask_id": "a1", "end": None}]}
        first = True

        async def pane_of(self, machine, agent, conv):
            return dict(self.state["pane"])

        async def items_of(self, machine, agent, conv, since=None):
            items = [dict(i) for i in self.state["items"]]
            if self.first:  # the first read is answered late, with what stood before the change
                self.first = False
                await trio.sleep(1)
            return {"items": items, "full": True}

    feed = RacyFeed(FakeBridge())
    ch = feed.open(None)
    async with trio.open_nursery() as n:
        await n.start(feed.run)
        await feed.set_view(ch, ("m1", "lab", "c1"))

        async def expire():
            await trio.sleep(0.5)
            RacyFeed.state = {"pane": {"asks": []}, "items": [{"seq": 1, "kind": "ask", "ask_id": "a1",
                                                               "end": "expired"}]}
            feed.touch("m1", "lab")

        n.start_soon(expire)
        for ev in await feed.view_events(ch):
            ch.offer(ev)
        await trio.sleep(1)
        n.cancel_scope.cancel()
    pane, items = None, {}
    while True:  # what the phone ends with after applying every event in order
        try:
            ev = ch.receive.receive_nowait()
        except trio.WouldBlock:
            break
        if ev.kind == "pane":
            pane = ev.data["pane"]
        elif ev.kind == "items":
            items = ({} if ev.data["full"] else items) | {i["seq"]: i for i in ev.data["items"]}
    assert pane == {"asks": []}
    assert items[1]["end"] == "expired"


async def test_a_members_ask_reaches_a_viewing_phone_without_waiting_for_a_read_of_the_member(
        monkeypatch, autojump_clock):
    """I7/W5, issue 11 (latency): once a conversation is viewed, an ask arriving in a member's view goes out
    as a `pane` event in the same pass — not after the read of the member's recent-send lines (a round trip
    that took most of the tail under load); when those lines moved, a corrected pane follows the read."""
    import trio

    from collie.lead.feed import events

    monkeypatch.setattr(events, "pane_state", lambda reader, conv, *, recent_sends, machine, online: {
        "ask": reader.ask, "recent": list(recent_sends)})
    monkeypatch.setattr(events, "member_row", lambda member, name, reader: {"name": name, "machine": "m1",
                                                                           "waiting": 1 if reader.ask else None})

    class Reader:
        ask = None
        status, reason = "ready", None
        conversations: dict = {}

    class Member:
        online, offline_since = True, None

        def __init__(self):
            self.readers = {"lab": Reader()}

    class Hub:
        def __init__(self):
            self.members, self.on_member_change, self.on_view_change = {"m1": Member()}, [], []
            self.lines = ["sent · hello"]

        def reader(self, machine, agent):
            return self.members[machine].readers.get(agent)

        async def read(self, machine, agent, what, args):
            await trio.sleep(1.0)  # a round trip to the member, slow on purpose
            return {"lines": list(self.lines)} if what == "recent_sends" else None

    bridge, hub = FakeBridge(), Hub()
    bridge.readers = {}
    feed = events.Feed(bridge, hub)
    ch = feed.open(None)
    ch.view = ("m1", "lab", "chat")
    seen: list = []
    async with trio.open_nursery() as n:
        await n.start(feed.run)
        feed.touch("m1", None)
        await trio.sleep(5)  # the first pass learns the recent-send lines
        first = []
        while True:
            try:
                first.append(ch.receive.receive_nowait())
            except trio.WouldBlock:
                break
        assert [e.kind for e in first if e.kind == "pane"] == ["pane"]

        async def watch():
            async for ev in ch.receive:
                if ev.kind == "pane":
                    seen.append((trio.current_time(), ev.data["pane"]))
        n.start_soon(watch)
        t0 = trio.current_time()
        hub.members["m1"].readers["lab"].ask = "Deploy?"
        feed.touch("m1", None)
        await trio.sleep(5)
        assert seen[0] == (t0, {"ask": "Deploy?", "recent": ["sent · hello"]})  # at once, no read waited for
        assert len(seen) == 1
        hub.lines = ["sent · hello", "sent · deploy"]
        hub.members["m1"].readers["lab"].ask = None
        t1 = trio.current_time()
        feed.touch("m1", None)
        await trio.sleep(5)
        assert seen[1] == (t1, {"ask": None, "recent": ["sent · hello"]})
        assert seen[2] == (t1 + 1.0, {"ask": None, "recent": ["sent · hello", "sent · deploy"]})
        n.cancel_scope.cancel()


async def test_a_phone_that_abandons_its_live_channels_cannot_take_everyone_elses(autojump_clock):
    """Issue 11 (W4, a hostile or leaky phone): one paired phone keeps at most 16 live channels —
    one more ends its oldest — and when its ended ones do not finish either it alone is refused
    (`503 busy`); another phone still gets a channel. The local credential is not capped per phone."""
    import pytest

    from collie.lead.feed.core import MAX_CHANNELS, PER_DEVICE
    from collie.lead.feed.events import Feed

    feed = Feed(FakeBridge())
    first = [feed.open("phone-a") for _ in range(PER_DEVICE)]
    newer = feed.open("phone-a")
    assert first[0].closed.is_set() and first[0].close_reason == "replaced"
    assert not newer.closed.is_set() and not any(c.closed.is_set() for c in first[1:])
    for _ in range(PER_DEVICE - 1):  # none of the ended ones finish (their streams are stuck)
        feed.open("phone-a")
    with pytest.raises(OverflowError, match="this phone has 32 live channels"):
        feed.open("phone-a")
    assert not feed.open("phone-b").closed.is_set()
    for _ in range(MAX_CHANNELS - len(feed.channels)):
        feed.open(None)
    with pytest.raises(OverflowError, match=f"{MAX_CHANNELS} live channels"):
        feed.open(None)


def test_both_halves_of_one_device_are_needed_and_a_planted_cookie_does_not_shadow_them(devices):
    """Issue 25.1: a cookie without its device key (what another port of the host receives) opens nothing,
    nor a key with another device's cookie; among many cookies of the name the matching one counts; a
    live ticket works only with its device's cookie, for 60 s; a device from before keys must pair again."""
    one = devices.redeem(devices.new_code(T0)[0], "one", T0)
    two = devices.redeem(devices.new_code(T0)[0], "two", T0)
    (d1, c1, k1), (d2, c2, k2) = one, two
    assert devices.device_for([c1], None) is None and devices.device_for([c1], "") is None
    assert devices.device_for([c1], k2) is None and devices.device_for([c2], k1) is None
    assert devices.device_for(["planted", "x" * 300, c1], k1) is d1
    # planted values ahead of the phone's, any number of them (issue 25 D1): the key names the device
    assert devices.device_for(["planted"] * 500 + [c1], k1) is d1
    assert devices.device_for(["planted"] * 500 + [c2], k1) is None
    ticket = devices.new_ticket(d1, T0)
    assert devices.device_for_ticket([c1], ticket, T0 + TICKET_TTL - 1) is d1
    assert devices.device_for_ticket(["planted"] * 500 + [c1], ticket, T0) is d1
    assert devices.device_for_ticket([c2], ticket, T0) is None and devices.device_for_ticket([c1], "nope", T0) is None
    assert devices.device_for_ticket([c1], ticket, T0 + TICKET_TTL) is None
    devices.db.execute("UPDATE devices SET key_hash=NULL WHERE id=?", (d2.id,))
    devices.by_hash[d2.hash].key_hash = None
    assert devices.device_for([c2], k2) is None and devices.paired_before_keys([c2])


def test_one_phone_asking_for_tickets_again_and_again_drops_only_its_own(devices):
    """Issue 42.9 (found from outside): 256 tickets were kept for all phones together, oldest dropped first, so
    300 requests by phone A made phone B's fresh ticket 401. Now a phone keeps at most TICKETS_PER_DEVICE open
    tickets (its own oldest goes); another phone's ticket is never dropped for it."""
    (d1, c1, _k1), (d2, c2, _k2) = (devices.redeem(devices.new_code(T0)[0], name, T0) for name in ("one", "two"))
    theirs = devices.new_ticket(d2, T0)
    mine = [devices.new_ticket(d1, T0 + i / 100) for i in range(300)]
    assert devices.device_for_ticket([c2], theirs, T0 + 4) is d2
    assert len(devices.tickets) == 1 + TICKETS_PER_DEVICE  # bounded, whatever the flood
    assert all(devices.device_for_ticket([c1], t, T0 + 4) is d1 for t in mine[-TICKETS_PER_DEVICE:])
    assert devices.device_for_ticket([c1], mine[-TICKETS_PER_DEVICE - 1], T0 + 4) is None  # its own oldest went


def test_a_refused_link_names_the_command_the_lead_was_given(tmp_path):
    """Issue 26 check: in `collie demo` a used link said "Run `collie pair` again", which there answers
    "no bridge is running"; the lead's COLLIE_PAIR_COMMAND (its .env, set by the demo) names the command."""
    from collie.crew.config import load_env
    from collie.crew.paths import Paths
    from collie.lead.daemon import pair_command

    paths = Paths(config_dir=tmp_path / "cfg", state_dir=tmp_path / "state")
    paths.config_dir.mkdir(mode=0o700)
    assert pair_command(load_env(paths, {})) == "collie pair"
    paths.dotenv.write_text('COLLIE_PAIR_COMMAND="/home/you/collie/.venv/bin/collie demo pair"\n')
    paths.dotenv.chmod(0o600)
    again = pair_command(load_env(paths, {}))
    assert again == "/home/you/collie/.venv/bin/collie demo pair"
    for bad in ("collie pair\x1b[2J", "x" * 201, "`rm -rf`", " collie"):  # one clean printable line, or the default
        assert pair_command({"COLLIE_PAIR_COMMAND": bad}) == "collie pair"
    d = Devices(tmp_path / "devices.sqlite", again=again)
    code, _ = d.new_code(T0)
    late, _ = d.new_code(T0)
    d.redeem(code, "phone", T0)
    for c, at, words in ((code, T0 + 1, "This pairing link was already used: a link pairs one phone."),
                         (late, T0 + CODE_TTL, "This pairing link expired (links last 10 minutes)."),
                         ("nope", T0, "This pairing link is not valid.")):
        with pytest.raises(PairingRefused) as refused:
            d.redeem(c, "again", at)
        # issue 36: said to whoever holds the phone, who may never have run it: where a new link comes from
        assert str(refused.value) == (f"{words} A new link comes from `/home/you/collie/.venv/bin/collie demo pair` "
                                      "on the lead: ask whoever runs it.")
    d.close()
    plain = Devices(tmp_path / "plain.sqlite")
    code, _ = plain.new_code(T0)
    plain.redeem(code, "phone", T0)
    with pytest.raises(PairingRefused, match=r"^This pairing link was already used: a link pairs one phone\. A new link comes from `collie pair` "
                       r"on the lead: ask whoever runs it\.$"):
        plain.redeem(code, "again", T0)
    plain.close()
