"""Needs you after a lead restart, on real processes (issue 36.6, D1): an ask keeps its age, and the ask of
an agent that exited is listed apart (`unreachable`, with why) and not counted as waiting for you."""

from __future__ import annotations

import socket
import time

import pytest

from crew import control
from tests.crewlab import Crew, wait_for


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def needs(crew: Crew) -> dict:
    with crew.client() as c:
        got = c.get("/api/needs")
        assert got.status_code == 200
        return got.json()


def by_agent(rows: list[dict]) -> dict[str, str]:
    return {r["agent"]: r["since"] for r in rows}


@pytest.mark.slow
def test_asks_keep_their_age_across_a_lead_restart_and_a_gone_agents_ask_is_not_counted(tmp_path):
    crew = Crew(tmp_path)
    try:
        crew.lead.agent("desk", "deployer")
        crew.lead.agent("gone", "deployer")
        crew.start_lead("--port", str(free_port()))
        first = wait_for(lambda: (lambda n: n if set(by_agent(n["asks"])) == {"desk", "gone"} else None)(needs(crew)),
                         30, "both asks in Needs you")
        seen = by_agent(first["asks"])
        proc = crew.lead.agents.pop("gone")
        proc.kill()
        proc.wait()
        proc.stdout.close()
        gone = wait_for(lambda: (lambda n: n if "gone" in by_agent(n["unreachable"]) else None)(needs(crew)),
                        30, "the exited agent's ask listed apart")
        assert list(by_agent(gone["asks"])) == ["desk"]
        row = next(r for r in gone["unreachable"] if r["agent"] == "gone")
        assert row["status"] == "unreachable" and row["reason"] in ("connection-refused", "no-socket")
        time.sleep(2.1)  # a restart now would show a `since` at least 2 s later than the first one
        before = control.call(crew.lead.paths.control_socket, "ping")
        control.call(crew.lead.paths.control_socket, "restart")

        def restarted():
            try:
                pong = control.call(crew.lead.paths.control_socket, "ping", timeout=1)
            except Exception:
                return None
            return pong if pong["started"] != before["started"] else None
        wait_for(restarted, 60, "the lead back")
        after = wait_for(lambda: (lambda n: n if "desk" in by_agent(n["asks"]) and "gone" in by_agent(n["unreachable"])
                                  else None)(needs(crew)), 30, "both asks back after the restart")
        assert by_agent(after["asks"]) == {"desk": seen["desk"]}  # the age survived; the gone agent is not counted
        assert by_agent(after["unreachable"]) == {"gone": seen["gone"]}
    finally:
        crew.stop()
