"""Transport rules (features T1, T2, T4, T5, T9): the private-path table and the URL look-alike table."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from collie.crew.security import (check_socket_private, check_socket_shape, check_token, check_url, is_local_url,
                                  same_secret)


def make_socket(path: Path, mode: int = 0o600) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    os.chmod(path, mode)
    return s


@pytest.fixture
def tree(tmp_path):
    """<tmp>/base (0755) / run (0700) / app.sock (0600) — a private path."""
    base = tmp_path / "base"
    base.mkdir(mode=0o755)
    os.chmod(base, 0o755)
    run = base / "run"
    run.mkdir(mode=0o700)
    sock = make_socket(run / "app.sock")
    yield base, run, run / "app.sock"
    sock.close()


def test_private_path_passes(tree):
    """T2: a 0600 socket in a 0700 folder with no writable ancestor is private."""
    assert check_socket_private(str(tree[2])) is None


@pytest.mark.parametrize("mode", [0o701, 0o710, 0o770, 0o717, 0o1777, 0o750, 0o705])
def test_socket_folder_must_be_0700(tree, mode):
    """T2: the socket's own folder must be exactly 0700 (sticky does not help there)."""
    _, run, sock = tree
    os.chmod(run, mode)
    problem = check_socket_private(str(sock))
    assert problem and problem.code == "socket-not-private"
    assert str(run) in problem.text and f"{mode:04o}" in problem.text and "0700" in problem.text


@pytest.mark.parametrize(("mode", "ok"), [(0o775, False), (0o757, False), (0o777, False), (0o1777, True), (0o755, True)])
def test_ancestor_writable_by_others_unless_sticky(tree, mode, ok):
    """T2: no ancestor writable by group or others, except sticky folders like /tmp."""
    base, _, sock = tree
    os.chmod(base, mode)
    problem = check_socket_private(str(sock))
    if ok:
        assert problem is None
    else:
        assert problem.code == "socket-not-private"
        assert str(base) in problem.text and "writable by group or others" in problem.text


def test_folder_owned_by_another_user(tree):
    """T2: the socket's folder must be owned by the user."""
    _, run, sock = tree
    os.chown(run, 4242, 4242)
    problem = check_socket_private(str(sock))
    assert problem.code == "socket-not-private" and "owned by uid 4242" in problem.text and str(run) in problem.text


def test_socket_owned_by_another_user(tree):
    _, _, sock = tree
    os.chown(sock, 4242, 4242)
    problem = check_socket_private(str(sock))
    assert problem.code == "socket-not-private" and "owned by uid 4242" in problem.text


def test_ancestor_owned_by_another_user(tree):
    base, _, sock = tree
    os.chown(base, 4242, 4242)
    problem = check_socket_private(str(sock))
    assert problem.code == "socket-not-private" and str(base) in problem.text


@pytest.mark.parametrize("mode", [0o660, 0o666, 0o640, 0o604])
def test_socket_mode_gives_others_nothing(tree, mode):
    _, _, sock = tree
    os.chmod(sock, mode)
    problem = check_socket_private(str(sock))
    assert problem.code == "socket-not-private" and f"{mode:04o}" in problem.text


def test_non_socket_file(tree):
    _, run, _ = tree
    plain = run / "plain"
    plain.write_text("x")
    os.chmod(plain, 0o600)
    problem = check_socket_private(str(plain))
    assert problem.code == "socket-not-private" and "is not a socket" in problem.text


@pytest.mark.parametrize("component", ["base", "run", "sock"])
def test_symlink_at_each_component(tree, tmp_path, component):
    """T2: no component of the path may be a symlink — checked at every level."""
    base, run, sock = tree
    if component == "base":
        link = tmp_path / "base-link"
        link.symlink_to(base)
        path = link / "run" / "app.sock"
    elif component == "run":
        link = base / "run-link"
        link.symlink_to(run)
        path = link / "app.sock"
    else:
        link = run / "link.sock"
        link.symlink_to(sock)
        path = link
    problem = check_socket_private(str(path))
    assert problem.code == "socket-not-private"
    assert str(link) in problem.text and "symlink" in problem.text


def test_shape_rules():
    """T1: absolute, at most 103 bytes."""
    assert check_socket_shape("relative/app.sock").code == "bad-socket-path"
    assert check_socket_shape("/" + "a" * 102) is None
    long = check_socket_shape("/" + "a" * 103)
    assert long.code == "bad-socket-path" and "104 bytes" in long.text


