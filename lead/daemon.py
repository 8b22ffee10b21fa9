"""`collie serve` on a machine that leads (or stands alone): the bridge plus the phone's server.

Everything common to every role (start-up, control socket, shutdown, restart) is in
`collie.bridge.daemon`; the lead adds the HTTP server (phone API, the members' `/crew/v1` link) and the
crew hub that gathers members and routes their writes.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import time
from functools import partial

import trio

from collie.bridge.daemon import Daemon, first_of, run_daemon
from collie.crew import __version__, logs
from collie.crew.cli.serve import LOOPBACK, ServeParser, add_options, check_options, serve_env
from collie.crew.errors import EXIT_USAGE, CollieError
from collie.lead.door.http import create_app, serve_http
from collie.lead.routes.api import create_api, load_or_create_credential
from collie.lead.routes.inbox import register as install_inbox_routes
from collie.lead.routes.rules import OWNER

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
        from collie.lead.members.hub import Hub  # the crew hub: members, their views, routing

        self.hub = Hub(paths, self.bridge, self.writer)
        from collie.crew.config import load_env
        from collie.lead.inbox.core import TTL_DEFAULT
        from collie.lead.inbox.service import Inbox

        env = load_env(paths)
        try:
            ttl = float(env.get("COLLIE_INBOX_TTL") or TTL_DEFAULT)
        except ValueError:
            ttl = TTL_DEFAULT
        self.inbox = Inbox(paths.state_dir / "inbox.sqlite", self.hub, self.writer, owner=owner_name(env), ttl=ttl)
        from collie.crew.redact import enabled as redaction_enabled
        from collie.lead.door.devices import Devices
        from collie.lead.door.tls import ensure_certificate, fingerprint_file, machine_addresses, names_for
        from collie.lead.feed.events import Feed
        from collie.lead.push.pusher import Pusher

        self.devices = Devices(paths.state_dir / "devices.sqlite", again=pair_command(env))
        from collie.lead.feed.needs_file import NAME as SEEN_FILE

        self.feed = Feed(self.bridge, self.hub, self.writer, set_viewing=self._set_viewing,
                         seen_path=paths.state_dir / SEEN_FILE)
        self.feed.follow_inbox(self.inbox)
        self.devices.on_revoke.append(self.feed.revoke_device)
        self.redact_on = redaction_enabled({**env, **os.environ})
        self.pusher = Pusher(self.bridge, self.hub, paths.state_dir / "push", host=socket.gethostname(),
                             redact_on=self.redact_on, loopback_ok=env.get("COLLIE_PUSH_LOOPBACK", "").strip() == "1")
        self.devices.on_revoke.append(self.pusher.store.drop_device)
        from collie.lead.push.turns import TurnPusher

        self.turns = TurnPusher(self.pusher, self.feed)  # issue 37: a push when a turn ends
        self.devices.on_revoke.append(self.turns.drop_device)
        self.certfile, self.keyfile = args.tls_cert, args.tls_key
        self.tls_files = None  # the lead's own authority and the certificate it issued (collie.lead.door.tls)
        host = args.host or "127.0.0.1"
        self.addresses = machine_addresses() if host in ("0.0.0.0", "::", "") else None
        if not self.certfile and (getattr(args, "tls", False) or host not in LOOPBACK):
            names = names_for(host, getattr(args, "name", None) or [], self.addresses)
            self.tls_files = files = ensure_certificate(paths.state_dir, names, log)
            if files.made and not files.said:  # a move to the authority is its one line
                log.info("[bridge] issued the served TLS certificate for %s from the lead's own certificate "
                         "authority (SHA-256 %s): %s", ", ".join(names), files.fingerprint, files.cert)
            self.certfile, self.keyfile = str(files.cert), str(files.key)
        # the fingerprint people compare: the lead's authority, else the user's own certificate
        self.fingerprint = (self.tls_files.fingerprint if self.tls_files
                            else fingerprint_file(self.certfile) if self.certfile else None)
        self.door = None

    async def _set_viewing(self, machine: str, agent: str, on: bool) -> None:
        if machine == "local":
            self.bridge.set_viewing(agent, on)
        else:
            await self.hub.set_viewing(machine, agent, on)

    # --- control ops for `collie pair`, `collie devices` and the doctor ------------------------------
    async def op_pair(self, _req: dict) -> dict:
        if self.door is None:
            raise LookupError("the phone's server is not up yet: try again in a moment")
        code, expires = self.devices.new_code(time.time())
        base = self.door.base_url()
        return {"link": f"{base}/pair#{code}", "expires_at": expires,
                "fingerprint": self.fingerprint, "loopback": self.args.host in LOOPBACK and not getattr(self.args, "public_url", None),
                "trust": f"{base}/trust" if self.tls_files and not getattr(self.args, "public_url", None) else None,
                "addresses": self.door.base_urls()}

    async def op_ping(self, req: dict) -> dict:
        """Besides the bridge's: the lead's public URL and its authority's fingerprint (`collie crew invite`)."""
        return {**await super().op_ping(req), "public_url": getattr(self.args, "public_url", None),
                "bind": self.args.host,
                "authority": self.tls_files.fingerprint if self.tls_files else None}

    async def op_live(self, _req: dict) -> dict:
        """Live channels open, who views which agent (W5: 2 s polling while viewed), phones, push."""
        viewers = {f"local/{name}": st["viewers"] for name, st in self.bridge.statistics().items() if st["viewers"]}
        viewers.update({f"{m}/{a}": n for (m, a), n in self.hub.viewers.items() if n})
        push = {**self.pusher.stats, **self.turns.stats, "subscriptions": len(self.pusher.store.subs)}
        return {**self.feed.statistics(), "viewers": viewers, "devices": len(self.devices.by_hash), "push": push,
                "fingerprint": self.fingerprint, "address": self.address, **self.tls_statistics()}

    def tls_statistics(self) -> dict:
        """What `collie doctor` says of TLS: which certificate is served, who issued it, where to open the lead."""
        from collie.lead.door.tls import describe_served

        urls = self.door.base_urls() if self.door is not None else []
        served = describe_served(self.certfile) if self.certfile else None
        return {"urls": urls, "served": served, "own_authority": self.tls_files is not None,
                "authority_fingerprint": self.tls_files.fingerprint if self.tls_files else None,
                "public_url": getattr(self.args, "public_url", None)}

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

    async def follow_addresses(self, app) -> None:
        """On 0.0.0.0/:: the served certificate names this machine's addresses: when they change (another network,
        a new lease), it is issued anew from the same authority and served from the next connection on."""
        from collie.lead.door.tls import ensure_certificate, names_for

        while True:
            await trio.sleep(ADDRESS_CHECK_SECONDS)
            now = await _addresses_now()
            if sorted(now) == sorted(self.addresses or []):
                continue
            names = names_for(self.args.host, self.args.name or [], now)
            files = await trio.to_thread.run_sync(ensure_certificate, self.paths.state_dir, names, log)
            ctx = app.config.get("COLLIE_SSL_CONTEXT")
            if ctx is not None:
                ctx.load_cert_chain(str(files.cert), str(files.key))
            self.addresses = now
            if self.door is not None:
                self.door.set_addresses(now)
            if files.made:
                log.info("[bridge] this machine's addresses changed: the served TLS certificate now names %s "
                         "(same authority, SHA-256 %s)", ", ".join(names), files.fingerprint)

    def abandon(self) -> None:
        """A start that failed leaves no credential it made behind (issue 10.4)."""
        if self.made_credential:
            (self.paths.state_dir / "api-token").unlink(missing_ok=True)

    def ready_line(self) -> str:
        n = len(self.config.agents)
        if self.tls_files:
            tls = f" (TLS from the lead's own authority, SHA-256 {self.fingerprint}: trust it once at /trust)"
        else:
            tls = f" (TLS, certificate SHA-256 {self.fingerprint})" if self.fingerprint else ""
        shown = " ".join(self.door.base_urls()) if self.door is not None else self.address
        return (f"[bridge] Collie {__version__} ready (pid {os.getpid()}): phone API on {shown}{tls}, "
                f"{n} durable agent{'' if n == 1 else 's'}")

    def make_app(self):
        """The phone's whole HTTP app: the API and its door, pairing, the live channel, push, the web
        app, and the members' link (the tests build it the same way)."""
        from quart import g

        from collie.lead.door.pairing import Door
        from collie.lead.door.trust import install_trust
        from collie.lead.routes.events import install_events
        from collie.lead.routes.pairing import register as install_pairing
        from collie.lead.routes.push import register as install_push
        from collie.lead.routes.turns import register as install_turns
        from collie.lead.web.serve import install_web

        self.door_rules = door = Door(self.args.host or "127.0.0.1", self.args.port or 0, tls=bool(self.certfile),
                                      names=self.args.name or [], public_url=getattr(self.args, "public_url", None),
                                      addresses=self.addresses)
        door.trust_page = self.tls_files is not None
        return create_app(lambda a: (create_api(a, self.bridge, self.writer, self.credential, self.hub,
                                                door=door, devices=self.devices, feed=self.feed,
                                                redact_on=self.redact_on, stops=self.turns, inbox=self.inbox),
                                     install_push(a, self.pusher),
                                     install_turns(a, self.turns),
                                     install_inbox_routes(a, self.hub, self.inbox),
                                     install_pairing(a, door, self.devices),
                                     install_events(a, self.feed,
                                                    owner_check=lambda: getattr(g, "sender", None) == OWNER),
                                     install_web(a, self.bridge, self.hub, needs=self.feed.needs, inbox=self.inbox),
                                     install_trust(a, self.tls_files),
                                     self.hub.install(a, self.shutdown)))

    async def front(self, *, task_status=trio.TASK_STATUS_IGNORED) -> None:
        app = self.make_app()
        door = self.door_rules
        async with trio.open_nursery() as nursery:
            await nursery.start(self.hub.run)
            await nursery.start(self.inbox.run)
            await nursery.start(self.feed.run)
            await nursery.start(self.pusher.run)
            await nursery.start(self.turns.run)

            if self.tls_files is not None and (self.args.host or "") in ("0.0.0.0", "::", ""):
                nursery.start_soon(self.follow_addresses, app)

            async def end_channels():
                await self.shutdown.wait()
                self.feed.shutdown()
            nursery.start_soon(end_channels)
            async with trio.open_nursery() as web:
                try:
                    binds = await web.start(partial(
                        serve_http, app, [bind_text(self.args.host, self.args.port)], self.shutdown,
                        certfile=self.certfile, keyfile=self.keyfile,
                        trusted_proxies=getattr(self.args, "trusted_proxy", None) or ()))
                except BaseException as exc:
                    err = first_of(exc, OSError)
                    if err is None:
                        raise
                    raise listen_error(self.args.host, self.args.port, err) from None
                self.address = binds[0] if binds else ""
                door.port = _port_of(self.address) or door.port
                self.door = door
                if self.address and (self.args.host or "") in ("0.0.0.0", "::", ""):
                    self.address = door.local_urls()[0]  # never 0.0.0.0 or :: where a person reads it
                if self.made_credential:
                    log.info("[bridge] made the local API credential: %s (0600; send it as Authorization: Bearer)",
                             self.paths.state_dir / "api-token")
                task_status.started()
            # the HTTP server returned (it stops by itself once `shutdown` is set): stop the hub too
            nursery.cancel_scope.cancel()


