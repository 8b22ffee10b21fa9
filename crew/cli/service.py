"""`collie service install|uninstall`: run the bridge as a systemd user service (features I11).

Writes ``~/.config/systemd/user/collie.service`` (start at login, restart after a crash), then
enables and starts it with `systemctl --user` when systemd is there; otherwise it says what to run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from crew.errors import CollieError
from crew.fsutil import atomic_write

UNIT = """[Unit]
Description=Collie crew bridge (durable agents for your phone)
After=network-online.target

[Service]
ExecStart={exe} -m crew.cli.main serve
Restart=on-failure
RestartSec=2
{env}
[Install]
WantedBy=default.target
"""


def register(sub) -> None:
    p = sub.add_parser("service", help="install the bridge as a user service (start at login, restart on crash)")
    verbs = p.add_subparsers(dest="service_verb", metavar="VERB")
    verbs.required = True
    verbs.add_parser("install", help="write and start the systemd user unit").set_defaults(run=install)
    verbs.add_parser("uninstall", help="stop and remove the systemd user unit").set_defaults(run=uninstall)


def unit_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user" / "collie.service"


def _systemctl(*args: str) -> bool:
    if shutil.which("systemctl") is None:
        return False
    return subprocess.run(["systemctl", "--user", *args], capture_output=True).returncode == 0


def install(_args, paths) -> int:
    if not sys.platform.startswith("linux"):
        raise CollieError("`collie service install` writes a systemd unit: Linux only; run `collie serve` under "
                          "your own service manager elsewhere")
    env = "".join(f"Environment={k}={v}\n" for k, v in (("COLLIE_CONFIG_DIR", str(paths.config_dir)),
                                                          ("COLLIE_STATE_DIR", str(paths.state_dir))))
    path = unit_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, UNIT.format(exe=sys.executable, env=env).encode(), mode=0o644)
    print(f"wrote {path}")
    if _systemctl("daemon-reload") and _systemctl("enable", "--now", "collie.service"):
        print("enabled and started collie.service (it starts at login and restarts after a crash)")
    else:
        print("systemd's user manager is not reachable here; run: systemctl --user daemon-reload && "
              "systemctl --user enable --now collie.service")
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
