"""Crew pieces with no network: admission, addresses, crew.json, the service unit, link errors."""

from __future__ import annotations

import json
import stat

import pytest
import trio
from trio_websocket import ConnectionRejected

from collie.crew.crewconfig import CrewConfig, check_lead_address, read_crew, write_crew
from collie.crew.crewwire import Admission, admit, ws_url
from collie.crew.errors import ConfigError
from collie.crew.wire import WireRange

TOKEN = "0123456789abcdef" * 4


@pytest.mark.parametrize(("theirs", "ours", "floor", "expected"), [
    ((1, 1), (1, 1), 1, Admission(True)),
    ((1, 3), (2, 2), 1, Admission(True)),
    ((1, 1), (2, 3), 1, Admission(True, read_only=True)),   # older, not below the floor: read-only (O)
    ((1, 1), (3, 3), 2, Admission(False, reason="version")),  # below the floor
    ((4, 5), (2, 3), 1, Admission(False, reason="version")),  # newer than we speak
])
def test_crew_wire_admission(theirs, ours, floor, expected):
    assert admit(WireRange(*theirs), WireRange(*ours), floor) == expected


@pytest.mark.parametrize(("given", "url"), [
    ("wss://lead.example:8470", "wss://lead.example:8470/crew/v1"),
    ("https://lead.example:8470/", "wss://lead.example:8470/crew/v1"),
    ("http://127.0.0.1:8470", "ws://127.0.0.1:8470/crew/v1"),
    ("ws://localhost:1/crew/v1", "ws://localhost:1/crew/v1"),
])
def test_lead_address_forms(given, url):
    assert ws_url(given) == url


@pytest.mark.parametrize(("url", "ok"), [
    ("wss://lead.example:8470/crew/v1", True), ("ws://127.0.0.1:8470/crew/v1", True),
    ("ws://lead.example:8470/crew/v1", False), ("ws://127.0.0.1/crew/v1", False),
    ("ws://127.0.0.1@evil:80/crew/v1", False), ("ftp://x/crew/v1", False),
])
def test_ws_only_to_loopback(url, ok):
    """crew.md §2: wss:// on the network; ws:// only to 127.0.0.1/localhost (the T4 rule)."""
    assert (check_lead_address(url) is None) is ok


def test_crew_json_is_0600_and_strict(tmp_path):
    path = tmp_path / "crew.json"
    write_crew(path, CrewConfig(1, "wss://lead:8470/crew/v1", TOKEN, "laptop"))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_crew(path).label == "laptop"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "colour": 1}))
    with pytest.raises(ConfigError, match="colour"):
        read_crew(path)
    path.write_text(json.dumps({**data, "token": 5}))
    with pytest.raises(ConfigError) as err:
        read_crew(path)
    assert str(err.value) == 'crew.json: field "token": must be a string'  # never echoes a token


def test_join_refuses_bad_addresses_and_tokens(cli, paths, monkeypatch):
    monkeypatch.setenv("T", TOKEN)
    status, _, err = cli("crew", "join", "ws://lead.example:8470", "--token-env", "T")
    assert status == 2 and "wss://" in err
    status, _, err = cli("crew", "join", "wss://lead.example:8470", "--token-env", "UNSET")
    assert status == 2 and "UNSET is not set" in err
    status, _, err = cli("crew", "join", "wss://lead.example:8470", "--token-env", "T", "--label", "local")
    assert status == 2
    status, out, _ = cli("crew", "join", "wss://lead.example:8470", "--token-env", "T", "--label", "laptop")
    assert status == 0 and out.startswith("joined wss://lead.example:8470/crew/v1 as laptop") and TOKEN not in out


def test_invite_never_prints_the_token(cli, paths):
    status, out, _ = cli("crew", "invite", "--label", "laptop")
    token_file = paths.state_dir / "invites" / "laptop.token"
    token = token_file.read_text().strip()
    assert status == 0 and len(token) == 64 and token not in out and str(token_file) in out
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    assert cli("crew", "invite", "--label", "laptop")[0] == 1  # labels are unique


