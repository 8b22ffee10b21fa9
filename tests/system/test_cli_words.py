"""What the `collie` command prints (issues 9.5, 9.15, 10.5): peer values escaped, words that say it once.

The bridge here is a fake that speaks the control protocol (`collie.crew.control`) from a thread, so each
test chooses exactly what the agents and members "said" — including newlines and escape sequences.
"""

from __future__ import annotations

import json
import os
import socket
import socketserver
import threading
import time

import pytest

from collie.crew.crewstore import CrewStore
from collie.crew.fsutil import ensure_private_dir

TOKEN = "0123456789abcdef" * 4
FORGED = "x\n[bridge] FATAL: forged\x1b[2J\x1b]0;owned\x07"
ESC = "\x1b"


class FakeBridge:
    """Answers `collie`'s control calls with canned replies (op → dict)."""

    def __init__(self, path, replies: dict[str, dict]) -> None:
        self.replies = replies
        fake = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                op = json.loads(self.rfile.readline())["op"]
                reply = {"ok": True, **fake.replies[op]} if op in fake.replies else {"ok": False, "error": f"no {op}"}
                self.wfile.write(json.dumps(reply).encode() + b"\n")

        ensure_private_dir(path.parent)
        self.server = socketserver.ThreadingUnixStreamServer(str(path), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def ping(role="lead", address="http://127.0.0.1:8470"):
    return {"pid": 4242, "collie": "0.1.0", "role": role, "address": address, "started": time.time(), "agents": 1,
            "programs_off": False}


def agent(name="desk", **kw):
    base = {"name": name, "status": "ready", "runtime": "durable", "local": True, "open_count": 1,
            "waiting_count": 0, "wire": "1..1", "instance": "i1", "caps": ["history"], "reason": None, "detail": None}
    return {**base, **kw}


@pytest.fixture
def fake_bridge(paths):
    made = []

    def start(**replies):
        fb = FakeBridge(paths.control_socket, {"program": {"reads": 0, "outcomes": {}}, **replies})
        made.append(fb)
        return fb

    yield start
    for fb in made:
        fb.close()


@pytest.fixture
def desk(paths, tmp_path):
    """sources.json with one socket agent `desk` whose socket exists and is private."""
    folder = tmp_path / "run"
    folder.mkdir(mode=0o700)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(folder / "desk.sock"))
    os.chmod(folder / "desk.sock", 0o600)
    ensure_private_dir(paths.config_dir)
    paths.sources.write_text(json.dumps([{"name": "desk", "kind": "durable", "socket": str(folder / "desk.sock")}]))
    os.chmod(paths.sources, 0o600)
    yield str(folder / "desk.sock")
    s.close()


def invite(paths, *labels):
    ensure_private_dir(paths.state_dir)
    store = CrewStore(paths.state_dir / "crew.sqlite")
    for n, label in enumerate(labels):
        store.invite(label, f"{n:064d}")
    store.close()


def no_forgery(text: str) -> None:
    """No escape character reaches the terminal and no printed line pretends to be the bridge's."""
    assert ESC not in text and "\x07" not in text
    assert not any(line.startswith("[bridge] FATAL") for line in text.splitlines())


def test_every_printer_escapes_what_agents_and_members_said(cli, paths, fake_bridge, desk):
    """9.5: an agent's runtime and caps, a member's version: shown with visible escapes, never raw."""
    invite(paths, "laptop")
    fake_bridge(ping=ping(), agents={"programs_off": False, "agents": [agent(runtime=FORGED, caps=[FORGED])]},
                crew={"members": [{"label": "laptop", "online": True, "version": FORGED, "read_only": False,
                                   "agents": 1, "last_seen": time.time(), "offline_since": None}]})
    for argv in (("durable", "list"), ("doctor",), ("status",), ("crew", "list")):
        status, out, err = cli(*argv)
        no_forgery(out + err)
    assert "\\n[bridge] FATAL: forged\\x1b[2J" in cli("durable", "list")[1]
    assert "\\x1b]0;owned\\x07" in cli("crew", "list")[1]
    assert "\\x1b[2J" in cli("doctor")[1]


