"""When the bridge reads an agent (features W5; issue 16.1): a change is read at once, only bursts are paced.

The live tests run a real SDK agent and a real bridge on trio's autojump_clock: every time asserted is
exact virtual time, no real sleep.
"""

from __future__ import annotations

import uuid

import pytest
import trio

from collie.bridge.pace import BURST, MIN_GAP, VIEWED_GAP, ReadPace
from collie.bridge.writes import WriteRequest
from tests.livelab import ALL_CAPS, writer_lab

NO_WATCH = [c for c in ALL_CAPS if c != "watch"]
TURN = 0.02  # the agent's own time per turn


# --- the rule, as a plain class -------------------------------------------------------------------
def test_isolated_change_is_read_at_once_a_burst_is_paced():
    """W5, 29: a change after a quiet spell is read at once; BURST reads of changes may start back to back;
    then one read per `MIN_GAP`."""
    pace = ReadPace()
    assert pace.delay(100.0, long_poll=True, cadence=10) == 0.0  # never read: at once
    pace.started(100.0)
    assert pace.delay(130.0, long_poll=True, cadence=10) == 0.0  # a long-poll held 30 s: the next at once
    assert pace.delay(100.05, long_poll=False, cadence=10) == pytest.approx(10 - 0.05)
    for k in range(1, BURST):
        assert pace.delay(100.0, long_poll=True, cadence=10) == 0.0
        pace.started(100.0)
    assert pace.delay(100.0, long_poll=True, cadence=10) == pytest.approx(MIN_GAP)  # the burst is spent
    assert pace.delay(100.05, long_poll=True, cadence=10) == pytest.approx(MIN_GAP - 0.05)


def test_the_change_right_after_a_short_one_is_read_at_once():
    """29: an agent writes a few words, then asks 30 ms later: the ask's read starts at once (before: it
    waited out the 0.2 s gap after the first read, every time)."""
    pace = ReadPace()
    pace.started(0.0)
    pace.finished(True)
    assert pace.delay(0.03, long_poll=True, cadence=10) == 0.0


def test_a_sustained_burst_is_read_once_per_gap():
    """W5, 29: an agent changing without pause is read BURST times at once, then exactly every MIN_GAP
    (five times a second), not once per change; a quiet spell of BURST gaps gives the whole burst back."""
    pace = ReadPace()
    now, reads = 0.0, []
    while len(reads) < BURST + 5:  # every read answers at once with a change (a long-poll of a streaming agent)
        now += pace.delay(now, long_poll=True, cadence=10)
        reads.append(round(now, 9))
        pace.started(now)
        pace.finished(True)
    assert reads == [0.0] * BURST + [0.2, 0.4, 0.6, 0.8, 1.0]
    quiet = now + BURST * MIN_GAP
    for _ in range(BURST):
        assert pace.delay(quiet, long_poll=True, cadence=10) == 0.0
        pace.started(quiet)
    assert pace.delay(quiet, long_poll=True, cadence=10) == pytest.approx(MIN_GAP)


def test_a_viewed_agent_is_read_at_the_pace_of_a_streaming_reply():
    """29, W5: while a phone views the agent, credit comes back every VIEWED_GAP (50 ms): a reply streaming
    20 updates a second is read at each update; when the phone leaves, the gap is MIN_GAP again."""
    pace = ReadPace()
    pace.set_gap(VIEWED_GAP, 0.0)
    now, reads = 0.0, []
    while len(reads) < BURST + 10:
        now += pace.delay(now, long_poll=True, cadence=2)
        reads.append(round(now, 9))
        pace.started(now)
    assert reads == [0.0] * BURST + [0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5]
    pace.set_gap(MIN_GAP, now)
    assert pace.delay(now, long_poll=True, cadence=10) == pytest.approx(MIN_GAP)
    # blind polls while someone waits (no watch) keep MIN_GAP whether viewed or not
    pace = ReadPace()
    pace.set_gap(VIEWED_GAP, 0.0)
    pace.poke(eager=True)
    pace.started(0.0)
    pace.finished(False)
    assert pace.delay(0.0, long_poll=False, cadence=2) == pytest.approx(MIN_GAP)


