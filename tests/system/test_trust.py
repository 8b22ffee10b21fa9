"""A real phone, trusted and reachable from anywhere (issue 35; phone-api.md "A real phone: trust and reach",
crew.md §2), with real processes, real Chromium and network namespaces the tests make (tests/trustlab.py).

Chromium runs inside a namespace of its own, so the lead is at a non-loopback address for it — where a browser
gives a page its service worker only over a certificate it trusts (loopback would hide that). It trusts the
lead's own authority, or Caddy's, through the NSS database of its own `$HOME`, as a person would in the
browser's settings.
"""

from __future__ import annotations

import json
import re
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from collie.crew import control
from collie.lead.door.devices import SECURE_COOKIE
from collie.lead.door.tls import fingerprint_file
from tests.crewlab import REPO, Machine, wait_for
from tests.livelab import cleanup, short_dir
from tests.pushlab import FakePushService, Subscriber
from tests.system.test_push_actions import AGENT, RECORD, deliver, tap
from tests.trustlab import Caddy, Netns, launch_in, trusting_home

pytestmark = pytest.mark.slow

NAME = "collie.test"  # the public URL's name: Chromium resolves it with --host-resolver-rules


def fake_subscribe(sub: Subscriber) -> str:
    """The browser's own push service is out of reach here: subscribe() answers with the test's fake one."""
    return f"""
      if (window.PushManager) {{
        const fake = {json.dumps(sub.json())};
        let current = null;
        PushManager.prototype.subscribe = async function () {{ current = {{ toJSON: () => fake, endpoint: fake.endpoint }}; return current; }};
        PushManager.prototype.getSubscription = async function () {{ return current; }};
      }}"""


def pump_until(page, fn, timeout: float = 30.0, what: str = "condition"):
    """wait_for for what Playwright's event handlers feed: wait inside the page, so they run."""
    return wait_for(lambda: (page.wait_for_timeout(50), fn())[1], timeout=timeout, what=what)


def registrations(ctx, page) -> tuple:
    cdp = ctx.new_cdp_session(page)
    regs: dict = {}
    cdp.on("ServiceWorker.workerRegistrationUpdated",
           lambda ev: regs.update({r["scopeURL"]: r["registrationId"] for r in ev["registrations"]
                                   if not r.get("isDeleted")}))
    cdp.send("ServiceWorker.enable")
    return cdp, regs


def pair_link(machine: Machine) -> tuple[str, str]:
    out = machine.collie("pair", "--no-qr")
    assert out.returncode == 0, out.stderr
    return re.search(r"(https://\S+/pair#\S+)", out.stdout).group(1), out.stdout


class Lab:
    """Playwright, a private folder, and what a test started, ended in reverse order whatever happens."""

    def __init__(self, playwright, base) -> None:
        self.p, self.base, self.ends = playwright, base, []

    def keep(self, thing, end=None):
        self.ends.append(end or (thing.stop if hasattr(thing, "stop") else thing.delete))
        return thing

    def end(self) -> None:
        for end in reversed(self.ends):
            end()


@pytest.fixture
def lab():
    from playwright.sync_api import sync_playwright

    base = short_dir("tr")
    with sync_playwright() as p:
        lab = Lab(p, base)
        try:
            yield lab
        finally:
            lab.end()
    cleanup(base)


class Agent:
    """The asking agent of tests/system/test_push_actions.py: four conversations, a permission ask each, raised once told."""

    def __init__(self, machine: Machine) -> None:
        self.sock = machine.run / "a.sock"
        self.go = machine.run / "ask-now"
        self.proc = subprocess.Popen([sys.executable, "-c", AGENT, str(self.sock), str(self.go), str(machine.run / "x")],
                                     cwd=REPO, stdout=subprocess.PIPE, text=True, env=machine.env)
        assert "listening" in self.proc.stdout.readline()
        self.lines: list[str] = []
        threading.Thread(target=lambda: self.lines.extend(iter(self.proc.stdout.readline, "")), daemon=True).start()
        assert machine.collie("durable", "attach", "desk", "--socket", str(self.sock)).returncode == 0

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


