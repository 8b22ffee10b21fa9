"""Push delivery against a hostile or careless push service and hostile endpoints, through a real
`collie serve`, a real SDK agent and real sockets (issue 25 items 5, 6, 7; docs/push.md).

- 7: an agent's push title and line are masked whole, then cut: no part of a token shows.
"""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
import pytest

from tests.conftest import REPO, collie_env, run_collie
from tests.crewlab import wait_for
from tests.live import cleanup, short_dir
from tests.pushlab import FakePushService, Subscriber
from tests.test_durable_e2e import live

pytestmark = pytest.mark.slow
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"  # a GitHub token's shape: ghp_ and 36 characters

ASKER = """
import sys, trio
from crew.sdk import open_collie
from fixtures.agents import PERMISSION
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
        assert c.post("/api/push/subscribe", json=phone.json()).json() == {"ok": True}
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
