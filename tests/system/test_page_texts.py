"""The page's own words and how a text is laid out, in Chromium (issue 36 minors): the app's stylesheet and
strings, on a blank page — no lead needed."""

from __future__ import annotations

import pytest
from playwright.sync_api import sync_playwright

from collie.lead.web.serve import WEB
from tests.browser import launch


@pytest.fixture(scope="module")
def page():
    with sync_playwright() as p:
        browser = launch(p)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        page.set_content("<!doctype html><html><body></body></html>")
        page.add_style_tag(content=(WEB / "app.css").read_text())
        page.add_script_tag(content=(WEB / "strings.js").read_text().replace("export const S =", "window.S ="))
        yield page
        browser.close()


def test_a_message_added_to_a_waiting_send_is_not_glued_to_its_text(page):
    """I7, issue 36: the inbox appends a message to a waiting send as its own paragraph (`text\\n\\nmessage`); the
    chat's user item, the agent's reply echoing it and the inbox row show it so — not `…number 3 and please`."""
    text = "Pick number 3\n\nand please be brief"
    page.evaluate("""(text) => {
      document.body.innerHTML = '<div class="items"><div class="item user"></div><div class="item reply"></div></div>'
        + '<div class="inbox-item"><div class="l1"></div></div>';
      for (const el of document.querySelectorAll(".item, .l1")) el.textContent = text;
    }""", text)
    shown = page.evaluate("() => [...document.querySelectorAll('.item, .l1')].map((el) => el.innerText)")
    assert shown == [text, text, text]


def test_an_unreachable_agent_says_sends_wait_and_answers_are_refused(page):
    """D1, crew.md §4, issue 36: while an agent cannot be reached a send waits in its inbox, but an answer is
    refused at once: the row's sentence says so, not that answers wait."""
    said = page.evaluate("() => S.unreachableWhy('ghost', 'no-socket')")
    assert said == ("ghost is not answering: its program is not running (its socket is not there). Sends wait in "
                    "its inbox until it is back; an answer cannot reach it until then; collie doctor on its "
                    "machine says more.")
