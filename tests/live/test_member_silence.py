"""A member silent for 30 s is offline (crew.md §2, crewwire.OFFLINE_AFTER), on trio's virtual clock.

The lead's watchdog (`Hub.run`) ticks every SAVE_EVERY (2 s) and closes, with the reason `silent`, a
link whose last frame is more than OFFLINE_AFTER old; closing it is what takes the member offline (the
same path as a link that ends). Here the real hub runs in-process with a link that sends nothing, so
the exact virtual second it is closed is asserted, in milliseconds of real time. (tests/system/test_crew_e2e.py
keeps the real processes' part: work queued for an offline member survives a lead restart and runs
once when the member is back — without waiting 30 real seconds for silence.)
"""

from __future__ import annotations

import pytest
import trio

from collie.bridge.state import prepare_state
from collie.crew.config import BridgeConfig
from collie.crew.crewwire import OFFLINE_AFTER
from collie.lead.daemon import LeadDaemon, parser
from collie.lead.members.hub import SAVE_EVERY
from collie.lead.members.link import Conn
from collie.lead.members.session import Member


@pytest.fixture
def hub(paths, monkeypatch):
    """The lead's real hub. Its every-15 s token reload (a worker thread, during which the virtual clock
    may jump and shift the ticks) is not part of this rule: it is left out, so the ticks are exact."""
    prepare_state(paths)
    d = LeadDaemon(parser().parse_args([]), paths, BridgeConfig(agents=(), programs_off=False, sources_count=0))
    monkeypatch.setattr(d.hub.records, "tokens_due", lambda now: False)
    yield d.hub
    d.inbox.db.close()
    d.hub.store.close()
    d.journal.close()


async def silent_after(hub, frames_at: list[float]) -> tuple[float, str]:
    """Run the watchdog with one member whose link sent a frame at each of `frames_at` (virtual seconds
    after the start) and nothing else: (when its link was closed, the reason)."""
    t0 = trio.current_time()
    conn = Conn(ws=None, label="box", boot="boot-A")
    hub.members["box"] = Member("box", conn=conn)
    async with trio.open_nursery() as n:
        n.start_soon(hub.run)
        for at in frames_at:
            await trio.sleep_until(t0 + at)
            conn.last_frame = trio.current_time()  # what the link's reader does with each frame
        await conn.closed.wait()
        closed = trio.current_time() - t0
        n.cancel_scope.cancel()
    return closed, conn.close_reason


async def test_a_silent_link_is_closed_at_the_first_tick_past_thirty_seconds(hub, autojump_clock):
    """Last frame at 0: at the 30 s tick it is exactly 30 s old (not more), still online; the 32 s tick
    closes it, reason `silent`."""
    assert (OFFLINE_AFTER, SAVE_EVERY) == (30.0, 2.0)
    closed, reason = await silent_after(hub, [])
    assert closed == pytest.approx(32.0, abs=1e-9) and reason == "silent"


async def test_each_frame_starts_the_thirty_seconds_again(hub, autojump_clock):
    """Frames at 25 s and 49 s: a member that speaks, however rarely, stays; silent from 49 s, its link is
    closed at the first tick more than 30 s later (80 s)."""
    closed, reason = await silent_after(hub, [25.0, 49.0])
    assert closed == pytest.approx(80.0, abs=1e-9) and reason == "silent"
