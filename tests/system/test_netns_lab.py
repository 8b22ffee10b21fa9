"""A two-machine crew in Linux network namespaces (issue 5: "a multi-machine lab must be possible").

The lead and the member each get a network namespace, joined by a veth pair (10.211.0.1 ⇄
10.211.0.2, addresses inside our own namespaces only). Off loopback the lead serves only TLS, so it
gets a certificate from a test CA (trustme) and the member trusts that CA through SSL_CERT_FILE.
Skipped, with the reason shown, where namespaces cannot be made (not root, no `ip`).
docs/crew.md explains running the same lab by hand.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import trustme

from collie.crew import control
from tests.crewlab import REPO, Machine, wait_for
from tests.livelab import short_dir

pytestmark = pytest.mark.slow
LEAD_IP, MEMBER_IP = "10.211.0.1", "10.211.0.2"


def _sh(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True)


@pytest.fixture
def namespaces():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("network namespaces need root and iproute2 (`ip`)")
    tag = uuid.uuid4().hex[:6]
    lead_ns, member_ns = f"cl-lead-{tag}", f"cl-mem-{tag}"
    veth_a, veth_b = f"cla{tag}", f"clb{tag}"
    made = _sh("ip", "netns", "add", lead_ns)
    if made.returncode != 0:
        pytest.skip(f"cannot create a network namespace here: {made.stderr.strip()}")
    try:
        steps = [("ip", "netns", "add", member_ns),
                 ("ip", "link", "add", veth_a, "type", "veth", "peer", "name", veth_b),
                 ("ip", "link", "set", veth_a, "netns", lead_ns), ("ip", "link", "set", veth_b, "netns", member_ns),
                 ("ip", "-n", lead_ns, "addr", "add", f"{LEAD_IP}/24", "dev", veth_a),
                 ("ip", "-n", member_ns, "addr", "add", f"{MEMBER_IP}/24", "dev", veth_b),
                 ("ip", "-n", lead_ns, "link", "set", veth_a, "up"), ("ip", "-n", member_ns, "link", "set", veth_b, "up"),
                 ("ip", "-n", lead_ns, "link", "set", "lo", "up"), ("ip", "-n", member_ns, "link", "set", "lo", "up")]
        for step in steps:
            done = _sh(*step)
            if done.returncode != 0:
                pytest.skip(f"cannot set up the namespaces ({' '.join(step)}): {done.stderr.strip()}")
        yield lead_ns, member_ns
    finally:
        _sh("ip", "netns", "del", lead_ns)
        _sh("ip", "netns", "del", member_ns)


def test_lead_and_member_in_separate_network_namespaces(namespaces):
    lead_ns, member_ns = namespaces
    base = short_dir("cn")
    ca = trustme.CA()
    cert = ca.issue_cert(LEAD_IP)
    ca_file, cert_file, key_file = base / "ca.pem", base / "cert.pem", base / "key.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    cert.cert_chain_pems[0].write_to_path(str(cert_file))
    cert.private_key_pem.write_to_path(str(key_file))
    lead, member = Machine(base, "lead"), Machine(base, "member")
    procs = []
    try:
        member.agent("bot", "streamer")
        lead.paths.state_dir.mkdir(parents=True, mode=0o700)
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", lead_ns, sys.executable, "-m", "collie.crew.cli.main", "serve", "--host", LEAD_IP,
             "--port", "8470", "--tls-cert", str(cert_file), "--tls-key", str(key_file)],
            cwd=REPO, env=lead.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        wait_for(lambda: _ping(lead), what="lead up")
        assert lead.collie("crew", "invite", "--label", "far").returncode == 0
        token = (lead.paths.state_dir / "invites" / "far.token").read_text().strip()
        joined = member.collie("crew", "join", f"wss://{LEAD_IP}:8470", "--token-env", "T", "--label", "far",
                               env={"T": token})
        assert joined.returncode == 0, joined.stderr
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", member_ns, sys.executable, "-m", "collie.crew.cli.main", "serve"],
            cwd=REPO, env={**member.env, "SSL_CERT_FILE": str(ca_file)}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))
        wait_for(lambda: any(m["online"] and m["agents"] for m in
                             control.call(lead.paths.control_socket, "crew")["members"]), timeout=30,
                 what="member online across namespaces")
        # a phone write, from inside the lead's namespace over TLS, reaches the member's agent
        credential = (lead.paths.state_dir / "api-token").read_text().strip()
        script = (
            "import httpx, ssl, uuid, time, sys\n"
            f"ctx = ssl.create_default_context(cafile={str(ca_file)!r})\n"
            f"c = httpx.Client(base_url='https://{LEAD_IP}:8470', verify=ctx, "
            f"headers={{'authorization': 'Bearer {credential}'}})\n"
            "for _ in range(100):\n"
            "    p = c.get('/api/agents/far/bot/conversations/chat')\n"
            "    if p.status_code == 200: break\n"
            "    time.sleep(0.1)\n"
            "turn = p.json()['turn']\n"
            "r = c.post('/api/send', json={'request_id': str(uuid.uuid4()), 'machine': 'far', 'agent': 'bot',"
            " 'conversation': 'chat', 'text': 'across the wire', 'turn': turn}).json()\n"
            "print(r['outcome'])\n")
        out = subprocess.run(["ip", "netns", "exec", lead_ns, sys.executable, "-c", script], cwd=REPO,
                             env=lead.env, capture_output=True, text=True, timeout=60)
        assert out.stdout.strip() == "sent", out.stderr[-2000:]
        assert "[crew] connected to the lead at wss://" in member.log()
    finally:
        for p in procs:
            p.kill()
            p.wait()
        member.stop()
        lead.stop()


def _ping(machine: Machine):
    try:
        return control.call(machine.paths.control_socket, "ping", timeout=1)
    except Exception:
        return None