def test_durable_list_masks_a_password_in_a_hand_written_url(cli, paths):
    """9.15: a URL with user:password (refused by T4 anyway) is listed with the password masked."""
    ensure_private_dir(paths.config_dir)
    paths.sources.write_text(json.dumps([{"name": "edge", "kind": "durable", "url": "https://bob:hunter2@edge.example/x",
                                          "token": TOKEN}]))
    status, out, _ = cli("durable", "list")
    assert status == 0 and "https://bob:***@edge.example/x" in out and "hunter2" not in out and TOKEN not in out
    assert "hunter2" not in cli("doctor")[1]


def test_a_member_says_link_to_the_lead_not_phone_api(cli, paths, fake_bridge):
    """10.5: on a member, status and doctor name the link to the lead; a member serves no phone."""
    ensure_private_dir(paths.config_dir)
    paths.crew.write_text(json.dumps({"version": 1, "lead": "ws://127.0.0.1:9/crew/v1", "token": TOKEN,
                                      "label": "laptop"}))
    os.chmod(paths.crew, 0o600)
    fake_bridge(ping=ping(role="member", address="ws://127.0.0.1:9/crew/v1"), agents={"agents": []},
                link={"lead": "ws://127.0.0.1:9/crew/v1", "label": "laptop", "connected": True, "since": time.time(),
                      "last_contact": time.time(), "last_error": None, "read_only": False})
    _, status, _ = cli("status")
    _, doctor, _ = cli("doctor")
    assert "phone API" not in status and "phone API" not in doctor
    assert "running (pid 4242), a member of the lead at ws://127.0.0.1:9/crew/v1 (the link: see crew below)" in doctor
    _, listing, _ = cli("crew", "list")
    assert "no members" not in listing and "invite" not in listing
    assert "members are listed on the lead" in listing


def test_no_phrase_twice(cli, paths, fake_bridge, desk):
    """10.5: `not running` and `nothing listens there` are each said once."""
    status, out, _ = cli("status")
    assert status == 1 and "bridge: not running (start it with `collie serve`)" in out
    assert "not running (no bridge" not in out
    _, doctor, _ = cli("doctor")
    assert "FAIL bridge: not running (start it with `collie serve`)" in doctor
    detail = "connection refused: nothing listens there (a stale socket, or the agent is down)"
    fake_bridge(ping=ping(), agents={"agents": [agent(status="unreachable", reason="connection-refused", detail=detail)]},
                crew={"members": []})
    _, doctor, _ = cli("doctor")
    line = next(line for line in doctor.splitlines() if line.startswith("FAIL agent desk"))
    assert line.count("nothing listens there") == 1 and "remove the stale socket" in line


def test_members_invited_after_the_lead_started_are_counted(cli, paths, fake_bridge):
    """10.5: status and doctor count every invited member, not only those the running lead loaded."""
    invite(paths, "laptop", "studio")
    fake_bridge(ping=ping(), agents={"agents": []},
                crew={"members": [{"label": "laptop", "online": True, "version": "0.1.0", "read_only": False,
                                   "agents": 0, "last_seen": time.time(), "offline_since": None}]})
    assert "crew: lead, 1 of 2 members online" in cli("status")[1]
    doctor = cli("doctor")[1]
    assert "lead, 1 of 2 members online (offline: studio;" in doctor and "collie crew remove" in doctor
    listing = cli("crew", "list")[1].splitlines()
    assert listing[0].split() == ["LABEL", "STATE", "LAST", "SEEN", "COLLIE", "AGENTS"]
    assert listing[1].startswith("laptop") and "online" in listing[1]
    assert listing[2].startswith("studio") and "never connected" in listing[2]
    assert "collie crew remove LABEL" in listing[-1]


def test_join_restart_with_no_bridge_is_not_a_failure(cli, paths, monkeypatch):
    """10.5: `crew join --restart` with no bridge running says it joined and how to start; exit 0."""
    monkeypatch.setenv("MEMBER_TOKEN", TOKEN)
    status, out, err = cli("crew", "join", "ws://127.0.0.1:8470", "--token-env", "MEMBER_TOKEN", "--label", "lap",
                           "--restart")
    assert status == 0, err
    assert "joined ws://127.0.0.1:8470/crew/v1 as lap" in out and "no bridge is running: `collie serve`" in out


