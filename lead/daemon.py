"""`collie serve`: the bridge daemon of a machine that leads (or stands alone).

Start-up, in order: private state folder and log → A15 log move → refuse a second bridge → read
the config strictly (a broken sources.json logs one ``[bridge] FATAL:`` line and exits 78) →
tighten sources.json to 0600 → serve. Shutdown on SIGINT/SIGTERM is graceful: the HTTP server gets
a few seconds to finish, everything else is cancelled. `collie restart` (or SIGHUP) shuts down the
same way and then re-executes the daemon in the same process, so a foreground terminal or a service
manager keeps watching the same pid.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from functools import partial

import trio

from bridge.bridge import Bridge
from bridge.control import serve_control
from bridge.journal import Journal
from bridge.writer import Writer
from bridge.state import migrate_legacy_logs, prepare_agent_dir, prepare_state
from crew import __version__, control, logs
from crew.config import BridgeConfig, load_bridge_config, secrets_of
from crew.errors import EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, ConfigError, NotRunningError
from crew.paths import Paths
from crew.sources import tighten_mode
from lead.api import create_api, load_or_create_credential
from lead.http import GRACEFUL_SECONDS, create_app, serve_http

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


class Daemon:
    def __init__(self, args: argparse.Namespace, paths: Paths, config: BridgeConfig) -> None:
        self.args = args
        self.paths = paths
        self.config = config
        self.bridge = Bridge(config, paths)
        self.journal = Journal(paths.state_dir / "journal.sqlite")
        self.writer = Writer(self.bridge, self.journal)
        self.credential, created = load_or_create_credential(paths)
        if created:
            log.info("[bridge] made the local API credential: %s (0600; send it as Authorization: Bearer)",
                     paths.state_dir / "api-token")
        logs.redactor.add(self.credential)
        self.shutdown = trio.Event()
        self.restart = False
        self.started = time.time()
        self.address = ""

    # control-socket ops -------------------------------------------------------------------
    async def op_ping(self, _req: dict) -> dict:
        return {"pid": os.getpid(), "collie": __version__, "role": "lead", "address": self.address,
                "started": self.started, "agents": len(self.config.agents),
                "programs_off": self.config.programs_off}

    async def op_agents(self, _req: dict) -> dict:
        from cattrs import unstructure

        return {"programs_off": self.config.programs_off,
                "agents": [unstructure(s) for s in self.bridge.snapshot()]}

    async def op_program(self, _req: dict) -> dict:
        """B9: reads of the agents, and each write outcome, for the doctor's `program` line."""
        stats = await self.writer.statistics()
        reads = sum(p["polls"] for p in self.bridge.statistics().values())
        return {"reads": reads, "outcomes": stats["journal"]}

    async def op_restart(self, _req: dict) -> dict:
        log.info("[bridge] restart requested")
        self.restart = True
        self.shutdown.set()
        return {"pid": os.getpid()}

    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    self.restart = True
                log.info("[bridge] %s received: %s", signal.Signals(sig).name,
                         "restarting" if self.restart else "shutting down")
                self.shutdown.set()

    async def _serve_http(self, app, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        await serve_http(app, [f"{self.args.host}:{self.args.port}"], self.shutdown,
                         certfile=self.args.tls_cert, keyfile=self.args.tls_key, task_status=task_status)

    async def run(self) -> None:
        handlers = {"ping": self.op_ping, "agents": self.op_agents, "restart": self.op_restart,
                    "program": self.op_program}
        async with trio.open_nursery() as outer:
            outer.start_soon(self._signals)
            async with trio.open_nursery() as services:
                await services.start(self.bridge.serve)
                await services.start(self.writer.recover)
                app = create_app(lambda a: create_api(a, self.bridge, self.writer, self.credential))
                async with trio.open_nursery() as web:
                    binds = await web.start(self._serve_http, app)
                    self.address = binds[0] if binds else ""
                    # last: the CLI's "ping" answering means everything is up
                    await services.start(serve_control, self.paths.control_socket, handlers)
                    n = len(self.config.agents)
                    log.info("[bridge] Collie %s ready (pid %d): phone API on %s, %d durable agent%s",
                             __version__, os.getpid(), self.address, n, "" if n == 1 else "s")
                    await self.shutdown.wait()
                    # The HTTP server stops by itself on `shutdown`, with its own graceful deadline.
                    web.cancel_scope.deadline = trio.current_time() + GRACEFUL_SECONDS + 1
                services.cancel_scope.cancel()
            outer.cancel_scope.cancel()
        self.journal.close()


def _refuse_plain_http(args: argparse.Namespace) -> str | None:
    if args.host in LOOPBACK:
        return None
    if not (args.tls_cert and args.tls_key):
        return (f"--host {args.host} is off loopback: plain HTTP there would carry credentials in clear; "
                "give --tls-cert and --tls-key, or keep the default 127.0.0.1")
    return None


def _first_oserror(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = _first_oserror(sub)
            if found is not None:
                return found
    return None


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    paths = Paths.from_env()
    try:
        prepare_state(paths)
    except OSError as exc:
        print(f"[bridge] FATAL: cannot prepare the state folder {paths.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    logs.setup(paths.log, stderr=True)
    problem = _refuse_plain_http(args)
    if problem:
        log.error("[bridge] FATAL: %s", problem)
        return EXIT_USAGE
    try:
        pong = control.call(paths.control_socket, "ping", timeout=1.0)
    except NotRunningError:
        pass
    else:
        log.error("[bridge] FATAL: a bridge is already running (pid %s); use `collie restart`", pong.get("pid"))
        return EXIT_FAILURE
    migrate_legacy_logs(paths)
    try:
        config = load_bridge_config(paths)
    except ConfigError as exc:
        log.error("[bridge] FATAL: %s", exc)
        return EXIT_CONFIG
    for secret in secrets_of(config):
        logs.redactor.add(secret)
    if config.programs_off:
        log.info("[bridge] durable agents are off (COLLIE_PROGRAMS=off in .env): %s is ignored", paths.sources)
    try:
        old = tighten_mode(paths.sources)
    except ConfigError as exc:
        log.error("[bridge] FATAL: %s", exc)
        return EXIT_CONFIG
    if old:
        log.info("[bridge] %s had mode %s; tightened to 0600 (it holds tokens)", paths.sources, old)
    for agent in config.agents:
        prepare_agent_dir(paths, agent.name)
    daemon = Daemon(args, paths, config)
    try:
        trio.run(daemon.run)
    except (OSError, BaseExceptionGroup) as exc:
        err = _first_oserror(exc)
        if err is None:
            raise
        log.error("[bridge] FATAL: cannot listen on %s:%s: %s; stop the other process or pass --port",
                  args.host, args.port, err.strerror or err)
        return EXIT_FAILURE
    except KeyboardInterrupt:
        pass
    if daemon.restart:
        log.info("[bridge] restarting")
        logs.setup(None, stderr=False)
        os.execv(sys.executable, [sys.executable, "-m", "lead", *argv])
    log.info("[bridge] stopped")
    return EXIT_OK
