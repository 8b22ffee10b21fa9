"""Never lost, never doubled (issue 4 proof): kill -9 the bridge at every journal write point and at
random moments during a burst of sends and answers, sometimes restarting the agent too; restart;
let retries run; count what the agent applied. The full matrix with figures: bench/faults.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.faultlab import trial
from tests.livelab import short_dir

pytestmark = pytest.mark.slow

CASES = [(f"{point}:{n}", None, restart) for point in ("after_begin", "after_send", "after_finish")
         for n in (2, 9) for restart in (False, True)]
CASES += [(None, delay, restart) for delay in (0.15, 0.4) for restart in (False, True)]


@pytest.mark.parametrize(("crash_at", "random_kill", "restart_agent"), CASES)
def test_no_duplicate_and_no_lost_acknowledged_write(crash_at, random_kill, restart_agent):
    """A request id is applied at most once and every acknowledged write is applied, whatever crashes."""
    base = short_dir("cf")
    result = trial(base, crash_at=crash_at, random_kill=random_kill, restart_agent=restart_agent, seed=hash(
        (crash_at, random_kill, restart_agent)) & 0xFFFF, burst=40)
    assert result["duplicates"] == 0, result
    assert result["losses"] == 0, result
    assert result["acked"] > 0
    if crash_at:
        assert result["crashed"], "the crash point was never reached"
