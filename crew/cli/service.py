"""`collie service install|uninstall`: run the bridge as a systemd user service (features I11).

Writes ``~/.config/systemd/user/collie.service`` (start at login, restart after a crash, but never
over an exit a restart cannot fix: a wrong command line, a broken config, another bridge already
running), then enables and starts it with `systemctl --user` when systemd is there; otherwise it says
what to run. A user manager starts at boot only for a user with *linger* on: `--linger` turns it on
(`loginctl enable-linger`), and without it the command prints the line to run when it is off.

The unit runs ``python -P -m collie.crew.cli.main serve`` (never from the current folder, issue 9.8) with
the host and port the user runs with: `install`'s own options, else a running lead's address, else
``$COLLIE_HOST`` / ``$COLLIE_PORT``, else the defaults (issue 10.7). A user manager has no
``network-online.target`` (a system target), so the unit orders itself after nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

from collie.crew import control
from collie.crew.cli.serve import add_options, check_options, daemon_command, serve_env
from collie.crew.errors import NO_RESTART, CollieError, UsageError
from collie.crew.fsutil import atomic_write

UNIT = """[Unit]
Description=Collie crew bridge (durable agents for your phone)

[Service]
ExecStart={command}
Restart=on-failure
RestartSec=2
RestartPreventExitStatus={no_restart}
{env}
[Install]
WantedBy=default.target
"""


def register(sub) -> None:
    p = sub.add_parser("service", help="install the bridge as a user service (start at login, restart on crash)")
    verbs = p.add_subparsers(dest="service_verb", metavar="VERB")
    verbs.required = True
    i = verbs.add_parser("install", help="write and start the systemd user unit",
                         description="Write and start the systemd user unit. The unit serves with these options; "
                                     "without them, those of the running lead, else $COLLIE_HOST/$COLLIE_PORT.")
    add_options(i)
    i.add_argument("--linger", action="store_true",
                   help="also start it at boot, before anyone logs in (`loginctl enable-linger` for this user)")
    i.set_defaults(run=install)
    verbs.add_parser("uninstall", help="stop and remove the systemd user unit").set_defaults(run=uninstall)


def unit_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / "collie.service"


def _systemctl(*args: str) -> bool:
    if shutil.which("systemctl") is None:
        return False
    return subprocess.run(["systemctl", "--user", *args], capture_output=True).returncode == 0


def _quote(arg: str, *, command: bool = True) -> str:
    """One word of a unit line (systemd.syntax: C-style double quotes; `%` specifiers; `$` only in commands)."""
    if arg and not any(ch in arg for ch in " \t\"'\\$%;"):
        return arg
    text = arg.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    return '"' + (text.replace("$", "$$") if command else text) + '"'


def _user() -> str:
    import pwd

    return pwd.getpwuid(os.getuid()).pw_name


def linger_state(user: str) -> bool | None:
    """Whether this user's manager starts at boot (None: loginctl is not there to ask)."""
    if shutil.which("loginctl") is None:
        return None
    done = subprocess.run(["loginctl", "show-user", user, "--property=Linger", "--value"],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return False if "not logged in" in done.stderr or "No such" in done.stderr else None
    return done.stdout.strip() == "yes"


def _linger_lines(want: bool) -> list[str]:
    """What to say about starting at boot (a lab machine that reboots must come back without a login)."""
    user = _user()
    fix = f"loginctl enable-linger {user}"
    if want:
        if shutil.which("loginctl") and subprocess.run(["loginctl", "enable-linger", user],
                                                        capture_output=True).returncode == 0:
            return [f"linger is on for {user}: the service starts at boot, before anyone logs in"]
        return [f"could not turn linger on; run as root: {fix} (until then the service starts at login only)"]
    state = linger_state(user)
    if state:
        return [f"linger is on for {user}: the service starts at boot, before anyone logs in"]
    return [f"it starts when {user} logs in; to start it at boot without a login: {fix} "
            "(or `collie service install --linger`)"]


def _running_lead(paths) -> tuple[str, int] | None:
    try:
        pong = control.call(paths.control_socket, "ping", timeout=1)
    except CollieError:
        return None
    if pong.get("role") != "lead" or not pong.get("address"):
        return None
    parts = urlsplit(pong["address"])
    host = pong.get("bind") or parts.hostname  # the address it bound (0.0.0.0 stays 0.0.0.0), not the one shown
    return (host, parts.port) if host and parts.port else None


def serve_options(args, paths) -> list[str]:
    """The options the unit serves with (see the module docstring for the order of sources)."""
    env = serve_env(paths)
    if args.host is None and args.port is None and not env.get("COLLIE_HOST") and not env.get("COLLIE_PORT"):
        running = _running_lead(paths)
        if running:
            args.host, args.port = running
    problem = check_options(args, env)
    if problem:
        raise UsageError(problem)
    options = ["--host", args.host, "--port", str(args.port)]
    if args.tls_cert:
        options += ["--tls-cert", str(Path(args.tls_cert).resolve()), "--tls-key", str(Path(args.tls_key).resolve())]
    if args.public_url:
        options += ["--public-url", args.public_url]
        options += [w for proxy in args.trusted_proxy for w in ("--trusted-proxy", proxy)]
    return options


def install(args, paths) -> int:
    if not sys.platform.startswith("linux"):
        raise CollieError("`collie service install` writes a systemd unit: Linux only; run `collie serve` under "
                          "your own service manager elsewhere")
    member = paths.crew.exists()
    if member:  # a member serves nothing: no host, port or certificate for the unit (`collie crew join`)
        unused = [f"--{o.replace('_', '-')}" for o in ("host", "port", "tls_cert", "tls_key")
                  if getattr(args, o, None) is not None]
        if unused:
            print(f"{' '.join(unused)} unused: this machine is a member of a crew (crew.json) and serves nothing")
        options: list[str] = []
    else:
        options = serve_options(args, paths)
    command = " ".join(_quote(a) for a in daemon_command("collie.crew.cli.main", ["serve", *options]))
    env = "".join(f"Environment={_quote(f'{k}={v}', command=False)}\n" for k, v in (("COLLIE_CONFIG_DIR", str(paths.config_dir)),
                                                                     ("COLLIE_STATE_DIR", str(paths.state_dir))))
    path = unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    unit = UNIT.format(command=command, env=env, no_restart=" ".join(str(code) for code in NO_RESTART))
    atomic_write(path, unit.encode(), mode=0o644)
    print(f"wrote {path} " + ("(a crew member: it links to its lead and serves nothing)" if member
                              else f"(serves on {args.host}:{args.port})"))
    if _systemctl("daemon-reload") and _systemctl("enable", "--now", "collie.service"):
        print("enabled and started collie.service (it restarts after a crash, not after a broken config)")
    else:
        print("systemd's user manager is not reachable here; run: systemctl --user daemon-reload && "
              "systemctl --user enable --now collie.service")
    for line in _linger_lines(args.linger):
        print(line)
    return 0


def uninstall(_args, _paths) -> int:
    path = unit_path()
    _systemctl("disable", "--now", "collie.service")
    if not path.exists():
        raise CollieError(f"no unit at {path}")
    path.unlink()
    _systemctl("daemon-reload")
    print(f"removed {path}")
    return 0
