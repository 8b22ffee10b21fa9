"""`collie durable attach|detach|list` (features A2, A5, A9–A12, A14)."""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest

TOKEN = "0123456789abcdef" * 4


@pytest.fixture
def private_socket(tmp_path):
    folder = tmp_path / "run" / "desk"
    folder.mkdir(parents=True, mode=0o700)
    path = folder / "app.sock"
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, 0o600)
    yield str(path)
    s.close()


def test_no_verb_or_unknown_verb_prints_usage_and_exits_2(cli):
    """A10."""
    status, _, err = cli("durable")
    assert status == 2 and "usage: collie durable" in err
    status, _, err = cli("durable", "frobnicate")
    assert status == 2 and "invalid choice" in err


def test_attach_socket_prints_path_and_writes_0600(cli, paths, private_socket):
    """A2, A6: attach prints the path it wrote; the file is 0600."""
    status, out, _ = cli("durable", "attach", "desk", "--socket", private_socket)
    assert status == 0
    assert out.splitlines()[:2] == ["attached desk", f"wrote {paths.sources}"]
    assert stat.S_IMODE(paths.sources.stat().st_mode) == 0o600
    assert json.loads(paths.sources.read_text()) == [{"name": "desk", "kind": "durable", "socket": private_socket}]


def test_attach_url_reads_token_from_env_and_never_prints_it(cli, paths, monkeypatch):
    """A12, T5: the token comes from --token-env only; re-attach says `updated <name>`; no output shows it."""
    monkeypatch.setenv("EDGE_TOKEN", TOKEN)
    status, out, err = cli("durable", "attach", "edge", "--url", "https://edge.example.com", "--token-env", "EDGE_TOKEN")
    assert status == 0 and out.startswith("attached edge\n")
    status, out2, err2 = cli("durable", "attach", "edge", "--url", "https://edge.example.com", "--token-env", "EDGE_TOKEN")
    assert status == 0 and out2.startswith("updated edge\n")
    status, listing, err3 = cli("durable", "list")
    assert "(token set)" in listing
    for text in (out, err, out2, err2, listing, err3):
        assert TOKEN not in text
    assert json.loads(paths.sources.read_text())[0]["token"] == TOKEN


@pytest.mark.parametrize(("argv", "env", "words"), [
    (["--url", "https://e.example.com", "--token-env", "UNSET_VAR"], {}, "UNSET_VAR is not set"),
    (["--url", "https://e.example.com", "--token-env", "T"], {"T": "short"}, "shorter than 32 bytes"),
    (["--url", "http://e.example.com:80", "--token-env", "T"], {"T": TOKEN}, "plain http:// is allowed only"),
    (["--url", "http://127.0.0.1@evil:80", "--token-env", "T"], {"T": TOKEN}, "user name or password"),
    (["--socket", "relative.sock"], {}, "is not absolute"),
    (["--socket", "/" + "x" * 110], {}, "the limit is 103"),
])
def test_attach_refuses_bad_addresses_and_tokens(cli, paths, monkeypatch, argv, env, words):
    """A9: attach checks T1–T5 before writing; nothing is written on a refusal."""
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    status, out, err = cli("durable", "attach", "edge", *argv)
    assert status == 2 and words in err
    assert not paths.sources.exists()
    assert TOKEN not in out + err


def test_attach_refuses_a_public_socket_folder(cli, paths, tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o755)
    status, _, err = cli("durable", "attach", "desk", "--socket", str(folder / "app.sock"))
    assert status == 2 and "socket-not-private" in err and "0755" in err
    assert not paths.sources.exists()


def test_attach_socket_with_token_env_or_url_without_is_a_usage_error(cli, private_socket):
    assert cli("durable", "attach", "desk", "--socket", private_socket, "--token-env", "X")[0] == 2
    assert cli("durable", "attach", "desk", "--url", "https://e.example.com")[0] == 2
    assert cli("durable", "attach", "desk")[0] == 2


def test_attach_socket_on_windows_points_to_url(cli, monkeypatch, private_socket):
    """A10: on Windows `attach --socket` exits 2 and points to --url and --token-env."""
    monkeypatch.setattr("sys.platform", "win32")
    status, _, err = cli("durable", "attach", "desk", "--socket", private_socket)
    assert status == 2 and "--url" in err and "--token-env" in err


@pytest.mark.parametrize("name", ["Desk", "default", "-x", "a" * 33, "a_b"])
def test_attach_checks_the_name(cli, private_socket, name):
    """A4, A7: the name rule, and `default` is reserved."""
    status, _, err = cli("durable", "attach", name, "--socket", private_socket)
    assert status == 2 and err


def test_attach_and_detach_refuse_a_corrupt_file(cli, paths, private_socket):
    """A5: a typo never costs the other entries."""
    paths.config_dir.mkdir(parents=True)
    broken = '[{"name": "desk", "kind": "durable", "socket": "/s"}'
    paths.sources.write_text(broken)
    status, _, err = cli("durable", "attach", "other", "--socket", private_socket)
    assert status == 78 and "not valid JSON" in err
    status, _, err = cli("durable", "detach", "desk")
    assert status == 78
    assert paths.sources.read_text() == broken


def test_detach(cli, paths, private_socket):
    cli("durable", "attach", "desk", "--socket", private_socket)
    status, out, _ = cli("durable", "detach", "desk")
    assert status == 0 and out.startswith("detached desk\n")
    assert json.loads(paths.sources.read_text()) == []
    status, _, err = cli("durable", "detach", "desk")
    assert status == 1 and "no durable agent named 'desk'" in err


def test_list_without_a_bridge_says_what_it_can(cli, private_socket):
    """A11: with no bridge, list still shows the entries and says statuses are unknown."""
    cli("durable", "attach", "desk", "--socket", private_socket)
    status, out, _ = cli("durable", "list")
    assert status == 0
    assert "desk" in out and "bridge not running" in out and "statuses are unknown" in out


def test_list_with_programs_off(cli, paths, private_socket):
    """A14: list says durable agents are off; the file is left untouched."""
    cli("durable", "attach", "desk", "--socket", private_socket)
    before = paths.sources.read_bytes()
    (paths.config_dir / ".env").write_text("COLLIE_PROGRAMS=off\n")
    status, out, _ = cli("durable", "list")
    assert "durable agents are off" in out and "off" in out.splitlines()[-2]
    assert paths.sources.read_bytes() == before
