"""Durable agents as a person runs them: real agent processes, `collie durable attach`, `collie serve`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trustme

from collie.crew import control
from collie.crew.paths import Paths
from collie.crew.wire import ask_digest
from tests.conftest import REPO, BridgeProcess, collie_env, run_collie
from tests.crewlab import wait_for
from tests.livelab import cleanup, short_dir

pytestmark = pytest.mark.slow
TOKEN = "0123456789abcdef" * 4


@pytest.fixture
def run_dir():
    d = short_dir()
    yield d
    cleanup(d)


class Agents:
    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, kind: str, *args: str, env: dict | None = None) -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen([sys.executable, "-m", "collie.fixtures", kind, *args], cwd=REPO, env=env or dict(os.environ),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.procs.append(proc)
        line = proc.stdout.readline()
        assert line.startswith("listening "), (line, proc.stderr.read() if proc.poll() is not None else "")
        return proc, line.split(" ", 1)[1].strip()

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()
            p.stdout.close()
            p.stderr.close()


@pytest.fixture
def agents():
    a = Agents()
    yield a
    a.stop()




def live(paths) -> dict:
    return {a["name"]: a for a in control.call(paths.control_socket, "agents")["agents"]}


@contextlib.contextmanager
def deployer_lead():
    """A real `collie serve` in short temporary folders with the `deployer` fixture agent attached and
    ready: yields {base, paths, token, bridge}; stops both and removes the folders after."""
    run = short_dir()
    paths = Paths(config_dir=run / "config", state_dir=run / "state")
    agents = Agents()
    sock = str(run / "deployer" / "a.sock")
    agents.start("deployer", "--socket", sock)
    assert run_collie(paths, "durable", "attach", "deployer", "--socket", sock).returncode == 0
    b = BridgeProcess(paths, collie_env(paths))
    try:
        address = b.wait_ready()["address"]
        wait_for(lambda: live(paths)["deployer"]["status"] == "ready")
        token = (paths.state_dir / "api-token").read_text().strip()
        yield {"base": address, "paths": paths, "token": token, "bridge": b}
    finally:
        b.stop()
        b.proc.stdout.close()
        agents.stop()
        cleanup(run)


def test_attach_real_agents_list_them_and_survive_a_crash(paths, bridge, agents, run_dir):
    """Socket and loopback-HTTP agents show ready with runtime and counts; kill -9 and restart recover."""
    dep_sock = str(run_dir / "dep" / "app.sock")
    dep, _ = agents.start("deployer", "--socket", dep_sock)
    agents.start("asker", "--socket", str(run_dir / "ask" / "app.sock"))
    _, url = agents.start("streamer", "--url", "http://127.0.0.1:0", env={**os.environ, "COLLIE_TOKEN": TOKEN})
    agents.start("future", "--socket", str(run_dir / "fut" / "app.sock"))
    env = collie_env(paths, WEB_TOKEN=TOKEN)
    for name, how in (("deployer", ["--socket", dep_sock]), ("asker", ["--socket", str(run_dir / "ask" / "app.sock")]),
                      ("web", ["--url", url, "--token-env", "WEB_TOKEN"]),
                      ("future", ["--socket", str(run_dir / "fut" / "app.sock")])):
        assert run_collie(paths, "durable", "attach", name, *how, env=env).returncode == 0
    b = bridge(env=env)
    b.wait_ready()
    wait_for(lambda: all(a["status"] != "starting" for a in live(paths).values()))
    listing = run_collie(paths, "durable", "list", env=env).stdout
    rows = {line.split()[0]: line for line in listing.splitlines()[1:]}
    assert "Ready: deployer, local, 1 open, 1 waiting for you" in rows["deployer"]
    assert "Ready: asker, local, 4 open, 4 waiting for you" in rows["asker"]
    assert "Ready: streamer, local, 1 open" in rows["web"] and "(token set)" in rows["web"]
    assert "Version mismatch" in rows["future"]
    doctor = run_collie(paths, "doctor", env=env).stdout
    assert ("FAIL durable-hello future: incompatible: the durable agent speaks 2..3, this Collie speaks 1..1"
            in doctor)
    assert "ok   durable-hello deployer: wire 1..1 (deployer" in doctor
    log = paths.log.read_text()
    assert log.count("[durable] The durable agent speaks wire 2..3, this Collie speaks v1. "
                     "Update Collie, or the agent's SDK.") == 1
    assert TOKEN not in log

    # kill -9 leaves a stale socket: connection refused, and the doctor says what to do (T8)
    dep.send_signal(signal.SIGKILL)
    dep.wait()
    wait_for(lambda: live(paths)["deployer"]["status"] == "unreachable")
    assert live(paths)["deployer"]["reason"] == "connection-refused"
    assert live(paths)["deployer"]["open_count"] == 1  # the last good view stays
    doctor = run_collie(paths, "doctor", env=env).stdout
    assert "FAIL agent deployer: unreachable: connection-refused" in doctor and "remove the stale socket" in doctor
    agents.start("deployer", "--socket", dep_sock)  # the SDK removes the stale socket
    wait_for(lambda: live(paths)["deployer"]["status"] == "ready")
    assert "[durable] deployer: reachable again" in paths.log.read_text() or "restarted" in paths.log.read_text()


TLS_AGENT = """
import ssl, sys, trio
from collie.crew.sdk import open_collie
async def main():
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(sys.argv[1])
    async with open_collie(url="https://127.0.0.1:0", ssl_context=ctx, token=sys.argv[2], caps=["asks"],
                           runtime="tls") as c:
        c.conversation("c", title="Secure")
        c.ready()
        print("listening", c.address, flush=True)
        await trio.sleep_forever()
