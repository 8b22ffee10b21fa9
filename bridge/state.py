"""The state folder at start: private folders, 0600 logs, and the one-time log move of A15.

Layout (features S1)::

    <state>/            0700
      bridge.log        0600   the bridge's log (`collie logs`)
      bridge.sock       0600   control socket for the `collie` command
      durable/<name>/   0700   one folder per agent (cache, journal); every log in it 0600

A15: a durable-only instance of an older version kept its logs directly in ``<state>/durable/``;
they move once to ``<state>/durable/default/`` at first start, with one log line.
"""

from __future__ import annotations

import os
import stat

from collie.crew import logs
from collie.crew.fsutil import ensure_private_dir
from collie.crew.paths import Paths

log = logs.get("state")


def prepare_state(paths: Paths) -> None:
    ensure_private_dir(paths.state_dir)
    ensure_private_dir(paths.durable_dir)


def migrate_legacy_logs(paths: Paths) -> list[str]:
    """A15: move loose log files from <state>/durable/ into <state>/durable/default/."""
    durable = paths.durable_dir
    try:
        entries = list(os.scandir(durable))
    except FileNotFoundError:
        return []
    loose = [e for e in entries if e.is_file(follow_symlinks=False) and e.name.endswith(".log")]
    if not loose:
        return []
    target = paths.agent_dir("default")
    ensure_private_dir(target)
    moved = []
    for entry in sorted(loose, key=lambda e: e.name):
        dest = target / entry.name
        if dest.exists():
            dest = target / f"{entry.name}.old"
        os.replace(entry.path, dest)
        os.chmod(dest, 0o600)
        moved.append(entry.name)
    log.info("[bridge] moved %d log file(s) of the durable-only instance from %s to %s: %s",
             len(moved), durable, target, ", ".join(moved))
    return moved


def prepare_agent_dir(paths: Paths, name: str) -> None:
    """S1: <state>/durable/<name>/ is 0700 and every log in it 0600."""
    folder = paths.agent_dir(name)
    ensure_private_dir(folder)
    for entry in os.scandir(folder):
        if entry.name.endswith(".log") and entry.is_file(follow_symlinks=False):
            if stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode) != 0o600:
                os.chmod(entry.path, 0o600)