def test_a_phone_that_trusts_the_leads_authority_gets_its_service_worker_push_and_the_lock_screen_answer(lab):
    """Chromium at a non-loopback address, trusting the lead's own authority (NSS), pairs over --host: no
    certificate warning, its service worker registers, its push subscription reaches the lead, and Allow from the
    notification of a real ask reaches the agent once. `collie pair` printed the trust link and fingerprint."""
    p, base = lab.p, lab.base
    ns = lab.keep(Netns("10.211.41.0"))
    lead = lab.keep(Machine(base, "lead"))
    agent = lab.keep(Agent(lead))
    service = FakePushService()
    lab.keep(service, service.close)
    pong = lead.serve("--host", ns.here, "--port", "0")
    address = pong["address"]
    assert address.startswith(f"https://{ns.here}:")
    link, printed = pair_link(lead)
    authority = fingerprint_file(lead.paths.state_dir / "tls" / "ca.pem")
    assert f"{address}/trust" in printed and authority in printed
    home = trusting_home(base / "home", lead.paths.state_dir / "tls" / "ca.pem")
    browser = launch_in(p, ns, home, base)
    lab.keep(browser, browser.close)
    ctx = browser.new_context(viewport={"width": 360, "height": 780})  # no ignore_https_errors: trust is real
    ctx.grant_permissions(["notifications"], origin=address)
    sub = Subscriber(service.url("/ok/phone"))
    ctx.add_init_script(fake_subscribe(sub))
    page = ctx.new_page()
    errors: list = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    cdp, regs = registrations(ctx, page)
    page.goto(link)
    page.wait_for_url(re.compile(r"/(#/?)?$"))
    page.get_by_role("button", name="Notify me when an agent asks").click()
    page.get_by_text("Notifications are on for this phone.").wait_for()
    assert page.locator("#push-cannot").count() == 0
    pump_until(page, lambda: regs, what="the service worker's registration")
    assert control.call(lead.paths.control_socket, "live")["push"]["subscriptions"] == 1
    [worker] = pump_until(page, lambda: ctx.service_workers, what="the service worker")
    worker.evaluate(RECORD)
    agent.go.write_text("now")
    got = service.wait(lambda r: r["path"] == "/ok/phone" and sub.decrypt(r["body"]).get("ask", {}).get(
        "conversation") == "deploy", timeout=30)
    note = deliver(cdp, regs, worker, address, sub.decrypt(got["body"]))
    assert [a["action"] for a in note["actions"]] == ["allow", "deny"]
    assert tap(worker, note, "allow")["title"] == "Allowed"
    wait_for(lambda: [x for x in agent.lines if x.startswith("answer")], what="the agent's answer")
    assert [x for x in agent.lines if x.startswith("answer")] == ["answer deploy accepted yes\n"]
    assert errors == []


def test_the_same_browser_without_trust_is_told_why_and_where_to_trust(lab):
    """Past the certificate warning, without trusting the authority: the page works but has no service worker,
    and where the notification switch would be it says so, with a link to /trust — whose fingerprint is the
    one `collie pair` printed, and whose certificate is the authority's (DER, application/x-x509-ca-cert)."""
    p, base = lab.p, lab.base
    ns = lab.keep(Netns("10.211.42.0"))
    lead = lab.keep(Machine(base, "lead"))
    address = lead.serve("--host", ns.here, "--port", "0")["address"]
    link, _ = pair_link(lead)
    authority = fingerprint_file(lead.paths.state_dir / "tls" / "ca.pem")
    (base / "home").mkdir()
    browser = launch_in(p, ns, base / "home", base)
    lab.keep(browser, browser.close)
    ctx = browser.new_context(viewport={"width": 360, "height": 780})
    page = ctx.new_page()
    with pytest.raises(Exception, match="ERR_CERT_AUTHORITY_INVALID"):
        page.goto(link)
    page.locator("#details-button").click()  # what a person does: Advanced, then Proceed past the warning
    page.locator("#proceed-link").click()
    note = page.locator("#push-cannot")
    note.wait_for(timeout=30000)
    assert "does not trust the lead's certificate" in note.inner_text()
    assert page.get_by_role("button", name="Notify me when an agent asks").count() == 0
    assert page.evaluate("navigator.serviceWorker.getRegistrations().then((r) => r.length)") == 0
    note.get_by_role("link", name="Trust it once").click()
    page.wait_for_url(f"{address}/trust")
    assert page.locator("#fingerprint").inner_text() == authority
    for step in ("Android", "Certificate Trust Settings", "Add to Home Screen", "Firefox", "Safari"):
        assert step in page.content()
    with httpx.Client(verify=ssl.create_default_context(cafile=lead.paths.state_dir / "tls" / "ca.pem"), timeout=10) as c:
        # from this namespace the lead's address is its own: the test reads what the phone would download
        der = c.get(f"{address}/trust/ca.crt")
        pair_page = c.get(f"{address}/pair").text
    assert '<a href="/trust">' in pair_page  # the pairing page points to it too
    assert der.headers["content-type"] == "application/x-x509-ca-cert"
    assert ssl.DER_cert_to_PEM_cert(der.content).strip() == (lead.paths.state_dir / "tls" / "ca.pem").read_text().strip()