def test_a_long_poll_answered_304_at_once_is_paced_like_a_plain_poll():
    """W5, wire §3: the agent holds a watched read "up to" `wait` s — 0 is its right. A 304 that came at
    once is followed by the next read a cadence after it started (10 s; 2 s viewed), not every 0.2 s
    (432,000 reads a day); a long-poll held 30 s is followed at once, and a change or a poke still is."""
    pace = ReadPace()
    pace.started(0.0)
    pace.finished(False)
    pace.not_modified()
    assert pace.delay(0.01, long_poll=True, cadence=10) == pytest.approx(10 - 0.01)
    assert pace.delay(0.01, long_poll=True, cadence=2) == pytest.approx(2 - 0.01)
    pace.started(30.0)  # held the whole wait
    pace.finished(False)
    pace.not_modified()
    assert pace.delay(60.0, long_poll=True, cadence=10) == 0.0
    pace.started(60.0)
    pace.finished(True)  # a 200: a change; the next long-poll at once after the gap
    assert pace.delay(60.5, long_poll=True, cadence=10) == 0.0
    pace.started(61.0)
    pace.finished(False)
    pace.not_modified()
    pace.poke()
    assert pace.delay(61.01, long_poll=True, cadence=10) == 0.0


def test_a_wait_asked_for_during_a_read_outlives_the_change_that_read_saw():
    """16.1, W5: someone starts waiting for a turn to end while a read is in flight; that read sees a
    change (the turn starting) — not the one they wait for. Reads stay every `MIN_GAP` until a read
    that started after they asked sees a change (before: back to the 10 s cadence, the end seen 10 s late)."""
    pace = ReadPace()
    pace.started(0.0)
    pace.poke(eager=True)  # asked while the read that started at 0 is in flight
    pace.finished(True)
    assert pace.delay(0.01, long_poll=False, cadence=10) == 0.0  # one more read at once
    pace.started(0.01)
    pace.finished(False)  # the turn has not ended yet
    assert pace.delay(0.02, long_poll=False, cadence=10) == pytest.approx(MIN_GAP - 0.01)
    pace.started(0.21)
    pace.finished(True)  # the end: this read started after the ask
    assert pace.delay(0.22, long_poll=False, cadence=10) == pytest.approx(10 - 0.01)


def test_a_poke_reads_at_once_and_pokes_coalesce_into_one_read():
    """16.1: a poke cuts the gap, even with the burst spent; every poke made before a read starts is
    covered by that read."""
    pace = ReadPace()
    for _ in range(BURST):
        pace.started(0.0)
    pace.poke()
    pace.poke(eager=True)
    assert pace.delay(0.01, long_poll=True, cadence=10) == 0.0
    pace.started(0.01)
    assert pace.delay(0.02, long_poll=True, cadence=10) == pytest.approx(MIN_GAP - 0.01)


def test_a_waiter_without_watch_reads_every_gap_until_a_change():
    """16.1: `eager` (someone waits for a turn) polls every MIN_GAP, back to the cadence after a change."""
    pace = ReadPace()
    pace.poke(eager=True)
    pace.started(0.0)
    pace.finished(changed=False)
    assert pace.delay(0.0, long_poll=False, cadence=10) == pytest.approx(MIN_GAP)
    pace.started(0.2)
    pace.finished(changed=True)
    assert pace.delay(0.2, long_poll=False, cadence=10) == pytest.approx(10)


# --- live: a real agent and bridge ----------------------------------------------------------------
async def quick_turn(pane, text):
    await trio.sleep(TURN)
    pane.reply(f"done: {text}")


def setup(tmp, caps=ALL_CAPS):
    return writer_lab(tmp, caps=caps, on_send=quick_turn, settle=1)


async def wait_turn_ended(b, turn: int) -> None:
    """What the inbox does while an item runs: ask for a read, wait for the bridge's view to move."""
    while True:
        conv = b.readers["desk"].conversations["c"]
        if conv.turn >= turn and conv.state == "idle":
            return
        b.read_soon("desk")
        await b.wait_changed()


async def test_queued_sends_run_at_the_agents_pace(tmp, autojump_clock):
    """16.1, I2: ten sends one after another, each waiting for the previous turn to end, to an agent
    whose turns take 20 ms: each turn's end is seen by the bridge exactly 20 ms after its send (before:
    0.2 s, the read gap), so ten take 0.2 s, not 2 s."""
    async with setup(tmp) as (collie, pane, b, w):
        took = []
        for i in range(10):
            t0 = trio.current_time()
            turn = b.readers["desk"].conversations["c"].turn
            rec = await w.write(WriteRequest(request_id=str(uuid.uuid4()), op="send", agent="desk",
                                             conversation="c", text=f"n{i}", turn=turn))
            assert rec.outcome == "sent"
            await wait_turn_ended(b, rec.turn)
            took.append(round(trio.current_time() - t0, 6))
        assert took == [TURN] * 10
        assert pane.turn == 10


