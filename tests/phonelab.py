"""What the browser tests of the phone app share: one headless Chromium per test module (`browser`), a
phone paired from `collie pair`'s link (`pair_link`, `paired`), a page that must end without an uncaught
error (`checked`), and a lead with agents and a member `workshop` (`start_crew`) for the screens' tests.

A module takes the browser fixture by importing it: `from tests.phonelab import browser  # noqa: F401`.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.crewlab import Crew, wait_for

LINK = re.compile(r"(https?://\S+/pair#\S+)")
PHONE = {"width": 360, "height": 780}


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    from tests.browser import launch

    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


def pair_link(out: subprocess.CompletedProcess) -> str:
    """The pairing link `collie pair --no-qr` printed."""
    assert out.returncode == 0, out.stderr
    return LINK.search(out.stdout).group(1)


def paired(browser, link: str, *, home: bool = False, init_script: str | None = None, watch=None, **context):
    """A new browser context (`context`: its options; service workers blocked unless said) paired from `link`,
    on the dashboard (`main section` drawn; with `home`, once the address is the dashboard's too).
    `page.errors` collects the page's uncaught errors, `page.base` is the lead's address; `watch(page)` is
    called before the link is opened (to listen to its responses from the first)."""
    ctx = browser.new_context(**{"service_workers": "block", **context})
    if init_script:
        ctx.add_init_script(init_script)
    page = ctx.new_page()
    page.errors = []
    page.on("pageerror", lambda e: page.errors.append(str(e)))
    if watch is not None:
        watch(page)
    page.goto(link)
    if home:
        page.wait_for_url(re.compile(r"/(#/?)?$"))
    page.wait_for_selector("main section")
    page.base = link.split("/pair#")[0]
    return page


def paired_page(crew: Crew, browser, service_workers: str = "block", init_script: str | None = None, **context):
    """A phone paired from a fresh link (`context`: more of the browser context's options, e.g. another
    viewport or time zone). Its service worker is blocked unless asked for: once it controls
    the page, Playwright's `page.route` no longer sees the page's requests (Playwright's documented
    limit), and the tests that hold or fail a request would wait for ever, depending on timing."""
    return paired(browser, pair_link(crew.lead.collie("pair", "--no-qr")), home=True, init_script=init_script,
                  **{"viewport": PHONE, "device_scale_factor": 2, "service_workers": service_workers, **context})


def sized_page(crew: Crew, browser, width: int, height: int, scheme: str, zone: str, service_workers: str = "block"):
    """A phone paired as `paired_page`, `width`×`height` with touch, in colour scheme `scheme` and time zone `zone`."""
    return paired_page(crew, browser, service_workers, viewport={"width": width, "height": height},
                       has_touch=True, color_scheme=scheme, timezone_id=zone)


def checked(page):
    """A page fixture's life: the test has `page`; after it, the page had no uncaught error, and it is closed."""
    yield page
    assert page.errors == [], page.errors
    page.context.close()


def ready(crew: Crew, machine: str, count: int, others: dict | None = None) -> None:
    """Wait until `machine` lists `count` agents, all ready but those `others` names with their status."""
    others = others or {}
    with crew.client() as c:
        def check():
            for s in c.get("/api/dashboard").json()["sections"]:
                if s["machine"] == machine and len(s["agents"]) == count and all(
                        a["status"] == others.get(a["name"], "ready") for a in s["agents"]):
                    return True
            return False
        wait_for(check, timeout=30, what=f"{machine} agents ready")


def start_crew(c: Crew, agents, member_agents, *, ghost: bool = False, others: dict | None = None,
               member_env: dict | None = None) -> None:
    """Start `c`'s lead with `agents` ((name, kind, *arguments) each; with `ghost`, an entry `ghost` whose agent
    never runs) and a member `workshop` with `member_agents`; return once both list them all, ready but those
    `others` names with their status."""
    for name, kind, *extra in agents:
        c.lead.agent(name, kind, *extra)
    if ghost:
        assert c.lead.collie("durable", "attach", "ghost", "--socket", str(c.lead.run / "ghost.sock")).returncode == 0
    c.start_lead()
    m = c.add_member("workshop")
    m.env.update(member_env or {})
    for name, kind, *extra in member_agents:
        m.agent(name, kind, *extra)
    m.serve()
    wait_for(lambda: c.online("workshop"), what="member online")
    ready(c, "local", len(agents) + ghost, others)
    ready(c, "workshop", len(member_agents))


def goto(page, route: str) -> None:
    """Open a screen and wait until that screen is drawn and done loading."""
    page.goto(f"{page.base}/{route}")
    page.wait_for_selector(f"main[data-route='{route}']:not([aria-busy])")


def look(page, name: str, tag: str) -> None:
    """COLLIE_LOOK=<folder>: save this screen as `<name>-<tag>.png` there, to look at (not docs/screenshots/)."""
    folder = os.environ.get("COLLIE_LOOK")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(folder) / f"{name}-{tag}.png"))