def test_missing_socket(tree):
    """A missing socket is its own reason; at attach time it is fine (the agent has not started)."""
    _, run, _ = tree
    assert check_socket_private(str(run / "nope.sock")).code == "no-socket"
    assert check_socket_private(str(run / "nope.sock"), must_exist=False) is None
    assert check_socket_private(str(run / "missing" / "a.sock"), must_exist=False) is None


URLS = [
    ("https://edge.example.com", True),
    ("https://edge.example.com:8443/agent", True),
    ("HTTPS://Edge.Example.com", True),
    ("http://127.0.0.1:8765", True),
    ("http://localhost:8765/x", True),
    ("HTTP://LOCALHOST:8765", True),
    ("http://127.0.0.1", False),            # no port
    ("http://localhost", False),
    ("http://localhost:", False),
    ("http://127.0.0.1@evil.com:80", False),
    ("http://127.0.0.1:80@evil.com", False),
    ("http://user:pw@127.0.0.1:80", False),
    ("http://localhost.evil:80", False),
    ("http://localhost.evil.com:80", False),
    ("http://127.0.0.1.nip.io:80", False),
    ("http://127.0.0.2:80", False),
    ("http://127.1:80", False),
    ("http://0x7f000001:80", False),
    ("http://2130706433:80", False),
    ("http://[::1]:80", False),
    ("http://127.0.0.1.:80", False),
    ("http://localhost:0", False),
    ("http://localhost:99999", False),
    ("http://example.com:80", False),
    ("http:// 127.0.0.1:80", False),
    ("http://127.0.0.1:80\n", False),
    ("ftp://example.com", False),
    ("https://", False),
    ("https://user@edge.example.com", False),
    ("edge.example.com", False),
    ("", False),
]


@pytest.mark.parametrize(("url", "ok"), URLS)
def test_url_look_alikes(url, ok):
    """T4: https://, or http:// to 127.0.0.1 / localhost with a port; every look-alike is refused."""
    assert (check_url(url) is None) is ok, check_url(url)


def test_local_vs_remote():
    """T9: loopback http is local; any other URL is remote."""
    assert is_local_url("http://127.0.0.1:80") and is_local_url("http://localhost:1")
    assert not is_local_url("https://127.0.0.1:80") and not is_local_url("https://edge.example.com")


def test_token_rules():
    """T5: present, ≥ 32 bytes, no spaces; the message never quotes the token."""
    assert check_token(None, "TOK").code == "no-token"
    short = check_token("s3cr3t" * 5, "TOK")
    assert short.code == "weak-token" and "s3cr3t" not in short.text and "TOK" in short.text
    assert check_token("a" * 31 + " ", "TOK").code == "bad-token"
    assert check_token("0123456789abcdef" * 4, "TOK") is None
    assert same_secret("abc", "abc") and not same_secret("abc", "abd")


def test_dot_dot_cannot_hide_a_symlink_to_a_public_folder(tree, tmp_path):
    """9.12, T2: `…/run/lnk/../app.sock` reads as the private `run/app.sock`, but the kernel follows
    `lnk` into a 0777 folder first and takes `..` from there: the path is refused, not judged by its text."""
    _, run, _ = tree
    public = tmp_path / "public" / "inner"
    public.mkdir(parents=True)
    os.chmod(public.parent, 0o777)
    (run / "lnk").symlink_to(public)
    other = make_socket(public.parent / "app.sock")  # what the kernel would reach
    try:
        problem = check_socket_private(f"{run}/lnk/../app.sock")
        assert problem is not None and problem.code == "bad-socket-path" and "'..'" in problem.text
    finally:
        other.close()


def test_a_socket_in_a_shared_sticky_folder_gets_safe_advice(tmp_path):
    """10.3, T2: a socket directly in a sticky world-writable folder (like /tmp) is told to move to a
    private folder, never to chmod the shared one."""
    shared = tmp_path / "tmp"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    sock = make_socket(shared / "desk.sock")
    try:
        problem = check_socket_private(str(shared / "desk.sock"))
        assert problem.code == "socket-not-private" and "chmod" not in problem.text
        assert "$XDG_RUNTIME_DIR/desk/desk.sock" in problem.text and "shared folder" in problem.text
    finally:
        sock.close()


def test_mask_url_hides_only_the_password():
    """9.15."""
    from collie.crew.security import mask_url

    assert mask_url("https://bob:hunter2@edge.example:8443/x?y=1") == "https://bob:***@edge.example:8443/x?y=1"
    assert mask_url("https://edge.example/x") == "https://edge.example/x"
    assert "hunter2" not in check_url("https://bob:hunter2@edge.example:99999/").text
