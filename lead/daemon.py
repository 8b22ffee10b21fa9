"""`collie serve` on a machine that leads (or stands alone): the bridge plus the phone's server.

Everything common to every role (start-up, control socket, shutdown, restart) is in
`bridge.daemon`; the lead adds the HTTP server (phone API, the members' `/crew/v1` link) and the
crew hub that gathers members and routes their writes.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
from functools import partial

import trio

from bridge.daemon import Daemon, first_of, run_daemon
from crew import __version__, logs
from crew.cli.serve import LOOPBACK, ServeParser, add_options, check_options, serve_env
from crew.errors import EXIT_USAGE, CollieError
from lead.api import create_api, install_inbox_routes, load_or_create_credential
from lead.http import create_app, serve_http

log = logs.get("daemon")

LISTEN_ADVICE = {
    errno.EADDRINUSE: "address already in use (stop the program that listens there, or choose another --port)",
    errno.EACCES: "permission denied (ports below 1024 need privileges: choose another --port)",
    errno.EADDRNOTAVAIL: "this machine has no such address (choose another --host)",
}


class ListenError(CollieError):
    """The phone's server could not bind: one line naming the address and what to change (10.4)."""


def bind_text(host: str, port: int) -> str:
    """host:port as hypercorn and people read it; an IPv6 address in brackets."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def listen_error(host: str, port: int, err: OSError) -> ListenError:
    if isinstance(err, socket.gaierror):
        why = f"unknown host ({err.strerror or err}; choose another --host)"
    else:
        why = LISTEN_ADVICE.get(err.errno or 0) or f"{(err.strerror or str(err)).lower()} (check --host and --port)"
    return ListenError(f"cannot listen on {bind_text(host, port)}: {why}")


def parser() -> argparse.ArgumentParser:
    p = ServeParser(prog="collie serve", description="Run this machine's Collie bridge in the foreground.")
    add_options(p)
    return p


class LeadDaemon(Daemon):
    role = "lead"
    module = "lead"

    def __init__(self, args, paths, config) -> None:
        super().__init__(args, paths, config)
        self.credential, created = load_or_create_credential(paths)
        self.made_credential = created  # logged once the server listens; removed if the start fails
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

    def abandon(self) -> None:
        """A start that failed leaves no credential it made behind (issue 10.4)."""
        if self.made_credential:
            (self.paths.state_dir / "api-token").unlink(missing_ok=True)

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
                try:
                    binds = await web.start(partial(
                        serve_http, app, [bind_text(self.args.host, self.args.port)], self.shutdown,
                        certfile=self.args.tls_cert, keyfile=self.args.tls_key))
                except BaseException as exc:
                    err = first_of(exc, OSError)
                    if err is None:
                        raise
                    raise listen_error(self.args.host, self.args.port, err) from None
                self.address = binds[0] if binds else ""
                if self.made_credential:
                    log.info("[bridge] made the local API credential: %s (0600; send it as Authorization: Bearer)",
                             self.paths.state_dir / "api-token")
                task_status.started()
            # the HTTP server returned (it stops by itself once `shutdown` is set): stop the hub too
            nursery.cancel_scope.cancel()


def _check(args: argparse.Namespace, paths) -> tuple[int, str] | None:
    problem = check_options(args, serve_env(paths))
    if problem:
        return EXIT_USAGE, problem
    if args.host in LOOPBACK or (args.tls_cert and args.tls_key):
        return None
    return EXIT_USAGE, (f"--host {args.host} is off loopback: plain HTTP there would carry credentials in clear; "
                        "give --tls-cert and --tls-key, or keep the default 127.0.0.1")


def main(argv: list[str]) -> int:
    return run_daemon(LeadDaemon, parser().parse_args(argv), argv, check=_check)
