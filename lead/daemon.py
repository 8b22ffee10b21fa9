"""`collie serve` on a machine that leads (or stands alone): the bridge plus the phone's server.

Everything common to every role (start-up, control socket, shutdown, restart) is in
`bridge.daemon`; the lead adds the HTTP server (phone API, the members' `/crew/v1` link) and the
crew hub that gathers members and routes their writes.
"""

from __future__ import annotations

import argparse
import os
from functools import partial

import trio

from bridge.daemon import Daemon, run_daemon
from crew import __version__, logs
from crew.errors import EXIT_USAGE
from lead.api import create_api, install_inbox_routes, load_or_create_credential
from lead.http import create_app, serve_http

log = logs.get("daemon")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collie serve", description="Run this machine's Collie bridge in the foreground.")
    p.add_argument("--host", default=os.environ.get("COLLIE_HOST", DEFAULT_HOST),
                   help="address for the phone's API (default 127.0.0.1; anything else needs --tls-cert)")
    p.add_argument("--port", type=int, default=int(os.environ.get("COLLIE_PORT", DEFAULT_PORT)),
                   help=f"port for the phone's API (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--tls-cert", help="certificate (PEM) for serving off loopback")
    p.add_argument("--tls-key", help="private key (PEM) for --tls-cert")
    return p


class LeadDaemon(Daemon):
    role = "lead"
    module = "lead"

    def __init__(self, args, paths, config) -> None:
        super().__init__(args, paths, config)
        self.credential, created = load_or_create_credential(paths)
        if created:
            log.info("[bridge] made the local API credential: %s (0600; send it as Authorization: Bearer)",
                     paths.state_dir / "api-token")
        logs.redactor.add(self.credential)
        from lead.hub import Hub  # the crew hub: members, their views, routing

        self.hub = Hub(paths, self.bridge, self.writer)
        from crew.config import load_env
        from lead.inbox import TTL_DEFAULT, Inbox

        env = load_env(paths)
        try:
            ttl = float(env.get("COLLIE_INBOX_TTL") or TTL_DEFAULT)
        except ValueError:
            ttl = TTL_DEFAULT
        self.inbox = Inbox(paths.state_dir / "inbox.sqlite", self.hub, self.writer,
                           owner=env.get("COLLIE_OWNER") or "the owner", ttl=ttl)

    def handlers(self) -> dict:
        return {**super().handlers(), **self.hub.control_handlers()}

    def ready_line(self) -> str:
        n = len(self.config.agents)
        return (f"[bridge] Collie {__version__} ready (pid {os.getpid()}): phone API on {self.address}, "
                f"{n} durable agent{'' if n == 1 else 's'}")

    async def front(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        app = create_app(lambda a: (create_api(a, self.bridge, self.writer, self.credential, self.hub),
                                    install_inbox_routes(a, self.hub, self.inbox),
                                    self.hub.install(a, self.shutdown)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.hub.run)
            nursery.start_soon(self.inbox.run)
            async with trio.open_nursery() as web:
                binds = await web.start(partial(
                    serve_http, app, [f"{self.args.host}:{self.args.port}"], self.shutdown,
                    certfile=self.args.tls_cert, keyfile=self.args.tls_key))
                self.address = binds[0] if binds else ""
                task_status.started()
            # the HTTP server returned (it stops by itself once `shutdown` is set): stop the hub too
            nursery.cancel_scope.cancel()


def _refuse_plain_http(args: argparse.Namespace, _paths) -> tuple[int, str] | None:
    if args.host in LOOPBACK or (args.tls_cert and args.tls_key):
        return None
    return EXIT_USAGE, (f"--host {args.host} is off loopback: plain HTTP there would carry credentials in clear; "
                        "give --tls-cert and --tls-key, or keep the default 127.0.0.1")


def main(argv: list[str]) -> int:
    return run_daemon(LeadDaemon, parser().parse_args(argv), argv, check=_refuse_plain_http)
