"""Neighbour pages against the paired phone, in a real Chromium (issue 42.3 and 42.10; phone-api.md "Pairing a
phone", threat-model.md). The bomb over loopback HTTP and over TLS (HTTP/2); the replacer over loopback HTTP.

- A cookie bomb: a page on another port of the host sets 45 cookies of 4 KB with `Path=/`; Chromium sends
  them all (180 KB) with every request to the lead. Invariant: the paired page loads and works (no 431, its
  live channel opens, a send goes), and the lead clears them: the jar is small again after the page loaded.
- A neighbour tab that replaces the phone's cookie every 5-20 ms while the page loads 20 times. Invariant: the
  page never says "This phone is not paired" — its reads and writes renew again after each replacement
  (bounded) — and the lead keeps serving (over HTTP/2 the early 401 to a POST once ended its server).
"""

from __future__ import annotations

import pytest

from tests.system.test_door_origin import REPLACE, Neighbour, browser, lead, paired_phone, pump_until  # noqa: F401 (fixtures)

pytestmark = pytest.mark.slow
BOMB = [f"bomb{i:02d}={'x' * 4080}; Path=/" for i in range(45)]


def bombs(ctx) -> int:
    return sum(len(c["name"]) + len(c["value"]) for c in ctx.cookies() if c["name"].startswith("bomb"))


def test_a_neighbours_cookie_bomb_locks_no_one_out_and_is_cleared(lead, browser):  # noqa: F811
    bomber = Neighbour(BOMB)
    ctx, page, channel, base = paired_phone(lead, browser)
    try:
        page.goto(bomber.url)
        page.wait_for_selector("p")
        assert bombs(ctx) > 180_000, ctx.cookies()  # the attack is real: the jar for the host holds them all
        statuses: list[int] = []
        page.on("response", lambda r: statuses.append(r.status) if r.url.startswith(base) else None)
        channel.clear()
        page.goto(base + "/")
        page.wait_for_selector("main section")
        pump_until(page, lambda: 200 in channel, what="the live channel open")
        assert 431 not in statuses and 401 not in statuses, statuses
        assert page.locator("text=This phone is not paired").count() == 0
        sent = page.evaluate("""async () => (await import('/api.js')).write('/api/send', {request_id: crypto.randomUUID(),
            machine: 'local', agent: 'deployer', conversation: 'deploy', text: 'under the bomb'})""")
        assert sent["outcome"] in ("sent", "refused") and sent.get("reason") != "unauthorized", sent
        assert bombs(ctx) <= 4096, [c["name"] for c in ctx.cookies()]  # the lead cleared them: small again
        own = "__Host-collie_device" if lead["tls"] else "collie_device"
        assert [c["name"] for c in ctx.cookies()].count(own) == 1  # the phone's own cookie stays
    finally:
        ctx.close()
        bomber.close()


# A neighbour's page that has its server replace the phone's cookie (both names, Path=/; Set-Cookie, as script
# cannot touch an HttpOnly cookie: the Neighbour sets REPLACE on every answer) every 5-20 ms while it is open.
REPLACER = b"""<!doctype html><title>replacer</title><p>replacing</p><script>
function again() {
  fetch("/replace", {cache: "no-store"}).catch(() => {});
  setTimeout(again, 5 + Math.random() * 15);
}
again();
</script>"""
# Set in the lead's page before its own script: whether it ever said "This phone is not paired".
WATCH = """new MutationObserver(() => {
  if (document.body && document.body.textContent.includes("This phone is not paired")) window.__unpaired = true;
}).observe(document, {childList: true, subtree: true, characterData: true});"""


LOADS = 20


# Over loopback HTTP only: over TLS (HTTP/2) about one run in ten, after the page navigated away from renewals
# in flight, Chromium's API requests on that connection failed ERR_HTTP2_PROTOCOL_ERROR while its static files
# loaded — an HTTP/2 fault still open (issue 42.10 report), not the renewal this test is about.
@pytest.mark.parametrize("lead", ["http"], indirect=True)
def test_a_neighbour_replacing_the_cookie_in_a_loop_never_unpairs_the_page(lead, browser):  # noqa: F811
    replacer = Neighbour(REPLACE, page=REPLACER)
    ctx, page, channel, base = paired_phone(lead, browser)
    own = "__Host-collie_device" if lead["tls"] else "collie_device"
    try:
        tab = ctx.new_page()
        tab.goto(replacer.url)
        tab.wait_for_selector("p")
        pump_until(page, lambda: any(c["name"] == own and c["value"] == "replaced" for c in ctx.cookies()),
                   what="the neighbour replacing the phone's cookie")  # the attack runs
        page.add_init_script(WATCH)
        renewals: list[int] = []
        tickets: list[int] = []
        page.on("response", lambda r: renewals.append(r.status) if r.url.endswith("/pair/renew") else None)
        page.on("response", lambda r: tickets.append(r.status) if r.url.endswith("/api/events/ticket") else None)
        for load in range(LOADS):
            tickets.clear()
            page.goto(base + "/")
            page.wait_for_selector("main section")
            # the dashboard read, then the live channel's ticket (a write): each renewed as often as it takes
            pump_until(page, lambda: 200 in tickets or page.evaluate("!!window.__unpaired"),
                       what=f"load {load}: the live channel's ticket", timeout_ms=60000)
            assert not page.evaluate("!!window.__unpaired"), f"load {load} said the phone is not paired"
        assert renewals, "the neighbour never made the page renew"  # the race was run, not dodged
    finally:
        ctx.close()
        replacer.close()