ADDRESS_CHECK_SECONDS = 30.0


async def _addresses_now() -> list[str]:
    from collie.lead.door.tls import machine_addresses

    return await trio.to_thread.run_sync(machine_addresses)


OWNER_MAX = 60  # characters of the owner's display name


def owner_name(env: dict, account=None) -> str:
    """Who approves requests, as `waiting for approval from <owner>` names them (crew.md §4, I7): COLLIE_OWNER
    from the lead's `.env` or environment; else the full name of the account the lead runs as (its passwd
    entry), else its login name — never a bare "the owner", which reads oddly to the owner himself
    (issue 36). `account`: (full name, login) for tests."""
    given = (env.get("COLLIE_OWNER") or "").strip()
    if given and len(given) <= OWNER_MAX and given.isprintable():
        return given
    if account is None:
        try:
            import pwd

            entry = pwd.getpwuid(os.getuid())
            account = (entry.pw_gecos, entry.pw_name)
        except (ImportError, KeyError):
            account = ("", os.environ.get("USER") or os.environ.get("LOGNAME") or "")
    full, login = account
    full = (full or "").split(",")[0].strip()
    for name in (full, (login or "").strip()):
        if name and len(name) <= OWNER_MAX and name.isprintable():
            return name
    return f"the owner of {socket.gethostname()}"


def pair_command(env: dict) -> str:
    """What a refused pairing link tells the phone to run: `collie pair`, or `COLLIE_PAIR_COMMAND` from the
    lead's `.env` or environment (the demo's lead sets `… demo pair`); one printable line, at most 200."""
    given = env.get("COLLIE_PAIR_COMMAND") or ""
    if given and len(given) <= 200 and given.isprintable() and "`" not in given and given.strip() == given:
        return given
    return "collie pair"


def _port_of(address: str) -> int | None:
    tail = address.rsplit(":", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _check(args: argparse.Namespace, paths) -> tuple[int, str] | None:
    """Off loopback the lead serves only TLS: the user's certificate, or one it makes (collie.lead.door.tls)."""
    problem = check_options(args, serve_env(paths))
    if problem:
        return EXIT_USAGE, problem
    return None


def main(argv: list[str]) -> int:
    return run_daemon(LeadDaemon, parser().parse_args(argv), argv, check=_check)
