"""`collie serve`: run the bridge in the foreground (the daemon is its own program: `python -m collie.lead`).

The daemon is started as ``python -P -m collie.lead|member``: `-P` keeps the current folder off the import
path, so a `lead.py` (or `crew/`) lying in the folder the user happens to be in never runs in its
place (issue 9.8). The options are declared here once, for `collie serve --help` and for the
lead's own parser alike; `check_options` turns every bad value into one line naming what to change.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import ssl
import sys

from collie.crew.config import load_env
from collie.crew.errors import ConfigError
from collie.crew.logs import printable
from collie.crew.paths import Paths
from collie.crew.security import public_parts

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ServeParser(argparse.ArgumentParser):
    """The daemon's own parser: a wrong command line is one FATAL line too, not usage text (10.4)."""

    def error(self, message: str):
        self.exit(2, f"[bridge] FATAL: {message} (see `collie serve --help`)\n")


def add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", help=f"address for the phone's API (default $COLLIE_HOST or {DEFAULT_HOST}; "
                                  "off loopback it serves TLS only: your --tls-cert, or a certificate it makes)")
    p.add_argument("--port", metavar="PORT",
                   help=f"port for the phone's API (default $COLLIE_PORT or {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--tls-cert", metavar="PEM", help="your certificate (PEM) for TLS; without it the lead makes "
                                                     "a self-signed one on first use (kept in <state>/tls/)")
    p.add_argument("--tls-key", metavar="PEM", help="private key (PEM) for --tls-cert")
    p.add_argument("--tls", action="store_true", default=None,
                   help="serve TLS on loopback too ($COLLIE_TLS=1); off loopback TLS is always on")
    p.add_argument("--name", action="append", metavar="NAME", default=None,
                   help="another name phones use to reach this lead, for the Host check and the generated "
                        "certificate (repeatable; $COLLIE_NAMES=a,b)")
    p.add_argument("--public-url", metavar="URL", default=None,
                   help="https://NAME[:PORT] of the TLS-terminating proxy or tunnel in front of this lead "
                        "(Tailscale serve, Cloudflare Tunnel, Caddy, nginx: docs/remote.md); links and printed "
                        "addresses use it, and the door accepts its Host and Origin ($COLLIE_PUBLIC_URL)")
    p.add_argument("--trusted-proxy", action="append", metavar="ADDRESS", default=None,
                   help="a proxy whose Forwarded / X-Forwarded-For header names the client (repeatable; an "
                        "address or network; default with --public-url: loopback; $COLLIE_TRUSTED_PROXIES=a,b)")


def serve_env(paths: Paths) -> dict[str, str]:
    """Where COLLIE_HOST / COLLIE_PORT come from: `.env` overlaid by the process environment."""
    try:
        return load_env(paths)
    except ConfigError:
        return dict(os.environ)  # the start reports a broken .env itself, in its own words


def check_options(args: argparse.Namespace, environ: dict[str, str] | None = None) -> str | None:
    """Fill in defaults from the environment; a bad value gives one line that says what to change."""
    env = os.environ if environ is None else environ
    args.host = args.host or env.get("COLLIE_HOST") or DEFAULT_HOST
    if args.port is not None:
        text, where = str(args.port), "--port"
    else:
        text, where = env.get("COLLIE_PORT") or str(DEFAULT_PORT), "COLLIE_PORT"
    try:
        port = int(text.strip())
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        return f"{where} {printable(text)[:40]} is not a port: give 1-65535 (0 picks a free one)"
    args.port = port
    if getattr(args, "tls", None) is None:
        args.tls = env.get("COLLIE_TLS", "").strip() in ("1", "on", "true", "yes")
    if getattr(args, "name", None) is None:
        args.name = [n.strip() for n in env.get("COLLIE_NAMES", "").split(",") if n.strip()]
    for name in args.name:
        if not name or len(name) > 253 or any(c.isspace() or c in "/@#?" for c in name) or not name.isprintable():
            return f"--name {printable(name)[:60]} is not a host name"
    if getattr(args, "public_url", None) is None:
        args.public_url = (env.get("COLLIE_PUBLIC_URL") or "").strip() or None
    if args.public_url:
        try:
            args.public_url = public_parts(args.public_url)[0]
        except ValueError as exc:
            return f"--public-url {exc}"
    if getattr(args, "trusted_proxy", None) is None:
        given = [n.strip() for n in env.get("COLLIE_TRUSTED_PROXIES", "").split(",") if n.strip()]
        args.trusted_proxy = given or (["127.0.0.0/8", "::1"] if args.public_url else [])
    for proxy in args.trusted_proxy:
        try:
            ipaddress.ip_network(proxy, strict=False)
        except ValueError:
            return f"--trusted-proxy {printable(proxy)[:60]} is not an address or network (e.g. 127.0.0.1, 10.0.0.0/8)"
    if bool(args.tls_cert) != bool(args.tls_key):
        return "--tls-cert and --tls-key go together: give both, or neither"
    if args.tls_cert:
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(args.tls_cert, args.tls_key)
        except (OSError, ssl.SSLError) as exc:
            return f"cannot load --tls-cert {args.tls_cert} with --tls-key {args.tls_key}: {exc.strerror or exc}"
    return None


def register(sub) -> None:
    p = sub.add_parser("serve", help="run this machine's bridge in the foreground",
                       description="Run this machine's bridge in the foreground: a lead (it serves the phone), "
                                   "or a member when `collie crew join` wrote crew.json (then the options are unused).")
    add_options(p)
    p.set_defaults(run=run)


def daemon_command(module: str, options: list[str]) -> list[str]:
    """`python -P -m <module> …`: never import from the current folder (issue 9.8)."""
    return [sys.executable, "-P", "-m", module, *options]


def exec_daemon(options: list[str]) -> int:
    """A machine that joined a crew (crew.json exists) runs as a member; any other leads."""
    module = "collie.member" if Paths.from_env().crew.exists() else "collie.lead"
    os.execv(sys.executable, daemon_command(module, options))
    return 0  # not reached


def run(args, _paths) -> int:  # reached only through --help's parser; `main` execs before parsing
    return exec_daemon([])