FLOOD = r"""
import socket, ssl, sys, time
host, port, name, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
held = []
for i in range(n):
    try:
        s = ctx.wrap_socket(socket.create_connection((host, port), timeout=10), server_hostname=name)
        s.sendall(f"POST /pair HTTP/1.1\r\nHost: {name}:{port}\r\nContent-Type: application/json\r\n"
                  f"Content-Length: 100000\r\n\r\n{{".encode())
        held.append(s)
    except OSError as e:
        print("refused", e, flush=True)
print("flooding", len(held), flush=True)
while True:  # a byte now and then: slow, never done
    for s in held:
        try:
            s.sendall(b" ")
        except OSError:
            pass
    time.sleep(1)
"""


def test_behind_caddy_with_a_public_url_the_phone_pairs_asks_sends_and_a_flood_cannot_keep_it_out(lab):
    """Behind Debian's Caddy (tls internal, its root trusted by the phone) with --public-url: the printed link is
    the public URL; pairing gives the __Host- cookie; the dashboard, an ask on the live channel, a send and the
    service worker all work through the proxy, while a slow-connection flood through the same proxy from another
    address is held; a foreign Origin through the proxy is refused; the lead's log names the phone's own address,
    not the proxy's."""
    p, base = lab.p, lab.base
    phone_ns = lab.keep(Netns("10.211.43.0"))
    flood_ns = lab.keep(Netns("10.212.43.0"))
    lead = lab.keep(Machine(base, "lead"))
    agent = lab.keep(Agent(lead))
    port = 8443
    public = f"https://{NAME}:{port}"
    pong = lead.serve("--host", "127.0.0.1", "--port", "0", "--public-url", public)
    assert pong["public_url"] == public
    caddy = Caddy(base / "caddy", NAME, port, [phone_ns.here, flood_ns.here], pong["address"].split("//")[1])
    lab.keep(caddy)
    wait_for(caddy.ready, timeout=30, what="caddy up")
    flood = subprocess.Popen(flood_ns.run(sys.executable, "-c", FLOOD, flood_ns.here, str(port), NAME, "40"),
                             stdout=subprocess.PIPE, text=True)
    lab.keep(flood, lambda: (flood.kill(), flood.wait(), flood.stdout.close()))
    assert flood.stdout.readline().startswith("flooding 40")
    link, printed = pair_link(lead)
    assert link.startswith(f"{public}/pair#") and "0.0.0.0" not in printed
    home = trusting_home(base / "home", caddy.root)
    browser = launch_in(p, phone_ns, home, base, f"--host-resolver-rules=MAP {NAME} {phone_ns.here}")
    lab.keep(browser, browser.close)
    ctx = browser.new_context(viewport={"width": 360, "height": 780})
    page = ctx.new_page()
    errors: list = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    cdp, regs = registrations(ctx, page)
    page.goto(link)
    page.wait_for_url(re.compile(r"/(#/?)?$"))
    page.wait_for_selector("main section", timeout=30000)
    assert [c["name"] for c in ctx.cookies()] == [SECURE_COOKIE] and ctx.cookies()[0]["secure"]
    pump_until(page, lambda: regs, what="the service worker's registration through the proxy")
    agent.go.write_text("now")  # asks raised now reach the open page over the live channel
    page.wait_for_selector(".section-needs", timeout=30000)
    sent = page.evaluate("""async () => {
      const key = await new Promise((ok, fail) => { const o = indexedDB.open("collie", 1);
        o.onsuccess = () => { const g = o.result.transaction("device").objectStore("device").get("key");
          g.onsuccess = () => ok(g.result); g.onerror = () => fail(g.error); }; o.onerror = () => fail(o.error); });
      const h = {"Content-Type": "application/json", "X-Collie-CSRF": "1", "X-Collie-Device-Key": key};
      const pane = await (await fetch("/api/agents/local/desk/conversations/tidy", {headers: h})).json();
      const r = await fetch("/api/send", {method: "POST", headers: h, body: JSON.stringify({request_id: crypto.randomUUID(),
        machine: "local", agent: "desk", conversation: "tidy", text: "through the proxy", turn: pane.turn})});
      return [r.status, await r.json()];
    }""")
    assert sent[0] == 200 and sent[1]["outcome"] in ("sent", "refused"), sent
    assert errors == []
    with httpx.Client(verify=ssl.create_default_context(cafile=caddy.root), timeout=10) as c:  # from this namespace, to the phone's side of Caddy
        url = f"https://{phone_ns.here}:{port}/api/dashboard"
        foreign = c.get(url, headers={"Host": f"{NAME}:{port}", "Origin": "https://evil.example"},
                        extensions={"sni_hostname": NAME})
        own = c.get(url, headers={"Host": f"{NAME}:{port}", "Origin": public}, extensions={"sni_hostname": NAME})
    assert foreign.status_code == 403 and foreign.json()["error"] == "cross_origin"
    assert own.status_code == 401  # the right origin, no credential: the door's next check
    assert flood.poll() is None  # the flood was still on the whole time
    # the lead saw the phone's own address through the proxy (X-Forwarded-For from a trusted proxy, loopback)
    assert f"paired a phone: " in lead.log() and f"(from {phone_ns.there})" in lead.log()


