"""`collie restart`: the running bridge re-reads its config (features V1, A3).

The bridge checks the new configuration before it stops (issue 10.2): a broken file is refused in
one line, exit 78, and the running bridge keeps going with what it loaded.
"""

from __future__ import annotations

import time

from collie.crew import control
from collie.crew.errors import CollieError, ConfigError, NotRunningError

WAIT_SECONDS = 15.0
REFUSED = "the bridge refused restart: "


def register(sub) -> None:
    p = sub.add_parser("restart", help="restart the running bridge so it re-reads its config")
    p.set_defaults(run=run)


def restart_bridge(paths) -> int:
    """Ask the bridge to restart and wait until the new one answers; prints one line."""
    before = control.call(paths.control_socket, "ping")
    try:
        control.call(paths.control_socket, "restart")
    except NotRunningError:
        raise
    except CollieError as exc:
        why = str(exc).removeprefix(REFUSED)
        raise ConfigError(f"not restarted: {why}; the running bridge (pid {before['pid']}) keeps its configuration") from None
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline:
        time.sleep(0.1)
        try:
            after = control.call(paths.control_socket, "ping", timeout=1.0)
        except NotRunningError:
            continue
        if after.get("started") != before.get("started"):
            print(f"restarted the bridge (pid {after['pid']})")
            return 0
    raise CollieError(f"the bridge did not come back within {WAIT_SECONDS:g} s; see `collie logs`")


def restart_after_change(args, paths, *, what: str = "the change") -> int:
    """After attach/detach/join/leave: restart when asked and a bridge runs; else say what to run."""
    if not args.restart:
        print(f"run `collie restart` (or add --restart) for the bridge to take {what}")
        return 0
    try:
        control.call(paths.control_socket, "ping", timeout=1.0)
    except NotRunningError:
        print(f"no bridge is running: `collie serve` starts one with {what}")
        return 0
    return restart_bridge(paths)


def run(_args, paths) -> int:
    return restart_bridge(paths)
