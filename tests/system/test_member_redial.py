"""A member dials its lead again at once after the lead went away (restart), and is back within seconds of
the restarted lead answering (issue 36.4, crew.md §2; docs/crew.md "Reconnecting").

The rule (collie.member.link.Redial) runs on virtual time with a jitter that returns the middle of its range, so
every try happens at an exact time; then real processes: a lead restarted with `collie restart`, again
and again, and the member timed back online after each."""

from __future__ import annotations

import socket
import time

import pytest
import trio
from trio_websocket import CloseReason, ConnectionClosed

from collie.crew import control
from collie.crew.crewconfig import CrewConfig
from collie.member.link import BACKOFF_MAX, Link
from tests.crewlab import Crew, wait_for

TOKEN = "0123456789abcdef" * 4


class Middle:
    """A jitter that always takes the middle of its range (×1.0)."""

    def uniform(self, a: float, b: float) -> float:
        return (a + b) / 2


class Scripted(Link):
    """A link whose tries follow a script: (when the lead answers from, how long a link then lasts, how it
    ends). Each try is recorded with its virtual time and whether it got a link."""

    def __init__(self, script) -> None:
        super().__init__(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "m"), bridge=None, writer=None)
        self.rng = Middle()
        self.script = script  # [(up_from, lasts, close_code)], one per link the lead will give
        self.tries: list[tuple[float, bool]] = []

    async def _connect_once(self) -> None:
        now = trio.current_time()
        if not self.script or now < self.script[0][0]:
            self.tries.append((now, False))
            raise OSError("connection refused")
        _, lasts, code = self.script.pop(0)
        self.tries.append((now, True))
        self.up_at = now
        await trio.sleep(lasts)
        if code is None:
            raise ConnectionClosed(CloseReason(1006, None))  # the lead killed, the network cut
        raise ConnectionClosed(CloseReason(code, "lead shutting down"))


async def run_script(script, until: float) -> list[tuple[float, bool]]:
    link = Scripted(script)
    with trio.move_on_after(until):
        await link.run()
    return [(round(t, 3), ok) for t, ok in link.tries]


async def test_a_lead_going_away_is_dialled_at_once_then_every_second_until_it_is_back(autojump_clock):
    """The lead closes going away (1001) at t=100 and answers again from t=105.2: the member tries at once
    (t=100), then every second, and has its link at t=106 — not after a growing backoff."""
    tries = await run_script([(0, 100, 1001), (105.2, 1000, 1001)], until=200)
    assert tries == [(0, True), (100, False), (101, False), (102, False), (103, False), (104, False),
                     (105, False), (106, True)]


async def test_a_link_that_lasted_resets_the_backoff_after_an_unclean_end(autojump_clock):
    """A link cut without a close (the lead killed) after two minutes up: the backoff starts again at
    0.5 s (0.5, 1, 2, 4 …), whatever it had grown to before that link."""
    # before the first link, the lead is missing for a while: the backoff grows to 8 s
    tries = await run_script([(10, 120, None), (150, 1000, None)], until=300)
    assert tries == [(0, False), (0.5, False), (1.5, False), (3.5, False), (7.5, False), (15.5, True),
                     (136, False), (137, False), (139, False), (143, False), (151, True)]


async def test_a_lead_that_closes_every_link_at_once_is_not_dialled_in_a_tight_loop(autojump_clock):
    """A lead that welcomes and at once closes going away, for ever: the member tries every second
    through one restart window (120 s), then backs off to BACKOFF_MAX (30 s)."""
    tries = await run_script([(0, 0, 1001)] * 10_000, until=1000)
    times = [t for t, _ in tries]
    gaps = [round(b - a, 3) for a, b in zip(times, times[1:])]
    assert gaps[0] == 0 and set(gaps[1:121]) == {1.0}
    assert gaps[121:128] == [0.5, 1, 2, 4, 8, 16, 30]
    assert set(gaps[128:]) == {BACKOFF_MAX}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_members_are_back_within_seconds_of_every_lead_restart(tmp_path):
    """`collie restart` of the lead, seven times in a row: after each, the member is online again a few
    seconds after the restarted lead answers — well before a 30 s backoff could have ended (its shortest
    wait, with jitter, is 15 s; before issue 36.4 the member's backoff only grew, and it took 15–45 s
    from about the sixth restart on)."""
    crew = Crew(tmp_path)
    try:
        crew.start_lead("--port", str(free_port()))
        member = crew.add_member("workshop")
        member.serve()
        wait_for(lambda: crew.online("workshop"), 30, "the member online")
        figures, restarts = [], []
        for _ in range(7):
            before = control.call(crew.lead.paths.control_socket, "ping")
            asked = time.monotonic()
            control.call(crew.lead.paths.control_socket, "restart")
            # the restarted lead answers: the same process (re-executed), started anew
            pong = wait_for(lambda: _restarted(crew, before), 60, "the lead back")
            answered = time.monotonic()
            restarts.append(answered - asked)
            assert pong["pid"] == before["pid"]
            wait_for(lambda: crew.online("workshop"), 60, "the member online again")
            figures.append(time.monotonic() - answered)
        print("member online after each lead restart, s after the lead answered:",
              " ".join(f"{f:.2f}" for f in figures),
              "| the lead's own restart, s (beside it):", " ".join(f"{r:.2f}" for r in restarts))
        assert max(figures) < 10, figures
        assert "the lead closed the link: lead shutting down" in member.log()
    finally:
        crew.stop()


def _restarted(crew: Crew, before: dict) -> dict | None:
    try:
        pong = control.call(crew.lead.paths.control_socket, "ping", timeout=1)
    except Exception:  # restarting: no control socket for a moment
        return None
    return pong if pong["started"] != before["started"] else None
