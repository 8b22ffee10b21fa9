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
from lead.api import OWNER, create_api, install_inbox_routes, load_or_create_credential
from lead.http import create_app, serve_http

log = logs.get("daemon")

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8470
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="collie serve", description="Run this machine's Collie bridge in the foreground.")
    p.add_argument("--host", default=os.environ.get("COLLIE_HOST", DEFAULT_HOST),
                   help="address for the phone (default 127.0.0.1; anything else is served over TLS only)")
    p.add_argument("--port", type=int, default=int(os.environ.get("COLLIE_PORT", DEFAULT_PORT)),
                   help=f"port for the phone's API (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--tls-cert", help="your certificate (PEM) for serving over TLS; without it, off loopback, "
                                      "the lead makes a self-signed one on first use")
    p.add_argument("--tls-key", help="private key (PEM) for --tls-cert")
    p.add_argument("--tls", action="store_true", default=os.environ.get("COLLIE_TLS") == "1",
                   help="serve over TLS on loopback too (with the generated certificate unless --tls-cert)")
    p.add_argument("--name", action="append", default=[n for n in os.environ.get("COLLIE_NAMES", "").split(",") if n],
                   help="another name phones use to reach this lead (repeatable; COLLIE_NAMES=a,b)")
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
        from lead.devices import Devices
        from lead.events import Feed
        from lead.tls import ensure_certificate, fingerprint_file, names_for

        self.devices = Devices(paths.state_dir / "devices.sqlite")
        self.feed = Feed(self.bridge, self.hub, self.writer, set_viewing=self._set_viewing)
        self.devices.on_revoke.append(self.feed.revoke_device)
        import socket as _socket

        from crew.redact import enabled as redaction_enabled
        from lead.push import Pusher

        self.redact_on = redaction_enabled({**env, **os.environ})
        self.pusher = Pusher(self.bridge, self.hub, paths.state_dir / "push", host=_socket.gethostname(),
                             redact_on=self.redact_on)
        self.devices.on_revoke.append(self.pusher.store.drop_device)
        self.certfile, self.keyfile = args.tls_cert, args.tls_key
        if not self.certfile and (args.tls or args.host not in LOOPBACK):
            self.certfile, self.keyfile = self._generated(paths, names_for(args.host, args.name), ensure_certificate)
        self.fingerprint = fingerprint_file(self.certfile) if self.certfile else None
        self.door = None

    def _generated(self, paths, names, ensure_certificate):
        cert, key, made = ensure_certificate(paths.state_dir, names, log)
        if made:
            log.info("[bridge] made a self-signed TLS certificate for %s: %s", ", ".join(names), cert)
        return str(cert), str(key)

    async def _set_viewing(self, machine: str, agent: str, on: bool) -> None:
        if machine == "local":
            self.bridge.set_viewing(agent, on)
        else:
            await self.hub.set_viewing(machine, agent, on)

    # --- control ops for `collie pair` and `collie devices` -----------------------------------------
    async def op_pair(self, _req: dict) -> dict:
        import time as _time

        if self.door is None:
            raise RuntimeError("the phone's server is not up yet")
        code, expires = self.devices.new_code(_time.time())
        return {"link": f"{self.door.base_url(self.args.host)}/pair#{code}", "expires_at": expires,
                "fingerprint": self.fingerprint, "loopback": self.args.host in LOOPBACK}

    async def op_live(self, _req: dict) -> dict:
        """Live channels open, and who views which agent (W5: 2 s polling while viewed)."""
        viewers = {f"local/{name}": st["viewers"] for name, st in self.bridge.statistics().items() if st["viewers"]}
        viewers.update({f"{m}/{a}": n for (m, a), n in self.hub.viewers.items() if n})
        push = {**self.pusher.stats, "subscriptions": len(self.pusher.store.subs)}
        return {**self.feed.statistics(), "viewers": viewers, "devices": len(self.devices.by_hash), "push": push,
                "fingerprint": self.fingerprint, "address": self.address}

    async def op_devices(self, _req: dict) -> dict:
        return {"devices": self.devices.listing()}

    async def op_devices_revoke(self, req: dict) -> dict:
        name = req.get("name")
        dev = self.devices.revoke(name) if isinstance(name, str) else None
        if dev is None:
            raise LookupError(f"no paired phone named {name!r} (see `collie devices`)")
        log.info("[bridge] revoked the phone %s", dev.name)
        return {"revoked": dev.public()}

    def handlers(self) -> dict:
        return {**super().handlers(), **self.hub.control_handlers(), "pair": self.op_pair,
                "devices": self.op_devices, "devices_revoke": self.op_devices_revoke, "live": self.op_live}

    def ready_line(self) -> str:
        n = len(self.config.agents)
        tls = f" (TLS, certificate SHA-256 {self.fingerprint})" if self.fingerprint else ""
        return (f"[bridge] Collie {__version__} ready (pid {os.getpid()}): phone API on {self.address}{tls}, "
                f"{n} durable agent{'' if n == 1 else 's'}")

    async def front(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        from quart import g

        from lead.door import Door, install_door
        from lead.push import install_push
        from lead.web import install_web

        door = Door(self.args.host, self.args.port, tls=bool(self.certfile), names=self.args.name)
        app = create_app(lambda a: (create_api(a, self.bridge, self.writer, self.credential, self.hub,
                                               door=door, devices=self.devices, feed=self.feed,
                                               redact_on=self.redact_on),
                                    install_push(a, self.pusher),
                                    install_inbox_routes(a, self.hub, self.inbox),
                                    install_door(a, door, self.devices, self.feed,
                                                 owner_check=lambda: getattr(g, "sender", None) == OWNER),
                                    install_web(a, self.bridge, self.hub),
                                    self.hub.install(a, self.shutdown)))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self.hub.run)
            nursery.start_soon(self.inbox.run)
            await nursery.start(self.feed.run)
            await nursery.start(self.pusher.run)

            async def end_channels():
                await self.shutdown.wait()
                self.feed.shutdown()
            nursery.start_soon(end_channels)
            async with trio.open_nursery() as web:
                binds = await web.start(partial(
                    serve_http, app, [f"{self.args.host}:{self.args.port}"], self.shutdown,
                    certfile=self.certfile, keyfile=self.keyfile))
                self.address = binds[0] if binds else ""
                door.port = _port_of(self.address) or door.port
                self.door = door
                task_status.started()
            # the HTTP server returned (it stops by itself once `shutdown` is set): stop the hub too
            nursery.cancel_scope.cancel()


def _port_of(address: str) -> int | None:
    tail = address.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _refuse_plain_http(args: argparse.Namespace, _paths) -> tuple[int, str] | None:
    """Off loopback the lead serves only TLS (the generated certificate when none is given); a
    certificate without its key, or a key without its certificate, is a usage error."""
    if bool(args.tls_cert) != bool(args.tls_key):
        return EXIT_USAGE, "--tls-cert and --tls-key go together: give both, or neither to use the generated certificate"
    return None


def main(argv: list[str]) -> int:
    return run_daemon(LeadDaemon, parser().parse_args(argv), argv, check=_refuse_plain_http)
