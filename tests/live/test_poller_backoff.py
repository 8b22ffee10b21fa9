"""A poke must not defeat the backoff of an agent that cannot be reached (features W5; found by the
phone app's browser test: opening an Unreachable agent's list stalled the whole lead)."""

from __future__ import annotations

import pytest
import trio

from collie.crew.config import AgentConfig
from tests.livelab import bridge_for, cleanup, short_dir


@pytest.fixture
def tmp():
    d = short_dir()
    yield d
    cleanup(d)


async def test_viewing_an_unreachable_agent_keeps_its_backoff_and_the_loop_running(tmp, autojump_clock):
    """A phone viewing an agent whose socket is missing pokes its poller: that buys one try at once, then
    the backoff (1, 2, 4 … s, at most the 2 s viewed cadence) holds — about 6 hellos in 10 s, and every
    other task keeps running. Before, a failed hello never consumed the poke, so the poller retried in a
    loop with no checkpoint and the bridge (the lead's whole event loop) stopped answering."""
    ghost = AgentConfig("ghost", socket=str(tmp / "run" / "ghost.sock"))
    async with bridge_for([ghost], tmp) as b:
        poller = b.pollers["ghost"]
        await trio.sleep(1)
        tries = [0]
        inner = poller.client.request

        async def counted(*args, **kw):
            tries[0] += 1
            if tries[0] > 1000:
                raise RuntimeError("the poller retries without end")
            return await inner(*args, **kw)
        poller.client.request = counted
        ticks = 0
        start = trio.current_time()
        b.set_viewing("ghost", True)
        while trio.current_time() - start < 10:
            await trio.sleep(0.5)
            ticks += 1
        assert b.readers["ghost"].status == "unreachable"
        assert ticks == 20  # the event loop was never held
        assert 3 <= tries[0] <= 8, tries[0]
