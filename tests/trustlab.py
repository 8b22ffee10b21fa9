"""A real phone's network for the tests (issue 35): network namespaces joined to this one by veth pairs, a
Chromium that runs inside one of them and trusts an authority through the NSS database of its own `$HOME`,
and Debian's Caddy as the TLS-terminating proxy in front of a lead.

Addresses come from 10.211.0.0/16 and 10.212.0.0/16 only; namespaces are named `trust-<pid>-<n>` and are
deleted when the test ends. Everything here needs root and iproute2; `certutil` (libnss3-tools) and `caddy`
come from `python -m tests.browser`.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.browser import ARGS, CHROMIUM

_count = itertools.count(1)


def sh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(args, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {done.stderr.strip()}")
    return done


def need_root() -> None:
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.fail("these tests need root and iproute2 (`ip`) to make network namespaces")


class Netns:
    """A namespace joined to this one (or to `peer`, another Netns) by a veth pair: `here` is the address on
    this side, `there` the namespace's own."""

    def __init__(self, subnet: str, peer: Netns | None = None) -> None:
        need_root()
        n = next(_count)
        self.name = f"trust-{os.getpid()}-{n}"
        prefix = subnet.rsplit(".", 1)[0]  # "10.211.3.0" → "10.211.3"
        self.here, self.there = f"{prefix}.1", f"{prefix}.2"
        a, b = f"tra{os.getpid() % 100000}x{n}", f"trb{os.getpid() % 100000}x{n}"
        sh("ip", "netns", "add", self.name)
        self.veth = a
        self.peer = peer
        try:
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            sh("ip", "link", "set", b, "netns", self.name)
            if peer is not None:
                sh("ip", "link", "set", a, "netns", peer.name)
            here = ("ip", "-n", peer.name) if peer is not None else ("ip",)
            sh(*here, "addr", "add", f"{self.here}/24", "dev", a)
            sh(*here, "link", "set", a, "up")
            sh("ip", "-n", self.name, "addr", "add", f"{self.there}/24", "dev", b)
            sh("ip", "-n", self.name, "link", "set", b, "up")
            sh("ip", "-n", self.name, "link", "set", "lo", "up")
        except BaseException:
            self.delete()
            raise

    def run(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def delete(self) -> None:
        sh("ip", "netns", "del", self.name, check=False)
        if self.peer is None:
            sh("ip", "link", "del", self.veth, check=False)


def trusting_home(home: Path, *authorities: Path) -> Path:
    """`home` with an NSS database (`.pki/nssdb`) in which each authority is trusted for websites: what a person
    does in the browser's certificate settings."""
    db = home / ".pki" / "nssdb"
    db.mkdir(parents=True, exist_ok=True)
    sh("certutil", "-d", f"sql:{db}", "-N", "--empty-password")
    for i, ca in enumerate(authorities):
        sh("certutil", "-d", f"sql:{db}", "-A", "-t", "C,,", "-n", f"authority-{i}", "-i", str(ca))
    return home


def chromium_in(ns: Netns, home: Path, folder: Path) -> Path:
    """A script that runs Chromium inside `ns` with `home` as its $HOME (Playwright drives it over pipes)."""
    script = folder / f"chromium-{ns.name}"
    script.write_text(f"#!/bin/sh\nexec ip netns exec {ns.name} env HOME={home} {CHROMIUM} \"$@\"\n")
    script.chmod(0o700)
    return script


def launch_in(playwright, ns: Netns, home: Path, folder: Path, *extra: str):
    return playwright.chromium.launch(executable_path=str(chromium_in(ns, home, folder)), args=[*ARGS, *extra],
                                      env={**os.environ, "HOME": str(home)})


class Caddy:
    """Debian's Caddy in front of a lead: `https://NAME:PORT` on `binds`, its own authority (`tls internal`),
    proxying to `upstream`. `root` is that authority's certificate, to trust in a browser."""

    def __init__(self, folder: Path, name: str, port: int, binds: list[str], upstream: str) -> None:
        if shutil.which("caddy") is None:
            pytest.fail("Debian's caddy is missing: run `python -m tests.browser`")
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "Caddyfile").write_text(
            "{\n  skip_install_trust\n  admin off\n  storage file_system " + str(folder / "data") + "\n}\n"
            f"https://{name}:{port} {{\n  bind {' '.join(binds)}\n  tls internal\n  reverse_proxy {upstream}\n}}\n")
        self.log = open(folder / "caddy.log", "w")
        self.proc = subprocess.Popen(["caddy", "run", "--config", str(folder / "Caddyfile"), "--adapter", "caddyfile"],
                                     stdout=self.log, stderr=subprocess.STDOUT, env={**os.environ, "HOME": str(folder)})
        self.root = folder / "data" / "pki" / "authorities" / "local" / "root.crt"

    def ready(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"caddy exited: {(self.folder / 'caddy.log').read_text()[-2000:]}")
        return self.root.exists() and "serving initial configuration" in (self.folder / "caddy.log").read_text()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