async def test_a_burst_of_changes_is_read_at_most_every_gap(tmp, autojump_clock):
    """W5, 29: with nobody waiting, an agent changing every 10 ms for 1 s is read at once at the first
    change (leading edge), BURST reads at most at once, then at most once per 0.2 s — not once per change."""
    async with setup(tmp) as (collie, pane, b, w):
        start = trio.current_time()
        reply = pane.reply("", final=False)
        seen_first = None
        async with trio.open_nursery() as n:
            async def watch_first():
                nonlocal seen_first
                while not b.readers["desk"].logs.get("c") or not any(
                        i.get("final") is False for i in b.readers["desk"].logs["c"].items.values()):
                    await b.wait_changed()
                seen_first = trio.current_time()
            n.start_soon(watch_first)
            for k in range(100):
                reply.append(f"w{k} ")
                await trio.sleep(0.01)
        reply.finish()
        assert seen_first == pytest.approx(start, abs=1e-6)
        reads = [t for t in collie.recorder.times("/v1/state") if start <= t < start + 1.0]
        # a bucket of BURST reads refilled one per MIN_GAP: any BURST + 1 reads span at least MIN_GAP
        assert all(b - a >= MIN_GAP - 1e-6 for a, b in zip(reads, reads[BURST:])), reads
        assert len(reads) <= BURST + 1.0 / MIN_GAP


async def test_an_ask_right_after_a_short_change_is_seen_at_once(tmp, autojump_clock):
    """29, W5: an agent writes a word, another 30 ms later, then asks 30 ms after that (ten times, after a
    quiet second each): the bridge's view has each ask the moment it is raised (before: 0.14 s later
    every time, the rest of the 0.2 s gap after the read of the first word)."""
    async with setup(tmp) as (collie, pane, b, w):
        lags = []
        for k in range(10):
            reply = pane.reply("", final=False)
            reply.append(f"w{k} ")
            await trio.sleep(0.03)
            reply.append(f"x{k} ")
            await trio.sleep(0.03)
            asked = trio.current_time()
            async with trio.open_nursery() as n:
                async def ask(k=k):
                    await pane.ask(kind="permission", title=f"Go {k}?", tool_call_id=f"t{k}",
                                   options=[{"id": "y", "label": "Yes", "role": "allow"}])
                n.start_soon(ask)
                while not any(a.title == f"Go {k}?" for a in b.readers["desk"].conversations["c"].asks):
                    await b.wait_changed()
                lags.append(round(trio.current_time() - asked, 6))
                n.cancel_scope.cancel()
            reply.finish()
            await trio.sleep(1)  # a quiet spell
        assert lags == [0.0] * 10


async def test_a_viewed_agent_streaming_is_read_at_each_update(tmp, autojump_clock):
    """29, W5: a viewed agent streaming a reply (an update every 60 ms for 3 s) is read at each update:
    the bridge's view has every update the moment it is made; the agent is not read more often than
    BURST + one per VIEWED_GAP."""
    async with setup(tmp) as (collie, pane, b, w):
        b.set_viewing("desk", True)
        await trio.sleep(1)
        start = trio.current_time()
        reply = pane.reply("", final=False)
        lags = []
        for k in range(50):
            reply.append(f"w{k} ")
            made = trio.current_time()
            while not any(f"w{k} " in str(i.get("text", "")) for i in b.readers["desk"].logs.get("c").items.values()) \
                    if b.readers["desk"].logs.get("c") else True:
                await b.wait_changed()
            lags.append(round(trio.current_time() - made, 6))
            await trio.sleep(0.06 - (trio.current_time() - made))
        reply.finish()
        assert lags == [0.0] * 50
        took = trio.current_time() - start
        reads = [t for t in collie.recorder.times("/v1/state") if start <= t]
        assert len(reads) <= BURST + took / VIEWED_GAP + 1


