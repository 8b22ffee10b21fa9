"""Every request to an agent has a total deadline (issue 9.9; wire-v1 §8 "gives each request a timeout").

A `drip` agent (fixtures/drip.py) answers hello and state at once and every other answer one byte
every 3 s. Per-read timeouts never fire on it; only a deadline on the whole exchange ends such a
read — and its connection must be closed, not left holding a slot of the agent's pool.
"""

from __future__ import annotations

import pytest
import trio

from collie.bridge.bridge import FOOTER_NO_ANSWER
from collie.bridge.client import THROUGH_LANES
from collie.bridge.writer import WRITE_TIMEOUT
from collie.crew.config import AgentConfig
from collie.fixtures.drip import Drip, unix_listener
from tests.apilab import api_lab, rid

READ_DEADLINE = 10.0  # collie.bridge.bridge.READ_TIMEOUT


async def test_a_dripping_agent_is_cut_off_at_the_deadline_and_the_pool_survives(tmp, autojump_clock):
    """9.9: closed-list reads from a dripping agent end at exactly their 10 s deadline with the L5
    footer `The durable agent didn't answer. Try again in a moment.` — however many at once — while
    the agent's state is still read at once; the dripped connections are closed, and the next read
    again gets its full deadline (nothing is left holding the pool)."""
    drip = Drip(every=3.0)
    sock = tmp / "drip.sock"
    async with trio.open_nursery() as agents:
        await agents.start(drip.serve, await unix_listener(str(sock)))
        async with api_lab(tmp, [AgentConfig("drip", socket=str(sock))]) as lab:
            client = lab.bridge.pollers["drip"].client
            for _round in range(2):
                t0 = trio.current_time()
                ended = []
                async with trio.open_nursery() as n:
                    async def closed_list():
                        got = await (await lab.get("/api/agents/local/drip/conversations?closed=1")).get_json()
                        ended.append((trio.current_time() - t0, got["footer"], got["reason"]))

                    for _ in range(2 * THROUGH_LANES + 1):  # more reads than the pool has lanes for them
                        n.start_soon(closed_list)
                    await trio.sleep(1)
                    assert drip.dripping == THROUGH_LANES
                    state = await client.request("GET", "/v1/state")  # the poll still gets a connection
                    assert state.status == 200 and trio.current_time() - t0 == pytest.approx(1)
                assert ended == [(pytest.approx(READ_DEADLINE), FOOTER_NO_ANSWER, "timeout")] * (2 * THROUGH_LANES + 1)
                await trio.sleep(drip.every)  # the agent's next byte finds the connection closed
                assert drip.dripping == 0
        agents.cancel_scope.cancel()


async def test_a_dripped_write_answer_is_unknown_at_its_deadline(tmp, autojump_clock):
    """9.9, B3: a write whose answer drips is `unknown` at the write's 10 s deadline, not hours later."""
    drip = Drip(every=3.0)
    sock = tmp / "drip.sock"
    async with trio.open_nursery() as agents:
        await agents.start(drip.serve, await unix_listener(str(sock)))
        async with api_lab(tmp, [AgentConfig("drip", socket=str(sock))]) as lab:
            t0 = trio.current_time()
            got = await lab.post_json("/api/agents/local/drip/conversations/c/rename",
                                      {"request_id": rid(), "title": "New name"})
            assert got["outcome"] == "unknown" and got["reason"] == "timeout"
            assert trio.current_time() - t0 == pytest.approx(WRITE_TIMEOUT)
        agents.cancel_scope.cancel()