def test_a_member_joins_a_lead_on_all_addresses_by_the_printed_command_and_refuses_a_changed_authority(lab):
    """A member in its own namespace joins a lead on --host 0.0.0.0 with exactly the join command `collie crew
    invite` printed (no SSL_CERT_FILE: the command carries the authority's SHA-256); nothing printed names
    0.0.0.0. When the lead's authority is made anew, the member refuses it, naming both fingerprints."""
    p, base = lab.p, lab.base
    member_ns = lab.keep(Netns("10.211.44.0"))
    lead_ns = lab.keep(Netns("10.211.45.0", peer=member_ns))
    lead, member = Machine(base, "lead"), Machine(base, "member")
    lab.keep(lead)
    lab.keep(member)
    lead.paths.state_dir.mkdir(parents=True, mode=0o700)

    def serve_lead(port: str) -> dict:
        lead.bridge = subprocess.Popen(lead_ns.run(sys.executable, "-m", "collie.crew.cli.main", "serve", "--host", "0.0.0.0",
                                                   "--port", port), cwd=REPO, env=lead.env, stdout=subprocess.DEVNULL,
                                       stderr=subprocess.DEVNULL)
        return wait_for(lambda: _ping(lead), what="the lead up")

    pong = serve_lead("0")
    assert pong["address"].startswith(f"https://{lead_ns.there}:")
    invited = lead.collie("crew", "invite", "--label", "far")
    assert invited.returncode == 0 and "0.0.0.0" not in invited.stdout, invited.stdout
    first = fingerprint_file(lead.paths.state_dir / "tls" / "ca.pem")
    [join] = [line.strip() for line in invited.stdout.splitlines() if line.strip().startswith("collie crew join ")]
    assert f"--ca-sha256 {first}" in join and f"wss://{lead_ns.there}:" in join
    (member.run / "far.token").write_text((lead.paths.state_dir / "invites" / "far.token").read_text())
    member.paths.state_dir.mkdir(parents=True, mode=0o700)
    [export] = [line.strip() for line in invited.stdout.splitlines() if line.strip().startswith("export ")]
    path = f"{Path(sys.executable).parent}:{member.env.get('PATH', '')}"  # `collie` is this checkout's
    joined = subprocess.run(["sh", "-c", f"{export}\n{join}\n"], cwd=member.run, env={**member.env, "PATH": path},
                            capture_output=True, text=True, timeout=60)
    assert joined.returncode == 0, joined.stderr
    member.bridge = subprocess.Popen(member_ns.run(sys.executable, "-m", "collie.crew.cli.main", "serve"), cwd=REPO,
                                     env=member.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: any(m["online"] for m in control.call(lead.paths.control_socket, "crew")["members"]),
             timeout=40, what="the member online with the printed command")
    [ready] = [line for line in lead.log().splitlines() if " ready (pid " in line]
    assert "0.0.0.0" not in ready and f"https://{lead_ns.there}:" in ready
    doctor = lead.collie("doctor")
    assert "0.0.0.0" not in doctor.stdout and "issued by the lead's own authority" in doctor.stdout
    # the lead's authority is made anew (its state lost, say): the member refuses it and names both
    port = pong["address"].rsplit(":", 1)[1]
    lead.bridge.kill()
    lead.bridge.wait()
    for f in ("ca.pem", "ca-key.pem"):
        (lead.paths.state_dir / "tls" / f).unlink()
    serve_lead(port)
    second = fingerprint_file(lead.paths.state_dir / "tls" / "ca.pem")
    assert second != first

    def refused():
        link = control.call(member.paths.control_socket, "link")
        return (link.get("last_error") or "") if not link["connected"] else ""
    why = wait_for(lambda: second in refused() and refused(), timeout=60, what="the member to refuse the new authority")
    assert first in why and "not the lead you were invited to" in why
    assert second in member.collie("doctor").stdout


def _ping(machine: Machine):
    try:
        return control.call(machine.paths.control_socket, "ping", timeout=1)
    except Exception:
        return None