async def test_a_waiter_without_watch_sees_the_turn_end_within_a_gap(tmp, autojump_clock):
    """16.1, W5: without `watch`, someone waiting for a turn (read_soon) gets reads every 0.2 s until it
    ends, instead of the 10 s cadence; then the cadence is back."""
    async with setup(tmp, caps=NO_WATCH) as (collie, pane, b, w):
        t0 = trio.current_time()
        rec = await w.write(WriteRequest(request_id=str(uuid.uuid4()), op="send", agent="desk",
                                         conversation="c", text="hi", turn=0))
        assert rec.outcome == "sent"
        await wait_turn_ended(b, rec.turn)
        assert trio.current_time() - t0 == pytest.approx(MIN_GAP)
        before = len(collie.recorder.times("/v1/state"))
        await trio.sleep(9.5)
        assert len(collie.recorder.times("/v1/state")) == before  # back to the 10 s cadence


async def test_an_idle_inbox_rests_and_wakes_for_the_next_queued_send(tmp, autojump_clock):
    """Issue 16 (idle CPU), I2: with nothing waiting and nothing to commit the inbox looks once a minute,
    not every second; after such a rest a send queued behind a running turn still goes to the agent
    the moment that turn ends."""
    from collie.lead.inbox import core as inbox_core
    from tests.livelab import inbox_lab

    gate = trio.Event()
    texts: list[tuple[float, str]] = []

    async def on_send(pane, text):
        texts.append((trio.current_time(), text))
        await gate.wait()
        pane.reply(f"got {text}")

    async with inbox_lab(tmp, on_send=on_send) as (collie, pane, b, writer, inbox):
        ticks: list[float] = []
        tick = inbox._tick
        inbox._tick = lambda nursery: (ticks.append(trio.current_time()), tick(nursery))[1]
        await trio.sleep(300)
        assert 4 <= len(ticks) <= 6  # every IDLE_TICK (60 s), not 300 times
        assert inbox_core.IDLE_TICK == 60.0

        def send(text):
            return WriteRequest(request_id=str(uuid.uuid4()), op="send", agent="a0", conversation="c", text=text)
        first = await inbox.submit("local", send("first"), sender=None)
        second = await inbox.submit("local", send("second"), sender=None)
        assert (first.outcome, second.outcome) == ("sent", "queued")
        await trio.sleep(5)
        opened = trio.current_time()
        gate.set()
        while (await inbox.get(second.request_id)).state != "done":
            await trio.sleep(0.001)
        assert [t for _, t in texts] == ["first", "second"]
        assert texts[1][0] - opened < 0.01  # at once, not at the next rest's end


async def test_an_agent_answering_its_long_polls_at_once_is_read_at_the_plain_cadence(tmp, autojump_clock):
    """W5, wire §3: an agent that declares `watch` but answers `?wait=30` with an immediate 304 ("up to"
    30 s) is read every 10 s when idle — 6 reads a minute, as plain polling — not every 0.2 s (300)."""
    async with setup(tmp) as (collie, pane, b, w):
        poller = b.pollers["desk"]
        inner = poller.client.request
        reads = []

        async def at_once(method, path, **kw):  # the agent does not hold the read at all
            if path.startswith("/v1/state"):
                reads.append(trio.current_time())
                path = "/v1/state"
            return await inner(method, path, **kw)
        poller.client.request = at_once  # from the end of the long-poll in flight (held its 30 s)
        await trio.sleep(90)
        gaps = [round(b - a, 6) for a, b in zip(reads, reads[1:])]
        assert len(reads) >= 6 and set(gaps) == {10.0}, reads
        assert b.status("desk").status == "ready"


async def test_an_agent_answering_200_unchanged_at_once_is_read_at_the_plain_cadence(tmp, autojump_clock):
    """W5, wire §3: an agent that declares `watch` but neither holds the read nor answers `304` (it
    sends its unchanged state, same `rev`, at once) is read every 10 s when idle, not every 0.2 s."""
    async with setup(tmp) as (collie, pane, b, w):
        poller = b.pollers["desk"]
        inner = poller.client.request
        reads = []

        async def no_tags(method, path, **kw):  # the agent ignores If-None-Match and `wait`
            if path.startswith("/v1/state"):
                reads.append(trio.current_time())
                path, kw["headers"] = "/v1/state", {}
            return await inner(method, path, **kw)
        poller.client.request = no_tags
        await trio.sleep(90)
        gaps = [round(b - a, 6) for a, b in zip(reads, reads[1:])]
        assert len(reads) >= 6 and set(gaps) == {10.0}, reads
        assert b.status("desk").status == "ready"
