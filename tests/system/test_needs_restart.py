"""Needs you after a lead restart, on real processes (issue 36.6, D1): an ask keeps its age, and the ask of
an agent that exited is listed apart (`unreachable`, with why) and not counted as waiting for you."""

from __future__ import annotations

import socket
import time

import pytest

from collie.crew import control
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


def has(rows: list[dict], *agents: str) -> bool:
    return set(agents) <= set(by_agent(rows))


@pytest.mark.slow
def test_asks_keep_their_age_across_a_lead_restart_and_a_gone_agents_ask_is_not_counted(tmp_path):
    """The lead's `desk` and `gone` and the member's `lab` each hold an ask; `gone` exits. After `collie
    restart` of the lead, 2 s later: every ask shows the time it was first seen (not the restart), and
    `gone`'s ask is listed apart with why, not counted in Needs you."""
    crew = Crew(tmp_path)
    try:
        crew.lead.agent("desk", "deployer")
        crew.lead.agent("gone", "deployer")
        crew.start_lead("--port", str(free_port()))
        member = crew.add_member("workshop")
        member.agent("lab", "deployer")
        member.serve()
        first = wait_for(lambda: (lambda n: n if set(by_agent(n["asks"])) == {"desk", "gone", "lab"} else None)(
            needs(crew)), 30, "the three asks in Needs you")
        seen = by_agent(first["asks"])
        proc = crew.lead.agents.pop("gone")
        proc.kill()
        proc.wait()
        proc.stdout.close()
        gone = wait_for(lambda: (lambda n: n if "gone" in by_agent(n["unreachable"]) else None)(needs(crew)),
                        30, "the exited agent's ask listed apart")
        assert set(by_agent(gone["asks"])) == {"desk", "lab"}
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
        after = wait_for(lambda: (lambda n: n if has(n["asks"], "desk", "lab") and has(n["unreachable"], "gone")
                                  else None)(needs(crew)), 30, "the asks back after the restart")
        wait_for(lambda: crew.online("workshop"), 30, "the member back")
        after = needs(crew)
        # the ages survived, the lead's own agent's and the member's; the gone agent's ask is not counted
        assert by_agent(after["asks"]) == {"desk": seen["desk"], "lab": seen["lab"]}
        assert by_agent(after["unreachable"]) == {"gone": seen["gone"]}
        # on the phone: Needs you counts the two asks somebody can answer; the gone agent's is listed apart, with why
        from playwright.sync_api import sync_playwright

        from tests.browser import launch
        from tests.phonelab import paired_page
        with sync_playwright() as pw:
            browser = launch(pw)
            try:
                page = paired_page(crew, browser)
                page.locator("#needs-h").get_by_text("Needs you (2)").wait_for()
                gone_rows = page.locator("section.section-gone li")
                gone_rows.first.wait_for()
                assert gone_rows.count() == 1 and "gone is not answering" in gone_rows.inner_text()
                assert page.errors == [], page.errors
            finally:
                browser.close()
    finally:
        crew.stop()
