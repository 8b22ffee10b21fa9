"""Loopback TCP trusts no one but this user (issue 25.2; features T3, T4; docs/wire-v1.md §1).

While an agent reached at `http://127.0.0.1:PORT`, or the lead a member dials at `ws://127.0.0.1:PORT`,
is down, another local user can bind its port. Invariant: a listener run by another uid (here `nobody`,
started with setpriv as root runs CI) receives not one byte — no token, no request, no upgrade — and the
client says `peer-not-you` naming the address and the uid. The owner comes from /proc/net/tcp{,6}.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap

import pytest
import trio

from collie.bridge.client import AgentClient, AgentUnreachable
from collie.crew.config import AgentConfig

NOBODY = 65534
TOKEN = "t" * 40

# stdlib only, run by /usr/bin/python3 as nobody: listens, answers anything, prints how many bytes came
LISTENER = textwrap.dedent("""
    import socket, sys
    s = socket.create_server((sys.argv[1], 0), family=socket.AF_INET6 if ":" in sys.argv[1] else socket.AF_INET)
    print("listening", s.getsockname()[1], flush=True)
    while True:
        c, _ = s.accept()
        c.settimeout(3)
        data = b""
        try:
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
                if b"\\r\\n\\r\\n" in data:
                    c.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 2\\r\\n\\r\\n{}")
        except OSError:
            pass
        c.close()
        print("got", len(data), flush=True)
""")

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None or not os.path.exists("/proc/net/tcp"),
                                reason="needs root and setpriv (to run a listener as nobody) and /proc/net/tcp")


class Squatter:
    """A loopback listener of another user, on a port of its own choosing."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.proc = subprocess.Popen(["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
                                      "/usr/bin/python3", "-c", LISTENER, host], stdout=subprocess.PIPE, text=True,
                                     cwd="/")
        word, port = self.proc.stdout.readline().split()
        assert word == "listening"
        self.port = int(port)

    def bytes_received(self) -> int:
        return int(self.proc.stdout.readline().split()[1])

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1"])
async def test_an_agent_url_on_loopback_held_by_another_user_gets_no_token(host):
    squatter = await trio.to_thread.run_sync(Squatter, host)
    try:
        url = f"http://{'[::1]' if host == '::1' else host}:{squatter.port}"
        client = AgentClient(AgentConfig("x", url=url, token=TOKEN))
        try:
            with trio.fail_after(20), pytest.raises(AgentUnreachable) as err:
                await client.request("POST", "/v1/conversations/c/send", json_body={"request_id": "r1", "text": "plan"})
        finally:
            await client.aclose()
        assert err.value.reason == "peer-not-you", err.value
        assert f"uid {NOBODY}" in err.value.detail and str(squatter.port) in err.value.detail, err.value.detail
        with trio.fail_after(10):
            assert await trio.to_thread.run_sync(squatter.bytes_received) == 0
    finally:
        squatter.close()


async def test_a_member_does_not_dial_a_lead_port_held_by_another_user():
    """The member's link neither sends its token in an upgrade nor talks to the squatter; its status says why."""
    from collie.crew.crewconfig import CrewConfig
    from collie.member.link import Link

    squatter = await trio.to_thread.run_sync(Squatter)
    try:
        link = Link(CrewConfig(version=1, lead=f"ws://127.0.0.1:{squatter.port}", token=TOKEN, label="m1"),
                    bridge=None, writer=None)
        with trio.move_on_after(3):
            await link.run()
        assert link.status.connected is False and link.status.connects == 0
        why = link.status.last_error or ""
        assert "peer-not-you" in why and f"uid {NOBODY}" in why and str(squatter.port) in why, why
        with trio.move_on_after(1) as idle:
            await trio.to_thread.run_sync(squatter.bytes_received, abandon_on_cancel=True)
        assert idle.cancelled_caught  # no connection ever ended there: nothing was dialled at all
    finally:
        squatter.close()


async def test_the_kits_fake_member_sends_no_token_to_a_lead_port_held_by_another_user():
    """Issue 42.8: the testing kit's fake member checks its peer like the real member (`peer-not-you`) — the
    squatter gets not one byte (no upgrade, no token) and the member's last error says why."""
    from collie.fixtures.member.link import FakeMember

    squatter = await trio.to_thread.run_sync(Squatter)
    try:
        member = FakeMember(f"ws://127.0.0.1:{squatter.port}", "m1", TOKEN, agents=1, conversations=1)
        with trio.move_on_after(3):
            await member.run()
        assert member.connected is False and member.connects == 0 and member.attempts >= 1
        why = member.last_error or ""
        assert "peer-not-you" in why and f"uid {NOBODY}" in why and str(squatter.port) in why, why
        with trio.fail_after(10):
            assert await trio.to_thread.run_sync(squatter.bytes_received) == 0
    finally:
        squatter.close()


async def test_my_own_loopback_listener_is_fine():
    """The check refuses only other users: an agent of this user on loopback is reached as before."""
    with trio.socket.socket() as s:
        await s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]

        async def answer():
            conn, _ = await s.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += await conn.recv(65536)
                await conn.send(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")

        async with trio.open_nursery() as n:
            n.start_soon(answer)
            client = AgentClient(AgentConfig("x", url=f"http://127.0.0.1:{port}", token=TOKEN))
            try:
                with trio.fail_after(10):
                    assert (await client.request("GET", "/v1/state")).status == 200
            finally:
                await client.aclose()