trio.run(main)
"""


def start_tls_agent(agents: Agents, tmp_path: Path, *hosts: str) -> tuple[str, Path]:
    """An SDK agent on https://127.0.0.1 with a certificate from a fresh test CA; (url, CA file)."""
    ca = trustme.CA()
    ca_file, cert_file = tmp_path / "ca.pem", tmp_path / "cert.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    ca.issue_cert(*hosts).private_key_and_cert_chain_pem.write_to_path(str(cert_file))
    proc = subprocess.Popen([sys.executable, "-c", TLS_AGENT, str(cert_file), TOKEN], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    agents.procs.append(proc)
    return proc.stdout.readline().split()[1], ca_file


def test_loopback_https_agent_with_a_test_ca(paths, bridge, agents, tmp_path):
    """T4: an https:// agent verified against the CA in SSL_CERT_FILE; it is `remote` (T9)."""
    url, ca_file = start_tls_agent(agents, tmp_path, "127.0.0.1", "localhost")
    env = collie_env(paths, T=TOKEN, SSL_CERT_FILE=str(ca_file))
    assert run_collie(paths, "durable", "attach", "sec", "--url", url, "--token-env", "T", env=env).returncode == 0
    bridge(env=env).wait_ready()
    got = wait_for(lambda: (lambda a: a if a["status"] != "starting" else None)(live(paths)["sec"]))
    assert got["status"] == "ready" and got["runtime"] == "tls" and got["local"] is False


def test_https_with_an_untrusted_certificate_is_a_tls_failure(paths, bridge, agents, tmp_path):
    url, _untrusted_ca = start_tls_agent(agents, tmp_path, "127.0.0.1")
    env = collie_env(paths, T=TOKEN)
    run_collie(paths, "durable", "attach", "sec", "--url", url, "--token-env", "T", env=env)
    bridge(env=env).wait_ready()
    got = wait_for(lambda: (lambda a: a if a["status"] != "starting" else None)(live(paths)["sec"]))
    assert got["status"] == "unreachable" and got["reason"] == "tls" and "CERTIFICATE_VERIFY_FAILED" in got["detail"]


def test_caller_check_refuses_writes_from_the_launcher(agents, run_dir):
    """T3: the process that launched the agent cannot answer its asks; reads are fine."""
    sock = str(run_dir / "d" / "app.sock")
    agents.start("deployer", "--socket", sock)
    with httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://agent") as c:
        ask = c.get("/v1/state").json()["conversations"][0]["asks"][0]
        r = c.post(f"/v1/asks/{ask['id']}/answer",
                   json={"request_id": "r1", "digest": ask_digest(ask), "option_ids": ["yes"]})
        assert r.status_code == 403 and r.json()["error"] == "unauthorized"
        assert c.get("/v1/state").json()["conversations"][0]["asks"]  # nothing was applied


def test_the_ten_line_hello_example_runs(run_dir, tmp_path):
    """K1, K2: docs/examples/hello.py prints `listening <socket>`, waits, and prints the answer."""
    sock = str(run_dir / "hello" / "app.sock")
    out = tmp_path / "out.txt"
    env = {**os.environ, "COLLIE_DURABLE_SOCKET": sock, "PYTHONPATH": str(REPO)}
    # launched through a shell that exits at once, so this test is not the agent's parent (T3)
    subprocess.run(["sh", "-c", f"{sys.executable} docs/examples/hello.py > {out} 2>&1 &"], cwd=REPO, env=env,
                   check=True)
    wait_for(lambda: out.exists() and "listening" in out.read_text())
    assert out.read_text().splitlines()[0] == f"listening {sock}"
    with httpx.Client(transport=httpx.HTTPTransport(uds=sock), base_url="http://agent") as c:
        assert c.post("/hello", json={"collie": "0.1.0", "wire": {"min": 1, "max": 1}, "host": "h", "name": "hello"}
                      ).json()["caps"] == ["asks"]
        ask = c.get("/v1/state").json()["conversations"][0]["asks"][0]
        assert ask["title"] == "Deploy to staging?" and ask["kind"] == "choice"
        r = c.post(f"/v1/asks/{ask['id']}/answer", json={"request_id": "r1", "digest": ask_digest(ask),
                                                         "option_ids": ["no"]})
        assert r.json() == {"outcome": "accepted"}
    wait_for(lambda: "answer: no" in out.read_text())
    wait_for(lambda: not Path(sock).exists())
    assert len(sock) < 103