def test_service_install_writes_a_user_unit(cli, paths, tmp_path, monkeypatch):
    """I11: start at login, restart after a crash."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", "/nonexistent")  # no systemctl: it says what to run
    status, out, _ = cli("service", "install")
    unit = (tmp_path / "xdg" / "systemd" / "user" / "collie.service").read_text()
    assert status == 0 and "Restart=on-failure" in unit and "WantedBy=default.target" in unit
    assert f"Environment=COLLIE_STATE_DIR={paths.state_dir}" in unit and "systemctl --user" in out
    assert cli("service", "uninstall")[0] == 0


def test_link_errors_are_described_even_inside_exception_groups():
    from collie.crew.crewconfig import CrewConfig
    from collie.member.link import Link

    link = Link(CrewConfig(1, "ws://127.0.0.1:1/crew/v1", TOKEN, "x"), bridge=None, writer=None)
    rejected = ConnectionRejected(401, [], b"")
    assert "refused this member (HTTP 401)" in link.describe(ExceptionGroup("g", [rejected]))
    assert "may have slept" in link.describe(BaseExceptionGroup("g", [ExceptionGroup("h", [trio.TooSlowError()])]))


def test_service_unit_serves_with_the_users_host_and_port(cli, paths, tmp_path, monkeypatch):
    """10.7, 9.8: the unit carries the port and host the user runs with, starts the daemon with `-P`, and
    orders a user unit after no system target (a user manager has no network-online.target)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", "/nonexistent")
    unit_file = tmp_path / "xdg" / "systemd" / "user" / "collie.service"
    monkeypatch.setenv("COLLIE_PORT", "9123")
    status, out, _ = cli("service", "install")
    unit = unit_file.read_text()
    assert status == 0 and "serves on 127.0.0.1:9123" in out
    assert " -P -m collie.crew.cli.main serve --host 127.0.0.1 --port 9123\n" in unit
    assert "network-online.target" not in unit and "After=" not in unit
    status, _, _ = cli("service", "install", "--port", "9200", "--host", "localhost")
    assert status == 0 and "serve --host localhost --port 9200\n" in unit_file.read_text()
    status, _, err = cli("service", "install", "--port", "99999")
    assert status == 2 and "--port 99999 is not a port" in err


def test_service_unit_never_restarts_over_an_exit_a_restart_cannot_fix(cli, paths, tmp_path, monkeypatch):
    """I11: a broken config (78), a wrong command line (2) and a bridge already running (75) end the unit
    instead of restarting it every 2 s forever; the install says how the service starts at boot (linger)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", "/nonexistent")  # neither systemctl nor loginctl: it says what to run
    status, out, _ = cli("service", "install")
    unit = (tmp_path / "xdg" / "systemd" / "user" / "collie.service").read_text()
    assert status == 0 and "RestartPreventExitStatus=2 75 78\n" in unit
    assert "to start it at boot without a login: loginctl enable-linger " in out


def test_service_install_on_a_member_says_it_serves_nothing(cli, paths, tmp_path, monkeypatch):
    """I11, crew.md §1: a member's unit carries no host or port, and the install says so instead of
    `serves on 127.0.0.1:8470`; options that would shape a server are said to be unused."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("PATH", "/nonexistent")
    paths.config_dir.mkdir(parents=True, exist_ok=True)
    write_crew(paths.crew, CrewConfig(1, "wss://lead.lan:8470/crew/v1", TOKEN, "laptop"))
    status, out, _ = cli("service", "install", "--port", "9000")
    unit = (tmp_path / "xdg" / "systemd" / "user" / "collie.service").read_text()
    assert status == 0 and "serves on" not in out and "serves nothing" in out and "--port unused" in out
    assert "--port" not in unit and unit.split("ExecStart=")[1].split("\n")[0].endswith(" serve")


def test_a_member_says_serve_options_are_unused(caplog):
    """A member serves nothing: `collie serve --port 9000` on it says the option is unused (never silently)."""
    import argparse
    import logging

    from collie.member.daemon import _unused_options

    with caplog.at_level(logging.WARNING):
        _unused_options(argparse.Namespace(host=None, port="9000", tls_cert=None, tls_key=None, name=[]), None)
    assert "--port unused: this machine is a member of a crew (crew.json) and serves nothing" in caplog.text
