"""The bridge daemon as a person runs it: real `collie serve` processes, real control socket."""

from __future__ import annotations

import json
import os
import signal
import stat

import httpx
import pytest

from collie.crew import control
from tests.conftest import collie_env, run_collie
from tests.procs import terminate

pytestmark = pytest.mark.slow

TOKEN = "0123456789abcdef" * 4

BROKEN = {
    "bad json": ('[{"name": "desk",', "sources.json is not valid JSON"),
    "unknown field": ('[{"name": "desk", "kind": "durable", "socket": "/s", "colour": "red"}]', 'field "colour"'),
    "url without token": ('[{"name": "edge", "kind": "durable", "url": "https://e"}]', 'entry 1 ("edge"): field "url": missing "token"'),
    "reserved name": ('[{"name": "default", "kind": "durable", "socket": "/s"}]', '"default" is the main session'),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_config_stops_the_bridge_with_one_fatal_line(paths, case):
    """A4: the bridge stops at start with `[bridge] FATAL:` naming entry and field; `collie logs` shows it."""
    text, words = BROKEN[case]
    paths.config_dir.mkdir(parents=True)
    paths.sources.write_text(text)
    done = run_collie(paths, "serve", "--port", "0")
    assert done.returncode == 78
    fatal = [line for line in done.stderr.splitlines() if line.startswith("[bridge] FATAL:")]
    assert len(fatal) == 1 and words in fatal[0]
    assert "Traceback" not in done.stderr
    logs = run_collie(paths, "logs")
    assert logs.returncode == 0 and words in logs.stdout and "[bridge] FATAL:" in logs.stdout
    assert stat.S_IMODE(paths.log.stat().st_mode) == 0o600
    assert paths.sources.read_text() == text  # never rewritten


def test_serve_list_doctor_restart_and_graceful_stop(paths, bridge, tmp_path):
    """A3, A6, A11, V1–V3: attach two agents, serve, list them, change the file, restart, stop."""
    env = collie_env(paths, EDGE_TOKEN=TOKEN)
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    assert run_collie(paths, "durable", "attach", "desk", "--socket", str(folder / "desk.sock"), env=env).returncode == 0
    assert run_collie(paths, "durable", "attach", "edge", "--url", "https://edge.invalid", "--token-env", "EDGE_TOKEN",
                      env=env).returncode == 0
    os.chmod(paths.sources, 0o644)
    b = bridge(env=env)
    pong = b.wait_ready()
    assert stat.S_IMODE(paths.sources.stat().st_mode) == 0o600
    assert "had mode 0644; tightened to 0600" in paths.log.read_text()
    assert httpx.get(f"{pong['address']}/healthz").json()["ok"] is True

    listing = run_collie(paths, "durable", "list", env=env)
    assert listing.returncode == 0
    assert "(token set)" in listing.stdout and TOKEN not in listing.stdout
    assert {"desk", "edge"} <= {line.split()[0] for line in listing.stdout.splitlines()[1:]}

    # a new entry is not loaded until a restart (A3); the doctor says so
    assert run_collie(paths, "durable", "attach", "lab", "--url", "https://lab.invalid", "--token-env", "EDGE_TOKEN",
                      env=env).returncode == 0
    doctor = run_collie(paths, "doctor", env=env)
    assert doctor.returncode == 1
    assert "FAIL agent lab: entry not loaded: run `collie restart`" in doctor.stdout
    assert "ok   bridge: running" in doctor.stdout

    restarted = run_collie(paths, "restart", env=env)
    assert restarted.returncode == 0 and f"pid {b.proc.pid}" in restarted.stdout
    names = {a["name"] for a in control.call(paths.control_socket, "agents")["agents"]}
    assert names == {"desk", "edge", "lab"}

    status = run_collie(paths, "status", env=env)
    assert "bridge: running" in status.stdout and "durable agents: 3" in status.stdout

    assert b.stop() == 0
    log = paths.log.read_text()
    assert "SIGTERM received: shutting down" in log and "[bridge] stopped" in log
    assert TOKEN not in log
    assert not paths.control_socket.exists()


def test_a_second_bridge_is_refused(paths, bridge):
    bridge().wait_ready()
    second = run_collie(paths, "serve", "--port", "0")
    assert second.returncode == 75 and "a bridge is already running" in second.stderr


def test_a_certificate_without_its_key_is_a_usage_error(paths):
    """Off loopback the lead serves TLS only (tests/system/test_pairing.py); half a certificate is refused at once."""
    done = run_collie(paths, "serve", "--host", "0.0.0.0", "--port", "0", "--tls-cert", "/nonexistent.pem")
    assert done.returncode == 2 and "--tls-key" in done.stderr


def test_env_config_error_does_not_stop_the_bridge(paths, bridge):
    """A13: a wrong .env combination shows `default` Unreachable with reason `config`."""
    paths.config_dir.mkdir(parents=True)
    paths.dotenv.write_text(f"COLLIE_MUX=durable\nCOLLIE_DURABLE_TOKEN={TOKEN}\n")
    bridge().wait_ready()
    agents = control.call(paths.control_socket, "agents")["agents"]
    assert [(a["name"], a["status"], a["reason"]) for a in agents] == [("default", "unreachable", "config")]
    assert TOKEN not in paths.log.read_text()


def test_programs_off(paths, bridge, tmp_path):
    """A14: one log line, no agents, doctor and list say durable agents are off, file untouched."""
    paths.config_dir.mkdir(parents=True)
    paths.sources.write_text('[{"name": "desk", "kind": "durable", "socket": "/run/desk.sock"}]')
    os.chmod(paths.sources, 0o600)
    paths.dotenv.write_text("COLLIE_PROGRAMS=off\n")
    bridge().wait_ready()
    assert control.call(paths.control_socket, "agents")["agents"] == []
    assert paths.log.read_text().count("durable agents are off") == 1
    assert "durable agents are off" in run_collie(paths, "doctor").stdout
    assert "durable agents are off" in run_collie(paths, "durable", "list").stdout


def test_legacy_logs_move_once(paths, bridge):
    """A15: logs an older durable-only instance kept in <state>/durable/ move to durable/default/, once."""
    legacy = paths.durable_dir
    legacy.mkdir(parents=True)
    (legacy / "program.log").write_text("old line\n")
    b = bridge()
    b.wait_ready()
    moved = paths.agent_dir("default") / "program.log"
    assert moved.read_text() == "old line\n" and stat.S_IMODE(moved.stat().st_mode) == 0o600
    assert stat.S_IMODE(paths.agent_dir("default").stat().st_mode) == 0o700
    assert not (legacy / "program.log").exists()
    b.stop()
    bridge().wait_ready()
    assert paths.log.read_text().count("moved 1 log file") == 1


def test_sighup_restarts_in_place(paths, bridge):
    b = bridge()
    first = b.wait_ready()
    b.proc.send_signal(signal.SIGHUP)
    import time

    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            again = control.call(paths.control_socket, "ping", timeout=1)
            if again["started"] != first["started"]:
                break
        except Exception:
            pass
        time.sleep(0.05)
    else:
        raise AssertionError("no restart")
    assert again["pid"] == first["pid"]


def test_state_folders_are_private(paths, bridge, tmp_path):
    """S1: <state> and <state>/durable/<name> are 0700."""
    paths.config_dir.mkdir(parents=True)
    paths.sources.write_text(json.dumps([{"name": "desk", "kind": "durable", "socket": str(tmp_path / "d.sock")}]))
    bridge().wait_ready()
    for folder in (paths.state_dir, paths.agent_dir("desk")):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(paths.control_socket.stat().st_mode) == 0o600


HOSTILE = "import pathlib, sys\npathlib.Path({marker!r}).write_text('ran')\nsys.exit(3)\n"


def test_a_module_in_the_current_folder_never_replaces_the_daemon(paths, tmp_path):
    """9.8: `collie serve` and `collie restart` run from a folder holding lead.py / member.py / crew.py:
    the real daemon starts and restarts, the folder's files never run."""
    import subprocess
    import sys
    import time
    from pathlib import Path

    hostile = tmp_path / "downloads"
    hostile.mkdir()
    marker = tmp_path / "hostile-code-ran"
    for name in ("lead.py", "member.py", "bridge.py"):
        (hostile / name).write_text(HOSTILE.format(marker=str(marker)))
    collie = str(Path(sys.executable).parent / "collie")  # the installed command, as a user runs it
    env = collie_env(paths)
    proc = subprocess.Popen([collie, "serve", "--port", "0"], cwd=hostile, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        first = None
        while first is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                first = control.call(paths.control_socket, "ping", timeout=1)
            except Exception:
                time.sleep(0.05)
        assert first is not None, f"the daemon did not start (exit {proc.poll()})"
        restarted = subprocess.run([collie, "restart"], cwd=hostile, env=env, capture_output=True, text=True, timeout=30)
        assert restarted.returncode == 0, restarted.stderr
        assert control.call(paths.control_socket, "ping")["pid"] == first["pid"]
        assert not marker.exists()
    finally:
        terminate(proc)


def test_restart_refuses_a_broken_config_and_keeps_the_bridge(paths, bridge):
    """10.2, A4: with a trailing comma in sources.json, `collie restart` and SIGHUP say why in one line,
    exit non-zero, and the running bridge keeps serving with what it loaded."""
    import time

    b = bridge()
    first = b.wait_ready()
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    paths.sources.write_text('[\n  {"name": "desk", "kind": "durable", "socket": "/run/desk.sock"},\n]\n')
    done = run_collie(paths, "restart")
    assert done.returncode == 78
    assert done.stderr.splitlines() == [
        "collie: not restarted: sources.json is not valid JSON at line 2 column 66: a trailing comma (remove it); "
        f"the running bridge (pid {first['pid']}) keeps its configuration"]
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + 10
    while "SIGHUP received: not restarting" not in paths.log.read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "SIGHUP received: not restarting, the new configuration is broken: sources.json" in paths.log.read_text()
    assert control.call(paths.control_socket, "ping")["started"] == first["started"]
    doctor = run_collie(paths, "doctor").stdout
    assert "FAIL config: sources.json is not valid JSON at line 2" in doctor
    paths.sources.write_text('[\n  {"name": "desk", "kind": "durable", "socket": "/run/desk.sock"}\n]\n')
    assert run_collie(paths, "restart").returncode == 0  # fixed: the restart goes through


@pytest.mark.parametrize(("argv", "env", "line"), [
    (["--port", "99999"], {}, "[bridge] FATAL: --port 99999 is not a port: give 1-65535 (0 picks a free one)"),
    (["--port", "http"], {}, "[bridge] FATAL: --port http is not a port: give 1-65535 (0 picks a free one)"),
    ([], {"COLLIE_PORT": "eighty"}, "[bridge] FATAL: COLLIE_PORT eighty is not a port: give 1-65535 (0 picks a free one)"),
    (["--tls-cert", "/nonexistent.pem"], {}, "[bridge] FATAL: --tls-cert and --tls-key go together: give both, or neither"),
    (["--prot", "9000"], {}, "[bridge] FATAL: unrecognized arguments: --prot 9000 (see `collie serve --help`)"),
])
def test_a_bad_option_is_one_line(paths, argv, env, line):
    """10.4: a bad start-up option gives one line naming what to change, exit 2, no traceback."""
    done = run_collie(paths, "serve", *argv, env=collie_env(paths, **env))
    assert done.returncode == 2 and done.stderr.splitlines() == [line]


def test_a_port_in_use_is_one_line_and_leaves_no_credential(paths):
    """10.4: the port is taken: `cannot listen on H:P: address already in use (… --port)`, exit 1,
    no traceback, and the API credential this failed start made is not left behind."""
    import socket

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    try:
        done = run_collie(paths, "serve", "--port", str(port))
    finally:
        taken.close()
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        f"[bridge] FATAL: cannot listen on 127.0.0.1:{port}: address already in use "
        "(stop the program that listens there, or choose another --port)"]
    assert not (paths.state_dir / "api-token").exists()


def test_env_and_crew_json_are_tightened_at_start(paths, bridge):
    """9.11, A6: .env (0666) and crew.json (0644) hold tokens: the start makes them 0600 and logs it."""
    paths.config_dir.mkdir(parents=True)
    os.chmod(paths.config_dir, 0o700)
    paths.dotenv.write_text(f"COLLIE_MUX=durable\nCOLLIE_DURABLE_URL=https://x.invalid\nCOLLIE_DURABLE_TOKEN={TOKEN}\n")
    os.chmod(paths.dotenv, 0o666)
    paths.crew.write_text(json.dumps({"version": 1, "lead": "ws://127.0.0.1:9/crew/v1", "token": TOKEN[::-1],
                                      "label": "lap"}))
    os.chmod(paths.crew, 0o644)
    bridge().wait_ready()
    for f, old in ((paths.dotenv, "0666"), (paths.crew, "0644")):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert f"{f} had mode {old}; tightened to 0600" in paths.log.read_text()
    assert TOKEN not in paths.log.read_text() and TOKEN[::-1] not in paths.log.read_text()
