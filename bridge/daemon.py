"""What every Collie daemon does, lead or member: start-up, the control socket, shutdown, restart.

Start-up, in order: private state folder and log → A15 log move → refuse a second bridge → read
the config strictly (a broken sources.json logs one ``[bridge] FATAL:`` line and exits 78) →
tighten sources.json to 0600 → serve. Shutdown on SIGINT/SIGTERM is graceful: the role's front
(the lead's HTTP server, the member's link) gets a few seconds, everything else is cancelled.
`collie restart` (or SIGHUP) first reads the new configuration as a start would; when it is broken
the running bridge keeps going and the refusal says why in one line (issue 10.2). Otherwise it
shuts down the same way and re-executes the daemon in the same process (``python -P``: never from
the current folder), so a foreground terminal or a service manager keeps watching the same pid.

A role subclasses `Daemon`: `role`, `module` (what `python -m` re-executes), `front()` (its
long-running service, which must return once `shutdown` is set) and extra control ops.
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time

import trio

from collie.bridge.bridge import Bridge
from collie.bridge.control import serve_control
from collie.bridge.journal import Journal
from collie.bridge.state import migrate_legacy_logs, prepare_agent_dir, prepare_state
from collie.bridge.writer import Writer
from collie.crew import __version__, control, logs
from collie.crew.cli.serve import daemon_command
from collie.crew.config import BridgeConfig, load_bridge_config, secrets_of
from collie.crew.crewconfig import read_crew
from collie.crew.errors import (EXIT_CONFIG, EXIT_FAILURE, EXIT_OK, EXIT_RUNNING, CollieError, ConfigError,
                                NotRunningError)
from collie.crew.paths import Paths
from collie.crew.sources import tighten_mode

log = logs.get("daemon")

FRONT_GRACE = 4.0


class Daemon:
    role = "bridge"
    module = "lead"

    def __init__(self, args: argparse.Namespace, paths: Paths, config: BridgeConfig) -> None:
        self.args = args
        self.paths = paths
        self.config = config
        self.bridge = Bridge(config, paths)
        self.journal = Journal(paths.state_dir / "journal.sqlite")
        self.writer = Writer(self.bridge, self.journal)
        self.shutdown = trio.Event()
        self.restart = False
        self.ready = False
        self.started = time.time()
        self.address = ""

    # --- for subclasses -------------------------------------------------------------------------
    async def front(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await self.shutdown.wait()

    def handlers(self) -> dict:
        return {"ping": self.op_ping, "agents": self.op_agents, "restart": self.op_restart, "program": self.op_program}

    def ready_line(self) -> str:
        n = len(self.config.agents)
        return f"[bridge] Collie {__version__} ready (pid {os.getpid()}): {self.role}, {n} durable agent{'' if n == 1 else 's'}"

    def abandon(self) -> None:
        """Undo what a start that failed before ready left behind."""

    def config_problem(self) -> str | None:
        """What a restart would refuse to start on (the same reading as a start), or None."""
        try:
            load_bridge_config(self.paths)
            read_crew(self.paths.crew)  # present → the restarted daemon is a member and needs it
        except ConfigError as exc:
            return str(exc)
        return None

    def request_restart(self, how: str) -> str | None:
        """Restart unless the new configuration is broken; then keep running and say why (10.2)."""
        problem = self.config_problem()
        if problem:
            log.error("[bridge] %s: not restarting, the new configuration is broken: %s; "
                      "the running bridge keeps its configuration", how, problem)
            return problem
        log.info("[bridge] %s: restarting", how)
        self.restart = True
        self.shutdown.set()
        return None

    # --- control ops ----------------------------------------------------------------------------
    async def op_ping(self, _req: dict) -> dict:
        return {"pid": os.getpid(), "collie": __version__, "role": self.role, "address": self.address,
                "started": self.started, "agents": len(self.config.agents), "programs_off": self.config.programs_off}

    async def op_agents(self, _req: dict) -> dict:
        from cattrs import unstructure

        now = trio.current_time()
        agents = []
        for status in self.bridge.snapshot():
            row = unstructure(status)
            reader = self.bridge.readers.get(status.name)
            last = getattr(reader, "last_ok", None)
            row["polled_ago"] = round(now - last, 1) if last is not None else None  # I11: when it was last read
            agents.append(row)
        return {"programs_off": self.config.programs_off, "agents": agents}

    async def op_program(self, _req: dict) -> dict:
        """B9: reads of the agents, and each write outcome, for the doctor's `program` line."""
        stats = await self.writer.statistics()
        reads = sum(p["polls"] for p in self.bridge.statistics().values())
        return {"reads": reads, "outcomes": stats["journal"]}

    async def op_restart(self, _req: dict) -> dict:
        problem = self.request_restart("restart requested")
        if problem:
            return {"ok": False, "error": problem, "config": True}
        return {"pid": os.getpid()}

    # --- running --------------------------------------------------------------------------------
    async def _signals(self) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM, signal.SIGHUP) as sigs:
            async for sig in sigs:
                if sig == signal.SIGHUP:
                    self.request_restart("SIGHUP received")
                    continue
                log.info("[bridge] %s received: shutting down", signal.Signals(sig).name)
                self.shutdown.set()

    async def run(self) -> None:
        async with trio.open_nursery() as outer:
            outer.start_soon(self._signals)
            async with trio.open_nursery() as services:
                await services.start(self.bridge.serve)
                await services.start(self.writer.recover)
                async with trio.open_nursery() as front:
                    await front.start(self.front)
                    # last: the CLI's "ping" answering means everything is up
                    await services.start(serve_control, self.paths.control_socket, self.handlers())
                    self.ready = True
                    log.info("%s", self.ready_line())
                    freeze_startup_heap()
                    await self.shutdown.wait()
                    front.cancel_scope.deadline = trio.current_time() + FRONT_GRACE
                services.cancel_scope.cancel()
            outer.cancel_scope.cancel()
        self.journal.close()


