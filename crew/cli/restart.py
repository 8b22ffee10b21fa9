"""`collie restart`: the running bridge re-reads its config (features V1, A3)."""

from __future__ import annotations

import time

from crew import control
from crew.errors import CollieError, NotRunningError

WAIT_SECONDS = 15.0


def register(sub) -> None:
    p = sub.add_parser("restart", help="restart the running bridge so it re-reads its config")
    p.set_defaults(run=run)


def restart_bridge(paths) -> int:
    """Ask the bridge to restart and wait until the new one answers; prints one line."""
    before = control.call(paths.control_socket, "ping")
    control.call(paths.control_socket, "restart")
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


def run(_args, paths) -> int:
    return restart_bridge(paths)
