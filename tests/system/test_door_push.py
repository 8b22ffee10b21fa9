"""Push delivery against a hostile or careless push service and hostile endpoints, through a real
`collie serve`, a real SDK agent and real sockets (issue 25 items 5, 6, 7; docs/push.md).

- 7: an agent's push title and line are masked whole, then cut: no part of a token shows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import httpx
import pytest

from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.livelab import cleanup, short_dir
from tests.pushlab import FakePushService, Subscriber
from tests.system.test_durable_e2e import live

pytestmark = pytest.mark.slow
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape: ghp_ and 36 characters

ASKER = """
import sys, trio
from collie.crew.sdk import open_collie
from collie.fixtures.agents import PERMISSION
async def main():
    async with open_collie(socket=sys.argv[1], caps=["asks"], runtime="asker") as c:
        pane = c.conversation("c", title="Keys")
        c.ready()
        print("listening", flush=True)
        await pane.ask(kind="permission", tool_call_id="t1", title="Rotate?", body="b", tool="rotate",
                       options=PERMISSION, push={"title": sys.argv[2], "line": sys.argv[3]})
        await trio.sleep_forever()
trio.run(main)
"""


@pytest.fixture
def lab(paths, bridge):
    service = FakePushService()
    run = short_dir()
    procs = []

    def agent(*argv: str):
        p = subprocess.Popen([sys.executable, "-c", ASKER, *argv], cwd=REPO, stdout=subprocess.PIPE, text=True)
        procs.append(p)
        assert "listening" in p.stdout.readline()
        return p

    def lead(env_lines: str = "COLLIE_PUSH_LOOPBACK=1\n"):
        paths.config_dir.mkdir(parents=True, exist_ok=True)
        paths.dotenv.write_text(env_lines)
        os.chmod(paths.dotenv, 0o600)
        b = bridge(env=collie_env(paths))
        address = b.wait_ready()["address"]
        token = (paths.state_dir / "api-token").read_text().strip()
        return httpx.Client(base_url=address, headers={"authorization": f"Bearer {token}"}, timeout=10)

    yield service, run, agent, lead, paths
    for p in procs:
        p.kill()
        p.wait()
        p.stdout.close()
    service.close()
    cleanup(run)


def test_a_token_in_a_push_title_or_line_is_masked_before_it_is_cut(lab):
    """7: the title holds a token across its 60th character, the line one across its 120th: the decrypted
    push shows `[secret]` and not one character of either token."""
    service, run, agent, lead, paths = lab
    phone = Subscriber(service.url("/ok/phone"))
    with lead() as c:
        assert c.post("/api/push/subscribe", json=phone.json()).json() == {"ok": True}  # COLLIE_PUSH_LOOPBACK=1
        assert c.post("/api/push/subscribe", json=Subscriber("https://10.1/x").json()).status_code == 400
        sock = str(run / "asker" / "a.sock")
        title = "Rotate the deploy key " + "x" * 20 + " " + TOKEN  # the token starts at 43, ends at 83
        line = "y" * 100 + " " + TOKEN
        agent(sock, title, line)
        assert run_collie(paths, "durable", "attach", "asker", "--socket", sock, "--restart").returncode == 0
        got = service.wait(lambda r: r["path"] == "/ok/phone")
    payload = phone.decrypt(got["body"])
    assert "[secret]" in payload["body"], payload
    for n in range(4, len(TOKEN) + 1):  # no run of the token's characters past its prefix
        assert TOKEN[:n] not in payload["body"] or n <= 4, payload["body"]
    assert TOKEN[4:12] not in payload["body"] and TOKEN[-8:] not in payload["body"]


SPELLINGS = ["https://10.1/x", "https://0xa.0.0.1/x", "https://169.254.43518/x", "https://2852039166/x",
             "https://[::ffff:169.254.169.254]/x", "https://[fd00::1]/x", "https://100.64.1.1/x", "https://0/x",
             "https://127.1/x", "https://localhost:9/x",
             # issue 25 D3: IPv4-compatible (reserved ::/8), NAT64 and 6to4 of private addresses; Unicode and percent
             "https://[::10.0.0.1]/", "https://[::127.0.0.1]/", "https://[64:ff9b::a00:1]/", "https://[2002:a00:1::]/",
             "https://\uff11\uff10.0.0.1/", "https://\uff11\uff12\uff17.0.0.1:8472/", "https://%31%32%37.0.0.1:8472/"]


def test_subscribing_refuses_private_and_loopback_addresses_in_every_spelling(lab):
    """6: `400` for a private, link-local (the cloud metadata address) or loopback endpoint however it is
    spelled; a loopback endpoint only with COLLIE_PUSH_LOOPBACK=1 in .env."""
    service, run, agent, lead, paths = lab
    with lead("") as c:
        for url in SPELLINGS + [service.url("/ok/phone")]:
            r = c.post("/api/push/subscribe", json={**Subscriber(url).json()})
            assert r.status_code == 400, (url, r.text)
            assert r.json()["error"] == "bad_request" and ("private" in r.json()["message"]
                                                           or "loopback" in r.json()["message"]), (url, r.json())


def test_a_host_spelled_in_unicode_or_percent_escapes_is_pushed_to_where_a_client_would_go(lab):
    """D3: the endpoint's host is normalised once, at subscribe time, as a client reads it: `１２７.0.0.1` and
    `%31%32%37.0.0.1` are 127.0.0.1 — allowed here only because COLLIE_PUSH_LOOPBACK=1 — and the push reaches
    the service there (before, delivery failed with an internal TypeError)."""
    service, run, agent, lead, paths = lab
    port = service.url("/").rsplit(":", 1)[1].split("/")[0]
    phones = {"fw": Subscriber(f"http://\uff11\uff12\uff17.0.0.1:{port}/ok/fw"),
              "pct": Subscriber(f"http://%31%32%37.0.0.1:{port}/ok/pct")}
    with lead() as c:
        for phone in phones.values():
            r = c.post("/api/push/subscribe", json=phone.json())
            assert r.json() == {"ok": True}, r.text
        gone = Subscriber(f"http://\uff11\uff12\uff17.0.0.1:{port}/ok/gone")
        assert c.post("/api/push/subscribe", json=gone.json()).json() == {"ok": True}
        removed = c.request("DELETE", "/api/push/subscribe", json={"endpoint": gone.endpoint})  # as the phone spells it
        assert removed.json() == {"ok": True}, removed.text
        sock = str(run / "asker" / "a.sock")
        agent(sock, "Rotate the key?", "a line")
        assert run_collie(paths, "durable", "attach", "asker", "--socket", sock, "--restart").returncode == 0
        for name, phone in phones.items():
            got = service.wait(lambda r, name=name: r["path"] == f"/ok/{name}")
            assert "Rotate the key?" in json.dumps(phone.decrypt(got["body"]))
    assert "TypeError" not in paths.log.read_text(errors="replace")


async def test_a_name_that_resolves_to_a_private_address_is_not_pushed_to(tmp_path):
    """6: a DNS name is checked where it resolves, at each delivery: `push.example.com` resolving to
    127.0.0.1 gets nothing (the push service on loopback receives no request) unless loopback is allowed."""
    from types import SimpleNamespace as NS

    import trio

    from collie.lead.push import pusher as push

    class Resolver(trio.abc.HostnameResolver):
        async def getaddrinfo(self, host, port, family=0, type=0, proto=0, flags=0):
            import socket
            name = host.decode() if isinstance(host, bytes) else host
            address = "127.0.0.1" if name == "push.example.com" else name
            return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port)))]

        async def getnameinfo(self, sockaddr, flags):
            raise NotImplementedError

    service = FakePushService()
    try:
        trio.socket.set_custom_hostname_resolver(Resolver())
        pusher = push.Pusher(NS(readers={}, on_agent_change=[]), None, tmp_path / "p", host="lead", loopback_ok=False)
        keys = Subscriber("https://x.example/").json()["keys"]
        named = push.Subscription(f"https://push.example.com:{service.port}/ok/dns", keys["p256dh"], keys["auth"], None)
        assert push.check_endpoint(named.endpoint) is None  # a public-looking name: only its address says
        async with push.push_pool(loopback_ok=False) as pool:
            pusher.client = pool
            with trio.fail_after(20):
                assert await pusher.deliver(named, b"{}", "high", None) is None
        assert service.received == [] and pusher.stats["failed"] == 1
        # the same pool and service, loopback allowed and named as such: delivered (the test can see a push)
        pusher.loopback_ok = True
        direct = push.Subscription(service.url("/ok/direct"), keys["p256dh"], keys["auth"], None)
        async with push.push_pool(loopback_ok=True) as pool:
            pusher.client = pool
            with trio.fail_after(20):
                assert await pusher.deliver(direct, b"{}", "high", None) == 201
        pusher.store.db.close()
    finally:
        trio.socket.set_custom_hostname_resolver(None)
        service.close()


class BombService:
    """A push service that answers 201 with 64 MiB of gzip (each MiB inflates to 1 GiB), counting what the lead
    takes of it before it closes the connection."""

    def __init__(self) -> None:
        import gzip
        import socket
        import threading

        self.member = gzip.compress(b"\0" * (64 << 20), compresslevel=9)  # one gzip member: 64 MiB of zeros
        self.total = 64 << 20
        self.sent: list[int] = []
        self.done = threading.Event()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                data += conn.recv(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            length = int(next(line.split(b":")[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")))
            while len(body) < length:
                body += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 201 Created\r\ncontent-encoding: gzip\r\ncontent-type: text/plain\r\n"
                         b"content-length: %d\r\n\r\n" % self.total)
            sent = 0
            try:
                while sent < self.total:
                    chunk = (self.member * (1 + (1 << 20) // len(self.member)))[: min(1 << 20, self.total - sent)]
                    conn.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass
            self.sent.append(sent)
            self.done.set()

    def close(self) -> None:
        self.sock.close()


def vm_hwm_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_a_push_services_answer_is_read_at_most_a_few_kib_and_never_inflated(lab):
    """5: the push service answers 201 with 64 MiB of gzip; the lead reads at most a few KiB, raw, and closes:
    the service cannot send it most of the body and the lead's peak memory does not grow by the body."""
    service, run, agent, lead, paths = lab
    bomb = BombService()
    try:
        with lead() as c:
            url = f"http://127.0.0.1:{bomb.port}/bomb"
            assert c.post("/api/push/subscribe", json=Subscriber(url).json()).json() == {"ok": True}
            from collie.crew import control

            pid = control.call(paths.control_socket, "ping")["pid"]
            before = vm_hwm_kib(pid)
            sock = str(run / "asker" / "a.sock")
            agent(sock, "Rotate", "now")
            assert run_collie(paths, "durable", "attach", "asker", "--socket", sock, "--restart").returncode == 0
            assert bomb.done.wait(30), "the push never came"
            assert bomb.sent[0] < 32 << 20, bomb.sent  # the lead stopped reading: the kernel's buffers filled
            grown = vm_hwm_kib(pid) - before
            assert grown < 48 * 1024, f"the lead's peak memory grew {grown} KiB"
            assert control.call(paths.control_socket, "ping")["pid"] == pid  # and the lead is fine
    finally:
        bomb.close()
