"""`collie serve`: run the bridge in the foreground (the daemon is its own program: `python -m lead`)."""

from __future__ import annotations

import argparse
import os
import sys

from crew.paths import Paths


def register(sub) -> None:
    p = sub.add_parser("serve", help="run this machine's bridge in the foreground",
                       description="Run this machine's bridge in the foreground. Options: --host, --port, "
                                   "--tls-cert, --tls-key (see `python -m lead --help`).")
    p.add_argument("options", nargs=argparse.REMAINDER, help="passed to the daemon")
    p.set_defaults(run=run)


def exec_daemon(options: list[str]) -> int:
    """A machine that joined a crew (crew.json exists) runs as a member; any other leads."""
    module = "member" if Paths.from_env().crew.exists() else "lead"
    os.execv(sys.executable, [sys.executable, "-m", module, *options])
    return 0  # not reached


def run(args, _paths) -> int:
    return exec_daemon(args.options)