def test_join_speaks_of_the_member_token(cli, paths, capsys):
    """10.5: --token-env's help and its error name the member token, not an agent's."""
    status, _, err = cli("crew", "join", "ws://127.0.0.1:8470", "--token-env", "UNSET_VAR")
    assert status == 2 and "member token" in err and "agent" not in err
    with pytest.raises(SystemExit):
        from collie.crew.cli.main import main

        main(["crew", "join", "--help"])
    assert "member token" in capsys.readouterr().out


@pytest.mark.parametrize("where", ["environment", ".env"])
def test_invite_with_no_lead_running_uses_collie_port(cli, paths, monkeypatch, where):
    """10.5: the join command printed by invite carries the port `collie serve` would take."""
    if where == ".env":
        ensure_private_dir(paths.config_dir)
        paths.dotenv.write_text("COLLIE_PORT=9555\n")
    else:
        monkeypatch.setenv("COLLIE_PORT", "9555")
    status, out, _ = cli("crew", "invite", "--label", "lab")
    assert status == 0 and "collie crew join ws://127.0.0.1:9555/crew/v1" in out


def test_the_same_socket_under_two_names_is_refused(cli, paths, desk):
    """10.5: attaching a socket that another name already reaches is refused, naming that name."""
    status, _, err = cli("durable", "attach", "desk2", "--socket", desk)
    assert status == 2 and 'already attached as "desk"' in err
    assert "desk2" not in paths.sources.read_text()
    assert cli("durable", "attach", "desk", "--socket", desk)[0] == 0  # re-attaching the same name is an update


def test_serve_help_lists_its_options(cli):
    """10.8: `collie serve --help` lists --host, --port, --tls-cert and --tls-key."""
    status, out, _ = cli("serve", "--help")
    assert status == 0
    for option in ("--host", "--port", "--tls-cert", "--tls-key", "COLLIE_PORT"):
        assert option in out


def test_doctor_warns_about_two_hand_written_names_for_one_socket(cli, paths, desk):
    """10.5: a sources.json written by hand with one socket under two names: doctor names both."""
    entries = json.loads(paths.sources.read_text()) + [{"name": "desk-two", "kind": "durable", "socket": desk}]
    paths.sources.write_text(json.dumps(entries))
    _, doctor, _ = cli("doctor")
    assert 'warn config: "desk-two" reaches the same socket as "desk"' in doctor


@pytest.mark.parametrize("verb", [["doctor"], ["status"], ["durable", "list"], ["tokens", "list"]])
def test_output_piped_to_a_reader_that_left_is_no_traceback(paths, verb):
    """`collie status | head -1`: when the reader of the output has gone, the command ends quietly
    with the shell's status for SIGPIPE (141), never with a BrokenPipeError traceback."""
    import subprocess
    import sys

    from tests.conftest import REPO, collie_env
    read, write = os.pipe()
    os.close(read)  # the reader is gone before collie writes a byte
    try:
        proc = subprocess.run([sys.executable, "-m", "collie.crew.cli.main", *verb], cwd=REPO, env=collie_env(paths),
                              stdout=write, stderr=subprocess.PIPE, text=True, timeout=30)
    finally:
        os.close(write)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr
    assert proc.returncode == 141


def test_status_says_when_an_agent_was_last_polled(cli, paths, fake_bridge):
    """I11: `collie status` says when the bridge last read one of its agents, or that none was reached yet."""
    first = fake_bridge(ping=ping(), agents={"agents": [agent(polled_ago=3.4), agent(name="edge", polled_ago=75.0)]},
                        crew={"members": []})
    assert "durable agents: 2 (2 ready), last polled 3 s ago" in cli("status")[1]
    first.close()
    paths.control_socket.unlink()
    fake_bridge(ping=ping(), agents={"agents": [agent(status="unreachable", reason="timeout", polled_ago=None)]},
                crew={"members": []})
    assert "durable agents: 1 (1 unreachable), none reached yet" in cli("status")[1]
