"""The socket's listener is checked on connect, before a byte of a request is written (features T3,
wire §1; issue 8.7)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import trio

from collie.bridge import client as client_mod
from collie.bridge.client import AgentClient, AgentUnreachable
from collie.crew.config import AgentConfig
from tests.livelab import agent

NOBODY = 65534

# Binds the socket as root (so the file is root's and 0600: the path check passes), then becomes
# `nobody` before listen() — SO_PEERCRED reports the listener's credentials as of listen(). It
# answers any request it reads, and prints how many bytes each connection brought.
LISTENER = textwrap.dedent("""
    import os, socket, sys
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(sys.argv[1])
    os.chmod(sys.argv[1], 0o600)
    os.setgid(%(uid)d)
    os.setuid(%(uid)d)
    s.listen(8)
    print("listening", flush=True)
    while True:
        c, _ = s.accept()
        c.settimeout(5)
        data = b""
        try:
            while b"\\r\\n\\r\\n" not in data:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
            if data:
                c.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-type: application/json\\r\\ncontent-length: 2\\r\\n\\r\\n{}")
            while True:
                chunk = c.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError:
            pass
        c.close()
        print("got", len(data), flush=True)
""") % {"uid": NOBODY}


@pytest.mark.skipif(os.geteuid() != 0 or not hasattr(__import__("socket"), "SO_PEERCRED"),
                    reason="needs root (to run a listener as another uid) and SO_PEERCRED")
async def test_a_listener_run_by_another_user_gets_not_a_byte(tmp):
    """T3 (issue 8.7): the agent's socket is served by a process of another uid. The request is
    refused `peer-not-you` and that process receives not one byte of it — not the path, not the body."""
    sock = tmp / "a.sock"
    proc = subprocess.Popen([sys.executable, "-c", LISTENER, str(sock)], stdout=subprocess.PIPE, text=True)
    try:
        with trio.fail_after(20):
            assert (await trio.to_thread.run_sync(proc.stdout.readline)).strip() == "listening"
            client = AgentClient(AgentConfig("x", socket=str(sock)))
            try:
                with pytest.raises(AgentUnreachable) as err:
                    await client.request("POST", "/v1/conversations/c/send",
                                         json_body={"request_id": "r1", "text": "secret plan", "turn": 0})
            finally:
                await client.aclose()
            assert err.value.reason == "peer-not-you" and f"uid {NOBODY}" in err.value.detail
            assert (await trio.to_thread.run_sync(proc.stdout.readline)).strip() == "got 0"
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


async def test_the_check_runs_at_connect_before_the_request(tmp, autojump_clock, monkeypatch):
    """T3 (issue 8.7), on any platform: with the listener's uid reported as another user's at the
    connect boundary, the agent serves no request at all, and a connection is never reused."""
    sock = tmp / "a.sock"
    async with agent(sock) as collie:
        collie.ready()
        monkeypatch.setattr(client_mod, "peer_uid", lambda s: os.getuid() + 1)
        client = AgentClient(AgentConfig("x", socket=str(sock)))
        try:
            for _ in range(3):
                with pytest.raises(AgentUnreachable) as err:
                    await client.request("POST", "/v1/conversations/c/send", json_body={"request_id": "r"})
                assert err.value.reason == "peer-not-you"
            assert collie.recorder.calls == []
            monkeypatch.setattr(client_mod, "peer_uid", lambda s: os.getuid())
            assert (await client.request("GET", "/v1/state")).status == 200
        finally:
            await client.aclose()
