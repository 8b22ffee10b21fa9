"""`collie serve` on a member machine: the bridge plus the link up to the lead (crew.md §1–§2).

A member serves no phone: its only front is the link. The daemon starts when crew.json exists
(written by `collie crew join`); `collie crew leave` + restart makes the machine a lead again.
"""

from __future__ import annotations

import os

import trio

from collie.bridge.daemon import Daemon, run_daemon
from collie.crew import __version__, logs
from collie.crew.cli.serve import ServeParser, add_options
from collie.crew.crewconfig import read_crew
from collie.crew.errors import ConfigError
from collie.member.link import Link

log = logs.get("daemon")


class MemberDaemon(Daemon):
    role = "member"
    module = "member"

    def __init__(self, args, paths, config) -> None:
        super().__init__(args, paths, config)
        cfg = read_crew(paths.crew)
        if cfg is None:
            raise ConfigError(f"{paths.crew} is gone: run `collie crew join` again, or `collie restart` to lead")
        logs.redactor.add(cfg.token)
        self.crew = cfg
        self.link = Link(cfg, self.bridge, self.writer)
        self.address = self.link.url

    def handlers(self) -> dict:
        async def link(_req):
            s = self.link.status
            return {"lead": s.lead, "label": self.crew.label, "connected": s.connected, "since": s.since,
                    "last_contact": s.last_contact, "last_error": s.last_error, "read_only": s.read_only}

        return {**super().handlers(), "link": link}

    def ready_line(self) -> str:
        n = len(self.config.agents)
        return (f"[bridge] Collie {__version__} ready (pid {os.getpid()}): member {self.crew.label} of "
                f"{self.link.url}, {n} durable agent{'' if n == 1 else 's'}")

    async def front(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as n:
            await n.start(self.link.run)
            task_status.started()
            await self.shutdown.wait()
            n.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    p = ServeParser(prog="collie serve", description="Run this member machine's bridge (the options are the lead's).")
    add_options(p)
    args, _ = p.parse_known_args(argv)
    return run_daemon(MemberDaemon, args, argv, check=_unused_options)


def _unused_options(args, _paths) -> None:
    """A member serves nothing: options that would shape a server are said to be unused, not dropped silently."""
    unused = [f"--{o.replace('_', '-')}" for o in ("host", "port", "tls_cert", "tls_key", "name")
              if getattr(args, o, None)]
    if unused:
        log.warning("[bridge] %s unused: this machine is a member of a crew (crew.json) and serves nothing",
                    " ".join(unused))
    return None