def freeze_startup_heap() -> None:
    """Move everything alive once start-up is done (modules, the app, routes, readers loaded from the
    caches) out of the garbage collector's sight: a full collection then walks only what was made
    since, so its pauses — which hold the event loop — stay short (issue 16)."""
    gc.collect()
    gc.freeze()


def first_of(exc: BaseException, kind: type[BaseException]):
    """The first `kind` inside `exc` (itself or nested in exception groups), or None."""
    if isinstance(exc, kind):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for sub in exc.exceptions:
            found = first_of(sub, kind)
            if found is not None:
                return found
    return None


def run_daemon(cls: type[Daemon], args: argparse.Namespace, argv: list[str], check=None) -> int:
    """The common start-up of every role; `check(args)` may refuse to start (usage problems)."""
    paths = Paths.from_env()
    try:
        prepare_state(paths)
    except OSError as exc:
        print(f"[bridge] FATAL: cannot prepare the state folder {paths.state_dir}: {exc.strerror or exc}", file=sys.stderr)
        return EXIT_FAILURE
    logs.setup(paths.log, stderr=True)
    if check is not None:
        problem = check(args, paths)
        if problem:
            log.error("[bridge] FATAL: %s", problem[1])
            return problem[0]
    try:
        pong = control.call(paths.control_socket, "ping", timeout=1.0)
    except NotRunningError:
        pass
    else:
        log.error("[bridge] FATAL: a bridge is already running (pid %s); use `collie restart`", pong.get("pid"))
        return EXIT_RUNNING
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
    for secrets_file in (paths.sources, paths.dotenv, paths.crew):  # A6, and issue 9.11 for the other two
        try:
            old = tighten_mode(secrets_file)
        except ConfigError as exc:
            log.error("[bridge] FATAL: %s", exc)
            return EXIT_CONFIG
        if old:
            log.info("[bridge] %s had mode %s; tightened to 0600 (it holds tokens)", secrets_file, old)
    for agent in config.agents:
        prepare_agent_dir(paths, agent.name)
    try:
        daemon = cls(args, paths, config)
    except ConfigError as exc:
        log.error("[bridge] FATAL: %s", exc)
        return EXIT_CONFIG
    try:
        trio.run(daemon.run)
    except KeyboardInterrupt:
        pass
    except (OSError, CollieError, BaseExceptionGroup) as exc:
        known = first_of(exc, CollieError)
        err = first_of(exc, OSError)
        if known is None and err is None:
            raise
        if not daemon.ready:
            daemon.abandon()
        log.error("[bridge] FATAL: %s", known or (err.strerror or err))
        return known.exit_status if known else EXIT_FAILURE
    if daemon.restart:
        logs.setup(None, stderr=False)
        os.execv(sys.executable, daemon_command("collie.crew.cli.main", ["serve", *argv]))
    log.info("[bridge] stopped")
    return EXIT_OK
